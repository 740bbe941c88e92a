"""The engine's table-programming types (testbed/p4engine/CONTRACT.md), in one place.

The P4Runtime side builds keys and actions with these. They come from
testbed.p4engine.tables; the stand-ins below (same names and fields) exist only
so the P4Runtime translation can be exercised before the engine is installed.
"""
from collections import namedtuple

try:
    from testbed.p4engine.tables import (  # noqa: F401
        ActionCall, Exact, GroupRef, Lpm, MemberRef, Optional, Range, TableError, Ternary)
    ENGINE_TYPES = True
except ImportError:
    ENGINE_TYPES = False
    Exact = namedtuple("Exact", "value")
    Lpm = namedtuple("Lpm", "value prefix_len")
    Ternary = namedtuple("Ternary", "value mask")
    Range = namedtuple("Range", "low high")
    Optional = namedtuple("Optional", "value")
    ActionCall = namedtuple("ActionCall", "action args")
    MemberRef = namedtuple("MemberRef", "id")
    GroupRef = namedtuple("GroupRef", "id")

    class TableError(Exception):
        def __init__(self, code, message=""):
            super().__init__(message or code)
            self.code = code
