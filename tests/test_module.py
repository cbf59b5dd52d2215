"""nn.Module state: in-place buffer updates, reassigned buffers, BatchNorm in
train and eval, the jitted module's parameters/state_dict, and attribute
access reaching the original module."""
import collections
import copy

import pytest
import torch
import torch.nn as nn

import thunder
from conftest import assert_same, capture_thunder_log, check_program


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        self.count.add_(1)
        return self.fc(x) * self.count


class Reassign(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(3))

    def forward(self, x):
        self.state = self.state * 0.5 + x
        return self.state.sum() * 2


def run_twice(model, make_input):
    torch.manual_seed(0)
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for _ in range(2):
        x = make_input()
        assert_same(jitted(x), reference(x))
        assert_same(dict(model.state_dict()), dict(reference.state_dict()))
    return jitted, reference


def test_in_place_buffer_update():
    model = Counter()
    jitted, reference = run_twice(model, lambda: torch.randn(2, 3))
    assert model.count.item() == 2 and reference.count.item() == 2
    # Same buffer object, updated in place: the jitted module's view of it too.
    assert jitted.count is model.count
    assert thunder.compile_stats(jitted).cache_hits == 1


def test_reassigned_buffer():
    model = Reassign()
    first = model.state
    jitted, reference = run_twice(model, lambda: torch.randn(3))
    assert model.state is not first
    assert_same(model.state, reference.state)
    assert_same(jitted.state, reference.state)
    assert "state" in dict(jitted.named_buffers())


def test_traces_of_stateful_modules_round_trip():
    check_program(Counter(), torch.randn(2, 3), calls=2)
    check_program(Reassign(), torch.randn(3), calls=2)


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_train_then_eval(momentum):
    bn = nn.BatchNorm1d(4, momentum=momentum)
    reference = copy.deepcopy(bn)
    jitted = thunder.jit(bn)
    assert jitted.training and bn.training
    for step in range(2):
        x = torch.randn(8, 4) * 3 + 1
        assert_same(jitted(x), reference(x))
        assert_same(bn.running_mean, reference.running_mean)
        assert_same(bn.running_var, reference.running_var)
        assert bn.num_batches_tracked.item() == reference.num_batches_tracked.item() == step + 1

    assert jitted.eval() is jitted
    reference.eval()
    assert not jitted.training and not bn.training
    stats_before = copy.deepcopy(bn.state_dict())
    for _ in range(2):
        x = torch.randn(8, 4)
        assert_same(jitted(x), reference(x))
    # eval does not touch the running statistics.
    assert_same(dict(bn.state_dict()), dict(stats_before))

    jitted.train()
    reference.train()
    assert jitted.training and bn.training
    x = torch.randn(8, 4)
    assert_same(jitted(x), reference(x))
    assert_same(dict(bn.state_dict()), dict(reference.state_dict()))


def test_training_flag_setter_and_submodules():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4))
    jitted = thunder.jit(model)
    jitted.training = False
    assert not model.training
    jitted.train(False)
    assert not any(m.training for m in model.modules())
    x = torch.randn(3, 4)
    assert_same(jitted(x), model(x))
    jitted.train()
    assert all(m.training for m in model.modules()) and jitted.training


