"""thunder's own API checks what it is given (issue #10, items 9-12): executors and passes at thunder.jit
time, log levels, the inspection functions' argument, torch.compile's Inductor options, Python ints the core
cannot hold, ops on dtypes they do not support, and how a graph that falls back is reported."""
import errno
import logging

import pytest
import torch

import thunder
import thunder.frontend.dynamo as _dynamo
from thunder import _core
from thunder.core.options import DEFAULT_PASSES, LogLevel
from thunder.executors import Executor, executor_sets
from thunder.executors.cpuex import cpu_executor
from thunder.executors.torchex import torch_executor


def f(x):
    return x * 2 + 1


class Records(logging.Handler):
    """Collects thunder's log records (its logger does not propagate, so caplog does not see them)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def messages(self, level):
        return [r.getMessage() for r in self.records if r.levelno == level]


@pytest.fixture
def log(restore_logging, monkeypatch):
    """thunder's log records at DEBUG and above, with the once-per-process warning memory emptied."""
    monkeypatch.setattr(_dynamo, "_warned_causes", set())
    monkeypatch.setattr(_dynamo, "_warned_options", set())
    handler = Records()
    logger = thunder.core.log.logger
    logger.addHandler(handler)
    thunder.set_log_level(LogLevel.DEBUG)
    yield handler
    logger.removeHandler(handler)


# ---- item 9: executors ----

@pytest.mark.parametrize("executors,names", [
    ("torch", ["torch"]),
    ("cpu", ["cpu", "torch"]),
    (["torch"], ["torch"]),
    (("cpu", "torch"), ["cpu", "torch"]),
    ([cpu_executor, "torch"], ["cpu", "torch"]),
    (torch_executor, ["torch"]),
    (None, ["cpu", "torch"]),
])
def test_executors_by_object_or_name(executors, names):
    jitted = thunder.jit(f, executors=executors)
    assert [e.name for e in jitted._get_executors()] == names
    x = torch.randn(4)
    torch.testing.assert_close(jitted(x), f(x))
    stats = thunder.compile_stats(jitted)
    assert [g["compiled"] for g in stats.graphs] == [True], stats.graphs
    used = {b.executor for b in thunder.last_traces(jitted)[-1].symbols if b.executor}
    assert used and used <= set(names), used


def test_executor_names_match_the_sets():
    assert [e.name for e in executor_sets()["cpu"]] == ["cpu", "torch"]


@pytest.mark.parametrize("executors", [["tourch"], "inductor", ["cpu", "nvfuser"]])
def test_unknown_executor_name_is_rejected_at_jit_time(executors):
    with pytest.raises(ValueError) as info:
        thunder.jit(f, executors=executors)
    assert "'torch'" in str(info.value) and "'cpu'" in str(info.value), str(info.value)


@pytest.mark.parametrize("executors", [[None], [1], 3.5, {"torch"}])
def test_executor_of_the_wrong_type_is_rejected(executors):
    with pytest.raises(TypeError, match="executor"):
        thunder.jit(f, executors=executors)


@pytest.mark.parametrize("executors,match", [
    ([], "empty"),
    (["torch", "torch"], "twice"),
    (["cpu"], "fuse"),
])
def test_executor_lists_that_cannot_run_a_graph(executors, match):
    with pytest.raises(ValueError, match=match):
        thunder.jit(f, executors=executors)


def test_a_custom_executor_object_is_accepted():
    mine = Executor("mine", dict(torch_executor.callees), torch_executor.namespace)
    jitted = thunder.jit(f, executors=[mine])
    x = torch.randn(3)
    torch.testing.assert_close(jitted(x), f(x))
    assert thunder.compile_stats(jitted).graphs[0]["compiled"]


def test_module_executors_are_checked_too():
    with pytest.raises(ValueError, match="unknown executor"):
        thunder.jit(torch.nn.Linear(2, 2), executors=["tourch"])


# ---- item 9: passes ----

