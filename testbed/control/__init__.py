"""The fabric controller: programs p4/fabric.p4 on every switch of a Clos over P4Runtime.

    ctl = FabricController(clos, program="p4/fabric.p4", target="engine",
                           rpc_timeout=5.0, pipeline_timeout=60.0)   # deadlines per call (s)
    ctl.connect()                 # one P4Runtime session per switch (p4runtime-shell's client)
    ctl.push_pipeline()           # P4Info + device config (engine: the P4 source; bmv2: JSON), all at once
    ctl.install_defaults()        # routes, ECMP groups, DSCP map, ECN/PFC thresholds, clone sessions

    ctl.set_hash_mode("qpn")                  # "5tuple" | "qpn" | "flowlet" (qp_aware=...)
    ctl.set_flowlet_gap_us(200); ctl.set_flowlet_choice("least_loaded")
    ctl.set_ecn(kmin=5, kmax=20, pmax=0.2, priority=3); ctl.disable_ecn(3)
    ctl.set_pfc(xoff=16, xon=8, priorities=(3,)); ctl.set_pfc(False)
    ctl.set_dscp_map({26: 3, 48: 6})
    ctl.add_te_override("leaf1", 1, "10.1.2.0/24", egress_port=4)
    ctl.remove_te_override("leaf1", 1, "10.1.2.0/24"); ctl.te_overrides()
    ctl.link_status("leaf1", "spine1", up=False)   # ECMP repair
    ctl.read_counters()           # {switch: counters}, layout in counters.py
    ctl.close()

Every setter takes `switches=` (a name or a list; default all) and writes only what
changes. A switch that does not answer within the deadline raises ControlError("switch X: no
answer within N s ...") instead of holding the controller. Modules, one concern each:

* :mod:`routes` – routes and ECMP groups from the Clos (pure).
* :mod:`knobs` – the runtime knobs, validated, and the table entries that carry them.
* :mod:`plan` – the wanted state of one switch, and the diff against what it holds.
* :mod:`entries` – table entries and clone sessions as plain hashable values.
* :mod:`program_names` – the names and numbers of fabric.p4 the controller relies on.
* :mod:`p4runtime_io` – P4Info lookups, Entry <-> protobuf, one connection per switch.
* :mod:`pipeline_config` – the P4Info and device config to push, per target.
* :mod:`counters` – counter reads as plain dicts.
* :mod:`controller` – :class:`FabricController`, tying them together.
* :mod:`cli`, :mod:`stats_cli` – ``rocelab fabric ...`` and ``rocelab stats ...``.
"""
import importlib

# name -> the module that defines it, imported on first use (PEP 562): every `rocelab` command
# imports this package (its CLI group lives here), and the controller pulls in gRPC and the
# P4Runtime protobufs (~0.15 s), which `rocelab --help` and most commands never use.
_LAZY = {"FabricController": "testbed.control.controller", "Knobs": "testbed.control.knobs",
         "KnobError": "testbed.control.knobs", "ControlError": "testbed.control.p4runtime_io",
         "RoutingError": "testbed.control.routes"}

__all__ = list(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
