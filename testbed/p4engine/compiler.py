"""AST -> checked, compiled program.

One pass does name resolution, type checking and code generation: every expression is typed as
it is translated into Python source over the packet state list `S` (see p4types). The result is
a Python module's source (parsers, controls, actions, tables as functions) plus the runtime
objects it refers to (tables, externs) and the metadata the pipeline, P4Info and STF need.

The Compiler is assembled from one mixin per seam; each imports only the leaf modules
(compile_values, program_info, p4types, codegen), never this one or each other:

    compile_decls        declarations, the V1Switch package, locals, extern instances, actions
    compile_tables       tables and their application
    compile_blocks       parser and control emission
    compile_statements   statements
    compile_expressions  expressions
    default_values       default initializers (`...`) and `{#}`
    calls, extern_calls, invocations   calls of methods, externs, actions, functions, controls
"""
import re

from .calls import CallsMixin
from .codegen import Emitter, Namer
from .compile_blocks import BlocksMixin
from .compile_decls import DeclarationsMixin
from .compile_expressions import ExpressionsMixin
from .compile_statements import StatementsMixin
from .compile_tables import TablesMixin
from .compile_values import CORE_ERRORS, NUM_HIDDEN, Scope
from .default_values import DefaultValuesMixin
from .errors import Loc, P4Error
from .extern_calls import ExternCallsMixin
from .invocations import InvocationsMixin
from .program_info import Compiled