@pytest.mark.parametrize("passes", [
    DEFAULT_PASSES,
    list(DEFAULT_PASSES),
    ("cse", "constant_folding", "claim"),
    ("claim", "fusion"),
    ("claim", "fusion", "dce"),
    ("release",),
    ("dce", "release"),
    (),
])
def test_valid_pass_lists_compile(passes):
    jitted = thunder.jit(f, passes=passes)
    x = torch.randn(5)
    torch.testing.assert_close(jitted(x), f(x))
    stats = thunder.compile_stats(jitted)
    assert stats.graphs[0]["compiled"], stats.graphs
    assert list(stats.graphs[0]["pass_seconds"]) == list(passes)


def test_unknown_pass_is_rejected_listing_the_valid_ones():
    with pytest.raises(ValueError) as info:
        thunder.jit(f, passes=["cse", "fuse"])
    for name in _core.pass_names():
        assert name in str(info.value)


def test_a_string_is_not_a_pass_list():
    with pytest.raises(TypeError, match="the string 'dce'"):
        thunder.jit(f, passes="dce")


@pytest.mark.parametrize("passes", [["dce", 3], {"dce"}, 7])
def test_passes_of_the_wrong_type(passes):
    with pytest.raises(TypeError):
        thunder.jit(f, passes=passes)


@pytest.mark.parametrize("passes,rule", [
    (["release", "release"], "at most once"),
    (["cse", "claim", "cse"], "at most once"),
    (["fusion"], "'fusion' needs 'claim' before it"),
    (["fusion", "claim"], "'fusion' needs 'claim' before it"),
    (["claim", "release", "fusion"], "'release' must be the last"),
    (["release", "dce"], "'release' must be the last"),
])
def test_pass_order_is_checked(passes, rule):
    with pytest.raises(ValueError, match=rule):
        thunder.jit(f, passes=passes)


# ---- item 9: log levels and the inspection functions ----

@pytest.mark.parametrize("level", [LogLevel.DEBUG, logging.INFO, 5, 0, logging.CRITICAL])
def test_set_log_level_accepts_levels(level, restore_logging):
    thunder.set_log_level(level)
    assert thunder.core.log.logger.level == int(level)


@pytest.mark.parametrize("level,error", [
    (True, TypeError), (False, TypeError), ("DEBUG", TypeError), (10.0, TypeError), (None, TypeError),
    (10**20, ValueError), (-1, ValueError), (51, ValueError),
])
def test_set_log_level_rejects(level, error, restore_logging):
    before = thunder.core.log.logger.level
    with pytest.raises(error):
        thunder.set_log_level(level)
    assert thunder.core.log.logger.level == before


@pytest.mark.parametrize("inspect", [thunder.last_traces, thunder.last_kernels, thunder.compile_stats])
@pytest.mark.parametrize("target", [f, torch.nn.Linear(2, 2), None, torch.compile(f, backend="eager")])
def test_inspection_of_something_not_jitted(inspect, target):
    with pytest.raises(TypeError, match="is not a thunder-jitted callable"):
        inspect(target)


def test_inspection_before_a_call():
    jitted = thunder.jit(f)
    with pytest.raises(LookupError):
        thunder.last_traces(jitted)
    with pytest.raises(LookupError):
        thunder.last_kernels(jitted)
    assert thunder.compile_stats(jitted).graphs == []


def test_inspection_after_calls_whose_graph_runs_uncompiled_says_why():
    """last_traces of a function that was called, whose graph runs uncompiled, said "call the jitted function
    first"; it names the graph and the reason."""
    def resizes(x):
        y = x * 2
        y.t_()
        return y + 1

    jitted = thunder.jit(resizes)
    jitted(torch.randn(3, 4))
    with pytest.raises(LookupError, match=r"no graph was compiled: graph 0 runs uncompiled: .*sizes or strides"):
        thunder.last_traces(jitted)


@pytest.mark.parametrize("inspect", [thunder.last_traces, thunder.last_backward_traces, thunder.last_kernels])
def test_inspection_of_a_graph_position_that_does_not_exist_names_the_argument(inspect):
    jitted = thunder.jit(f)
    jitted(torch.randn(2, 2))
    name = inspect.__name__
    with pytest.raises(IndexError, match=rf"thunder.{name}: graph=3 is out of range: 1 compiled graph is recorded"):
        inspect(jitted, 3)
    with pytest.raises(TypeError, match=rf"thunder.{name}: graph must be an int .* got str '0'"):
        inspect(jitted, "0")
    inspect(jitted, -1)
    inspect(jitted, 0)


