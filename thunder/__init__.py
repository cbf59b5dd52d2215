"""thunder: a just-in-time compiler for PyTorch programs.

    jitted = thunder.jit(fn_or_module)
    out = jitted(*args)          # first call compiles; later calls reuse the compiled program
    print(jitted)                # graphs, their final traces, executors, graph breaks, cache hits
    thunder.last_traces(jitted)  # every pass's trace of the last compiled graph
    thunder.report(jitted, "report.html")   # the HTML trace explorer
    print(thunder.examine(fn_or_module, *args))  # before compiling: what will run where, and why

Capture is TorchDynamo's (``torch.compile`` with thunder as the backend); the
compiler core (IR, passes) is C++, in ``thunder._core``.
"""
import torch

from thunder import core  # noqa: F401
from thunder.core import compile as _compile
from thunder.core.log import logger as _logger
from thunder.core.log import set_log_file, set_log_level
from thunder.core.options import LogLevel
from thunder.executors.cpuex import clear_kernel_cache
from thunder.frontend import branches as _branches
from thunder.frontend import dynamo as _dynamo
from thunder.jit import CompileStats, ThunderFunction, ThunderModule, _no_graph_reason, compiled_graphs
from thunder.jit import report as _summary_text
from thunder.plan import Plan, examine

__all__ = ["jit", "clear_kernel_cache", "last_traces", "last_backward_traces", "last_kernels", "compile_stats",
           "summary", "report", "examine", "Plan", "set_log_level", "set_log_file", "LogLevel", "ThunderModule",
           "ThunderFunction"]

_dynamo.register()


def jit(fn, *, executors=None, passes=None, debug=None, fullgraph=False, dynamic=None):
    """Compiles a function or nn.Module; returns a callable that behaves like it.

    Args:
        fn: a Python function or method using torch, or an ``nn.Module``.
        executors: the executors, in priority order: ``None`` (the default,
            ``thunder.executors.default_executors()``: the CPU fusion executor, then torch);
            an executor set's name (``"cpu"`` or ``"torch"``, see ``thunder.executors.executor_sets()``);
            or a list of :class:`thunder.executors.Executor` objects and executor names
            (``["cpu", "torch"]``).
        passes: names of the core passes to run, in order (default
            ``thunder.core.options.DEFAULT_PASSES``; the names are ``thunder._core.pass_names()``).
            Each runs at most once, ``"fusion"`` needs ``"claim"`` before it, ``"release"`` runs last.
        debug: ``None`` (the default), or ``"pdb"``: each call of a compiled graph runs its execution trace
            op by op under :mod:`pdb`, stopped at the trace's first line (``n`` runs the next op, ``p t3``
            prints a value, ``l`` lists the trace, ``c`` continues); the backward's trace too.
        fullgraph: as ``torch.compile``'s: True makes a graph break an error (Dynamo's ``Unsupported``,
            raised by the call) instead of a split; data-dependent branches thunder converts to selects
            are not graph breaks.
        dynamic: as ``torch.compile``'s: ``None`` (the default) captures static shapes first and, once a
            dimension changes, a graph with symbolic sizes; ``True`` symbolic sizes from the start; ``False``
            static shapes only (each new shape is a new Dynamo graph, up to its recompile limit). thunder
            runs the passes on a graph with symbolic sizes once and lowers it once per shape signature, at the
            call that brings it (``thunder.frontend.specialize``); kernels are shared across shapes where the code
            generator allows.
    Returns:
        :class:`ThunderModule` for a module, :class:`ThunderFunction` otherwise. ``fn`` itself where it is one
        and no option is given; given options, a new one of what ``fn`` compiles. A ``torch.compile`` result
        is unwrapped: thunder compiles the function or module it wraps.
    Raises:
        TypeError: ``fn`` is not callable; ``executors``, ``passes``, ``debug``, ``fullgraph`` or ``dynamic``
            is of the wrong type (``passes="dce"`` included: a list of names is expected).
        ValueError: an unknown executor, pass name or debug mode (the message lists the valid ones), or a
            pass order the pipeline cannot run (the message names the rule).

    Data-dependent Python control flow becomes a graph break (that part runs in
    Python); a new input dtype or device recompiles, and so does a new shape (see ``dynamic``).

    Example::

        jitted = thunder.jit(model, executors="torch", passes=("cse", "dce", "claim"))
    """
    options = {"executors": executors, "passes": passes, "debug": debug, "fullgraph": fullgraph, "dynamic": dynamic}
    if isinstance(fn, ThunderFunction | ThunderModule):
        if all(options[name] is default for name, default in jit.__kwdefaults__.items()):
            return fn  # jitted again as it is: the same wrapper, its compiled graphs kept
        fn = fn._thunder_target  # with options of its own: a new wrapper of what it compiles
    # What torch.compile returned: thunder compiles what it wraps (torch.compile's backend is not used).
    # (torch.compiler.disable's result, which also holds what it wraps, stays as it is: Dynamo skips it.)
    original = fn._orig_mod if isinstance(fn, torch._dynamo.eval_frame.OptimizedModule) else \
        None if getattr(fn, "_torchdynamo_disable", False) else getattr(fn, "_torchdynamo_orig_callable", None)
    if original is not None:
        _logger.info("thunder.jit of a torch.compile result: thunder compiles the %s it wraps",
                     "module" if isinstance(fn, torch.nn.Module) else "function")
        fn = original
    if isinstance(fn, torch.nn.Module):
        return ThunderModule(fn, **options)
    if not callable(fn):
        raise TypeError(f"thunder.jit: expected a function or an nn.Module, got {type(fn).__name__}")
    return ThunderFunction(fn, **options)


