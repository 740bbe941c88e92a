"""What the README tells a new user to type gives what the README says it gives.

The README's walk-throughs name ports and switches; these tests recompute them from the
project itself, so a change of the hash or the numbering that moves them fails here
rather than in front of a class."""
import re
from pathlib import Path

import pytest
from scapy.all import IP, UDP, Ether, Raw

from testbed.clos import ClosSpec, build

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _te_walkthrough():
    start = README.index("### Watch a TE override move a flow, by hand")
    return README[start:README.index("\n## ", start)]


@pytest.fixture(scope="module")
def leaf1_ecmp():
    """Which uplink leaf1 of the walk-through's Clos gives a UDP flow, as booted by
    topologies/clos.py (seed 0: every switch's hash seed is its device id, in either clock)."""
    from testbed.sim.fabric import SimFabric

    clos = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2))
    leaf = clos.switches["leaf1"]
    with SimFabric(clos, pcap=False) as fabric:
        switch = fabric.switch("leaf1").switch

        def uplink(host, dst, sport):
            nic = clos.hosts[host].nics[0]
            frame = (Ether(src=nic.mac, dst=nic.gateway_mac) / IP(src=nic.ip, dst=dst)
                     / UDP(sport=sport, dport=4791) / Raw(bytes(1000)))
            with switch.lock:
                out = switch.pipeline.process(nic.leaf_port, bytes(frame), 0)
            assert len(out) == 1, out
            port = out[0][0]
            return port, leaf.ports[port].peer

        yield uplink


def test_the_te_walkthrough_pins_the_flow_to_the_uplink_ecmp_did_not_pick(leaf1_ecmp):
    text = _te_walkthrough()
    flow = re.search(r"rocelab> h1 python3 .*s\.bind\(\('',(\d+)\)\).*\('([\d.]+)',4791\)", text)
    sport, dst = int(flow.group(1)), flow.group(2)
    picked, _spine = leaf1_ecmp("h1", dst, sport)
    said = re.search(r"ECMP put the flow on one uplink \(port (\d+)", text)
    assert said and int(said.group(1)) == picked
    override = re.search(r"rocelab te override add leaf1 1 10\.1\.2\.0/24 (\d+)", text)
    pinned = int(override.group(1))
    assert pinned in (3, 4) and pinned != picked
    # the link the walk-through takes down is the one the override uses
    spine_of_pinned = build(ClosSpec(spines=2, leaves=2, hosts_per_leaf=2)).switches["leaf1"].ports[pinned].peer
    downs = set(re.findall(r"`link leaf1 (spine\d) (?:down|up)`", text))
    assert downs == {spine_of_pinned}


def test_the_te_walkthrough_flows_that_ecmp_collides_do_collide(leaf1_ecmp):
    text = _te_walkthrough()
    said = re.search(r"two flows that ECMP collides\s+on port (\d+) \(the flow above from h1 and, at the\s+same "
                     r"time, the same command from h2 to ([\d.]+);", text)
    assert said, "the walk-through no longer names the colliding flows"
    port, dst2 = int(said.group(1)), said.group(2)
    flow = re.search(r"rocelab> h1 python3 .*s\.bind\(\('',(\d+)\)\).*\('([\d.]+)',4791\)", text)
    sport = int(flow.group(1))
    assert leaf1_ecmp("h1", flow.group(2), sport)[0] == port
    assert leaf1_ecmp("h2", dst2, sport)[0] == port


GUIDES = sorted((Path(__file__).resolve().parent.parent / "topologies" / "labs").glob("*.md"))


def test_the_capture_files_the_guides_name_are_the_ones_a_run_writes(tmp_path):
    # the guides sent students to `leaf1-eth5.pcap` and to `gapNus/pcap/`, which no run writes:
    # a fabric boot captures every port once, <iface>_in/_out.pcap under OUT/pcap/ (seedN/pcap/)
    from testbed.switch.pcap import PortCaptures

    named = {(guide.name, name) for guide in GUIDES for name in re.findall(r"`([\w.-]+\.pcap)`", guide.read_text())}
    assert named, "the guides no longer name a capture file"
    for guide, name in named:
        iface = re.match(r"([a-z]+\d+-eth\d+)", name).group(1)
        captures = PortCaptures(str(tmp_path), {1: iface})
        captures.close()
        assert (tmp_path / name).is_file(), (guide, name, sorted(p.name for p in tmp_path.iterdir()))
    for guide in GUIDES:
        assert not re.findall(r"`[\w-]+/pcap/`", guide.read_text()), f"{guide.name}: a phase has no pcap/ of its own"


def test_the_report_directories_the_docs_write_to_are_ignored_by_git():
    # the README's sweep writes sweeps/qps: it showed up as untracked files in the checkout
    import shutil
    import subprocess
    repo = Path(__file__).resolve().parent.parent
    if not (repo / ".git").exists() or not shutil.which("git"):
        pytest.skip("not a git checkout")
    texts = [README] + [guide.read_text() for guide in GUIDES]
    outs = sorted({m for text in texts for m in re.findall(r"--out ([\w.-]+/[\w./-]+)", text)})
    assert "sweeps/qps" in outs and "runs/rt" in outs
    for out in outs:
        ignored = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", f"{out}/summary.json"])
        assert ignored.returncode == 0, f"{out} is not ignored by git"


