"""Errors: a jitted callable raises what eager raises (same exception type),
and names the argument it cannot handle."""
import dataclasses
import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder


def eager_and_jitted_errors(fn, *args, **kwargs):
    """(eager exception, jitted exception); fails if either call succeeds."""
    errors = []
    for f in (fn, thunder.jit(fn)):
        with pytest.raises(Exception) as info:
            f(*args, **kwargs)
        errors.append(info.value)
    return errors


def add(x, y):
    return x + y


@pytest.mark.parametrize("args,kwargs", [
    ((torch.ones(2),), {}),
    ((torch.ones(2), torch.ones(2), torch.ones(2)), {}),
    ((torch.ones(2),), {"z": torch.ones(2)}),
    ((torch.ones(2), torch.ones(2)), {"y": torch.ones(2)}),
], ids=["too_few", "too_many", "unknown_keyword", "twice"])
def test_wrong_number_of_arguments_raises_type_error(args, kwargs):
    eager, jitted = eager_and_jitted_errors(add, *args, **kwargs)
    assert type(eager) is TypeError and type(jitted) is TypeError
    assert str(jitted) == str(eager)


def test_module_called_with_wrong_arguments():
    model = nn.Linear(2, 2)
    eager, jitted = eager_and_jitted_errors(model)
    assert type(jitted) is type(eager) is TypeError


@pytest.mark.parametrize("fn", [
    lambda x, y: x + y,
    lambda x, y: torch.sin(y) * x,
    lambda x, y: F.softmax(y, -1) + x,
    lambda x, y: x @ y,
], ids=["operator", "torch_function", "functional", "matmul"])
def test_object_instead_of_tensor(fn):
    eager, jitted = eager_and_jitted_errors(fn, torch.ones(2), object())
    assert type(jitted) is type(eager)
    text = str(jitted) + "\n".join(getattr(jitted, "__notes__", []))
    assert "'y'" in text, text


def test_object_argument_of_a_module():
    class M(nn.Module):
        def forward(self, x, scale):
            return x * scale

    eager, jitted = eager_and_jitted_errors(M(), torch.ones(2), object())
    assert type(jitted) is type(eager)
    assert any("'scale'" in n for n in getattr(jitted, "__notes__", [])), getattr(jitted, "__notes__", None)


@pytest.mark.parametrize("case", ["one_hot", "nll_loss", "cross_entropy", "gather", "embedding"])
def test_an_index_out_of_range_raises_eagers_exception(case):
    """The kernels' index checks raise an IndexError of thunder's; a graph that writes nothing runs again with
    torch when it raises, which raises eager's exception, type and message (one_hot's RuntimeError)."""
    fn, args = {
        "one_hot": (lambda i: F.one_hot(i, 4) * 2, (torch.tensor([1, 9]),)),
        "nll_loss": (lambda t, w: F.nll_loss(w, t), (torch.tensor([1, -5]), torch.randn(2, 4).log_softmax(-1))),
        "cross_entropy": (lambda x, t: F.cross_entropy(x * 2, t), (torch.randn(3, 4), torch.tensor([0, 4, 1]))),
        "gather": (lambda x, i: x.gather(1, i) + 1, (torch.randn(2, 3), torch.tensor([[0], [3]]))),
        "embedding": (lambda i, w: F.embedding(i, w) * 2, (torch.tensor([0, 7]), torch.randn(5, 2))),
    }[case]
    eager, jitted = eager_and_jitted_errors(fn, *args)
    assert (type(jitted), str(jitted).splitlines()[0]) == (type(eager), str(eager).splitlines()[0])


def test_an_input_written_before_an_index_out_of_range_is_written_as_in_eager():
    """thunder's copy-backs come at the end: the error left the input unwritten where eager had written it. The
    graph runs again with torch (its copy-back comes after the failing op, so nothing was written twice)."""
    def f(x, table, idx):
        x.add_(1)
        return table[idx] + x.sum()

    table, jitted = torch.randn(5, 3), thunder.jit(f)
    jitted(torch.zeros(3), table, torch.tensor([1]))
    xs = [torch.zeros(3), torch.zeros(3)]
    errors = []
    for fn, x in zip((f, jitted), xs):
        with pytest.raises(Exception) as info:
            fn(x, table, torch.tensor([9]))
        errors.append(info.value)
    assert type(errors[1]) is type(errors[0]) and str(errors[1]) == str(errors[0])
    assert torch.equal(xs[1], xs[0])


_CALLS = []


@torch.library.custom_op("thunder_test_errors::logged", mutates_args=())
def _logged(x: torch.Tensor) -> torch.Tensor:
    _CALLS.append("logged")
    return x.clone()


@_logged.register_fake
def _(x):
    return torch.empty_like(x)


def test_a_graph_calling_a_custom_op_is_not_run_again_when_it_raises():
    """Run again with torch, the graph called the custom op twice where eager calls it once (a counter, a log)."""
    def f(x, idx):
        return _logged(x * 2)[idx] + 1

    jitted = thunder.jit(f)
    jitted(torch.ones(3), torch.tensor([1]))
    _CALLS.clear()
    with pytest.raises(IndexError):
        jitted(torch.ones(3), torch.tensor([9]))
    assert _CALLS == ["logged"]


def test_notes_do_not_name_good_arguments():
    eager, jitted = eager_and_jitted_errors(add, torch.ones(2), object())
    notes = getattr(jitted, "__notes__", [])
    assert not any("'x'" in n for n in notes)


