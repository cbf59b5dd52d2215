"""thunder's autodiff: graphs whose outputs require grad compile to a forward and a backward trace (VJP rules,
forward/backward split, rematerialization), run as one torch.autograd.Function; values and gradients equal
eager's, and what the autodiff cannot differentiate keeps torch's autograd, with the reason shown."""
import copy
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from conftest import assert_same, check_program
from thunder.benchmarks.workloads import seed_loop_branch

D = torch.float64


def leaf(*shape, seed=0, dtype=D):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=dtype, generator=g).requires_grad_()


def backward_of(jitted):
    return [g["backward"] for g in thunder.compile_stats(jitted).graphs]


def grads_equal(fn, *args, rtol=1e-10, atol=1e-10, seed=0):
    """fn jitted and eager on copies of args: outputs and the gradients of a random cotangent agree.
    Returns the jitted callable."""
    eager = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    mine = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]
    jitted = thunder.jit(fn)
    out, expected = jitted(*mine), fn(*eager)
    assert_same(out, expected, rtol, atol)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    exps = expected if isinstance(expected, (tuple, list)) else (expected,)
    g = torch.Generator().manual_seed(seed)
    cots = [torch.randn(e.shape, generator=g, dtype=e.dtype) for e in exps]
    torch.autograd.backward([o for o in outs], cots)
    torch.autograd.backward([e for e in exps], cots)
    for i, (a, e) in enumerate(zip(mine, eager)):
        if isinstance(e, torch.Tensor) and e.requires_grad:
            assert_same(a.grad, e.grad, rtol, atol, f"gradient of argument {i}")
    return jitted


def assert_grads_as_eager(model, ref):
    """Each parameter of ``model`` has ``ref``'s (eager's) .grad: None exactly where it is, else equal."""
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if q.grad is not None:
            assert_same(p.grad, q.grad, path=name)


# Every prim with a VJP rule, through a torch op that decomposes into it (float64, exact to rounding).
UNARY = ["neg", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "atanh", "sigmoid", "erf", "erfc", "erfinv",
         "lgamma", "abs", "floor", "ceil", "round", "trunc", "sign"]


def _domain(name, x):
    if name in ("log", "log2", "log10", "sqrt", "rsqrt", "lgamma"):
        return x.abs() + 0.5
    if name in ("asin", "acos", "atanh", "erfinv"):
        return x.tanh() * 0.9
    if name == "log1p":
        return x.abs()
    return x


@pytest.mark.parametrize("name", UNARY)
def test_unary_vjp(name):
    op = getattr(torch, name)
    j = grads_equal(lambda x: op(_domain(name, x)) * 2, leaf(3, 4), rtol=1e-9, atol=1e-9)
    assert backward_of(j) == ["thunder"]


BINARY = {
    "add": lambda a, b: a + b * 2, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "pow": lambda a, b: a.abs().pow(b), "pow_scalar": lambda a, b: a.pow(3) + b.pow(2.0) + 2 ** a,
    "maximum": lambda a, b: torch.maximum(a, b.round()), "minimum": lambda a, b: torch.minimum(a, b),
    "atan2": torch.atan2, "remainder": lambda a, b: torch.remainder(a, b + 3), "fmod": lambda a, b: torch.fmod(a, b),
    "copysign": torch.copysign, "where": lambda a, b: torch.where(a > 0, a, b),
    "broadcast": lambda a, b: a * b[0] + b.sum(0, keepdim=True),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_vjp(name):
    j = grads_equal(BINARY[name], leaf(3, 4), leaf(3, 4, seed=1))
    assert backward_of(j) == ["thunder"]


SHAPES_AND_REDUCTIONS = {
    "reshape_transpose": lambda x: x.reshape(4, 3).t() * 2,
    "slice_flip_cat": lambda x: torch.cat([x[:, 1:], x.flip(0)[:, :1]], 1) * x,
    "squeeze_unsqueeze": lambda x: x[None, :, None].squeeze(0) * 3,
    "sum_mean": lambda x: (x.sum(0), x.mean(1, keepdim=True)),
    "amax_amin_ties": lambda x: (x.round().amax(1), x.round().amin()),
    "prod_with_zeros": lambda x: torch.where(x.abs() < 0.3, 0.0, x).prod(1),
    "var_std": lambda x: (x.var(1), x.std(0, correction=0)),
    "matmul_vec": lambda x: (x @ x[0], x[:, 0] @ x, x[0] @ x[0]),
    "batched_matmul": lambda x: x.reshape(1, 3, 4) @ x.t(),
    "gather_index_select": lambda x: (x.gather(1, torch.tensor([[0, 2], [1, 1], [3, 0]])),
                                      x.index_select(1, torch.tensor([3, 0, 3]))),
    "cumsum": lambda x: x.cumsum(1) * x,
    "softmax_logsumexp": lambda x: (F.softmax(x, 1), torch.logsumexp(x, 0)),
    "dtype_round_trip": lambda x: x.float().double() * x,
}


@pytest.mark.parametrize("name", sorted(SHAPES_AND_REDUCTIONS))
def test_shape_and_reduction_vjp(name):
    j = grads_equal(SHAPES_AND_REDUCTIONS[name], leaf(3, 4))
    assert backward_of(j) == ["thunder"]


def test_generic_rule_asks_torch_autograd_for_one_op():
    """conv2d, pooling and sort have no rule of their own: the backward recomputes each through torch.autograd."""
    conv = nn.Sequential(nn.Conv2d(2, 3, 3), nn.MaxPool2d(2)).double()
    j = grads_equal(lambda x: conv(x).sort(-1)[0] * 2, leaf(1, 2, 6, 6))
    assert backward_of(j) == ["thunder"]
    assert "autograd_vjp(" in str(thunder.last_backward_traces(j)[0])


def test_batch_norm_running_stats_updated_once():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).double().train()
    reference = copy.deepcopy(model)
    x = leaf(6, 4)
    out, expected = thunder.jit(model)(x), reference(x.detach().clone().requires_grad_())
    out.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_same(p.grad, q.grad, 1e-10, 1e-10)
    for a, b in zip(model.buffers(), reference.buffers()):
        assert_same(a, b)


def test_seed_example_1_backward_is_compiled_and_saves_only_the_input():
    loop = seed_loop_branch
    torch.manual_seed(0)
    j = thunder.jit(loop)
    for _ in range(20):
        x, y = torch.randn(5, requires_grad=True), torch.tensor(0.5, requires_grad=True)
        xe, ye = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        j(x, y).backward()
        loop(xe, ye).backward()
        assert_same((x.grad, y.grad), (xe.grad, ye.grad))
    assert backward_of(j) == ["thunder"]
    forward = thunder.last_traces(j)[-1]
    # Rematerialization: the elements x[i] and the predicates x[i] > 0 are recomputed in the backward.
    assert str(forward).rstrip().endswith(", (t0,))")  # saved: x alone
    # Each is one kernel: the elements are read inside it (no slice left to torch), and the backward's
    # gradient of x (zeros updated element by element) is stored next to y's 0-d gradient.
    for trace in (forward, thunder.last_backward_traces(j)[-1]):
        assert [(b.name, b.executor) for b in trace.symbols if b.name != "del"] == [("fusion", "cpu")], str(trace)


def test_training_loop_with_optimizer_and_accumulation():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3)).double()
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        x, t = torch.randn(4, 6, dtype=D), torch.randint(0, 3, (4,))
        for _ in range(2):  # two micro-batches: gradients accumulate
            F.cross_entropy(jitted(x), t).backward()
            F.cross_entropy(reference(x), t).backward()
        opt.step(), ref_opt.step()
        opt.zero_grad(), ref_opt.zero_grad()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_same(p, q, 1e-9, 1e-9)
    assert backward_of(jitted) == ["thunder"]


def test_only_some_inputs_require_grad_and_frozen_parameters():
    lin = nn.Linear(4, 3).double()
    lin.weight.requires_grad_(False)
    x = leaf(2, 4)
    thunder.jit(lin)(x).sum().backward()
    assert lin.weight.grad is None and lin.bias.grad is not None and x.grad is not None
    grads_equal(lambda a, b: a * b.detach() + b, leaf(3), torch.randn(3, dtype=D))


def test_hooks_retain_graph_and_autograd_grad():
    x = leaf(4)
    seen = []
    x.register_hook(lambda g: seen.append(g.clone()))
    j = thunder.jit(lambda x: (x.sin() * x).sum())
    y = j(x)
    y.backward(retain_graph=True)
    first = x.grad.clone()
    y.backward()
    assert_same(x.grad, 2 * first)
    assert len(seen) == 2
    (g,) = torch.autograd.grad(j(x), x)
    assert_same(g, first)


def test_unused_and_integer_outputs():
    j = thunder.jit(lambda x: (x * 2, x.argmax(), (x > 0).sum(), x.exp()))
    x = leaf(5)
    a, idx, count, e = j(x)
    assert not idx.requires_grad and not count.requires_grad and a.requires_grad
    a.sum().backward()  # e's gradient is never given: materialized as zeros
    assert_same(x.grad, torch.full((5,), 2.0, dtype=D))


def test_create_graph_runs_a_differentiable_backward():
    def f(x, w):
        return (torch.tanh(x @ w) * x.sum()).sum()

    x, w = leaf(3, 4), leaf(4, 2, seed=1)
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    g = torch.autograd.grad(thunder.jit(f)(x, w), (x, w), create_graph=True)
    ge = torch.autograd.grad(f(xe, we), (xe, we), create_graph=True)
    assert_same(g, ge, 1e-10, 1e-10)
    (g[0].sum() + g[1].pow(2).sum()).backward()
    (ge[0].sum() + ge[1].pow(2).sum()).backward()
    assert_same((x.grad, w.grad), (xe.grad, we.grad), 1e-10, 1e-10)


@pytest.mark.parametrize("op", ["conv1d", "avg_pool2d", "pad", "gather"])
def test_create_graph_through_ops_torch_differentiates(op):
    """The generic rule (torch's autograd on the op alone) under create_graph=True: its gradients stay connected to
    the arguments and to the incoming gradient, as eager's (a gradient penalty through a conv). It differentiated
    detached leaves without recording: the second derivative was silently wrong, or raised."""
    idx = torch.tensor([[2, 0, 1]] * 4)
    fn = {"conv1d": lambda x, w: F.conv1d(x.reshape(1, 4, 3), w.reshape(4, 4, 1)[:, :, :1].expand(4, 4, 2)),
          "avg_pool2d": lambda x, w: F.avg_pool2d((x * w).reshape(1, 1, 4, 4), 2, 1),
          "pad": lambda x, w: F.pad(x * w, (1, 1)), "gather": lambda x, w: torch.gather(x * w, 1, idx)}[op]
    shape = (4, 3) if op in ("conv1d", "gather", "pad") else (4, 4)
    grads = []
    for f in (fn, thunder.jit(fn)):
        x, w = leaf(*shape), leaf(*shape, seed=1) if op != "conv1d" else leaf(4, 4, seed=1)
        gx, = torch.autograd.grad(f(x, w).pow(3).sum(), x, create_graph=True)
        grads.append((gx,) + torch.autograd.grad(gx.pow(2).sum(), (x, w)))
    assert_same(grads[0], grads[1], 1e-10, 1e-10)


