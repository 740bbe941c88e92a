"""Errors of booting a fabric, importable without Mininet (virtual time catches them too)."""


class FabricError(RuntimeError):
    """Something about the machine or the request prevents booting; the message says what."""


class SwitchStartError(RuntimeError):
    """A switch process did not come up; the message carries the end of its log."""
