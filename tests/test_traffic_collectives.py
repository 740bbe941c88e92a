"""Collective schedules, nccl-tests factors, job validation and placement (pure Python)."""
import json

import pytest

from traffic import collectives as C
from traffic.job import JobError, load_job, parse_job, place


def ranks(n):
    return [{"host": f"h{i}", "ip": f"10.0.0.{i + 1}", "mac": f"02:00:00:00:00:{i + 1:02x}", "iface": f"h{i}-eth0"}
            for i in range(n)]


@pytest.mark.parametrize("pattern", sorted(C.PATTERNS))
@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_every_byte_sent_is_expected_by_its_receiver(pattern, n):
    size, chunk = 1_000_003, 65536
    sent, expected = {}, {}
    for r in range(n):
        for ph in C.schedule(pattern, r, n, size, chunk):
            for peer, b in ph.sends:
                assert peer != r and b > 0
                sent[(r, peer)] = sent.get((r, peer), 0) + b
            for peer, b in ph.recvs:
                expected[(peer, r)] = expected.get((peer, r), 0) + b
    assert sent == expected and sent


def test_ring_allreduce_has_2n_minus_2_steps_of_size_over_n():
    n, size = 4, 1 << 20
    for r in range(n):
        phases = C.schedule("ring_allreduce", r, n, size, 65536)
        assert len(phases) == 2 * (n - 1)
        assert all(ph.sends == [((r + 1) % n, size // n)] and ph.recvs == [((r - 1) % n, size // n)]
                   for ph in phases)
        assert C.expected_bytes("ring_allreduce", r, n, size, 65536) == (2 * (n - 1) * size // n,) * 2


def test_ring_steps_pass_each_chunk_along_the_ring():
    # In reduce-scatter step s, rank r sends chunk (r - s) and receives chunk (r - s - 1): the
    # chunk a rank receives in step s is the one it forwards in step s + 1.
    n = 5
    parts = [10, 11, 12, 13, 14]                    # distinct sizes make chunk identity visible
    size = sum(parts)
    got = {r: C.schedule("reducescatter", r, n, size, 1) for r in range(n)}
    for r in range(n):
        for s in range(n - 2):
            assert got[r][s].recvs[0][1] == got[r][s + 1].sends[0][1]


def test_tree_pipeline_incast_alltoall_shapes():
    t = {r: C.schedule("tree_allreduce", r, 7, 100, 10) for r in range(7)}
    assert [len(t[r]) for r in range(7)] == [2, 4, 4, 2, 2, 2, 2]        # root, inner, leaves
    assert t[0][0].recvs == [(1, 100), (2, 100)] and t[3][0].sends == [(1, 100)]
    pipe = C.schedule("pipeline", 1, 3, 100, 30)                         # chunks 30,30,30,10
    assert [ph.recvs for ph in pipe] == [[(0, 30)], [(0, 30)], [(0, 30)], [(0, 10)], []]
    assert [ph.sends for ph in pipe] == [[], [(2, 30)], [(2, 30)], [(2, 30)], [(2, 10)]]
    assert C.schedule("incast", 0, 4, 400, 1)[0].recvs == [(1, 100), (2, 100), (3, 100)]
    a2a = C.schedule("alltoall", 2, 4, 400, 1)
    assert len(a2a) == 1 and sorted(a2a[0].sends) == [(0, 100), (1, 100), (3, 100)]


def test_busbw_factors_are_nccl_tests_ones():
    assert C.BUSBW_FACTOR["ring_allreduce"](8) == pytest.approx(2 * 7 / 8)
    assert C.BUSBW_FACTOR["allgather"](8) == C.BUSBW_FACTOR["reducescatter"](8) == pytest.approx(7 / 8)
    assert C.BUSBW_FACTOR["alltoall"](4) == pytest.approx(3 / 4)
    assert C.BUSBW_FACTOR["pipeline"](4) == 1


def test_schedule_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown pattern 'ringo'"):
        C.schedule("ringo", 0, 4, 100, 10)
    with pytest.raises(ValueError, match="rank 5"):
        C.schedule("ring_allreduce", 5, 4, 100, 10)


def test_job_defaults_and_derived_values():
    job = parse_job({"pattern": "ring_allreduce", "ranks": ranks(4), "channels": 2, "qps_per_connection": 3,
                     "dcqcn": {"enabled": True, "g": 0.01}, "classes": {"cnp": {"dscp": 40}}})
    assert job.n == 4 and job.sizes == [1 << 20] and job.cts and job.nic.dcqcn.g == 0.01
    assert (job.nic.classes["data"].dscp, job.nic.classes["data"].priority, job.nic.classes["data"].ecn) == (26, 3, 2)
    assert job.nic.classes["cnp"].dscp == 40 and job.nic.classes["cnp"].priority == 6
    assert job.nic.classes["control"].dscp == 46
    qpns = {job.qpn(p, c, q) for p in range(4) for c in range(2) for q in range(3)}
    assert len(qpns) == 24                      # unique per (peer, channel, index)
    off = parse_job({"pattern": "stream", "ranks": ranks(2), "cts": False, "dcqcn": {"enabled": False}})
    assert not off.cts and off.nic.dcqcn is None


@pytest.mark.parametrize("change, message", [
    ({"pattern": "ring"}, "job.pattern: 'ring' is not one of"),
    ({"ranks": ranks(1)}, "job.ranks: expected a list of at least 2"),
    ({"ranks": [{"ip": "10.0.0.1", "mac": "zz", "iface": "e"}, ranks(2)[1]]}, r"job.ranks\[0\].mac"),
    ({"ranks": [{"ip": "10.0.0.300", "mac": "02:00:00:00:00:01", "iface": "e"}, ranks(2)[1]]},
     r"job.ranks\[0\].ip: '10.0.0.300'"),
    ({"ranks": [{"ip": "10.0.0.1", "mac": "02:00:00:00:00:01"}, ranks(2)[1]]}, r"job.ranks\[0\]: missing 'iface'"),
    ({"sizes": [0]}, r"job.sizes\[0\]"),
    ({"nic": {"mtu": 1500}}, "job.nic.mtu: 1500 is not a RoCE path MTU"),
    ({"nic": {"line_rate": 5}}, "job.nic: unknown key"),
    ({"classes": {"data": {"dscp": 64}}}, "job.classes.data.dscp"),
    ({"classes": {"data": {"ecn": "ect2"}}}, "job.classes.data.ecn"),
    ({"dcqcn": {"enabled": True, "gain": 1}}, "job.dcqcn: unknown parameter"),
    ({"qp_spread": "spray"}, "job.qp_spread"),
    ({"cts": {"enabled": True, "buffer_bytes": 100}, "chunk_bytes": 4096}, "job.cts.buffer_bytes"),
    ({"channels": 0}, "job.channels"),
])
def test_job_errors_name_the_key(change, message):
    data = {"pattern": "ring_allreduce", "ranks": ranks(2), **change}
    with pytest.raises(JobError, match=message):
        parse_job(data)


def test_load_job_reports_file_line_and_column(tmp_path):
    bad = tmp_path / "job.json"
    bad.write_text('{"pattern": "ring_allreduce",\n "ranks": [}\n')
    with pytest.raises(JobError, match=r"job.json: invalid JSON at line 2, column 12"):
        load_job(str(bad))
    good = tmp_path / "ok.json"
    good.write_text(json.dumps({"pattern": "alltoall", "ranks": ranks(3)}))
    assert load_job(str(good)).n == 3


def test_placement_topology_groups_by_leaf_and_random_is_seeded():
    hosts = [{"host": f"h{i}", "leaf": f"leaf{i % 2}", "ip": f"10.0.0.{i}"} for i in range(1, 9)]
    topo = place(hosts, 8, "topology")
    assert [h["leaf"] for h in topo] == ["leaf0"] * 4 + ["leaf1"] * 4
    assert [h["host"] for h in topo[:4]] == ["h2", "h4", "h6", "h8"]
    r1, r2 = place(hosts, 6, "random", seed=3), place(hosts, 6, "random", seed=3)
    assert r1 == r2 and len(r1) == 6 and r1 != place(hosts, 6, "random", seed=4)
    with pytest.raises(JobError, match="9 ranks but only 8 hosts"):
        place(hosts, 9)


def test_alltoallv_splits_each_buffer_by_its_weights_row():
    n, size = 3, 6000
    weights = [[0, 1, 2], [1, 0, 0], [3, 0, 1]]
    scaled = parse_job({"pattern": "alltoallv", "ranks": ranks(3), "alltoallv_weights": weights}).alltoallv_weights
    assert C.schedule("alltoallv", 0, n, size, 4096, scaled)[0].sends == [(1, 2000), (2, 4000)]
    assert C.schedule("alltoallv", 2, n, size, 4096, scaled)[0].sends == [(0, 4500)]   # 1500 stays local
    assert C.schedule("alltoallv", 0, n, size, 4096, scaled)[0].recvs == [(1, 6000), (2, 4500)]
    assert C.peers("alltoallv", 1, n, weights=scaled) == [0] and C.peers("alltoallv", 2, n, weights=scaled) == [0]
    assert sum(C.split_weighted(1001, [1, 1, 1])) == 1001
    uneven = {b for _, b in C.schedule("alltoallv", 0, 4, 4000, 4096)[0].sends}
    assert len(uneven) > 1                               # the default matrix is not an alltoall in disguise


@pytest.mark.parametrize("weights, message", [
    ([[0, 1]], "expected 2 rows"),
    ([[0, 1], [1]], r"alltoallv_weights\[1\]: expected 2 numbers"),
    ([[0, -1], [1, 0]], r"alltoallv_weights\[0\]\[1\]: expected a non-negative number"),
    ([[0, 0], [1, 0]], r"alltoallv_weights\[0\]: all \(near\) zero"),
])
def test_alltoallv_weights_errors_name_the_entry(weights, message):
    with pytest.raises(JobError, match=message):
        parse_job({"pattern": "alltoallv", "ranks": ranks(2), "alltoallv_weights": weights})
    with pytest.raises(JobError, match="only the alltoallv pattern"):
        parse_job({"pattern": "alltoall", "ranks": ranks(2), "alltoallv_weights": [[0, 1], [1, 0]]})
