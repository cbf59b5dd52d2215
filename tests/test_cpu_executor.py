"""The CPU fusion executor (generated C++ kernels) against eager PyTorch.

Inference only: the executor leaves symbols whose outputs require grad to
torch, so every test here runs under torch.no_grad().
"""
import os
import re
import subprocess

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import thunder
from thunder import _core
from thunder.executors import executor_sets
from thunder.jit import compiled_graphs
from thunder.testing import tolerance
from conftest import assert_same

CPU = executor_sets()["cpu"]


def run_cpu(fn, *args):
    """fn through thunder with the CPU executor; returns (result, number of fused kernels)."""
    jitted = thunder.jit(fn, executors=CPU)
    with torch.no_grad():
        out = jitted(*args)
    graphs = compiled_graphs(jitted)
    kernels = sum(1 for g in graphs for b in g.execution_trace.symbols if b.executor == "cpu")
    return out, kernels


def assert_matches_eager(fn, *args, kernels=None):
    with torch.no_grad():
        expected = fn(*args)
    out, n = run_cpu(fn, *args)
    rtol, atol = tolerance(expected.dtype)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=rtol, atol=atol, equal_nan=True)
    if kernels is not None:
        assert n == kernels, f"expected {kernels} fused kernels, got {n}"
    return out


@pytest.fixture(autouse=True)
def private_kernel_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("THUNDER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


# ---- the known traps of generated CPU code ----

def test_masked_fill_with_a_broadcast_mask():
    x = torch.randn(4, 5, 6)
    mask = torch.rand(5, 1) > 0.5
    assert_matches_eager(lambda x, m: x.masked_fill(m, -1.5) * 2, x, mask, kernels=1)


def test_where_whose_condition_broadcasts_against_both_sides():
    c = torch.rand(3, 1, 5) > 0.3
    a, b = torch.randn(1, 4, 1), torch.randn(4, 5)
    assert_matches_eager(lambda c, a, b: torch.where(c, a, b) + 1, c, a, b, kernels=1)


def test_uint8_arithmetic_wraps_before_a_widening_cast():
    a = torch.tensor([200, 250, 3, 255] * 4, dtype=torch.uint8)
    b = torch.tensor([100, 10, 255, 1] * 4, dtype=torch.uint8)
    out = assert_matches_eager(lambda a, b: (a + b).to(torch.int32) * 3, a, b, kernels=1)
    assert out[0].item() == ((200 + 100) % 256) * 3


def test_argmax_over_values_containing_nan():
    x = torch.randn(8, 16)
    x[2, 5] = float("nan")
    with torch.no_grad():
        assert torch.equal(run_cpu(lambda x: torch.argmax(x * 2, dim=1), x)[0], torch.argmax(x * 2, dim=1))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
def test_min_and_argmin_of_small_integers(dtype):
    x = torch.randint(0, 100 if dtype == torch.int8 else 250, (4, 37), dtype=dtype)
    assert_matches_eager(lambda x: torch.amin(x + 1, dim=1), x, kernels=1)
    assert_matches_eager(lambda x: torch.amax(x, dim=0), x)
    with torch.no_grad():
        assert torch.equal(run_cpu(lambda x: torch.argmin(x + 1, dim=1), x)[0], torch.argmin(x + 1, dim=1))


def test_float32_float16_float32_round_trip_is_not_elided():
    x = torch.randn(1000) * 100 + 0.123456
    out = assert_matches_eager(lambda x: x.to(torch.float16).to(torch.float32) + 0, x, kernels=1)
    assert not torch.equal(out, x)  # the rounding happened


def test_bfloat16_round_trip_rounds_to_nearest_even():
    x = torch.randn(4096) * 3
    assert_matches_eager(lambda x: (x.to(torch.bfloat16) * 3).to(torch.float32), x, kernels=1)


def test_sum_of_ten_million_elements_is_within_float32_tolerance_of_float64():
    x = torch.rand(10_000_000)
    out, n = run_cpu(lambda x: (x * 1.0001).sum(), x)
    assert n == 1
    reference = (x.double() * 1.0001).sum()
    assert abs(out.double().item() - reference.item()) <= 1e-6 * abs(reference.item())


# ---- fused patterns, each one kernel ----

FUSED_PATTERNS = [
    ("softmax", lambda x: torch.softmax(x, -1), lambda: (torch.randn(33, 70),), 1),
    ("log_softmax", lambda x: torch.log_softmax(x, 1), lambda: (torch.randn(5, 64, 3),), 1),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (48,), w, b), lambda: (torch.randn(7, 48), torch.randn(48), torch.randn(48)), 1),
    ("rms_norm", lambda x, w: F.rms_norm(x, (48,), w, 1e-6), lambda: (torch.randn(3, 7, 48), torch.randn(48)), 1),
    # Hugging Face Llama's RMSNorm: mean(keepdim=True) over a batch of one, whose size-1 dim is both a domain dim
    # and a broadcast.
    ("rms_norm_keepdim_mean", lambda x, w: w * (x * torch.rsqrt(x.to(torch.float32).pow(2).mean(-1, keepdim=True) + 1e-6)),
     lambda: (torch.randn(1, 7, 48), torch.randn(48)), 1),
    ("bias_gelu", lambda x, b: F.gelu(x + b), lambda: (torch.randn(16, 80), torch.randn(80)), 1),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), lambda: (torch.randn(100),), 1),
    ("silu_mul", lambda x, y: F.silu(x) * y, lambda: (torch.randn(64, 32), torch.randn(64, 32)), 1),
    ("residual_norm", lambda x, r, w, b: F.layer_norm(x + r, (32,), w, b),
     lambda: (torch.randn(9, 32), torch.randn(9, 32), torch.randn(32), torch.randn(32)), 1),
    ("adam_step", lambda p, g, m, v: (p - 0.01 * (0.9 * m + 0.1 * g) / ((0.999 * v + 0.001 * g * g).sqrt() + 1e-8)),
     lambda: tuple(torch.randn(1000) for _ in range(3)) + (torch.rand(1000),), 1),
    ("reduce_middle_dim", lambda x: x.sum(1) * 2, lambda: (torch.randn(6, 50, 7),), 1),
    ("reduce_all", lambda x: (x * x).mean(), lambda: (torch.randn(300, 20),), 1),
    ("zero_dim", lambda x, y: x * y + 1, lambda: (torch.tensor(3.0), torch.tensor(2.0)), 1),
    ("non_contiguous_input", lambda x: x.exp() + 1, lambda: (torch.randn(20, 30).t(),), 1),
]


