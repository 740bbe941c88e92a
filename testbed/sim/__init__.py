"""Virtual time: the same fabric (engine pipelines, traffic managers, PFC MACs, emulated NICs,
rank runners, fabric controller) on a discrete-event clock in one process.

Only two seams differ from real time: the clock every model reads (the scheduler's) and the
port it sends on (a :class:`~testbed.sim.wire.Wire` with serialization and propagation delay
instead of a raw socket). Units are production ones; a run is a function of its arguments and
seed, needs no root, and never imports Mininet.
"""
