"""Executors claim by device: the CPU fusion executor takes only symbols whose tensors are on the CPU, and a 0-dim
CPU tensor beside tensors on another device stays a scalar in every decomposition (never broadcast into a CPU
tensor), as torch takes ``meta_x + torch.tensor(2.0)`` and ``cuda_x * torch.tensor(2.0)``."""
import pytest
import torch

import thunder
from thunder import testing_opinfo as T
from thunder.executors import executor_sets

_PROGRAMS = {
    "add": lambda a, s: a + s,
    "mul_then_div": lambda a, s: (a * s) / s,
    "scalar_first": lambda a, s: s - a,
    "softmax_of_scaled": lambda a, s: torch.softmax(a * s, -1),
    "where": lambda a, s: torch.where(a > 0, a, s),
    "half_times_float_scalar": lambda a, s: a.half() * s,
}


@pytest.mark.parametrize("executors", ["cpu", "torch", "decomposed"])
@pytest.mark.parametrize("program", list(_PROGRAMS))
def test_meta_tensor_with_a_cpu_scalar_tensor(program, executors):
    fn = _PROGRAMS[program]
    a, s = torch.randn(3, 4, device="meta"), torch.tensor(2.0)
    expected = fn(a, s)
    chosen = T.decomposed_executors() if executors == "decomposed" else executor_sets()[executors]
    jitted = thunder.jit(T._fresh_function(fn, executors), executors=chosen)
    actual = jitted(a, s)
    assert (actual.device, actual.shape, actual.dtype) == (expected.device, expected.shape, expected.dtype)
    graphs = [g for g in jitted._thunder_state.graphs if hasattr(g, "executors")]
    assert graphs and all("cpu" not in g.executors() for g in graphs), thunder.summary(jitted)


def test_cpu_executor_still_fuses_cpu_tensors_with_a_scalar_tensor():
    fn = lambda a, s: (a * s).exp() + 1  # noqa: E731
    a, s = torch.randn(3, 4), torch.tensor(2.0)
    jitted = thunder.jit(fn)
    torch.testing.assert_close(jitted(a, s), fn(a, s))
    assert "cpu" in jitted._thunder_state.graphs[0].executors()


def test_prims_reject_tensors_on_two_devices():
    from thunder import _core

    b = _core.TraceBuilder()
    x = b.add_input_tensor(_core.DType.float32, [3], "meta", False, [])
    y = b.add_input_tensor(_core.DType.float32, [3], "cpu", False, [])
    with pytest.raises(_core.OpError, match="expected tensors on one device, got meta and cpu"):
        b.call("prims", "add", [x, y], {})
