"""Annotations in P4Info as p4c writes them (control-plane/p4RuntimeArchHandler.h, addAnnotations):
every annotation of the declaration but @name, @id, @brief and @description, in source order, as
p4c prints it back (ToP4); @brief/@description become the preamble's doc, and structured
annotations (@x[...]) go to structured_annotations.

p4c prints an annotation it parses (those the engine's syntax parses too) from its expressions,
`, `-separated, and one it does not parse as its tokens separated by single spaces:
@my_anno(1,2) is "@my_anno(1 , 2)"."""
import re

from .program_info import expr_text

SKIPPED = {"name", "id", "brief", "description"}
# P4's tokens, longest first where they share a prefix
_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\d+[ws]\d\w*|0[xXbBoOdD][0-9a-fA-F_]+|\d[\d_]*|[A-Za-z_]\w*'
                    r'|&&&|\|\+\||\|-\||\.\.|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|\S')


def _arg_text(node):
    if node.kind == "string":
        return f'"{node.value}"'
    if node.kind == "bool":
        return "true" if node.value else "false"
    if node.kind == "kv":
        return f"{node.key}={_arg_text(node.value)}"
    return expr_text(node)


def annotation_text(a):
    """`a` as p4c's P4Info shows it."""
    body = getattr(a, "body", None) or getattr(a, "text", None)
    if body is not None:        # unparsed: its tokens, one space apart (an empty body prints nothing)
        tokens = _TOKEN.findall(body[1:-1])
        return f"@{a.name}({' '.join(tokens)})" if tokens else f"@{a.name}"
    if not a.args:
        return f"@{a.name}"
    return f"@{a.name}({', '.join(_arg_text(arg) for arg in a.args)})"


def add_annotations(msg, annos, skip=()):
    """Fill msg.annotations / msg.structured_annotations (a preamble, a match field, a parameter);
    `skip` names annotations P4Info shows elsewhere (an action selector's @max_group_size)."""
    for a in annos or ():
        if getattr(a, "structured", False):
            _structured(msg.structured_annotations.add(), a)
        elif a.name not in SKIPPED and a.name not in skip:
            msg.annotations.append(annotation_text(a))


def add_documentation(msg, annos):
    for a in annos or ():
        if a.name in ("brief", "description") and not getattr(a, "structured", False) and a.args \
                and a.args[0].kind == "string":
            setattr(msg.doc, a.name, a.args[0].value)


def _structured(msg, a):
    msg.name = a.name
    if any(arg.kind == "kv" for arg in a.args):
        msg.kv_pair_list.SetInParent()
        for arg in a.args:
            _value(msg.kv_pair_list.kv_pairs.add(key=arg.key).value, arg.value)
    else:
        msg.expression_list.SetInParent()
        for arg in a.args:
            _value(msg.expression_list.expressions.add(), arg)


def _value(expr, node):
    value = _literal(node)
    if isinstance(value, str):
        expr.string_value = value
    elif isinstance(value, bool):
        expr.bool_value = value
    elif isinstance(value, int):
        expr.int64_value = value


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
        "/": lambda a, b: a // b if b else None, "%": lambda a, b: a % b if b else None,
        "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b, "&": lambda a, b: a & b,
        "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b, "<": lambda a, b: a < b, ">": lambda a, b: a > b,
        "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "&&": lambda a, b: a and b,
        "||": lambda a, b: a or b}


def _literal(node):
    """A structured annotation's value, folded as p4c's front end folds it (5+6 is 11, 1==2
    false); None where it is not made of literals."""
    if node.kind in ("string", "bool", "int"):
        return node.value
    if node.kind == "unop":
        v = _literal(node.expr)
        if v is None or isinstance(v, str):
            return None
        return {"!": lambda: not v, "-": lambda: -v, "~": lambda: ~v}[node.op]()
    if node.kind == "binop" and node.op in _OPS:
        a, b = _literal(node.left), _literal(node.right)
        if a is None or b is None or isinstance(a, str) or isinstance(b, str):
            return None
        return _OPS[node.op](a, b)
    return None
