"""Shared helpers for the pytest suite.

The central helper is :func:`check_program`: it compiles a program with
``thunder.jit``, checks the result against eager PyTorch, and then checks the
round trip of every trace of every compiled graph: each trace (the imported
one and each pass's result), printed as Python and executed, run on the very
inputs Dynamo handed to that graph, gives what the captured FX graph gives
when run eagerly.
"""
import contextlib
import copy
import logging

import pytest
import torch

import thunder
import thunder.frontend.dynamo as _dynamo
from thunder.executors import Executor
from thunder.executors.torchex import torch_executor
from thunder.testing import tolerance

#: Runs every torch-level op through its prims decomposition (the torch executor's prims and opaque ops only;
#: torch-level ops that have no decomposition, like cumsum or conv2d, still run as their torch calls).
_UNDECOMPOSED = {f"ltorch.{n}" for n in getattr(thunder._core, "undecomposed_ops", lambda: [])()}
PRIMS_ONLY = Executor("prims_only", {k: v for k, v in torch_executor.callees.items()
                                     if not k.startswith("ltorch.") or k in _UNDECOMPOSED},
                      torch_executor.namespace)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Dynamo's caches are per code object; start every test from a clean slate so tests do not share them."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def restore_logging():
    """Restores thunder's log level and log file after a test that changes them."""
    level = thunder.core.log.logger.level
    yield
    thunder.set_log_file(None)
    thunder.set_log_level(level)


# ---- comparing results ----

def assert_same(actual, expected, rtol=None, atol=None, path="result"):
    """Structural equality; tensors within thunder.testing.tolerance of their dtype (exact for ints/bools)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, got {type(actual).__name__}"
        assert actual.shape == expected.shape, f"{path}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.device == expected.device, f"{path}: device {actual.device} != {expected.device}"
        r, a = tolerance(expected.dtype)
        r, a = (r if rtol is None else rtol), (a if atol is None else atol)
        torch.testing.assert_close(actual.detach(), expected.detach(), rtol=r, atol=a, equal_nan=True,
                                   msg=lambda m: f"{path}: {m}")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual.keys()) == list(expected.keys()), \
            f"{path}: keys {list(getattr(actual, 'keys', list)())} != {list(expected.keys())}"
        for k in expected:
            assert_same(actual[k], expected[k], rtol, atol, f"{path}[{k!r}]")
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), \
            f"{path}: {type(actual).__name__} of {len(actual) if hasattr(actual, '__len__') else '?'} != " \
            f"{type(expected).__name__} of {len(expected)}"
        for i, (x, y) in enumerate(zip(actual, expected)):
            assert_same(x, y, rtol, atol, f"{path}[{i}]")
    elif isinstance(expected, float):
        assert isinstance(actual, (int, float)) and (actual == pytest.approx(expected, rel=1e-6, nan_ok=True)), \
            f"{path}: {actual!r} != {expected!r}"
    else:
        assert type(actual) is type(expected) and actual == expected, f"{path}: {actual!r} != {expected!r}"


def outcome(run, raises):
    """``run()``'s result, or "raised" where it raises a RuntimeError whose message holds ``raises``."""
    try:
        return run()
    except RuntimeError as e:
        assert raises in str(e), e
        return "raised"


def assert_same_outcome(actual, expected):
    """Both "raised" (outcome), or both values, equal."""
    if isinstance(expected, str) or isinstance(actual, str):
        assert actual == expected
    else:
        torch.testing.assert_close(actual, expected)


def clone(x):
    """A deep copy of a call's inputs: tensors cloned (keeping requires_grad), modules deep-copied."""
    if isinstance(x, torch.Tensor):
        c = x.detach().clone()
        return c.requires_grad_(x.requires_grad) if (x.is_floating_point() or x.is_complex()) else c
    if isinstance(x, (list, tuple)):
        return type(x)(clone(i) for i in x)
    if isinstance(x, dict):
        return {k: clone(v) for k, v in x.items()}
    if isinstance(x, torch.nn.Module):
        return copy.deepcopy(x)
    return x


# ---- recording what each compiled graph was called with ----

class GraphCall:
    """A compiled graph, the FX graph Dynamo handed over, and a copy of the inputs of its first call."""

    def __init__(self, compiled, gm):
        self.compiled, self.gm, self.inputs = compiled, gm, None


@contextlib.contextmanager
def recording_graphs():
    """Records, for every graph thunder compiles in the block, the FX graph and its first call's inputs."""
    calls = []
    original_import, original_compile = _dynamo.import_graph, _dynamo.compile_trace
    pending = []

    def import_graph(gm, example_inputs):
        pending.append(gm)
        return original_import(gm, example_inputs)

    def compile_trace(*args, **kwargs):
        compiled = original_compile(*args, **kwargs)
        record = GraphCall(compiled, pending.pop())
        inner = compiled.fn

        def fn(*inputs):
            if record.inputs is None:
                record.inputs = clone(list(inputs))
            return inner(*inputs)
        compiled.fn = fn
        calls.append(record)
        return compiled

    _dynamo.import_graph, _dynamo.compile_trace = import_graph, compile_trace
    try:
        yield calls
    finally:
        _dynamo.import_graph, _dynamo.compile_trace = original_import, original_compile


def as_printed(view):
    """The function a trace defines when its printed text is executed in a fresh namespace (the text imports
    every name it uses: kernels and the graph's objects from thunder.core.registry)."""
    namespace = {}
    exec(compile(str(view), f"<printed {view.name}>", "exec"), namespace)
    return namespace["computation"]


