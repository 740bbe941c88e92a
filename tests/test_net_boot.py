"""A 2x2x2 Clos in Mininet: boots, pingall 0% loss, pcaps open in tshark, counters read
back, and nothing is left after teardown, Ctrl-C/SIGTERM, or a killed run + `rocelab clean`.

Names are unique to this test process (interface prefix, P4Runtime ports, ledger dir),
so it cannot touch anything else on the machine.
"""
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed import REPO_ROOT
from testbed.clos import ClosSpec, build

from port_blocks import grpc_base

pytestmark = [
    pytest.mark.mininet,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and veths"),
]

PREFIX = f"rn{os.getpid() % 100000}"
GRPC_BASE = grpc_base(slot=0)
ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
TOPO = str(REPO_ROOT / "topologies" / "clos.py")


def _our_interfaces(prefix=PREFIX):
    return sorted(n for n in os.listdir("/sys/class/net") if n.startswith(prefix))


def _alive(pid, start):
    from testbed.cleanup import proc_start_time
    st = proc_start_time(pid)
    if st is None or st != start:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _recorded(state_dir):
    """Everything the ledgers in `state_dir` list right now."""
    pids, links = [], []
    for path in Path(state_dir).glob("*.json"):
        entries = json.loads(path.read_text())["entries"]
        pids += [(e["name"], e["start"]) for e in entries["pid"]]
        links += [e["name"] for e in entries["link"]]
    return pids, links


def _namespaces_of(pids):
    from testbed.net.lifecycle import netns_id
    # ours is the root namespace (/proc/1/ns may be unreadable, even to root, in a sandbox)
    root = {netns_id(1), netns_id(os.getpid())}
    return {ns for ns in (netns_id(p) for p, _ in pids) if ns and ns not in root}


def _ticks_now():
    """Now, in the clock ticks since boot that /proc/PID/stat start times use."""
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _assert_nothing_left(state_dir, pids, namespaces, cutoff, prefix=PREFIX):
    """Nothing recorded is alive and no process that existed at `cutoff` (taken before
    teardown began) is still inside one of our namespaces. Only processes that old count:
    once ours are gone the kernel reuses their inode numbers, and another run going on
    at the same time may already have a new namespace with the same name."""
    from testbed.cleanup import proc_start_time
    from testbed.net.lifecycle import pids_in_netns
    assert _our_interfaces(prefix) == []
    assert [p for p, st in pids if _alive(p, st)] == []
    left = {ns: [p for p in pids_in_netns(ns) if (proc_start_time(p) or cutoff + 1) <= cutoff] for ns in namespaces}
    assert {ns: found for ns, found in left.items() if found} == {}
    assert list(Path(state_dir).glob("*.json")) == []


def _engine_available():
    import importlib
    missing = []
    for module, name in (("testbed.switch.cli", "register"), ("testbed.control", "FabricController"),
                         ("testbed.p4engine", "compile_file")):
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{module}.{name} ({exc})")
    return missing


# --- the engine fabric ------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine_fabric(tmp_path_factory):
    missing = _engine_available()
    if missing:
        pytest.skip("engine switch/controller not in this checkout yet: " + ", ".join(missing))
    from testbed.net.fabric import FabricNet
    out = tmp_path_factory.mktemp("engine")
    state = out / "state"
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, grpc_base_port=GRPC_BASE))
    fabric = FabricNet(clos, target="engine", out_dir=out, name_prefix=PREFIX, state_dir=state)
    with fabric:
        pids, links = _recorded(state)
        fabric.boot_records = (state, pids, links, _namespaces_of(pids))
        yield fabric


def test_engine_clos_pingall_has_no_loss(engine_fabric):
    sent, lost, failures = engine_fabric.pingall()
    assert sent == 4 * 3
    assert lost == 0, failures


