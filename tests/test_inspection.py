"""Inspection and logging: print(jitted), _get_executors(), compile_stats,
last_traces, log levels and the log file."""
import dataclasses

import pytest
import torch
import torch.nn as nn

import thunder
from thunder.core.options import LogLevel
from conftest import capture_thunder_log


def fn(x, y):
    return torch.softmax(x @ y, -1) * 2 + torch.cumsum(x, 0).sum()


def args():
    return torch.randn(3, 3), torch.randn(3, 3)


def test_print_mentions_executors_graphs_and_calls():
    jitted = thunder.jit(fn)
    jitted(*args())
    jitted(*args())
    report = str(jitted)
    assert report == repr(jitted)
    assert report.startswith("thunder.jit(fn): 2 calls, 1 graphs compiled, cache 1 hits / 1 misses")
    names = [e.name for e in jitted._get_executors()]
    assert "executors: " + ", ".join(names) in report
    assert "graph 0: compiled in" in report and "called 2 times" in report
    assert "def computation(" in report  # the final trace
    assert "torch.cumsum(" in report


def test_print_before_any_call():
    jitted = thunder.jit(fn)
    report = str(jitted)
    assert "0 calls" in report and "executors:" in report
    with pytest.raises(LookupError):
        thunder.last_traces(jitted)


def test_get_executors():
    jitted = thunder.jit(fn)
    executors = jitted._get_executors()
    assert executors and all(isinstance(e, thunder.executors.Executor) for e in executors)
    assert [e.name for e in executors] == [e.name for e in thunder.executors.default_executors()]
    assert executors[-1].name == "torch"  # torch claims everything, so it comes last
    from thunder.executors.torchex import torch_executor

    only_torch = thunder.jit(fn, executors=[torch_executor])
    assert [e.name for e in only_torch._get_executors()] == ["torch"]
    only_torch(*args())
    assert "executors torch" in str(only_torch)
    # A copy: changing it does not change the jitted function.
    only_torch._get_executors().clear()
    assert only_torch._get_executors()


def test_module_print_and_executors():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    jitted = thunder.jit(model)
    jitted(torch.randn(2, 3))
    assert thunder.summary(jitted).startswith("thunder.jit(Sequential): 1 calls")
    # print(jitted module): the module tree, then one summary line
    assert str(jitted) == repr(jitted) == repr(model) + "\n" + thunder.summary(jitted).splitlines()[0] + \
        ", 0 graph breaks; print(thunder.summary(...)) for the traces"
    assert jitted._get_executors()


def test_compile_stats_fields():
    jitted = thunder.jit(fn)
    jitted(*args())
    jitted(*args())
    jitted(torch.randn(4, 4), torch.randn(4, 4))
    stats = thunder.compile_stats(jitted)
    assert isinstance(stats, thunder.CompileStats)
    fields = {f.name for f in dataclasses.fields(stats)}
    assert {"calls", "cache_hits", "cache_misses", "graphs", "graph_breaks"} <= fields
    assert (stats.calls, stats.cache_hits, stats.cache_misses) == (3, 1, 2)
    assert stats.graph_breaks == []
    assert len(stats.graphs) == 2
    for i, g in enumerate(stats.graphs):
        assert g["index"] == i and g["compiled"] is True and g["compile_seconds"] > 0
        assert set(g["pass_seconds"]) == set(thunder.core.options.DEFAULT_PASSES)
    assert [g["calls"] for g in stats.graphs] == [2, 1]


def test_stage_seconds_cover_every_stage_of_a_training_program():
    """The unit of compilation is a program: its every stage -- the joint passes, the autodiff and the
    rematerialization, each trace's passes, codegen and compile -- is timed, in the order it ran."""
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.LayerNorm(4))
    jitted = thunder.jit(model)
    jitted(torch.randn(2, 4)).sum().backward()
    g = thunder.compile_stats(jitted).graphs[0]
    stages = list(g["stage_seconds"])
    assert g["backward"] == "thunder"
    assert stages[0] == "import"
    for stage in ("autodiff", "rematerialization", "fusion", "backward fusion", "backward cpu codegen",
                  "backward cpu compile", "cpu codegen", "cpu compile", "python"):
        assert stage in stages, stages
    assert stages.index("autodiff") < stages.index("rematerialization") < stages.index("backward cpu codegen")
    assert stages[-1] == "python"
    assert all(s >= 0 for s in g["stage_seconds"].values())
    assert sum(g["stage_seconds"].values()) <= g["compile_seconds"]
    assert set(g["pass_seconds"]) < set(stages)


