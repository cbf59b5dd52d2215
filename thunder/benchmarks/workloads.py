"""The benchmark workloads: plain PyTorch programs and the inputs to call them with.

This module imports only torch (and transformers, lazily, for the models): the
lightning-thunder runner, which lives in its own virtual environment where
``import thunder`` is a different package, loads this file by path and runs
the very same definitions.

A :class:`Workload` is a name, a group and a ``build(device)`` that returns a
:class:`Case`: the program to compile (``target``: a function or an
``nn.Module``), its inputs, and ``run(callable)`` -- one step through a compiled
(or eager) version of ``target``: a call for inference, a call plus
``backward()`` for a training step. ``run`` returns a tensor to compare
contenders by.

Groups:
  seed      the two examples from examples/main.py (a loop with a data-dependent branch,
            run forward and backward as in the example; an nn.Module with in-place writes)
  overhead  ~50 elementwise ops on 2x2 tensors, a bare ``a + b``, a tiny MLP module: per-call overhead
  kernel    memory-bound kernels, each at a cache-resident shape (256 KiB per tensor) and
            a DRAM-sized one (64 MiB per tensor); ``Case.bytes`` = sizes of inputs + outputs
  model     Hugging Face GPT-2 and Llama with small random configs (4 layers, hidden 256,
            vocabulary 1024, sequence 64): inference at batch 1 and 8, a training step
            (forward + backward of the LM loss) at batch 8, in float32 and bfloat16
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

# Elements per tensor at the two kernel shapes: 64 Ki floats = 256 KiB (fits in one core's L2);
# 16 Mi floats = 64 MiB, past the caches: on the 2-core VM this suite was written on, a copy runs at
# ~28 GB/s up to 16 MiB (L3), and at ~13 GB/s, as for 256 MiB, from 64 MiB on (DRAM).
CACHE_ELEMS = 64 * 1024
DRAM_ELEMS = 16 * 1024 * 1024
ROW = 1024  # the last dimension of the 2-D kernel inputs (softmax, norms, cross-entropy vocabulary)

MODEL_SEQ = 64
MODEL_VOCAB = 1024


@dataclass
class Case:
    """One built workload: what to compile, and how to run one step of it."""

    target: Any                        # a function or an nn.Module, handed to each contender's compile
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    train: bool = False                # run() does backward() after the call
    no_grad: bool = False              # run() calls under torch.no_grad()
    output: Callable | None = None     # picks the tensor to return from the call's result
    grads: list = field(default_factory=list)  # tensors whose .grad run() clears after backward
    bytes: int | None = None           # memory-bound kernels: bytes of inputs + outputs
    size_class: str | None = None      # "cache" or "dram" for kernels
    dtype: torch.dtype = torch.float32

    def run(self, fn):
        """One step through ``fn`` (the target or a compiled version of it); returns a detached tensor."""
        if self.no_grad:
            with torch.no_grad():
                out = fn(*self.args, **self.kwargs)
        else:
            out = fn(*self.args, **self.kwargs)
        if self.output is not None:
            out = self.output(out)
        if self.train:
            out.backward()
            for t in self.grads:
                t.grad = None
        return out.detach() if isinstance(out, torch.Tensor) else out


@dataclass
class Workload:
    name: str                          # "group/what/variant", e.g. "kernel/softmax/dram"
    group: str
    build: Callable[[torch.device], Case]
    quick: bool = False                # part of the --quick subset
    description: str = ""


# ----------------------------------------------------------------------------- seed examples

def seed_loop_branch(x, y):
    for i in range(x.size(0)):
        if x[i] > 0:
            y = y + x[i] * x[i]
        else:
            y = y - x[i]
    return y


class SeedInplaceModel(nn.Module):
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


def seed_activation(x):
    """Example 2's complex_activation alone, on a copy of its input (so every run sees the same values)."""
    x = x.clone()
    for i in range(x.shape[1]):
        if x[0, i] > 0.5:
            x[0, i] = torch.sin(x[0, i])
        else:
            x[0, i] = torch.cos(x[0, i])
    return x


def _seed_activation(device):
    x = torch.randn(1, 20, generator=torch.Generator().manual_seed(2)).to(device)
    return Case(seed_activation, (x,), no_grad=True)


def _seed_loop(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, generator=g).to(device).requires_grad_()
    y = torch.tensor(0.0, device=device, requires_grad=True)
    return Case(seed_loop_branch, (x, y), train=True, grads=[x, y])


def _seed_module(device):
    torch.manual_seed(0)
    model = SeedInplaceModel().to(device)
    inp = torch.randn(1, 10, generator=torch.Generator().manual_seed(1)).to(device)
    return Case(model, (inp,), no_grad=True)


# ----------------------------------------------------------------------------- overhead

def fifty_small_ops(a, b):
    """50 elementwise ops: 10 rounds of 5."""
    x = a
    for _ in range(10):
        x = x * b
        x = x + 0.5
        x = torch.sin(x)
        x = x - a
        x = torch.tanh(x)
    return x


def add(a, b):
    return a + b


