"""The benchmark suite: contenders, the run, the table, the JSON file and the chart.

Contenders, in one process and alternating per repetition (see measure.py):
  eager             the program itself
  inductor          torch.compile(program) (Inductor, default mode); its on-disk cache starts
                    empty for each run (a fresh TORCHINDUCTOR_CACHE_DIR), so its first call is cold
  thunder[<name>]   thunder.jit(program, executors=...) for each set in executor_sets()
and, in a subprocess of its own virtual environment (see lightning.py), each timed against an
eager run in that same subprocess:
  lightning-thunder      the PyPI package's thunder.jit
  lightning-thunder[fx]  its Dynamo front end, thunder.dynamo.thunderfx (the closest to this thunder)
"""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from thunder.benchmarks import workloads as W
from thunder.benchmarks.measure import MEMORY_METHODS, Settings, copy_bandwidth, measure, short_error, sync

FULL = Settings(warmup=2, sample_s=0.02, budget_s=3.0, min_reps=5, max_reps=25)
QUICK = Settings(warmup=1, sample_s=0.01, budget_s=0.8, min_reps=3, max_reps=8)
TIME_LIMIT_S = {"full": 14 * 60, "quick": 170}   # the lightning subprocess gets what is left of this

LIGHTNING_CONTENDERS = ("lightning-thunder", "lightning-thunder[fx]")
COPY_SIZES = {"dram": 256 * 2**20, "cache": W.CACHE_ELEMS * 4}


@dataclass
class Contender:
    name: str
    wrap: Callable            # wrap(target) -> callable
    kind: str                 # eager | inductor | thunder


def _inductor(target):
    return torch.compile(target)


def _thunder(executors):
    def wrap(target):
        import thunder

        return thunder.jit(target, executors=list(executors))
    return wrap


def contenders(pattern: str | None = None) -> list[Contender]:
    """eager, inductor, and thunder with each executor set; ``pattern`` (a regex) keeps those it
    matches, and eager always (it is the reference)."""
    from thunder.executors import executor_sets

    cs = [Contender("eager", lambda t: t, "eager"), Contender("inductor", _inductor, "inductor")]
    for name, execs in executor_sets().items():
        cs.append(Contender(f"thunder[{name}]", _thunder(execs), "thunder"))
    if pattern:
        rx = re.compile(pattern)
        cs = [c for c in cs if c.name == "eager" or rx.search(c.name)]
    return cs


# ----------------------------------------------------------------------------- facts about the run

