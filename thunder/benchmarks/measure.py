"""Timing and memory measurement, shared by the in-process contenders and the
lightning-thunder runner (which loads this file by path: it imports only torch).

Method, per workload:
  1. first call: each contender wraps the program and runs one step; the wall time of
     wrap + step (synchronised) is the cold "first call" (compile included);
  2. warm-up: ``Settings.warmup`` more steps each; the last one estimates a step's time;
  3. each timing sample runs a contender ``inner`` steps back to back (``inner`` chosen so a
     sample lasts about ``Settings.sample_s``) and records time / inner;
  4. repetitions alternate between contenders (each repetition takes one sample of every
     contender, in an order rotated by one per repetition) so drift and noisy neighbours
     hit all contenders alike; the number of repetitions fits ``Settings.budget_s``;
  5. peak memory of one more step: on CUDA ``torch.cuda.max_memory_allocated`` minus what was
     allocated before; on CPU the peak of the running sum of torch's allocator events recorded
     by ``torch.profiler`` (``profile_memory=True``): bytes torch allocated during the step
     above what was live before it (tensors only; not Python objects, not freed-memory caching).
"""
from __future__ import annotations

import contextlib
import gc
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

import torch


@dataclass
class Settings:
    warmup: int = 2            # steps after the first call, before timing
    sample_s: float = 0.02     # target duration of one timing sample
    budget_s: float = 4.0      # target time for all samples of one workload, contenders together
    min_reps: int = 5
    max_reps: int = 25
    max_inner: int = 2000
    memory: bool = True

    def to_dict(self):
        return asdict(self)


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _steps(step, n, device):
    sync(device)
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    sync(device)
    return (time.perf_counter() - t0) / n


def summarize(samples):
    """median, quartiles (p25, p75), min and max of a list of seconds."""
    s = sorted(samples)
    if len(s) >= 2:
        q = statistics.quantiles(s, n=4, method="inclusive")
        p25, p75 = q[0], q[2]
    else:
        p25 = p75 = s[0]
    return {"median_s": statistics.median(s), "p25_s": p25, "p75_s": p75, "min_s": s[0], "max_s": s[-1]}


