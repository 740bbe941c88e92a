"""Traffic engineering: a Ryu-framework app that places demands with CSPF and installs
exact-match overrides ``<ingress port, destination prefix> -> uplink`` on leaves.

Modules, one concern each:

* :mod:`testbed.te.topology` – ``FabricGraph(clos)``: directed links, capacities, link/switch
  state, the fabric's forwarding model (``path_fractions``, ``next_hops``).
* :mod:`testbed.te.engine` – ``cspf(graph, demands, pinned=()) -> Plan``; the ECMP baseline
  ``ecmp_loads(graph, demands)``; ``max_utilization(graph, loads)``.
* :mod:`testbed.te.collector` – counter samples to rates, demand hints, interface operstate.
* :mod:`testbed.te.programmer` – ``OverrideProgrammer`` (dry-run, FabricController adapter,
  worker-process wrapper); ``make_programmer(kind, clos)``.
* :mod:`testbed.te.worker` – ``ProcessWorker``: every gRPC call runs in a child process
  that never imports eventlet (ryu-manager patches threading in place).
* :mod:`testbed.te.p4rt_probe` – P4Runtime Capabilities of each switch (reachability).
* :mod:`testbed.te.service` – ``TEService``: the state and operations the REST API exposes.
* :mod:`testbed.te.app` – the Ryu app and its REST controller (loaded by ryu-manager).
* :mod:`testbed.te.launcher` – runs ryu-manager on Python 3.11 (``python -m testbed.te.launcher``).
* :mod:`testbed.te.cli` – ``rocelab te run|status|optimize|override|...``.
"""
