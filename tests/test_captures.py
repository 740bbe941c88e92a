"""`rocelab captures` (testbed/labs/captures.py): a virtual-time run's captures read back per
phase. The go-back-N replay must count what the ranks' NICs counted, the phases must come
from their own stretch of the shared capture files, an idle path's one-way delay is the
wires' serialization and propagation, and bad input is one line naming the file."""
import json
import shutil

import pytest

from testbed.clos import ClosSpec, build
from testbed.labs import captures, production
from testbed.net.experiment import Experiment, FabricSettings, job_for
from testbed.sim import profile

RATE = profile.LINK_RATE_MBPS
PHASES = [("gap1us", FabricSettings(hash="flowlet", flowlet_gap_us=1)),
          ("gap256us", FabricSettings(hash="flowlet", flowlet_gap_us=256)),
          ("ecmp", FabricSettings(hash="5tuple"))]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Three phases of one ring on a 2:1 fabric (the flowlet lab's, smaller): ~6 s."""
    out = tmp_path_factory.mktemp("captures") / "run"
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, link_rate_mbps=RATE, oversubscription=2.0,
                          clock="virtual"))
    job = production.ring_job(clos, 512 << 10, seed=1)
    with Experiment(clos, out=out, pcap=True, clock="virtual", seed=1, log=lambda m: None,
                    port_defaults=production.PORTS) as exp:
        for name, settings in PHASES:
            assert exp.run_phase(name, job, settings, out=out / name)["status"] == "ok"
    return out, {p["phase"]: p for p in captures.analyse(out)["phases"]}


def _ranks(out, phase):
    return [json.loads(p.read_text()) for p in sorted((out / phase / "ranks").glob("rank*.json"))]


def test_the_go_back_n_replay_counts_what_the_ranks_counted(run):
    out, phases = run
    small, large = phases["gap1us"], phases["gap256us"]
    # a 1 us gap moves flows while their packets are queued: the receivers count OOS
    assert small["oos"] == small["ranks_oos"] > 0
    # behind the expected PSN is a duplicate, not OOS, for the NIC and for the replay alike
    assert small["duplicates"] == sum(r["counters"]["duplicates"] for r in _ranks(out, "gap1us")) > 0
    # a copy is a PSN that entered the fabric before: as many as the senders resent
    assert small["resent"] == sum(r["counters"]["retransmits"] for r in _ranks(out, "gap1us")) > 0
    assert small["oos_resent"] <= min(small["oos"], small["resent"])
    assert large["oos"] == large["ranks_oos"] == 0 and large["duplicates"] == 0
    for p in phases.values():
        assert p["undelivered"] == p["unmatched"] == 0      # lossless, and every packet followed


def test_each_phase_is_read_from_its_own_stretch_of_the_captures(run):
    out, phases = run
    assert list(phases) == [name for name, _ in PHASES]       # in the order they ran
    for name, p in phases.items():
        summary = json.loads((out / name / "summary.json").read_text())
        assert summary["sim_start_s"] < summary["sim_end_s"] == pytest.approx(
            summary["sim_start_s"] + summary["duration_s"], abs=2e-9)     # each rounded to 1 ns
        # the data packets the NICs sent in this phase (resends included), no more, no less
        sent = sum(q["tx_packets"] for r in _ranks(out, name) for q in r["qps"])
        assert p["data_packets"] == sent


def test_five_tuple_hashing_never_moves_a_flow_and_a_small_flowlet_gap_does(run):
    _, phases = run
    ecmp, small, large = phases["ecmp"], phases["gap1us"], phases["gap256us"]
    assert ecmp["cross_leaf_flows"] > 0 and ecmp["path_changes"] == ecmp["flows_moved"] == 0
    assert small["path_changes"] >= small["flows_moved"] > 0
    # a flow moves only after pausing longer than the gap: none paused 256 us
    assert large["pause_max_us"] < 256 and large["path_changes"] == 0
    # queueing is the one-way delay beyond the wires': it never goes below zero
    assert all(p["data_queueing_peak_us"] >= 0 for p in phases.values())
    assert small["data_oneway_peak_us"] >= small["data_oneway_median_us"] > 0