def test_engine_counters_read_back(engine_fabric):
    from testbed.net import telemetry
    engine_fabric.pingall()
    leaf1 = telemetry.port_counters(engine_fabric, "leaf1")
    assert set(leaf1) >= {1, 2, 3, 4}
    # h1 and h2 hang off ports 1 and 2; each answered pings from three peers
    assert leaf1[1]["tx_packets"] >= 3 and leaf1[2]["tx_packets"] >= 3
    uplinks = leaf1[3]["tx_packets"] + leaf1[4]["tx_packets"]
    assert uplinks >= 4  # h1/h2 -> h3/h4 echo requests and replies leave through the spines
    p4 = engine_fabric.controller.read_counters()
    assert p4, "the controller read no P4 counters back"


def test_engine_pcaps_open_in_tshark(engine_fabric):
    if not shutil.which("tshark"):
        pytest.fail("tshark is not installed (make setup installs it)")
    engine_fabric.pingall()
    time.sleep(1.2)  # the switch flushes captures every second
    pcaps = sorted(Path(engine_fabric.pcap_dir).glob("*.pcap"))
    assert pcaps, f"no pcaps under {engine_fabric.pcap_dir}"
    icmp = 0
    for pcap in pcaps:
        res = subprocess.run(["tshark", "-n", "-r", str(pcap), "-Y", "icmp", "-T", "fields", "-e", "icmp.type"],
                             capture_output=True, text=True)
        assert res.returncode == 0, f"{pcap.name}: {res.stderr}"
        icmp += len(res.stdout.split())
    assert icmp >= 12


def test_engine_cli_fabric_commands_reach_the_switches(engine_fabric, tmp_path, capsys):
    from testbed.control.knobs import EcnProfile
    from testbed.net.fabric_cli import FabricCLI
    script = tmp_path / "cmds"
    script.write_text("stats leaf1\nqueues leaf1\nhash qpn\necn 4 16 0.5\npfc 30 15\nflowlet_gap 300\n"
                      "hash bogus\nlink leaf1 spine1 down\n")
    ctl = engine_fabric.controller
    devnull = open(os.devnull)  # the CLI polls stdin even when it runs a script
    try:
        FabricCLI(engine_fabric, stdin=devnull, script=str(script))
        out = capsys.readouterr().out
        k = ctl.get_knobs("spine2")
        assert (k.hash_mode, k.qp_aware, k.flowlet_gap_us) == ("qpn", True, 300)
        assert k.ecn[3] == EcnProfile(4, 16, 0.5) and (k.pfc[3].xoff, k.pfc[3].xon) == (30, 15)
        assert "usage: hash 5tuple|qpn|flowlet" in out
        assert "port   1  rx" in out and "leaf1" in out
        # per lossless PG: its high-water mark, headroom drops (none) and watchdog counters
        assert "prio 3  PG max" in out and "headroom drops 0" in out and "watchdog storms 0" in out
        # the link is down in the kernel and the controller routes around it
        assert "state DOWN" in subprocess.run(["ip", "link", "show", engine_fabric.mn["leaf1"].intfs[3].name],
                                              capture_output=True, text=True).stdout
        assert [ports for prefix, _rid, ports, _g in ctl.route_table("leaf1") if prefix == "10.1.2.0/24"] == [[4]]
        sent, lost, failures = engine_fabric.pingall()
        assert lost == 0, failures
    finally:
        script.write_text("link leaf1 spine1 up\nhash 5tuple\n")
        FabricCLI(engine_fabric, stdin=devnull, script=str(script))
        devnull.close()
    assert ctl.get_knobs("leaf1").hash_mode == "5tuple"
    assert [ports for prefix, _rid, ports, _g in ctl.route_table("leaf1") if prefix == "10.1.2.0/24"] == [[3, 4]]


def test_engine_teardown_leaves_nothing(engine_fabric):
    # runs last in this module: stop() is idempotent, the fixture's exit finds it done
    cutoff = _ticks_now()
    engine_fabric.stop()
    state, pids, links, namespaces = engine_fabric.boot_records
    assert pids and links and namespaces
    _assert_nothing_left(state, pids, namespaces, cutoff)


