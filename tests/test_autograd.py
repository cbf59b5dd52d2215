"""Autograd: gradients of inputs and parameters through compiled programs
equal eager's (float64 where possible, so the comparison is tight)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from conftest import PRIMS_ONLY, assert_same

D = torch.float64


def grads_match(fn, *args, executors=None, rtol=1e-10, atol=1e-10):
    """Runs fn eagerly and jitted on copies of args (tensors that require grad), backprops a random cotangent."""
    eager_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                  for a in args]
    jit_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                for a in args]
    expected = fn(*eager_args)
    actual = thunder.jit(fn, executors=executors)(*jit_args)
    assert_same(actual, expected, rtol, atol)
    outs_e = tuple(expected) if isinstance(expected, (tuple, list)) else (expected,)
    outs_a = tuple(actual) if isinstance(actual, (tuple, list)) else (actual,)
    g = torch.Generator().manual_seed(0)
    cots = [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outs_e]
    torch.autograd.backward([o for o in outs_e], cots)
    torch.autograd.backward([o for o in outs_a], cots)
    for i, (a, e) in enumerate(zip(jit_args, eager_args)):
        if isinstance(e, torch.Tensor) and e.requires_grad:
            assert a.grad is not None, f"argument {i} got no gradient"
            assert_same(a.grad, e.grad, rtol, atol, f"gradient of argument {i}")


def leaf(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=D, generator=g).requires_grad_()


PROGRAMS = {
    "elementwise": (lambda x, y: (torch.sin(x) * y.exp() + x / (y * y + 1)).tanh(), (leaf(3, 4), leaf(3, 4, seed=1))),
    "broadcast": (lambda x, b: (x * b + b).sum(0), (leaf(3, 4), leaf(4, seed=1))),
    "reductions": (lambda x: (x.sum(1), x.mean(), x.amax(0), x.prod(1), torch.max(x)), (leaf(3, 4),)),
    "softmax": (lambda x: (F.softmax(x, -1), F.log_softmax(x, 0)), (leaf(3, 5),)),
    "norms": (lambda x, w, b: (F.layer_norm(x, (6,), w, b), F.rms_norm(x, (6,), w)),
              (leaf(2, 3, 6), leaf(6, seed=1), leaf(6, seed=2))),
    "activations": (lambda x: (F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.relu(x), torch.sigmoid(x)),
                    (leaf(4, 5),)),
    "linear": (lambda x, w, b: F.linear(x, w, b), (leaf(2, 5), leaf(3, 5, seed=1), leaf(3, seed=2))),
    "matmul": (lambda a, b: (a @ b, torch.bmm(a[None], b[None])), (leaf(3, 4), leaf(4, 2, seed=1))),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), (leaf(5, 4), torch.tensor([0, 3, 1, 1, 2]))),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    (leaf(1, 2, 4, 8), leaf(1, 2, 4, 8, seed=1), leaf(1, 2, 4, 8, seed=2))),
    "sdpa_gqa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                 (leaf(1, 4, 3, 8), leaf(1, 2, 3, 8, seed=1), leaf(1, 2, 3, 8, seed=2))),
    "views_index": (lambda x: (x[1:, None, ::2].transpose(0, 2).reshape(-1) * 2, x.view(12)[3:7], x[..., -1]),
                    (leaf(3, 4),)),
    "cat_split": (lambda x, y: [t * i for i, t in enumerate(torch.cat([x, y], 1).split([2, 3, 1], 1))],
                  (leaf(2, 3), leaf(2, 3, seed=1))),
    "where_clamp": (lambda x, y: (torch.where(x > 0, x, y * 2), x.clamp(-0.5, 0.5), x.masked_fill(y > 0, 0.0)),
                    (leaf(3, 4), leaf(3, 4, seed=1))),
    "embedding": (lambda w: F.embedding(torch.tensor([[0, 2], [2, 1]]), w), (leaf(3, 4),)),
    "opaque": (lambda x: torch.cumsum(x, 0) * torch.special.i0(x), (leaf(3, 3),)),
    "no_grad_input": (lambda x, c: x * c + c, (leaf(3), torch.randn(3, dtype=D))),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_input_gradients(name):
    fn, args = PROGRAMS[name]
    grads_match(fn, *args)


@pytest.mark.parametrize("name", ["elementwise", "softmax", "norms", "activations", "cross_entropy", "sdpa_causal",
                                  "sdpa_gqa", "where_clamp"])
def test_input_gradients_through_decompositions(name):
    fn, args = PROGRAMS[name]
    grads_match(fn, *args, executors=[PRIMS_ONLY], rtol=1e-9, atol=1e-9)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc1 = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, idx, target):
        h = F.gelu(self.ln(self.fc1(self.emb(idx))))
        logits = self.fc2(h)
        return F.cross_entropy(logits.view(-1, 10), target.view(-1))


def test_parameter_gradients_of_a_module():
    torch.manual_seed(0)
    model = Net().to(D)
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    idx, target = torch.randint(0, 10, (2, 5)), torch.randint(0, 10, (2, 5))
    for step in range(2):  # the second step accumulates into .grad
        loss, expected = jitted(idx, target), reference(idx, target)
        assert_same(loss, expected, 1e-12, 1e-12)
        loss.backward()
        expected.backward()
        for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
            assert p.grad is not None, name
            assert_same(p.grad, q.grad, 1e-10, 1e-10, f"step {step}: grad of {name}")


def test_training_loop_matches_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(D)
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_ref = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        x, y = torch.randn(6, 4, dtype=D), torch.randn(6, 1, dtype=D)
        for m, o in ((jitted, opt), (reference, opt_ref)):
            o.zero_grad()
            F.mse_loss(m(x), y).backward()
            o.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_same(p, q, 1e-10, 1e-10)


def test_requires_grad_metadata_in_the_trace():
    x = leaf(3)
    c = torch.randn(3, dtype=D)
    jitted = thunder.jit(lambda x, c: (x * 2, c * 2))
    a, b = jitted(x, c)
    assert a.requires_grad and not b.requires_grad
    text = str(thunder.last_traces(jitted)[0])
    assert "requires_grad" in text


def test_no_grad_context():
    x = leaf(3)
    jitted = thunder.jit(lambda x: x.exp() * 2)
    with torch.no_grad():
        out = jitted(x)
    assert not out.requires_grad
    out = jitted(x)
    assert out.requires_grad
    out.sum().backward()
    assert_same(x.grad, x.detach().exp() * 2)


def test_float32_gradients():
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 8, requires_grad=True)
    grads_match(lambda x, w: F.softmax(F.silu(x @ w), -1), x, w, rtol=1.3e-6, atol=1e-5)


def test_forward_mode_ad_tangents_reach_the_outputs():
    """Dynamo's guards do not tell dual tensors apart, and thunder's programs dropped their tangents
    (unpack_dual(out).tangent was None): inside a dual level the graphs run with torch."""
    import torch.autograd.forward_ad as fwAD

    def f(x):
        return x.sin() * 2

    jitted = thunder.jit(f)
    x = torch.arange(3.)
    jitted(x)  # compiled outside a dual level first
    tangents = []
    for fn in (f, jitted):
        with fwAD.dual_level():
            tangents.append(fwAD.unpack_dual(fn(fwAD.make_dual(x, torch.ones_like(x)))).tangent)
    torch.testing.assert_close(tangents[1], tangents[0])


def test_batched_output_gradients_run_the_backward_with_torch_ops():
    """autograd.grad(..., is_grads_batched=True) vmaps the backward: the kernels read batched tensors' memory,
    which they have not ("Cannot access data pointer")."""
    def f(x, w):
        return (x @ w).tanh() * 2

    x, w = torch.randn(3, 4), torch.randn(4, 2)
    grad_outputs = torch.eye(6).view(6, 3, 2)
    grads = []
    for fn in (f, thunder.jit(f)):
        xr = x.clone().requires_grad_()
        grads.append(torch.autograd.grad(fn(xr, w.clone().requires_grad_()), xr, grad_outputs,
                                         is_grads_batched=True)[0])
    torch.testing.assert_close(grads[1], grads[0])