@pytest.mark.parametrize("name,fn,make,kernels", FUSED_PATTERNS)
def test_fused_patterns_match_eager(name, fn, make, kernels):
    assert_matches_eager(fn, *make(), kernels=kernels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_softmax_and_norm_in_each_float_dtype(dtype):
    x = torch.randn(17, 64).to(dtype)
    assert_matches_eager(lambda x: torch.softmax(x, -1), x, kernels=1)
    assert_matches_eager(lambda x: F.rms_norm(x, (64,), eps=1e-5), x, kernels=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape, dims", [((5, 1000), (1,)), ((3, 4, 300), (1, 2)), ((2, 256), (1,)), ((3, 64 * 5), (1,))])
def test_long_rows_reduce_in_lanes(dtype, shape, dims):
    # Rows from 256 elements reduce in 64 partial results (whole blocks of 64, then the rest), folded pairwise.
    x = torch.randn(shape).to(dtype)
    x.view(-1)[-1] = float("nan")  # in the last block (or the rest) of the last row only
    assert_matches_eager(lambda x: torch.softmax(x, -1), x, kernels=1)
    assert_matches_eager(lambda x: torch.amax(x, dims) + torch.amin(x, dims), x, kernels=1)
    y = torch.randn(shape).to(dtype)
    assert_matches_eager(lambda y: (y * y).sum(dims), y, kernels=1)
    if dtype != torch.bfloat16:  # eager's bfloat16 prod rounds its running product after every step; ours is float
        assert_matches_eager(lambda y: (1 + y * 0.01).prod(-1), y, kernels=1)
    assert_matches_eager(lambda y: F.layer_norm(y, y.shape[1:]), y, kernels=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_large_outputs_are_streamed_out(dtype):
    # From 16 MiB an output is written in chunks with non-temporal stores; rows of odd length leave
    # unaligned ends, copied with ordinary stores.
    rows = (16 << 20) // (1023 * torch.empty((), dtype=dtype).element_size()) + 1
    x = torch.randn(rows, 1023).to(dtype)
    assert_matches_eager(lambda x: (x * 2 + 1).sin(), x, kernels=1)
    assert_matches_eager(lambda x: torch.softmax(x, -1), x, kernels=1)
    flat = x.reshape(-1)[1:]  # a 1-D domain, the chunk loop parallel itself; the output's start unaligned
    assert_matches_eager(lambda f: f * f, flat, kernels=1)
    with torch.no_grad():
        expected = (x * 3, x.sum(-1))
    (scaled, total), _ = run_cpu(lambda x: (x * 3, x.sum(-1)), x)
    rtol, atol = tolerance(dtype)
    torch.testing.assert_close(scaled, expected[0], rtol=rtol, atol=atol)
    torch.testing.assert_close(total, expected[1], rtol=rtol, atol=atol * 100)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_sin_and_cos_of_one_value_vectorize(dtype):
    # GCC would merge them into one sincos call, which has no vector version (a scalar loop).
    x = torch.randn(8, 64).to(dtype)
    assert_matches_eager(lambda x: x.sin() * x.cos(), x, kernels=1)
    jitted = thunder.jit(lambda x: x.sin() * x.cos(), executors=CPU)
    with torch.no_grad():
        jitted(x)
    assert "thunder_sin" in thunder.last_kernels(jitted)[0]["source"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [F.gelu, lambda x: F.gelu(x, approximate="tanh"), F.silu], ids=["gelu", "gelu_tanh", "silu"])
def test_half_precision_activations_round_once_like_their_aten_kernels(dtype, fn):
    # Rounding erf(x / sqrt 2) to float16 before adding 1 cancels to 0 below x = -3, where eager gives -1e-4.
    x = torch.tensor([-4.0, -3.669921875, -3.0, -2.5, -0.01, 0.5, 2.048828125]).to(dtype)
    with torch.no_grad():
        expected = fn(x)
    out, kernels = run_cpu(fn, x)
    assert kernels == 1
    torch.testing.assert_close(out, expected)


def test_nan_propagates_through_max_and_maximum():
    x = torch.randn(4, 8)
    x[1, 3] = float("nan")
    assert_matches_eager(lambda x: torch.amax(x, 1) + torch.maximum(x, torch.zeros(())).sum(1), x)


@pytest.mark.parametrize("fn", [
    lambda x: 1 / torch.relu(x),
    lambda x: 1 / x.clamp(min=0.0),
    lambda x: 1 / torch.maximum(x, torch.zeros_like(x)),
    lambda x: 1 / torch.minimum(x.abs(), -torch.zeros_like(x)),
], ids=["relu", "clamp_min", "maximum", "minimum"])
def test_max_and_min_keep_the_first_operand_of_equal_zeros(fn):
    # As ATen: relu(-0.0) is -0.0, so 1 / relu(-0.0) is -inf (the kernels returned the other zero: +inf).
    out, _ = run_cpu(fn, torch.tensor([-0.0, 1.0, 0.0, -2.0]))
    assert torch.equal(out, fn(torch.tensor([-0.0, 1.0, 0.0, -2.0])))


def test_integer_and_bool_semantics():
    a = torch.randint(-50, 50, (64,), dtype=torch.int32)
    b = torch.randint(-5, 5, (64,), dtype=torch.int32)
    assert_matches_eager(lambda a, b: (a * b - a) ^ (b & 7), a, b, kernels=1)
    assert_matches_eager(lambda a, b: ((a > b) | (a == 0)).logical_not(), a, b, kernels=1)
    assert_matches_eager(lambda a: (a > 0).sum(), a)


def test_gradient_requiring_regions_are_fused_forward_and_backward():
    x = torch.randn(8, 8, requires_grad=True)
    jitted = thunder.jit(lambda x: (x.exp() * 2).sum(), executors=CPU)
    out = jitted(x)
    out.backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().exp())
    (graph,) = compiled_graphs(jitted)
    assert graph.autodiff == "thunder"
    assert graph.executors() == ["cpu"] and graph.backward_executors() == ["cpu"]


def test_generated_source_and_cache():
    x = torch.randn(10)
    jitted = thunder.jit(lambda x: x.sin() * 2, executors=CPU)
    with torch.no_grad():
        jitted(x)
    graph = compiled_graphs(jitted)[-1]
    (module, source), = graph.kernels["cpu"]
    assert "cpu_fusion0" in source and "extern \"C\"" in source
    assert os.path.exists(module.path)
    # A second compile of the same function reuses the module while it is loaded (the disk cache serves other
    # processes: tests/test_kernel_cache.py).
    again = thunder.jit(lambda x: x.sin() * 2, executors=CPU)
    with torch.no_grad():
        again(x)
    assert compiled_graphs(again)[-1].kernels["cpu"][0][0] is module


def _sweep(monkeypatch, fn, make_inputs, sizes):
    """Calls jitted fn at each size (every shape compiled: Dynamo's recompile limit raised), checking it against
    eager; returns (compiler runs, distinct translation units) over the graphs it compiled."""
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", len(sizes) + 8)
    jitted = thunder.jit(fn, executors=CPU)
    with torch.no_grad():
        for n in sizes:
            args = make_inputs(n)
            torch.testing.assert_close(jitted(*args), fn(*args))
    assert thunder.compile_stats(jitted).eager_calls == 0
    units = {id(module): module for g in compiled_graphs(jitted) for module, _ in g.kernels.get("cpu", [])}
    sources = {source for g in compiled_graphs(jitted) for _, source in g.kernels.get("cpu", [])}
    return sum(not m.cache_hit for m in units.values()), len(sources)


def test_one_compiled_kernel_serves_every_length_of_a_size_class(monkeypatch):
    # Sizes are kernel arguments, not literals, and the schedule is chosen by size class: rows of 8 to 64
    # elements (no lanes, the same row buffer) are one kernel, compiled once.
    compiles, units = _sweep(monkeypatch, lambda x: (x.sin() * 2).sum(-1), lambda n: (torch.randn(4, n),),
                             range(8, 65))
    assert units == 1 and compiles <= 1


def test_strided_inputs_pass_their_strides_to_one_kernel(monkeypatch):
    # A transposed input is read in place: its stride along the innermost dim (1) is written into the kernel,
    # the other one passed, so every length shares the kernel; an expanded one's stride 0 likewise.
    _, units = _sweep(monkeypatch, lambda x: x.exp() + 1, lambda n: (torch.randn(n, 6).t(),), range(5, 12))
    assert units == 1
    _, units = _sweep(monkeypatch, lambda x, y: x * y, lambda n: (torch.randn(1, n).expand(3, n), torch.randn(3, n)),
                      range(5, 12))
    assert units == 1


def test_size_classes_get_their_own_kernels(monkeypatch):
    # Rows from 256 elements on reduce in 64 lanes: each size class is a kernel of its own, each correct.
    _, units = _sweep(monkeypatch, lambda x: torch.softmax(x, -1), lambda n: (torch.randn(4, n),), [8, 200, 300, 400])
    assert units == 2


def test_the_grain_is_tested_at_run_time_not_a_size_class(monkeypatch):
    # From 32K elements on the rows run in parallel: an `if` clause on the element count, so kernels below
    # and above the grain (4 x 300 to 300 x 300 elements) are one source, compiled once, each size correct
    # on several threads.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        compiles, units = _sweep(monkeypatch, lambda x: torch.softmax(x, -1), lambda n: (torch.randn(n, 300),),
                                 [4, 8, 200, 300])
        assert units == 1 and compiles <= 1
        compiles, units = _sweep(monkeypatch, lambda x: x.exp() * 2, lambda n: (torch.randn(n, 64),), [4, 600, 900])
        assert units == 1 and compiles <= 1
    finally:
        torch.set_num_threads(threads)


_COMPILE_IN_A_NEW_PROCESS = """
import torch, thunder
from thunder.executors import executor_sets
from thunder.jit import compiled_graphs
x = torch.arange(10.0)
jitted = thunder.jit(lambda x: x.cos() * 3, executors=executor_sets()["cpu"])
with torch.no_grad():
    assert torch.allclose(jitted(x), x.cos() * 3)
module = compiled_graphs(jitted)[-1].kernels["cpu"][0][0]
print(module.cache_hit, module.path)
"""


def test_a_corrupt_cache_entry_is_detected_and_rebuilt():
    import subprocess
    import sys

    def compile_once():
        out = subprocess.run([sys.executable, "-c", _COMPILE_IN_A_NEW_PROCESS], capture_output=True, text=True,
                             env=dict(os.environ), check=True).stdout.split()
        return out[0] == "True", out[1]

    compile_once()
    hit, path = compile_once()
    assert hit
    with open(path, "r+b") as f:  # no process has it loaded now
        f.truncate(100)
    hit, _ = compile_once()
    assert not hit
    assert compile_once()[0]


# ---- property-based differential tests: random fusible programs ----

UNARY = [torch.neg, torch.abs, torch.exp, torch.tanh, torch.sigmoid, torch.relu, lambda x: x * 0.5, torch.sin,
         lambda x: F.gelu(x), lambda x: x.clamp(-1, 1), torch.sqrt, torch.log1p]
BINARY = [torch.add, torch.sub, torch.mul, torch.maximum, torch.minimum, lambda a, b: torch.where(a > b, a, b)]
REDUCE = [lambda x: x.sum(-1, keepdim=True), lambda x: x.amax(-1, keepdim=True), lambda x: x.mean(-1, keepdim=True)]


@st.composite
def programs(draw):
    rows, cols = draw(st.integers(1, 9)), draw(st.integers(1, 40))
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
    steps = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 11), st.integers(0, 5)), min_size=2, max_size=12))
    shapes = draw(st.lists(st.sampled_from([(rows, cols), (cols,), (rows, 1), (1, cols), ()]), min_size=2, max_size=3))
    transpose_first = draw(st.booleans())
    return rows, cols, dtype, steps, shapes, transpose_first


