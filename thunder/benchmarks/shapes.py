"""Changing shapes: a length sweep through one model and greedy ``generate``, eager vs Inductor vs thunder.

``python -m thunder.benchmarks.shapes [--quick] [--json FILE] [--markdown FILE]`` measures issue 15's targets on the
CPU with one torch thread (``torch.set_num_threads(1)``), the three contenders side by side in one process
(``torch._dynamo.reset()`` between them, each compiler with a fresh, empty on-disk cache, so every compile is cold):

``eager``     the model itself;
``inductor``  ``torch.compile`` with its default settings (backend Inductor, ``dynamic=None``);
``thunder``   ``thunder.jit`` with its default settings (``dynamic=None``: static shapes first, then one trace with
              symbolic sizes, its sizes bound per new shape);
``thunder-dynamic``  ``thunder.jit(..., dynamic=True)``: symbolic sizes from the first call, so Dynamo traces the
              model once (not in the default set: ``--contenders eager,thunder,thunder-dynamic``).

Length sweep (per model): input ids of shape (1, L) for L = 8, 16, ..., 128, three calls at each length through
one compiled object, under ``torch.no_grad()``. Reported: the total wall time of all calls, compiles included;
the first call at each length; the third call at each length (the issue's "steady state"). Targets: thunder's total
<= 1/10 of what it was when the issue was filed (1.2-2.9 s per length then, so about 3 s for 16 lengths), and its
steady state within 10% of a statically compiled call at every length: ``thunder.jit(model, dynamic=False)``
compiled and warmed for that one length. Because a single call is noisy on a shared machine, the comparison with the
static call alternates the two, 40 calls each per length, and takes the best CPU time of each
(``time.process_time``, which a descheduled process does not accumulate); the third call of the sweep is reported
too. For thunder it also reports where the time of a
new shape goes: the bind of the symbolic trace's sizes (stage ``"bind sizes"``), the passes (run once per symbolic
graph, ``compile_stats(j).graphs[i]["pass_seconds"]``) and the rest of ``compile_seconds`` (kernel lowering: generating
and compiling kernels, making the program), and whether any specialization was traced again (``"retraced"``).

Generate (per model): ``model.generate`` of 100 new tokens, greedy (``do_sample=False``, ``min_new_tokens=100``),
from a prompt of 8 tokens, the jitted object being ``model.forward`` (as in tests/test_symbolic_shapes.py) --
``torch.compile(model.forward)``, ``thunder.jit(model.forward)``. Reported: the first ``generate`` (end to end,
compiles included) and the steady state per token: the best of 4 later ``generate`` runs, divided by 100, each
run alternating with an eager ``generate`` of a copy of the model, the reference for the speedup (the ratio of
the best CPU times; wall times are reported too).
Targets: thunder's first ``generate`` faster than eager's and Inductor's; its steady state per token >= 1.2x eager.
Every contender's tokens are checked against eager's.

Models: ``thunder.benchmarks.workloads.gpt2()`` and ``llama()`` (Hugging Face, random weights, 4 layers, hidden 256,
vocabulary 1024, 128 positions). ``--quick`` runs tiny versions (2 layers, hidden 64), two lengths, 10 tokens:
only to check that everything runs (tests/test_benchmarks_smoke.py).

Timings on a shared machine are noisy; the first calls (compiles) especially, as they are single events.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

from thunder.benchmarks import workloads as W

CONTENDERS = ("eager", "inductor", "thunder")
OPTIONAL_CONTENDERS = ("thunder-dynamic",)  # run when named in --contenders
SWEEP_BAR_S = 3.0                  # the sweep's bar for 16 lengths: 1/10 of 16 x 1.2-2.9 s (each length's compile
                                   # when issue 15 was filed), about 3 s
STATIC_TOLERANCE = 1.10            # the steady state within 10% of a static compile
GENERATE_STEADY_TARGET = 1.2       # steady-state tokens/s >= 1.2x eager


def _models(quick):
    if quick:
        return {"gpt2": lambda: W.gpt2(layers=2, hidden=64, heads=4, vocab=128, positions=64),
                "llama": lambda: W.llama(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=128,
                                         positions=64)}
    return {"gpt2": W.gpt2, "llama": W.llama}


def _build(factory):
    torch.manual_seed(0)
    return factory()


@contextlib.contextmanager
def _fresh_caches():
    """Empty on-disk caches for Inductor and thunder's kernels for the duration (so compiles are cold)."""
    names = ("TORCHINDUCTOR_CACHE_DIR", "THUNDER_CACHE_DIR")
    old = {n: os.environ.get(n) for n in names}
    dirs = [tempfile.mkdtemp(prefix=f"thunder-shapes-{n.split('_')[0].lower()}-") for n in names]
    for n, d in zip(names, dirs):
        os.environ[n] = d
    try:
        yield
    finally:
        for n, v in old.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def _raised_recompile_limits(limit=256):
    """Dynamo's recompile limits raised, so no contender falls back to eager by hitting them."""
    cfg = torch._dynamo.config
    old = {a: getattr(cfg, a) for a in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                                        "accumulated_cache_size_limit") if hasattr(cfg, a)}
    for a, v in old.items():
        with contextlib.suppress(Exception):
            setattr(cfg, a, max(v, limit))
    try:
        yield
    finally:
        for a, v in old.items():
            with contextlib.suppress(Exception):
                setattr(cfg, a, v)


