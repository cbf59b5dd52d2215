"""What ``thunder.jit`` will do with a function, before compiling it: :func:`examine` and the plan it returns.

``thunder.examine(fn, *args)`` captures ``fn`` as ``thunder.jit`` would -- in a throwaway wrapper, so nothing
stays compiled on ``fn`` -- and runs thunder's passes on each captured graph up to fusion, without
generating or compiling a kernel. For each op of each graph it says whether thunder imports it natively or
as an opaque torch call (and why), which executor will run it and in which fusion; and it lists the graph
breaks and the data-dependent branches.
"""
from dataclasses import dataclass, field

from thunder.frontend import branches
from thunder.frontend.dynamo import EagerGraph, proxies

#: The reason given for an opaque op the importer has no native op for (it records reasons only for the ops it
#: knows but declined), and for one kept for its effect (grad mode, autocast, a view or in-place opaque op).
NO_NATIVE_OP = "thunder has no native op for it; it runs as the torch call"
EFFECT = "kept in place for its effect (grad mode, autocast, a view or write thunder does not follow)"


@dataclass
class OpPlan:
    """One op of a captured graph (a node of Dynamo's FX graph, as thunder imported it) and what will run it.

    ``op`` is the imported call (``"ltorch.softmax"``, ``"torch.special.erfcx"`` for an opaque op);
    ``native`` False for an opaque op, with the ``reason``; ``executor`` the executor that will run it
    (``"cpu"``, ``"torch"``; ``""`` when a pass removes it, ``reason`` then says which); ``fusion`` the
    fusion region it is part of (``"cpu_fusion0"``; ``""`` if none); ``source`` the user's line it comes from
    (``"model.py:12 in forward: x = x + b"``; ``""`` if unknown)."""

    op: str
    native: bool
    executor: str
    fusion: str = ""
    reason: str = ""
    source: str = ""


@dataclass
class FusionPlan:
    """A fusion region the fusion pass formed: its ``name`` in the trace, the ``executor`` that generates its
    kernel, the ``prims`` it runs (qualified names, in order) and the user's ``source`` line of its first op."""

    name: str
    executor: str
    prims: list
    source: str = ""


@dataclass
class GraphPlan:
    """The plan for one captured graph.

    ``ops``: :class:`OpPlan` per imported op; ``fusions``: :class:`FusionPlan` per fusion of the forward (or
    the inference program); ``backward``: who differentiates the graph (``"thunder"``, ``"torch (<reason>)"``,
    or None when nothing requires grad) and ``backward_fusions`` the fusions of thunder's backward;
    ``uncompiled``: why thunder cannot compile the graph ("" if it can; then ``ops`` is empty and the graph
    runs with torch as captured); ``traces``: the planned traces, as ``thunder.last_traces`` gives them."""

    index: int
    ops: list = field(default_factory=list)
    fusions: list = field(default_factory=list)
    backward: str = None
    backward_fusions: list = field(default_factory=list)
    uncompiled: str = ""
    traces: list = field(default_factory=list, repr=False)

    @property
    def opaque(self):
        """The ops that run as opaque torch calls."""
        return [op for op in self.ops if not op.native]


@dataclass
class Plan:
    """What ``thunder.jit`` will do with a function on given inputs (returned by :func:`examine`).

    ``name``: the function's or module's name; ``executors``: executor names in priority order; ``graphs``:
    :class:`GraphPlan` per graph Dynamo captures; ``graph_breaks``: :class:`thunder.frontend.dynamo.GraphBreak`
    per split (location, reason, hint); ``branches``: ``(BranchSite, "converted" | "left")`` per
    data-dependent ``if``. ``str(plan)`` is a short table."""

    name: str
    executors: list
    graphs: list = field(default_factory=list)
    graph_breaks: list = field(default_factory=list)
    branches: list = field(default_factory=list)

    @property
    def ops(self):
        """Every graph's ops, in order."""
        return [op for g in self.graphs for op in g.ops]

    def __str__(self):
        return _table(self)