@pytest.mark.parametrize("op", ["relu", "relu6", "hardtanh", "leaky_relu", "hardshrink", "softshrink", "threshold"])
def test_create_graph_through_masking_activations(op):
    """A gradient masked where the input lies (relu's, hardtanh's...) is connected to that input with a zero
    derivative, as eager's threshold_backward & co.: the first gradient requires grad and a second backward gives the
    input zeros. A torch.where of the mask connected nothing: None, and a raise where nothing else required grad."""
    fn = {"relu": F.relu, "relu6": lambda x: F.relu6(x * 4), "hardtanh": F.hardtanh,
          "leaky_relu": lambda x: F.leaky_relu(x, 0.2), "hardshrink": F.hardshrink, "softshrink": F.softshrink,
          "threshold": lambda x: F.threshold(x, 0.1, 2.0)}[op]
    results = []
    for f in (fn, thunder.jit(fn)):
        x = torch.tensor([-1.0, -0.2, 0.0, 0.1, 0.3, 1.5], dtype=D, requires_grad=True)
        g, = torch.autograd.grad((f(x) * 3).sum(), x, create_graph=True)
        assert g.requires_grad
        g.pow(2).sum().backward()
        results.append((g, x.grad))
    assert_same(results[0], results[1], 1e-10, 1e-10)


def test_no_grad_call_compiles_no_backward():
    lin = nn.Linear(4, 3)
    j = thunder.jit(lin)
    with torch.no_grad():
        out = j(torch.randn(2, 4))
    assert not out.requires_grad
    assert backward_of(j) == [None]


@pytest.mark.parametrize("case", ["random_op", "grad_mode_inside"])
def test_what_the_autodiff_leaves_to_torch_says_why(case):
    if case == "random_op":  # an opaque random op (dropout is thunder's own: tests/test_random.py)
        lin = nn.Linear(4, 4)

        def fn(x):
            y = lin(x)
            return y * torch.rand_like(y)
        x = torch.randn(3, 4, requires_grad=True)
    else:
        def fn(x):
            with torch.no_grad():
                y = x * 2
            return x * y
        x = torch.randn(3, requires_grad=True)
    j = thunder.jit(fn)
    torch.manual_seed(0)
    out = j(x)
    out.sum().backward()
    (reason,) = backward_of(j)
    assert reason.startswith("torch (") and "effect" in reason
    assert "backward: torch (" in thunder.summary(j)
    assert thunder.last_backward_traces(j) == []


