"""Recompilation: a new shape or dtype compiles a new graph (a cache miss); the
same shape and dtype reuse the compiled one (a cache hit)."""
import pytest
import torch
import torch.nn as nn

import thunder
from conftest import assert_same, capture_thunder_log


def fn(x):
    return torch.softmax(x * 2, -1) + 1


def test_same_shape_and_dtype_hits_the_cache():
    jitted = thunder.jit(fn)
    for _ in range(3):
        x = torch.randn(2, 3)
        assert_same(jitted(x), fn(x))
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_misses, stats.cache_hits) == (3, 1, 2)
    assert len(stats.graphs) == 1 and stats.graphs[0]["calls"] == 3 and stats.graphs[0]["compiled"]
    assert "3 calls, 1 graphs compiled, cache 2 hits / 1 misses" in thunder.summary(jitted)


def test_new_shape_compiles_a_new_graph():
    jitted = thunder.jit(fn, dynamic=False)  # static shapes: a Dynamo graph per shape (test_symbolic_shapes.py: None)
    jitted(torch.randn(2, 3))
    x = torch.randn(4, 5)
    assert_same(jitted(x), fn(x))
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_misses, stats.cache_hits) == (2, 2, 0)
    assert [g["index"] for g in stats.graphs] == [0, 1]
    assert "graph 1:" in thunder.summary(jitted) and "cache 0 hits / 2 misses" in thunder.summary(jitted)
    assert "[4, 5]" in str(thunder.last_traces(jitted)[0]) and "[2, 3]" in str(thunder.last_traces(jitted, 0)[0])
    # Both shapes now hit.
    jitted(torch.randn(2, 3))
    jitted(torch.randn(4, 5))
    stats = thunder.compile_stats(jitted)
    assert (stats.cache_misses, stats.cache_hits, len(stats.graphs)) == (2, 2, 2)


def test_new_dtype_compiles_a_new_graph():
    jitted = thunder.jit(fn)
    jitted(torch.randn(2, 3))
    x = torch.randn(2, 3, dtype=torch.float64)
    out = jitted(x)
    assert out.dtype == torch.float64
    assert_same(out, fn(x))
    stats = thunder.compile_stats(jitted)
    assert (stats.cache_misses, len(stats.graphs)) == (2, 2)
    assert "f64[2, 3]" in str(thunder.last_traces(jitted)[0])
    jitted(torch.randn(2, 3, dtype=torch.float64))
    assert thunder.compile_stats(jitted).cache_hits == 1


def test_integer_and_bool_inputs_recompile_too():
    def g(x):
        return x * 2

    jitted = thunder.jit(g)
    for x in (torch.arange(4), torch.arange(4, dtype=torch.int32), torch.tensor([True, False]), torch.arange(4)):
        assert_same(jitted(x), g(x))
    stats = thunder.compile_stats(jitted)
    assert (stats.cache_misses, stats.cache_hits, len(stats.graphs)) == (3, 1, 3)


def test_module_recompiles_on_new_batch_shape():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    jitted = thunder.jit(model, dynamic=False)
    for batch in (3, 3, 5, 5, 3):
        x = torch.randn(batch, 4)
        assert_same(jitted(x), model(x))
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_misses, stats.cache_hits, len(stats.graphs)) == (5, 2, 3, 2)


def test_python_number_argument_is_part_of_the_guard():
    def scale(x, k):
        return x * k

    jitted = thunder.jit(scale)
    x = torch.randn(3)
    assert_same(jitted(x, 2), scale(x, 2))
    assert_same(jitted(x, 2), scale(x, 2))
    assert_same(jitted(x, 3), scale(x, 3))
    stats = thunder.compile_stats(jitted)
    assert stats.cache_hits >= 1
    assert stats.calls == 3


def test_recompilation_keeps_each_graphs_call_count():
    jitted = thunder.jit(fn, dynamic=False)
    a, b = torch.randn(2, 2), torch.randn(3, 3)
    for x in (a, a, b, a, b, b):
        jitted(x)
    stats = thunder.compile_stats(jitted)
    assert [g["calls"] for g in stats.graphs] == [3, 3]
    assert all(g["compile_seconds"] > 0 for g in stats.graphs)


# ---- when Dynamo stops compiling (a recompile limit, a skipped frame), thunder says so and counts the calls it ran
# uncompiled ----

def _stops(log):
    return [m for m in log if "Dynamo stopped compiling" in m]