def _tiny(fn):
    def build(device):
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(2, 2, generator=g).to(device), torch.randn(2, 2, generator=g).to(device)
        return Case(fn, (a, b), no_grad=True)
    return build


class TinyMLP(nn.Module):
    """Three linear layers, 32 -> 64 -> 64 -> 32, with ReLUs: the call itself (nn.Module's, a compiler's guards)
    costs as much as the arithmetic."""

    def __init__(self, width=32, hidden=64):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(width, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def _tiny_mlp(device):
    torch.manual_seed(0)
    model = TinyMLP().to(device).eval()
    return Case(model, (torch.randn(8, 32, generator=torch.Generator().manual_seed(1)).to(device),), no_grad=True)


# ----------------------------------------------------------------------------- kernels

def elementwise_chain(x):
    """16 elementwise ops in a row: eager reads and writes the whole tensor for each."""
    y = x * 1.25
    y = y + 0.5
    y = torch.sin(y)
    y = y * x
    y = y - 0.25
    y = torch.abs(y)
    y = torch.sqrt(y + 1.0)
    y = y * 0.75
    y = torch.exp(-y)
    y = y + x
    y = torch.tanh(y)
    y = y * y
    y = y - x
    y = torch.sigmoid(y)
    y = y * 2.0
    return y + 1.0


def gelu(x):
    return F.gelu(x)


def silu_mul(g, u):
    return F.silu(g) * u


def softmax(x):
    return torch.softmax(x, dim=-1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def adam_step(p, g, m, v, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
              step: int = 10):
    """One Adam update written with torch ops (out of place): returns the new p, m, v."""
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    p = p - lr * m_hat / (torch.sqrt(v_hat) + eps)
    return p, m, v


def _nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def _kernel(name, elems, size_class, device):
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device)

    rows = elems // ROW
    if name == "elementwise_chain":
        x = randn(rows, ROW)
        return Case(elementwise_chain, (x,), no_grad=True, bytes=2 * _nbytes(x))
    if name == "gelu":
        x = randn(rows, ROW)
        return Case(gelu, (x,), no_grad=True, bytes=2 * _nbytes(x))
    if name == "silu_mul":
        a, b = randn(rows, ROW), randn(rows, ROW)
        return Case(silu_mul, (a, b), no_grad=True, bytes=_nbytes(a, b, a))
    if name == "softmax":
        x = randn(rows, ROW)
        return Case(softmax, (x,), no_grad=True, bytes=2 * _nbytes(x))
    if name == "layer_norm":
        x, w, b = randn(rows, ROW), randn(ROW), randn(ROW)
        return Case(layer_norm, (x, w, b), no_grad=True, bytes=_nbytes(x, w, b, x))
    if name == "rms_norm":
        x, w = randn(rows, ROW), randn(ROW)
        return Case(rms_norm, (x, w), no_grad=True, bytes=_nbytes(x, w, x))
    if name == "cross_entropy":
        logits = randn(rows, ROW)
        target = torch.randint(0, ROW, (rows,), generator=g).to(device)
        return Case(cross_entropy, (logits, target), no_grad=True, bytes=_nbytes(logits, target) + 4)
    if name == "rope":
        head_dim, heads = 128, 8
        seq = elems // (heads * head_dim)
        x = randn(1, heads, seq, head_dim)
        cos, sin = randn(seq, head_dim), randn(seq, head_dim)
        return Case(rope, (x, cos, sin), no_grad=True, bytes=_nbytes(x, cos, sin, x))
    if name == "adam_step":
        p, grad, m = randn(elems), randn(elems), randn(elems)
        v = randn(elems).abs()
        return Case(adam_step, (p, grad, m, v), no_grad=True, bytes=_nbytes(p, grad, m, v) + 3 * _nbytes(p))
    raise KeyError(name)


KERNELS = ("elementwise_chain", "gelu", "silu_mul", "softmax", "layer_norm", "rms_norm", "cross_entropy", "rope",
           "adam_step")


def _kernel_builder(name, elems, size_class):
    def build(device):
        case = _kernel(name, elems, size_class, device)
        case.size_class = size_class
        return case
    return build


# ----------------------------------------------------------------------------- models

def gpt2(layers=4, hidden=256, heads=4, vocab=MODEL_VOCAB, positions=128):
    """HF GPT-2 LM, random weights, eval mode (no dropout): thunder.testing.hf_gpt2, larger."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=layers, n_head=heads, n_embd=hidden, vocab_size=vocab, n_positions=positions,
                     bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM")
    return GPT2LMHeadModel(cfg).eval()


def llama(layers=4, hidden=256, heads=4, kv_heads=2, intermediate=688, vocab=MODEL_VOCAB, positions=128):
    """HF Llama LM (grouped-query attention), random weights, eval mode: thunder.testing.hf_llama, larger."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                      hidden_size=hidden, intermediate_size=intermediate, vocab_size=vocab,
                      max_position_embeddings=positions, bos_token_id=0, eos_token_id=0, loss_type="ForCausalLM")
    return LlamaForCausalLM(cfg).eval()


def _logits(out):
    return out.logits


def _loss(out):
    return out.loss