def test_notes_do_not_name_a_dataclass_of_tensors():
    @dataclasses.dataclass
    class Pair:
        a: torch.Tensor
        b: torch.Tensor

    def fn(pair):
        return pair.a + pair.b

    eager, jitted = eager_and_jitted_errors(fn, Pair(torch.ones(2), torch.ones(3)))
    assert type(jitted) is type(eager)
    assert not any("'pair'" in n for n in getattr(jitted, "__notes__", [])), jitted.__notes__


@pytest.mark.parametrize("fn", [
    lambda x: F.softmax(x, dim=5),
    lambda x: F.log_softmax(x, -3),
    lambda x: x.sum(7),
    lambda x: x.mean(dim=(0, 4)),
    lambda x: x.amax(-9),
    lambda x: x.transpose(0, 3),
    lambda x: x.unsqueeze(4),
    lambda x: torch.cat([x, x], 2),
    lambda x: x.flatten(3),
    lambda x: x.argmax(2),
], ids=["softmax", "log_softmax", "sum", "mean", "amax", "transpose", "unsqueeze", "cat", "flatten", "argmax"])
def test_dim_out_of_range_raises_like_eager(fn):
    eager, jitted = eager_and_jitted_errors(fn, torch.ones(2, 3))
    assert type(eager) is IndexError
    assert type(jitted) is type(eager), f"{type(jitted).__name__}: {jitted}"


@pytest.mark.parametrize("fn,args", [
    (lambda x, y: x + y, (torch.ones(2), torch.ones(3))),
    (lambda x, y: x @ y, (torch.ones(2, 3), torch.ones(2, 3))),
    (lambda x: x.view(5), (torch.ones(2, 3),)),
    (lambda x: x.reshape(4, -1), (torch.ones(2, 3),)),
    (lambda x: x[5], (torch.ones(2, 3),)),
    (lambda x: x.expand(3, 3), (torch.ones(2, 3),)),
    (lambda x, t: F.cross_entropy(x, t), (torch.ones(2, 3), torch.ones(3, dtype=torch.int64))),
    (lambda x: F.gelu(x, approximate="fast"), (torch.ones(2),)),
    (lambda x: torch.ones(2) & x, (torch.ones(2),)),
    (lambda x: torch.stack([x, x[:1]]), (torch.ones(2),)),
    (lambda x: x.split([1, 5], 0), (torch.ones(2),)),
    (lambda x, b: x - b, (torch.ones(2), torch.tensor([True, False]))),
    (lambda x: x - True, (torch.ones(2),)),
    (lambda x: True - x, (torch.ones(2),)),
    (lambda x: torch.rsub(x, True), (torch.ones(2),)),
    (lambda x: x.add(x, alpha=True) * 2, (torch.ones(2),)),
    (lambda x: x.sub(x, alpha=0.5) * 2, (torch.ones(2, dtype=torch.int32),)),
    (lambda x: x.clamp(min=True) & x, (torch.ones(2, dtype=torch.bool),)),
    (lambda x: F.smooth_l1_loss(x, x.flip(0), beta=-0.25), (torch.ones(2),)),
], ids=["broadcast", "matmul_shapes", "view_numel", "reshape_numel", "index", "expand", "cross_entropy_shape",
        "gelu_mode", "bitwise_float", "stack_shapes", "split_sizes", "sub_bool_tensor", "sub_bool_number",
        "bool_number_sub", "rsub_bool", "add_bool_alpha", "sub_float_alpha_int", "clamp_bool",
        "smooth_l1_negative_beta"])
def test_invalid_op_arguments_raise_like_eager(fn, args):
    eager, jitted = eager_and_jitted_errors(fn, *args)
    assert type(jitted) is type(eager), f"eager {type(eager).__name__}: {eager}\njitted {type(jitted).__name__}: {jitted}"


def test_runtime_error_inside_a_compiled_graph_raises_like_eager():
    def fn(idx, w):
        return F.embedding(idx, w) * 2

    w = torch.randn(4, 3)
    jitted = thunder.jit(fn)
    jitted(torch.tensor([0, 1]), w)  # compiles
    with pytest.raises(IndexError):
        fn(torch.tensor([0, 9]), w)
    with pytest.raises(IndexError):
        jitted(torch.tensor([0, 9]), w)
    # The jitted function still works afterwards.
    assert torch.equal(jitted(torch.tensor([3]), w), fn(torch.tensor([3]), w))


def test_jit_of_a_non_callable():
    with pytest.raises(TypeError):
        thunder.jit(3)


def test_shape_error_message_is_eagers_and_compilation_continues():
    def fn(x, y):
        return (x * 2) + y

    jitted = thunder.jit(fn)
    bad = (torch.ones(2), torch.ones(3))
    with pytest.raises(RuntimeError) as eager:
        fn(*bad)
    with pytest.raises(RuntimeError) as jit_error:
        jitted(*bad)
    assert type(jit_error.value) is RuntimeError and str(jit_error.value) == str(eager.value)
    # A failed call does not stop later calls from compiling.
    good = (torch.ones(2), torch.ones(2))
    assert torch.equal(jitted(*good), fn(*good))
    assert thunder.compile_stats(jitted).graphs and all(g["compiled"] for g in thunder.compile_stats(jitted).graphs)



class _Shift(nn.Module):
    def forward(self, x):
        return ((x > 0) << 1) + x  # eager shifts a bool tensor; Dynamo's fake tensors refuse