def test_bfloat16_gradients_close_to_eager():
    x = leaf(4, 16, dtype=torch.bfloat16)
    w = leaf(16, dtype=torch.bfloat16, seed=1)
    j = grads_equal(lambda x, w: F.layer_norm(F.gelu(x), (16,), w), x, w, rtol=1.6e-2, atol=2e-2)
    assert backward_of(j) == ["thunder"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_through_thunders_rules(dtype):
    x = leaf(4, 16, dtype=dtype)
    w = leaf(16, dtype=dtype, seed=1)
    j = grads_equal(lambda x, w: F.layer_norm(F.gelu(x), (16,), w).softmax(-1), x, w, rtol=1.6e-2, atol=2e-2)
    assert backward_of(j) == ["thunder"]


def test_half_precision_keeps_torch_autograd_without_the_cpu_fusion_executor():
    # Without fused kernels each prim of thunder's backward is a torch op of its own: slower than torch's autograd
    # in half precision (docs/autodiff.md).
    x = leaf(4, 16, dtype=torch.bfloat16)
    j = thunder.jit(lambda x: F.gelu(x).sum(), executors=thunder.executors.executor_sets()["torch"])
    j(x).backward()
    (reason,) = backward_of(j)
    assert reason.startswith("torch (half-precision")


def test_half_precision_backward_kernels_round_only_where_they_store():
    """The backward's kernels keep bfloat16 values in float32 between the ops of the gradient's formulas
    (HalfRounding::AtStores); the forward's round after every op, as eager does, and so do the forward's values the
    backward recomputes (x * w and its tanh here: ProxyInfo::rounded_as_forward)."""
    x = leaf(8, 64, dtype=torch.bfloat16)
    w = leaf(64, dtype=torch.bfloat16, seed=1)
    j = grads_equal(lambda x, w: (torch.tanh(x * w) * x).sum(), x, w, rtol=1.6e-2, atol=2e-2)
    sources = [k["source"] for k in thunder.last_kernels(j)]
    backward, forward = [s[s.index('extern "C" int '):] for s in sources]  # the backward is compiled first
    computed = lambda source: re.sub(r"bf16_round\(\(float\)[-+.0-9e]+\)", "", source)  # numbers are rounded
    assert "bf16_round(" in computed(forward)
    rounded = re.findall(r"= bf16_round\((.*)\);", computed(backward))
    assert len(rounded) == 2 and any(r.startswith("tanhf(") for r in rounded), rounded
    assert "float_to_bf16(" in backward


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", ["sin_of_a_product", "masks_of_a_product"])
def test_half_precision_values_the_backward_recomputes_are_the_forwards(dtype, case):
    """The backward recomputed x * 100 (x * 3) in float32, unrounded, where the forward had rounded it: sin's
    gradient came out at another point (bfloat16: -10.875 against eager's -26.125), and a mask recomputed from it
    flipped (bf16(0.333984375 * 3) is 1.0: eager's where and relu pass no gradient there; thunder's passed 1 and
    3)."""
    if case == "sin_of_a_product":
        f, x = (lambda x: (x * 100).sin()), torch.tensor([-1.2734375, 1.5234375, 0.7109375], dtype=dtype)
    else:
        f, x = (lambda x: torch.where(x * 3 > 1, x, 0.0) + torch.relu(x * 3 - 1)), \
            torch.tensor([0.333984375, 0.5, 0.3330078125], dtype=dtype)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    f(a).sum().backward()
    jitted = thunder.jit(f)
    jitted(b).sum().backward()
    assert backward_of(jitted) == ["thunder"]
    torch.testing.assert_close(b.grad, a.grad, rtol=1.6e-2, atol=1e-2)


def test_round_trip_of_forward_and_backward_traces():
    """check_program runs every forward trace and every backward trace (against torch.autograd of the graph)."""
    check_program(lambda x, w: F.silu(x @ w).softmax(-1), leaf(3, 4), leaf(4, 5, seed=1))


# Ops whose torch backward decides which side of a boundary takes the gradient (their decompositions into
# maximum/minimum/where would split it, or let an untaken log(0) make it NaN): thunder has their rules.
AT_BOUNDARIES = {
    "relu": lambda x, b: F.relu(x), "relu6": lambda x, b: F.relu6(x), "hardtanh": lambda x, b: F.hardtanh(x),
    "hardswish": lambda x, b: F.hardswish(x), "hardsigmoid": lambda x, b: F.hardsigmoid(x),
    "clamp": lambda x, b: x.clamp(0, 1), "clamp_min": lambda x, b: x.clamp_min(0), "clamp_max": lambda x, b: x.clamp_max(1),
    "clamp_tensor_bounds": lambda x, b: torch.clamp(x, min=b - 1, max=b), "fmax": torch.fmax, "fmin": torch.fmin,
    "max_dim": lambda x, b: torch.max(x.reshape(2, 4), 1)[0], "min_dim": lambda x, b: torch.min(x.reshape(2, 4), 0)[0],
    "xlogy": lambda x, b: torch.xlogy(x.clamp(0, 1), b.clamp(-1, 2)),
    "binary_cross_entropy": lambda x, b: F.binary_cross_entropy(x.clamp(0, 1), (b > 0).to(x.dtype)),
    "binary_cross_entropy_soft_target": lambda x, b: F.binary_cross_entropy(x.clamp(0, 1), b.clamp(0, 1)),
    "atan2": torch.atan2,
    # Ops whose chain rule through their decomposition gave NaN or a wrong one-sided slope at special points.
    "bce_with_logits": lambda x, b: F.binary_cross_entropy_with_logits(x, (b > 0).to(x.dtype)),
    "bce_with_logits_soft_target": lambda x, b: F.binary_cross_entropy_with_logits(x, b.nan_to_num(0.5).clamp(0, 1)),
    "bce_with_logits_pos_weight": lambda x, b: F.binary_cross_entropy_with_logits(
        x, b.nan_to_num(0.5).clamp(0, 1), reduction="sum", pos_weight=torch.full((8,), 3.0, dtype=x.dtype)),
    "xlog1py": lambda x, b: torch.special.xlog1py(x.clamp(0, 1), b.clamp(-2, 2)),
    "div_trunc": lambda x, b: torch.div(x, b, rounding_mode="trunc"),
    "sinc": lambda x, b: torch.sinc(torch.cat([x, x * 1e-170])),
    "std_constant_row": lambda x, b: torch.cat([x, torch.full((4,), 2.0, dtype=x.dtype)]).reshape(3, 4).std(1),
    "std_mean_constant_row": lambda x, b: torch.std_mean(
        torch.cat([x, torch.full((4,), 2.0, dtype=x.dtype)]).reshape(3, 4), 1, keepdim=True),
    "selu_overflowing": lambda x, b: F.selu(x * 200), "celu_overflowing": lambda x, b: F.celu(x * 200, alpha=2.0),
}


@pytest.mark.parametrize("name", sorted(AT_BOUNDARIES))
def test_gradients_at_boundaries_and_ties(name):
    x = torch.tensor([-3.0, -1.0, 0.0, 0.0, 1.0, 3.0, 6.0, 1.0], dtype=D, requires_grad=True)
    b = torch.tensor([0.0, -1.0, 0.0, 2.0, 1.0, float("nan"), 6.0, 0.0], dtype=D,
                     requires_grad=name not in ("xlogy", "xlog1py"))
    if name in ("fmax", "fmin", "clamp_tensor_bounds", "max_dim", "min_dim", "bce_with_logits_soft_target",
                "bce_with_logits_pos_weight", "binary_cross_entropy_soft_target"):
        b = b.nan_to_num(0.5).detach().requires_grad_()
    # torch's hardsigmoid backward multiplies by 1/6 rounded to float32; BCE's gradient is 1e11 at p = 0.
    rtol = 1e-7 if name in ("hardsigmoid", "binary_cross_entropy", "binary_cross_entropy_soft_target") else 1e-10
    j = grads_equal(AT_BOUNDARIES[name], x, b, rtol=rtol)
    assert backward_of(j) == ["thunder"]


AT_SPECIAL_VALUES = {
    "relu": F.relu, "maximum": lambda x: torch.maximum(x, x.flip(0)), "minimum": lambda x: torch.minimum(x, x.flip(0)),
    "max": lambda x: x.max(), "min": lambda x: x.min(), "hardshrink": F.hardshrink, "softshrink": F.softshrink,
    "entr": torch.special.entr, "logit": torch.logit, "logit_eps": lambda x: torch.logit(x, 0.25),
    "pow_half": lambda x: torch.pow(x, 0.5), "pow_minus_half": lambda x: torch.pow(x, -0.5),
    "hypot_tiny": lambda x: torch.hypot(x * 1e-200, x.flip(0) * 1e-200),
    "hypot_huge": lambda x: torch.hypot(x * 1e200, x.flip(0) * 1e200),
    "smooth_l1": lambda x: F.smooth_l1_loss(x, x.flip(0).detach() * 0.5, reduction="none"),
    "smooth_l1_beta0": lambda x: F.smooth_l1_loss(x, torch.zeros_like(x), beta=0.0),
    "huber": lambda x: F.huber_loss(x, x.flip(0).detach() * 0.5, reduction="sum", delta=0.7),
}


@pytest.mark.parametrize("name", sorted(AT_SPECIAL_VALUES))
def test_values_and_gradients_at_nan_inf_and_signed_zero(name):
    """NaN, infinities and -0.0 take eager's values and gradients: a NaN through relu, maximum or a shrink takes
    the gradient (torch masks the losers, and a NaN loses to nothing), max() gives it to the NaN, pow(x, -0.5) is
    rsqrt (NaN at -inf), entr's and logit's gradients are infinite at 0, hypot neither underflows nor overflows,
    a Huber-type loss's gradient at an infinite difference is its bound."""
    x = torch.tensor([float("nan"), -1.0, 0.0, 2.0, float("inf"), float("-inf"), -0.0, 0.5], dtype=D)
    if name.startswith("logit"):
        # Eager's logit backward differs between the lanes of its vectorized loop and its scalar one: -0.0 gives
        # -inf in the first, inf in the second (the edge test), and with eps NaN gives 0 in the first, NaN in the
        # second; which lanes an element takes depends on the length and the CPU (8 float64 elements are one
        # loop on AVX2). thunder takes the scalar rule everywhere; eager's, element by element, is that rule.
        fn, elements = AT_SPECIAL_VALUES[name], [v.reshape(1).clone().requires_grad_() for v in x.unbind()]
        expected = [torch.autograd.grad(fn(e).sum(), e)[0] for e in elements]
        got = x.clone().requires_grad_()
        out = thunder.jit(fn)(got)
        out.sum().backward()
        torch.testing.assert_close(out, fn(x), equal_nan=True)
        torch.testing.assert_close(got.grad, torch.cat(expected), equal_nan=True)
        return
    grads_equal(AT_SPECIAL_VALUES[name], x.requires_grad_())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rms_norm_without_eps_takes_the_epsilon_of_float32(dtype):
    """eps=None is the machine epsilon of the type ATen computes the norm in: float32's for a half input, not the
    half type's (which made a zero row's gradient 11.3 against eager's 2896, and moved small rows' values)."""
    fn = lambda x: F.rms_norm(x, (3,))
    x = torch.tensor([[0.0, 0.0, 0.0], [0.01, 0.01, 0.01], [1.0, -2.0, 3.0]], dtype=dtype)
    mine, eager = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, expected = thunder.jit(fn)(mine), fn(eager)
    torch.testing.assert_close(out, expected)
    out.float().sum().backward()
    expected.float().sum().backward()
    torch.testing.assert_close(mine.grad, eager.grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_rows_whose_target_is_ignored_take_no_gradient(loss, reduction):
    """ATen's kernels skip a row whose target is ignore_index. The decomposition reads class 0 in its place and
    weighted it by 0: a fully padded batch's mean (0 / 0) sent g / 0 = inf back and inf * 0 = NaN into every
    gradient (eager's is 0), and a -inf log-probability at class 0 made an ignored row's loss NaN."""
    fn = lambda x, t: getattr(F, loss)(x if loss == "cross_entropy" else x.log_softmax(-1), t,
                                       ignore_index=-1, reduction=reduction)
    jitted = thunder.jit(fn)
    inputs = torch.randn(3, 4)
    inputs[0, 0] = float("-inf")
    for t in [torch.tensor([1, 2, 0]), torch.tensor([-1, -1, -1]), torch.tensor([-1, 3, -1])]:
        x = inputs.clone().requires_grad_()
        assert_same(jitted(x, t), fn(x, t))
        actual, = torch.autograd.grad(jitted(x, t).sum(), x)
        expected, = torch.autograd.grad(fn(x, t).sum(), x)
        assert_same(actual, expected)


@pytest.mark.parametrize("executors", [None, ["torch"]], ids=["default", "torch"])
@pytest.mark.parametrize("fn", [
    lambda x: torch.linalg.vector_norm(x, dim=-1),
    lambda x: torch.linalg.vector_norm(x, ord=3, dim=-1),
    lambda x: torch.linalg.vector_norm(x),
    lambda x: F.normalize(x, dim=-1) * torch.arange(3.0),
], ids=["l2_rows", "l3_rows", "l2_all", "normalize"])
def test_the_norm_of_a_zero_vector_has_eagers_gradient(fn, executors):
    """A zero row's norm has gradient 0 in eager (ATen's norm_backward masks it; F.normalize then gives 1/eps): the
    chain rule through sqrt or pow at 0 gave inf * 0 = NaN (padding rows in F.normalize poisoned training)."""
    x = torch.zeros(3, 3)
    x[1] = torch.tensor([3.0, 4.0, 0.0])
    x[2] = torch.tensor([-1e-3, 0.0, 2e-3])
    x.requires_grad_()
    jitted = thunder.jit(fn, executors=executors)
    assert_same(jitted(x), fn(x))
    actual, = torch.autograd.grad(jitted(x).sum(), x)
    expected, = torch.autograd.grad(fn(x).sum(), x)
    assert_same(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("fn", [
    lambda x: F.leaky_relu(x, float("nan")),
    lambda x: F.elu(x, alpha=float("nan")),
    lambda x: F.softplus(x, beta=0.0),
    lambda x: F.softplus(x, beta=2.0, threshold=1.0),
], ids=["leaky_relu_nan_slope", "elu_nan_alpha", "softplus_beta_0", "softplus_threshold"])
def test_an_activations_parameter_reaches_only_its_own_side_of_the_gradient(fn, dtype):
    """torch's backward kernels give g where the input is positive (above softplus' threshold) whatever the
    parameter; the chain rule through the decompositions multiplied that g by 0 * NaN (a NaN slope) or divided by
    beta = 0, and every gradient was NaN."""
    x = torch.tensor([-2.0, -0.5, 0.0, 0.3, 1.5, 30.0], dtype=dtype, requires_grad=True)
    jitted = thunder.jit(fn)
    actual, = torch.autograd.grad(jitted(x).sum(), x)
    expected, = torch.autograd.grad(fn(x).sum(), x)
    assert_same(actual, expected)
    assert backward_of(jitted) == ["thunder"]


def test_the_input_of_a_differentiated_amax_is_saved_not_recomputed():
    # amax's VJP compares its input with its result. Recomputed in the backward, by a kernel whose loops put an
    # element in a vector body where the forward's put it in a scalar tail, sin() differed in the last bit, no
    # element of a row equalled the saved maximum, and the row's gradient was 0/0 (found by random programs).
    def fn(x):
        return torch.cat([x, x.sin()], 0).clamp(-3, 3).amax(-1, keepdim=True)

    jitted = thunder.jit(fn)
    gen = torch.Generator().manual_seed(0)
    for _ in range(6):
        x = torch.randn(9, 30, generator=gen).abs() + 0.1
        xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
        fn(xe).sum().backward()
        jitted(xj).sum().backward()
        torch.testing.assert_close(xj.grad, xe.grad)
    backward = thunder.last_backward_traces(jitted)[-1]
    assert re.search(r"^  \w+, \w+, \w+ = boxed$", str(backward), re.M), str(backward)  # the maximum, its input, x


@pytest.mark.parametrize("fn", [lambda x: x.amax(), lambda x: x.amax(1), lambda x: torch.amin(x, (0, 1), keepdim=True),
                                lambda x: x.max(), lambda x: torch.min(x), lambda x: x.max(1).values],
                         ids=["amax", "amax_dim", "amin_keepdim", "max", "min", "max_dim"])
def test_the_gradient_of_a_maximum_that_is_nan(fn):
    # torch differentiates its reductions to a maximum three ways: amax/amin share the gradient among the elements
    # equal to the result (none where it is NaN: the slice's gradients are NaN); max()/min() share it among the
    # NaNs; max(dim) gives it to the element its index names. amax's NaN slice got a gradient at its NaN.
    x = torch.tensor([[1.0, float("nan"), 5.0, float("nan")], [3.0, 3.0, 1.0, 0.0]], dtype=D, requires_grad=True)
    grads_equal(fn, x)


@pytest.mark.parametrize("op", ["clamp_min", "clamp_max", "clamp"])
def test_a_tensor_bound_that_broadcasts_the_input(op):
    # The input [4, 1] broadcast to the bound's [4, 3]: its gradient is summed back to [4, 1].
    x = torch.tensor([[-1.0], [0.0], [0.5], [2.0]], dtype=D, requires_grad=True)
    b = torch.tensor([[0.0, 0.5, 1.0]] * 4, dtype=D, requires_grad=True)
    fn = {"clamp_min": torch.clamp_min, "clamp_max": torch.clamp_max,
          "clamp": lambda x, b: torch.clamp(x, min=b - 1, max=b)}[op]
    j = grads_equal(fn, x, b)
    assert backward_of(j) == ["thunder"]
    assert thunder.compile_stats(j).graphs[0]["vjp"]["ltorch." + op] == "own"


def test_a_batch_of_rows_times_a_weight_with_an_empty_inner_dim():
    # The weight's gradient as one matmul over the rows: their count must not come from numel / 0 (SIGFPE).
    a = torch.randn(5, 5, 0, dtype=D, requires_grad=True)
    w = torch.randn(0, 5, dtype=D, requires_grad=True)
    j = grads_equal(torch.matmul, a, w)
    assert backward_of(j) == ["thunder"]


def test_compile_stats_say_which_rule_differentiated_each_op():
    def f(x, w):
        return F.conv2d(torch.relu(x), w).sin().sum()

    j = thunder.jit(f)
    j(torch.randn(1, 2, 5, 5, dtype=D, requires_grad=True), torch.randn(3, 2, 3, 3, dtype=D, requires_grad=True))
    vjp = thunder.compile_stats(j).graphs[0]["vjp"]
    assert vjp["ltorch.relu"] == "own"
    assert vjp["ltorch.conv2d"] == "generic"
    assert vjp["ltorch.sin"] == "decomposition"
    with torch.no_grad():
        j(torch.randn(1, 2, 5, 5, dtype=D), torch.randn(3, 2, 3, 3, dtype=D))
    assert thunder.compile_stats(j).graphs[-1]["vjp"] == {}  # nothing required grad


def test_embedding_padding_row_takes_no_gradient():
    emb = nn.Embedding(5, 3, padding_idx=0).double()
    reference = copy.deepcopy(emb)
    idx = torch.tensor([[0, 2, 0], [4, 2, 1]])
    thunder.jit(emb)(idx).pow(2).sum().backward()
    reference(idx).pow(2).sum().backward()
    assert_same(emb.weight.grad, reference.weight.grad)


def test_a_module_list_sliced_in_forward_keeps_the_backward_compiled():
    # Slicing a ModuleList makes a new module, whose construction Dynamo records as a usage-logging call with no
    # value; it must not count as an opaque effect (a Llama's `self.layers[:n]` kept its backward with torch).
    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4, dtype=D) for _ in range(3))

        def forward(self, x):
            for layer in self.layers[:2]:
                x = torch.tanh(layer(x))
            return x.sum()

    torch.manual_seed(0)
    model = Stack()
    reference = copy.deepcopy(model)
    j = thunder.jit(model)
    x = leaf(5, 4)
    j(x).backward()
    reference(x.detach()).backward()
    assert backward_of(j) == ["thunder"]
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_same(p.grad, q.grad, 1e-10, 1e-10)


def test_attention_is_differentiated_whole_by_torch():
    # scaled_dot_product_attention keeps torch's fused kernel and its backward (the generic rule), instead of being
    # decomposed into batched matmuls and a softmax that the backward then differentiates prim by prim.
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).tanh()

    j = grads_equal(attention, leaf(2, 3, 8, 4), leaf(2, 3, 8, 4, seed=1), leaf(2, 3, 8, 4, seed=2))
    assert backward_of(j) == ["thunder"]
    backward = str(thunder.last_backward_traces(j)[-1])
    assert "autograd_vjp(ltorch.scaled_dot_product_attention" in backward, backward
    assert "prims.matmul" not in backward


