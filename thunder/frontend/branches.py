"""Data-dependent branches compiled: tensor-predicated ``if`` statements captured as selects.

Dynamo cannot trace ``if x[i] > 0:``: the branch taken depends on a tensor's value, so it splits the
graph there (or skips the whole function). thunder rewrites, at the source level, every ``if`` whose
branches are free of side effects into a call of :func:`_thunder_if` with each branch as a nested
function::

    if x[i] > 0:                         def _thunder_then_3(y):
        y = y + x[i] * x[i]                  y = y + x[i] * x[i]
    else:                        ->          return (y,)
        y = y - x[i]                     def _thunder_else_3(y):
                                             y = y - x[i]
                                             return (y,)
                                         (y,) = _thunder_if(x[i] > 0, _thunder_then_3, _thunder_else_3, (y,), 3)

Run by Python (eagerly, or when the predicate is a Python value), ``_thunder_if`` calls one branch, as
the ``if`` did. Traced by Dynamo with a one-element tensor predicate, it traces both branches between
region markers (``_branch_begin``/``_branch_else``/``_branch_end``, graph nodes) and selects each
name the branches bind (``_branch_select``, a ``where``). In-place writes inside a branch stay in the
graph as writes; the core's functionalization pass (``csrc/passes/functionalization.cc``) turns each
region into straight-line code whose written tensors are selected too, and masks what each arm reads
so that the arm not taken contributes no NaN to gradients.

An ``if`` that ends the function and whose arms both end with ``return`` (also ``if c: ...; return a``
followed by a final ``return b``) is converted too: each arm function returns its return value, which is
selected like a name, and the function returns it. So is a conditional expression (``a if c else b``) of an
assignment, expression statement or ``return`` (:class:`_ConditionalExpressions`); ``if not c`` is the ``if``
of ``c`` with its arms exchanged.

Soundness. A branch is rewritten only if this module's static rules accept it (``_Purity.why_not``,
``_Rewriter._why_not``: no other ``return``, no ``break``/``continue``/``raise``, no side effects, no calls to
Python functions not known to be pure, names bound in one branch only, or read in an arm before it binds them,
must be defined before). What the source cannot show is checked when the program is traced: a region that a
graph break splits, branch results that differ in shape, dtype or kind, an object an arm writes into in place
(``d[k] = v``, ``lst += [...]``) that is not a tensor (the writes of both arms would be made), an arm the
importer cannot compile (an effect, random numbers, data-dependent indexing or an op checking its values,
which would raise only when taken) -- and an arm that fails while Dynamo traces it (a shape error in the arm
not taken). Each of these makes Dynamo run the frame eagerly for that call (thunder calls Dynamo with
``suppress_errors``; ``_thunder_if`` run by Python takes one branch, exactly as written), and the site is
recompiled without conversion from the next call on, with the reason shown in ``print(jitted)``.

One more source rewrite rides along: ``p -= lr * p.grad`` where the function also sets an attribute of ``p``
(``p.grad = None``) becomes ``p = _thunder_inplace(p, lr * p.grad, "isub")``, which rebinds ``p`` to the tensor
itself. Dynamo gives an in-place operator's result no source (pytorch/pytorch#111592), and dropped the attribute
write that followed: a manual SGD step kept its gradients (:class:`_InPlaceRebinding`).

The user's function, class and module are never modified: the rewritten code is a new function
(sharing the original's globals, defaults and closure cells), and a module's rewritten methods live
on the class of a *shadow* instance that shares the original's ``__dict__`` (see ``code_copies``).
"""
import ast
import builtins
import copy
import inspect
import itertools
import logging
import math
import operator
import textwrap
import threading
import types
from dataclasses import dataclass

import torch
import torch.fx

from thunder.core.log import logger

_RANDOM_WORDS = ("rand", "normal", "bernoulli", "dropout", "multinomial", "poisson", "uniform", "exponential",
                 "cauchy", "geometric", "log_normal", "random", "seed")
#: Methods of Python containers that mutate them: a branch calling a method so named is not converted
#: (the receiver's type is unknown at the source level).
_CONTAINER_MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update", "add",
                       "discard", "setdefault", "popitem", "write", "writelines", "send", "put"}
_PURE_BUILTINS = {abs, min, max, len, float, int, bool, range, isinstance, tuple, list, zip, enumerate, sum, round,
                  pow, divmod, all, any, reversed, sorted, slice, complex, hasattr, getattr, type}
_PURE_MODULES = ("torch", "math", "operator")
#: torch functions with effects beyond their result (global state, I/O).
_IMPURE_TORCH = ("manual_seed", "save", "load", "set_", "use_deterministic", "_assert", "_check", "compile",
                 "cuda.synchronize", "backends", "_dynamo", "autograd.backward", "print")

_site_ids = itertools.count()


@dataclass
class BranchSite:
    """One ``if`` statement of a jitted function, and what became of it."""

    id: int
    location: str          # "file.py:12"
    code: str              # "if x[i] > 0:"
    converted: bool        # rewritten into _thunder_if (it may still be given up later, see reason)
    reason: str = ""       # why it is not (or no longer) converted
    captured: int = 0      # graphs in which it was compiled to a select
    given_up: bool = False  # converted, then given up while traced (so it is data-dependent: a graph break now)
    broke_in_condition: str = ""  # converted, never captured, Dynamo's break at its line: why (see site_statuses)

    def status(self, break_locations):
        """"converted" (compiled to a select in some graph), "left" (a graph break: given up while traced, or
        not converted with a graph break at its line, given as "file.py:12" in ``break_locations``), or None (an
        ``if`` on Python values, or not run yet: nothing to report)."""
        if self.captured and not self.reason:
            return "converted"
        if (self.reason or self.broke_in_condition) and \
                (self.converted or self.given_up or self.location in break_locations):
            return "left"
        return None

    def __str__(self):
        if self.captured and not self.reason:
            return f"{self.location}  {self.code}  converted to a select (in {self.captured} graphs)"
        return f"{self.location}  {self.code}  left as a graph break: {self.reason or self.broke_in_condition or '?'}"


def break_locations(graph_breaks):
    """The "file.py:12" locations of Dynamo's graph breaks (for BranchSite.status), each with the first line of its
    reason."""
    located = {}
    for b in graph_breaks:
        located.setdefault(b.location.rsplit("/", 1)[-1], (b.reason or "").strip().split("\n")[0])
    return located


def site_statuses(sites, graph_breaks):
    """[(site, "converted" or "left")] for the sites that have a status given these graph breaks, by site id. A
    converted site never compiled to a select, with a graph break at its line, broke in its condition
    (``if x.sum().item() > 0:``: Dynamo stops at ``.item()`` before the branch): it is left, that its reason."""
    locations = break_locations(graph_breaks)
    for site in sites:
        if site.converted and not site.captured and not site.reason and site.location in locations:
            site.broke_in_condition = f"Dynamo broke the graph in its condition ({locations[site.location]})"
    statuses = [(site, site.status(locations)) for site in sorted(sites, key=lambda site: site.id)]
    return [(site, status) for site, status in statuses if status]


class BranchRejected(Exception):
    """Raised while tracing or compiling a converted branch that turns out not to be convertible; the frame then
    runs eagerly for this call, and the site is rewritten back to a plain ``if`` for the next ones."""

    def __init__(self, site, reason):
        super().__init__(f"branch {site}: {reason}")
        self.site, self.reason = site, reason


# ---- the runtime: what the rewritten code calls ----

class TraceRecord:
    """What happened to converted branches during one jitted call: filled by the markers' fake-tensor runs while
    Dynamo traces, by the backend, and by Dynamo's log of frames it could not convert; read by thunder.jit."""

    def __init__(self):
        self.open = {}       # site -> count of begins without an end
        self.closed = set()  # sites whose begin and end were both traced
        self.rejected = {}   # site -> reason
        self.failures = []   # (frame, reason) of each frame Dynamo could not trace (it then ran eagerly)
        self.own_code = None  # the code of the jitted function's own frame (see _FrameFailureFilter)
        self.own_frame_reruns = True  # whether thunder.jit may call it again eagerly after its trace failed
        self.ran_eagerly = []  # the errors of that frame's failed traces Dynamo ran eagerly, compiling on