# ---- item 10: torch.compile's Inductor options ----

@pytest.mark.parametrize("kwargs", [{"mode": "max-autotune"}, {"options": {"triton.cudagraphs": False}},
                                    {"mode": "reduce-overhead"}])
def test_torch_compile_mode_and_options_are_ignored_with_one_warning(kwargs, log):
    x = torch.randn(3)
    compiled = torch.compile(f, backend="thunder", **kwargs)
    torch.testing.assert_close(compiled(x), f(x))
    y = torch.randn(4)
    torch.testing.assert_close(compiled(y), f(y))
    other = torch.compile(lambda x: x.sin(), backend="thunder", **kwargs)
    other(x)
    warnings = [m for m in log.messages(logging.WARNING) if "ignores torch.compile" in m]
    assert len(warnings) == 1, warnings
    assert next(iter(kwargs)) in warnings[0]


# ---- item 12: reporting a graph that falls back ----

def _failing_fusion_executor(make_error):
    """The CPU fusion executor, except that building its kernels raises make_error() (a cache that cannot be
    written, a compiler that fails): each graph with a fusion then falls back."""
    def lower(trace, round_every_op=True):
        raise make_error()
    return Executor("failing_cpu", cpu_executor.callees, {}, fusion=True, lower=lower)


def test_fallback_warns_once_per_cause_and_reports_the_reason(log):
    read_only = _failing_fusion_executor(lambda: OSError(errno.EROFS, "Read-only file system", "/cache/k.cc"))
    jitted = thunder.jit(lambda x: x.sin() * 2, executors=[read_only, "torch"])
    for n in (3, 4, 5):  # each shape recompiles, and each compile fails the same way
        x = torch.randn(n)
        torch.testing.assert_close(jitted(x), x.sin() * 2)
    other = thunder.jit(lambda x: x.cos() + 1, executors=[read_only, "torch"])
    x = torch.randn(3)
    torch.testing.assert_close(other(x), x.cos() + 1)
    fallbacks = [m for m in log.messages(logging.WARNING) if "runs with torch as captured" in m]
    assert len(fallbacks) == 1, fallbacks
    assert "Read-only file system" in fallbacks[0] and "once per cause" in fallbacks[0], fallbacks[0]
    again = [m for m in log.messages(logging.DEBUG) if "runs with torch as captured (again)" in m]
    assert len(again) == 3, again

    # Another cause warns once more: a compiler failure, its kept source under a new name each time.
    count = iter(range(100))
    broken = _failing_fusion_executor(lambda: RuntimeError(f"kernel compilation failed (kept /c/{next(count)}.cc):\n"
                                                           "error: invalid operands"))
    third = thunder.jit(lambda x: x.tan() - 1, executors=[broken, "torch"])
    for n in (3, 4):
        x = torch.randn(n)
        torch.testing.assert_close(third(x), x.tan() - 1)
    fallbacks = [m for m in log.messages(logging.WARNING) if "runs with torch as captured" in m]
    assert len(fallbacks) == 2 and "kernel compilation failed" in fallbacks[1], fallbacks

    stats = thunder.compile_stats(jitted)
    assert len(stats.graphs) == 3 and not any(g["compiled"] for g in stats.graphs)
    assert all(g["reason"].startswith("OSError: [Errno 30] Read-only file system") for g in stats.graphs), stats.graphs
    assert stats.uncompiled == stats.graphs
    report = thunder.summary(jitted)
    assert "3 run UNCOMPILED" in report and report.count("UNCOMPILED, runs with torch") == 3, report
    assert "reason: OSError: [Errno 30] Read-only file system" in report
    # The reason is the first line and the compiler's first error.
    assert thunder.compile_stats(third).graphs[0]["reason"] == \
        "RuntimeError: kernel compilation failed (kept /c/0.cc): error: invalid operands"