def _model_builder(arch, mode, batch, dtype):
    def build(device):
        torch.manual_seed(0)
        model = (gpt2 if arch == "gpt2" else llama)().to(device=device, dtype=dtype)
        ids = torch.randint(0, MODEL_VOCAB, (batch, MODEL_SEQ), generator=torch.Generator().manual_seed(1)).to(device)
        if mode == "train":
            return Case(model, (ids,), {"labels": ids, "use_cache": False}, train=True, output=_loss,
                        grads=list(model.parameters()), dtype=dtype)
        # "gradinfer": inference that forgot torch.no_grad() -- parameters require grad, no backward follows
        return Case(model, (ids,), {"use_cache": False}, no_grad=mode == "infer", output=_logits, dtype=dtype)
    return build


def _mean_square(out):
    return out.pow(2).mean()


def _transformer_builder(mode, batch):
    """torch's own nn.TransformerEncoder (4 post-norm layers, d_model 256, 4 heads, feed-forward 1024, no dropout),
    whose attention in training is F.multi_head_attention_forward; the loss of a training step is the output's
    mean square."""
    def build(device):
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(256, 4, dim_feedforward=1024, dropout=0.0, batch_first=True)
        model = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).to(device)
        x = torch.randn(batch, MODEL_SEQ, 256, generator=torch.Generator().manual_seed(1)).to(device)
        if mode == "train":
            return Case(model.train(), (x,), train=True, output=_mean_square, grads=list(model.parameters()))
        return Case(model.eval(), (x,), no_grad=True)
    return build


# ----------------------------------------------------------------------------- the suite

_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}

# The --quick subset: a few of each group.
_QUICK = {"seed/loop_branch", "seed/module_inplace", "seed/activation_inplace", "overhead/fifty_ops_2x2", "overhead/add_2x2",
          "overhead/mlp3_module",
          "kernel/elementwise_chain/cache", "kernel/elementwise_chain/dram", "kernel/softmax/cache",
          "kernel/softmax/dram", "kernel/rms_norm/dram", "kernel/cross_entropy/dram",
          "model/llama/train_b8/f32"}


def all_workloads() -> list[Workload]:
    """Every workload of the full suite, in order; ``quick`` marks the --quick subset."""
    ws = [
        Workload("seed/loop_branch", "seed", _seed_loop,
                 description="examples/main.py example 1: loop over x with a data-dependent branch, forward+backward"),
        Workload("seed/module_inplace", "seed", _seed_module,
                 description="examples/main.py example 2: nn.Module with in-place writes under branches"),
        Workload("seed/activation_inplace", "seed", _seed_activation,
                 description="example 2's complex_activation alone: 20 in-place writes under branches, no_grad"),
        Workload("overhead/fifty_ops_2x2", "overhead", _tiny(fifty_small_ops),
                 description="50 elementwise ops on 2x2 tensors"),
        Workload("overhead/add_2x2", "overhead", _tiny(add), description="a + b on 2x2 tensors"),
        Workload("overhead/mlp3_module", "overhead", _tiny_mlp,
                 description="a 3-layer MLP nn.Module (32-64-64-32, batch 8), no_grad"),
    ]
    for k in KERNELS:
        for size_class, elems in (("cache", CACHE_ELEMS), ("dram", DRAM_ELEMS)):
            ws.append(Workload(f"kernel/{k}/{size_class}", "kernel", _kernel_builder(k, elems, size_class),
                               description=f"{k}, {elems * 4 // 1024 if elems < 2**18 else elems * 4 // 2**20} {'KiB' if elems < 2**18 else 'MiB'} per float32 tensor"))
    for arch in ("gpt2", "llama"):
        for dname, dtype in _DTYPES.items():
            modes = (("infer", 1), ("infer", 8), ("gradinfer", 8), ("train", 8)) if dname == "f32" else \
                (("infer", 1), ("infer", 8), ("train", 8))
            for mode, batch in modes:
                what = {"infer": "forward under no_grad", "gradinfer": "forward with grad on, no backward",
                        "train": "forward+backward"}[mode]
                ws.append(Workload(f"model/{arch}/{mode}_b{batch}/{dname}", "model",
                                   _model_builder(arch, mode, batch, dtype),
                                   description=f"HF {arch}, 4 layers, hidden 256, seq {MODEL_SEQ}, {what}"))
    for mode, what in (("infer", "forward under no_grad"), ("train", "forward+backward")):
        ws.append(Workload(f"model/transformer/{mode}_b8/f32", "model", _transformer_builder(mode, 8),
                           description=f"nn.TransformerEncoder, 4 layers, d_model 256, seq {MODEL_SEQ}, {what}"))
    for w in ws:
        w.quick = w.name in _QUICK
    return ws


def select(workloads, only=None, quick=False):
    """The workloads to run: the --quick subset if ``quick``, then those whose name matches ``only``
    (a regular expression searched in the name, so a plain substring works too)."""
    import re

    out = [w for w in workloads if w.quick or not quick]
    if only:
        pattern = re.compile(only)
        out = [w for w in out if pattern.search(w.name)]
    return out


__all__ = ["Case", "Workload", "all_workloads", "select", "KERNELS"]