def _program_inputs(program, rows, cols):
    _, _, dtype, steps, shapes, transpose_first = program
    gen = torch.Generator().manual_seed(len(steps) * 7 + rows)
    inputs = [torch.randn((rows, cols), generator=gen).abs() + 0.1]
    inputs[0] = (inputs[0].t().contiguous().t() if transpose_first else inputs[0]).to(dtype)
    sized = {(program[0], program[1]): (rows, cols), (program[1],): (cols,), (program[0], 1): (rows, 1),
             (1, program[1]): (1, cols), (): ()}
    return inputs + [(torch.randn(sized[tuple(s)], generator=gen).abs() + 0.1).to(dtype) for s in shapes]


def _program_fn(steps):
    def fn(*xs):
        values = list(xs)
        for kind, op, arg in steps:
            x = values[-1]
            if kind == 0:
                y = UNARY[op](x)
            elif kind == 1:
                y = BINARY[op % len(BINARY)](x, values[arg % len(values)])
            else:
                y = REDUCE[op % len(REDUCE)](x) if x.dim() > 0 else x
            # Positive (sqrt, log), and at most 4.1: sin or cos of exp(exp(x)) ~ 5e8 -- where one ulp is 32 -- is any
            # value in [-1, 1] (hypothesis found it), so bounded inputs keep each op well-conditioned.
            values.append(y.abs().clamp(max=4.0) + 0.1)
        return values[-1]
    return fn


def _program_tolerance(dtype, steps):
    rtol, atol = tolerance(dtype)
    if dtype == torch.bfloat16:  # long bf16 chains round differently in places; compare with a chain-length allowance
        rtol, atol = 5e-2, 5e-2
    # exp(y) multiplies y's relative error by |y|: the kernel's exp (glibc's) and ATen's differ in the last bit, so
    # each exp of a chain widens the allowance (three in a row reached 7.7e-6 in float32 against 5.2e-6 allowed).
    exps = sum(kind == 0 and op == 2 for kind, op, _ in steps)
    return rtol * 4 * (1 + 2 * exps), atol * 4


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_fusible_programs_match_eager(program):
    rows, cols, dtype, steps, shapes, transpose_first = program
    inputs = _program_inputs(program, rows, cols)
    fn = _program_fn(steps)

    with torch.no_grad():
        expected = fn(*inputs)
    out, _ = run_cpu(fn, *inputs)
    rtol, atol = _program_tolerance(dtype, steps)
    torch.testing.assert_close(out, expected, rtol=rtol, atol=atol)


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(programs().filter(lambda p: p[2] != torch.bfloat16))
def test_random_programs_gradients_match_eager_at_two_sizes(program):
    # The gradients of every input, through thunder's fused forward and backward (rematerialization included),
    # with symbolic sizes: the program's size, then a larger one through the same compiled graph. bfloat16 is left
    # out: its ties (clamped values) and ill-conditioned chains make gradients that differ in eager against float64
    # as much as thunder's do.
    rows, cols, dtype, steps, _, _ = program
    fn = _program_fn(steps)
    jitted = thunder.jit(fn, dynamic=True)
    rtol, atol = _program_tolerance(dtype, steps)
    for size in ((rows, cols), (rows + 3, cols + 5)):
        inputs = _program_inputs(program, *size)
        expected_inputs = [x.detach().clone().requires_grad_() for x in inputs]
        actual_inputs = [x.detach().clone().requires_grad_() for x in inputs]
        expected, actual = fn(*expected_inputs), jitted(*actual_inputs)
        weight = torch.randn(expected.shape, generator=torch.Generator().manual_seed(rows), dtype=dtype)
        (expected * weight).sum().backward()
        (actual * weight).sum().backward()
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
        for e, a in zip(expected_inputs, actual_inputs):
            assert (e.grad is None) == (a.grad is None)
            if e.grad is not None:
                torch.testing.assert_close(a.grad, e.grad, rtol=rtol * 4, atol=atol * 4)
    assert thunder.compile_stats(jitted).eager_calls == 0


