"""Emulated NICs on real veths in namespaces of our own: collectives, CNP/DCQCN, PFC, no ICMP."""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from traffic_helpers import Lab, in_netns  # noqa: E402

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces and raw sockets"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2 (ip netns)"),
]

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")


@pytest.fixture
def lab_factory():
    made = []

    def make(hosts, bridge=True):
        lab = Lab(f"rltr{os.getpid() % 10000}{len(made)}", hosts, bridge=bridge)
        made.append(lab)
        return lab

    yield make
    for lab in made:
        lab.close()


def run_job(lab, tmp_path, job, timeout=60):
    job = {"ranks": [{"host": h["ns"], "ip": h["ip"], "mac": h["mac"], "iface": h["iface"]} for h in lab.hosts],
           **job}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    procs = []
    for i, h in enumerate(lab.hosts):
        procs.append(subprocess.Popen(["ip", "netns", "exec", h["ns"], ROCELAB, "traffic", "run", "--job", str(path),
                                       "--rank", str(i), "--out", str(tmp_path / f"rank{i}.json")],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    reports = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in range(len(lab.hosts))]
    return outputs, reports


class IcmpWatcher:
    """Raw ICMP socket in a namespace: counts port-unreachable replies about UDP/4791."""

    def __init__(self, ns):
        with in_netns(ns):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        self.sock.setblocking(False)

    def unreachable_4791(self):
        count = 0
        while True:
            try:
                pkt = self.sock.recv(65536)
            except BlockingIOError:
                return count
            ihl = (pkt[0] & 0x0F) * 4
            icmp_type, code = pkt[ihl], pkt[ihl + 1]
            inner = pkt[ihl + 8:]
            inner_ihl = (inner[0] & 0x0F) * 4
            if icmp_type == 3 and code == 3 and inner[9] == 17:
                if struct.unpack_from("!H", inner, inner_ihl + 2)[0] == 4791:
                    count += 1

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("slicing", [False, True], ids=["step-by-step", "sliced"])
def test_four_ranks_complete_a_ring_allreduce_with_exact_bytes_and_no_oos(lab_factory, tmp_path, slicing):
    lab = lab_factory(4)
    watchers = [IcmpWatcher(h["ns"]) for h in lab.hosts]
    size = 1 << 20
    outputs, reports = run_job(lab, tmp_path, {
        "pattern": "ring_allreduce", "sizes": [size], "channels": 2, "qps_per_connection": 2,
        "qp_spread": "round_robin", "chunk_bytes": 32768, "timeout_s": 40, "slicing": slicing,
        "nic": {"line_rate_mbps": 200, "lat_timeout_s": 0.2}})
    for code, out, err in outputs:
        assert code == 0, err
        assert "busbw" in out and "ring_allreduce" in out                # the nccl-tests-style table
    n = 4
    per_rank = 2 * (n - 1) * size // n                                  # 2(n-1) steps of size/n
    for r in reports:
        assert r["status"] == "ok", r["error"]
        assert r["bytes"] == {"expected_tx": per_rank, "expected_rx": per_rank, "acked_tx": per_rank,
                              "rx": per_rank}
        c = r["counters"]
        assert c["oos"] == 0 and c["icrc_errors"] == 0 and c["unknown_qp"] == 0
        assert c["data_rx_bytes"] == per_rank                           # in-order payload seen by the QPs
        assert c["cts_tx"] > 0 and c["cts_rx"] > 0
        assert len(r["qps"]) == 2 * 2 * 2                                # 2 peers x 2 channels x 2 QPs
        assert {q["peer_rank"] for q in r["qps"]} == {(r["rank"] + 1) % n, (r["rank"] - 1) % n}
        # QP scaling: the bytes to the next rank are spread over all 4 of its QPs (2 per channel),
        # each with its own UDP source port for ECMP; the previous rank's 4 QPs all deliver.
        out_qps = [q for q in r["qps"] if q["peer_rank"] == (r["rank"] + 1) % n]
        in_qps = [q for q in r["qps"] if q["peer_rank"] == (r["rank"] - 1) % n]
        assert sum(q["rx_bytes"] for q in in_qps) == per_rank             # tx_bytes would count resends
        assert min(q["rx_bytes"] for q in in_qps) >= per_rank / 4 / 2, [q["rx_bytes"] for q in in_qps]
        assert min(q["tx_bytes"] for q in out_qps) > 0 and len({q["udp_sport"] for q in out_qps}) == 4
        row = r["results"][0]
        assert row["size"] == size and row["time_us"] > 0
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 1.5, rel=1e-3)
        # Lower bound from physics: each rank pushed per_rank bytes through a 200 Mb/s NIC.
        assert row["time_us"] * 1e-6 >= per_rank * 8 / 200e6 * 0.95
    # Everybody received what the ring's predecessor sent.
    assert sum(r["counters"]["data_rx_bytes"] for r in reports) == n * per_rank
    assert [w.unreachable_4791() for w in watchers] == [0] * n         # the UDP/4791 sink silenced ICMP
    for w in watchers:
        w.close()


