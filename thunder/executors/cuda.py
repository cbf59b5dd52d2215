"""``python -m thunder.executors.cuda --compile-check``: every fused pattern, rendered in the CUDA dialect and
compiled with NVRTC, on a machine without a GPU.

The programs are those the test suite's kernels come from: the replay programs (``tests/replay_programs.py``:
softmax, LayerNorm, RoPE, cross-entropy and GELU in float32 and bfloat16, forward and training, the seed's
examples, GPT-2), the kernel benchmark suite (``thunder.benchmarks.workloads.KERNELS``, both size classes) and
elementwise/reduction samples of the fusible ops over the dtypes (broadcasts, strided inputs, slices and cats,
long rows, full reductions). Each is jitted on CPU tensors with a recording CPU fusion executor that compiles
nothing (its launchers return empty outputs): the fusions it forms are the plans both devices share. Each
fusion is rendered in the CUDA dialect (``thunder._core.render_cuda``) and compiled alone with NVRTC to CUBIN
for ``--arch`` (default sm_90) in a fresh cache directory; ptxas' report gives its registers and spills.
Elementwise and row kernels must not spill. The last line is ``N compiled, M failed``; the exit status is 1
if anything failed.
"""
import argparse
import dataclasses
import os
import re
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from thunder import _core

KERNEL_START = 'extern "C" __global__'

#: Kernels whose spills are known and not asserted, by program, with why.
SPILLS_ALLOWED = {
    "replay/seed_model.no_grad": "a chain of 20 one-element updates that every thread computes whole: 40 sinf/cosf "
                                 "whose slow paths are calls (a 20-element kernel)",
}


def _recording_executor(traces):
    """The CPU fusion executor with a lower() that records each lowered trace and compiles nothing."""
    from thunder.executors.cpuex import cpu_executor

    def lower(trace, round_every_op=True, seconds=None):
        traces.append(trace)
        launchers = {}
        for _, kernels in _core.render_cpu(trace, "cpu", 1, round_every_op):
            for name, _, outs, *_ in kernels:
                metas = [trace.meta(p) for p in outs]

                def launcher(*args, metas=metas):
                    from thunder.core.dtypes import to_torch
                    out = tuple(torch.empty(tuple(m[1]), dtype=to_torch(m[0])) for m in metas)
                    return out[0] if len(out) == 1 else out
                launchers[name] = launcher
        return launchers, []
    return dataclasses.replace(cpu_executor, lower=lower)


