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

from . import declarations
from . import p4types as T
from .calls import CallsMixin
from .codegen import Emitter, Namer
from .compile_blocks import BlocksMixin
from .compile_decls import DeclarationsMixin
from .compile_expressions import ExpressionsMixin
from .compile_statements import StatementsMixin
from .compile_tables import TablesMixin
from .compile_values import CORE_ERRORS, Ctx, NUM_HIDDEN, Scope
from .default_values import DefaultValuesMixin
from .errors import Loc, P4Error
from .extern_calls import ExternCallsMixin
from .invocations import InvocationsMixin
from .program_info import Compiled


class Compiler(DeclarationsMixin, TablesMixin, BlocksMixin, StatementsMixin, ExpressionsMixin, CallsMixin,
               ExternCallsMixin, InvocationsMixin, DefaultValuesMixin):
    def __init__(self, decls, source_map, filename="<program>", limits=None, checking=False):
        self.filename = filename
        self.checking = checking  # a throwaway Compiler for what nothing instantiates (compile_unused)
        self.limits = limits     # a target's extra limits (bmv2_limits), or None: the engine's own
        self.decls = decls
        self.smap = source_map
        self.types = {}
        self.globals = Scope()
        self.errors = list(CORE_ERRORS)
        self.match_kinds = {}         # name -> its number (declaration order), as a value
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
        self.functions_called_by = {}    # ("action", name) | ("function", id) | ("block", None) -> ids it calls
        self.switches_in_functions = {}  # id of a function declaration -> (its name, its first switch)
        self.loops_in_functions = {}     # the same for its first for loop (bmv2 target only)
        self.sub_parsers = 0             # sub-parsers compiled so far (they share a step budget)
        self.parser_depth = 0            # parsers being compiled, one inside the other
        self.uses = {}                   # block instance -> {"tables"|"actions"|"blocks": names its live code uses}
        self.sub_blocks = set()          # parser/control instances declared inside another block
        self.folded_away = 0             # > 0 while compiling code p4c's constant folding removes
        self.extern_function_calls = set()   # (block instance, action or None) of live calls in controls
        self.action_name_clashes = {}    # control-plane name -> the actions declared with it (2 or more)
        self.called_action_infos = {}    # id of the calling ActionInfo (None: a control) -> ids it calls
        self.compiled_blocks = set()     # ids of the parser/control declarations compiled (any instance)
        self.declared_functions = []     # (declaration, scope, prefix) of every function declared

    # ------------------------------------------------------------------------- diagnostics
    def err(self, msg, loc, late=False):
        """`late`: a check p4c makes only on what is left once its unused-declaration pass has
        removed what nothing uses (its SimplifyParsers, Inline, P4Runtime names): no error in
        unused code (compile_unused)."""
        error = P4Error(msg, loc, self.smap)
        error.late = late
        raise error

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
            for action in used.get("actions", ()):
                self.out.action_callers.setdefault(action, set()).add(owner)
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
                # the later one in the source is the duplicate (p4c's check walks the program in
                # source order; the engine compiles the controls in the package's order)
                if len({ai.decl.loc.file for ai in live}) == 1:
                    live.sort(key=lambda ai: (ai.decl.loc.line, ai.decl.loc.col))
                self.err(f"two actions are both named '{name}'", live[1].decl.loc)
            if live:
                self.out.actions[name] = live[0]

    def name_loc(self, node, name=None, nth=1):
        """Where `node`'s name is written (p4c points at the name, not at the keyword or the
        direction before it); the node's own location if the source line does not show it.
        `nth`: the nth time the name is written from there on, over the next lines too (an
        enum's members)."""
        name = name or node.name
        loc = node.loc
        word = re.compile(rf"\b{re.escape(name)}\b")
        col = max(loc.col - 1, 0)
        for line_no in range(loc.line, loc.line + (200 if nth > 1 else 1)):
            line = self.smap.source_line(loc.file, line_no)      # "" past the end
            for found in word.finditer(line, col):
                nth -= 1
                if nth == 0:
                    return Loc(loc.file, line_no, found.start() + 1)
            col = 0
        return loc

    # ------------------------------------------------------------------------- declarations
    def compile(self):
        if not self.checking:
            declarations.check(self.decls, self.name_loc, self.err)
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
        self.check_loops_in_functions()
        self.finish_value_sets()
        if self.limits is not None:
            self.limits.program_end(self.out.tables.values(), self.out.applied_tables, self.used_actions())
            self.limits.raise_if_breached(self.smap)
        if self.checking:
            self.compile_unused()
        elif self.unused_blocks() or self.uncalled_functions():
            # p4c's front end type-checks every declaration; this pass compiles only what main
            # instantiates and calls. What it skipped is compiled by a second Compiler, for its
            # errors only: that one's output is dropped, so none of it can reach this program's
            # P4Info, slots or generated Python (p4c's unused-declaration pass removes it too).
            Compiler(self.decls, self.smap, self.filename, checking=True).compile()
        out = self.out
        out.source = self.em.text()
        out.namespace = self.ns
        out.template = self.slots
        out.errors = self.errors
        out.slot_names = self.slot_names
        return out

    # ------------------------------------------------------------------------- unused declarations
    def unused_blocks(self):
        """The parsers and controls no instance compiled. One with constructor parameters is left
        out (their values exist only in an instantiation), and so are generic ones: the engine
        has no type variables."""
        return [d for d in self.blocks.values()
                if id(d) not in self.compiled_blocks and not d.tparams and not d.ctor_params]

    def uncalled_functions(self):
        """Functions (global or local to a compiled block) nothing called; generic ones left out."""
        compiled = self.__dict__.get("_functions", {})
        return [f for f in self.declared_functions if id(f[0]) not in compiled and not f[0].proto.tparams]

    def compile_unused(self):
        """(The throwaway Compiler:) each unused block as an instance of its own, its parameters
        in storage of their own as a sub-block's are, in no V1Switch role; then the functions
        nothing called, the blocks' own among them. A block taking extern instances is compiled
        only when applied with them (SubBlock), so it stays unchecked; so does a function taking
        one (its parameters get storage, which an extern instance cannot have)."""
        for d in self.unused_blocks():
            if id(d) not in self.compiled_blocks:     # (not already as a sub-block of another)
                ctx = Ctx(self.globals, Emitter(), d.kind, "")
                self._check_unused(self.instantiate_block, d, d.name, [], ctx, d.loc)
        for function in self.uncalled_functions():
            self._check_unused(self._compile_uncalled_function, *function)

    def _compile_uncalled_function(self, decl, scope, prefix):
        if not any(isinstance(self.resolve_type(p.type), (T.ExternT, T.BlockT)) for p in decl.proto.params):
            self.compile_function(decl, scope, prefix)

    def _check_unused(self, compile_it, *args):
        """Errors p4c's front end makes refuse the program. Late ones (see err) do not, nor the
        engine's refusals of what it or BMv2 cannot run (their messages say so, _LIMIT): p4c
        drops unused code before it looks, so the program runs. A compile stopped midway leaves
        no state that could make the next one fail: scopes are the block's, names clash late."""
        try:
            compile_it(*args)
        except P4Error as e:
            if not getattr(e, "late", False) and not _LIMIT.search(e.diagnostics[0][3]):
                raise


# what the engine's messages say when they refuse a construct p4c's front end accepts
_LIMIT = re.compile(r"\bengine\b|BMv2|bm2-ss|P4Runtime|not supported|unsupported")


def _with_callees(actions, calls):
    """`actions` and the actions they call, directly or not (`calls`: caller -> its callees)."""
    found, pending = set(actions), list(actions)
    while pending:
        for callee in calls.get(pending.pop(), ()):
            if callee not in found:
                found.add(callee)
                pending.append(callee)
    return found
