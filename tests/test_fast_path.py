"""The fast path: a function Dynamo captured whole is called through its cache entry's guard check,
without Dynamo's frame handling; so is a jitted module's, without nn.Module.__call__ either. It must behave exactly
like a call through torch.compile."""
import collections
import dis
import warnings
import pytest
import torch
import torch.nn as nn

import thunder
from thunder.frontend import fast_path
from thunder.jit import _ISOLATE

counter = 0
scale = 2.0


def _fast_entries(jitted):
    return len(jitted._thunder_fast_path.entries)


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
    (_, run, _), = jitted._thunder_fast_path.entries
    graph = [run.__globals__[n] for n in run.__code__.co_names if n.startswith("__compiled_fn")]
    assert graph and not hasattr(graph[0], "__wrapped__")
    assert thunder.compile_stats(jitted).cache_hits == 1


def test_varargs_functions_take_the_fast_path():
    def f(a, *rest):
        return a + sum(rest)

    jitted = thunder.jit(f)
    x, y = torch.randn(3), torch.randn(3)
    for args in ((x, y, y), (x, y, y), (x, y), (x,)):
        torch.testing.assert_close(jitted(*args), f(*args))
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.cache_hits, stats.cache_misses) == (4, 1, 3) and _fast_entries(jitted) == 3


# ---- modules: nn.Module.__call__ and torch.compile's frame handling skipped; guards as complete as Dynamo's ----

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Regularized(nn.Module):
    """Reads its training flag (dropout) and writes its buffers (batch norm's running statistics in training)."""

    def __init__(self):
        super().__init__()
        self.fc, self.norm, self.drop = nn.Linear(6, 6), nn.BatchNorm1d(6), nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.norm(self.fc(x)))


def _module_calls(jitted):
    s = thunder.compile_stats(jitted)
    return s.calls, s.cache_hits, s.cache_misses


def test_module_calls_take_the_fast_path(monkeypatch):
    model = MLP()
    jitted = thunder.jit(model)
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), model(x))
        assert _fast_entries(jitted) == 1
        expected = model(x)
        monkeypatch.setattr(nn.Module, "_call_impl", None)  # a hit never enters nn.Module.__call__
        torch.testing.assert_close(jitted(x), expected)
    assert _module_calls(jitted) == (2, 1, 1)


def test_module_guards_parameters_and_grad_mode():
    model = MLP()
    jitted = thunder.jit(model)
    x = torch.randn(5, 8)
    with torch.no_grad():
        jitted(x)
        model.fc1.weight.mul_(2)  # new values, same tensor: the compiled program reads them
        torch.testing.assert_close(jitted(x), model(x))
        model.fc2.weight = nn.Parameter(torch.randn(16, 16))  # a new tensor of the same kind: read too
        torch.testing.assert_close(jitted(x), model(x))
    assert _module_calls(jitted) == (3, 2, 1)
    out = jitted(x)  # grad mode on: a guard fails, Dynamo recompiles
    assert out.requires_grad
    out.sum().backward()
    assert model.fc1.weight.grad is not None
    model.fc3.weight.requires_grad_(False)  # requires_grad is guarded
    with torch.no_grad():
        model.fc1.bias = nn.Parameter(torch.randn(16, dtype=torch.float64))  # and dtype (eager raises too)
        with pytest.raises(RuntimeError):
            model(x)
        with pytest.raises(RuntimeError):
            jitted(x)
    assert len(thunder.compile_stats(jitted).graphs) == 3


def test_module_guards_the_training_flag_and_writes_buffers():
    torch.manual_seed(0)
    model, reference = Regularized(), Regularized()
    reference.load_state_dict(model.state_dict())
    jitted = thunder.jit(model)
    x = torch.randn(4, 6)
    for _ in range(3):  # training: batch statistics, running statistics updated on every call
        jitted(x), reference(x)
    torch.testing.assert_close(model.norm.running_mean, reference.norm.running_mean)
    assert model.norm.num_batches_tracked.item() == 3
    jitted.eval(), reference.eval()
    for _ in range(2):
        torch.testing.assert_close(jitted(x), reference(x))  # no dropout, running statistics
    torch.testing.assert_close(model.norm.running_var, reference.norm.running_var)
    jitted.train()
    out = jitted(x)
    assert (out == 0).any(), "dropout is on again"
    assert _module_calls(jitted)[1] >= 3 and _module_calls(jitted)[2] == 2


