"""Fuzzing the run-side boundaries: job JSON into `rocelab traffic check`, REST bodies into
the TE service, frames into a running engine switch. Bounded and seeded in `make test`;
`make fuzz` runs them long (ROCELAB_FUZZ_SECONDS). Each prints its figure (inputs tried,
crashes, hangs, tracebacks) and asserts all three are 0.
"""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys

import pytest

from fuzz_helpers import Budget, Tally, deep_json_text, make_rng, mutate_bytes, mutate_tree, odd_value

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
HANG_SECONDS = 10  # one input taking this long is a hang (real answers take milliseconds)

VALID_JOB = {
    "name": "fuzz", "pattern": "ring_allreduce", "sizes": [65536, 1048576], "iterations": 2, "warmup": 1,
    "channels": 2, "qps_per_connection": 2, "chunk_bytes": 65536,
    "cts": {"enabled": True, "buffer_bytes": 262144, "refresh_s": 0.02},
    "dcqcn": {"enabled": True, "g": 0.0039},
    "classes": {"data": {"dscp": 26, "priority": 3, "ecn": "ect0"}},
    "nic": {"line_rate_mbps": 10, "mtu": 1024, "ack_every": 16},
    "timeout_s": 60,
    "ranks": [{"host": f"h{i}", "ip": f"10.0.{i}.1", "mac": f"02:00:00:00:00:0{i}", "iface": f"h{i}-eth0"}
              for i in range(1, 5)],
}


class Hang(Exception):
    pass


@contextlib.contextmanager
def hang_guard(seconds=HANG_SECONDS):
    def alarm(*_):
        raise Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _traffic_check(path):
    """`rocelab traffic check --job path` in this process: (exit status, stderr text)."""
    from testbed.cli import main
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            status = main(["traffic", "check", "--job", str(path)])
        except SystemExit as exc:
            status = exc.code
    return status, err.getvalue()


def _job_inputs(rng):
    """Job file contents: mutated trees, mutated bytes, binary, deep and non-JSON numbers."""
    base = json.dumps(VALID_JOB).encode()
    while True:
        pick = rng.random()
        if pick < 0.55:
            tree = VALID_JOB
            for _ in range(rng.randint(1, 3)):
                tree = mutate_tree(tree, rng)
            try:
                yield json.dumps(tree).encode()
            except (ValueError, RecursionError):
                yield repr(tree).encode()[:100000]
        elif pick < 0.85:
            yield mutate_bytes(base, rng)
        elif pick < 0.9:
            yield bytes(rng.randrange(256) for _ in range(rng.randint(0, 2000)))
        elif pick < 0.95:
            inner = deep_json_text(rng.choice([40, 1000, 100000]), rng.choice([list, dict]))
            key = rng.choice(["sizes", "nic", "ranks", "name", "classes"])
            yield base.replace(f'"{key}": '.encode(), f'"{key}": {inner}, "x{key}": '.encode(), 1)
        else:
            value = rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "1e30", "18446744073709551617"])
            key = rng.choice(["timeout_s", "iterations", "chunk_bytes", "line_rate_mbps", "refresh_s", "g"])
            yield base.replace(f'"{key}": '.encode(), f'"{key}": {value}, "x{key}": '.encode(), 1) \
                if rng.random() < 0.3 else json.dumps(VALID_JOB).replace(
                    f'"{key}": ', f'"{key}": {value}, "_": ', 1).encode()


def test_valid_job_passes_check(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(VALID_JOB))
    assert _traffic_check(path) == (0, "")


def test_fuzz_job_json_into_traffic_check(tmp_path):
    rng = make_rng("job")
    tally = Tally("job JSON -> rocelab traffic check")
    path = tmp_path / "job.json"
    inputs = _job_inputs(rng)
    for _ in Budget(400, share=0.3):
        data = next(inputs)
        path.write_bytes(data)
        tally.tried += 1
        try:
            with hang_guard():
                status, err = _traffic_check(path)
        except Hang:
            tally.hangs.append((data[:200], "no answer"))
            continue
        except Exception as exc:  # anything escaping main() is a traceback for the user
            tally.tracebacks.append((data[:200], f"{type(exc).__name__}: {exc}"[:300]))
            continue
        lines = err.strip().splitlines()
        if status not in (0, 2) or (status == 2 and len(lines) != 1) or "Traceback" in err:
            tally.crashes.append((data[:200], f"status {status}: {err[:300]}"))
    tally.report()


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\xff\xfe", deep_json_text(200000).encode(),
                                     b'{"pattern": "ring_allreduce", "timeout_s": NaN}'])
