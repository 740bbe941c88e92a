"""One-shot action selector programming (P4Runtime spec, "One Shot Action Selector
Programming"), as simple_switch_grpc's server (p4lang/PI) provides it.

A table entry of a table with an action selector may carry an ActionProfileActionSet instead of
a member or group id. The server then makes a group of its own in the selector, one member per
action with the action's weight, and points the entry at it; a MODIFY replaces the group, a
DELETE removes it. Those members and groups are the server's: their ids lie beyond P4Runtime's
uint32 ids, so no client id collides with them, and member/group reads leave them out. Reads of
the entry give the action set back.

As in PI, a selector is programmed one way or the other: while it has one-shot groups, member and
group writes (and entries naming members or groups) are INVALID_ARGUMENT, and the other way round.
"""
import itertools

HIDDEN_ID_BASE = 1 << 32


def is_hidden(ident):
    return ident >= HIDDEN_ID_BASE


class OneShots:
    """The one-shot groups of one pipeline, by the entry that uses each."""

    def __init__(self):
        self._entries = {}      # entry key -> (profile id, group id, member ids, [(ActionCall, weight)])
        self._per_profile = {}  # profile id -> how many one-shot groups it holds
        self._ids = itertools.count(HIDDEN_ID_BASE)

    def in_use(self, profile_id):
        return bool(self._per_profile.get(profile_id))

    def create(self, profile, calls):
        """A hidden group of `calls` [(ActionCall, weight)] in the engine selector `profile`:
        (group id, member ids). Nothing is left behind if the engine refuses it."""
        members = []
        try:
            for call, weight in calls:
                member_id = next(self._ids)
                profile.insert_member(member_id, call)
                members.append((member_id, weight))
            group_id = next(self._ids)
            profile.insert_group(group_id, members)
        except Exception:
            for member_id, _ in members:
                profile.delete_member(member_id)
            raise
        return group_id, [m for m, _ in members]

    @staticmethod
    def drop(profile, group_id, member_ids):
        """Remove a hidden group no entry uses any more."""
        profile.delete_group(group_id)
        for member_id in member_ids:
            profile.delete_member(member_id)

    def adopt(self, key, profile_id, group_id, member_ids, calls):
        """Record that the entry `key` now uses the hidden group."""
        self._entries[key] = (profile_id, group_id, member_ids, calls)
        self._per_profile[profile_id] = self._per_profile.get(profile_id, 0) + 1

    def forget(self, key):
        """The entry `key` no longer uses its hidden group: (profile id, group id, member ids) to
        drop, or None if it had none."""
        record = self._entries.pop(key, None)
        if record is None:
            return None
        profile_id, group_id, member_ids, _ = record
        self._per_profile[profile_id] -= 1
        return profile_id, group_id, member_ids

    def action_set(self, key):
        """[(ActionCall, weight)] the entry `key` was programmed with, or None."""
        record = self._entries.get(key)
        return record[3] if record is not None else None
