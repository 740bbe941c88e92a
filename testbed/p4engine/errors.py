"""Diagnostics: P4Error carries file:line:col messages rendered with the source line and a caret."""


class SourceMap:
    """Maps lines of the preprocessed text back to (file, line) and keeps source lines for carets."""

    def __init__(self):
        self.origins = []          # index = preprocessed line - 1 -> (file, line)
        self.file_lines = {}       # file -> list of its original lines

    def origin(self, line):
        if 1 <= line <= len(self.origins):
            return self.origins[line - 1]
        return ("<unknown>", line)

    def source_line(self, file, line):
        lines = self.file_lines.get(file)
        if lines and 1 <= line <= len(lines):
            return lines[line - 1]
        return ""


def render_diagnostics(diagnostics, source_map=None, severity="error"):
    """'file:line:col: <severity>: msg' lines, each followed by its source line and a caret."""
    out = []
    for file, line, col, message in diagnostics:
        out.append(f"{file}:{line}:{col}: {severity}: {message}")
        src = source_map.source_line(file, line) if source_map else ""
        if src:
            out.append(src.rstrip("\n").expandtabs(8))
            prefix = src[: max(col - 1, 0)].expandtabs(8)
            out.append(" " * len(prefix) + "^")
    return "\n".join(out)


TOO_DEEP = "the program nests expressions or statements too deeply for this engine (deepest around here)"


def deepest_point(text):
    """(line, col), 1-based, where `text` nests brackets deepest; for nesting without brackets
    (a chain like 1+1+...+1) the longest line. Locates a RecursionError, which has no place."""
    depth = best = 0
    where = None
    line, col = 1, 0
    for ch in text:
        col += 1
        if ch == "\n":
            line, col = line + 1, 0
        elif ch in "([{":
            depth += 1
            if depth > best:
                best, where = depth, (line, col)
        elif ch in ")]}":
            depth = max(0, depth - 1)
    if where is not None and best >= 32:
        return where
    lines = text.split("\n")
    longest = max(range(len(lines)), key=lambda i: len(lines[i])) if lines else 0
    return longest + 1, 1


class Loc:
    __slots__ = ("file", "line", "col")

    def __init__(self, file, line, col):
        self.file, self.line, self.col = file, line, col

    def __repr__(self):
        return f"{self.file}:{self.line}:{self.col}"


class P4Error(Exception):
    """A user-facing error in a P4 program.

    str(e) is "file:line:col: error: msg" followed by the source line and a caret;
    .diagnostics lists (file, line, col, message) for every error collected.
    """

    def __init__(self, message, loc=None, source_map=None, diagnostics=None):
        if diagnostics is None:
            file, line, col = (loc.file, loc.line, loc.col) if loc else ("<unknown>", 0, 0)
            diagnostics = [(file, line, col, message)]
        self.diagnostics = diagnostics
        self.source_map = source_map
        super().__init__(self.render())

    def render(self):
        return render_diagnostics(self.diagnostics, self.source_map)

    def with_source_map(self, source_map):
        if self.source_map is None:
            return P4Error(None, source_map=source_map, diagnostics=self.diagnostics)
        return self


class P4RuntimeFault(Exception):
    """An assert/assume failure or similar fault while a packet runs (BMv2 would abort)."""