@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "hooked"])
def test_a_module_whose_trace_fails_behaves_as_eager_with_hooks_too(hooked):
    """A module's forward whose trace fails on fake tensors runs eagerly (eager runs it) or raises eager's error
    (a wrong shape). With a hook on the module -- which ran before forward, so thunder cannot call the module
    again -- Dynamo's TorchRuntimeError reached the user in both cases; Dynamo now runs such a forward eagerly
    and compiles on."""
    shift, mlp = _Shift(), nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    calls = []
    if hooked:
        for m in (shift, mlp):
            m.register_forward_pre_hook(lambda module, args: calls.append(1))
    x = torch.randn(4)
    assert torch.equal(thunder.jit(shift)(x), _Shift()(x))
    jitted = thunder.jit(mlp)
    jitted(torch.randn(3, 8))
    eager, got = [], []
    for fn, errors in ((mlp, eager), (jitted, got)):
        with pytest.raises(Exception) as info:
            fn(torch.randn(3, 5))
        errors.append((type(info.value), str(info.value)))
    assert got == eager
    torch.testing.assert_close(jitted(x := torch.randn(2, 8)), mlp(x))
    assert thunder.compile_stats(jitted).eager_calls == 0
    assert len(calls) == (6 if hooked else 0)  # each call's hooks ran once: shift's 1, mlp's 3 + eager's 2


def _checked_sin(x):
    if x.shape[0] > 4:
        raise ValueError("too long")
    return x.sin() * 2


def _checked_cos_after_a_break(x):
    y = x.cos()
    print("", end="")  # a graph break: the raise is in the frame Dynamo resumes
    if x.shape[0] > 4:
        raise ValueError("too long")
    return y * 2


class _CheckedModule(nn.Module):
    def forward(self, x):
        return _checked_sin(x)


def _checked_sin_plus_one(x):
    return _checked_sin(x) + 1


def _hooked_checked_module():
    module = _CheckedModule()
    module.register_forward_pre_hook(lambda m, args: None)  # the call does more than forward: its hooks run first
    return module


@pytest.mark.parametrize("fn,options", [
    (_checked_sin, {}), (_checked_sin, {"fullgraph": True}), (_checked_sin_plus_one, {}),
    (_checked_cos_after_a_break, {}), (_CheckedModule(), {}), (_hooked_checked_module(), {}),
    (_checked_sin, {"dynamic": False}), (_checked_sin, {"dynamic": True})],
    ids=["function", "fullgraph", "called", "after_a_break", "module", "module_with_hooks", "static", "dynamic"])
def test_a_call_that_raises_its_own_error_does_not_stop_later_calls_from_compiling(fn, options):
    """Dynamo, tracing a frame whose code raises (an input check), runs the frame eagerly and skips its code from
    then on: every later call of the function ran uncompiled, even at shapes compiled before (torch.compile does
    the same), and nothing said so. The raise is eager's, and later calls compile."""
    jitted = thunder.jit(fn, **options)
    jitted(torch.randn(3))
    with pytest.raises(ValueError, match="too long"):
        jitted(torch.randn(5))
    for n in (3, 2, 4):
        x = torch.randn(n)
        torch.testing.assert_close(jitted(x), fn(x))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 0 and not stats.dynamo_stopped and "1 calls raised" in str(jitted), str(jitted)


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt, SystemExit])
def test_a_call_that_raises_keyboard_interrupt_is_counted_as_raised(error):
    """KeyboardInterrupt and SystemExit are not Exceptions: a call raising one was counted as a call, but as none
    of hit, miss or raised, so ``print(jitted)`` did not add up."""
    def f(x, raising):
        y = x.exp()
        if raising:
            raise error
        return y + 1

    jitted = thunder.jit(f)
    jitted(torch.randn(3), False)
    for _ in range(2):
        with pytest.raises(error):
            jitted(torch.randn(3), True)
    stats = thunder.compile_stats(jitted)
    assert stats.calls == 3 and jitted._thunder_state.raised_calls == 2, str(jitted)
    assert "2 calls raised" in str(jitted), str(jitted)


def test_a_float_argument_that_makes_a_size_raise_leaves_later_calls_compiled():
    """round(inf) raises while Dynamo checks a guard and traces (OverflowError, as in eager); the calls after it,
    at numbers seen before, ran uncompiled, with no word of why."""
    def f(x, a):
        return x[:, : round(abs(a))] + 1

    jitted = thunder.jit(f)
    for a in (2.5, 3.7, 1.2):
        jitted(torch.randn(2, 8), a)
    with pytest.raises(OverflowError):
        jitted(torch.randn(2, 8), float("inf"))
    for a in (2.5, 3.7, 1.2, 1.6):
        x = torch.randn(2, 8)
        torch.testing.assert_close(jitted(x, a), f(x, a))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 0 and "1 calls raised" in str(jitted), str(jitted)

def test_error_after_a_graph_break_is_still_a_runtime_error():
    calls = []

    def fn(x, y):
        calls.append(1)  # a side effect before the break: must happen once per call
        if x.sum() > 0:
            return x + y
        return x

    jitted = thunder.jit(fn)
    with pytest.raises(RuntimeError):
        jitted(torch.ones(2), torch.ones(3))
    assert len(calls) == 1


# ---- issue #10 item 11: what the core cannot hold or compute is declined with a reason, never a cryptic warning ----

class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def thunder_warnings(monkeypatch):
    """The WARNINGs thunder logs during the test (with the once-per-cause memory emptied), and a fresh kernel cache."""
    import tempfile

    import thunder.frontend.dynamo as _dynamo

    monkeypatch.setattr(_dynamo, "_warned_causes", set())
    monkeypatch.setenv("THUNDER_CACHE_DIR", tempfile.mkdtemp(prefix="thunder-test-errors-"))
    handler = _Warnings()
    thunder.core.log.logger.addHandler(handler)
    yield handler.messages
    thunder.core.log.logger.removeHandler(handler)


def _fallback_reasons(jitted):
    return [reason for g in jitted._thunder_state.graphs for _, _, reason in getattr(g, "fallbacks", [])]


