"""The same 2x2x2 ring in real time (Mininet, 10 Mb/s) and virtual time (400G): QPN hashing with
QP scaling lowers the uplinks' max/mean load on both clocks."""
import os

import pytest

from test_net_boot import _engine_available, _our_interfaces
from testbed.clos import ClosSpec, build
from testbed.net.experiment import Experiment, FabricSettings, job_for
from port_blocks import grpc_base

PREFIX = f"sv{os.getpid() % 100000}"
GRPC_BASE = grpc_base(slot=4)


def uplink_max_mean(summary):
    loads = [l["tx_bytes"] for l in summary["links"] if l["from"].startswith("leaf") and l["to"].startswith("spine")]
    return max(loads) / (sum(loads) / len(loads))


def both_phases(tmp_path, clock, rate, size, mtu):
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=rate, grpc_base_port=GRPC_BASE,
                          clock=clock))
    phases = [("5tuple", FabricSettings(hash="5tuple"), job_for(clos, "ring_allreduce", [size], mtu=mtu)),
              ("qpn", FabricSettings(hash="qpn"), job_for(clos, "ring_allreduce", [size], mtu=mtu,
                                                          qps_per_connection=8))]
    options = dict(name_prefix=PREFIX) if clock == "real" else {}
    out = tmp_path / clock
    with Experiment(clos, out=out, pcap=False, clock=clock, log=lambda m: None, **options) as exp:
        results = {name: exp.run_phase(name, job, settings, out / name) for name, settings, job in phases}
    for r in results.values():
        assert r["collective"]["status"] == "ok", r["errors"]
    return uplink_max_mean(results["5tuple"]), uplink_max_mean(results["qpn"])


def test_qpn_scaling_lowers_uplink_max_mean_in_virtual_time(tmp_path):
    five, qpn = both_phases(tmp_path, "virtual", 400_000.0, 4 << 20, 4096)
    assert qpn < five, (five, qpn)


@pytest.mark.mininet
@pytest.mark.skipif(os.geteuid() != 0, reason="real time needs root for namespaces and veths")
def test_qpn_scaling_lowers_uplink_max_mean_in_real_time_too(tmp_path):
    missing = _engine_available()
    if missing:
        pytest.skip(f"the engine switch is not available: {missing}")
    real = both_phases(tmp_path, "real", 10.0, 256 << 10, 1024)
    virtual = both_phases(tmp_path, "virtual", 400_000.0, 4 << 20, 4096)
    assert real[1] < real[0] and virtual[1] < virtual[0], {"real": real, "virtual": virtual}
    assert _our_interfaces(PREFIX) == []