class _FrameFailureFilter(logging.Filter):
    """Takes Dynamo's "WON'T CONVERT" warnings, during a jitted call with a record (see thunder.jit's _run), into
    the record (thunder.jit reports them) instead of printing them. Dynamo then runs the frame eagerly, and skips
    its code from then on. Its INFO record of a frame whose code raised while traced (observed_exception) is not
    taken, but the code kept compiling (_compile_on). Not for a fake-tensor failure in the jitted function's own
    frame outside a converted branch (``record.own_code``): that error is raised from here, as Dynamo raises it
    unsuppressed, so that thunder.jit runs the call eagerly itself and later calls still compile (a call with a
    wrong shape would otherwise leave the function uncompiled for good) -- or, for a module's forward whose hooks
    ran already (``record.own_frame_reruns`` false), Dynamo runs it eagerly and compiles the code on."""

    def filter(self, rec):
        record = tracing_record()
        error = rec.exc_info[1] if rec.exc_info else None
        if record is None or not str(rec.msg).startswith("WON'T CONVERT") or rec.levelno < logging.WARNING:
            if record is not None and observed_exception(error) and record.own_code is not None and \
                    f" {record.own_code.co_filename} line " in str(rec.msg).split("\n", 1)[0]:
                # (The jitted function's frame, or one Dynamo resumes it in; not another function's, which may
                # raise on every call, caught by its caller: compiling on, each call would pay a trace.)
                _compile_on(error)
            return _user_level is None or rec.levelno >= _user_level
        try:
            frame = " ".join(str(rec.msg).split("\n", 1)[0].split()[2:])
        except Exception:  # noqa: BLE001
            frame = "?"
        if record.closed and not record.open and not record.rejected:
            # Code after a converted branch failed: it may read of the select what differs from the arm taken
            # (eager's value): the branches are given up, and the frame compiled again without them.
            for site in record.closed:
                record.rejected[site] = f"Dynamo's trace of the code after it failed ({_first_lines(error)})"
        code = record.own_code
        if code is not None and frame == f"{code.co_name} {code.co_filename} line {code.co_firstlineno}" and \
                not record.open and not record.rejected and isinstance(error, torch._dynamo.exc.TorchRuntimeError):
            if record.own_frame_reruns:
                raise error
            # (A module's forward after its hooks ran: Dynamo runs it eagerly -- eager's error, or eager's result --
            # and compiles the code on.)
            _compile_on(error)
            record.ran_eagerly.append(error)
            return False
        record.failures.append((frame, _first_lines(error)))
        return False


def observed_exception(error):
    """Whether ``error`` is Dynamo's "Observed exception": the traced code raised, with no handler in the frame
    (an input check, ``round(float("inf"))``). Dynamo, suppressing it (an INFO record), runs the frame eagerly, where
    it raises the same; with fullgraph=True it raises ``error`` itself."""
    return isinstance(error, torch._dynamo.exc.Unsupported) and \
        str(getattr(error, "gb_type", None) or "").startswith("Observed exception")


def _compile_on(error):
    """Keeps Dynamo compiling the code of a frame that raised while traced (observed_exception), or whose trace
    failed: it runs the frame eagerly as it does for any failure, and would skip the code from then on, so that one
    call that raises left every later call uncompiled, even at shapes compiled before, silently. The strategy an
    exception carries is the one Dynamo applies to the code (private names, pinned by tests/test_errors.py: where
    they changed, Dynamo skips)."""
    try:
        from torch._dynamo.types import FrameAction, FrameExecStrategy
        error.frame_exec_strategy = FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT)
    except Exception as e:  # noqa: BLE001
        logger.debug("thunder: cannot keep Dynamo compiling after a raise while traced: %s", e)


def _first_lines(error):
    if error is None:
        return "?"
    if isinstance(error, BranchRejected):
        return error.reason
    inner = getattr(error, "inner_exception", None) or error.__cause__
    text = str(inner if isinstance(inner, BranchRejected) else error).strip()
    got = text.find("got ")
    if "fake tensor call" in text and got >= 0:  # Dynamo's message wraps the op's own error
        text = text[got + 4:]
    first = text.splitlines()[0] if text else type(error).__name__
    return first if len(first) <= 240 else first[:240] + "..."


_frame_log = logging.getLogger("torch._dynamo.convert_frame")


def listen_for_frame_failures():
    """Installs the filter on Dynamo's frame-conversion logger (once)."""
    if not any(isinstance(f, _FrameFailureFilter) for f in _frame_log.filters):
        _frame_log.addFilter(_FrameFailureFilter())


_user_level = None  # while hear_frame_failures() has lowered the frame log's level: the level the user's left


def hear_frame_failures():
    """Lets the filter see Dynamo's "WON'T CONVERT" records (warnings, and INFO for a raise) during a jitted call
    where the user's logging leaves out those of ``torch._dynamo.convert_frame`` (a higher level on it or on
    ``torch``: the logger drops them before any filter). The filter then passes on only what the user's level
    passes. Returns what restore_frame_log takes."""
    global _user_level
    if _frame_log.isEnabledFor(logging.INFO):
        return None
    previous, _user_level = _frame_log.level, _frame_log.getEffectiveLevel()
    _frame_log.setLevel(logging.INFO)
    return previous


def frame_failures_heard():
    """Whether the filter sees Dynamo's "WON'T CONVERT" warnings now (not where ``logging.disable`` drops them)."""
    return _frame_log.isEnabledFor(logging.WARNING)


def restore_frame_log(previous):
    """Undoes hear_frame_failures(), given what it returned."""
    global _user_level
    if previous is not None:
        _frame_log.setLevel(previous)
        _user_level = None


_local = threading.local()


def tracing_record():
    """This thread's record of the jitted call in progress (thunder.jit installs one around each call), or None."""
    return getattr(_local, "record", None)


def set_tracing_record(record):
    """Installs ``record`` for this thread; returns the previous one."""
    previous = tracing_record()
    _local.record = record
    return previous


def _note_begin(site):
    record = tracing_record()
    if record is not None and isinstance(site, int):
        record.open[site] = record.open.get(site, 0) + 1


def _note_end(site):
    record = tracing_record()
    if record is not None and isinstance(site, int) and record.open.get(site):
        record.open[site] -= 1
        if not record.open[site]:
            del record.open[site]
            record.closed.add(site)


def _condition(pred):
    """A one-element predicate as a 0-d bool tensor (``bool(pred)``)."""
    p = pred.reshape(())
    return p if p.dtype == torch.bool else p != 0


@torch._dynamo.allow_in_graph
def _branch_begin(pred, site):
    """Marks the start of a converted branch; returns the predicate as a 0-d bool tensor (``bool(pred)``)."""
    _note_begin(site)
    return _condition(pred)


@torch._dynamo.allow_in_graph
def _branch_else(cond, site):
    """Marks the end of the then-arm and the start of the else-arm."""
    return None


@torch._dynamo.allow_in_graph
def _branch_end(cond, site):
    """Marks the end of a converted branch."""
    _note_end(site)
    return None


@torch._dynamo.allow_in_graph
def _branch_select(cond, a, b):
    """The value a name has after a converted branch: ``a`` if the predicate held, else ``b``."""
    return torch.where(cond, a, b)


@torch._dynamo.allow_in_graph
def _branch_reject(cond, site, reason):
    """Called while Dynamo traces a branch that cannot be converted: fails the trace (the frame then runs eagerly)."""
    record = tracing_record()
    if record is not None:
        record.rejected[site] = reason
    raise BranchRejected(site, reason)


for _marker in (_branch_begin, _branch_else, _branch_end, _branch_reject):
    torch.fx.node.has_side_effect(_marker)

MARKERS = {_branch_begin: "begin", _branch_else: "else", _branch_end: "end", _branch_select: "select",
           _branch_reject: "reject"}