def test_calls_past_the_recompile_limit_are_counted_uncompiled_and_warned_once():
    jitted = thunder.jit(lambda x: x.sin(), dynamic=False)  # static shapes only: one Dynamo graph per shape
    limit = 8  # Dynamo's default: 8 graphs, then 11 uncompiled calls
    with torch._dynamo.config.patch(recompile_limit=limit), capture_thunder_log() as log:
        for n in range(1, 20):
            x = torch.randn(n)
            torch.testing.assert_close(jitted(x), x.sin())
    stats = thunder.compile_stats(jitted)
    assert len(stats.graphs) == limit and stats.eager_calls == 19 - limit and stats.cache_hits == 0
    assert f"recompile_limit ({limit}) was reached" in stats.dynamo_stopped
    assert stats.cache_hits + stats.cache_misses + stats.eager_calls == stats.calls
    warnings = _stops(log)
    assert len(warnings) == 1 and "raise torch._dynamo.config.recompile_limit" in warnings[0], log
    assert "size mismatch" in warnings[0], "the warning names the last recompile's reason"
    report = thunder.summary(jitted)
    assert f"{19 - limit} calls ran UNCOMPILED" in report and "Dynamo stopped compiling" in report, report


def test_a_torch_compile_result_past_the_recompile_limit_is_warned_about():
    # torch.compile(backend="thunder") has no wrapper around its calls: the warning is made while Dynamo's own
    # wrapper runs (dynamo.torch_compile_state), and the summary says Dynamo stopped.
    def g(x):
        return x.sin() * 2

    compiled = torch.compile(g, backend="thunder", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=3), capture_thunder_log() as log:
        for n in range(1, 6):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x), g(x))
    warnings = _stops(log)
    assert len(warnings) == 1 and "compiling in torch.compile(" in warnings[0] and "dynamic=True" in warnings[0], log
    assert "recompile_limit (3) was reached" in thunder.compile_stats(compiled).dynamo_stopped
    assert "Dynamo stopped compiling" in thunder.summary(compiled)


def test_each_jitted_callable_object_past_the_limit_is_warned_about():
    # Dynamo names the frame of every callable object (and functools.partial) after its own wrapper, 'inner': the
    # second object past its limit was taken for the first, already warned about.
    class Scale:
        def __init__(self, factor):
            self.factor = factor

        def __call__(self, x):
            return x * self.factor

    with torch._dynamo.config.patch(recompile_limit=2), capture_thunder_log() as log:
        for jitted in (thunder.jit(Scale(2.0), dynamic=False), thunder.jit(Scale(3.0), dynamic=False)):
            for n in range(1, 5):
                jitted(torch.randn(n))
    assert len(_stops(log)) == 2, log


def test_a_dimension_marked_dynamic_that_the_code_specializes_is_warned_about_with_its_fix():
    # torch.compile raises ConstraintViolationError; thunder runs that call eagerly and says why. The warning named
    # an unrelated fix (dynamic=False).
    def g(x):
        return x * 2 if x.shape[0] == 4 else x + 1

    jitted = thunder.jit(g)
    with capture_thunder_log() as log:
        x = torch.randn(4, 3)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(jitted(x), g(x))
        for n in (4, 5):
            y = torch.randn(n, 3)
            torch.testing.assert_close(jitted(y), g(y))
    warnings = _stops(log)
    assert len(warnings) == 1 and "maybe_mark_dynamic" in warnings[0] and "That call ran uncompiled" in warnings[0]
    assert "mark_dynamic" in thunder.summary(jitted) or "Constraints violated" in thunder.summary(jitted)


def test_calls_whose_resumed_frame_is_past_the_limit_are_counted_partly_uncompiled():
    """After a graph break, the rest of the function is a frame of its own with its own recompile limit: once it is
    reached, calls run the first graph and the rest uncompiled. They were counted as plain cache hits."""
    def f(x, y):
        a = x * 2
        torch._dynamo.graph_break()
        return (a + y).sin()  # y's rank changes: the resumed frame recompiles

    jitted = thunder.jit(f, dynamic=False)
    x = torch.randn(4)
    with torch._dynamo.config.patch(recompile_limit=2), capture_thunder_log() as log:
        for rank in (1, 2, 3, 4, 1, 3, 1):
            y = torch.randn((4,) * rank)
            assert_same(jitted(x, y), f(x, y))
    stats = thunder.compile_stats(jitted)
    # ranks 1 and 2 compiled the resumed frame; ranks 3, 4 and 3 again ran it uncompiled.
    assert (stats.calls, stats.cache_misses, stats.cache_hits, stats.eager_calls) == (7, 2, 5, 0), stats
    assert stats.partly_uncompiled_calls == 3, stats
    assert "recompile_limit (2) was reached by 'torch_dynamo_resume_in_f" in stats.dynamo_stopped
    assert len(_stops(log)) == 1
    assert "3 calls ran part of the function UNCOMPILED" in thunder.summary(jitted).splitlines()[0]


