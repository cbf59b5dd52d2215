"""lightning-thunder as a contender: its own virtual environment, run as a subprocess.

The PyPI package ``lightning-thunder`` imports as ``thunder`` too, so it cannot share
this process. :func:`ensure_venv` creates (once; later runs reuse it) a virtual
environment with the *same* torch version as this one -- installed first, and pinned
by a constraint file for everything after, so pip never swaps in another torch build --
then lightning-thunder and (if installed here) the same transformers version.
:func:`run` executes ``_lightning_worker.py`` there on the same workload definitions.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_lightning_worker.py"
READY_MARKER = ".thunder-bench-ready.json"


class LightningUnavailable(RuntimeError):
    """lightning-thunder could not be installed, imported or run; the message says why."""


def default_venv() -> Path:
    """build/lightning-venv in the source tree when it is writable, else ~/.cache/thunder-benchmarks/."""
    root = HERE.parent.parent
    if (root / "pyproject.toml").exists() and os.access(root, os.W_OK):
        return root / "build" / "lightning-venv"
    return Path.home() / ".cache" / "thunder-benchmarks" / "lightning-venv"


def _torch_pin():
    return torch.__version__.split("+")[0]


def _transformers_version():
    try:
        import importlib.metadata as md

        return md.version("transformers")
    except Exception:  # noqa: BLE001
        return None


def _tail(text, n=6):
    lines = [l for l in (text or "").strip().splitlines() if l.strip() and "is ignored: it is neither" not in l]
    return "\n".join(lines[-n:])


def _env():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _pip(python, args, log, timeout=900):
    log(f"  [lightning] pip install {' '.join(args)}")
    p = subprocess.run([str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True,
                       env=_env(), timeout=timeout)
    if p.returncode != 0:
        raise LightningUnavailable(f"pip install {' '.join(args)} failed: {_tail(p.stderr + p.stdout)}")


def _installed(python):
    code = ("import importlib.metadata as m, json\nout = {}\nfor d in ('torch', 'lightning-thunder', 'transformers'):\n"
            "    try: out[d] = m.version(d)\n    except Exception: out[d] = None\nprint(json.dumps(out))")
    p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    return json.loads(p.stdout) if p.returncode == 0 else {}


def ensure_venv(venv: Path | None = None, log=print) -> Path:
    """Returns the venv's python, creating and installing the venv if needed (cached by a marker file)."""
    venv = Path(venv or default_venv())
    python = venv / "bin" / "python"
    pin, tf = _torch_pin(), _transformers_version()
    want = {"torch": pin, "transformers": tf}
    marker = venv / READY_MARKER
    if python.exists() and marker.exists():
        try:
            have = json.loads(marker.read_text())
            if have.get("torch", "").split("+")[0] == pin and have.get("transformers") == tf:
                return python
        except (OSError, ValueError):
            pass
    t0 = time.perf_counter()
    if not python.exists():
        log(f"  [lightning] creating the virtual environment {venv}")
        venv.parent.mkdir(parents=True, exist_ok=True)
        p = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, env=_env())
        if p.returncode != 0:
            raise LightningUnavailable(f"python -m venv failed: {_tail(p.stderr + p.stdout)}")
    have = _installed(python)
    constraints = venv / "constraints.txt"
    constraints.write_text(f"torch=={pin}\n")
    if (have.get("torch") or "").split("+")[0] != pin:
        _pip(python, [f"torch=={pin}"], log)   # first, alone: the same build as here
    wanted = []
    if not have.get("lightning-thunder"):
        wanted.append("lightning-thunder")
    if tf and have.get("transformers") != tf:
        wanted.append(f"transformers=={tf}")
    if wanted:
        _pip(python, [*wanted, "-c", str(constraints)], log)
    have = _installed(python)
    if (have.get("torch") or "").split("+")[0] != pin:
        raise LightningUnavailable(f"the venv has torch {have.get('torch')}, expected {pin}")
    if not have.get("lightning-thunder"):
        raise LightningUnavailable("lightning-thunder is not installed in the venv after pip install")
    marker.write_text(json.dumps({**have, **{k: v for k, v in want.items() if k == "transformers"}}))
    log(f"  [lightning] venv ready in {time.perf_counter() - t0:.0f} s: {have}")
    return python


def probe(python: Path, log=print, max_shims=40):
    """Imports lightning-thunder in the venv, adding a stub for each torch attribute it misses.

    Returns (shims, versions). Raises LightningUnavailable with the error if the import fails otherwise.
    """
    venv = python.parent.parent
    cache = venv / "shims.json"
    shims = []
    if cache.exists():
        try:
            shims = json.loads(cache.read_text())
        except ValueError:
            shims = []
    for _ in range(max_shims):
        p = subprocess.run([str(python), str(WORKER), "--probe", json.dumps(shims)], capture_output=True, text=True,
                           env=_env(), timeout=300)
        lines = p.stdout.splitlines()
        need = [l[5:] for l in lines if l.startswith("NEED ")]
        ready = [l[6:] for l in lines if l.startswith("READY ")]
        if p.returncode == 3 and need:
            missing = json.loads(need[-1])
            if missing in shims:
                break
            shims.append(missing)
            continue
        if p.returncode == 0 and ready:
            cache.write_text(json.dumps(shims))
            return shims, json.loads(ready[-1])
        break
    raise LightningUnavailable(f"import thunder (lightning-thunder) failed: {_tail(p.stderr + p.stdout, 3)}")


def run(python: Path, shims, workload_names, settings, device, timeout_s, log=print):
    """Runs the workloads in the venv; returns ({workload: results or {'error': ...}}, startup seconds, note).

    Results written before a timeout are kept; the note says if the run was cut short."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.jsonl"
        spec_path.write_text(json.dumps({"shims": shims, "workloads": list(workload_names),
                                         "settings": settings.to_dict(), "device": str(device),
                                         "threads": torch.get_num_threads()}))
        note = None
        try:
            p = subprocess.run([str(python), str(WORKER), "--spec", str(spec_path), "--out", str(out_path)],
                               stdout=None, stderr=subprocess.PIPE, text=True, env=_env(), timeout=timeout_s)
            if p.returncode != 0:
                note = f"the runner exited with status {p.returncode}: {_tail(p.stderr, 3)}"
        except subprocess.TimeoutExpired:
            note = f"the runner was stopped after {timeout_s:.0f} s (time limit); later workloads have no result"
        results, startup = {}, None
        if out_path.exists():
            for line in out_path.read_text().splitlines():
                d = json.loads(line)
                if "startup_s" in d:
                    startup = d["startup_s"]
                else:
                    results[d["workload"]] = d
    return results, startup, note
