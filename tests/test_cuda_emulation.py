"""The CUDA dialect's values, on CPU: its kernels compiled by g++ with GPU threads emulated as OS threads
(thunder.executors.cuda_emulation), against eager PyTorch. No GPU is needed; the compile check
(test_cuda_compile.py) shows the same kernels compile with NVRTC."""
import shutil

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.executors import cuda as check
from thunder.executors.cuda_emulation import emulating_executor, host_source
from thunder.executors.torchex import torch_executor

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator compiles with g++")

EXECUTORS = [emulating_executor, torch_executor]

#: Tolerances by dtype: the dialect computes halves in float32 and rounds after every op, as eager does; its
#: reductions combine in another order than ATen's CPU kernels, and the host's libm stands in for CUDA's.
_TOL = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2), torch.float32: (1e-5, 1.3e-5),
        torch.float64: (1e-10, 1e-10)}


def _close(actual, expected, what):
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), what
        for k, (a, e) in enumerate(zip(actual, expected)):
            _close(a, e, f"{what}[{k}]")
        return
    if expected is None:
        assert actual is None, what
        return
    atol, rtol = _TOL.get(expected.dtype, (0, 0))
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{what}: {m}")


def _compiled(jitted):
    fell_back = [g["reason"] for g in thunder.compile_stats(jitted).graphs if not g["compiled"]]
    assert not fell_back, fell_back[0]


def _leaves(args):
    return [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]


def _run(fn, args, grad):
    """fn's outputs (and, with ``grad``, the gradients of its inputs that require them) through the emulated CUDA
    kernels and in eager."""
    jitted = thunder.jit(fn, executors=EXECUTORS)
    results = []
    for run in (jitted, fn):
        inputs = _leaves(args)
        with torch.enable_grad() if grad else torch.no_grad():
            out = run(*inputs)
            grads = None
            if grad:
                outs = out if isinstance(out, tuple) else (out,)
                loss = sum((o.float() * torch.linspace(-1, 1, o.numel()).view(o.shape)).sum() for o in outs)
                grads = torch.autograd.grad(loss, [a for a in inputs if isinstance(a, torch.Tensor) and a.requires_grad])
        results.append((out, grads))
    _compiled(jitted)
    if grad:  # thunder's backward, its regions CUDA kernels (not torch's autograd)
        assert {g["backward"] for g in thunder.compile_stats(jitted).graphs if g["backward"]} == {"thunder"}
    return results


_SAMPLES = check._samples()


@pytest.mark.parametrize("name", sorted(n for n in _SAMPLES if n.rsplit(".", 1)[-1] in ("float32", "bfloat16", "int64",
                                                                                        "int8", "bool")))
def test_sample_values_equal_eager(name):
    """Elementwise (vector and per-element paths, broadcasts, strided inputs), warp/block/1024-thread row
    reductions, two-stage full reductions, remaps."""
    fn, args = _SAMPLES[name]
    (out, _), (expected, _) = _run(fn, args, grad=False)
    _close(out, expected, name)


@pytest.mark.parametrize("name", ["exp", "div_pow", "softmax.8x4096", "layer_norm.64x96", "full_sum", "rope_cat",
                                  "cross_entropy.64x96", "signbit", "max_min"])
@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_other_float_samples_equal_eager(name, dtype):
    fn, args = _SAMPLES[f"{name}.{dtype}"]
    (out, _), (expected, _) = _run(fn, args, grad=False)
    _close(out, expected, name)


def _training_programs():
    import sys

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import replay_programs

    return {name: case for name, case in replay_programs.programs().items()
            if name.endswith(".grad") and not name.startswith(("dropout", "seed"))}


_TRAINING = _training_programs()


@pytest.mark.parametrize("name", sorted(_TRAINING))
def test_forward_and_backward_kernels_equal_eager(name):
    """The replay programs with inputs that require grad: forward and backward traces' fusions as CUDA kernels."""
    fn, args = _TRAINING[name]
    (out, grads), (expected, expected_grads) = _run(fn, args, grad=True)
    _close(out, expected, name)
    _close(grads, expected_grads, f"{name} gradients")


def test_dropout_draws_as_the_cpu_kernels_do():
    """Philox in the CUDA dialect draws the numbers the CPU kernels draw (eager's generator is another)."""
    from thunder.executors.cpuex import cpu_executor

    def fn(x):
        return x + torch.nn.functional.dropout(x.exp(), 0.25, training=True)

    x = torch.randn(16, 40)
    outs = []
    for executors in (EXECUTORS, [cpu_executor, torch_executor]):
        torch.manual_seed(7)
        jitted = thunder.jit(fn, executors=executors)
        with torch.no_grad():
            outs.append(jitted(x))
        _compiled(jitted)
    torch.testing.assert_close(outs[0], outs[1])
    assert (outs[0] == x).any() and (outs[0] != x).any()