def _attention_case(case, dtype):
    """(fn, q, k, v, mask): attention over [2, 4, 6, 16] queries and 8 keys as `case` sets it up; the masks hide a
    whole row of scores (row 1), which attends to nothing (zeros)."""
    hk = 2 if case == "gqa" else 4
    q, k, v = leaf(2, 4, 6, 16, dtype=dtype), leaf(2, hk, 8, 16, seed=1, dtype=dtype), leaf(2, hk, 8, 16, seed=2, dtype=dtype)
    keep = torch.rand(6, 8, generator=torch.Generator().manual_seed(3)) > 0.3
    keep[1] = False
    keep[:, 0] |= torch.arange(6) != 1  # every other row keeps a key
    mask = {"bool_mask": keep, "float_mask": torch.zeros(2, 1, 6, 8, dtype=dtype).masked_fill(~keep, float("-inf")),
            "float_mask_grad": leaf(6, 8, seed=4, dtype=dtype)}.get(case)
    if case == "gqa":
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).tanh()), q, k, v
    if case == "causal":
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3).tanh()), q, k, v
    return (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m).tanh()), q, k, v, mask


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("case", ["causal", "bool_mask", "float_mask", "float_mask_grad", "gqa"])
def test_attention_gradients_equal_eager(case, dtype):
    # bfloat16: the forward is torch's fused CPU kernel, which also returns the rows' log-sum-exps, and the backward
    # recomputes the probabilities from them (ltorch.attention_with_logsumexp's rule; nothing [L, S] is saved).
    # float32: the same forward, and the backward torch's fused kernel, eager's (ltorch.attention_backward); with a
    # mask that requires grad (which that kernel does not differentiate), the rule's own products, as in bfloat16.
    fn, *args = _attention_case(case, dtype)
    rtol, atol = (1.6e-2, 2e-2) if dtype == torch.bfloat16 else (None, None)
    j = grads_equal(fn, *args, rtol=rtol, atol=atol)
    assert backward_of(j) == ["thunder"]
    forward, backward = str(thunder.last_traces(j)[-1]), str(thunder.last_backward_traces(j)[-1])
    assert thunder.compile_stats(j).graphs[0]["vjp"]["ltorch.attention_with_logsumexp"] == "own"
    assert "ltorch.attention_with_logsumexp(" in forward, forward
    assert "autograd_vjp(" not in backward, backward
    fused = dtype == torch.float32 and case != "float_mask_grad"
    assert ("ltorch.attention_backward(" in backward) == fused, backward
    saved = re.search(r"return \(\(\w+,\), \((.*)\)\)", forward).group(1).split(", ")
    square = [n for n in saved if re.search(rf"# {n}: \"cpu \w+\[2, 4, 6, 8\]\"", forward)]
    assert not square, f"saved attention probabilities: {square}\n{forward}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "f32"])
@pytest.mark.parametrize("case", ["batch_of_keys_1", "batch_of_queries_1", "one_key_head"])
def test_broadcast_attention_is_not_given_to_the_fused_kernel(case, dtype):
    # torch's fused CPU kernels broadcast nothing; eager's dispatcher sends such attentions to its math backend.
    # Given them, the fused backward wrote out of bounds (a crash), returned the query's batch of 1 instead of the
    # broadcast 2, or (one key head against four, a row masked with finfo.min: HF Falcon) wrong gradients.
    q_batch, kv_batch, kv_heads = {"batch_of_keys_1": (2, 1, 4), "batch_of_queries_1": (1, 2, 4),
                                   "one_key_head": (2, 2, 1)}[case]
    q = leaf(q_batch, 4, 5, 8, dtype=dtype)
    k, v = leaf(kv_batch, kv_heads, 5, 8, seed=1, dtype=dtype), leaf(kv_batch, kv_heads, 5, 8, seed=2, dtype=dtype)
    mask = torch.zeros(2, 1, 5, 5, dtype=dtype)
    mask[0, 0, 2] = torch.finfo(dtype).min
    rtol, atol = (1.6e-2, 2e-2) if dtype == torch.bfloat16 else (None, None)
    j = grads_equal(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m).tanh(), q, k, v, mask,
                    rtol=rtol, atol=atol)
    assert "attention_with_logsumexp" not in str(thunder.last_traces(j)[-1])


def test_half_precision_attention_with_dropout_keeps_its_decomposition():
    # The fused kernel draws its own dropout mask, which the backward could not regenerate: attention with dropout
    # is differentiated through its decomposition (its mask from the saved seed).
    q, k, v = (leaf(2, 3, 8, 4, dtype=torch.bfloat16, seed=s) for s in range(3))
    j = thunder.jit(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5, is_causal=True))
    j(q, k, v).sum().backward()
    assert backward_of(j) == ["thunder"]
    assert "attention_with_logsumexp" not in str(thunder.last_traces(j)[-1])
    assert torch.isfinite(q.grad).all()


def test_a_weight_applied_to_a_batch_of_rows_gets_its_gradient_from_one_matmul():
    j = grads_equal(lambda x, w: (x @ w).sin(), leaf(4, 5, 6), leaf(6, 3, seed=1))
    backward = str(thunder.last_backward_traces(j)[-1])
    assert "f64[4, 6, 3]" not in backward, backward  # no batched product summed over the batch afterwards


class _AutocastBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(32, 64), nn.LayerNorm(64), nn.Linear(64, 16)

    def forward(self, x, target):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.norm(F.gelu(self.fc1(x)))
            logits = self.fc2(h)
        return F.cross_entropy(logits.float(), target), logits


def test_autocast_region_in_a_training_step():
    """float32 parameters, a torch.autocast(bfloat16) region inside the jitted function: the region is written into
    the trace as casts (fx_import), so thunder differentiates the graph; its outputs have eager's dtypes, its
    gradients are float32 and equal eager's within bfloat16 tolerance (docs/autodiff.md, "Half precision")."""
    torch.manual_seed(0)
    model = _AutocastBlock()
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    x, target = torch.randn(8, 32), torch.randint(0, 16, (8,))
    for step in range(2):
        (loss, logits), (expected_loss, expected_logits) = jitted(x, target), reference(x, target)
        assert logits.dtype == expected_logits.dtype == torch.bfloat16
        torch.testing.assert_close(loss, expected_loss, rtol=1.6e-2, atol=1e-2)
        loss.backward()
        expected_loss.backward()
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            assert p.grad.dtype == torch.float32, name
            torch.testing.assert_close(p.grad, q.grad, rtol=1.6e-2, atol=1e-2, msg=name)
    assert backward_of(jitted) == ["thunder"]
    forward = str(thunder.last_traces(jitted)[-1])
    # The linears run in the trace as thunder's own ops (differentiated by their VJP rule), in bfloat16.
    assert "enter_autocast" not in forward and "ltorch.linear(" in forward


def test_an_opaque_op_of_an_autocast_region_runs_under_the_regions_autocast():
    """An op of the region thunder has no native op for is called under the region's own autocast state, in the
    forward and where the backward recomputes it (the generic rule): thunder differentiates the graph."""
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.special.i0(F.linear(x, w))
            z = torch.addmm(y, x, w.t())  # on autocast's lower-precision list, and opaque
        return z.float().sum()

    x, w = leaf(4, 5), leaf(4, 5, seed=1)
    j = grads_equal(f, x, w, rtol=1.6e-2, atol=1e-2)
    assert backward_of(j) == ["thunder"]
    forward = str(thunder.last_traces(j)[-1])
    assert "enter_autocast" not in forward and "_autocast" in forward, forward


@pytest.mark.parametrize("opaque", [False, True])
def test_graph_break_inside_an_autocast_region(opaque):
    """The graph after the break runs inside the region: it is written as casts too (an opaque op of it called under
    the region's autocast state)."""
    def f(x, w1, w2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.linear(x, w1).relu()
            torch._dynamo.graph_break()
            y = F.linear(h, w2)
            if opaque:
                y = torch.special.i0(y)
        return y.float().sum()

    x, w1, w2 = leaf(4, 8), leaf(16, 8, seed=1), leaf(8, 16, seed=2)
    j = grads_equal(f, x, w1, w2, rtol=1.6e-2, atol=2e-2)
    assert backward_of(j) == ["thunder", "thunder"]


def test_a_graph_run_inside_an_autocast_region_entered_outside_it():
    """A jitted function called inside `with torch.autocast(...)`: Dynamo's graph has no enter call, autocast is on
    while it runs. Its ops are written as casts and thunder differentiates it; an opaque op runs under the region's
    autocast state, also where thunder's generic rule recomputes it in the backward (which autocast's state at
    that time does not decide: GPT-2's `torch.addmm` once failed there with mat1 and mat2 of different dtypes)."""
    def plain(x, w1, w2):
        return F.linear(F.linear(x, w1).relu(), w2).float().sum()

    def with_opaque(x, w1, w2):
        return torch.special.i0(F.linear(F.linear(x, w1).relu(), w2)).float().sum()

    for f, expected in ((plain, "thunder"), (with_opaque, "thunder")):
        x, w1, w2 = leaf(4, 8), leaf(16, 8, seed=1), leaf(8, 16, seed=2)
        copies = [t.detach().clone().requires_grad_() for t in (x, w1, w2)]
        j = thunder.jit(f)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            actual, wanted = j(x, w1, w2), f(*copies)
        actual.backward()
        wanted.backward()
        torch.testing.assert_close(actual, wanted, rtol=1.6e-2, atol=2e-2)
        for a, b in zip((x, w1, w2), copies):
            torch.testing.assert_close(a.grad, b.grad, rtol=1.6e-2, atol=2e-2)
        (reason,) = backward_of(j)
        assert reason.startswith(expected), reason


def test_the_backward_frees_each_saved_value_after_its_last_use():
    """The backward takes its saved values in a list it empties (Trace.boxed_inputs) and the autograd node lets go
    of them as it starts: six layers' saved activations are freed one by one as in eager, not all held to the end
    (which peaked at 1.6x eager's memory here)."""
    from thunder.benchmarks.measure import peak_memory

    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(256, 256), nn.Tanh())])
    x = torch.randn(512, 256)

    def step(fn):
        def run():
            fn(x).sum().backward()
            for p in model.parameters():
                p.grad = None
        return run
    jitted = thunder.jit(model)
    step(jitted)()
    step(model)()
    backward = thunder.last_backward_traces(jitted)[-1]
    assert backward.trace.boxed_inputs > 0 and "  boxed.clear()" in str(backward)
    assert peak_memory(step(jitted), "cpu") <= 1.15 * peak_memory(step(model), "cpu")


