"""Arguments of calls, shared by the call modules: positional order, counts, values."""
from . import p4types as T


CHECKSUM_FUNCS = ("verify_checksum", "update_checksum", "verify_checksum_with_payload",
                  "update_checksum_with_payload")


def positional_args(self, n, names):
    """Arguments of call `n` by parameter name (positional or `name = value`)."""
    out = {}
    for i, a in enumerate(n.args):
        if a.kind == "named_arg":
            if a.name not in names:
                self.err(f"no parameter named '{a.name}' (parameters: {', '.join(names)})", a.loc)
            out[a.name] = a.value
        else:
            if i >= len(names):
                self.err(f"too many arguments (expected at most {len(names)})", a.loc)
            out[names[i]] = a
    return out


def need_args(self, n, count, what):
    if len(n.args) != count:
        self.err(f"{what} takes {count} argument(s), got {len(n.args)}", n.loc)


def arg_value(self, node, ctx, expected=None):
    v = self.scalar(self.expr(node, ctx, expected), node.loc)
    if expected is not None and v.type != expected:
        if isinstance(expected, T.BitT) and isinstance(v.type, T.IntLitT):
            return self.convert(v, expected, node.loc)
    return v


def as_uint(v):
    """Python code for the unsigned value of scalar `v` (signed ints and bools converted)."""
    t = v.type
    if isinstance(t, T.BoolT):
        return f"(1 if {v.code} else 0)"
    if isinstance(t, T.EnumT) and t.base is not None:
        t = t.base
    if isinstance(t, T.BitT) and t.signed:
        return f"({v.code} & {t.mask:#x})"
    return v.code