class _ImportTimer:
    """Times the import of a graph with symbolic sizes (``thunder.frontend.dynamo._import_symbolic``) while
    active."""

    def __init__(self):
        self.import_seconds = []

    @contextlib.contextmanager
    def active(self):
        from thunder.frontend import dynamo

        original_import = dynamo._import_symbolic
        timer = self

        def import_symbolic(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original_import(*args, **kwargs)
            finally:
                timer.import_seconds.append(time.perf_counter() - t0)
        dynamo._import_symbolic = import_symbolic
        try:
            yield self
        finally:
            dynamo._import_symbolic = original_import


def _compile(name, target, dynamic=None):
    if name == "eager":
        return target
    if name == "inductor":
        return torch.compile(target)
    import thunder
    if name == "thunder-dynamic":
        dynamic = True
    return thunder.jit(target) if dynamic is None else thunder.jit(target, dynamic=dynamic)


def _timed(fn, *args):
    """(result, wall seconds, CPU seconds) of one call."""
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0, time.process_time() - c0


def _ids(length, vocab, seed):
    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(seed))


def _rel_err(a, b):
    scale = b.abs().max().item() or 1.0
    return (a - b).abs().max().item() / scale


def _thunder_breakdown(jitted, timer):
    """Where thunder's compile time went: per graph kind, compile seconds, passes, lowering, bind."""
    import thunder

    stats = thunder.compile_stats(jitted)
    graphs = [g for g in stats.graphs if g["compiled"]]
    bound = [g for g in graphs if g["symbolic"] is not None]
    static = [g for g in graphs if g["symbolic"] is None]

    def summary(gs):
        passes = {}
        for g in gs:
            for k, v in g["pass_seconds"].items():
                passes[k] = passes.get(k, 0.0) + v
        compile_s = sum(g["compile_seconds"] for g in gs)
        pass_s = sum(passes.values())
        return {"graphs": len(gs), "compile_s": compile_s, "passes_s": pass_s, "lowering_s": compile_s - pass_s,
                "pass_seconds": dict(sorted(passes.items(), key=lambda kv: -kv[1]))}

    return {"dynamo_graphs": stats.dynamo_graphs, "symbolic_graphs": stats.symbolic_graphs,
            "graphs": len(stats.graphs), "uncompiled": len(stats.graphs) - len(graphs),
            "eager_calls": stats.eager_calls, "calls": stats.calls,
            "retraced": sorted({g["retraced"] for g in bound if g["retraced"]}),
            "retraced_graphs": sum(1 for g in bound if g["retraced"]),
            "static": summary(static), "bound": summary(bound),
            "bind_s": sum(g["stage_seconds"].get("bind sizes", 0.0) for g in bound), "binds": len(bound),
            "symbolic_import_s": sum(timer.import_seconds), "symbolic_imports": len(timer.import_seconds),
            "per_graph": [{"index": g["index"], "symbolic": g["symbolic"], "shapes": str(g["shapes"]),
                           "compile_s": g["compile_seconds"], "passes_s": sum(g["pass_seconds"].values()),
                           "retraced": g["retraced"]} for g in graphs]}


