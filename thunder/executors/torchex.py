"""The torch executor: runs every op with eager PyTorch. It is always last in
line and claims everything, so every trace can run.

This module also provides ``prims`` and ``ltorch``, the reference namespaces
that printed traces import: ``prims.add(a, b)`` and ``ltorch.softmax(x, -1)``
run here with torch eager, which is what makes every trace a runnable program.
"""
import functools
import linecache
import math
import operator
import os
import re
import types
import warnings

import torch
import torch.nn.functional as F

from thunder import _core
from thunder.core.dtypes import to_torch
from thunder.core.options import int_from_environment
from thunder.executors import Executor


def _dtype(d):
    return to_torch(d) if isinstance(d, _core.DType) else d


# ---- prims, implemented with torch (semantics documented in csrc/ops/prims.cc) ----

def broadcast_in_dim(a, shape, broadcast_dimensions):
    view_shape = [1] * len(shape)
    for src, dst in enumerate(broadcast_dimensions):
        view_shape[dst] = a.shape[src]
    return a.reshape(view_shape).expand(shape)


@functools.lru_cache(maxsize=4096)
def _slice_index(start_indices, end_indices, strides):
    return tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides or (1,) * len(start_indices)))


def _check_in_range(a, low, high, message):
    """prims.check_in_range: ``a`` itself once every element lies in [low, high] (NaN does not).

    Raises:
        RuntimeError: an element does not, with ``message``: the one ATen's binary cross entropy raises for its input
            or target, or masked_fill for a value beyond the input's dtype."""
    if a.numel() and not bool(((a >= low) & (a <= high)).all()):
        raise RuntimeError(message)
    return a


def _take_along_axis(a, index, dim):
    """prims.take_along_axis: gather's values, the index's shape (a broadcast along the other dims where a has
    size 1). torch.gather, not torch.take_along_dim, which does not check its indices on the CPU: an out-of-range
    one (an nll_loss target beyond the class count) read another element, silently, where eager raises."""
    dim = dim % a.dim() if a.dim() else 0
    if any(i > s for k, (i, s) in enumerate(zip(index.shape, a.shape)) if k != dim):
        a = a.expand([s if k == dim else max(s, i) for k, (i, s) in enumerate(zip(index.shape, a.shape))])
    return torch.gather(a, dim, index)


def _slice(a, start_indices, end_indices, strides=None):
    # Traces pass the bounds as tuples of constants: the index is made once per distinct slice.
    try:
        return a[_slice_index(start_indices, end_indices, strides)]
    except TypeError:  # unhashable bounds (lists)
        return a[_slice_index.__wrapped__(tuple(start_indices), tuple(end_indices), strides and tuple(strides))]


def convert_element_type(a, dtype):
    dtype = _dtype(dtype)
    if isinstance(a, torch.Tensor):
        return a.to(dtype)
    return {torch.bool: bool}.get(dtype, float if dtype.is_floating_point else complex if dtype.is_complex else int)(a)


def full(shape, fill_value, dtype, device):
    return torch.full(tuple(shape), fill_value, dtype=_dtype(dtype), device=device)


def iota(length, start, step, dtype, device):
    return torch.arange(start, start + length * step, step, dtype=_dtype(dtype), device=device)[:length]


# ---- randomness: prims.random_seed and prims.uniform_philox (csrc/codegen/philox.h states the algorithm) ----

_MASK32 = 0xFFFFFFFF
_PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # the round multipliers
_PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # the Weyl constants bumping the key


def random_seed():
    """prims.random_seed: a seed drawn from torch's default (CPU) generator, as a 0-d int64 CPU tensor. Each run
    draws one per dropout, so ``torch.manual_seed(s)`` makes runs reproducible and each run's masks new."""
    return torch.randint(-2**63, 2**63 - 1, (), dtype=torch.int64)


