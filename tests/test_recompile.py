"""Recompilation: a new shape or dtype compiles a new graph (a cache miss); the
same shape and dtype reuse the compiled one (a cache hit)."""
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
    jitted = thunder.jit(fn)
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
    jitted = thunder.jit(model)
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
    jitted = thunder.jit(fn)
    a, b = torch.randn(2, 2), torch.randn(3, 3)
    for x in (a, a, b, a, b, b):
        jitted(x)
    stats = thunder.compile_stats(jitted)
    assert [g["calls"] for g in stats.graphs] == [3, 3]
    assert all(g["compile_seconds"] > 0 for g in stats.graphs)


# ---- when Dynamo stops compiling (a recompile limit), thunder says so and counts the calls it ran uncompiled ----

def test_calls_past_the_recompile_limit_are_counted_uncompiled_and_warned_once():
    jitted = thunder.jit(lambda x: x.sin())
    with torch._dynamo.config.patch(recompile_limit=2), capture_thunder_log() as log:
        for n in range(1, 6):
            x = torch.randn(n)
            torch.testing.assert_close(jitted(x), x.sin())
    stats = thunder.compile_stats(jitted)
    assert len(stats.graphs) == 2 and stats.eager_calls == 3 and "recompile_limit (2) was reached" in stats.dynamo_stopped
    assert stats.cache_hits + stats.cache_misses + stats.eager_calls == stats.calls
    warnings = [m for m in log if "Dynamo stopped compiling" in m]
    assert len(warnings) == 1 and "raise torch._dynamo.config.recompile_limit" in warnings[0], log
    report = thunder.summary(jitted)
    assert "calls ran UNCOMPILED" in report and "Dynamo stopped compiling this function" in report, report


def test_a_wrapper_past_the_shared_recompile_limit_says_why_it_compiled_nothing():
    def f(x):
        return x.cos() + 1

    x = torch.randn(4)
    with torch._dynamo.config.patch(recompile_limit=2), capture_thunder_log() as log:
        wrappers = [thunder.jit(f) for _ in range(4)]
        for w in wrappers:
            torch.testing.assert_close(w(x), f(x))
    last = thunder.compile_stats(wrappers[-1])
    assert last.graphs == [] and last.eager_calls == 1 and "recompile_limit (2) was reached" in last.dynamo_stopped
    assert len([m for m in log if "Dynamo stopped compiling" in m]) == 1, log
    assert "see why above" in str(wrappers[-1])
