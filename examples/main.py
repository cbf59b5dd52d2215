"""The main job: the seed's examples and two real models, compiled by
thunder.jit and checked against eager PyTorch, with a final trace printed.

    python examples/main.py      (or: make run)
Exit status 0 means every check held.
"""
import copy
import os
import subprocess
import sys

import torch
import torch.nn as nn

import thunder
from thunder.testing import compare_lm, hf_gpt2, hf_llama

failures = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f"  {detail}"))
    if not ok:
        failures.append(name)


def seed_example_1():
    def some_computation(x, y):
        for i in range(x.size(0)):
            if x[i] > 0:
                y = y + x[i] * x[i]
            else:
                y = y - x[i]
        return y

    jitted = thunder.jit(some_computation)
    for trial in range(3):
        x = torch.randn(5, requires_grad=True)
        y = torch.tensor(0.0, requires_grad=True)
        xe, ye = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        out, exp = jitted(x, y), some_computation(xe, ye)
        out.backward()
        exp.backward()
        check(f"seed example 1, call {trial}: value and gradients",
              torch.allclose(out, exp) and torch.allclose(x.grad, xe.grad) and torch.allclose(y.grad, ye.grad))
    check_one_graph("seed example 1", jitted)
    print(jitted)


def check_one_graph(name, jitted):
    stats = thunder.compile_stats(jitted)
    check(f"{name}: one compiled graph, no graph breaks, every branch converted",
          len(stats.graphs) == 1 and not stats.uncompiled and not stats.graph_breaks and not stats.branches_left
          and stats.branches_converted >= 1,
          f"{len(stats.graphs)} graphs, {len(stats.graph_breaks)} graph breaks, {stats.branches_left} branches left")


def seed_example_2():
    class MyModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.relu, self.fc2 = nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 1)

        def forward(self, x):
            return self.fc2(self.complex_activation(self.relu(self.fc1(x))))

        def complex_activation(self, x):
            for i in range(x.shape[1]):
                if x[0, i] > 0.5:
                    x[0, i] = torch.sin(x[0, i])
                else:
                    x[0, i] = torch.cos(x[0, i])
            return x

    model = MyModel()
    reference = copy.deepcopy(model)
    jitted = thunder.jit(model)
    for trial in range(3):
        inp = torch.randn(1, 10)
        check(f"seed example 2, call {trial}: output", torch.allclose(jitted(inp), reference(inp), atol=1e-6))
    check_one_graph("seed example 2", jitted)
    print(jitted)                  # the module tree and one summary line
    print(thunder.summary(jitted))  # the graphs, their final traces, branches
    return jitted


def write_report(jitted):
    """The HTML trace explorer of a jitted model: build/report.html."""
    path = thunder.report(jitted, os.path.join(os.path.dirname(__file__), "..", "build", "report.html"))
    check("the HTML trace explorer of seed example 2 (build/report.html)", path.stat().st_size > 0)
    print(f"\nthe HTML trace explorer of seed example 2's model: {path.resolve()}")


def real_models():
    torch.manual_seed(0)
    ids = torch.randint(0, 128, (2, 16))
    for name, build in (("GPT-2", hf_gpt2), ("Llama", hf_llama)):
        logits_err, grad_errs, compiled = compare_lm(build(), thunder.jit, ids)
        worst = max(grad_errs.values())
        check(f"{name} (HF transformers, small config): logits", logits_err <= 1e-5, f"relative error {logits_err:.2e}")
        check(f"{name}: gradients of all {len(grad_errs)} parameters", worst <= 1e-5, f"worst relative error {worst:.2e}")
    print(f"\n{name}: the final execution trace of its last graph\n")
    print(thunder.last_traces(compiled)[-1])
    print(compiled)


seed_example_1()
seed_model = seed_example_2()
real_models()
acceptance = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "acceptance", "seed_examples.py")
if os.path.exists(acceptance):
    print("\nrunning the acceptance script, unchanged:", os.path.normpath(acceptance))
    check("shared/acceptance/seed_examples.py", subprocess.call([sys.executable, acceptance]) == 0)
write_report(seed_model)
print(f"\n{len(failures)} checks failed" if failures else "\nall checks hold")
sys.exit(1 if failures else 0)