def _mulhilo(a, m):
    """(high, low) 32-bit words of a * m, for int64 tensors a of 32-bit values and a 32-bit constant m, in int64
    arithmetic that never overflows (a * m itself can reach 2^64): a * m = a * m_hi * 2^16 + a * m_lo."""
    p_lo, p_hi = a * (m & 0xFFFF), a * (m >> 16)  # each < 2^48
    return (p_hi + (p_lo >> 16)) >> 16, (((p_hi & 0xFFFF) << 16) + p_lo) & _MASK32


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 (Salmon et al., SC '11) of the counters (c0, c1, c2, c3) under the key (k0, k1): int64
    tensors (or ints) holding 32-bit words; returns the four output words as int64 tensors."""
    for _ in range(10):
        hi0, lo0 = _mulhilo(c0, _PHILOX_M[0])
        hi1, lo1 = _mulhilo(c2, _PHILOX_M[1])
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0, k1 = (k0 + _PHILOX_W[0]) & _MASK32, (k1 + _PHILOX_W[1]) & _MASK32
    return c0, c1, c2, c3


_UNIFORM_BITS = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}


def uniform_philox(shape, seed, offset, dtype, device):
    """prims.uniform_philox: uniform values in [0, 1) of ``shape``, element i (row-major) drawn from the counter
    (offset + i) under the key ``seed`` -- bit for bit what the CPU kernels compute (csrc/codegen/philox.h)."""
    dtype = _dtype(dtype)
    seed = int(seed) & (2**64 - 1)
    n = math.prod(shape)
    counter = torch.arange(offset, offset + n, dtype=torch.int64, device=device)
    zero = torch.zeros((), dtype=torch.int64, device=device)
    w0, w1, _, _ = philox4x32_10(counter & _MASK32, counter >> 32, zero, zero, seed & _MASK32, seed >> 32)
    if dtype == torch.float64:
        u = ((w0 << 21) | (w1 >> 11)).to(torch.float64) * 2.0**-53
    else:
        bits = _UNIFORM_BITS[dtype]
        u = (w0 >> (32 - bits)).to(torch.float32) * 2.0**-bits
    return u.to(dtype).reshape(tuple(shape))


# ---- matmuls: float32 products on the CPU through oneDNN where torch's BLAS is slower ----
#
# torch's float32 mm on the CPU is MKL's sgemm, which on AMD processors runs its AVX2 code (2026-12-02, AMD EPYC
# family 26, one thread: [512, 256] @ [256, 768] 2.1 ms, 94 GFLOPS), while oneDNN's matmul, which torch ships too,
# uses AVX-512 (0.92 ms, 219 GFLOPS; 2.2-2.4x at every shape and operand layout of the GPT-2 and Llama training
# steps, transposed operands included). Both accumulate in float32. oneDNN's fixed cost per call is about 12 us
# (MKL's 1 us), so small products stay with torch; so do products that record autograd (the oneDNN op has no
# derivative: create_graph reruns and torch's own autograd see torch's ops) and every other dtype and device.
# Without AVX-512 there is nothing to gain and memory to lose: on an AMD EPYC with AVX2 only (2026-12-03, one
# thread) oneDNN is 10-25% slower than MKL at the same shapes, and it copies a column-major left operand (a
# transposed activation in a backward) before the product, a temporary MKL does not make.
_ONEDNN_LINEAR = (torch.ops.mkldnn._linear_pointwise.default
                  if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
                  and torch.backends.cpu.get_cpu_capability().startswith("AVX512")
                  and os.environ.get("THUNDER_ONEDNN_MATMUL", "1") != "0" else None)
_ONEDNN_MIN_ROWS = 8           # below, a matrix-vector-like product: sgemm is faster
_ONEDNN_MIN_MACS = 1 << 21     # [128, 128] @ [128, 128]: where oneDNN's fixed cost is paid back
# oneDNN makes a primitive per product shape and keeps it (0.65-0.9 MB each here, and more again once its cache
# of 1024 evicts), so a graph with symbolic sizes, called at a new length, made the process grow by ~2.5 MB for a
# 2-layer GPT-2. The first _ONEDNN_MAX_SHAPES (rows, k, n) take oneDNN; products of other shapes take torch's.
_ONEDNN_MAX_SHAPES = int_from_environment("THUNDER_ONEDNN_MAX_SHAPES", 128, minimum=0)
_onednn_shapes = set()


def _dense_2d(t):
    """A matrix oneDNN takes: row-major or column-major (a transposed view of a row-major one; a column-major left
    operand is copied first)."""
    return t.dim() == 2 and (t.is_contiguous() or t.mT.is_contiguous())


def _onednn_linear(x, w, bias):
    """``x @ w.mT + bias`` (``torch.nn.functional.linear``) through oneDNN, or None where torch should compute
    it (see above). ``x`` is [..., K] (row-major, or a column-major matrix), ``w`` [N, K], ``bias`` None or [N].
    Only the wrappers below call it, after the size test in their conditions: oneDNN is loaded, ``w`` is a matrix
    and the product has at least ``_ONEDNN_MIN_MACS`` multiply-adds (so K and N are not 0)."""
    n, k = w.shape
    if x.numel() // k < _ONEDNN_MIN_ROWS:
        return None
    if x.dtype != torch.float32 or w.dtype != torch.float32 or x.device.type != "cpu" or w.device.type != "cpu" \
            or x.dim() < 2 or x.shape[-1] != k or not _dense_2d(w) or not (x.is_contiguous() or _dense_2d(x)):
        return None
    if bias is not None and (bias.dtype != torch.float32 or bias.device.type != "cpu" or bias.shape != (n,)
                             or not bias.is_contiguous()):
        return None
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (bias is not None and bias.requires_grad)):
        return None
    shape = (x.numel() // k, k, n)
    if shape not in _onednn_shapes:
        if len(_onednn_shapes) >= _ONEDNN_MAX_SHAPES:
            return None
        _onednn_shapes.add(shape)
    return _ONEDNN_LINEAR(x, w, bias, "none", [], "")


# Each wrapper first tests the product's size, written out in its condition, the number of multiply-adds being the
# left operand's element count times the right one's columns (and oneDNN loaded): a small product (a tiny MLP's)
# goes to torch after two attribute reads, where the full test cost ~0.8 us a call.

def _matmul(a, b):
    """prims.matmul: torch.matmul; a batch of rows times a matrix through oneDNN where that is faster."""
    if _ONEDNN_LINEAR is not None and b.dim() == 2 and a.numel() * b.shape[1] >= _ONEDNN_MIN_MACS:
        out = _onednn_linear(a, b.mT, None)
        if out is not None:
            return out
    return torch.matmul(a, b)


def _linear(input, weight, bias=None):
    """ltorch.linear: torch.nn.functional.linear (as torch defines it: torch_functional), through oneDNN where that
    is faster."""
    if _ONEDNN_LINEAR is not None and weight.dim() == 2 and input.numel() * weight.shape[0] >= _ONEDNN_MIN_MACS \
            and (bias is None or isinstance(bias, torch.Tensor)):
        out = _onednn_linear(input, weight, bias)
        if out is not None:
            return out
    return _F_LINEAR(input, weight, bias)


def _addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """ltorch.addmm: torch.addmm; a bias vector plus a product (GPT-2's Conv1D) through oneDNN where faster."""
    if _ONEDNN_LINEAR is not None and beta == 1 and alpha == 1 and mat2.dim() == 2 \
            and mat1.numel() * mat2.shape[1] >= _ONEDNN_MIN_MACS and isinstance(input, torch.Tensor) \
            and input.dim() == 1 and mat1.dim() == 2:
        out = _onednn_linear(mat1, mat2.mT, input)
        if out is not None:
            return out
    return torch.addmm(input, mat1, mat2, beta=beta, alpha=alpha)


def _fused_attention_arguments(query, key, value, attn_mask, enable_gqa):
    """(key, value, mask, groups) as eager's attention passes them to torch's fused CPU kernels: grouped-query keys
    and values repeated for the ``groups`` query heads each serves, a bool mask made 0 and -inf in the query's
    dtype."""
    groups = query.shape[-3] // key.shape[-3] if enable_gqa and query.shape[-3] != key.shape[-3] else 1
    if groups > 1:
        key, value = key.repeat_interleave(groups, -3), value.repeat_interleave(groups, -3)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device).masked_fill_(
            attn_mask.logical_not(), float("-inf"))
    return key, value, attn_mask, groups


def _attention_with_logsumexp(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """ltorch.attention_with_logsumexp: (attention's output, the log-sum-exp of each row of its scores) from
    torch's fused CPU kernel, the one eager's scaled_dot_product_attention runs there, given its arguments as
    eager's attention gives them (_fused_attention_arguments). The autodiff uses it only for what the kernel takes
    (csrc/passes/autodiff.cc: CPU, 4-D, no dropout, nothing broadcast, a 2-D or 4-D mask)."""
    key, value, attn_mask, _ = _fused_attention_arguments(query, key, value, attn_mask, enable_gqa)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, is_causal,
                                                                      attn_mask=attn_mask, scale=scale)


def _attention_backward(grad_out, query, key, value, out, logsumexp, attn_mask=None, is_causal=False, scale=None,
                        enable_gqa=False):
    """ltorch.attention_backward: (dq, dk, dv) of attention_with_logsumexp's (out, logsumexp) from torch's fused CPU
    kernel, the one eager's attention backward runs on the CPU; grouped-query keys' and values' gradients summed
    over the query heads each serves."""
    key, value, attn_mask, groups = _fused_attention_arguments(query, key, value, attn_mask, enable_gqa)
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, query, key, value, out, logsumexp, 0.0, is_causal, attn_mask=attn_mask, scale=scale)
    if groups > 1:
        dk, dv = (d.unflatten(-3, (-1, groups)).sum(-3) for d in (dk, dv))
    return dq, dk, dv


