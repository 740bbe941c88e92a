"""Typed fields of TE requests: the one validation layer between REST/JSON and the service.

JSON gives a field any type; these turn a value into what the service works with, or raise
:class:`FieldError` (a FabricError, so the REST layer answers 400) naming the field and
showing at most a short prefix of the value. Ports are integers (a JSON integer, or a
decimal string from a query string): floats and booleans are refused, never truncated.
Numbers are finite. Bodies are size-limited and parsed without NaN/Infinity or deep nesting.
"""
import json
import math

from testbed.argtypes import nests_deeper
from testbed.te.topology import FabricError

MAX_BODY_BYTES = 64 * 1024     # the largest real request is a few hundred bytes
MAX_NAME_CHARS = 64            # switch names, prefixes
MAX_NESTING = 8                # request bodies are flat objects
MAX_PORT = 511                 # v1model ports are bit<9>
MAX_SHOWN = 40


class FieldError(FabricError):
    """A request field of the wrong type or out of range."""


def shown(value):
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "..."


def name(value, field):
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS:
        raise FieldError(f"{field} must be a name of 1..{MAX_NAME_CHARS} characters (got {shown(value)})")
    return value


def port(value, field):
    """A port number 0..511 from a JSON integer or a decimal string (query strings)."""
    if isinstance(value, str) and value.strip().isdigit() and len(value) <= 6:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PORT:
        raise FieldError(f"{field} must be a port number 0..{MAX_PORT} (got {shown(value)})")
    return value


def number(value, field, lo=0.0, hi=None, lo_open=False):
    """A finite number in [lo, hi] from a JSON number or a numeric string (query strings)."""
    original = value
    if isinstance(value, str) and len(value) <= 32:
        try:
            value = float(value)
        except ValueError:
            pass
    bound = f"greater than {lo:g}" if lo_open else f">= {lo:g}"
    if hi is not None:
        bound += f" and <= {hi:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(f"{field} must be a finite number {bound} (got {shown(original)})")
    if value < lo or (lo_open and value == lo) or (hi is not None and value > hi):
        raise FieldError(f"{field} {value:g} is out of range (must be {bound})")
    return float(value)


def prefix(value, field="dst_prefix"):
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS:
        raise FieldError(f"{field}: expected an IPv4 prefix such as 10.1.3.0/24 (got {shown(value)})")
    return value


def _no_constant(text):
    raise FieldError(f"request body: {text} is not a JSON number (finite numbers only)")


def parse_body(raw):
    """The JSON object in request body `raw` (bytes); {} when empty."""
    if not raw:
        return {}
    if len(raw) > MAX_BODY_BYTES:
        raise FieldError(f"request body: {len(raw)} bytes is more than {MAX_BODY_BYTES}")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise FieldError("request body is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise FieldError(f"request body is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise FieldError(f"request body nests deeper than {MAX_NESTING} levels") from None
    except FieldError:
        raise
    except ValueError as exc:  # e.g. an integer literal with more digits than Python converts
        raise FieldError(f"request body is not usable JSON: {str(exc)[:100]}") from None
    if not isinstance(data, dict):
        raise FieldError("request body must be a JSON object")
    if nests_deeper(data, MAX_NESTING):
        raise FieldError(f"request body nests deeper than {MAX_NESTING} levels")
    return data


def dumps(data):
    """JSON text for a response; NaN or Infinity never leave as invalid JSON."""
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False)
