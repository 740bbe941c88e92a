"""What the controller wants on a switch, as plain values (no protobuf, no P4Info ids).

The planner produces these; the P4Runtime layer (p4runtime_io.py) turns them into
messages. Keeping them hashable lets the controller diff "wanted" against
"installed" and write only the difference.
"""
from dataclasses import dataclass, field
from typing import Tuple


def exact(value):
    return ("exact", int(value))


def lpm(value, prefix_len):
    return ("lpm", int(value), int(prefix_len))


@dataclass(frozen=True)
class Entry:
    """One table entry (or, with default=True and no match, a table's default action).

    match: one tuple per key field, in the table's key order: ("exact", v) or
    ("lpm", v, prefix_len). params: ((name, int), ...) in the action's order.
    """
    table: str
    match: Tuple = ()
    action: str = ""
    params: Tuple = ()
    default: bool = False

    @property
    def key(self):
        return (self.table, self.match, self.default)

    def param(self, name):
        for n, v in self.params:
            if n == name:
                return v
        raise KeyError(f"{self.action} has no parameter {name!r}")


@dataclass(frozen=True)
class CloneSession:
    session_id: int
    replicas: Tuple = field(default_factory=tuple)   # ((port, instance), ...)
    truncate: int = 0

    @property
    def key(self):
        return ("clone_session", self.session_id)


def params(**kwargs):
    """Action parameters in the order given (Python keeps keyword order)."""
    return tuple((name, int(value)) for name, value in kwargs.items())


def mac_to_int(mac):
    return int(mac.replace(":", ""), 16)


def int_to_mac(value):
    raw = f"{value:012x}"
    return ":".join(raw[i:i + 2] for i in range(0, 12, 2))
