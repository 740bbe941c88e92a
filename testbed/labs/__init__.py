"""Guided labs: `rocelab lab NAME` runs the experiments that make one finding of Meta's
SIGCOMM 2024 RoCE paper visible, back to back on one booted fabric, then prints a
comparison table and writes OUT/lab.json and OUT/lab.png (each phase's own
summary.json, plots and pcaps are in OUT/<phase>/).

Modules, one concern each:

* :mod:`testbed.labs.base` – ``Lab`` (what a lab declares), ``Phase``, ``run_lab`` (boot, phases,
  lab.json, plot), the table printer and lab.json schema.
* :mod:`testbed.labs.metrics` – the figures read from phase summaries (uplink load ratio, busbw,
  max link utilisation, queue/PFC figures, OOS) and the ring placements the labs share.
* :mod:`testbed.labs.ecmp` – ECMP's low-entropy collisions (max/mean uplink load).
* :mod:`testbed.labs.qpscaling` – E-ECMP (5-tuple + dest QP) with QP scaling: AllReduce busbw.
* :mod:`testbed.labs.te` – centralized TE: CSPF exact-match overrides vs ECMP.
* :mod:`testbed.labs.incast` – 16:1 incast, PFC only vs receiver-driven CTS admission.
* :mod:`testbed.labs.flowlet` – flowlet switching: OOS packets vs the flowlet gap.
* :mod:`testbed.labs.virtual` – the virtual-time labs: seeds (each a sweep point,
  testbed/sweep/labpoint.py), findings, lab.json, the page; :mod:`testbed.labs.bench` – `rocelab bench labs`.
* :mod:`testbed.labs.cli` – ``rocelab lab list|ecmp|qpscaling|te|incast|flowlet``.

Lab guides for students: topologies/labs/*.md.
"""
