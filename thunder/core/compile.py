"""Compiling one captured graph: import, passes, execution callable."""
import time
from dataclasses import dataclass, field

import torch

from thunder import _core
from thunder.core.log import log_trace, logger, trace_enabled
from thunder.core.options import DEFAULT_PASSES
from thunder.executors.torchex import ltorch, prims

# Traces from these passes on are execution traces: they print without the
# decompositions of the ops the executors run whole (a fusion still lists its prims).
EXECUTION_PASSES = ("claim", "fusion", "release")


@dataclass
class TraceView:
    """A trace with the names it needs to run (opaque callables, constants).

    ``str(view)`` is the trace as a Python program; ``view.python_callable()``
    compiles that program and returns its function.
    """

    trace: "_core.Trace"
    namespace: dict = field(repr=False)
    name: str = ""
    subsymbols: bool = True

    def __str__(self):
        return self.trace.python(subsymbols=self.subsymbols)

    def __repr__(self):
        return f"<TraceView {self.name}: {len(self.trace.symbols)} symbols>"

    @property
    def provenance(self):
        return self.trace.provenance

    @property
    def symbols(self):
        return self.trace.symbols

    def python_callable(self):
        """The trace's printed program, executed; raises SyntaxError if the printer produced invalid Python."""
        source = str(self)
        ns = dict(self.namespace)
        exec(compile(source, f"<thunder trace {self.name}>", "exec"), ns)
        return ns["computation"]


@dataclass
class CompiledGraph:
    """One graph Dynamo captured, compiled by thunder."""

    index: int
    traces: list                  # TraceView per stage: the imported trace, then one per pass
    fn: object                    # the execution trace's Python function
    compile_seconds: float
    pass_seconds: dict
    fallbacks: list               # (node, target, reason) of ops imported as opaque
    calls: int = 0
    aliased_calls: int = 0        # calls whose inputs aliased a tensor the graph writes: run as captured instead
    kernels: dict = field(default_factory=dict)  # fusion executor name -> [(KernelModule, C++ source)], one per unit
    #: Outputs the trace returns as their base, made again after each call (fx_import.OutputViews)
    output_views: list = field(default_factory=list)

    @property
    def execution_trace(self):
        return self.traces[-1]

    def executors(self):
        """Executor names that run at least one symbol of this graph, in order of first use."""
        names = []
        for b in self.execution_trace.symbols:
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


def compile_trace(imported, executors, passes=DEFAULT_PASSES, index=0):
    """Runs the passes on an imported trace and builds the execution callable.

    Args:
        imported: a :class:`thunder.frontend.fx_import.ImportedGraph`.
        executors: :class:`thunder.executors.Executor` list, in priority order.
        passes: pass names (see ``thunder._core.pass_names()``).
    Returns:
        CompiledGraph.
    """
    start = time.perf_counter()
    constants = []
    namespace = {"torch": torch, "prims": prims, "ltorch": ltorch, "_constants": constants}
    for ex in executors:
        namespace.update(ex.namespace)
    namespace.update(imported.namespace)
    tables = [(ex.name, ex.callees, ex.fusion, list(ex.devices)) for ex in executors]
    views = [TraceView(imported.trace, namespace, "Imported from the FX graph")]
    results = _core.run_pipeline(imported.trace, list(passes), _constant_evaluator(namespace, constants), tables)
    pass_seconds = {}
    for r in results:
        views.append(TraceView(r.trace, namespace, r.name, subsymbols=r.name not in EXECUTION_PASSES))
        pass_seconds[r.name] = r.seconds
        logger.debug("thunder: graph %d: %s", index, r.trace.provenance)
        if trace_enabled():
            log_trace("thunder: graph %d after %s:\n%s", index, r.name, views[-1])
    kernels = {}
    for ex in executors:
        if ex.fusion and ex.lower is not None:
            launchers, units = ex.lower(views[-1].trace)
            namespace.update(launchers)
            if units:
                kernels[ex.name] = units
    fn = views[-1].python_callable()
    graph = CompiledGraph(index, views, fn, time.perf_counter() - start, pass_seconds, imported.fallbacks,
                          output_views=getattr(imported, "output_views", []))
    graph.kernels = kernels
    return graph
