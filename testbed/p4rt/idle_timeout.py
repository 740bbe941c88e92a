"""Idle timeout of table entries (P4Runtime spec "Idle-timeout" and "Table Idle Timeout
Notification"), as simple_switch_grpc (PI over BMv2's ageing monitor) provides it.

- A table with ``support_timeout = true`` (P4Info ``idle_timeout_behavior: NOTIFY_CONTROL``) is an
  engine ``IdleTimeoutTable``: a hit stores the packet's switch time in the entry. Other tables
  record nothing.
- An entry's TTL is ``TableEntry.idle_timeout_ns`` (0: never idle). Every INSERT or MODIFY sets
  it and restarts the entry's timer, as PI does on BMv2.
- A sweep runs every SWEEP_S seconds of the switch's clock (BMv2's ageing monitor sweeps once a
  second by default): an entry with a TTL that has not been hit for at least the TTL is reported
  to the primary controller in one ``IdleTimeoutNotification`` for the whole sweep (key fields,
  priority, controller_metadata, metadata and idle_timeout_ns; no action). The switch never
  deletes it: the controller decides.
- After a notification the entry's timer restarts (the spec), so an entry still not hit is
  reported again one TTL later. BMv2 instead reports it again every other sweep, which PI's own
  tests call a divergence from the spec.
"""
from p4.v1 import p4runtime_pb2

from testbed.p4rt.entities import _add_matches

SWEEP_S = 1.0


def idle_tables(index):
    """The P4Info tables whose entries age."""
    return [info for info in index.tables.values() if info.supports_idle_timeout]


def expired_entries(tables, pipeline, now_us):
    """TableEntry messages for the entries of `tables` (P4Info TableInfos) idle for at least
    their TTL at switch time `now_us`; their timers restart now. Caller holds the switch lock."""
    out = []
    for info in tables:
        table = pipeline.tables.get(info.name)
        for entry in table.entries() if table is not None else ():
            ttl_ns = entry.idle_timeout_ns
            if not ttl_ns:
                continue
            since = entry.last_hit_us
            if entry.notified_us is not None and entry.notified_us > since:
                since = entry.notified_us
            if (now_us - since) * 1000 >= ttl_ns:
                entry.notified_us = now_us
                out.append(_notified_entry(info, entry))
    return out


def _notified_entry(info, entry):
    out = p4runtime_pb2.TableEntry(table_id=info.id, priority=entry.priority or 0,
                                   controller_metadata=entry.controller_metadata,
                                   metadata=entry.metadata, idle_timeout_ns=entry.idle_timeout_ns)
    _add_matches(out.match, info.match_fields, entry.keys)
    return out
