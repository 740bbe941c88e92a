"""p4c's STF packet-test files: the format, parsed into Commands, and its values (numbers, keys).

The format (p4c tools/stf and backends/bmv2/bmv2stf.py), one command per line,
``#`` starts a comment:

    packet PORT HEX...                 inject a packet (spaces allowed in the hex)
    expect PORT [HEX...][$]            the next packet out of PORT; `*` is a wildcard
                                       nibble; the expectation is a prefix of the
                                       packet unless it ends with `$`; no data = any
    add TABLE [PRIO] KEY:VAL... ACTION(ARG:VAL, ...) [= ID]
    setdefault TABLE ACTION(ARG:VAL, ...)
    remove all
    mirroring_add SESSION PORT | mirroring_add_mc SESSION MGRP | mirroring_delete SESSION
    mirroring_get SESSION
    mc_mgrp_create MGRP | mc_mgrp_destroy MGRP
    mc_node_create RID PORT... | mc_node_update HANDLE PORT... | mc_node_destroy HANDLE
    mc_node_associate MGRP HANDLE | mc_node_dissociate MGRP HANDLE
    register_read NAME IDX | register_write NAME IDX VAL | register_reset NAME
    counter_read NAME IDX | counter_write NAME IDX PACKETS BYTES
    meter_set_rates NAME IDX RATE:BURST RATE:BURST | meter_array_set_rates NAME RATE:BURST...
    meter_get_rates NAME IDX
    check_counter NAME(IDX or $ID) [packets|bytes OP NUMBER]
    wait

Engine extensions (simple_switch_CLI commands, for what bmv2stf cannot say):

    act_prof_create_member PROFILE ACTION(ARG:VAL, ...)   -> member handle 0, 1, ...
    act_prof_create_group PROFILE                         -> group handle 0, 1, ...
    act_prof_add_member_to_group PROFILE MEMBER GROUP
    act_prof_remove_member_from_group PROFILE MEMBER GROUP
    act_prof_delete_member PROFILE MEMBER | act_prof_delete_group PROFILE GROUP
    add TABLE KEY... $member(id:N) | $group(id:N)        entry of an indirect table
    pvs_add VSET VALUE | pvs_remove VSET VALUE | pvs_clear VSET | pvs_get VSET
        parser value set members; VALUE is the set's fields concatenated (first field in
        the high bits), matched exactly, as simple_switch_CLI takes it
    meter_set_rates / counter_read / check_counter on a direct meter or counter take
    the entry handle (0, 1, ... in insertion order, like BMv2) or the `= ID` of an add.

Key values: exact ``0x0a000001``/decimal/``0b..``; lpm ``VALUE/LEN`` or trailing
``*`` nibbles (``0x0a01****``; without either, the prefix covers the digits
written, as bmv2stf computes it); ternary ``0x1*``/``0b01**`` (the mask covers
the digits written) or ``VALUE&&&MASK``; range ``LOW->HIGH`` (or ``LOW..HIGH``);
optional ``VALUE`` or ``*``. Key fields left out are wildcards (exact ones are
0, as in bmv2stf). Table, key, action and object names may be given by suffix.

Priorities: bmv2stf hands BMv2 ``10000 - PRIO`` (BMv2: lower wins), so a higher
STF priority wins; the engine's P4Runtime-style priority is ``PRIO + 1`` (kept
positive). Entries of priority tables added without one get priority 1 (so the
first added wins ties). Priorities given for exact/lpm tables are ignored, as
bmv2stf ignores them.

Ports: like BMv2 under bmv2stf, the switch has interfaces only for the ports
that `packet`/`expect` lines name. Packets sent anywhere else are reported as a
note and otherwise ignored; packets on a tested port that no `expect` accounts
for fail the test.
"""
import math
import re

from testbed.p4engine.tables import Exact, Lpm, Optional, Range, Ternary


STF_PRIORITY_OFFSET = 1

PORT_WIDTH = 9              # v1model's ports (ingress_port, egress_spec) are bit<9>

MAX_PORT = (1 << PORT_WIDTH) - 1


class StfError(Exception):
    """A malformed STF line or a command the program cannot satisfy."""

    def __init__(self, message, filename="<stf>", line=0):
        super().__init__(message)
        self.message, self.filename, self.line = message, filename, line

    def __str__(self):
        return f"{self.filename}:{self.line}: error: {self.message}"


