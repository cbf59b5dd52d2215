"""Drop-in conventions: repr of a jitted module, thunder.summary, pickling and torch.save, identity changes that stay
on the wrapper, thunder.jit's fullgraph= and dynamic=, torch.compile's mode= and options=, and the inspection
functions on torch.compile results. (DDP and FSDP2 across processes: tests/test_distributed.py.)"""
import copy
import io
import logging
import pickle
import sys

import pytest
import torch
import torch.nn as nn

import thunder
from thunder.executors import Executor
from thunder.executors.torchex import torch_executor
from thunder.frontend import dynamo
from conftest import assert_same, capture_thunder_log


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Parent(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = thunder.jit(MLP())
        self.head = nn.Linear(2, 2)

    def forward(self, x):
        return self.head(self.block(x))


def with_break(x):
    y = x.exp()
    print("a graph break")
    return y * 2


# ---- repr and thunder.summary ----

def test_repr_of_a_jitted_module_is_the_tree_and_one_summary_line():
    torch.manual_seed(0)
    model = MLP()
    jitted = thunder.jit(model)
    for n in (2, 3, 4):
        jitted(torch.randn(n, 4))
    text = repr(jitted)
    assert text.startswith(repr(model) + "\n")
    (summary,) = text[len(repr(model)) + 1:].splitlines()
    assert summary.startswith("thunder.jit(MLP): 3 calls, 3 graphs compiled, cache 0 hits / 3 misses")
    assert "thunder.summary" in summary and str(jitted) == text


def test_print_of_a_parent_holding_a_jitted_module_stays_short():
    parent = Parent()
    for n in (2, 3, 4):
        parent(torch.randn(n, 4))
    lines = str(parent).splitlines()
    assert len(lines) <= len(str(MLP()).splitlines()) + 4, lines
    assert any("thunder.jit(MLP): 3 calls" in l for l in lines)


def test_summary_has_the_traces_and_print_of_a_function_is_unchanged():
    jitted_module, jitted_fn = thunder.jit(MLP()), thunder.jit(with_break)
    jitted_module(torch.randn(2, 4))
    jitted_fn(torch.randn(3))
    module_summary = thunder.summary(jitted_module)
    assert module_summary.startswith("thunder.jit(MLP): 1 calls") and "def computation(" in module_summary
    assert str(jitted_fn) == thunder.summary(jitted_fn)  # print(jitted function): the whole report, as before
    assert "graph breaks (1)" in str(jitted_fn) and "def computation(" in str(jitted_fn)
    with pytest.raises(TypeError, match="not a thunder-jitted callable"):
        thunder.summary(MLP())


# ---- pickle, torch.save ----

def check_loaded(loaded, original_model):
    assert isinstance(loaded, thunder.ThunderModule)
    assert thunder.compile_stats(loaded).graphs == []  # compiles again on first call
    x = torch.randn(3, 4)
    assert_same(loaded(x), original_model(x))
    assert len(thunder.compile_stats(loaded).graphs) == 1
    assert set(loaded.state_dict()) == set(original_model.state_dict())


def test_pickle_of_a_jitted_module():
    torch.manual_seed(0)
    model = MLP()
    jitted = thunder.jit(model, executors="torch", passes=("functionalize", "dce", "claim"))
    jitted(torch.randn(2, 4))
    loaded = pickle.loads(pickle.dumps(jitted))
    check_loaded(loaded, model)
    assert [e.name for e in loaded._get_executors()] == ["torch"]
    assert loaded._thunder_state.passes == ("functionalize", "dce", "claim")
    assert loaded._thunder_model is not model  # a copy: its own parameters
    assert loaded.fc1.weight.data_ptr() != model.fc1.weight.data_ptr()


def test_torch_save_and_load_of_a_jitted_module():
    torch.manual_seed(0)
    model = MLP()
    jitted = thunder.jit(model)
    jitted(torch.randn(2, 4))
    buffer = io.BytesIO()
    torch.save(jitted, buffer)
    buffer.seek(0)
    check_loaded(torch.load(buffer, weights_only=False), model)


def test_a_parent_holding_a_jitted_module_pickles():
    parent = Parent()
    parent(torch.randn(2, 4))
    loaded = pickle.loads(pickle.dumps(parent))
    x = torch.randn(2, 4)
    assert isinstance(loaded.block, thunder.ThunderModule)
    assert_same(loaded(x), parent(x))


def scaled_sin(x):
    return x.sin() * 2


def test_pickle_of_a_jitted_function():
    """Pickled by reference with its options, as a DataLoader worker started by spawn needs it; a lambda raises
    pickle's own error, which names it (it raised "cannot pickle 'module' object")."""
    jitted = thunder.jit(scaled_sin, executors="torch", dynamic=True)
    loaded = pickle.loads(pickle.dumps(jitted))
    assert isinstance(loaded, type(jitted)) and loaded._options() == jitted._options()
    x = torch.randn(3)
    assert_same(loaded(x), scaled_sin(x))
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        pickle.dumps(thunder.jit(lambda x: x + 1))


@thunder.jit
def decorated_sin(x):
    return x.sin()


def test_pickle_of_a_function_jitted_by_decorator_is_the_global():
    """pickle found the module's global to be the wrapper, not the function it pickled by reference, and raised."""
    assert pickle.loads(pickle.dumps(decorated_sin)) is decorated_sin


def test_jit_of_a_function_torch_compiler_disable_excluded_compiles_nothing():
    """torch.compiler.disable's result also holds the function it wraps: unwrapped as a torch.compile result, the
    function the user excluded was compiled."""
    def fn(x):
        return x.sin() + 1

    jitted, x = thunder.jit(torch.compiler.disable(fn)), torch.randn(3)
    assert_same(jitted(x), fn(x))
    assert not thunder.compile_stats(jitted).graphs


def test_pickle_with_a_custom_executor_says_what_to_do():
    mine = Executor("mine", dict(torch_executor.callees), torch_executor.namespace)
    jitted = thunder.jit(MLP(), executors=[mine])
    with pytest.raises(pickle.PicklingError, match="pickle the original module"):
        pickle.dumps(jitted)


def test_deepcopy_keeps_the_options():
    jitted = thunder.jit(MLP(), executors="torch", fullgraph=True)
    copied = copy.deepcopy(jitted)
    assert [e.name for e in copied._get_executors()] == ["torch"] and copied._thunder_fullgraph


# ---- identity changes stay on the wrapper ----

def test_class_assignment_changes_the_wrapper_not_the_original():
    model = MLP()
    jitted = thunder.jit(model)
    subclass = type("Tagged" + type(jitted).__name__, (type(jitted),), {})  # what FSDP2's fully_shard does
    jitted.__class__ = subclass
    assert type(jitted) is subclass and type(model) is MLP
    x = torch.randn(2, 4)
    assert_same(jitted(x), model(x))
    assert model.fc1 is jitted.fc1  # attributes are still the original's
    jitted.custom_flag = 3  # other attributes are still written to the original
    assert model.custom_flag == 3
    del jitted.custom_flag
    assert not hasattr(model, "custom_flag")


# ---- thunder.jit(fullgraph=, dynamic=) ----

def test_fullgraph_makes_a_graph_break_an_error():
    with pytest.raises(Exception, match="(?i)graph break|unsupported"):
        thunder.jit(with_break, fullgraph=True)(torch.randn(3))
    x = torch.randn(3)
    assert_same(thunder.jit(lambda x: x.sin() * 2, fullgraph=True)(x), x.sin() * 2)
    assert_same(thunder.jit(with_break, fullgraph=False)(x), with_break(x))


def test_fullgraph_with_a_converted_branch():
    def fn(x):
        if x.sum() > 0:
            return x * 2
        return x - 1

    jitted = thunder.jit(fn, fullgraph=True)
    for x in (torch.ones(3), -torch.ones(3)):
        assert_same(jitted(x), fn(x))
    assert thunder.compile_stats(jitted).branches_converted == 1


def test_fullgraph_with_a_branch_that_cannot_be_converted_raises_at_the_first_call():
    """The branch's arms give different shapes: the first call ran eagerly (with a warning blaming Dynamo) and only
    the second raised; torch.compile(fullgraph=True) raises at the first."""
    def fn(x):
        if x.sum() > 0:
            y = x[:2]
        else:
            y = x
        return y.sin()

    jitted = thunder.jit(fn, fullgraph=True)
    for _ in range(2):
        with pytest.raises(Exception, match="(?i)graph break|unsupported"):
            jitted(torch.ones(4))


def test_jit_of_a_jitted_callable_with_options_or_of_a_torch_compile_result():
    def fn(x):
        return x.sin() + 1

    x = torch.randn(8)
    jitted = thunder.jit(fn, executors="torch")
    assert thunder.jit(jitted) is jitted
    again = thunder.jit(jitted, executors="cpu", fullgraph=True)
    assert again is not jitted and again._options()["fullgraph"] is True
    assert thunder.jit(thunder.jit(fn, dynamic=True), dynamic=False)._options()["dynamic"] is False
    assert [e.name for e in again._get_executors()][0] == "cpu"
    assert_same(again(x), fn(x))
    model = nn.Linear(3, 3)
    for compiled, target in ((torch.compile(fn), fn), (torch.compile(model), model)):
        unwrapped = thunder.jit(compiled)
        assert unwrapped._thunder_target is target
        y = torch.randn(2, 3)
        with torch.no_grad():
            assert_same(unwrapped(y), target(y))


def test_dynamic_has_torch_compiles_meaning():
    # (dynamo graphs, symbolic graphs) after shapes 2, 3, 4: False captures one static graph per shape; None a
    # static one, then one with symbolic sizes; True one with symbolic sizes. Each shape compiles once.
    # (Each its own function: Dynamo remembers a dimension that changed by the code's file, line and name.)
    for fn, dynamic, counts in ((lambda x: x * 2, False, (3, 0)),
                                (lambda x: x * 2, None, (2, 1)),
                                (lambda x: x * 2, True, (1, 1))):
        jitted = thunder.jit(fn, dynamic=dynamic)
        for n in (2, 3, 4):
            x = torch.randn(n)
            assert_same(jitted(x), x * 2)
        stats = thunder.compile_stats(jitted)
        assert (stats.dynamo_graphs, stats.symbolic_graphs) == counts, dynamic
        assert len(stats.graphs) == 3 and all(g["compiled"] for g in stats.graphs)


@pytest.mark.parametrize("option,value", [("fullgraph", "yes"), ("dynamic", 1)])
def test_fullgraph_and_dynamic_are_checked(option, value):
    with pytest.raises(TypeError, match=option):
        thunder.jit(with_break, **{option: value})


# ---- torch.compile(backend="thunder", mode=, options=) and inspection of its results ----

def test_torch_compile_mode_is_accepted():
    x = torch.randn(3)
    for mode in ("default", "reduce-overhead", "max-autotune"):
        compiled = torch.compile(lambda x: x.cos() + 1, backend="thunder", mode=mode)
        assert_same(compiled(x), x.cos() + 1)
        assert thunder.compile_stats(compiled).graphs[0]["compiled"]


def test_torch_compile_options_are_thunder_jits():
    compiled = torch.compile(lambda x: x.cos() + 1, backend="thunder",
                             options={"executors": "torch", "passes": ["functionalize", "dce", "claim"]})
    x = torch.randn(3)
    assert_same(compiled(x), x.cos() + 1)
    graph = dynamo.state_of_torch_compile_result(compiled).graphs[0]
    assert graph.executors() == ["torch"]
    assert list(thunder.compile_stats(compiled).graphs[0]["pass_seconds"]) == ["functionalize", "dce", "claim"]


def test_torch_compile_with_invalid_thunder_options_raises():
    compiled = torch.compile(lambda x: x.cos() + 1, backend="thunder", options={"executors": "nope"})
    with pytest.raises(Exception, match="unknown executor set 'nope'"):
        compiled(torch.randn(3))


@pytest.mark.parametrize("kind", ["function", "module"])
def test_every_inspection_function_accepts_a_torch_compile_result(kind):
    torch.manual_seed(0)
    model = MLP()
    target = model if kind == "module" else (lambda x: torch.softmax(x * 2, -1).sum())
    compiled = torch.compile(target, backend="thunder")
    with pytest.raises(LookupError):  # nothing compiled yet
        thunder.last_traces(compiled)
    assert thunder.compile_stats(compiled).graphs == []
    x = torch.randn(2, 4, requires_grad=True)
    compiled(x).sum().backward()
    stats = thunder.compile_stats(compiled)
    assert len(stats.graphs) == 1 and stats.graphs[0]["compiled"] and stats.graphs[0]["calls"] == 1
    assert stats.graphs[0]["backward"] == "thunder"
    assert thunder.last_traces(compiled)[-1].provenance.startswith("Memory planning")
    assert thunder.last_backward_traces(compiled)
    assert thunder.last_kernels(compiled) and thunder.last_kernels(compiled)[0]["executor"] == "cpu"
    assert "graph 0: compiled" in thunder.summary(compiled)
    name = "MLP" if kind == "module" else target.__qualname__
    assert thunder.summary(compiled).startswith(f"torch.compile({name}): ")
    assert thunder.last_traces(dynamo.GLOBAL_STATE)[-1] is thunder.last_traces(compiled)[-1]


def test_torch_compile_results_keep_their_own_graphs_and_graph_breaks():
    first = torch.compile(with_break, backend="thunder")
    second = torch.compile(lambda x: x.tan(), backend="thunder")
    x = torch.randn(3)
    first(x)
    second(x)
    stats = thunder.compile_stats(first)
    assert len(stats.graphs) == 2 and len(stats.graph_breaks) == 1
    assert 'print("a graph break")' in str(stats.graph_breaks[0])
    assert len(thunder.compile_stats(second).graphs) == 1 and not thunder.compile_stats(second).graph_breaks


def test_a_torch_compile_result_of_another_backend_is_not_inspectable():
    with pytest.raises(TypeError, match="not a thunder-jitted callable"):
        thunder.compile_stats(torch.compile(lambda x: x + 1, backend="eager"))


def test_a_forward_reassigned_on_the_class_or_given_new_defaults_is_compiled_again(caplog):
    """The wrapper compiles a copy of the class's forward; a patch after thunder.jit (``Model.forward = ...``, new
    defaults) runs, as in eager, instead of the copy (which ran the old code silently), and the log says so."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x, scale=1.0):
            return self.fc(x) * scale

    model = Scaled()
    jitted = thunder.jit(model)
    x = torch.randn(3, 2)
    with torch.no_grad():
        for _ in range(2):  # the second call takes the fast path
            assert_same(jitted(x), model(x))
        Scaled.forward.__defaults__ = (2.0,)
        with caplog.at_level(logging.INFO, logger="thunder"):
            assert_same(jitted(x), model(x))
        assert "changed since it was compiled" in caplog.text
        Scaled.forward = lambda self, x, scale=1.0: self.fc(x) * 7
        for _ in range(2):
            assert_same(jitted(x), model(x))


def test_a_forward_set_on_the_instance_or_a_class_swapped_after_the_first_call_is_compiled_again():
    """m.forward = ... (LoRA, accelerate's hooks) and m.__class__ = ... (parametrize, FSDP2, quantization tools)
    after thunder.jit: calls through the fast path ran the old forward, silently; parametrize raised."""
    import types

    import torch.nn.utils.parametrize as parametrize

    class Times10(nn.Linear):
        def forward(self, x):
            return super().forward(x) * 10

    class Symmetric(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).transpose(-1, -2)

    x = torch.randn(3, 4)
    for change in (lambda m: setattr(m, "forward", types.MethodType(lambda self, x: x * 7, m)),
                   lambda m: setattr(m, "__class__", Times10),
                   lambda m: parametrize.register_parametrization(m, "weight", Symmetric())):
        model = nn.Linear(4, 4)
        jitted = thunder.jit(model)
        with torch.no_grad():
            for _ in range(2):  # the second call takes the fast path
                assert_same(jitted(x), model(x))
            change(model)
            for _ in range(2):
                assert_same(jitted(x), model(x))


def test_the_jitted_modules_forward_wrapped_as_accelerate_wraps_a_modules():
    """old = jitted.forward; jitted.forward = lambda x: old(x) * 2: the assignment reached the original, whose
    compiled forward then ran the wrapper, which called the compiled forward again (RecursionError)."""
    model = nn.Linear(4, 4)
    jitted = thunder.jit(model)
    x = torch.randn(3, 4)
    with torch.no_grad():
        jitted(x)
        old = jitted.forward
        jitted.forward = lambda inp: old(inp) * 2
        for _ in range(2):
            assert_same(jitted(x), model(x) * 2)
        del jitted.forward
        assert_same(jitted(x), model(x))
    assert thunder.compile_stats(jitted).eager_calls == 0


def test_a_forward_set_on_the_jitted_module_that_skips_the_compiled_one_is_said():
    """jitted.forward = f where f does not call the compiled forward: its calls ran uncompiled, unseen (calls stayed
    at 1, no warning)."""
    model = nn.Linear(4, 4)
    jitted, x = thunder.jit(model), torch.randn(3, 4)
    with torch.no_grad():
        jitted(x)
        jitted.forward = lambda inp: model.forward(inp) * 2
        with capture_thunder_log() as log:
            for _ in range(3):
                assert_same(jitted(x), model(x) * 2)
    stats = thunder.compile_stats(jitted)
    assert (stats.calls, stats.eager_calls) == (4, 3), stats
    warned = [m for m in log if "was replaced by a function that does not call the compiled forward" in m]
    assert len(warned) == 1, log


def test_a_function_given_new_code_or_defaults_is_compiled_again():
    def f(x, k=2):
        return x * k

    jitted, x = thunder.jit(f), torch.randn(3)
    for _ in range(2):
        assert_same(jitted(x), f(x))
    f.__defaults__ = (5,)
    assert_same(jitted(x), x * 5)
    f.__code__ = (lambda x, k=2: x + k).__code__
    for _ in range(2):
        assert_same(jitted(x), x + 5)


@pytest.mark.parametrize("kind", ["static", "dynamic", "training"])
def test_parameters_can_be_swapped_after_a_call(kind):
    # Dynamo's fake mode remembers each tensor it converted through a weak reference, and thunder keeps a graph's
    # fake values (symbolic graphs, training programs): torch.utils.swap_tensors refuses a tensor with a weak
    # reference, so .to() under swap_module_params_on_conversion raised after the first call.
    x = torch.randn(3, 4)
    model = nn.Linear(4, 4)
    jitted = thunder.jit(model, dynamic=kind == "dynamic")
    if kind == "training":
        jitted(x).sum().backward()
    else:
        with torch.no_grad():
            jitted(x)
    torch.utils.swap_tensors(model.weight, nn.Parameter(torch.randn(4, 4)))
    previous = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        jitted.double()
    finally:
        torch.__future__.set_swap_module_params_on_conversion(previous)
    with torch.no_grad():
        assert_same(jitted(x.double()), model(x.double()))


def test_a_call_under_fake_tensor_mode_propagates_shapes_as_eager():
    """Under FakeTensorMode (shape propagation: torch.export, meta-init tools) a jitted function or module returns
    fake tensors, as eager does; thunder's kernels were launched with a real tensor and raised. Under any
    TorchDispatchMode the graphs run as captured, and the fast path misses."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    fn = thunder.jit(lambda x: x.sin() * 2)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    jitted = thunder.jit(model)
    for _ in range(2):  # compiled (the second call takes the fast path)
        fn(torch.randn(3))
        jitted(torch.randn(2, 4))
    with FakeTensorMode(allow_non_fake_inputs=True):
        out, y = fn(torch.randn(3)), jitted(torch.randn(2, 4))
    assert isinstance(out, FakeTensor) and out.shape == (3,)
    assert isinstance(y, FakeTensor) and y.shape == (2, 3)
    torch.testing.assert_close(fn(torch.ones(3)), torch.ones(3).sin() * 2)  # real tensors again: compiled
    # Said: counted per graph, in the summary, and once at WARNING (the caplog of the test's own logger).
    assert sum(g["captured_calls"] for g in thunder.compile_stats(fn).graphs) == 1
    assert "1 calls run UNCOMPILED, as captured" in thunder.summary(fn)