def length_sweep(factory, lengths, calls=3, reps=40, static=True, contenders=CONTENDERS, log=print):
    """Runs the length sweep of one model under each contender; returns a dict of results.

    Args:
        factory: builds the model (same seed each time, so every contender runs the same weights).
        lengths: sequence lengths, in the order they are called.
        calls: calls per length (the last one is the sweep's steady state).
        reps: calls per length of thunder's dynamic and static objects for the best-of comparison.
        static: also compile ``thunder.jit(model, dynamic=False)`` per length (the steady-state reference).
        contenders: names among ``CONTENDERS``.
    Returns:
        ``{"lengths", "contenders": {name: {"total_s", "first_call_s", "steady_s", "max_rel_err", ...}},
        "thunder_best_cpu_s", "static_best_cpu_s", "static_third_s", "breakdown"}``.
    """
    model = _build(factory)
    vocab = model.config.vocab_size
    inputs = {n: _ids(n, vocab, n) for n in lengths}
    with torch.no_grad():
        expected = {n: model(inputs[n]).logits for n in lengths}
    out = {"lengths": list(lengths), "calls": calls, "contenders": {}}
    for name in contenders:
        torch._dynamo.reset()
        timer = _ImportTimer()
        with _fresh_caches(), timer.active(), torch.no_grad():
            fn = _compile(name, model)
            first, steady, steady_cpu, total, err = [], [], [], 0.0, 0.0
            for n in lengths:
                for k in range(calls):
                    res, wall, cpu = _timed(fn, inputs[n])
                    total += wall
                    if k == 0:
                        first.append(wall)
                err = max(err, _rel_err(res.logits, expected[n]))
                steady.append(wall)
                steady_cpu.append(cpu)
            row = {"total_s": total, "first_call_s": first, "steady_s": steady, "steady_cpu_s": steady_cpu,
                   "max_rel_err": err}
            if name == "thunder":
                row["breakdown"] = _thunder_breakdown(fn, timer)
            out["contenders"][name] = row
            log(f"  {name}: total {total:.2f} s, max rel err {err:.1e}")
            if name == "thunder" and static:
                # The steady state against thunder.jit(model, dynamic=False) compiled for each length: the two
                # called alternately (so both see the same load), best CPU time of `reps` calls of each. No Dynamo
                # reset here (it would drop the dynamic object's graphs): each static wrapper adds cache entries
                # to the model's code, which calls by other wrappers skip at their first guard.
                best, static_best, third, static_graphs = [], [], [], []
                for n in lengths:
                    sfn = _compile("thunder", model, dynamic=False)
                    for _ in range(calls):
                        _, wall, _ = _timed(sfn, inputs[n])
                    third.append(wall)
                    _timed(fn, inputs[n])  # the dynamic object's graph for this shape, compiled if it has none
                    d, st = [], []
                    for _ in range(reps):
                        d.append(_timed(fn, inputs[n])[2])
                        st.append(_timed(sfn, inputs[n])[2])
                    best.append(min(d))
                    static_best.append(min(st))
                    import thunder
                    st_stats = thunder.compile_stats(sfn)
                    static_graphs.append((st_stats.dynamo_graphs, st_stats.symbolic_graphs, st_stats.eager_calls))
                    del sfn
                out["thunder_best_cpu_s"], out["static_best_cpu_s"], out["static_third_s"] = best, static_best, third
                out["static_graphs"] = static_graphs  # per length: Dynamo graphs, symbolic ones (0), eager calls
                log(f"  thunder static: {len(lengths)} lengths compiled")
        del fn
    torch._dynamo.reset()
    return out


