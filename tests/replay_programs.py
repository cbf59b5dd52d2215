"""The replay check: generated kernel sources and final traces of a fixed set of programs.

A refactor of the compiler (op tables, passes, code generation) must change what it generates only where it
means to. This module compiles a fixed set of programs -- softmax, LayerNorm, RoPE, cross-entropy, GELU, dropout
and causal attention in float32 and bfloat16 (inference, and forward with inputs that require grad), the seed's two
examples, GPT-2 -- and records, per program, every compiled graph's final execution trace and the kernels the
fusion executors generated (without the shared preamble of math helpers), in ``tests/replay/<program>.txt``.
``tests/test_replay.py`` compares a fresh recording with the stored one; after an intended change, record again::

    python tests/replay_programs.py            # rewrites tests/replay/*.txt
    git diff tests/replay                      # the change, kernel by kernel and trace by trace

Shapes and seeds are fixed; nothing here depends on timing or the machine (kernels are rendered for the
generic CPU target the renderer always uses; the compiler flags are not recorded).
"""
import os
import re
import sys

import torch
import torch.nn.functional as F

import thunder
from thunder.benchmarks.workloads import SeedInplaceModel, seed_loop_branch

REPLAY_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay")


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def gelu(x):
    return F.gelu(x)


def dropout_residual(x):
    return x + F.dropout(F.gelu(x), 0.1, training=True)


def causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _kernel_cases(dtype, grad):
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad)

    target = torch.randint(0, 32, (8,), generator=g)
    half = torch.randn(16, 8, generator=g).to(dtype)
    return {"softmax": (softmax, (randn(8, 32),)),
            "layer_norm": (layer_norm, (randn(8, 32), randn(32), randn(32))),
            "rope": (rope, (randn(2, 16, 16), torch.cat((half, half), -1).cos(), torch.cat((half, half), -1).sin())),
            "cross_entropy": (cross_entropy, (randn(8, 32), target)),
            "gelu": (gelu, (randn(8, 32),)),
            "dropout": (dropout_residual, (randn(8, 32),)),
            "attention": (causal_attention, (randn(2, 2, 8, 4), randn(2, 2, 8, 4), randn(2, 2, 8, 4)))}


def _seed_cases():
    torch.manual_seed(0)
    model = SeedInplaceModel().eval()
    x = torch.tensor([0.5, -1.0, 2.0, -0.25, 1.5])
    return {"seed_loop.grad": (seed_loop_branch, (x.clone().requires_grad_(), torch.tensor(0.0, requires_grad=True))),
            "seed_loop.no_grad": (seed_loop_branch, (x.clone(), torch.tensor(0.0))),
            "seed_model.no_grad": (model, (torch.randn(1, 10),))}


def programs():
    """{name: (callable, args)}: the programs recorded, built afresh (the same every time)."""
    cases = {}
    for dtype in (torch.float32, torch.bfloat16):
        for grad in (False, True):
            for name, case in _kernel_cases(dtype, grad).items():
                cases[f"{name}.{str(dtype).removeprefix('torch.')}{'.grad' if grad else ''}"] = case
    cases.update(_seed_cases())
    from thunder.testing import hf_gpt2
    torch.manual_seed(0)
    cases["gpt2.no_grad"] = (hf_gpt2(), (torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0)),))
    return cases


def _untimed(trace_text):
    """A printed trace without what varies from run to run: the time its pass took (the provenance line says
    "(took 12 us)"), the process-wide numbers of converted branch sites in arm names (_thunder_then_3), and the
    counter a registry name gets while another live graph holds it (_constants_509c115099dd_1)."""
    trace_text = re.sub(r" \(took [^)]*\)", "", trace_text, count=1)
    trace_text = re.sub(r"(from thunder\.core\.registry import \w+_[0-9a-f]{12})_\d+ as ", r"\1 as ", trace_text)
    return re.sub(r"\b(_thunder_(?:then|else))_\d+\b", r"\1_N", trace_text)


def _kernel_body(source):
    """A generated translation unit without its preamble (math helpers shared by every kernel)."""
    start = source.find('extern "C" int')
    return source[start:] if start >= 0 else source


def record(name, fn, args):
    """The text recorded for one program: each compiled graph's final trace and generated kernels."""
    jitted = thunder.jit(fn)
    no_grad = name.endswith(".no_grad")
    with torch.no_grad() if no_grad else torch.enable_grad():
        jitted(*args)
    parts = [f"# replay record: {name}"]
    for i, graph in enumerate(thunder.compile_stats(jitted).graphs):
        if not graph["compiled"]:
            parts.append(f"## graph {i}: runs with torch ({graph['reason']})")
            continue
        parts.append(f"## graph {i}: final trace\n{_untimed(str(thunder.last_traces(jitted, i)[-1]))}")
        for k, kernel in enumerate(thunder.last_kernels(jitted, i)):
            parts.append(f"## graph {i}: {kernel['executor']} kernels, unit {k}\n{_kernel_body(kernel['source'])}")
    return "\n\n".join(part.rstrip() for part in parts) + "\n"


def path_of(name):
    return os.path.join(REPLAY_DIR, name + ".txt")


def main(argv):
    """Records every program (or those named in argv) into tests/replay/."""
    os.makedirs(REPLAY_DIR, exist_ok=True)
    for name, (fn, args) in programs().items():
        if argv and name not in argv:
            continue
        with open(path_of(name), "w") as f:
            f.write(record(name, fn, args))
        print("recorded", path_of(name))


if __name__ == "__main__":
    main(sys.argv[1:])
