"""Each thunder.jit wrapper is independent: it compiles its own copy of the code (thunder.frontend.code_copies), so
it has its own Dynamo cache and recompile limits -- the 9th wrapper of one function, or the 9th jitted instance
of one module class, compiles like the first -- and a wrapper that is collected releases what it compiled."""
import gc
import weakref

import pytest
import torch
import torch.nn as nn

import thunder
from conftest import assert_same, capture_thunder_log
from thunder.frontend.fast_path import cache_entries
from thunder.jit import _ISOLATE

WRAPPERS = 12  # more than Dynamo's default recompile_limit (8), which all wrappers of one code object used to share


def scaled_sin(x):
    return (x * 2).sin() + 1


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)) + x


def _all_compiled(jitted, calls):
    stats = thunder.compile_stats(jitted)
    return (len(stats.graphs), all(g["compiled"] for g in stats.graphs), stats.eager_calls, stats.cache_hits,
            stats.dynamo_stopped) == (1, True, 0, calls - 1, "")


def test_twelve_wrappers_of_one_function_all_compile():
    x = torch.randn(3, 4)
    with capture_thunder_log() as log:
        wrappers = [thunder.jit(scaled_sin) for _ in range(WRAPPERS)]
        for w in wrappers:
            assert_same(w(x), scaled_sin(x))
            assert_same(w(x), scaled_sin(x))
    assert all(_all_compiled(w, 2) for w in wrappers), [str(w) for w in wrappers if not _all_compiled(w, 2)][:1]
    assert not [m for m in log if "Dynamo stopped" in m], log
    assert cache_entries(scaled_sin.__code__) == [], "the user's function itself is never compiled"


@pytest.mark.parametrize("make", [Block, lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU())],
                         ids=["user_class", "torch_class"])
def test_twelve_jitted_instances_of_one_module_class_all_compile(make):
    x = torch.randn(3, 4)
    models = [make() for _ in range(WRAPPERS)]
    jitted = [thunder.jit(m) for m in models]
    for m, j in zip(models, jitted):
        assert_same(j(x), m(x))
        assert_same(j(x), m(x))
    assert all(_all_compiled(j, 2) for j in jitted), [str(j) for j in jitted if not _all_compiled(j, 2)][:1]
    assert all(type(m) is type(models[0]) for m in models) and "forward" not in models[0].__dict__, \
        "the user's modules and class are not modified"


def test_jitted_bound_methods_of_twelve_instances_all_compile():
    blocks = [Block() for _ in range(WRAPPERS)]
    x = torch.randn(3, 4)
    jitted = [thunder.jit(b.forward) for b in blocks]
    for b, j in zip(blocks, jitted):
        assert_same(j(x), b(x))
        assert_same(j(x), b(x))
    assert all(_all_compiled(j, 2) for j in jitted)


def test_each_wrapper_has_its_own_recompile_limit():
    first, second = thunder.jit(scaled_sin, dynamic=False), thunder.jit(scaled_sin, dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2), capture_thunder_log():
        for n in range(1, 5):
            first(torch.randn(n))
        for n in range(1, 3):
            second(torch.randn(n))
    assert thunder.compile_stats(first).eager_calls == 2
    stats = thunder.compile_stats(second)
    assert (len(stats.graphs), stats.eager_calls, stats.dynamo_stopped) == (2, 0, "")


def add_one_then_break(x):
    x = x + 1
    torch._dynamo.graph_break()
    return x * 2


def calls_a_breaking_helper(x):
    return add_one_then_break(x).sin()


@pytest.mark.skipif(not _ISOLATE, reason="torch.compile has no isolate_recompiles")
def test_a_graph_break_in_a_callee_compiles_in_every_wrapper():
    """The callee's frames are compiled on the callee's code, which the wrappers share: isolate_recompiles keeps
    each wrapper's entries, and limits, apart."""
    x = torch.randn(4)
    wrappers = [thunder.jit(calls_a_breaking_helper) for _ in range(WRAPPERS)]
    for w in wrappers:
        assert_same(w(x), calls_a_breaking_helper(x))
        w(x)
    counts = {(len(thunder.compile_stats(w).graphs), thunder.compile_stats(w).eager_calls) for w in wrappers}
    assert len(counts) == 1 and counts.pop()[1] == 0


def _compiled_fn_globals():
    return sum(name.startswith("__compiled_fn") for name in globals())


@pytest.mark.parametrize("make", [lambda: scaled_sin, Block, lambda: nn.Sequential(nn.Linear(4, 4))],
                         ids=["function", "user_module", "torch_module"])
