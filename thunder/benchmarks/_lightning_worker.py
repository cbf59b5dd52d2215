"""Runs the benchmark workloads through lightning-thunder (the PyPI package ``lightning-thunder``).

Executed by thunder.benchmarks.lightning with the Python of a separate virtual
environment, where ``import thunder`` is lightning-thunder, not this project.
It loads workloads.py and measure.py (torch-only) by path, and times eager,
lightning-thunder's ``thunder.jit`` ("lightning-thunder") and its Dynamo front end
``thunder.dynamo.thunderfx`` ("lightning-thunder[fx]") alternately in this process, so
their ratios to eager come from the same process.

    python _lightning_worker.py --probe SHIMS_JSON          # import check; prints NEED/READY lines
    python _lightning_worker.py --spec SPEC_JSON --out OUT_JSONL

Shims: lightning-thunder lists some torch.Tensor methods by name at import time; a
torch release that removed them (the named-tensor API) breaks the import. Each shim
adds a stub under the missing name that raises NotImplementedError if called; the
parent finds the list by probing (one NEED line per missing attribute).
"""
import importlib
import importlib.util
import json
import os
import re
import sys
import time

# Running as a script puts this folder first on sys.path; nothing here should shadow anything.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GIVE_UP = 3


def apply_shims(shims):
    for owner_name, attr in shims:
        owner = torch.Tensor if owner_name == "Tensor" else importlib.import_module(owner_name)

        def missing(*args, _attr=attr, **kwargs):
            raise NotImplementedError(f"{_attr} was removed from this torch (stub added by the benchmark runner)")

        missing.__name__ = attr
        setattr(owner, attr, missing)


def import_lightning(shims):
    """Imports lightning-thunder; on a missing torch attribute prints NEED [owner, attr] and exits 3."""
    apply_shims(shims)
    try:
        import thunder
    except AttributeError as e:
        m = re.search(r"type object '(\w+)' has no attribute '(\w+)'|module '([\w.]+)' has no attribute '(\w+)'",
                      str(e))
        if m:
            print("NEED " + json.dumps([m.group(1) or m.group(3), m.group(2) or m.group(4)]), flush=True)
            sys.exit(3)
        raise
    return thunder


def load(name, filename):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, filename))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv):
    if argv[0] == "--probe":
        import_lightning(json.loads(argv[1]))
        import importlib.metadata as md

        print("READY " + json.dumps({"lightning-thunder": md.version("lightning-thunder"), "torch": torch.__version__}),
              flush=True)
        return 0
    spec = json.load(open(argv[argv.index("--spec") + 1]))
    out_path = argv[argv.index("--out") + 1]
    thunder = import_lightning(spec["shims"])
    measure = load("_thunder_bench_measure", "measure.py")
    workloads = load("_thunder_bench_workloads", "workloads.py")
    torch.set_num_threads(spec.get("threads", torch.get_num_threads()))
    device = torch.device(spec["device"])
    settings = measure.Settings(**spec["settings"])

    # Process start-up (imports, first trace) is paid here, not by the first workload.
    t0 = time.perf_counter()
    thunder.jit(lambda a: a + 1)(torch.ones(2, device=device))
    startup = time.perf_counter() - t0
    with open(out_path, "a") as f:
        f.write(json.dumps({"startup_s": startup}) + "\n")

    by_name = {w.name: w for w in workloads.all_workloads()}
    contenders = [("eager", lambda t: t), ("lightning-thunder", thunder.jit)]
    try:
        from thunder.dynamo import thunderfx  # lightning-thunder's torch.compile (Dynamo) front end

        contenders.append(("lightning-thunder[fx]", thunderfx))
    except Exception as e:  # noqa: BLE001
        print(f"  [lightning] thunder.dynamo.thunderfx is unavailable: {measure.short_error(e)}", flush=True)
    # A model whose first call failed (same code at another batch size or dtype) is not tried again:
    # each failure costs up to a minute of tracing.
    # A contender whose first call failed on GIVE_UP workloads in a row is not tried on the rest.
    failed, streak, given_up = {}, {c: [] for c, _ in contenders}, {}
    for i, name in enumerate(spec["workloads"], 1):
        t0 = time.perf_counter()
        family = "/".join(name.split("/")[:2]) if name.startswith("model/") else name
        skipped = {c: f"not run: its first call failed on {failed[(family, c)][0]}: {failed[(family, c)][1]}"
                   for c, _ in contenders if (family, c) in failed}
        skipped.update({c: msg for c, msg in given_up.items() if c not in skipped})
        todo = [c for c in contenders if c[0] not in skipped]
        case = None
        try:
            if len(todo) > 1:
                case = by_name[name].build(device)
                results = measure.measure(case, todo, settings, device)
            else:
                results = {}
            for c, msg in skipped.items():
                results[c] = {"error": msg}
            for c, _ in todo[1:]:
                err = results.get(c, {}).get("error")
                if err and results[c].get("first_call_s") is None:
                    failed[(family, c)] = (name, err)
                    streak[c].append(name)
                    if len(streak[c]) >= GIVE_UP:
                        given_up[c] = (f"not run: gave up after its first call failed on {GIVE_UP} workloads in a "
                                       f"row ({', '.join(streak[c])}); the last error: {err}")
                else:
                    streak[c] = []
            line = {"workload": name, "results": results}
        except Exception as e:  # noqa: BLE001
            line = {"workload": name, "error": measure.short_error(e)}
        with open(out_path, "a") as f:
            f.write(json.dumps(line) + "\n")
        res = line.get("results", {})
        e = res.get("eager", {})
        parts = []
        for c, _ in contenders[1:]:
            r = res.get(c, {})
            if r.get("median_s") and e.get("median_s"):
                parts.append(f"{c} {e['median_s'] / r['median_s']:.2f}x eager")
            else:
                parts.append(f"{c} {(r.get('error') or line.get('error') or 'no result')[:100]}")
        print(f"  [lightning {i}/{len(spec['workloads'])}] {name}: {'; '.join(parts)}  "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
        del case
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
