"""Smoke test of the benchmark harness (python -m thunder.benchmarks): one tiny workload, eager and
thunder, through the harness's API. No timing assertions: only that it produces complete rows."""
import json
import os
import subprocess
import sys

import thunder.benchmarks as bench
from thunder.executors import executor_sets


def test_one_tiny_workload_produces_rows(tmp_path):
    first_set = next(iter(executor_sets()))
    contender = f"thunder[{first_set}]"
    out = tmp_path / "bench.json"
    report = bench.run_suite(only="^overhead/add_2x2$", quick=True, lightning=False,
                             contender_pattern="^" + contender.replace("[", r"\[").replace("]", r"\]") + "$",
                             bandwidth=False, json_path=out, log=lambda msg: None, print_table=False)
    rows = {r["contender"]: r for r in report["rows"]}
    assert set(rows) == {"eager", contender}
    for r in rows.values():
        assert r["workload"] == "overhead/add_2x2" and r["error"] is None, r
        assert r["median_s"] > 0 and r["p25_s"] <= r["median_s"] <= r["p75_s"] and r["first_call_s"] > 0
        assert r["reps"] >= 3 and r["peak_mem_bytes"] is not None
    assert rows[contender]["speedup"] > 0 and not rows[contender]["mismatch"]
    assert json.loads(out.read_text())["rows"][0]["workload"] == "overhead/add_2x2"
    table = bench.format_table(report)
    assert "overhead/add_2x2" in table and contender in table


def test_workload_definitions_do_not_need_this_thunder():
    """The lightning-thunder runner loads workloads.py and measure.py by path where `thunder` is another package."""
    here = os.path.join(os.path.dirname(bench.__file__))
    code = ("import sys, importlib.util\nsys.modules['thunder'] = None  # any import of thunder fails\n"
            "for name in ('measure', 'workloads'):\n"
            f"    spec = importlib.util.spec_from_file_location('_b_' + name, {here!r} + '/' + name + '.py')\n"
            "    m = importlib.util.module_from_spec(spec); sys.modules[spec.name] = m; spec.loader.exec_module(m)\n"
            "print(len(m.all_workloads()))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert int(p.stdout.strip()) > 20
