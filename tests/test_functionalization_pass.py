"""The functionalization pass on traces built through ``thunder._core`` the way the importer lowers in-place
ops, subscript writes and data-dependent branches: the printed functionalized trace (and the whole default
pipeline after it) runs and matches eager, written inputs included, gradients through branches included."""
import types

import pytest
import torch

from thunder import _core
from thunder.core.compile import compile_trace
from thunder.core.options import DEFAULT_PASSES
from thunder.executors import default_executors

F32 = _core.DType.float32
BOOL = _core.DType.bool


def call(b, name, *args, level="ltorch"):
    return b.call(level, name, list(args), {})


def functionalized(trace):
    """The functionalized trace as a Python function (its printed program, executed)."""
    out = _core.run_pipeline(trace, ["functionalize"])[0].trace
    source = out.python()
    assert "copy_(" not in source.replace("copy_to(", "") and "branch_" not in source, source
    ns = {}
    exec(compile(source, "<functionalized>", "exec"), ns)
    return ns["computation"], source


def compiled(trace):
    """The trace through every default pass and executor (CPU kernels included), as a function."""
    imported = types.SimpleNamespace(trace=trace, namespace={}, fallbacks=[])
    return compile_trace(imported, default_executors(), DEFAULT_PASSES).fn


def check(trace, eager, *inputs):
    """Both the functionalized trace and the compiled one give eager's outputs and leave the inputs as eager does."""
    want_inputs = [t.clone() for t in inputs]
    want = eager(*want_inputs)
    for fn in (functionalized(trace)[0], compiled(trace)):
        got_inputs = [t.clone() for t in inputs]
        got = fn(*got_inputs)
        torch.testing.assert_close(got, want, equal_nan=True)
        for g, w in zip(got_inputs, want_inputs):
            torch.testing.assert_close(g, w)


def test_in_place_add_on_an_input():
    b = _core.TraceBuilder()
    x = b.add_input_tensor(F32, [3], "cpu", False)
    y = b.add_input_tensor(F32, [3], "cpu", False)
    call(b, "copy_", x, call(b, "add", x, y))        # x.add_(y)
    t = b.finish((x, call(b, "mul", x, 2)))

    def eager(x, y):
        x.add_(y)
        return x, x * 2

    check(t, eager, torch.randn(3), torch.randn(3))
    fn, source = functionalized(t)
    x0, y0 = torch.randn(3), torch.randn(3)
    out = fn(x0, y0)
    assert out[0] is x0  # eager returns the input itself, updated by the copy-back
    assert "prims.copy_to(" in source


def test_subscript_writes_in_a_loop_read_the_original_elements():
    b = _core.TraceBuilder()
    x = b.add_input_tensor(F32, [2, 4], "cpu", False)
    for i in range(4):
        v = call(b, "getitem", x, (0, i))            # x[0, i] = x[0, i] * 2 + x[1, i]
        call(b, "copy_", v, call(b, "add", call(b, "mul", v, 2), call(b, "getitem", x, (1, i))))
    t = b.finish((x, call(b, "sum", x)))

    def eager(x):
        for i in range(4):
            x[0, i] = x[0, i] * 2 + x[1, i]
        return x, x.sum()

    check(t, eager, torch.randn(2, 4))
    _, source = functionalized(t)
    assert source.count("prims.slice_update(") == 4


def test_writes_through_transposes_reshapes_and_slices_of_intermediates():
    b = _core.TraceBuilder()
    x = b.add_input_tensor(F32, [3, 4], "cpu", False)
    w = b.add_input_tensor(F32, [3], "cpu", False)
    a = call(b, "mul", x, 1.5)
    at = call(b, "t", a)                              # at[1] = w   (a column of a)
    call(b, "copy_", call(b, "getitem", at, 1), w)
    flat = call(b, "reshape", a, [12])                # flat[::5] = 0
    call(b, "copy_", call(b, "getitem", flat, slice(None, None, 5)), 0.0)
    call(b, "copy_", call(b, "getitem", x, (slice(0, 2), slice(1, 3))), call(b, "getitem", a, (slice(1, 3), slice(0, 2))))
    t = b.finish((a, x, call(b, "getitem", at, 2)))

    def eager(x, w):
        a = x * 1.5
        at = a.t()
        at[1] = w
        flat = a.reshape(12)
        flat[::5] = 0.0
        x[0:2, 1:3] = a[1:3, 0:2]
        return a, x, at[2]

    check(t, eager, torch.randn(3, 4), torch.randn(3))


