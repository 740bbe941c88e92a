"""The rank runner's QP scaling and the `rocelab traffic` command line (no sockets, no root)."""
import json
import os
import subprocess
import sys

import pytest

from traffic.job import parse_job
from traffic.nic import Nic
from traffic.runner import RankRunner

ROCELAB = [sys.executable, "-m", "testbed.cli"]


def ranks(n):
    return [{"host": f"h{i}", "ip": f"10.0.0.{i + 1}", "mac": f"02:00:00:00:00:{i + 1:02x}", "iface": f"h{i}-eth0"}
            for i in range(n)]


def runner_with_fake_nic(**job):
    """Rank 0 of a 2-rank job, its connections to rank 1 opened on a NIC without sockets."""
    r = RankRunner(parse_job({"pattern": "stream", "ranks": ranks(2), "cts": False, **job}), 0)
    r.nic = Nic("h0-eth0", "02:00:00:00:00:01", "10.0.0.1", r.job.nic, open_sockets=False)
    r.connect(1, "02:00:00:00:00:02")
    r._msg_size = r.job.chunk_bytes
    return r


def posted_per_qp(runner, nbytes):
    conn = runner.conns[(1, 0)]
    conn.send_target = nbytes
    runner._pump(conn)
    return [sum(m.nbytes for m in qp.pending) for qp in conn.qps], conn


def test_round_robin_posts_whole_messages_across_the_connections_qps():
    r = runner_with_fake_nic(qps_per_connection=4, chunk_bytes=4096)
    per_qp, conn = posted_per_qp(r, 10 * 4096)
    assert per_qp == [3 * 4096, 3 * 4096, 2 * 4096, 2 * 4096]
    assert all(m.nbytes == 4096 for qp in conn.qps for m in qp.pending)
    # Each QP is its own flow for ECMP: distinct UDP source ports and QP numbers.
    assert len({qp.sport for qp in conn.qps}) == 4 and len({qp.remote_qpn for qp in conn.qps}) == 4


def test_split_cuts_every_message_across_the_qps():
    r = runner_with_fake_nic(qps_per_connection=3, qp_spread="split", chunk_bytes=9000)
    per_qp, conn = posted_per_qp(r, 2 * 9000 + 100)
    assert per_qp == [6000 + 34, 6000 + 33, 6000 + 33]
    assert [len(qp.pending) for qp in conn.qps] == [3, 3, 3]


def test_channels_and_qps_get_distinct_qp_numbers_on_both_ends():
    r = runner_with_fake_nic(channels=2, qps_per_connection=2)
    local = sorted(qp.local_qpn for c in r.conns.values() for qp in c.qps)
    remote = sorted(qp.remote_qpn for c in r.conns.values() for qp in c.qps)
    assert len(set(local)) == 4 and len(set(remote)) == 4
    peer = RankRunner(r.job, 1)
    assert remote == sorted(r.job.qpn(0, ch, q) for ch in range(2) for q in range(2))
    assert local == sorted(peer.job.qpn(1, ch, q) for ch in range(2) for q in range(2))


def cli(*args, cwd=None):
    return subprocess.run(ROCELAB + ["traffic", *args], capture_output=True, text=True, cwd=cwd, timeout=60)


def test_traffic_help_lists_the_commands_and_shows_a_job():
    out = cli()
    assert out.returncode == 0
    for word in ("run", "check", "pcap", '"pattern": "ring_allreduce"', "ring_allreduce tree_allreduce"):
        assert word in out.stdout
    run_help = cli("run", "--help").stdout
    assert "--rank" in run_help and "Exit status" in run_help and "root" in run_help


@pytest.mark.parametrize("content, args, message", [
    (None, ["check", "--job", "{missing}"], "cannot read job file {missing}: No such file or directory"),
    ('{"pattern": "ring_allreduce",\n "ranks": [}', ["check", "--job", "{job}"], "invalid JSON at line 2, column"),
    (json.dumps({"pattern": "ring", "ranks": ranks(2)}), ["check", "--job", "{job}"], "job.pattern: 'ring'"),
    (json.dumps({"pattern": "incast", "ranks": ranks(2), "nic": {"mtu": 1500}}), ["run", "--job", "{job}", "--rank", "0"],
     "job.nic.mtu: 1500 is not a RoCE path MTU"),
    (json.dumps({"pattern": "incast", "ranks": ranks(2)}), ["run", "--job", "{job}", "--rank", "2"],
     "--rank 2: the job has ranks 0..1"),
    (None, ["pcap", "{missing}/x.pcap"], "cannot write {missing}/x.pcap"),
])
def test_user_errors_are_one_clear_line(tmp_path, content, args, message):
    job = tmp_path / "job.json"
    if content is not None:
        job.write_text(content)
    fill = {"job": str(job), "missing": str(tmp_path / "missing")}
    out = cli(*[a.format(**fill) for a in args])
    assert out.returncode == 2, out
    assert message.format(**fill) in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the run opens a raw socket")
def test_a_run_that_cannot_start_still_writes_its_report(tmp_path):
    job = tmp_path / "job.json"
    bad = ranks(2)
    bad[0]["iface"] = "rlnosuchif0"
    job.write_text(json.dumps({"pattern": "incast", "ranks": bad}))
    out = cli("run", "--job", str(job), "--rank", "0", "--out", str(tmp_path / "r.json"), "--quiet")
    report = json.loads((tmp_path / "r.json").read_text())
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert report["status"] == "error" and report["error"].startswith("cannot open raw socket on interface "
                                                                       "'rlnosuchif0': No such device")
    assert report["rank"] == 0 and report["counters"]["tx_packets"] == 0
