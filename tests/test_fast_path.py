"""The fast path: a function Dynamo captured whole is called through its cache entry's guard check,
without Dynamo's frame handling. It must behave exactly like a call through torch.compile."""
import torch

import thunder

counter = 0
scale = 2.0


def _fast_entries(jitted):
    return len(jitted._fast_path.entries)


def test_hits_skip_dynamo_and_count():
    def f(a, b):
        return (a + b).sin()

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    jitted = thunder.jit(f)
    torch.testing.assert_close(jitted(a, b), f(a, b))
    assert _fast_entries(jitted) == 1
    torch.testing.assert_close(jitted(b, a), f(b, a))
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_misses, stats.cache_hits) == (2, 1, 1)
    assert stats.graphs[0]["calls"] == 2


def test_guard_failures_recompile():
    def f(a):
        return a * 2 + 1

    jitted = thunder.jit(f)
    for x in (torch.randn(4), torch.randn(5), torch.randn(4).double(), torch.randn(8)[::2], torch.arange(4)):
        out = jitted(x)
        assert out.dtype == f(x).dtype
        torch.testing.assert_close(out, f(x))
    stats = thunder.compile_stats(jitted)
    assert stats.cache_misses >= 4 and _fast_entries(jitted) == stats.cache_misses


def test_grad_mode_is_guarded():
    def f(a):
        return a.exp() * 3

    x = torch.randn(4, requires_grad=True)
    jitted = thunder.jit(f)
    with torch.no_grad():
        assert not jitted(x).requires_grad
    out = jitted(x)
    assert out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(x.grad, x.exp().detach() * 3)


def test_global_reads_and_writes():
    def f(a):
        global counter
        counter += 1
        return a * scale

    global scale
    jitted = thunder.jit(f)
    x = torch.ones(2)
    before = counter
    torch.testing.assert_close(jitted(x), x * 2)
    torch.testing.assert_close(jitted(x), x * 2)
    scale = 3.0
    try:
        torch.testing.assert_close(jitted(x), x * 3)
    finally:
        scale = 2.0
    assert counter == before + 3


def test_closure_and_side_effects():
    log = []
    w = torch.randn(3)

    def f(a):
        log.append(1)
        return a * w

    jitted = thunder.jit(f)
    x = torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), x * w)
    assert log == [1, 1, 1]


def test_an_emptied_closure_cell_raises_like_eager():
    w = torch.randn(3)

    def f(a):
        return a * w

    jitted = thunder.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jitted(x), x * w)
    torch.testing.assert_close(jitted(x), x * w)  # through the fast path
    del w
    try:
        jitted(x)
    except NameError:
        pass
    else:
        raise AssertionError("a call reading an unbound closure variable must raise NameError, as eager does")


def test_graph_breaks_and_keywords_take_the_slow_path():
    def f(a, b=1.0):
        a = a + b
        print("graph break")
        return a * 2

    jitted = thunder.jit(f)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), f(x))
        torch.testing.assert_close(jitted(x, b=2.0), f(x, b=2.0))
    assert _fast_entries(jitted) == 0


def test_two_jits_of_one_function_keep_their_own_entries():
    def f(a):
        return a + 1

    x = torch.randn(2)
    first = thunder.jit(f)
    second = thunder.jit(f, executors=thunder.executors.executor_sets()["torch"])
    first(x), second(x), first(x), second(x)
    assert thunder.compile_stats(first).graphs[0]["calls"] == 2
    assert thunder.compile_stats(second).graphs[0]["calls"] == 2


def test_a_converted_branch_calls_the_graph_without_dynamos_wrappers():
    # The rewritten function keeps its arms' code objects among the transformed code's constants; the
    # transformed code makes no function of them, so the graph is called without Dynamo's disable() wrapper.
    def f(x):
        if x.sum() > 0:
            y = x * 2
        else:
            y = x - 1
        return y

    jitted = thunder.jit(f)
    for x in (torch.ones(3), -torch.ones(3)):
        torch.testing.assert_close(jitted(x), f(x))
    (_, run), = jitted._fast_path.entries
    graph = [run.__globals__[n] for n in run.__code__.co_names if n.startswith("__compiled_fn")]
    assert graph and not hasattr(graph[0], "__wrapped__")
    assert thunder.compile_stats(jitted).cache_hits == 1