def test_processes_compiling_the_same_kernel_at_once_all_succeed(tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, THUNDER_CACHE_DIR=str(tmp_path / "shared-cache"))
    procs = [subprocess.Popen([sys.executable, "-c", _COMPILE_IN_A_NEW_PROCESS], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    paths = {out.split()[1] for out, _ in results}
    assert len(paths) == 1  # one cache entry, whoever renamed it last
    leftovers = [f for f in os.listdir(tmp_path / "shared-cache") if not f.endswith(".so")]
    assert leftovers == []


@pytest.mark.parametrize("shape", [(300, 300), (2, 40000), (1, 1, 70001), (3, 70000, 1)])
def test_full_reductions_of_large_multi_dim_inputs_compile_and_fuse(shape):
    # Above the grain size the reduction loops collapse into one `parallel for simd`.
    x = torch.randn(shape)
    out, kernels = run_cpu(lambda x: (x * 2).sum(), x)
    assert kernels == 1
    torch.testing.assert_close(out, (x * 2).sum(), rtol=1e-5, atol=1e-3)


def test_sign_of_nan_is_zero_like_torch():
    x = torch.tensor([float("nan"), 2.0, -1.0, 0.0, -0.0])
    assert_matches_eager(lambda x: torch.sign(x) * 1, x, kernels=1)


def test_an_opaque_op_returning_none_among_its_outputs_prints_valid_python():
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(1, 3, 8)
    jitted = thunder.jit(m)
    with torch.no_grad():
        out, weights = jitted(x, x, x, need_weights=False)
        expected, _ = m(x, x, x, need_weights=False)
    assert weights is None
    torch.testing.assert_close(out, expected)
    for trace in thunder.last_traces(jitted):
        compile(str(trace), "<trace>", "exec")


# ---- cross-entropy: the target's log-probability is picked inside the log-softmax kernel ----

def _fused_symbols(fn, *args):
    jitted = thunder.jit(fn, executors=CPU)
    with torch.no_grad():
        jitted(*args)
    return [s.name for g in compiled_graphs(jitted) for b in g.execution_trace.symbols if b.executor == "cpu"
            for s in b.subsymbols]


def test_a_broadcast_read_by_a_later_kernel_moves_into_it():
    # As in a Llama's RoPE: c feeds the first kernel, and its broadcast, grouped with c's producer, is read only
    # by the kernel after the matmul. There it is index arithmetic; as the first kernel's output, a full copy.
    def f(x, w, q):
        c = x.cos()[None, None]
        h = (q * c).sum(-1) @ w
        return h.view(1, 4, 16, 16) * c
    args = torch.randn(16, 16), torch.randn(16, 256), torch.randn(1, 4, 16, 16)
    assert_matches_eager(f, *args, kernels=2)
    jitted = thunder.jit(f, executors=CPU)
    with torch.no_grad():
        jitted(*args)
    first, _ = [line for line in str(compiled_graphs(jitted)[0].execution_trace).splitlines()
                     if "= cpu_fusion" in line]
    assert "f32[1, 4, 16, 16]" not in first  # c leaves the first kernel, not its broadcast


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum"}, {"reduction": "none"}, {"ignore_index": 3}])
def test_cross_entropy_picks_the_target_inside_the_kernel(dtype, kwargs):
    logits, target = torch.randn(37, 50).to(dtype), torch.randint(0, 50, (37,))
    target[::5] = 3
    fn = lambda x, t: F.cross_entropy(x, t, **kwargs)  # noqa: E731
    assert_matches_eager(fn, logits, target)
    symbols = _fused_symbols(fn, logits, target)
    assert "take_along_axis" in symbols and "amax" in symbols  # one kernel: log-softmax and the pick


def test_gather_along_the_reduced_dim_of_a_softmax():
    x, idx = torch.randn(6, 4, 30), torch.randint(0, 30, (6, 4, 1))
    assert_matches_eager(lambda x, i: torch.gather(torch.log_softmax(x, -1), -1, i) * 2, x, idx)


@pytest.mark.parametrize("bad", [50, -1])
def test_an_out_of_range_target_raises_like_eager(bad):
    logits, target = torch.randn(8, 50), torch.randint(0, 50, (8,))
    target[3] = bad
    with pytest.raises((IndexError, RuntimeError)) as eager:
        F.cross_entropy(logits, target)
    jitted = thunder.jit(lambda x, t: F.cross_entropy(x, t), executors=CPU)
    with torch.no_grad(), pytest.raises(eager.type, match=re.escape(str(eager.value).splitlines()[0])):
        jitted(logits, target)  # the kernel's check raises; the graph then runs with torch, which raises eager's
    target[3] = 1
    with torch.no_grad():
        torch.testing.assert_close(jitted(logits, target), F.cross_entropy(logits, target))


# ---- large outputs come from the output buffer pool ----

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32, torch.uint8, torch.bool])
def test_pooled_outputs_are_ordinary_tensors(dtype):
    from thunder import _core

    x = (torch.randn(1024, 600) * 50).to(dtype)
    fn = (lambda x: x.logical_not()) if dtype == torch.bool else (lambda x: x * 3 - 1)
    out = assert_matches_eager(fn, x, kernels=1)
    assert out.device == x.device and out.is_contiguous() and not out.requires_grad
    assert out.nbytes >= thunder.executors.cpuex.POOLED_OUTPUT_BYTES or dtype in (torch.bool, torch.uint8)
    out.add_(1 if dtype != torch.bool else True)  # writable, in place
    view = out[10:20]
    del out
    assert view.shape[0] == 10  # the buffer lives while a view of it does
    cached, live, peak = _core.buffer_pool_stats()
    assert peak >= live
    assert live >= 0 and cached >= 0


def test_a_freed_output_buffer_is_reused():
    from thunder import _core

    x = torch.randn(2048, 512)
    jitted = thunder.jit(lambda x: x.exp() + 1, executors=CPU)
    with torch.no_grad():
        first = jitted(x)
        pointer = first.data_ptr()
        del first
        cached = _core.buffer_pool_stats()[0]
        assert cached >= x.nbytes
        second = jitted(x)
    assert second.data_ptr() == pointer
    torch.testing.assert_close(second, x.exp() + 1)
    _core.set_buffer_pool_limit(0)  # keep nothing unused
    try:
        del second
        assert _core.buffer_pool_stats()[0] == 0
    finally:
        _core.set_buffer_pool_limit(1 << 30)


def _units_of(fn, monkeypatch, cores):
    """The translation units fn's graph compiles to with a unit allowed per kernel on ``cores`` cores, its
    results checked against eager on (x: [8, 16], w: [16, 16])."""
    from thunder.executors import cpuex

    monkeypatch.setattr(cpuex, "KERNELS_PER_UNIT", 1)
    monkeypatch.setattr(cpuex.os, "cpu_count", lambda: cores)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    out = assert_matches_eager(fn, x, w)
    jitted = thunder.jit(fn, executors=CPU)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x, w), out)
    return thunder.last_kernels(jitted)


def test_many_kernels_compile_as_several_units_in_parallel(monkeypatch):
    def fn(x, w):
        a = torch.softmax(x, -1)          # each reduction over a new layout is its own kernel
        b = (a @ w).sin()
        c = torch.log_softmax(b * 2, 0)
        return (c @ w.t()).tanh().sum(-1)

    units = _units_of(fn, monkeypatch, cores=3)
    assert len(units) == 3 and len({u["path"] for u in units}) == 3
    names = [line for u in units for line in u["source"].splitlines() if line.startswith('extern "C" int cpu_fusion')]
    assert len(names) == len(set(names)) >= 3


