"""Source text -> AST: preprocessing, type-name discovery, LALR parsing (lark) and tree building.

The AST is made of `Node`s: a kind string, a location, and keyword fields. Keeping one generic
node class keeps the frontend small; the checker and the compiler dispatch on `kind`.
"""
import codecs
import re
import threading

from lark import Lark, Token, Transformer, v_args
from lark.lexer import BasicLexer, Lexer, LexerState
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from .errors import TOO_DEEP, Loc, P4Error, deepest_point
from .resource_limits import MAX_BIT_WIDTH, MAX_LITERAL_DIGITS
from .grammar import GRAMMAR
from .preprocess import Preprocessor

# Escape sequences in a string literal, each decoded on its own: decoding the whole literal with
# "unicode_escape" would read UTF-8 text (an @name in any script) as Latin-1.
# An unknown escape (\q) is kept as written.
_ESCAPE = re.compile(r"\\(?:[0-7]{1,3}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[\\'\"abfnrtv\n])")


def _unescape(match):
    try:
        return codecs.decode(match.group(0), "unicode_escape")
    except UnicodeDecodeError:     # \U beyond U+10FFFF: kept as written
        return match.group(0)


class Node:
    __slots__ = ("kind", "loc", "__dict__")

    def __init__(self, kind, loc, **fields):
        self.kind = kind
        self.loc = loc
        self.__dict__.update(fields)

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{self.kind}({inner})"


_parser = None
_CURRENT = threading.local()


class _P4Lexer(Lexer):
    """lark's basic lexer plus p4c-style token feedback: identifiers naming types become
    TYPE_IDENT, '<' right after `lookahead`/`extract` opens type arguments (TLT), and a '>'
    immediately followed by '>' is SHR_GT (so `>>` closes two lists or shifts), and a '{' opening a
    structure-valued expression {f = e, ...} is SLBRACE. The parenthesized body of an annotation
    nobody parses (p4c parses only those it knows) is one FREE_BODY token: any tokens may be in it."""

    def __init__(self, lexer_conf):
        self.basic = BasicLexer(lexer_conf)

    def lex(self, data):
        type_names = _CURRENT.type_names
        data = _CURRENT.lexed = _PRAGMA.sub(_pragma_as_annotation, data)
        prev = before = None
        state = LexerState(data)
        merge_next = False
        shadows = _Shadows()
        for tok in self.basic.lex(state, None):
            if merge_next:          # the '>=' of a `>>=` already yielded
                merge_next = False
                continue
            t = tok.type
            if t == "LPAR" and before is not None and before.value == "@" \
                    and _IDENT.fullmatch(prev.value) and prev.value not in _PARSED_ANNOTATIONS:
                end = _free_body_end(data, tok.start_pos)
                if end is not None:     # (else: unbalanced, the parser reports where)
                    state.line_ctr.feed(data[tok.end_pos:end])
                    tok = Token.new_borrow_pos("FREE_BODY", data[tok.start_pos:end], tok)
                    t = tok.type
            if t == "NAME":
                if tok.value in type_names and not shadows.names_object(tok, prev, data):
                    tok.type = "TYPE_IDENT"
                elif tok.value == "type" and (prev is None or prev.value in (";", "}", ")")
                                              or prev.type == "FREE_BODY"
                                              or (before is not None and before.value == "@")) \
                        and _NEWTYPE_FOLLOWS.match(data, tok.end_pos):
                    tok.type = "NEWTYPE"        # `type bit<8> T;` (elsewhere `type` is a name)
            elif t == "LT":
                if prev is not None and prev.type == "NAME" and (
                        (prev.value in _GENERIC_FUNCS and prev.end_pos == tok.start_pos)
                        or _type_args_follow(data, tok.end_pos, type_names)):
                    tok.type = "TLT"
            elif t == "GT":
                if data.startswith(">=", tok.end_pos):     # `x >>= n`: '>' then '>=' from the lexer
                    tok = Token.new_borrow_pos("OPASSIGN", ">>=", tok)
                    t, merge_next = tok.type, True
                elif data.startswith(">", tok.end_pos):
                    tok.type = "SHR_GT"
            elif t == "LBRACE" and prev is not None and prev.value in _VALUE_BRACE_AFTER \
                    and _struct_expression_at(data, tok.end_pos):
                tok.type = "SLBRACE"
            shadows.follow(tok)
            prev, before = tok, prev
            yield tok


class _Shadows:
    """Variables, parameters and fields named like a type (`bit<16> counter;`, `action
    a(bit<9> meter)`): p4c's lexer reads such a name as an identifier in the scope that declares
    it, and so does this one, by brace depth. A parameter's scope is the body after its list."""

    _TYPE_END = {"GT", "TYPE_IDENT"}
    _TYPE_WORDS = {"bool", "bit", "int", "error", "string", "varbit"}

    def __init__(self):
        self.scopes = [set()]       # per open brace
        self.fields = [False]       # per open brace: a struct's, header's or union's fields
        self.pending = set()        # parameters, for the next '{'
        self.parens = 0
        self.in_typedef = False
        self.fields_next = False    # the next '{' opens fields (which p4c does not declare)
        self.for_next = False       # after `for`: its '(' opens the loop's header
        self.for_parens = 0         # the paren depth of the for header being read (0: none)

    def names_object(self, tok, prev, data):
        """Whether type name `tok` names an object here: declared now, or earlier in scope."""
        name = tok.value
        if any(name in scope for scope in self.scopes):
            return True
        if self.in_typedef or self.fields[-1] or prev is None \
                or not (prev.type in self._TYPE_END or prev.value in self._TYPE_WORDS):
            return False
        follows = _NEXT_CHAR.match(data, tok.end_pos)
        if follows is None or follows.group(1) not in ";=,)[":
            return False
        # a C-style for loop's variable: p4c declares it in the enclosing block, from here on
        in_for_header = self.for_parens and self.parens == self.for_parens
        (self.pending if self.parens and not in_for_header else self.scopes[-1]).add(name)
        return True

    def follow(self, tok):
        v = tok.value
        if v == "for" and tok.type != "NAME":
            self.for_next = True
        elif v == "typedef" or tok.type == "NEWTYPE":
            self.in_typedef = True
        elif v in ("struct", "header", "header_union"):
            self.fields_next = True
        elif v == "(":
            self.parens += 1
            if self.for_next:
                self.for_parens, self.for_next = self.parens, False
        elif v == ")":
            if self.parens == self.for_parens:
                self.for_parens = 0
            self.parens = max(0, self.parens - 1)
        elif v == "{":
            self.scopes.append(self.pending)
            self.fields.append(self.fields_next)
            self.pending, self.fields_next = set(), False
        elif v == "}":
            if len(self.scopes) > 1:
                self.scopes.pop()
                self.fields.pop()
        elif v == ";" and not self.parens:
            self.pending = set()
            self.in_typedef = self.fields_next = False


