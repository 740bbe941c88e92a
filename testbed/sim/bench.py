"""`rocelab bench sim`: what virtual time costs.

1. Packet-hops simulated per CPU-second on p4/fabric.p4, beside the engine's own in-process
   packets/s (ingress + egress of frames sampled across the run's hops, each through the
   programmed pipeline of the switch that took it, in the run's order), and their ratio: the
   scheduler, wires, traffic managers and NICs may at most double the pipeline's cost (goal
   >= 0.50x). The CPU time counted is the scheduler's run (the simulation itself), not the
   run's set-up, plots and summary around it. Beside it, the pipeline's own share of that
   run, timed inside it: a pipeline call costs more there than in the hot replay loop (other
   code has evicted its caches), which bounds the ratio even for models that cost nothing.
2. A 16-spine/16-leaf/8-hosts-per-leaf Clos (128 hosts) running a 1 MB ring AllReduce: wall
   time and peak RSS (goal <= 120 s on one core, <= 1.5 GB), in a child process of its own.
"""
import itertools
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RATIO_GOAL = 0.5
WALL_GOAL_S = 120.0
RSS_GOAL_MB = 1536


def _sim_run(spec_kw, pattern, size, out, tap=None, qps=1, hash_mode="5tuple"):
    from testbed.clos import ClosSpec, build
    from testbed.net.experiment import Experiment, FabricSettings, job_for
    from testbed.sim import profile

    clos = build(ClosSpec(clock="virtual", link_rate_mbps=profile.LINK_RATE_MBPS, **spec_kw))
    job = job_for(clos, pattern, [size], mtu=profile.NIC_MTU, qps_per_connection=qps)
    t0 = time.monotonic()
    with Experiment(clos, out=out, pcap=False, clock="virtual", log=lambda m: None) as exp:
        booted_s = time.monotonic() - t0
        if tap is not None:
            tap(exp.fabric)
        spent = _time_scheduler(exp.fabric.scheduler)
        spent["boot"] = booted_s
        result = exp.run_phase("bench", job, FabricSettings(hash=hash_mode))
        hops = sum(n.switch.counters[p].rx_packets for n in exp.fabric.switches for p in n.ports)
        frames = [taken[1:] for taken in sorted(getattr(exp.fabric, "bench_frames", []), key=lambda t: t[0])]
        spent["pipeline"] = getattr(exp.fabric, "bench_pipeline_s", [0.0])[0]
        for node in exp.fabric.switches:      # the replay loop times the pipeline itself
            vars(node.switch.pipeline).pop("ingress", None)
            vars(node.switch.pipeline).pop("egress", None)
        return result, spent, hops, frames


def _time_scheduler(scheduler):
    """CPU and wall seconds spent inside scheduler.run (accumulated in the returned dict)."""
    spent = {"cpu": 0.0, "wall": 0.0}
    run = scheduler.run

    def timed(*args, **kwargs):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            return run(*args, **kwargs)
        finally:
            spent["cpu"] += time.process_time() - cpu0
            spent["wall"] += time.perf_counter() - wall0
    scheduler.run = timed
    return spent


def _time_pipelines(fabric):
    """Wall seconds spent in the switches' pipelines during the run (the timer's own cost
    counts against the models, not the pipeline)."""
    spent = fabric.bench_pipeline_s = [0.0]
    clock = time.perf_counter
    for node in fabric.switches:
        pipeline = node.switch.pipeline
        for stage in ("ingress", "egress"):
            def timed(*args, _run=getattr(pipeline, stage)):
                t0 = clock()
                try:
                    return _run(*args)
                finally:
                    spent[0] += clock() - t0
            setattr(pipeline, stage, timed)


def _tap_frames(fabric, keep=4000, seed=0):
    """Sample what the switches receive, leaves and spines, from the whole run (a seeded
    reservoir: every hop as likely to be kept, however long the run), each as (hop number,
    the pipeline that took it, port, frame); and time the pipelines. The sampling's own cost
    counts against the models."""
    _time_pipelines(fabric)
    sample = fabric.bench_frames = []
    hop_numbers = itertools.count()
    slot_for = random.Random(seed).randrange
    for node in fabric.switches:
        def recording(port, frame, _pipeline=node.switch.pipeline, _receive=node.receive):
            n = next(hop_numbers)
            if n < keep:
                sample.append((n, _pipeline, port, frame))
            else:
                slot = slot_for(n + 1)
                if slot < keep:
                    sample[slot] = (n, _pipeline, port, frame)
            _receive(port, frame)
        node.receive = recording      # the wires call node.receive at delivery time