#: The arm functions a rewrite wrote (``_thunder_then_3``) -> the name of the function whose ``if`` they are: what
#: a trace's source comments name for code of an arm that runs as a frame of its own (a branch given up).
ARM_OWNERS = {}

#: The name under which _thunder_if's callers pass the arms' return values (an ``if`` whose arms both return).
RETURN = "return"


def _merge(cond, a, b, site, name):
    """What ``name`` is after a converted branch whose arms left it as ``a`` and ``b`` (traced by Dynamo); ``name``
    is :data:`RETURN` for the arms' return values. Tuples of the same length are merged element by element."""
    tuples = type(a) is tuple, type(b) is tuple
    if all(tuples) and len(a) == len(b):
        return tuple(_merge(cond, x, y, site, f"{name}[{i}]") for i, (x, y) in enumerate(zip(a, b)))
    if not any(tuples) and a is b:  # (Dynamo cannot trace `is` on tuples)
        return a
    if name == RETURN or name.startswith(RETURN + "["):  # the return value, or an element of it ("return[0]")
        what = "the return value" + (f" (element {name[len(RETURN):]})" if name != RETURN else "")
    else:
        what = f"`{name}`"
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            _branch_reject(cond, site, f"the branches leave {what} with different shapes, dtypes or devices")
        # Code after the branch may read the layout (`y.view(-1)`, `is_contiguous()`, `stride()`): Dynamo traces it
        # with one arm's, and the select has one layout whichever arm is taken.
        elif a.stride() != b.stride():
            _branch_reject(cond, site, f"the branches leave {what} with different strides (`x.t()` against "
                                       "`x * 1`): code after the branch may read the layout")
        return _branch_select(cond, a, b)
    if isinstance(a, (bool, int, float)) and isinstance(b, (bool, int, float)) and type(a) is type(b) and a == b:
        return a
    _branch_reject(cond, site, f"the branches leave {what} as values that are not both tensors (or tuples of "
                               "the same length; a Python value cannot depend on a tensor's data)")
    return a


#: Values an augmented assignment rebinds rather than changes (``n += 1``): an arm may leave them to the select.
_IMMUTABLE = (bool, int, float, complex, str, bytes, tuple, frozenset, type(None))


def _thunder_if(pred, then, otherwise, state, site, names=(), written=(), written_names=(), modules=()):
    """``then(*state)`` if ``pred`` else ``otherwise(*state)``; traced by Dynamo with a one-element tensor
    predicate: both, and each result selected (see the module docstring). ``written``: the objects, bound before
    the ``if``, that an arm writes into in place (``d[k] = v``, ``lst += [...]``), named by ``written_names``: the
    selects capture such a write only into a tensor, so any other object refuses the conversion (both arms' writes
    into a dict or a list would be made, whichever arm the predicate takes). ``modules``: the torch.nn modules the
    arms call; one that runs forward hooks (registered after the function was rewritten, before Dynamo traced it)
    refuses it (the hooks' effects would be made for both arms)."""
    if not torch.compiler.is_compiling() or not isinstance(pred, torch.Tensor) or pred.numel() != 1:
        return then(*state) if pred else otherwise(*state)
    cond = _branch_begin(pred, site)
    for module in modules:
        if _runs_hooks(module):
            _branch_reject(cond, site, "a module an arm calls runs forward hooks, whose effects would be made for "
                                       "both arms")
    for obj, name in zip(written, written_names):
        if not isinstance(obj, (torch.Tensor, *_IMMUTABLE)):
            _branch_reject(cond, site, f"`{name}` is written into in place in a branch and is not a tensor (a "
                                       f"{type(obj).__name__}: the write would be made whichever arm is taken)")
    a = then(*state)
    _branch_else(cond, site)
    b = otherwise(*state)
    _branch_end(cond, site)
    return tuple(_merge(cond, x, y, site, n) for x, y, n in zip(a, b, names))


# Inlined into the frame Dynamo traces, _thunder_if converts; run as a frame of its own (its caller runs eagerly:
# Dynamo gave up on it, or a graph break fell on the call), it must take one arm, as the `if` did. Dynamo would
# otherwise compile that frame by itself and return a select into eager code that may then write through it.
torch._dynamo.eval_frame.skip_code(_thunder_if.__code__)


# ---- in-place operators rebinding their name ----

_IN_PLACE_OPERATORS = {ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul", ast.Div: "itruediv",
                       ast.FloorDiv: "ifloordiv", ast.Mod: "imod", ast.Pow: "ipow", ast.MatMult: "imatmul",
                       ast.LShift: "ilshift", ast.RShift: "irshift", ast.BitAnd: "iand", ast.BitOr: "ior",
                       ast.BitXor: "ixor"}
_OPERATOR_FUNCTIONS = {name: getattr(operator, name) for name in _IN_PLACE_OPERATORS.values()}


def _thunder_inplace(x, value, op):
    """``x op= value``, as the rewrite of :class:`_InPlaceRebinding` writes it: the operator applied, and ``x``
    itself returned where it is a tensor (a tensor's in-place operator returns the tensor itself). Dynamo gives an
    in-place operator's result no source (pytorch/pytorch#111592): after ``p -= lr * p.grad`` the name ``p`` was
    such a result, and a later ``p.grad = None`` was dropped from the compiled frame -- the gradient stayed, and the
    next backward accumulated onto it. Returning ``x`` keeps the name bound to what Dynamo knows as the argument."""
    result = _OPERATOR_FUNCTIONS[op](x, value)
    return x if type(x) in (torch.Tensor, torch.nn.Parameter) else result


torch._dynamo.eval_frame.skip_code(_thunder_inplace.__code__)


def _attributes_set(fn_def):
    """The names whose attributes the function sets (``p.grad = None``: ``p``)."""
    return {n.value.id for n in ast.walk(fn_def)
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)}


class _InPlaceRebinding(ast.NodeTransformer):
    """Rewrites ``x op= e``, where the function also sets an attribute of the name ``x``, as
    ``x = _thunder_inplace(x, e, "iop")``: the same evaluation (x, then e, then the operator), with x rebound to
    itself where it is a tensor (see :func:`_thunder_inplace`). Other augmented assignments stay as written."""

    def __init__(self, names):
        self.names, self.rebound = names, 0

    def visit_AugAssign(self, node):
        op = _IN_PLACE_OPERATORS.get(type(node.op))
        if not isinstance(node.target, ast.Name) or node.target.id not in self.names or op is None:
            return node
        self.rebound += 1
        call = ast.Call(ast.Name("_thunder_inplace", ast.Load()),
                        [ast.Name(node.target.id, ast.Load()), node.value, ast.Constant(op)], [])
        return ast.copy_location(ast.Assign([ast.Name(node.target.id, ast.Store())], call), node)


# ---- static analysis ----

def _names_stored(nodes):
    """Names bound by assignment in these statements (not inside nested scopes)."""
    out = []

    def visit(n):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
                          ast.DictComp, ast.GeneratorExp)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.append(n.name)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.append(n.id)
        for c in ast.iter_child_nodes(n):
            visit(c)

    for n in nodes:
        visit(n)
    return list(dict.fromkeys(out))