def test_a_collected_wrapper_releases_its_cache_entries(make):
    gc.collect()  # earlier tests' wrappers
    before = _compiled_fn_globals()
    jitted = thunder.jit(make())
    x = torch.randn(3, 4)
    jitted(x), jitted(x)
    code, region = jitted._thunder_code, jitted._thunder_region
    state, graph = weakref.ref(jitted._thunder_state), weakref.ref(jitted._thunder_state.graphs[0])
    backend = weakref.ref(jitted._thunder_backend)
    entries = cache_entries(code, region)
    assert len(entries) == 1
    guards = weakref.ref(entries[0].guard_manager)
    del jitted, entries
    gc.collect()
    assert state() is None and graph() is None, "the wrapper's state and compiled graphs are freed"
    assert cache_entries(code, region) == [], "its cache entries are dropped"
    assert _compiled_fn_globals() == before, "and the compiled graphs Dynamo installed as globals with them"
    # Dynamo's finalizers on the objects its guards match by identity (nn.Linear, torch._C._nn.linear) held the
    # guards, and torch.compile's wrapper of the backend stayed among Dynamo's backends: ~250 KB per wrapper.
    assert guards() is None, "the guards are freed (code_copies._detach_guard_finalizers)"
    assert backend() is None, "the backend is freed (dropped from torch._dynamo.eval_frame.cached_backends)"


def test_a_model_dropped_with_its_wrapper_is_freed():
    """The class of the module thunder compiles held the model (its __hash__ and __eq__), and Dynamo keeps the
    classes it saw: every model jitted and called stayed alive, with its parameters."""
    def jitted_and_called():
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        jitted = thunder.jit(model)
        with torch.no_grad():
            jitted(torch.randn(2, 4))
        return weakref.ref(model), weakref.ref(jitted)

    refs = [jitted_and_called() for _ in range(3)]
    gc.collect()
    assert all(model() is None and jitted() is None for model, jitted in refs)


def test_a_module_whose_class_cannot_be_subclassed_is_compiled_as_it_is():
    class Final(nn.Module):
        def __init_subclass__(cls, **kwargs):
            raise TypeError("final")

        def forward(self, x):
            return x * 3

    model = Final()
    jitted = thunder.jit(model)
    x = torch.randn(2)
    assert_same(jitted(x), model(x))
    assert_same(jitted(x), model(x))
    assert thunder.compile_stats(jitted).cache_hits == 1


def test_a_module_with_forward_set_on_the_instance_runs_it():
    model = Block()
    model.forward = lambda x: model.fc(x) * 2  # an instance attribute wins over the class's forward, as in eager
    jitted = thunder.jit(model)
    x = torch.randn(3, 4)
    assert_same(jitted(x), model(x))
    assert_same(jitted(x), model(x))
    assert thunder.compile_stats(jitted).cache_hits == 1


def test_a_jitted_function_called_inside_another_compile_is_traced_as_the_original():
    """A thunder.jit result called from code another thunder.jit (or torch.compile) traces is inlined there, as a
    nested torch.compile is: one graph, compiled once -- it used to break the outer graph and recompile at every
    call (Dynamo traced the inner wrapper's call counters)."""
    inner = thunder.jit(scaled_sin)
    block = Block()
    inner_module = thunder.jit(block)

    def outer(x):
        return inner(x) * inner_module(x)

    jitted = thunder.jit(outer)
    x = torch.randn(3, 4)
    inner_module(x), inner_module(x)  # the inner module has compiled code and a fast path of its own
    for _ in range(4):
        assert_same(jitted(x), scaled_sin(x) * block(x), 1e-6, 1e-6)
    stats = thunder.compile_stats(jitted)
    assert (stats.cache_misses, stats.cache_hits, len(stats.graphs), stats.graph_breaks) == (1, 3, 1, [])
    assert thunder.compile_stats(inner).calls == 0, "the inner wrapper itself never ran"
    assert thunder.compile_stats(inner_module).calls == 2
    passed = thunder.jit(lambda x, module: module(x) + 1)  # a jitted module passed as an argument
    for _ in range(3):
        assert_same(passed(x, inner_module), block(x) + 1)
    assert thunder.compile_stats(passed).graph_breaks == [] and len(thunder.compile_stats(passed).graphs) == 1
    inductor = torch.compile(outer, backend="inductor")
    assert_same(inductor(x), scaled_sin(x) * block(x), 1e-5, 1e-5)


def test_hooks_on_a_jitted_module_run_where_another_compile_inlines_it():
    linear = nn.Linear(4, 4)
    jitted = thunder.jit(linear)
    jitted.register_forward_pre_hook(lambda module, args: (args[0] + 1,))
    jitted.register_forward_hook(lambda module, args, out: out * 10)
    x = torch.randn(2, 4)
    expected = (linear(x + 1) * 10).relu()
    assert_same(jitted(x).relu(), expected)
    for outer in (thunder.jit(lambda x: jitted(x).relu()), thunder.jit(nn.Sequential(jitted, nn.ReLU()))):
        assert_same(outer(x), expected)
        assert_same(outer(x), expected)


def test_a_class_attribute_written_in_forward_reaches_the_users_class():
    """`type(self).calls += 1` in forward wrote the private subclass's attribute: the user's class never changed."""
    class Counted(nn.Module):
        calls = 0

        def forward(self, x):
            type(self).calls += 1
            self.__class__.last = 1.0
            return x * 2

    jitted = thunder.jit(Counted())
    for _ in range(3):
        jitted(torch.ones(2))
    assert Counted.calls == 3 and Counted.last == 1.0