@pytest.mark.parametrize("fn,x", [
    (lambda x: x + 2**63, torch.ones(3, dtype=torch.int32)),
    (lambda x: (x + 2**63) * 2, torch.ones(3)),
    (lambda x: x.double() * 2**63, torch.ones(3)),
    (lambda x: x - 2**63 - 5, torch.ones(3, dtype=torch.int32)),
    (lambda x: (x == 2**63) | (x > 0), torch.ones(3)),
    (lambda x: x.clamp(max=2**63) + 1, torch.ones(3)),
], ids=["int32_plus_2**63", "float_plus_2**63", "double_times_2**63", "below_int64_min", "eq_2**63", "clamp_2**63"])
def test_python_int_outside_int64_makes_the_op_opaque(fn, x, thunder_warnings):
    expected = fn(x)
    jitted = thunder.jit(fn)
    actual = jitted(x)
    assert actual.dtype == expected.dtype and torch.equal(actual, expected)
    assert not thunder_warnings, thunder_warnings
    assert [g["compiled"] for g in thunder.compile_stats(jitted).graphs] == [True]
    reasons = _fallback_reasons(jitted)
    assert any("outside int64's range" in r for r in reasons), reasons


@pytest.mark.parametrize("fn,x", [
    (lambda x: x * 2**64, torch.ones(3)),
    (lambda x: torch.full_like(x, 2**70, dtype=torch.float64), torch.ones(3)),
    (lambda x: x.byte() + 2**64, torch.ones(3)),
], ids=["float_times_2**64", "full_like_2**70", "uint8_plus_2**64"])
def test_python_int_too_large_for_torch_raises_eagers_error(fn, x, thunder_warnings):
    eager, jitted = eager_and_jitted_errors(fn, x)
    assert type(jitted) is type(eager) and str(jitted) == str(eager)
    assert not thunder_warnings, thunder_warnings


def test_python_int_outside_int64_in_the_bindings():
    b = thunder._core.TraceBuilder()
    t = b.add_input_tensor(thunder._core.DType.int64, [3], "cpu", False)
    with pytest.raises(thunder._core.NotNative, match=r"ltorch.add: the Python int 9223372036854775808 is outside"):
        b.call("ltorch", "add", [t, 2**63], {})
    with pytest.raises(thunder._core.NotNative, match="outside int64's range"):
        b.call("ltorch", "reshape", [t, [2**64]], {})
    out = b.new_tensor(thunder._core.DType.int64, [3], "cpu", False)
    b.opaque("torch.add", [t, -2**70], {}, out, False)  # an opaque op keeps it as the literal that recreates it
    assert "torch.add(t0, -1180591620717411303424)" in str(b.finish(out))


@pytest.mark.parametrize("fn,dtype", [
    (lambda a: (a & a) + 1, torch.float32),
    (lambda a: torch.bitwise_or(a, a) * 2, torch.float16),
    (lambda a: torch.bitwise_xor(a, a), torch.bfloat16),
    (lambda a: torch.bitwise_not(a) * 2, torch.float64),
    (lambda a: (a.long() & 1.5) + 1, torch.float32),
    (lambda a: torch.bitwise_left_shift(a, a), torch.bool),
    (lambda a: torch.bitwise_right_shift(a, 1) + 1, torch.float32),
    (lambda a: a.abs() & a, torch.bool),
    (lambda a: a.floor(), torch.bool),
], ids=["and_float32", "or_float16", "xor_bfloat16", "not_float64", "and_int_float_number", "shift_bool",
        "shift_float", "abs_bool", "floor_bool"])
def test_op_on_an_unsupported_dtype_raises_eagers_error_without_compiling_anything(fn, dtype, thunder_warnings):
    import os

    x = torch.tensor([1, 0, 3, 2]).to(dtype)
    eager, jitted_error = eager_and_jitted_errors(fn, x)
    assert type(jitted_error) is type(eager) and str(jitted_error) == str(eager)
    assert not thunder_warnings, thunder_warnings  # no compiler error, no fallback of the graph
    left = [f for f in os.listdir(os.environ["THUNDER_CACHE_DIR"]) if f.endswith(".cc")]
    assert not left, left  # no rejected source left in the cache


def test_bitwise_dtype_rule_names_the_op_and_the_argument():
    jitted = thunder.jit(lambda a, b: a & b)
    with pytest.raises(NotImplementedError):
        jitted(torch.ones(2, dtype=torch.int64), torch.ones(2))
    reasons = _fallback_reasons(jitted)
    assert any("ltorch.bitwise_and" in r and "argument 'other' is a float32 tensor" in r and "integer or bool" in r
               for r in reasons), reasons
    b = thunder._core.TraceBuilder()
    t = b.add_input_tensor(thunder._core.DType.float32, [2], "cpu", False)
    with pytest.raises(thunder._core.OpError, match=r"prims.bitwise_and: expected argument 'a' to be an integer or bool"):
        b.call("prims", "bitwise_and", [t, t], {})
    with pytest.raises(thunder._core.OpError, match=r"ltorch.bitwise_left_shift: .*expected integer operands"):
        b.call("ltorch", "bitwise_left_shift", [t, 1], {})


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int32, torch.int64])
def test_bitwise_ops_on_integers_still_fuse(dtype):
    fn = lambda a: ((a & a) | (a ^ ~a)) == a  # noqa: E731
    x = torch.tensor([1, 0, 3, 2]).to(dtype)
    jitted = thunder.jit(fn)
    assert torch.equal(jitted(x), fn(x))
    assert not _fallback_reasons(jitted)
    assert any(b.executor == "cpu" for b in thunder.last_traces(jitted)[-1].symbols)


_h, _bf, _f32 = torch.float16, torch.bfloat16, torch.float32
_i8, _u8, _i32 = torch.int8, torch.uint8, torch.int32