def _names_loaded(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_read(node):
    """The names ``node`` reads: those loaded, and the targets of augmented assignments (``buf += x`` reads buf)."""
    return _names_loaded(node) | {n.target.id for n in ast.walk(node)
                                  if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}


def _written_in_place(stmts):
    """The names whose objects these statements write into in place, rather than rebind: the base of a subscript
    target (``d[k] = v``, ``x[i] += 1``, ``for d[k] in ...``) and the target of an augmented assignment
    (``lst += [...]`` extends a list; ``n += 1`` rebinds an int -- decided at run time, by _thunder_if)."""
    out = []
    for n in (x for s in stmts for x in ast.walk(s)):
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                for e in ast.walk(t):
                    base = e
                    while isinstance(base, ast.Subscript):
                        base = base.value
                    if base is not e and isinstance(base, ast.Name):
                        out.append(base.id)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                out.append(n.target.id)
    return list(dict.fromkeys(out))


def _target_names(t):
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    if isinstance(t, ast.Starred):
        return _target_names(t.value)
    return []


class _Definedness:
    """For each ``if`` statement, the local names certainly bound when it runs (conservatively)."""

    def __init__(self, fn_def):
        a = fn_def.args
        params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        params += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
        self.before = {}
        self.block(fn_def.body, set(params))

    def block(self, stmts, defined):
        for s in stmts:
            defined = self.stmt(s, defined)
        return defined

    def stmt(self, s, defined):
        if isinstance(s, ast.If):
            self.before[id(s)] = frozenset(defined)
            then = self.block(s.body, set(defined))
            other = self.block(s.orelse, set(defined))
            return defined | (then & other)
        if isinstance(s, (ast.For, ast.AsyncFor)):
            self.block(s.body, set(defined) | set(_target_names(s.target)))
            self.block(s.orelse, set(defined))
            return defined
        if isinstance(s, ast.While):
            self.block(s.body, set(defined))
            self.block(s.orelse, set(defined))
            return defined
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                if item.optional_vars is not None:
                    defined = defined | set(_target_names(item.optional_vars))
            return self.block(s.body, defined)
        if isinstance(s, ast.Try):
            for body in [s.body, s.orelse, s.finalbody] + [h.body for h in s.handlers]:
                self.block(body, set(defined))
            return defined
        if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if isinstance(s, ast.AnnAssign) and s.value is None:
                return defined
            return defined | {n for t in targets for n in _target_names(t)}
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return defined | {s.name}
        if isinstance(s, (ast.Import, ast.ImportFrom)):
            return defined | {(a.asname or a.name).split(".")[0] for a in s.names}
        if isinstance(s, ast.Delete):
            return defined - {n for t in s.targets for n in _target_names(t)}
        return defined | {n.target.id for n in ast.walk(s) if isinstance(n, ast.NamedExpr)}


#: Statements an arm may not hold, and how the reason names them (`return`: see _Purity._stmt).
_REFUSED_STATEMENTS = {ast.Break: "`break`", ast.Continue: "`continue`", ast.Raise: "`raise`",
                       ast.Assert: "`assert`", ast.Global: "`global`", ast.Nonlocal: "`nonlocal`", ast.Import: "an import",
                       ast.ImportFrom: "an import", ast.ClassDef: "a class definition", ast.Try: "`try`",
                       ast.With: "`with`", ast.AsyncWith: "`async with`", ast.Delete: "`del`",
                       ast.AsyncFor: "`async for`"}


def _runs_hooks(module):
    """Whether calling ``module`` runs forward (pre-)hooks, its own, a submodule's or global ones: code of the
    user's that Dynamo inlines, whose effects (a list it appends activations to) it replays after the graph, for
    both arms of a converted branch. Checked when the function is rewritten and, for hooks registered later, by
    _thunder_if when Dynamo traces it. (A hook registered after that trace Dynamo does not see at all: it skips
    guards on modules' hooks, ``torch._dynamo.config.skip_nnmodule_hook_guards``.)"""
    m = torch.nn.modules.module
    if m._global_forward_hooks or m._global_forward_pre_hooks:
        return True
    return any(sub._forward_hooks or sub._forward_pre_hooks for sub in module.modules())


class _Purity:
    """Decides, from the source and the objects its names refer to now, whether branch code is free of side
    effects. ``resolve(name)`` gives the object a global/closure/builtin name refers to (or raises KeyError);
    ``instance`` is the module whose method is being rewritten (``self``), if any; ``declared``, the names the
    function declares ``global`` or ``nonlocal`` (assigning one is an effect)."""

    def __init__(self, resolve, self_name=None, instance=None, declared=frozenset()):
        self.resolve, self.self_name, self.instance, self.declared = resolve, self_name, instance, declared
        self.modules_called = []  # the source of each torch.nn submodule call accepted (`self.lin`), in order

    def why_not(self, stmts, generated=frozenset()):
        """The reason these statements cannot run as a converted branch, or None if they can."""
        for s in stmts:
            reason = self._stmt(s, generated)
            if reason:
                return reason
        return None

    def _stmt(self, s, generated):
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if s.name in generated:  # a nested branch converted first (its last statement is our own return)
                return self.why_not(s.body[:-1], generated)
            return "a function definition"
        if isinstance(s, ast.Return):
            return ("`return` inside the branch (converted only as the last statement of both arms of an `if` that "
                    "ends the function)")
        for kind, what in _REFUSED_STATEMENTS.items():
            if isinstance(s, kind):
                return f"{what} inside the branch"
        if isinstance(s, (ast.For, ast.While)):
            reason = self._target(s.target) if isinstance(s, ast.For) else None
            if reason:
                return reason
            # break/continue directly inside a loop of the branch are the loop's own
            for part in (s.body, s.orelse):
                for x in part:
                    if isinstance(x, (ast.Break, ast.Continue)):
                        continue
                    reason = self._stmt(x, generated)
                    if reason:
                        return reason
            return self._expr(s.iter if isinstance(s, ast.For) else s.test)
        if isinstance(s, ast.If):
            return self.why_not(s.body, generated) or self.why_not(s.orelse, generated) or self._expr(s.test)
        if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            for t in targets:
                reason = self._target(t)
                if reason:
                    return reason
            return self._expr(s.value) if s.value is not None else None
        if isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant):
                return None  # a docstring or a bare constant
            return self._expr(s.value)
        if isinstance(s, ast.Pass):
            return None
        return f"a `{type(s).__name__}` statement inside the branch"

    def why_not_expr(self, e):
        """The reason expression ``e`` cannot be evaluated in a converted branch, or None if it can."""
        return self._expr(e)

    def _target(self, t):
        if isinstance(t, ast.Name):
            return (f"an assignment to `{t.id}`, declared global or nonlocal, inside the branch"
                    if t.id in self.declared else None)
        if isinstance(t, (ast.Tuple, ast.List)):
            return next((r for r in map(self._target, t.elts) if r), None)
        if isinstance(t, ast.Starred):
            return self._target(t.value)
        if isinstance(t, ast.Subscript):
            base = t.value
            while isinstance(base, ast.Subscript):
                base = base.value
            if not isinstance(base, ast.Name):
                what = "an attribute's element" if isinstance(base, ast.Attribute) else \
                    f"an element of `{ast.unparse(base)}`, a view or value an expression makes"
                return f"an assignment to {what} (only local tensors' elements may be assigned)"
            return self._expr(t.slice)
        if isinstance(t, ast.Attribute):
            return f"an assignment to the attribute `{ast.unparse(t)}`"
        return f"an assignment to `{ast.unparse(t)}`"

    def _expr(self, e):
        for n in ast.walk(e):
            if isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)):
                return "`yield` or `await` inside the branch"
            if isinstance(n, ast.Lambda):
                return "a lambda inside the branch"
            if isinstance(n, ast.Call):
                reason = self._call(n)
                if reason:
                    return reason
            if isinstance(n, ast.comprehension):
                reason = self._target(n.target)
                if reason:
                    return reason
        return None

    def _call(self, call):
        f = call.func
        text = ast.unparse(f)
        chain = []
        while isinstance(f, ast.Attribute):
            chain.append(f.attr)
            f = f.value
        chain.reverse()
        if isinstance(f, ast.Name):
            if f.id == "_thunder_if" and not chain:  # a nested branch converted first: its arms were checked
                return None
            if f.id == self.self_name and self.instance is not None:
                owner = self.instance
                for attr in chain[:-1]:
                    owner = getattr(owner, attr, None)
                if not (chain and isinstance(owner, torch.Tensor)):  # self.w.argmax(): a tensor's method
                    return self._self_call(chain, text)
            else:
                try:
                    obj = self.resolve(f.id)
                except KeyError:
                    obj = None  # a local variable: a method call on it
                    if not chain:
                        return f"a call of the local `{f.id}` (not known to be pure)"
                if obj is not None:
                    for attr in chain:
                        obj = getattr(obj, attr, None)
                    return self._known_callable(obj, text)
        elif not chain:
            return f"a call of `{text}` (not known to be pure)"
        method = chain[-1]
        if method.startswith("__") and method.endswith("__"):
            # Tensor has __setitem__ and __iadd__ too, but the receiver may be a list or dict they write into
            return f"an explicit call of `.{method}()` (not known to be pure)"
        if not hasattr(torch.Tensor, method):
            return f"a call of `.{method}()`, not a tensor method (not known to be pure)"
        if method in _CONTAINER_MUTATORS:
            return f"a call of `.{method}()`, which may mutate a Python container"
        if any(w in method.lower() for w in _RANDOM_WORDS):
            return f"`{text}` draws random numbers"
        return None

    def _self_call(self, chain, text):
        obj = self.instance
        for attr in chain:
            obj = getattr(obj, attr, None)
        if isinstance(obj, torch.nn.Module) and type(obj).__module__.startswith("torch.nn"):
            if isinstance(obj, torch.nn.modules.dropout._DropoutNd):
                return f"`{text}` is dropout (random numbers)"
            if _runs_hooks(obj):
                return f"`{text}` runs forward hooks, whose effects would be made for both arms"
            self.modules_called.append(text)  # hooks registered later: _thunder_if checks when traced
            return None
        return f"a call of `{text}` (a Python method or module, not known to be pure)"

    def _known_callable(self, obj, text):
        if obj is None:
            return f"a call of `{text}` (not known to be pure)"
        if _hashable(obj) and obj in _PURE_BUILTINS:
            return None
        if obj is builtins.print:
            return "a call of `print`"
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
            return f"`{text}` builds a module"
        module = getattr(obj, "__module__", None) or ""
        name = getattr(obj, "__name__", "") or ""
        if module.split(".")[0].lstrip("_") not in _PURE_MODULES:
            return f"a call of `{text}` (a Python function not known to be pure)"
        if obj in _OPERATOR_INPLACE or obj in (operator.iconcat, operator.setitem, operator.delitem):
            return f"`{text}` writes into its first operand, which may be a Python container"
        if any(w in name.lower() for w in _RANDOM_WORDS) or any(bad in f"{module}.{name}" for bad in _IMPURE_TORCH):
            return f"`{text}` has effects beyond its result (random numbers or global state)"
        return None