def test_traffic_check_as_a_process_answers_bad_files_in_one_line(tmp_path, content):
    path = tmp_path / "job.json"
    path.write_bytes(content)
    proc = subprocess.run([ROCELAB, "traffic", "check", "--job", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in proc.stderr


# --- REST bodies into the TE service (Ryu's WSGI app, in this process) --------------------

TE_ROUTES = [("GET", "/te"), ("GET", "/te/topology"), ("GET", "/te/placements"), ("GET", "/te/utilization"),
             ("GET", "/te/demands"), ("GET", "/te/interval"), ("POST", "/te/optimize"),
             ("POST", "/te/overrides"), ("DELETE", "/te/overrides"), ("POST", "/te/demands"),
             ("DELETE", "/te/demands"), ("PUT", "/te/interval"), ("POST", "/te/links/{switch}/{port}/{state}"),
             ("POST", "/te/switches/{switch}/{state}"), ("GET", "/te/switches")]
VALID_BODIES = {
    "/te/overrides": {"leaf": "leaf1", "ingress_port": 1, "dst_prefix": "10.1.3.0/24", "egress_port": 3},
    "/te/demands": {"leaf": "leaf1", "ingress_port": 2, "dst_prefix": "10.1.4.0/24", "rate_mbps": 4.5, "ttl_s": 30},
    "/te/interval": {"interval_s": 2.5},
}


def _strict_json(text):
    def refuse(name):
        raise ValueError(f"{name} in a response")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def te_wsgi():
    from testbed.te.launcher import patch_eventlet_for_ryu
    patch_eventlet_for_ryu()
    from ryu.app.wsgi import WSGIApplication
    from testbed.clos import ClosSpec, build
    from testbed.te.app import SERVICE_KEY, TERestController
    from testbed.te.programmer import DryRunProgrammer
    from testbed.te.service import TEService

    service = TEService(build(ClosSpec(spines=2, leaves=4, hosts_per_leaf=2)), DryRunProgrammer(),
                        watch_operstate=False)
    app = WSGIApplication()
    app.register(TERestController, {SERVICE_KEY: service})
    return app


def _te_call(app, method, path, body=b""):
    from webob import Request
    req = Request.blank(path, method=method, body=body)
    if body:
        req.content_type = "application/json"
    resp = req.get_response(app)
    return resp.status_int, resp.body


def _te_requests(rng):
    from urllib.parse import quote
    while True:
        method, path = rng.choice(TE_ROUTES)
        if "{" in path:
            values = {"switch": rng.choice(["leaf1", "spine2", "nope", "a" * 300, "%00", "leaf1;x"]),
                      "port": rng.choice(["3", "1e400", "-1", "99999999999999999999", "3.0", "abc", "0x3"]),
                      "state": rng.choice(["up", "down", "sideways"])}
            path = path.format(**{k: quote(v, safe="") for k, v in values.items()})
        base = VALID_BODIES.get(path.split("?")[0])
        pick = rng.random()
        if base is None or pick < 0.1:
            body = rng.choice([b"", b"{}", b"[]", b"null", b"\xff\xfe", deep_json_text(5000).encode()])
        elif pick < 0.6:
            tree = base
            for _ in range(rng.randint(1, 2)):
                tree = mutate_tree(tree, rng)
            body = json.dumps(tree).encode()
        elif pick < 0.9:
            body = mutate_bytes(json.dumps(base).encode(), rng)
        else:
            body = json.dumps(dict(base, leaf="x" * rng.choice([100, 100_000]))).encode()
        if rng.random() < 0.15:
            query = rng.choice(["timeout=abc", "timeout=1e400", "timeout=nan", "timeout=-1", "switch=leaf1",
                                "switch=" + "x" * 500, "leaf=leaf1&ingress_port=1.5", "ingress_port=true"])
            path += "?" + query
        yield method, path, body


def test_fuzz_rest_bodies_into_the_te_service(te_wsgi):
    rng = make_rng("te-rest")
    tally = Tally("REST bodies -> TE service")
    requests = _te_requests(rng)
    statuses = {}
    for _ in Budget(2000, share=0.3):
        method, path, body = next(requests)
        tally.tried += 1
        what = (method, path[:80], body[:120])
        try:
            with hang_guard():
                status, answer = _te_call(te_wsgi, method, path, body)
        except Hang:
            tally.hangs.append((what, "no answer"))
            continue
        except Exception as exc:
            tally.tracebacks.append((what, f"{type(exc).__name__}: {exc}"[:300]))
            continue
        statuses[status] = statuses.get(status, 0) + 1
        if b"Traceback" in answer or b'File "' in answer:
            tally.tracebacks.append((what, answer[:300]))
        elif status >= 500:
            tally.crashes.append((what, f"HTTP {status}: {answer[:300]}"))
        elif status != 404 or answer.startswith(b"{"):
            try:
                data = _strict_json(answer)
            except ValueError as exc:
                tally.crashes.append((what, f"HTTP {status}, invalid JSON ({exc}): {answer[:200]}"))
                continue
            if status >= 400 and (set(data) != {"error"} or len(answer) > 2000):
                tally.crashes.append((what, f"HTTP {status}, error not short JSON: {answer[:200]}"))
    print(f"  HTTP statuses: {dict(sorted(statuses.items()))}")
    assert statuses.get(200, 0) + statuses.get(201, 0) > 0  # the fuzzer also reached the service
    tally.report()


@pytest.mark.parametrize("method, path, body, field", [
    ("POST", "/te/overrides", b'{"leaf": ["leaf1"], "ingress_port": 1, "dst_prefix": "10.1.3.0/24", "egress_port": 3}',
     "leaf"),
    ("POST", "/te/overrides", b'{"leaf": "leaf1", "ingress_port": 1e400, "dst_prefix": "10.1.3.0/24", "egress_port": 3}',
     "ingress_port"),
    ("POST", "/te/overrides", b'{"leaf": "leaf1", "ingress_port": 1, "dst_prefix": "10.1.3.0/24", "egress_port": 3.9}',
     "egress_port"),
    ("POST", "/te/overrides", b'{"leaf": "leaf1", "ingress_port": true, "dst_prefix": "10.1.3.0/24", "egress_port": 3}',
     "ingress_port"),
    ("POST", "/te/demands", b'{"leaf": "leaf1", "ingress_port": 1, "dst_prefix": "10.1.3.0/24", "rate_mbps": NaN}',
     "NaN"),
    ("POST", "/te/demands", b'{"leaf": "leaf1", "ingress_port": 1, "dst_prefix": "10.1.3.0/24", "rate_mbps": 1e999}',
     "rate_mbps"),
    ("PUT", "/te/interval", b'{"interval_s": Infinity}', "Infinity"),
    ("GET", "/te/switches?timeout=abc", b"", "timeout"),
    ("POST", "/te/overrides", deep_json_text(100000).encode(), "request body"),
    ("POST", "/te/links/leaf1/1e400/down", b"", "port"),
])
def test_te_rest_wrong_types_are_400_with_a_json_error(te_wsgi, method, path, body, field):
    status, answer = _te_call(te_wsgi, method, path, body)
    assert status == 400, answer
    error = _strict_json(answer)["error"]
    assert field in error and len(answer) < 500


def test_te_rest_does_not_echo_a_huge_name(te_wsgi):
    body = json.dumps({"leaf": "x" * (20 << 20), "ingress_port": 1, "dst_prefix": "10.1.3.0/24",
                       "egress_port": 3}).encode()
    status, answer = _te_call(te_wsgi, "POST", "/te/overrides", body)
    assert status == 400 and len(answer) < 500
    name = json.dumps({"switch": "y" * 10_000})
    status, answer = _te_call(te_wsgi, "POST", "/te/switches/" + "y" * 10_000 + "/down")
    assert status == 400 and len(answer) < 500 and name