def test_a_repeated_layer_compiles_once_across_units(monkeypatch):
    """A model's layers make kernels whose text differs only in their names. Units used to be cut from all the
    kernels in order, so every unit compiled its own copy of each layer kernel (GPT-2's 12 layers in 9 units on
    16 cores: each unit compiled nearly all 5 distinct kernels). Units are cut from the distinct kernels now, and
    a repeat joins its first's unit as an alias."""
    def fn(x, w):
        for _ in range(4):
            x = torch.softmax(x * 2, -1) @ w  # one kernel a layer, each rendering alike but for its name
        return x.tanh()

    units = _units_of(fn, monkeypatch, cores=4)
    assert len(units) == 2, [u["source"] for u in units]
    defined = [u["source"].count("(void* const* args) {") for u in units]
    aliases = [u["source"].count("__attribute__((alias(") for u in units]
    assert defined == [1, 1] and sorted(aliases) == [0, 3]


# ---- non-contiguous inputs are read in place, with their strides ----

@pytest.mark.parametrize("make", [
    lambda: torch.randn(30, 20).t(),                                  # transposed
    lambda: torch.randn(10, 40)[:, 5:25],                              # a column slice: storage offset, row stride 40
    lambda: torch.randn(10, 40)[::3, ::2],                             # steps in both dims
    lambda: torch.randn(1, 25).expand(6, 25),                          # stride 0
    lambda: torch.randn(2, 3, 5, 4).to(memory_format=torch.channels_last),
], ids=["transposed", "column_slice", "steps", "expanded", "channels_last"])
def test_non_contiguous_inputs_are_read_in_place(make):
    x = make()
    assert not x.is_contiguous()
    fn = lambda x: torch.softmax(x * 2, -1) + x.exp()  # noqa: E731
    assert_matches_eager(fn, x, kernels=1)
    jitted = thunder.jit(fn, executors=CPU)
    with torch.no_grad():
        jitted(x)
    source = thunder.last_kernels(jitted)[0]["source"]
    strides = [s for s in x.stride() if s not in (0, 1)]
    # The kernel indexes the input with its own strides: those other than 0 and 1 passed as arguments (one
    # kernel serves every size), 0 and 1 written in (the layout).
    assert source.count("const int64_t s0_") == len(strides)
    trace = str(compiled_graphs(jitted)[-1].execution_trace)
    assert "contiguous" not in trace


def test_a_new_layout_of_the_same_shape_recompiles():
    fn = lambda x: x.sin() * 2  # noqa: E731
    jitted = thunder.jit(fn, executors=CPU)
    base = torch.randn(16, 16)
    with torch.no_grad():
        for x in (base, base.t(), base, base.t().contiguous(), base[:, :8], base[:8]):
            torch.testing.assert_close(jitted(x), fn(x))


def _llama_rotary(positions, inv_freq, q):
    freqs = positions[:, None].float() * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), -1)
    half = q.shape[-1] // 2
    return q * emb.cos() + torch.cat((-q[..., half:], q[..., :half]), -1) * emb.sin()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name,fn,make", [(p[0], p[1], p[2]) for p in FUSED_PATTERNS if p[0] != "zero_dim"] + [
    ("llama_rotary", _llama_rotary, lambda: (torch.arange(64), torch.rand(32), torch.randn(4, 64, 64)))])
def test_every_innermost_simd_loop_vectorizes(dtype, name, fn, make, tmp_path):
    # GCC reports the loops it vectorized (-fopt-info-vec-optimized); a `#pragma omp simd` loop missing from the
    # report runs scalar (as RoPE's cos/sin did, merged into a sincos call that has no vector version).
    args = [a.to(dtype) if a.is_floating_point() else a for a in make()]
    jitted = thunder.jit(fn, executors=CPU)
    with torch.no_grad():
        jitted(*args)
    flags = [f for f in _core.default_compile_flags() if f not in ("-shared", "-w") and not f.startswith("-l")]
    for k, kernel in enumerate(thunder.last_kernels(jitted)):
        path = tmp_path / f"kernel{k}.cc"
        path.write_text(kernel["source"])
        report = subprocess.run(["g++", *flags, "-c", str(path), "-o", str(tmp_path / f"kernel{k}.o"),
                                 "-fopt-info-vec-optimized"], capture_output=True, text=True, check=True).stderr
        vectorized = {int(m) for m in re.findall(rf"{path.name}:(\d+):\d+: optimized: loop vectorized", report)}
        lines = kernel["source"].splitlines()
        missed = []
        for i, line in enumerate(lines):  # GCC reports a loop at its pragma, its `for` or a line of its body
            if not line.strip().startswith("#pragma omp simd"):
                continue
            end, depth = i + 1, 0
            while True:
                depth += lines[end].count("{") - lines[end].count("}")
                if depth == 0:
                    break
                end += 1
            if not any(i + 1 <= n <= end + 1 for n in vectorized):
                missed.append(lines[i + 1].strip())
        assert not missed, f"{name} ({dtype}): scalar loops {missed}"


# ---- slices and cats inside kernels (index remapping) ----