def _hashable(obj):
    try:
        hash(obj)
        return True
    except TypeError:
        return False


# ---- the rewrite ----

def _ends_in_return(stmts):
    return bool(stmts) and isinstance(stmts[-1], ast.Return)


def _tail_ifs(fn_def):
    """The ids of the ``if`` statements in tail position: the function's last statement, or the last statement of
    an arm of one. On the way, ``if c: ...; return a`` followed by a final ``return b`` (the last ``if`` of an
    ``elif`` chain each of whose arms ends with a ``return``) gets ``return b`` as its ``else``, which is
    equivalent: such an ``if`` whose arms both end with a ``return`` is converted with the return values selected."""
    tail = set()

    def block(stmts):
        if len(stmts) >= 2 and isinstance(stmts[-1], ast.Return) and isinstance(stmts[-2], ast.If):
            last = stmts[-2]
            while _ends_in_return(last.body) and len(last.orelse) == 1 and isinstance(last.orelse[0], ast.If):
                last = last.orelse[0]
            if _ends_in_return(last.body) and not last.orelse:
                last.orelse = [stmts.pop()]
        if stmts and isinstance(stmts[-1], ast.If):
            tail.add(id(stmts[-1]))
            block(stmts[-1].body)
            block(stmts[-1].orelse)

    block(fn_def.body)
    return tail


_BOOL_OP = "an `and`/`or` in the condition (Python decides it operand by operand: control flow on each one)"


def _has_bool_op(test):
    return any(isinstance(n, ast.BoolOp) for n in ast.walk(test))


