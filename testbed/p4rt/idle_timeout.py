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

from testbed.p4rt.entities import add_matches

SWEEP_S = 1.0


def idle_tables(index):
    """The P4Info tables whose entries age."""
    return [info for info in index.tables.values() if info.supports_idle_timeout]


def expired_entries(tables, pipeline, now_us):
    """What to report of the entries of `tables` (P4Info TableInfos) idle for at least their TTL
    at switch time `now_us`: (table info, keys, priority, controller_metadata, metadata, TTL),
    plain values, so messages can be built after the switch lock is let go. Their timers
    restart now. Caller holds the switch lock."""
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
                out.append((info, entry.keys, entry.priority, entry.controller_metadata,
                            entry.metadata, ttl_ns))
    return out


def notification(expired, timestamp_ns):
    """One StreamMessageResponse with an IdleTimeoutNotification for all of `expired`."""
    response = p4runtime_pb2.StreamMessageResponse()
    message = response.idle_timeout_notification
    message.timestamp = timestamp_ns
    for info, keys, priority, controller_metadata, metadata, ttl_ns in expired:
        te = message.table_entry.add(table_id=info.id, priority=priority or 0,
                                     controller_metadata=controller_metadata, metadata=metadata,
                                     idle_timeout_ns=ttl_ns)
        add_matches(te.match, info.match_fields, keys)
    return response
