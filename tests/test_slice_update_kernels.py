"""prims.slice_update inside the CPU executor's kernels, against eager PyTorch, bit for bit.

Each program is written once against a small namespace of prims and run twice: recorded into a trace with
``thunder._core.TraceBuilder`` (then compiled through the passes with the CPU executor first, and run), and
called with eager torch functions of the same meaning. The ops around the updates (negation, doubling, adds,
``where``, comparisons) round the same way in a kernel as in eager, so results must agree in every bit, for
float32, float64, float16, bfloat16, int64 and bool, with contiguous and non-contiguous inputs.
"""
import pytest
import torch

import thunder
from thunder import _core
from thunder.core.compile import DEFAULT_PASSES, compile_trace
from thunder.core.dtypes import to_core, to_torch
from thunder.executors import executor_sets
from thunder.frontend.fx_import import ImportedGraph

CPU = executor_sets()["cpu"]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.bool]
NARROW = (torch.float16, torch.bfloat16, torch.bool)


@pytest.fixture(autouse=True)
def private_kernel_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("THUNDER_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


# ---- one program, two meanings ----

class Traced:
    """Prims recorded on a TraceBuilder: ``ops.neg(x)`` appends ``prims.neg`` and returns its output proxy."""

    def __init__(self, builder):
        self.builder = builder

    def __getattr__(self, name):
        return lambda *args: self.builder.call("prims", name, list(args), {})


def _index(start, stop, step):
    return tuple(slice(s, e, st) for s, e, st in zip(start, stop, step or [1] * len(start)))


def _slice_update(a, src, start, stop, step=None):
    out = a.clone()
    out[_index(start, stop, step)] = src
    return out


class Eager:
    """The same prims as eager torch calls."""
    neg, logical_not, add, mul, gt, where = torch.neg, torch.logical_not, torch.add, torch.mul, torch.gt, torch.where
    sin, cos, reshape = torch.sin, torch.cos, torch.reshape

    @staticmethod
    def slice(a, start, stop, step=None):
        return a[_index(start, stop, step)]

    slice_update = staticmethod(_slice_update)

    @staticmethod
    def full(shape, fill_value, dtype, device):
        return torch.full(shape, fill_value, dtype=to_torch(dtype), device=device)


def flip(ops, v, dtype):
    """An op that is exact in every dtype: logical_not of a bool, the negation of anything else."""
    return ops.logical_not(v) if dtype == torch.bool else ops.neg(v)


def double(ops, v, dtype):
    """Another exact op: v + v (v itself for bool)."""
    return v if dtype == torch.bool else ops.add(v, v)


def positive(ops, v, dtype):
    """A bool of v: v itself for bool, else v > 0."""
    return v if dtype == torch.bool else ops.gt(v, 0)


def compile_program(program, inputs, *extra, passes=DEFAULT_PASSES):
    """program(Traced ops, *input proxies, *extra) recorded and compiled with the CPU executor; the graph."""
    b = _core.TraceBuilder()
    proxies = [b.add_input_tensor(to_core(x.dtype), list(x.shape), "cpu", False,
                                  [] if x.is_contiguous() else list(x.stride())) for x in inputs]
    trace = b.finish(program(Traced(b), *proxies, *extra))
    return compile_trace(ImportedGraph(trace, {}), CPU, passes)


def fused_prims(graph):
    """The prims of each CPU fusion of the graph's execution trace."""
    return [[s.name for s in b.subsymbols] for b in graph.execution_trace.symbols if b.executor == "cpu"]


def bits(t):
    t = t.contiguous().reshape(-1)  # 0-d tensors have no byte view
    return t if t.dtype == torch.bool else t.view(torch.uint8)


def assert_bit_exact(actual, expected):
    as_tuple = lambda x: x if isinstance(x, tuple) else (x,)  # noqa: E731
    for a, e in zip(as_tuple(actual), as_tuple(expected)):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        assert torch.equal(bits(a), bits(e)), f"\n{a}\n!=\n{e}"


def check(program, inputs, *extra, fused=True):
    """Runs the program compiled and eagerly; asserts equal bits, and that slice_update is in a kernel (or not)."""
    graph = compile_program(program, inputs, *extra)
    with torch.no_grad():
        assert_bit_exact(graph.fn(*inputs), program(Eager, *inputs, *extra))
    in_kernel = any("slice_update" in prims for prims in fused_prims(graph))
    assert in_kernel == fused, fused_prims(graph)
    return graph


def sample(dtype, *shape):
    if dtype == torch.bool:
        return torch.rand(*shape) > 0.5
    if dtype == torch.int64:
        return torch.randint(-1000, 1000, shape)
    return (torch.randn(*shape) * 4).to(dtype)


# ---- programs: (name, program(ops, x, dtype), shape of x, fused in narrow dtypes) ----

def box(ops, x, dt):  # both dims of a 2-d tensor, with arithmetic before and after
    src = flip(ops, ops.slice(x, [1, 2], [3, 5]), dt)
    return double(ops, ops.slice_update(flip(ops, x, dt), src, [1, 2], [3, 5]), dt)


def rows(ops, x, dt):  # outer dim only: the innermost loop stays whole
    return flip(ops, ops.slice_update(x, double(ops, ops.slice(x, [0, 0], [2, 8]), dt), [3, 0], [5, 8]), dt)


def columns(ops, x, dt):  # innermost dim only: the loop splits at the update's columns
    return flip(ops, ops.slice_update(x, flip(ops, ops.slice(x, [0, 5], [6, 8]), dt), [0, 1], [6, 4]), dt)


def strided_rows(ops, x, dt):  # every other row
    src = flip(ops, ops.slice(x, [0, 2], [3, 7]), dt)
    return double(ops, ops.slice_update(x, src, [0, 2], [6, 7], [2, 1]), dt)


def strided_both(ops, x, dt):  # steps in both dims: gathers along the innermost, unfused in narrow dtypes
    src = flip(ops, ops.slice(x, [0, 0], [3, 3]), dt)
    return ops.slice_update(flip(ops, x, dt), src, [1, 1], [6, 8], [2, 3])


def slice_of_update(ops, x, dt):  # the updated tensor read at shifted indices: a remap inside a remap
    updated = ops.slice_update(flip(ops, x, dt), double(ops, ops.slice(x, [0, 0], [2, 8]), dt), [2, 0], [4, 8])
    return flip(ops, ops.slice(updated, [1, 3], [5, 7]), dt)


def two_updates(ops, x, dt):  # one update over another, overlapping
    first = ops.slice_update(x, flip(ops, ops.slice(x, [0, 0], [3, 4]), dt), [1, 2], [4, 6])
    return flip(ops, ops.slice_update(first, double(ops, ops.slice(x, [4, 4], [6, 8]), dt), [2, 3], [4, 7]), dt)


def chosen_by_an_element(ops, x, dt):  # where over a 0-d predicate read from x itself
    c = positive(ops, ops.reshape(ops.slice(x, [2, 3], [3, 4]), []), dt)
    return ops.slice_update(x, ops.where(c, flip(ops, ops.slice(x, [0, 0], [2, 8]), dt), ops.slice(x, [4, 0], [6, 8])),
                            [1, 0], [3, 8])


PROGRAMS = [
    ("box", box, True),
    ("rows", rows, True),
    ("columns", columns, True),
    ("strided_rows", strided_rows, True),
    ("strided_both", strided_both, False),
    ("slice_of_update", slice_of_update, True),
    ("two_updates", two_updates, True),
    ("chosen_by_an_element", chosen_by_an_element, True),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name,program,narrow_fuses", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_slice_update_in_a_kernel_matches_eager_bit_for_bit(name, program, narrow_fuses, dtype):
    check(program, [sample(dtype, 6, 8)], dtype, fused=narrow_fuses or dtype not in NARROW)


LAYOUTS = [
    ("transposed", lambda dt: sample(dt, 8, 6).t()),
    ("every_other_row_and_column", lambda dt: sample(dt, 12, 20)[::2, 3:19:2]),
    ("expanded", lambda dt: sample(dt, 1, 8).expand(6, 8)),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", [l[1] for l in LAYOUTS], ids=[l[0] for l in LAYOUTS])
@pytest.mark.parametrize("program", [box, columns, strided_rows], ids=["box", "columns", "strided_rows"])
def test_non_contiguous_inputs_are_read_in_place(program, layout, dtype):
    x = layout(dtype)
    assert not x.is_contiguous()
    graph = check(program, [x], dtype)
    assert not any("contiguous" in line for line in str(graph.execution_trace).splitlines())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_slice_update_alone_is_a_kernel_of_its_two_inputs(dtype):
    x, y = sample(dtype, 3, 5, 7), sample(dtype, 3, 2, 7)
    graph = check(lambda ops, x, y: ops.slice_update(x, y, [0, 1, 0], [3, 5, 7], [1, 2, 1]), [x, y])
    assert fused_prims(graph) == [["slice_update"]]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_an_empty_update_copies_its_input(dtype):
    check(lambda ops, x: ops.slice_update(flip(ops, x, dtype), ops.slice(x, [0, 0], [0, 8]), [2, 0], [2, 8]),
          [sample(dtype, 6, 8)])


# ---- where over a one-element predicate ----

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pred_shape", [[], [1], [1, 1]], ids=["0d", "1", "1x1"])
def test_where_with_a_one_element_predicate_fuses(pred_shape, dtype):
    def program(ops, x):
        c = positive(ops, ops.reshape(ops.slice(x, [1, 2], [2, 3]), pred_shape), dtype)
        return double(ops, ops.where(c, flip(ops, x, dtype), double(ops, x, dtype)), dtype)

    for x in (sample(dtype, 4, 5), sample(dtype, 5, 4).t()):
        x[1, 2] = True if dtype == torch.bool else 1
        graph = compile_program(program, [x])
        assert_bit_exact(graph.fn(x), program(Eager, x))
        x[1, 2] = False if dtype == torch.bool else -1
        assert_bit_exact(graph.fn(x), program(Eager, x))
        assert len(fused_prims(graph)) == 1 and "where" in fused_prims(graph)[0], str(graph.execution_trace)


def test_where_with_a_zero_dim_predicate_input_fuses():
    program = lambda ops, c, a, b: ops.where(c, ops.neg(a), ops.add(a, b))  # noqa: E731
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    for c in (torch.tensor(True), torch.tensor(False)):
        graph = compile_program(program, [c, a, b])
        assert_bit_exact(graph.fn(c, a, b), program(Eager, c, a, b))
        assert fused_prims(graph) == [["neg", "add", "where"]]


# ---- the chain: each element of a row replaced in turn, as a 0-d predicate chooses ----

def chain(ops, x, dtype, pick, length=20):
    """v_i = slice_update(v_{i-1}, where(c_i, f(x[0:1, i:i+1]), g(x[0:1, i:i+1])), [0, i], [1, i + 1]), with
    c_i = x[0:1, i:i+1] reshaped to 0-d, compared with 0.5 (pick gives f and g)."""
    f, g = pick
    v = x
    for i in range(length):
        s = ops.slice(x, [0, i], [1, i + 1])
        r = ops.reshape(s, [])
        c = r if dtype == torch.bool else ops.gt(r, 0.5)
        v = ops.slice_update(v, ops.where(c, f(ops, s, dtype), g(ops, s, dtype)), [0, i], [1, i + 1])
    return v


def sin(ops, v, dtype):
    return ops.sin(v)


def cos(ops, v, dtype):
    return ops.cos(v)


def test_twenty_updates_of_sin_or_cos_are_one_kernel():
    x = torch.rand(1, 20)
    graph = compile_program(chain, [x], torch.float32, (sin, cos))
    assert [b.executor for b in graph.execution_trace.symbols if b.name != "del"] == ["cpu"], str(graph.execution_trace)
    assert fused_prims(graph)[0].count("slice_update") == 20
    # sin and cos: glibc's in the kernel, ATen's in eager, which may differ in the last bit.
    torch.testing.assert_close(graph.fn(x), chain(Eager, x, torch.float32, (sin, cos)), rtol=2.4e-7, atol=0)
    source = thunder.executors.cpuex.last_source
    kernel = source[source.index('extern "C" int'):]
    assert kernel.count("for (int64_t i1 = ") == 20  # one piece per element, each computing its own update


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_twenty_updates_are_one_kernel_in_every_dtype(dtype):
    x = sample(dtype, 1, 20) if dtype in (torch.int64, torch.bool) else torch.rand(1, 20).to(dtype)
    graph = compile_program(chain, [x], dtype, (flip, double))
    assert len(fused_prims(graph)) == 1 and fused_prims(graph)[0].count("slice_update") == 20
    assert_bit_exact(graph.fn(x), chain(Eager, x, dtype, (flip, double)))


# ---- constants and one-element values: zeros updated element by element (a gradient of x[i]) ----

def elements_into_a_constant(ops, x, dt, fill):
    """full([6], fill) with elements 1 and 4 replaced by flip(x[i]); also returns flip(x[4]) (0-d)."""
    z = ops.full([6], fill, to_core(dt), "cpu")
    for i in (1, 4):
        g = flip(ops, ops.reshape(ops.slice(x, [i], [i + 1]), []), dt)
        z = ops.slice_update(z, ops.reshape(g, [1]), [i], [i + 1])
    return z, g


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_constant_updated_by_elements_is_one_kernel_with_its_0d_output(dtype):
    fill = True if dtype == torch.bool else 7 if dtype == torch.int64 else 0.1  # 0.1 rounds in half precision
    x = sample(dtype, 6)
    # Without constant folding, which would make the full a constant tensor read by the kernel.
    graph = compile_program(elements_into_a_constant, [x], dtype, fill,
                            passes=[p for p in DEFAULT_PASSES if p != "constant_folding"])
    if dtype not in NARROW:  # narrow dtypes: selects along a 1-d domain's only loop are gathers, kept out
        assert [b.name for b in graph.execution_trace.symbols if b.name != "del"] == ["fusion"], str(graph.execution_trace)
        assert "full" in fused_prims(graph)[0]
    assert_bit_exact(graph.fn(x), elements_into_a_constant(Eager, x, dtype, fill))


# ---- an output read inside the kernel over other indices ----

def test_an_update_that_is_also_returned_is_computed_by_its_own_kernel():
    def program(ops, x):
        src = ops.neg(ops.slice(x, [1, 2], [3, 5]))
        return ops.slice_update(ops.add(x, x), src, [1, 2], [3, 5]), src

    graph = check(program, [torch.randn(4, 8)])
    assert len(fused_prims(graph)) == 2


def test_a_cat_part_that_is_also_returned_is_stored_in_its_own_bounds():
    # Fused with the cat, the part was stored over the cat's whole range: past its end (heap corruption).
    def fn(x):
        e = x[:, :3].exp()
        return torch.cat((e, x[:, 3:]), 1) * 2, e

    x = torch.randn(64, 7)
    jitted = thunder.jit(fn, executors=CPU)
    with torch.no_grad():
        actual, expected = jitted(x), fn(x)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("dynamic", [None, True], ids=["static", "dynamic"])
def test_a_number_read_at_run_time_in_a_kernel_that_writes_a_slice(dynamic):
    """x[0].add_(m, alpha=2): a kernel with a slice update and a number it takes as an argument (m read at run time,
    or 0.5 * 2 computed by the trace). Rendering looked the number up among the tensors' layouts (IndexError:
    map::at) and the graph ran with torch (found by a random-program fuzzer)."""
    def fn(x, m):
        x[0].add_(m, alpha=2)
        return x * 2

    jitted = thunder.jit(fn, dynamic=dynamic)
    for m in (0.5, 0.25, 0.75):
        x_e, x_t = torch.arange(4.0), torch.arange(4.0)
        assert torch.equal(jitted(x_t, m), fn(x_e, m)) and torch.equal(x_t, x_e)
    assert all(g["compiled"] for g in thunder.compile_stats(jitted).graphs), thunder.summary(jitted)
    assert any("cpu_fusion" in str(t) for t in thunder.last_traces(jitted))