def _reduce(fn):
    def reduce(a, dims):
        return fn(a, dim=tuple(dims)) if len(dims) else fn(a, dim=()) if fn is not torch.sum else a.clone()
    return reduce


def _sum(a, dims):
    if not len(dims):
        return a.clone()  # a reduction makes a new tensor, even over no dims
    # The prim keeps its input's dtype (torch.sum promotes integers to int64).
    return torch.sum(a, dim=tuple(dims), dtype=None if a.dtype == torch.bool else a.dtype)


def _prod(a, dims):
    if not len(dims):
        return a.clone()  # a reduction makes a new tensor, even over no dims
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d, dtype=a.dtype)  # integer prods keep their dtype (eager promotes to int64)
    return a


def _arg(fn):
    """argmax/argmin; torch's take no bool input, whose order is that of 0 and 1."""
    def impl(a, dim):
        a = a.to(torch.uint8) if a.dtype == torch.bool else a
        return fn(a) if dim is None else fn(a, dim)
    return impl


def _number_or_tensor(tensor_fn, number_fn, tensors_only=False):
    """A binary prim over tensors or numbers. Where torch takes no number in that position (torch.maximum,
    torch.atan2, torch.logical_and, ...; any function with a number first), a number becomes a 0-dim tensor
    of the dtype torch would promote the pair to (torch.result_type), so that the result's dtype is the one a
    Python number gives, also against a 0-dim tensor. The number is converted as ATen converts a wrapped one (a
    0-dim int64 or float64 tensor cast to that dtype): without a check, so 300 is 44 in uint8, as eager's
    ``torch.remainder(300, x)``."""
    def impl(*args):
        tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if tensor is None:
            return number_fn(*args)
        if tensors_only or not isinstance(args[0], torch.Tensor):
            args = [a if isinstance(a, torch.Tensor) else
                    torch.tensor(a, dtype=torch.float64 if isinstance(a, float) else None, device=tensor.device)
                    .to(torch.result_type(tensor, a)) for a in args]
        return tensor_fn(*args)
    return impl