def test_a_manual_sgd_step_that_clears_the_gradients_clears_them():
    """``p -= lr * p.grad; p.grad = None`` in a jitted step: Dynamo gives an in-place operator's result no source
    (pytorch/pytorch#111592) and dropped the write of ``.grad`` (torch.compile's "eager" backend too), so the next
    backward accumulated onto the old gradient and training diverged from eager's from the second step. thunder's
    rewrite rebinds the name to the tensor itself (branches._InPlaceRebinding)."""
    def make_step(model):
        def step(x):
            loss = model(x).square().mean()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
            return loss
        return step

    torch.manual_seed(1)
    eager_model = nn.Linear(4, 2)
    jit_model = copy.deepcopy(eager_model)
    eager_step, jit_step = make_step(eager_model), thunder.jit(make_step(jit_model))
    for _ in range(3):
        x = torch.randn(5, 4)
        expected, loss = eager_step(x), jit_step(x)
        torch.testing.assert_close(loss, expected)
        assert jit_model.weight.grad is None and jit_model.bias.grad is None
        torch.testing.assert_close(jit_model.weight, eager_model.weight)
    # What is not a tensor is rebound to the operator's result, as Python rebinds it.
    from thunder.frontend.branches import _thunder_inplace
    assert _thunder_inplace(3, 2, "iadd") == 5 and _thunder_inplace((1,), (2,), "iadd") == (1, 2)


def test_backward_called_inside_a_jitted_function_is_not_traced_by_dynamo(caplog):
    """loss.backward() inside the jitted function runs with Dynamo's frame hook installed: thunder's backward
    (_ThunderFunction.backward) was traced, Dynamo warned that it skipped its frames, and graphs of the backward
    trace were compiled as the user's. It is excluded from Dynamo (torch.compiler.disable)."""
    torch.manual_seed(0)
    w = torch.randn(4, 4, requires_grad=True)
    w_e = w.detach().clone().requires_grad_()

    def step(x, w):
        loss = (x @ w).tanh().sum()
        loss.backward()
        return loss

    jitted = thunder.jit(step)
    with caplog.at_level("WARNING", logger="thunder"):
        for _ in range(2):
            x = torch.randn(3, 4)
            w.grad = w_e.grad = None
            assert_same(jitted(x, w), step(x, w_e))
            assert_same(w.grad, w_e.grad)
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert len(thunder.compile_stats(jitted).graphs) == 1, thunder.summary(jitted)


def test_torch_utils_checkpoint_is_inlined_and_compiled():
    """torch.utils.checkpoint reaches thunder as the higher-order op tag_activation_checkpoint over a subgraph: its
    body is inlined (what to save or recompute is the rematerialization's choice), where the graph ran with torch
    before, warning with an internal TypeError about a GraphModule."""
    from torch.utils.checkpoint import checkpoint

    class Blocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            h = checkpoint(lambda y: self.a(y).relu(), x, use_reentrant=False)
            return checkpoint(lambda y: F.gelu(self.b(y)) * 2, h, use_reentrant=False).sum()

    torch.manual_seed(0)
    eager = Blocks()
    model = copy.deepcopy(eager)
    x = torch.randn(4, 8, requires_grad=True)
    x_t = x.detach().clone().requires_grad_()
    jitted = thunder.jit(model)
    expected, actual = eager(x), jitted(x_t)
    expected.backward()
    actual.backward()
    assert_same(actual, expected)
    assert_same(x_t.grad, x.grad)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert_same(p.grad, q.grad, path=name)
    stats = thunder.compile_stats(jitted)
    assert stats.uncompiled == [] and len(stats.graphs) == 1, thunder.summary(jitted)

    # Dropout in a checkpointed body: the backward uses the forward's mask (thunder's masks are not eager's).
    def dropped(x):
        return checkpoint(lambda y: F.dropout(y, 0.3) * 1, x, use_reentrant=False)

    x = torch.rand(1000) + 0.5
    x.requires_grad_()
    out = thunder.jit(dropped)(x)
    out.sum().backward()
    kept = out.detach() != 0
    assert 500 < int(kept.sum()) < 900
    torch.testing.assert_close(x.grad, kept.float() / 0.7)
    torch.testing.assert_close(out.detach()[kept], x.detach()[kept] / 0.7)


def test_torch_func_transforms_inside_the_graph_run_as_captured():
    """thunder.jit(torch.func.grad(f)) returned zeros (the ops between functorch's level calls traced as thunder ops,
    gradients taken of values no autograd graph connected), and vmap's batched tensors reached fused kernels
    ("Cannot access data pointer"): graphs calling torch.func's transforms run as captured, and say so."""
    from torch.func import functional_call, grad, jacrev, vmap

    def f(x):
        return (x.sin() * x).sum()

    def g(x):
        return x.sin() * x.exp()

    x = torch.tensor([0.5, -1.0, 2.0])
    # The reason names the transform (not the helper of torch's that Dynamo recorded, a pybind11 record's name).
    for fn, named in ((grad(f), "torch.func.grad, vjp or jacrev"), (jacrev(g), "torch.func.grad, vjp or jacrev"),
                      (vmap(g), "torch.vmap")):
        jitted = thunder.jit(fn)
        assert_same(jitted(x), fn(x))
        (graph,) = thunder.compile_stats(jitted).graphs
        assert not graph["compiled"] and f"(thunder's trace does not follow them): {named}" in graph["reason"]

    def calls_vmap(x):
        return vmap(g)(x) * 2

    jitted = thunder.jit(calls_vmap)
    assert_same(jitted(x), calls_vmap(x))
    reason = thunder.compile_stats(jitted).graphs[0]["reason"]
    assert "torch.vmap at test_autodiff.py:" in reason and "in calls_vmap: return vmap(g)(x) * 2" in reason, reason
    torch.manual_seed(0)
    m = nn.Linear(3, 2)
    params = {k: v.detach() for k, v in m.named_parameters()}

    def per_sample(p, xs):
        return vmap(grad(lambda p, xi: functional_call(m, p, (xi,)).pow(2).sum()), in_dims=(None, 0))(p, xs)["weight"]

    xs = torch.randn(2, 3)
    assert_same(thunder.jit(per_sample)(params, xs), per_sample(params, xs))


def test_a_tensor_hook_that_changes_the_gradient_is_applied():
    """y.register_hook(lambda g: g * 10) inside the jitted function: the hook ran but thunder's backward dropped its
    result (gradients 10x too small). A graph registering a tensor hook runs as captured."""
    def fn(x):
        y = x * 2
        y.register_hook(lambda g: g * 10)
        return (y * y).sum()

    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    jitted = thunder.jit(fn)
    actual, = torch.autograd.grad(jitted(x), x)
    expected, = torch.autograd.grad(fn(x), x)
    assert_same(actual, expected)
    assert "tensor hook" in thunder.compile_stats(jitted).graphs[0]["reason"]


class _TripledClampGrad(torch.autograd.Function):
    """clamp(min=0) whose backward is the user's own (three times the true gradient)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * (x > 0).float() * 3


class _RandomMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).float()
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        mask, = ctx.saved_tensors
        return g * mask


@pytest.mark.parametrize("function", [_TripledClampGrad, _RandomMask], ids=["custom_backward", "random_forward"])
def test_a_custom_autograd_function_is_an_opaque_op_with_its_own_backward(function):
    """A graph with a custom torch.autograd.Function ran wholly with torch (its forward and backward graphs were
    passed to the core as arguments: TypeError). It is an opaque op applied as torch applies it: the rest of the
    graph compiles, its gradient is the user's backward; a forward that draws random numbers is an effect (the
    generic rule would recompute it), so that graph keeps torch's autograd."""
    def fn(x):
        return (function.apply(x * 2) + x.sin()).sum()

    x = torch.randn(64)
    xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
    jitted = thunder.jit(fn)
    torch.manual_seed(0)
    expected = fn(xe)
    expected.backward()
    torch.manual_seed(0)
    actual = jitted(xj)
    actual.backward()
    assert_same(actual, expected)
    assert_same(xj.grad, xe.grad)
    (graph,) = thunder.compile_stats(jitted).graphs
    assert graph["compiled"]
    assert graph["backward"] == "thunder" if function is _TripledClampGrad else graph["backward"].startswith("torch (")


@pytest.mark.parametrize("fn", [lambda x: F.dropout(x, 0.0), lambda x: (F.dropout(x, 0.5, training=False), x.sin())],
                         ids=["dropout_p0", "eval_dropout_and_another"])
def test_an_input_returned_as_it_is_is_the_input_itself_in_training(fn):
    """Eager's dropout with p = 0 (or not training) returns its input itself: `out is x`. A training program's
    autograd.Function made an alias of it instead; the input itself is returned, and its gradient is eager's."""
    x = torch.randn(3, requires_grad=True)
    jitted = thunder.jit(fn)
    out, expected = jitted(x), fn(x)
    first = out[0] if isinstance(out, tuple) else out
    assert first is x and (expected[0] if isinstance(expected, tuple) else expected) is x
    assert_same(out, expected)
    grads = []
    for result in (out, expected):
        x.grad = None
        sum(t.sum() * 2 for t in (result if isinstance(result, tuple) else (result,))).backward()
        grads.append(x.grad)
    assert_same(grads[0], grads[1])


@pytest.mark.parametrize("kwargs", [{"sparse": True}, {"scale_grad_by_freq": True}, {"padding_idx": 1}],
                         ids=["sparse", "scale_grad_by_freq", "padding_idx"])