def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@pytest.mark.parametrize("name,fn,make", [
    ("rope", _rope, lambda: (torch.randn(2, 3, 5, 16), torch.randn(5, 16), torch.randn(5, 16))),
    ("cat_middle_dim", lambda a, b: torch.cat((a.exp(), b * 2, a[:, :1]), dim=1) + 1,
     lambda: (torch.randn(4, 3, 5), torch.randn(4, 6, 5))),
    ("strided_slices", lambda x: x[::2, 1::3].sin() * x[1::2, :-2:3], lambda: (torch.randn(10, 12),)),
    ("slice_of_broadcast", lambda x, b: (x + b)[:, 2:7] * 3, lambda: (torch.randn(6, 9), torch.randn(9))),
    ("int_cat", lambda a, b: torch.cat((a, b + 1), 0) * 3, lambda: (torch.arange(6).view(2, 3), torch.arange(9).view(3, 3))),
    # Two cats along the innermost dim, parts ending at different places: the loop splits at 3, 5, 7 and 9.
    ("two_innermost_cats", lambda a, b: torch.cat((a[:, :3], b, a[:, 3:]), 1) * torch.cat((b.cos(), a), 1),
     lambda: (torch.randn(4, 7), torch.randn(4, 2))),
    ("bf16_innermost_cats", lambda a, b: torch.cat((a[:, :3], b, a[:, 3:]), 1) * torch.cat((b.cos(), a), 1),
     lambda: (torch.randn(4, 7).bfloat16(), torch.randn(4, 2).bfloat16())),
    ("slice_of_an_innermost_cat", lambda a, b: torch.cat((a, b), 1)[:, 1:6].exp(), lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    # An empty part has no element to read, and maybe no memory (its data pointer can be null).
    ("cat_with_an_empty_part", lambda a, b: torch.cat((a, b), 0) * 2, lambda: (torch.empty(0, 5), torch.randn(3, 5))),
])
def test_slices_and_cats_fuse_into_one_kernel(name, fn, make):
    assert_matches_eager(fn, *make(), kernels=1)


def test_a_slice_returned_from_the_function_stays_a_view():
    def fn(x):
        y = x[:, 1:3]
        return y, y.exp()

    x = torch.randn(4, 5)
    jitted = thunder.jit(fn, executors=CPU)
    with torch.no_grad():
        y, z = jitted(x)
    assert y.data_ptr() == x[:, 1:3].data_ptr()
    torch.testing.assert_close(z, x[:, 1:3].exp())


def test_a_slice_feeding_a_reduction_is_not_fused_with_it():
    fn = lambda x: x[:, 2:].softmax(-1) * 2  # noqa: E731
    assert_matches_eager(fn, torch.randn(5, 9))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_rope_over_any_dtype_is_one_kernel_with_its_innermost_loop_split_at_the_cat(dtype):
    x, cos, sin = torch.randn(2, 3, 5, 16).to(dtype), torch.randn(5, 16).to(dtype), torch.randn(5, 16).to(dtype)
    assert_matches_eager(_rope, x, cos, sin, kernels=1)
    jitted = thunder.jit(_rope, executors=CPU)
    with torch.no_grad():
        jitted(x, cos, sin)
    source = thunder.last_kernels(jitted)[0]["source"]
    assert "for (int64_t i3 = 8LL; i3 < 16LL; ++i3)" in source  # the second part, read at a fixed offset


def test_narrow_dtypes_keep_gathering_slices_and_1d_cats_outside_kernels():
    x = torch.randn(6, 12).to(torch.bfloat16)
    assert_matches_eager(lambda x: x[:, ::2].sin() * 2, x)  # a strided slice along the innermost dim
    assert "slice" not in _fused_symbols(lambda x: x[:, ::2].sin() * 2, x)
    a, b = torch.randn(5).to(torch.float16), torch.randn(7).to(torch.float16)
    assert_matches_eager(lambda a, b: torch.cat((a.exp(), b * 2)) + 1, a, b)
    assert "cat" not in _fused_symbols(lambda a, b: torch.cat((a.exp(), b * 2)) + 1, a, b)
    # Along an outer dim, a cat of narrow dtypes reads contiguously, and fuses.
    c, d = torch.randn(2, 8).to(torch.bfloat16), torch.randn(3, 8).to(torch.bfloat16)
    assert_matches_eager(lambda c, d: torch.cat((c.exp(), d * 2), 0) + 1, c, d, kernels=1)


def test_a_float16_product_rounds_before_the_add_that_follows():
    # GCC would contract v0 + round16(a * b) into fma(a, b, v0), dropping the rounding (-ffp-contract=off).
    a, b = torch.full((16,), -2.400390625).half(), torch.full((16,), -3.97265625).half()
    c = torch.tensor(-8.4765625).half()
    out = assert_matches_eager(lambda a, b, c: c.float() + (a * b).float(), a, b, c, kernels=1)
    assert out[0].item() == 1.0625


# ---- outputs written over inputs that die in their kernel ----

def _written_over(fn, *args):
    """fn's result through the CPU executor (checked against eager, inputs unchanged) and how many kernel
    inputs the generated source reads through an output's pointer."""
    from thunder.executors import cpuex

    before = [a.clone() for a in args]
    out = assert_matches_eager(lambda *a: torch.stack(list(fn(*a))) if isinstance(fn(*a), tuple) else fn(*a), *args)
    for a, b in zip(args, before):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # inputs are never written over
    return out, cpuex.last_source.count("// written over in place")


def test_a_kernel_writes_its_output_over_a_product_that_dies_there():
    x, w, b = torch.randn(8, 32), torch.randn(64, 32), torch.randn(64)
    _, over = _written_over(lambda x, w, b: torch.relu(F.linear(x, w, b)) * 2 + 1, x, w, b)
    assert over == 1
    _, over = _written_over(lambda x, w: torch.tanh(x @ w.t()) + torch.sigmoid(x @ w.t()), x, w)
    assert over >= 1  # the two products (merged by CSE or not) each die in the kernel


@pytest.mark.parametrize("name, fn", [
    ("a trace input", lambda x, w: x.exp() + 1),
    ("a product also returned", lambda x, w: (lambda y: (y, y.relu()))(x @ w.t())),
    ("a product read twice", lambda x, w: (lambda y: y.relu() + y.sum())(x @ w.t())),
    ("a view of a product", lambda x, w: (x @ w.t()).t().relu()),
    ("a product of another dtype", lambda x, w: (x @ w.t()).double().exp()),
    ("a broadcast product", lambda x, w: (x @ w[:1].t()) * x),
])
def test_an_output_is_a_new_tensor_unless_the_input_dies_in_the_kernel_and_is_owned(name, fn):
    torch.manual_seed(0)  # a sum of 512 products differs from eager's by its order: inputs that stay in tolerance
    x, w = torch.randn(16, 32), torch.randn(32, 32)
    _, over = _written_over(fn, x, w)
    assert over == 0, name


def test_two_outputs_are_written_over_two_products():
    x, w1, w2 = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 16)
    out, over = _written_over(lambda x, a, b: ((x @ a).relu() * 2, (x @ b).sigmoid() - (x @ a)), x, w1, w2)
    assert over >= 1


def test_an_output_written_over_a_view_of_a_product_is_not_a_view():
    # (a @ b).view(...) dies in the GELU's kernel, which writes its output there: the result is still a tensor of
    # its own, as eager's is -- detach_() and in-place ops with operands that require grad work on it.
    def f(a, b):
        return F.gelu((a @ b).view(2, 4, 12))

    a, b = torch.randn(8, 16), torch.randn(16, 12)
    jitted = thunder.jit(f, executors=CPU)
    with torch.no_grad():
        expected, out = f(a, b), jitted(a, b)
    torch.testing.assert_close(out, expected)
    assert "// written over in place" in thunder.executors.cpuex.last_source
    assert not out._is_view() and out._base is None
    out.detach_()
    w = torch.ones(2, 4, 12, requires_grad=True)
    out.mul_(w)
    expected.mul_(w)
    torch.testing.assert_close(out, expected)


def test_a_later_graph_of_one_jitted_function_compiles_only_the_kernels_it_lacks():
    # The softmax after the graph break computes as the first graph's does: the first graph's compiled kernel
    # serves it, and only the exp after the matmul is compiled (cpuex.lower's `compiled`).
    def f(x, w):
        y = (x.sin() * 2).softmax(-1)
        torch._dynamo.graph_break()
        z = (y.sin() * 2).softmax(-1)
        return z, (z @ w).exp()

    jitted = thunder.jit(f, executors=CPU)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x, w), f(x, w))
    first, second = thunder.last_kernels(jitted, 0), thunder.last_kernels(jitted, 1)
    assert len(first) == 1 and len(second) == 2
    assert first[0]["path"] in {k["path"] for k in second}
    (new,) = [k for k in second if k["path"] != first[0]["path"]]
    assert new["source"].count('extern "C" int cpu_fusion') == 1 and "expf" in new["source"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fn", [
    lambda x: x * -0.0,
    lambda x: torch.where(x > 0, x, -0.0),
    lambda x: torch.full_like(x, -0.0) + x * 0,
    lambda x: x.masked_fill(x < 0, -0.0),
], ids=["mul", "where", "full_like", "masked_fill"])
def test_a_negative_zero_constant_keeps_its_sign_in_a_kernel(fn, dtype):
    """The kernel's literal for -0.0 was "-0", an int, whose conversion is +0.0: signbit, 1/x and atan2 saw it."""
    x = torch.tensor([1.0, -2.0, 0.0, -0.0, 3.5]).to(dtype)
    actual, expected = thunder.jit(fn)(x), fn(x)
    torch.testing.assert_close(actual, expected)
    assert torch.equal(actual.signbit(), expected.signbit()), (actual, expected)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16], ids=str)
