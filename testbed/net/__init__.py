"""Mininet integration: the Clos of testbed/clos.py booted as namespaces, veths and
switch processes, plus the experiment runner around it.

Modules:
  lifecycle     signals, the Ledger-backed teardown, processes inside host namespaces
  links         PortModel (rate, queue depth, delay, jitter, loss: switch-port properties)
                and the Mininet link/interface classes that carry it
  nodes         RdmaHost (a host configured as an RDMA NIC endpoint) and the P4 switch
                node classes: P4Switch -> EngineSwitch, Bmv2Switch
  kernel_router KernelRouter, a Linux-routing stand-in switch (target "kernel")
  fabric        FabricNet: builds, boots, programs and tears down a Clos in Mininet
  options       the topology/target command-line options shared by scripts and `rocelab run`
  fabric_cli    the Mininet CLI extended with fabric commands
  telemetry     counters and queue samples from the switches, summary.json
  plots         PNG plots (matplotlib, Agg)
  experiment    `rocelab run` and the demo
  bench         boot-to-pingall time and RSS per switch
"""
