"""The rank runner's QP scaling and the `rocelab traffic` command line (no sockets, no root)."""
import json
import os
import subprocess
import sys

import pytest

from traffic.job import JobError, parse_job
from traffic.nic import Nic
from traffic.runner import RankRunner
from traffic.samples import Recorder

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


def wired_rank(job, rank):
    """A rank as setup() leaves it (NIC callbacks wired, connections open), on a recording NIC."""
    r = RankRunner(parse_job(job), rank)
    me = r.job.ranks[rank]
    r.nic = Nic(me.iface, me.mac, me.ip, r.job.nic, open_sockets=False)
    r.nic.sock = Recorder()
    r.nic.on_rx_bytes, r.nic.on_rx_consumed, r.nic.on_cts = r._on_rx_bytes, r._on_rx_consumed, r._on_cts
    for peer in r.peers:
        r.connect(peer, r.job.ranks[peer].mac)
    return r


def cts_frame(receiver, sender_rank, granted):
    """The CTS frame `receiver` sends to grant `sender_rank` credit up to `granted` bytes."""
    conn = receiver.conns[(sender_rank, 0)]
    receiver.nic.sock.frames.clear()
    receiver.nic.send_cts(conn.peer_ip, conn.peer_mac, receiver.rank, 0, granted)
    return receiver.nic.sock.frames.pop()


def test_a_cts_arriving_during_the_start_barrier_is_kept_until_the_rank_has_planned():
    # The receiver left the start barrier first and granted credit; the sender is still in
    # barrier("start") polling its NIC, so the CTS reaches it before _plan(): it used to crash
    # the rank (AttributeError: _msg_size). Now the credit is recorded and used once planned.
    job = {"pattern": "incast", "ranks": ranks(2), "chunk_bytes": 4096, "cts": {"buffer_bytes": 8192}}
    receiver, sender = wired_rank(job, 0), wired_rank(job, 1)
    sender.nic._on_roce(cts_frame(receiver, 1, 8192), 0.0)      # what nic.poll() does in the barrier
    conn = sender.conns[(0, 0)]
    assert conn.granted == 8192 and conn.posted == 0 and sender.nic.stats["cts_rx"] == 1
    [run] = sender._plan(65536)
    run.idx = 0
    sender._start_phase(run)
    assert conn.send_target == 32768                              # 64 KB over 2 ranks: 32 KB to the root
    assert conn.posted == 8192 and [m.nbytes for m in conn.qps[0].pending] == [4096, 4096]


def pipelined_ring_rank(slicing):
    """Rank 1 of a 4-rank ring AllReduce of 4 x 4 chunks per step, planned and in its first step."""
    r = wired_rank({"pattern": "ring_allreduce", "ranks": ranks(4), "chunk_bytes": 4096, "cts": False,
                    "slicing": slicing}, 1)
    [run] = r._plan(4 * 4 * 4096)
    r._advance(run, 0.0)
    return r, run, r.conns[(2, 0)], r.conns[(0, 0)]           # to the next rank, from the previous


def test_pipelining_forwards_the_next_steps_data_slice_by_slice_as_it_arrives():
    r, run, out, inc = pipelined_ring_rank(slicing=True)
    assert run.idx == 0 and out.posted == 4 * 4096            # step 0: its own data, all at once
    inc.consumed = 4096 + 100                                 # one slice (and a bit) of step 0 arrived
    r._advance(run, 0.0)
    assert run.idx == 0 and out.posted == 5 * 4096            # step 1 forwards that one whole slice
    assert [m.nbytes for m in out.qps[0].pending][-2:] == [4096, 4096]
    inc.consumed = 4 * 4096                                   # step 0 complete, nothing ACKed yet
    r._advance(run, 0.0)
    assert run.idx == 1 and out.posted == 8 * 4096 and out.acked == 0
    # Every message ends at a step boundary: the step's last one carries its immediate (phase).
    assert [m.imm for m in out.qps[0].pending] == [None, None, None, 0, None, None, None, 1]
    inc.consumed = inc.recv_planned                           # everything arrived: the last step
    r._advance(run, 0.0)                                      # still waits for its ACKs
    assert run.idx == len(run.phases) - 1 and out.posted == out.send_planned
    out.acked = out.send_planned
    r._advance(run, 0.0)
    assert run.done


