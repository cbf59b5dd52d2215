"""Type promotion follows PyTorch exactly: each case runs through thunder.jit and is compared with
eager (value and dtype), and must have been imported natively (no opaque op, no fallback), both with
the default executors and with every torch-level op run as its prims decomposition."""
import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder import testing_opinfo as T


def _executor_sets():
    from thunder.executors import executor_sets

    return {"default": None, "torch": executor_sets()["torch"], "decomposed": T.decomposed_executors()}


def native_runs(fn, *args):
    """(executor set name, fn(*args) through it) for every executor set, each run checked to be native."""
    for name, executors in _executor_sets().items():
        jitted = thunder.jit(T._fresh_function(fn, name), executors=executors)
        actual = jitted(*args)
        path, opaque, fallbacks, _ = T._path(jitted)
        assert path == "native", f"[{name}] not native: opaque {opaque}, fallbacks {fallbacks}"
        yield name, actual


def check(fn, *args, expected_dtype=None):
    eager = fn(*args)
    for name, actual in native_runs(fn, *args):
        T.compare(actual, eager, eager.dtype if isinstance(eager, torch.Tensor) else None, "forward")
        if expected_dtype is not None:
            assert actual.dtype == eager.dtype == expected_dtype, (name, actual.dtype, eager.dtype)


def test_float32_divided_by_zero_dim_float64_stays_float32():
    check(lambda a, b: a / b, torch.randn(3, 4), torch.tensor(2.0, dtype=torch.float64), expected_dtype=torch.float32)


def test_full_with_a_bool_fill_is_bool():
    check(lambda x: torch.full((1,), False) | (x > 0), torch.randn(1), expected_dtype=torch.bool)
    check(lambda x: torch.full((1,), False), torch.randn(1), expected_dtype=torch.bool)


@pytest.mark.parametrize("dtype", [torch.int32, torch.bool, torch.int64, torch.int16, torch.uint8])
def test_cumsum_of_integers_and_bools_is_int64(dtype):
    x = torch.randint(0, 2, (4, 5)).to(dtype)
    check(lambda x: torch.cumsum(x, 1), x, expected_dtype=torch.int64)
    check(lambda x: x.cumsum(dim=0), x, expected_dtype=torch.int64)


