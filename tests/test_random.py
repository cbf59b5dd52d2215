"""Functional randomness: prims.random_seed (a seed drawn from torch's generator at each run) and
prims.uniform_philox (Philox4x32-10 of the seed and the element's index), dropout decomposed into them, fused
into kernels, its mask regenerated in the backward, reproducible under torch.manual_seed."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
import thunder.core.compile as compile_
from thunder.executors import executor_sets
from thunder.executors.torchex import philox4x32_10, uniform_philox
from thunder.testing import hf_gpt2

TORCH = executor_sets()["torch"]

# Philox4x32-10's known answers (Salmon et al., SC '11, as published with Random123): counter, key, output.
KATS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def backward_of(j):
    return [g["backward"] for g in thunder.compile_stats(j).graphs]


@pytest.mark.parametrize("counter,key,expected", KATS)
def test_torch_philox_matches_the_known_answers(counter, key, expected):
    # Python ints, and the same as int64 tensors (the torch executor's arithmetic).
    assert tuple(philox4x32_10(*counter, *key)) == expected
    got = philox4x32_10(*(torch.tensor([c]) for c in counter), *key)
    assert tuple(int(w) for w in got) == expected


def test_uniform_philox_is_a_function_of_seed_and_offset_plus_index():
    seed = torch.tensor(-1234567890123)
    u = uniform_philox((4, 5), seed, 0, torch.float32, "cpu")
    assert u.shape == (4, 5) and u.dtype == torch.float32
    assert ((u >= 0) & (u < 1)).all()
    assert torch.equal(uniform_philox((20,), seed, 0, torch.float32, "cpu"), u.reshape(-1))
    assert torch.equal(uniform_philox((7,), seed, 13, torch.float32, "cpu"), u.reshape(-1)[13:])
    assert not torch.equal(uniform_philox((4, 5), torch.tensor(1), 0, torch.float32, "cpu"), u)
    # element 0 of seed 0 is the first word of the first known answer
    assert uniform_philox((1,), torch.tensor(0), 0, torch.float32, "cpu").item() == (0x6627E8D5 >> 8) * 2.0**-24
    for dtype, bits in [(torch.float16, 11), (torch.bfloat16, 8), (torch.float64, 53)]:
        v = uniform_philox((1000,), seed, 0, dtype, "cpu")
        assert v.dtype == dtype and ((v >= 0) & (v < 1)).all()
        assert torch.equal(v.double() * 2.0**bits, (v.double() * 2.0**bits).floor())  # multiples of 2^-bits


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keeps_one_minus_p_of_the_elements_scaled_as_torch_does(p):
    n = 1_000_000
    x = torch.rand(n) + 0.5  # no zeros: out == 0 exactly where dropped
    torch.manual_seed(0)
    out = thunder.jit(lambda x: F.dropout(x, p, training=True))(x)
    kept = out != 0
    rate = kept.double().mean().item()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(rate - (1 - p)) < 5 * sigma, (rate, 1 - p, sigma)
    # torch: noise = bernoulli(1 - p) / (1 - p) in the input's dtype, out = input * noise
    scale = torch.ones(()) / (1 - p)
    assert torch.equal(out[kept], x[kept] * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_the_kernels_draw_what_the_torch_executor_draws_bit_for_bit(dtype, monkeypatch):
    def f(x):
        return F.dropout(x, 0.3, training=True) * 2

    # Training: the forward runs prims, and thunder differentiates it. In half precision the torch executor alone
    # would keep torch's autograd (docs/autodiff.md, "Half precision"), whose dropout draws torch's own mask:
    # the hold is lifted here, so that both programs draw through prims.uniform_philox.
    monkeypatch.setattr(compile_, "_autodiff_held_back", lambda *args, **kwargs: None)
    x = torch.randn(37, 129, dtype=dtype, requires_grad=True)
    outs = []
    for executors in (None, TORCH):
        torch.manual_seed(7)
        j = thunder.jit(f) if executors is None else thunder.jit(f, executors=executors)
        y = j(x)
        y.sum().backward()
        outs.append((y.detach(), x.grad.clone()))
        x.grad = None
    (y0, g0), (y1, g1) = outs
    assert torch.equal(y0, y1) and torch.equal(g0, g1)
    assert 0.6 < (y0 != 0).float().mean().item() < 0.8


def mlp():
    torch.manual_seed(123)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.3), nn.Linear(32, 8), nn.Dropout(0.2)).train()


def loss_and_grads(model, j, x, seed):
    torch.manual_seed(seed)
    model.zero_grad()
    loss = j(x).pow(2).mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_the_same_seed_gives_the_same_loss_and_gradients_and_another_seed_others():
    model = mlp()
    x = torch.randn(64, 16)
    j = thunder.jit(model)
    a = loss_and_grads(model, j, x, 0)
    b = loss_and_grads(model, j, x, 0)
    c = loss_and_grads(model, j, x, 1)
    assert torch.equal(a[0], b[0]) and all(torch.equal(u, v) for u, v in zip(a[1], b[1]))
    assert not torch.equal(a[0], c[0])
    assert backward_of(j) == ["thunder"]
    # A fresh wrapper (a fresh compile) draws the same too.
    d = loss_and_grads(model, thunder.jit(model), x, 0)
    assert torch.equal(a[0], d[0]) and all(torch.equal(u, v) for u, v in zip(a[1], d[1]))


def test_gradients_are_those_of_the_mask_the_forward_drew():
    x = (torch.rand(50, 40) + 0.5).requires_grad_()
    w = torch.randn(50, 40)
    j = thunder.jit(lambda x: F.dropout(x, 0.4, training=True))
    torch.manual_seed(3)
    y = j(x)
    (y * w).sum().backward()
    kept = (y != 0).detach()  # the forward's mask (x has no zeros)
    torch.testing.assert_close(y, torch.where(kept, x * (torch.ones(()) / 0.6), 0.0), rtol=0, atol=0)
    torch.testing.assert_close(x.grad, torch.where(kept, w * (torch.ones(()) / 0.6), 0.0), rtol=0, atol=0)


def test_the_backward_regenerates_the_mask_inside_its_kernel_and_saves_only_the_seed():
    x = torch.randn(8, 64, requires_grad=True)
    j = thunder.jit(lambda x: F.gelu(F.dropout(x, 0.5, training=True)))
    j(x).sum().backward()
    assert backward_of(j) == ["thunder"]
    forward, backward = str(thunder.last_traces(j)[-1]), str(thunder.last_backward_traces(j)[-1])
    assert "prims.random_seed()" in forward
    # The backward reads the seed (0-d int64), x (GELU's input is recomputed from it) and the output's gradient:
    # no mask.
    header = backward.split("def computation(")[1].split("\n\n")[0]
    assert header.count('"cpu i64[]"') == 1 and header.count('"cpu f32[8, 64]"') == 2 and "b8" not in header, backward
    # One backward kernel, which draws the uniforms itself (its prims are the comment lines under the call).
    calls = [line for line in backward.splitlines() if "= cpu_fusion" in line and not line.lstrip().startswith("#")]
    assert len(calls) == 1, backward
    assert [line for line in backward.splitlines() if "prims.uniform_philox(" in line][0].lstrip().startswith("# ")
    (unit,) = [k["source"] for k in thunder.last_kernels(j)] [-1:]
    assert "thunder_uniform_float(" in unit


@pytest.mark.parametrize("p,training", [(0.0, True), (0.5, False), (1.0, True)])
def test_dropout_edge_cases_as_torch(p, training):
    x = torch.randn(6, 5)
    x[0, 0] = float("nan")
    x[0, 1] = float("inf")
    torch.manual_seed(0)
    got = thunder.jit(lambda x: F.dropout(x, p, training=training))(x)
    torch.manual_seed(0)
    expected = F.dropout(x, p, training=training)
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)


def test_nn_dropout_in_eval_mode_is_the_identity_and_invalid_p_raises_as_torch():
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    x = torch.randn(3, 4)
    torch.testing.assert_close(thunder.jit(m)(x), m(x))
    with pytest.raises(ValueError, match="between 0 and 1"):
        thunder.jit(lambda x: F.dropout(x, 1.5, training=True))(x)


def test_two_dropouts_of_one_tensor_draw_two_masks():
    x = torch.ones(1000)
    a, b = thunder.jit(lambda x: (F.dropout(x, 0.5), F.dropout(x, 0.5)))(x)
    assert not torch.equal(a, b)


def test_create_graph_reruns_the_forward_with_the_same_mask():
    x = (torch.rand(30) + 0.5).requires_grad_()
    j = thunder.jit(lambda x: F.dropout(x, 0.5, training=True).pow(2).sum())
    torch.manual_seed(5)
    loss = j(x)
    (g,) = torch.autograd.grad(loss, x, create_graph=True)
    kept = (g != 0).detach()
    torch.testing.assert_close(g, torch.where(kept, 2 * x * 4, 0.0))  # d/dx (2x)^2 = 8x where kept
    g.sum().backward()
    torch.testing.assert_close(x.grad, torch.where(kept, 8.0, 0.0))
    assert 0.3 < kept.float().mean().item() < 0.7


def test_attention_dropout_is_thunders_and_reproducible():
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)

    j = thunder.jit(f)
    runs = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        out = j(q, k, v)
        grads = torch.autograd.grad(out.sum(), (q, k, v))
        runs.append((out.detach(), grads))
    assert backward_of(j) == ["thunder"]
    assert torch.equal(runs[0][0], runs[1][0]) and all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))
    assert not torch.equal(runs[0][0], runs[2][0])
    no_dropout = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert not torch.allclose(runs[0][0], no_dropout)
    assert all(torch.isfinite(g).all() for g in runs[0][1])


def test_gpt2_training_step_with_dropout_is_differentiated_and_fused_by_thunder():
    model = hf_gpt2(resid_pdrop=0.1, attn_pdrop=0.1, embd_pdrop=0.1).train()
    ids = torch.randint(0, 128, (2, 16))
    j = thunder.jit(model)
    losses = []
    for seed in (0, 0):
        torch.manual_seed(seed)
        model.zero_grad()
        logits = j(ids).logits
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
        loss.backward()
        losses.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    assert math.isfinite(losses[0][0].item())
    assert torch.equal(losses[0][0], losses[1][0])
    assert all(torch.equal(a, b) for a, b in zip(losses[0][1], losses[1][1]))
    stats = thunder.compile_stats(j)
    assert len(stats.graphs) == 1 and stats.graphs[0]["backward"] == "thunder", backward_of(j)
    forward, backward = str(thunder.last_traces(j)[-1]), str(thunder.last_backward_traces(j)[-1])
    # 2 layers: embedding, attention weights (per layer), attention output and MLP output (per layer) = 7 draws
    assert forward.count("prims.random_seed()") == 7
    # every mask regenerated inside a backward kernel (a comment line under a fusion), none saved
    assert backward.count("= prims.uniform_philox(") == 7
    assert all(line.lstrip().startswith("# ") for line in backward.splitlines() if "prims.uniform_philox(" in line)
    inputs = backward.split("\n\n")[1]
    assert " b8[2, " not in inputs  # no dropout mask among the backward's inputs (the [16, 16] causal mask is one)
    assert inputs.count('"cpu i64[]"') == 7  # the seeds
    # In eval mode the same model draws nothing.
    model.eval()
    with torch.no_grad():
        je = thunder.jit(model)
        je(ids)
    assert "random_seed" not in str(thunder.last_traces(je)[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_drawing_kernels_vectorize(dtype, tmp_path):
    # Philox per element is integer multiplies and xors, which GCC vectorizes (a loop converting the bool mask
    # to float would not: the decomposition selects 1.0 or 0.0 instead).
    import re
    import subprocess

    if dtype == torch.float64 and not torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        pytest.skip("a float64 uniform converts 64-bit integers to double, which x86 vectorizes from AVX-512 on")
    x = torch.randn(16, 64, dtype=dtype, requires_grad=True)
    j = thunder.jit(lambda x: x + F.dropout(F.gelu(x), 0.1, training=True))
    j(x).sum().backward()
    flags = [f for f in thunder._core.default_compile_flags() if f not in ("-shared", "-w") and not f.startswith("-l")]
    kernels = thunder.last_kernels(j)
    assert len(kernels) == 2  # forward and backward, each one kernel drawing the uniforms
    for k, kernel in enumerate(kernels):
        assert "thunder_uniform_" in kernel["source"].split('extern "C"')[1]
        path = tmp_path / f"kernel{k}.cc"
        path.write_text(kernel["source"])
        report = subprocess.run(["g++", *flags, "-c", str(path), "-o", str(tmp_path / f"kernel{k}.o"),
                                 "-fopt-info-vec-optimized"], capture_output=True, text=True, check=True).stderr
        assert re.search(rf"{path.name}:\d+:\d+: optimized: loop vectorized", report), report


@pytest.mark.parametrize("draw", ["rrelu", "gumbel_softmax", "gamma_rsample"])
def test_gradients_of_opaque_random_ops_are_those_of_the_sample_the_forward_drew(draw):
    """Ops thunder does not know whose names do not say they draw (F.rrelu in training, F.gumbel_softmax, a Gamma's
    rsample: torch._standard_gamma) are found to draw by the aten ops they dispatch on fake tensors: the graph
    keeps torch's autograd. Differentiated by thunder's generic rule, which reruns an op in the backward, their
    gradients were those of another sample."""
    def f(x):
        if draw == "rrelu":
            return F.rrelu(x * 1.0, training=True)
        if draw == "gumbel_softmax":
            return F.gumbel_softmax(x, tau=1.0) * torch.arange(8.0)
        return torch.distributions.Gamma(x, torch.ones_like(x)).rsample()

    def gradient(fn):
        torch.manual_seed(0)
        x = (-torch.rand(64, 8) - 0.5 if draw == "rrelu" else torch.rand(64, 8) + 1).requires_grad_()
        out = fn(x)
        out.sum().backward()
        return out.detach(), x.grad

    expected, jitted = gradient(f), gradient(thunder.jit(f))
    torch.testing.assert_close(jitted[0], expected[0])
    torch.testing.assert_close(jitted[1], expected[1])


def test_dropout_with_p_read_at_run_time_is_native_and_differentiated():
    # dynamic=True passes p (a float argument, nn.Dropout's attribute) as a number read at run time: dropout was
    # opaque, and the whole training graph kept torch's autograd. (Dynamo still guards on p's value in F.dropout's
    # range check: each p is a graph of its own.)
    def f(x, p):
        return F.dropout(x, p, training=True) * 1

    jitted = thunder.jit(f, dynamic=True)
    x = (torch.rand(4096) + 0.5).requires_grad_()
    for p in (0.3, 0.0, 1.0, 0.6):
        out = jitted(x, p)
        out.backward(torch.ones_like(out))
        kept = out != 0
        assert abs(kept.double().mean().item() - (1 - p)) < 0.05
        scale = torch.ones(()) / (1 - p) if p < 1 else torch.zeros(())
        assert torch.equal(out[kept], (x * scale)[kept].detach()) and torch.equal(x.grad, kept * scale)
        x.grad = None
    assert torch.isnan(jitted(torch.tensor([float("nan"), 1.0]), 1.0)).tolist() == [True, False]
    stats = thunder.compile_stats(jitted)
    assert all(g["backward"] == "thunder" for g in stats.graphs[:4]), thunder.summary(jitted)


def test_dropout_with_p_read_at_run_time_returned_is_its_input_for_p_0():
    # Returned, it stays opaque: eager's dropout with p = 0 is the input itself, which the caller's write reaches
    # (native, it was a product with ones).
    def f(x, p):
        return F.dropout(x, p, training=True)

    jitted = thunder.jit(f, dynamic=True)
    for p in (0.5, 0.0):
        x = torch.ones(4)
        out = jitted(x, p)
        out.add_(1)
        assert (out is x) == (p == 0.0) and x.tolist() == ([2.0] * 4 if p == 0.0 else [1.0] * 4)
