"""A C-like preprocessor for P4_16: #include, object-like #define/#undef, #if/#ifdef/#ifndef/#elif/
#else/#endif with integer expressions. Comments are blanked (newlines kept) so that every output line
maps back to one (file, line) through the SourceMap."""
import ast
import os
import re

from .errors import Loc, P4Error, SourceMap

BUNDLED_INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
MAX_EXPANSION = 1 << 16      # characters one line may expand to (exponential macros stop there)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIRECTIVE = re.compile(r"^\s*#\s*([A-Za-z_]+)?(.*)$")
_TOKEN_OR_STRING = re.compile(r'"(?:\\.|[^"\\])*"|[A-Za-z_][A-Za-z0-9_]*')
_BODY_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|##|#|[A-Za-z_][A-Za-z0-9_]*|\s+|.')
_PASTE = re.compile(r"\s*##\s*")


def strip_comments(text, file, source_map):
    """Blank out // and /* */ comments, keeping newlines and string literals intact. A string
    literal may span lines, as in p4c's lexer (PINS programs put commented, multi-line
    constraints in @entry_restriction("...")): what looks like a comment inside it is its text."""
    out = []
    i, n = 0, len(text)
    line = 1
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 1
                j += 1
            if j >= n:
                raise P4Error("unterminated string literal", Loc(file, line, _column(text, i)), source_map)
            out.append(text[i:j + 1])
            line += text.count("\n", i, j)
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            while j > 0 and text.endswith(("\\", "\\\r"), i, j):
                # cpp splices a backslash-newline before it strips comments: the comment
                # goes on over the next line (blanked, its newline kept for the line count)
                j = text.find("\n", j + 1)
            j = n if j < 0 else j
            out.append(_blank(text[i:j]))
            line += text.count("\n", i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise P4Error("unterminated /* comment", Loc(file, line, 1), source_map)
            out.append(_blank(text[i:j + 2]))
            line += text.count("\n", i, j)
            i = j + 2
        else:
            if c == "\n":
                line += 1
            out.append(c)
            i += 1
    return "".join(out)


def _blank(comment):
    """A comment's text as spaces, its newlines kept."""
    return re.sub(r"[^\n]", " ", comment) if "\n" in comment else " " * len(comment)


def _column(text, i):
    return i - text.rfind("\n", 0, i)


class Preprocessor:
    """sandboxed: the text came from elsewhere (a P4Runtime device config), so #include may name
    only the bundled files (core.p4, v1model.p4): never a file of the switch's machine, whose
    lines an error message would echo back to the client."""

    def __init__(self, include_dirs=(), defines=None, sandboxed=False):
        self.sandboxed = sandboxed
        self.include_dirs = [] if sandboxed else [str(d) for d in include_dirs]
        self.macros = {}
        for name, value in (defines or {}).items():
            self.macros[name] = str(value)
        self.source_map = SourceMap()
        self.out_lines = []
        self.depth = 0

    # -- public -----------------------------------------------------------------------------
    def run_file(self, path):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        self._process(text, path)
        return "\n".join(self.out_lines) + "\n"

    def run_text(self, text, filename):
        self._process(text, filename)
        return "\n".join(self.out_lines) + "\n"

    # -- internals --------------------------------------------------------------------------
    def _emit(self, text, file, line):
        self.out_lines.append(text)
        self.source_map.origins.append((file, line))

    def _process(self, text, file):
        self.depth += 1
        if self.depth > 50:
            raise P4Error("#include nested too deeply (recursive include?)", Loc(file, 1, 1), self.source_map)
        self.source_map.file_lines[file] = text.split("\n")
        lines = strip_comments(text, file, self.source_map).split("\n")
        branches = _Branches()
        i = 0
        while i < len(lines):
            lineno = i + 1
            raw, i = self._spliced_line(lines, i, file)
            m = _DIRECTIVE.match(raw)
            if m is None:
                i = self._text_line(raw, lines, i, file, lineno, branches.active)
                continue
            self._emit("", file, lineno)
            loc = Loc(file, lineno, raw.index("#") + 1)
            self._directive(m.group(1) or "", m.group(2).strip(), loc, branches)
        if branches.groups:
            raise P4Error("#if without matching #endif", Loc(file, len(lines), 1), self.source_map)
        self.depth -= 1

    def _spliced_line(self, lines, i, file):
        """lines[i] joined with the lines its trailing backslashes continue onto (directives only
        matter, but any line is joined), and the index of the line after. Each line joined leaves
        an empty output line, so that the line count stays aligned."""
        raw = lines[i]
        lineno = i + 1
        while raw.endswith("\\") and i + 1 < len(lines):
            i += 1
            raw = raw[:-1] + lines[i]      # as cpp splices: nothing in between
            self._emit("", file, lineno)
        return raw, i + 1

    def _text_line(self, raw, lines, i, file, lineno, active):
        """A line of program text, its macros expanded (an empty line where lines are skipped);
        lines[i] is the one after it. Returns the index of the next line to read."""
        # a macro call whose arguments go on over the next lines (as cpp reads them): they
        # join its first line, and the lines they came from stay empty
        joined = 0
        while active and i < len(lines) and self._open_macro_call(raw) \
                and not _DIRECTIVE.match(lines[i]):
            raw = raw + "\n" + lines[i]
            i += 1
            joined += 1
        unclosed = self._open_macro_call(raw) if joined else None
        if unclosed is not None:
            raise P4Error(f"unterminated argument list of a call of macro '{unclosed.group(0)}'",
                          Loc(file, lineno, unclosed.start() + 1), self.source_map)
        self._emit(self._expand(raw, file, lineno).replace("\n", " ") if active else "", file, lineno)
        for k in range(joined):
            self._emit("", file, lineno + 1 + k)
        return i

    def _directive(self, name, rest, loc, branches):
        """One directive line (`#name rest`). The conditionals are followed in skipped lines too;
        the others act only where lines are taken."""
        conditional = self._CONDITIONALS.get(name)
        if conditional is not None:
            conditional(self, rest, loc, branches)
        elif not branches.active:
            return
        elif name in self._ACTIONS:
            self._ACTIONS[name](self, rest, loc)
        elif name in ("pragma", "line", "warning") or (not name and (not rest or rest[0].isdigit())):
            pass        # (also cpp's null directive '#', and GNU's '# 33' line marker)
        else:
            raise P4Error(f"unknown preprocessor directive '#{name}'", loc, self.source_map)

    # -- conditionals ---------------------------------------------------------------------------
    def _if(self, rest, loc, branches):
        branches.open(self._eval(rest, loc) if branches.active else False)

    def _ifdef(self, rest, loc, branches):
        branches.open(self._macro_name(rest, loc) in self.macros)

    def _ifndef(self, rest, loc, branches):
        branches.open(self._macro_name(rest, loc) not in self.macros)

    def _elif(self, rest, loc, branches):
        group = self._group_before_else("#elif", loc, branches)
        taking = group[2] and not group[1] and self._eval(rest, loc)
        group[0] = taking
        group[1] = group[1] or taking
        branches.active = taking

    def _else(self, rest, loc, branches):
        group = self._group_before_else("#else", loc, branches)
        taking = group[2] and not group[1]
        group[0], group[1], group[3] = taking, True, True
        branches.active = taking

    def _endif(self, rest, loc, branches):
        if not branches.groups:
            raise P4Error("#endif without matching #if", loc, self.source_map)
        branches.active = branches.groups.pop()[2]

    def _group_before_else(self, directive, loc, branches):
        """The innermost open #if group, which must not have had its #else yet."""
        if not branches.groups or branches.groups[-1][3]:
            raise P4Error(f"{directive} without matching #if", loc, self.source_map)
        return branches.groups[-1]

    # -- the directives of taken lines ------------------------------------------------------------
    def _define(self, rest, loc):
        mm = _IDENT.match(rest)
        if not mm:
            raise P4Error("#define needs a macro name", loc, self.source_map)
        macro = mm.group(0)
        body = rest[mm.end():]
        if body.startswith("("):       # NAME(params) body: a function-like macro
            self.macros[macro] = self._function_like_macro(macro, body, loc)
        else:
            body = body.strip()
            self._check_paste(macro, body, loc)
            self.macros[macro] = _PASTE.sub("", body) if "##" in body else body

    def _function_like_macro(self, macro, body, loc):
        """(params, body) of `#define macro(params) body`; `body` starts at the '('."""
        close = body.find(")")
        params = [x.strip() for x in body[1:close].split(",")] if close > 0 else None
        if params == [""]:
            params = []
        if params is None or not all(_IDENT.fullmatch(x) for x in params):
            raise P4Error(f"#define {macro}(...): parameters must be names", loc, self.source_map)
        text_body = body[close + 1:].strip()
        for m in re.finditer(r"(?<!#)#(?!#)\s*([A-Za-z_][A-Za-z0-9_]*)?", text_body):
            if m.group(1) not in params:
                raise P4Error(f"#define {macro}: '#' must be followed by a parameter", loc,
                              self.source_map)
        self._check_paste(macro, text_body, loc)
        return params, text_body

    def _undef(self, rest, loc):
        self.macros.pop(self._macro_name(rest, loc), None)

    def _error(self, rest, loc):
        raise P4Error(f"#error {rest}", loc, self.source_map)

    def _check_paste(self, macro, body, loc):
        if body.startswith("##") or body.endswith("##"):
            raise P4Error(f"#define {macro}: '##' cannot be at either end of a macro body", loc,
                          self.source_map)

    def _macro_name(self, rest, loc):
        m = _IDENT.match(rest)
        if not m:
            raise P4Error("expected a macro name", loc, self.source_map)
        return m.group(0)

    def _include(self, rest, loc):
        file = loc.file
        rest = self._expand(rest, file, loc.line).strip()
        if rest.startswith("<") and rest.endswith(">"):
            name = rest[1:-1]
            candidates = [BUNDLED_INCLUDE] + self.include_dirs
        elif rest.startswith('"') and rest.endswith('"'):
            name = rest[1:-1]
            here = os.path.dirname(os.path.abspath(file)) if os.path.exists(file) else os.getcwd()
            candidates = [here] + self.include_dirs + [BUNDLED_INCLUDE]
        else:
            raise P4Error(f"#include expects \"file\" or <file>, got '{rest}'", loc, self.source_map)
        if self.sandboxed:
            if os.path.basename(name) != name or name.startswith("."):
                raise P4Error(f"#include '{name}': a device config may include only the bundled files "
                              f"({', '.join(sorted(os.listdir(BUNDLED_INCLUDE)))})", loc, self.source_map)
            candidates = [BUNDLED_INCLUDE]
        for d in candidates:
            path = os.path.join(d, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                shown = path if d != BUNDLED_INCLUDE else name
                self._process(text, shown)
                return
        raise P4Error(f"cannot find include file '{name}'", loc, self.source_map)

    def _expand(self, text, file, line, seen=frozenset()):
        if not self.macros:
            return text
        out, pos, size, counted = [], 0, 0, 0
        while True:
            # macros that double at every level (#define A1 A0 A0 ...) grow exponentially
            size += sum(len(piece) for piece in out[counted:])
            counted = len(out)
            if size > MAX_EXPANSION:
                raise P4Error(f"macro expansion of this line exceeds {MAX_EXPANSION} characters",
                              Loc(file, line, 1), self.source_map)
            m = _TOKEN_OR_STRING.search(text, pos)
            if m is None:
                out.append(text[pos:])
                return "".join(out)
            out.append(text[pos:m.start()])
            tok, pos = m.group(0), m.end()
            macro = self.macros.get(tok) if not tok.startswith('"') and tok not in seen else None
            if macro is None:
                out.append(tok)
            elif isinstance(macro, str):
                out.append(self._expand(macro, file, line, seen | {tok}))
            else:
                call = self._macro_args(text, pos)
                if call is None:          # the name without arguments is not a macro call
                    out.append(tok)
                    continue
                args, pos = call
                params, body = macro
                if len(args) != len(params) and not (params == [] and args == [""]):
                    raise P4Error(f"macro {tok} takes {len(params)} argument(s), got {len(args)}",
                                  Loc(file, line, m.start() + 1), self.source_map)
                raw = {p: a.strip() for p, a in zip(params, args)}
                values = {p: self._expand(a, file, line, seen) for p, a in raw.items()}
                out.append(self._expand(_substitute(body, raw, values), file, line, seen | {tok}))

    def _open_macro_call(self, text):
        """The name (a match in `text`) of a function-like macro whose call's arguments `text`
        leaves open; None if there is none."""
        for m in _TOKEN_OR_STRING.finditer(text):
            macro = self.macros.get(m.group(0))
            if isinstance(macro, tuple) and self._macro_args(text, m.end()) is None:
                rest = text[m.end():].lstrip(" \t")
                if rest.startswith("("):
                    return m
        return None

    @staticmethod
    def _macro_args(text, pos):
        """The arguments of a function-like macro call starting at text[pos] ('(' after spaces)."""
        i = pos
        while i < len(text) and text[i] in " \t":
            i += 1
        if i >= len(text) or text[i] != "(":
            return None
        depth, args, start = 0, [], i + 1
        for j in range(i, len(text)):
            c = text[j]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    args.append(text[start:j])
                    return args, j + 1
            elif c == "," and depth == 1:
                args.append(text[start:j])
                start = j + 1
        return None

    def _eval(self, expr, loc):
        # defined(X) / defined X first, then macro expansion, then a small safe evaluator
        expr = re.sub(r"defined\s*\(\s*([A-Za-z_]\w*)\s*\)|defined\s+([A-Za-z_]\w*)",
                      lambda m: "1" if (m.group(1) or m.group(2)) in self.macros else "0", expr)
        expr = self._expand(expr, loc.file, loc.line)
        # identifiers left after expansion are 0 (as in C); numbers (0x1f, 10UL) stay as they are
        expr = re.sub(r"\d\w*|[A-Za-z_]\w*",
                      lambda m: m.group(0) if m.group(0)[0].isdigit() or m.group(0) in ("and", "or", "not")
                      else "0", expr)
        py = expr.replace("&&", " and ").replace("||", " or ")
        py = re.sub(r"!(?!=)", " not ", py)
        py = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", py)
        try:
            tree = ast.parse(py.strip(), mode="eval")
            return bool(_safe_eval(tree.body))
        except (SyntaxError, ValueError, ZeroDivisionError, RecursionError, MemoryError):
            raise P4Error(f"cannot evaluate #if expression '{expr.strip()}'", loc, self.source_map) from None

    _CONDITIONALS = {"if": _if, "ifdef": _ifdef, "ifndef": _ifndef, "elif": _elif, "else": _else,
                     "endif": _endif}
    _ACTIONS = {"define": _define, "undef": _undef, "include": _include, "error": _error}


class _Branches:
    """The #if groups open in one file, innermost last, each [taking_now, some_branch_taken,
    parent_active, seen_else]; `active`: whether the lines are taken here."""

    def __init__(self):
        self.groups = []
        self.active = True

    def open(self, cond):
        taking = self.active and cond
        self.groups.append([taking, taking, self.active, False])
        self.active = taking


def _int64(value):
    """#if arithmetic is done in 64 bits, as C preprocessors do (intmax_t): no huge numbers."""
    return ((value + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)


def _shift(a, b, left):
    if b < 0:
        raise ValueError("negative shift")
    if left:
        return a << b if b < 64 else 0
    return a >> min(b, 64)


def _safe_eval(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return _int64(node.value)
    if isinstance(node, ast.BoolOp):
        vals = [_safe_eval(v) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.UnaryOp):
        v = _safe_eval(node.operand)
        return _int64({ast.Not: lambda: int(not v), ast.USub: lambda: -v, ast.UAdd: lambda: v,
                       ast.Invert: lambda: ~v}[type(node.op)]())
    if isinstance(node, ast.BinOp):
        a, b = _safe_eval(node.left), _safe_eval(node.right)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b, ast.Div: lambda: a // b, ast.Mod: lambda: a % b,
               ast.LShift: lambda: _shift(a, b, True), ast.RShift: lambda: _shift(a, b, False),
               ast.BitAnd: lambda: a & b, ast.BitOr: lambda: a | b, ast.BitXor: lambda: a ^ b}
        if type(node.op) in ops:
            return _int64(ops[type(node.op)]())
    if isinstance(node, ast.Compare):
        left = _safe_eval(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            right = _safe_eval(right_node)
            ok = {ast.Eq: left == right, ast.NotEq: left != right, ast.Lt: left < right,
                  ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right}.get(type(op))
            if ok is None:
                raise ValueError("bad comparison")
            if not ok:
                return 0
            left = right
        return 1
    if isinstance(node, ast.IfExp):
        return _safe_eval(node.body) if _safe_eval(node.test) else _safe_eval(node.orelse)
    raise ValueError("unsupported")


def _substitute(body, raw, values):
    """A function-like macro's body with its arguments in, as cpp does: `#p` is the argument's
    text as a string literal, a parameter next to `##` is its text unexpanded, and `##` then
    joins its neighbours; other parameters are their expanded arguments."""
    tokens = _BODY_TOKEN.findall(body)
    solid = [i for i, t in enumerate(tokens) if not t.isspace()]
    skip = set()
    for n, i in enumerate(solid):
        t = tokens[i]
        before = tokens[solid[n - 1]] if n else None
        after = tokens[solid[n + 1]] if n + 1 < len(solid) else None
        if t == "#" and after in raw:
            arg = raw[after].replace("\\", "\\\\").replace('"', '\\"')
            tokens[i], tokens[solid[n + 1]] = f'"{arg}"', ""
            skip.add(solid[n + 1])
            for k in range(i + 1, solid[n + 1]):
                tokens[k] = ""          # the spaces between # and its parameter
        elif i not in skip and t in raw:
            tokens[i] = raw[t] if "##" in (before, after) else values[t]
    out = "".join(tokens)
    return _PASTE.sub("", out) if "##" in body else out