def test_kernel_answers_icmp_without_the_sink_and_stays_silent_with_it(lab_factory):
    from scapy.compat import raw
    from traffic import packets as P
    from traffic.fastpath import PortSink, RawSocket
    lab = lab_factory(2, bridge=False)
    a, b = lab.hosts
    with in_netns(a["ns"]):
        sock = RawSocket("eth0", a["mac"])
    watcher = IcmpWatcher(a["ns"])
    frame = raw(P.roce(a["mac"], b["mac"], a["ip"], b["ip"], 0xC001, P.write_bth(P.RC_WRITE_ONLY, 5, 0,
                                                                                   payload=b"x" * 64)))
    try:
        sock.send(frame)
        time.sleep(0.3)
        assert watcher.unreachable_4791() == 1          # this is what the sink prevents
        with in_netns(b["ns"]):
            sink = PortSink()
        time.sleep(1.1)                                  # past the kernel's ICMP rate limit
        for _ in range(5):
            sock.send(frame)
        time.sleep(0.3)
        assert watcher.unreachable_4791() == 0
        sink.close()
    finally:
        sock.close()
        watcher.close()


def test_ce_marked_stream_yields_cnps_and_a_dcqcn_rate_drop(lab_factory, tmp_path):
    lab = lab_factory(2)
    outputs, reports = run_job(lab, tmp_path, {
        "pattern": "stream", "sizes": [16384], "iterations": 8, "cts": False, "timeout_s": 30,
        "classes": {"data": {"ecn": "ce"}},             # every data packet arrives CE-marked
        # Marking everything collapses the rate geometrically: keep a floor so the run ends.
        "dcqcn": {"enabled": True, "min_rate_fraction": 0.05},
        "nic": {"line_rate_mbps": 100, "cnp_interval_s": 0.002}})
    for code, out, err in outputs:
        assert code == 0, err
    sender, receiver = reports
    assert sender["status"] == receiver["status"] == "ok"
    assert receiver["counters"]["ce_rx"] >= 8 * 16           # 8 x 16 KiB in 1 KiB packets, all marked
    assert receiver["counters"]["cnp_tx"] >= 2
    assert sender["counters"]["cnp_rx"] == receiver["counters"]["cnp_tx"]
    dq = sender["qps"][0]["dcqcn"]
    assert dq["decreases"] >= 1 and dq["lowest_rate_bps"] <= 0.5 * 100e6
    assert sender["perftest"][0]["iterations"] == 8 and sender["perftest"][0]["bw_avg_Gbps"] < 0.1
    # Without CE marks: no CNP, no decrease.
    outputs, reports = run_job(lab, tmp_path, {
        "pattern": "stream", "sizes": [65536], "iterations": 4, "cts": False, "timeout_s": 30,
        "dcqcn": {"enabled": True}, "nic": {"line_rate_mbps": 100}})
    assert reports[1]["counters"]["cnp_tx"] == 0 and reports[0]["qps"][0]["dcqcn"]["decreases"] == 0