def _ones(dtype):
    return torch.ones(3, dtype=dtype)


# Where an ATen kernel converts a number argument to a dtype with c10's checked conversion, a number beyond that
# dtype's range raises "value cannot be converted to type ... without overflow" in eager. Which dtype is the
# kernel's: the result dtype, or float32 for a half-precision kernel that computes in float32 (found in eager).
@pytest.mark.parametrize("fn,dtype", [
    (lambda x: x.clamp(max=70000.0), _h),
    (lambda x: x.clamp(min=-70000), _h),
    (lambda x: x.clamp(max=65505.0), _h),
    (lambda x: torch.clamp_max(x, 1e39), _bf),
    (lambda x: x.clamp(-1e300, 1e300), _f32),
    (lambda x: x.clamp(max=300), _i8),
    (lambda x: x.clamp(min=-300), _u8),
    (lambda x: x.masked_fill(x > 0, 70000.0), _h),
    (lambda x: x.masked_fill(x > 0, 127.5), _i8),
    (lambda x: x.masked_fill(x > 0, 3e9), _i32),
    (lambda x: x.masked_fill(x > 0, float("nan")), _i32),
    (lambda x: torch.add(x, x, alpha=70000), _h),
    (lambda x: torch.sub(x, x, alpha=1e300), _f32),
    (lambda x: torch.rsub(x, x, alpha=300), _i8),
    (lambda x: x.pow(70000.0), _h),
    (lambda x: x.pow(300), _u8),
    (lambda x: F.threshold(x, 1e300, 0.0), _f32),
    (lambda x: F.threshold(x, 0.0, 70000.0), _h),
    (lambda x: F.threshold(x, 127.5, 0), _i8),
    (lambda x: F.hardtanh(x, -70000.0, 70000.0), _h),
    (lambda x: F.hardtanh(x, -1e300, 1e300), _i32),
    (lambda x: x.index_fill(0, torch.tensor([0]), 300), _i8),
    (lambda x: torch.addcmul(x, x, x, value=1e39), _bf),
    (lambda x: torch.lerp(x, x, 1e300), _f32),
    (lambda x: torch.where(x > 0, x, 1e300), _f32),
    (lambda x: torch.where(x > 0, 300, x), _i8),
    (lambda x: F.leaky_relu(x, 1e39), _bf),
    (lambda x: F.elu(x, alpha=1e300), _f32),
    (lambda x: F.softplus(x, beta=1e300), _f32),
    (lambda x: F.hardshrink(x, 70000.0), _h),
    (lambda x: torch.logit(x, eps=70000.0), _h),
    (lambda x: torch.addmm(x.view(3, 1), x.view(3, 1), x[:1].view(1, 1), beta=1e300), _f32),
    (lambda x: torch.full((3,), 1e6, dtype=torch.half) + x, _h),
    (lambda x: torch.full_like(x, 300) + x, _i8),
    (lambda x: x.new_full((3,), 70000.0) + x, _h),
    (lambda x: (x * 1).fill_(1e6) + x, _h),
    (lambda x: torch.full((3,), 1e40) + x, _f32),
    (lambda x: torch.where(x > 0, 1e40, 0.0), _f32),
], ids=["clamp_max_half", "clamp_min_int_half", "clamp_past_65504", "clamp_max_bf16", "clamp_f32", "clamp_int8",
        "clamp_uint8", "masked_fill_half", "masked_fill_int8_float", "masked_fill_int32", "masked_fill_nan_int",
        "add_alpha", "sub_alpha", "rsub_alpha", "pow_half", "pow_uint8", "threshold", "threshold_value",
        "threshold_int8", "hardtanh_half", "hardtanh_int", "index_fill", "addcmul_bf16", "lerp", "where_other",
        "where_input", "leaky_relu", "elu", "softplus", "hardshrink", "logit", "addmm_beta", "full_fused",
        "full_like_int8", "new_full", "fill_", "full_f32", "where_two_numbers"])
def test_a_number_beyond_the_dtype_raises_eagers_overflow_error(fn, dtype):
    eager, jitted = eager_and_jitted_errors(fn, _ones(dtype))
    assert "without overflow" in str(eager), eager  # the case is one eager refuses
    assert type(jitted) is type(eager) and str(jitted) == str(eager)


# What eager accepts at the same places: the largest finite value, infinities and NaN for a float dtype, an int
# that wraps into uint8, a half-precision kernel's float32 math, a bound a float promotes past, an int truncated first.
@pytest.mark.parametrize("fn,dtype", [
    (lambda x: x.clamp(max=65504.0) * 2, _h),
    (lambda x: x.clamp(min=float("-inf"), max=float("inf")) * 2, _h),
    (lambda x: x.clamp(max=300.0) * 2, _i8),
    (lambda x: x.masked_fill(x > 0, -1) + 1, _u8),
    (lambda x: x.masked_fill(x > 0, float("nan")) + 1, _h),
    (lambda x: torch.where(x > 0, x, 70000.0) * 2, _h),
    (lambda x: torch.addcmul(x, x, x, value=70000.0) * 2, _h),
    (lambda x: F.threshold(x, 70000.0, 0.0) * 2, _h),
    (lambda x: F.hardtanh(x, -127.5, 127.5) * 2, _i8),
    (lambda x: x.pow(1e300) * 2, _f32),
], ids=["clamp_65504", "clamp_inf", "clamp_int8_float", "masked_fill_uint8_wraps", "masked_fill_nan",
        "where_half", "addcmul_half", "threshold_half", "hardtanh_int8_truncates", "pow_f32"])