def _git(*args):
    root = Path(__file__).resolve().parent.parent.parent
    try:
        p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        return p.stdout.strip() if p.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts(device):
    facts = {"cpu": _cpu_model(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
             "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
             "device": str(device)}
    try:
        import importlib.metadata as md

        facts["transformers"] = md.version("transformers")
    except Exception:  # noqa: BLE001
        facts["transformers"] = None
    if device.type == "cuda":
        facts["gpu"] = torch.cuda.get_device_name(device)
    try:
        facts["mem_total_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    return facts


# ----------------------------------------------------------------------------- the run

def _rows(workload, case, results, source, eager_name="eager"):
    eager = results.get(eager_name) or {}
    rows = []
    for name, r in results.items():
        row = {"workload": workload.name, "group": workload.group, "contender": name, "source": source, **r}
        row["bytes"] = case.bytes if case is not None else None
        row["size_class"] = case.size_class if case is not None else None
        ref = eager.get("median_s")
        row["eager_median_s"] = ref
        if r.get("median_s") and ref:
            row["ratio_to_eager"] = r["median_s"] / ref
            row["speedup"] = ref / r["median_s"]
        rows.append(row)
    return rows


def run_suite(only=None, quick=False, lightning=None, contender_pattern=None, device=None, json_path=None,
              markdown_path=None, bandwidth=True, lightning_venv=None, log=print, print_table=True, threads=None):
    """Runs the suite and returns the report (a JSON-able dict; ``report['rows']``: one per workload
    and contender). ``only``: regex on workload names; ``lightning``: None = on for full runs, off
    for --quick; ``threads``: torch CPU threads (None: 1 on CPU, where a busy shared machine makes
    multi-threaded ops wait for descheduled threads; 0: torch's default). Writes ``json_path``
    (and a PNG chart next to it) and ``markdown_path`` if given."""
    t_start = time.perf_counter()
    mode = "quick" if quick else "full"
    settings = QUICK if quick else FULL
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if lightning is None:
        lightning = not quick
    selected = W.select(W.all_workloads(), only=only, quick=quick)
    cs = contenders(contender_pattern)
    threads_before = torch.get_num_threads()
    if threads is None:
        threads = 1 if device.type == "cpu" else 0
    if threads:
        torch.set_num_threads(threads)
    report = {"meta": {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                       "mode": mode, "only": only, "commit": _git("rev-parse", "--short", "HEAD"),
                       "tree_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
                       "machine": machine_facts(device), "load_average_start": _loadavg(),
                       "memory_method": MEMORY_METHODS[device.type], "settings": settings.to_dict(),
                       "contenders": [c.name for c in cs] + (list(LIGHTNING_CONTENDERS) if lightning else [])},
              "bandwidth": {}, "startup_s": {}, "rows": [], "lightning": {"enabled": bool(lightning)}}
    # Importing torch._inductor sets TORCHINDUCTOR_CACHE_DIR to its default (/tmp/torchinductor_<user>) when
    # unset, so only a different value means the user chose a cache; otherwise this run gets an empty one.
    user_cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    own_cache = any(c.kind == "inductor" for c in cs) and user_cache in (None, _default_inductor_cache())
    cache_dir = tempfile.mkdtemp(prefix="thunder-bench-inductor-") if own_cache else None
    if own_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    report["meta"]["inductor_cache"] = ("fresh and empty for this run (first calls are cold)" if own_cache
                                        else f"TORCHINDUCTOR_CACHE_DIR={os.environ.get('TORCHINDUCTOR_CACHE_DIR')}")
    # The same for thunder's kernel cache (thunder.executors.cpuex.cache_dir() reads the variable on each compile).
    user_kernel_cache = os.environ.get("THUNDER_CACHE_DIR")
    kernel_cache_dir = None if user_kernel_cache else tempfile.mkdtemp(prefix="thunder-bench-kernels-")
    if kernel_cache_dir:
        os.environ["THUNDER_CACHE_DIR"] = kernel_cache_dir
    report["meta"]["thunder_cache"] = ("fresh and empty for this run (first calls are cold)" if kernel_cache_dir
                                       else f"THUNDER_CACHE_DIR={user_kernel_cache}")
    old_limits = _raise_recompile_limits()
    log(f"thunder benchmarks ({mode}): {len(selected)} workloads x {', '.join(report['meta']['contenders'])}; "
        f"device {device}, {report['meta']['machine']['cpu']}, {torch.get_num_threads()} threads")
    load = _loadavg()
    if load and load[0] > 0.75 * (os.cpu_count() or 1):
        log(f"note: the machine is busy (load average {load[0]:.1f} on {os.cpu_count()} CPUs): timings will be noisy"
            + ("" if torch.get_num_threads() == 1 else
               f"; with {torch.get_num_threads()} threads, ops wait for descheduled threads (--threads 1 avoids that)"))
    try:
        if bandwidth:
            for key, nbytes in COPY_SIZES.items():
                report["bandwidth"][key] = copy_bandwidth(device, nbytes, seconds=0.5 if quick else 1.0)
            b = report["bandwidth"]
            log(f"copy bandwidth: {b['dram']['gbps']:.1f} GB/s ({_fmt_bytes(b['dram']['tensor_bytes'])} tensors), "
                f"{b['cache']['gbps']:.1f} GB/s ({_fmt_bytes(b['cache']['tensor_bytes'])}, cache-resident)")
        for c in cs:  # process start-up (imports, worker pools) is paid here, not by the first workload
            if c.kind == "eager":
                continue
            t0 = time.perf_counter()
            try:
                c.wrap(_startup_fn)(torch.ones(2, device=device))
                sync(device)
                report["startup_s"][c.name] = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001
                report["startup_s"][c.name] = None
                log(f"  {c.name}: start-up call failed: {short_error(e)}")
        torch._dynamo.reset()
        if report["startup_s"]:
            log("process start-up (first compile of a trivial function): "
                + ", ".join(f"{k} {_fmt_time(v)}" for k, v in report["startup_s"].items()))

        for i, w in enumerate(selected, 1):
            t0 = time.perf_counter()
            case = None
            try:
                case = w.build(device)
                results = measure(case, [(c.name, c.wrap) for c in cs], settings, device,
                                  log=lambda m: log(m))
                for c in cs:  # a fresh compile whose disk cache this run filled
                    if c.kind in ("inductor", "thunder") and results.get(c.name, {}).get("median_s") and \
                            (not quick or c.kind == "thunder"):
                        results[c.name]["warm_first_call_s"] = _warm_first_call(case, device, c.wrap)
            except Exception as e:  # noqa: BLE001 -- e.g. the model could not be built
                results = {c.name: {"error": "workload: " + short_error(e)} for c in cs}
            finally:
                torch._dynamo.reset()
            report["rows"].extend(_rows(w, case, results, "in-process"))
            log(f"[{i}/{len(selected)}] {w.name}: " + _progress(results) + f"  ({time.perf_counter() - t0:.1f} s)")
            del case

        if lightning:
            budget = TIME_LIMIT_S[mode] - (time.perf_counter() - t_start)
            report["lightning"].update(_run_lightning(selected, settings, device, budget, lightning_venv, log,
                                                      report["rows"]))
    finally:
        torch.set_num_threads(threads_before)
        _restore(old_limits)
        if kernel_cache_dir:
            os.environ.pop("THUNDER_CACHE_DIR", None)
            shutil.rmtree(kernel_cache_dir, ignore_errors=True)
        if own_cache:
            if user_cache is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = user_cache
            shutil.rmtree(cache_dir, ignore_errors=True)

    _add_bandwidth_shares(report)
    report["meta"]["load_average_end"] = _loadavg()
    report["meta"]["wall_s"] = time.perf_counter() - t_start
    if print_table:
        log("")
        log(format_table(report))
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(report, indent=1, default=str))
        chart = Path(json_path).with_suffix(".png")
        note = write_chart(report, chart)
        log(f"wrote {json_path}" + (f" and {chart}" if note is None else f" ({note})"))
    if markdown_path:
        Path(markdown_path).write_text(format_markdown(report))
        log(f"wrote {markdown_path}")
    return report


def _default_inductor_cache():
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return os.path.abspath(default_cache_dir())
    except Exception:  # noqa: BLE001
        return None


def _startup_fn(a):
    return a * 2 + 1


def _raise_recompile_limits():
    """Dynamo's per-function recompile limits, raised so no contender silently falls back to eager;
    returns the old values for _restore."""
    cfg = torch._dynamo.config
    # All read before any is set: cache_size_limit is an alias of recompile_limit (and so on), and restoring an
    # alias read after its twin was raised would leave the limit raised.
    old = {attr: getattr(cfg, attr) for attr in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                                                 "accumulated_cache_size_limit") if hasattr(cfg, attr)}
    for attr, value in list(old.items()):
        try:
            setattr(cfg, attr, max(value, 64))
        except Exception:  # noqa: BLE001
            old.pop(attr)
    return old