def test_a_float_converted_to_a_narrow_integer_wraps_inside_a_kernel(dtype):
    """x.to(torch.uint8).float() in one kernel: the conversion (undefined in C++ beyond the type's range) kept the
    float's value, so a "uint8" read -2 and 300 (eager: 254 and 44, through int32 as ATen's vectorized conversion);
    pow of such a value gave NaN. Found by a random-program fuzzer."""
    x = torch.tensor([1.5, -2.25, 300.0, 3.0, -129.5, 70000.0] * 5)

    def fn(a):
        return a.to(dtype).float() * 2 + torch.pow(a.to(dtype).abs(), 0.5)

    assert_matches_eager(fn, x, kernels=1)


def test_an_input_with_the_negative_bit_is_read_with_its_sign():
    """z.conj().imag is a tensor with the negative bit: its memory holds the values negated. Kernels read the memory
    (x * 2 + 1 of [-1, 3, -4] gave [3, -5, 9]), also after a first call with an ordinary tensor, which Dynamo's
    guards do not tell apart (found by a break-it pass)."""
    z = torch.tensor([1 + 1j, 2 - 3j, -0.5 + 4j, 2 + 2j], dtype=torch.complex64)
    strided = z.conj().imag                                     # a view with stride 2
    dense = torch._neg_view(torch.tensor([1.0, -3.0, 4.0, -2.0]))  # contiguous
    assert strided.is_neg() and dense.is_neg()

    def fn(x):
        return (x * 2 + 1).softmax(-1), x.sum()

    jitted = thunder.jit(fn, executors=CPU)
    for x in (torch.tensor([5.0, 6.0, 7.0, 8.0]), strided, dense, strided.clone().resolve_neg()):
        for actual, expected in zip(jitted(x), fn(x)):
            torch.testing.assert_close(actual, expected)
    assert any(b.executor == "cpu" for g in compiled_graphs(jitted) for b in g.execution_trace.symbols)


@pytest.mark.parametrize("inference", [False, True], ids=["grad", "inference_mode"])
def test_output_prototypes_share_their_memory(inference):
    """A launcher allocates a small output as torch.empty_like of a prototype it keeps. A graph with symbolic sizes
    keeps a launcher per shape signature, and each prototype held its output's bytes: with one memory shared by
    every prototype, a shape costs less than half what it did (108 -> 46 KB per shape for a 4-op graph at lengths
    50..250). The outputs are what torch.empty makes: the shape, dtype and contiguous strides; a prototype made
    under inference mode serves calls outside it."""
    from thunder.executors.cpuex import _prototype

    shapes = [((2, 3), torch.float32), ((5,), torch.int64), ((), torch.bool), ((0, 4), torch.bfloat16),
              ((1, 7, 1), torch.complex64), ((64, 64, 4), torch.float32)]
    with torch.inference_mode(inference):
        prototypes = [_prototype(shape, dtype) for shape, dtype in shapes]
    assert len({p.untyped_storage().data_ptr() for p in prototypes}) == 1
    for p, (shape, dtype) in zip(prototypes, shapes):
        out, expected = torch.empty_like(p), torch.empty(shape, dtype=dtype)
        assert (out.shape, out.dtype, out.stride(), out.is_inference()) == \
            (expected.shape, dtype, expected.stride(), False)
        assert out.untyped_storage().data_ptr() != p.untyped_storage().data_ptr()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("exponent", [0.5, -0.5, -1.0, 2.0])
def test_small_powers_as_atens_kernel_takes_them(exponent, dtype):
    """ATen computes x ** 0.5 and x ** -0.5 as sqrt and rsqrt (NaN at -inf, -0.0 kept) except in float16, whose
    kernel calls pow (inf at -inf, +0.0): the fused kernel writes the same special cases."""
    x = torch.tensor([-0.0, float("-inf"), 4.0, 0.0, float("inf"), -2.0, 0.3, 7.0], dtype=dtype)
    out = assert_matches_eager(lambda x: (x * 1).pow(exponent), x, kernels=1)
    expected = (x * 1).pow(exponent)
    number = ~expected.isnan()
    assert torch.equal(out.isnan(), expected.isnan()) and torch.equal(out.signbit()[number], expected.signbit()[number])


@pytest.mark.parametrize("exponent", [3.0, -2.0, -0.5])
def test_bfloat16_small_powers_round_as_atens_vectorized_kernel(exponent):
    """ATen's bfloat16 kernel multiplies in bfloat16: x ** 3 is (x * x, rounded) * x and x ** -2 is 1 / (x * x,
    rounded) (its rsqrt rounds once); the fused kernel rounded only the result, one ulp off for a quarter of the
    values. Compared on 4096 elements: the vectorized body (a tensor's last few elements, ATen's scalar tail, may
    round -0.5's sqrt first)."""
    torch.manual_seed(0)
    x = torch.randn(4096).to(torch.bfloat16)
    x = x.abs() if exponent == -0.5 else x
    fn = lambda x: torch.pow(x, exponent)  # noqa: E731
    assert torch.equal(thunder.jit(fn)(x), fn(x))


def test_the_row_buffers_of_a_kernel_stay_within_a_budget():
    """A reduction pass keeps its libmvec values in row buffers (stack arrays of 8192 elements) for a later pass;
    the backward of a chain of 150 tanh/sin steps kept 449 of them (14 MiB) and overflowed the stack (a
    segfault). Past a budget the values are recomputed: the gradients equal eager's."""
    torch.manual_seed(0)
    lin, ref = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    ref.load_state_dict(lin.state_dict())

    def chain(m):
        def f(x):
            a = m(x)
            for _ in range(150):
                a = torch.tanh(a) * 1.01 + a.sin()
            return a
        return f

    x = torch.rand(2, 4)
    jitted = thunder.jit(chain(lin))
    jitted(x).sum().backward()
    chain(ref)(x).sum().backward()
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad)
    for unit in thunder.last_kernels(jitted, -1):
        assert unit["source"].count("[8192];") * 8192 * 4 <= 512 * 1024


@pytest.mark.parametrize("op", [F.hardswish, F.hardsigmoid])
def test_half_hardswish_rounds_once_as_eager(op):
    """ATen's kernel computes a float16 input in float32 and rounds once; rounding after each step was 1-2 ulp off."""
    x = torch.tensor([1.2207, 2.2207, -2.5, 0.3333, 5.9], dtype=torch.float16)
    jitted = thunder.jit(lambda x: op(x) + 0)
    assert torch.equal(jitted(x), op(x) + 0)


def test_lerp_with_a_constant_weight_computes_one_minus_it_in_float32():
    # ATen takes the weight as a float for float32 tensors: 1 - 0.99999 rounded there, not in double.
    fn = lambda a, b: torch.lerp(a, b, 0.99999)  # noqa: E731
    a, b = torch.tensor([1e4, -3e4, 1e6]), torch.tensor([0.0, 1.0, 3.0])
    out, _ = run_cpu(fn, a, b)
    assert torch.equal(out, fn(a, b))


@pytest.mark.parametrize("shape", [(6,), (3, 4), (2, 3, 4)])
def test_one_hot_of_indices_of_any_rank_is_native(shape):
    """prims.take takes 0-d and 1-d indices: one_hot of a 2-d index (labels of a batch) was opaque."""
    def fn(i):
        return torch.nn.functional.one_hot(i, 5).float() * 2

    jitted = thunder.jit(fn)
    i = torch.randint(0, 5, shape)
    torch.testing.assert_close(jitted(i), fn(i))
    final = str(thunder.last_traces(jitted)[-1])
    assert not [line for line in final.splitlines() if "one_hot" in line and not line.strip().startswith("#")], final