def test_a_dropout_mask_read_through_a_slice_or_cat_is_drawn_at_the_index_read():
    """A uniform_philox value depends on its element's index: a remap (slice, cat) of it in the same kernel must
    draw at the remapped index, not reuse the draw of the unremapped one (cat([d, d]) had unequal halves)."""
    x = torch.randn(6, 40) + 5
    for fn in (lambda x: torch.cat([F.dropout(x, 0.5)] * 2, -1) * 2, lambda x: F.dropout(x, 0.5)[:, 3:17] * 2):
        jitted = thunder.jit(fn, executors=EXECUTORS)
        with torch.no_grad():
            out = jitted(x)
        _compiled(jitted)
        if out.shape[-1] == 80:
            assert torch.equal(out[:, :40], out[:, 40:])
        kept = out != 0
        assert kept.any() and (~kept).any()
        torch.testing.assert_close(out[kept], (x[:, 3:17] if out.shape[-1] == 14 else x.repeat(1, 2))[kept] * 4)


def test_a_small_gpt2_forward_equals_eager():
    from thunder.testing import hf_gpt2

    torch.manual_seed(0)
    model = hf_gpt2()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    jitted = thunder.jit(model, executors=EXECUTORS)
    with torch.no_grad():
        out, expected = jitted(ids).logits, model(ids).logits
    _compiled(jitted)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_an_index_out_of_range_traps():
    """cross_entropy's picked index is bounds-checked: the kernel traps, as torch's device-side assert. (On the
    CPU, where emulated, the graph then runs with torch, which raises eager's error, caused by the trap.)"""
    fn = lambda x, t: torch.nn.functional.cross_entropy(x, t)  # noqa: E731
    jitted = thunder.jit(fn, executors=EXECUTORS)
    with torch.no_grad():
        jitted(torch.randn(4, 8), torch.tensor([1, 2, 3, 4]))
        with pytest.raises(IndexError, match="out of bounds") as info:
            jitted(torch.randn(4, 8), torch.tensor([1, 2, 3, 40]))
    assert isinstance(info.value.__cause__, RuntimeError) and "trapped" in str(info.value.__cause__)


def test_host_source_takes_out_the_ptx_and_the_typedefs():
    source = ('typedef long long int64_t;\nTH_DEV float f16_to_float(uint16_t h) { float f; '
              'asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }\n'
              'extern "C" __global__ void __launch_bounds__(256) k(const float* __restrict__ in0, const int64_t n0, '
              'const double x0) {\n}\n')
    text = host_source(source)
    assert "typedef long long" not in text and "asm(" not in text and "f = emu::f16_to_float(h)" in text
    assert ('extern "C" int emu_k(const unsigned long long* a, long long grid, int block) { return emu::run(grid, '
            'block, [&] { k(emu::arg<const float*>(a[0]), emu::arg<const int64_t>(a[1]), '
            'emu::arg<const double>(a[2])); }); }') in text


def test_the_cuda_lowering_splits_units_and_reuses_kernels_across_traces(monkeypatch):
    """The emulator runs cudaex.lower itself: a trace's distinct kernels cut into units compiled in parallel
    threads, a layer's repeat run as its first's symbol, and a later trace of the jitted function (a second
    shape: a graph with symbolic sizes) compiling none of the kernels the first compiled."""
    from thunder.executors import cudaex

    monkeypatch.setattr(cudaex.os, "cpu_count", lambda: 2)
    compiled_units = []
    compile_units = cudaex._compile_units
    monkeypatch.setattr(cudaex, "_compile_units", lambda sources, *rest: compiled_units.append(len(sources))
                        or compile_units(sources, *rest))

    def fn(x, w):
        for _ in range(3):  # three fusions alike, split by the matmuls
            x = (torch.tanh(x) * 1.375) @ w
        return torch.softmax(x, -1) - x.sigmoid()

    w = torch.randn(24, 24) / 5
    jitted = thunder.jit(fn, executors=EXECUTORS)
    with torch.no_grad():
        for rows in (4, 6, 9):
            x = torch.randn(rows, 24)
            _close(jitted(x, w), fn(x, w), f"{rows} rows")
    _compiled(jitted)
    assert compiled_units[0] == 2, compiled_units  # 4 fusions, 2 distinct kernels: 2 units
    assert len(thunder.last_kernels(jitted, 0)) == 2
    assert sum(compiled_units[1:]) == 0, compiled_units  # the symbolic graph's kernels are the static graph's