def test_embedding_options_take_torchs_gradient(kwargs):
    """embedding's own rule covers the plain op; with sparse=True (a sparse gradient, which SparseAdam requires) or
    scale_grad_by_freq, torch's autograd differentiates it whole, in thunder's backward."""
    emb = nn.Embedding(5, 3, **kwargs).double()
    ref = copy.deepcopy(emb)
    jitted = thunder.jit(emb)
    idx = torch.tensor([[1, 2, 1], [4, 1, 0]])
    assert_same(jitted(idx), ref(idx))
    jitted(idx).pow(2).sum().backward()
    ref(idx).pow(2).sum().backward()
    assert emb.weight.grad.layout == ref.weight.grad.layout
    assert_same(emb.weight.grad.to_dense(), ref.weight.grad.to_dense())
    assert backward_of(jitted) == ["thunder"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_logit_with_eps_clamps_at_bounds_rounded_to_the_dtype(dtype):
    """torch's logit_backward compares x with eps and 1 - eps in x's dtype: float16's 1 - 0.01 is 0.990234375,
    which passes the gradient (a float32 bound of 0.99 gave 0)."""
    one = torch.tensor(1.0, dtype=dtype)
    eps = torch.tensor(0.01, dtype=dtype)
    x = torch.stack([one - eps, eps, eps.nextafter(one), eps.nextafter(-one), torch.tensor(0.5, dtype=dtype)])
    grads_equal(lambda x: torch.logit(x, 0.01), x.requires_grad_(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op", [torch.sigmoid, torch.relu, lambda c: torch.sigmoid(c) * torch.tanh(c)],
                         ids=["sigmoid", "relu", "sigmoid_tanh"])
def test_an_activation_input_written_in_place_after_the_graph(op):
    """A graph input computed before it with grad recorded (here by eager code before a graph break) may be written
    in place by code after it, before the backward: eager's sigmoid, tanh and relu save their outputs, so c.mul_(2)
    changes nothing they saved. Saving c to recompute them from (rematerialization), or a relu rule reading c, made
    the backward raise "modified by an inplace operation"; such an input is saved only where a VJP reads it itself,
    and relu's reads its output."""
    def f(x, c):
        a = x * op(c)
        torch._dynamo.graph_break()
        c.mul_(2)
        return a

    x = torch.randn(4, dtype=D, requires_grad=True)
    c0 = torch.randn(4, dtype=D, requires_grad=True)
    xe, ce0 = x.detach().clone().requires_grad_(), c0.detach().clone().requires_grad_()
    thunder.jit(f)(x, c0 * 1).sum().backward()
    f(xe, ce0 * 1).sum().backward()
    assert_same(x.grad, xe.grad)
    assert_same(c0.grad, ce0.grad)


@pytest.mark.parametrize("shared", [False, True])
def test_an_output_written_through_a_view_inside_may_be_written_by_the_caller(shared):
    """`v = a * 2; v.view(2, 2).mul_(3); return v`: the program returned v as a reshape of the written value (a
    view the autograd.Function made; eager's v is no view), and the caller's `out.mul_(2)` raised "Output 0 of
    _TrainingProgram is a view and is being modified inplace". With `shared`, another output shares that memory
    too (a sum of it is returned: the backward saves nothing of it either way)."""
    def f(a):
        v = a * 2
        v.view(2, 2).mul_(3)
        return (v, v.sum()) if shared else v

    results = []
    for run in (f, thunder.jit(f)):
        a = leaf(4)
        out = run(a)
        outs = out if isinstance(out, tuple) else (out,)
        outs[0].mul_(2)
        sum(o.sum() for o in outs).backward()
        results.append((outs, a.grad))
    assert_same(results[1], results[0])
    assert backward_of(run) == ["thunder"]


def test_a_quotient_written_by_the_caller_before_the_backward():
    """The divisor's derivative read the quotient (the output, saved), which the caller may write in place before
    the backward: it raised "modified by an inplace operation" where eager's, computed from the operands
    (-g (a / b) / b, torch's div_tensor_other_backward), does not."""
    def f(a, b):
        return (a * 1) / b

    results = []
    for run in (f, thunder.jit(f)):
        a, b = leaf(3), leaf(3, seed=1)
        out = run(a, b)
        out.mul_(2)
        out.sum().backward()
        results.append((out, a.grad, b.grad))
    assert_same(results[1], results[0])


ADD_PRODUCT_BETA0 = {
    "addmm": (torch.addmm, [(2, 2), (2, 3), (3, 2)]), "baddbmm": (torch.baddbmm, [(2, 2, 2), (2, 2, 3), (2, 3, 2)]),
    "addbmm": (torch.addbmm, [(2, 2), (2, 2, 3), (2, 3, 2)]), "addmv": (torch.addmv, [(2,), (2, 3), (3,)]),
    "addr": (torch.addr, [(2, 3), (2,), (3,)]),
}


@pytest.mark.parametrize("name", sorted(ADD_PRODUCT_BETA0))
def test_the_input_of_addmm_with_beta_0_gets_a_zero_gradient(name):
    """With beta=0 addmm (and baddbmm, addbmm, addmv, addr) ignores its input, which the decomposition then does
    not read: the input's .grad stayed None, where eager's node gives it zeros (AdamW decays a parameter with a
    zero gradient and skips one with None)."""
    op, shapes = ADD_PRODUCT_BETA0[name]
    fn = lambda a, b, c: op(a, b, c, beta=0)
    args = [leaf(*shape, seed=k) for k, shape in enumerate(shapes)]
    args[0].data[0].fill_(float("nan"))  # ignored, as eager ignores it
    jitted = grads_equal(fn, *args)
    mine = [a.detach().clone().requires_grad_() for a in args]
    jitted(*mine).sum().backward()
    assert mine[0].grad is not None and torch.equal(mine[0].grad, torch.zeros_like(mine[0]))
    assert backward_of(jitted) == ["thunder"]
    # Also with the input reaching another output, whose gradient is not given (a backward for some outputs).
    both = thunder.jit(lambda a, b, c: (fn(a, b, c), a * 2))
    mine = [a.detach().clone().requires_grad_() for a in args]
    both(*mine)[0].sum().backward()
    assert mine[0].grad is not None and torch.equal(mine[0].grad, torch.zeros_like(mine[0]))


OUTPUT_VIEWS = {
    "slice": lambda x, w: (x * w)[1:],
    "transpose": lambda x, w: (x * w).t(),
    "flatten": lambda x, w: (x * w).view(-1),
    "two_intermediates": lambda x, w: ((x + w)[:2], (x * w)[1:]),
    "views_of_one": lambda x, w: (lambda y: (y, y.t(), y[1:]))(x * w),
    "unsqueeze_of_a_sum": lambda x, w: (x * w).sum(1).unsqueeze(0),
    "linear_3d_last": lambda x, w: F.linear(x.view(2, 2, 3), w)[:, -1],
    "linear_3d_two": lambda x, w: (lambda o: (o[:, 0], o[:, -1]))(F.linear(x.view(2, 2, 3), w)),
    # eager keeps the product transposed, so its .t().view(-1) is a view; thunder's is contiguous: returned as
    # computed (a copy), still writable
    "view_of_a_transposed_product": lambda x, w: (x.t() * w.t()).t().view(-1),
}


@pytest.mark.parametrize("name", sorted(OUTPUT_VIEWS))
def test_outputs_that_are_views_written_in_place_by_the_caller(name):
    """An output that is a view of a tensor the graph computes may be written in place by the caller, with grad
    recorded, as eager's may (autograd rebases the view's history). Returned as a view made inside the
    autograd.Function, it raised "Output 0 of _TrainingProgram is a view and is being modified inplace"; and outputs
    sharing memory kept torch's autograd. The program now returns the base and the views are made again after the
    call (fx_import.OutputViews), with thunder's backward."""
    fn = OUTPUT_VIEWS[name]
    results = []
    for run in (fn, thunder.jit(fn)):
        x, w = leaf(4, 3), leaf(4, 3, seed=1)
        outs = run(x, w)
        outs = outs if isinstance(outs, tuple) else (outs,)
        outs[-1].mul_(3)
        sum((o * o).sum() for o in outs).backward()
        results.append((outs, x.grad, w.grad))
    assert_same(results[1], results[0])
    assert backward_of(run) == ["thunder"]


def test_a_parameter_joined_to_a_used_output_gets_zeros_where_its_derivative_is_zero():
    """floor's derivative is zero: eager still gives w a zero .grad (w is on the loss's graph), so AdamW decays it,
    although another output (unused) is the only one whose gradient data reaches w."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.v = nn.Parameter(torch.randn(3, dtype=D)), nn.Parameter(torch.randn(3, dtype=D))

        def forward(self, x):
            return torch.floor(self.w * x) + self.v * 0, self.w * x

    model = M()
    ref = copy.deepcopy(model)
    x = torch.randn(3, dtype=D)
    for call in (thunder.jit(model), ref):
        call(x)[0].sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert q.grad is not None and p.grad is not None
        assert_same(p.grad, q.grad)


def test_a_second_backward_leaves_the_parameters_of_an_unused_output_without_gradient():
    """A gradient penalty on one head (create_graph=True) then backward: the other head's weights are on no path
    of it; eager leaves their .grad None, and thunder's differentiable backward takes them detached."""
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 3)

        def forward(self, x):
            h = torch.tanh(self.body(x))
            return self.a(h), self.b(h)

    torch.manual_seed(0)
    model = TwoHeads().double()
    ref = copy.deepcopy(model)
    x = torch.randn(5, 4, dtype=D)
    for m, call in ((model, thunder.jit(model)), (ref, ref)):
        xx = x.clone().requires_grad_()
        g, = torch.autograd.grad(call(xx)[0].sum(), xx, create_graph=True)
        g.pow(2).sum().backward()
    assert model.b.weight.grad is None and model.b.bias.grad is None
    assert_grads_as_eager(model, ref)


def test_a_parameter_only_an_unused_output_depends_on_gets_no_gradient():
    """A module returning (main, aux) whose loss uses main only: eager leaves aux's parameters' .grad None (and
    AdamW then skips them); the training program's backward gets None for aux's gradient and returns None for the
    arguments only it reaches, not zeros."""
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.main, self.aux = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 3)

        def forward(self, x):
            h = self.body(x).relu()
            return self.main(h), self.aux(h)

    torch.manual_seed(0)
    model = TwoHeads().double()
    ref = copy.deepcopy(model)
    jitted = thunder.jit(model)
    x = torch.randn(5, 4, dtype=D)
    for m, call in ((model, jitted), (ref, ref)):
        main, aux = call(x)
        main.pow(2).sum().backward()
    assert model.aux.weight.grad is None and model.aux.bias.grad is None
    assert_grads_as_eager(model, ref)
    main, aux = jitted(x)  # and both used: every parameter gets its gradient
    (main.sum() + aux.sum()).backward()
    assert model.aux.weight.grad is not None


def _unused_outputs_grads(f, args, used, create_graph=False, jitted=None):
    """The gradients of ``args`` (copies) when only the outputs ``used`` of f (jitted, then eager) enter the loss."""
    grads = []
    for fn in (jitted or thunder.jit(f), f):
        xs = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
        outs = fn(*xs)
        loss = sum(outs[i].sum() for i in used)
        if create_graph:
            gs = torch.autograd.grad(loss, [x for x in xs if x.requires_grad], create_graph=True)
            sum((g * g).sum() for g in gs).backward()
        else:
            loss.backward()
        grads.append([x.grad for x in xs])
    return grads


@pytest.mark.parametrize("create_graph", [False, True])
def test_an_unused_output_adds_nothing_to_the_gradients(create_graph):
    """An output nothing differentiates gets no gradient in eager, and its VJPs never run: the log of 0 in an
    unused output does not make the used one's gradient 0 * inf = NaN. thunder's backward for such a call is
    specialized (_core.specialize_backward), made once per set of given gradients."""
    def f(x, w):
        y = x * w
        a, b = y.split(2)  # split's VJP meets the zero of the unused part in a slice_update
        conv = F.conv1d(y.view(1, 1, -1), w.view(1, 1, -1)[..., :3])  # the generic rule (autograd_vjp)
        return a.log(), b.sin() * b, conv.sum(), y.exp() * y
    x, w = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=D), torch.randn(4, dtype=D).requires_grad_()
    jitted = thunder.jit(f)
    for used in ([1, 2], [1, 2], [3], [0, 1, 2, 3]):
        mine, eager = _unused_outputs_grads(f, [x, w], used, create_graph, jitted)
        assert mine[0] is None and eager[0] is None
        assert 0 in used or not mine[1].isnan().any(), used
        assert_same(mine[1], eager[1], path=str(used))
    specialized = next(g for g in thunder._compiled_graphs(jitted, "test")).specialized_backward_traces
    assert set(specialized) == {(False, True, True, False), (False, False, False, True)}


def test_a_backward_specialized_to_the_given_gradients_computes_nothing_for_the_missing_ones():
    """The specialization drops what only a missing gradient reaches, and a sum with such a term is its other
    term: log's VJP (a division by y) is not in the specialized backward at all."""
    def f(x, w):
        y = x * w
        return y.sin(), y.log()
    x, w = torch.tensor([0.0, 1.0, 2.0], dtype=D), torch.ones(3, dtype=D, requires_grad=True)
    jitted = thunder.jit(f)
    jitted(x, w)[0].sum().backward()
    assert_same(w.grad, torch.cos(x) * x)
    views = next(iter(thunder._compiled_graphs(jitted, "test")[0].specialized_backward_traces.values()))
    first = str(views[0])
    assert "prims.div" not in first and "prims.cos" in first, first
    assert "prims.div" in str(thunder.last_backward_traces(jitted)[0])  # the full backward has it