# --- a killed run, Ctrl-C and SIGTERM -----------------------------------------------------

def _start_topology(tmp_path, target, extra=()):
    state = tmp_path / "state"
    env = dict(os.environ, ROCELAB_STATE_DIR=str(state))
    cmd = [sys.executable, TOPO, "--target", target, "--name-prefix", PREFIX, "--grpc-base-port", str(GRPC_BASE),
           "--out", str(tmp_path / "out"), "--cli", *extra]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, text=True, start_new_session=True)
    output = ""
    deadline = time.monotonic() + 60
    while "rocelab>" not in output and time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            output += os.read(proc.stdout.fileno(), 4096).decode(errors="replace")
    assert "rocelab>" in output, output
    return proc, state, env


def _engine_or_skip():
    missing = _engine_available()
    if missing:
        pytest.skip("engine switch/controller not in this checkout yet: " + ", ".join(missing))


@pytest.mark.parametrize("target", ["engine", "kernel"])
def test_killed_run_then_rocelab_clean_leaves_nothing(tmp_path, target):
    if target == "engine":
        _engine_or_skip()
    proc, state, env = _start_topology(tmp_path, target)
    pids, links = _recorded(state)
    namespaces = _namespaces_of(pids)
    assert len(namespaces) >= 4  # every host (and, on kernel, every router) has its own
    cutoff = _ticks_now()
    os.kill(proc.pid, signal.SIGKILL)  # no teardown at all
    proc.wait()
    assert any(_alive(p, st) for p, st in pids) or _our_interfaces()
    res = subprocess.run([ROCELAB, "clean"], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "removed" in res.stdout
    time.sleep(0.2)
    _assert_nothing_left(state, pids, namespaces, cutoff)


def test_sigterm_in_the_cli_tears_everything_down(tmp_path):
    proc, state, _env = _start_topology(tmp_path, "kernel")
    pids, _links = _recorded(state)
    namespaces = _namespaces_of(pids)
    cutoff = _ticks_now()
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143, out
    _assert_nothing_left(state, pids, namespaces, cutoff)


def _marked_processes(mark):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.mark.parametrize("delay", [0.4, 0.7, 1.0])
def test_ctrl_c_at_any_point_of_boot_leaves_nothing(tmp_path, delay):
    """Ctrl-C lands somewhere in start-up, boot, pingall or teardown: whatever it hits,
    no interface, ledger or process (found by an environment mark every child inherits)
    is left behind."""
    mark = f"ROCELAB_TEST_MARK={PREFIX}-{delay}"
    env = dict(os.environ, ROCELAB_STATE_DIR=str(tmp_path / "state"), ROCELAB_TEST_MARK=mark.split("=")[1])
    proc = subprocess.Popen([sys.executable, TOPO, "--target", "kernel", "--name-prefix", PREFIX,
                             "--out", str(tmp_path / "out"), "--test", "pingall"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode in (0, 130), out
    assert "Traceback" not in out
    time.sleep(0.1)
    assert _marked_processes(mark.encode()) == []
    assert _our_interfaces() == [] and list((tmp_path / "state").glob("*.json")) == []


def test_kernel_stand_in_boots_and_pings(tmp_path):
    """The same host plan works through plain Linux routing (no P4): checks the Mininet side."""
    from testbed.net.fabric import FabricNet
    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2, grpc_base_port=GRPC_BASE))
    with FabricNet(clos, target="kernel", out_dir=tmp_path, state_dir=tmp_path / "state", pcap=False) as fabric:
        pids, _ = _recorded(tmp_path / "state")
        namespaces = _namespaces_of(pids)
        sent, lost, failures = fabric.pingall()
        assert (sent, lost) == (12, 0), failures
        h1 = fabric.host("h1")
        # hosts send everything to their leaf port's MAC and never ARP
        assert "PERMANENT" in h1.cmd("ip neigh show 10.1.1.254")
        assert h1.cmd("sysctl -n net.ipv6.conf.all.disable_ipv6").strip() == "1"
        assert h1.cmd("cat /sys/class/net/h1-eth0/mtu").strip() == "1500"
        cutoff = _ticks_now()
    _assert_nothing_left(tmp_path / "state", pids, namespaces, cutoff)


def test_bad_shape_is_rejected_before_anything_exists(tmp_path):
    env = dict(os.environ, ROCELAB_STATE_DIR=str(tmp_path / "state"))
    res = subprocess.run([sys.executable, TOPO, "--spines", "2", "--leaves", "3", "--rails", "2",
                          "--name-prefix", PREFIX], capture_output=True, text=True, env=env)
    assert res.returncode == 2
    assert "--rails 2 must divide --leaves 3" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "state").exists() and _our_interfaces() == []