def examine(fn_or_module, *args, **kwargs):
    """Says what ``thunder.jit`` will do with a function or module called with these arguments, before compiling.

    The function is captured by Dynamo, as ``thunder.jit`` captures it, in a throwaway wrapper (nothing stays
    compiled on ``fn_or_module``, and a later ``thunder.jit`` of it starts afresh), and each captured graph goes
    through thunder's import and passes up to fusion -- no kernel is generated or compiled. Capturing runs the
    function once: each graph runs with torch as captured, so its effects (in-place writes, a BatchNorm's
    running statistics) happen as in one eager call. The plan is for the current grad mode: with an input that
    requires grad, it includes the backward's fusions.

    Args:
        fn_or_module: a function or ``nn.Module``; or what ``thunder.jit`` or
            ``torch.compile(..., backend="thunder")`` returned (its original is examined, with its options).
        *args, **kwargs: the arguments of one call (tensors of the shapes, dtypes and devices to plan for).
    Returns:
        :class:`Plan`: per graph, each op (native or opaque and why, its executor, its fusion, the user's
        source line) and the fusions planned; the graph breaks with their reasons; the data-dependent branches
        and what becomes of them. ``print(plan)`` shows it as a table.
    Raises:
        TypeError: ``fn_or_module`` is not callable.
        Whatever the function raises when called with these arguments.

    Example::

        plan = thunder.examine(model, torch.randn(8, 32))
        print(plan)                                   # the table
        [op.op for op in plan.ops if not op.native]   # what runs as opaque torch calls
    """
    import thunder

    target, options = _original(fn_or_module)
    probe = thunder.jit(target, **options)
    state = probe._thunder_state
    state.plan_only = True
    probe(*args, **kwargs)
    plan = Plan(state.name, [e.name for e in state.executors], [graph_plan(g) for g in state.graphs],
                list(state.graph_breaks), branches.site_statuses(state.branches.values(), state.graph_breaks))
    del probe  # its code copies and Dynamo cache entries go with it
    return plan


def _original(fn):
    """(the callable to examine, thunder.jit options) of a function, a module, or a thunder-jitted or
    torch.compile(backend="thunder") result."""
    from thunder.frontend.dynamo import dynamo_context_of, state_of_torch_compile_result
    from thunder.jit import ThunderFunction, ThunderModule

    if isinstance(fn, ThunderFunction | ThunderModule):
        options = fn._options()
        options.pop("debug")
        return fn._original(), options
    if dynamo_context_of(fn) is not None and state_of_torch_compile_result(fn) is not None:
        state = state_of_torch_compile_result(fn)
        original = getattr(fn, "_orig_mod", None) or getattr(fn, "_torchdynamo_orig_callable")
        return original, {"executors": list(state.executors), "passes": state.passes}
    if not callable(fn):
        raise TypeError(f"thunder.examine: expected a function or an nn.Module, got {type(fn).__name__}")
    return fn, {}


def _runners(trace):
    """{proxy: (executor, fusion name or "")} for every value an execution trace computes, its fusions' and
    symbols' inner values included."""
    runners = {}
    for b in trace.symbols:
        fusion = b.callee if b.name == "fusion" else ""
        for inner in [b, *b.subsymbols]:
            for p in proxies(inner.output):
                runners.setdefault(p, (b.executor, fusion))
    return runners


def _defined(trace):
    """Every proxy a trace computes (top-level symbols and their sub-symbols, recursively)."""
    out, stack = set(), list(trace.symbols)
    while stack:
        b = stack.pop()
        out.update(proxies(b.output))
        stack.extend(b.subsymbols)
    return out


def _removed_by(views, proxies):
    """The provenance of the first trace after the import in which none of ``proxies`` is computed any more."""
    for view in views[1:]:
        if not (set(proxies) & _defined(view.trace)):
            return view.provenance.split(" (took")[0]
    return "a pass"