def test_a_number_the_dtype_holds_stays_native(fn, dtype):
    x = _ones(dtype)
    expected = fn(x)
    jitted = thunder.jit(fn)
    actual = jitted(x)
    assert actual.dtype == expected.dtype and torch.equal(actual.nan_to_num(), expected.nan_to_num())
    assert not _fallback_reasons(jitted), _fallback_reasons(jitted)


# masked_fill reads a 0-dim tensor value as a number and converts it with the same check, known only at run time:
# into an integer dtype prims.check_in_range checks it (the op stays native), into a floating one the op runs with
# torch; either raises (or not) as eager does. A value whose dtype always fits fuses unchecked.
@pytest.mark.parametrize("dtype,value,raises", [
    (_i8, torch.tensor(300), True),
    (_i8, torch.tensor(300.0), True),
    (_i32, torch.tensor(float("nan")), True),
    (_h, torch.tensor(1e6), True),
    (_i8, torch.tensor(-129), True),
    (_i8, torch.tensor(127), False),
    (_u8, torch.tensor(-1), False),
    (_i8, torch.tensor(1.5), False),
    (_h, torch.tensor(float("inf")), False),
], ids=["int8_300", "int8_300_float", "int32_nan", "half_1e6", "int8_minus_129", "int8_127", "uint8_wraps",
        "int8_truncates", "half_inf"])
@pytest.mark.parametrize("in_place", [False, True])
def test_masked_fill_checks_a_tensor_value_at_run_time(dtype, value, raises, in_place):
    def fn(x, v):
        y = x * 1
        return y.masked_fill_(y > 0, v) if in_place else y.masked_fill(y > 0, v)

    x = _ones(dtype)
    if raises:
        eager, jitted = eager_and_jitted_errors(fn, x, value)
        assert "without overflow" in str(eager), eager
        assert type(jitted) is type(eager) and str(jitted) == str(eager)
    else:
        expected = fn(x, value)
        jitted = thunder.jit(fn)
        actual = jitted(x, value)
        assert actual.dtype == expected.dtype and torch.equal(actual, expected)
        assert not _fallback_reasons(jitted) or dtype.is_floating_point, _fallback_reasons(jitted)


@pytest.mark.parametrize("dtype,value", [(_f32, torch.tensor(-1.0)), (_h, torch.tensor(2.0, dtype=_h)),
                                         (_f32, torch.tensor(3)), (_i32, torch.tensor(3, dtype=_i8))])
def test_masked_fill_with_a_tensor_value_that_always_fits_fuses(dtype, value):
    fn = lambda x, v: x.masked_fill(x > 0, v) * 2  # noqa: E731
    x = _ones(dtype)
    jitted = thunder.jit(fn)
    assert torch.equal(jitted(x, value), fn(x, value))
    assert not _fallback_reasons(jitted), _fallback_reasons(jitted)


@pytest.mark.parametrize("fn", [
    lambda x: x.masked_fill(x > 1, 2**63 - 1),
    lambda x: x.masked_fill(x > 1, 2**53 + 1) - 1,
    lambda x: F.threshold(x, 2, 2**53 + 1) * 1,
    lambda x: F.hardtanh(x * 2**52, -1, 2**53 + 1) + 0,
    lambda x: torch.addmm(x.view(3, 1), x.view(3, 1), x[:1].view(1, 1), beta=2**53 + 1),
], ids=["masked_fill_int64_max", "masked_fill_2**53+1", "threshold", "hardtanh", "addmm_beta"])
def test_an_int64_value_beyond_2_to_the_53_stays_exact(fn):
    # Not through a double, which rounds 2**53 + 1 and makes 2**63 - 1 into 2**63 (INT64_MIN once cast back).
    x = torch.tensor([1, 2, 3])
    jitted = thunder.jit(fn)
    assert torch.equal(jitted(x), fn(x))
    assert not _fallback_reasons(jitted), _fallback_reasons(jitted)


def test_the_overflow_is_the_reason_the_op_runs_opaque():
    jitted = thunder.jit(lambda x: x.clamp(max=70000.0) * 2)
    with pytest.raises(RuntimeError, match="without overflow"):
        jitted(_ones(_h))
    reasons = _fallback_reasons(jitted)
    assert any("ltorch.clamp: argument 'max' (70000) cannot be converted to float16 without overflow" in r
               for r in reasons), reasons


@pytest.mark.parametrize("executors", [None, ["torch"]], ids=["default", "torch"])
@pytest.mark.parametrize("target", [[1, 9], [1, -2], [1, 10**8]], ids=["beyond", "negative", "far"])
def test_an_nll_loss_target_out_of_range_raises(target, executors):
    """nll_loss ends in prims.take_along_axis; the torch executor ran it as torch.take_along_dim, which does not
    check its indices on the CPU: the loss read another class's value, silently. Eager raises IndexError; thunder
    raises too (torch.gather's RuntimeError, or the fused kernel's IndexError)."""
    x, t = torch.randn(2, 5), torch.tensor(target)
    for fn in (F.nll_loss, lambda x, t: F.nll_loss(x @ torch.eye(5), t)):
        with pytest.raises(IndexError):
            fn(x, t)
        with pytest.raises((IndexError, RuntimeError), match="out of (bounds|range)"):
            thunder.jit(fn, executors=executors)(x, t)
    torch.testing.assert_close(thunder.jit(F.nll_loss, executors=executors)(x, torch.tensor([1, -100])),
                               F.nll_loss(x, torch.tensor([1, -100])))


