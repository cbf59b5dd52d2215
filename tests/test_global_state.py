"""Grad mode, inference mode and autocast set inside a jitted function: the calls Dynamo records for them are
effects that no pass removes, merges or moves an op across, so every op runs under the state eager runs it in."""
import pytest
import torch
import torch.nn.functional as F

import thunder
from conftest import check_program


def _inputs():
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(3, 8, requires_grad=True), torch.randn(3, 8, requires_grad=True)


def distill_step(x, ws, wt):
    with torch.no_grad():
        t = F.linear(x, wt)  # a frozen teacher
    return F.mse_loss(F.linear(x, ws), t)


@pytest.mark.parametrize("executors", ["cpu", "torch"])
def test_no_grad_region_gets_no_gradient(executors):
    from thunder.executors import executor_sets

    x, ws, wt = _inputs()
    ews, ewt = ws.detach().clone().requires_grad_(), wt.detach().clone().requires_grad_()
    distill_step(x, ews, ewt).backward()
    jitted = thunder.jit(distill_step, executors=executor_sets()[executors])
    out = jitted(x, ws, wt)
    out.backward()
    assert wt.grad is None and ewt.grad is None
    torch.testing.assert_close(ws.grad, ews.grad)
    assert "torch._C._set_grad_enabled(False)" in str(thunder.last_traces(jitted)[-1])


def test_no_grad_region_round_trips():
    check_program(distill_step, *_inputs())


def test_enable_grad_inside_a_function_called_under_no_grad():
    def f(x):
        with torch.enable_grad():
            return x.sin() * 2

    x = torch.randn(5, requires_grad=True)
    with torch.no_grad():
        expected = f(x)
        actual = thunder.jit(f)(x)
    assert actual.requires_grad and expected.requires_grad
    torch.testing.assert_close(actual, expected)


def test_inference_mode_inside():
    def f(x):
        with torch.inference_mode():
            y = x * 2 + 1
        return y

    x = torch.randn(5, requires_grad=True)
    actual, expected = thunder.jit(f)(x), f(x)
    assert actual.is_inference() and expected.is_inference()
    torch.testing.assert_close(actual, expected)


def test_autocast_inside():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = F.linear(x, w)
        return y.relu() + 1

    x, w, _ = _inputs()
    w = w.detach()
    jitted = check_program(f, x, w)
    assert jitted(x, w).dtype == f(x, w).dtype == torch.bfloat16
    # The region is written into the trace as casts (fx_import's explicit autocast): no global state is left.
    final = str(thunder.last_traces(jitted)[-1])
    assert "enter_autocast" not in final and "convert_element_type(t0, torch.bfloat16)" in final, final


def test_an_opaque_op_of_an_autocast_region_is_called_under_the_region():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.addmm(torch.special.i0(F.linear(x, w)), x, w.t())  # opaque ops, addmm on autocast's list
        return y + 1

    x, w, _ = _inputs()
    w = w.detach()
    jitted = check_program(f, x, w)
    assert jitted(x, w).dtype == f(x, w).dtype == torch.bfloat16
    final = str(thunder.last_traces(jitted)[-1])
    assert "enter_autocast" not in final and "_autocast" in final, final


def test_autocast_disabled_inside_an_outer_autocast():
    def f(x, w):
        with torch.autocast("cpu", enabled=False):
            return F.linear(x, w)

    x, w, _ = _inputs()
    w = w.detach()
    jitted = thunder.jit(f)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        actual, expected = jitted(x, w), f(x, w)
    assert actual.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(actual, expected)


def test_an_op_is_not_merged_across_a_grad_mode_change():
    def f(x):
        a = x.sin()
        with torch.no_grad():
            b = x.sin()
        return a, b

    x = torch.randn(5, requires_grad=True)
    a, b = thunder.jit(f)(x)
    assert a.requires_grad and not b.requires_grad


def test_a_call_whose_unused_result_is_none_is_kept():
    calls = []

    def record(x):
        calls.append(1)

    def f(x):
        torch._dynamo.allow_in_graph(record)(x)
        return x + 1

    jitted = thunder.jit(f)
    jitted(torch.randn(3))  # compiles (Dynamo also calls record while it traces)
    calls.clear()
    jitted(torch.randn(3))
    jitted(torch.randn(3))
    assert len(calls) == 2, "the call made for its effect was removed"


@pytest.mark.parametrize("region", ["autocast", "inference_mode", "no_grad"])
def test_an_error_inside_a_region_leaves_it(region):
    def f(x, i):
        if region == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return x[i] @ x.t()
        with torch.inference_mode() if region == "inference_mode" else torch.no_grad():
            return x[i] * 2

    jitted, x = thunder.jit(f), torch.randn(5, 4)
    jitted(x, torch.tensor([1]))
    with pytest.raises(IndexError):
        jitted(x, torch.tensor([7]))
    assert not torch.is_autocast_enabled("cpu")
    assert not torch.is_inference_mode_enabled()
    assert torch.is_grad_enabled()
    assert torch.mm(x, x.t()).dtype == torch.float32
