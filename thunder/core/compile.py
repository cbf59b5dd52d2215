"""Compiling one captured graph: import, passes, execution callable."""
import contextlib
import dataclasses
import inspect
import time
import weakref
from dataclasses import dataclass, field

import torch

from thunder import _core
from thunder.core import debug
from thunder.core.dtypes import to_torch
from thunder.core.log import log_trace, logger, trace_enabled
from thunder.core.options import DEFAULT_PASSES
from thunder.core.registry import TraceNamespace, digest
from thunder.executors.torchex import autograd_vjp, ltorch, prims

# Traces from these passes on are execution traces: they print without the
# decompositions of the ops the executors run whole (a fusion still lists its prims).
EXECUTION_PASSES = ("claim", "fusion", "release")


@dataclass
class TraceView:
    """A trace with the names it needs to run (opaque callables, constants, kernels).

    ``str(view)`` is the trace as a Python program that imports every name it uses (kernels and the
    objects a graph holds from :mod:`thunder.core.registry`), so ``exec`` of it in a fresh namespace
    defines a function that runs the same program; ``view.python_callable()`` compiles that program
    and returns its function (its source registered with :mod:`linecache`, so tracebacks and ``pdb``
    show the trace's lines).
    """

    trace: "_core.Trace"
    namespace: dict = field(repr=False)
    name: str = ""
    subsymbols: bool = True
    saves: bool = False   # a training forward: returns (outputs, saved values for the backward)
    released: str = ""    # why the graph it belongs to was released (CompiledGraph.release): it no longer runs

    def __str__(self):
        notes = getattr(self.namespace, "input_notes", None) or {}
        text = self.trace.python(subsymbols=self.subsymbols, input_notes=notes)
        imports = self.namespace.imports_for(text) if isinstance(self.namespace, TraceNamespace) else []
        text = self.trace.python(subsymbols=self.subsymbols, imports=imports, input_notes=notes) if imports else text
        if self.released:
            text = (f"# Not runnable: its graph was released ({self.released}); the kernels and objects it calls are "
                    "no longer loaded\n" + text)
        return text

    def __repr__(self):
        return f"<TraceView {self.name}: {len(self.trace.symbols)} symbols>"

    @property
    def provenance(self):
        return self.trace.provenance

    @property
    def symbols(self):
        return self.trace.symbols

    def python_callable(self):
        """The trace's printed program, executed; raises SyntaxError if the printer produced invalid Python, and
        RuntimeError for a trace of a released graph (its kernels are gone)."""
        if self.released:
            raise RuntimeError(f"trace {self.name!r} cannot run: its graph was released ({self.released}); the "
                               "kernels and objects it calls are no longer loaded")
        source = str(self)
        ns = dict(self.namespace)
        filename = debug.register_source(source, f"trace {self.name}")
        exec(compile(source, filename, "exec"), ns)
        fn = ns["computation"]
        debug.release_source_with(fn, filename)
        return fn


@dataclass
class CompiledGraph:
    """One graph Dynamo captured, compiled by thunder."""

    index: int
    traces: list                  # TraceView per stage: the imported trace, then one per pass
    fn: object                    # the execution trace's Python function
    compile_seconds: float
    pass_seconds: dict            # stage -> seconds: each pass, the autodiff and rematerialization ("backward <pass>")
    fallbacks: list               # (node, target, reason) of ops imported as opaque
    calls: int = 0
    aliased_calls: int = 0        # calls whose inputs aliased a tensor the graph writes: run as captured instead
    captured_calls: int = 0       # calls run as captured under forward AD or a TorchDispatchMode (dynamo.py)
    kernels: dict = field(default_factory=dict)  # fusion executor name -> [(KernelModule, C++ source)], one per unit
    # Training: the backward's traces (the split's backward, then one per pass) when thunder differentiates this
    # graph; `autodiff` says who runs its backward: "thunder", "torch (<reason>)", or None (nothing requires grad).
    backward_traces: list = field(default_factory=list)
    autodiff: str = None
    grad_outputs: list = field(default_factory=list)  # output positions whose gradients the backward takes
    #: How thunder's autodiff differentiates each top-level op whose result requires grad, in trace order:
    #: (op, rule, generic) as ``_core.split_forward_backward`` returns them (see :func:`vjp_rules`).
    vjp: list = field(default_factory=list)
    #: Outputs the trace returns as their base, made again after each call (fx_import.OutputViews)
    output_views: list = field(default_factory=list)
    #: (symbolic graph number, shapes, retraced) when this specializes a graph Dynamo captured with symbolic sizes
    #: to one call's shapes: its one symbolic trace with the sizes bound (retraced None), or, where that trace
    #: could not be made (retraced: why), the graph traced again for the shapes (thunder.frontend.specialize);
    #: None for a graph captured with static shapes.
    shapes: tuple = None
    #: stage -> seconds of what follows the passes: "<executor> codegen" (rendering its kernels' source),
    #: "<executor> compile" (the compiler, or the kernel cache), "python" (the execution trace made a Python
    #: function); a backward's are prefixed "backward ".
    lowering_seconds: dict = field(default_factory=dict)
    #: stage -> seconds of what came before the passes: "import" (the FX graph made a trace) or, for a
    #: specialization of a graph with symbolic sizes, "bind sizes".
    import_seconds: dict = field(default_factory=dict)
    #: The traces at the end of ``traces`` (and of ``backward_traces``) that are this graph's own: a specialization
    #: of a SymbolicPlan shares the others with every specialization of its plan.
    own_traces: int = 0
    own_backward_traces: int = 0
    #: The backward specialized to the output gradients a call gave (``_core.specialize_backward``): the flags of
    #: the gradients given (one per ``grad_outputs``, a tuple of bools) -> its TraceViews, made the first time a
    #: backward is called with some gradients None (an output nothing differentiates).
    specialized_backward_traces: dict = field(default_factory=dict)
    #: Why the graph no longer runs ("" while it does): see :meth:`release`.
    released: str = ""

    def release(self, reason):
        """Drops what running this graph takes -- its Python function, launchers and kernels, and the traces that
        are its own (a specialization's traces with its sizes bound) -- keeping the record of it: calls, seconds,
        shapes, and the other traces, without the namespace that held the launchers (a graph traced again for its
        shapes has no other). ``reason`` says why, for ``print(jitted)``."""
        self.fn, self.kernels, self.released = None, {}, reason
        self.specialized_backward_traces = {}
        forward = self.traces[:len(self.traces) - self.own_traces]
        backward = self.backward_traces[:len(self.backward_traces) - self.own_backward_traces]
        self.traces = [dataclasses.replace(v, namespace={}, released=reason) for v in forward]
        self.backward_traces = [dataclasses.replace(v, namespace={}, released=reason) for v in backward]
        self.own_traces = self.own_backward_traces = 0

    def opaque_ops(self):
        """How many ops of the imported trace run as torch calls (opaque): those thunder has no native op for and
        those whose native op declined the arguments (``fallbacks``) -- the ops ``thunder.examine`` lists as opaque."""
        return sum(1 for b in self.traces[0].trace.symbols if b.is_opaque and b.name != "del")

    @property
    def stage_seconds(self):
        """Every stage's seconds, in the order they ran: the import, the passes, then the lowering."""
        return {**self.import_seconds, **self.pass_seconds, **self.lowering_seconds}

    @property
    def execution_trace(self):
        return self.traces[-1]

    def executors(self):
        """Executor names that run at least one symbol of this graph (its forward), in order of first use."""
        return _executors_of(self.execution_trace)

    def backward_executors(self):
        """Executor names that run at least one symbol of this graph's backward (none unless thunder compiled it)."""
        return _executors_of(self.backward_traces[-1]) if self.backward_traces else []


