"""The CUDA fusion executor on a GPU, against eager: OpInfo forward samples of the fusible ops with the cuda
executor forced, the fused patterns (softmax, norms, cross-entropy, RoPE, full reductions, strided inputs),
bf16 training, and HF GPT-2/Llama forward and backward. Skipped without a GPU (tools/gpu_check.sh runs it on
one); on CPU, tests/test_cuda_compile.py checks that every fused pattern compiles."""
import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.executors.cudaex import cuda_executor
from thunder.executors.torchex import torch_executor

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = [cuda_executor, torch_executor]
TOL = {torch.float32: dict(atol=1e-5, rtol=1.3e-6 * 10), torch.float16: dict(atol=1e-3, rtol=1e-3),
       torch.bfloat16: dict(atol=1e-2, rtol=1.6e-2), torch.float64: dict(atol=1e-7, rtol=1e-7)}

#: OpInfo names of the fusible elementwise and reduction ops (forward samples, cuda executor forced).
FUSIBLE_OPINFOS = ["abs", "neg", "exp", "exp2", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
                   "sigmoid", "erf", "erfc", "floor", "ceil", "round", "trunc", "sign", "reciprocal", "add", "sub",
                   "mul", "div", "pow", "maximum", "minimum", "remainder", "fmod", "atan2", "eq", "lt", "ge", "where",
                   "sum", "prod", "amax", "amin", "mean", "var", "softmax", "log_softmax", "nn.functional.gelu",
                   "nn.functional.silu", "nn.functional.layer_norm", "nn.functional.rms_norm",
                   "nn.functional.cross_entropy", "clamp", "lerp", "logsumexp"]


def _opinfos():
    from torch.testing._internal.common_methods_invocations import op_db

    by_name = {}
    for op in op_db:
        if op.name in FUSIBLE_OPINFOS and op.variant_test_name == "":
            by_name.setdefault(op.name, op)
    return [by_name[n] for n in FUSIBLE_OPINFOS if n in by_name]


def _check(fn, args, kwargs=None, dtype=torch.float32):
    kwargs = kwargs or {}
    jitted = thunder.jit(fn, executors=CUDA)
    expected = fn(*args, **kwargs)
    actual = jitted(*args, **kwargs)
    torch.testing.assert_close(actual, expected, equal_nan=True, **TOL.get(dtype, {}))
    return jitted


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", _opinfos() if torch.cuda.is_available() else [], ids=lambda op: op.name)
def test_opinfo_forward_samples(op, dtype):
    if dtype not in op.supported_dtypes("cuda"):
        pytest.skip("dtype not supported by the op")
    for sample in list(op.sample_inputs("cuda", dtype, requires_grad=False))[:3]:  # 3 a dtype: the 8-minute budget
        def fn(*args, **kwargs):
            return op.op(*args, **kwargs)
        _check(fn, (sample.input, *sample.args), sample.kwargs, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(64, 96), (8, 4096), (4, 32768), (3, 1000)], ids=str)
def test_row_kernels(shape, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(*shape, device="cuda", generator=g).to(dtype)
    w = torch.randn(shape[-1], device="cuda", generator=g).to(dtype)
    t = torch.randint(0, shape[-1], (shape[0],), device="cuda", generator=g)
    _check(lambda x: torch.softmax(x, -1), (x,), dtype=dtype)
    _check(lambda x: torch.log_softmax(x, -1), (x,), dtype=dtype)
    _check(lambda x, w: F.layer_norm(x, (x.shape[-1],), w), (x, w), dtype=dtype)
    _check(lambda x, w: F.rms_norm(x, (x.shape[-1],), w), (x, w), dtype=dtype)
    _check(lambda x, t: F.cross_entropy(x.float(), t), (x, t), dtype=dtype)
    jitted = thunder.jit(lambda x: torch.softmax(x, -1), executors=CUDA)
    jitted(x)
    assert any(k["executor"] == "cuda" for k in thunder.last_kernels(jitted))


def test_nan_propagates_as_in_torch():
    x = torch.randn(16, 300, device="cuda")
    x[3, 17] = float("nan")
    _check(lambda x: x.amax(-1) + torch.maximum(x, x.flip(-1)).amin(-1), (x,))
    _check(lambda x: torch.softmax(x, -1), (x,))


@pytest.mark.parametrize("n", [1000, 1 << 17, 3 << 20])
def test_full_reductions_are_deterministic(n):
    x = torch.randn(n, device="cuda")
    jitted = _check(lambda x: (x * x).sum() + x.abs().amax(), (x,))
    first = jitted(x)
    for _ in range(5):
        assert torch.equal(jitted(x), first)


def test_strided_broadcast_and_unaligned_inputs():
    a = torch.randn(96, 64, device="cuda")
    b = torch.randn(65 * 64, device="cuda")[1:].view(63, 65)[:, :64]  # unaligned, strided
    _check(lambda a, c: (a.t() * 2).exp()[:63] + c.t()[:, :63].t().t()[:63], (a, b.t().contiguous().t()))
    x = torch.randn(4, 8, 32, device="cuda")
    _check(lambda x: torch.cat((-x[..., 16:], x[..., :16]), -1) * 2, (x,))


def test_a_cpu_scalar_is_passed_by_value_and_a_call_captures_in_a_cuda_graph():
    """A 0-dim CPU operand is a kernel argument, as torch passes it: no copy to the device, so no synchronization,
    and a jitted call can be captured in a CUDA graph (the scalar's value as it was at capture, as torch's)."""
    fn = lambda x, s: (x * s).exp() - s  # noqa: E731
    x, s = torch.randn(64, 96, device="cuda"), torch.tensor(0.75)
    jitted = _check(fn, (x, s))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graphs asks
        jitted(x, s)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = jitted(x, s)
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, fn(x, s), **TOL[torch.float32])