_NEXT_CHAR = re.compile(r"\s*(\S)")

# annotations whose arguments p4c (front end, BMv2 back end, P4Runtime) or this engine parse
_PARSED_ANNOTATIONS = {
    "atomic", "defaultonly", "hidden", "likely", "noSideEffects", "optional", "pure", "tableonly",
    "unlikely", "disable_optimization", "unroll", "nounroll", "name", "deprecated", "noWarn",
    "length", "pkginfo", "synchronous", "field_list", "match", "command_line", "metadata", "alias",
    "priority", "p4runtime_translation_mappings", "p4runtime_translation", "controller_header", "id",
    "brief", "description", "platform_property", "max_group_size", "selector_size_semantics",
    "max_member_weight"}
# parsed here, but p4c's P4Info shows them as written (its front end leaves them unparsed)
_KEPT_AS_TEXT = {"p4runtime_translation_mappings"}
_IDENT = re.compile(r"[A-Za-z_]\w*")
# a string literal as p4c's lexer reads it: it may span lines (the grammar's STRING too)
_STRING_LITERAL = r'"(?:\\.|[^"\\])*"'
_BODY_STOP = re.compile(_STRING_LITERAL + r"|[()]")


# `@pragma NAME BODY` (to the end of the line, which a string in it may carry on) is p4c's other
# spelling of @NAME(BODY)
_PRAGMA = re.compile(r"@pragma[ \t]+([A-Za-z_]\w*)[ \t]*((?:" + _STRING_LITERAL + r'|[^\n"])*)')


def _pragma_as_annotation(m):
    """@NAME(BODY), its body kept at its column (the line grows by the closing parenthesis)."""
    name, body = m.group(1), m.group(2).rstrip()
    if not body:
        return "@" + name + " " * (len(m.group(0)) - len(name) - 1)
    pad = m.start(2) - m.start(0) - len(name) - 2
    return "@" + name + "(" + " " * pad + body + ")"


def _free_body_end(data, pos):
    """Where the parenthesized text starting at data[pos] == '(' ends (past its ')'), string
    literals skipped; None if it never closes. Its text may hold any characters (as in p4c)."""
    depth = 0
    for m in _BODY_STOP.finditer(data, pos):
        c = m.group(0)
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return m.end()
    return None


# a '{' after a name or a keyword opens a body (a table's, a parser state's); one after these
# may start a value
_VALUE_BRACE_AFTER = {"=", "(", ",", "==", "!=", ")", "?", ":", "{", "return"}
_NAMED_ITEM = re.compile(r"\s*[A-Za-z_]\w*\s*=(?!=)")
_SCAN_STOP = re.compile(r'[;,(){}\[\]"]')
_STRING = re.compile(_STRING_LITERAL)


def _struct_expression_at(data, pos):
    """After '{': does a structure-valued expression {f = e, ...} start here? `{ f = e;` opens a
    block whose first statement is an assignment: what ends the first item at nesting depth 0,
    ';' or one of ',' '}', tells them apart (one token of lookahead cannot)."""
    m = _NAMED_ITEM.match(data, pos)
    if not m:
        return False
    depth, i = 0, m.end()
    while True:
        m = _SCAN_STOP.search(data, i)
        if m is None:
            return False
        c = m.group(0)
        if c == '"':        # skip a string literal
            end = _STRING.match(data, m.start())
            i = end.end() if end else m.end()
            continue
        if c in "([{":
            depth += 1
        elif depth and c in ")]}":
            depth -= 1
        elif depth == 0:
            return c in ",}"
        i = m.end()