def generate_bench(factory, new_tokens=100, prompt=8, runs=5, contenders=CONTENDERS, log=print):
    """``model.generate`` of ``new_tokens`` greedy tokens with ``model.forward`` compiled, per contender.

    The first ``generate`` of each contender is timed alone (compiles included); then ``runs - 1`` more, each
    alternating with an eager ``generate`` of a second copy of the model (same weights), so the steady state and
    its eager reference see the same load (a model of ~14 MB of weights per token is memory-bound, and the
    machine's other load moves it by 2x between minutes).

    Returns ``{name: {"first_s", "steady_s", "per_token_s", "eager_steady_s", "speedup", "runs_s",
    "tokens_match", ...}}``: ``steady_s`` is the best of the later runs (wall), ``eager_steady_s`` the best of the
    eager runs interleaved with them; ``speedup`` is the ratio of the two's best CPU times (``steady_cpu_s``,
    ``eager_steady_cpu_s``: with one thread, the time the process ran), ``speedup_wall`` that of the wall times.
    """
    model, reference = _build(factory), _build(factory)
    ids = torch.randint(1, model.config.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(1))
    options = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)

    def timed_generate(m, cpu=None):
        c0, t0 = time.process_time(), time.perf_counter()
        tokens = m.generate(ids, **options)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
        return tokens, time.perf_counter() - t0

    out = {}
    with torch.no_grad():
        expected, _ = timed_generate(reference)
    for name in contenders:
        torch._dynamo.reset()
        timer = _ImportTimer()
        with _fresh_caches(), timer.active(), torch.no_grad():
            if name != "eager":
                model.forward = _compile(name, model.forward)
            try:
                tokens, first = timed_generate(model)
                times, eager_times, cpu, eager_cpu = [first], [], [], []
                for _ in range(runs - 1):
                    eager_times.append(timed_generate(reference, eager_cpu)[1])
                    tokens, seconds = timed_generate(model, cpu)
                    times.append(seconds)
                steady, eager_steady = min(times[1:]), min(eager_times)
                row = {"first_s": first, "steady_s": steady, "per_token_s": steady / new_tokens, "runs_s": times,
                       "eager_steady_s": eager_steady, "eager_runs_s": eager_times,
                       "steady_cpu_s": min(cpu), "eager_steady_cpu_s": min(eager_cpu), "cpu_runs_s": cpu,
                       "eager_cpu_runs_s": eager_cpu, "speedup": min(eager_cpu) / min(cpu),
                       "speedup_wall": eager_steady / steady, "tokens_match": bool(torch.equal(tokens, expected))}
                if name == "thunder":
                    row["breakdown"] = _thunder_breakdown(model.forward, timer)
            finally:
                if name != "eager":
                    del model.forward  # the class's forward again
        out[name] = row
        log(f"  {name}: first {first:.2f} s, steady {steady * 1e3:.0f} ms (eager alongside {eager_steady * 1e3:.0f} ms), "
            f"tokens match: {row['tokens_match']}")
    torch._dynamo.reset()
    return out


def _git_commit():
    import subprocess
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except Exception:  # noqa: BLE001
        return None


def run(quick=False, models=None, json_path=None, threads=1, contenders=CONTENDERS, parts=("sweep", "generate"),
        log=print):
    """Runs the length sweep and generate for each model; returns the report (a dict; also written to
    ``json_path`` as JSON when given).

    Args:
        quick: tiny models, two lengths, 10 tokens (checks that it runs; the figures mean nothing).
        models: names among ``gpt2``, ``llama`` (default both).
        threads: torch CPU threads for the run (restored after).
        contenders: names among ``CONTENDERS`` and ``OPTIONAL_CONTENDERS`` (eager is always run: the reference).
        parts: ``"sweep"``, ``"generate"`` or both.
    """
    factories = _models(quick)
    contenders = ["eager"] + [c for c in CONTENDERS + OPTIONAL_CONTENDERS if c in contenders and c != "eager"]
    names = list(models or factories)
    lengths = [8, 16] if quick else list(range(8, 129, 8))
    new_tokens = 10 if quick else 100
    reps = 3 if quick else 40
    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads)
    report = {"meta": {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                       "commit": _git_commit(), "quick": quick, "threads": threads, "torch": torch.__version__,
                       "load_average_start": list(os.getloadavg()), "cpus": os.cpu_count(), "reps": reps,
                       "new_tokens": new_tokens},
              "sweep": {}, "generate": {}}
    t_start = time.perf_counter()
    try:
        with _raised_recompile_limits():
            for m in names if "sweep" in parts else ():
                log(f"length sweep: {m}, lengths {lengths[0]}..{lengths[-1]}")
                report["sweep"][m] = length_sweep(factories[m], lengths, reps=reps, contenders=contenders, log=log)
            for m in names if "generate" in parts else ():
                log(f"generate: {m}, {new_tokens} tokens")
                report["generate"][m] = generate_bench(factories[m], new_tokens=new_tokens,
                                                       contenders=contenders, log=log)
    finally:
        torch.set_num_threads(threads_before)
    report["meta"]["load_average_end"] = list(os.getloadavg())
    report["meta"]["seconds"] = time.perf_counter() - t_start
    report["targets"] = targets(report)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
    return report


