"""Conformance against PyTorch's OpInfo database (thunder/testing_opinfo.py).

THUNDER_OPINFO=ci (default) runs the CI subset: every sample of the native
OpInfos in float32 (default and decomposed executors), their first samples in
bfloat16/int64/bool/float64, float64 gradients and in-place variants, and one
sample of every other OpInfo. THUNDER_OPINFO=full runs every sample of every
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