def test_the_accumulated_recompile_limit_is_named_too():
    jitted = thunder.jit(lambda x: x.cos(), dynamic=False)
    with torch._dynamo.config.patch(accumulated_recompile_limit=2), capture_thunder_log() as log:
        for n in range(1, 5):
            jitted(torch.randn(n))
    stats = thunder.compile_stats(jitted)
    assert len(stats.graphs) == 2 and stats.eager_calls == 2
    assert "accumulated_recompile_limit (2) was reached" in stats.dynamo_stopped
    assert len(_stops(log)) == 1 and "torch._dynamo.config.accumulated_recompile_limit" in _stops(log)[0]


def print_in_a_loop(x):
    for i in range(2):
        x = x + 1
        print(end="")
    return x


def skips_itself(x):
    torch._dynamo.skip_frame()
    return x * 2


def test_a_skipped_frame_is_warned_once_and_its_calls_counted_uncompiled():
    for fn, fix in ((print_in_a_loop, "move it out of the loop"), (skips_itself, "skip_frame()` call")):
        jitted = thunder.jit(fn)
        with capture_thunder_log() as log:
            for _ in range(3):
                x = torch.randn(3)
                torch.testing.assert_close(jitted(x), fn(x))
        stats = thunder.compile_stats(jitted)
        assert (stats.calls, stats.eager_calls, stats.cache_hits, stats.cache_misses, stats.graphs) == (3, 3, 0, 0, [])
        assert f"Dynamo skipped the frame of '{fn.__name__}'" in stats.dynamo_stopped, stats.dynamo_stopped
        warnings = _stops(log)
        assert len(warnings) == 1 and fix in warnings[0] and "test_recompile.py" in warnings[0], log
        assert "3 calls ran UNCOMPILED" in str(jitted) and "whole frame runs eagerly" in str(jitted)
        # Once per function: another wrapper of it says nothing more.
        with capture_thunder_log() as log:
            thunder.jit(fn)(torch.randn(3))
        assert _stops(log) == []


def test_a_generator_function_is_warned_about_as_a_generator():
    """A jitted generator function's body runs as the generator is iterated, uncompiled: the reason said no tensor
    op ran, and its fix (a first call that computes with tensors) changed nothing."""
    def batches(x):
        for i in range(x.shape[0]):
            yield (x[i] * 2).sin()

    jitted, x = thunder.jit(batches), torch.randn(2, 4)
    with capture_thunder_log() as log:
        for _ in range(3):
            assert_same(list(jitted(x)), list(batches(x)))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 3 and "'batches' is a generator function" in stats.dynamo_stopped, stats
    warnings = _stops(log)
    assert len(warnings) == 1 and "the function that iterates the generator" in warnings[0], log


def test_a_torchscript_module_is_warned_about_as_running_uncompiled():
    """torch.jit.trace makes TorchScript of a module, which Dynamo runs as it is: every call of it ran uncompiled,
    silently."""
    x = torch.randn(2, 4)
    target = torch.jit.trace(nn.Linear(4, 4), x)
    jitted = thunder.jit(target)
    with capture_thunder_log() as log:
        for _ in range(3):
            assert_same(jitted(x), target(x))
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.eager_calls, stats.graphs) == (3, 3, []), stats
    assert "is TorchScript (torch.jit.trace or torch.jit.script)" in stats.dynamo_stopped, stats.dynamo_stopped
    warnings = _stops(log)
    assert len(warnings) == 1 and "the Python module or function it was made from" in warnings[0], log


def test_calls_whose_trace_fails_on_inputs_eager_runs_are_warned_once_and_counted_uncompiled():
    # Dynamo makes the float dynamic after its second value, and its fake-tensor pow fails for a negative base:
    # thunder runs those calls eagerly (right values), and says so once, with Dynamo's reason.
    def fn(x, a):
        return x * a + a ** 2

    jitted, x = thunder.jit(fn), torch.randn(3, 4)
    with capture_thunder_log() as log:
        for a in (0.5, 1.5, -1.0, -2.0):
            torch.testing.assert_close(jitted(x, a), fn(x, a))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 2, stats
    assert "Dynamo's trace of fn failed on inputs eager runs" in stats.dynamo_stopped, stats.dynamo_stopped
    warnings = _stops(log)
    assert len(warnings) == 1 and "dynamic=False" in warnings[0], log
    assert "2 calls ran UNCOMPILED" in str(jitted)


def _recurse(x, n):
    return x if n == 0 else _recurse(x.sin() + 1, n - 1)