# Names and ports of their own: the module's engine_fabric may still be up when these run alone.
LONE_PREFIX = f"rq{os.getpid() % 100000}"
LONE_GRPC_BASE = grpc_base(slot=6)


@pytest.mark.parametrize("server, offset", [("P4Runtime", 0), ("agent", 100)])
def test_a_taken_switch_port_is_refused_before_anything_exists(tmp_path, server, offset):
    """A switch whose agent port was taken used to exit after the fabric saw it ready: both of
    an engine switch's ports are checked up front."""
    from testbed.net.fabric import FabricError, FabricNet
    clos = build(ClosSpec(spines=1, leaves=2, hosts_per_leaf=1, grpc_base_port=LONE_GRPC_BASE))
    port = clos.switches["leaf2"].grpc_port + offset
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)    # as servers do: TIME_WAITs of earlier tests
        taken.bind(("127.0.0.1", port))
        taken.listen()
        with pytest.raises(FabricError, match=rf"^leaf2: {server} port {port} is in use"):
            with FabricNet(clos, target="engine", out_dir=tmp_path / "out", name_prefix=LONE_PREFIX,
                           state_dir=tmp_path / "state"):
                pass
    assert not (tmp_path / "state").exists() and not (tmp_path / "out").exists() and _our_interfaces(LONE_PREFIX) == []


def test_a_switch_that_dies_after_answering_is_named_with_its_log(tmp_path, monkeypatch):
    """CI saw 'spine2: no P4Runtime server answers ... no arbitration answer' for a switch that
    had exited: the fabric says which switch process exited, how, and what it logged last."""
    from testbed.net import nodes
    from testbed.net.fabric import FabricNet
    from testbed.net.fabric_errors import SwitchStartError
    ready = nodes.P4Switch.wait_ready

    def ready_then_killed(node, deadline):
        ready(node, deadline)
        if node.name == "leaf2":
            # The P4Runtime port answers a moment before the switch logs its ports line.
            while "rocelab switch: ports" not in node.log_tail() and time.monotonic() < deadline:
                time.sleep(0.02)
            node.proc.kill()
            node.proc.wait()
    monkeypatch.setattr(nodes.P4Switch, "wait_ready", ready_then_killed)
    clos = build(ClosSpec(spines=1, leaves=2, hosts_per_leaf=1, grpc_base_port=LONE_GRPC_BASE))
    before = set(threading.enumerate())
    with pytest.raises(SwitchStartError) as failure:
        with FabricNet(clos, target="engine", out_dir=tmp_path / "out", pcap=False, name_prefix=LONE_PREFIX,
                       state_dir=tmp_path / "state", controller_options={"connect_timeout": 1.0}):
            pass
    text = str(failure.value)
    assert text.startswith("leaf2: switch process exited while being programmed (status -9); end of ")
    assert "rocelab switch: ports" in text                     # its log's last lines
    assert _our_interfaces(LONE_PREFIX) == [] and not [t for t in set(threading.enumerate()) - before
                                                       if t.name.startswith("p4rt-client-")]