def test_hooks_take_the_ordinary_path():
    model = MLP()
    jitted = thunder.jit(model)
    x = torch.randn(5, 8)
    jitted(x), jitted(x)
    seen = []
    for owner in (model, jitted):
        handle = owner.register_forward_hook(lambda m, args, out: seen.append(type(m).__name__))
        jitted(x)
        handle.remove()
        handle = owner.register_forward_pre_hook(lambda m, args: seen.append("pre"))
        jitted(x)
        handle.remove()
    assert seen == ["MLP", "pre", "ThunderModule", "pre"], seen
    # A global hook fires once per module called, as in eager: not for the wrapper or torch.compile's
    # OptimizedModule too (a hook returning a changed output applied it three times).
    calls = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, args, out: calls.append(type(m).__name__))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jitted(x)
        # nor torch.compile's warning that global hooks fire for its OptimizedModule too
        assert not [w for w in caught if "global hooks" in str(w.message)]
        got, calls[:] = list(calls), []
        model(x)
    finally:
        handle.remove()
    assert got == calls and "ThunderModule" not in got, (got, calls)
    jitted(x)
    assert _module_calls(jitted)[0] == 8


def test_a_global_module_hook_registered_or_removed_after_compiling_is_followed():
    """Dynamo inlines global module hooks into the compiled code without guarding on them: a hook registered after
    the first call never ran, and one removed kept running (on the fast path too). The wrapper compiles again."""
    model = nn.Linear(3, 3)
    jitted = thunder.jit(lambda x: model(x) * 2)
    x = torch.randn(2, 3)
    plain = jitted(x)
    handle = nn.modules.module.register_module_forward_hook(lambda m, args, out: out + 1)
    try:
        torch.testing.assert_close(jitted(x), plain + 2)
    finally:
        handle.remove()
    for _ in range(2):
        torch.testing.assert_close(jitted(x), plain)


def test_a_global_module_hook_fires_once_for_a_jitted_module_called_inside_a_compiled_function():
    """Traced by an enclosing compile, the jitted module's own nn.Module call ran the global hooks for it too."""
    model = nn.Linear(3, 3)
    inner = thunder.jit(model)
    outer = thunder.jit(lambda t: inner(t) * 2)
    x = torch.randn(2, 3)
    calls = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, args, out: calls.append(type(m).__name__) or
                                                            out + 1)
    try:
        got = outer(x)
        torch.testing.assert_close(got, model(x) * 2)  # eager's model(x) runs the hook (+ 1) once too
        assert calls == ["Linear", "Linear"], calls  # once in the compiled call, once in eager's
    finally:
        handle.remove()


# ---- the private Dynamo names the fast path reads: pinned here, so that a torch that changed them fails loudly ----

def test_the_private_dynamo_names_the_fast_path_reads_are_there():
    problem = fast_path.api_problem()
    assert problem == "", f"torch {torch.__version__} changed {problem}: the fast path is off (see fast_path.py)"
    model = MLP()
    for jitted in (thunder.jit(lambda a: a * 2), thunder.jit(model)):
        with torch.no_grad():
            jitted(torch.randn(5, 8))
        assert _fast_entries(jitted) == 1, "no cache entry of this wrapper's backend found: the entries' " \
            "backend.compiler_fn or the isolate_recompiles region (_isolate_recompiles_id) changed"
        _, run, direct = jitted._thunder_fast_path.entries[0]
        assert direct is not None, "Dynamo's transformed code is no longer read as a direct call of the graph " \
            f"(fast_path.direct_form): {list(dis.get_instructions(run.__code__))}"
        names = run.__code__.co_names
        compiled = [n for n in names if n.startswith("__compiled_fn")]
        assert len(compiled) == 1, f"Dynamo's transformed code names its graph otherwise: {names}"
        assert not hasattr(run.__globals__[compiled[0]], "__wrapped__"), \
            "the graph's callable is no longer unwrapped from Dynamo's disable() wrapper"
        assert not any(n.startswith("__resume_at") for n in names)
        timing = [n for n in names if n.startswith("__import_torch_dot__dynamo_dot_utils")]
        assert all(isinstance(run.__globals__[n], fast_path._WithoutBytecodeTiming) for n in timing)
    if _ISOLATE:
        assert jitted._thunder_region >= 0, "torch.compile's result no longer exposes its isolate_recompiles region"