def _restore(old):
    for attr, value in old.items():
        try:
            setattr(torch._dynamo.config, attr, value)
        except Exception:  # noqa: BLE001
            pass


def _warm_first_call(case, device, wrap):
    """First call of a fresh compile after torch._dynamo.reset(): Dynamo traces again, and the compiler
    finds its compiled code in the on-disk cache this run filled (Inductor: graphs and kernels; thunder:
    the CPU executor's kernel modules, while its passes run again)."""
    torch._dynamo.reset()
    try:
        sync(device)
        t0 = time.perf_counter()
        case.run(wrap(case.target))
        sync(device)
        return time.perf_counter() - t0
    except Exception:  # noqa: BLE001
        return None


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _progress(results):
    eager = (results.get("eager") or {}).get("median_s")
    parts = []
    for name, r in results.items():
        if r.get("error"):
            parts.append(f"{name} ERROR")
        elif r.get("median_s"):
            s = f"{name} {_fmt_time(r['median_s'])}"
            if name != "eager" and eager:
                s += f" ({eager / r['median_s']:.2f}x)"
            if r.get("mismatch"):
                s += " MISMATCH"
            parts.append(s)
    return ", ".join(parts)


def _run_lightning(selected, settings, device, budget_s, venv, log, rows):
    from thunder.benchmarks import lightning as L

    status = {"installed": False, "ran": False, "versions": None, "shims": [], "error": None, "note": None,
              "startup_s": None}
    try:
        python = L.ensure_venv(venv, log)
        status["installed"] = True
        shims, versions = L.probe(python, log)
        status["shims"], status["versions"] = shims, versions
        if shims:
            log(f"  [lightning] lightning-thunder {versions.get('lightning-thunder')} imports with torch "
                f"{versions.get('torch')} only with stubs for removed torch attributes: "
                + ", ".join(".".join(s) for s in shims))
        budget_s = max(60.0, budget_s)
        log(f"  [lightning] running {len(selected)} workloads (time limit {budget_s:.0f} s)")
        results, status["startup_s"], status["note"] = L.run(python, shims, [w.name for w in selected], settings,
                                                              device, budget_s, log)
        status["ran"] = True
        if status["note"]:
            log(f"  [lightning] {status['note']}")
        for w in selected:
            d = results.get(w.name)
            if d is None:
                res = {c: {"error": "not run (time limit)"} for c in LIGHTNING_CONTENDERS}
            elif "error" in d:
                res = {c: {"error": "workload: " + d["error"]} for c in LIGHTNING_CONTENDERS}
            else:
                res = d["results"]
            for row in _rows(w, None, res, "lightning subprocess"):  # bytes: from the in-process rows
                if row["contender"] != "eager":
                    rows.append(row)
    except L.LightningUnavailable as e:
        status["error"] = str(e)
        log(f"  [lightning] not available: {e}")
        for w in selected:
            rows.append({"workload": w.name, "group": w.group, "contender": "lightning-thunder",
                         "source": "lightning subprocess", "error": "unavailable (see the lightning-thunder line)"})
    return status