def test_a_branch_writing_an_input_captures_in_a_cuda_graph():
    """A converted branch whose arm writes an input copies it back under a condition on the device: no host read
    of it under no_grad, so the call can be captured in a CUDA graph, and each replay writes as the taken arm."""
    def fn(x, buf):
        if x.sum() > 0:
            buf.add_(x)
        return x * 2

    x, buf = torch.randn(64, device="cuda").abs(), torch.zeros(64, device="cuda")
    jitted = thunder.jit(fn, executors=CUDA)
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            jitted(x, buf)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            jitted(x, buf)
        for sign in (1, -1):
            before = buf.clone()
            x.copy_(sign * x.abs())
            graph.replay()
            torch.cuda.synchronize()
            torch.testing.assert_close(buf, before + x if sign > 0 else before, **TOL[torch.float32])


def test_bf16_training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 10)).cuda().to(torch.bfloat16)
    x = torch.randn(32, 64, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, 10, (32,), device="cuda")
    jitted = thunder.jit(model, executors=CUDA)
    loss = F.cross_entropy(jitted(x).float(), t)
    loss.backward()
    # thunder differentiates it: the backward's regions are CUDA kernels (half-precision CUDA graphs kept torch's
    # autograd before 2026-12-04)
    assert [g["backward"] for g in thunder.compile_stats(jitted).graphs if g["backward"]] == ["thunder"]
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    F.cross_entropy(model(x).float(), t).backward()
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, atol=5e-2, rtol=5e-2)


def test_autocast_training_step():
    """A float32 model under torch.autocast("cuda", bfloat16): the region written as casts (CUDA's lists), fused and
    differentiated by thunder; loss and gradients as eager's autocast step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 10)).cuda()
    x, t = torch.randn(32, 64, device="cuda"), torch.randint(0, 10, (32,), device="cuda")

    def step(m):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(m(x), t)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        return loss, grads

    jitted = thunder.jit(model, executors=CUDA)
    (loss, grads), (expected, expected_grads) = step(jitted), step(model)
    assert loss.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(loss, expected, atol=2e-2, rtol=2e-2)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, atol=5e-2, rtol=5e-2)
    assert [g["backward"] for g in thunder.compile_stats(jitted).graphs if g["backward"]] == ["thunder"]


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_hf_models_forward_and_backward(arch):
    from thunder import testing

    torch.manual_seed(0)
    model = (testing.hf_gpt2() if arch == "gpt2" else testing.hf_llama()).cuda()
    ids = torch.randint(0, 128, (2, 16), device="cuda")
    jitted = thunder.jit(model)  # default executors: [cpu, cuda, torch]
    out = jitted(ids, labels=ids)
    ref = model(ids, labels=ids)
    torch.testing.assert_close(out.logits, ref.logits, atol=1e-4, rtol=1e-4)
    assert any(k["executor"] == "cuda" for k in thunder.last_kernels(jitted)), "no CUDA kernel: nothing was fused"
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    ref.loss.backward()
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(grads[n], p.grad, atol=1e-4, rtol=1e-3, msg=n)