def test_a_fallback_warning_is_one_line_and_the_whole_error_is_at_debug(log):
    # Errors from Dynamo's fake propagation carry pages of "While executing ... Original traceback" text.
    page = "".join(f"\n  File \"/lib/x{i}.py\", line {i}, in f{i}" for i in range(40))
    error = RuntimeError(f"Failed running call_function aten.nonzero(*(FakeTensor(..., size=(4,)),)):\n"
                         f"data-dependent output size\n\nWhile executing %nonzero\nOriginal traceback:{page}")
    jitted = thunder.jit(lambda x: x.exp() * 3, executors=[_failing_fusion_executor(lambda: error), "torch"])
    x = torch.randn(5)
    torch.testing.assert_close(jitted(x), x.exp() * 3)
    [warning] = [m for m in log.messages(logging.WARNING) if "runs with torch as captured" in m]
    assert "RuntimeError: Failed running call_function aten.nonzero" in warning, warning
    assert "Original traceback" not in warning and "where the whole error is" in warning, warning
    assert len(warning.splitlines()) == 2, warning
    assert any("Original traceback" in m and "x39.py" in m for m in log.messages(logging.DEBUG))


def test_compiled_graphs_have_no_reason():
    jitted = thunder.jit(f)
    jitted(torch.randn(2))
    stats = thunder.compile_stats(jitted)
    assert stats.graphs[0]["reason"] is None and stats.uncompiled == []
    assert "UNCOMPILED" not in thunder.summary(jitted)


def test_a_nested_tensor_runs_with_torch_and_the_reason_names_its_layout():
    """A jagged nested tensor's graph fell back with thunder's own AttributeError ("'NestedIntNode' object has no
    attribute 'int_'") as the reason given to the user. (Dynamo itself skips a frame with a sparse tensor input,
    and says so.)"""
    def g(a):
        return (a * 2).sin()

    x = torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)], layout=torch.jagged)
    jitted = thunder.jit(g)
    assert all(torch.allclose(o, e) for o, e in zip(jitted(x).unbind(), g(x).unbind()))
    reasons = [r for r in (graph["reason"] for graph in thunder.compile_stats(jitted).graphs) if r]
    assert reasons and all("a tensor of layout torch.jagged (nested): thunder compiles dense (strided) tensors "
                           "only" in r for r in reasons), reasons


@pytest.mark.parametrize("error,cause", [
    (PermissionError(13, "Permission denied", "/x/y"), ("PermissionError", "errno 13")),
    (RuntimeError("cannot write /a/b/1234.cc: No space left on device (errno 28)"), ("RuntimeError", "errno 28")),
    (RuntimeError("cannot write /a/b/1234.77.cc"), ("RuntimeError", "cannot write <path>")),
    (RuntimeError("kernel compilation failed (kept /c/d.3.cc):\ng++ ...\nerror: one"),
     ("RuntimeError", "kernel compilation failed (kept <path>):")),
])
def test_fallback_causes(error, cause):
    assert _dynamo._fallback_cause(error) == cause


def test_torch_compile_graphs_are_inspected_through_the_global_state():
    before = len(_dynamo.GLOBAL_STATE.graphs)
    compiled = torch.compile(lambda x: x.sin() * 2, backend="thunder")
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x.sin() * 2)
    stats = thunder.compile_stats(_dynamo.GLOBAL_STATE)
    assert len(stats.graphs) == before + 1 and stats.graphs[-1]["compiled"] and stats.graphs[-1]["reason"] is None
    assert thunder.last_traces(_dynamo.GLOBAL_STATE)[-1].provenance.startswith("Memory planning")
    # ... and through the torch.compile result itself (its own graphs only)
    assert len(thunder.compile_stats(compiled).graphs) == 1


@pytest.mark.parametrize("text,short", [
    ("kernel compilation failed (kept /c/0.cc):\ncd /c && g++ -O3 -o x.so x.cc\nx.cc:3: error: invalid operands\nnote",
     "RuntimeError: kernel compilation failed (kept /c/0.cc): x.cc:3: error: invalid operands"),
    ("kernel compilation failed (kept /c/0.cc):\ncd /c && g++ -O3 -o x.so x.cc\ncannot run g++: not found in PATH",
     "RuntimeError: kernel compilation failed (kept /c/0.cc): cannot run g++: not found in PATH"),
])
def test_a_compiler_failure_is_reported_with_its_cause(text, short):
    """Without g++ on PATH the one-line WARNING ended at 'kernel compilation failed (...):' -- the cause, which says
    no 'error', was only at DEBUG (found by a break-it pass). Without an error line, the output's last line."""
    assert _dynamo._short_reason(RuntimeError(text)) == short