class Command:
    __slots__ = ("name", "args", "line", "text")

    def __init__(self, name, args, line, text):
        self.name, self.args, self.line, self.text = name, args, line, text

    def __repr__(self):
        return f"<{self.name} {self.args!r} @{self.line}>"


_NAME = r"[A-Za-z_$\"][\w$.\[\]\"]*"

_ACTION_RE = re.compile(r"(" + _NAME + r")\s*\(([^()]*)\)\s*(?:=\s*(\S+))?\s*$")

_HEX_CHARS = re.compile(r"^[0-9a-fA-F*]*$")

_COMMANDS = {
    "packet", "expect", "add", "setdefault", "remove", "wait", "no_packet", "check_counter",
    "mirroring_add", "mirroring_add_mc", "mirroring_delete", "mirroring_get",
    "mc_mgrp_create", "mc_mgrp_destroy", "mc_node_create", "mc_node_update", "mc_node_destroy",
    "mc_node_associate", "mc_node_dissociate",
    "register_read", "register_write", "register_reset",
    "counter_read", "counter_write", "counter_reset",
    "meter_set_rates", "meter_array_set_rates", "meter_get_rates",
    # simple_switch_CLI commands bmv2stf has no syntax for (engine extension)
    "act_prof_create_member", "act_prof_create_group", "act_prof_add_member_to_group",
    "act_prof_remove_member_from_group", "act_prof_delete_member", "act_prof_delete_group",
    "pvs_add", "pvs_remove", "pvs_clear", "pvs_get",
}


class StfErrors(StfError):
    """Several malformed lines: str() lists each as file:line: error: ..."""

    def __init__(self, errors):
        super().__init__(errors[0].message, errors[0].filename, errors[0].line)
        self.errors = errors

    def __str__(self):
        return "\n".join(str(e) for e in self.errors)


def parse_stf(text, filename="<stf>"):
    """Parse STF text into a list of Commands; StfError names the bad line (StfErrors, all of
    them when there are several)."""
    commands, errors = [], []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word, _, rest = line.partition(" ")
        if "\t" in word:                      # a tab after the command word
            word, _, more = word.partition("\t")
            rest = more + " " + rest
        name = word.lower()
        rest = rest.strip()
        if name not in _COMMANDS:
            errors.append(StfError(f"unknown command {shown_text(word)}", filename, lineno))
            continue
        try:
            args = _PARSERS.get(name, _parse_words)(rest)
        except StfError as exc:
            errors.append(StfError(exc.message, filename, lineno))
            continue
        commands.append(Command(name, args, lineno, line))
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise StfErrors(errors)
    return commands