def test_last_traces_names_and_provenance():
    jitted = thunder.jit(fn)
    jitted(*args())
    traces = thunder.last_traces(jitted)
    assert [t.name for t in traces[1:]] == list(thunder.core.options.DEFAULT_PASSES)
    assert all(t.provenance for t in traces[1:])
    assert "Imported" in repr(traces[0]) or traces[0].name.startswith("Imported")


def test_debug_log_file_mentions_passes(tmp_path, restore_logging):
    path = tmp_path / "x.log"
    thunder.set_log_level(LogLevel.DEBUG)
    thunder.set_log_file(path)
    jitted = thunder.jit(fn)
    jitted(*args())
    thunder.set_log_file(None)
    text = path.read_text()
    lines = text.splitlines()
    assert lines, "nothing was logged"
    assert "compiled graph 0" in text
    for p in thunder.core.options.DEFAULT_PASSES:
        name = {"cse": "Common-subexpression elimination", "constant_folding": "Constant folding",
                "dce": "Dead-code elimination", "claim": "Executor claiming"}.get(p, "")
        assert any(name in l for l in lines) if name else True, f"no line for pass {p}"
    assert "took" in text  # pass times
    assert "def computation" not in text  # traces are TRACE level, not DEBUG


def test_trace_level_writes_traces(tmp_path, restore_logging):
    path = tmp_path / "trace.log"
    thunder.set_log_level(LogLevel.TRACE)
    thunder.set_log_file(path)
    jitted = thunder.jit(fn)
    jitted(*args())
    thunder.set_log_file(None)
    text = path.read_text()
    assert "def computation" in text
    assert text.count("def computation") >= len(thunder.core.options.DEFAULT_PASSES)
    assert "TRACE" in text


def test_info_level_reports_graphs_only(tmp_path, restore_logging):
    path = tmp_path / "info.log"
    thunder.set_log_level(LogLevel.INFO)
    thunder.set_log_file(path)
    thunder.jit(fn)(*args())
    thunder.set_log_file(None)
    text = path.read_text()
    assert "compiled graph 0" in text
    assert "Dead-code elimination" not in text


def test_default_level_is_quiet():
    with capture_thunder_log() as messages:
        thunder.jit(fn)(*args())
    assert thunder.core.log.logger.level == LogLevel.WARNING
    assert not messages


def test_log_file_appends_and_can_be_switched(tmp_path, restore_logging):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    thunder.set_log_level(LogLevel.INFO)
    thunder.set_log_file(a)
    thunder.jit(lambda x: x + 1)(torch.randn(2))
    thunder.set_log_file(b)
    thunder.jit(lambda x: x + 2)(torch.randn(2))
    thunder.set_log_file(None)
    thunder.jit(lambda x: x + 3)(torch.randn(2))
    assert a.read_text().count("compiled graph") == 1
    assert b.read_text().count("compiled graph") == 1


def test_set_log_level_rejects_other_types(restore_logging):
    with pytest.raises(TypeError):
        thunder.set_log_level("debug")


def test_opaque_fallbacks_are_logged_at_debug(restore_logging):
    thunder.set_log_level(LogLevel.DEBUG)
    with capture_thunder_log() as messages:
        thunder.jit(lambda x: torch.nn.functional.dropout(x, 0.5, training=True))(torch.randn(4))
    assert any("opaque" in m for m in messages), messages


def test_module_print_counts_graph_breaks_and_converted_branches():
    class Activation(nn.Module):
        def forward(self, x):
            for i in range(x.shape[1]):
                if x[0, i] > 0.5:
                    x[0, i] = torch.sin(x[0, i])
                else:
                    x[0, i] = torch.cos(x[0, i])
            return x

    jitted = thunder.jit(Activation())
    with torch.no_grad():
        jitted(torch.randn(1, 4))
    assert repr(jitted).splitlines()[-1].endswith(
        ", 0 graph breaks, 1 of 1 data-dependent branch converted to selects; print(thunder.summary(...)) for the traces")
