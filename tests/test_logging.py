"""Logging like a library: the "thunder" logger propagates to Python's logging (its level set by
thunder.set_log_level, the handlers the application's); INFO names each graph compiled, each graph break and each
converted branch; DEBUG adds passes and timings but not whole kernel sources (TRACE does); set_log_file keeps
working; thunder prints to stderr itself only when the application configured no logging."""
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import thunder
from thunder.core.options import LogLevel


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=1)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def messages(self, level=None):
        return [r.getMessage() for r in self.records if level is None or r.levelno == level]


@pytest.fixture
def app_log(restore_logging):
    """A handler the application put on the root logger (thunder's records reach it by propagation)."""
    handler = Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)


def with_break(x):
    y = x.exp()
    print("a graph break")
    return y * 2


def with_branch(x):
    y = x.sin()
    if y.sum() > 0:
        y = y * 2
    return y + 1


def gelu_sum(a, b):
    return torch.nn.functional.gelu(a @ b + 1.0).sum(dim=-1)


def test_records_propagate_to_the_applications_handlers(app_log):
    assert thunder.core.log.logger.propagate
    thunder.set_log_level(LogLevel.INFO)
    thunder.jit(gelu_sum)(torch.randn(4, 8), torch.randn(8, 2))
    info = [r for r in app_log.records if r.name == "thunder" and r.levelno == logging.INFO]
    assert any("compiled graph 0 of gelu_sum" in r.getMessage() for r in info), app_log.messages()


def test_set_log_level_decides_what_reaches_the_application(app_log):
    thunder.set_log_level(LogLevel.WARNING)
    thunder.jit(gelu_sum)(torch.randn(4, 8), torch.randn(8, 2))
    assert not [r for r in app_log.records if r.name == "thunder"]


def test_info_names_graphs_graph_breaks_and_converted_branches(app_log):
    thunder.set_log_level(LogLevel.INFO)
    thunder.jit(with_break)(torch.randn(3))
    thunder.jit(with_branch)(torch.randn(3))
    info = "\n".join(app_log.messages(logging.INFO))
    assert "compiled graph 0 of with_break" in info and "compiled graph 1 of with_break" in info
    assert "graph break in with_break at" in info and 'print("a graph break")' in info
    assert "the branch at test_logging.py:" in info and "(if y.sum() > 0:) is converted to a select" in info
    assert "ms:" in info and "fusions" in info  # what each graph became, and its time
    assert "took" not in info  # pass timings are DEBUG


def test_graph_breaks_are_heard_after_torch_logging_is_set():
    # torch._logging.set_logs (or TORCH_LOGS) resets the level of the log thunder reads graph breaks from: a frame
    # Dynamo skipped was then reported as one where nothing ran, with a wrong fix.
    def loop(x):
        for _ in range(2):
            if x.sum().item() > 100:
                x = x * 3
            x = x * 0.5
        return x

    torch._logging.set_logs(recompiles=True)
    try:
        jitted = thunder.jit(loop)
        x = torch.randn(4)
        torch.testing.assert_close(jitted(x), loop(x))
    finally:
        torch._logging.set_logs()
    stopped = thunder.compile_stats(jitted).dynamo_stopped
    assert "item()" in stopped and "no tensor op ran" not in stopped, stopped


def test_debug_adds_passes_and_timings_not_kernel_sources(app_log):
    thunder.set_log_level(LogLevel.DEBUG)
    thunder.jit(gelu_sum)(torch.randn(4, 8), torch.randn(8, 2))
    debug = "\n".join(app_log.messages(logging.DEBUG))
    assert "Dead-code elimination (took" in debug and "Fusion (took" in debug
    assert any(s in debug for s in ("compiled cpu kernels in", "loaded from the cache", "already loaded"))
    assert "cpu kernel source" not in debug and 'extern "C"' not in debug
    assert "def computation" not in debug  # whole traces are TRACE too


def test_trace_adds_kernel_sources_and_traces(app_log):
    thunder.set_log_level(LogLevel.TRACE)
    thunder.jit(gelu_sum)(torch.randn(4, 8), torch.randn(8, 2))
    trace = "\n".join(app_log.messages(thunder.core.options.TRACE_LEVEL))
    assert "cpu kernel source" in trace and "def computation" in trace


def test_log_file_keeps_working_alongside_propagation(tmp_path, app_log):
    path = tmp_path / "thunder.log"
    thunder.set_log_file(path)
    thunder.set_log_level(LogLevel.INFO)
    thunder.jit(gelu_sum)(torch.randn(4, 8), torch.randn(8, 2))
    thunder.set_log_file(None)
    assert "compiled graph 0 of gelu_sum" in path.read_text()
    assert any("compiled graph 0 of gelu_sum" in m for m in app_log.messages())  # and the application got it


SCRIPT = textwrap.dedent("""
    import logging, sys, torch, thunder
    if sys.argv[1] == "configured":
        logging.basicConfig(level=logging.INFO, format="APP %(name)s: %(message)s", stream=sys.stderr)
    if sys.argv[1] == "on_thunder":  # a handler on thunder's logger only (the guide's recipe), the root's none
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("APP %(name)s: %(message)s"))
        logging.getLogger("thunder").addHandler(handler)
    thunder.set_log_level(thunder.LogLevel.INFO)
    thunder.jit(lambda x: x * 2 + 1)(torch.randn(3))
""")


@pytest.mark.parametrize("mode", ["unconfigured", "configured", "on_thunder"])
def test_stderr_output_without_and_with_the_applications_logging(tmp_path, mode):
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    result = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stderr.splitlines() if "compiled graph 0" in l]
    if mode == "unconfigured":  # thunder prints its records itself
        assert len(lines) == 1 and lines[0].startswith("[thunder INFO] thunder: compiled graph 0"), result.stderr
    else:  # the application's handler prints them, once
        assert len(lines) == 1 and lines[0].startswith("APP thunder: thunder: compiled graph 0"), result.stderr


def test_an_ops_warning_is_not_repeated_by_thunders_probe():
    # The importer runs some torch calls once more on fake tensors to see what they dispatch; the warnings of that
    # run (dropout2d's "Received a 3D input") reached the user once more, from thunder's own file.
    import warnings

    def f(x):
        return torch.nn.functional.dropout2d(x, 0.5, training=False) * 2

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thunder.jit(f)(torch.randn(1, 4, 5))
    assert not [w for w in caught if "thunder/frontend/" in w.filename], [(w.filename, w.lineno) for w in caught]