def _unnegated(test, arms):
    """(test, arms) of ``if not c`` as those of ``if c``, the arms exchanged: Python's ``not`` would call bool() on
    a tensor predicate, which Dynamo cannot trace."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, arms = test.operand, arms[::-1]
    return test, arms


class _Rewriter(ast.NodeTransformer):
    def __init__(self, definedness, tail, purity, filename, first_line, sites, excluded):
        self.definedness, self.tail, self.purity = definedness, tail, purity
        self.filename, self.first_line = filename, first_line
        self.sites, self.excluded = sites, excluded
        self.generated = set()  # the names of the arm functions and return values this rewrite made
        self.converted = 0
        self.depth = 0
        self.root = None

    # Nested scopes keep their own ifs.
    def visit_FunctionDef(self, node):
        if self.depth:
            return node
        self.depth += 1
        self.root = node
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        return node

    def visit_ClassDef(self, node):
        return node

    def _site(self, node, code):
        """The BranchSite of an ``if`` statement or conditional expression, and whether it is excluded."""
        key = (self.filename, node.lineno, code)
        site = self.sites.get(key)
        if site is None:
            site = BranchSite(next(_site_ids), f"{self.filename.rsplit('/', 1)[-1]}:{node.lineno}", code, False)
            self.sites[key] = site
        if key in self.excluded:
            site.converted = False
        return site, key in self.excluded

    # Statements whose expressions may hold conditional expressions (`a if c else b`) to convert.
    def _statement(self, node):
        self.generic_visit(node)
        if self.depth != 1:
            return node
        hoisted = []
        node = _ConditionalExpressions(self, hoisted).visit(node)
        for s in hoisted + [node]:
            ast.fix_missing_locations(ast.copy_location(s, node))
            for n in ast.walk(s):
                if not hasattr(n, "lineno"):
                    ast.copy_location(n, node)
        return hoisted + [node] if hoisted else node

    visit_Assign = visit_AugAssign = visit_AnnAssign = visit_Expr = visit_Return = _statement

    def visit_If(self, node):
        before = self.definedness.before.get(id(node), frozenset())
        self.generic_visit(node)  # inner ifs first
        site, excluded = self._site(node, f"if {ast.unparse(node.test)}:")
        if excluded:
            return node
        # An `if` ending the function whose arms both end with a `return` (inner ones converted first end so too).
        returns = id(node) in self.tail and _ends_in_return(node.body) and _ends_in_return(node.orelse)
        reason = self._why_not(node, before, returns)
        if reason:
            site.converted, site.reason = False, reason
            return node
        site.converted, site.reason = True, ""
        self.converted += 1
        return self._convert(node, before, site.id, returns, list(dict.fromkeys(self.purity.modules_called)))

    def _why_not(self, node, before, returns):
        if _has_bool_op(node.test):
            return _BOOL_OP
        arms = (node.body[:-1], node.orelse[:-1]) if returns else (node.body, node.orelse)
        self.purity.modules_called = []
        reason = self.purity.why_not(arms[0], self.generated) or self.purity.why_not(arms[1], self.generated)
        if returns:
            values = [arm[-1].value for arm in (node.body, node.orelse) if arm[-1].value is not None]
            reason = reason or next(filter(None, map(self.purity.why_not_expr, values)), None)
        if reason:
            return reason
        then_names, else_names = _names_stored(node.body), _names_stored(node.orelse)
        for name in dict.fromkeys(then_names + else_names):
            if name in self.generated or name in before:
                continue
            for body in (node.body, node.orelse):
                mentions = [s for s in body if self._mentions(s, name)]
                if not mentions:
                    continue
                first = mentions[0]
                if not (isinstance(first, ast.Assign) and name in [n for t in first.targets for n in _target_names(t)]
                        and name not in _names_loaded(first.value)):
                    return f"`{name}` may be read before it is assigned in a branch"
            # (Nothing runs after an `if` whose arms return.)
            if not returns and (name not in then_names or name not in else_names) and self._read_outside(node, name):
                return f"`{name}` is assigned in only one branch and may be undefined before"
        # _thunder_if checks at run time that what an arm writes into is a tensor: it must be bound before the `if`.
        local = set(_names_stored(self.root.body)) | {a.arg for a in ast.walk(self.root.args) if isinstance(a, ast.arg)}
        for name in _written_in_place(node.body + node.orelse):
            if name in local and name not in before:
                return f"`{name}` is written into in place in a branch and may not be bound before it"
        return None

    def _mentions(self, s, name):
        """Whether statement s binds or reads ``name``; a nested branch's generated function only by its free
        variables (it is called right away, by the statement that follows it)."""
        if isinstance(s, ast.FunctionDef) and s.name in self.generated:
            own = {a.arg for a in s.args.args} | set(_names_stored(s.body))
            return name in _names_loaded(s) - own
        return name in _names_stored([s]) or name in _names_loaded(s)

    def _read_outside(self, node, name):
        """Whether the function reads ``name`` anywhere but inside this ``if`` statement's arms (``name += 1``
        reads it, and `del name` needs it bound)."""
        inside = {id(n) for arm in (node.body, node.orelse) for s in arm for n in ast.walk(s)}
        for n in ast.walk(self.root):
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id == name and \
                    id(n) not in inside:
                return True
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Load, ast.Del)) and \
                    id(n) not in inside:
                return True
        return False

    def _convert(self, node, before, site, returns, modules=()):
        """The statements replacing ``node``: the two arm functions and the ``_thunder_if`` call; ``returns``: the
        arms end with ``return``, whose values the call returns last (and the function then returns); ``modules``:
        the source of the torch.nn submodules the arms call, passed to ``_thunder_if`` (which checks their hooks)."""
        # The names either arm binds that code after the `if` may read (the others are each arm's own locals).
        stored = [n for n in dict.fromkeys(_names_stored(node.body) + _names_stored(node.orelse))
                  if n not in self.generated]
        names = [] if returns else [n for n in stored if self._read_outside(node, n)]
        # Each arm function gets, as parameters, the names it may rebind that are bound before the `if`: those
        # read after it (an arm that does not rebind one returns it as it was), and those an arm reads (`buf += x`,
        # `y = y + 1`: a local of the arm function otherwise, unbound when read). _why_not refused the names an arm
        # may read before binding them that are not certainly bound before.
        read_inside = set().union(*(_names_read(s) for s in node.body + node.orelse))
        params = [n for n in stored if n in before and (n in names or n in read_inside)]
        then_name, else_name, result = f"_thunder_then_{site}", f"_thunder_else_{site}", f"_thunder_return_{site}"
        self.generated.update((then_name, else_name, result))
        ARM_OWNERS[then_name] = ARM_OWNERS[else_name] = self.root.name
        labels, targets = (names + [RETURN], names + [result]) if returns else (names, names)

        def branch(fname, body):
            results = [ast.Name(n, ast.Load()) for n in names]
            if returns:
                body, value = body[:-1], body[-1].value
                results.append(value if value is not None else ast.Constant(None))
            ret = ast.Return(ast.Tuple(results, ast.Load()))
            args = ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[], kw_defaults=[],
                                 defaults=[])
            fn = ast.FunctionDef(fname, args, list(body or [ast.Pass()]) + [ret], [], None, type_params=[]) \
                if "type_params" in ast.FunctionDef._fields else ast.FunctionDef(fname, args, list(body or [ast.Pass()]) + [ret], [], None)
            return ast.copy_location(fn, node)

        written = _written_in_place(node.body + node.orelse)
        test, arms = _unnegated(node.test, [ast.Name(then_name, ast.Load()), ast.Name(else_name, ast.Load())])
        call = ast.Call(ast.Name("_thunder_if", ast.Load()),
                        [test, *arms,
                         ast.Tuple([ast.Name(p, ast.Load()) for p in params], ast.Load()), ast.Constant(site),
                         ast.Tuple([ast.Constant(n) for n in labels], ast.Load()),
                         ast.Tuple([ast.Name(n, ast.Load()) for n in written], ast.Load()),
                         ast.Tuple([ast.Constant(n) for n in written], ast.Load()),
                         ast.Tuple([ast.parse(m, mode="eval").body for m in modules], ast.Load())], [])
        if targets:
            stmt = ast.Assign([ast.Tuple([ast.Name(n, ast.Store()) for n in targets], ast.Store())], call)
        else:
            stmt = ast.Expr(call)
        out = [branch(then_name, node.body), branch(else_name, node.orelse), ast.copy_location(stmt, node)]
        if returns:
            out.append(ast.copy_location(ast.Return(ast.Name(result, ast.Load())), node))
        for s in out:
            ast.fix_missing_locations(s)
            for n in ast.walk(s):
                if not hasattr(n, "lineno"):
                    ast.copy_location(n, node)
        return out


def _may_read_tensor_values(test):
    """Whether a conditional expression's test may be a tensor predicate: it compares by value (``x[i] > 0``), calls
    a method (``mask.any()``) or indexes. Tests of Python values -- ``b if a is None else a``, ``isinstance``,
    a flag or an attribute (``self.training``) -- are left alone: a model's code holds many (Hugging Face's
    ``return_dict if return_dict is not None else ...``), and each converted one is a call Dynamo traces at every
    compile."""
    for n in ast.walk(test):
        if isinstance(n, ast.Compare) and any(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq))
                                              for op in n.ops):
            return True
        if isinstance(n, ast.Subscript) or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            return True
    return False


class _ConditionalExpressions(ast.NodeTransformer):
    """Converts the conditional expressions (``a if c else b``) of one statement, innermost first, as ``if``
    statements are: each arm becomes a function returning its value (defined before the statement, in
    ``hoisted``), and the expression a call ``_thunder_if(c, then, else, (), site, (label,))[0]``. Those inside a
    lambda or a comprehension (a scope of their own) are left alone."""

    def __init__(self, rewriter, hoisted):
        self.rewriter, self.hoisted = rewriter, hoisted

    def visit_Lambda(self, node):
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda

    def visit_IfExp(self, node):
        self.generic_visit(node)  # inner ones first
        if not _may_read_tensor_values(node.test):
            return node
        r = self.rewriter
        text = ast.unparse(node)
        site, excluded = r._site(node, text if len(text) <= 80 else text[:77] + "...")
        if excluded:
            return node
        reason = None
        if _has_bool_op(node.test):
            reason = _BOOL_OP
        elif any(isinstance(n, ast.NamedExpr) for arm in (node.body, node.orelse) for n in ast.walk(arm)):
            reason = "an assignment expression (`:=`) in an arm"
        else:
            reason = r.purity.why_not_expr(node.body) or r.purity.why_not_expr(node.orelse)
        if reason:
            site.converted, site.reason = False, reason
            return node
        site.converted, site.reason = True, ""
        r.converted += 1
        names = []
        for arm, value in (("then", node.body), ("else", node.orelse)):
            name = f"_thunder_{arm}_{site.id}"
            names.append(ast.Name(name, ast.Load()))
            args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
            body = [ast.Return(ast.Tuple([value], ast.Load()))]
            fn = ast.FunctionDef(name, args, body, [], None, type_params=[]) \
                if "type_params" in ast.FunctionDef._fields else ast.FunctionDef(name, args, body, [], None)
            self.hoisted.append(fn)
            r.generated.add(name)
        test, names = _unnegated(node.test, names)
        call = ast.Call(ast.Name("_thunder_if", ast.Load()),
                        [test, *names, ast.Tuple([], ast.Load()), ast.Constant(site.id),
                         ast.Tuple([ast.Constant(f"({text})")], ast.Load())], [])
        return ast.Subscript(call, ast.Constant(0), ast.Load())


@dataclass
class Rewritten:
    fn: object            # the new function (or the original, if nothing was rewritten)
    converted: int        # how many ifs became _thunder_if calls
    rebound: int = 0      # how many augmented assignments became _thunder_inplace calls (_InPlaceRebinding)


def _resolver(fn):
    closure = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))

    def resolve(name):
        if name in closure:
            try:
                return closure[name].cell_contents
            except ValueError:
                raise KeyError(name) from None
        if name in fn.__globals__:
            return fn.__globals__[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise KeyError(name)

    local_names = set(fn.__code__.co_varnames) | set(fn.__code__.co_cellvars)

    def resolve_nonlocal(name):
        if name in local_names:
            raise KeyError(name)
        return resolve(name)

    return resolve_nonlocal


def rewrite(fn, sites, excluded=frozenset(), instance=None):
    """``fn`` with each convertible ``if`` rewritten into a ``_thunder_if`` call (see the module docstring), and
    each augmented assignment :class:`_InPlaceRebinding` selects into a ``_thunder_inplace`` call.

    ``sites`` (dict) collects a :class:`BranchSite` per ``if`` statement, keyed by (file, line, code), and is
    reused across rewrites so that ids stay stable; ``excluded`` holds the keys of sites to leave alone.
    ``instance`` is the module when ``fn`` is one of its methods (``self`` is then resolved for purity).
    Returns :class:`Rewritten`; a function without source, or whose source does not parse back into one
    function, is returned unchanged. A decorated function (``__wrapped__``: ``@torch.no_grad()``,
    ``@torch.autocast(...)``, transformers' ``@can_return_tuple``) keeps its wrapper: the inner function is
    rewritten and the wrapper remade around it (:func:`_rewrap`); one whose wrapper does not hold the inner function
    in a closure cell is returned unchanged (its source is the inner function's, and rewriting that in its place
    would drop what the wrapper does: grad mode, autocast, defaults, the result's conversion)."""
    code = getattr(fn, "__code__", None)
    if code is None or fn.__name__ == "<lambda>" or code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE |
                                                                     inspect.CO_ASYNC_GENERATOR):
        return Rewritten(fn, 0)
    if hasattr(fn, "__wrapped__"):
        return _rewrap(fn, sites, excluded, instance)
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return Rewritten(fn, 0)
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return Rewritten(fn, 0)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or tree.body[0].name != fn.__name__:
        return Rewritten(fn, 0)
    fn_def = tree.body[0]
    attributes_set = _attributes_set(fn_def)
    if not any(isinstance(n, (ast.If, ast.IfExp)) or isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)
               and n.target.id in attributes_set for n in ast.walk(fn_def)):
        return Rewritten(fn, 0)
    ast.increment_lineno(tree, first - 1)
    fn_def.decorator_list = []
    as_read = copy.deepcopy(fn_def)
    self_name = None
    if instance is not None and fn_def.args.args:
        self_name = fn_def.args.args[0].arg
    declared = {name for n in ast.walk(fn_def) if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
    purity = _Purity(_resolver(fn), self_name, instance, declared)
    tail = _tail_ifs(fn_def)  # first: it may move a final `return` into an `else`
    rewriter = _Rewriter(_Definedness(fn_def), tail, purity, code.co_filename, first, sites, excluded)
    rewriter.visit(fn_def)
    rebinding = _InPlaceRebinding(attributes_set)
    rebinding.visit(fn_def)  # after the ifs: a branch whose arm calls _thunder_inplace would not be pure
    if not rewriter.converted and not rebinding.rebound:
        return Rewritten(fn, 0)
    # The source read is the file as it is now: edited since the function was loaded, it is not what runs.
    unchanged = _build(fn, as_read)
    if unchanged is None or not _same_source(unchanged.__code__, code):
        logger.info("thunder: the source of %s (%s) is not the code that runs (the file changed since it was "
                    "loaded?): its branches are left as Python control flow", fn.__qualname__, code.co_filename)
        return Rewritten(fn, 0)
    new = _build(fn, fn_def)
    return Rewritten(new, rewriter.converted, rebinding.rebound) if new is not None else Rewritten(fn, 0)


def _rewrap(wrapper, sites, excluded, instance):
    """A decorated function with its inner function (``wrapper.__wrapped__``) rewritten: the wrapper's code, globals
    and defaults with the closure cell that holds the inner function holding the rewritten one instead -- the shape
    of ``functools.wraps`` decorators (torch's ``no_grad``/``autocast``/``enable_grad`` used as decorators,
    transformers' ``can_return_tuple``). Unchanged when no cell, or more than one, holds it."""
    inner = wrapper.__wrapped__
    cells = [i for i, cell in enumerate(getattr(wrapper, "__closure__", None) or ())
             if _cell_contents(cell) is inner]
    if len(cells) != 1 or not isinstance(wrapper, types.FunctionType):
        return Rewritten(wrapper, 0)
    r = rewrite(inner, sites, excluded, instance)
    if not r.converted and not r.rebound:
        return Rewritten(wrapper, 0)
    closure = list(wrapper.__closure__)
    closure[cells[0]] = types.CellType(r.fn)
    new = _remade(wrapper, wrapper.__code__, tuple(closure))
    new.__wrapped__ = r.fn
    return Rewritten(new, r.converted, r.rebound)


def _cell_contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _build(fn, fn_def):
    """Compiles the rewritten definition into a function with fn's globals, defaults and closure cells."""
    code = fn.__code__
    freevars = list(code.co_freevars)
    helpers = {"_thunder_if": _thunder_if, "_thunder_inplace": _thunder_inplace}
    # A factory whose parameters are the free variables, so that the inner function's free variables are cells;
    # for a method using zero-argument super(), a class body provides __class__.
    # A class body named as the one defining the method also mangles its private names (self.__scale is
    # self._Model__scale there).
    params = [v for v in freevars if v != "__class__"] + list(helpers)
    inner = fn_def
    owner = _defining_class_name(fn, fn_def)
    if "__class__" in freevars or owner:
        name = owner or "_thunder_holder"
        holder = ast.ClassDef(name, [], [], [inner], [], type_params=[]) \
            if "type_params" in ast.ClassDef._fields else ast.ClassDef(name, [], [], [inner], [])
        body = [holder, ast.Return(ast.Attribute(ast.Name(name, ast.Load()), "__dict__", ast.Load()))]
    else:
        body = [inner, ast.Return(ast.Name(fn_def.name, ast.Load()))]
    factory = ast.FunctionDef("_thunder_factory",
                              ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params], kwonlyargs=[],
                                            kw_defaults=[], defaults=[]), body, [], None)
    if "type_params" in ast.FunctionDef._fields:
        factory.type_params = []
    module = ast.Module([factory], type_ignores=[])
    ast.fix_missing_locations(module)
    try:
        compiled = compile(module, code.co_filename, "exec")
    except SyntaxError as e:
        logger.debug("thunder: the branch rewrite of %s does not compile (%s); it runs unconverted", fn.__qualname__, e)
        return None
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    new_code = _find_code(factory_code, fn_def.name)
    if new_code is None:
        return None
    cells = dict(zip(freevars, fn.__closure__ or ()))
    cells.update((name, types.CellType(helper)) for name, helper in helpers.items())
    try:
        closure = tuple(cells[name] for name in new_code.co_freevars)
    except KeyError:
        return None
    return _remade(fn, new_code, closure)