_UNARY = ["neg", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
          "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv",
          "lgamma", "digamma", "floor", "ceil", "round", "trunc", "sign", "reciprocal", "bitwise_not", "sigmoid",
          "abs", "isnan", "isinf", "isfinite", "signbit", "logical_not"]
_BINARY = ["add", "sub", "mul", "div", "remainder", "fmod", "pow", "maximum", "minimum", "atan2", "bitwise_and",
           "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "floor_divide", "copysign",
           "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"]
_NUMBER_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
                  "pow": operator.pow, "maximum": max, "minimum": min, "eq": operator.eq, "ne": operator.ne,
                  "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
                  "remainder": operator.mod, "floor_divide": operator.floordiv}


# torch functions that take no Python number for either operand.
_TENSORS_ONLY = {"maximum", "minimum", "atan2", "logical_and", "logical_or", "logical_xor"}


def _prim_div(a, b):
    # Integer tensors divide with truncation, like C; float tensors divide exactly. (A number may arrive here as a
    # 0-dim tensor, so look at both operands: 1 / float_tensor is exact.)
    def exact(x):
        return isinstance(x, (float, complex)) or (isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()))
    if not exact(a) and not exact(b):
        return torch.div(a, b, rounding_mode="trunc")
    return torch.div(a, b)