def _add_bandwidth_shares(report):
    bw = report["bandwidth"]
    by_workload = {}
    for row in report["rows"]:
        if row.get("bytes"):
            by_workload[row["workload"]] = (row["bytes"], row.get("size_class"))
    for row in report["rows"]:
        facts = by_workload.get(row["workload"])
        if not facts or not row.get("median_s"):
            continue
        nbytes, size_class = facts
        row["bytes"], row["size_class"] = nbytes, size_class
        row["achieved_gbps"] = nbytes / row["median_s"] / 1e9
        ref = bw.get(size_class or "dram")
        if ref:
            row["bw_share"] = row["achieved_gbps"] / ref["gbps"]


# ----------------------------------------------------------------------------- output

def _fmt_time(s):
    if s is None:
        return "n/a"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _fmt_bytes(n):
    if n is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _in_order(report, key):
    """The distinct values of row[key] over the report's rows, in first-seen order."""
    return list(dict.fromkeys(row[key] for row in report["rows"]))


def _contender_order(report):
    return _in_order(report, "contender")


def _table(headers, rows, aligns=None):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    aligns = aligns or ["<"] + [">"] * (len(headers) - 1)
    line = lambda cells: "  ".join(f"{str(c):{a}{w}}" for c, a, w in zip(cells, aligns, widths))  # noqa: E731
    return "\n".join([line(headers), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def _markdown_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _speedup_cell(row):
    if row is None:
        return ""
    if row.get("error"):
        return "error"
    if row.get("speedup") is None:
        return "n/a"
    return f"{row['speedup']:.2f}x" + ("!" if row.get("mismatch") else "")


def _index(report):
    idx = {}
    for row in report["rows"]:
        idx[(row["workload"], row["contender"])] = row
    return idx


def _workloads(report):
    return _in_order(report, "workload")


def summary_rows(report):
    """(headers, rows): per workload, eager's median and each contender's speedup over eager."""
    idx, contenders_ = _index(report), [c for c in _contender_order(report) if c != "eager"]
    headers = ["workload", "eager median"] + contenders_
    rows = []
    for w in _workloads(report):
        e = idx.get((w, "eager"), {})
        rows.append([w, _fmt_time(e.get("median_s"))] + [_speedup_cell(idx.get((w, c))) for c in contenders_])
    return headers, rows


def geomean_rows(report):
    """(headers, rows): per group, the geometric mean of each contender's speedup over eager
    (over the workloads where both have a time)."""
    contenders_ = [c for c in _contender_order(report) if c != "eager"]
    groups = []
    for row in report["rows"]:
        if row["group"] not in groups:
            groups.append(row["group"])
    rows = []
    for g in groups + ["all"]:
        cells = [g]
        for c in contenders_:
            xs = [r["speedup"] for r in report["rows"]
                  if r["contender"] == c and r.get("speedup") and (g == "all" or r["group"] == g)]
            cells.append(f"{math.exp(sum(map(math.log, xs)) / len(xs)):.2f}x ({len(xs)})" if xs else "n/a")
        rows.append(cells)
    return ["group (geomean, n)"] + contenders_, rows


def detail_rows(report):
    """(headers, rows, notes): every workload and contender with all its figures; a failed one
    shows "error [k]", and notes[k - 1] is its message (identical messages share a number)."""
    headers = ["workload", "contender", "median", "IQR (p25-p75)", "min-max", "first call", "warm 1st",
               "peak mem", "vs eager", "BW share"]
    rows, notes = [], []
    for row in report["rows"]:
        if row.get("error"):
            if row["error"] not in notes:
                notes.append(row["error"])
            rows.append([row["workload"], row["contender"], f"error [{notes.index(row['error']) + 1}]"] + [""] * 7)
            continue
        if row.get("median_s") is None:
            continue
        share = row.get("bw_share")
        rows.append([row["workload"], row["contender"], _fmt_time(row["median_s"]),
                     f"{_fmt_time(row['p25_s'])}-{_fmt_time(row['p75_s'])}",
                     f"{_fmt_time(row['min_s'])}-{_fmt_time(row['max_s'])}",
                     _fmt_time(row.get("first_call_s")), _fmt_time(row.get("warm_first_call_s")),
                     _fmt_bytes(row.get("peak_mem_bytes")), _speedup_cell(row),
                     f"{share * 100:.0f}%" if share is not None else ""])
    return headers, rows, notes


def _header_lines(report):
    m, bw = report["meta"], report["bandwidth"]
    mach = m["machine"]
    lines = [f"date {m['date']}, commit {m['commit']}{' (+ uncommitted changes)' if m.get('tree_dirty') else ''}, "
             f"mode {m['mode']}, wall time {m.get('wall_s', 0):.0f} s",
             f"machine: {mach['cpu']}, {mach['cpus']} CPUs, torch {mach['torch']} ({mach['torch_threads']} threads), "
             f"device {mach['device']}" + (f" ({mach['gpu']})" if mach.get("gpu") else "")
             + f"; load average {m.get('load_average_start')} -> {m.get('load_average_end')}"]
    if bw:
        lines.append(f"reference: copy bandwidth {bw['dram']['gbps']:.1f} GB/s ({_fmt_bytes(bw['dram']['tensor_bytes'])}"
                     f" tensor, read+write), {bw['cache']['gbps']:.1f} GB/s at {_fmt_bytes(bw['cache']['tensor_bytes'])}"
                     " (cache-resident); BW share = (input+output bytes / median) / the copy bandwidth at the kernel's "
                     "size class")
    lines.append(f"memory: {m['memory_method']}")
    lines.append("vs eager = eager median / contender median (higher is faster; '!' = result differs from eager "
                 "beyond tolerance); lightning-thunder is compared with eager timed in its own subprocess")
    lines.append("first call = wrap + first step, compile included (cold: empty compile caches); warm 1st = first "
                 "call of a fresh compile with the on-disk caches this run filled (Inductor's; thunder's kernel cache)")
    lt = report.get("lightning", {})
    if lt.get("enabled"):
        if lt.get("error"):
            lines.append(f"lightning-thunder: unavailable: {lt['error']}")
        else:
            v = lt.get("versions") or {}
            lines.append(f"lightning-thunder {v.get('lightning-thunder')} (own venv, torch {v.get('torch')})"
                         + (f", stubs for removed torch attributes: {', '.join('.'.join(s) for s in lt['shims'])}"
                            if lt.get("shims") else "") + (f"; {lt['note']}" if lt.get("note") else ""))
    else:
        lines.append("lightning-thunder: not run (--quick, or --no-lightning)")
    if report.get("startup_s"):
        lines.append("process start-up, not counted in first calls: "
                     + ", ".join(f"{k} {_fmt_time(v)}" for k, v in report["startup_s"].items())
                     + (f", lightning-thunder {_fmt_time(lt.get('startup_s'))}" if lt.get("startup_s") else ""))
    return lines


def format_table(report):
    parts = _header_lines(report)
    h, r, notes = detail_rows(report)
    parts += ["", _table(h, r, ["<", "<"] + [">"] * (len(h) - 2))]
    parts += [f"[{k}] {n}" for k, n in enumerate(notes, 1)]
    h, r = summary_rows(report)
    parts += ["", "speedup over eager (eager median / contender median):", _table(h, r)]
    h, r = geomean_rows(report)
    parts += ["", _table(h, r)]
    return "\n".join(parts)


def format_markdown(report):
    parts = ["\n".join(f"- {l}" for l in _header_lines(report))]
    h, r = geomean_rows(report)
    parts += ["### Geometric mean of the speedup over eager, by group", _markdown_table(h, r)]
    h, r = summary_rows(report)
    parts += ["### Speedup over eager, by workload", _markdown_table(h, r)]
    h, r, notes = detail_rows(report)
    parts += ["### Every figure", _markdown_table(h, r)]
    if notes:
        clean = [n.replace("`", "'") for n in notes]
        parts.append("Errors:\n\n" + "\n".join(f"{k}. `{n}`" for k, n in enumerate(clean, 1)))
    return "\n\n".join(parts) + "\n"


def write_chart(report, path):
    """A PNG of each contender's speedup over eager per workload; returns None, or why there is no chart."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no chart: matplotlib is not installed (pip install matplotlib)"
    idx = _index(report)
    contenders_ = [c for c in _contender_order(report) if c != "eager"]
    workloads_ = _workloads(report)
    if not contenders_ or not workloads_:
        return "no chart: nothing to plot"
    n = len(contenders_)
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(10, min(40.0, 1.5 + (0.1 * n + 0.12) * len(workloads_))))
    for j, c in enumerate(contenders_):
        ys, xs = [], []
        for i, w in enumerate(workloads_):
            s = (idx.get((w, c)) or {}).get("speedup")
            if s:
                ys.append(i + (j - (n - 1) / 2) * height)
                xs.append(s)
        ax.barh(ys, xs, height=height, label=c, left=0)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(workloads_)))
    ax.set_yticklabels(workloads_, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("speedup over eager (eager median / contender median; log scale, >1 is faster)")
    m = report["meta"]
    ax.set_title(f"thunder benchmarks ({m['mode']}), {m['machine']['cpu']}, commit {m['commit']}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