def test_cumsum_with_dtype_and_of_floats():
    check(lambda x: torch.cumsum(x, 0), torch.randn(5, dtype=torch.bfloat16), expected_dtype=torch.bfloat16)
    check(lambda x: torch.cumsum(x, 0, dtype=torch.float64), torch.randn(5), expected_dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_masked_fill_keeps_the_input_dtype(dtype):
    x = torch.randint(0, 2, (3, 4)).to(dtype)
    mask = torch.tensor([True, False, True, False])
    check(lambda x, m: x.masked_fill(m, 1), x, mask, expected_dtype=dtype)
    check(lambda x, m, v: torch.masked_fill(x, m, v), x, mask, torch.tensor(1), expected_dtype=dtype)


def test_masked_fill_with_a_float_value_keeps_an_integer_dtype():
    # torch casts the fill value to the input dtype (1.7 -> 1) rather than promoting.
    check(lambda x, m: x.masked_fill(m, 1.7), torch.arange(6).reshape(2, 3), torch.tensor([True, False, True]),
          expected_dtype=torch.int64)


def test_cat_of_bfloat16_and_float16_is_float32():
    check(lambda a, b: torch.cat([a, b]), torch.randn(2, 3, dtype=torch.bfloat16), torch.randn(1, 3, dtype=torch.float16),
          expected_dtype=torch.float32)


def test_cat_promotes_int_and_bool_and_float():
    check(lambda a, b, c: torch.cat([a, b, c]), torch.tensor([1, 2], dtype=torch.int32), torch.tensor([True]),
          torch.tensor([0.5], dtype=torch.float16), expected_dtype=torch.float16)


@pytest.mark.parametrize("fn, args, dtype", [
    # A Python number only raises the category: int tensor * float -> the default float dtype.
    (lambda x: x * 2.5, (torch.arange(4, dtype=torch.int32),), torch.float32),
    # ... and never the width within a category.
    (lambda x: x + 1, (torch.arange(4, dtype=torch.int16),), torch.int16),
    (lambda x: x * 2.5, (torch.ones(3, dtype=torch.float16),), torch.float16),
    # Zero-dim tensors rank below dimensioned ones within a category.
    (lambda a, b: a + b, (torch.arange(3, dtype=torch.int32), torch.tensor(7, dtype=torch.int64)), torch.int32),
    (lambda a, b: a + b, (torch.arange(3, dtype=torch.int32), torch.tensor(7.0, dtype=torch.float64)), torch.float64),
    (lambda a, b: a + b, (torch.ones(3, dtype=torch.bfloat16), torch.tensor(7.0, dtype=torch.float64)), torch.bfloat16),
    # True division of integers gives the default float dtype; comparisons give bool.
    (lambda a, b: a / b, (torch.arange(1, 4), torch.arange(1, 4)), torch.float32),
    (lambda a, b: a < b, (torch.arange(3), torch.ones(3, dtype=torch.float64)), torch.bool),
    (lambda a: torch.sum(a), (torch.ones(3, dtype=torch.int32),), torch.int64),
    (lambda a: torch.sum(a), (torch.ones(3, dtype=torch.bool),), torch.int64),
    (lambda a: torch.prod(a, 0), (torch.ones(3, dtype=torch.int8),), torch.int64),
    (lambda a: torch.mean(a), (torch.ones(3, dtype=torch.bfloat16),), torch.bfloat16),
    (lambda a: torch.exp(a), (torch.arange(3),), torch.float32),
    (lambda a: torch.abs(a), (torch.arange(-3, 3, dtype=torch.int8),), torch.int8),
    (lambda a, b: torch.where(a > 1, a, b), (torch.arange(3), torch.ones(3, dtype=torch.float16)), torch.float16),
    (lambda a: torch.where(a > 1, a, 0.5), (torch.arange(3),), torch.float32),
    (lambda a, b: a + b, (torch.ones(2, dtype=torch.uint8), torch.ones(2, dtype=torch.int8)), torch.int16),
    (lambda a, b: a & b, (torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.int32)), torch.int32),
    (lambda a: torch.argmax(a, 0), (torch.randn(3, 2),), torch.int64),
    (lambda a: torch.var(a, 0), (torch.randn(3, 2, dtype=torch.float64),), torch.float64),
    (lambda a: torch.softmax(a, 0, dtype=torch.float64), (torch.randn(3, 2),), torch.float64),
    (lambda a: torch.zeros_like(a, dtype=torch.int32), (torch.randn(3),), torch.int32),
    (lambda a: torch.arange(5) + a, (torch.ones(5),), torch.float32),
    (lambda a: torch.arange(0.0, 1.0, 0.25) * a, (torch.ones(4, dtype=torch.float64),), torch.float64),
    (lambda a: torch.pow(a, 2), (torch.arange(3, dtype=torch.int32),), torch.int32),
    (lambda a: torch.pow(a, 0.5), (torch.arange(3, dtype=torch.int32),), torch.float32),
    (lambda a, b: torch.copysign(a, b), (torch.arange(3), torch.tensor([1, -1, 1])), torch.float32),
    (lambda a, b: torch.floor_divide(a, b), (torch.arange(3, dtype=torch.int32), torch.tensor(2)), torch.int32),
    (lambda a: torch.square(a), (torch.tensor([True, False]),), torch.int64),
    (lambda a, b: torch.maximum(a, b), (torch.arange(3, dtype=torch.int32), torch.ones(3, dtype=torch.float16)),
     torch.float16),
    # A Python number against a 0-dim tensor: the tensor's dtype wins (also where a prim runs on torch
    # functions that take no number, and the number becomes a tensor).
    (lambda a: torch.relu(a), (torch.tensor(-3, dtype=torch.int32),), torch.int32),
    (lambda a: torch.nn.functional.relu6(a), (torch.tensor(7.5, dtype=torch.float16),), torch.float16),
    (lambda a: torch.clamp(a, 0.25, 2), (torch.tensor(3.0, dtype=torch.bfloat16),), torch.bfloat16),
    # Integer reductions with an explicit dtype keep it; a bool max over a dim.
    (lambda a: torch.prod(a, 1, dtype=torch.int32), (torch.ones(3, 4, dtype=torch.int32),), torch.int32),
    (lambda a: torch.sum(a, 1, dtype=torch.int16), (torch.ones(3, 4, dtype=torch.int16),), torch.int16),
    (lambda a: torch.max(a, 1).values, (torch.tensor([[True, False], [False, False]]),), torch.bool),
    # An integer arange truncates its bounds and step before counting.
    (lambda a: torch.arange(0.0, -8.000001, -4.0, dtype=torch.int64) + a, (torch.tensor(1),), torch.int64),
])
def test_promotion_matches_torch(fn, args, dtype):
    check(fn, *args, expected_dtype=dtype)