def _copy_(a, src, when=None):
    """ltorch.copy_ and prims.copy_to: writes ``src`` into ``a`` in place. A tensor ``src`` is broadcast to
    ``a``'s shape and cast to its dtype; a number fills ``a``. Returns nothing (the ops have no output).
    ``when`` (copy_to only): None, or a bool tensor of one element; where it is false nothing is written (the
    copy-back of an input only the untaken arms of converted branches wrote: eager bumped no version).

    On a GPU, reading ``when`` on the host waits for the device (and raises while a CUDA graph is captured): there,
    under no_grad or while capturing, the copy writes ``where(when, src, a)`` instead -- the same values, with the
    version bump eager would not make, which matters only to a tensor autograd saved.

    A leaf that requires grad (a parameter) can only have been written under ``torch.no_grad()`` in eager, so
    its copy-back, at the end of the trace, runs without recording autograd too."""
    if when is not None:
        if when.device.type == "cuda" and (not torch.is_grad_enabled() or torch.cuda.is_current_stream_capturing()):
            src = torch.where(when, src, a)
        elif not when:
            return
    if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad and torch.is_grad_enabled():
        with torch.no_grad():
            return _copy_(a, src)
    if isinstance(src, torch.Tensor):
        a.copy_(src)
    else:
        a.fill_(src)


def slice_update(a, src, start, stop, step=None):
    """prims.slice_update: a copy of ``a`` whose slice ``[start_d:stop_d:step_d for each dim d]`` is ``src``
    (which has exactly the slice's shape and ``a``'s dtype); ``a`` itself is not modified."""
    step = step or [1] * a.dim()
    out = a.clone()
    out[tuple(slice(s, e, st) for s, e, st in zip(start, stop, step))] = src
    return out


def _region_marker(pred):
    """prims.branch_begin / branch_else / branch_end: nothing to run. They mark ``if pred: <then> else: <else>``
    in a trace where both arms were traced one after the other, so a trace that still holds them is not
    functional: it runs both arms' writes. The functionalization pass removes them (merging the arms' writes
    with ``where``); run such a trace only after it."""
    return None


def _unary(fn):
    """A unary prim: ``fn`` on a tensor; on a number (a prim of numbers known only at run time, e.g. the log of a
    float base in the backward of ``s ** x``) ``fn`` on a 0-d tensor of it, in double precision where the result
    is a float, read back as a Python number."""
    def impl(a):
        if isinstance(a, torch.Tensor):
            return fn(a)
        t = torch.tensor(a, dtype=torch.float64) if isinstance(a, float) else torch.tensor(a)
        out = fn(t)
        if out.is_floating_point() and not t.is_floating_point():
            out = fn(t.double())
        return out.item()
    return impl