def _state_of(jitted, caller):
    """The JitState of what thunder.jit or ``torch.compile(..., backend="thunder")`` returned (or a JitState
    itself, such as ``thunder.frontend.dynamo.GLOBAL_STATE``); TypeError naming ``caller`` for anything else."""
    if isinstance(jitted, _dynamo.JitState):
        return jitted
    if isinstance(jitted, ThunderFunction | ThunderModule):
        return jitted._thunder_state
    state = _dynamo.state_of_torch_compile_result(jitted)
    if state is None:
        name = getattr(jitted, "__qualname__", None) or type(jitted).__name__
        raise TypeError(f"thunder.{caller}: {name} is not a thunder-jitted callable (pass what thunder.jit or "
                        "torch.compile(..., backend='thunder') returned)")
    return state


def _compiled_graphs(jitted, caller):
    """The compiled graphs; LookupError naming ``caller`` and why there is none: no call yet, the captured graphs
    run uncompiled (each with its reason), or no graph was captured."""
    state = _state_of(jitted, caller)
    graphs = compiled_graphs(state)
    if graphs:
        return graphs
    if not state.calls:
        raise LookupError(f"thunder.{caller}: no graph has been compiled yet (call the jitted function first)")
    uncompiled = [f"graph {g.index} runs uncompiled: {g.reason}" for g in state.graphs]
    raise LookupError(f"thunder.{caller}: no graph was compiled: " + ("; ".join(uncompiled) if uncompiled else
                                                                      _no_graph_reason(state)))


def _compiled_graph(jitted, caller, graph):
    """The compiled graph at position ``graph`` (an int, negative from the end) of those still recorded;
    LookupError where none is, IndexError/TypeError naming ``caller`` and ``graph`` for a bad position."""
    graphs = _compiled_graphs(jitted, caller)
    if not isinstance(graph, int) or isinstance(graph, bool):
        raise TypeError(f"thunder.{caller}: graph must be an int (a position among the compiled graphs), got "
                        f"{type(graph).__name__} {graph!r}")
    if not -len(graphs) <= graph < len(graphs):
        raise IndexError(f"thunder.{caller}: graph={graph} is out of range: {len(graphs)} compiled graph"
                         f"{'s are' if len(graphs) > 1 else ' is'} recorded (positions 0 to {len(graphs) - 1}, or "
                         "negative from the end)")
    return graphs[graph]


def last_traces(jitted, graph: int = -1):
    """Every trace of one compiled graph, in pipeline order (the import, then one per pass).

    Each is printable (``print(t)`` gives a runnable Python program) and has
    ``.provenance`` and ``.python_callable()``.

    Args:
        jitted: what :func:`jit` or ``torch.compile(..., backend="thunder")`` returned (or
            ``thunder.frontend.dynamo.GLOBAL_STATE``, which records every graph of ``torch.compile(...,
            backend="thunder")``).
        graph: position in the list of compiled graphs still recorded (default: the most recent; a graph's
            ``index`` in ``compile_stats`` differs once old specializations are folded).
    Raises:
        TypeError: ``jitted`` is not a thunder-jitted callable.
        LookupError: nothing was compiled yet.
        IndexError: no compiled graph has that index; TypeError also for a ``graph`` that is not an int.
    """
    return list(_compiled_graph(jitted, "last_traces", graph).traces)


