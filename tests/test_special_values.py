"""NaN, infinities, signed zeros, subnormals and the largest finite values through every elementwise op thunder
compiles, against eager. OpInfo's samples are random finite values; a kernel's own math (thunder's erf, a select
written `q < c ? q : c`) can turn a NaN into a number there and no sample would show it: erf(NaN) was 1.

Each dtype compiles one program returning every op's result (one compile per dtype, not per op). Where eager
gives NaN thunder must too, and the reverse; other values within the dtype's tolerance (infinities exactly)."""
import math

import pytest
import torch

import thunder
from conftest import assert_same

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _special(dtype):
    info = torch.finfo(dtype)
    return [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, info.tiny / 4, -info.tiny / 4, info.max,
            -info.max, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 100.0, -100.0]


def _ufuncs(kind):
    """torch's own OpInfo lists of unary and binary ufuncs: (name, function) of those with a floating variant."""
    from torch.testing._internal.common_methods_invocations import binary_ufuncs, unary_ufuncs

    ops = unary_ufuncs if kind == "unary" else binary_ufuncs
    seen, out = set(), []
    for op in ops:
        if op.name in seen or op.variant_test_name or not op.supports_dtype(torch.float32, "cpu"):
            continue
        seen.add(op.name)
        out.append((op.name, op.op))
    return out


def _runnable(ops, args, dtype):
    """The ops eager runs on these arguments in ``dtype`` (some take only some dtypes, or need other arguments)."""
    keep = []
    for name, fn in ops:
        try:
            out = fn(*args)
        except Exception:  # noqa: BLE001 -- an op eager rejects here is not compared
            continue
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype in DTYPES:
            keep.append((name, fn))
    return keep


def _compare(ops, args):
    def program(*xs):
        return tuple(fn(*xs) for _, fn in ops)

    expected = program(*args)
    actual = thunder.jit(program)(*args)
    mismatches = []
    for (name, _), a, e in zip(ops, actual, expected):
        try:
            assert_same(a, e)
        except AssertionError as error:
            where = (a.isnan() != e.isnan()) | ((a != e) & ~e.isnan() & ~a.isnan())
            inputs = [x[where].tolist()[:6] for x in args]
            mismatches.append(f"{name}: at {inputs} thunder {a[where].tolist()[:6]} eager {e[where].tolist()[:6]} "
                              f"({str(error).splitlines()[0]})")
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unary_ops_at_special_values_equal_eager(dtype):
    x = torch.tensor(_special(dtype), dtype=dtype)
    _compare(_runnable(_ufuncs("unary"), (x,), dtype), (x,))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_binary_ops_at_pairs_of_special_values_equal_eager(dtype):
    values = torch.tensor(_special(dtype), dtype=dtype)
    a, b = values.repeat_interleave(len(values)), values.repeat(len(values))
    _compare(_runnable(_ufuncs("binary"), (a, b), dtype), (a, b))