def targets(report):
    """Issue 15's targets, each ``{"target", "value", "met"}``, from a report of :func:`run`."""
    res = []
    n_lengths = None
    for m, s in report["sweep"].items():
        c = s["contenders"]
        if "thunder" not in c:
            continue
        n_lengths = len(s["lengths"])
        bar = SWEEP_BAR_S * n_lengths / 16
        res.append({"target": f"{m} sweep: thunder total <= 1/10 of at filing (<= {bar:.2g} s for {n_lengths} lengths)",
                    "value": f"{c['thunder']['total_s']:.2f} s" + (f" (Inductor {c['inductor']['total_s']:.2f} s)"
                                                                   if "inductor" in c else ""),
                    "met": c["thunder"]["total_s"] <= bar})
        if "static_best_cpu_s" in s:
            ratios = [d / st for d, st in zip(s["thunder_best_cpu_s"], s["static_best_cpu_s"])]
            res.append({"target": f"{m} sweep: steady state within 10% of static at every length (best of reps, CPU)",
                        "value": f"worst {max(ratios):.2f}x at L={s['lengths'][ratios.index(max(ratios))]}, "
                                 f"median {statistics.median(ratios):.2f}x",
                        "met": max(ratios) <= STATIC_TOLERANCE})
    for m, g in report["generate"].items():
        if "thunder" not in g:
            continue
        t = g["thunder"]
        others = [n for n in ("eager", "inductor") if n in g]
        res.append({"target": f"{m} generate: first run faster than " + " and ".join(others),
                    "value": f"{t['first_s']:.2f} s vs " + ", ".join(f"{n} {g[n]['first_s']:.2f} s" for n in others),
                    "met": all(t["first_s"] < g[n]["first_s"] for n in others)})
        speed = t["speedup"]
        res.append({"target": f"{m} generate: steady state per token >= {GENERATE_STEADY_TARGET}x eager (CPU time)",
                    "value": f"{speed:.2f}x (wall {t['speedup_wall']:.2f}x)", "met": speed >= GENERATE_STEADY_TARGET})
    return res


def _ms(s):
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s"


