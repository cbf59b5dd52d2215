"""thunder as a TorchDynamo backend: ``torch.compile(fn, backend="thunder")``.

Dynamo captures the program, guards it, recompiles on new shapes, dtypes or
devices, and splits it at graph breaks; each FX graph it hands over is
imported into a core trace and compiled by :func:`thunder.core.compile.compile_trace`.
"""
import collections
import contextvars
import functools
import linecache
import logging
import os
import re
import sys
import time
import traceback
import weakref
from dataclasses import dataclass, field

import torch

from thunder import _core
from thunder.core import debug
from thunder.core.compile import (SymbolicPlan, compile_trace, has_negative_bit, opaque_results, proxies,
                                  written_inputs)
from thunder.core.log import logger
from thunder.core.options import DEFAULT_PASSES, int_from_environment
from thunder.executors import OpaqueResultMismatch, default_executors, torchex
from thunder.frontend import branches, global_state, specialize
from thunder.frontend.fx_import import UnsupportedGraph, called_function, check_dense, import_graph, note_input_sources


@dataclass
class GraphBreak:
    """Where Dynamo split the program, and why."""

    location: str      # "file.py:12"
    reason: str        # Dynamo's reason, first lines
    skipped_frame: bool  # the whole function fell back to eager
    frame: str = ""    # for a skipped frame, the function Dynamo skipped, as it names it: "'f' (file.py:3)"
    hint: str = ""     # Dynamo's first hint on how to avoid the break ("" if it gave none)

    def __str__(self):
        code = ""
        path, _, line = self.location.rpartition(":")
        if line.isdigit():
            code = linecache.getline(path, int(line)).strip()
        where = f"{self.location} ({code})" if code else self.location
        return f"{where}: {self.reason}" + ("  [whole frame runs eagerly]" if self.skipped_frame else "")


@dataclass
class EagerGraph:
    """A captured graph thunder could not compile; it runs as Dynamo captured it, with torch.

    ``reason`` is the error's type and the first line of its message; ``detail`` the whole message
    (a compiler's output, for instance)."""

    index: int
    reason: str
    gm: object = field(repr=False)
    calls: int = 0
    detail: str = field(default="", repr=False)
    shapes: tuple = None  # (symbolic graph number, shapes, retrace reason) for a specialization (see _compile_graph)
    frame: int = None     # Dynamo's id of the frame (code object) it was captured from (see _tag_frame)


@dataclass
class JitState:
    """Everything one jitted function or module has compiled and seen."""

    name: str
    executors: list
    passes: tuple = DEFAULT_PASSES
    graphs: list = field(default_factory=list)        # CompiledGraph or EagerGraph, in compile order
    #: Graphs recorded in ``graphs`` so far, all together: the next one's index. ``graphs`` may hold fewer: the
    #: oldest released specializations of a graph with symbolic sizes are folded into ``folded``.
    graphs_made: int = 0
    #: Symbolic graph number ("<number> of <name>" in GLOBAL_STATE) -> [specializations, calls, compile seconds] of
    #: its released specializations whose records were dropped: past THUNDER_MAX_SPECIALIZATIONS released ones, the
    #: oldest (see _symbolic_graph, _fold).
    folded: dict = field(default_factory=dict)
    graph_breaks: list = field(default_factory=list)
    calls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    eager_calls: int = 0                              # calls that ran no graph: Dynamo ran the function uncompiled
    empty_graphs: int = 0                             # graphs Dynamo handed over that run no op (run as they are)
    partly_uncompiled_calls: int = 0                  # calls that ran graphs, but none of a frame in limited_frames
    #: Dynamo's id of each frame of the function that reached a recompile limit (its calls that need a new graph
    #: run uncompiled) -> the calls of its graphs when last counted (see count_limited_frames).
    limited_frames: dict = field(default_factory=dict)
    raised_calls: int = 0                             # calls that raised (counted neither as hits nor as misses)
    graph_calls: int = 0                              # runs of its graphs, all together (the sum of their calls)
    branches: dict = field(default_factory=dict)      # (file, line, code) -> branches.BranchSite of each `if`
    dynamo_stopped: str = ""                          # why Dynamo stopped compiling this function ("" if it did not)
    symbolic_graphs: int = 0                          # graphs Dynamo captured with symbolic sizes (specialized per shape)
    uncompiled_methods: dict = field(default_factory=dict)  # a ThunderModule's methods that ran the original
                                                      # module's forward uncompiled (jitted.generate): name -> forwards
    debug: str = None                                 # thunder.jit's debug mode (None, "pdb")
    plan_only: bool = False                           # thunder.examine: graphs are planned, not compiled; they run
                                                      # as captured
    #: why calls ran graphs as captured, with torch, each said once at WARNING (forward AD, a TorchDispatchMode)
    captured_warned: set = field(default_factory=set)
    #: The kernels its graphs compiled, per fusion executor, which its later graphs reuse (the ``compiled`` of
    #: thunder.executors.cpuex.lower and cudaex.lower).
    compiled_kernels: dict = field(default_factory=dict, repr=False)
    #: A torch.compile(..., backend="thunder") result's (or GLOBAL_STATE), not a thunder.jit wrapper's: nothing
    #: wraps its calls, so which of them ran uncompiled is not seen.
    of_torch_compile: bool = False

    def __repr__(self):  # Dynamo prints the backend, a partial holding this, in its recompile messages
        return f"<JitState of {self.name}: {len(self.graphs)} graphs>"


#: State for graphs compiled through torch.compile(backend="thunder") outside thunder.jit.
GLOBAL_STATE = JitState("torch.compile(backend='thunder')", default_executors(), of_torch_compile=True)
#: The JitState of the thunder.jit call in progress (set by ThunderFunction/ThunderModule around each call).
current_state = contextvars.ContextVar("thunder_jit_state", default=None)


#: The causes of fallbacks already warned about in this process (see _fallback_cause).
_warned_causes = set()
#: The torch.compile options already warned about (mode, options), as their repr.
_warned_options = set()


def _fallback_cause(error):
    """What makes two fallbacks "the same" for warning once: the error's type and its errno (an OSError's, or
    "errno N" / "[Errno N]" in its message), else its message's first line with paths and numbers blanked
    (a kernel that fails to compile is kept under a new name each time)."""
    errno = getattr(error, "errno", None) if isinstance(error, OSError) else None
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if errno is None:
        match = re.search(r"errno[ =:]*(\d+)", first, re.IGNORECASE)
        errno = int(match.group(1)) if match else None
    if errno is not None:
        return type(error).__name__, f"errno {errno}"
    return type(error).__name__, re.sub(r"\d+", "N", re.sub(r"(?:[\w.~-]*/)+[\w.-]*", "<path>", first))