class Compiler(DeclarationsMixin, TablesMixin, BlocksMixin, StatementsMixin, ExpressionsMixin, CallsMixin,
               ExternCallsMixin, InvocationsMixin, DefaultValuesMixin):
    def __init__(self, decls, source_map, filename="<program>", limits=None):
        self.filename = filename
        self.limits = limits     # a target's extra limits (bmv2_limits), or None: the engine's own
        self.decls = decls
        self.smap = source_map
        self.types = {}
        self.globals = Scope()
        self.errors = list(CORE_ERRORS)
        self.match_kinds = set()
        self.slots = [None] * NUM_HIDDEN   # initial value per slot
        self.slot_names = ["<hidden>"] * NUM_HIDDEN
        self.em = Emitter()
        self.namer = Namer()
        self.ns = {}
        self.direct_invocations = {}     # instance name -> how many `Type.apply()` made it
        self.out = Compiled()
        self.extern_decls = {}
        self.extern_funcs = {}
        self.blocks = {}        # parser/control declarations by name
        self.packages = {}
        self.functions = {}
        self.global_actions = {}
        self.control_names_used = set()
        self.digest_counter = 0
        self.switches_in_actions = []    # (action name, switch statement), checked once all is compiled
        self.actions_called_by = {}      # action name -> names of the actions its body calls
        self.functions_called_by = {}    # ("action", name) | ("function", id) -> ids of functions it calls
        self.switches_in_functions = {}  # id of a function declaration -> (its name, its first switch)
        self.sub_parsers = 0             # sub-parsers compiled so far (they share a step budget)
        self.parser_depth = 0            # parsers being compiled, one inside the other
        self.uses = {}                   # block instance -> {"tables"|"actions"|"blocks": names its live code uses}
        self.sub_blocks = set()          # parser/control instances declared inside another block
        self.folded_away = 0             # > 0 while compiling code p4c's constant folding removes
        self.extern_function_calls = set()   # (block instance, action or None) of live calls in controls
        self.action_name_clashes = {}    # control-plane name -> the actions declared with it (2 or more)
        self.called_action_infos = {}    # id of the calling ActionInfo (None: a control) -> ids it calls

    # ------------------------------------------------------------------------- diagnostics
    def err(self, msg, loc):
        raise P4Error(msg, loc, self.smap)

    def note_use(self, kind, name, ctx):
        """Live code of the block being compiled applies table `name` (kind "tables"), calls action
        `name` ("actions") or applies sub-block instance `name` ("blocks"). Code in a branch p4c
        folds away (`if (false)`, `false ? a : b`, a switch on a constant) records nothing."""
        if not ctx.unreachable:
            self.uses.setdefault(ctx.prefix, {}).setdefault(kind, set()).add(name)

    def resolve_uses(self):
        """Fill applied_tables and called_actions from the top-level blocks and the sub-blocks
        they apply: p4c removes an instance nothing applies, and its tables with it."""
        pending = [owner for owner in self.uses if owner not in self.sub_blocks]
        seen = set()
        while pending:
            owner = pending.pop()
            if owner in seen:
                continue
            seen.add(owner)
            used = self.uses.get(owner, {})
            self.out.applied_tables.update(used.get("tables", ()))
            self.out.called_actions.update(used.get("actions", ()))
            pending.extend(used.get("blocks", ()))
        self.out.unapplied_blocks = self.sub_blocks - seen

    def used_actions(self):
        """Names of the actions p4c keeps (its unused-declaration pass drops the others): those
        an applied table lists, those a control calls, and those these call."""
        used = set(self.out.called_actions)
        for table in self.out.tables.values():
            if table.name in self.out.applied_tables:
                used.update(ai.name for ai, _ in table.actions)
        return _with_callees(used, self.actions_called_by)

    def check_action_name_clashes(self, used):
        """Two actions may share a control-plane name (p4c's front-end dumps hold several
        @name(".NoAction")) while at most one of them is used: p4c's unused-declaration pass
        removes the others before its DuplicateActionControlPlaneNameCheck."""
        if not self.action_name_clashes:
            return
        live_ids = set(self.called_action_infos.get(None, ()))
        for table in self.out.tables.values():
            if table.name in self.out.applied_tables:
                live_ids.update(id(ai) for ai, _ in table.actions)
                if table.default_action and table.default_action[0] is not None:
                    live_ids.add(id(table.default_action[0]))
        live_ids = _with_callees(live_ids, self.called_action_infos)
        for name, infos in self.action_name_clashes.items():
            live = [ai for ai in infos if id(ai) in live_ids] if name in used else []
            if len(live) > 1:
                self.err(f"two actions are both named '{name}'", live[1].decl.loc)
            if live:
                self.out.actions[name] = live[0]

    def name_loc(self, node, name=None):
        """Where `node`'s name is written (p4c points at the name, not at the keyword or the
        direction before it); the node's own location if the source line does not show it."""
        name = name or node.name
        loc = node.loc
        line = self.smap.source_line(loc.file, loc.line)
        found = re.compile(rf"\b{re.escape(name)}\b").search(line, max(loc.col - 1, 0))
        return Loc(loc.file, loc.line, found.start() + 1) if found else loc

    # ------------------------------------------------------------------------- declarations
    def compile(self):
        for d in self.decls:
            self.declare_global(d)
        main = self.globals.lookup("main")
        if main is None or main.kind != "package_inst":
            loc = self.decls[-1].loc if self.decls else Loc(self.filename, 1, 1)
            self.err("the program declares no package instance 'main' (expected V1Switch(...) main;)", loc)
        self.build_pipeline(main.info)
        self.out.package_annos = main.info[0].annos     # P4Info's pkg_info (@pkginfo, ...)
        self.resolve_uses()
        used = self.used_actions()
        self.check_action_name_clashes(used)
        self.out.calls_extern_functions = any(
            block not in self.out.unapplied_blocks and (action is None or action in used)
            for block, action in self.extern_function_calls)
        self.check_switches_in_actions()
        self.finish_value_sets()
        if self.limits is not None:
            self.limits.program_end(self.out.tables.values(), self.out.applied_tables, self.used_actions())
            self.limits.raise_if_breached(self.smap)
        out = self.out
        out.source = self.em.text()
        out.namespace = self.ns
        out.template = self.slots
        out.errors = self.errors
        out.slot_names = self.slot_names
        return out


def _with_callees(actions, calls):
    """`actions` and the actions they call, directly or not (`calls`: caller -> its callees)."""
    found, pending = set(actions), list(actions)
    while pending:
        for callee in calls.get(pending.pop(), ()):
            if callee not in found:
                found.add(callee)
                pending.append(callee)
    return found