def test_the_where_method_chooses_its_tensor_where_the_condition_holds():
    """x.where(condition, other) is where(condition, x, other): imported as where(x, condition, other), it
    returned the condition cast to x's dtype, with wrong gradients."""
    def method(x, c):
        return x.where(c, x * 3)

    def keywords(x, c):
        return torch.Tensor.where(x, condition=c, other=-x)

    for fn in (method, keywords):
        x = torch.randn(6, requires_grad=True)
        got, want = thunder.jit(fn)(x, x > 0), fn(x, x > 0)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.autograd.grad(got.sum(), x), torch.autograd.grad(want.sum(), x))


@pytest.mark.parametrize("target", [0, -100])
def test_a_loss_over_zero_classes_runs_as_eager(target):
    """A kernel's bounds check clamps an index into [0, extent): over a dimension of size 0 there is nothing to
    read, and the process crashed (SIGSEGV). Such an op runs with torch, which raises or returns NaN as eager."""
    def fn(x, t):
        return F.cross_entropy(x * 1, t)

    x, t = torch.randn(4, 0), torch.full((4,), target)
    try:
        expected = fn(x, t)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            thunder.jit(fn)(x, t)
    else:
        torch.testing.assert_close(thunder.jit(fn)(x, t), expected, equal_nan=True)


@pytest.mark.parametrize("chunks", [2, 3])
def test_chunk_and_glu_of_a_dimension_of_size_0(chunks):
    """torch.chunk of a size-0 dimension gives `chunks` empty pieces; thunder's rule gave one, and glu, which reads
    the second half, read past the end (the process crashed)."""
    x = torch.randn(4, 0)
    assert_matches_eager(lambda x: torch.stack([c * 2 for c in x.chunk(chunks, -1)]), x)  # (chunks, 4, 0)
    assert_matches_eager(lambda x: F.glu(x, -1) * 2, x)


@pytest.mark.parametrize("fn", [lambda x: F.layer_norm(x, x.shape[-1:]), lambda x: F.group_norm(x.reshape(2, 4, -1), 2),
                                lambda x: F.batch_norm(x.reshape(4, 2, -1), None, None, training=True)],
                         ids=["layer_norm", "group_norm", "batch_norm"])
@pytest.mark.parametrize("value", [1000.1, -3.3e4, 1.7])
def test_a_normalized_row_of_equal_values_is_zero(fn, value):
    """The mean of equal values rounds (8192 times 1000.1 in float32); x - mean then left that error, which
    rsqrt(var + eps) scaled up to 0.3. Eager's Welford moments give exactly 0, and so do thunder's corrected two-pass
    moments (layer_norm and group_norm; eager's training batch_norm is off by up to 0.16 here)."""
    x = torch.full((2, 8192), value)
    assert thunder.jit(fn)(x).abs().max().item() == 0.0


@pytest.mark.parametrize("x", [(torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 500).half(),
                               torch.tensor([6e-8, 6e-8, 1.2e-7, 0.0], dtype=torch.float16),
                               torch.tensor([1e20, -1e20, 2e20, 0.0]), torch.tensor([1e-25, -1e-25, 2e-25, 0.0])],
                         ids=["float16_std_above_256", "float16_tiny", "float32_huge", "float32_tiny"])
def test_a_standard_deviation_is_the_root_of_a_variance_in_the_accumulation_type(x):
    """ATen's std takes the root of a variance in its accumulation type (float for halves, double for float32 on the
    CPU) and rounds once; a variance rounded to the input's dtype first was inf or 0 here."""
    for fn in (lambda t: t.std(), lambda t: t.std(0, correction=0), lambda t: torch.std_mean(t)[0]):
        assert_same(thunder.jit(fn)(x), fn(x))


@pytest.mark.parametrize("op", [torch.softmax, torch.log_softmax])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_casts_its_input_to_the_dtype_it_is_given_first(op, dtype):
    x = torch.tensor([[1000.2, 1000.0], [70000.0, 70000.0], [0.3, -1.7]])
    fn = lambda t: op(t, 1, dtype=dtype)  # noqa: E731
    two_ulps = 2 * torch.finfo(dtype).eps  # eager's float16 log_softmax rounds its log-sum-exp to float16 too
    torch.testing.assert_close(thunder.jit(fn)(x), fn(x), equal_nan=True, rtol=two_ulps, atol=two_ulps)


def test_addcmul_scales_the_first_tensor_before_multiplying():
    """x + (v * t1) * t2, as ATen's kernel: t1 * t2 overflowed where v * t1 * t2 does not."""
    fn = lambda x, a, b: torch.addcmul(x, a, b, value=0.5)  # noqa: E731
    args = (torch.tensor([3e38]), torch.tensor([3e38]), torch.tensor([-2.0]))
    assert_same(thunder.jit(fn)(*args), fn(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("to", [torch.int32, torch.int64])
def test_a_float_converted_to_an_integer_and_back_has_no_negative_zero(dtype, to):
    # GCC (with -fno-trapping-math) folded `(float)(int)x` in a kernel into trunc(x): -0.0 for x in (-1, 0), where
    # eager's integer 0 converts to +0.0 (and x / x.int() was +inf for -inf). NaN converts to eager's INT_MIN.
    def f(x):
        return x.to(to).to(dtype), x / x.to(to)

    for n in (7, 300):  # a short tensor runs the kernel's scalar loop, a long one its vectorized loop
        x = torch.tensor([-0.25, 0.5, -1.5, -0.0, -7.9, 1e3, -0.9, float("nan")] * 40, dtype=dtype)[:n]
        out, ref = thunder.jit(f)(x), f(x)
        assert torch.equal(out[0].nan_to_num(), ref[0].nan_to_num()) and torch.equal(out[0].signbit(), ref[0].signbit())
        torch.testing.assert_close(out[1], ref[1], equal_nan=True)


def _sigmoid_and_its_amax(x):
    y = torch.sigmoid(x)
    return y, y.amax(0)


@pytest.mark.parametrize("shape", [(4, 2, 2), (10000, 3)])
def test_a_stored_value_and_its_reduction_in_one_kernel_agree(shape):
    """A kernel storing sigmoid(x) and reducing it computed it in two loops, where GCC took libmvec's vector expf in
    one and the scalar one in the other: the stored values and their amax differed in the last bit, and amax's VJP
    (the elements equal to the max) found no tie -- NaN gradients of logsumexp(silu(x), 0). The reduction's pass
    stores the outputs it computes."""
    jitted = thunder.jit(_sigmoid_and_its_amax)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        y, m = jitted(torch.randn(*shape, generator=g))
        assert torch.equal(y.amax(0), m)
    lse = thunder.jit(lambda x: torch.logsumexp(torch.nn.functional.silu(x), 0))
    for _ in range(20):
        x = torch.randn(4, 2, 2, generator=g, requires_grad=True)
        lse(x).sum().backward()
        assert not torch.isnan(x.grad).any()


def test_float32_erf_below_one_where_eagers_is():
    # The fused erf's polynomial rounded to 1.0 from x = 3.833, where eager's erf gives 0.99999994 up to 3.9277:
    # floor(erf(x)) and erf(x) == 1 differed from eager's over an eighth of [3.5, 4.2].
    x = torch.linspace(3.5, 4.2, 20001)
    out, floor = thunder.jit(lambda x: (torch.erf(x) * 1, torch.floor(torch.erf(x))))(x)
    expected = torch.erf(x)
    ulp = torch.nextafter(expected, torch.full_like(x, 2.0)) - expected
    assert ((out - expected).abs() <= ulp).all()
    assert (floor != torch.floor(expected)).float().mean() < 1e-3