def test_without_the_private_names_every_call_takes_the_ordinary_path(monkeypatch):
    monkeypatch.delattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list")
    monkeypatch.setattr(fast_path, "_problem", None)
    model = MLP()
    jitted, jitted_fn = thunder.jit(model), thunder.jit(lambda a: a.cos())
    x = torch.randn(5, 8)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), model(x))
        torch.testing.assert_close(jitted_fn(x), x.cos())
    assert fast_path.api_problem() == "torch._dynamo.eval_frame._debug_get_cache_entry_list"
    assert _fast_entries(jitted) == 0 and _fast_entries(jitted_fn) == 0
    assert _module_calls(jitted) == (3, 2, 1) and _module_calls(jitted_fn) == (3, 2, 1)
    monkeypatch.setattr(fast_path, "_problem", None)


def test_cache_entries_of_another_shape_turn_the_fast_path_off(monkeypatch):
    monkeypatch.setattr(fast_path, "cache_entries", lambda code, region=-1: [object()])
    jitted = thunder.jit(lambda a: a.exp())
    x = torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), x.exp())
    assert not jitted._thunder_fast_path.enabled and _module_calls(jitted) == (3, 2, 1)


def _structures(a, b):
    return {"sum": a + b, "pair": [a * b, (b - a, None)], "input": a, "n": 3}


def _constant_and_input(a, b):
    return (a.sin(), b, "text", True)


_SEEN = []


def _side_effect(a, b):
    _SEEN.append(1)  # Dynamo replays the append after the graph: that code runs as it is
    return a + b


@pytest.mark.parametrize("fn", [lambda a, b: a + b, _structures, _constant_and_input, _side_effect],
                         ids=["one", "structures", "constant_and_input", "side_effect"])
def test_the_graph_is_called_directly_where_dynamos_code_only_returns_its_outputs(fn):
    """Dynamo's transformed code calls the graph and builds the result (0.3 us a call); where it does nothing else
    (fast_path.direct_form reads its bytecode), the fast path calls the graph and builds the result itself: the
    same values in the same containers, inputs returned as themselves. Code that does more runs as it is."""
    a, b = torch.randn(3), torch.randn(3)
    jitted = thunder.jit(fn)
    for _ in range(3):
        expected, actual = fn(a, b), jitted(a, b)
        assert type(actual) is type(expected)
        flat_e, spec_e = torch.utils._pytree.tree_flatten(expected)
        flat_a, spec_a = torch.utils._pytree.tree_flatten(actual)
        assert spec_a == spec_e
        for x, y in zip(flat_a, flat_e):
            if isinstance(y, torch.Tensor):
                torch.testing.assert_close(x, y)
                assert (x is a) == (y is a) and (x is b) == (y is b)
            else:
                assert x == y
    directs = [direct for _, _, direct in jitted._thunder_fast_path.entries]
    assert directs and all((direct is None) == (fn is _side_effect) for direct in directs)
    # thunder's graph is called without its run wrapper, counted as that wrapper counts
    assert all(isinstance(direct[0], tuple) for direct in directs if direct is not None)
    stats = thunder.compile_stats(jitted)
    assert stats.calls == 3 and stats.eager_calls == 0 and stats.cache_hits + stats.cache_misses == 3
    assert sum(g["calls"] for g in stats.graphs) == 3 and jitted._thunder_state.graph_calls == 3


def test_a_call_that_raises_on_the_fast_path_is_counted():
    """The fast path counts a call that raises as the ordinary path does: a call, and a raised one."""
    jitted = thunder.jit(lambda idx, w: torch.nn.functional.embedding(idx, w) * 2)
    w = torch.randn(4, 3)
    for _ in range(2):
        jitted(torch.tensor([0, 1]), w)
    with pytest.raises(IndexError):
        jitted(torch.tensor([0, 9]), w)
    stats, state = thunder.compile_stats(jitted), jitted._thunder_state
    assert (stats.calls, state.raised_calls, stats.cache_hits + stats.cache_misses) == (3, 1, 2)
    assert stats.graphs[0]["calls"] == 3 and state.graph_calls == 3  # as the graph's run wrapper counts


def _one_list_twice(x):
    shared = [x + 1]
    return shared, shared


