"""Switch targets: the engine as a software switch (ports, traffic manager, PFC MAC,
pcaps, P4Runtime) and a BMv2 adapter behind the same Python interface.

Modules: datapath (Switch event loop), traffic_manager (buffer accounting, queues,
shaping, pause, PFC watchdog), buffers (sizes, PG profiles, headroom calculator),
looplag (how late the real-time loop runs),
pfc (802.1Qbb frames), ports (AF_PACKET), pcap, agent (runtime port/queue/PFC
settings and state), bmv2 (simple_switch_grpc target), targets (start either
target as a process), cli (`rocelab switch`), bench (`rocelab bench switch`).
"""