def _engine_pps(frames, seconds):
    """Ingress + egress of the sampled frames, in a loop, each on its switch's pipeline."""
    if not frames:
        return 0.0
    count, t0, cpu0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        for pipeline, port, frame in frames:
            for job in pipeline.ingress(port, frame, 1000):
                pipeline.egress(job, 1001, 1000, 0, 1, 0)
            count += 1
    return count / max(time.process_time() - cpu0, 1e-9)


def _big_run(quick):
    spec = dict(spines=4, leaves=4, hosts_per_leaf=4) if quick else dict(spines=16, leaves=16, hosts_per_leaf=8)
    with tempfile.TemporaryDirectory(prefix="rocelab-bench-sim-") as tmp:
        t0 = time.monotonic()
        result, spent, hops, _ = _sim_run(spec, "ring_allreduce", 1 << 20, Path(tmp) / "run")
        wall = time.monotonic() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"spec": spec, "hosts": spec["leaves"] * spec["hosts_per_leaf"], "wall_s": wall, "cpu_s": spent["cpu"],
            "boot_s": spent["boot"], "sim_wall_s": spent["wall"],
            "rss_mb": rss_mb, "status": result["collective"]["status"], "hops": hops,
            "events": result["wall_clock"]["events"], "busbw_gbps": result["collective"]["busbw_gbps"]}


def main(quick=False):
    if len(sys.argv) > 1 and sys.argv[1] == "--child-big":
        print(json.dumps(_big_run(sys.argv[2:] == ["--quick"])))
        return 0
    with tempfile.TemporaryDirectory(prefix="rocelab-bench-sim-") as tmp:
        spec = dict(spines=2, leaves=4, hosts_per_leaf=4)
        result, spent, hops, frames = _sim_run(spec, "ring_allreduce", (4 if quick else 16) << 20,
                                               Path(tmp) / "hops", tap=_tap_frames, qps=4, hash_mode="qpn")
    cpu = spent["cpu"]
    sim_rate = hops / max(cpu, 1e-9)
    engine = _engine_pps(frames, 2.0 if quick else 5.0)
    ratio = sim_rate / engine if engine else 0.0
    print(f"   fabric.p4, 2x4x4 Clos at 400G, ring AllReduce ({result['collective']['status']}): "
          f"{hops:,} packet-hops in {cpu:.2f} CPU s of simulation (scheduler run)")
    print(f"   simulated    {sim_rate:,.0f} packet-hops per CPU second "
          f"({result['wall_clock']['events']:,} events)")
    switches = len({id(pipeline) for pipeline, _, _ in frames})
    print(f"   engine       {engine:,.0f} packets/s in-process (ingress+egress of {len(frames):,} frames sampled "
          f"from the run's hops at its {switches} switches, each on its switch's pipeline)")
    print(f"   ratio        {ratio:.2f}x  (goal >= {RATIO_GOAL:.2f}x: {'met' if ratio >= RATIO_GOAL else 'NOT met'})")
    in_run = spent["pipeline"] / max(spent["wall"], 1e-9)
    per_hop = spent["pipeline"] / max(hops, 1) * 1e6
    print(f"   in the run   the pipeline took {in_run:.0%} of the simulation's time, {per_hop:.1f} us a hop "
          f"({1e6 / engine if engine else 0:.1f} us in the replay loop): models and scheduler cost "
          f"{(1 - in_run) / max(in_run, 1e-9):.2f}x the pipeline")
    cmd = [sys.executable, "-m", "testbed.sim.bench", "--child-big"] + (["--quick"] if quick else [])
    child = subprocess.run(cmd, capture_output=True, text=True)
    if child.returncode:
        print(f"   128-host run failed: {child.stderr.strip().splitlines()[-1:]}")
        return 1
    big = json.loads(child.stdout.strip().splitlines()[-1])
    shape = "x".join(str(big["spec"][k]) for k in ("spines", "leaves", "hosts_per_leaf"))
    print(f"   {shape} Clos ({big['hosts']} hosts), 1 MB ring AllReduce ({big['status']}, "
          f"busbw {big['busbw_gbps']:.1f} Gb/s): wall {big['wall_s']:.1f} s (boot and programming "
          f"{big['boot_s']:.1f} s, simulation {big['sim_wall_s']:.1f} s, counters, plots and summary "
          f"{big['wall_s'] - big['boot_s'] - big['sim_wall_s']:.1f} s), peak RSS {big['rss_mb']:.0f} MB, "
          f"{big['events']:,} events")
    if not quick:
        print(f"   goals        wall <= {WALL_GOAL_S:.0f} s: {'met' if big['wall_s'] <= WALL_GOAL_S else 'NOT met'}; "
              f"RSS <= {RSS_GOAL_MB} MB: {'met' if big['rss_mb'] <= RSS_GOAL_MB else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