@pytest.mark.parametrize("op", [torch.floor, torch.ceil, torch.round, torch.trunc, torch.sign])
def test_a_derivative_zero_by_rule_runs_exactly_where_eager_runs_it(op):
    """Eager runs floor's backward (zeros) only when floor's output has a gradient, and passes the zeros on: sqrt's
    backward then divides them by 2 sqrt(0), NaN in eager too. When only sin is used, neither runs."""
    def f(x):
        y = x.sqrt()
        return x.sin(), op(y), y
    x = torch.tensor([0.0, 4.0, 2.5], dtype=D)
    for used in ([0], [1], [0, 1], [2]):
        for create_graph in (False, True):
            mine, eager = _unused_outputs_grads(f, [x.requires_grad_()], used, create_graph)
            if eager[0] is None:
                assert mine[0] is None
            else:
                torch.testing.assert_close(mine[0], eager[0], equal_nan=True, msg=f"{used}, {create_graph}")


def test_an_argument_only_an_unused_output_of_a_multi_output_op_reads_gets_none():
    """broadcast_tensors(x, w)[0] is x expanded: w is not on its graph (eager: .grad None), which the reach of the
    op's decomposition says; before, every argument of the op was joined to every output."""
    for f in (lambda x, w: torch.broadcast_tensors(x, w), lambda x, w: torch.atleast_2d(x, w),
              lambda x, w: torch.meshgrid(x, w, indexing="ij")):
        x, w = torch.randn(4, dtype=D, requires_grad=True), torch.randn(4, dtype=D, requires_grad=True)
        mine, eager = _unused_outputs_grads(f, [x, w], [0])
        assert eager[1] is None and mine[1] is None
        assert_same(mine[0], eager[0])


def test_a_backward_specialized_with_symbolic_sizes():
    def f(x, w):
        y = x * w
        return y.sin(), y.log()
    jitted = thunder.jit(f, dynamic=True)
    for n in (3, 5, 7):
        x, w = torch.arange(n, dtype=D), torch.ones(n, dtype=D, requires_grad=True)
        mine, eager = _unused_outputs_grads(f, [x, w], [0], jitted=jitted)
        assert_same(mine[1], eager[1], path=str(n))


_E, _H = 8, 2
_MHA_CALLS = {
    "self": lambda m, x, mem: m(x, x, x),
    "self, no weights": lambda m, x, mem: m(x, x, x, need_weights=False),
    "weights per head": lambda m, x, mem: m(x, x, x, average_attn_weights=False),
    "cross": lambda m, x, mem: m(x, mem, mem),
    "query, key, value distinct": lambda m, x, mem: m(x, mem, mem * 2),
    "float mask": lambda m, x, mem: m(x, x, x, attn_mask=nn.Transformer.generate_square_subsequent_mask(5, dtype=D)),
    "causal, no weights": lambda m, x, mem: m(x, x, x, attn_mask=nn.Transformer.generate_square_subsequent_mask(
        5, dtype=D), is_causal=True, need_weights=False),
    "bool mask": lambda m, x, mem: m(x, x, x, attn_mask=torch.eye(5, dtype=torch.bool).roll(1, 0)),
    "key padding mask": lambda m, x, mem: m(x, x, x, key_padding_mask=torch.arange(5).expand(3, 5) >= 4),
    "key padding, no weights": lambda m, x, mem: m(x, x, x, key_padding_mask=torch.arange(5).expand(3, 5) >= 4,
                                                    need_weights=False),
    "3-D mask": lambda m, x, mem: m(x, x, x, attn_mask=leaf(3 * _H, 5, 5, seed=3).detach()),
}


@pytest.mark.parametrize("call", list(_MHA_CALLS))
def test_multi_head_attention_is_native(call):
    """nn.MultiheadAttention's forward in training (F.multi_head_attention_forward, one call in Dynamo's graph) is a
    native op, differentiated and fused by thunder: outputs and every parameter's gradient as eager's."""
    torch.manual_seed(0)
    model = nn.MultiheadAttention(_E, _H, batch_first=True).double()
    ref = copy.deepcopy(model)
    jitted = thunder.jit(model)
    x, mem = leaf(3, 5, _E, seed=1).detach(), leaf(3, 7, _E, seed=2).detach()
    outs, expected = _MHA_CALLS[call](jitted, x, mem), _MHA_CALLS[call](ref, x, mem)
    assert_same(outs, expected)
    weights = [torch.randn(e.shape, dtype=D, generator=torch.Generator().manual_seed(4)) for e in expected
               if e is not None]
    sum((o * w).sum() for o, w in zip([o for o in outs if o is not None], weights)).backward()
    sum((e * w).sum() for e, w in zip([e for e in expected if e is not None], weights)).backward()
    assert_grads_as_eager(model, ref)
    assert not [b for b in thunder.last_traces(jitted)[0].symbols if b.is_opaque]
    assert backward_of(jitted) == ["thunder"]


def test_transformer_layers_train_natively():
    torch.manual_seed(0)
    x, mem = leaf(3, 5, _E, seed=1).detach(), leaf(3, 7, _E, seed=2).detach()
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=D)
    padding = torch.arange(5).expand(3, 5) >= 4
    for layer, call in ((nn.TransformerEncoderLayer, lambda m: m(x, src_key_padding_mask=padding)),
                        (nn.TransformerDecoderLayer, lambda m: m(x, mem, tgt_mask=mask, tgt_is_causal=True))):
        model = layer(_E, _H, dim_feedforward=16, dropout=0.0, batch_first=True).double()
        ref = copy.deepcopy(model)
        jitted = thunder.jit(model)
        out, expected = call(jitted), call(ref)
        assert_same(out, expected)
        out.pow(2).sum().backward()
        expected.pow(2).sum().backward()
        assert_grads_as_eager(model, ref)
        assert not [b for g in thunder._compiled_graphs(jitted, "test") for b in g.traces[0].trace.symbols
                    if b.is_opaque], layer.__name__


def test_multi_head_attention_outside_the_native_case_runs_with_torch():
    """bias_k/bias_v, other key dimensions, an unbatched input: the op runs with torch (opaque), values as eager."""
    x = leaf(3, 5, _E, seed=1).detach()
    for make, args in ((lambda: nn.MultiheadAttention(_E, _H, batch_first=True, add_bias_kv=True), (x, x, x)),
                       (lambda: nn.MultiheadAttention(_E, _H, batch_first=True, kdim=6, vdim=6),
                        (x, x[..., :6], x[..., :6])),
                       (lambda: nn.MultiheadAttention(_E, _H), (x[0], x[0], x[0]))):
        model = make().double()
        jitted = thunder.jit(model)
        assert_same(jitted(*args), model(*args))
        assert [b.callee for b in thunder.last_traces(jitted)[0].symbols if b.is_opaque] == \
            ["torch.nn.functional.multi_head_attention_forward"]


def _conv_by_itself(y):
    return F.conv1d(y, torch.tanh(y).expand(2, 3, 4)[..., :2])  # a weight computed from the input


@pytest.mark.parametrize("op", ["cosine_similarity", "gru_cell", "conv1d", "gru_cell(x, x)", "kron(x, x)", "0-d"])
def test_create_graph_generic_rule_with_two_arguments_from_one_source(op):
    """create_graph=True through an op the generic rule differentiates (torchex.autograd_vjp), two of whose tensor
    arguments depend on the differentiated tensor, or are the same tensor: each argument's gradient is through that
    argument alone. The rule differentiated the arguments themselves, whose total derivative already held the path
    through the other one, and thunder's backward added that path again: the first gradient, and everything trained
    from it, was wrong (a tester's gradient penalty through a GRUCell whose state is computed from its input)."""
    cell = nn.GRUCell(4, 4).double()
    fn = {"cosine_similarity": lambda x: F.cosine_similarity(x, torch.tanh(x)).sum(),
          "gru_cell": lambda x: cell(x, torch.tanh(x)).pow(2).sum(),
          "conv1d": lambda x: _conv_by_itself(x.reshape(1, 3, 4)).pow(2).sum(),
          "gru_cell(x, x)": lambda x: cell(x, x).pow(2).sum(),
          "kron(x, x)": lambda x: torch.kron(x, x).pow(2).sum(),
          "0-d": lambda x: F.cosine_similarity(x.sum(), torch.tanh(x.sum()), dim=0)}[op]  # 0-d arguments alias too
    grads = []
    for f in (fn, thunder.jit(fn)):
        x = leaf(3, 4)
        gx, = torch.autograd.grad(f(x), x, create_graph=True)
        grads.append((gx,) + torch.autograd.grad(gx.pow(2).sum(), x))
    assert_same(grads[0], grads[1], 1e-10, 1e-10)
    x = leaf(3, 4)  # without create_graph, the rule differentiates detached leaves: the same first gradient
    assert_same(torch.autograd.grad(thunder.jit(fn)(x), x)[0], grads[0][0], 1e-10, 1e-10)


@pytest.mark.parametrize("fn", [
    lambda a: torch.fft.rfft(a).abs(),
    lambda a: torch.complex(a, a * 2).abs(),
    lambda a: (torch.complex(a, a * 2) * torch.complex(a.sin(), a)).abs(),
    lambda a: torch.polar(a, a).abs(),
    lambda a: torch.view_as_real(torch.sgn(torch.complex(a, a * 2 - 1))),  # thunder's sgn is real sign
], ids=["rfft_abs", "complex_abs", "complex_mul", "polar", "complex_sgn"])
def test_ops_on_complex_values_that_require_grad_are_differentiated_by_torch(fn):
    """abs of a complex tensor gave no gradient (a.grad None, silently); thunder's rules are for real values, so an
    op reading or making a complex value that requires grad is differentiated by torch's autograd."""
    a = torch.randn(8, requires_grad=True)
    reference = a.detach().clone().requires_grad_()
    thunder.jit(fn)(a).sum().backward()
    fn(reference).sum().backward()
    assert a.grad is not None
    torch.testing.assert_close(a.grad, reference.grad)


@pytest.mark.parametrize("fn", [
    lambda z: torch.sgn(z),
    lambda z: torch.logaddexp(z, z * 2),
    lambda z: torch.logsumexp(z, 1),
    lambda z: torch.nn.functional.normalize(z, dim=1),
], ids=["sgn", "logaddexp", "logsumexp", "normalize"])
def test_ops_whose_decomposition_is_real_only_run_complex_leaves_as_torch(fn):
    """sgn(z) = z / |z| for a complex z, which thunder's sgn (prims.sign, torch.sign) is not: its generic VJP raised
    in backward. logaddexp, logsumexp and normalize decompose through maximum/amax, real only: with a complex leaf
    that requires grad, the call itself raised. Each runs as torch's op on complex inputs."""
    z = torch.randn(2, 3, dtype=torch.complex64)
    grads = []
    for f in (fn, thunder.jit(fn)):
        leaf = z.clone().requires_grad_()
        torch.view_as_real(f(leaf)).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("ord", [-2.0, -1.0, -0.5, 0.25, 0.5, float("inf"), -float("inf")])
