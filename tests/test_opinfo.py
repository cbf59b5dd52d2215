"""Conformance against PyTorch's OpInfo database (thunder/testing_opinfo.py).

THUNDER_OPINFO=ci (default) runs the CI subset: every sample of the native
OpInfos in float32 (default and decomposed executors), their first samples in
bfloat16/int64/bool/float64, float64 gradients, in-place variants and the first
samples through thunder.jit(dynamic=True), and one sample of every other OpInfo. THUNDER_OPINFO=full runs every sample of every
supported dtype (see README, "Conformance against PyTorch's OpInfos").
"""
import pytest

from thunder import testing_opinfo as T

_TASKS = T.tasks()


@pytest.mark.parametrize("task", _TASKS, ids=[t.id for t in _TASKS])
def test_opinfo(task):
    outcomes = T.run_task(task)
    problems = T.failures_of(task, outcomes)
    assert not problems, f"{task.id}: {len(problems)} of {len(outcomes)} samples fail:\n" + "\n".join(problems[:10])


def test_every_opinfo_is_run():
    """Each OpInfo of op_db with a dtype thunder supports is exercised by the selected tasks."""
    ran = {t.op for t in _TASKS}
    missing = [op_id for op_id, op in T.op_db().items() if op.supported_dtypes("cpu") and op_id not in ran]
    assert not missing, f"OpInfos never run: {missing}"


def test_native_opinfos_exist():
    unknown = sorted(T.NATIVE_OPINFOS - set(T.op_db()))
    assert not unknown, f"NATIVE_OPINFOS names OpInfos op_db lacks: {unknown}"


def test_documented_skips_name_real_opinfos_and_reasons():
    for (op_id, dtype, check), reason in T.SKIPS.items():
        assert op_id in T.op_db(), op_id
        assert dtype == "*" or dtype in T.DTYPE_NAMES.values(), dtype
        assert check == "*" or check in T.CHECKS, check
        assert len(reason) > 20, f"{op_id}: a skip needs a reason naming the PyTorch behaviour"


def test_grad_check_records_thunders_backward_and_rules():
    """The float64 gradient check says who differentiated each sample and by which VJP rules; a view op is
    differentiated (followed by a copy of its outputs) by thunder's autodiff too."""
    for op_id, rule in (("nn.functional.conv2d", {"ltorch.conv2d": "generic"}), ("sin", {"ltorch.sin": "decomposition"}),
                        ("nn.functional.relu", {"ltorch.relu": "own"}), ("transpose", {"ltorch.transpose": "decomposition"})):
        (o,) = T.run_task(T.Task(op_id, "float64", "grad", 1))
        assert o.status == "pass", (op_id, o.detail)
        assert o.backward == ["thunder"], (op_id, o.backward)
        assert o.vjp == rule, (op_id, o.vjp)


def test_a_native_gradient_by_torchs_autograd_fails(monkeypatch):
    import thunder.core.compile as compile_

    monkeypatch.setattr(compile_, "_autodiff_held_back", lambda trace, *rest: "held back by the test")
    task = T.Task("sin", "float64", "grad", 1)
    problems = T.failures_of(task, T.run_task(task))
    assert problems and "torch (held back by the test)" in problems[0]


def test_report_columns_and_cells_carried_from_an_earlier_report(tmp_path):
    def grad(op, rule, backward=("thunder",), status="pass"):
        o = T.Outcome(op, "float64", "grad", 0, status, path="native", backward=list(backward),
                      vjp={f"ltorch.{op}": rule} if rule else {}, native_ops=[op],
                      detail="" if status == "pass" else "the gradient was not thunder's")
        return {T.Task(op, "float64", "grad"): [o]}

    first = tmp_path / "first.md"
    T.report({**grad("sin", "decomposition"), **grad("relu", "own")}, first, "cmd", 1.0)
    old = T.load_report(first)
    assert old["rows"]["sin"]["grad"] == "1/1" and old["rows"]["sin"]["VJP"] == "decomposition 1/1"
    assert old["native_opinfos"]["sin"] == {"sin"}
    second = tmp_path / "second.md"
    T.report(grad("sin", "", backward=["torch (held back)"], status="fail"), second, "cmd", 1.0, carried=old)
    new = T.load_report(second)
    assert new["rows"]["sin"]["grad"] == "0/1!" and new["rows"]["sin"]["VJP"] == "none 0/1"
    assert new["rows"]["relu"]["VJP"] == "own 1/1"  # carried
    assert any("sin" in line and "not thunder's" in line for line in new["failures"])
    assert any(line.startswith("- previous report") for line in new["summary"])