def check_traces_round_trip(record, rtol=None, atol=None):
    """Every trace of one compiled graph, printed and executed in a fresh namespace, equals the FX graph run
    eagerly.

    Also compares the inputs afterwards, so traces that mutate inputs (in-place
    opaque ops) must mutate them the same way.
    """
    assert record.inputs is not None, "the compiled graph was never called"
    traces = record.compiled.traces
    assert len(traces) >= 2, "expected the imported trace and at least one pass's trace"
    with torch.no_grad():
        reference_inputs = clone(record.inputs)
        expected = record.gm.forward(*reference_inputs)
        for view in traces:
            source = str(view)
            compile(source, f"<{view.name}>", "exec")  # the printer's output is valid Python
            inputs = clone(record.inputs)
            try:
                actual = as_printed(view)(*inputs)
                # outputs that share memory in eager: the trace returns their base, the backend makes them again
                actual = _dynamo.remake_output_views(actual, inputs, record.compiled.output_views)
            except Exception as e:
                raise AssertionError(f"trace {view.name!r} failed to run: {type(e).__name__}: {e}\n{source}") from e
            if view.saves:  # a training forward: (outputs, saved values)
                actual = actual[0]
            try:
                assert_same(list(actual), list(expected), rtol, atol, f"trace {view.name!r} output")
                assert_same(inputs, reference_inputs, rtol, atol, f"trace {view.name!r} inputs after the call")
            except AssertionError as e:
                raise AssertionError(f"{e}\n{source}") from None


def check_backward_traces(record, rtol=None, atol=None):
    """For a graph thunder differentiated: every backward trace, run on the saved values of the final forward
    trace and on random output gradients, gives the gradients torch.autograd computes through the FX graph."""
    compiled = record.compiled
    if compiled.autodiff != "thunder":
        return
    forward = compiled.traces[-1]
    inputs = clone(record.inputs)
    with torch.no_grad():
        outputs, saved = as_printed(forward)(*inputs)
    grad_positions = [i for i, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o.is_floating_point()]
    leaves = [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
              for x in clone(record.inputs)]
    with torch.enable_grad():
        expected_out = record.gm.forward(*leaves)
    generator = torch.Generator().manual_seed(0)
    grads = {i: torch.randn(outputs[i].shape, generator=generator).to(outputs[i].dtype) for i in grad_positions}
    differentiable = [(i, o) for i, o in enumerate(expected_out) if isinstance(o, torch.Tensor) and o.requires_grad]
    wanted = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    expected = torch.autograd.grad([o for _, o in differentiable], wanted, [grads[i] for i, _ in differentiable],
                                   allow_unused=True)
    for view in compiled.backward_traces:
        source = str(view)
        try:
            boxed = [list(saved)] if view.trace.boxed_inputs else []  # the saved values, in a list it empties
            got = as_printed(view)(*boxed, *(grads[i] for i in compiled.grad_outputs))
        except Exception as e:
            raise AssertionError(f"backward trace {view.name!r} failed to run: {type(e).__name__}: {e}\n{source}") \
                from e
        got = [g for g, x in zip(got, leaves) if isinstance(x, torch.Tensor) and x.requires_grad]
        expected_filled = [torch.zeros_like(x) if e is None else e for e, x in zip(expected, wanted)]
        got_filled = [torch.zeros_like(x) if g is None else g for g, x in zip(got, wanted)]
        # Gradients sum over many elements in another order than torch's: the tolerance scales with their size.
        scale = max([1.0] + [e.abs().max().item() for e in expected_filled if e.numel()])
        default_rtol, default_atol = tolerance(expected_filled[0].dtype) if expected_filled else (0, 0)
        try:
            assert_same(got_filled, expected_filled, rtol or default_rtol, (atol or default_atol) * scale,
                        f"backward trace {view.name!r} gradients")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{source}") from None


def check_program(fn, *args, executors=None, rtol=None, atol=None, round_trip=True, calls=1, native=False, **kwargs):
    """Compiles ``fn`` (function or module), compares with eager, and round-trips every trace.

    ``native=True`` also requires that every op was imported natively (none fell back to an opaque torch call).

    ``fn`` runs eagerly on a copy of the inputs (and a copy of the module), so
    programs that mutate their inputs or state are compared after the call too.
    Returns the jitted callable.
    """
    eager_fn = copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn
    with recording_graphs() as records:
        jitted = thunder.jit(fn, executors=executors)
        for _ in range(calls):
            eager_args, eager_kwargs = clone(args), clone(kwargs)
            jit_args, jit_kwargs = clone(args), clone(kwargs)
            expected = eager_fn(*eager_args, **eager_kwargs)
            actual = jitted(*jit_args, **jit_kwargs)
            assert_same(actual, expected, rtol, atol, "jitted vs eager")
            assert_same(jit_args, eager_args, rtol, atol, "inputs after the call")
    compiled = [g for g in jitted._thunder_state.graphs if not isinstance(g, _dynamo.EagerGraph)]
    assert compiled, f"nothing was compiled by thunder:\n{jitted}"
    assert not [g for g in jitted._thunder_state.graphs if isinstance(g, _dynamo.EagerGraph)], \
        f"a graph fell back to torch:\n{jitted}"
    if native:
        for g in compiled:
            assert not g.fallbacks, f"ops imported as opaque: {g.fallbacks}"
    if round_trip:
        assert len(records) == len(compiled)
        for record in records:
            check_traces_round_trip(record, rtol, atol)
            check_backward_traces(record, rtol, atol)
    return jitted


@contextlib.contextmanager
def capture_thunder_log():
    """Collects thunder's log records in the block (the list of formatted messages)."""
    messages = []

    class Handler(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Handler(level=1)
    logger = thunder.core.log.logger
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
