"""`rocelab bench sim` (testbed/sim/bench.py): what its replay loop measures (never a speed)."""
from testbed.sim import bench


def test_the_replay_sample_spans_the_whole_run_and_every_switch(tmp_path):
    # The engine's packets/s was measured on the first leaf's first 2,000 frames: the start of
    # the collective at one switch, while the hops counted are every switch's, to the end
    fabrics = []

    def tap(fabric):
        fabrics.append(fabric)
        bench._tap_frames(fabric, keep=40)
    result, _spent, hops, frames = bench._sim_run(dict(spines=2, leaves=2, hosts_per_leaf=1), "ring_allreduce",
                                                  256 << 10, tmp_path / "run", tap=tap)
    assert result["collective"]["status"] == "ok"
    numbers = sorted(n for n, *_ in fabrics[0].bench_frames)
    assert len(numbers) == len(set(numbers)) == len(frames) == 40
    assert max(numbers) > hops // 2 and min(numbers) < hops // 2       # early and late hops alike
    pipelines = {id(node.switch.pipeline): node.name for node in fabrics[0].switches}
    sampled = {pipelines[id(p)] for p, _, _ in frames}
    assert {"leaf1", "leaf2"} <= sampled and sampled & {"spine1", "spine2"}
    kept = {n: (p, port, frame) for n, p, port, frame in fabrics[0].bench_frames}
    assert frames == [kept[n] for n in numbers]                          # in the run's order
    assert bench._engine_pps(frames, 0.05) > 0