def test_parameters_and_state_dict_equal_the_originals():
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    jitted = thunder.jit(model)
    assert [n for n, _ in jitted.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(a is b for a, b in zip(jitted.parameters(), model.parameters()))
    assert list(jitted.state_dict().keys()) == list(model.state_dict().keys())
    assert [n for n, _ in jitted.named_buffers()] == [n for n, _ in model.named_buffers()]
    assert len(list(jitted.children())) == len(list(model.children()))
    # load_state_dict reaches the original.
    new = {k: torch.full_like(v, 0.5) if v.is_floating_point() else v for k, v in model.state_dict().items()}
    jitted.load_state_dict(new)
    assert torch.equal(model[0].weight, torch.full((8, 4), 0.5))


def test_attribute_access_and_setattr_reach_the_original():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.scale = 2.0

        def forward(self, x):
            return self.fc(x) * self.scale

    model = Scaled()
    jitted = thunder.jit(model)
    assert jitted.scale == 2.0 and jitted.fc is model.fc
    x = torch.randn(3, 2)
    assert_same(jitted(x), model(x))
    jitted.scale = 3.0
    assert model.scale == 3.0
    assert_same(jitted(x), model.fc(x) * 3.0)  # a changed Python attribute is seen (Dynamo guards on it)
    jitted.extra = "hello"
    assert model.extra == "hello" and jitted.extra == "hello"
    with pytest.raises(AttributeError):
        jitted.does_not_exist  # noqa: B018


def test_attributes_named_as_the_wrappers_own_are_the_modules():
    """A module's own `_model`, `_state`, `_code` (a wrapper holding the model it wraps) are read and written
    through the jitted module as through the original: the jitted module's own attributes are `_thunder_`-prefixed."""
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self._model, self._state, self._code = nn.Linear(2, 2), {"steps": 0}, 2.0

        def forward(self, x):
            return self._model(x) * self._code

    model = Wrapper()
    jitted = thunder.jit(model)
    x = torch.randn(3, 2)
    assert_same(jitted(x), model(x))
    assert jitted._model is model._model and jitted._state is model._state and jitted._code == 2.0
    jitted._code = 3.0
    assert model._code == 3.0
    assert_same(jitted(x), model._model(x) * 3.0)
    assert isinstance(copy.deepcopy(jitted)._model, nn.Linear)


def test_module_parameter_update_is_seen():
    model = nn.Linear(3, 3)
    jitted = thunder.jit(model)
    x = torch.randn(2, 3)
    jitted(x)
    with torch.no_grad():
        model.weight.mul_(2)
    assert_same(jitted(x), model(x))
    with torch.no_grad():
        jitted.bias.zero_()
    assert_same(jitted(x), x @ model.weight.t())


def test_nested_modules_and_jit_of_a_jitted_module():
    model = nn.Sequential(nn.Sequential(nn.Linear(3, 3), nn.GELU()), nn.Linear(3, 1))
    jitted = thunder.jit(model)
    assert thunder.jit(jitted) is jitted
    assert isinstance(jitted, nn.Module) and isinstance(jitted, thunder.ThunderModule)
    x = torch.randn(4, 3)
    assert_same(jitted(x), model(x))


def test_non_persistent_buffers_hooks_and_dtype_conversion():
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    model[1].register_buffer("scratch", torch.zeros(1), persistent=False)
    jitted = thunder.jit(model)
    assert list(jitted.state_dict()) == list(model.state_dict())
    assert "1.scratch" in dict(jitted.named_buffers())
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append(len(args)))
    x = torch.randn(4, 3)
    assert_same(jitted(x), copy.deepcopy(model)(x), 1e-6, 1e-6)
    assert calls and calls[0] == 1
    assert jitted.double() is jitted and model[0].weight.dtype == torch.float64
    reference = copy.deepcopy(model)
    assert_same(jitted(x.double()), reference(x.double()))
    jitted.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())


def test_deepcopy_of_a_jitted_module():
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
    jitted = thunder.jit(model)
    x = torch.randn(2, 3)
    jitted(x)
    clone = copy.deepcopy(jitted)
    assert isinstance(clone, thunder.ThunderModule)
    weight = dict(clone.named_parameters())["0.weight"]
    assert weight is not model[0].weight
    assert_same(clone(x), model(x))
    with torch.no_grad():
        weight.zero_()
    assert not torch.equal(model[0].weight, weight)
    assert_same(clone(x), torch.tanh(torch.zeros(2, 3) + model[0].bias))
    assert [e.name for e in clone._get_executors()] == [e.name for e in jitted._get_executors()]