def vjp_rules(vjp) -> dict:
    """How thunder's autodiff differentiated each op of a graph, from ``CompiledGraph.vjp``: op -> rule.

    ``op`` is the op as the trace prints its callee (``"ltorch.relu"``, ``"prims.add"``, an opaque op's
    ``"torch.nn.functional.foo"``); ``rule`` is ``"own"`` (its VJP rule, ``_core.vjp_ops()``), ``"decomposition"``
    (the rules of the ops it decomposes into) or ``"generic"`` (``torch.autograd`` on that op alone:
    ``thunder.executors.torchex.autograd_vjp``). An op inside a decomposition that the generic rule differentiates
    is listed too, as ``"generic"``. An op differentiated in two ways in one graph (attention with and without
    dropout) maps to both, comma-separated in sorted order.
    """
    rules = {}
    for op, rule, generic in vjp:
        for name, r in [(op, rule)] + [(g, "generic") for g in generic]:
            rules.setdefault(name, set()).add(r)
    return {name: ", ".join(sorted(r)) for name, r in rules.items()}


def _executors_of(view):
    names = []
    for b in view.symbols:
        if b.executor and b.executor not in names:
            names.append(b.executor)
    return names


def _constant_evaluator(namespace, constants):
    def evaluate(expression, bound):
        scope = dict(namespace)
        scope.update({name: constants[i] for name, i in bound.items()})
        try:
            with torch.no_grad():
                value = eval(expression, scope)
        except Exception as e:  # a fold that fails is simply not done
            logger.debug("thunder: constant folding skipped %s: %s", expression, e)
            return None
        if not isinstance(value, torch.Tensor):
            return None
        constants.append(value)
        return len(constants) - 1
    return evaluate


def _run_passes(trace, passes, evaluator, tables, namespace, views, pass_seconds, index, prefix="", saves=False):
    """Runs passes on trace, appending a TraceView per pass to views; returns the last trace."""
    if not passes:
        return trace
    for r in _core.run_pipeline(trace, list(passes), evaluator, tables):
        views.append(TraceView(r.trace, namespace, prefix + r.name, subsymbols=r.name not in EXECUTION_PASSES,
                               saves=saves))
        pass_seconds[prefix + r.name] = r.seconds
        logger.debug("thunder: graph %d: %s%s", index, prefix, r.trace.provenance)
        if trace_enabled():
            log_trace("thunder: graph %d after %s%s:\n%s", index, prefix, r.name, views[-1])
    return views[-1].trace


def _lower(trace, executors, namespace, kernels, seconds, round_every_op=True, prefix="", compiled=None,
           guarded_inputs=False):
    """Generates, compiles and loads the fusion executors' kernels of an execution trace into namespace (which
    then exports them: printed traces import them from the kernel registry), recording each executor's
    "codegen" and "compile" seconds in ``seconds`` (keys prefixed with ``prefix``). ``round_every_op=False`` for
    a backward trace: its kernels keep half-precision values in float32 between ops (see Executor).
    ``compiled``: the kernels the jitted function's other graphs compiled, per executor, for an executor that
    reuses them (its ``lower`` takes ``compiled``: its own dict, ``compiled[ex.name]``). ``guarded_inputs``: the trace's inputs are a Dynamo graph's, whose
    layout and negative bit the guards fix (for an executor that takes it)."""
    for ex in executors:
        if ex.fusion and ex.lower is not None:
            stages, start = {}, time.perf_counter()
            parameters = inspect.signature(ex.lower).parameters
            optional = {"seconds": stages, "compiled": None if compiled is None else compiled.setdefault(ex.name, {}),
                        "guarded_inputs": guarded_inputs}
            launchers, units = ex.lower(trace, round_every_op=round_every_op,
                                        **{k: v for k, v in optional.items() if k in parameters})
            if "seconds" not in parameters:  # an executor that does not time its stages: codegen and compile as one
                stages["lowering"] = time.perf_counter() - start
            for stage, s in stages.items():
                seconds[f"{prefix}{ex.name} {stage}"] = s
            namespace.update(launchers)
            namespace.export(launchers)
            if units:
                kernels.setdefault(ex.name, []).extend(units)


def _requires_grad(trace):
    return any(trace.meta(p)[0] != "number" and trace.meta(p)[3] for p in trace.inputs)


#: Why a graph keeps torch's autograd although thunder's could differentiate it (None: nothing holds it back).
def _autodiff_held_back(trace, imported=None, executors=()):
    # Half precision (docs/autodiff.md, "Half precision"): with a fusion executor for the inputs' device, thunder's
    # backward is the faster one on the CPU (a bfloat16 GPT-2 training step 1.46x eager against 0.99x with torch's
    # autograd; its kernels keep float32 between ops), and its CUDA kernels are fused alike (their values checked
    # against eager by the emulator, tests/test_cuda_emulation.py; speed not measured on a device yet). Without
    # one each prim of the backward is a torch op of its own, slower than torch's derivative kernels (0.80x
    # against 0.92x on the CPU).
    half = {str(m[2]).split(":")[0] for m in (trace.meta(p) for p in trace.inputs)
            if m[0] != "number" and to_torch(m[0]) in (torch.float16, torch.bfloat16)}
    unfused = sorted(d for d in half if not any(ex.fusion and d in ex.devices for ex in executors))
    if unfused:
        return (f"half-precision graphs keep torch autograd without a fusion executor for their device "
                f"({', '.join(unfused)}; slower there)")
    # A graph inside an autocast region entered before it whose ops could not be written as casts: their dtypes
    # come from autocast's state, which an op the backward recomputes (the generic rule) would not see.
    if getattr(imported, "under_autocast", False):
        return "the graph runs inside a torch.autocast region entered before it, and not every op is written as casts"
    return None


def _pass_context(imported, executors):
    """The namespace a graph's traces run in (exported), the constant folder's evaluator and the executor tables
    the passes take."""
    constants = []
    namespace = TraceNamespace({"torch": torch, "prims": prims, "ltorch": ltorch, "_constants": constants,
                                "autograd_vjp": autograd_vjp}, graph_digest=digest(imported.trace.python()))
    for ex in executors:
        namespace.update(ex.namespace)
    namespace.update(imported.namespace)
    namespace.input_notes = getattr(imported, "input_notes", {})
    namespace.export()
    evaluator = _constant_evaluator(namespace, constants)
    tables = [(ex.name, ex.callees, ex.fusion, list(ex.devices), list(ex.dtypes), list(ex.closed_by))
              for ex in executors]
    return namespace, evaluator, tables