def test_vector_norm_of_infinities_zeros_and_nans(ord):
    """A negative ord's norm of a vector whose |x|^ord all underflow to 0 is 0^(1/ord) = inf (it was 0); for ord < 1,
    a zero element gets gradient 0, as ATen masks it (|x|^(ord - 1) is infinite there: NaN); the inf norm of a row
    holding a NaN gives that row gradient 0, as eager (sgn(NaN) is 0), not NaN."""
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[inf, -inf, inf], [1.0, 2.0, 4.0]], dtype=D)
    fn = lambda t: torch.linalg.vector_norm(t, ord=ord, dim=1)  # noqa: E731
    assert_same(thunder.jit(fn)(x), fn(x))
    grads_equal(fn, torch.tensor([[0.0, -2.0, 4.0], [0.0, 0.0, 0.0], [nan, 1.0, -2.0], [1.0, -3.0, 2.0]], dtype=D,
                                 requires_grad=True))


@pytest.mark.parametrize("spelling", ["T", "mT", "H", "mH"])
def test_the_transpose_properties_keep_thunders_backward(spelling):
    """`x @ w.T` (Falcon's linear): Dynamo records getattr(w, "T"), which was an opaque view, and the graph's
    backward went to torch; w.T of more than 2 dims reverses them all."""
    def fn(x, w, v):
        return torch.tanh(x @ getattr(w, spelling)) + getattr(v, "T" if spelling == "T" else "mT").sum()

    x, w, v = leaf(2, 4, seed=1), leaf(3, 4, seed=2), leaf(2, 3, 4, seed=3)
    jitted = thunder.jit(fn)
    out = jitted(x, w, v)
    out.sum().backward()
    xe, we, ve = (t.detach().clone().requires_grad_() for t in (x, w, v))
    expected = fn(xe, we, ve)
    expected.sum().backward()
    assert_same(out, expected)
    for t, te in ((x, xe), (w, we), (v, ve)):
        assert_same(t.grad, te.grad)
    assert thunder.compile_stats(jitted).graphs[0]["backward"] == "thunder"


@pytest.mark.parametrize("op", [
    lambda a: a[:, torch.tensor([0, 2, 0])],
    lambda a: a[torch.tensor([0, -1])],
    lambda a: torch.nn.functional.pad(a, (1, 1)),
    lambda a: torch.index_put(a, (torch.tensor([0]),), torch.tensor(1.0)),
    lambda a: a.index_fill(0, torch.tensor([1]), 0.0),
    lambda a: torch.zeros(3, 3).scatter(0, torch.tensor([[0, 1, 2]]), a[:1]),
], ids=["getitem_columns", "getitem_rows", "pad", "index_put", "index_fill", "scatter_src"])
def test_a_backward_that_needs_only_indices_does_not_save_the_input(op):
    # Eager's backward of these reads the indices and sizes only, so writing the input under no_grad before the
    # backward is fine. thunder's generic rule (torch's autograd on the op, in the backward) saved the input, and
    # the backward raised "modified by an inplace operation"; their own rules read nothing of the forward.
    grads = []
    for fn in (op, thunder.jit(op)):
        leaf = torch.arange(9.0).reshape(3, 3).requires_grad_()
        a = leaf * 1
        out = fn(a)
        with torch.no_grad():
            a.fill_(9)
        out.sum().backward()
        grads.append(leaf.grad)
    assert_same(grads[1], grads[0])


def test_a_backward_given_some_output_gradients_checks_only_the_saved_values_it_reads():
    # abs saves `a` for the first output's backward; only the second output's backward runs, after a no_grad write
    # of `a`. Eager never runs abs's node; thunder's one node for both outputs unpacked every saved tensor, and
    # raised "modified by an inplace operation".
    def f(a, b):
        return a.abs().sum(), b - a

    results = []
    for fn in (f, thunder.jit(f)):
        a = torch.tensor([1.0, -2.0], requires_grad=True)
        b = torch.tensor([0.5, 3.0], requires_grad=True)
        count, diff = fn(a, b)
        with torch.no_grad():
            a.sub_(1)
        diff.sum().backward()
        results.append((count.detach(), diff.detach(), a.grad, b.grad))
    assert_same(results[1], results[0])
    # A backward that does read the written value still raises, as eager's does.
    jitted = thunder.jit(f)
    a = torch.tensor([1.0, -2.0], requires_grad=True)
    count, diff = jitted(a, torch.zeros(2))
    with torch.no_grad():
        a.sub_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        count.backward()


def test_the_private_autograd_names_a_partial_backward_unpacks_with_exist():
    # A backward given some output gradients unpacks saved tensors one by one through ctx._raw_saved_tensors and
    # SavedTensor.unpack (thunder/core/compile.py, _unpacked): a torch that renamed them would silently unpack
    # everything again (the fallback); this fails loudly instead.
    seen = []

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            raw = ctx._raw_saved_tensors
            seen.append(all(hasattr(t, "unpack") for t in raw) and torch.equal(raw[0].unpack(), ctx.saved_tensors[0]))
            return grad * 2

    x = torch.ones(2, requires_grad=True)
    Probe.apply(x).sum().backward()
    assert seen == [True]


def _independent_outputs(x, w, b):
    return x.exp(), (x.sin() * w).sum(), b.tanh()


def test_outputs_sharing_no_computed_value_are_autograd_nodes_of_their_own():
    """Outputs computed from no common value that requires grad (`x.exp()`, `x.sin() * w`, `b.tanh()`) were one
    autograd node: a backward of one freed what the others' needed ("Trying to backward through the graph a second
    time"), and one whose input's graph was freed before was entered by the other's backward. Each is a node of
    its own now, as in eager, and a joint backward gives eager's gradients."""
    jitted = thunder.jit(_independent_outputs)
    for separately in (True, False, True):
        results = []
        for fn in (_independent_outputs, jitted):
            g = torch.Generator().manual_seed(0)
            x, w, b = (torch.randn(n, generator=g).requires_grad_() for n in (3, 3, 2))
            outs = fn(x, w, b)
            if separately:
                outs[0].sum().backward()
                outs[1].backward()
                outs[2].sum().backward()
            else:
                (outs[0].sum() + outs[1] + outs[2].sum()).backward()
            results.append((outs, x.grad, w.grad, b.grad))
        assert_same(results[1], results[0])
    # b's graph freed before: the backward of p's output never enters it.
    for fn in (lambda p, b: (p * 2, b + 1), thunder.jit(lambda p, b: (p * 2, b + 1))):
        p, leaf = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
        b = leaf.exp()
        b.sum().backward()
        out, _ = fn(p, b)
        out.sum().backward()
        assert_same(p.grad, torch.full((3,), 2.0))
    assert thunder.compile_stats(jitted).graphs[0]["backward"] == "thunder"


@pytest.mark.parametrize("op", ["heaviside", "floor_divide"])
def test_an_op_autograd_cannot_differentiate_raises_in_the_backward_as_eagers(op):
    """Autograd has no derivative for heaviside or floor_divide: eager's backward through them raises "derivative
    for aten::heaviside is not implemented". thunder's VJP tables gave None (heaviside) or zeros (floor_divide)."""
    def f(x, w):
        y = torch.heaviside(w, torch.tensor(0.5)) if op == "heaviside" else torch.floor_divide(w, 0.7)
        return (x * y).sum(), (x * w).sum()

    for fn in (f, thunder.jit(f)):
        x, w = torch.rand(3, 4), torch.randn(4, requires_grad=True)
        out, other = fn(x, w)
        with pytest.raises(RuntimeError, match=f"derivative for aten::{op} is not implemented"):
            out.backward()
        other.backward()  # an output whose backward does not reach the op differentiates
        torch.testing.assert_close(w.grad, x.sum(0))


@pytest.mark.parametrize("form", ["written_later", "in_place", "augmented"])
def test_an_op_autograd_cannot_differentiate_raises_when_its_output_is_written_later(form):
    """Dynamo's example of the op's output is the tensor a later in-place op changed, whose autograd node is that
    op's (``h = torch.heaviside(x, y); h.mul_(2)``: MulBackward0): the op runs once more on meta tensors to tell.
    Eager's backward raises; thunder's gave x.grad None (review repro_01)."""
    def f(x, y):
        if form == "written_later":
            h = torch.heaviside(x, y)
        elif form == "in_place":
            h = x * 1
            h.heaviside_(y)
        else:
            h = x * 1
            h //= y
        h.mul_(2)
        return h * x

    for fn in (f, thunder.jit(f)):
        x, y = torch.randn(5, requires_grad=True), torch.randn(5)
        out = fn(x, y)
        with pytest.raises(RuntimeError, match="derivative for aten::.* is not implemented"):
            out.sum().backward()
        out = fn(x.detach(), y)  # nothing requires grad: the op is native
        torch.testing.assert_close(out, f(x.detach(), y))


def _relu_then_masked_write(x, w):
    h = x @ w
    h.relu_()
    h[:, 0].mul_(3)
    h[h > 1] = 0.5  # an opaque write: the graph's backward is torch's
    return h


def _softmax_written_with_an_opaque_view(x, w):
    t = (x @ w).softmax(-1)
    t.add_(x[:, :3])
    d = x.diagonal()  # noqa: F841 -- an opaque view: the graph's backward is torch's
    return t


def test_a_write_into_a_saved_value_of_an_input_written_in_place_raises_as_eagers():
    """`b.relu_()` saves its result, `b.mul_(2)` writes it, on the caller's non-leaf `b`: eager's backward raises.
    Dynamo's example of `b` is the tensor after both writes, whose backward to itself read nothing (no error was
    found); the graph now runs again from a copy made from a leaf, and the error is attached to `b` itself (alias
    repro_04), whether the graph returns it or not (review repro_01)."""
    def f(b):
        b.relu_()
        b.mul_(2)
        return b

    def g(b):  # not returned by the graph: Dynamo's wrapper returns it, or nothing does
        b.relu_()
        b.mul_(2)
        return b, b

    for fn in (f, thunder.jit(f), g, thunder.jit(g)):
        leaf = torch.tensor([-1.0, 2.0, 3.0], requires_grad=True)
        b = leaf * 1
        out = fn(b)
        assert (out[0] if isinstance(out, tuple) else out) is b
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            b.sum().backward()


def test_an_input_not_requiring_grad_written_with_a_value_that_does_raises_nothing():
    """`v1.relu_()` on an input that does not require grad saves nothing; `v1[:, 0] = a[:, 1]` then makes it
    require grad. Dynamo's example of v1 requires grad from the start (the write changed it): the check of
    backward errors ran relu_ on a copy requiring grad and found its output overwritten -- a spurious "modified by
    an inplace operation" (fuzz2 repro_01). The caller's tensors say which inputs require grad."""
    def f(a, v1):
        v1.relu_()
        v1[:, 0] = a[:, 1]
        return v1

    grads = []
    for fn in (f, thunder.jit(f)):
        a = torch.ones(4, 4, requires_grad=True)
        fn(a, torch.randn(4, 4) - 0.5).sum().backward()
        grads.append(a.grad)
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("f", [_relu_then_masked_write, _softmax_written_with_an_opaque_view])
def test_a_write_into_a_saved_value_raises_in_a_backward_torch_runs(f):
    """A write into a value an op saved (relu_'s result, softmax's) makes eager's backward raise "modified by an
    inplace operation". thunder raised only where its own autodiff ran the backward; in a graph whose backward is
    torch's (an opaque write or view in it), torch's autograd over the functional trace ran and gave gradients."""
    for fn in (f, thunder.jit(f)):
        torch.manual_seed(0)
        x, w = torch.randn(4, 5), torch.randn(5, 3, requires_grad=True)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            fn(x, w).sum().backward()