@pytest.mark.parametrize("op,message", [
    (lambda x: (x > 0) - 1, "Subtraction, the `-` operator, with a bool tensor is not supported"),
    (lambda x: x.long() ** -1, "Integers to negative integer powers are not allowed"),
], ids=["bool_minus_int", "int_to_negative_power"])
def test_an_op_torch_rejects_raises_even_where_its_result_is_unused(op, message):
    """`bool_tensor - 1` raises in eager wherever it stands; thunder's rules reject it too, and the op fell back to an
    opaque torch call that dead-code elimination then removed, so the call returned where eager raises; the rule of
    `int_tensor ** -1` did not reject it at all (found by a random-program fuzzer). An op whose arguments the rules
    reject is kept, and raises as eager does."""
    def fn(x):
        unused = op(x)  # noqa: F841
        return x * 2

    with pytest.raises(RuntimeError, match=message):
        fn(torch.randn(3))
    with pytest.raises(RuntimeError, match=message):
        thunder.jit(fn)(torch.randn(3))


@pytest.mark.parametrize("bad", [1.5, -0.25, float("nan")], ids=["above", "below", "nan"])
def test_binary_cross_entropy_of_an_input_outside_0_1_raises_like_eager(bad):
    """ATen's binary cross entropy checks its input lies in [0, 1]; thunder's decomposition computed NaN instead,
    silently. prims.check_in_range makes the checks of the input and the target (in the torch executor: the fused
    kernel starts after them), also once the graph is compiled, and the gradient is the eager one."""
    def fn(z, t):
        return F.binary_cross_entropy(torch.sigmoid(z) * 1.25, t)

    t = torch.tensor([1.0, 0.0, 1.0])
    good = torch.tensor([0.1, -2.0, 0.3], requires_grad=True)
    jitted = thunder.jit(fn)
    expected, actual = fn(good, t), jitted(good, t)
    torch.testing.assert_close(actual, expected)
    assert thunder.compile_stats(jitted).graphs[0]["backward"] == "thunder"
    (g_actual,) = torch.autograd.grad(actual, good)
    (g_expected,) = torch.autograd.grad(expected, good)
    torch.testing.assert_close(g_actual, g_expected)
    with torch.no_grad():
        p = torch.tensor([0.5, bad, 0.25])
        with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
            F.binary_cross_entropy(p, t)
        with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
            thunder.jit(F.binary_cross_entropy)(p, t)
        z = torch.tensor([8.0, 0.0, 0.0])  # sigmoid(8) * 1.25 > 1
        with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
            jitted(z, t)
        target = torch.tensor([1.0, bad, 0.0])
        for f in (F.binary_cross_entropy, thunder.jit(F.binary_cross_entropy)):
            with pytest.raises(RuntimeError, match="all elements of target should be between 0 and 1"):
                f(torch.full((3,), 0.5), target)


@pytest.mark.parametrize("loss", [F.cross_entropy, F.nll_loss], ids=["cross_entropy", "nll_loss"])
def test_a_class_target_of_another_integer_dtype_raises_as_in_eager(loss):
    """torch's nll_loss takes int64 (or uint8) class indices and raises for int32; a jitted loss raises eager's error
    too, where the decomposition had read the int32 indices as well. uint8 runs (in torch)."""
    x = torch.randn(3, 4).log_softmax(-1)
    eager, jitted = eager_and_jitted_errors(loss, x, torch.tensor([1, 2, 0], dtype=torch.int32))
    assert type(jitted) is type(eager) and str(jitted) == str(eager)
    byte = torch.tensor([1, 2, 0], dtype=torch.uint8)
    torch.testing.assert_close(thunder.jit(loss)(x, byte), loss(x, byte))


_ASSERTS = """
import torch


def with_a_message(a):
    assert (a > -100).all(), "values must be > -100"
    return a + 1


def without_a_message(a):
    assert (a > -100).all()
    return a + 1


def over_lines(a):
    assert (
        a > -100
    ).all(), "values must be > -100"
    return a + 1


def continued(a):
    assert (a > -100).all(), \
        "values must be > -100"
    return a + 1


def two_on_a_line(a):
    assert (a > -10000).all(); assert (a > -100).all(), "values must be > -100"  # noqa: E702
    return a + 1


def calls_assert_async(a):
    torch._assert_async((a > -100).all(), "direct")
    return a + 1


def trains(x, w):
    assert (x > -100).all(), "values must be > -100"
    return (x * w).tanh().sum()


def asserts_between_writes(x, w):
    x.mul_(2)
    assert x[0]
    y = (w * x).sum()
    x.add_(1)
    return y


def asserts_then_copies_a_view(x):
    assert (x > -100).all()
    return x.t().contiguous() * 2
"""


def _asserts_module(tmp_path):
    """_ASSERTS as a module of its own (pytest rewrites the asserts of test modules), in a folder whose name holds
    "line " (a stack trace's `File "...", line 12` was split at its first "line ")."""
    import importlib.util

    (tmp_path / "online data").mkdir()
    path = tmp_path / "online data" / "asserts_on_tensors.py"
    path.write_text(_ASSERTS)
    spec = importlib.util.spec_from_file_location("asserts_on_tensors", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, message", [("with_a_message", "values must be > -100"), ("without_a_message", ""),
                                           ("over_lines", "values must be > -100"),
                                           ("continued", "values must be > -100"),
                                           ("two_on_a_line", "values must be > -100"),
                                           ("calls_assert_async", "direct")])
