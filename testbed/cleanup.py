"""Record what rocelab creates, so that a crash or Ctrl-C can be cleaned up by name.

Every run that creates namespaces, veths or processes opens a :class:`Ledger`
(one JSON file under ``/run/rocelab``) and writes each resource into it *before*
creating it. Normal teardown removes the entries and the file; `rocelab clean`
removes what stale ledgers (whose owner process is gone) still list. Nothing is
ever removed by a broad name pattern, and no process is killed unless its PID
*and* start time match what was recorded (PIDs are reused).
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE_DIR = Path(os.environ.get("ROCELAB_STATE_DIR", "/run/rocelab"))

KINDS = ("pid", "link", "netns", "bridge")


def _proc_stat(pid):
    """(state, start time in clock ticks since boot) of `pid`, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])


def proc_start_time(pid):
    """Start time of `pid` in clock ticks since boot, or None if it is gone."""
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def pid_alive(pid, start_time=None):
    """True while `pid` (the same process, if `start_time` is given) runs; a zombie has ended."""
    stat = _proc_stat(pid)
    return stat is not None and stat[0] != "Z" and (start_time is None or stat[1] == start_time)


class Ledger:
    """The resources one run created. Use as a context manager or call close()."""

    def __init__(self, label, state_dir=None):
        self.dir = Path(state_dir or STATE_DIR)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.owner = os.getpid()
        self.path = self.dir / f"{label}-{self.owner}-{int(time.time() * 1000)}.json"
        self.entries = {kind: [] for kind in KINDS}
        self._save()

    def add(self, kind, name, **extra):
        """Record `name` (an interface, namespace or PID) before creating it."""
        if kind not in KINDS:
            raise ValueError(f"unknown resource kind {kind!r}")
        entry = {"name": name, **extra}
        if kind == "pid":
            entry["start"] = proc_start_time(name)
        self.entries[kind].append(entry)
        self._save()

    def discard(self, kind, name):
        self.entries[kind] = [e for e in self.entries[kind] if e["name"] != name]
        self._save()

    def release(self):
        """Remove every recorded resource that is still there, then the ledger."""
        _remove_entries(self.entries)
        self.close()

    def close(self):
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def _save(self):
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"owner": self.owner, "owner_start": proc_start_time(self.owner),
                                   "entries": self.entries}))
        os.replace(tmp, self.path)


def _run(*cmd):
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def _signal_all(procs, signum):
    for pid, start in procs:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def _wait_gone(procs, seconds):
    """The processes still alive after waiting up to `seconds` for all of them together."""
    deadline = time.monotonic() + seconds
    while True:
        procs = [(pid, start) for pid, start in procs if pid_alive(pid, start)]
        if not procs or time.monotonic() >= deadline:
            return procs
        time.sleep(0.02)


def _stop_processes(entries):
    """SIGTERM every recorded process still alive, one shared grace period, then SIGKILL the rest
    (an interactive shell ignores SIGTERM) and wait until the kernel has really ended them."""
    procs = [(e["name"], e.get("start")) for e in entries if pid_alive(e["name"], e.get("start"))]
    _signal_all(procs, signal.SIGTERM)
    survivors = _wait_gone(procs, 1.0)
    _signal_all(survivors, signal.SIGKILL)
    _wait_gone(survivors, 2.0)
    return [f"process {pid}" for pid, _ in procs]


def _remove_entries(entries):
    removed = _stop_processes(entries.get("pid", []))
    for kind in ("link", "bridge"):
        for entry in entries.get(kind, []):
            if Path(f"/sys/class/net/{entry['name']}").exists() and _run("ip", "link", "del", entry["name"]):
                removed.append(f"{kind} {entry['name']}")
    for entry in entries.get("netns", []):
        if Path(f"/run/netns/{entry['name']}").exists() and _run("ip", "netns", "del", entry["name"]):
            removed.append(f"netns {entry['name']}")
    return removed


def stale_ledgers(state_dir=None, include_live=False):
    d = Path(state_dir or STATE_DIR)
    if not d.is_dir():
        return []
    found = []
    for path in sorted(d.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if include_live or not pid_alive(data.get("owner", -1), data.get("owner_start")):
            found.append((path, data))
    return found


def clean(state_dir=None, include_live=False):
    """Remove leftovers listed by ledgers whose owner is gone; return what was removed."""
    removed = []
    for path, data in stale_ledgers(state_dir, include_live):
        removed += _remove_entries(data.get("entries", {}))
        path.unlink(missing_ok=True)
    return removed


def register(sub, name, help_text):
    p = sub.add_parser(name, help=help_text, description=__doc__.split("\n\n")[0] + "\n\n"
                       "Removes only resources recorded in ledgers under " + str(STATE_DIR) +
                       " whose owning rocelab process has exited. Never runs `mn -c`.")
    p.add_argument("--include-live", action="store_true",
                   help="also tear down runs whose owner is still alive")
    p.set_defaults(func=_cmd_clean)


def _cmd_clean(args):
    if os.geteuid() != 0:
        print("rocelab clean: must run as root", file=sys.stderr)
        return 1
    removed = clean(include_live=args.include_live)
    for item in removed:
        print(f"removed {item}")
    print(f"rocelab clean: {len(removed)} leftover(s) removed")
    return 0