def _list_holding_itself(x):
    items = [x + 1]
    items.append(items)
    return items


@pytest.mark.parametrize("fn", [_one_list_twice, _list_holding_itself], ids=["twice", "itself"])
def test_a_container_returned_twice_or_holding_itself_stays_one_container(fn):
    """Dynamo's code builds such a container once and refers to it again; built from its symbolic form, it came
    back as two containers (or a list missing its items): such code runs as it is (found by a break-it pass)."""
    jitted = thunder.jit(fn)
    x = torch.randn(3)
    for _ in range(3):
        out = jitted(x)
        assert (out[0] is out[1]) if fn is _one_list_twice else (out[1] is out)
    assert all(direct is None for _, _, direct in jitted._thunder_fast_path.entries)


def test_an_error_raised_on_the_fast_path_names_the_arguments_it_does_not_understand():
    """As on the ordinary path (ThunderFunction._annotate): a note names each argument that is not a tensor,
    number, string, module, ... -- here a call the fast path serves raises (an index out of range)."""
    class Scale:
        factor = 2.0

    def f(x, i, scale):
        return x[i] * scale.factor

    jitted = thunder.jit(f)
    x, scale = torch.randn(3), Scale()
    for _ in range(2):
        jitted(x, torch.tensor([0, 2]), scale)
    assert thunder.compile_stats(jitted).cache_hits == 1
    with pytest.raises(IndexError) as raised:
        jitted(x, torch.tensor([0, 5]), scale)
    assert any("argument 'scale' is a Scale" in n for n in getattr(raised.value, "__notes__", [])), raised.value


def test_an_error_that_takes_no_notes_or_is_raised_again_is_raised_as_it_is():
    """A read-only ``__notes__`` made adding the note raise TypeError in place of the user's error; an exception
    instance raised at every call collected the note once per call."""
    class Frozen(Exception):
        @property
        def __notes__(self):
            return ("frozen",)

    shared = RuntimeError("again")

    def f(x, scale, error):
        if (x * scale.factor).sum().item() > 100:
            raise error
        return x * scale.factor

    class Scale:
        factor = 2.0

    jitted, x = thunder.jit(f), torch.ones(3)
    for _ in range(2):
        jitted(x, Scale(), shared)
    with pytest.raises(Frozen):
        jitted(x * 1000, Scale(), Frozen("frozen"))
    for _ in range(3):
        with pytest.raises(RuntimeError, match="again"):
            jitted(x * 1000, Scale(), shared)
    assert len(shared.__notes__) == len(set(shared.__notes__)) == 2  # scale and error, once each


def test_force_eager_stance_is_obeyed_after_compiling():
    """torch.compiler.set_stance("force_eager") makes torch.compile run functions eagerly; the fast path of a
    wrapper that already compiled must not keep calling the compiled code then."""
    seen = []

    def f(a):
        seen.append(torch.compiler.is_compiling())
        return a * 2

    class Recording(nn.Module):
        def forward(self, a):
            return f(a)

    for jitted in (thunder.jit(f), thunder.jit(Recording())):
        x = torch.randn(5, 8)
        with torch.no_grad():
            jitted(x)
            jitted(x)
            seen.clear()
            with torch.compiler.set_stance("force_eager"):
                torch.testing.assert_close(jitted(x), x * 2)
        assert seen == [False]


# ---- a frame that calls a frame with a graph break: Dynamo compiles the callee on its own, so the fast path must
# ---- not run the caller's code (the callee would run uncompiled, from the second call on)

def _breaks_inside(x):
    y = x.sin() * 2
    torch._dynamo.graph_break()
    return y.cos() + 1


def _calls_first(x):  # no graph of its own: the first thing it does is the call
    return _breaks_inside(x)


def _calls_after_a_graph(x):  # a graph of its own, then the call
    return _breaks_inside(x * 2)


def _calls_its_argument(fn, x):
    return fn(x)


class _Table:
    def __getitem__(self, x):
        return _breaks_inside(x)


_TABLE = _Table()


def _subscripts(x):  # Dynamo breaks the graph at the subscript, whose __getitem__ it compiles on its own
    return _TABLE[x * 2]


class _Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if x.abs().sum().item() > 1e9:  # a graph break
            print("diverged")
        return torch.tanh(self.fc(x))


