"""thunder's benchmark suite: ``python -m thunder.benchmarks`` (see docs/benchmarks.md).

    from thunder.benchmarks import run_suite
    report = run_suite(only="kernel/softmax", quick=True, lightning=False)
    report["rows"]       # one dict per workload and contender: median_s, p25_s, p75_s, first_call_s, ...

Modules: ``workloads`` (the programs; torch-only), ``measure`` (timing and memory; torch-only),
``harness`` (contenders, the run, table, JSON, chart), ``lightning`` (lightning-thunder in its own venv).
"""
from thunder.benchmarks.harness import contenders, format_markdown, format_table, run_suite
from thunder.benchmarks.measure import Settings
from thunder.benchmarks.workloads import all_workloads, select

__all__ = ["run_suite", "contenders", "format_table", "format_markdown", "Settings", "all_workloads", "select"]
