"""Executors: each names the ops it claims and the Python callable that runs each.

Claiming happens in the core (pass "claim"): every symbol goes to the first
executor, in priority order, that claims its op; a torch-level op no executor
claims is replaced by its decomposition into prims.
"""
from dataclasses import dataclass, field


class OpaqueResultMismatch(RuntimeError):
    """A tensor an opaque op returned is not what Dynamo's fake tensor of it said (its dtype or its shape), found
    by a kernel's launcher before the kernel reads it: the op's fake implementation is wrong for these arguments
    (``torch._transformer_encoder_layer_fwd`` under ``torch.autocast`` says float32 and returns bfloat16, which a
    kernel read as float32 past the tensor's end). The trace cannot run; its graph runs with torch as captured
    instead (``thunder.frontend.dynamo``)."""


@dataclass(frozen=True)
class Executor:
    """An executor: a name and a table from qualified op name ("ltorch.softmax",
    "prims.add", "opaque") to the Python expression that runs it ("torch.softmax").
    Names in those expressions must resolve in ``namespace``.

    A *fusion* executor claims prims (and torch-level ops whose decompositions
    it can run whole) for its kernels; the core's fusion pass groups them into
    fusion symbols, and ``lower(trace, round_every_op=True)`` returns the callables that run those
    (a dict from each fusion's printed name to a Python callable). ``round_every_op=False`` (a backward trace)
    lets its kernels keep float16/bfloat16 values in float32 between ops, rounding where they are stored or
    converted (``codegen::HalfRounding`` in csrc/codegen/expressions.h); an executor may ignore it. A ``lower``
    that takes ``seconds=`` (a dict) records there the wall time of its stages (``"codegen"``, ``"compile"``),
    which ``compile_stats`` reports as ``"<executor> codegen"``; otherwise its whole call is ``"<executor> lowering"``.

    Its claim policy, applied by the core's claiming pass (which knows no executor's rules):

    - ``devices`` ("cpu", "cuda", "meta"): it claims only symbols whose tensors are all on them (a 0-dim
      CPU tensor input is a scalar, which any device takes); none named: every device.
    - ``dtypes`` (``_core.DType`` values): it claims only symbols whose tensors all have one of them; none
      named: every dtype.
    - ``closed_by`` (fusion executors; qualified prims such as "prims.matmul"): it opens no torch-level op
      among whose leaves one of these is; that op runs whole on the next executor."""

    name: str
    callees: dict = field(repr=False)
    namespace: dict = field(repr=False, default_factory=dict)
    fusion: bool = False
    lower: object = field(repr=False, default=None)
    devices: tuple = ()
    dtypes: tuple = ()
    closed_by: tuple = ()

    def __repr__(self):
        return f"Executor({self.name!r}, {len(self.callees)} ops)"


def _cuda_available():
    import torch

    return torch.cuda.is_available()


def default_executors():
    """The executors thunder.jit uses unless told otherwise, in priority order: the CPU fusion executor
    (generated C++ kernels), then torch; where CUDA is available, the CUDA fusion executor (generated CUDA
    kernels, docs/gpu_executor.md) between them. Each fusion executor claims only its device's tensors, so a
    CPU graph runs [cpu, torch] and a CUDA graph [cuda, torch]."""
    if _cuda_available():
        from thunder.executors.cudaex import cuda_executor

        cpu, torch_ = executor_sets()["cpu"]
        return [cpu, cuda_executor, torch_]
    return executor_sets()["cpu"]


def executor_sets():
    """The executor sets thunder offers, by name: {name: [Executor, ...]} in priority order; ``"cuda"`` (the
    CUDA fusion executor, then torch) only where CUDA is available.

    Benchmarks and tests iterate over these to run every configuration."""
    from thunder.executors.cpuex import cpu_executor
    from thunder.executors.torchex import torch_executor

    sets = {"torch": [torch_executor], "cpu": [cpu_executor, torch_executor]}
    if _cuda_available():
        from thunder.executors.cudaex import cuda_executor

        sets["cuda"] = [cuda_executor, torch_executor]
    return sets


def executors_by_name():
    """Every executor thunder offers, by its name: {"cpu": the CPU fusion executor, "cuda": the CUDA fusion
    executor, "torch": the torch executor}."""
    from thunder.executors.cudaex import cuda_executor

    named = {ex.name: ex for executors in executor_sets().values() for ex in executors}
    named.setdefault("cuda", cuda_executor)
    return named


def resolve_executors(executors):
    """The executor list ``thunder.jit(..., executors=...)`` asks for, checked.

    Args:
        executors: ``None`` (:func:`default_executors`); the name of an executor set of
            :func:`executor_sets` (``"cpu"``: the CPU fusion executor, then torch; ``"torch"``);
            an :class:`Executor`; or a list or tuple of executors and executor names
            (``"cpu"``, ``"torch"``, see :func:`executors_by_name`), in priority order.
    Returns:
        A new list of :class:`Executor`, in priority order.
    Raises:
        TypeError: ``executors`` (or an item of it) is neither an Executor nor a name.
        ValueError: an unknown name (the message lists the valid ones); an empty list; an executor
            listed twice; only fusion executors (a fusion executor runs only what it fuses: the
            list needs one that runs everything else, such as ``"torch"``).
    """
    if executors is None:
        return list(default_executors())
    if isinstance(executors, str):
        sets = executor_sets()
        if executors not in sets:
            raise ValueError(f"thunder.jit: unknown executor set {executors!r}; valid names: "
                             f"{', '.join(map(repr, sets))}")
        return list(sets[executors])
    if isinstance(executors, Executor):
        executors = [executors]
    if not isinstance(executors, (list, tuple)):
        raise TypeError("thunder.jit: executors must be an Executor, an executor name, or a list of those, "
                        f"got {type(executors).__name__}")
    by_name, out = executors_by_name(), []
    for ex in executors:
        if isinstance(ex, str):
            if ex not in by_name:
                raise ValueError(f"thunder.jit: unknown executor {ex!r}; valid names: {', '.join(map(repr, by_name))} "
                                 "(or pass an Executor)")
            ex = by_name[ex]
        elif not isinstance(ex, Executor):
            raise TypeError(f"thunder.jit: executors must be Executors or executor names "
                            f"({', '.join(map(repr, by_name))}), got {type(ex).__name__}: {ex!r}")
        if any(e.name == ex.name for e in out):
            raise ValueError(f"thunder.jit: executor {ex.name!r} is listed twice")
        out.append(ex)
    if not out:
        raise ValueError("thunder.jit: executors is empty; pass None for the default executors")
    if all(ex.fusion for ex in out):
        names = " and ".join(repr(e.name) for e in out)
        raise ValueError(f"thunder.jit: fusion executors ({names}) run only what they fuse; add an executor that runs "
                         "everything else after them, e.g. executors=['cpu', 'torch']")
    return out
