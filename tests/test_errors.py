"""Errors: a jitted callable raises what eager raises (same exception type),
and names the argument it cannot handle."""
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


def test_notes_do_not_name_good_arguments():
    eager, jitted = eager_and_jitted_errors(add, torch.ones(2), object())
    notes = getattr(jitted, "__notes__", [])
    assert not any("'x'" in n for n in notes)


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
], ids=["broadcast", "matmul_shapes", "view_numel", "reshape_numel", "index", "expand", "cross_entropy_shape",
        "gelu_mode", "bitwise_float", "stack_shapes", "split_sizes"])
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
