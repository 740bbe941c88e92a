"""The TE app under Ryu's manager (started through `rocelab te run`, as a subprocess):
its REST API on 127.0.0.1, and a real gRPC call made from it that never runs under
eventlet and never stalls the REST API."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent import futures

import grpc
import pytest
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from testbed.cleanup import Ledger, pid_alive
from testbed.clos import ClosSpec, build

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
L3 = "10.1.3.0/24"
START_TIMEOUT_S = 30


class SlowCapabilities(p4runtime_pb2_grpc.P4RuntimeServicer):
    """A P4Runtime server that only answers Capabilities, after `delay` seconds."""

    def __init__(self):
        self.delay = 0.0
        self.calls = []
        self.answered = 0  # Capabilities calls whose answer has been sent

    def Capabilities(self, request, context):
        self.calls.append(time.monotonic())
        time.sleep(self.delay)
        self.answered += 1
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version="1.4.1-te-test")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


class App:
    def __init__(self, url, proc, servicer, log):
        self.url, self.proc, self.servicer, self.log = url, proc, servicer, log

    def request(self, method, path, body=None, timeout=20):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            text = exc.read()
            try:
                return exc.code, json.loads(text)
            except ValueError:
                return exc.code, {"raw": text.decode(errors="replace")}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("te_app")
    servicer = SlowCapabilities()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(servicer, server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    # leaf1 is device 3 in a 2-spine fabric: its P4Runtime address is base + 3 = our server
    clos = build(ClosSpec(spines=2, leaves=4, hosts_per_leaf=2, grpc_base_port=grpc_port - 3))
    assert clos.switches["leaf1"].grpc_port == grpc_port
    fabric = tmp / "fabric.json"
    clos.save(fabric)
    rest_port = _free_port()
    log = open(tmp / "te.log", "w+")
    ledger = Ledger("te-app-test", state_dir=tmp)
    proc = subprocess.Popen([ROCELAB, "te", "run", "--fabric", str(fabric), "--programmer", "dry-run",
                             "--rest-port", str(rest_port), "--interval", "60", "--no-watch-links"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    ledger.add("pid", proc.pid)
    handle = App(f"http://127.0.0.1:{rest_port}", proc, servicer, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert proc.poll() is None, "the app exited at start:\n" + open(log.name).read()
            try:
                if handle.request("GET", "/te", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "no REST answer in time:\n" + open(log.name).read()
            time.sleep(0.2)
        yield handle
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        ledger.release()
        server.stop(0)
        log.close()


def test_rest_listens_on_loopback_only(app):
    conns = open("/proc/net/tcp").read().splitlines()[1:]
    port_hex = "%04X" % int(app.url.rsplit(":", 1)[1])
    listening = [c.split()[1] for c in conns if c.split()[1].endswith(":" + port_hex) and c.split()[3] == "0A"]
    assert listening == ["0100007F:" + port_hex]


def test_topology_and_status(app):
    status, topo = app.request("GET", "/te/topology")
    assert status == 200
    assert {s["name"] for s in topo["switches"]} == {"spine1", "spine2", "leaf1", "leaf2", "leaf3", "leaf4"}
    fabric_links = [l for l in topo["links"] if l["kind"] == "fabric"]
    assert len(fabric_links) == 8 and all(l["up"] for l in fabric_links)
    status, body = app.request("GET", "/te")
    assert status == 200 and body["interval_s"] == 60


def test_demands_optimize_placements_and_utilization(app):
    for port in (1, 2):
        status, _ = app.request("POST", "/te/demands", {"leaf": "leaf1", "ingress_port": port,
                                                          "dst_prefix": L3, "rate_mbps": 7})
        assert status == 201
    status, run = app.request("POST", "/te/optimize")
    assert status == 200 and run["reason"] == "REST"
    assert sorted(i["egress_port"] for i in run["installed"]) == [3, 4]
    _, placements = app.request("GET", "/te/placements")
    assert {p["via"] for p in placements["placements"]} == {"spine1", "spine2"}
    _, util = app.request("GET", "/te/utilization")
    planned = {(l["switch"], l["port"]): l.get("planned_utilization") for l in util["links"]}
    assert planned[("leaf1", 3)] == pytest.approx(0.7) and planned[("leaf1", 4)] == pytest.approx(0.7)
    assert util["max_planned_utilization"] == pytest.approx(0.7)
    # a link event over REST removes the override through it at once
    status, event = app.request("POST", "/te/links/spine1/3/down")
    assert status == 200 and [w["egress_port"] for w in event["withdrawn"]] == [3]
    _, placements = app.request("GET", "/te/placements")
    assert [p["egress_port"] for p in placements["placements"]] == [4]
    app.request("POST", "/te/links/spine1/3/up")
    for port in (1, 2):
        status, _ = app.request("DELETE", "/te/demands", {"leaf": "leaf1", "ingress_port": port, "dst_prefix": L3})
        assert status == 200


def test_manual_override_add_and_remove(app):
    key = {"leaf": "leaf2", "ingress_port": 2, "dst_prefix": "10.1.4.0/24"}
    status, body = app.request("POST", "/te/overrides", dict(key, egress_port=4))
    assert status == 201 and body["egress_port"] == 4
    _, placements = app.request("GET", "/te/overrides")
    assert [(p["leaf"], p["origin"], p["via"]) for p in placements["placements"]
            if p["leaf"] == "leaf2"] == [("leaf2", "manual", "spine2")]
    status, body = app.request("DELETE", "/te/overrides", key)
    assert status == 200 and body["was_manual"]
    status, body = app.request("DELETE", "/te/overrides", key)
    assert status == 400 and "no override" in body["error"]


@pytest.mark.parametrize("method, path, body, status, message", [
    ("POST", "/te/overrides", {"leaf": "leaf1"}, 400, "missing field(s): ingress_port"),
    ("POST", "/te/overrides", {"leaf": "spine1", "ingress_port": 1, "dst_prefix": L3, "egress_port": 3},
     400, "not a leaf"),
    ("POST", "/te/overrides", {"leaf": "leaf1", "ingress_port": 1, "dst_prefix": L3, "egress_port": 3,
                               "color": "red"}, 400, "unknown field(s): color"),
    ("POST", "/te/links/leaf1/99/down", None, 400, "has no port 99"),
    ("PUT", "/te/interval", {"interval_s": 0}, 400, "out of range"),
    ("GET", "/te/nothing-here", None, 404, None),
])
def test_bad_requests_get_clear_errors(app, method, path, body, status, message):
    got, answer = app.request(method, path, body)
    assert got == status
    if message:
        assert message in answer["error"]
    assert "Traceback" not in json.dumps(answer)


def test_interval_can_be_read_and_set(app):
    assert app.request("PUT", "/te/interval", {"interval_s": 30}) == (200, {"interval_s": 30.0})
    assert app.request("GET", "/te/interval") == (200, {"interval_s": 30.0})
    app.request("PUT", "/te/interval", {"interval_s": 60})


def test_the_app_reoptimizes_on_its_interval(app):
    _, before = app.request("GET", "/te")
    assert app.request("PUT", "/te/interval", {"interval_s": 0.3})[0] == 200
    try:
        deadline = time.monotonic() + 10
        runs = before["runs"]
        while runs < before["runs"] + 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            runs = app.request("GET", "/te")[1]["runs"]
        assert runs >= before["runs"] + 2
        _, status = app.request("GET", "/te")
        assert status["last_run"]["reason"] == "interval"
    finally:
        app.request("PUT", "/te/interval", {"interval_s": 60})


def test_p4runtime_call_runs_in_the_worker_and_the_rest_api_stays_responsive(app):
    """A real gRPC call from the app under ryu-manager: made by the worker process (no
    eventlet loaded there), while the app's green threads keep answering REST."""
    app.servicer.delay = 1.5
    calls_before = len(app.servicer.calls)
    result = {}

    def slow_probe():
        result["answer"] = app.request("GET", "/te/switches?switch=leaf1&timeout=5")

    probe = threading.Thread(target=slow_probe)
    probe.start()
    try:
        deadline = time.monotonic() + 5
        while len(app.servicer.calls) == calls_before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(app.servicer.calls) == calls_before + 1, "the gRPC call never reached the server"
        answered_before = app.servicer.answered
        # the Capabilities call is now in flight for 1.5 s: REST must answer meanwhile,
        # i.e. before the server has even sent the gRPC answer (ordering, not timing)
        status, _ = app.request("GET", "/te/interval")
        assert status == 200
        assert app.servicer.answered == answered_before, "REST waited for the gRPC call"
        assert probe.is_alive()
    finally:
        probe.join(15)
        app.servicer.delay = 0.0
    status, answer = result["answer"]
    assert status == 200
    leaf1 = answer["leaf1"]
    assert leaf1["reachable"] is True and leaf1["p4runtime_api_version"] == "1.4.1-te-test"
    assert leaf1["eventlet_loaded"] is False
    assert leaf1["pid"] != app.proc.pid and leaf1["pid"] in _children(app.proc.pid)
    assert leaf1["rtt_ms"] >= 1400