def _two_nics(lab, **cfg):
    from traffic.nic import Nic, NicConfig
    a, b = lab.hosts
    nics = []
    for h in (a, b):
        with in_netns(h["ns"]):
            nics.append(Nic("eth0", h["mac"], h["ip"], NicConfig(**cfg)))
    na, nb = nics
    qa = na.create_qp(0x101, 0x201, b["ip"], b["mac"])
    nb.create_qp(0x201, 0x101, a["ip"], a["mac"])
    return na, nb, qa


def test_pfc_frame_pauses_the_sender_for_quanta_times_512_bit_times(lab_factory):
    from scapy.compat import raw
    from traffic import packets as P
    from traffic.fastpath import RawSocket
    lab = lab_factory(2, bridge=False)
    rate = 20e6
    na, nb, qa = _two_nics(lab, line_rate_bps=rate, burst_bytes=4096)
    with in_netns(lab.hosts[1]["ns"]):
        injector = RawSocket("eth0", lab.hosts[1]["mac"])
    arrivals = []
    nb.on_rx_bytes = lambda qp, n: arrivals.append(time.monotonic())
    quanta = 30000
    expected = quanta * 512 / rate                        # 0.768 s
    try:
        na.post_write(qa, 4 << 20)
        start = time.monotonic()
        injected = None
        while time.monotonic() - start < 3.0 and (qa.pending or qa.outstanding):
            na.poll(0.0005)
            nb.poll(0.0005)
            if injected is None and time.monotonic() - start > 0.3:
                injector.send(raw(P.pfc_frame(lab.hosts[1]["mac"], {3: quanta})))
                injected = time.monotonic()
        gaps = [(b - a, a) for a, b in zip(arrivals, arrivals[1:])]
        long_gaps = [g for g in gaps if g[0] > 0.1]
        assert na.stats["pfc_rx"] == 1 and na.pfc_rx_by_priority[3] == 1
        assert len(long_gaps) == 1, long_gaps
        gap, began = long_gaps[0]
        assert abs(began - injected) < 0.05                # the pause began when the frame arrived
        assert expected - 0.03 <= gap <= expected + 0.08, (gap, expected)
        assert na.report()["paused_seconds_by_priority"][3] == pytest.approx(expected, rel=1e-6)
    finally:
        injector.close()
        na.close()
        nb.close()


def test_slow_receiver_emits_pfc_that_throttles_the_sender(lab_factory):
    lab = lab_factory(2, bridge=False)
    na, nb, qa = _two_nics(lab, line_rate_bps=100e6, slow_rx_bps=4e6, pfc_xoff_bytes=32768,
                           pfc_xon_bytes=8192, pfc_quanta=2000)
    try:
        done = []
        na.post_write(qa, 256 * 1024, on_done=lambda qp, m: done.append(time.monotonic()))
        start = time.monotonic()
        while not done and time.monotonic() - start < 5:
            na.poll(0.0005)
            nb.poll(0.0005)
        assert done
        elapsed = done[0] - start
        # 100 Mb/s would take 21 ms; the receiver drains 0.5 MB/s so PFC holds the sender back.
        assert elapsed > (256 * 1024 - 32768) / 0.5e6 * 0.8, elapsed
        assert nb.stats["pfc_tx"] >= 2 and na.stats["pfc_rx"] == nb.stats["pfc_tx"]
        assert qa.stats["retransmits"] == 0                 # lossless: paused, not dropped
    finally:
        na.close()
        nb.close()