def short_error(e: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line; a long message keeps its start and its end."""
    text = " ".join(str(e).split())
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    if len(text) > limit:
        text = text[: limit - 110] + " ... " + text[-100:]
    return text


@contextlib.contextmanager
def _quiet_profiler_stderr():
    """The CPU profiler prints start/stop lines on fd 2; hide those, keep anything else."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines(keepends=True):
                if "ActivityProfiler" not in line and "profiler_st" not in line:
                    sys.stderr.write(line)


MEMORY_METHODS = {
    "cuda": "torch.cuda.max_memory_allocated during one step, minus memory_allocated before it",
    "cpu": "torch.profiler(profile_memory=True): peak of the running sum of torch CPU allocator events "
           "during one step (bytes above what was live before it), merged by time with the allocations of "
           "thunder[cpu]'s kernel output buffer pool (which torch's allocator does not see) into one timeline",
}


def peak_memory(step, device):
    """Peak bytes allocated by torch during one ``step()``, above what was allocated before."""
    device = torch.device(device)
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        step()
        sync(device)
        return max(0, torch.cuda.max_memory_allocated(device) - base)
    from torch.profiler import ProfilerActivity, profile

    pool = _thunder_output_pool()
    if pool:  # this project's kernel outputs live outside torch's allocator: its allocations join the timeline
        pool.record_buffer_pool(True)
    try:
        with _quiet_profiler_stderr():
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                step()
    finally:
        if pool:
            pool.record_buffer_pool(False)
    events = [(e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    if pool:
        events += pool.buffer_pool_recorded()  # stamped with the profiler's clock (ns since the Unix epoch)
    live = peak = 0
    for _, n in sorted(events):
        live += n
        peak = max(peak, live)
    return peak


def _thunder_output_pool():
    """This project's thunder._core if it is loaded (it has a pool of kernel output buffers), else None."""
    core = sys.modules.get("thunder._core")
    return core if core is not None and hasattr(core, "record_buffer_pool") else None


def _flatten(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for i in x for t in _flatten(i)]
    return []


def relative_error(actual, expected):
    """max |a - e| / max |e| over all tensors in the results (inf if their structure differs)."""
    a, e = _flatten(actual), _flatten(expected)
    if len(a) != len(e) or any(x.shape != y.shape for x, y in zip(a, e)):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, e):
        if x.numel() == 0:
            continue
        x, y = x.detach().float(), y.detach().float()
        scale = y.abs().max().item() or 1.0
        worst = max(worst, (x - y).abs().max().item() / scale)
    return worst


def tolerance(dtype):
    """Relative error above which a contender's result is flagged as differing from eager."""
    return {torch.bfloat16: 5e-2, torch.float16: 1e-2}.get(dtype, 1e-4)


def measure(case, contenders, settings: Settings, device, log=None):
    """Times ``case.run`` through each contender; returns {contender name: result dict}.

    ``contenders``: list of (name, wrap) where ``wrap(target)`` returns the callable to run
    (eager: the target itself). The first contender is the reference for the error check.
    A contender that raises is recorded with its error and dropped; the others go on.
    """
    results, steps, est = {}, {}, {}
    reference = None
    gc.collect()
    for name, wrap in contenders:
        r = results[name] = {"error": None, "first_call_s": None, "warm_first_call_s": None,
                             "peak_mem_bytes": None, "max_rel_err": None, "mismatch": False}
        try:
            sync(device)
            t0 = time.perf_counter()
            fn = wrap(case.target)
            out = case.run(fn)
            sync(device)
            r["first_call_s"] = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 -- a failing contender is a result, not a crash
            r["error"] = short_error(e)
            if log:
                log(f"    {name}: first call failed: {r['error']}")
            continue
        if reference is None:
            reference = out
        else:
            err = relative_error(out, reference)
            r["max_rel_err"] = err
            r["mismatch"] = not err <= tolerance(case.dtype)
        steps[name] = (lambda fn=fn: case.run(fn))
    alive = list(steps)
    for name in list(alive):
        try:
            for _ in range(max(1, settings.warmup)):
                est[name] = _steps(steps[name], 1, device)
        except Exception as e:  # noqa: BLE001
            results[name]["error"] = short_error(e)
            alive.remove(name)
    inner = {n: int(min(settings.max_inner, max(1, round(settings.sample_s / max(est[n], 1e-9))))) for n in alive}
    cost = sum(inner[n] * est[n] for n in alive) or 1e-9
    reps = int(min(settings.max_reps, max(settings.min_reps, settings.budget_s // cost)))
    if reps * cost > 4 * settings.budget_s:  # very slow steps: fewer repetitions rather than blowing the budget
        reps = max(3, int(4 * settings.budget_s // cost))
    samples = {n: [] for n in alive}
    for rep in range(reps):
        k = rep % max(1, len(alive))
        for name in alive[k:] + alive[:k]:
            if results[name]["error"]:
                continue
            try:
                samples[name].append(_steps(steps[name], inner[name], device))
            except Exception as e:  # noqa: BLE001
                results[name]["error"] = short_error(e)
    for name in alive:
        r = results[name]
        if r["error"] or not samples[name]:
            continue
        r.update(summarize(samples[name]))
        r.update(reps=len(samples[name]), inner=inner[name], samples_s=samples[name])
        if settings.memory:
            try:
                r["peak_mem_bytes"] = peak_memory(steps[name], device)
            except Exception as e:  # noqa: BLE001
                r["peak_mem_error"] = short_error(e)
    return results


def copy_bandwidth(device, nbytes, seconds=1.0):
    """Copy bandwidth in GB/s (bytes read + written per second): median over samples of
    ``dst.copy_(src)`` on float32 tensors of ``nbytes`` each."""
    n = max(1, nbytes // 4)
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    one = _steps(lambda: dst.copy_(src), 1, device)
    inner = max(1, int(0.02 / max(one, 1e-9)))
    samples, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(samples) < 5:
        samples.append(_steps(lambda: dst.copy_(src), inner, device))
    s = summarize(samples)
    moved = 2 * n * 4
    return {"tensor_bytes": n * 4, "gbps": moved / s["median_s"] / 1e9, "gbps_p25": moved / s["p75_s"] / 1e9,
            "gbps_p75": moved / s["p25_s"] / 1e9, "samples": len(samples)}