def compile_trace(imported, executors, passes=DEFAULT_PASSES, index=0, debug_mode=None, lower=True, symbolic=None,
                  import_seconds=None, compiled_kernels=None, guarded_inputs=False):
    """Runs the passes on an imported trace and builds the execution callable.

    When grad mode is on and an output requires grad, the graph is compiled as a training program: the passes up
    to claiming run on the joint trace, thunder's autodiff splits it into a forward and a backward trace
    (``_core.split_forward_backward``), the remaining passes run on each, and the callable runs them as one
    ``torch.autograd.Function`` (see docs/autodiff.md). A graph the autodiff cannot differentiate keeps today's
    course -- its ops that require grad run with torch, whose autograd differentiates them -- and
    ``CompiledGraph.autodiff`` says why.

    Args:
        imported: a :class:`thunder.frontend.fx_import.ImportedGraph`.
        executors: :class:`thunder.executors.Executor` list, in priority order.
        passes: pass names (see ``thunder._core.pass_names()``).
        debug_mode: ``None``, or ``"pdb"``: the execution traces (forward and backward) run under pdb
            (:func:`thunder.core.debug.debug_runner`).
        lower: False plans only (``thunder.examine``): the passes run, fusions are formed, but no kernel is
            generated or compiled and nothing is made callable (the result's ``fn`` is None).
        symbolic: the import with symbolic sizes whose sizes ``imported`` binds (shown as the first trace), or
            None.
        import_seconds: the stages that made ``imported`` ({"import": seconds} or {"bind sizes": seconds}), counted
            in the graph's ``compile_seconds`` and first in its ``stage_seconds``.
        compiled_kernels: the kernels the jitted function's other graphs compiled, reused where this graph's
            compute alike (per fusion executor: ``thunder.executors.cpuex.lower``, ``cudaex.lower``), and to which this
            graph's are added; None: no reuse.
        guarded_inputs: the graph's inputs pass Dynamo's guards (each tensor's strides and negative bit are the
            ones traced), so the forward's kernels read them without checks; False (a trace run with any inputs):
            its launchers make them contiguous and resolved where needed.
    Returns:
        CompiledGraph.
    """
    start = time.perf_counter()
    namespace, evaluator, tables = _pass_context(imported, executors)
    views = [TraceView(imported.trace, namespace, "Imported from the FX graph")]
    if symbolic is not None:
        views = [TraceView(symbolic.trace, namespace, "Imported from the FX graph, sizes symbolic"),
                 TraceView(imported.trace, namespace, "Sizes bound to the call's")]
    passed = _run_all_passes(imported, imported.trace, executors, passes, index, namespace, evaluator, tables, views)
    graph = _graph_of(passed, imported, executors, index, debug_mode, lower, compiled_kernels=compiled_kernels,
                      guarded_inputs=guarded_inputs)
    graph.import_seconds = dict(import_seconds or {})
    graph.compile_seconds = time.perf_counter() - start + sum(graph.import_seconds.values())
    return graph


@dataclass
class _Passed:
    """A graph after the passes: its traces and, where thunder differentiates it, its backward's."""

    views: list                 # TraceView per stage; the last is the execution trace (the forward's, in training)
    pass_seconds: dict
    autodiff: str = None        # as CompiledGraph.autodiff
    backward_views: list = None  # the backward's TraceViews when thunder differentiates the graph
    grad_outputs: list = field(default_factory=list)
    vjp: list = field(default_factory=list)
    reaches: list = None        # per output gradient, the arguments it reaches (gradient_reaches)
    backward_passes: tuple = None  # (pass names, evaluator, tables) the backward's passes run with
    joint: object = None        # the trace the autodiff split, and its activation inputs (split_forward_backward)
    activation_inputs: list = None
    # given output gradients -> the backward made for them after its passes (its TraceViews), or None where the
    # autodiff cannot make it: made once, shared by every shape signature of a SymbolicPlan (_specialized_backward)
    specialized_backward: dict = field(default_factory=dict)


def _run_all_passes(imported, trace, executors, passes, index, namespace, evaluator, tables, views):
    """The passes on ``trace`` (``imported``'s, or it with size hints), appending a TraceView per pass to
    ``views``. When grad mode is on and an output requires grad, the passes up to claiming run on the joint trace,
    thunder's autodiff splits it into a forward and a backward (unless it cannot, or holds back: then torch's
    autograd differentiates the graph's ops), and the remaining passes run on each. Returns a _Passed."""
    pass_seconds = {}
    passes = list(passes)
    split_at = passes.index("claim") if "claim" in passes and torch.is_grad_enabled() and \
        _requires_grad(trace) else len(passes)
    trace = _run_passes(trace, passes[:split_at], evaluator, tables, namespace, views, pass_seconds, index)
    passed = _Passed(views, pass_seconds)
    held_back = _autodiff_held_back(trace, imported, executors) if split_at < len(passes) else None
    if held_back:
        passed.autodiff = f"torch ({held_back})"
        logger.info("thunder: graph %d: its backward runs with torch autograd: %s", index, held_back)
    elif split_at < len(passes):
        activation_inputs = getattr(imported, "activation_inputs", [])
        backward_passes = ["cse", "dce"] + passes[split_at:]
        try:
            forward, backward, grad_outputs, saved, seconds, vjp = _core.split_forward_backward(
                trace, activation_inputs)
        except _core.NotDifferentiable as e:
            passed.autodiff = f"torch ({e})"
            logger.info("thunder: graph %d: its backward runs with torch autograd: %s", index, e)
        else:
            if grad_outputs:
                pass_seconds.update(seconds)  # autodiff, rematerialization
                views.append(TraceView(forward, namespace, "autodiff (forward)", saves=True))
                backward_namespace = namespace.copy_for(input_notes=False)
                backward_namespace.export()
                backward_views = [TraceView(backward, backward_namespace, "autodiff (backward)")]
                _run_passes(forward, passes[split_at:], evaluator, tables, namespace, views, pass_seconds, index,
                            saves=True)
                _run_passes(backward, backward_passes, evaluator, tables, backward_namespace, backward_views,
                            pass_seconds, index, "backward ")
                passed.autodiff, passed.backward_views = "thunder", backward_views
                passed.grad_outputs, passed.vjp = list(grad_outputs), list(vjp)
                passed.reaches = gradient_reaches(trace, grad_outputs)
                passed.backward_passes = (backward_passes, evaluator, tables)
                passed.joint, passed.activation_inputs = trace, activation_inputs
                return passed
    _run_passes(trace, passes[split_at:], evaluator, tables, namespace, views, pass_seconds, index)
    return passed


#: The name of the trace a specialization of a SymbolicPlan generates its kernels from.
BOUND_SIZES = "Sizes bound to the call's (its kernels are generated from it)"


def _bound(view, sizes, namespace=None):
    """``view`` with its trace's size symbols bound to ``sizes`` ({proxy id: int}), in ``namespace`` (default:
    the view's); ``view`` itself where ``sizes`` is None (its sizes are integers). A size that arithmetic reads
    as a number (``mean``'s divisor) stays the trace's input, so the kernel takes it as an argument and serves
    every length (``_core.bind_sizes(..., for_kernels=True)``)."""
    if sizes is None:
        return view
    return TraceView(_core.bind_sizes(view.trace, sizes, for_kernels=True),
                     view.namespace if namespace is None else namespace, BOUND_SIZES, subsymbols=view.subsymbols,
                     saves=view.saves)


