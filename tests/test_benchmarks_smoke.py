"""Smoke test of the benchmark harness (python -m thunder.benchmarks): one tiny workload, eager and
thunder, through the harness's API. No timing assertions: only that it produces complete rows."""
import json
import os
import subprocess
import sys

import pytest

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


def test_shapes_benchmark_runs_and_reports_every_row(tmp_path):
    """python -m thunder.benchmarks.shapes --quick, one tiny model, eager and thunder (Inductor's cold compiles
    alone take ~35 s here): the sweep and generate rows and the targets."""
    pytest.importorskip("transformers")
    from thunder.benchmarks import shapes

    out = tmp_path / "shapes.json"
    report = shapes.run(quick=True, models=["gpt2"], json_path=out, contenders=("eager", "thunder"), log=lambda msg: None)
    sweep, gen = report["sweep"]["gpt2"], report["generate"]["gpt2"]
    assert set(sweep["contenders"]) == set(gen) == {"eager", "thunder"}
    for name, row in sweep["contenders"].items():
        assert row["total_s"] > 0 and len(row["steady_s"]) == len(sweep["lengths"]) == 2, name
        assert row["max_rel_err"] < 1e-3, (name, row["max_rel_err"])
    assert len(sweep["static_best_cpu_s"]) == len(sweep["thunder_best_cpu_s"]) == 2
    assert all(r["tokens_match"] and r["first_s"] > 0 for r in gen.values()), gen
    assert sweep["contenders"]["thunder"]["breakdown"]["eager_calls"] == 0
    assert [g[1] for g in sweep["static_graphs"]] == [0, 0]  # the reference is static: no symbolic graph
    assert json.loads(out.read_text())["meta"]["quick"] is True
    table = shapes.format_markdown(report)
    for needle in ("| gpt2 | eager |", "| gpt2 | thunder |", "gpt2 sweep", "gpt2 generate", "steady state per token"):
        assert needle in table, needle


@pytest.mark.parametrize("args,message", [
    (["--only", "["], "argument --only: not a regular expression"),
    (["--contenders", "(thunder"], "argument --contenders: not a regular expression"),
    (["--device", "tpu"], "argument --device: invalid choice"),
    (["--threads", "-3"], "argument --threads: expected a number of threads"),
] + ([] if __import__("torch").cuda.is_available() else [(["--device", "cuda"], "sees no CUDA device")]))
def test_bad_arguments_are_usage_errors_naming_the_argument(args, message, capsys):
    """They died with a traceback (re.error, torch's AssertionError for cuda on a CPU build, set_num_threads')."""
    from thunder.benchmarks.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--list"])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
