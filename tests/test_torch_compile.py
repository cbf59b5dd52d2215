"""thunder as a torch.compile backend: torch.compile(model, backend="thunder")."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from thunder.frontend import dynamo
from conftest import assert_same


def test_backend_is_registered():
    assert "thunder" in torch._dynamo.list_backends()


def test_compile_a_module_with_the_thunder_backend():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))
    reference = copy.deepcopy(model)
    before = len(dynamo.GLOBAL_STATE.graphs)
    compiled = torch.compile(model, backend="thunder")
    x = torch.randn(3, 8)
    assert_same(compiled(x), reference(x))
    assert_same(compiled(x), reference(x))
    new = dynamo.GLOBAL_STATE.graphs[before:]
    assert len(new) == 1 and hasattr(new[0], "traces"), "thunder compiled the graph"
    assert new[0].calls == 2
    assert "ltorch.linear(" in str(new[0].traces[0])


def test_compile_a_function_and_backprop():
    def fn(x, w):
        return F.softmax(x @ w, -1).sum(0)

    compiled = torch.compile(fn, backend="thunder")
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    out, expected = compiled(x, w), fn(xe, we)
    assert_same(out, expected)
    out.sum().backward()
    expected.sum().backward()
    assert_same(x.grad, xe.grad)
    assert_same(w.grad, we.grad)


def test_graph_breaks_under_torch_compile():
    def fn(x):
        y = x.exp()
        if y.sum() > 3:
            return y * 2
        return y - 2

    compiled = torch.compile(fn, backend="thunder")
    for x in (torch.ones(3), -torch.ones(3)):
        assert_same(compiled(x), fn(x))


def test_thunder_jit_uses_its_own_state_not_the_global_one():
    before = len(dynamo.GLOBAL_STATE.graphs)
    jitted = thunder.jit(lambda x: x * 3)
    jitted(torch.ones(2))
    assert len(dynamo.GLOBAL_STATE.graphs) == before
    assert len(jitted._thunder_state.graphs) == 1