def test_a_recursion_too_deep_for_dynamos_trace_is_warned_with_its_own_fix():
    # Eager recurses 100 deep within Python's limit; Dynamo's inlining of every call exceeds it. The hint named
    # dynamic=False, which fails the same way.
    jitted, x = thunder.jit(_recurse), torch.randn(3)
    with capture_thunder_log() as log:
        assert_same(jitted(x, 100), _recurse(x, 100))
    warnings = _stops(log)
    assert len(warnings) == 1 and "RecursionError" in warnings[0] and "sys.setrecursionlimit" in warnings[0], log
    assert "dynamic=False" not in warnings[0]


def test_graph_breaks_alone_do_not_count_as_uncompiled_calls():
    def f(x):
        x = x + 1
        torch._dynamo.graph_break()
        return x * 2

    jitted = thunder.jit(f)
    with capture_thunder_log() as log:
        for _ in range(3):
            jitted(torch.randn(3))
    stats = thunder.compile_stats(jitted)
    assert (stats.cache_misses, stats.cache_hits, stats.eager_calls, stats.dynamo_stopped) == (1, 2, 0, "")
    assert _stops(log) == []


def test_calls_whose_cached_code_runs_no_graph_are_counted_uncompiled_not_as_hits():
    """BatchNorm with momentum=None breaks the graph before any op (float(num_batches_tracked)) and captures
    nothing: the fast path's calls of Dynamo's cached code ran no graph, and were counted as cache hits while the
    summary said that every call ran eagerly."""
    model = torch.nn.BatchNorm1d(4, momentum=None)
    jitted = thunder.jit(model)
    for _ in range(4):
        jitted(torch.randn(8, 4))
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_hits, stats.cache_misses, stats.eager_calls) == (4, 0, 0, 4), stats
    assert "cache 0 hits / 0 misses, 4 calls ran UNCOMPILED" in thunder.summary(jitted)


def test_a_call_that_runs_no_op_does_not_stop_later_calls_compiling():
    """An empty batch returned as it came runs no tensor op: Dynamo skipped such a frame's code from then on, so every
    later call (any shape) ran uncompiled, silently. Dynamo now makes it an empty graph, guarded, which runs as it is
    (that call alone is counted uncompiled: no graph ran), and later shapes compile."""
    f = lambda x: x.softmax(-1) * 2 if x.shape[0] else x  # noqa: E731
    jitted = thunder.jit(f)
    with capture_thunder_log() as log:
        for n in (4, 0, 5, 6, 7):
            x = torch.randn(n, 3)
            assert_same(jitted(x), f(x))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 1 and stats.cache_hits + stats.cache_misses == 4 and not stats.dynamo_stopped, stats
    assert _stops(log) == []


def test_a_function_that_runs_no_op_is_not_said_to_be_skipped():
    """Calls that run no tensor op have empty graphs, which keep Dynamo compiling the code: no warning that Dynamo
    skips it, and a later call that computes compiles."""
    def g(x, n):
        return x if n == 0 else x * n

    jitted = thunder.jit(g)
    with capture_thunder_log() as log:
        for n in (0, 0, 2):
            assert_same(jitted(torch.ones(2), n), g(torch.ones(2), n))
    assert _stops(log) == [] and len(thunder.compile_stats(jitted).graphs) == 1
    noop = thunder.jit(lambda x: x)
    for _ in range(2):
        noop(torch.ones(2))
    assert "the calls ran no tensor op" in thunder.summary(noop)


def test_calls_that_raise_are_counted_and_not_called_eager():
    """A call that raises is neither a hit, a miss nor an uncompiled call; the summary said "every call ran
    eagerly" when the only call had raised."""
    def f(x):
        return x.view(5) * 2

    jitted = thunder.jit(f)
    with pytest.raises(RuntimeError):
        jitted(torch.randn(3))
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_hits, stats.cache_misses, stats.eager_calls) == (1, 0, 0, 0), stats
    report = thunder.summary(jitted)
    assert "1 calls raised" in report and "ran eagerly" not in report, report


def test_a_call_whose_code_raises_does_not_stop_compiling_the_function():
    """Dynamo reports the frame of a call that raised as a skipped frame ("Observed exception"): thunder warned that
    the frame "runs uncompiled, eagerly, on every call" and listed a graph break, while later calls ran compiled."""
    def maybe(x, n):
        if n > 2:
            raise KeyError("n")
        return x * n

    x = torch.tensor([1.0, -2.0, 3.0])
    jitted = thunder.jit(maybe)
    with capture_thunder_log() as messages:
        jitted(x, 1)
        with pytest.raises(KeyError):
            jitted(x, 5)
        assert torch.equal(jitted(x, 1), x)
    stats = thunder.compile_stats(jitted)
    assert not [m for m in messages if "Dynamo stopped" in m] and not stats.graph_breaks and not stats.dynamo_stopped
    assert (stats.cache_hits, stats.eager_calls, stats.calls) == (1, 0, 3), stats