def test_the_programs_the_readme_runs_are_installed_by_setup():
    # `sudo .venv/bin/rocelab run ...` on a minimal Debian run as root: "sudo: command not found"
    repo = Path(__file__).resolve().parent.parent
    listed = (repo / "testbed" / "install" / "apt-packages.txt").read_text()
    packages = {line.split("#")[0].strip() for line in listed.splitlines()} - {""}
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    commands = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    assert any(c.startswith("sudo ") for c in commands)
    needs = {"sudo": "sudo", "tshark": "tshark", "tcpdump": "tcpdump", "make": "make"}
    for command in commands:
        first = command.split()[0] if command else ""
        if first in needs:
            assert needs[first] in packages, (command, needs[first])
    # the CLI the README opens keeps Mininet's commands: `h1 ping h2`, pingpair, pingallfull
    # said "bash: ping: command not found" on a minimal Debian
    assert "iputils-ping" in packages


class _Host:
    """A Mininet host as FabricCLI's iperf uses it: cmd() in its shell, IP()."""

    def __init__(self, name, ip, replies):
        self.name, self.ip, self.replies, self.commands = name, ip, replies, []

    def IP(self):
        return self.ip

    def cmd(self, command):
        self.commands.append(command)
        for start, reply in self.replies:
            if command.startswith(start):
                return reply
        return ""


def test_the_cli_iperf_stops_only_its_own_server(capsys):
    # Mininet's iperf (listed by the CLI's `help`) hung on Debian's iperf 2.1.8, after running
    # `killall -9 iperf` in a host shell: every iperf process on the machine
    from types import SimpleNamespace
    from testbed.net.fabric_cli import FabricCLI
    h1 = _Host("h1", "10.1.1.1", [("iperf -c 10.1.2.1 -p 5001 -t 5", "[  1] 0.0-5.0 sec  2.9 MBytes  4.81 Mbits/sec\n")])
    h3 = _Host("h3", "10.1.2.1", [("iperf -s -p 5001", "rocelab-pid=4242\n")])
    cli = FabricCLI.__new__(FabricCLI)          # no cmdloop: the command alone
    cli.mn = type("Net", (), {"hosts": [h1, h3], "__getitem__": lambda self, n: {"h1": h1, "h3": h3}[n]})()
    cli.fabric = SimpleNamespace(ledger=None)
    cli.do_iperf("h1 h3")
    out = capsys.readouterr().out
    assert "4.81 Mbits/sec" in out
    everything = h1.commands + h3.commands
    assert not [c for c in everything if "killall" in c or "pkill" in c], everything
    assert h3.commands[-1].startswith("kill 4242")
    cli.do_iperf("h1 h9")
    assert "usage: iperf [HOST1 HOST2] (hosts: h1 h3)" in capsys.readouterr().out
    cli.do_iperfudp("5M h1 h3")
    assert any(c.startswith("iperf -s -p 5001 -u -b 5M") for c in h3.commands)


def test_the_cli_link_command_names_a_wrong_node_once(capsys):
    from testbed.net.fabric_cli import FabricCLI
    leaf1, spine1 = object(), object()
    net = type("Net", (), {"nameToNode": {"leaf1": leaf1, "spine1": spine1, "h1": object()},
                           "__getitem__": lambda self, n: self.nameToNode[n],
                           "linksBetween": lambda self, a, b: ["l"] if {a, b} == {leaf1, spine1} else []})()
    cli = FabricCLI.__new__(FabricCLI)
    cli.mn, cli.fabric = net, None      # neither Mininet nor the controller may be reached
    cli.do_link("leaf1 spine9 down")
    cli.do_link("leaf1 h1 down")
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["*** link: no node named spine9 (have: leaf1 spine1 h1)",
                     "*** link: leaf1 and h1 are not linked (`fabric` shows the links)"], lines


def test_no_doc_or_help_says_sudo_rocelab(capsys):
    # sudo resets PATH (Debian's secure_path): `sudo rocelab lab ecmp --clock real` is "command
    # not found" even with the venv activated; the README says `sudo .venv/bin/rocelab`
    from testbed.cli import main
    repo = Path(__file__).resolve().parent.parent
    texts = {"README.md": README, **{g.name: g.read_text() for g in GUIDES}}
    for group in (["run"], ["lab"], ["lab", "list"], ["sweep"], ["demo"], ["te"]):
        try:
            main([*group, "--help"] if group != ["lab", "list"] else group)
        except SystemExit:
            pass
        texts[f"rocelab {' '.join(group)} --help"] = capsys.readouterr().out
    for source in sorted((repo / "topologies").glob("*.py")):
        texts[source.name] = source.read_text()
    said = [name for name, text in texts.items() if re.search(r"sudo rocelab\b", text)]
    assert not said, said


def test_the_traffic_help_and_the_readme_name_every_pattern(capsys):
    from testbed.cli import main
    from traffic.collectives import PATTERNS
    with pytest.raises(SystemExit):
        main(["traffic", "--help"])
    shown = capsys.readouterr().out
    listed = shown[shown.index("patterns:"):shown.index("every other key")].split()
    job_text = README[README.index("A job is JSON"):README.index("`sizes` in bytes")]
    for pattern in PATTERNS:
        assert pattern in listed, pattern
        assert f"`{pattern}`" in job_text, pattern