def _same_source(read, running):
    """Whether ``read`` (compiled from the source as it is now) and ``running`` (the function's code) were compiled
    from the same text, as far as the numbers and names they use show: the bytecode itself differs with how it was
    compiled (pytest rewrites its test modules' asserts, adding names and strings), so only numbers must be equal
    and ``read``'s names among ``running``'s. An edit that changes neither passes."""
    def numbers(code):
        out = []
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                out.extend(numbers(c))
            elif isinstance(c, (int, float, complex)) and not isinstance(c, bool):
                out.append(repr(c))
        return sorted(out)

    def names(code):
        return set(code.co_names).union(*(names(c) for c in code.co_consts if isinstance(c, types.CodeType)))

    return numbers(read) == numbers(running) and names(read) <= names(running)


def _defining_class_name(fn, fn_def):
    """The name of the class whose body defines ``fn`` (from its qualified name), where the function uses a private
    name Python mangles there (``self.__scale``); else None."""
    parts = fn.__qualname__.split(".")
    if len(parts) < 2 or parts[-2] == "<locals>" or not parts[-2].strip("_"):
        return None
    private = any(isinstance(n, ast.Attribute) and n.attr.startswith("__") and not n.attr.endswith("__") or
                  isinstance(n, ast.Name) and n.id.startswith("__") and not n.id.endswith("__")
                  for n in ast.walk(fn_def))
    return parts[-2] if private else None


