"""The TE app against a booted Clos (engine switches in Mininet, the fabric controller):
a REST override moves a flow (the uplinks' tx counters show it), taking a link down
removes the overrides that used it, the next run after the link returns re-places it,
and the collector reads the flow back as <ingress port, destination prefix> bytes."""
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from testbed.cleanup import Ledger
from testbed.clos import ClosSpec, build
from testbed.te.programmer import normalize_counters
from port_blocks import grpc_base

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
PREFIX = f"rlte{os.getpid() % 1000}"  # + device id + "p" + port: at most 11 characters
PACKETS, SIZE, GAP_S = 300, 1000, 0.002  # about 4 Mb/s on 10 Mb/s links


def _missing():
    if os.geteuid() != 0:
        return "needs root (Mininet namespaces and veths)"
    if importlib.util.find_spec("testbed.control") is None:
        return "the fabric controller (testbed.control) is not in this build yet"
    from testbed import control
    if not hasattr(getattr(control, "FabricController", None), "add_te_override"):
        return "testbed.control has no FabricController.add_te_override yet"
    if importlib.util.find_spec("testbed.net.fabric") is None:
        return "the Mininet builder (testbed.net.fabric) is not in this build yet"
    try:
        from testbed import P4_DIR
        from testbed.p4engine import compile_file
        compile_file(str(P4_DIR / "fabric.p4"))
    except Exception as exc:  # the engine or the program is not ready: nothing to boot
        return f"the engine cannot run p4/fabric.p4 yet ({type(exc).__name__}: {str(exc)[:120]})"
    return None


