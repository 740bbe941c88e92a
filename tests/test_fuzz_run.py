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
            value = rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "1e30", "18446744073709551617", "9" * 5000])
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
    ("POST", "/te/demands", b'{"leaf": "leaf1", "ingress_port": ' + b"9" * 5000 + b', "dst_prefix": "10.1.3.0/24", '
     b'"rate_mbps": 1}', "request body"),
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


# --- frames into a running engine switch (fabric.p4 programmed by the controller) ---------

def _rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _csum16(data):
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data) - 1, 2))
    if len(data) % 2:
        total += data[-1] << 8
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _l3(frame):
    """(ethertype, offset of the L3 header) after any 802.1Q tags."""
    offset, ethertype = 12, int.from_bytes(frame[12:14], "big") if len(frame) >= 14 else None
    while ethertype in (0x8100, 0x88A8) and len(frame) >= offset + 6:
        offset += 4
        ethertype = int.from_bytes(frame[offset:offset + 2], "big")
    return ethertype, offset + 2


def invalid_ipv4(frame):
    """Why an IPv4 frame a switch sent on is not valid IPv4 (None when it is, or not IPv4)."""
    ethertype, off = _l3(frame)
    if ethertype != 0x0800:
        return None
    if len(frame) < off + 20:
        return "IPv4 header cut short"
    head = frame[off:off + 20]
    if head[0] >> 4 != 4:
        return f"IPv4 version {head[0] >> 4}"
    if head[0] & 0x0F != 5:
        return f"IPv4 ihl {head[0] & 0x0F}"
    total = int.from_bytes(head[2:4], "big")
    if total < 20 or off + total > len(frame):
        return f"IPv4 total length {total} in a frame with {len(frame) - off} bytes after L2"
    if _csum16(head) != 0:
        return "IPv4 header checksum wrong"
    if head[8] == 0:
        return "TTL 0"
    return None


def _set_ipv4(frame, off, rng):
    """Change one IPv4 header field to an odd value and fix the checksum, so only it is wrong."""
    data = bytearray(frame)
    if len(data) < off + 20:
        return bytes(data)
    field = rng.choice(["version", "ihl", "total_len", "ttl", "protocol", "frag"])
    if field == "version":
        data[off] = (rng.choice([0, 1, 5, 6, 7, 15]) << 4) | (data[off] & 0x0F)
    elif field == "ihl":
        data[off] = (data[off] & 0xF0) | rng.choice([0, 1, 4, 6, 15])
    elif field == "total_len":
        real = len(data) - off
        value = rng.choice([0, 1, 19, 20, real - 1, real + 1, real + 4, real + 100, 0xFFFF, rng.randrange(65536)])
        data[off + 2:off + 4] = (value & 0xFFFF).to_bytes(2, "big")
    elif field == "ttl":
        data[off + 8] = rng.choice([0, 1, 2, 255])
    elif field == "protocol":
        data[off + 9] = rng.randrange(256)
    else:
        data[off + 6:off + 8] = rng.randrange(65536).to_bytes(2, "big")
    data[off + 10:off + 12] = b"\0\0"
    data[off + 10:off + 12] = _csum16(bytes(data[off:off + 20])).to_bytes(2, "big")
    return bytes(data)


def _base_frames(leaf_mac):
    from scapy.all import ARP, IP, TCP, UDP, Ether, IPv6, Raw
    from scapy.contrib.roce import BTH
    src = "02:99:00:00:00:01"
    roce = lambda dst, **kw: bytes(Ether(src=src, dst=leaf_mac) / IP(src="10.1.1.1", dst=dst, tos=26 << 2 | 2, **kw)
                                    / UDP(sport=49152, dport=4791) / BTH(opcode=0x04, dqpn=0x11, psn=7)
                                    / Raw(bytes(64)))
    local, remote = roce("10.1.1.2"), roce("10.1.2.1")
    return [local, remote, local[:12] + bytes.fromhex("8100a00a") + local[12:],
            bytes(Ether(src=src, dst=leaf_mac) / IP(src="10.1.1.1", dst="10.1.1.2") / TCP(sport=1, dport=2)),
            bytes(Ether(src=src, dst=leaf_mac) / IP(src="10.1.1.1", dst="10.1.1.2") / UDP() / Raw(bytes(900))),
            bytes(Ether(src=src, dst="01:80:c2:00:00:01", type=0x8808)) + bytes.fromhex("0101") + bytes(40),
            bytes(Ether(src=src, dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="10.1.1.1", pdst="10.1.1.2")),
            bytes(Ether(src=src, dst=leaf_mac) / IPv6() / UDP())]


def _fuzz_frame(bases, rng):
    frame = rng.choice(bases)
    pick = rng.random()
    if pick < 0.35:
        _, off = _l3(frame)
        frame = _set_ipv4(frame, off, rng)
    elif pick < 0.65:
        frame = mutate_bytes(frame, rng)
    elif pick < 0.8:
        frame = frame[:rng.randrange(0, len(frame))]
    elif pick < 0.9:
        frame = frame + bytes(rng.randrange(256) for _ in range(rng.randint(1, 600)))
    else:
        frame = bytes(rng.randrange(256) for _ in range(rng.randint(0, 1514)))
    return frame[:1514]


