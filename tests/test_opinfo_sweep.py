"""The OpInfo sweep's worker processes: a task whose worker dies is a failure and the sweep goes on (a
multiprocessing.Pool waited forever for it)."""
import os

from thunder.testing_opinfo import Task, _sweep_in_processes


def _crashing_worker(task):
    if task.op == "crash":
        os._exit(3)  # as a segfault in an op would end the process
    return task, [task.op]


def test_a_task_whose_worker_dies_fails_and_the_others_run():
    tasks = [Task(op, "float32", "forward") for op in ("a", "b", "crash", "c", "d", "e")]
    results = {}
    _sweep_in_processes(tasks, 2, lambda task, outs: results.__setitem__(task, outs), worker=_crashing_worker)
    assert set(results) == set(tasks)
    for task, outs in results.items():
        if task.op == "crash":
            assert outs[0].status == "fail" and "worker process" in outs[0].detail
        else:
            assert outs == [task.op]