MISSING = _missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING or "")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rest(url, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture(scope="module")
def booted(tmp_path_factory):
    from testbed.net.fabric import FabricNet
    tmp = tmp_path_factory.mktemp("te_booted")
    base = grpc_base(slot=3)
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=10, grpc_base_port=base))
    fabric = tmp / "fabric.json"
    clos.save(fabric)
    ledger = Ledger("te-booted-test", state_dir=tmp)
    with FabricNet(clos, target="engine", out_dir=tmp / "run", pcap=False, name_prefix=PREFIX,
                   state_dir=tmp) as net:
        rest_port = _free_port()
        log = open(tmp / "te.log", "w+")
        proc = subprocess.Popen([ROCELAB, "te", "run", "--fabric", str(fabric), "--programmer", "p4runtime",
                                 "--rest-port", str(rest_port), "--interval", "600",
                                 "--intf-format", PREFIX + "{device_id}p{port}"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        ledger.add("pid", proc.pid)
        url = f"http://127.0.0.1:{rest_port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, "TE app exited:\n" + open(log.name).read()
                try:
                    if _rest(url, "GET", "/te")[0] == 200:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "TE app did not answer:\n" + open(log.name).read()
                time.sleep(0.3)
            yield net, clos, url
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            ledger.release()
            log.close()


def _uplink_tx(net, leaf):
    sample = normalize_counters(net.controller.read_counters(leaf))
    return {port: sample.port_tx_bytes.get((leaf, port), 0) for port in (3, 4)}


def _flow_over_uplinks(net, src, dst_ip, sport, packets=PACKETS):
    """Send one UDP flow (fixed 5-tuple) of `packets` packets from host `src`, paced below
    the 10 Mb/s link rate (a burst would overflow the switch queue), and return the
    bytes each uplink of leaf1 sent meanwhile, once the whole flow has left it."""
    before = _uplink_tx(net, "leaf1")
    code = ("import socket, time; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            f"s.bind(('', {sport})); "
            f"[(s.sendto(bytes({SIZE}), ('{dst_ip}', 4791)), time.sleep({GAP_S})) for _ in range({packets})]")
    net.host(src).cmd(f"{sys.executable} -c \"{code}\"")
    deadline = time.monotonic() + 10
    while True:  # wait for the switch to drain the flow, not for a fixed time
        after = _uplink_tx(net, "leaf1")
        delta = {port: after[port] - before[port] for port in after}
        if sum(delta.values()) >= packets * SIZE or time.monotonic() > deadline:
            return delta
        time.sleep(0.2)


def test_rest_override_moves_a_flow_and_link_down_removes_it(booted):
    net, clos, url = booted
    src = next(h for h in clos.hosts.values() if h.nics[0].leaf == "leaf1" and h.nics[0].leaf_port == 1)
    dst = next(h for h in clos.hosts.values() if h.nics[0].leaf == "leaf2")
    flow_bytes = PACKETS * SIZE

    # 1. without an override, ECMP puts the flow on one uplink
    delta = _flow_over_uplinks(net, src.name, dst.ip, 50001)
    ecmp_port = max(delta, key=delta.get)
    other = 7 - ecmp_port  # uplinks are 3 and 4
    assert delta[ecmp_port] >= flow_bytes and delta[other] < flow_bytes / 10, delta

    # 2. a REST override pins <port 1, leaf2's prefix> to the other uplink: the same flow moves
    status, body = _rest(url, "POST", "/te/overrides", {"leaf": "leaf1", "ingress_port": 1,
                                                         "dst_prefix": "10.1.2.0/24", "egress_port": other})
    assert status == 201, body
    delta = _flow_over_uplinks(net, src.name, dst.ip, 50001)
    assert delta[other] >= flow_bytes and delta[ecmp_port] < flow_bytes / 10, delta

    # 3. the override's uplink goes down: the app sees it and removes the override at once
    leaf1 = clos.switches["leaf1"]
    intf = f"{PREFIX}{leaf1.device_id}p{other}"
    subprocess.run(["ip", "link", "set", intf, "down"], check=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            _, placements = _rest(url, "GET", "/te/placements")
            if not placements["placements"]:
                break
            time.sleep(0.2)
        assert placements["placements"] == [] and placements["suspended_manual"], placements
        # and the switch itself no longer holds it
        held = json.dumps(net.controller.te_overrides(), default=str)
        assert "10.1.2.0/24" not in held, held
        _, status = _rest(url, "GET", "/te")
        assert f"leaf1:{other}" in status["down_ports"]
    finally:
        subprocess.run(["ip", "link", "set", intf, "up"], check=False)

    # 4. the link is back: the next run re-places the manual override, and the flow follows it
    deadline = time.monotonic() + 10
    while _rest(url, "GET", "/te")[1]["down_ports"] and time.monotonic() < deadline:
        time.sleep(0.2)
    status, run = _rest(url, "POST", "/te/optimize")
    assert status == 200 and not run["errors"], run
    assert {"leaf": "leaf1", "ingress_port": 1, "dst_prefix": "10.1.2.0/24", "egress_port": other,
            "origin": "manual"} in run["installed"], run
    delta = _flow_over_uplinks(net, src.name, dst.ip, 50001)
    assert delta[other] >= flow_bytes and delta[ecmp_port] < flow_bytes / 10, delta

    # 5. the collector saw the flows as <ingress port, destination prefix> bytes
    status, run = _rest(url, "POST", "/te/optimize")
    assert status == 200 and not run["errors"], run
    _, demands = _rest(url, "GET", "/te/demands")
    ours = [d for d in demands["demands"] if (d["leaf"], d["ingress_port"], d["dst_prefix"]) == ("leaf1", 1, "10.1.2.0/24")]
    assert ours and ours[0]["rate_mbps"] > 0, demands
    _, util = _rest(url, "GET", "/te/utilization")
    measured = {(l["switch"], l["port"]): l.get("measured_mbps", 0) for l in util["links"]}
    assert measured[("leaf1", other)] > 0 and measured[("leaf1", ecmp_port)] < measured[("leaf1", other)], util


def test_cspf_splits_two_colliding_flows_it_measured(booted):
    """No hints, no manual overrides: two flows that ECMP put on one uplink are seen in
    the demand counters and placed on different uplinks by the next run."""
    net, clos, url = booted
    hosts = {h.nics[0].leaf_port: h for h in clos.hosts.values() if h.nics[0].leaf == "leaf1"}
    dst = next(h for h in clos.hosts.values() if h.nics[0].leaf == "leaf2")
    prefix = clos.switches["leaf2"].subnet
    _rest(url, "DELETE", "/te/overrides", {"leaf": "leaf1", "ingress_port": 1, "dst_prefix": prefix})
    assert _rest(url, "POST", "/te/optimize")[0] == 200  # a counter read: rates start here

    def uplink_of(port, sport, packets):
        delta = _flow_over_uplinks(net, hosts[port].name, dst.ip, sport, packets)
        assert sum(delta.values()) >= packets * SIZE, delta
        return max(delta, key=delta.get)

    first = uplink_of(1, 50001, PACKETS)
    # find a source port for host 2's flow that lands on the same uplink (a collision)
    for sport in range(50100, 50120):
        if uplink_of(2, sport, 20) == first:
            break
    else:
        pytest.fail("no colliding source port in 20 tries (is the fabric hashing at all?)")
    assert uplink_of(2, sport, PACKETS) == first

    status, run = _rest(url, "POST", "/te/optimize")
    assert status == 200 and not run["errors"], run
    placed = {p["ingress_port"]: p for p in _rest(url, "GET", "/te/placements")[1]["placements"]
              if p["leaf"] == "leaf1" and p["dst_prefix"] == prefix}
    assert {placed[1]["origin"], placed[2]["origin"]} == {"cspf"}, placed
    assert placed[1]["rate_mbps"] > 0 and placed[2]["rate_mbps"] > 0, placed
    assert placed[1]["egress_port"] != placed[2]["egress_port"], placed
    # and the switches do it: each flow now leaves by its placement
    assert uplink_of(1, 50001, PACKETS) == placed[1]["egress_port"]
    assert uplink_of(2, sport, PACKETS) == placed[2]["egress_port"]


def test_a_dead_spine_is_detected_and_overrides_through_it_move(booted):
    """Last in this module: it kills one spine. The next run cannot read the spine's
    counters, takes it as down and moves every override off it."""
    net, clos, url = booted
    prefix = clos.switches["leaf2"].subnet
    _rest(url, "POST", "/te/demands", {"leaf": "leaf1", "ingress_port": 1, "dst_prefix": prefix, "rate_mbps": 3})
    _rest(url, "POST", "/te/demands", {"leaf": "leaf1", "ingress_port": 2, "dst_prefix": prefix, "rate_mbps": 3})
    status, run = _rest(url, "POST", "/te/optimize")
    assert status == 200, run
    placed = {p["ingress_port"]: p["egress_port"] for p in _rest(url, "GET", "/te/placements")[1]["placements"]}
    assert sorted(placed.values()) == [3, 4], placed  # one flow per spine
    victim = clos.switches["leaf1"].ports[3].peer  # the spine behind uplink 3
    node = net.switch(victim)
    node.proc.kill()  # our own fabric's switch process, by its handle
    node.proc.wait()

    status, run = _rest(url, "POST", "/te/optimize")
    assert status == 200, run
    _, te = _rest(url, "GET", "/te")
    assert te["unreachable_switches"] == [victim] and victim in te["down_switches"], te
    placed = {p["ingress_port"]: p["egress_port"] for p in _rest(url, "GET", "/te/placements")[1]["placements"]}
    assert placed == {1: 4, 2: 4}, placed
    assert any(e["event"] == "withdrawn" and e["reason"] == f"switch {victim} unreachable" for e in te["events"]), te