def last_backward_traces(jitted, graph: int = -1):
    """The backward traces of one compiled graph, in pipeline order: the backward thunder's autodiff made from
    the graph's joint trace, then one per pass (the last is the one that runs in ``loss.backward()``).

    Empty when thunder did not compile that graph's backward: nothing in it required grad, or torch's autograd
    differentiates it (``compile_stats(jitted).graphs[i]["backward"]`` says why).
    A backward called with some output gradients None (outputs nothing differentiates) runs a specialization of
    it, whose traces are the graph's ``specialized_backward_traces`` (see docs/autodiff.md).

    Raises:
        TypeError: ``jitted`` is not a thunder-jitted callable.
        LookupError: nothing was compiled yet.
        IndexError: no compiled graph has that index; TypeError also for a ``graph`` that is not an int.
    """
    return list(getattr(_compiled_graph(jitted, "last_backward_traces", graph), "backward_traces", []))


def compile_stats(jitted) -> CompileStats:
    """Calls, cache hits/misses, graph breaks, and per graph its compile time and pass times (seconds).

    Each graph is a dict: ``index``, ``compiled`` (False for a graph thunder could not compile, which
    runs with torch as Dynamo captured it), ``reason`` (why it runs uncompiled; None if compiled),
    ``calls``, ``compile_seconds`` (the whole compile), ``pass_seconds`` (each pass; for a graph thunder
    differentiates, ``autodiff``, ``rematerialization`` and the backward's passes, ``"backward <pass>"``),
    ``stage_seconds`` (every stage in the order it ran: ``"import"`` or, for a graph with symbolic sizes,
    ``"bind sizes"``, the passes, then per fusion executor ``"<executor> codegen"``
    and ``"<executor> compile"`` (the compiler or the kernel cache; the backward's prefixed ``"backward "``) and
    ``"python"``, the execution traces made Python functions), ``aliased_calls`` (calls run as captured because an input
    aliased one the graph writes), ``captured_calls`` (calls run as captured, with torch, inside a forward-AD dual
    level or under a TorchDispatchMode such as FakeTensorMode), ``symbolic`` and ``shapes`` (for the specialization of a graph Dynamo captured
    with symbolic sizes: that graph's number, 1, 2, ..., and the shapes it was compiled for; None for a graph
    captured with static shapes; ``dynamo_graphs`` counts the graphs Dynamo captured, ``symbolic_graphs`` those
    with symbolic sizes), ``retraced`` (None where the specialization is that graph's one trace with symbolic
    sizes, its sizes bound to the call's; else why that trace could not be made, so the graph was traced again
    for the shapes) and ``backward``: who differentiates the graph -- ``"thunder"`` (its autodiff
    compiled a backward: :func:`last_backward_traces`), ``"torch (<reason>)"``, or None when nothing required grad;
    ``vjp``: when thunder differentiates the graph, how it differentiated each op whose result requires grad, op ->
    ``"own"`` (its VJP rule), ``"decomposition"`` (the rules of its decomposition's ops) or ``"generic"``
    (``torch.autograd`` on that op alone), e.g. ``{"ltorch.relu": "own", "ltorch.conv2d": "generic"}``
    (:func:`thunder.core.compile.vjp_rules`); empty otherwise; ``released``: why a specialization no longer runs
    (:func:`thunder.frontend.dynamo.max_specializations`), ``""`` while it does; past as many released ones again,
    the oldest records are dropped and counted in ``folded_specializations`` (symbolic graph number ->
    ``specializations``, ``calls``, ``compile_seconds``). ``branches`` lists each ``if``
    statement of the jitted code
    (:class:`thunder.frontend.branches.BranchSite`); ``branches_converted`` counts those compiled to selects,
    ``branches_left`` those left as Python control flow; ``uncompiled_methods``: for a jitted module, its original's
    methods read through it that ran the original forward uncompiled (``jitted.generate(...)``), name -> forward
    calls. ``jitted`` may also be what ``torch.compile(..., backend="thunder")`` returned (its graphs and graph
    breaks; calls and cache hits are counted per graph only), or ``thunder.frontend.dynamo.GLOBAL_STATE``: every
    graph ``torch.compile(..., backend="thunder")`` compiled.

    Raises:
        TypeError: ``jitted`` is not a thunder-jitted callable.
    """
    s = _state_of(jitted, "compile_stats")
    graphs = []
    for g in s.graphs:
        compiled = not isinstance(g, _dynamo.EagerGraph)
        graphs.append({"index": g.index, "compiled": compiled, "reason": None if compiled else g.reason,
                       "calls": g.calls, "compile_seconds": g.compile_seconds if compiled else None,
                       "pass_seconds": dict(g.pass_seconds) if compiled else {},
                       "stage_seconds": g.stage_seconds if compiled else {},
                       "aliased_calls": g.aliased_calls if compiled else 0,
                       "captured_calls": g.captured_calls if compiled else 0,
                       "backward": g.autodiff if compiled else None,
                       "vjp": _compile.vjp_rules(getattr(g, "vjp", [])) if compiled else {},
                       "symbolic": g.shapes[0] if g.shapes else None, "shapes": g.shapes[1] if g.shapes else None,
                       "retraced": g.shapes[2] if g.shapes else None,
                       "released": g.released if compiled else ""})
    sites = sorted(s.branches.values(), key=lambda b: b.id)
    _branches.site_statuses(sites, s.graph_breaks)  # sets broke_in_condition, which the sites' text reads
    return CompileStats(s.calls, s.cache_hits, s.cache_misses, graphs, list(s.graph_breaks), s.eager_calls,
                        s.dynamo_stopped, sites, s.symbolic_graphs, dict(s.uncompiled_methods),
                        s.partly_uncompiled_calls,
                        {number: {"specializations": count, "calls": calls, "compile_seconds": seconds}
                         for number, (count, calls, seconds) in s.folded.items()})