def _graph_of(passed, imported, executors, index, debug_mode, lower, sizes=None, pass_seconds=None, program=None,
              compiled_kernels=None, guarded_inputs=False):
    """The CompiledGraph of a graph after the passes: its fusions' kernels generated and compiled (``lower``;
    False: planned only, nothing callable) and its execution traces made Python functions -- in training, one
    ``torch.autograd.Function`` running the forward and the backward.

    ``sizes`` ({size symbol's proxy id: int}): the traces have symbolic sizes (a SymbolicPlan's) and are lowered
    with these bound, each in a namespace of its own (its kernels' launchers are this signature's); its
    ``import_seconds`` are the binding's. ``program``: the execution trace's program compiled from its symbolic
    trace (a code object defining ``computation``), run with this signature's kernels instead of the bound trace's
    (not in training). ``pass_seconds``: the passes' seconds to report (default: ``passed``'s).
    ``compiled_kernels``, ``guarded_inputs``: as compile_trace's."""
    kernels, lowering_seconds = {}, {}
    views, backward_views = passed.views, passed.backward_views
    bind_start = time.perf_counter()
    if sizes is not None:
        final = views[-1]
        views = views + [_bound(final, sizes, final.namespace.copy_for())]
        if program is not None:  # the program that runs: the symbolic trace, with this signature's kernels
            views.append(TraceView(final.trace, views[-1].namespace, final.name, subsymbols=final.subsymbols))
        if backward_views:
            backward_views = backward_views + [_bound(backward_views[-1], sizes,
                                                      backward_views[-1].namespace.copy_for())]
    bind_seconds = time.perf_counter() - bind_start
    if lower and backward_views:
        _lower(backward_views[-1].trace, executors, backward_views[-1].namespace, kernels, lowering_seconds,
               round_every_op=False, prefix="backward ", compiled=compiled_kernels)
    if lower:
        _lower(views[-1 if program is None else -2].trace, executors, views[-1].namespace, kernels,
               lowering_seconds, compiled=compiled_kernels, guarded_inputs=guarded_inputs)
    if lower and sizes is not None:  # the shared symbolic traces from fusion on call this signature's kernels
        views = _in_namespace(views, len(passed.views), views[-1].namespace)
        if backward_views:
            backward_views = _in_namespace(backward_views, len(passed.backward_views), backward_views[-1].namespace)
    python_start = time.perf_counter()
    runner = _without_autocast if getattr(imported, "autocast_written_out", False) else (lambda f: f)
    if program is not None:
        scope = dict(views[-1].namespace)
        exec(program, scope)
        fn = runner(debug.debug_runner(scope["computation"], debug_mode))
    else:
        fn = runner(debug.debug_runner(views[-1].python_callable(), debug_mode)) if lower else None
    graph = CompiledGraph(index, views, fn, 0.0, passed.pass_seconds if pass_seconds is None else pass_seconds,
                          imported.fallbacks, output_views=getattr(imported, "output_views", []),
                          lowering_seconds=lowering_seconds)
    graph.kernels = kernels
    graph.autodiff = passed.autodiff
    graph.own_traces = len(views) - len(passed.views)
    if backward_views is not None:
        graph.vjp = [(op, rule, tuple(generic)) for op, rule, generic in passed.vjp]
        graph.backward_traces = backward_views
        graph.own_backward_traces = len(backward_views) - len(passed.backward_views)
        graph.grad_outputs = list(passed.grad_outputs)
    if backward_views is not None and lower:
        # The split's traces (symbolic in a SymbolicPlan): bound to these sizes only where a call needs them run
        # with torch ops (create_graph=True) or needs their sizes (zeros for missing gradients).
        split = next(v for v in views if v.name == "autodiff (forward)")
        unsplit_backward = backward_views[0]
        writes = any(b.is_copy_to for b in split.symbols)
        backward_fn = _taking_saved_list(backward_views[-1], runner(debug.debug_runner(
            backward_views[-1].python_callable(), debug_mode)))
        graph_ref = weakref.ref(graph)  # the program, which the graph holds, holds `specialize`
        differentiable = None if writes else (
            _made_on_first_call(lambda: runner(_bound(split, sizes).python_callable())),
            _taking_saved_list(unsplit_backward, _made_on_first_call(
                lambda: runner(_bound(unsplit_backward, sizes).python_callable()))))
        final_backward = backward_views[-1].trace

        def specialize(given, namespace=unsplit_backward.namespace):
            made = _specialized_backward(graph_ref(), passed, split.trace, sizes, namespace, given,
                                         executors, runner, debug_mode, compiled_kernels)
            return made or (_with_zeros(final_backward, backward_fn), differentiable and
                            _with_zeros(_bound(unsplit_backward, sizes).trace, differentiable[1]), None)
        zero_fill = _zero_by_rule_arguments(passed.joint, passed.reaches)
        # (A forward that writes into its inputs stays one node: grouped, it would run with some detached.)
        groups = None if writes or passed.reaches is None else \
            gradient_groups(passed.joint, passed.grad_outputs, passed.reaches)
        graph.fn = training_callable(fn, backward_fn, passed.grad_outputs, differentiable,
                                     random=any(b.draws_random_numbers for b in split.symbols),
                                     reaches=passed.reaches, specialize=specialize, zero_fill=zero_fill,
                                     groups=groups, written_saved=written_saved_inputs(views[-1].trace),
                                     way_reaches=getattr(imported, "way_reaches", None))
    if lower and getattr(imported, "backward_errors", None):
        graph.fn = _raising_in_backward(graph.fn, imported.backward_errors)
    if lower:
        lowering_seconds["python"] = time.perf_counter() - python_start
    if sizes is not None:
        graph.import_seconds = {"bind sizes": bind_seconds}
    return graph


def _in_namespace(views, shared, namespace):
    """``views`` with the first ``shared`` (a SymbolicPlan's traces, which every signature shares) printed and run
    in ``namespace``, a signature's: its kernels' launchers are the names their fusions call."""
    return [dataclasses.replace(v, namespace=namespace) for v in views[:shared]] + views[shared:]


def _specialized_backward(graph, passed, forward, sizes, namespace, given, executors, runner, debug_mode,
                          compiled_kernels):
    """The backward of a training graph for a call given only the output gradients ``given`` flags (the others
    None): ``_core.specialize_backward`` of the joint trace the autodiff split, reading what ``forward`` (the
    split's forward) saves, then the backward's passes -- made once per ``given`` and kept in ``passed`` (a
    SymbolicPlan's traces serve every shape signature) -- then, with ``sizes`` bound where the traces have symbolic
    ones, its lowering (kernels in a copy of ``namespace``, the split backward's). Returns (compiled backward,
    uncompiled one for create_graph=True, made on its first call), each ``fn(saved, *grads)``, the missing
    gradients passed as None (not read). Recorded in ``graph.specialized_backward_traces``; its seconds are added
    to the graph's ``compile_seconds`` (``graph`` None: a graph released while a backward of it was pending;
    nothing is recorded).
    None where the autodiff cannot make it (it would read a value the forward neither saves nor recomputes): the
    caller runs the split's backward with zeros for the missing gradients (_with_zeros), and the log says so.
    Also returns the positions of the saved values the compiled backward reads (_saved_reads)."""
    start = time.perf_counter()
    index = -1 if graph is None else graph.index
    if given not in passed.specialized_backward:
        try:
            trace = _core.specialize_backward(passed.joint, forward, list(given), passed.activation_inputs)
        except _core.NotDifferentiable as e:
            logger.info("thunder: graph %d: the backward for %d of %d output gradients runs with zeros for the "
                        "others: %s", index, sum(given), len(given), e)
            passed.specialized_backward[given] = None
        else:
            views = [TraceView(trace, namespace.copy_for(), "autodiff (backward, for the given output gradients)")]
            names, evaluator, tables = passed.backward_passes
            _run_passes(trace, names, evaluator, tables, views[0].namespace, views, {}, index, "backward ")
            passed.specialized_backward[given] = views
            logger.info("thunder: graph %d: a backward given %d of %d output gradients: made for those (the "
                        "derivatives only the missing ones reach are not computed)", index, sum(given), len(given))
    views = passed.specialized_backward[given]
    if views is None:
        return None
    unsplit = views[0]
    if sizes is not None:
        views = views + [_bound(views[-1], sizes, views[-1].namespace.copy_for())]
    kernels = {}
    _lower(views[-1].trace, executors, views[-1].namespace, kernels, {}, round_every_op=False, prefix="backward ",
           compiled=compiled_kernels)
    if sizes is not None:
        views = _in_namespace(views, len(views) - 1, views[-1].namespace)
    compiled = _taking_saved_list(views[-1], runner(debug.debug_runner(views[-1].python_callable(), debug_mode)))
    uncompiled = _taking_saved_list(unsplit, _made_on_first_call(lambda: runner(_bound(unsplit, sizes)
                                                                                 .python_callable())))
    if graph is not None:
        for name, units in kernels.items():
            graph.kernels.setdefault(name, []).extend(units)
        graph.specialized_backward_traces[tuple(given)] = views
        graph.compile_seconds += time.perf_counter() - start
    return compiled, uncompiled, _saved_reads(views[-1].trace)


