"""The fabric controller's counter reads (testbed/control/counters.py): the Read request of a
switch is built once and sent again while it fits; what comes back is read anew every time."""
from p4.v1 import p4runtime_pb2

from testbed.clos import ClosSpec, build
from testbed.control.counters import ReadPlan
from testbed.net.experiment import Experiment, FabricSettings, job_for
from testbed.sim import profile


def test_a_read_plan_is_reused_while_it_fits_and_the_counts_are_fresh(tmp_path):
    clos = build(ClosSpec(spines=1, leaves=2, hosts_per_leaf=1, link_rate_mbps=400_000.0, clock="virtual"))
    job = job_for(clos, "ring_allreduce", [256 << 10], mtu=profile.NIC_MTU)
    with Experiment(clos, out=tmp_path / "run", pcap=False, clock="virtual", log=lambda m: None) as exp:
        ctl = exp.fabric.controller
        before = ctl.read_counters("leaf1")["leaf1"]
        plan = ctl._read_plans["leaf1"]
        exp.run_phase("ring", job, FabricSettings())
        after = ctl.read_counters("leaf1")["leaf1"]
        assert ctl._read_plans["leaf1"] is plan                 # the same request, sent again
        host_port = next(n for n, p in clos.switches["leaf1"].ports.items() if p.peer == "h1")
        rx = lambda c: c["port_totals"][host_port]["rx_packets"]
        assert rx(after) > rx(before) >= 0                      # ... answered with today's counts
        assert after["demands"] and not before["demands"]

        # a pipeline read back (or pushed again) is a new P4Info: the plan is built anew
        conn = ctl._conn("leaf1")
        conn.load_p4info()
        again = ctl.read_counters("leaf1")["leaf1"]
        assert ctl._read_plans["leaf1"] is not plan
        assert again["port_totals"] == after["port_totals"]

        # other routes (other demand cells) do not fit the plan either
        plan = ctl._read_plans["leaf1"]
        routes = ctl.routes["leaf1"].by_route_id()
        assert plan.fits(conn, routes)
        assert not plan.fits(conn, dict(list(routes.items())[1:]))
        request = p4runtime_pb2.ReadRequest.FromString(plan.request)
        assert isinstance(plan, ReadPlan) and len(request.entities) > 8 * len(plan.ports)