_NEWTYPE_FOLLOWS = re.compile(r"\s+[A-Za-z_]\w*\s*(<|[A-Za-z_])")     # `type bit<...` / `type T Name`
_TYPE_ARGS = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)[\w\s<>,]*?>\s*\(")
_BUILTIN_TYPES = {"bit", "int", "bool", "varbit", "tuple", "error"}


def _type_args_follow(data, pos, type_names):
    """After `name<`: do type arguments and `(` follow (a generic call like digest<T>(...))?"""
    m = _TYPE_ARGS.match(data, pos, pos + 200)
    return bool(m) and (m.group(1) in type_names or m.group(1) in _BUILTIN_TYPES or m.group(1) == "_")


def _get_parser():
    global _parser
    if _parser is None:
        _parser = Lark(GRAMMAR, parser="lalr", lexer=_P4Lexer, propagate_positions=True,
                       maybe_placeholders=True)
    return _parser


# ---------------------------------------------------------------------------------------------
# type names: p4c's lexer knows which identifiers name types; we find them by scanning first.
_SCAN_TOKEN = re.compile(_STRING_LITERAL + r"|[A-Za-z_][A-Za-z0-9_]*|\d\w*|\S")
_TYPE_DECL_KW = {"header", "header_union", "struct", "extern", "parser", "control", "package", "enum"}
_SOFT = {"apply", "state", "key"}
_GENERIC_FUNCS = {"lookahead", "extract"}


def scan_type_names(text):
    toks = [m.group(0) for m in _SCAN_TOKEN.finditer(text)]
    names = set()
    n = len(toks)

    def take_params(j):
        # toks[j] == '<' : collect identifiers up to the matching '>'
        depth = 0
        while j < n:
            t = toks[j]
            if t == "<":
                depth += 1
            elif t == ">":
                depth -= 1
                if depth == 0:
                    return j
            elif depth == 1 and (toks[j - 1] in ("<", ",")) and re.match(r"[A-Za-z_]", t) and \
                    j + 1 < n and toks[j + 1] in (",", ">"):
                names.add(t)
            j += 1
        return j

    for i, t in enumerate(toks):
        if t in _TYPE_DECL_KW and i + 1 < n:
            j = i + 1
            if t == "enum" and toks[j] in ("bit", "int"):
                # enum bit<8> Name
                while j < n and toks[j] != ">":
                    j += 1
                j += 1
            elif t == "enum" and j + 2 < n and toks[j + 2] == "{" and re.match(r"[A-Za-z_]", toks[j + 1]):
                j += 1      # enum T Name { ... }: T a typedef of bit<W>
            if j < n and re.match(r"[A-Za-z_]", toks[j]):
                if t == "extern":
                    # extern Name {  /  extern Name<...> {  => type; otherwise a function
                    if j + 1 < n and toks[j + 1] in ("{", "<"):
                        if toks[j + 1] == "<":
                            k = take_params(j + 1)
                            if k + 1 < n and toks[k + 1] == "{":
                                names.add(toks[j])
                        else:
                            names.add(toks[j])
                    continue
                names.add(toks[j])
                if j + 1 < n and toks[j + 1] == "<":
                    take_params(j + 1)
        elif (t == "typedef" or (t == "type" and i + 2 < n and re.match(r"[A-Za-z_]", toks[i + 1])
                                 and (toks[i + 2] == "<" or re.match(r"[A-Za-z_]", toks[i + 2])))) \
                and (i == 0 or toks[i - 1] in (";", "}", ")") or (i > 1 and toks[i - 2] == "@")):
            j, depth = i + 1, 0
            while j < n and (toks[j] != ";" or depth):     # typedef struct S { ... } T;
                depth += (toks[j] == "{") - (toks[j] == "}")
                j += 1
            if j - 1 > i and re.match(r"[A-Za-z_]", toks[j - 1]):
                names.add(toks[j - 1])
        elif t == "<" and i > 0 and re.match(r"[A-Za-z_]", toks[i - 1]):
            # generic function/method declaration: name<T, U>(
            k = take_params_peek(toks, i)
            if k is not None and k + 1 < n and toks[k + 1] == "(" and i > 1 and \
                    re.match(r"[A-Za-z_]", toks[i - 2]) and toks[i - 2] not in ("return",):
                take_params(i)
    return names


def take_params_peek(toks, i):
    depth = 0
    for j in range(i, min(len(toks), i + 40)):
        if toks[j] == "<":
            depth += 1
        elif toks[j] == ">":
            depth -= 1
            if depth == 0:
                return j
        elif toks[j] in (";", "{", "}", "(", ")", "=", "&&", "|"):
            return None
    return None


# ---------------------------------------------------------------------------------------------
def parse_program(path=None, text=None, filename="<string>", include_dirs=(), defines=None, sandboxed=False):
    """Preprocess and parse; returns (list of declaration Nodes, SourceMap)."""
    pp = Preprocessor(include_dirs, defines, sandboxed=sandboxed)
    try:
        if path is not None:
            out = pp.run_file(path)
        else:
            out = pp.run_text(text, filename)
    except P4Error as e:
        raise e.with_source_map(pp.source_map) from None
    except OSError as e:
        raise P4Error(f"cannot read {path}: {e.strerror}", Loc(str(path), 0, 0)) from None
    smap = pp.source_map
    type_names = scan_type_names(out)

    def loc_of(line, col):
        file, fline = smap.origin(line)
        return Loc(file, fline, col)

    parser = _get_parser()
    _CURRENT.type_names = type_names
    try:
        tree = parser.parse(out)
    except UnexpectedInput as e:
        raise _syntax_error(e, loc_of, smap) from None
    builder = AstBuilder(loc_of)
    try:
        decls = builder.transform(tree)
    except P4Error as e:
        raise e.with_source_map(smap) from None
    except RecursionError:
        raise P4Error(TOO_DEEP, loc_of(*deepest_point(out)), smap) from None
    except Exception as e:  # lark wraps our errors in VisitError
        inner = getattr(e, "orig_exc", None)
        if isinstance(inner, P4Error):
            raise inner.with_source_map(smap) from None
        if isinstance(inner, RecursionError):
            meta = getattr(getattr(e, "obj", None), "meta", None)
            where = (meta.line, meta.column) if getattr(meta, "line", None) else deepest_point(out)
            raise P4Error(TOO_DEEP, loc_of(*where), smap) from None
        raise
    return decls, smap


def _syntax_error(e, loc_of, smap):
    line = getattr(e, "line", 0) or 0
    col = getattr(e, "column", 0) or 0
    if isinstance(e, UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            msg = "syntax error: unexpected end of program"
        else:
            what = tok.value
            msg = f"syntax error: unexpected '{what}'"
            if tok.type == "TYPE_IDENT":
                msg += " (a type name here)"
            if what in ("varbit", "abstract", "this"):
                msg = f"'{what}' is not supported by this engine (outside the P4 subset)"
            elif what == "value_set":
                msg = "a value_set can only be declared among a parser's locals, before its states"
        exp = sorted(x for x in (e.expected or ()) if not x.startswith("__"))
        if exp and len(exp) <= 6 and tok.type != "$END":
            msg += "; expected one of " + ", ".join(_pretty_term(x) for x in exp)
    elif isinstance(e, UnexpectedCharacters):
        msg = f"syntax error: unexpected character '{e.char}'"
    elif isinstance(e, UnexpectedEOF):
        msg = "syntax error: unexpected end of program"
    else:
        msg = "syntax error"
    return P4Error(msg, loc_of(line, col), smap)


_TERM_NAMES = {"SEMICOLON": "';'", "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'",
               "COMMA": "','", "COLON": "':'", "EQUAL": "'='", "NAME": "an identifier",
               "TYPE_IDENT": "a type name", "GT": "'>'", "LT": "'<'", "DOT": "'.'", "INT": "a number",
               "LSQB": "'['", "RSQB": "']'"}


def _pretty_term(t):
    return _TERM_NAMES.get(t, t.lower())


# ---------------------------------------------------------------------------------------------
def _tok(x):
    return isinstance(x, Token)


def _dims(typ, dims):
    """The type of `T name[N][M]` (p4c's declarator): T[N][M], as if written before the name."""
    if dims is not None:
        for size in dims[2]:
            typ = Node("t_stack", dims[1], elem=typ, size=size)
    return typ


def parse_int_literal(text, loc=None):
    """'8w0x1F' -> (31, 8, False); '5' -> (5, None, False); '4s-1' handled by unary minus.
    A width or a decimal beyond the engine's bounds is a P4Error at `loc`."""
    width = None
    signed = False
    m = re.match(r"(\d+)([ws])(.*)$", text)
    if m:
        if len(m.group(1)) > 6 or int(m.group(1)) > MAX_BIT_WIDTH:
            raise P4Error(f"integer literal width {_short(m.group(1))} is above {MAX_BIT_WIDTH}", loc)
        width = int(m.group(1))
        signed = m.group(2) == "s"
        text = m.group(3)
    t = text.replace("_", "")
    low = t.lower()
    if low.startswith("0x"):
        v = int(t[2:], 16)
    elif low.startswith("0b"):
        v = int(t[2:], 2)
    elif low.startswith("0o"):
        v = int(t[2:], 8)
    elif low.startswith("0d"):
        v = int(t[2:], 10)
    else:
        if len(t) > MAX_LITERAL_DIGITS:
            raise P4Error(f"integer literal {_short(t)} has more than {MAX_LITERAL_DIGITS} digits", loc)
        v = int(t, 10)
    return v, width, signed


def _short(text):
    return text if len(text) <= 20 else f"{text[:20]}... ({len(text)} characters)"


class AstBuilder(Transformer):
    """lark Tree -> Node. Methods get the children list and the tree meta."""

    def __init__(self, loc_of):
        super().__init__(visit_tokens=False)
        self.loc_of = loc_of

    def _loc(self, meta):
        if getattr(meta, "empty", True) and not hasattr(meta, "line"):
            return Loc("<unknown>", 0, 0)
        return self.loc_of(meta.line, meta.column)

    def _tloc(self, tok):
        if not _tok(tok):
            return Loc("<unknown>", 0, 0)
        return self.loc_of(tok.line, tok.column)

    def __default__(self, data, children, meta):
        raise P4Error(f"internal: unhandled grammar rule '{data}'", self._loc(meta))

    # -- helpers
    @staticmethod
    def _annos(x):
        return x if isinstance(x, list) else []

    # -- top
    @v_args(meta=True)
    def start(self, meta, ch):
        return [d for c in ch for d in (c if isinstance(c, list) else [c]) if isinstance(d, Node)]

    @v_args(meta=True)
    def annotations(self, meta, ch):
        names = [a.name for a in ch]
        for a in ch:
            if getattr(a, "structured", False) and names.count(a.name) > 1:
                raise P4Error(f"@{a.name}: duplicate name for structured annotation", a.loc)
        return list(ch)

    @v_args(meta=True)
    def free_annotation(self, meta, ch):
        return Node("annotation", self._loc(meta), name=str(ch[0]), args=[], body=str(ch[1]))

    @v_args(meta=True)
    def structured_annotation(self, meta, ch):
        node = self.annotation(meta, ch)
        if len({arg.kind == "kv" for arg in node.args}) > 1:
            raise P4Error(f"@{node.name}: a structured annotation lists either values or "
                          "key = value pairs, not both", node.loc)
        for arg in node.args:
            value = arg.value if arg.kind == "kv" else arg
            if value.kind in ("list", "struct_expr"):
                raise P4Error(f"@{node.name}: illegal type for structured annotation; must be int, "
                              "string or bool", value.loc)
        node.structured = True
        return node

    @v_args(meta=True)
    def annotation(self, meta, ch):
        name = str(ch[0])
        args = ch[1] if len(ch) > 1 and ch[1] is not None else []
        node = Node("annotation", self._loc(meta), name=name, args=args)
        if name in _KEPT_AS_TEXT and args:
            written = _CURRENT.lexed[meta.start_pos:meta.end_pos]
            node.text = written[written.index("("):]
        return node

    def ann_args(self, ch):
        return list(ch)

    s_ann_args = ann_args

    @v_args(meta=True)
    def ann_arg(self, meta, ch):
        if len(ch) == 2:
            return Node("kv", self._loc(meta), key=str(ch[0]), value=ch[1])
        return ch[0]

    # -- types
    @v_args(meta=True)
    def t_void(self, meta, ch):
        return Node("t_void", self._loc(meta))

    @v_args(meta=True)
    def t_error(self, meta, ch):
        return Node("t_error", self._loc(meta))

    @v_args(meta=True)
    def t_match_kind(self, meta, ch):
        return Node("t_match_kind", self._loc(meta))

    @v_args(meta=True)
    def t_string(self, meta, ch):
        return Node("t_string", self._loc(meta))

    @v_args(meta=True)
    def t_tuple(self, meta, ch):
        return Node("t_tuple", self._loc(meta), types=next((c for c in ch if isinstance(c, list)), []))  # tuple<>

    @v_args(meta=True)
    def t_list(self, meta, ch):
        return Node("t_list", self._loc(meta), elem=[c for c in ch if isinstance(c, Node)][0])

    @v_args(meta=True)
    def t_dontcare(self, meta, ch):
        return Node("t_dontcare", self._loc(meta))

    @v_args(meta=True)
    def t_bool(self, meta, ch):
        return Node("t_bool", self._loc(meta))

    @v_args(meta=True)
    def t_bit1(self, meta, ch):
        return Node("t_bit", self._loc(meta), width=Node("int", self._loc(meta), value=1, width=None, signed=False))

    @v_args(meta=True)
    def t_bit(self, meta, ch):
        return Node("t_bit", self._loc(meta), width=[c for c in ch if isinstance(c, Node)][0])

    @v_args(meta=True)
    def t_int(self, meta, ch):
        return Node("t_int", self._loc(meta), width=[c for c in ch if isinstance(c, Node)][0])

    @v_args(meta=True)
    def t_infint(self, meta, ch):
        return Node("t_infint", self._loc(meta))

    @v_args(meta=True)
    def t_varbit(self, meta, ch):
        return Node("t_varbit", self._loc(meta), width=[c for c in ch if isinstance(c, Node)][0])

    @v_args(meta=True)
    def width(self, meta, ch):
        c = ch[0]
        if _tok(c):
            v, w, s = parse_int_literal(str(c), self._tloc(c))
            return Node("int", self._tloc(c), value=v, width=w, signed=s)
        return c

    @v_args(meta=True)
    def named_type(self, meta, ch):
        return Node("t_named", self._loc(meta), name=str(ch[0]))

    @v_args(meta=True)
    def spec_type(self, meta, ch):
        args = [c for c in ch if isinstance(c, list)][0]
        return Node("t_spec", self._loc(meta), name=str(ch[0]), args=args)

    def type_list(self, ch):
        return [c for c in ch if isinstance(c, Node)]

    @v_args(meta=True)
    def stack_type(self, meta, ch):
        return Node("t_stack", self._loc(meta), elem=ch[0], size=ch[1])

    @v_args(meta=True)
    def type_params(self, meta, ch):
        lst = [c for c in ch if isinstance(c, list)][0]
        names = []
        for t in lst:
            if t.kind != "t_named":
                raise P4Error("type parameter must be a plain name", t.loc)
            names.append(t.name)
        return names

    # -- declarations
    @v_args(meta=True)
    def const_decl(self, meta, ch):
        return Node("const", self._loc(meta), annos=self._annos(ch[0]), type=_dims(ch[1], ch[3]), name=str(ch[2]),
                    value=ch[4])

    @v_args(meta=True)
    def typedef_decl(self, meta, ch):
        # `type` (a new type) is treated as a typedef: the same values and representation
        newtype = any(_tok(c) and c.type == "NEWTYPE" for c in ch)
        ch = [c for c in ch if not (_tok(c) and c.type == "NEWTYPE")]
        return Node("typedef", self._loc(meta), annos=self._annos(ch[0]), type=ch[1], name=str(ch[2]),
                    newtype=newtype)

    @v_args(meta=True)
    def typedef_derived(self, meta, ch):
        # p4c's typedef of a derivedTypeDeclaration declares both names: the type, then the typedef
        decl = ch[1]
        alias = Node("typedef", self._loc(meta), annos=self._annos(ch[0]),
                     type=Node("t_named", decl.loc, name=decl.name), name=str(ch[2]), newtype=False)
        return [decl, alias]

    def _fields_decl(self, kind, meta, ch):
        return Node(kind, self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]),
                    tparams=ch[2] or [], fields=[c for c in ch[3:] if isinstance(c, Node)])

    @v_args(meta=True)
    def header_decl(self, meta, ch):
        return self._fields_decl("header", meta, ch)

    @v_args(meta=True)
    def struct_decl(self, meta, ch):
        return self._fields_decl("struct", meta, ch)

    @v_args(meta=True)
    def union_decl(self, meta, ch):
        return self._fields_decl("header_union", meta, ch)

    @v_args(meta=True)
    def field(self, meta, ch):
        return Node("field", self._loc(meta), annos=self._annos(ch[0]), type=_dims(ch[1], ch[3]), name=str(ch[2]))

    @v_args(meta=True)
    def dims(self, meta, ch):
        return ("dims", self._loc(meta), ch)

    @v_args(meta=True)
    def enum_decl(self, meta, ch):
        return Node("enum", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]),
                    members=[str(c) for c in ch[2:] if _tok(c)])

    @v_args(meta=True)
    def ser_enum_decl(self, meta, ch):
        return Node("ser_enum", self._loc(meta), annos=self._annos(ch[0]), type=ch[1], name=str(ch[2]),
                    members=[c for c in ch[3:] if isinstance(c, tuple)])

    def enum_value(self, ch):
        return (str(ch[0]), ch[1])

    @v_args(meta=True)
    def error_decl(self, meta, ch):
        return Node("error_decl", self._loc(meta), members=[str(c) for c in ch if _tok(c)])

    @v_args(meta=True)
    def match_kind_decl(self, meta, ch):
        return Node("match_kind_decl", self._loc(meta), members=[str(c) for c in ch if _tok(c)])

    @v_args(meta=True)
    def extern_obj(self, meta, ch):
        members = [c for c in ch[3:] if isinstance(c, Node)]
        return Node("extern_obj", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]),
                    tparams=ch[2] or [], ctors=[m for m in members if m.kind == "extern_ctor"],
                    methods=[m for m in members if m.kind == "extern_method"])

    @v_args(meta=True)
    def extern_func(self, meta, ch):
        return Node("extern_func", self._loc(meta), annos=self._annos(ch[0]), proto=ch[1], name=ch[1].name)

    @v_args(meta=True)
    def extern_ctor(self, meta, ch):
        return Node("extern_ctor", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]), params=ch[2])

    @v_args(meta=True)
    def extern_method(self, meta, ch):
        proto = [c for c in ch if isinstance(c, Node) and c.kind == "proto"][0]
        return Node("extern_method", self._loc(meta), annos=self._annos(ch[0]), proto=proto, name=proto.name)

    @v_args(meta=True)
    def function_proto(self, meta, ch):
        return Node("proto", self._loc(meta), ret=ch[0], name=str(ch[1]), tparams=ch[2] or [], params=ch[3])

    @v_args(meta=True)
    def function_decl(self, meta, ch):
        return Node("function", self._loc(meta), annos=self._annos(ch[0]), proto=ch[1], name=ch[1].name, body=ch[2])

    def direction(self, ch):
        return str(ch[0])

    def params(self, ch):
        return [c for c in ch if isinstance(c, Node)]

    @v_args(meta=True)
    def param(self, meta, ch):
        annos, direction, typ, name = ch[0], ch[1], _dims(ch[2], ch[4]), ch[3]
        default = ch[5] if len(ch) > 5 else None
        return Node("param", self._loc(meta), annos=self._annos(annos),
                    direction=str(direction) if direction is not None else None,
                    type=typ, name=str(name), default=default)

    def _typedecl(self, kind, meta, ch):
        return Node(kind, self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]), tparams=ch[2] or [], params=ch[3])

    @v_args(meta=True)
    def package_decl(self, meta, ch):
        return self._typedecl("package_decl", meta, ch)

    @v_args(meta=True)
    def parser_type_decl(self, meta, ch):
        return self._typedecl("parser_type", meta, ch)

    @v_args(meta=True)
    def control_type_decl(self, meta, ch):
        return self._typedecl("control_type", meta, ch)

    @v_args(meta=True)
    def instantiation(self, meta, ch):
        return Node("instance", self._loc(meta), annos=self._annos(ch[0]), type=ch[1], args=ch[2], name=str(ch[3]))

    def ctor_params(self, ch):
        return ("ctor_params", ch[0])

    @v_args(meta=True)
    def parser_decl(self, meta, ch):
        rest = ch[4:]
        ctor = []
        if rest and isinstance(rest[0], tuple):
            ctor = rest[0][1]
            rest = rest[1:]
        locals_ = [c for c in rest if isinstance(c, Node) and c.kind != "state"]
        states = [c for c in rest if isinstance(c, Node) and c.kind == "state"]
        return Node("parser", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]), tparams=ch[2] or [],
                    params=ch[3], ctor_params=ctor, locals=locals_, states=states)

    @v_args(meta=True)
    def value_set_decl(self, meta, ch):
        elem, size = [c for c in ch[1:] if isinstance(c, Node)]
        name = ch[-1]
        return Node("value_set", self._loc(meta), annos=self._annos(ch[0]), elem=elem, size=size,
                    name=str(name), name_loc=self._tloc(name))

    @v_args(meta=True)
    def parser_state(self, meta, ch):
        stmts = [c for c in ch[2:] if isinstance(c, Node) and c.kind not in ("trans_direct", "trans_select")]
        trans = [c for c in ch[2:] if isinstance(c, Node) and c.kind in ("trans_direct", "trans_select")]
        return Node("state", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]), stmts=stmts,
                    transition=trans[0] if trans else None)

    @v_args(meta=True)
    def trans_direct(self, meta, ch):
        return Node("trans_direct", self._loc(meta), target=str(ch[0]), target_loc=self._tloc(ch[0]))

    @v_args(meta=True)
    def trans_select(self, meta, ch):
        sel = ch[0]
        return Node("trans_select", self._loc(meta), exprs=sel.exprs, cases=sel.cases)

    @v_args(meta=True)
    def select_expr(self, meta, ch):
        return Node("select", self._loc(meta), exprs=ch[0], cases=[c for c in ch[1:] if isinstance(c, Node)])

    @v_args(meta=True)
    def select_case(self, meta, ch):
        return Node("select_case", self._loc(meta), keyset=ch[0], target=str(ch[1]), target_loc=self._tloc(ch[1]))

    @v_args(meta=True)
    def keyset_tuple(self, meta, ch):
        return Node("ks_tuple", self._loc(meta), items=list(ch))

    @v_args(meta=True)
    def ks_mask(self, meta, ch):
        return Node("ks_mask", self._loc(meta), value=ch[0], mask=ch[1])

    @v_args(meta=True)
    def ks_range(self, meta, ch):
        return Node("ks_range", self._loc(meta), low=ch[0], high=ch[1])

    @v_args(meta=True)
    def ks_default(self, meta, ch):
        return Node("ks_default", self._loc(meta))

    @v_args(meta=True)
    def control_decl(self, meta, ch):
        rest = ch[4:]
        ctor = []
        if rest and isinstance(rest[0], tuple):
            ctor = rest[0][1]
            rest = rest[1:]
        body = rest[-1]
        return Node("control", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]), tparams=ch[2] or [],
                    params=ch[3], ctor_params=ctor, locals=[c for c in rest[:-1] if isinstance(c, Node)], body=body)

    @v_args(meta=True)
    def action_decl(self, meta, ch):
        return Node("action", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]), params=ch[2], body=ch[3])

    @v_args(meta=True)
    def table_decl(self, meta, ch):
        return Node("table", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]),
                    props=[c for c in ch[2:] if isinstance(c, Node)])

    @v_args(meta=True)
    def tp_key(self, meta, ch):
        return Node("tp_key", self._loc(meta), annos=self._annos(ch[0]), keys=[c for c in ch[1:] if isinstance(c, Node)])

    @v_args(meta=True)
    def tp_actions(self, meta, ch):
        return Node("tp_actions", self._loc(meta), annos=self._annos(ch[0]),
                    actions=[c for c in ch[1:] if isinstance(c, Node)])

    @v_args(meta=True)
    def tp_entries(self, meta, ch):
        return Node("tp_entries", self._loc(meta), annos=self._annos(ch[0]), const=ch[1] is not None,
                    entries=[c for c in ch[2:] if isinstance(c, Node)])

    @v_args(meta=True)
    def tp_value(self, meta, ch):
        return Node("tp_value", self._loc(meta), annos=self._annos(ch[0]), const=ch[1] is not None,
                    name=str(ch[2]), value=ch[3])

    @v_args(meta=True)
    def key_elem(self, meta, ch):
        return Node("key_elem", self._loc(meta), expr=ch[0], match_kind=str(ch[1]), mk_loc=self._tloc(ch[1]),
                    annos=self._annos(ch[2]))

    @v_args(meta=True)
    def action_ref(self, meta, ch):
        return Node("action_ref", self._loc(meta), annos=self._annos(ch[0]), name=str(ch[1]),
                    args=ch[2] if len(ch) > 2 else None)

    @v_args(meta=True)
    def entry(self, meta, ch):
        return Node("entry", self._loc(meta), annos=self._annos(ch[0]), const=ch[1] is not None,
                    priority=ch[2], keyset=ch[3], action=ch[4], annos2=self._annos(ch[5]))

    @v_args(meta=True)
    def entry_priority(self, meta, ch):
        value = ch[0]
        if _tok(value):
            v, w, s = parse_int_literal(str(value), self._tloc(value))
            value = Node("int", self._tloc(value), value=v, width=w, signed=s)
        return value

    # -- statements
    @v_args(meta=True)
    def block(self, meta, ch):
        return Node("block", self._loc(meta), annos=self._annos(ch[0]), stmts=[c for c in ch[1:] if isinstance(c, Node)])

    @v_args(meta=True)
    def empty_stmt(self, meta, ch):
        return Node("empty", self._loc(meta))

    @v_args(meta=True)
    def assignment(self, meta, ch):
        return Node("assign", self._loc(meta), lhs=ch[0], rhs=ch[1])

    @v_args(meta=True)
    def op_assignment(self, meta, ch):
        return Node("assign", self._loc(meta), lhs=ch[0], rhs=ch[2], op=str(ch[1])[:-1])

    @v_args(meta=True)
    def call_stmt(self, meta, ch):
        return Node("call_stmt", self._loc(meta), expr=ch[0])

    @v_args(meta=True)
    def if_stmt(self, meta, ch):
        return Node("if", self._loc(meta), cond=ch[0], then=ch[1], els=ch[2] if len(ch) > 2 else None)

    @v_args(meta=True)
    def for_stmt(self, meta, ch):
        # ch[0]: the statement's annotations (@unroll, @no_unroll: hints the engine has no use for)
        return Node("for", self._loc(meta), init=ch[1], cond=ch[2], update=ch[3], body=ch[4])

    @v_args(meta=True)
    def for_in(self, meta, ch):
        return Node("for_in", self._loc(meta), annos=self._annos(ch[1]), type=ch[2], name=str(ch[3]),
                    collection=ch[4], body=ch[5])

    @v_args(meta=True)
    def for_range(self, meta, ch):
        return Node("for_range", self._loc(meta), low=ch[0], high=ch[1])

    def for_items(self, ch):
        return [c for c in ch if c is not None]

    @v_args(meta=True)
    def for_var(self, meta, ch):
        return Node("var", self._loc(meta), annos=self._annos(ch[0]), type=ch[1], name=str(ch[2]), init=ch[3])

    @v_args(meta=True)
    def break_stmt(self, meta, ch):
        return Node("break", self._loc(meta))

    @v_args(meta=True)
    def continue_stmt(self, meta, ch):
        return Node("continue", self._loc(meta))

    @v_args(meta=True)
    def exit_stmt(self, meta, ch):
        return Node("exit", self._loc(meta))

    @v_args(meta=True)
    def return_stmt(self, meta, ch):
        return Node("return", self._loc(meta), value=ch[0] if ch else None)

    @v_args(meta=True)
    def switch_stmt(self, meta, ch):
        return Node("switch", self._loc(meta), expr=ch[0], cases=[c for c in ch[1:] if isinstance(c, Node)])

    @v_args(meta=True)
    def switch_case(self, meta, ch):
        label = ch[0]
        if _tok(label):
            label = str(label)
        elif isinstance(label, Node) and label.kind == "name":
            label = label.name          # an action name (action_run) or a constant's
        return Node("switch_case", self._loc(meta), label=label, body=ch[1] if len(ch) > 1 else None)

    @v_args(meta=True)
    def sw_default(self, meta, ch):
        return Node("sw_default", self._loc(meta))

    @v_args(meta=True)
    def var_decl(self, meta, ch):
        return Node("var", self._loc(meta), annos=self._annos(ch[0]), type=_dims(ch[1], ch[3]), name=str(ch[2]),
                    init=ch[4] if len(ch) > 4 else None)

    # -- expressions
    def expr_list(self, ch):
        return [c for c in ch if c is not None]

    list_items = expr_list

    def args(self, ch):
        return [c for c in ch if c is not None]

    @v_args(meta=True)
    def named_arg(self, meta, ch):
        return Node("named_arg", self._loc(meta), name=str(ch[0]), value=ch[1])

    @v_args(meta=True)
    def dontcare_arg(self, meta, ch):
        return Node("dontcare", self._loc(meta))

    @v_args(meta=True)
    def named_dontcare_arg(self, meta, ch):     # f(x = 1, y = _)
        return Node("named_arg", self._loc(meta), name=str(ch[0]), value=Node("dontcare", self._loc(meta)))

    @v_args(meta=True)
    def cond(self, meta, ch):
        return Node("cond", self._loc(meta), cond=ch[0], a=ch[1], b=ch[2])

    def _bin(self, op, meta, ch):
        return Node("binop", self._loc(meta), op=op, left=ch[0], right=ch[-1])

    @v_args(meta=True)
    def lor_op(self, meta, ch):
        return self._bin("||", meta, ch)

    @v_args(meta=True)
    def land_op(self, meta, ch):
        return self._bin("&&", meta, ch)

    @v_args(meta=True)
    def binop(self, meta, ch):
        return self._bin(str(ch[1]), meta, ch)

    @v_args(meta=True)
    def gt_op(self, meta, ch):
        return self._bin(">", meta, ch)

    @v_args(meta=True)
    def bor_op(self, meta, ch):
        return self._bin("|", meta, ch)

    @v_args(meta=True)
    def bxor_op(self, meta, ch):
        return self._bin("^", meta, ch)

    @v_args(meta=True)
    def band_op(self, meta, ch):
        return self._bin("&", meta, ch)

    @v_args(meta=True)
    def shl_op(self, meta, ch):
        return self._bin("<<", meta, ch)

    @v_args(meta=True)
    def shr_op(self, meta, ch):
        return self._bin(">>", meta, ch)

    @v_args(meta=True)
    def not_op(self, meta, ch):
        return Node("unop", self._loc(meta), op="!", expr=ch[0])

    @v_args(meta=True)
    def inv_op(self, meta, ch):
        return Node("unop", self._loc(meta), op="~", expr=ch[0])

    @v_args(meta=True)
    def neg_op(self, meta, ch):
        return Node("unop", self._loc(meta), op="-", expr=ch[-1])

    @v_args(meta=True)
    def unary(self, meta, ch):  # unary plus
        return ch[-1]

    @v_args(meta=True)
    def cast(self, meta, ch):
        return Node("cast", self._loc(meta), type=ch[0], expr=ch[1])

    @v_args(meta=True)
    def member(self, meta, ch):
        name = ch[1]
        name = str(name) if _tok(name) else name
        return Node("member", self._loc(meta), expr=ch[0], name=name)

    def kw_name(self, ch):
        # a contextual keyword used as a name is an identifier from here on
        return Token.new_borrow_pos("NAME", str(ch[0]), ch[0])

    table_kw = kw_name
    list_kw = kw_name

    def top_name(self, ch):
        # `.x`: the name as the top level declares it; Scope.lookup reads the leading dot
        return Token.new_borrow_pos("NAME", "." + str(ch[0]), ch[0])

    @v_args(meta=True)
    def index(self, meta, ch):
        return Node("index", self._loc(meta), expr=ch[0], index=ch[1])

    @v_args(meta=True)
    def slice(self, meta, ch):
        return Node("slice", self._loc(meta), expr=ch[0], hi=ch[1], lo=ch[2])

    @v_args(meta=True)
    def plus_slice(self, meta, ch):
        return Node("plus_slice", self._loc(meta), expr=ch[0], lo=ch[1], width=ch[2])

    @v_args(meta=True)
    def call(self, meta, ch):
        return Node("call", self._loc(meta), func=ch[0], args=ch[1], targs=[])

    @v_args(meta=True)
    def generic_call(self, meta, ch):
        lst = [c for c in ch if isinstance(c, list)]
        return Node("call", self._loc(meta), func=ch[0], targs=lst[0], args=lst[1])

    @v_args(meta=True)
    def int_lit(self, meta, ch):
        v, w, s = parse_int_literal(str(ch[0]), self._loc(meta))
        if w is not None and (w < 0 or (w == 0 and s)):    # 0w0 is bit<0>'s value; int<0> is no type
            raise P4Error(f"integer literal '{ch[0]}' has a non-positive width", self._loc(meta))
        low = re.sub(r"^\d+[ws]", "", str(ch[0]).lower())
        base = {"0x": 16, "0b": 2, "0o": 8}.get(low[:2], 10)     # p4c names keys in the literal's base
        return Node("int", self._loc(meta), value=v, width=w, signed=s, base=base)

    @v_args(meta=True)
    def true_lit(self, meta, ch):
        return Node("bool", self._loc(meta), value=True)

    @v_args(meta=True)
    def false_lit(self, meta, ch):
        return Node("bool", self._loc(meta), value=False)

    @v_args(meta=True)
    def string_lit(self, meta, ch):
        raw = str(ch[0])[1:-1]
        return Node("string", self._loc(meta), value=_ESCAPE.sub(_unescape, raw))

    @v_args(meta=True)
    def name_ref(self, meta, ch):
        return Node("name", self._loc(meta), name=str(ch[0]))

    @v_args(meta=True)
    def error_member(self, meta, ch):
        return Node("error_member", self._loc(meta), name=str(ch[0]))

    @v_args(meta=True)
    def type_member(self, meta, ch):
        name = ch[1]
        return Node("type_member", self._loc(meta), type_name=str(ch[0]), name=str(name) if _tok(name) else name)

    @v_args(meta=True)
    def ctor_call(self, meta, ch):
        t = ch[0]
        if _tok(t):
            t = Node("t_named", self._tloc(t), name=str(t))
        return Node("ctor", self._loc(meta), type=t, args=ch[1])

    @v_args(meta=True)
    def list_expr(self, meta, ch):
        for item in ch[0][:-1]:
            if item.kind == "dots":         # p4c's ValidateParsedProgram
                raise P4Error("... must be the last element", item.loc)
        return Node("list", self._loc(meta), items=ch[0])

    @v_args(meta=True)
    def struct_expr(self, meta, ch):
        dots = next((self._tloc(c) for c in ch if _tok(c) and c.type == "DOTS"), None)
        ch = [c for c in ch if c is not None and not _tok(c)]
        names = [name for name, _, _ in ch]
        for i, (name, _, loc) in enumerate(ch):
            if name in names[:i]:
                raise P4Error(f"field '{name}' is given twice in this structure expression", loc)
        return Node("struct_expr", self._loc(meta), names=names, items=[value for _, value, _ in ch],
                    dots=dots)

    @v_args(meta=True)
    def dots(self, meta, ch):
        return Node("dots", self._loc(meta))

    @v_args(meta=True)
    def invalid(self, meta, ch):
        return Node("invalid", self._loc(meta))

    @v_args(meta=True)
    def named_item(self, meta, ch):
        return (str(ch[0]), ch[1], self._loc(meta))

    @v_args(meta=True)
    def this_ref(self, meta, ch):
        raise P4Error("'this' is not supported by this engine (outside the P4 subset)", self._loc(meta))