def shown_text(text, limit=40):
    """repr() of user text, cut short so one bad line stays one readable line."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def _parse_words(rest):
    return rest.split()


def _parse_port(word):
    if not (word.isascii() and word.isdigit()):
        raise StfError(f"expected a port number, got {shown_text(word)}")
    port = int(word) if len(word.lstrip("0")) <= 6 else MAX_PORT + 1     # (no 5000-digit ints)
    if port > MAX_PORT:
        raise StfError(f"port {shown_text(word)} is out of range (v1model ports are bit<{PORT_WIDTH}>: "
                       f"0..{MAX_PORT})")
    return port


def _parse_wait(rest):
    """`wait` (packets are processed synchronously: nothing to wait for); an optional
    non-negative number of seconds is accepted and ignored."""
    words = rest.split()
    if len(words) > 1 or (words and not re.fullmatch(r"[0-9]+(\.[0-9]*)?", words[0])):
        raise StfError(f"wait takes no argument (or a number of seconds), got {shown_text(rest)}")
    return words


MAX_PACKET_BYTES = 65535


def _parse_packet(rest):
    parts = rest.split(None, 1)
    if not parts:
        raise StfError("packet needs a port and data")
    port = _parse_port(parts[0])
    data = "".join(parts[1].split()) if len(parts) > 1 else ""
    if not re.fullmatch(r"[0-9a-fA-F]*", data):
        bad = re.search(r"[^0-9a-fA-F]", data).group(0)
        raise StfError(f"packet data may only hold hex digits, found {bad!r}")
    if len(data) // 2 > MAX_PACKET_BYTES:
        raise StfError(f"packet data is {len(data) // 2} bytes, more than {MAX_PACKET_BYTES}")
    if len(data) % 2:
        raise StfError(f"packet data has an odd number of hex digits ({len(data)})")
    return port, bytes.fromhex(data)


def _parse_expect(rest):
    parts = rest.split(None, 1)
    if not parts:
        raise StfError("expect needs a port")
    port = _parse_port(parts[0])
    data = "".join(parts[1].split()) if len(parts) > 1 else ""
    exact = data.endswith("$")
    if exact:
        data = data[:-1]
    if not _HEX_CHARS.match(data):
        bad = re.search(r"[^0-9a-fA-F*]", data).group(0)
        raise StfError(f"expected data may only hold hex digits and '*', found {bad!r}")
    if not data and not exact:
        return port, None, False          # any packets on this port
    return port, data.upper(), exact


def _split_action(rest, what):
    m = _ACTION_RE.search(rest)
    if not m:
        raise StfError(f"{what}: expected an action call like name(arg:value, ...) at the end")
    head = rest[:m.start()].strip()
    action = m.group(1).replace('"', "")
    args = []
    body = m.group(2).strip()
    if body:
        for part in body.split(","):
            name, sep, value = part.partition(":")
            if not sep or not name.strip() or not value.strip():
                raise StfError(f"{what}: action argument {part.strip()!r} is not name:value")
            args.append((name.strip(), value.strip()))
    return head, action, args, m.group(3)


def _parse_add(rest):
    head, action, args, entry_id = _split_action(rest, "add")
    # Spaces may surround ':' and '/' (the STF lexer ignores them).
    head = re.sub(r"\s*([:/]|&&&|->)\s*", r"\1", head)
    words = head.split()
    if not words:
        raise StfError("add needs a table name")
    table = words[0].replace('"', "")
    priority = None
    words = words[1:]
    if words and re.fullmatch(r"\d+", words[0]):
        # P4Runtime priorities are int32 (the engine adds STF_PRIORITY_OFFSET)
        priority = fitting(parse_number(words[0], "add: priority"), 30, "add: priority", words[0])
        words = words[1:]
    keys = []
    for word in words:
        name, sep, value = word.partition(":")
        if not sep or not name or not value:
            raise StfError(f"add: match {word!r} is not field:value")
        keys.append((name, value))
    return table, priority, keys, action, args, entry_id


def _parse_setdefault(rest):
    head, action, args, _ = _split_action(rest, "setdefault")
    if not head:
        raise StfError("setdefault needs a table name")
    return head.replace('"', ""), action, args


def _parse_check_counter(rest):
    m = re.fullmatch(r"(" + _NAME + r")\s*\(\s*([^)]+?)\s*\)\s*(?:(packets|bytes)\s*(==|!=|<=|>=|<|>)\s*(\S+))?",
                     rest, re.IGNORECASE)
    if not m:
        raise StfError("check_counter expects NAME(INDEX) [packets|bytes OP NUMBER]")
    kind = m.group(3).lower() if m.group(3) else None
    return m.group(1), m.group(2), kind, m.group(4), m.group(5)


def parse_meter_rates(words, what):
    rates = []
    for word in words:
        rate, sep, burst = word.partition(":")
        try:
            pair = (float(rate), int(burst))
        except ValueError:
            raise StfError(f"{what}: {shown_text(word)} is not RATE:BURST") from None
        if not (math.isfinite(pair[0]) and pair[0] >= 0 and pair[1] >= 0):
            raise StfError(f"{what}: {shown_text(word)}: rate and burst must be finite and >= 0")
        rates.append(pair)
    return rates


def _parse_create_member(rest):
    words = rest.split(None, 1)
    if len(words) != 2:
        raise StfError("act_prof_create_member takes PROFILE ACTION(ARG:VAL, ...)")
    head, action, args, _ = _split_action(words[1], "act_prof_create_member") \
        if "(" in words[1] else ("", words[1].split()[0], words[1].split()[1:], None)
    return words[0], action, args


_PARSERS = {
    "act_prof_create_member": _parse_create_member,
    "packet": _parse_packet,
    "expect": _parse_expect,
    "add": _parse_add,
    "setdefault": _parse_setdefault,
    "check_counter": _parse_check_counter,
    "wait": _parse_wait,
}


def parse_number(text, what="value"):
    """An STF integer: decimal, 0x..., 0b... or 0o...."""
    t = text.strip().lower()
    try:
        if t.startswith("0x"):
            return int(t[2:], 16)
        if t.startswith("0b"):
            return int(t[2:], 2)
        if t.startswith("0o"):
            return int(t[2:], 8)
        if t.startswith("-"):
            raise ValueError
        return int(t, 10)
    except ValueError:
        raise StfError(f"{what}: {shown_text(text)} is not a number") from None


def fitting(value, width, what, text=None):
    """`value` if it fits in bit<width>; a value wider than its field is an error, never
    truncated (BMv2's CLI and P4Runtime refuse it too)."""
    if value >> width:
        shown = shown_text(text) if text is not None else str(value)
        raise StfError(f"{what}: {shown} does not fit in bit<{width}> (at most {(1 << width) - 1:#x})")
    return value


def _digits(text):
    """(base bits per digit, digit string) of a prefixed literal, or (None, text) for decimal."""
    t = text.lower()
    for prefix, bits in (("0x", 4), ("0b", 1), ("0o", 3)):
        if t.startswith(prefix):
            return bits, t[2:]
    return None, t


def _masked_literal(text, what):
    """'0x1*' -> (value, mask over the digits written), as bmv2stf's makeMask does."""
    bits, digits = _digits(text)
    if bits is None:
        raise StfError(f"{what}: decimal {text!r} cannot carry '*' digits")
    base = 1 << bits
    value = mask = 0
    full = base - 1
    for d in digits:
        value <<= bits
        mask <<= bits
        if d == "*":
            continue
        try:
            digit = int(d, base)
        except ValueError:
            raise StfError(f"{what}: bad digit {d!r} in {text!r}") from None
        value |= digit
        mask |= full
    return value, mask, bits * len(digits)


def key_value(spec, text, where):
    """Turn an STF key value into the table's key object for `spec` (None = wildcard)."""
    kind, width = spec.match_kind, spec.width
    full = (1 << width) - 1
    what = f"{where} field {spec.name}"
    def number(t):
        return fitting(parse_number(t, what), width, what, t)

    if kind == "exact":
        return Exact(number(text))
    if kind == "optional":
        if text == "*" or set(text.lower()[2:]) == {"*"}:
            return None
        return Optional(number(text))
    if kind == "range":
        m = re.fullmatch(r"(.+?)(?:->|\.\.)(.+)", text)
        if not m:
            value = number(text)
            return Range(value, value)
        low, high = number(m.group(1)), number(m.group(2))
        if low > high:
            raise StfError(f"{what}: range {shown_text(text)} is empty (low > high)")
        if low == 0 and high == full:
            return None
        return Range(low, high)
    if kind == "ternary":
        if "&&&" in text:
            v, m = text.split("&&&", 1)
            value, mask = number(v), number(m)
        elif "*" in text or _digits(text)[0] is not None:
            # the mask covers the digits written; '*' digits beyond the field are harmless
            value, mask, _ = _masked_literal(text, what)
            fitting(value, width, what, text)
            mask &= full
        else:
            value, mask = number(text), full
        value &= mask
        return Ternary(value, mask) if mask else None
    if kind == "lpm":
        if "/" in text:
            v, plen_text = text.split("/", 1)
            value = number(v)
            plen = parse_number(plen_text, what)
            if plen > width:
                raise StfError(f"{what}: prefix length {plen} is longer than the field ({width} bits)")
        else:
            bits, digits = _digits(text)
            if bits is None:
                value, plen = number(text), width
            else:
                stars = digits.count("*")
                try:
                    value = int(digits.replace("*", "0") or "0", 1 << bits)
                except ValueError:
                    raise StfError(f"{what}: {text!r} is not an lpm value (VALUE/LEN or 0x12**)") from None
                plen = (len(digits) - stars) * bits
                # bmv2stf writes the digits as the value: trailing '*' digits are
                # zeros at the value's low end, and the prefix counts the rest.
                fitting(value, width, what, text)
        if plen > width:
            plen = width
        mask = full ^ ((1 << (width - plen)) - 1)
        value &= mask
        return Lpm(value, plen) if plen else None
    raise StfError(f"{what}: match kind {kind!r} cannot be given in an STF add")