def _make_prims():
    ns = {}
    for name in _UNARY:
        ns[name] = _unary(getattr(torch, name))
    for name in _BINARY:
        ns[name] = _number_or_tensor(getattr(torch, name), _NUMBER_BINARY.get(name, getattr(torch, name)),
                                     name in _TENSORS_ONLY)
    ns["div"] = _number_or_tensor(_prim_div, operator.truediv)
    ns.update(
        where=torch.where, convert_element_type=convert_element_type, broadcast_in_dim=broadcast_in_dim,
        reshape=lambda a, shape: a.reshape(tuple(shape)), transpose=lambda a, permutation: a.permute(tuple(permutation)),
        slice=_slice, squeeze=lambda a, dims: a.squeeze(tuple(dims)) if len(dims) else a,
        cat=lambda tensors, dim: torch.cat(tensors, dim), flip=lambda a, dims: torch.flip(a, tuple(dims)),
        alias=lambda a: a, sum=_sum,
        prod=_prod, amax=lambda a, dims: torch.amax(a, dim=tuple(dims)) if len(dims) else a.clone(),
        amin=lambda a, dims: torch.amin(a, dim=tuple(dims)) if len(dims) else a.clone(),
        var=lambda a, dims, correction: torch.var(a, dim=tuple(dims), correction=correction),
        argmax=_arg(torch.argmax), argmin=_arg(torch.argmin), matmul=_matmul, full=full, iota=iota,
        random_seed=random_seed, uniform_philox=uniform_philox,
        take=lambda a, index, dim: torch.index_select(a, dim, index.reshape(-1)).reshape(
            a.shape[:dim] + index.shape + a.shape[dim + 1:]) if index.dim() == 0 else torch.index_select(a, dim, index),
        take_along_axis=_take_along_axis,
        copy_to=_copy_, slice_update=slice_update, detach=lambda a: a.detach(),
        branch_begin=_region_marker, branch_else=_region_marker, branch_end=_region_marker,
        check_in_range=_check_in_range,
    )
    ns.update({  # gather, scatter and index ops (semantics in csrc/ops/torch_layout.cc)
        "clone": lambda a: a.clone(),
        "gather": lambda a, dim, index: torch.gather(a, dim, index),
        "scatter": lambda a, dim, index, src, reduce=None: torch.scatter(a, dim, index, src),
        "scatter_add": lambda a, dim, index, src: torch.scatter_add(a, dim, index, src),
        "scatter_reduce": lambda a, dim, index, src, reduce, include_self: torch.scatter_reduce(
            a, dim, index, src, reduce, include_self=include_self),
        "index_add": lambda a, dim, index, source, alpha: torch.index_add(a, dim, index, source, alpha=alpha),
        "index_copy": lambda a, dim, index, source: torch.index_copy(a, dim, index, source),
        "index_fill": lambda a, dim, index, value: torch.index_fill(a, dim, index, value),
        "index_put": lambda a, indices, values, accumulate: torch.index_put(a, tuple(indices), values, accumulate),
    })
    missing = set(_core.native_ops("prims")) - set(ns) - {"tensor_constant"}
    assert not missing, f"torch executor lacks prims {sorted(missing)}"
    return ns


prims = types.SimpleNamespace(**_make_prims())

# ---- torch-level ops: the torch callable with the same signature ----

_F = "torch.nn.functional."

# view runs as reshape: the core tracks no strides, so a value the trace computes may be laid out otherwise than
# eager's (x.transpose(1, 2).contiguous().view(...) after an attention whose eager output made the transpose
# contiguous, and the contiguous() a no-op); reshape is a view wherever view would be one.
_LTORCH_OVERRIDES = {
    "getitem": "operator.getitem", "view": "torch.Tensor.reshape", "to": "torch.Tensor.to",
    "contiguous": "torch.Tensor.contiguous", "expand": "torch.Tensor.expand", "relu": _F + "relu",
    "gelu": _F + "gelu", "silu": _F + "silu", "dropout": _F + "dropout",
    "linear": _F + "linear", "embedding": _F + "embedding",
    "layer_norm": _F + "layer_norm", "rms_norm": _F + "rms_norm",
    "cross_entropy": _F + "cross_entropy",
    "scaled_dot_product_attention": _F + "scaled_dot_product_attention",
    # torch.special, torch.linalg and Tensor-method spellings, and F's activations, losses, convolutions and pooling
    "ndtr": "torch.special.ndtr", "entr": "torch.special.entr", "xlog1py": "torch.special.xlog1py",
    "log_sigmoid": _F + "logsigmoid", "max_dim": "torch.max", "min_dim": "torch.min",
    "vector_norm": "torch.linalg.vector_norm", "repeat": "torch.Tensor.repeat", "type_as": "torch.Tensor.type_as",
    "view_as": "torch.Tensor.view_as", "reshape_as": "torch.Tensor.reshape_as", "expand_as": "torch.Tensor.expand_as",
    "new_zeros": "torch.Tensor.new_zeros", "new_ones": "torch.Tensor.new_ones", "new_empty": "torch.Tensor.new_empty",
    "new_full": "torch.Tensor.new_full", "broadcast_tensors": "torch._C._VariableFunctions.broadcast_tensors",
    "batch_norm": _F + "batch_norm", "group_norm": _F + "group_norm", "normalize": _F + "normalize", "pad": _F + "pad",
    "softmin": _F + "softmin", "one_hot": _F + "one_hot",
    **{n: _F + n for n in ("hardtanh", "relu6", "hardsigmoid", "hardswish", "elu", "celu", "selu", "leaky_relu",
                          "softplus", "mish", "softsign", "tanhshrink", "hardshrink", "softshrink", "threshold", "glu",
                          "prelu", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss",
                          "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "nll_loss",
                          "margin_ranking_loss", "hinge_embedding_loss", "poisson_nll_loss", "pixel_shuffle",
                          "pixel_unshuffle")},
    # ATen's backwards of the piecewise-linear activations (their VJP rules emit them): ATen's autograd connects
    # them to their input, so a create_graph=True backward run with torch ops differentiates as eager's
    **{n: f"torch.ops.aten.{n}" for n in ("threshold_backward", "hardtanh_backward", "hardshrink_backward",
                                          "softshrink_backward", "leaky_relu_backward")},
    **{f"{kind}{n}d": _F + f"{kind}{n}d" for n in (1, 2, 3)
       for kind in ("conv", "conv_transpose", "max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool")},
}