def test_a_first_call_inside_torch_func_is_said_to_stop_compiling():
    """A first call inside torch.func.grad makes Dynamo skip the code for good (as with torch.compile); the reason
    given was that the call computed nothing with tensors."""
    def fn(x):
        return (x.sin() * x).sum()

    jitted, x = thunder.jit(fn), torch.randn(3)
    assert_same(torch.func.grad(jitted)(x), x.cos() * x + x.sin())
    jitted(x)
    stopped = thunder.compile_stats(jitted).dynamo_stopped
    assert "torch.func transform" in stopped and "nothing to compile" not in stopped


def test_a_later_call_inside_torch_func_is_said_to_stop_compiling():
    # After a compiled call, one call inside torch.vmap: Dynamo compiles nothing more for the code, and calls at new
    # shapes ran uncompiled with no word of why.
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    jitted = thunder.jit(model)
    jitted(torch.randn(3, 4))
    with capture_thunder_log() as log:
        torch.vmap(jitted)(torch.randn(3, 4))
        jitted(torch.randn(5, 4))
    stats = thunder.compile_stats(jitted)
    assert "torch.func transform" in stats.dynamo_stopped and stats.eager_calls >= 1
    assert len(_stops(log)) == 1, log


def _shift_after_break(a):
    if a.any():  # a graph break: the shift is traced in the frame Dynamo resumes after it
        return a << 1
    return a * 1


@pytest.mark.parametrize("silenced", [False, True])
def test_a_resumed_frame_whose_trace_fails_runs_eagerly_and_says_so_once(silenced):
    # Dynamo's fake-tensor lshift refuses a bool tensor that eager shifts. The failure in the frame resumed after a
    # graph break (its first frame already ran a graph) reached the user as TorchRuntimeError; that frame now runs
    # eagerly (from then on: Dynamo skips its code), also where the user's logging leaves out Dynamo's warnings.
    import logging

    torch_log = logging.getLogger("torch")
    level = torch_log.level
    if silenced:
        torch_log.setLevel(logging.CRITICAL)
    try:
        jitted = thunder.jit(_shift_after_break)
        with capture_thunder_log() as log:
            for a in ([False, False], [True, False], [True, True], [False, True]):
                a = torch.tensor(a)
                assert_same(jitted(a), _shift_after_break(a))
    finally:
        torch_log.setLevel(level)
    stats = thunder.compile_stats(jitted)
    assert "Dynamo's trace of _shift_after_break after a graph break" in stats.dynamo_stopped, stats.dynamo_stopped
    assert len(_stops(log)) <= 1, log  # once per function and process (another parameter may have said it)


def _shape_error_after_break(x, y):
    torch._dynamo.graph_break()
    return x * 2 + y


def _shape_error(x, y):
    return x * 2 + y


@pytest.mark.parametrize("fn", [_shape_error_after_break, _shape_error], ids=["resumed_frame", "own_frame"])
@pytest.mark.parametrize("logging_disabled", [False, True], ids=["logging", "logging_disabled"])
def test_a_shape_error_raises_eagers_error_and_later_calls_compile(fn, logging_disabled):
    # The frame whose trace fails runs eagerly and raises eager's error (in a resumed frame it was Dynamo's
    # TorchRuntimeError). Dynamo skips such a frame's code from then on: the call that raised compiles the function
    # again, so later calls compile -- also where logging.disable drops Dynamo's warning before thunder's filter,
    # where Dynamo's errors are raised as they come (a resumed frame's is Dynamo's TorchRuntimeError).
    import logging

    jitted = thunder.jit(fn)
    with pytest.raises(RuntimeError) as eager:
        fn(torch.ones(2), torch.ones(3))
    if logging_disabled:
        logging.disable(logging.WARNING)
    try:
        with pytest.raises(RuntimeError) as jit_error:
            jitted(torch.ones(2), torch.ones(3))
    finally:
        logging.disable(logging.NOTSET)
    if not (logging_disabled and fn is _shape_error_after_break):
        assert type(jit_error.value) is RuntimeError and str(jit_error.value) == str(eager.value)
    for n in (2, 4):
        good = (torch.ones(n), torch.ones(n))
        assert_same(jitted(*good), fn(*good))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 0 and stats.graphs, (stats.eager_calls, stats.dynamo_stopped)
