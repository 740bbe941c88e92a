"""Labs in virtual time (issue #15): each lab's direction on a small fabric with a fixed seed
(deterministic: virtual time), the seed runner and findings, the workload pattern, and the
lab page rendered in headless Chromium."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from testbed.labs import cli
from testbed.labs.base import Phase
from testbed.labs.virtual import Finding, VirtualLab, aggregate, run_virtual
from testbed.sim import profile

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
SEED = 1


def _small(lab, **shape):
    """The lab on a smaller fabric (same phases, same findings)."""
    base = type(lab)

    class Small(base):
        def shape(self, quick):
            return dict(base.shape(self, quick), **shape)
    small = Small()
    return small


def _run(lab, tmp_path, seeds=(SEED,)):
    return run_virtual(lab, tmp_path / lab.name, quick=True, seeds=list(seeds), pcap=False, log=lambda m: None)


def _finding(result, key):
    return next(f for f in result["findings"] if f["key"] == key)


# --- the seed runner and the findings table (no fabric) ----------------------------------

class _Fake(VirtualLab):
    name = "fake"
    findings = [Finding("gain", "gain", "up to +40%", holds=lambda v: v > 0, direction="> 0")]


def test_findings_count_the_seeds_that_hold_the_papers_direction():
    rows = aggregate(_Fake(), [1, 2, 3], [{"gain": 0.3}, {"gain": -0.1}, {}])
    f = rows[0]
    assert f["values"] == [0.3, -0.1, None]
    assert f["holds"] == [True, False, False] and f["holds_count"] == 1
    assert f["mean"] == pytest.approx(0.1)


# --- each lab's direction, small fabric, seed 1 ------------------------------------------

def test_ecmp_flow_count_mmr_and_collective_imbalance(tmp_path):
    from testbed.labs.ecmp import VIRTUAL
    result = _run(_small(VIRTUAL, hosts_per_leaf=4), tmp_path, seeds=(1, 2))
    row = result["seeds_detail"][0]["phases"][0]
    # a seed is another placement and other QP numbers: other collisions, not relabelled ones
    assert sorted(row["flows_per_uplink"]) != sorted(result["seeds_detail"][1]["phases"][0]["flows_per_uplink"])
    assert row["flows"] == 1000 and sum(row["flows_per_uplink"]) == 1000 and len(row["flows_per_uplink"]) == 16
    assert _finding(result, "flow_mmr")["values"][0] > 1.1          # the P4 hash is uneven
    assert _finding(result, "uplink_max_mean")["values"][0] > 1.5   # 4 ring flows collide on 16 uplinks
    assert row["status"] == "ok"
    # the findings are a function of the stored figures: judged again, they come out the same
    from testbed.labs.virtual import rejudge
    (tmp_path / "ecmp" / "findings.md").unlink()
    again = rejudge(VIRTUAL, tmp_path / "ecmp")
    assert again["findings"] == json.loads(json.dumps(result["findings"]))
    findings_md = (tmp_path / "ecmp" / "findings.md").read_text()
    assert "| seed 1 | seed 2 |" in findings_md
    assert "Per phase, seed 1:" in findings_md and "| ring-5tuple | 1000 |" in findings_md
    # the page gives each seed's time, not the lab's (under `lab all`, the time since every lab began)
    times = ", ".join(str(round(d["elapsed_s"])) for d in result["seeds_detail"])
    assert f"seeds 1, 2; {times} s of wall time a seed." in (tmp_path / "ecmp" / "index.html").read_text()


def test_qpscaling_raises_busbw_over_5tuple(tmp_path):
    from testbed.labs.qpscaling import VirtualQpScaling

    class Small(VirtualQpScaling):
        def shape(self, quick):
            return dict(super().shape(quick), spines=4, hosts_per_leaf=4)

        def sweep(self, quick):
            return [("5tuple", 1), ("qpn", 8)]
    result = _run(Small(), tmp_path)
    rows = result["seeds_detail"][0]["phases"]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert _finding(result, "best_gain")["values"][0] > 0.05
    assert rows[1]["uplink_max_mean"] < rows[0]["uplink_max_mean"]


def test_te_on_the_simulated_clock_beats_e_ecmp_and_withdraws_on_link_down(tmp_path):
    from testbed.labs.te import VIRTUAL
    result = _run(_small(VIRTUAL, spines=4, hosts_per_leaf=4), tmp_path)
    rows = {r["phase"]: r for r in result["seeds_detail"][0]["phases"]}
    assert all(r["status"] == "ok" for r in rows.values())
    assert rows["te"]["overrides"] == 8 and rows["te"]["te_runs"] >= 1
    assert rows["te"]["busbw_gbps"] > rows["e-ecmp"]["busbw_gbps"]
    assert rows["te-link-down"]["te_withdrawn"] > 0
    assert all(r["lossless_drops"] == 0 for r in rows.values())


def test_virtual_te_reads_counters_on_the_simulated_clock(tmp_path):
    """Rates come from counter samples stamped with simulated seconds (no wall clock)."""
    from testbed.labs.base import build_clos
    from testbed.labs.te import VIRTUAL
    from testbed.net.experiment import Experiment
    from testbed.te.virtual import VirtualTE
    lab = _small(VIRTUAL, spines=2, hosts_per_leaf=2)
    clos = build_clos(lab, True)
    with Experiment(clos, out=tmp_path, pcap=False, clock="virtual", seed=SEED, log=lambda m: None,
                    port_defaults=dict(lab.port_defaults)) as exp:
        te = VirtualTE(exp.fabric, interval_s=50e-6)
        sample = te.service.programmer.read_counters()
        assert sample.at == exp.fabric.clock()
        te.start()
        exp.fabric.scheduler.run(until=exp.fabric.clock() + 120e-6)
        assert len(te.runs) == 1          # the fabric is idle: later runs are skipped, not repeated
        exp.fabric.link_status("leaf1", "spine1", False)
        assert te.link_events[-1]["link"] == "leaf1-spine1" and not te.link_events[-1]["up"]
        te.stop()


def test_incast_gather_admits_without_pfc_and_a_slow_receiver_pauses_only_its_leaf(tmp_path):
    from testbed.labs.incast import VirtualIncast

    class Small(VirtualIncast):
        def shape(self, quick):
            return dict(super().shape(quick), leaves=5)

        def phases(self, clos, quick):
            return super().phases(clos, quick)[1:]      # the two Gather phases

    result = _run(Small(), tmp_path)
    rows = {r["phase"]: r for r in result["seeds_detail"][0]["phases"]}
    assert set(rows) == {"gather-cts", "gather-cts-slow-rx"} and rows["gather-cts"]["incast"] == "4:1"
    assert rows["gather-cts"]["pfc_frames"] == 0
    slow = rows["gather-cts-slow-rx"]
    assert slow["receiver_pause_share"] > 0.5 and slow["down_pfc"] == 0
    assert all(r["lossless_drops"] == 0 and r["status"] == "ok" for r in rows.values())


def test_ecn_tight_thresholds_mark_and_slow_the_allreduce(tmp_path):
    from testbed.labs.ecn import VIRTUAL
    # 6 ring flows per leaf onto 2 uplinks: 3+ collide, so the uplink queue passes 300 KB
    # (each ingress port holds at most its PFC XOFF, a few frames)
    result = _run(_small(VIRTUAL, spines=2, hosts_per_leaf=6), tmp_path)
    assert _finding(result, "tight_marks")["values"][0] > 0
    assert _finding(result, "slowdown")["values"][0] > 0


def test_flowlet_small_gaps_reorder_and_gaps_beyond_the_rtt_do_not(tmp_path):
    from testbed.labs.flowlet import VirtualFlowlets

    class Small(VirtualFlowlets):
        def shape(self, quick):
            return dict(super().shape(quick), spines=4, hosts_per_leaf=4)

        def gaps(self, quick):
            return [1, 256]
    result = _run(Small(), tmp_path)
    rows = {r["gap_us"]: r for r in result["seeds_detail"][0]["phases"]}
    assert rows[1]["oos"] > 0 and rows[256]["oos"] == 0
    assert rows[256]["gap_us"] > rows[256]["rtt_us"] / 2
    assert _finding(result, "oos_fall")["values"][0] > 1
    # the mechanism: the 1 us phase reordered, so some path queued longer than its gap; the
    # queues (read from the switches' watermarks) stay far below 256 us, and above them nothing reorders
    assert rows[1]["path_queue_us"] > 1
    assert 0 < rows[256]["path_queue_us"] < 256
    assert _finding(result, "oos_per_s_above_queueing")["values"][0] == 0
    assert "peak path queueing" in result["seeds_detail"][0]["notes"]["reordering"]


def test_subscription_1_2_beats_1_1_static_and_te_keeps_it(tmp_path):
    from testbed.labs.subscription import Subscription

    class Small(Subscription):
        def base_shape(self, quick):
            return dict(super().base_shape(quick), spines=4, hosts_per_leaf=4)
    result = _run(Small(), tmp_path)
    assert [r["status"] for r in result["seeds_detail"][0]["phases"]] == ["ok"] * 4
    assert _finding(result, "stage2_gain")["values"][0] > 0
    assert _finding(result, "stage4_vs_stage2")["values"][0] > -0.10



def test_watchdog_declares_storms_at_200ms_and_breaks_a_deadlock(tmp_path):
    """A stopped NIC's pause stalls the flows behind the same queues until the watchdog on its
    leaf fires, 200 ms after the pause began; a transient routing loop leaves four queues
    pausing each other: without a watchdog nothing is delivered to the end, with it the cycle
    is stormed at 200 ms and every byte arrives. Nothing lossless is dropped otherwise."""
    from testbed.labs import cli
    from testbed.labs.watchdog import Watchdog

    class Small(Watchdog):
        def shape(self, quick):
            return dict(super().shape(quick), hosts_per_leaf=2)

        def phases(self, clos, quick):
            keep = ("storm-leaf-only", "deadlock", "deadlock-no-watchdog")
            return [p for p in super().phases(clos, quick) if p.name in keep]
    result = _run(Small(), tmp_path)
    rows = {r["phase"]: r for r in result["seeds_detail"][0]["phases"]}
    storm = rows["storm-leaf-only"]
    assert storm["status"] == "ok" and 200 <= storm["detect_ms"] <= 201
    assert [s["queue"] for s in storm["storms"]] == [storm["bad_queue"]]       # the watchdog is on leaf2 only
    # the pause climbed to spine1 and leaf1's uplink; the bad NIC's port paused until it drained
    assert storm["paused_queues"] == 3 and storm["paused"][storm["bad_queue"]] > 299
    assert storm["victims_stalled_gbps"] < 0.01 * storm["victims_before_gbps"]
    assert 200 < storm["done_ms"] < 300        # the others resume once the watchdog fires, not at 300 ms
    off = rows["deadlock-no-watchdog"]
    assert off["status"] == "failed" and off["stormed"] == 0 and off["stall_ms"] >= 490
    assert all(off["paused"][q] > 490 for q in off["cycle"])    # four queues waiting on each other
    on = rows["deadlock"]
    assert on["status"] == "ok" and 200 <= on["detect_ms"] <= 201
    assert on["series"][0][1:] == [0, 0]       # bytes of this phase only, not the storm's before it
    # the first storm on the cycle releases it: no queue of it stays paused past ~200 ms
    assert set(on["cycle"]) & {s["queue"] for s in on["storms"]}
    assert all(200 <= on["paused"][q] < 201 for q in on["cycle"])
    assert all(r["lossless_drops"] == 0 for r in rows.values())
    assert _finding(result, "deadlock_detect_ms")["holds"] == [True]
    assert _finding(result, "deadlock_stall_ms")["holds"] == [True]
    assert cli._status(result) == 0            # the deadlock without a watchdog is meant to fail


def test_a_phase_sets_the_watchdog_per_switch():
    from testbed.net.experiment import ExperimentError, FabricSettings
    settings = FabricSettings(watchdog_s={"leaf2": 0.2}).check()
    assert settings.watchdog_for("leaf2", 0.0) == 0.2 and settings.watchdog_for("spine1", 0.5) == 0.5
    assert FabricSettings(watchdog_s=0).watchdog_for("leaf1", 0.2) == 0
    assert FabricSettings().watchdog_for("leaf1", 0.2) == 0.2
    with pytest.raises(ExperimentError, match="watchdog"):
        FabricSettings(watchdog_s={"leaf1": -1}).check()

# --- the workload pattern ------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["dense", "moe"])
def test_workload_iteration_conserves_bytes_and_mostly_moves_dp_gradients(preset):
    from traffic import collectives as C
    from traffic.workload import layout
    n, size = 16, 1 << 20
    sends, recvs = {}, {}
    for r in range(n):
        for ph in C.schedule("workload", r, n, size, 65536, preset=preset):
            for p, b in ph.sends:
                sends[(r, p)] = sends.get((r, p), 0) + b
            for p, b in ph.recvs:
                recvs[(p, r)] = recvs.get((p, r), 0) + b
    assert sends == recvs                      # every byte written is expected by its receiver
    lay = layout(n, preset)
    assert lay.tp * lay.pp * lay.dp == n
    dp_bytes = sum(C.expected_bytes("ring_allreduce", 0, lay.dp, int(size * lay.shares["dp"]), 65536)[0] for _ in [0])
    total = C.expected_bytes("workload", 0, n, size, 65536, preset=preset)[0]
    assert dp_bytes / total > 0.6              # elephant DP flows carry most of the bytes
    if preset == "moe":
        peers = C.peers("workload", 0, n, preset="moe")
        assert len(peers) < n - 1              # device-limited: not everyone talks to everyone


def test_rocelab_run_workload_moe_in_virtual_time(tmp_path):
    done = subprocess.run([ROCELAB, "run", "--clock", "virtual", "--spines", "2", "--leaves", "2",
                           "--hosts-per-leaf", "2", "--pattern", "workload", "--preset", "moe", "--size", "1M",
                           "--no-pcap", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["collective"]["status"] == "ok" and summary["config"]["job"]["pattern"] == "workload"


def test_preset_needs_the_workload_pattern():
    done = subprocess.run([ROCELAB, "run", "--clock", "virtual", "--pattern", "ring_allreduce", "--preset", "moe"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "preset" in done.stderr and "Traceback" not in done.stderr


# --- the command line ----------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["ecn", "--clock", "real"], "runs in virtual time only"),
    (["ecmp", "--seeds", "0"], "--seeds"),
    (["all", "--clock", "real"], "--clock real"),
    # options the other clock would silently ignore
    (["ecmp", "--clock", "real", "--seeds", "5"], "--seeds: virtual time only"),
    (["te", "--clock", "real", "--workers", "2"], "--workers: virtual time only"),
    (["ecmp", "--target", "bmv2"], "virtual time runs the engine target only"),
])
def test_lab_usage_errors_are_one_line(args, message):
    done = subprocess.run([ROCELAB, "lab", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_list_names_the_new_labs():
    done = subprocess.run([ROCELAB, "lab", "list"], capture_output=True, text=True, timeout=60)
    for lab in ("ecn", "subscription", "watchdog"):
        assert lab in done.stdout


# --- the page --------------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (testbed/install/apt-packages.txt)")
def test_lab_page_renders_in_headless_chromium(tmp_path):
    from testbed.labs.ecmp import VIRTUAL
    result = _run(_small(VIRTUAL, hosts_per_leaf=4), tmp_path)
    page = tmp_path / "ecmp" / "index.html"
    html = page.read_text()
    assert "<script" not in html and "http" not in html.split("<body>")[1].split("Made by")[0]
    assert html.count("data:image/png;base64,") == len(result["plots"]) == 2
    shot = tmp_path / "shot.png"
    base = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(base + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=90)
    assert "average MMR over 1.2" in dom.stdout and 'id="findings"' in dom.stdout
    subprocess.run(base + ["--window-size=1200,1800", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=90)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000     # a page with plots, not a blank one
    # `rocelab lab all`'s index: every lab's findings, a lab that failed named with its error
    from testbed.labs import report
    index = report.write_index_page([("ecmp", result, None), ("te", None, "exit status 2")], tmp_path / "ecmp",
                                    "rocelab lab all --quick", 12.0)
    dom = subprocess.run(base + ["--dump-dom", index.as_uri()], capture_output=True, text=True, timeout=90)
    assert 'href="ecmp/index.html"' in dom.stdout and "did not run: exit status 2" in dom.stdout
    assert dom.stdout.count("average MMR over 1.2") == 1


def test_a_guide_takes_the_measured_block_from_findings_md(tmp_path):
    from testbed.labs import guides
    (tmp_path / "g").mkdir()
    guide = tmp_path / "g" / "ecmp.md"
    guide.write_text(f"intro\n{guides.BEGIN}\nold figures\n{guides.END}\nafter\n")
    (tmp_path / "out" / "ecmp").mkdir(parents=True)
    (tmp_path / "out" / "ecmp" / "findings.md").write_text("| new | figures |\n")
    (tmp_path / "out" / "flowlet").mkdir()
    (tmp_path / "out" / "flowlet" / "findings.md").write_text("no guide for this one here\n")
    assert guides.update_all(tmp_path / "out", tmp_path / "g") == ["ecmp"]
    assert guide.read_text() == f"intro\n{guides.BEGIN}\n| new | figures |\n{guides.END}\nafter\n"
    guide.write_text("no markers\n")
    with pytest.raises(guides.GuideError, match="ecmp.md: no"):
        guides.update_all(tmp_path / "out", tmp_path / "g")


def test_the_guides_measured_line_gives_each_seeds_own_wall_time():
    # under `lab all` a lab's elapsed_s runs from the start of every lab: the ecmp guide said its
    # `--quick` run took 1089 s where each seed took about 20
    from testbed.labs.virtual import findings_markdown
    result = {"command": "rocelab lab ecmp --quick", "seeds": [1, 2], "elapsed_s": 848.1, "findings": [],
              "seeds_detail": [{"seed": 1, "elapsed_s": 17.2, "phases": []}, {"seed": 2, "elapsed_s": 18.9, "phases": []}],
              "columns": []}
    first = findings_markdown(result).splitlines()[0]
    assert "17, 19 s of wall time a seed" in first and "848" not in first, first
