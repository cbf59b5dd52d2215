"""Executors: each names the ops it claims and the Python callable that runs each.

Claiming happens in the core (pass "claim"): every symbol goes to the first
executor, in priority order, that claims its op; a torch-level op no executor
claims is replaced by its decomposition into prims.
"""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Executor:
    """An executor: a name and a table from qualified op name ("ltorch.softmax",
    "prims.add", "opaque") to the Python expression that runs it ("torch.softmax").
    Names in those expressions must resolve in ``namespace``.

    A *fusion* executor claims prims (and torch-level ops whose decompositions
    it can run whole) for its kernels; the core's fusion pass groups them into
    fusion symbols, and ``lower(trace)`` returns the callables that run those
    (a dict from each fusion's printed name to a Python callable)."""

    name: str
    callees: dict = field(repr=False)
    namespace: dict = field(repr=False, default_factory=dict)
    fusion: bool = False
    lower: object = field(repr=False, default=None)

    def __repr__(self):
        return f"Executor({self.name!r}, {len(self.callees)} ops)"


def default_executors():
    """The executors thunder.jit uses unless told otherwise, in priority order:
    the CPU fusion executor (generated C++ kernels), then torch."""
    return executor_sets()["cpu"]


def executor_sets():
    """The executor sets thunder offers, by name: {name: [Executor, ...]} in priority order.

    Benchmarks and tests iterate over these to run every configuration."""
    from thunder.executors.cpuex import cpu_executor
    from thunder.executors.torchex import torch_executor

    return {"torch": [torch_executor], "cpu": [cpu_executor, torch_executor]}