class _Delegating(nn.Module):
    """A module whose forward only calls its body: with a graph break in the body, or captured whole with it."""

    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return self.body(x)


@pytest.mark.parametrize("case", ["function", "after_a_graph", "argument", "subscript", "module"])
def test_a_graph_break_in_a_called_frame_runs_its_graphs_on_every_call(case):
    """thunder.jit(outer) where outer's code calls a function (or module) with a graph break: only the first call
    ran the compiled graphs, every later one ran eagerly ("3 calls ran UNCOMPILED", no reason): the fast path ran
    outer's cached code without Dynamo's frame handling, so the callee's own compiled frames were never entered."""
    torch.manual_seed(0)
    fn, args = {"function": (_calls_first, ()), "after_a_graph": (_calls_after_a_graph, ()),
                "argument": (_calls_its_argument, (_breaks_inside,)), "subscript": (_subscripts, ()),
                "module": (_Delegating(_Body()), ())}[case]
    jitted = thunder.jit(fn)
    ran = []
    for _ in range(4):
        x = torch.randn(3, 4)
        before = jitted._thunder_state.graph_calls
        torch.testing.assert_close(jitted(*args, x), fn(*args, x))
        ran.append(jitted._thunder_state.graph_calls - before)
    stats = thunder.compile_stats(jitted)
    assert ran[0] >= 2 and ran == [ran[0]] * 4, ran  # the graphs before and after the break, on every call
    assert stats.eager_calls == 0 and "UNCOMPILED" not in thunder.summary(jitted)
    assert _fast_entries(jitted) == 0


def test_a_jitted_optimizer_step_runs_its_graph_on_every_step():
    """torch.optim's step wrapper (_use_grad) has a graph break and calls the step: thunder.jit(optimizer.step)
    compiled the update for the first step only."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    reference = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    reference.load_state_dict(model.state_dict())
    opt, ref_opt = (torch.optim.Adam(m.parameters(), lr=1e-2) for m in (model, reference))
    step = thunder.jit(opt.step)
    for _ in range(4):
        x, y = torch.randn(3, 4), torch.randn(3, 2)
        for m in (model, reference):
            nn.functional.mse_loss(m(x), y).backward()
        step(), ref_opt.step()
        opt.zero_grad(), ref_opt.zero_grad()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)
    stats = thunder.compile_stats(step)
    assert stats.eager_calls == 0 and sum(g["calls"] for g in stats.graphs) == 4, str(step)


def _inlined(x):
    return x.sin() * 2


def test_a_frame_that_calls_a_frame_captured_whole_keeps_the_fast_path(monkeypatch):
    """A call of a function or module without graph breaks is inlined in the caller's graph: its cached code calls
    only the graph, and the fast path takes it (torch.compile's path is never entered)."""
    def f(x):
        return _inlined(x) + 1

    x = torch.randn(5, 8)
    for fn in (f, _Delegating(MLP())):
        jitted = thunder.jit(fn)
        with torch.no_grad():
            jitted(x)
            assert _fast_entries(jitted) == 1
            monkeypatch.setattr(jitted, "_thunder_compiled", None)  # the ordinary path would raise TypeError
            torch.testing.assert_close(jitted(x), fn(x))
        assert _module_calls(jitted) == (2, 1, 1)


def _ordered(x):
    return collections.OrderedDict(a=x + 1, b=x.shape)


def test_the_callee_a_frame_would_run_uncompiled_is_read_from_its_code():
    """fast_path.separate_frame_call names what Dynamo's transformed code calls that Dynamo compiles on its own;
    the graph, Dynamo's helpers and C functions (the dict updates that rebuild a returned OrderedDict) are not."""
    def cached_code(fn, *args):
        jitted = thunder.jit(fn)
        jitted(*args)
        own = jitted._thunder_fast_path.fn
        entry, = fast_path.cache_entries(jitted._thunder_code, jitted._thunder_region)
        return fast_path.separate_frame_call(entry.code, own.__globals__, own.__closure__)

    x = torch.randn(3)
    assert cached_code(_calls_first, x) == "_breaks_inside"
    assert cached_code(_calls_its_argument, _breaks_inside, x) == "fn"
    assert cached_code(_subscripts, x) == "_TABLE.__getitem__"
    assert cached_code(_ordered, x) is None
    assert cached_code(_structures, x, x) is None