def branch_trace(with_else=True):
    b = _core.TraceBuilder()
    c = b.add_input_tensor(BOOL, [1], "cpu", False)
    x = b.add_input_tensor(F32, [3], "cpu", True)
    y = call(b, "zeros", [3])
    b.call("prims", "branch_begin", [c], {})
    call(b, "copy_", y, call(b, "sqrt", x))           # if c: y = x.sqrt()
    if with_else:
        b.call("prims", "branch_else", [c], {})
        call(b, "copy_", y, call(b, "neg", x))        # else: y = -x
    b.call("prims", "branch_end", [c], {})
    return b.finish(call(b, "mul", y, 2))


@pytest.mark.parametrize("taken", [True, False])
def test_a_branch_keeps_eager_gradients(taken):
    fn, source = functionalized(branch_trace())
    assert source.count("ltorch.detach(") == 2       # x is masked in each arm (sqrt, and -x)
    x = (torch.rand(3) + 0.5) * (1 if taken else -1)
    x.requires_grad_(True)
    out = fn(torch.tensor([taken]), x)
    out.sum().backward()
    xe = x.detach().clone().requires_grad_(True)
    want = (xe.sqrt() if taken else -xe) * 2
    want.sum().backward()
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(x.grad, xe.grad)      # no NaN from the untaken sqrt of a negative number
    assert not torch.isnan(x.grad).any()


def test_a_branch_without_else_through_the_default_pipeline():
    t = branch_trace(with_else=False)
    fn = compiled(t)
    for taken in (True, False):
        x = torch.rand(3) + 0.5
        want = (x.sqrt() if taken else torch.zeros(3)) * 2
        torch.testing.assert_close(fn(torch.tensor([taken]), x), want)


def test_an_opaque_in_place_op_sees_the_pending_writes():
    b = _core.TraceBuilder()
    x = b.add_input_tensor(F32, [2, 3], "cpu", False)
    row = call(b, "getitem", x, 0)
    call(b, "copy_", row, call(b, "exp", row))        # x[0] = x[0].exp()
    b.opaque("torch.Tensor.mul_", [x, 3], {}, b.new_tensor(F32, [2, 3], "cpu", False), True)  # x.mul_(3)
    t = b.finish((x, call(b, "add", row, 1)))

    def eager(x):
        row = x[0]
        row.copy_(row.exp())
        x.mul_(3)
        return x, row + 1

    check(t, eager, torch.randn(2, 3))


def test_a_write_through_an_expanded_view_is_refused():
    b = _core.TraceBuilder()
    x = b.add_input_tensor(F32, [1, 3], "cpu", False)
    b.set_source("f.py:2 in f: e = x.expand(2, 3)")
    e = call(b, "expand", x, [2, 3])
    call(b, "copy_", e, 1.0)
    t = b.finish(x)
    with pytest.raises(RuntimeError, match=r"functionalize: cannot write through ltorch.expand at f.py:2"):
        _core.run_pipeline(t, ["functionalize"])


def test_functionalize_is_the_first_pass():
    from thunder.core.options import check_passes

    assert check_passes(None)[0] == "functionalize" and _core.pass_names()[0] == "functionalize"
    with pytest.raises(ValueError, match="'functionalize' must be the first pass"):
        check_passes(["cse", "functionalize"])
    assert check_passes(["cse", "dce"]) == ("cse", "dce")  # a pipeline without it stays valid


def test_a_view_of_a_written_input_is_returned_as_that_view():
    b = _core.TraceBuilder()
    x = b.add_input_tensor(F32, [2, 3], "cpu", False)
    row = call(b, "getitem", x, 1)
    call(b, "copy_", call(b, "getitem", x, 0), call(b, "getitem", x, 1))  # x[0] = x[1]
    call(b, "copy_", row, 7.0)                                            # x[1] = 7
    t = b.finish((row, call(b, "getitem", x, 0)))
    fn, _ = functionalized(t)
    x0 = torch.randn(2, 3)
    want = x0.clone()
    want[0] = want[1]
    want[1] = 7.0
    r1, r0 = fn(x0)
    torch.testing.assert_close(x0, want)
    torch.testing.assert_close((r1, r0), (want[1], want[0]))
    assert r1._base is x0 and r0._base is x0  # eager's outputs: views of the updated input


def test_constants_the_pass_makes_fold():
    # x[0] = 1.0: the number becomes ltorch.full, reshaped for the slice_update; constant folding computes both
    # (its evaluator names the pass's new proxies from the trace being folded).
    b = _core.TraceBuilder()
    x = b.add_input_tensor(F32, [4], "cpu", False)
    call(b, "copy_", call(b, "getitem", x, 0), 1.0)
    t = b.finish(call(b, "mul", x, 2))

    def eager(x):
        x[0] = 1.0
        return x * 2

    check(t, eager, torch.randn(4))
