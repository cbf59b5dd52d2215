"""thunder.examine: what thunder.jit will do, before compiling -- per op native or opaque (and why), its executor
and fusion; graph breaks; branches -- as data and as a table, leaving nothing compiled behind."""
import pytest
import torch
import torch.nn as nn

import thunder
from thunder.frontend import dynamo
from thunder.frontend.fast_path import cache_entries
from thunder.plan import NO_NATIVE_OP, GraphPlan, OpPlan, Plan


def mixed(x, y):
    a = torch.softmax(x @ y, -1) * 2
    if a.sum() > 0:
        a = a + 1
    return a + torch.special.erfcx(x), torch.cumsum(x, 0)


def with_break(x):
    y = x.sin()
    torch.nonzero(y)  # a dynamic-shape op: a graph break
    return y.cos()


def test_ops_executors_fusions_and_opaque_reasons():
    plan = thunder.examine(mixed, torch.randn(3, 3), torch.randn(3, 3))
    assert isinstance(plan, Plan) and plan.name == "mixed" and plan.executors == ["cpu", "torch"]
    (graph,) = plan.graphs
    assert isinstance(graph, GraphPlan) and all(isinstance(op, OpPlan) for op in graph.ops)
    by_op = {op.op: op for op in graph.ops}
    assert by_op["ltorch.matmul"].native and by_op["ltorch.matmul"].executor == "torch"
    softmax = by_op["ltorch.softmax"]
    assert softmax.executor == "cpu" and softmax.fusion.startswith("cpu_fusion") and "mixed" in softmax.source
    erfcx = by_op["torch.special.erfcx"]
    assert not erfcx.native and erfcx.executor == "torch" and erfcx.reason == NO_NATIVE_OP
    assert graph.opaque == [erfcx]
    assert {f.name for f in graph.fusions} == {op.fusion for op in graph.ops if op.fusion}
    assert all(f.executor == "cpu" and f.prims for f in graph.fusions)
    assert graph.backward is None  # nothing requires grad
    assert [status for _, status in plan.branches] == ["converted"]
    assert plan.graph_breaks == []


def test_the_summary_counts_the_opaque_ops_examine_lists():
    """print(thunder.summary(jitted)) counted only the ops whose native op declined its arguments, not those with no
    native op (erfcx here, torch.tensor in Hugging Face's KV cache): 'N ops opaque' now counts what examine lists."""
    args = torch.randn(3, 3), torch.randn(3, 3)
    plan = thunder.examine(mixed, *args)
    jitted = thunder.jit(mixed)
    jitted(*args)
    first = thunder.summary(jitted).split("graph 1")[0]
    assert f"{len(plan.graphs[0].opaque)} ops opaque" in first and len(plan.graphs[0].opaque) == 1, first


def test_the_table():
    text = str(thunder.examine(mixed, torch.randn(3, 3), torch.randn(3, 3)))
    lines = text.splitlines()
    assert lines[0].startswith("thunder.examine(mixed): 1 graph, 0 graph breaks, 1 of 1 data-dependent branches")
    assert any("torch.special.erfcx" in l and "OPAQUE" in l and NO_NATIVE_OP in l for l in lines), text
    assert any(l.split()[:2] == ["ltorch.softmax", "native"] and "cpu [cpu_fusion" in l for l in lines), text
    assert "graph breaks: none" in text and "converted to a select" in text


def test_graph_breaks_and_training():
    plan = thunder.examine(with_break, torch.randn(4, requires_grad=True))
    assert len(plan.graphs) == 2 and len(plan.graph_breaks) == 1
    assert "Dynamic shape operator" in plan.graph_breaks[0].reason
    assert all(g.backward == "thunder" and g.backward_fusions for g in plan.graphs)
    assert "graph breaks (1):" in str(plan)


def test_nothing_stays_compiled():
    def f(x):
        return (x * 2).exp()

    x = torch.randn(5)
    before = len(dynamo.GLOBAL_STATE.graphs)
    plan = thunder.examine(f, x)
    assert plan.graphs[0].ops and not plan.graphs[0].uncompiled
    assert not cache_entries(f.__code__, -1)  # the user's code holds no Dynamo entry
    assert len(dynamo.GLOBAL_STATE.graphs) == before
    assert not plan.graphs[0].traces[-1].namespace.get("cpu_fusion0")  # no kernel was generated
    jitted = thunder.jit(f)
    jitted(x)
    assert thunder.compile_stats(jitted).cache_misses == 1  # compiles afresh


def test_modules_jitted_and_torch_compiled():
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU())
    x = torch.randn(2, 4)
    expected_ops = ["ltorch.linear", "ltorch.gelu"]
    plan = thunder.examine(model, x)
    assert [op.op for op in plan.ops] == expected_ops and plan.name == "Sequential"
    assert not hasattr(model, "_thunder_state")
    only_torch = thunder.examine(thunder.jit(model, executors="torch"), x)
    assert only_torch.executors == ["torch"] and {op.executor for op in only_torch.ops} == {"torch"}
    compiled = torch.compile(model, backend="thunder")
    assert [op.op for op in thunder.examine(compiled, x).ops] == expected_ops
    with pytest.raises(LookupError):
        thunder.last_traces(compiled)  # the torch.compile result itself compiled nothing


def test_errors():
    with pytest.raises(TypeError, match="thunder.examine"):
        thunder.examine(3)
    with pytest.raises(RuntimeError):
        thunder.examine(lambda a, b: a @ b, torch.randn(2, 3), torch.randn(2, 3))