def _short_reason(error):
    """The error's type and first line; for a compiler's failure (a first line ending in ':' over its output), also
    the output's first line that says "error", else its last line ("cannot run g++: not found in PATH"; the
    command line comes first)."""
    lines = [l.strip() for l in str(error).strip().splitlines() if l.strip()]
    reason = f"{type(error).__name__}: {lines[0] if lines else ''}"
    if lines and lines[0].endswith(":"):
        first_error = next((l for l in lines[1:] if "error" in l.lower()), lines[-1] if len(lines) > 1 else None)
        if first_error:
            reason += " " + (first_error if len(first_error) <= 240 else first_error[:240] + "...")
    return reason


def _report_fallback(state, index, error):
    """Logs that a graph runs uncompiled: a WARNING the first time this process sees its cause (see
    _fallback_cause), DEBUG after that, so a cache directory that cannot be written does not warn on every
    recompile. A graph the importer declines as a whole (UnsupportedGraph: a whole HF Mamba model, through
    torch.func's transforms) warns as any other (it was logged at INFO: the model ran uncompiled, unsaid). The
    WARNING carries the short reason (_short_reason: an error from Dynamo's fake propagation is a page of traceback
    text); the whole error and its traceback follow at DEBUG, and thunder.report's page shows the whole error too."""
    reason = f"{type(error).__name__}: {error}"
    cause = _fallback_cause(error)
    if cause in _warned_causes:
        logger.debug("thunder: graph %d of %s runs with torch as captured (again): %s", index, state.name, reason)
    else:
        _warned_causes.add(cause)
        short = _short_reason(error)
        logger.warning("thunder: graph %d of %s runs with torch as captured: %s\n  (warned once per cause, later "
                       "ones at DEBUG%s; print(jitted) lists every graph that runs uncompiled)", index, state.name,
                       short, "" if short == reason.strip() else ", where the whole error is")
        logger.debug("thunder: graph %d of %s: %s", index, state.name, reason)
    logger.debug("%s", traceback.format_exc())


#: The keys of torch.compile's ``options=`` that are thunder.jit's options (the others configure Inductor).
THUNDER_OPTIONS = ("executors", "passes", "debug")


def _warn_ignored_options(options):
    """torch.compile's mode= and the options= other than thunder's (THUNDER_OPTIONS) are Inductor's: thunder ignores
    them, saying so once per value."""
    options = dict(options)
    if isinstance(options.get("options"), dict):
        rest = {k: v for k, v in options["options"].items() if k not in THUNDER_OPTIONS}
        if rest:
            options["options"] = rest
        else:
            del options["options"]
    if options.get("mode") in (None, "default"):
        options.pop("mode", None)
    if not options:
        return
    key = repr(sorted(options.items()))
    if key not in _warned_options:
        _warned_options.add(key)
        logger.warning("thunder: the thunder backend ignores torch.compile's %s (they configure Inductor)",
                       ", ".join(f"{k}={v!r}" for k, v in sorted(options.items())))


# ---- torch.compile(..., backend="thunder") results: one JitState each ----

#: The JitState of each torch.compile(..., backend="thunder") result, by its Dynamo context object.
_torch_compile_states = weakref.WeakKeyDictionary()
_EVAL_FRAME_FILE = torch._dynamo.eval_frame.__file__


def dynamo_context_of(compiled):
    """The Dynamo context object of a ``torch.compile`` result (an OptimizedModule or a compiled function), or
    None for anything else."""
    if isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule):
        return compiled.dynamo_ctx
    code = getattr(compiled, "__code__", None)
    if code is not None and code.co_name == "compile_wrapper" and "self" in code.co_freevars and \
            hasattr(compiled, "_torchdynamo_orig_callable"):
        return compiled.__closure__[code.co_freevars.index("self")].cell_contents
    return None