def test_a_pipelined_run_ends_only_when_every_earlier_send_is_acked():
    # A tree leaf sends up, then only receives: its last phase has no sends of its own.
    r = wired_rank({"pattern": "tree_allreduce", "ranks": ranks(3), "chunk_bytes": 4096, "cts": False,
                    "slicing": True}, 1)
    [run] = r._plan(8192)
    r._advance(run, 0.0)
    up = r.conns[(0, 0)]
    assert run.idx == 1 and up.posted == 8192                 # sent to the parent; now awaits the result
    up.consumed = up.recv_planned
    r._advance(run, 0.0)
    assert not run.done                                       # the data came back, the send is not ACKed
    up.acked = 8192
    r._advance(run, 0.0)
    assert run.done


def test_without_pipelining_a_step_waits_for_its_acks_and_all_of_its_data():
    r, run, out, inc = pipelined_ring_rank(slicing=False)
    inc.consumed = 4 * 4096
    r._advance(run, 0.0)
    assert run.idx == 0 and out.posted == 4 * 4096            # data in, but step 0 not ACKed
    out.acked = 4 * 4096
    r._advance(run, 0.0)
    assert run.idx == 1 and out.posted == 8 * 4096


def test_slicing_must_be_a_boolean():
    with pytest.raises(JobError, match="job.slicing: expected true or false"):
        parse_job({"pattern": "ring_allreduce", "ranks": ranks(2), "slicing": "yes"})


def receiving_root(senders, budget, chunk=4096, buffer_bytes=8192):
    """Rank 0 of an incast of `senders`, planned and started: what it grants is in conn.granted_sent."""
    r = wired_rank({"pattern": "incast", "ranks": ranks(senders + 1), "chunk_bytes": chunk,
                    "cts": {"buffer_bytes": buffer_bytes, "budget_bytes": budget}}, 0)
    [run] = r._plan((senders + 1) * 4 * chunk)                     # 4 chunks from every sender
    run.idx = 0
    r._start_phase(run)
    return r


def consume(r, peer, nbytes):
    conn = r.conns[(peer, 0)]
    conn.recv_cum += nbytes
    r._on_rx_consumed(conn.qps[0], nbytes)


def outstanding(r):
    return {peer: c.granted_sent - c.consumed for (peer, _ch), c in r.conns.items() if c.granted_sent > c.consumed}


def test_receiver_wide_budget_admits_budget_over_chunk_senders_at_a_time_in_turn():
    r = receiving_root(senders=16, budget=2 * 4096)
    assert outstanding(r) == {1: 4096, 2: 4096}                   # two senders of sixteen admitted
    assert r.nic.stats["cts_tx"] == 2
    consume(r, 1, 4096)                                           # sender 1's chunk drained
    assert outstanding(r) == {2: 4096, 3: 4096}                   # the next in turn, not sender 1 again
    consume(r, 2, 2048)                                           # half a chunk free: nobody new yet
    assert outstanding(r) == {2: 2048, 3: 4096}
    for _ in range(200):                                          # drain everything the root grants
        busy = outstanding(r)
        if not busy:
            break
        assert sum(busy.values()) <= 2 * 4096 and len(busy) <= 3  # never more than the budget
        peer = min(busy)
        consume(r, peer, busy[peer])
    assert all(c.consumed == c.recv_planned == 4 * 4096 for c in r.conns.values())


def test_per_connection_credit_admits_every_sender_one_buffer_each():
    r = receiving_root(senders=16, budget=None)
    for conn in r.conns.values():
        r._grant(conn, force=True)                                # what run_size does at the start
    assert outstanding(r) == {peer: 8192 for peer in range(1, 17)}


def test_the_budget_holds_no_credit_for_phases_not_started():
    # A pipeline rank receives in later phases only; credit for them would sit idle while the
    # sender of the current phase starves (and could deadlock a pattern whose later sender
    # waits on this rank). Budget mode grants up to the started phases' receive marks only.
    r = wired_rank({"pattern": "pipeline", "ranks": ranks(3), "chunk_bytes": 4096, "size": 8 * 4096,
                    "cts": {"buffer_bytes": 8 * 4096, "budget_bytes": 8 * 4096}}, 1)
    [run] = r._plan(8 * 4096)
    conn = r.conns[(0, 0)]
    run.idx = 0
    r._start_phase(run)
    first = r.conns[(0, 0)].recv_released
    assert 0 < first < conn.recv_planned and conn.granted_sent == first


def test_budget_below_one_chunk_is_a_named_job_error():
    with pytest.raises(JobError, match=r"job.cts.budget_bytes: 1000 is smaller than one chunk \(4096"):
        parse_job({"pattern": "incast", "ranks": ranks(2), "chunk_bytes": 4096, "cts": {"budget_bytes": 1000}})


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
