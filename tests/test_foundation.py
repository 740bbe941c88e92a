"""The foundation: the rocelab command and the cleanup ledger."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from testbed import cleanup
from testbed.cli import GROUPS

ROCELAB = os.path.join(os.path.dirname(sys.executable), "rocelab")
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for veths and namespaces")


def test_help_lists_every_group():
    out = subprocess.run([ROCELAB, "--help"], capture_output=True, text=True, check=True).stdout
    for group in GROUPS:
        assert group in out


def test_the_one_line_helps_of_lab_and_bench_name_every_lab_and_benchmark(capsys):
    # `rocelab --help` named five of the eight labs and six of the seven benchmarks
    from testbed.bench import BENCHES
    from testbed.labs.cli import LABS, list_labs
    lab_help, bench_help = GROUPS["lab"][1].lower(), GROUPS["bench"][1]
    for words in ("ecmp", "qp scaling", "te", "incast", "flowlet", "ecn", "subscription", "watchdog"):
        assert words in lab_help, words
    assert len(LABS) == 8
    assert all(name in bench_help for name in BENCHES), bench_help
    list_labs(None)
    rows = capsys.readouterr().out.splitlines()[:len(LABS)]
    assert len({row.index(LABS[row.split()[0]][1]) for row in rows}) == 1, rows   # one column


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_group_explains_itself(group):
    res = subprocess.run([ROCELAB, group, "--help"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "usage: rocelab " + group in res.stdout


def _link_exists(name):
    return os.path.exists(f"/sys/class/net/{name}")


@root_only
def test_clean_removes_what_a_killed_run_recorded(tmp_path):
    """A run that dies leaves a ledger; `clean` removes exactly what it lists."""
    veth, netns = f"rlcl{os.getpid() % 100000}", f"rlcl-ns-{os.getpid()}"
    script = textwrap.dedent(f"""
        import os, subprocess, time
        from testbed.cleanup import Ledger
        ledger = Ledger("crashtest", state_dir={str(tmp_path)!r})
        ledger.add("link", {veth!r})
        subprocess.run(["ip", "link", "add", {veth!r}, "type", "veth", "peer", "name", {veth + 'p'!r}], check=True)
        ledger.add("netns", {netns!r})
        subprocess.run(["ip", "netns", "add", {netns!r}], check=True)
        # like a node's interactive shell, this one ignores SIGTERM
        child = subprocess.Popen(["bash", "-c", "trap '' TERM; exec sleep 300"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ledger.add("pid", child.pid)
        print(child.pid, flush=True)
        os._exit(9)   # crash without any teardown
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert res.returncode == 9, res.stderr
    sleeper = int(res.stdout.strip())
    try:
        assert _link_exists(veth) and os.path.exists(f"/run/netns/{netns}")
        assert cleanup.pid_alive(sleeper)
        removed = cleanup.clean(state_dir=tmp_path)
        assert f"link {veth}" in removed and f"netns {netns}" in removed and f"process {sleeper}" in removed
        assert not _link_exists(veth) and not os.path.exists(f"/run/netns/{netns}")
        assert not cleanup.pid_alive(sleeper)   # gone when clean() returns, SIGKILL included
        assert list(tmp_path.glob("*.json")) == []
    finally:
        subprocess.run(["ip", "link", "del", veth], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", netns], stderr=subprocess.DEVNULL)


def test_a_zombie_is_not_alive():
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert not cleanup.pid_alive(child.pid)   # ended, though its parent has not reaped it yet
    child.wait()


def test_clean_leaves_live_runs_and_reused_pids_alone(tmp_path):
    ledger = cleanup.Ledger("live", state_dir=tmp_path)
    # our own PID is alive: a live run is not "stale"
    assert cleanup.stale_ledgers(tmp_path) == []
    # a recorded PID whose start time differs is someone else's process now: not killed
    ledger.entries["pid"].append({"name": os.getpid(), "start": -1})
    assert cleanup._remove_entries(ledger.entries) == []
    ledger.close()


SCRIPTS = ["testbed/install/setup.sh", "testbed/install/provision-vagrant.sh", "testbed/install/build-bmv2.sh",
           ".ci/run"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_install_scripts_parse(script):
    from testbed import REPO_ROOT
    subprocess.run(["bash", "-n", str(REPO_ROOT / script)], check=True)


@pytest.mark.skipif(not __import__("shutil").which("shellcheck"), reason="shellcheck not installed")
def test_install_scripts_pass_shellcheck():
    from testbed import REPO_ROOT
    res = subprocess.run(["shellcheck", *SCRIPTS], cwd=REPO_ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def test_the_bmv2_build_refuses_to_build_inside_the_repository():
    from testbed import REPO_ROOT
    res = subprocess.run(["bash", str(REPO_ROOT / "testbed/install/build-bmv2.sh")], capture_output=True, text=True,
                         env={**os.environ, "SRC_DIR": str(REPO_ROOT / "p4lang-src")}, timeout=30)
    assert res.returncode == 1
    assert "is inside the repository" in res.stderr
    assert not (REPO_ROOT / "p4lang-src").exists()


def test_setup_refuses_non_root():
    from testbed import REPO_ROOT
    res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          "bash", str(REPO_ROOT / "testbed/install/setup.sh")],
                         capture_output=True, text=True)
    assert res.returncode == 1
    assert "must run as root" in res.stderr


def test_grpc_info_lines_stay_off_the_users_terminal(tmp_path):
    # the Mininet CLI printed "I1125 ... fork_posix.cc:71] Other threads are currently calling into
    # gRPC, skipping fork() handlers" under a host command's output
    script = tmp_path / "fork_while_calling.py"
    script.write_text(textwrap.dedent("""
        import os, threading, time
        import testbed   # first, as every rocelab process imports it
        import grpc
        from concurrent import futures
        server = grpc.server(futures.ThreadPoolExecutor(2))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        call = grpc.insecure_channel(f"127.0.0.1:{port}").unary_unary("/no/such")
        done = threading.Event()
        def calls():
            while not done.is_set():
                try:
                    call(b"", timeout=0.2)
                except grpc.RpcError:
                    pass
        threading.Thread(target=calls, daemon=True).start()
        time.sleep(0.3)
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
        done.set()
        server.stop(0)
    """))
    env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    assert "fork_posix" not in res.stderr and not res.stderr.startswith("I"), res.stderr