def test_a_module_whose_forward_is_a_jitted_method_deep_copies():
    """m.forward = thunder.jit(m.forward) (the guide's recipe for generate): copy.deepcopy(m) raised "cannot pickle
    'module' object"; the copy's forward is jitted again, bound to the copy."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    m.forward = thunder.jit(m.forward)
    x = torch.randn(2, 4)
    m(x)
    c = copy.deepcopy(m)
    assert c.forward._fn.__self__ is c
    torch.testing.assert_close(c(x), m(x))
    with torch.no_grad():
        c.weight.zero_()
    torch.testing.assert_close(c(x), c.bias.expand(2, 4))
    assert not torch.equal(m(x), c(x))
    f = thunder.jit(lambda x: x * 2)
    torch.testing.assert_close(copy.deepcopy(f)(x), x * 2)


def test_a_method_that_runs_the_original_forward_uncompiled_says_so():
    """thunder.jit(model).generate(...) is the original's generate calling the original's forward: it ran uncompiled
    and nothing said so. It still runs (with eager's results), is counted in print(jitted) and compile_stats, and
    warns once, naming the fix; a method that runs no forward is not counted."""
    class Steps(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return torch.tanh(self.lin(x))

        def generate(self, x, steps):
            for _ in range(steps):
                x = self(x)
            return x

        def width(self):
            return self.lin.in_features

        def predict(self, x):
            return self.forward(x).argmax(-1)  # not through nn.Module's call: no hook sees it

    torch.manual_seed(0)
    model, x = Steps(), torch.randn(2, 3)
    jitted = thunder.jit(model)
    with capture_thunder_log() as messages:
        assert jitted.width() == 3
        assert_same(jitted.generate(x, 3), model.generate(x, 3))
        jitted.generate(x, 2)
        assert_same(jitted.predict(x), model.predict(x))
    warned = [m for m in messages if "generate" in m]
    assert len(warned) == 1 and "model.forward = thunder.jit(model.forward)" in warned[0], messages
    assert len([m for m in messages if "predict" in m]) == 1, messages
    assert thunder.compile_stats(jitted).uncompiled_methods == {"generate": 5, "predict": 1}
    assert "generate() ran the original forward UNCOMPILED 5 times" in repr(jitted)
    assert "forward" not in model.__dict__ and not model._forward_pre_hooks
    assert_same(jitted(x), model(x))
    assert thunder.compile_stats(jitted).cache_misses == 1


def test_a_forward_returning_self_returns_the_original_module():
    """thunder.jit compiles a private module sharing the original's state (code_copies.private_module); a forward
    that returns ``self`` returned that private module. The caller gets the original, as eager's call returns it,
    on the first call and on the fast path."""
    class Chained(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.seen = 0

        def forward(self, x):
            self.seen = self.seen + 1
            return self

    model = Chained()
    jitted = thunder.jit(model)
    for _ in range(3):
        assert jitted(torch.randn(2)) is model
    assert model.seen == 3

    class Pair(nn.Module):  # `self` in a tuple, a list, a dict
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            y = self.fc(x)
            return (self, y), [self], {"module": self, "y": y}, Named(self, y), collections.OrderedDict(m=self)

    Named = collections.namedtuple("Named", "module y")
    model = Pair()
    jitted = thunder.jit(model)
    x = torch.randn(2)
    for _ in range(3):
        (first, y), listed, named, as_tuple, ordered = jitted(x)
        assert first is model and listed[0] is model and named["module"] is model
        assert type(as_tuple) is Named and as_tuple.module is model and ordered["m"] is model
        assert_same(y, model.fc(x))


def test_a_hook_on_the_jitted_module_finds_it_in_a_dict_keyed_by_modules():
    """Hooks registered on the original module run on the private module thunder compiles, which they receive as
    `module`: a hook capturing activations by name (a dict keyed by modules) raised KeyError for the top module.
    That module is equal to the original and hashed as it (a graph break where the hook indexes the dict)."""
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    names = {module: name for name, module in model.named_modules()}
    captured = {}
    for module in model.modules():
        module.register_forward_hook(lambda module, args, out: captured.__setitem__(names[module], out))
    jitted = thunder.jit(model)
    x = torch.randn(2)
    for _ in range(2):
        assert_same(jitted(x), model[1](model[0](x)))
    assert sorted(captured) == ["", "0", "1"]


def test_a_jitted_container_module_indexes_iterates_and_has_a_length():
    """A jitted Sequential, ModuleList or ModuleDict stays a container, as the original (`jm[0]`, `len(jm)`,
    `list(jm)`, `in`, truth); a jitted module of another kind gets none of these."""
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    jitted = thunder.jit(seq)
    assert jitted[0] is seq[0] and len(jitted) == 3 and list(jitted) == list(seq) and seq[1] in jitted
    assert isinstance(jitted[1:], nn.Sequential) and bool(jitted)
    x = torch.randn(2, 3)
    torch.testing.assert_close(jitted(x), seq(x))
    assert not thunder.jit(nn.Sequential()) and isinstance(jitted, thunder.ThunderModule)
    names = nn.ModuleDict({"a": nn.Linear(2, 2)})
    assert "a" in thunder.jit(names) and thunder.jit(names)["a"] is names["a"]
    plain = thunder.jit(nn.Linear(2, 2))
    with pytest.raises(TypeError):
        len(plain)
    assert bool(plain)
    # Item assignment and deletion change the original, and the next call runs the new layers.
    jitted[1] = nn.Tanh()
    del jitted[2]
    assert isinstance(seq[1], nn.Tanh) and len(seq) == 2
    torch.testing.assert_close(jitted(x), seq(x))

    class Blocks(nn.Module):  # a container of its own: __getitem__ and __iter__, no __len__
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])

        def __getitem__(self, i):
            return self.blocks[i]

        def __iter__(self):
            return iter(self.blocks)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    blocks = Blocks()
    jitted_blocks = thunder.jit(blocks)
    assert jitted_blocks[1] is blocks.blocks[1] and list(jitted_blocks) == list(blocks.blocks)


def test_a_backward_hook_on_the_jitted_module_runs_and_its_grad_input_is_used():
    """register_full_backward_hook on the jitted module set its 'full hook' flag on the original, so the wrapper's
    hook ran never (and a gradient-scaling hook's returned grad_input was ignored)."""
    def run(wrap):
        torch.manual_seed(0)
        module = wrap(nn.Sequential(nn.Linear(4, 4), nn.Tanh()))
        calls = []
        module.register_full_backward_hook(lambda mod, grad_input, grad_output: (calls.append(1), (grad_input[0] * 10,))[1])
        x = torch.randn(3, 4, requires_grad=True)
        module(x).sum().backward()
        return x.grad, calls

    (expected, eager_calls), (got, calls) = run(lambda m: m), run(thunder.jit)
    assert calls == eager_calls == [1]
    torch.testing.assert_close(got, expected)


class _ExtraState(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.meta = nn.Linear(2, 2), {"v": 1}
        self.cache = torch.ones(2)  # a plain tensor attribute its _apply casts along

    def forward(self, x):
        return self.fc(x) * self.meta["v"] * self.cache

    def get_extra_state(self):
        return dict(self.meta)

    def set_extra_state(self, state):
        self.meta = dict(state)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if prefix + "old_weight" in state_dict:  # a legacy key, renamed as a checkpoint upgrade does
            state_dict[prefix + "fc.weight"] = state_dict.pop(prefix + "old_weight")
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _apply(self, fn, recurse=True):
        self.cache = fn(self.cache)
        return super()._apply(fn, recurse)


def test_a_jitted_layer_stands_for_the_original_where_its_parent_walks_the_tree():
    """model[i] = thunder.jit(model[i]) (per-layer jitting): a parent's load_state_dict used nn.Module's
    _load_from_state_dict (extra state, a class's key upgrades, load hooks lost), a parent's .double() skipped an
    _apply override, and apply() never reached the original layer (isinstance-based init skipped it)."""
    parent = nn.Sequential(thunder.jit(_ExtraState()), nn.ReLU(), thunder.jit(nn.Linear(2, 2)))
    original = parent[0]._thunder_model
    state = parent.state_dict()
    state["0._extra_state"] = {"v": 5}
    state["0.old_weight"] = state.pop("0.fc.weight") * 2
    posts = []
    parent[2].register_load_state_dict_post_hook(lambda module, keys: posts.append(type(module).__name__))
    parent.load_state_dict(state)
    assert original.meta == {"v": 5} and posts
    torch.testing.assert_close(original.fc.weight, state["0.old_weight"])
    parent.double()
    assert original.cache.dtype == torch.float64 and original.fc.weight.dtype == torch.float64
    # modules() lists each layer once, the jitted one as its wrapper (listing the original too counted the shared
    # parameters twice: parameter groups, a hook on every module).
    assert [name for name, _ in parent.named_modules()] == ["", "0", "0.fc", "1", "2"]
    assert [name for name, _ in parent.named_parameters(remove_duplicate=False)] == [
        "0.fc.weight", "0.fc.bias", "2.weight", "2.bias"]
    parent.apply(lambda m: nn.init.zeros_(m.weight) if isinstance(m, nn.Linear) else None)
    assert all((m.weight == 0).all() for m in (original.fc, parent[2]._thunder_model))
    x = torch.randn(3, 2, dtype=torch.float64)
    torch.testing.assert_close(parent(x), parent[2]._thunder_model.bias.detach().expand(3, 2))


def test_a_lazy_module_is_initialized_on_the_original_and_compiled():
    """The lazy module's hook ran on thunder's compiled copy: the original stayed nn.LazyLinear and no call was
    compiled (the warning said no tensor op ran)."""
    model = nn.LazyLinear(4)
    jitted = thunder.jit(model)
    x = torch.randn(5, 3)
    for _ in range(3):
        out = jitted(x)
    assert type(model) is nn.Linear and model.weight.shape == (4, 3)
    torch.testing.assert_close(out, model(x))
    stats = thunder.compile_stats(jitted)
    assert stats.graphs and stats.eager_calls == 0, stats


@pytest.mark.parametrize("dynamic", [None, True])
def test_lazy_submodules_are_initialized_by_an_eager_first_call(dynamic):
    """Dynamo raised making a lazy child's parameters from symbolic sizes (dynamic=True): the first call runs
    eagerly, as in eager it makes them, and the next calls compile."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.LazyLinear(3), nn.ReLU(), nn.LazyLinear(2))
    jitted = thunder.jit(model, dynamic=dynamic)
    x = torch.randn(4, 5)
    first = jitted(x)
    assert [type(m) for m in model] == [nn.Linear, nn.ReLU, nn.Linear]
    torch.testing.assert_close(first, model(x))
    assert jitted(torch.randn(6, 5)).shape == (6, 2)
    stats = thunder.compile_stats(jitted)
    assert stats.graphs and stats.eager_calls == 1, stats


def test_the_eager_first_call_of_lazy_submodules_runs_the_jitted_modules_hooks():
    model = nn.Sequential(nn.LazyLinear(3), nn.ReLU())
    jitted = thunder.jit(model)
    jitted.register_forward_hook(lambda module, args, out: out * 0 + 7)
    assert (jitted(torch.randn(2, 5)) == 7).all()


def test_a_call_that_fails_runs_the_modules_hooks_once():
    """A call Dynamo's trace of forward finds failing (a wrong feature size) was run again eagerly, module and
    all, for eager's error: its pre-hook had already run, and ran twice. With hooks, the trace's error is raised."""
    model, calls = nn.Linear(3, 2), []
    model.register_forward_pre_hook(lambda module, args: calls.append("pre"))
    jitted = thunder.jit(model)
    jitted(torch.ones(1, 3))
    calls.clear()
    with pytest.raises(RuntimeError):
        jitted(torch.ones(1, 4))
    assert calls == ["pre"]


def test_copies_of_a_jitted_module_keep_the_hooks_registered_on_it():
    """copy.deepcopy and pickle made the copy from the original module and the options: a hook registered on the
    jitted module itself was lost (a copy of a module keeps its hooks)."""
    import pickle

    jitted = thunder.jit(nn.Linear(3, 2))
    jitted.register_forward_hook(_sevens, with_kwargs=True)
    x = torch.randn(1, 3)
    assert_same(jitted(x), torch.full((1, 2), 7.0))
    for copied in (copy.deepcopy(jitted), pickle.loads(pickle.dumps(jitted))):
        assert_same(copied(x), torch.full((1, 2), 7.0))


def _sevens(module, args, kwargs, out):
    return out * 0 + 7