# ---- torch.nn.functional as torch defines it ----
#
# Code that wraps an F function (fake quantisation, a LoRA-style patch: `F.linear = wrapped`) is traced by Dynamo,
# which inlines the wrapper: its extra ops are in the graph, around a call of the function it wraps. The torch
# executor must run that call as torch's function: calling torch.nn.functional.<op> as it is when the trace runs
# applied the wrapper a second time (a tester's conv2d and linear, each scaled twice). So the F functions the
# torch executor calls are bound once, here, when thunder is imported, and a wrapper installed later is never
# seen. One installed before is recognised by its code being outside torch's package, and replaced by the
# builtin torch/nn/functional.py names for it (`conv2d = _add_docstr(torch.conv2d, ...)`); a Python function of F
# cannot be had back: the replacement is kept, and a warning says so. The importer does not take such a wrapper for
# the op (fx_targets._build_tables): Dynamo records a wrapper of a Python F function it lists as in-graph
# (layer_norm, relu...) as one call, which then runs opaque, once. Traces print these calls as ``ltorch.<op>``:
# ``torch.nn.functional.<op>`` would be looked up again at each call.

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def defined_by_torch(fn):
    """Whether ``fn`` is torch's own: a builtin of torch._C's op modules, or a function whose code is in torch."""
    if isinstance(fn, types.BuiltinFunctionType):
        return any(getattr(m, fn.__name__, None) is fn for m in (torch._C._nn, torch._C._VariableFunctions))
    code = getattr(fn, "__code__", None)
    return code is not None and code.co_filename.startswith(_TORCH_DIR)


def torch_functional(attr):
    """``torch.nn.functional.<attr>`` as torch defines it (see above): the attribute itself unless something
    replaced it before thunder's import. Warns where the function torch defines cannot be found."""
    fn = getattr(F, attr)
    if defined_by_torch(fn):
        return fn
    source = "".join(linecache.getlines(F.__file__))
    builtin = re.search(rf"^{attr} = _add_docstr\(\s*torch\.([\w.]+),", source, re.M)
    if builtin:  # torch.conv2d is torch._C._VariableFunctions.conv2d; torch._C._nn.linear is itself
        name = builtin[1]
        return getattr(torch._C._nn, name[len("_C._nn."):]) if name.startswith("_C._nn.") else \
            getattr(torch._C._VariableFunctions, name)
    alias = re.search(rf"^{attr} = (\w+)$", source, re.M)  # threshold = _threshold
    if alias:
        return torch_functional(alias[1])
    warnings.warn(f"torch.nn.functional.{attr} was replaced before thunder was imported, and thunder cannot tell "
                  "which function it replaced: a torch-level call thunder runs with torch calls the replacement "
                  "(twice where Dynamo traced it into the graph too). Import thunder before replacing "
                  "torch.nn.functional functions.")
    return fn


_F_LINEAR = torch_functional("linear")

#: torch-level ops implemented here, in Python (no torch callable has their signature and semantics).
_LTORCH_PYTHON = {"copy_": _copy_, "linear": _linear, "addmm": _addmm,
                  "attention_with_logsumexp": _attention_with_logsumexp, "attention_backward": _attention_backward}