def _saved_reads(trace):
    """The positions, in the saved list a backward trace takes (its first ``boxed_inputs`` inputs), of the saved
    values it reads."""
    read = {p.id for b in trace.symbols for a in (*b.args, *b.kwargs.values()) for p in proxies(a)}
    read.update(p.id for p in proxies(list(trace.output)))
    return frozenset(k for k, p in enumerate(trace.inputs[:trace.boxed_inputs]) if p.id in read)


def _made_on_first_call(make):
    """A function that calls ``make()``'s result, made on its first call: the programs create_graph=True runs (the
    traces with torch ops) are compiled only where a call needs one."""
    made = []

    def run(*args):
        if not made:
            made.append(make())
        return made[0](*args)
    return run


def _with_zeros(trace, fn):
    """A backward ``fn(saved, *grads)`` (of ``trace``) called with zeros for the gradients given as None."""
    metas = [trace.meta(p) for p in trace.inputs[trace.boxed_inputs:]]

    def run(saved, *grads):
        return fn(saved, *(torch.zeros(m[1], dtype=to_torch(m[0]), device=m[2]) if g is None else g
                           for g, m in zip(grads, metas)))
    return run


class SymbolicPlan:
    """A graph with symbolic sizes after the passes, made once for every shape its guards admit: passes, claiming,
    fusion and, in training, thunder's autodiff run on the trace whose sizes are polynomials in the size symbols
    (``s0``, ``12*s0``), with one call's sizes as hints where planning a kernel or weighing a saved value needs
    integers (``thunder._core.with_size_hints``). Each shape signature then only lowers it (:meth:`lower`): the
    final trace with its sizes bound is planned again kernel by kernel -- a fusion formed at the hints that does
    not plan at other sizes raises there, and that signature is compiled on its own -- and the execution trace's
    program, compiled once from its symbolic trace, runs with that signature's kernels (a training graph's forward
    and backward run as bound).

    Args:
        imported: the graph's import with symbolic sizes (``ImportedGraph.size_inputs`` non-empty).
        hints: {size symbol's proxy id: the value of one call}.
        compiled_kernels: as compile_trace's.
    Raises:
        thunder._core.SymbolicShapeError (a pass needs a size the polynomials do not settle), or whatever a pass
        raises.
    """

    def __init__(self, imported, executors, passes, index, hints, compiled_kernels=None):
        start = time.perf_counter()
        self.imported, self.executors, self.compiled_kernels = imported, executors, compiled_kernels
        namespace, evaluator, tables = _pass_context(imported, executors)
        views = [TraceView(imported.trace, namespace, "Imported from the FX graph, sizes symbolic")]
        trace = _core.with_size_hints(imported.trace, hints)
        self.passed = _run_all_passes(imported, trace, executors, passes, index, namespace, evaluator, tables, views)
        self.program = None
        if self.passed.backward_views is None:
            # The execution trace's program, without the imports of its kernels (each signature binds its own).
            final = views[-1]
            source = final.trace.python(subsymbols=final.subsymbols)
            filename = debug.register_source(source, f"trace {final.name}")
            self.program = compile(source, filename, "exec")
            debug.release_source_with(self, filename)
        self.seconds = time.perf_counter() - start
        self.lowered = 0  # signatures lowered so far

    def lower(self, args, index, debug_mode=None):
        """The CompiledGraph of one call's shapes: the final traces with the sizes of ``args`` (the graph's
        arguments) bound, their kernels generated (from the kernel cache where another shape made them), and the
        program run with them. The first signature's graph counts the passes in its ``compile_seconds`` and
        ``pass_seconds``. Raises what code generation raises for a fusion that does not plan at these sizes."""
        start = time.perf_counter()
        sizes = {proxy: int(args[position]) for proxy, position in self.imported.size_inputs}
        first = self.lowered == 0
        graph = _graph_of(self.passed, self.imported, self.executors, index, debug_mode, True, sizes,
                          pass_seconds=dict(self.passed.pass_seconds) if first else {}, program=self.program,
                          compiled_kernels=self.compiled_kernels, guarded_inputs=not has_negative_bit(args))
        self.lowered += 1
        graph.compile_seconds = time.perf_counter() - start + (self.seconds if first else 0.0)
        return graph


def has_negative_bit(args):
    """Whether a tensor among a graph's arguments has the negative bit (``z.conj().imag``, ``torch._neg_view``):
    its memory holds the values negated, which the trace does not record, so the graph's kernels cannot read its
    inputs unchecked (``guarded_inputs``; Dynamo's guards give every call of the graph the same bits)."""
    return any(isinstance(a, torch.Tensor) and a.is_neg() for a in args)


def _without_autocast(fn):
    """fn run with autocast off on every device where it is on: the program of a graph whose autocast regions are
    written as casts (``ImportedGraph.autocast_written_out``), called while the user's region is on."""
    def run(*args):
        with contextlib.ExitStack() as stack:
            for device in ("cpu", "cuda"):
                if torch.is_autocast_enabled(device):
                    stack.enter_context(torch.autocast(device, enabled=False))
            return fn(*args)
    return run


def _taking_saved_list(view, fn):
    """A backward trace's function as the training program calls it, ``fn(saved_list, *grads)``: as printed where
    the trace takes its saved values boxed, in one list (``Trace.boxed_inputs``); else (it saves nothing) fn
    called without the empty list."""
    if view.trace.boxed_inputs:
        return fn

    def without_saved(saved, *grads):
        return fn(*grads)
    return without_saved


class _GroupedCall:
    """One call of a program whose outputs fall in groups (gradient_groups): its arguments as the caller passed
    them (each node takes those its group does not reach detached), and the forward's result, once run."""
    __slots__ = ("args", "result")

    def __init__(self, args):
        self.args, self.result = args, None