def test_an_assert_on_a_tensor_raises_as_in_eager(tmp_path, name, message):
    """Dynamo writes `assert cond, msg` on a tensor as torch._assert_async, which raises RuntimeError: a user's
    `except AssertionError` missed it. Eager's AssertionError (with the statement's message, or none) it is; a call
    of torch._assert_async of the user's own raises as in eager, RuntimeError. (The functions live in a module of
    their own: pytest rewrites the asserts of test modules.)"""
    module = _asserts_module(tmp_path)
    fn = getattr(module, name)
    eager, jitted = eager_and_jitted_errors(fn, torch.full((3,), -1000.0))
    assert type(jitted) is type(eager) and str(jitted) == str(eager) == message, (eager, jitted)
    torch.testing.assert_close(thunder.jit(fn)(torch.zeros(3)), torch.ones(3))
    # In training the assert runs in the forward, and the graph keeps thunder's backward (as an opaque effect,
    # it sent the backward to torch).
    jitted, w = thunder.jit(module.trains), torch.randn(3, requires_grad=True)
    jitted(torch.zeros(3) + 1, w).backward()
    torch.testing.assert_close(w.grad, 1 - torch.tanh(w) ** 2)
    assert [g["backward"] for g in thunder.compile_stats(jitted).graphs] == ["thunder"]
    with pytest.raises(AssertionError, match="values must be > -100"):
        jitted(torch.full((3,), -1000.0), w)
    # A check reads the values as they are, without storing the pending writes first: stored mid-trace, the input
    # the backward read was written again before autograd saved it, and w's gradient was x after both writes. The
    # forward writes x after the product saved it: the backward raises, as eager's does.
    x, w = torch.arange(1.0, 5.0), torch.ones(4, requires_grad=True)
    y = thunder.jit(module.asserts_between_writes)(x, w)
    torch.testing.assert_close(x, torch.arange(1.0, 5.0) * 2 + 1)
    torch.testing.assert_close(y, (torch.arange(1.0, 5.0) * 2).sum())
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_an_assert_is_no_effect_that_clones_views(tmp_path):
    """A check writes nothing: a graph with an assert gives the argument of a view op eager copies with
    (``contiguous()`` of a transposed tensor) no clone, as one that writes into a tensor must (it was one)."""
    module = _asserts_module(tmp_path)
    jitted, x = thunder.jit(module.asserts_then_copies_a_view), torch.randn(3, 4)
    torch.testing.assert_close(jitted(x), x.t() * 2)
    assert "clone" not in str(thunder.last_traces(jitted)[-1])


@pytest.mark.parametrize("x_dtype, w_dtype", [(torch.float16, torch.float64), (torch.float32, torch.bfloat16),
                                              (torch.float64, torch.float32)])
def test_layer_norm_with_parameters_of_another_dtype_raises_as_in_eager(x_dtype, w_dtype):
    # ATen's layer_norm takes parameters of the input's dtype (or float32 ones for a half input); thunder's
    # decomposition computed a result for any.
    def f(x, w):
        return torch.nn.functional.layer_norm(x, (4,), w, None)

    eager, jitted = eager_and_jitted_errors(f, torch.randn(3, 4, dtype=x_dtype), torch.randn(4, dtype=w_dtype))
    assert type(jitted) is type(eager) and str(jitted) == str(eager), (eager, jitted)
    # float32 for a half input is taken only for both parameters at once
    mixed = lambda x, w, b: torch.nn.functional.layer_norm(x, (4,), w, b)  # noqa: E731
    eager, jitted = eager_and_jitted_errors(mixed, torch.randn(3, 4, dtype=torch.bfloat16), torch.randn(4),
                                            torch.randn(4, dtype=torch.bfloat16))
    assert type(jitted) is type(eager) and str(jitted) == str(eager), (eager, jitted)
    x, w = torch.randn(3, 4, dtype=torch.bfloat16), torch.randn(4)  # a half input with float32 ones: native
    torch.testing.assert_close(thunder.jit(f)(x, w), f(x, w))


@pytest.mark.parametrize("fn", [F.silu, F.gelu], ids=["silu", "gelu"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.bool])
def test_activations_of_non_floating_tensors_raise_as_in_eager(fn, dtype):
    """ATen's silu and gelu kernels are floating only; the decompositions computed values for ints and bools."""
    eager, jitted = eager_and_jitted_errors(lambda x: fn(x), torch.tensor([1, 0, 3]).to(dtype))
    assert type(jitted) is type(eager) is NotImplementedError


@pytest.mark.parametrize("fn", [lambda x: torch.mul(70000, x), lambda x: torch.div(70000, x),
                                lambda x: torch.true_divide(1e-8, x), lambda x: torch.mul(x, 70000)],
                         ids=["mul", "div", "true_divide", "number_second"])
def test_a_number_first_operand_is_rounded_to_a_half_dtype_as_in_eager(fn):
    """torch.mul(70000, x) of a float16 x: ATen wraps the number in a tensor cast to float16 (inf); a number second
    operand is read in float32 (x * 70000 is finite where x < 0.94)."""
    x = torch.tensor([0.5, 0.0, 3.75], dtype=torch.float16)
    expected, actual = fn(x), thunder.jit(fn)(x)
    assert actual.dtype == expected.dtype and torch.equal(actual.nan_to_num(), expected.nan_to_num())
    assert torch.equal(actual.isnan(), expected.isnan())


def test_a_number_base_of_an_integer_power_wraps_as_in_eager():
    x = torch.tensor([3, 2, 0, 1], dtype=torch.uint8)
    for base in (300, -1, 70000):
        fn = lambda x: torch.pow(base, x)  # noqa: E731
        assert torch.equal(thunder.jit(fn)(x), fn(x))
    y = torch.tensor([3, 2, 0, 1], dtype=torch.int8)
    assert torch.equal(thunder.jit(lambda y: torch.pow(200, y))(y), torch.pow(200, y))
    # The same conversion wherever the torch executor runs a prim with a number first (remainder raised too).
    fn = lambda x: torch.remainder(300, x + 1)  # noqa: E731
    assert torch.equal(thunder.jit(fn)(x), fn(x))