def _resolve(expr):
    obj = {"torch": torch, "operator": operator}[expr.split(".")[0]]
    for part in expr.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _ltorch_callees():
    """(callee expression per torch-level op, the object ``ltorch.<op>`` is). An op of torch.nn.functional is
    called as ``ltorch.<op>``, bound here to the function torch defines (torch_functional), not as
    ``torch.nn.functional.<op>``, which a trace would look up at each call."""
    callees, objects = {}, {}
    for name in _core.native_ops("ltorch"):
        if name in _LTORCH_PYTHON:
            callees[name], objects[name] = f"ltorch.{name}", _LTORCH_PYTHON[name]
            continue
        expr = _LTORCH_OVERRIDES.get(name) or (f"torch.{name}" if hasattr(torch, name) else f"torch.nn.functional.{name}")
        if expr.startswith(_F):
            callees[name], objects[name] = f"ltorch.{name}", torch_functional(expr[len(_F):])
        else:
            callees[name], objects[name] = expr, _resolve(expr)  # fails loudly at import if a mapping is wrong
    return callees, objects


LTORCH_CALLEES, _ltorch_objects = _ltorch_callees()
ltorch = types.SimpleNamespace(**_ltorch_objects)

_callees = {f"ltorch.{n}": e for n, e in LTORCH_CALLEES.items()}
_callees.update({f"prims.{n}": f"prims.{n}" for n in _core.native_ops("prims")})
_callees["opaque"] = ""  # opaque symbols keep the callable they were captured with


def _own_use(t):
    """An alias of ``t`` (which requires grad) that only this use of it reaches: differentiated in place of ``t``,
    ``torch.autograd.grad`` gives the derivative through this argument alone. ``t`` itself gave the total
    derivative: where another argument also depends on it (GRUCell(x, tanh(x)), cosine_similarity(x, tanh(x))),
    the path through that argument was counted in both, and thunder's backward, which adds that argument's own
    gradient, counted it twice. A view keeps the connection to ``t`` (the second derivative flows back through it)
    and copies nothing; a layout without views (sparse) takes a copy, which connects the same way."""
    return t.view_as(t) if t.layout == torch.strided else t.clone()


def autograd_vjp(fn, wants):
    """The generic VJP rule of thunder's autodiff, for an op without its own rule (an opaque op, conv, sort...).

    Returns ``vjp(grads, *args, **kwargs)``: recomputes ``fn(*args, **kwargs)`` with the arguments named in
    ``wants`` (positions of positional arguments, names of keyword arguments) as fresh leaves, and returns their
    gradients, in the order of ``wants`` (zeros where the output does not depend on one), for the output
    gradients ``grads`` (one per tensor of the output, flattened; None for outputs that take none). ``fn`` has no
    effects the autodiff knows of (it does not use this rule for random ops or writes), so the recomputation gives
    the forward's values; the other tensor arguments are passed as copies, so that a write the op makes that
    the trace does not show (batch_norm's running statistics) is not made twice.

    Called with grad mode on -- a backward run for ``create_graph=True`` (a second derivative) -- the gradients
    are themselves differentiable: the arguments that require grad are differentiated through an alias of each
    (``_own_use``), not as detached leaves, and ``torch.autograd.grad`` records (``create_graph``), so the result
    depends on both the arguments and ``grads`` as eager's double backward does.
    """
    def vjp(grads, *args, **kwargs):
        higher = torch.is_grad_enabled()
        args = [a.clone() if isinstance(a, torch.Tensor) and i not in wants else a for i, a in enumerate(args)]
        kwargs = {k: v.clone() if isinstance(v, torch.Tensor) and k not in wants else v for k, v in kwargs.items()}
        with torch.enable_grad():
            inputs = []
            for key in wants:
                where = args if isinstance(key, int) else kwargs
                if not (higher and where[key].requires_grad):
                    where[key] = where[key].detach().requires_grad_()
                else:
                    where[key] = _own_use(where[key])
                inputs.append(where[key])
            out = fn(*args, **kwargs)
        pairs = [(o, g) for o, g in zip(torch.utils._pytree.tree_leaves(out), grads)
                 if g is not None and isinstance(o, torch.Tensor) and o.requires_grad]
        got = torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True,
                                  create_graph=higher) if pairs else [None] * len(inputs)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(got, inputs))
    return vjp


#: The torch executor: claims every native op and every opaque op.
torch_executor = Executor("torch", _callees, {"torch": torch, "operator": operator, "prims": prims, "ltorch": ltorch,
                                              "math": math, "autograd_vjp": autograd_vjp})