def _samples():
    """Elementwise and reduction samples of the fusible ops: {name: (fn, args)}."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    out = {}
    unary = {"exp": torch.exp, "log1p": lambda x: torch.log1p(x.abs()), "tanh": torch.tanh, "erf": torch.erf,
             "sigmoid": torch.sigmoid, "rsqrt": lambda x: torch.rsqrt(x.abs() + 1), "sin_cos": lambda x: x.sin() * x.cos(),
             "lgamma": lambda x: torch.lgamma(x.abs() + 1), "round_floor": lambda x: x.round() + x.floor() - x.ceil(),
             "isnan_where": lambda x: torch.where(torch.isnan(x) | torch.isinf(x), 0.0, x),
             "signbit": lambda x: torch.signbit(x).float() + torch.sign(x)}
    binary = {"add_mul": lambda a, b: a * b + a, "div_pow": lambda a, b: a / (b.abs() + 1) + a ** 2,
              "max_min": lambda a, b: torch.maximum(a, b) - torch.minimum(a, b),
              "remainder": lambda a, b: torch.remainder(a, b.abs() + 1), "atan2_copysign": lambda a, b: torch.atan2(a, b) + torch.copysign(a, b),
              "compare": lambda a, b: ((a < b) & (a != 0)).float() + (a >= b).float()}
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        tag = str(dtype).removeprefix("torch.")
        for name, fn in unary.items():
            out[f"{name}.{tag}"] = (fn, (randn(64, 96, dtype=dtype),))
        for name, fn in binary.items():
            out[f"{name}.{tag}"] = (fn, (randn(64, 96, dtype=dtype), randn(96, dtype=dtype)))  # a broadcast
        # a 0-dim CPU tensor, taken by value (as in cuda_x * torch.tensor(0.75)), of another dtype
        out[f"scalar_operand.{tag}"] = (lambda x, s: (x * s).exp() - s,
                                        (randn(64, 96, dtype=dtype), torch.tensor(0.75, dtype=torch.float64)))
        # dense values only, an innermost extent no vector divides: the vector path, then a per-element tail
        out[f"odd_extent.{tag}"] = (lambda a, b: (a * b).exp() - a, (randn(3, 1001, dtype=dtype), randn(3, 1001, dtype=dtype)))
        out[f"strided.{tag}"] = (lambda a, b: (a.t() * 2 + b).exp(), (randn(96, 64, dtype=dtype), randn(64, 96, dtype=dtype)))
        for rows, n in ((64, 96), (8, 4096), (4, 32768)):  # warp, block, and 1024-thread block per row
            x = randn(rows, n, dtype=dtype)
            out[f"softmax.{rows}x{n}.{tag}"] = (lambda x: torch.softmax(x, -1), (x,))
            out[f"log_softmax.{rows}x{n}.{tag}"] = (lambda x: torch.log_softmax(x, -1), (x,))
            out[f"layer_norm.{rows}x{n}.{tag}"] = (lambda x, w: F.layer_norm(x, (x.shape[-1],), w), (x, randn(n, dtype=dtype)))
            out[f"rms_norm.{rows}x{n}.{tag}"] = (lambda x, w: x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w,
                                                 (x, randn(n, dtype=dtype)))
            out[f"cross_entropy.{rows}x{n}.{tag}"] = (lambda x, t: F.cross_entropy(x, t),
                                                      (x, torch.randint(0, n, (rows,), generator=g)))
            out[f"amax_amin.{rows}x{n}.{tag}"] = (lambda x: x.amax(-1) - x.amin(-1) + x.prod(-1), (x,))
        out[f"full_sum.{tag}"] = (lambda x: (x * x).sum() + x.abs().amax(), (randn(1 << 17, dtype=dtype),))
        # a few long rows, each split across blocks: along the last dim, and along the first (rows strided)
        out[f"long_rows.{tag}"] = (lambda x: (x * x).sum(-1) + x.amax(-1), (randn(2, 3, 70000, dtype=dtype),))
        out[f"long_columns.{tag}"] = (lambda x: x.exp().sum(0) - x.amin(0), (randn(70000, 5, dtype=dtype),))
        out[f"mean_all.{tag}"] = (lambda x: x.mean(), (randn(256, 1024, dtype=dtype),))
        out[f"rope_cat.{tag}"] = (lambda x: torch.cat((-x[..., 16:], x[..., :16]), -1) * 2, (randn(4, 8, 32, dtype=dtype),))
        out[f"slice_update.{tag}"] = (lambda x: torch.cat((x[:, :3] * 2, x[:, 3:]), 1).sin(), (randn(16, 40, dtype=dtype),))
    for dtype in (torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool):
        tag = str(dtype).removeprefix("torch.")
        a = torch.randint(0, 2 if dtype == torch.bool else 100, (64, 96), generator=g).to(dtype)
        b = torch.randint(1, 2 if dtype == torch.bool else 100, (96,), generator=g).to(dtype)
        if dtype == torch.bool:
            out[f"logic.{tag}"] = (lambda a, b: (a & b) | (a ^ b), (a, b))
        else:
            out[f"int_ops.{tag}"] = (lambda a, b: (a + b) * a - torch.maximum(a, b) + (a & b), (a, b))
        if dtype == torch.bool:
            out[f"logic_scalar_operand.{tag}"] = (lambda a, s: (a & s) | (a ^ s), (a, torch.tensor(True)))
        else:
            out[f"int_scalar_operand.{tag}"] = (lambda a, s: a * s + s, (a, torch.tensor(3)))
        out[f"int_sum_max.{tag}"] = (lambda a: a.sum(-1) + a.amax(-1).to(torch.int64), (a,))
    return out


def _programs(quick=False):
    """{name: (fn, args, grad[, thunder.jit's options])}: the programs whose fusions are checked."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    progs = {}
    tests = os.path.join(root, "tests")
    if os.path.exists(os.path.join(tests, "replay_programs.py")):
        sys.path.insert(0, tests)
        try:
            import replay_programs
            for name, (fn, args) in replay_programs.programs().items():
                if quick and name.startswith("gpt2"):
                    continue
                progs[f"replay/{name}"] = (fn, args, not name.endswith(".no_grad"))
        finally:
            sys.path.remove(tests)
    from thunder.benchmarks import workloads
    for k in workloads.KERNELS:
        for size_class, elems in (("cache", workloads.CACHE_ELEMS), ("dram", workloads.DRAM_ELEMS)):
            case = workloads._kernel(k, elems, size_class, "cpu")
            progs[f"kernel/{k}/{size_class}"] = (case.target, case.args, False)
    for name, (fn, args) in _samples().items():
        progs[f"sample/{name}"] = (fn, args, False)
    # A float that Dynamo passes as a 0-d tensor read with .item() (dynamic=True): a kernel's run-time number.
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(8, 96).to(dtype)
        progs[f"sample/run_time_number.{str(dtype).removeprefix('torch.')}"] = (
            lambda x, t: (x * t).softmax(-1) + t, (x, 0.5), False, {"dynamic": True})
    return progs


def collect_traces(programs):
    """Every lowered trace (forward and backward) of each program: {program: [trace]}; failures {program: error}."""
    import thunder
    from thunder.executors.torchex import torch_executor

    found, errors = {}, {}
    for name, (fn, args, grad, *options) in programs.items():
        traces = []
        try:
            jitted = thunder.jit(fn, executors=[_recording_executor(traces), torch_executor], **(options or [{}])[0])
            with torch.enable_grad() if grad else torch.no_grad():
                jitted(*args)
            # A graph that fell back to torch was not (or not wholly) lowered: its traces would be missing unseen.
            fell_back = [g["reason"] for g in thunder.compile_stats(jitted).graphs if not g["compiled"]]
            if fell_back:
                errors[name] = f"ran with torch: {fell_back[0]}"
        except Exception as e:  # a program that does not trace is reported, not fatal
            errors[name] = f"{type(e).__name__}: {e}"
        found[name] = traces
    return found, errors


def split_kernels(source):
    """A rendered translation unit as (prelude, [(kernel name, its code)])."""
    first = source.find(KERNEL_START)
    if first < 0:
        return source, []
    prelude, parts = source[:first], source[first:].split(KERNEL_START)[1:]
    kernels = []
    for part in parts:
        code = KERNEL_START + part
        name = re.search(r"\)\s+(\w+)\(", code).group(1)
        kernels.append((name, code))
    return prelude, kernels


def compile_check(arch="sm_90", quick=False, out=sys.stdout, programs=None):
    """Renders and compiles every fused pattern; returns (compiled, failed, records)."""
    from thunder.executors.cudaex import require_nvrtc

    library = require_nvrtc()
    print(f"NVRTC {_core.nvrtc_version(library)} ({library}), arch {arch}", file=out)
    start = time.perf_counter()
    found, errors = collect_traces(programs if programs is not None else _programs(quick))
    records, seen = [], set()
    for program, traces in found.items():
        for trace in traces:
            try:
                units = _core.render_cuda(trace, "cpu")
            except Exception as e:
                records.append({"program": program, "kernel": "?", "error": f"render: {e}"})
                continue
            if not units:
                continue
            ((source, kernels),) = units  # one unit: each kernel text once
            prelude, codes = split_kernels(source)
            info = {k[0]: k for k in kernels}
            for name, code in codes:
                key = info[name][7]  # its text apart from its name: a kernel another trace had is checked once
                if key in seen:
                    continue
                seen.add(key)
                kind = "two-stage" if "unsigned char* __restrict__ workspace" in code else \
                    "row" if "const int64_t rows" in code else "elementwise"
                rec = {"program": program, "kernel": name, "kind": kind, "block": info[name][4], "grid": info[name][5]}
                records.append(rec)
                with tempfile.TemporaryDirectory() as cache:
                    try:
                        image = _core.compile_cuda(prelude + "\n" + code, library, arch, cache)
                    except Exception as e:
                        rec["error"] = str(e)
                        continue
                (res,) = [r for r in image.kernels if r[0] == name] or [(name, -1, -1, -1, -1)]
                rec.update(registers=res[1], spill_stores=res[2], spill_loads=res[3], stack=res[4],
                           seconds=image.compile_seconds, cubin_bytes=len(image.cubin))
                if res[1] < 0:
                    rec["error"] = "no ptxas report for the kernel"
                elif kind != "two-stage" and (res[2] or res[3]):
                    if program in SPILLS_ALLOWED:
                        rec["note"] = f"spills {res[2]}/{res[3]} bytes, allowed: {SPILLS_ALLOWED[program]}"
                    elif "double" in code:  # CUDA's own float64 exp spills (56 bytes in a one-line kernel)
                        rec["note"] = f"float64 math: spills {res[2]}/{res[3]} bytes (not asserted)"
                    else:
                        rec["error"] = f"spills: {res[2]} bytes stored, {res[3]} bytes loaded"
    for program, error in errors.items():
        records.append({"program": program, "kernel": "-", "error": f"did not trace: {error}"})
    failed = [r for r in records if "error" in r]
    compiled = [r for r in records if "error" not in r]
    for r in records:
        if "note" in r:
            print(f"note {r['program']} {r['kernel']}: {r['note']}", file=out)
    for r in failed:
        print(f"FAILED {r['program']} {r['kernel']}: {r['error'][:2000]}", file=out)
    by_kind = {}
    for r in compiled:
        by_kind.setdefault(r["kind"], []).append(r)
    for kind, rs in sorted(by_kind.items()):
        regs = [r["registers"] for r in rs]
        spills = sum(r["spill_stores"] + r["spill_loads"] for r in rs)
        ms = sorted(r["seconds"] * 1e3 for r in rs)
        print(f"{kind}: {len(rs)} kernels, registers {min(regs)}-{max(regs)} (median {sorted(regs)[len(regs) // 2]}), "
              f"spill bytes {spills}, NVRTC {ms[len(ms) // 2]:.0f} ms median", file=out)
    print(f"{len(found)} programs, {sum(len(t) for t in found.values())} traces, {time.perf_counter() - start:.1f} s",
          file=out)
    print(f"{len(compiled)} compiled, {len(failed)} failed", file=out)
    return len(compiled), len(failed), records


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m thunder.executors.cuda", description=__doc__.split("\n\n")[0])
    p.add_argument("--compile-check", action="store_true", help="render and compile every fused pattern")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--quick", action="store_true", help="leave out GPT-2")
    p.add_argument("--json", help="write the per-kernel records here")
    args = p.parse_args(argv)
    if not args.compile_check:
        p.print_help()
        return 2
    compiled, failed, records = compile_check(args.arch, args.quick)
    if args.json:
        import json
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 1 if failed or not compiled else 0


if __name__ == "__main__":
    sys.exit(main())