def test_cts_admission_bounds_the_receive_queue_of_a_16_to_1_incast(lab_factory, tmp_path):
    # 16 senders at 10 Mb/s each into one receiver whose buffer drains at 10 Mb/s (its link):
    # without CTS the queue builds to most of the data and the receiver asks for PFC; with
    # per-connection CTS every sender holds at most one buffer of credit, so the queue stays
    # under 16 buffers; with a receiver-wide budget it stays under the budget, whatever N is.
    lab = lab_factory(17)
    senders, buffer_bytes, budget, size = 16, 16384, 16384, 17 * 64 * 1024
    base = {"pattern": "incast", "sizes": [size], "chunk_bytes": 8192, "timeout_s": 60,
            "nic": {"line_rate_mbps": 10, "slow_rx_mbps": 10, "pfc_xoff_bytes": 320 * 1024,
                    "pfc_xon_bytes": 128 * 1024}}
    modes = {"off": {"enabled": False}, "per-connection": {"enabled": True, "buffer_bytes": buffer_bytes},
             "budget": {"enabled": True, "buffer_bytes": buffer_bytes, "budget_bytes": budget}}
    runs = {}
    for mode, cts in modes.items():
        outputs, reports = run_job(lab, tmp_path, {**base, "cts": cts}, timeout=90)
        for code, out, err in outputs:
            assert code == 0, err
        assert all(r["status"] == "ok" for r in reports)
        root = reports[0]
        assert root["bytes"]["rx"] == root["bytes"]["expected_rx"] == senders * size // 17
        assert root["results"][0]["time_us"] * 1e-6 >= senders * size // 17 * 8 / 10e6 * 0.95  # the drain
        runs[mode] = root["counters"]
    without, per_conn, wide = runs["off"], runs["per-connection"], runs["budget"]
    assert without["rx_buffer_peak"] > 1.5 * senders * buffer_bytes and without["pfc_tx"] >= 1
    assert per_conn["rx_buffer_peak"] <= senders * buffer_bytes and per_conn["pfc_tx"] == 0
    assert wide["rx_buffer_peak"] <= budget < per_conn["rx_buffer_peak"] and wide["pfc_tx"] == 0
    assert per_conn["cts_tx"] >= senders and wide["cts_tx"] >= senders * 64 * 1024 // 8192
    assert without["cts_tx"] == 0


def test_sigterm_ends_a_rank_with_a_report_saying_so(lab_factory, tmp_path):
    lab = lab_factory(2, bridge=False)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"pattern": "stream", "timeout_s": 30, "ranks": [
        {"host": h["ns"], "ip": h["ip"], "mac": h["mac"], "iface": h["iface"]} for h in lab.hosts]}))
    out = tmp_path / "rank0.json"
    proc = subprocess.Popen(["ip", "netns", "exec", lab.hosts[0]["ns"], ROCELAB, "traffic", "run", "--job", str(job),
                             "--rank", "0", "--out", str(out), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20        # rank 1 never starts: rank 0 waits at the start barrier
        while time.monotonic() < deadline and not _listening_udp(lab.hosts[0]["ns"], 18515):
            time.sleep(0.05)
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    report = json.loads(out.read_text())
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    assert report["status"] == "interrupted" and report["rank"] == 0


def _listening_udp(ns, port):
    out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hlun", f"sport = :{port}"], capture_output=True, text=True)
    return bool(out.stdout.strip())


def test_alltoallv_delivers_each_pair_its_weighted_share(lab_factory, tmp_path):
    lab = lab_factory(3)
    size = 96 * 1024
    outputs, reports = run_job(lab, tmp_path, {
        "pattern": "alltoallv", "sizes": [size], "chunk_bytes": 8192, "timeout_s": 30,
        "alltoallv_weights": [[0, 1, 3], [1, 0, 0], [2, 1, 1]], "nic": {"line_rate_mbps": 100}})
    for code, out, err in outputs:
        assert code == 0, err
    delivered = {(q["peer_rank"], r["rank"]): q["rx_bytes"] for r in reports for q in r["qps"]}   # (from, to)
    assert delivered == {(0, 1): size // 4, (0, 2): 3 * size // 4, (1, 0): size, (2, 0): size // 2,
                         (2, 1): size // 4, (1, 2): 0}
    assert [r["bytes"]["rx"] for r in reports] == [size + size // 2, size // 4 + size // 4, 3 * size // 4]
