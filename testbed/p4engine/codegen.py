"""Small helpers for emitting Python source: indentation-aware line buffers and name mangling."""
import re


class Emitter:
    def __init__(self):
        self.lines = []
        self.level = 0

    def line(self, text):
        self.lines.append("    " * self.level + text)

    def indent(self):
        self.level += 1

    def dedent(self):
        self.level -= 1

    def mark(self):
        return len(self.lines)

    def ensure_body(self, mark):
        """Add `pass` if nothing was emitted since `mark` (an empty Python block is a syntax error)."""
        if len(self.lines) == mark:
            self.line("pass")

    def text(self):
        return "\n".join(self.lines) + "\n"


class Namer:
    """Unique Python identifiers derived from P4 names."""

    def __init__(self):
        self.used = set()

    def fresh(self, prefix, name=""):
        base = prefix + re.sub(r"\W", "_", name)
        cand, i = base, 1
        while cand in self.used:
            i += 1
            cand = f"{base}_{i}"
        self.used.add(cand)
        return cand


def slot_add(base, off):
    """Add a constant offset to a slot index that is an int or a Python expression string."""
    if isinstance(base, int):
        return base + off
    if off == 0:
        return base
    return f"{base} + {off}"


def slot_ref(slot):
    return f"S[{slot}]"


# ------------------------------------------------------------------ header layout
# Extract and emit go through struct.Struct: one C call converts a header to small ints
# (or back), much cheaper per packet than shifting one big int per field. Fields are grouped
# into byte-aligned runs ("chunks"); a chunk of 1/2/4/8 bytes is one struct item, 3/5/6/7
# bytes are two or three items glued with shifts, anything longer is a bytes item.
_STRUCT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}
_STRUCT_SPLITS = {3: (1, 2), 5: (1, 4), 6: (2, 4), 7: (1, 2, 4)}


def header_chunks(widths):
    """Byte-aligned runs of consecutive field widths: [(nbytes, [field index...])]."""
    chunks, run, bits = [], [], 0
    for i, w in enumerate(widths):
        run.append(i)
        bits += w
        if bits and bits % 8 == 0:
            chunks.append((bits // 8, run))
            run, bits = [], 0
    if run:      # trailing zero-width fields (a header's width is a whole number of bytes)
        chunks.append((bits // 8, run))
    return chunks


def chunk_items(nbytes):
    """The struct items of one chunk: [(format code, byte size)]."""
    if nbytes in _STRUCT_CODES:
        return [(_STRUCT_CODES[nbytes], nbytes)]
    if nbytes in _STRUCT_SPLITS:
        return [(_STRUCT_CODES[n], n) for n in _STRUCT_SPLITS[nbytes]]
    return [(f"{nbytes}s", nbytes)] if nbytes else []


def struct_format(chunks):
    return ">" + "".join(code for nbytes, _ in chunks for code, _ in chunk_items(nbytes))


# ------------------------------------------------------------------ runtime support
# What the generated code calls besides tables and externs (bound into its globals).

class ParserError(Exception):
    """Raised by generated parser code: `code` is the error's index, `offset` the bytes parsed."""

    def __init__(self, code, offset):
        self.code, self.offset = code, offset


# Parser state transitions allowed per packet: a fixed allowance for loops that consume nothing
# (e.g. a counter in a parser local) plus one per bit of the packet (a loop that consumes input
# ends by itself with PacketTooShort). BMv2 has no such limit and spins; the engine must not
# hold a switch on one packet, so it ends the parse with error.ParserTimeout (the spec's
# "parser execution time limit exceeded"); as for any parser error, ingress still runs.
PARSER_STEPS = range(1024)       # shared: the common case pays for no per-packet range


def parser_extra_steps(packet):
    return range(8 * len(packet))


def parser_budget(packet):
    """The whole budget as one iterator, shared by a parser and the sub-parsers it calls."""
    return iter(range(len(PARSER_STEPS) + 8 * len(packet)))


def reject_parse(S, P, o):
    """The state a sub-parser's `transition reject` goes to: ends the whole parse, no error set."""
    raise ParserError(0, o)


def stack_slot(first, index, size, element_slots, scratch):
    """The first slot of element `index` of a stack whose elements start at `first`; an index
    out of range gets `scratch`, storage of its own."""
    return first + index * element_slots if 0 <= index < size else scratch


class ExitControl(Exception):
    """`exit`: leaves every control currently running (caught where the architecture called it)."""


def shl(value, amount, width, signed):
    value = (value << amount) & ((1 << width) - 1) if amount < width else 0
    if signed and value >> (width - 1):
        value -= 1 << width
    return value


def div(a, b):
    return a // b if b else 0


def mod(a, b):
    return a % b if b else 0


def packbits(acc, nbits):
    """Field bits packed MSB first, the last byte padded with zeros (BMv2's BufBuilder)."""
    pad = -nbits % 8
    return (acc << pad).to_bytes((nbits + pad) >> 3, "big")


def logfmt(fmt, values):
    """log_msg's formatting as BMv2's core log_msg primitive does it: each `{...}` (whatever is
    between the braces) takes the next value in decimal, `\\{` and `\\}` are literal braces."""
    out, i, k, n = [], 0, 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c == "\\" and i + 1 < n and fmt[i + 1] in "{}":
            out.append(fmt[i + 1])
            i += 2
        elif c == "{":
            end = i
            while True:
                end = fmt.find("}", end + 1)
                if end < 0 or fmt[end - 1] != "\\":
                    break
            if end < 0:                 # no closing brace: BMv2 stops the switch; keep the text
                out.append(fmt[i:])
                break
            out.append(str(values[k]) if k < len(values) else fmt[i:end + 1])
            k += 1
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)
