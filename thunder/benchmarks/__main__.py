"""python -m thunder.benchmarks [--quick] [--only REGEX] [--json PATH] [--no-lightning] ...

Runs the benchmark suite and prints a table; see docs/benchmarks.md."""
import argparse
import re
import sys


def _regex(text):
    """An argument that must be a regular expression (argparse's error names the argument otherwise)."""
    try:
        re.compile(text)
    except re.error as e:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r} ({e})") from None
    return text


def _threads(text):
    """--threads: a count of 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of threads, 0 or more, got {text!r}")
    return value


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m thunder.benchmarks",
                                description="Times eager PyTorch, torch.compile (Inductor), thunder with each "
                                            "executor set, and lightning-thunder on a fixed suite of workloads.")
    p.add_argument("--only", metavar="REGEX", type=_regex,
                   help="run only workloads whose name matches (a substring works)")
    p.add_argument("--quick", action="store_true",
                   help="a subset of the workloads, fewer repetitions, no lightning-thunder (< 3 minutes)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON, and a PNG chart next to it")
    p.add_argument("--markdown", metavar="PATH", help="write the tables as Markdown")
    p.add_argument("--lightning", dest="lightning", action="store_true", default=None,
                   help="also run lightning-thunder in its own venv (default: on for full runs, off with --quick)")
    p.add_argument("--no-lightning", dest="lightning", action="store_false")
    p.add_argument("--lightning-venv", metavar="DIR", help="where the lightning-thunder venv is (created if missing; "
                                                          "default build/lightning-venv)")
    p.add_argument("--contenders", metavar="REGEX", type=_regex,
                   help="keep only matching in-process contenders (eager is kept)")
    p.add_argument("--device", choices=("cpu", "cuda"), help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=_threads, default=None,
                   help="CPU threads for torch ops, lightning-thunder's included (default 1 on CPU: on a shared, "
                        "busy machine multi-threaded ops wait for descheduled threads; 0 = torch's default)")
    p.add_argument("--list", action="store_true", help="list the workloads (and contenders) and exit")
    args = p.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("argument --device: cuda, but this torch sees no CUDA device (torch.cuda.is_available() is False)")

    from thunder.benchmarks import harness, workloads

    if args.list:
        for w in workloads.select(workloads.all_workloads(), only=args.only, quick=args.quick):
            print(f"{w.name:34s} {'quick ' if w.quick else '      '}{w.description}")
        print("contenders:", ", ".join(c.name for c in harness.contenders(args.contenders)), "+ lightning-thunder, lightning-thunder[fx] (own venv)")
        return 0
    report = harness.run_suite(only=args.only, quick=args.quick, lightning=args.lightning,
                               contender_pattern=args.contenders, device=args.device, json_path=args.json,
                               markdown_path=args.markdown, lightning_venv=args.lightning_venv,
                               threads=args.threads)
    return 0 if report["rows"] else 1


if __name__ == "__main__":
    sys.exit(main())