def _remade(fn, code, closure):
    """A function of ``code`` and ``closure`` that is ``fn`` in every other respect (globals, name, defaults,
    qualified name, module, docstring, attributes), and says which function it was made from."""
    new = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__, new.__module__, new.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    new.__dict__.update(fn.__dict__)
    new.__wrapped_by_thunder__ = fn
    return new


def _find_code(code, name):
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == name:
                return c
            found = _find_code(c, name)
            if found is not None:
                return found
    return None


# ---- modules: the methods to rewrite ----

def _user_methods(cls):
    """Plain functions defined by cls and its bases up to (not including) torch's own classes, by name."""
    methods = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.startswith("torch.") or klass is object:
            continue
        for name, value in vars(klass).items():
            if isinstance(value, types.FunctionType):
                methods[name] = value
    return methods


def _reachable_methods(cls):
    """The user-defined methods of cls that ``forward`` calls on ``self``, directly or through each other."""
    methods = _user_methods(cls)
    seen, todo = {}, ["forward"]
    while todo:
        name = todo.pop()
        if name in seen or name not in methods:
            continue
        seen[name] = methods[name]
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(methods[name])))
        except (OSError, TypeError, SyntaxError):
            continue
        args = tree.body[0].args.args if tree.body and isinstance(tree.body[0], ast.FunctionDef) else []
        self_name = args[0].arg if args else "self"
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == self_name:
                todo.append(n.attr)
    return seen


def rewrite_methods(model, sites, excluded=frozenset()):
    """The methods of ``model``'s class that have convertible branches -- ``forward`` and the methods it calls on
    ``self`` -- rewritten (:func:`rewrite`). Returns (name -> rewritten function, number of converted branches);
    the module that runs them is a shadow of ``model`` (``thunder.frontend.code_copies.private_module``)."""
    rewritten, converted = {}, 0
    for name, method in _reachable_methods(type(model)).items():
        r = rewrite(method, sites, excluded, instance=model)
        if r.converted or r.rebound:
            rewritten[name], converted = r.fn, converted + r.converted
    return rewritten, converted


# ---- running a graph with converted branches as the Python it came from ----

def has_markers(gm):
    """Whether an FX graph holds converted-branch markers."""
    return any(n.op == "call_function" and n.target in MARKERS for n in gm.graph.nodes)


#: operator's in-place functions (``a -= b`` in a graph): each returns its first operand. Called in an arm, each
#: writes into its first operand, which may be a Python container (``operator.iadd(lst, [x])``): not converted.
_OPERATOR_INPLACE = frozenset(_OPERATOR_FUNCTIONS.values())
#: operator's other functions, in place or not as their names say, though some end in ``_`` (``and_``, ``or_``,
#: ``not_``, ``is_``: ``a & b`` in a graph).
_OPERATORS_NOT_IN_PLACE = frozenset(f for f in vars(operator).values() if callable(f)) - _OPERATOR_INPLACE


def _result_alias(node):
    """The node whose value ``node``'s result is, when ``node`` is an in-place op (it returns the tensor it writes:
    ``a -= 1``, ``a.add_(1)``, ``torch.relu_(a)``, ``out=a``, ``inplace=True``); None otherwise."""
    if node.op not in ("call_function", "call_method") or not node.args and "out" not in node.kwargs:
        return None
    if isinstance(node.kwargs.get("out"), torch.fx.Node):
        return node.kwargs["out"]
    first = node.args[0] if node.args else None
    if not isinstance(first, torch.fx.Node):
        return None
    if node.op == "call_method":
        name = node.target
    elif node.target in _OPERATOR_INPLACE:
        return first
    elif node.target in _OPERATORS_NOT_IN_PLACE:
        return None
    else:
        name = getattr(node.target, "__name__", "")
    if node.kwargs.get("inplace") is True or (name.endswith("_") and not name.endswith("__")):
        return first
    return None


def _is_size_call(node):
    """Whether an FX node reads a tensor's sizes or strides (``x.size()``, ``x.size(0)``, ``aten.sym_size``,
    ``x.stride()``: _merge compares the arms' strides): no effects."""
    return (node.op == "call_method" and node.target in ("size", "stride")) or \
        (node.op == "call_function" and node.target in (torch.ops.aten.sym_size.int, torch.ops.aten.sym_size,
                                                         torch.ops.aten.sym_stride.int, torch.ops.aten.sym_stride))


def _makes_a_number(node):
    """Whether an FX node computes a Python number from its inputs and nothing else: ``s.item()`` of a float
    argument Dynamo passes as a 0-d tensor, a size, arithmetic on numbers (``operator``, ``math``). Dynamo places
    such a node where its first use is, which may be an arm the other arm's nodes read it from (run_exactly)."""
    number = isinstance(node.meta.get("example_value"), (bool, int, float, torch.SymInt, torch.SymFloat,
                                                          torch.SymBool))
    pure = (node.op == "call_method" and node.target == "item") or _is_size_call(node) or \
        (node.op == "call_function" and getattr(node.target, "__module__", None) in ("_operator", "math"))
    return number and pure


def run_exactly(gm, *args, ways=None):
    """Runs ``gm`` taking only the arm of each converted branch its predicate selects, as the original ``if``
    did (calling ``gm`` itself would run both arms, and their in-place writes, for real). Used when a compiled
    graph's assumptions do not hold for a call (inputs that alias a tensor the graph writes). ``ways``: {begin
    marker node: bool}, the arms to take whatever the predicates are (a run on fake tensors, whose predicates have
    no value).

    A node of the arm not taken that code after the region reads (Dynamo found that both arms leave the name bound
    to one object, so there is no select: ``a -= 1`` in one arm) is the tensor that node would have written, as it
    was. The markers' bookkeeping (:class:`TraceRecord`) is for Dynamo's traces only: this runs none of it."""
    interpreter = torch.fx.Interpreter(gm)
    env, values = interpreter.env, iter(args)
    arms = []  # per open branch: (predicate value, or None inside an arm not taken; in the else-arm)

    def active():
        return all(p is not None and p != in_else for p, in_else in arms)

    def made_in_untaken_arm(node):
        """Computes, when the taken arm reads it, a number the arm not taken made (Dynamo places ``s.item()`` of a
        float argument at its first use); only then, since the untaken arm's own arithmetic may raise (``1 / s``)."""
        if node not in env and _makes_a_number(node):
            for arg in node.all_input_nodes:
                made_in_untaken_arm(arg)
            env[node] = interpreter.run_node(node)

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(values)
            continue
        kind = MARKERS.get(node.target) if node.op == "call_function" else None
        if kind == "begin":
            taken = active()
            env[node] = _condition(env[node.args[0]]) if taken else None
            arms.append(((ways[node] if ways is not None else bool(env[node])) if taken else None, False))
        elif kind == "else":
            arms[-1] = (arms[-1][0], True)
        elif kind == "end":
            arms.pop()
        elif kind == "select":
            if active():
                cond, a, b = node.args
                env[node] = env[a] if (ways[cond] if ways is not None and cond in ways else bool(env[cond])) else env[b]
        elif node.op == "output":
            return interpreter.run_node(node)
        elif active():
            if not node.users and _is_size_call(node) and any(arg not in env for arg in node.all_input_nodes):
                continue  # dead, reading the untaken arm: Dynamo's unused x.size() (x.stride()) of each arm's value
            for arg in node.all_input_nodes:
                made_in_untaken_arm(arg)
            env[node] = interpreter.run_node(node)
        else:
            alias = _result_alias(node)
            if alias is not None and alias in env:
                env[node] = env[alias]
    raise RuntimeError("graph without output")