def test_an_idle_paths_one_way_delay_is_serialization_plus_propagation(tmp_path):
    clos = build(ClosSpec(spines=1, leaves=2, hosts_per_leaf=1, link_rate_mbps=RATE, clock="virtual"))
    job = job_for(clos, "stream", [256], mtu=profile.NIC_MTU, cts=False, iterations=1)
    with Experiment(clos, out=tmp_path / "idle", pcap=True, clock="virtual", log=lambda m: None) as exp:
        exp.run_phase("idle", job, FabricSettings(), out=tmp_path / "idle")
    (phase,) = captures.analyse(tmp_path / "idle")["phases"]
    # leaf1 -> spine1 -> leaf2: two wires, each frame stored and forwarded (serialized) on each,
    # plus 100 m of fiber each; a switch adds nothing when its queues are empty
    wires_us = 2 * profile.FABRIC_CABLE_M * profile.NS_PER_METER / 1000
    data = 256 + 58 + 16 + 4            # WRITE ONLY with RETH and immediate
    ack = 14 + 20 + 8 + 12 + 4 + 4
    assert phase["data_oneway_median_us"] == phase["data_oneway_peak_us"] == pytest.approx(
        2 * data * 8 / RATE + wires_us, abs=1e-3)
    assert phase["ack_oneway_median_us"] == pytest.approx(2 * ack * 8 / RATE + wires_us, abs=1e-3)
    assert phase["data_queueing_peak_us"] == pytest.approx(0, abs=1e-3)
    assert phase["oos"] == phase["path_changes"] == 0


def _cli(capsys, *args):
    from testbed.cli import main
    status = main(["captures", *map(str, args)])
    err = capsys.readouterr().err
    return status, err


def test_bad_input_is_one_line_naming_the_file(run, tmp_path, capsys):
    out, _ = run
    status, err = _cli(capsys, tmp_path / "nowhere")          # a usage error, as elsewhere in rocelab
    assert status == 2 and err.count("\n") == 1 and "nowhere' is not a directory" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    status, err = _cli(capsys, empty)
    assert status == 1 and err.count("\n") == 1 and str(empty) in err and "no summary.json with captures" in err

    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    pcap = copy / "pcap" / "leaf1-eth1_in.pcap"
    pcap.write_bytes(pcap.read_bytes()[:-10])        # a frame cut short, as a killed writer leaves it
    status, err = _cli(capsys, copy)
    assert status == 1 and err.count("\n") == 1 and f"{pcap}: truncated after" in err

    pcap.write_bytes(b"not a capture: a text file of some length\n")
    status, err = _cli(capsys, copy)
    assert status == 1 and err.count("\n") == 1 and f"{pcap}: not a little-endian pcap file" in err

    (copy / "pcap" / "leaf2-eth3_out.pcap").unlink()
    shutil.copy(out / "pcap" / "leaf1-eth1_in.pcap", pcap)
    status, err = _cli(capsys, copy)
    assert status == 1 and err.count("\n") == 1 and "leaf2-eth3_out.pcap: No such file" in err

    summary = copy / "ecmp" / "summary.json"
    data = json.loads(summary.read_text())
    del data["sim_start_s"]
    summary.write_text(json.dumps(data))
    status, err = _cli(capsys, copy)
    assert status == 1 and err.count("\n") == 1 and f"{summary}: no sim_start_s" in err


def test_the_cli_prints_the_table_and_the_flowlet_lab_puts_it_in_its_report(run, capsys, monkeypatch):
    from testbed.cli import main
    from testbed.labs import flowlet, virtual
    out, phases = run
    assert main(["captures", str(out), "--markdown"]) == 0
    printed = capsys.readouterr().out
    assert "| phase | half the measured RTT (us) |" in printed
    assert f"| gap1us | {phases['gap1us']['half_rtt_us']:.1f} |" in printed

    # the lab's seed: its rows (as run_lab returns them), then the captures read into them
    rows = [{"phase": name, "dir": name, "gap_us": s.flowlet_gap_us, "status": "ok"} for name, s in PHASES[:2]]
    monkeypatch.setattr(virtual.VirtualLab, "run_seed",
                        lambda self, o, seed, quick, pcap=True, log=print: {"phases": rows, "notes": {}, "errors": []})
    lab = flowlet.VirtualFlowlets()
    seed = lab.run_seed(out, 1, True)
    assert seed["errors"] == [] and seed["phases"][0]["captures"]["oos"] == phases["gap1us"]["oos"]
    assert json.loads((out / "lab.json").read_text())["phases"][0]["captures"]["oos"] == phases["gap1us"]["oos"]
    result = {"seeds": [1], "command": "rocelab lab flowlet", "findings": [], "columns": [],
              "seeds_detail": [{"seed": 1, "dir": "seed1", "phases": seed["phases"], "notes": seed["notes"]}]}
    result["tables"] = virtual._tables(lab, result, "OUT")
    md = virtual.findings_markdown(result)
    assert "Seed 1's captures, per gap" in md and "(`rocelab captures OUT/seed1`):" in md
    assert f"| 1 | {phases['gap1us']['half_rtt_us']:.1f} |" in md