def last_kernels(jitted, graph: int = -1):
    """The generated kernels of one compiled graph (default: the most recent).

    Returns a list of dicts, one per translation unit a fusion executor generated
    (a graph with many kernels is split into units compiled in parallel):
    ``executor``, ``source`` (the C++ translation unit), ``command`` (the
    compiler command line; "" when loaded from the disk cache), ``path`` (the
    cached shared object), ``cache_hit`` and ``compile_seconds``. Empty if the
    graph has no fusions.

    Raises:
        TypeError: ``jitted`` is not a thunder-jitted callable.
        LookupError: nothing was compiled yet.
        IndexError: no compiled graph has that index; TypeError also for a ``graph`` that is not an int.
    """
    return [{"executor": name, "source": source, "command": module.command, "path": module.path,
             "cache_hit": module.cache_hit, "compile_seconds": module.compile_seconds}
            for name, units in _compiled_graph(jitted, "last_kernels", graph).kernels.items()
            for module, source in units]


def summary(jitted) -> str:
    """What was compiled, as text: calls and cache hits, executors, graph breaks, data-dependent branches and
    what became of them, and per graph its final trace, executors and backward.

    ``print(thunder.summary(jitted))`` is what ``print(jitted)`` shows for a jitted function; for a jitted
    module, ``print(jitted)`` is the module tree and one summary line.

    Args:
        jitted: what :func:`jit` or ``torch.compile(..., backend="thunder")`` returned, or a
            ``thunder.frontend.dynamo.JitState``.
    Raises:
        TypeError: ``jitted`` is none of those.
    """
    return _summary_text(_state_of(jitted, "summary"))


def report(jitted, path="report.html"):
    """Writes the HTML trace explorer of what was compiled: one self-contained file (inline CSS and JS, no network).

    Per captured graph: the pipeline's traces stage by stage, each next to the stage before it with the lines the
    pass changed highlighted (forward and, when thunder differentiates the graph, backward); every fusion region
    colored and linked to its generated C++ kernel and the compiler command; the executor of every symbol; the
    ops imported as opaque torch calls and why; compile time per stage and call counts. Above them: graph breaks
    and data-dependent branches with the user's source lines. A search box, collapsible sections and a
    "changed lines only" switch keep large models usable.

    Args:
        jitted: what :func:`jit` or ``torch.compile(..., backend="thunder")`` returned, or a
            ``thunder.frontend.dynamo.JitState`` (``thunder.frontend.dynamo.GLOBAL_STATE``: every graph of
            ``torch.compile(..., backend="thunder")``).
        path: the file to write (its directory is made if missing).
    Returns:
        The path written, as a ``pathlib.Path``.
    Raises:
        TypeError: ``jitted`` is not a thunder-jitted callable.
        OSError: the file cannot be written.

    Example::

        jitted = thunder.jit(model)
        jitted(x)
        thunder.report(jitted, "report.html")   # open it in a browser
    """
    from thunder import explorer

    return explorer.write(_state_of(jitted, "report"), path)
