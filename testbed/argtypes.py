"""argparse type functions shared by every `rocelab` command: the one validation layer
for command-line values.

Each returns a callable for ``add_argument(type=...)`` that raises
``argparse.ArgumentTypeError`` with a message naming the value and the accepted range,
so a bad option ends as one line and exit status 2 (see :class:`testbed.cli.Parser`).
Numbers are finite (``inf``, ``nan`` and absurd magnitudes are refused where a quantity
has a real-world bound). Only the standard library here: `rocelab --help` stays fast.
"""
import argparse
import math
import os

# Filesystems where a report directory makes no sense (writes fail or mean something else).
KERNEL_FILESYSTEMS = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
                      "securityfs", "bpf", "configfs", "pstore", "mqueue", "hugetlbfs", "fusectl",
                      "binfmt_misc", "efivarfs", "autofs", "nsfs"}
MAX_SHOWN = 40  # characters of a bad value echoed back in a message


def shown(text):
    """`text` for an error message: quoted, and shortened if long."""
    text = str(text)
    return repr(text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "...")


def _fmt(value):
    return str(value) if isinstance(value, int) else f"{value:g}"


def _range_text(lo, hi, lo_open=False):
    if lo is not None and lo_open:
        return f"greater than {_fmt(lo)}" + ("" if hi is None else f" and at most {_fmt(hi)}")
    if lo is not None and hi is not None:
        return f"between {_fmt(lo)} and {_fmt(hi)}"
    if lo is not None:
        return f"at least {_fmt(lo)}"
    return f"at most {_fmt(hi)}"


def number(lo=None, hi=None, lo_open=False):
    """A finite float in [lo, hi] (lo excluded when lo_open)."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown(text)}: expected a finite number")
        if (lo is not None and (value < lo or (lo_open and value == lo))) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{shown(text)} must be {_range_text(lo, hi, lo_open)}")
        return value
    parse.__name__ = "number"  # argparse names the type in its messages
    return parse


def whole(lo=None, hi=None):
    """An integer in [lo, hi] (decimal, or 0x.. hex)."""
    def parse(text):
        try:
            value = int(text, 0)
        except ValueError:
            try:
                value = int(text)  # '010' is 10, not an octal error
            except ValueError:
                raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number") from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{shown(text)} must be {_range_text(lo, hi)}")
        return value
    parse.__name__ = "whole number"
    return parse


probability = number(0.0, 1.0)
probability.__name__ = "probability"
non_negative = number(0.0)
tcp_port = whole(1, 65535)
tcp_port.__name__ = "port"


def _filesystem_type(path):
    """The type of the filesystem holding existing `path` (longest matching mount point)."""
    best, fstype = "", None
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount = fields[1].replace("\\040", " ")
                if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                    best, fstype = mount, fields[2]
    except OSError:
        pass
    return fstype


def _check_writable_parent(path, what, given=None):
    """The nearest existing ancestor of `path` must be a writable directory on a real filesystem."""
    given = path if given is None else given
    ancestor = path
    while not os.path.exists(ancestor):
        parent = os.path.dirname(ancestor)
        if parent == ancestor:
            break
        ancestor = parent
    if not os.path.isdir(ancestor):
        raise argparse.ArgumentTypeError(f"{shown(given)}: {ancestor} is not a directory, cannot hold the {what}")
    fstype = _filesystem_type(ancestor)
    if fstype in KERNEL_FILESYSTEMS:
        raise argparse.ArgumentTypeError(f"{shown(given)} is on a kernel filesystem ({fstype}), not a place for the {what}")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{shown(given)}: {ancestor} is not writable")


def output_dir(text):
    """A directory for a report: new, or an existing directory; never a file or a kernel fs."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a directory name")
    path = os.path.abspath(text)
    if os.path.exists(path) and not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{shown(text)} exists and is not a directory")
    _check_writable_parent(path, "report directory")
    return text


def output_file(text):
    """A file to write: not a directory, not on a kernel filesystem."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a file name")
    path = os.path.abspath(text)
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{shown(text)} is a directory")
    _check_writable_parent(os.path.dirname(path), "file", text)
    return text


def host_port(text):
    """'HOST:PORT' (or ':PORT'), port 1..65535; returned unchanged."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{shown(text)}: expected HOST:PORT with a port from 1 to 65535, "
                                         "e.g. 127.0.0.1:9559")
    if len(host) > 255 or any(c.isspace() for c in host):
        raise argparse.ArgumentTypeError(f"{shown(text)}: {shown(host)} is not a host name or address")
    return text


def nests_deeper(value, limit):
    """True when a parsed JSON `value` nests deeper than `limit` lists/objects (iterative, so a
    hostile document cannot exhaust the stack). Job files and REST bodies refuse such input."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False