def format_markdown(report):
    """The report as Markdown tables: sweep totals, per-length steady state, thunder's compile breakdown,
    generate, and the targets."""
    lines = []
    meta = report["meta"]
    lines.append(f"commit {meta['commit']}, {meta['date']}, torch {meta['torch']}, {meta['threads']} thread(s), "
                 f"load average {meta['load_average_start'][0]:.1f} at start on {meta['cpus']} CPUs"
                 + (" (--quick: tiny models, figures meaningless)" if meta["quick"] else ""))
    lines.append("")
    lines.append("| model | contender | sweep total (compiles included) | first call at first length | "
                 "mean first call at later lengths | steady (3rd call), median over lengths | max rel err |")
    lines.append("|---|---|---|---|---|---|---|")
    for m, s in report["sweep"].items():
        for name, c in s["contenders"].items():
            later = c["first_call_s"][1:] or c["first_call_s"]
            lines.append(f"| {m} | {name} | {c['total_s']:.2f} s | {_ms(c['first_call_s'][0])} | "
                         f"{_ms(statistics.mean(later))} | {_ms(statistics.median(c['steady_s']))} | "
                         f"{c['max_rel_err']:.1e} |")
    lines.append("")
    for m, s in report["sweep"].items():
        c = s["contenders"]
        lines.append(f"{m}, per length: third call of the sweep (wall), and the best of {meta.get('reps', '?')} "
                     f"alternating calls (CPU time) of thunder's dynamic object and of `thunder.jit(model, "
                     f"dynamic=False)` compiled for that length")
        lines.append("")
        names = list(c)
        dash = [None] * len(s["lengths"])
        dyn, st, st3 = (s.get(k, dash) for k in ("thunder_best_cpu_s", "static_best_cpu_s", "static_third_s"))
        lines.append("| L | " + " | ".join(f"{n} 3rd" for n in names) + " | thunder static 3rd | thunder first call | "
                     "thunder best (CPU) | static best (CPU) | dynamic / static |")
        lines.append("|---" * (len(names) + 6) + "|")
        for i, n in enumerate(s["lengths"]):
            cells = [_ms(c[x]["steady_s"][i]) for x in names]
            cells += [_ms(st3[i]) if st3[i] else "-",
                      _ms(c["thunder"]["first_call_s"][i]) if "thunder" in c else "-",
                      _ms(dyn[i]) if dyn[i] else "-", _ms(st[i]) if st[i] else "-",
                      f"{dyn[i] / st[i]:.2f}x" if dyn[i] and st[i] else "-"]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("thunder's compile time: graphs captured with static shapes (the first length), and the "
                 "specializations of the symbolic trace (one per later shape): bind, passes, lowering (the rest of "
                 "`compile_seconds`: kernels generated and compiled, the program made)")
    lines.append("")
    lines.append("| run | graphs (static + bound) | retraced | static compile | symbolic import (once per graph) | "
                 "bound: compile per shape (mean) | bind per shape | passes per shape | lowering per shape | "
                 "top passes per shape |")
    lines.append("|---" * 10 + "|")
    runs = [(f"{m} sweep", s["contenders"]["thunder"]["breakdown"]) for m, s in report["sweep"].items()
            if "thunder" in s["contenders"]]
    runs += [(f"{m} generate", g["thunder"]["breakdown"]) for m, g in report["generate"].items() if "thunder" in g]
    for label, b in runs:
        k = max(b["bound"]["graphs"], 1)
        top = ", ".join(f"{p} {_ms(v / k)}" for p, v in list(b["bound"]["pass_seconds"].items())[:3])
        lines.append(f"| {label} | {b['static']['graphs']} + {b['bound']['graphs']} | {b['retraced_graphs']} | "
                     f"{_ms(b['static']['compile_s'])} | {_ms(b['symbolic_import_s'])} ({b['symbolic_imports']}) | "
                     f"{_ms(b['bound']['compile_s'] / k)} | "
                     f"{_ms(b['bind_s'] / max(b['binds'], 1))} | {_ms(b['bound']['passes_s'] / k)} | "
                     f"{_ms(b['bound']['lowering_s'] / k)} | {top} |")
    lines.append("")
    lines.append("| model | contender | first generate (compiles included) | steady generate, best of later runs: "
                 "wall / CPU | per token (CPU) | eager alongside: wall / CPU | vs eager: CPU (wall) | "
                 "tokens match eager |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for m, g in report["generate"].items():
        for name, r in g.items():
            lines.append(f"| {m} | {name} | {r['first_s']:.2f} s | {_ms(r['steady_s'])} / {_ms(r['steady_cpu_s'])} | "
                         f"{_ms(r['steady_cpu_s'] / meta.get('new_tokens', 100))} | {_ms(r['eager_steady_s'])} / "
                         f"{_ms(r['eager_steady_cpu_s'])} | {r['speedup']:.2f}x ({r['speedup_wall']:.2f}x) | "
                         f"{r['tokens_match']} |")
    lines.append("")
    lines.append("| target | value | met |")
    lines.append("|---|---|---|")
    for t in report.get("targets") or targets(report):
        lines.append(f"| {t['target']} | {t['value']} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None):
    """Command line: ``python -m thunder.benchmarks.shapes [--quick] [--models gpt2,llama] [--contenders ...]
    [--json F] [--markdown F]``; prints the Markdown tables (progress goes to stderr)."""
    p = argparse.ArgumentParser(prog="python -m thunder.benchmarks.shapes", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny models, 2 lengths, 10 tokens: checks that it runs")
    p.add_argument("--models", default=None, help="comma-separated among gpt2, llama (default both)")
    p.add_argument("--json", default=None, help="write the report as JSON")
    p.add_argument("--markdown", default=None, help="write the tables as Markdown")
    p.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated among eager, inductor, thunder, thunder-dynamic")
    p.add_argument("--parts", default="sweep,generate", help="comma-separated among sweep, generate")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    a = p.parse_args(argv)
    report = run(quick=a.quick, models=a.models.split(",") if a.models else None, json_path=a.json,
                 threads=a.threads, contenders=a.contenders.split(","),
                 parts=a.parts.split(","), log=lambda msg: print(msg, file=sys.stderr, flush=True))
    text = format_markdown(report)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
