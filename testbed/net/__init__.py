"""Mininet integration: the Clos of testbed/clos.py booted as namespaces, veths and
switch processes, plus the experiment runner around it.

Modules:
  lifecycle     signals, the Ledger-backed teardown, processes inside host namespaces
  links         PortModel (rate, queue depth, delay, jitter, loss: switch-port properties)
                and the Mininet link/interface classes that carry it
  agents        a switch node's agent (engine over TCP, BMv2 over Thrift) and PortModels to it
  nodes         RdmaHost (a host configured as an RDMA NIC endpoint) and the P4 switch
                node classes: P4Switch -> EngineSwitch, Bmv2Switch
  kernel_router KernelRouter, a Linux-routing stand-in switch (target "kernel")
  fabric        FabricNet: builds, boots, programs and tears down a Clos in Mininet
  options       the topology/target command-line options shared by scripts and `rocelab run`
  shell         what the topology scripts in topologies/ run
  fabric_cli    the Mininet CLI extended with fabric commands
  telemetry     agent, P4 and NIC counters and queue samples from a running fabric
  summary       summary.json: its documented schema and how it is built
  plots         PNG plots (matplotlib, Agg)
  experiment    experiments and phases, the ranks in the hosts, the demo (`make demo`)
  cli           `rocelab run`
  bench         `rocelab bench boot`: boot-to-pingall time and RSS per switch
"""
