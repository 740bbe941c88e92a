"""PFC on a booted engine fabric: the 2:1 oversubscribed ring that tail-dropped its lossless queue
(issue #6 notes: ~10% of the priority-3 packets; ~40% with PFC off) keeps it, because PFC frames
leave ahead of the data they pause and every paused upstream gets its XON.

A switch process starved of CPU takes in what arrived meanwhile before it can pause anyone:
that is what the PGs' headroom is sized for (the calculator's response time covers the switches'
measured loop lag), so the lossless class must lose nothing at all (issue 14)."""
import json
import os
import subprocess
import sys

import pytest

from test_net_boot import _engine_available, _our_interfaces
from port_blocks import grpc_base

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths"),
]

PREFIX = f"rf{os.getpid() % 100000}"
GRPC_BASE = grpc_base(slot=2)
ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")


def test_pfc_keeps_the_oversubscribed_ring_lossless(tmp_path):
    missing = _engine_available()
    if missing:
        pytest.skip(missing)
    env = dict(os.environ, ROCELAB_STATE_DIR=str(tmp_path / "state"))
    cmd = [ROCELAB, "run", "--name-prefix", PREFIX, "--grpc-base-port", str(GRPC_BASE), "--no-pcap",
           "--spines", "2", "--leaves", "2", "--hosts-per-leaf", "2", "--oversubscription", "2",
           "--pattern", "ring_allreduce", "--size", "1M", "--hash", "5tuple", "--pfc", "on",
           "--out", str(tmp_path / "out")]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, timeout=240)
    assert done.returncode == 0, done.stdout
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["config"]["fabric"]["effective"]["pfc"]["3"]["xoff"] > 0
    lossless = [q for q in s["queues"] if q["priority"] == 3]
    # congestion happened and PFC acted on it: frames sent, and upstreams held. Which upstreams
    # depends on where the ingress PGs filled: a leaf's host PGs pause the NICs, a spine's
    # PG from a leaf pauses that leaf's queue (on a quiet machine often only the former).
    assert sum(q["pfc_tx"] for q in lossless) > 0, lossless
    held = sum(q["paused_us"] for q in lossless) + sum(h["pfc_rx"] for h in s["hosts"])
    assert held > 0, (lossless, s["hosts"])
    sent = sum(q["tx_packets"] for q in lossless)
    assert sent > 5000, sent                                      # the ring's 1.5 MB per rank went through
    # lossless means lossless: no tail drop, no headroom drop, no watchdog drop on priority 3
    lost = [q for q in lossless if q["drops"] or q["headroom_drops"] or q["watchdog_drops"]]
    assert lost == [], lost
    assert all(h["status"] == "ok" for h in s["hosts"]), s["hosts"]
    assert _our_interfaces(PREFIX) == []
    assert list((tmp_path / "state").glob("*.json")) == []