def _opaque_reason(callee, fallbacks):
    """Why the importer made an op opaque: the first of the remaining ``fallbacks`` (fx_import's (node, target,
    reason), in node order; the one used is removed) whose target the callee names, else NO_NATIVE_OP."""
    for i, (_, target, reason) in enumerate(fallbacks):
        if callee == target or callee.endswith("." + target):
            del fallbacks[i]
            return reason
    return NO_NATIVE_OP


def graph_plan(g):
    """The :class:`GraphPlan` of a graph in a JitState (a CompiledGraph, planned or compiled, or an EagerGraph)."""
    if isinstance(g, EagerGraph):
        return GraphPlan(g.index, uncompiled=g.reason)
    imported, final = g.traces[0].trace, g.execution_trace.trace
    runners, fallbacks = _runners(final), list(g.fallbacks)
    ops = []
    for b in imported.symbols:
        if b.name == "del" or (b.level == "prims" and b.name.startswith("branch_")):  # markers: not ops
            continue
        outputs = proxies(b.output)
        found = next((runners[p] for p in outputs if p in runners), None)
        reason = "" if not b.is_opaque else EFFECT if b.has_effect else _opaque_reason(b.callee, fallbacks)
        if found is None and outputs:
            reason = (reason + "; " if reason else "") + f"removed by {_removed_by(g.traces, outputs)}"
        executor, fusion = found or ("", "")
        ops.append(OpPlan(b.callee, not b.is_opaque, executor, fusion, reason, b.source))
    backward = g.backward_traces[-1].trace if g.backward_traces else None
    return GraphPlan(g.index, ops, _fusions(final), g.autodiff, _fusions(backward) if backward else [],
                     traces=list(g.traces))


def _fusions(trace):
    return [FusionPlan(b.callee, b.executor, [s.callee for s in b.subsymbols], b.source)
            for b in trace.symbols if b.name == "fusion"]


# ---- the table ----

def _short_source(source):
    """'model.py:12' of 'model.py:12 in forward: x = x + b'."""
    return source.split(" in ", 1)[0] if source else ""


def _op_line(op, width):
    runs = op.executor + (f" [{op.fusion}]" if op.fusion else "") if op.executor else "-"
    kind = "native" if op.native else "OPAQUE"
    note = f"  {op.reason}" if op.reason else ""
    return f"  {op.op:<{width}}  {kind:<6}  {runs:<22}  {_short_source(op.source)}{note}"


def _table(plan):
    breaks = list(dict.fromkeys(str(b) for b in plan.graph_breaks))
    converted = sum(status == "converted" for _, status in plan.branches)
    lines = [f"thunder.examine({plan.name}): {len(plan.graphs)} graph{'s' if len(plan.graphs) != 1 else ''}, "
             f"{len(breaks)} graph break{'s' if len(breaks) != 1 else ''}"
             + (f", {converted} of {len(plan.branches)} data-dependent branches converted to selects"
                if plan.branches else "") + f"; executors {', '.join(plan.executors)}"]
    for g in plan.graphs:
        if g.uncompiled:
            lines.append(f"graph {g.index}: UNCOMPILED, runs with torch as captured: {g.uncompiled}")
            continue
        backward = f", backward: {g.backward}" if g.backward else ""
        lines.append(f"graph {g.index}: {len(g.ops)} ops, {len(g.opaque)} opaque, {len(g.fusions)} fusions"
                     f"{backward}")
        width = max([len(op.op) for op in g.ops] + [2])
        lines.append(f"  {'op':<{width}}  {'kind':<6}  {'runs on [fusion]':<22}  source")
        lines += [_op_line(op, width) for op in g.ops]
        for label, fusions in (("fusion", g.fusions), ("backward fusion", g.backward_fusions)):
            for f in fusions:
                lines.append(f"  {label} {f.name} ({f.executor}): {len(f.prims)} prims"
                             + (f", from {_short_source(f.source)}" if f.source else ""))
    lines.append(f"graph breaks ({len(breaks)}):" if breaks else "graph breaks: none")
    lines += [f"  {b}" for b in breaks]
    lines += [f"  branch {site}" for site, _ in plan.branches]
    return "\n".join(lines)
