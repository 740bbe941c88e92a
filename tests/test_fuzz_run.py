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