class _TrainingProgram(torch.autograd.Function):
    """A compiled forward and backward as one autograd node: forward(*args) -> (outputs, saved values);
    backward([saved values], *grads of the outputs that require grad) -> one gradient per argument (it empties the
    list, freeing each saved value after its last use).

    A backward with create_graph=True (a second derivative) needs a backward autograd can differentiate: it runs
    the program's uncompiled traces with torch ops instead -- the forward again, recording, for saved values that
    depend on the inputs, then the backward -- unless the forward writes into a tensor (the writes would be made
    twice), which raises.
    """

    @staticmethod
    def forward(ctx, program, group, *args):
        # group: None, or (the call's _GroupedCall, the outputs of this node, whether it is the call's first node)
        # where the outputs fall in groups (gradient_groups): the first node runs the forward, and each node returns
        # its group's outputs, the others as detached aliases (not differentiable here).
        passed = args if group is None else group[0].args  # the caller's (outputs that are its arguments)
        if group is None or group[0].result is None:
            # A forward that draws seeds (dropout) draws them again when rerun for create_graph=True: the
            # generator's state before it is kept, so that the rerun draws the same ones (the same masks).
            ctx.rng_state = torch.get_rng_state() if program.random and program.differentiable_backward else None
            versions = program.written_saved and [args[i]._version for i in program.written_saved[0]]
            outputs, saved = program.forward(*args)
            ctx.overwritten = versions and _overwritten_saved(program.written_saved, args, versions, saved)
            outputs = _not_views(outputs, program.grad_outputs, passed, saved)
            if group is not None:
                group[0].result = (outputs, saved, ctx.rng_state)
        else:
            outputs, saved, ctx.rng_state = group[0].result
        if program.returned_args is None:  # the same for every call: the trace returns an input's proxy or not
            program.returned_args = [next((j for j, a in enumerate(passed) if o is a), None)
                                     if isinstance(o, torch.Tensor) else None for o in outputs]
        grad_outputs = set(program.grad_outputs)
        if group is not None:  # another node's outputs (and, but in the first node, those nothing differentiates)
            _, members, first = group
            outputs = [o.detach() if isinstance(o, torch.Tensor) and i not in members and
                       (i in grad_outputs or not first) else o for i, o in enumerate(outputs)]
            grad_outputs &= members
        tensors = [v for v in saved if isinstance(v, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        ctx.program = program
        # The conditions WayReaches reads: the trace returns them last.
        ctx.conditions = None if program.way_reaches is None else outputs[len(outputs) - program.way_reaches.count:]
        ctx.saved_layout = [None if isinstance(v, torch.Tensor) else v for v in saved]
        returned = {id(o) for o in outputs}
        ctx.saved_outputs = [k for k, v in enumerate(saved) if id(v) in returned]
        ctx.args = args if program.differentiable_backward is not None else None
        ctx.zero_fill = [(i, args[i].shape, args[i].dtype, args[i].device) for i in program.zero_fill]
        ctx.mark_non_differentiable(*[o for i, o in enumerate(outputs)
                                      if isinstance(o, torch.Tensor) and i not in grad_outputs])
        # An output nothing differentiates gets None, not zeros, so that arguments only it depends on get None too,
        # as in eager (an optimizer skips a parameter whose .grad is None: AdamW's weight decay among others).
        ctx.set_materialize_grads(False)
        return tuple(outputs)

    @staticmethod
    @torch.compiler.disable
    def backward(ctx, *grads):
        # Not traced by Dynamo: a jitted function that calls loss.backward() runs it with Dynamo's frame hook still
        # installed, which traced this frame (warning that it skipped it) and compiled graphs of the backward trace.
        program = ctx.program
        grads = [grads[i] for i in program.grad_outputs]
        reached = None  # the arguments some given gradient reaches (None: all of them)
        reads = None  # the positions of the saved values the backward reads (None: all of them)
        compiled_backward = program.backward
        differentiable_backward = program.differentiable_backward
        if any(g is None for g in grads):
            if program.reaches is not None:
                reached = set().union(*(program.reaches[k] for k, g in enumerate(grads) if g is not None))
            if program.way_reaches is not None:  # the arms taken: what untaken arms alone reach gets None
                on_way = program.way_reaches.reached(ctx.conditions, [program.grad_outputs[k] for k, g in
                                                                      enumerate(grads) if g is not None])
                reached = on_way if reached is None else reached & on_way
            # The backward for these gradients, in which what only the missing ones reach is not computed: eager's
            # autograd does not run the nodes they would flow through. Zeros in their place made 0 * inf = NaN
            # where a VJP reads an infinite forward value (the log of 0 in an unused output).
            compiled_backward, uncompiled, reads = program.specialized(tuple(g is not None for g in grads))
            if differentiable_backward is not None:
                differentiable_backward = (differentiable_backward[0], uncompiled)
        for k, tensor, version in getattr(ctx, "overwritten", None) or ():
            if reads is None or k in reads:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: [{tensor.type()} {list(tensor.shape)}] is at version {version}; expected the "
                    "version it had before the compiled forward wrote it (thunder: the forward saved it for the "
                    "backward, then wrote into it in place, where eager's autograd raises the same)")
        # Gradients batched by torch.func's vmap (autograd.grad(..., is_grads_batched=True)) reach kernels that
        # read memory as laid out, which a batched tensor has not: the torch-op traces run instead, which vmap
        # batches, as for a second derivative.
        batched = any(g is not None and _is_batched(g) for g in grads)
        if torch.is_grad_enabled() or batched:  # create_graph=True, or batched gradients
            if ctx.args is None:
                what = "batched gradients (is_grads_batched=True)" if batched else \
                    "create_graph=True (a second derivative)"
                raise RuntimeError(f"thunder: {what} through a compiled graph that writes into a tensor is not "
                                   "supported: its forward would run twice")
            forward, backward = differentiable_backward
            # An argument no given gradient reaches is differentiated only for the missing ones (where the split's
            # backward runs with zeros for them, _with_zeros): detached, it stays off the gradients' graph, and a
            # second backward leaves its .grad None, as eager's.
            args = [a.detach() if reached is not None and i not in reached and isinstance(a, torch.Tensor) else a
                    for i, a in enumerate(ctx.args)]
            if ctx.rng_state is None:
                _, saved = forward(*args)
            else:
                with torch.random.fork_rng(devices=[]):
                    torch.set_rng_state(ctx.rng_state)
                    _, saved = forward(*args)
            return (None, None, *_zeros_where_reached(ctx, _reached(backward(list(saved), *grads), reached),
                                                      reached))
        saved = _unpacked(ctx, reads)
        # Unless retain_graph=True, ctx lets go of the saved tensors now rather than after this call, and the
        # backward empties the list it takes them in (Trace.boxed_inputs): each is freed after its last use, as
        # eager's autograd frees a node's saved tensors once that node has run.
        ctx.maybe_clear_saved_tensors()
        try:
            return (None, None, *_zeros_where_reached(ctx, _reached(compiled_backward(saved, *grads), reached),
                                                      reached))
        except Exception as e:
            debug.annotate(e)  # the backward trace's line and the user's line it came from
            raise


class _RaiseInBackward(torch.autograd.Function):
    """The identity (an alias, not a view; ``in_place``: ``x`` itself, its autograd history replaced, for an output
    that is the caller's tensor), whose backward raises ``message``."""

    @staticmethod
    def forward(ctx, x, message, in_place=False):
        ctx.message = message
        if in_place:
            ctx.mark_dirty(x)
            return x
        return x.detach()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(ctx.message)


def _raising_in_backward(fn, errors):
    """A graph's function, each output in ``errors`` (ImportedGraph.backward_errors: position, or ("input",
    position) for an input the graph writes -> message) made to raise its message in a backward through it: the
    trace is functional, so neither thunder's backward nor torch's autograd over it sees the write eager's backward
    raises for."""
    inputs = {k[1]: message for k, message in errors.items() if isinstance(k, tuple)}

    def run(*args):
        result = fn(*args)
        outputs = list(result)
        # An input written in place (`b.relu_(); b.mul_(2)`), which the caller holds: its history is replaced.
        for i, message in inputs.items():
            if i < len(args) and isinstance(args[i], torch.Tensor) and args[i].requires_grad:
                _RaiseInBackward.apply(args[i], message, True)
        for k, message in errors.items():
            if isinstance(k, int) and k < len(outputs) and isinstance(outputs[k], torch.Tensor) and \
                    outputs[k].requires_grad and not any(outputs[k] is args[i] for i in inputs if i < len(args)):
                outputs[k] = _RaiseInBackward.apply(outputs[k], message, any(outputs[k] is a for a in args))
        return type(result)(outputs) if isinstance(result, (tuple, list)) else outputs
    return run


def _not_views(outputs, grad_outputs, args, saved):
    """The forward's outputs, none of those that take a gradient a view of a tensor the forward made: the program
    may return one where eager's is not (a pass's reshape after a write through `v.view(2, 2)`), and autograd
    forbids an in-place write into a view a custom Function made ("Output 0 of _TrainingProgram is a view and is
    being modified inplace"). An output eager makes a view of is returned as its base and made again after the
    call (fx_import.OutputViews). Such an output becomes a tensor of its own over the same memory, or a copy where a
    saved tensor shares that memory (a write into it must reach the saved tensor's version counter)."""
    made = {}
    for i in grad_outputs:
        o = outputs[i]
        if not isinstance(o, torch.Tensor) or o._base is None or any(o._base is a for a in args):
            continue
        if id(o) not in made:
            memory = o.untyped_storage().data_ptr()
            if any(isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() == memory for v in saved):
                made[id(o)] = o.clone()
            else:
                made[id(o)] = torch.empty((0,), dtype=o.dtype, device=o.device).set_(
                    o.untyped_storage(), o.storage_offset(), o.size(), o.stride())
        if not isinstance(outputs, list):
            outputs = list(outputs)
        outputs[i] = made[id(o)]
    return outputs


def _overwritten_saved(written_saved, args, versions, saved):
    """(position, tensor, version) of each saved value the forward read before writing into an argument that
    shares its memory (written_saved_inputs' candidates), where that argument's version changed in the call
    (``versions``: before it; a write in an untaken branch arm does not copy back)."""
    positions, candidates = written_saved
    memory = {args[i].untyped_storage().data_ptr() for i, v in zip(positions, versions) if args[i]._version != v}
    memory.discard(0)  # empty tensors (which no write changes)
    if not memory:
        return []
    return [(k, saved[k], saved[k]._version) for k in candidates
            if isinstance(saved[k], torch.Tensor) and saved[k].untyped_storage().data_ptr() in memory]


def _unpacked(ctx, reads):
    """The saved values of a _TrainingProgram's ``ctx``, as its backward takes them: each tensor checked, as autograd
    checks a node's saved tensors, for writes since the forward ("modified by an inplace operation") and for a
    backward that freed it. A backward for some of the output gradients that reads only some saved values
    (``reads``: their positions) unpacks only those, the others None: in eager, a tensor saved only for what a
    missing gradient flows through belongs to a node the backward does not run, and may have been written since
    (``a.abs().sum().item()`` for a loop count, then ``a`` written under no_grad). A saved value that is also an
    output of the node unpacks only with the node (autograd keeps no link from it to its node): where the backward
    reads one, or on a torch without ``SavedTensor.unpack`` (a private name), all are unpacked together."""
    raw = None if reads is None or any(k in reads for k in ctx.saved_outputs) else \
        getattr(ctx, "_raw_saved_tensors", None)
    if raw is None or not all(hasattr(t, "unpack") for t in raw):
        tensors = iter(ctx.saved_tensors)
        return [next(tensors) if v is None else v for v in ctx.saved_layout]
    tensors, saved = iter(raw), []
    for k, v in enumerate(ctx.saved_layout):
        tensor = next(tensors) if v is None else None
        saved.append(v if tensor is None else tensor.unpack() if k in reads else None)
    return saved


def _is_batched(tensor):
    """Whether a gradient is batched by vmap: functorch's (torch.func.vmap) or autograd's own, older one
    (``is_grads_batched=True``)."""
    return torch._C._functorch.is_batchedtensor(tensor) or torch._C._functorch.is_legacy_batchedtensor(tensor)


def _zeros_where_reached(ctx, arg_grads, reached):
    """The backward's gradients with zeros for the arguments in ``ctx.zero_fill`` (training_callable) that a given
    gradient reaches (``reached``; None: all) and the backward left None."""
    if not ctx.zero_fill:
        return arg_grads
    arg_grads = list(arg_grads)
    for i, shape, dtype, device in ctx.zero_fill:
        if arg_grads[i] is None and (reached is None or i in reached):
            arg_grads[i] = torch.zeros(shape, dtype=dtype, device=device)
    return tuple(arg_grads)


def _reached(arg_grads, reached):
    """The backward's gradients, None for the arguments no given output gradient reaches (``reached``: their
    indices; None: all)."""
    return arg_grads if reached is None else tuple(g if i in reached else None for i, g in enumerate(arg_grads))


def proxies(value):
    """The proxies in a symbol's arguments or output (a proxy, or nested lists/tuples of them and other values)."""
    if isinstance(value, _core.Proxy):
        return [value]
    if isinstance(value, (tuple, list)):
        return [p for v in value for p in proxies(v)]
    return []


def written_inputs(trace):
    """The positions of the inputs a trace writes (the destinations of its copy-backs, ``prims.copy_to``)."""
    written = {p.id for b in trace.symbols if b.is_copy_to for p in proxies(b.args[0])}
    return [i for i, p in enumerate(trace.inputs) if p.id in written]


def written_saved_inputs(trace):
    """For a training forward ``trace`` (returning (outputs, saved values)) that writes into its inputs
    (``prims.copy_to``): (the positions of those inputs, the positions of the saved values that may share memory
    with one -- the input, or what an op other than a fusion made from it -- computed without reading what any
    write wrote), or None where there are none. Such a saved value that shares memory with a written input at run
    time (the input itself, a view of it) holds the values after the write where the backward needs those before
    it: eager's autograd raises for it ("modified by an inplace operation": the write bumps the version of the
    tensor it saved), and so does _TrainingProgram's backward (_overwritten_saved tells, per call). (A write
    through ``x.data``, which eager's autograd does not see, is no copy-back in such a graph: fx_import makes
    ``x.data`` there an opaque torch op, and the write runs in place.)"""
    positions = written_inputs(trace)
    if not positions:
        return None
    sources = {p.id for b in trace.symbols if b.is_copy_to for p in proxies(b.args[1])}
    # What may share a written input's memory: the input, and what ops other than fusions (whose outputs are new
    # memory) make from it; and what the writes wrote, and what is computed from it.
    sharing = {trace.inputs[i].id for i in positions}
    for b in trace.symbols:
        read = {p.id for p in proxies([*b.args, *b.kwargs.values()])}
        if read & sources:
            sources.update(p.id for p in proxies(b.output))
        if read & sharing and b.name != "fusion":
            sharing.update(p.id for p in proxies(b.output))
    candidates = [k for k, p in enumerate(trace.output[1]) if isinstance(p, _core.Proxy) and p.id in sharing and
                  p.id not in sources]
    return (positions, candidates) if candidates else None


def opaque_results(trace):
    """The proxies a trace's opaque ops return: their metadata is Dynamo's fake tensors', which a wrong fake
    implementation makes wrong (see thunder.executors.OpaqueResultMismatch); the core's own ops' comes from their
    shape rules."""
    return frozenset(p for b in trace.symbols if b.is_opaque for p in proxies(b.output))


def _zero_by_rule_arguments(joint_trace, reaches):
    """The positions of the arguments a backward may give None where eager's gives zeros: where the joint trace
    holds an op that joins every argument (``joins_every_argument``: addmm and its kin) with beta=0 (its input
    joined, not read: NaN in it does not propagate, and eager gives it a zero gradient, which AdamW decays where it
    skips None), every argument some output
    reaches (``reaches``: gradient_reaches'); else none. The training program fills those a backward reaches and
    leaves None with zeros (training_callable)."""
    def ignores_an_argument(symbols):
        return any(b.joins_every_argument and len(b.args) > 3 and isinstance(b.args[3], (int, float)) and
                   b.args[3] == 0 or ignores_an_argument(b.subsymbols) for b in symbols)

    if not reaches or not ignores_an_argument(joint_trace.symbols):
        return []
    return sorted(set().union(*reaches))


def gradient_reaches(joint_trace, grad_outputs):
    """Per output gradient (the outputs ``grad_outputs`` indexes), the indices of the arguments it reaches: those
    on the output's autograd graph in eager, i.e. joined to it by values that require grad (a float result of an
    op with an input that requires grad), through the ops' decompositions (``broadcast_tensors(x, w)[0]`` joins x
    only; an opaque op joins all its tensor arguments, keyword arguments too, to all its outputs). An argument no
    given output gradient reaches gets None, and one that is reached gets a gradient even where it is zero by the
    derivative's rule (floor, addmm's input with beta=0: ``joins_every_argument``), as in eager (see
    _TrainingProgram)."""
    def requires_grad(p):
        return _proxy_requires_grad(joint_trace, p)

    joined = {p.id: {i} for i, p in enumerate(joint_trace.inputs) if requires_grad(p)}
    for b in _gradient_leaves(joint_trace.symbols):
        d = set().union(*(joined.get(p.id, ()) for a in (*b.args, *b.kwargs.values()) for p in proxies(a)))
        for p in proxies(b.output):
            if requires_grad(p):
                joined[p.id] = joined.get(p.id, set()) | d
    outputs = list(joint_trace.output)
    return [set().union(*(joined.get(p.id, ()) for p in proxies(outputs[i]))) for i in grad_outputs]


def _proxy_requires_grad(trace, proxy):
    m = trace.meta(proxy)
    return m[0] != "number" and m[3]


def _gradient_leaves(symbols):
    """The symbols whose outputs gradients flow through, each joined to its own inputs: the decompositions' prims
    (a multi-output op joins each output to its own inputs), an op that joins every argument whole."""
    for b in symbols:
        yield from _gradient_leaves(b.subsymbols) if b.subsymbols and not b.joins_every_argument else (b,)


def gradient_groups(joint_trace, grad_outputs, reaches):
    """The output gradients (the outputs ``grad_outputs`` indexes) in groups that share no computed value that
    requires grad -- only arguments, if anything (`x.exp(), x.sin()`; `p * 2, b + 1`) --, as
    [(the groups' output indices, the argument indices their gradients reach (``reaches``: gradient_reaches'))];
    None where they form one group, or where an output is an argument itself. Each group becomes an autograd node
    of its own (see training_callable): in eager such outputs are on graphs of their own, so one backward frees
    nothing the other needs, and an argument only the other reaches is not on this one's graph (a graph freed
    before, `b` of a backward already taken, is never entered)."""
    inputs = {p.id for p in joint_trace.inputs}
    parent = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    def union(a, b):
        a, b = find(a), find(b)
        if a != b:
            parent[a] = b

    for b in _gradient_leaves(joint_trace.symbols):
        made = [p.id for p in proxies(b.output) if _proxy_requires_grad(joint_trace, p)]
        if not made:
            continue
        for x in made[1:] + [p.id for a in (*b.args, *b.kwargs.values()) for p in proxies(a)
                             if p.id not in inputs and _proxy_requires_grad(joint_trace, p)]:
            union(x, made[0])
    outputs, groups = list(joint_trace.output), {}
    for i in grad_outputs:
        ids = [p.id for p in proxies(outputs[i])]
        if not ids or any(x in inputs for x in ids):
            return None
        for x in ids[1:]:
            union(x, ids[0])
    for k, i in enumerate(grad_outputs):
        members, reached = groups.setdefault(find(proxies(outputs[i])[0].id), (set(), set()))
        members.add(i)
        reached |= reaches[k]
    return list(groups.values()) if len(groups) > 1 else None


class _Program:
    __slots__ = ("forward", "backward", "grad_outputs", "differentiable_backward", "random", "returned_args",
                 "reaches", "specialize", "specializations", "zero_fill", "groups", "written_saved",
                 "way_reaches")

    def __init__(self, forward, backward, grad_outputs, differentiable_backward, random=False, reaches=None,
                 specialize=None, zero_fill=(), groups=None, written_saved=None, way_reaches=None):
        self.forward, self.backward, self.grad_outputs = forward, backward, list(grad_outputs)
        self.differentiable_backward, self.random = differentiable_backward, random
        # Per output gradient, the arguments it reaches (gradient_reaches).
        self.reaches = reaches
        # Per output, the index of the argument the forward returns as it is (None: another value), once known.
        self.returned_args = None
        # given -> the backward for a call with only those output gradients (see specialized).
        self.specialize, self.specializations = specialize, {}
        self.zero_fill = list(zero_fill)  # see training_callable
        self.groups = groups  # see gradient_groups
        self.written_saved = written_saved  # see written_saved_inputs
        self.way_reaches = way_reaches  # see fx_import.WayReaches

    def specialized(self, given):
        """(compiled backward, uncompiled backward, positions of the saved values it reads or None for all) for a
        call given only the output gradients ``given`` flags, the others None: made once per set
        (``specialize(given)``, see _specialized_backward)."""
        if given not in self.specializations:
            self.specializations[given] = self.specialize(given)
        return self.specializations[given]


def training_callable(forward, backward, grad_outputs, differentiable_backward=None, random=False, reaches=None,
                      specialize=None, zero_fill=(), groups=None, written_saved=None, way_reaches=None):
    """The graph's callable in training: the compiled forward and backward run as one torch.autograd.Function.

    ``differentiable_backward``: (forward, backward) callables that run with torch ops, for create_graph=True
    (None if the forward writes into a tensor). ``random``: the forward draws seeds from torch's generator
    (prims.random_seed), so a rerun for create_graph=True restores the generator's state first. ``reaches``: per
    output gradient, the arguments it reaches (gradient_reaches; None: every one). ``specialize(given)``: the
    (compiled, uncompiled) backward for a call given only some output gradients (a tuple of flags, one per
    ``grad_outputs``) and the positions of the saved values it reads (None: all), made on the first such call (see
    _specialized_backward). ``zero_fill``: the positions of the arguments an output reaches whose gradient the
    backward does not compute (addmm's input with beta=0): a backward reaching them gives zeros, as eager's.
    ``groups``: gradient_groups' (None: one group): the forward runs once, and each group's outputs come from an
    autograd node of their own, joined only to the arguments they reach (the others passed to it detached); its
    backward is the backward for those output gradients alone. ``written_saved``: written_saved_inputs' for a
    forward that writes into its arguments (None: it writes none). ``way_reaches``: fx_import.WayReaches, where
    which arguments an output reaches depends on the way converted branches go (the forward returns their
    conditions after its outputs): a backward given only some output gradients reaches those the way taken
    leads to."""
    program = _Program(forward, backward, grad_outputs, differentiable_backward, random, reaches, specialize,
                       zero_fill, groups, written_saved, way_reaches)
    apply = _TrainingProgram.apply

    def grouped(args):
        call, outputs = _GroupedCall(args), None
        for members, reached in program.groups:
            node_args = [a.detach() if i not in reached and isinstance(a, torch.Tensor) and a.requires_grad else a
                         for i, a in enumerate(args)]
            got = apply(program, (call, members, outputs is None), *node_args)
            outputs = list(got) if outputs is None else outputs
            for i in members:
                outputs[i] = got[i]
        return tuple(outputs)

    def run(*args):
        outputs = apply(program, None, *args) if program.groups is None else grouped(args)
        if not any(j is not None for j in program.returned_args):
            return outputs
        # An argument the forward returns as it is (dropout with p = 0, an identity) is returned itself, as eager
        # returns it (`out is x`), not the alias autograd.Function makes of it; its gradient reaches it directly.
        return tuple(o if j is None else args[j] for o, j in zip(outputs, program.returned_args))
    return run