#: Every binary elementwise op, with a 0-dim operand: ATen reads the second operand of mul and the divisions as a
#: float32 scalar when the result is half precision (x * s == x * s.item()); the others round it to the result
#: dtype first. Either way thunder must give eager's bits.
_BINARY_OPS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "true_divide": torch.true_divide,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"), "floor_divide": torch.floor_divide,
    "remainder": torch.remainder, "fmod": torch.fmod, "pow": torch.pow, "atan2": torch.atan2,
    "maximum": torch.maximum, "minimum": torch.minimum, "copysign": torch.copysign,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2), "where": lambda a, b: torch.where(a > 0, a, b),
    "hypot": torch.hypot, "logaddexp": torch.logaddexp, "logaddexp2": torch.logaddexp2, "xlogy": torch.xlogy,
    "fmax": torch.fmax, "fmin": torch.fmin,
}


def _every_binary_op(a, b):
    return tuple(op(a, b) for op in _BINARY_OPS.values())


def check_bits(fn, names, *args):
    """fn's outputs (a tuple, one per name in `names`) through every executor set: native, and eager's bits."""
    expected = fn(*args)
    for name, actual in native_runs(fn, *args):
        for op, a, e in zip(names, actual, expected):
            assert a.dtype == e.dtype, (name, op, a.dtype, e.dtype)
            torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"[{name}] {op}: {m}")


@pytest.mark.parametrize("scalar_first", [False, True], ids=["tensor_op_scalar", "scalar_op_tensor"])
@pytest.mark.parametrize("scalar_dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_tensor_with_a_wider_zero_dim_operand_matches_eager_bits(dtype, scalar_dtype, scalar_first):
    torch.manual_seed(0)
    x = (torch.randn(1024) * 3).to(dtype)
    s = torch.tensor(257 if scalar_dtype == torch.int64 else 2.3456, dtype=scalar_dtype)
    check_bits(_every_binary_op, list(_BINARY_OPS), *((s, x) if scalar_first else (x, s)))


@pytest.mark.parametrize("fn", [lambda x, y: torch.add(x, y, alpha=3), lambda x, y: torch.sub(x, y, alpha=127),
                                lambda x, y: torch.rsub(y, x, alpha=5), lambda x, y: x.clone().add_(y, alpha=-7)],
                         ids=["add", "sub", "rsub", "add_"])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.bfloat16), (torch.int64, torch.int8),
                                    (torch.int32, torch.uint8), (torch.float64, torch.float16)],
                         ids=lambda d: f"{d[0]}-{d[1]}".replace("torch.", ""))
def test_alpha_times_a_narrower_other_is_computed_in_the_result_dtype(fn, dtypes):
    """alpha * other was computed in other's dtype (an int8 other times 3 wrapped, a bfloat16 one rounded);
    ATen converts other to the result dtype first."""
    torch.manual_seed(0)
    x = (torch.randn(64) * 50).to(dtypes[0])
    y = (torch.randn(64) * 50).to(dtypes[1]) if dtypes[1].is_floating_point else \
        torch.randint(0, 100, (64,), dtype=dtypes[1])
    check_bits(lambda x, y: (fn(x, y),), ["op"], x, y)


def test_half_tensor_times_zero_dim_then_softmax_matches_eager():
    torch.manual_seed(0)
    x, s = torch.randn(8, 128, dtype=torch.bfloat16), torch.tensor(2.3456)
    fn = lambda x, s: torch.softmax(x / s, -1)  # noqa: E731
    torch.testing.assert_close(thunder.jit(fn)(x, s), fn(x, s), rtol=0, atol=0)