def _calling_context():
    """The Dynamo context and original callable of the innermost torch.compile result being called, read from the
    Python stack (its ``compile_wrapper`` frame: Dynamo compiles frames while that call runs); (None, None) if
    none is."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "compile_wrapper" and code.co_filename == _EVAL_FRAME_FILE:
            local = frame.f_locals
            return local.get("self"), local.get("fn")
        frame = frame.f_back
    return None, None


def _callable_name(fn):
    target = getattr(fn, "__wrapped__", fn)  # a module: Dynamo's wrap_inline wraps it
    target = getattr(target, "__self__", target)  # or it calls the module's bound __call__
    if isinstance(target, torch.nn.Module):
        return type(target).__name__
    return getattr(target, "__qualname__", None) or type(target).__name__


def _thunder_options_of(context):
    """The thunder options (THUNDER_OPTIONS) torch.compile(..., options=...) gave the thunder backend of a Dynamo
    context; None if the context's backend is not thunder's."""
    try:
        backend = torch._dynamo.eval_frame.innermost_backend(context.callback)
    except Exception:  # noqa: BLE001 -- a context of another kind
        return None
    if backend is not thunder_backend and getattr(backend, "compiler_fn", None) is not thunder_backend:
        return None
    options = (getattr(backend, "kwargs", None) or {}).get("options") or {}
    return {k: v for k, v in options.items() if k in THUNDER_OPTIONS}


def _new_torch_compile_state(context, fn):
    from thunder.core.options import check_passes
    from thunder.executors import resolve_executors

    options = _thunder_options_of(context)
    if options is None:
        return None
    state = JitState(f"torch.compile({_callable_name(fn)})", resolve_executors(options.get("executors")),
                     check_passes(options.get("passes")), debug=debug.check_debug(options.get("debug")),
                     of_torch_compile=True)
    _torch_compile_states[context] = state
    return state


def torch_compile_state():
    """The JitState of the torch.compile(..., backend="thunder") result whose call is in progress (Dynamo is
    compiling one of its frames), made on first use with the thunder options its ``options=`` names
    (THUNDER_OPTIONS); None when no such call is in progress. Raises TypeError or ValueError for invalid options
    (as thunder.jit does)."""
    context, fn = _calling_context()
    if context is None:
        return None
    try:
        state = _torch_compile_states.get(context)
    except TypeError:  # not weakly referenceable
        return None
    return state if state is not None else _new_torch_compile_state(context, fn)


def state_of_torch_compile_result(compiled):
    """The JitState of a torch.compile(..., backend="thunder") result (an empty one if it compiled nothing yet), or
    None if ``compiled`` is not a torch.compile result."""
    context = dynamo_context_of(compiled)
    if context is None or _thunder_options_of(context) is None:  # not a torch.compile result, or another backend's
        return None
    state = _torch_compile_states.get(context)
    if state is None:  # nothing compiled yet
        fn = getattr(compiled, "_orig_mod", None) or getattr(compiled, "_torchdynamo_orig_callable", None)
        state = JitState(f"torch.compile({_callable_name(fn)})", default_executors(), of_torch_compile=True)
    return state


def _as_captured(gm):
    """gm run by torch as the program runs it: a graph with converted branches takes one arm of each (calling gm
    itself would run both, in-place writes included). Its generated ``forward`` is called, not gm: GraphModule's
    ``__call__`` prints "Call using an FX-traced Module ..." to stderr before any error eager raises (a lazy graph
    module, Dynamo's, is compiled first: its ``forward`` would call gm)."""
    if hasattr(gm, "real_recompile"):
        gm.real_recompile()
    return (lambda *args: branches.run_exactly(gm, *args)) if branches.has_markers(gm) else gm.forward


def _record(state, also, graph):
    """Lists ``graph`` (compiled or run as captured) in ``state`` and in ``also`` if given."""
    for owner in (state, also) if also is not None else (state,):
        owner.graphs.append(graph)
        owner.graphs_made += 1


def _fold(state, also, graph, number):
    """Drops the record of ``graph``, a released specialization of symbolic graph ``number``, from ``state`` and
    ``also`` (if given), adding its calls and compile seconds to each one's ``folded`` (in ``also``, under
    "<number> of <state's name>": every torch.compile result numbers its symbolic graphs from 1): with ever new
    shapes past the kept specializations, the records of the released ones grew without end (about 4 KB each)."""
    for owner in (state, also) if also is not None else (state,):
        owner.graphs[:] = [g for g in owner.graphs if g is not graph]
        totals = owner.folded.setdefault(number if owner is state else f"{number} of {state.name}", [0, 0, 0.0])
        totals[0] += 1
        totals[1] += graph.calls
        totals[2] += graph.compile_seconds


def _count_graph_call(state, also):
    state.graph_calls += 1
    if also is not None:
        also.graph_calls += 1


def _run_eagerly(state, index, gm, error, also=None, shapes=None):
    """The callable for a graph thunder could not compile: gm, run by torch as Dynamo captured it (listed in
    ``state``, and in ``also`` if given; ``shapes`` as for _compile_graph)."""
    _report_fallback(state, index, error)
    eager = EagerGraph(index, _short_reason(error), gm, detail=f"{type(error).__name__}: {str(error).strip()}",
                       shapes=shapes)
    _record(state, also, eager)

    forward = _as_captured(gm)

    def run_eager(*args):
        eager.calls += 1
        _count_graph_call(state, also)
        return forward(*args)
    return run_eager


def remake_output_views(out, args, groups):
    """A compiled program's outputs ``out`` (for inputs ``args``) with each group of outputs that share memory in
    eager (fx_import.OutputViews) made again from its base -- the input, or the output the program returns it in
    -- by replaying their view ops: they come out as views of the base, of one another and of the inputs, as
    eager's do."""
    values = list(out)
    for g in groups:
        base = args[g.base_input] if g.base_input >= 0 else out[g.base_output]
        for i, replay in g.members:
            values[i] = replay(base, args)
    return type(out)(values)


def _remake_output_views(fn, groups):
    """fn, its outputs made again by remake_output_views."""
    if not groups:
        return fn
    return lambda *args: remake_output_views(fn(*args), args, groups)


def _return_selected_inputs(fn, selected, count):
    """fn, whose trace returns ``count`` conditions of converted branches after the graph's outputs, returning the
    graph's outputs -- without the conditions -- with each one eager returns as an input itself, where the
    conditions lead to it, that input (fx_import.SelectedInput)."""
    if not count:
        return fn

    def selected_inputs(*args):
        out = fn(*args)
        values, conditions = list(out[:len(out) - count]), out[len(out) - count:]
        for s in selected:
            values[s.output] = s.pick(values[s.output], args, conditions)
        return type(out)(values)
    return selected_inputs


def _keep_outputs_fresh(fn, compiled, fresh, memory):
    """fn, with the outputs eager returns as new tensors (``fresh``: positions, ImportedGraph.fresh_outputs) copied
    where the program returned an input's memory instead, or another output's where eager's two have memory of
    their own (``memory``: ImportedGraph.output_memory). Functionalization forwards a value written whole into a
    new tensor (``v = x * 2; v.copy_(y); return v`` returns y's value), so the program returned the input y itself
    (or a view of it), and a later write to the result changed the caller's y; ``u = torch.ones_like(t);
    u.copy_(t); return t, u`` returned one tensor twice. Which outputs can be such a tensor is read from the
    execution trace (an input or another output, or what a view op or an opaque op makes of one: the torch
    executor returns views); only those are checked at run time."""
    trace = compiled.execution_trace.trace
    outputs = trace.output[0] if compiled.autodiff == "thunder" else trace.output
    if not fresh or not isinstance(outputs, (tuple, list)):
        return fn
    roots = {}  # proxy -> the proxies whose memory it may share (itself among them)

    def of(p):
        return roots.get(p, {p})
    for b in trace.symbols:
        if b.is_view or b.is_opaque or (b.level == "ltorch" and _may_return_its_input(b.name)):
            shared = set().union(*(of(p) for p in proxies(b.args)))
            for q in proxies(b.output):
                roots[q] = shared | {q}
    inputs = {p for p in trace.inputs if isinstance(p, _core.Proxy)}

    def distinct(i, j):  # eager's outputs i and j have memory of their own
        return i < len(memory) and j < len(memory) and memory[i] != memory[j]
    risky = []
    for i in fresh:
        if i < len(outputs) and isinstance(outputs[i], _core.Proxy):
            mine = of(outputs[i])
            if mine & inputs or any(isinstance(outputs[j], _core.Proxy) and distinct(i, j) and of(outputs[j]) & mine
                                    for j in range(i)):
                risky.append(i)
    if not risky:
        return fn

    def fresh_outputs(*args):
        out = fn(*args)
        taken = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        values = list(out)
        for i in risky:
            if not isinstance(values[i], torch.Tensor):
                continue
            at = values[i].untyped_storage().data_ptr()
            if at in taken or any(isinstance(values[j], torch.Tensor) and distinct(i, j) and
                                  values[j].untyped_storage().data_ptr() == at for j in range(i)):
                values[i] = values[i].clone()
        return type(out)(values)
    return fresh_outputs


@functools.lru_cache(maxsize=None)
def _may_return_its_input(name):
    """Whether the torch op ``name`` may return its input's memory: ATen's schema says a result aliases an argument
    (``t``, ``reshape``, ``contiguous``, ``to``, ``split``...), or it is ``type_as`` (which returns the input
    itself for its own dtype), or ATen has no op of that name (``getitem``: assumed so)."""
    op = getattr(torch.ops.aten, name, None)
    if op is None or name == "type_as":
        return True
    try:
        return any(r.alias_info is not None and not r.alias_info.is_write
                   for o in op.overloads() for r in getattr(op, o)._schema.returns)
    except (AttributeError, RuntimeError):
        return True


def _passing_data(fn, positions):
    """fn, called with ``x.data`` for the inputs at ``positions`` (ImportedGraph.data_inputs): the graph uses them
    only through ``x.data`` and writes through it, and a write there bumps the version of ``x.data``'s own
    counter, not x's, which a tensor autograd saved for a backward still to come shares."""
    if not positions:
        return fn

    def with_data(*args):
        args = list(args)
        for i in positions:
            args[i] = args[i].data
        return fn(*args)
    return with_data


def _guard_input_aliasing(fn, compiled, gm, sets_grad_mode):
    """Functionalization assumes that the inputs a graph writes share memory with no other input (Dynamo passes
    the same tensor twice as one input, but not a view and its base, or overlapping slices). A call whose written
    input shares storage with another input runs the graph as captured instead -- with torch, taking one arm of
    each converted branch -- which is what eager does.

    A write into a leaf tensor that requires grad, with grad mode on, raises eager's RuntimeError. Dynamo's trace
    raises it for a write it sees reach the leaf; one it does not (through an eval-mode dropout, which returns its
    input) reached the leaf silently. (Not for a graph that sets grad mode itself (``sets_grad_mode``): its write
    may be under its own ``torch.no_grad()``, as an optimizer's step is.)"""
    written = written_inputs(compiled.traces[-1].trace)
    if not written:
        return fn
    exact = _as_captured(gm)

    def storage(t):
        return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None

    def guarded(*args):
        if not sets_grad_mode and torch.is_grad_enabled() and \
                any(args[i].requires_grad and args[i].is_leaf for i in written if isinstance(args[i], torch.Tensor)):
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        mine = {storage(args[i]) for i in written}
        if any(storage(a) in mine for i, a in enumerate(args) if i not in written and isinstance(a, torch.Tensor)) or \
                len(mine) < len(written):
            compiled.aliased_calls += 1
            return exact(*args)
        return fn(*args)
    return guarded


def _writes(b):
    """Whether a symbol of a final trace writes memory or state (a copy-back into an input, an effect), or holds one
    that does (a fusion)."""
    return (b.has_effect and b.name != "del") or any(_writes(s) for s in b.subsymbols)


def _calls_opaque(b, namespace):
    """Whether a symbol is, or holds, an opaque call of something but torch's own (``operator.getitem``,
    ``torch.*``, ``torch.Tensor.*``, aten ops, and a torch function the trace calls under an autocast region's
    state): a custom op or a function Dynamo put in the graph, which may do more than compute (count, log) and must
    not run twice. ``namespace``: the trace's, where the callees it names are looked up."""
    if b.is_opaque:
        callee = b.callee
        fn = called_function(namespace.get(callee))
        torchs = callee.startswith(("operator.", "torch.ops.aten.")) or \
            (callee.startswith("torch.") and not callee.startswith("torch.ops.")) or \
            (fn is not None and torchex.defined_by_torch(fn))
        if not torchs:
            return True
    return any(_calls_opaque(s, namespace) for s in b.subsymbols)


def _rerunnable(compiled, last):
    """Whether a call of the compiled graph that raised at its final trace's symbol ``last`` or before can run again
    with torch: it calls no opaque op but torch's (_calls_opaque), and writes nothing (a copy-back into an input, an
    effect: _writes) before that symbol."""
    view = compiled.traces[-1]
    symbols = list(view.trace.symbols)
    if any(_calls_opaque(b, view.namespace) for b in symbols):
        return False
    return all(not _writes(b) for b in symbols[:last])


def forward_ad_active():
    """Whether a forward-mode AD dual level is open (``with torch.autograd.forward_ad.dual_level()``): the inputs
    may carry tangents, which Dynamo's guards do not tell apart, and thunder's programs do not propagate."""
    return getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0


#: Why a graph's call runs as captured, with torch (_run_as_captured): what the WARNING says.
_CAPTURED_BECAUSE = {
    "forward_ad": "is called inside a forward-mode AD dual level (torch.autograd.forward_ad): its graphs run with "
                  "torch there, uncompiled, so that tangents reach the outputs",
    "dispatch_mode": "is called under a TorchDispatchMode (FakeTensorMode's shape propagation, a logging mode): its "
                     "graphs run with torch there, uncompiled, their ops dispatched to the mode as eager's are",
}


def _run_as_captured(state, compiled, gm, args, why):
    """A compiled graph's call run as captured, with torch: inside a forward-AD dual level (thunder's programs
    drop the inputs' tangents: ``unpack_dual(out).tangent`` was None) or under a TorchDispatchMode (the kernels
    would read a fake tensor's memory). Counted in the graph's ``captured_calls``; said once per wrapper and
    reason (``why``, a key of _CAPTURED_BECAUSE), at WARNING."""
    compiled.captured_calls += 1
    if why not in state.captured_warned:
        state.captured_warned.add(why)
        logger.warning("thunder: %s %s", state.name, _CAPTURED_BECAUSE[why])
    return _as_captured(gm)(*args)


def _raising_as_eager(fn, state, compiled, gm):
    """fn, where its trace may raise for its inputs' values (an index out of range that a kernel checks, an op torch
    runs: ``BoundSymbol.may_raise_for_values``) and changes nothing before it could (its writes into inputs, the
    copy-backs, and its effects all come after the last such op, and it calls no opaque op but torch's): when it
    raises, the graph runs as captured, with torch, which raises eager's exception -- its type and message:
    one_hot's RuntimeError "Class values must be smaller than num_classes", nll_loss's IndexError "Target -5 is out
    of bounds", where thunder's kernels raise an IndexError of their own -- caused by thunder's error (its trace
    line and the user's line are its notes, given to torch's too). Where torch runs what thunder raised for
    (a number beyond 64 bits a kernel cannot take), torch's result is returned, with a WARNING. Other graphs, and
    the graphs of elementwise ops and reductions, which no value makes raise, are fn as it is: no call of theirs
    pays for this."""
    trace = compiled.traces[-1].trace
    raising = [i for i, b in enumerate(trace.symbols) if b.may_raise_for_values]
    # (Not on a GPU: a trapped kernel leaves the device's context unusable, as torch's device-side asserts do.)
    on_gpu = any(trace.meta(p)[0] != "number" and trace.meta(p)[2] != "cpu" for p in trace.inputs)
    # (Nor where it enters an autocast region: run as captured, a raising graph would leave it entered -- its exit is
    # a later node -- where thunder's own program leaves it, global_state.restoring.)
    enters_autocast = any(n.op == "call_function" and n.target is torch.amp.autocast_mode._enter_autocast
                          for n in gm.graph.nodes)
    if not raising or not _rerunnable(compiled, raising[-1]) or on_gpu or enters_autocast:
        return fn
    exact = _as_captured(gm)

    def run(*args):
        try:
            return fn(*args)
        except OpaqueResultMismatch:  # the graph runs with torch from now on (_captured_after_mismatch)
            raise
        except Exception as error:  # noqa: BLE001 -- torch decides what is raised
            debug.annotate(error)  # the trace line it was raised at, and the user's line: given to torch's error
            try:
                out = exact(*args)
            except Exception as eager_error:  # noqa: BLE001
                for note in getattr(error, "__notes__", ()):
                    eager_error.add_note(note)
                raise eager_error from error
            logger.warning("thunder: graph %d of %s raised %s: %s, where torch runs it; this call ran the graph "
                           "with torch", compiled.index, state.name, type(error).__name__,
                           str(error).splitlines()[0] if str(error) else "")
            return out
    return run


def _captured_after_mismatch(fn, state, compiled, gm):
    """fn, where its trace calls opaque ops, run with torch as captured from the first call on which an opaque op's
    result is not what Dynamo's fake tensor of it said (OpaqueResultMismatch, which a kernel's launcher raises
    before reading it), with one WARNING; the compiled graph is released with that reason (``print(jitted)``).
    The call that found it runs again with torch, unless something before the kernels that read opaque results
    could have changed memory or state (a write or an effect before the last of them, an opaque op other than
    torch's): that call raises the error, and the later calls run with torch."""
    trace = compiled.traces[-1].trace
    results = opaque_results(trace)
    if not results:
        return fn
    fusion_executors = {ex.name for ex in state.executors if ex.fusion}
    checking = [i for i, b in enumerate(trace.symbols)
                if b.executor in fusion_executors and any(p in results for p in proxies(b.args))]
    # (A checking kernel that writes counts as a write before its check.)
    rerunnable = _rerunnable(compiled, checking[-1] + 1 if checking else 0)
    captured = []

    def run(*args):
        if captured:
            return captured[0](*args)
        try:
            return fn(*args)
        except OpaqueResultMismatch as error:
            logger.warning("thunder: graph %d of %s runs with torch as captured from %s call on: %s", compiled.index,
                           state.name, "this" if rerunnable else "the next", error)
            captured.append(_as_captured(gm))
            compiled.release(f"runs with torch as captured: {error}")
            if not rerunnable:
                raise
            return captured[0](*args)
    return run


def _log_compiled(state, compiled, imported):
    """INFO: the graph compiled -- its ops, fusions, opaque ops, who differentiates it, the time -- and each
    data-dependent branch it compiled to a select."""
    fusion_executors = {ex.name for ex in state.executors if ex.fusion}
    symbols = [b for b in compiled.execution_trace.symbols if b.name != "del"]
    fusions = sum(1 for b in symbols if b.executor in fusion_executors)
    backward = f"; backward: {compiled.autodiff}" if compiled.autodiff else ""
    logger.info("thunder: compiled graph %d of %s in %.1f ms: %d ops, %d fusions, %d opaque ops; executors %s%s",
                compiled.index, state.name, compiled.compile_seconds * 1e3, len(symbols), fusions,
                compiled.opaque_ops(), ", ".join(compiled.executors()) or "none", backward)
    by_id = {site.id: site for site in state.branches.values()}
    for site_id in imported.branch_sites:
        if site_id in by_id:
            site = by_id[site_id]
            logger.info("thunder: graph %d of %s: the branch at %s (%s) is converted to a select", compiled.index,
                        state.name, site.location, site.code)


def thunder_backend(gm: torch.fx.GraphModule, example_inputs, *, state: JitState = None, **options):
    """The Dynamo backend: compiles one FX graph and returns a callable with gm's calling convention.

    Never raises: a graph thunder cannot compile runs with torch as captured
    (and ``print(jitted)`` and ``thunder.compile_stats`` say why). ``options`` are what
    ``torch.compile(..., mode=..., options=...)`` passes on; like the ``eager`` backend,
    thunder ignores them, with a warning once per distinct value.
    """
    if options:
        _warn_ignored_options(options)
    also = None  # a torch.compile result's graphs are also listed in GLOBAL_STATE
    if state is None:
        state = current_state.get()
    if state is None:
        state = torch_compile_state() or GLOBAL_STATE
        also = GLOBAL_STATE if state is not GLOBAL_STATE else None
    if not any(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes):
        # A graph that runs no op (thunder.jit lets Dynamo make one: see ThunderFunction._run) returns its inputs
        # as they came: nothing to compile, and no graph to count.
        state.empty_graphs += 1
        return gm.forward
    note_input_sources(gm)
    modes = _fake_modes(gm)
    forget_converted_tensors(keep=modes)
    _FAKE_MODES.update(modes)
    gm, attributes = _lift_tensor_attributes(gm)
    example_inputs = [*example_inputs, *attributes]
    frame, graphs = _compiling_frame(), state.graphs_made
    if specialize.has_symbolic_shapes(gm, example_inputs):
        fn = _symbolic_graph(state, gm, also, frame)
    else:
        fn = _compile_graph(state, gm, example_inputs, also)
        _tag_frame(state, graphs, frame)
    return (lambda *args: fn(*args, *attributes)) if attributes else fn


#: Dynamo's fake modes of the graphs compiled since they were last forgotten (see forget_converted_tensors).
_FAKE_MODES = weakref.WeakSet()


def _fake_modes(gm):
    """The fake modes of the values of gm's inputs: the one Dynamo traced gm with (the example inputs a backend
    is given are of a mode of their own)."""
    return {v.fake_mode for n in gm.graph.find_nodes(op="placeholder")
            if isinstance(v := n.meta.get("example_value"), torch._subclasses.fake_tensor.FakeTensor)}


def forget_converted_tensors(keep=()):
    """Clears, in Dynamo's fake modes of the graphs compiled since the last call (but those in ``keep``: the
    graph being compiled), the memo of the real tensors each converted to a fake one: parameters, buffers, inputs.

    The memo holds a weak reference to each of them, and a graph's fake values (its symbolic graph, kept for later
    shapes; its training program, kept for backward) keep their fake mode alive, with its memo;
    ``torch.utils.swap_tensors`` refuses a tensor with any weak reference (``module.to()`` under
    ``torch.__future__.set_swap_module_params_on_conversion(True)``, parameters made tensor subclasses). Dynamo
    converts nothing more with a frame's mode once the frame is compiled: thunder.jit calls this when a call is
    done, and the backend when it starts on another frame (for ``torch.compile(backend="thunder")``). The memo is
    a private part of torch's fake modes: where it changed, nothing is cleared."""
    for mode in [m for m in _FAKE_MODES if m not in keep]:
        _FAKE_MODES.discard(mode)
        describer = getattr(getattr(getattr(mode, "fake_tensor_converter", None), "meta_converter", None),
                            "describer", None)
        for memo in (getattr(describer, "lookup_tensor", None), getattr(describer, "lookup_storage", None)):
            if hasattr(memo, "clear"):
                memo.clear()


def _compiling_frame():
    """Dynamo's id of the frame (the code object) whose graph is being compiled, or None outside a compile."""
    context = getattr(torch._guards, "CompileContext", None)  # (private: pinned by tests/test_recompile.py)
    compile_id = context.current_compile_id() if context is not None else None
    return getattr(compile_id, "frame_id", None)


def _tag_frame(state, first, frame):
    """Marks the graphs state compiled from index ``first`` on as captured from Dynamo's frame ``frame``.
    (``state.graphs`` is in index order: _record appends each graph, numbered ``state.graphs_made``, at the end.)"""
    for graph in reversed(state.graphs):
        if graph.index < first:
            break
        graph.frame = frame


def _lift_tensor_attributes(gm):
    """gm with each tensor it reads as an attribute (``get_attr``: an optimizer's parameters and state, a constant
    Dynamo kept) made an input after gm's own, and those tensors, which the caller passes after gm's arguments.
    As inputs, their in-place writes (``p.add_(...)`` in ``optimizer.step()``) are written back to them, as to any
    input (see docs/functionalization.md); imported as values made by the program, the writes were dropped as
    dead. gm itself is unchanged; it is returned as it is when it reads no tensor attribute."""
    nodes = [n for n in gm.graph.find_nodes(op="get_attr")
             if isinstance(getattr(gm, n.target, None), torch.Tensor)]
    if not nodes:
        return gm, []
    graph = torch.fx.Graph()
    copies = {}
    graph.output(graph.graph_copy(gm.graph, copies))
    last = list(graph.find_nodes(op="placeholder"))
    attributes = []
    for node in nodes:
        copy = copies[node]
        with graph.inserting_after(last[-1]) if last else graph.inserting_before(next(iter(graph.nodes))):
            placeholder = graph.placeholder(f"attribute_{node.target}")
        placeholder.meta = dict(copy.meta)
        copy.replace_all_uses_with(placeholder)
        graph.erase_node(copy)
        last.append(placeholder)
        attributes.append(getattr(gm, node.target))
    return torch.fx.GraphModule(gm, graph), attributes


def _symbolic_graph(state, gm, also, frame):
    """The callable for a graph with symbolic sizes. It is imported once as it is (one trace whose sizes are
    polynomials in its size inputs, ``import_graph(..., symbolic=True)``), and the passes run on that trace once
    (compile.SymbolicPlan); each new shape signature (specialize.signature) binds the final trace's sizes to the
    call's and lowers it at the call that brings it -- kernels (which take their sizes as arguments) come from the
    cache. Where the passes cannot run with symbolic sizes (a size a pass must know), each signature binds the
    imported trace's sizes and runs them. A graph the core cannot import with symbolic sizes
    (a size that is not a polynomial in the size inputs, a non-contiguous input) is traced again per signature
    instead (specialize.specialize). A signature that cannot be compiled runs gm as captured. ``frame`` is Dynamo's
    id of the frame gm was captured from (see _tag_frame)."""
    state.symbolic_graphs += 1
    number = state.symbolic_graphs
    specializations = collections.OrderedDict()  # signature -> (callable, its graph), least recently used first
    released = collections.deque()  # the released specializations still recorded in state.graphs, oldest first
    free = specialize.free_inputs(gm)
    sizing = specialize.sizing_values(gm)
    symbolic = []  # the symbolic import, or the reason there is none, after the first call
    planned = []   # the symbolic import after the passes (compile.SymbolicPlan), or why there is none

    def run(*args):
        key = specialize.signature(args, free, sizing)
        known = specializations.get(key)
        if known is not None:
            specializations.move_to_end(key)
            return known[0](*args)
        limit = max_specializations()
        shapes = specialize.describe(gm, args)
        graphs = state.graphs_made
        if not symbolic:
            symbolic.append(_import_symbolic(gm, args, number))
        if not isinstance(symbolic[0], str) and not planned:
            planned.append(_plan_symbolic(state, symbolic[0], args, number))
        if not isinstance(symbolic[0], str):
            plan = planned[0] if not isinstance(planned[0], str) else None
            fn = _compile_graph(state, gm, args, also, shapes=(number, shapes, None), imported=symbolic[0],
                                plan=plan)
        else:
            try:
                for a in args:
                    if isinstance(a, torch.Tensor):
                        check_dense(a)
                concrete = specialize.specialize(gm, args)
            except Exception as e:  # noqa: BLE001 -- run these shapes with torch
                fn = _run_eagerly(state, state.graphs_made, gm, e, also, shapes=(number, shapes, symbolic[0]))
            else:
                fn = _compile_graph(state, concrete, args, also, shapes=(number, shapes, symbolic[0]))
        _tag_frame(state, graphs, frame)
        specializations[key] = (fn, state.graphs[-1] if state.graphs_made > graphs else None)
        while len(specializations) > limit:
            _, (_, graph) = specializations.popitem(last=False)
            if hasattr(graph, "release"):
                graph.release(f"the least recently used of symbolic graph {number}'s {limit} specializations "
                              "kept (THUNDER_MAX_SPECIALIZATIONS); its shapes compile again if they come back")
                released.append(graph)
        while len(released) > limit:  # shapes that keep coming back: the records, not only the programs, bounded
            _fold(state, also, released.popleft(), number)
        return fn(*args)
    return run


def max_specializations():
    """How many shape signatures a graph with symbolic sizes keeps compiled (``$THUNDER_MAX_SPECIALIZATIONS``,
    default 256): each holds its bound traces, launchers and output prototypes (20-70 KB for a small GPT-2), so
    a server seeing ever new shapes would grow without end. Past it, the least recently used one is released
    (:meth:`thunder.core.compile.CompiledGraph.release`) and compiles again, from the kernel cache, if its shapes
    come back.

    Raises:
        ValueError: the variable holds anything but a positive integer.
    """
    return int_from_environment("THUNDER_MAX_SPECIALIZATIONS", 256)


def _import_symbolic(gm, args, number):
    """gm imported with symbolic sizes, or why it cannot be (then each shape signature is traced again)."""
    try:
        return import_graph(gm, args, symbolic=True)
    except Exception as e:  # noqa: BLE001 -- any failure: trace each signature instead
        reason = f"{type(e).__name__}: {e}"
        logger.info("thunder: symbolic graph %d is traced again for each shape: it cannot be imported with symbolic "
                    "sizes (%s)", number, reason)
        return reason


def _plan_symbolic(state, imported, args, number):
    """The passes run once on a graph's symbolic import (compile.SymbolicPlan), or why they cannot be (then each
    shape signature runs them with its sizes bound)."""
    if state.plan_only:
        return "thunder.examine plans each shape"
    try:
        values = {proxy: int(args[position]) for proxy, position in imported.size_inputs}
        return SymbolicPlan(imported, state.executors, state.passes, state.graphs_made, values,
                            compiled_kernels=state.compiled_kernels)
    except Exception as e:  # noqa: BLE001 -- any failure: the passes run per shape
        reason = f"{type(e).__name__}: {e}"
        logger.info("thunder: symbolic graph %d runs the passes for each shape: they cannot run with symbolic "
                    "sizes (%s)", number, reason)
        return reason


def _compile_graph(state, gm, example_inputs, also, shapes=None, imported=None, plan=None):
    """The callable for a graph with static shapes: compiled by thunder, or gm run as captured when that fails.
    ``shapes`` is (symbolic graph number, shapes, why it was traced again or None) for a specialization of a
    symbolic graph; ``imported`` that graph's symbolic import, whose sizes are bound to ``example_inputs``' (none:
    gm is imported); ``plan`` its compile.SymbolicPlan, lowered for these sizes (where that fails, the sizes are
    bound to the import and the passes run for them)."""
    index = state.graphs_made
    symbolic = imported
    compiled = None
    if plan is not None:
        try:
            compiled = plan.lower(example_inputs, index, state.debug)
        except Exception as e:  # noqa: BLE001 -- these sizes run the passes on their own
            logger.info("thunder: graph %d: the symbolic graph's fusions do not lower at shapes %s (%s: %s); "
                        "the passes run for these sizes", index, shapes[1] if shapes else "?", type(e).__name__, e)
    try:
        if compiled is not None:
            imported = symbolic  # what follows reads what the import found, the same at every size
        else:
            start = time.perf_counter()
            imported = import_graph(gm, example_inputs) if symbolic is None else symbolic.bind(example_inputs)
            front = {"import" if symbolic is None else "bind sizes": time.perf_counter() - start}
            compiled = compile_trace(imported, state.executors, state.passes, index, state.debug,
                                     lower=not state.plan_only, symbolic=symbolic, import_seconds=front,
                                     compiled_kernels=state.compiled_kernels,
                                     guarded_inputs=not has_negative_bit(example_inputs))
    except branches.BranchRejected as e:
        # A branch thunder.jit converted, seen while Dynamo compiles: Dynamo runs the frame eagerly (see branches).
        if isinstance(e.site, int) and shapes is None:
            record = branches.tracing_record()
            if record is not None:
                record.rejected[e.site] = e.reason
            raise
        return _run_eagerly(state, index, gm, e, also, shapes)  # torch.cond: gm runs it as torch does
    except Exception as e:  # noqa: BLE001 -- any failure means: run this graph with torch
        return _run_eagerly(state, index, gm, e, also, shapes)
    compiled.shapes = shapes
    _record(state, also, compiled)
    for site in state.branches.values():
        site.captured += site.id in imported.branch_sites
    if state.plan_only:  # thunder.examine: nothing was compiled; the graph runs with torch as captured
        forward = _as_captured(gm)

        def run_planned(*args):
            compiled.calls += 1
            _count_graph_call(state, also)
            return forward(*args)
        return run_planned
    _log_compiled(state, compiled, imported)
    # A graph that sets grad mode, autocast or inference mode undoes it if it raises, as leaving `with` blocks does.
    fn = global_state.restoring(compiled.fn) if imported.sets_global_state else compiled.fn
    fn = _keep_outputs_fresh(fn, compiled, imported.fresh_outputs, imported.output_memory)
    fn = _return_selected_inputs(fn, imported.selected_inputs, imported.selected_conditions)
    fn = _remake_output_views(fn, imported.output_views)
    fn = _guard_input_aliasing(fn, compiled, gm, imported.sets_global_state)
    fn = _raising_as_eager(fn, state, compiled, gm)
    fn = _captured_after_mismatch(fn, state, compiled, gm)
    fn = _passing_data(fn, imported.data_inputs)

    def run(*args):
        compiled.calls += 1
        _count_graph_call(state, also)
        if forward_ad_active():
            return _run_as_captured(state, compiled, gm, args, "forward_ad")
        if torch._C._len_torch_dispatch_stack():
            return _run_as_captured(state, compiled, gm, args, "dispatch_mode")
        try:
            return fn(*args)
        except Exception as e:
            debug.annotate(e)  # the trace's line it was raised at, and the user's line that came from
            raise
    if also is None:  # what run does, for the fast path to write out in its own call (thunder.frontend.fast_path)
        run.parts = (fn, compiled, state)
    return run


class JitBackend:
    """The Dynamo backend of one thunder.jit wrapper: :func:`thunder_backend` with the wrapper's JitState.

    It holds the state weakly: Dynamo keeps every backend it was ever given until ``torch._dynamo.reset()``
    (``torch._dynamo.eval_frame.cached_backends``), and a wrapper that is collected must not stay alive, with
    its compiled graphs, through its backend."""

    __slots__ = ("_state", "__weakref__")

    def __init__(self, state):
        self._state = weakref.ref(state)

    def __call__(self, gm, example_inputs, **options):
        state = self._state()
        if state is None:  # the wrapper is gone (nothing calls its code any more): run the graph as captured
            return gm.forward
        return thunder_backend(gm, example_inputs, state=state, **options)

    def __repr__(self):  # Dynamo prints the backend in its recompile messages
        state = self._state()
        return f"<thunder backend of {state.name if state is not None else 'a collected wrapper'}>"


# ---- graph breaks: read from Dynamo's "graph_breaks" log artifact ----

def _state_in_progress():
    """The JitState of the thunder.jit call, or of the torch.compile(..., backend="thunder") result's call, in
    progress; None for none (or a torch.compile result with invalid thunder options: its backend reports them)."""
    state = current_state.get()
    if state is not None:
        return state
    try:
        return torch_compile_state()
    except Exception:  # noqa: BLE001 -- invalid thunder options
        return None


class _GraphBreakHandler(logging.Handler):
    """Records each graph break Dynamo logs in the JitState of the thunder.jit call (or torch.compile result) in
    progress, and logs it at INFO."""

    def emit(self, record):
        state = _state_in_progress()
        if state is None:
            return
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001
            return
        graph_break = _parse_graph_break(message)
        if graph_break.skipped_frame and graph_break.reason.startswith("Observed exception"):
            # The traced code raised (as the call then does, eagerly): that call ran uncompiled and is counted as
            # raised; the frame stays compiled for calls that do not raise -- neither a graph break nor a skip.
            logger.debug("thunder: %s raised while Dynamo traced it; that call runs eagerly", state.name)
            return
        state.graph_breaks.append(graph_break)
        logger.info("thunder: graph break in %s at %s", state.name, graph_break)
        if graph_break.skipped_frame:
            note_skipped_frame(state, graph_break)


def _parse_graph_break(message):
    lines = message.splitlines()
    location = ""
    for line in lines:
        if "in user code at " in line:
            location = line.split("in user code at ", 1)[1].strip()
            break
    reason_lines = []
    for line in lines:
        if line.startswith("Graph Break Reason:"):
            first = line.split(":", 1)[1].strip()
            if first:
                reason_lines.append(first)
            continue
        if reason_lines and (line.startswith("  Explanation") or line.startswith("User code traceback")):
            break
        if reason_lines and line.strip():
            reason_lines.append(line.strip())
    reason = " ".join(reason_lines) or message.strip().splitlines()[0]
    reason = reason.replace("Failed to handle graph break gracefully. Skipping the function and falling back to "
                            "eager. Graph break encountered: ", "")
    skipped = "Skipping the function" in message or "frame skipped" in message or "graph break in loop" in message
    frame = ""
    match = re.search(r"(?:frame skipped:|Skipping frame) (\S+) \((.+?) line (\d+)\)", message)
    if match:
        frame = f"'{match.group(1)}' ({match.group(2)}:{match.group(3)})"
    hints = [l.split("Hint:", 1)[1].strip() for l in lines if l.strip().startswith("Hint:")]
    hints = [h for h in hints if not h.startswith(("Please report", "This graph break may have been caused"))]
    hint = hints[0][:300] if hints else ""
    if "graph break in loop" in message:
        hint = "move it out of the loop (a graph break inside a loop makes Dynamo skip the whole frame)" + \
            (f"; or: {hint}" if hint else "")
    return GraphBreak(location, reason[:300], skipped, frame, hint)


_graph_break_logger = logging.getLogger("torch._dynamo.symbolic_convert.__graph_breaks")
_graph_break_handler = _GraphBreakHandler()


# ---- Dynamo giving up on a function: a recompile limit hit, a frame skipped ----

#: (kind, function) pairs already warned about by note_dynamo_stopped; function is "'f' (file.py:12)", as Dynamo
#: names it.
_warned_stops = set()


def note_dynamo_stopped(state, kind, function, cause, fix):
    """Records that Dynamo stopped compiling ``function`` during a call of the wrapper of ``state`` -- ``kind``
    is "limit" (a recompile limit: calls that need a new graph run uncompiled), "skip" (a frame it skipped: it
    runs uncompiled on every call), "trace" (its trace failed on a call's inputs, which then ran eagerly) or
    "constraint" (a dimension marked dynamic that the code specializes: that call ran eagerly) --,
    with the ``cause`` (shown by ``print(jitted)`` and ``thunder.compile_stats(jitted).dynamo_stopped``), and warns
    once per kind and function, naming the cause and the ``fix``."""
    if cause not in state.dynamo_stopped:
        state.dynamo_stopped = f"{state.dynamo_stopped}; {cause}" if state.dynamo_stopped else cause
    if f"{os.sep}torch{os.sep}_dynamo{os.sep}" in function:
        # A callable object's or a partial's frame, which Dynamo names after its own wrapper ('inner'), the same
        # for all of them: told apart by the wrapper's name.
        function = f"{function} of {state.name}"
    if (kind, function) in _warned_stops:
        return
    _warned_stops.add((kind, function))
    consequence = {"limit": "Calls that need a new graph now run uncompiled, eagerly",
                   "trace": "Such calls run uncompiled, eagerly",
                   "constraint": "That call ran uncompiled, eagerly, and Dynamo may run the frame uncompiled from "
                                 "then on"}.get(kind, "That frame runs uncompiled, eagerly, on every call")
    if state.of_torch_compile:
        logger.warning("thunder: Dynamo stopped compiling in %s: %s. %s. To fix: %s.", state.name, cause, consequence,
                       fix.rstrip(". "))
        return
    logger.warning("thunder: Dynamo stopped compiling in thunder.jit(%s): %s. %s. To fix: %s. print(jitted) and "
                   "thunder.compile_stats count the calls that ran uncompiled.", state.name, cause, consequence,
                   fix.rstrip(". "))



def note_recompile_limit(state, limit, value, function, last_reason=""):
    """note_dynamo_stopped for ``torch._dynamo.config.<limit>`` (``value``) reached by ``function``."""
    why = f"; last recompile: {last_reason}" if last_reason else ""
    own = "torch.compile(..., dynamic=True) compiles one graph for all sizes" if state.of_torch_compile else \
        "each thunder.jit wrapper has its own limit"
    note_dynamo_stopped(state, "limit", function, f"torch._dynamo.config.{limit} ({value}) was reached by "
                        f"{function}{why}", f"each new input shape, dtype or device costs a graph ({own}): keep them "
                        f"to a few, or raise torch._dynamo.config.{limit}")


def note_skipped_frame(state, graph_break):
    """note_dynamo_stopped for a frame Dynamo skipped (a GraphBreak with ``skipped_frame``)."""
    function = graph_break.frame or graph_break.location
    fix = graph_break.hint or "change the code Dynamo cannot trace there, or move it out of the jitted function"
    note_dynamo_stopped(state, "skip", function, f"Dynamo skipped the frame of {function} at {graph_break.location}: "
                        f"{graph_break.reason}", fix[0].lower() + fix[1:])


def _frame_graph_calls(state, frame):
    """How many times the graphs state captured from Dynamo's frame ``frame`` ran, all together."""
    return sum(graph.calls for graph in state.graphs if getattr(graph, "frame", None) == frame)


def count_limited_frames(state, ran_graph):
    """After a call of the wrapper of ``state`` in which some frame of the function had reached a recompile limit:
    counts the call in ``state.partly_uncompiled_calls`` if it ran a graph (``ran_graph``; a call that ran none is
    an eager call) but none of such a frame's -- Dynamo ran that frame uncompiled (or the call did not reach it:
    Dynamo, running the frame from C, tells no one which)."""
    missed = False
    for frame, counted in state.limited_frames.items():
        now = _frame_graph_calls(state, frame)
        missed = missed or now == counted
        state.limited_frames[frame] = now
    if missed and ran_graph:
        state.partly_uncompiled_calls += 1


class _RecompileLimitHandler(logging.Handler):
    """Reads Dynamo's warning that a recompile limit was hit, for the jitted function (or torch.compile result)
    whose call is in progress."""

    def emit(self, record):
        if not str(record.msg).startswith("torch._dynamo hit config."):
            return
        state = _state_in_progress()
        if state is None:
            return
        try:
            limit, value, _, reason = record.args[:4]
        except (TypeError, ValueError):
            return
        reason = str(reason).splitlines()[0] if str(reason).strip() else ""
        frame = _compiling_frame()
        if frame is not None and frame not in state.limited_frames:
            state.limited_frames[frame] = _frame_graph_calls(state, frame)
        note_recompile_limit(state, limit, value, str(record.args[2]),
                             reason if len(reason) <= 160 else reason[:160] + "...")


_recompile_logger = logging.getLogger("torch._dynamo.convert_frame")
_recompile_handler = _RecompileLimitHandler(level=logging.WARNING)


def listen_for_graph_breaks():
    """Reads Dynamo's graph breaks and recompile-limit warnings (their loggers' handlers, the graph-break log's
    level). Called at registration and again before each call that may compile: ``torch._logging.set_logs`` (or
    ``TORCH_LOGS``) resets the graph-break log's level, which silenced it. It sets a level only where one changed
    (setting a logger's level clears every logger's cache, far too slow per call)."""
    if _recompile_handler not in _recompile_logger.handlers:
        _recompile_logger.addHandler(_recompile_handler)
    if _graph_break_handler not in _graph_break_logger.handlers:
        _graph_break_logger.addHandler(_graph_break_handler)
    if _graph_break_logger.level != logging.DEBUG:
        _graph_break_logger.setLevel(logging.DEBUG)
        # Ours to read, not to print -- unless the user asked torch's logging for graph breaks.
        _graph_break_logger.propagate = _graph_breaks_logged_by_torch()


def _graph_breaks_logged_by_torch():
    try:
        from torch._logging._internal import log_state
        return log_state.is_artifact_enabled("graph_breaks")
    except (ImportError, AttributeError):
        return False


def register():
    """Registers "thunder" as a torch.compile backend name, and starts reading Dynamo's graph breaks."""
    listen_for_graph_breaks()
    branches.listen_for_frame_failures()
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "thunder" not in _BACKENDS:
        register_backend(name="thunder")(thunder_backend)