def test_cli_client_talks_to_the_app(app):
    res = subprocess.run([ROCELAB, "te", "placements", "--url", app.url], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and "placements" in json.loads(res.stdout)
    res = subprocess.run([ROCELAB, "te", "override", "add", "leaf7", "1", L3, "3", "--url", app.url],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and "no switch named 'leaf7'" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("method, path, raw, field", [
    ("POST", "/te/overrides", b'{"leaf": ["leaf1"], "ingress_port": 1, "dst_prefix": "10.1.3.0/24", "egress_port": 3}',
     "leaf"),
    ("POST", "/te/overrides", b'{"leaf": "leaf1", "ingress_port": 1e400, "dst_prefix": "10.1.3.0/24", "egress_port": 3}',
     "ingress_port"),
    ("POST", "/te/demands", b'{"leaf": "leaf1", "ingress_port": 1, "dst_prefix": "10.1.3.0/24", "rate_mbps": NaN}',
     "NaN"),
    ("GET", "/te/switches?timeout=abc", None, "timeout"),
    ("POST", "/te/overrides", b"[" * 50000 + b"]" * 50000, "request body"),
])
def test_wrong_types_through_ryu_are_400_with_json_errors(app, method, path, raw, field):
    req = urllib.request.Request(app.url + path, data=raw, method=method, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=20)
    text = refused.value.read()
    assert refused.value.code == 400, text
    assert field in json.loads(text)["error"] and b"Traceback" not in text


def test_sigterm_stops_the_app_and_its_worker(app):
    # last in this module: the fixture's teardown finds the app already gone
    workers = _children(app.proc.pid)
    assert workers, "the app has no worker process"
    app.proc.send_signal(signal.SIGTERM)
    app.proc.wait(timeout=15)
    deadline = time.monotonic() + 10
    while any(pid_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(pid_alive(w) for w in workers)


def test_run_reports_a_busy_rest_port_without_a_traceback(tmp_path):
    fabric = tmp_path / "fabric.json"
    build(ClosSpec()).save(fabric)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        res = subprocess.run([ROCELAB, "te", "run", "--fabric", str(fabric), "--programmer", "dry-run",
                              "--no-watch-links", "--rest-port", str(busy.getsockname()[1])],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Address already in use" in res.stderr and "Traceback" not in res.stderr


def test_run_rejects_a_bad_fabric_without_a_traceback(tmp_path):
    bad = tmp_path / "fabric.json"
    bad.write_text("{not json")
    for path in (bad, tmp_path / "missing.json"):
        res = subprocess.run([ROCELAB, "te", "run", "--fabric", str(path), "--programmer", "dry-run"],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 2 and "--fabric" in res.stderr and "Traceback" not in res.stderr



def test_run_starts_without_eventlet_warning_of_locks_not_greened(tmp_path):
    # `rocelab te run` began with eventlet's "5 RLock(s) were not greened, to fix this error
    # make sure you run eventlet.monkey_patch() before importing any other modules."
    fabric = tmp_path / "fabric.json"
    build(ClosSpec()).save(fabric)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}   # eventlet is quiet under pytest
    with socket.socket() as busy:          # the app gets as far as serving REST, then stops
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        res = subprocess.run([ROCELAB, "te", "run", "--fabric", str(fabric), "--programmer", "dry-run",
                              "--no-watch-links", "--rest-port", str(busy.getsockname()[1])],
                             capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 2 and "Address already in use" in res.stderr
    assert "instantiating app testbed.te.app" in res.stderr and "greened" not in res.stderr, res.stderr