#: Ops with a Python number on half-precision tensors. ATen rounds the number to the tensor's dtype first except in
#: mul and the divisions (read unrounded in float32), computes one op's kernel in float32 and rounds once; a number
#: on the left of `/` is Tensor.__rtruediv__ (reciprocal, then mul). Each must give eager's bits. (Sizes are
#: multiples of 64: ATen's vectorized loops and the scalar loop for a remainder round add with alpha differently.)
_NUMBER_OPS = {
    "add": lambda x, c: x + c, "sub": lambda x, c: x - c, "rsub": lambda x, c: c - x, "mul": lambda x, c: x * c,
    "div": lambda x, c: x / c, "rdiv": lambda x, c: c / x, "floordiv": lambda x, c: x // c, "mod": lambda x, c: x % c,
    "rmod": lambda x, c: c % x, "pow": lambda x, c: x ** c, "rpow": lambda x, c: c ** x.abs(),
    "fmod": lambda x, c: torch.fmod(x, c), "lt": lambda x, c: x < c, "ge": lambda x, c: x >= c,
    "clamp": lambda x, c: torch.clamp(x, min=-c, max=c), "where": lambda x, c: torch.where(x > 0, x, c),
    "add_alpha": lambda x, c: torch.add(x, x.flip(0), alpha=c), "sub_alpha": lambda x, c: torch.sub(x, x.flip(0), alpha=c),
    "add_number_alpha": lambda x, c: torch.add(x, c, alpha=3),
    "sub_number_alpha": lambda x, c: torch.sub(x, c, alpha=-2),
    "rsub_number_alpha": lambda x, c: torch.rsub(x, c, alpha=2),
    "add_number_alpha_": lambda x, c: x.clone().add_(c, alpha=2),
    "div_trunc": lambda x, c: torch.div(x, c, rounding_mode="trunc"),
    "div_floor": lambda x, c: torch.div(x, c, rounding_mode="floor"),
    "elu": lambda x, c: F.elu(x, abs(c)), "celu": lambda x, c: F.celu(x, abs(c)), "selu": lambda x, c: F.selu(x * c),
    "threshold": lambda x, c: F.threshold(x, c, -c), "leaky_relu": lambda x, c: F.leaky_relu(x, abs(c) / 10),
    "hypot": lambda x, c: torch.hypot(x, torch.full((), c)),
    "logaddexp": lambda x, c: torch.logaddexp(x, torch.full((), c)),
    "lerp": lambda x, c: torch.lerp(x, x.flip(0), c / 10),
    "softshrink": lambda x, c: F.softshrink(x, abs(c)), "hardshrink": lambda x, c: F.hardshrink(x, abs(c)),
}


@pytest.mark.parametrize("number", [2.3456, 0.1, 257.0])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_tensor_with_a_python_number_matches_eager_bits(dtype, number):
    torch.manual_seed(0)
    near = torch.tensor([number]).to(dtype)  # the number's neighbours in dtype, where rounding it first matters
    x = torch.cat([(torch.randn(509) * 4).to(dtype), near, near.nextafter(near + 1), near.nextafter(near - 1)])

    check_bits(lambda x: tuple(op(x, number) for op in _NUMBER_OPS.values()), list(_NUMBER_OPS), x)


@pytest.mark.parametrize("shape", [(), (1,), (512,)], ids=["zero_dim", "one_element", "full"])
def test_trunc_division_of_half_tensors_matches_eager_bits(shape):
    # ATen divides by a one-element divisor in float32 before truncating, by any other tensor in bfloat16.
    torch.manual_seed(0)
    x, y = (torch.randn(512) * 4).bfloat16(), torch.full(shape, 0.1).bfloat16()
    check_bits(lambda x, y: (torch.div(x, y, rounding_mode="trunc"),), ["div_trunc"], x, y)


@pytest.mark.parametrize("value", [0.5, 2.5, -1.75, 3.0])
def test_addcmul_over_integers_truncates_a_float_value_as_eager(value):
    # ATen converts the value to the integer dtype first: 0.5 scales the product by 0, 2.5 by 2.
    x = torch.arange(-4, 5, dtype=torch.int32)
    check(lambda x: torch.addcmul(x, x, x + 1, value=value), x)


@pytest.mark.parametrize("x_dtype,e_dtype", [(torch.float32, torch.float16), (torch.float64, torch.int32),
                                             (torch.bfloat16, torch.float32), (torch.int64, torch.float16)])
def test_ldexp_computes_the_power_as_eager(x_dtype, e_dtype):
    # ATen's ldexp is input * pow(2.0, other), the power in a floating other's dtype: 2**16 is inf in float16 (thunder
    # computed it in the result's float32: 65536), an integer exponent's in the result's dtype (2**130 in float64).
    x = torch.tensor([1.0, -3.0, 0.5, 2.0]).to(x_dtype)
    e = torch.tensor([16, 6, -3, 130]).to(e_dtype)
    check(lambda x, e: torch.ldexp(x, e), x, e)