@pytest.fixture(scope="module")
def engine_leaf(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root for namespaces and veths")
    import socket
    from switch_netns import Topology, wait_for_line
    from testbed.clos import CPU_PORT, ClosSpec, build
    from testbed.control import FabricController
    from testbed.switch.ports import enable_vlan_auxdata

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    spec = ClosSpec(spines=4, leaves=2, hosts_per_leaf=2)
    spec.grpc_base_port = free_port() - 5      # leaf1 is device 5
    clos = build(spec)
    leaf = clos.switches["leaf1"]
    tmp = tmp_path_factory.mktemp("fuzz_frames")
    topo = Topology(f"rlfz{os.getpid() % 100000}", 3)
    log = open(tmp / "switch.log", "w+")
    cmd = [ROCELAB, "switch", *[a for i in (1, 2, 3) for a in ("-i", f"{i}@{topo.switch_ifaces[i]}")],
           "--grpc-server-addr", leaf.grpc_addr, "--device-id", str(leaf.device_id), "--cpu-port", str(CPU_PORT),
           "--agent-addr", f"127.0.0.1:{free_port()}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True)
    topo.ledger.add("pid", proc.pid)
    ctl = None
    try:
        wait_for_line(proc, "rocelab switch: ports")
        ctl = FabricController(clos, switches=["leaf1"], target="engine")
        ctl.connect(timeout=10)
        ctl.push_pipeline()
        ctl.install_defaults()
        for host in topo.hosts.values():
            enable_vlan_auxdata(host.sock)
        yield {"topo": topo, "proc": proc, "ctl": ctl, "leaf": leaf, "log": log}
    finally:
        if ctl is not None:
            ctl.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        topo.ledger.discard("pid", proc.pid)
        topo.close()
        log.close()


def _drain(host):
    """Every frame waiting on a host socket, as it was on the wire (tags restored)."""
    import socket
    from testbed.switch.ports import with_vlan_tag
    frames = []
    host.sock.setblocking(False)
    try:
        while True:
            frame, ancillary, _flags, addr = host.sock.recvmsg(65536, socket.CMSG_SPACE(20))
            if addr[2] != socket.PACKET_OUTGOING:
                frames.append(with_vlan_tag(frame, ancillary))
    except BlockingIOError:
        pass
    finally:
        host.sock.setblocking(True)
    return frames


def _probe(rig, tag):
    """A valid frame with a unique payload reaches host 2: the switch still forwards."""
    import time
    from scapy.all import IP, UDP, Ether, Raw
    marker = b"rocelab-fuzz-probe-%08d" % tag
    frame = bytes(Ether(src="02:99:00:00:00:01", dst=rig["leaf"].ports[1].mac) / IP(src="10.1.1.1", dst="10.1.1.2")
                  / UDP(sport=7, dport=9) / Raw(marker))
    rig["topo"].hosts[1].send(frame)
    deadline = time.monotonic() + 3.0
    seen = []
    while time.monotonic() < deadline:
        seen += _drain(rig["topo"].hosts[2])
        if any(marker in f for f in seen):
            return seen, True
        time.sleep(0.01)
    return seen, False


def test_fuzz_frames_into_a_running_engine_switch(engine_leaf):
    import time
    rig = engine_leaf
    rng = make_rng("frames")
    tally = Tally("frames -> engine switch (fabric.p4)")
    bases = _base_frames(rig["leaf"].ports[1].mac)
    hosts = rig["topo"].hosts
    pid = rig["proc"].pid
    forwarded = malformed = refused = 0
    budget = Budget(800, share=0.4)
    rss_warm = rss_peak = None
    warm_at = time.monotonic() + (budget.seconds * 0.2 if budget.long else 0)
    batch = []
    trajectory, next_sample = [], 0.0   # RSS (MB) about every tenth of the run
    for i in budget:
        frame = _fuzz_frame(bases, rng)
        port = rng.choice([1, 1, 1, 2, 3])
        try:
            hosts[port].send(frame)
        except OSError:
            refused += 1          # the host kernel would not send it (too short or too long)
            continue
        tally.tried += 1
        batch.append(frame)
        if len(batch) < 50:
            continue
        batch = []
        time.sleep(0.005)
        seen, alive = _probe(rig, i)
        for host in hosts.values():
            seen += _drain(host)
        for out in seen:
            forwarded += 1
            why = invalid_ipv4(out)
            if why:
                malformed += 1
                tally.crashes.append((out[:64].hex(), f"forwarded as if valid: {why}"))
        if rig["proc"].poll() is not None:
            tally.crashes.append(("", f"switch exited with {rig['proc'].returncode}"))
            break
        if not alive:
            tally.hangs.append((i, "a valid frame was not forwarded after this batch"))
            break
        rss = _rss_bytes(pid)
        if rss_warm is None and time.monotonic() >= warm_at:
            rss_warm = rss
        rss_peak = max(rss_peak or 0, rss)
        if time.monotonic() >= next_sample:
            trajectory.append(rss >> 20)
            next_sample = time.monotonic() + max(budget.seconds / 10, 1.0)
    try:
        rig["ctl"].read_counters("leaf1")  # P4Runtime still answers
    except Exception as exc:
        tally.hangs.append(("", f"P4Runtime read after fuzzing: {type(exc).__name__}: {exc}"[:200]))
    rig["log"].seek(0)
    text = rig["log"].read()
    if "Traceback" in text or "pipeline error" in text:
        tally.tracebacks.append(("", text[-500:]))
    rss_end = _rss_bytes(pid)
    print(f"  forwarded {forwarded} frames ({malformed} malformed), {refused} not sendable by the host kernel; "
          f"switch RSS warm {rss_warm and rss_warm >> 20} MB, peak {rss_peak and rss_peak >> 20} MB, "
          f"end {rss_end >> 20} MB (over the run: {trajectory} MB)")
    tally.report()
    if budget.long:  # memory must stay flat over a long run (a leak grows with the inputs)
        assert abs(rss_end - rss_warm) <= 0.10 * rss_warm, (rss_warm, rss_end)
