"""Conformance of thunder.jit against PyTorch's own OpInfo database.

For every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db``,
every sample input and every dtype of :data:`DTYPES` the OpInfo supports on
CPU, ``thunder.jit(lambda *a, **k: op(*a, **k))`` must agree with eager
PyTorch: values (``torch.testing.assert_close``, dtype-aware tolerances, NaN
equal), dtypes, shapes, and aliasing (an output shares storage with an input
iff eager's does). Differentiable ops are also checked in float64 against
``torch.autograd`` gradients -- for native OpInfos, gradients thunder's own
autodiff computed (``thunder.compile_stats(j).graphs[i]["backward"] ==
"thunder"``), recording which VJP rule each op took; ops with an in-place
variant are checked to mutate and return their input like eager does.

Each sample is classified by how thunder ran it:

``native``   every op of every captured graph was imported as a core op (no opaque op, no fallback)
``opaque``   thunder compiled it, with at least one opaque torch op (or a fallback)
``eager``    thunder compiled nothing (Dynamo graph break or thunder declined the graph)
``empty``    Dynamo answered without any op (e.g. a size query); nothing to compile

OpInfos listed in :data:`NATIVE_OPINFOS` must be ``native`` for every sample,
and are also run through the *decomposed* executor (only prims are claimed, so
every core decomposition is executed and checked). All other OpInfos must be
correct by any path.

Commands::

    pytest tests/test_opinfo.py                       # the CI subset (THUNDER_OPINFO=ci, default)
    THUNDER_OPINFO=full pytest tests/test_opinfo.py   # every sample of every dtype
    python -m thunder.testing_opinfo --report docs/op_coverage.md [--full] [--jobs 2]
    python -m thunder.testing_opinfo --full --native --checks grad --results grad.jsonl \
        --report docs/op_coverage.md --merge-report docs/op_coverage.md   # one check again, the rest carried
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import math
import os
import sys
import time
import warnings

import torch
import torch.utils._pytree as pytree

from thunder.testing import tolerance

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool)
DTYPE_NAMES = {d: str(d).replace("torch.", "") for d in DTYPES}

# ---------------------------------------------------------------------------------------------
# Which OpInfos thunder runs natively. Each one must run every sample, in every supported
# dtype, with no opaque op and no fallback; see tests/test_opinfo.py.
# ---------------------------------------------------------------------------------------------
NATIVE_OPINFOS: set[str] = {
    "abs",
    "acos",
    "acosh",
    "add",
    "addbmm",
    "addcdiv",
    "addcmul",
    "addmm",
    "addmm.decomposed",
    "addr",
    "all",
    "amax",
    "amin",
    "any",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "baddbmm",
    "bitwise_and",
    "bitwise_left_shift",
    "bitwise_not",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "bmm",
    "bmm.triton_optimized",
    "broadcast_tensors",
    "broadcast_to",
    "cat",
    "ceil",
    "chunk",
    "clamp",
    "clamp_max",
    "clamp_min",
    "clone",
    "column_stack",
    "contiguous",
    "copysign",
    "cos",
    "cosh",
    "count_nonzero",
    "cummax",
    "cummin",
    "cumprod",
    "cumsum",
    "deg2rad",
    "digamma",
    "div.floor_rounding",
    "div.no_rounding_mode",
    "div.trunc_rounding",
    "dot",
    "dsplit",
    "dstack",
    "empty",
    "empty_like",
    "eq",
    "erf",
    "erfc",
    "erfinv",
    "exp",
    "exp2",
    "expand",
    "expand_as",
    "expm1",
    "eye",
    "flatten",
    "flip",
    "fliplr",
    "flipud",
    "float_power",
    "floor",
    "floor_divide",
    "fmax",
    "fmin",
    "fmod",
    "frac",
    "full",
    "full_like",
    "ge",
    "gt",
    "heaviside",
    "hsplit",
    "hstack",
    "hypot",
    "index_add",
    "index_copy",
    "index_fill",
    "index_select",
    "isfinite",
    "isinf",
    "isnan",
    "isneginf",
    "isposinf",
    "isreal",
    "ldexp",
    "le",
    "lerp",
    "lgamma",
    "linalg.vector_norm",
    "linspace",
    "log",
    "log10",
    "log1p",
    "log2",
    "log_softmax",
    "log_softmax.with_dtype",
    "logaddexp",
    "logaddexp2",
    "logcumsumexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logit",
    "logspace",
    "logsumexp",
    "lt",
    "masked_fill",
    "matmul",
    "max.reduction_no_dim",
    "max.reduction_with_dim",
    "maximum",
    "mean",
    "min.reduction_no_dim",
    "min.reduction_with_dim",
    "minimum",
    "mm",
    "movedim",
    "mul",
    "mv",
    "nan_to_num",
    "nanmean",
    "nansum",
    "ne",
    "neg",
    "new_empty",
    "new_full",
    "new_ones",
    "new_zeros",
    "nn.functional.adaptive_avg_pool1d",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_avg_pool3d",
    "nn.functional.adaptive_max_pool1d",
    "nn.functional.adaptive_max_pool2d",
    "nn.functional.adaptive_max_pool3d",
    "nn.functional.avg_pool1d",
    "nn.functional.avg_pool2d",
    "nn.functional.avg_pool3d",
    "nn.functional.binary_cross_entropy",
    "nn.functional.binary_cross_entropy_with_logits",
    "nn.functional.celu",
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.conv3d",
    "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
    "nn.functional.elu",
    "nn.functional.gelu",
    "nn.functional.glu",
    "nn.functional.group_norm",
    "nn.functional.hardshrink",
    "nn.functional.hardsigmoid",
    "nn.functional.hardswish",
    "nn.functional.hardtanh",
    "nn.functional.hinge_embedding_loss",
    "nn.functional.huber_loss",
    "nn.functional.kl_div",
    "nn.functional.l1_loss",
    "nn.functional.layer_norm",
    "nn.functional.leaky_relu",
    "nn.functional.linear",
    "nn.functional.logsigmoid",
    "nn.functional.margin_ranking_loss",
    "nn.functional.max_pool1d",
    "nn.functional.max_pool2d",
    "nn.functional.max_pool3d",
    "nn.functional.mish",
    "nn.functional.mse_loss",
    "nn.functional.nll_loss",
    "nn.functional.normalize",
    "nn.functional.pad.constant",
    "nn.functional.pixel_shuffle",
    "nn.functional.pixel_unshuffle",
    "nn.functional.relu",
    "nn.functional.relu6",
    "nn.functional.rms_norm",
    "nn.functional.selu",
    "nn.functional.silu",
    "nn.functional.silu.complex",
    "nn.functional.smooth_l1_loss",
    "nn.functional.soft_margin_loss",
    "nn.functional.softmin",
    "nn.functional.softmin.with_dtype",
    "nn.functional.softplus",
    "nn.functional.softshrink",
    "nn.functional.softsign",
    "nn.functional.tanhshrink",
    "nn.functional.threshold",
    "ones",
    "ones_like",
    "outer",
    "permute",
    "positive",
    "pow",
    "prod",
    "rad2deg",
    "ravel",
    "reciprocal",
    "remainder",
    "repeat",
    "reshape",
    "reshape_as",
    "roll",
    "rot90",
    "round",
    "rsqrt",
    "rsub",
    "scalar_tensor",
    "scatter_add",
    "scatter_reduce.amax",
    "scatter_reduce.amin",
    "scatter_reduce.mean",
    "scatter_reduce.prod",
    "scatter_reduce.sum",
    "select",
    "sgn",
    "sigmoid",
    "sign",
    "signbit",
    "sin",
    "sinc",
    "sinh",
    "softmax",
    "softmax.with_dtype",
    "sort",
    "special.entr",
    "special.ndtr",
    "special.xlog1py",
    "split",
    "split.list_args",
    "split_with_sizes",
    "sqrt",
    "square",
    "squeeze",
    "squeeze.multiple",
    "stack",
    "std",
    "std.unbiased",
    "std_mean",
    "std_mean.unbiased",
    "sub",
    "sum",
    "t",
    "take_along_dim",
    "tan",
    "tanh",
    "tile",
    "topk",
    "transpose",
    "tril",
    "triu",
    "true_divide",
    "trunc",
    "unbind",
    "unflatten",
    "unsqueeze",
    "var",
    "var.unbiased",
    "var_mean",
    "var_mean.unbiased",
    "view",
    "view_as",
    "vsplit",
    "vstack",
    "where",
    "xlogy",
    "zeros",
    "zeros_like",
}

# Extra native OpInfos for a development run: THUNDER_OPINFO_NATIVE="a,b" (candidates to check).
NATIVE_OPINFOS |= {n for n in os.environ.get("THUNDER_OPINFO_NATIVE", "").split(",") if n}

# OpInfos whose outputs are uninitialized memory: only dtype, shape and aliasing are compared.
UNINITIALIZED_OUTPUT = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}

# Documented skips: (opinfo id, dtype name or "*", check kind or "*") -> the PyTorch behaviour
# thunder deliberately does not follow. Every entry is listed in docs/op_coverage.md.
_ADDCDIV = ("torch.compile's Dynamo rewrites addcdiv(input, t1, t2, value=v) into div, mul and add before any "
            "backend sees it (torch/_dynamo/variables/torch.py, handle_addcdiv); in half precision each of those "
            "rounds, where eager's kernel rounds once")
_ADDBMM = ("eager's CPU kernel adds the batch products into the result one batch at a time, rounding to half "
           "precision after each; the decomposition sums the products in one reduction (float accumulation)")
SKIPS: dict[tuple[str, str, str], str] = {
    ("addcdiv", "float16", "forward"): _ADDCDIV,
    ("addcdiv", "bfloat16", "forward"): _ADDCDIV,
    ("addcdiv", "float16", "symbolic"): _ADDCDIV,
    ("addcdiv", "bfloat16", "symbolic"): _ADDCDIV,
    ("addbmm", "float16", "decomposed"): _ADDBMM,
    ("addbmm", "bfloat16", "decomposed"): _ADDBMM,
    ("linalg.eig", "float64", "grad"):
        "the harness's loss depends on the phase of complex eigenvectors, so torch.autograd itself raises "
        "(linalg_eig_backward: ill-defined); there is no reference gradient",
}

# Documented skips of the "forward" check with THUNDER_OPINFO_EXECUTORS=cpu (generated kernels): opinfo id,
# dtype name -> the PyTorch behaviour the kernels deliberately do not follow.
_LOSS_ORDER = ("eager's fused CPU loss kernel rounds to the half dtype in another order than the decomposition's "
               "ops do (e.g. 0.5 * z * z against (z * z) * 0.5, a margin rounded to the dtype first); a few samples "
               "differ by more than the half-precision tolerance")
CPU_EXECUTOR_SKIPS: dict[tuple[str, str], str] = {
    ("nn.functional.huber_loss", "float16"): _LOSS_ORDER,
    ("nn.functional.hinge_embedding_loss", "float16"): _LOSS_ORDER,
    ("nn.functional.hinge_embedding_loss", "bfloat16"): _LOSS_ORDER,
    ("nn.functional.nll_loss", "float16"):
        "with class weights and reduction='mean', eager's CPU kernel accumulates the weighted losses in float16: "
        "on one sample it is 0.19% off the float32 result (-3.1992 for -3.1932), beyond float16 tolerance; "
        "the kernels sum in float32 and round once (-3.1934)",
}

# Checks: "forward" (default executors), "decomposed" (prims-only executor, native OpInfos),
# "grad" (float64 gradients), "inplace" (in-place variant), "symbolic" (thunder.jit(dynamic=True) with thunder's
# default executors, native OpInfos: Dynamo's symbolic sizes, floats read at run time).
CHECKS = ("forward", "decomposed", "grad", "inplace", "symbolic")


def opinfo_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


@functools.lru_cache(maxsize=None)
def op_db():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db as db
    return {opinfo_id(op): op for op in db}


def supported_dtypes(op):
    sup = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in sup]


def skip_reason(op_id, dtype_name, check):
    for key in ((op_id, dtype_name, check), (op_id, "*", check), (op_id, dtype_name, "*"), (op_id, "*", "*")):
        if key in SKIPS:
            return SKIPS[key]
    if (check == "forward" and os.environ.get("THUNDER_OPINFO_EXECUTORS") == "cpu") or check == "symbolic":
        return CPU_EXECUTOR_SKIPS.get((op_id, dtype_name))
    return None


# ---------------------------------------------------------------------------------------------
# Running one sample
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    op: str
    dtype: str
    check: str
    sample: int
    status: str            # "pass", "fail", "skip"
    path: str = ""         # "native", "opaque", "eager", "empty", "error" (both raised)
    detail: str = ""
    opaque: list = dataclasses.field(default_factory=list)     # callees of opaque ops in the imported traces
    fallbacks: list = dataclasses.field(default_factory=list)  # (target, reason) of native ops that fell back
    native_ops: list = dataclasses.field(default_factory=list)  # ltorch ops in the imported traces
    seconds: float = 0.0
    # The "grad" check: who ran each graph's backward ("thunder", "torch (<reason>)"; graphs that took no gradient
    # are left out), and how thunder's autodiff differentiated each op: op -> "own", "decomposition", "generic"
    # (thunder.compile_stats(...).graphs[i]["vjp"], merged over the graphs).
    backward: list = dataclasses.field(default_factory=list)
    vjp: dict = dataclasses.field(default_factory=dict)


def _clone_tensor(x):
    """An independent copy of x with the same sizes, strides, storage offset and requires_grad."""
    if x.layout != torch.strided or x.is_quantized or x.is_meta:
        return x.clone()
    with torch.no_grad():
        try:
            y = torch.empty(0, dtype=x.dtype, device=x.device)
            y.set_(x.untyped_storage().clone(), x.storage_offset(), x.size(), x.stride())
        except Exception:  # noqa: BLE001
            y = x.detach().clone()
    if x.requires_grad:
        y.requires_grad_(True)
    return y


def _clone(tree):
    memo = {}

    def one(v):
        if isinstance(v, torch.Tensor):
            if id(v) not in memo:
                memo[id(v)] = _clone_tensor(v)
            return memo[id(v)]
        return v
    return pytree.tree_map(one, tree)


def _leaves(tree):
    return [x for x in pytree.tree_leaves(tree)]


def _tensors(tree):
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _fresh_function(fn, tag):
    """A new function (with its own code object, so Dynamo keeps no cache across samples) calling fn."""
    def call(*args, **kwargs):
        return fn(*args, **kwargs)
    call.__code__ = call.__code__.replace(co_name=f"opinfo_{tag}")
    return call


def _tolerance(dtype, check):
    rtol, atol = tolerance(dtype)
    if check == "decomposed":  # a decomposition rounds where a fused torch kernel may not
        rtol, atol = rtol * 10, atol * 10
    return rtol, atol


def _storages(tensors):
    out = set()
    for t in tensors:
        if t.layout == torch.strided and not t.is_meta:
            with contextlib.suppress(Exception):
                out.add(t.untyped_storage().data_ptr())
    return out


def _aliasing(outputs, inputs):
    """For each output tensor: whether it shares storage with an input tensor."""
    ins = _storages(_tensors(inputs))
    result = []
    for t in _tensors(outputs):
        s = _storages([t])
        result.append(bool(s & ins) and t.numel() > 0)
    return result


def compare(actual, expected, dtype, check, compare_values=True):
    """Raises AssertionError naming the first difference between two output trees."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"output structure differs: {a_spec} vs {e_spec}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"output {i}: expected a tensor, got {type(a).__name__}")
            if a.dtype != e.dtype:
                raise AssertionError(f"output {i}: dtype {a.dtype}, eager {e.dtype}")
            if a.shape != e.shape:
                raise AssertionError(f"output {i}: shape {tuple(a.shape)}, eager {tuple(e.shape)}")
            if a.device != e.device:
                raise AssertionError(f"output {i}: device {a.device}, eager {e.device}")
            if compare_values and e.layout == torch.strided:
                rtol, atol = _tolerance(e.dtype, check)
                try:
                    torch.testing.assert_close(a.detach(), e.detach(), rtol=rtol, atol=atol, equal_nan=True,
                                               check_stride=False, check_device=True)
                except AssertionError as err:
                    raise AssertionError(f"output {i}: {str(err).strip().splitlines()[0]} "
                                         f"{' '.join(str(err).split()[1:40])}") from None
        elif isinstance(e, float) and isinstance(a, float):
            if not (a == e or (math.isnan(a) and math.isnan(e)) or math.isclose(a, e, rel_tol=1e-6, abs_tol=1e-9)):
                raise AssertionError(f"output {i}: {a} != eager {e}")
        elif compare_values and a != e and type(e) is not object:
            raise AssertionError(f"output {i}: {a!r} != eager {e!r}")


def _path(jitted):
    """How thunder ran the last call: native/opaque/eager/empty, with the opaque callees and fallbacks."""
    from thunder.core.compile import CompiledGraph

    state = jitted._thunder_state
    graphs = state.graphs
    opaque, fallbacks, natives = [], [], []
    if not graphs:
        return ("eager" if state.graph_breaks else "empty"), opaque, fallbacks, natives
    path = "native"
    for g in graphs:
        if not isinstance(g, CompiledGraph):
            return "eager", [f"graph not compiled: {g.reason}"], fallbacks, natives
        for b in g.traces[0].trace.symbols:
            if b.is_opaque:
                opaque.append(b.callee)
            elif b.level == "ltorch":
                natives.append(b.name)
        fallbacks += [(str(t), r) for _, t, r in g.fallbacks]
    if state.graph_breaks:
        path = "opaque"
        opaque.append("graph break")
    if opaque or fallbacks:
        path = "opaque"
    if not natives and path == "native":
        path = "empty"
    return path, opaque, fallbacks, natives


def _autodiff(jitted):
    """Who differentiated the graphs of the last call, from ``thunder.compile_stats``: the ``backward`` of each
    graph that took a gradient ("thunder" or "torch (<reason>)"), and op -> VJP rule over the graphs thunder
    differentiated (``"own"``, ``"decomposition"``, ``"generic"``; comma-separated if an op took several)."""
    import thunder

    backward, rules = [], {}
    for g in thunder.compile_stats(jitted).graphs:
        if g["backward"] is not None:
            backward.append(g["backward"])
        for op, rule in g["vjp"].items():
            rules.setdefault(op, set()).update(rule.split(", "))
    return backward, {op: ", ".join(sorted(r)) for op, r in sorted(rules.items())}


def _copy_outputs(outputs):
    """The output tensors copied (``Tensor.clone``): what the grad check differentiates for an op whose outputs share
    memory with its inputs or each other (view ops). A graph returning views keeps torch's autograd
    (docs/autodiff.md); after a copy, thunder's autodiff differentiates the view op. Aliasing itself is the
    forward check's."""
    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, outputs)


def _shares_memory(outputs, inputs):
    """Whether an output tensor is a view or shares storage with an input tensor or with another output (empty
    tensors included: a view of an empty input is a view all the same)."""
    seen = _storages(_tensors(inputs))
    for t in _tensors(outputs):
        s = _storages([t])
        if s & seen or t._base is not None:
            return True
        seen |= s
    return False


@functools.lru_cache(maxsize=None)
def decomposed_executors():
    """The torch executor without its torch-level entries: every native op runs as its decomposition
    into prims (ops that have no decomposition keep their torch callable)."""
    from thunder import _core
    from thunder.executors import Executor
    from thunder.executors.torchex import torch_executor

    undecomposed = set(_core.undecomposed_ops()) if hasattr(_core, "undecomposed_ops") else set()
    callees = {k: v for k, v in torch_executor.callees.items()
               if not k.startswith("ltorch.") or k.split(".", 1)[1] in undecomposed}
    return [Executor("torch-decomposed", callees, torch_executor.namespace)]


def forward_executors():
    """The executors of the "forward" check: the set named by THUNDER_OPINFO_EXECUTORS (a key of
    thunder.executors.executor_sets(), default "torch")."""
    from thunder.executors import executor_sets

    return executor_sets()[os.environ.get("THUNDER_OPINFO_EXECUTORS", "torch")]


def _fast_dynamo():
    """Dynamo measures each new guard set's latency after flushing the CPU cache (~40 ms per compile,
    most of a small sample's time); the harness compiles tens of thousands of graphs and has no use
    for that number."""
    import torch._dynamo.guards as guards

    guards.profile_guard_manager = lambda *args, **kwargs: 0.0


def _seed():
    torch.manual_seed(1234)


def run_sample(op, sample, dtype, check="forward", index=0) -> Outcome:
    """Runs one sample eagerly and through thunder.jit and compares them."""
    import thunder

    op_id = opinfo_id(op)
    out = Outcome(op_id, DTYPE_NAMES.get(dtype, str(dtype)), check, index, "pass")
    reason = skip_reason(op_id, out.dtype, check)
    if reason:
        out.status, out.detail = "skip", reason
        return out
    start = time.perf_counter()
    fn = op.get_op() if check != "inplace" else op.get_inplace()
    args = (sample.input, *sample.args)
    kwargs = dict(sample.kwargs)
    if check == "inplace" and not isinstance(sample.input, torch.Tensor):
        out.status, out.detail = "skip", "in-place variant takes no tensor first argument"
        return out
    e_args, e_kwargs = _clone((args, kwargs))
    c_args, c_kwargs = _clone((args, kwargs))
    # "symbolic": what a user of dynamic=True gets (thunder's default executors, the CPU kernels included)
    executors = decomposed_executors() if check == "decomposed" else None if check == "symbolic" else forward_executors()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager_error = compiled_error = None
        _seed()
        try:
            expected = fn(*e_args, **e_kwargs)
        except Exception as e:  # noqa: BLE001
            eager_error = e
        copied = check == "grad" and eager_error is None and _shares_memory(expected, (e_args, e_kwargs))
        if copied:  # views: differentiate op + copy, so that thunder's autodiff (not torch's) takes the graph
            op_fn = fn
            fn = lambda *a, **k: _copy_outputs(op_fn(*a, **k))  # noqa: E731
            expected = _copy_outputs(expected)
        jitted = thunder.jit(_fresh_function(fn, index), executors=executors,
                             dynamic=True if check == "symbolic" else None)
        _seed()
        try:
            actual = jitted(*c_args, **c_kwargs)
        except Exception as e:  # noqa: BLE001
            compiled_error = e
    out.path, out.opaque, out.fallbacks, out.native_ops = _path(jitted)
    if check == "grad":
        out.backward, out.vjp = _autodiff(jitted)
        if copied and op_id != "clone":  # the copy is the harness's, not the op's
            out.native_ops = [n for n in out.native_ops if n != "clone"]
            for name in ("ltorch.clone", "prims.clone"):
                out.vjp.pop(name, None)
    try:
        if eager_error is not None or compiled_error is not None:
            if eager_error is None:
                raise AssertionError(f"thunder raised {type(compiled_error).__name__}: "
                                     f"{str(compiled_error).strip()[:300]}")
            if compiled_error is None:
                raise AssertionError(f"eager raised {type(eager_error).__name__} ({str(eager_error)[:200]}) "
                                     "but thunder did not")
            out.path = "error"
            return out
        values = op_id.split(".")[0] not in UNINITIALIZED_OUTPUT
        compare(actual, expected, dtype, check, compare_values=values)
        # Aliasing: an output shares storage with an input iff eager's does. (Not for the decomposed
        # executor: its prims may return views where one torch kernel copies, as a fusing executor may.)
        a_alias, e_alias = _aliasing(actual, (c_args, c_kwargs)), _aliasing(expected, (e_args, e_kwargs))
        if a_alias != e_alias and check != "decomposed":
            raise AssertionError(f"aliasing differs: outputs sharing an input's storage: thunder {a_alias}, "
                                 f"eager {e_alias}")
        # Inputs mutated the same way (in-place variants, or ops that write to an argument).
        compare(_tensors((c_args, c_kwargs)), _tensors((e_args, e_kwargs)), dtype, check, compare_values=values)
        if check == "inplace":
            if not (isinstance(actual, torch.Tensor) and actual is c_args[0]) and isinstance(expected, torch.Tensor) \
                    and expected is e_args[0]:
                raise AssertionError("the in-place variant did not return its input")
        if check == "grad":
            differentiable = _check_grads(op, actual, expected, c_args, c_kwargs, e_args, e_kwargs)
            if differentiable and op_id in NATIVE_OPINFOS:
                torch_backward = [b for b in out.backward if b != "thunder"]
                if torch_backward or not out.backward:
                    raise AssertionError("the gradient was not thunder's: " + (
                        f"backward by {torch_backward[0]}" if torch_backward else
                        f"no graph thunder differentiated (path {out.path})"))
    except AssertionError as e:
        out.status, out.detail = "fail", str(e)[:600]
    except Exception as e:  # noqa: BLE001
        out.status, out.detail = "fail", f"harness error {type(e).__name__}: {str(e)[:400]}"
    finally:
        out.seconds = time.perf_counter() - start
    return out


def _check_grads(op, actual, expected, c_args, c_kwargs, e_args, e_kwargs):
    """Compares thunder's float64 gradients with torch.autograd's; returns whether there were any to compare."""
    a_outs = [t for t in _tensors(actual) if t.requires_grad and (t.is_floating_point() or t.is_complex())]
    e_outs = [t for t in _tensors(expected) if t.requires_grad and (t.is_floating_point() or t.is_complex())]
    if len(a_outs) != len(e_outs):
        raise AssertionError(f"{len(a_outs)} outputs require grad, eager {len(e_outs)}")
    if not e_outs:
        return False
    a_ins = [t for t in _tensors((c_args, c_kwargs)) if t.requires_grad]
    e_ins = [t for t in _tensors((e_args, e_kwargs)) if t.requires_grad]
    gen = torch.Generator().manual_seed(0)
    cot = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in e_outs]
    e_grads = torch.autograd.grad(e_outs, e_ins, cot, allow_unused=True)
    a_grads = torch.autograd.grad(a_outs, a_ins, cot, allow_unused=True)
    for i, (a, e) in enumerate(zip(a_grads, e_grads)):
        if (a is None) != (e is None):
            if (a is None and e is not None and not e.any()) or (e is None and a is not None and not a.any()):
                continue
            raise AssertionError(f"gradient {i}: thunder {'None' if a is None else 'a tensor'}, eager "
                                 f"{'None' if e is None else 'a tensor'}")
        if a is not None:
            try:
                torch.testing.assert_close(a, e, rtol=1e-6, atol=1e-6, equal_nan=True)
            except AssertionError as err:
                raise AssertionError(f"gradient {i}: {' '.join(str(err).split()[:40])}") from None
    return True


# ---------------------------------------------------------------------------------------------
# Selecting what to run: the CI subset and the full sweep
# ---------------------------------------------------------------------------------------------

def mode() -> str:
    m = os.environ.get("THUNDER_OPINFO", "ci")
    if m not in ("ci", "full"):
        raise ValueError(f"THUNDER_OPINFO must be 'ci' or 'full', got {m!r}")
    return m


@dataclasses.dataclass(frozen=True)
class Task:
    """Samples of one OpInfo in one dtype for one check; ``limit`` None means every sample."""
    op: str
    dtype: str
    check: str
    limit: int | None = None

    @property
    def id(self):
        return f"{self.op}-{self.dtype}-{self.check}" + ("" if self.limit is None else f"-first{self.limit}")


# CI: the first CI_NATIVE_SAMPLES samples of native OpInfos in float32 (most have fewer; a few, like
# max_pool2d, have over a thousand), the first CI_DECOMPOSED_SAMPLES through the decomposed executor, the
# first samples of their other dtypes and of their float64 gradients; one sample of every other OpInfo.
CI_NATIVE_SAMPLES = 20
CI_DECOMPOSED_SAMPLES = 4
CI_NATIVE_EXTRA_DTYPES = {"bfloat16": 2, "int64": 2, "bool": 2, "float64": 1}
CI_NATIVE_GRAD_SAMPLES = 1
CI_SYMBOLIC_SAMPLES = 5


def tasks(which: str | None = None, ops=None) -> list[Task]:
    which = which or mode()
    db = op_db()
    out = []
    for op_id, op in db.items():
        if ops is not None and op_id not in ops:
            continue
        dts = [DTYPE_NAMES[d] for d in supported_dtypes(op)]
        if not dts:
            # Only dtypes outside DTYPES (complex, float8): run the first of them, forward only.
            others = sorted(str(d).replace("torch.", "") for d in op.supported_dtypes("cpu"))
            if others:
                out.append(Task(op_id, others[0], "forward", None if which == "full" else 1))
            continue
        native = op_id in NATIVE_OPINFOS
        grad = op.supports_autograd and "float64" in [DTYPE_NAMES[d] for d in op.supported_backward_dtypes("cpu")
                                                       if d in DTYPE_NAMES]
        inplace = op.get_inplace() is not None
        if which == "full":
            for d in dts:
                out.append(Task(op_id, d, "forward"))
                if native:
                    out.append(Task(op_id, d, "decomposed"))
            if grad:
                out.append(Task(op_id, "float64", "grad"))
            if inplace:
                out.append(Task(op_id, dts[0] if "float32" not in dts else "float32", "inplace"))
            if native:
                out += [Task(op_id, d, "symbolic") for d in dts]
            continue
        if native:
            first = "float32" if "float32" in dts else dts[0]
            out.append(Task(op_id, first, "forward", CI_NATIVE_SAMPLES))
            out.append(Task(op_id, first, "decomposed", CI_DECOMPOSED_SAMPLES))
            for d, n in CI_NATIVE_EXTRA_DTYPES.items():
                if d in dts and d != first:
                    out.append(Task(op_id, d, "forward", n))
            if grad:
                out.append(Task(op_id, "float64", "grad", CI_NATIVE_GRAD_SAMPLES))
            if inplace:
                out.append(Task(op_id, first, "inplace", 1))
            out.append(Task(op_id, first, "symbolic", CI_SYMBOLIC_SAMPLES))
        else:
            first = "float32" if "float32" in dts else dts[0]
            out.append(Task(op_id, first, "forward", 1))
    return out


class _NameToDtype(dict):
    def __missing__(self, name):
        return getattr(torch, name)


_NAME_TO_DTYPE = _NameToDtype({v: k for k, v in DTYPE_NAMES.items()})


def run_task(task: Task) -> list[Outcome]:
    _fast_dynamo()
    op = op_db()[task.op]
    dtype = _NAME_TO_DTYPE[task.dtype]
    requires_grad = task.check == "grad"
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        try:
            samples = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
            samples = list(samples if task.limit is None else _take(samples, task.limit))
        except Exception as e:  # noqa: BLE001
            return [Outcome(task.op, task.dtype, task.check, -1, "fail", detail=f"sample_inputs raised {e!r}"[:300])]
    for i, s in enumerate(samples):
        results.append(run_sample(op, s, dtype, task.check, i))
    return results


def _take(it, n):
    for i, x in enumerate(it):
        if i >= n:
            return
        yield x


def failures_of(task: Task, outcomes: list[Outcome]) -> list[str]:
    """What makes a task fail: a wrong result, or (native OpInfos) a sample not run natively."""
    problems = []
    native = task.op in NATIVE_OPINFOS
    for o in outcomes:
        if o.status == "fail":
            problems.append(f"sample {o.sample}: {o.detail}")
        elif o.status == "pass" and native and task.check in ("forward", "decomposed") and \
                o.path not in ("native", "empty", "error"):
            why = "; ".join([f"fallback {t}: {r}" for t, r in o.fallbacks] + [f"opaque {c}" for c in o.opaque])
            problems.append(f"sample {o.sample}: not native ({o.path}): {why[:400]}")
    return problems


# ---------------------------------------------------------------------------------------------
# The sweep and the coverage report
# ---------------------------------------------------------------------------------------------

def _worker(task):
    torch.set_num_threads(1)
    return task, run_task(task)


def _died(task):
    return [Outcome(task.op, task.dtype, task.check, -1, "fail",
                    detail="the worker process running this task died (a crash in the op, torch or thunder)")]


def _sweep_in_processes(task_list, jobs, done, worker=_worker):
    """Runs tasks in ``jobs`` worker processes (``worker(task) -> (task, outcomes)``, a module-level function),
    calling ``done(task, outcomes)`` for each; never waits forever on a worker that died. A multiprocessing.Pool
    loses a task whose worker dies and waits for it forever; a ProcessPoolExecutor fails every task in flight
    (BrokenProcessPool). So at most ``jobs`` tasks are in flight,
    and when a worker dies, those tasks are run again one at a time in a fresh pool: the one that kills its worker
    alone is recorded as failed (_died), the others run normally."""
    import collections
    import concurrent.futures as cf
    import multiprocessing as mp

    # forkserver: fresh workers fork from a process that has imported thunder and torch already (a worker is
    # replaced after 50 tasks, bounding what Dynamo's caches hold; "fork" cannot be combined with that).
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    pending, suspects = collections.deque(task_list), collections.deque()
    while pending or suspects:
        in_flight = {}
        isolating = bool(suspects)
        pool = cf.ProcessPoolExecutor(jobs, mp_context=ctx, max_tasks_per_child=50)
        try:
            while suspects:  # one at a time: a death is that task's
                in_flight = {pool.submit(worker, suspects[0]): suspects[0]}
                done(*next(iter(in_flight)).result())
                suspects.popleft()
            isolating = False
            while pending or in_flight:
                while pending and len(in_flight) < jobs:
                    task = pending.popleft()
                    in_flight[pool.submit(worker, task)] = task
                finished, _ = cf.wait(in_flight, return_when=cf.FIRST_COMPLETED)
                for future in finished:
                    result = future.result()
                    del in_flight[future]
                    done(*result)
        except cf.process.BrokenProcessPool:
            if isolating:
                done(suspects[0], _died(suspects[0]))
                suspects.popleft()
            else:
                suspects.extend(in_flight.values())
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # (wait=False left its thread to fail at exit)


def sweep(task_list, jobs=1, progress=True, results_path=None):
    """Runs tasks (in `jobs` processes); returns {task: [Outcome]}. A task whose worker process dies is a failure
    ("the worker process ... died"), and the sweep goes on."""
    results = {}
    start = time.perf_counter()
    sink = open(results_path, "w") if results_path else None

    def done(task, outs):
        results[task] = outs
        _record(sink, task, outs)
        if progress and len(results) % 100 == 1:
            print(f"[{len(results) - 1}/{len(task_list)}] {time.perf_counter() - start:.0f}s", file=sys.stderr,
                  flush=True)
    if jobs > 1:
        _sweep_in_processes(task_list, jobs, done)
    else:
        for n, task in enumerate(task_list):
            done(task, run_task(task))
            if n % 200 == 199:
                torch._dynamo.reset()
    if sink:
        sink.close()
    return results


def load_results(path):
    """{Task: [Outcome]} from a JSON-lines file written by ``--results`` (full-sweep tasks)."""
    results = {}
    with open(path) as f:
        for line in f:
            o = Outcome(**json.loads(line))
            results.setdefault(Task(o.op, o.dtype, o.check), []).append(o)
    return results


def _record(sink, task, outs):
    if sink:
        for o in outs:
            sink.write(json.dumps(dataclasses.asdict(o)) + "\n")
        sink.flush()


def native_op_table():
    """ltorch op name -> the torch spellings (functions and methods) the importer maps to it."""
    from thunder.frontend import fx_import

    table = {}
    for fn, name in fx_import._FUNCTIONS.items():
        q = fx_import._qualified_name(fn) or getattr(fn, "__name__", repr(fn))
        table.setdefault(name, set()).add(q)
    for meth, name in fx_import._METHODS.items():
        table.setdefault(name, set()).add(f"Tensor.{meth}")
    return table


_PER_OPINFO_COLUMNS = (*DTYPE_NAMES.values(), "grad", "VJP", "inplace", "decomposed", "symbolic", "paths", "fallbacks")


def load_report(path):
    """What :func:`report` wrote to ``path``, for ``--merge-report``: {"header": the lines between the title and the
    description, "summary": the summary's lines, "failures": the failure lines, "rows": OpInfo id -> {column:
    cell} of the per-OpInfo table, "native_opinfos": ltorch op -> set of native OpInfo ids, "native_vjp": ltorch op ->
    its VJP cell (native ops table)}."""
    with open(path) as f:
        lines = f.read().splitlines()
    out = {"header": [], "summary": [], "failures": [], "rows": {}, "native_opinfos": {}, "native_vjp": {}}
    section, columns = "header", None
    for line in lines[1:]:
        if line.startswith("## "):
            section, columns = line[3:].strip(), None
            continue
        if section == "header":
            if line.startswith("Every OpInfo of"):
                section = "description"
            elif line:
                out["header"].append(line)
        elif section == "Summary" and line.startswith("- "):
            out["summary"].append(line)
        elif section == "Failures" and line.startswith("- "):
            out["failures"].append(line)
        elif section in ("Per OpInfo", "Native ops") and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if columns is None:
                columns = cells
            elif not set(line) <= set("|-"):
                row = dict(zip(columns, cells))
                if section == "Per OpInfo":
                    out["rows"][row["OpInfo"].strip("`")] = row
                else:
                    ops = {o.strip().strip("`") for o in row.get("native OpInfos", "").split(",") if o.strip()}
                    out["native_opinfos"][row["ltorch op"].strip("`")] = ops
                    out["native_vjp"][row["ltorch op"].strip("`")] = row.get("VJP", "")
    return out


_CARRIED = "- previous report (carried cells): "
_GRAD_LINES = ("- float64 gradients of native", "- native torch-level ops thunder")


def _carried_summary(summary, replaced_grad):
    """The summary lines of the previous report that a merged report carries, each marked once as the previous
    report's: not its own run's counts (this run's replace them), nor its count of OpInfos in the report; its
    gradient lines only if this run has none (``replaced_grad`` False)."""
    out = []
    for line in summary:
        body = line[len(_CARRIED):] if line.startswith(_CARRIED) else line[2:]
        if line.startswith("- this run") or body.startswith("OpInfos in the report"):
            continue
        if replaced_grad and ("- " + body).startswith(_GRAD_LINES):
            continue
        out.append(_CARRIED + body)
    return out


def _vjp_kinds(outs):
    """The VJP rules the samples' graphs used (sorted), and the samples thunder's autodiff differentiated."""
    kinds, through = set(), 0
    for o in outs:
        for rule in o.vjp.values():
            kinds.update(rule.split(", "))
        through += bool(o.backward) and all(b == "thunder" for b in o.backward)
    return sorted(kinds), through


def _grad_summary(results, registered):
    """Summary lines of the float64 gradient check: samples, whose backward ran them, the rules per native op."""
    outs = [o for t, os_ in results.items() if t.check == "grad" and t.op in NATIVE_OPINFOS for o in os_]
    if not outs:
        return []
    run = [o for o in outs if o.status != "skip"]
    through = [o for o in run if o.backward and all(b == "thunder" for b in o.backward)]
    by_torch = [o for o in run if any(b != "thunder" for b in o.backward)]
    generic = [o for o in through if any("generic" in r for r in o.vjp.values())]
    per_op = {}  # ltorch op -> rules it took
    for o in through:
        for op, rule in o.vjp.items():
            if op.startswith("ltorch."):
                per_op.setdefault(op[len("ltorch."):], set()).update(rule.split(", "))
    counts = {k: sum(k in r for r in per_op.values()) for k in ("own", "decomposition", "generic")}
    ops_ = len({t.op for t in results if t.check == "grad" and t.op in NATIVE_OPINFOS})
    own = sum(bool(r & {"own", "decomposition"}) for r in per_op.values())
    mixed = sorted(n for n, r in per_op.items() if "generic" in r and len(r) > 1)
    return [f"- float64 gradients of native OpInfos (check `grad`): {len(run)} samples of {ops_} OpInfos; passed "
            f"{sum(o.status == 'pass' for o in run)}, failed {sum(o.status == 'fail' for o in run)}; differentiated "
            f"by thunder's autodiff {len(through)} ({len(generic)} of them with the generic rule for some op), by "
            f"torch's autograd {len(by_torch)}, by neither (no output requiring grad, or the graph ran uncompiled) "
            f"{len(run) - len(through) - len(by_torch)}",
            f"- native torch-level ops thunder's autodiff differentiated in those samples: {len(per_op)} of "
            f"{len(registered)}; by thunder's own rules {own} (the op's VJP rule {counts['own']}, its decomposition's "
            f"{counts['decomposition']}), by the generic rule (torch.autograd on that op alone) {counts['generic']}"
            + (f" (in some samples only: {', '.join(mixed)})" if mixed else "")]


def report(results, path, command, seconds, note="", carried=None):
    """Writes the markdown coverage report.

    ``carried``: an earlier report (:func:`load_report`) whose cells this run did not produce enter the report as
    they were: a whole row for an OpInfo this run did not run, else the cells of its checks and dtypes this run
    did not run (its paths and fallbacks columns then stay the earlier run's); its summary and failures are kept,
    marked as the earlier run's."""
    from thunder import _core

    carried = carried or {"header": [], "summary": [], "failures": [], "rows": {}, "native_opinfos": {}, "native_vjp": {}}
    by_op = {}
    for task, outs in results.items():
        by_op.setdefault(task.op, []).append((task, outs))
    lines = ["# OpInfo conformance and native op coverage", "",
             f"Generated by `{command}` ({time.strftime('%Y-%m-%d')}, torch {torch.__version__}, "
             f"this run {seconds / 60:.1f} min on {os.cpu_count()} cores). Do not edit by hand.", "", *([note, ""] if note else [])]
    if carried["rows"]:
        lines += ["Cells this run did not produce are carried from the previous report, whose header read:", ""]
        # A report that was itself merged quotes its own predecessors: those stay one level deep.
        lines += [h if h.startswith(">") else f"> {h}" for h in carried["header"]
                  if not h.startswith("Cells this run did not produce")] + [""]
    lines += ["Every OpInfo of `torch.testing._internal.common_methods_invocations.op_db`, every sample, in the dtypes",
              "float32, float64, bfloat16, float16, int64, int32, bool that it supports on CPU, run through",
              "`thunder.jit` and compared with eager PyTorch (values, dtypes, shapes, aliasing; float64 gradients;",
              "in-place variants). `forward` runs with the default executors; `decomposed` runs native ops as their",
              "prims decompositions; a cell `p/n` is samples passed / run, `!` marks failures, `~` samples not run",
              "natively for a native OpInfo. Path: native = every op imported into the core, opaque = at least one op",
              "runs as an opaque torch op, eager = thunder compiled nothing (graph break), error = eager and thunder",
              "both raised. Gradients (`grad`, float64) are compared with torch.autograd's and, for a native OpInfo,",
              "must be thunder's autodiff's (a graph whose backward is torch's autograd fails); an op whose outputs share",
              "memory with its inputs (views) is differentiated followed by a copy of its outputs, since a graph",
              "returning views keeps torch's autograd (docs/autodiff.md). `VJP`: the rules thunder's autodiff used",
              "for the ops of the OpInfo's samples (own = the op's VJP rule, decomposition = the rules of the ops it",
              "decomposes into, generic = torch.autograd on that op alone; `thunder.compile_stats(j).graphs[i][\"vjp\"]`)",
              "and the float64 gradient samples thunder's autodiff differentiated / run. `symbolic` (native OpInfos):",
              "the samples through `thunder.jit(fn, dynamic=True)` with the default executors (Dynamo's symbolic",
              "sizes -- but for dims of size 0 and 1, which it specializes -- and float arguments read at run time).", ""]
    totals = {"pass": 0, "fail": 0, "skip": 0}
    paths = {}
    for outs in results.values():
        for o in outs:
            totals[o.status] += 1
            if o.status == "pass":
                paths[o.path] = paths.get(o.path, 0) + 1
    native_ops = {}  # ltorch op -> set of native OpInfo ids using it
    for name, ops_ in carried["native_opinfos"].items():
        native_ops[name] = {o for o in ops_ if o in NATIVE_OPINFOS}
    for task, outs in results.items():
        if task.op in NATIVE_OPINFOS:
            for o in outs:
                for n in o.native_ops:
                    native_ops.setdefault(n, set()).add(task.op)
    registered = set(_core.native_ops("ltorch"))
    table = native_op_table()
    this_run = "this run: " if carried["rows"] else ""
    grad_lines = _grad_summary(results, registered)
    lines += ["## Summary", "",
              f"- {this_run}samples: {sum(totals.values())}; passed {totals['pass']}, failed {totals['fail']}, "
              f"skipped {totals['skip']}",
              f"- {this_run}passed samples by path: " + ", ".join(f"{k} {v}" for k, v in sorted(paths.items())),
              *grad_lines]
    if carried["rows"]:
        lines += _carried_summary(carried["summary"], replaced_grad=bool(grad_lines))
        lines += [f"- OpInfos in the report: {len(set(by_op) | set(carried['rows']))}"]
    else:
        lines += [f"- OpInfos: {len(by_op)}; declared native: {len([o for o in by_op if o in NATIVE_OPINFOS])}",
                  f"- native torch-level ops registered in the C++ core: {len(registered)}; exercised by native "
                  f"OpInfos whose samples all pass natively: {len(_fully_native_ops(results, native_ops))}"]
    lines.append("")
    failing = [(t, o) for t, outs in results.items() for o in outs if o.status == "fail"]
    lines += ["## Failures", ""]
    if not failing and not carried["failures"]:
        lines += ["None.", ""]
    for t, o in failing[:300]:
        lines.append(f"- `{t.op}` {t.dtype} {t.check} sample {o.sample}: {o.detail.splitlines()[0][:300]}")
    if len(failing) > 300:
        lines.append(f"- ... and {len(failing) - 300} more")
    lines += [line if "(previous report)" in line else f"{line} (previous report)" for line in carried["failures"]]
    lines += ["", "## Documented skips", ""]
    if SKIPS:
        for (op_id, dt, check), why in sorted(SKIPS.items()):
            lines.append(f"- `{op_id}` ({dt}, {check}): {why}")
    else:
        lines.append("None.")
    lines += ["", "With the CPU executor forced on (`THUNDER_OPINFO_EXECUTORS=cpu`, forward check) and in the symbolic check:", ""]
    lines += [f"- `{op_id}` ({dt}): {why}" for (op_id, dt), why in sorted(CPU_EXECUTOR_SKIPS.items())]
    lines += ["", "Outputs of these OpInfos are uninitialized memory; their values are not compared "
              "(dtype, shape and aliasing are): " + ", ".join(f"`{n}`" for n in sorted(UNINITIALIZED_OUTPUT)), ""]
    # ltorch op -> rule -> float64 gradient samples of native OpInfos in which thunder's autodiff used it
    seen = {}
    for task, outs in results.items():
        if task.check == "grad" and task.op in NATIVE_OPINFOS:
            for o in outs:
                for op, rule in o.vjp.items():
                    if op.startswith("ltorch."):
                        for r in rule.split(", "):
                            per = seen.setdefault(op[len("ltorch."):], {})
                            per[r] = per.get(r, 0) + 1
    lines += ["## Native ops", "",
              "Each torch-level op of the C++ core, the torch spellings imported to it, how thunder's autodiff",
              "differentiated it in the float64 gradient samples of native OpInfos (own = its VJP rule, decomposition",
              "= the rules of its prims, generic = torch.autograd on that op alone; the number of samples; none = no",
              "sample differentiated it) and, in parentheses where that differs, how the rule table says it is",
              "differentiated (`_core.vjp_kind`; torch = generic although it decomposes), and the native OpInfos",
              "whose traces use it.", "",
              "| ltorch op | torch spellings | VJP | native OpInfos |", "|---|---|---|---|"]
    for name in sorted(registered):
        spell = ", ".join(sorted(table.get(name, [])))
        ops = ", ".join(f"`{o}`" for o in sorted(native_ops.get(name, [])))
        static = _core.vjp_kind(name)
        used = seen.get(name, {})
        cell = ", ".join(f"{r} {n}" for r, n in sorted(used.items())) or "none"
        if set(used) != {"generic" if static == "torch" else static}:
            cell += f" ({static})"
        if not any(t.check == "grad" for t in results) and carried["native_vjp"].get(name):
            cell = carried["native_vjp"][name]  # no gradient ran here: the earlier report's cell
        lines.append(f"| `{name}` | {spell} | {cell} | {ops} |")
    lines += ["", "## Per OpInfo", "",
              "| OpInfo | kind | " + " | ".join(_PER_OPINFO_COLUMNS) + " |", "|" + "---|" * (len(_PER_OPINFO_COLUMNS) + 2)]
    for op_id in sorted(set(by_op) | set(carried["rows"])):
        entries = by_op.get(op_id, [])
        cells = {}
        for task, outs in entries:
            key = task.check if task.check != "forward" else task.dtype
            if task.check == "decomposed":
                key = "decomposed"
            p = sum(o.status == "pass" for o in outs)
            n = sum(o.status != "skip" for o in outs)
            bad = sum(o.status == "fail" for o in outs)
            nn_ = sum(o.status == "pass" and o.path not in ("native", "empty", "error") for o in outs) \
                if op_id in NATIVE_OPINFOS and task.check in ("forward", "decomposed") else 0
            prev = cells.get(key, (0, 0, 0, 0))
            cells[key] = (prev[0] + p, prev[1] + n, prev[2] + bad, prev[3] + nn_)
        text = {}
        for k, (p, n, bad, nn_) in cells.items():
            text[k] = f"{p}/{n}" + ("!" if bad else "") + ("~" if nn_ else "")
        grad_outs = [o for task, outs in entries if task.check == "grad" for o in outs if o.status != "skip"]
        if any(task.check == "grad" for task, _ in entries):
            kinds, through = _vjp_kinds(grad_outs)
            text["VJP"] = f"{', '.join(kinds) or 'none'} {through}/{len(grad_outs)}"
        path_counts = {}
        fallbacks = {}
        for _, outs in entries:
            for o in outs:
                if o.status == "pass":
                    path_counts[o.path] = path_counts.get(o.path, 0) + 1
                for t, r in o.fallbacks:
                    fallbacks[t] = fallbacks.get(t, 0) + 1
        text["paths"] = ", ".join(f"{k} {v}" for k, v in sorted(path_counts.items()))
        text["fallbacks"] = ", ".join(f"{k} ×{v}" for k, v in sorted(fallbacks.items()))
        old = carried["rows"].get(op_id)
        if old:
            kept = [c for c in _PER_OPINFO_COLUMNS if c not in text and old.get(c)]
            for c in kept + (["paths", "fallbacks"] if kept or not entries else []):
                text[c] = old.get(c, "")
        kind = "native" if op_id in NATIVE_OPINFOS else "opaque"
        lines.append(f"| `{op_id}` | {kind} | " + " | ".join(text.get(c, "") for c in _PER_OPINFO_COLUMNS) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _fully_native_ops(results, native_ops):
    bad_ops = set()
    for task, outs in results.items():
        if task.op in NATIVE_OPINFOS and failures_of(task, outs):
            bad_ops.add(task.op)
    return {n for n, ops in native_ops.items() if ops - bad_ops}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", help="write the markdown coverage report here")
    parser.add_argument("--full", action="store_true", help="every sample of every dtype (default: the CI subset)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--ops", help="comma-separated OpInfo ids to run (default: all)")
    parser.add_argument("--results", help="write every outcome as JSON lines here")
    parser.add_argument("--checks", help="comma-separated checks to run (default: all of " + ",".join(CHECKS) + ")")
    parser.add_argument("--dtypes", help="comma-separated dtype names to run (default: all)")
    parser.add_argument("--merge", action="append", default=[],
                        help="JSON-lines results of an earlier sweep: their tasks that this run does not repeat "
                             "enter the report too")
    parser.add_argument("--merge-native", action="store_true",
                        help="also merge results of native OpInfos (only if the core has not changed since)")
    parser.add_argument("--merge-report", metavar="FILE",
                        help="an earlier report (e.g. docs/op_coverage.md): the cells this run does not produce are "
                             "carried from it (for a partial re-run whose earlier --results are not at hand)")
    parser.add_argument("--native", action="store_true", help="run the native OpInfos only")
    parser.add_argument("--note", default="", help="a line for the report's header (e.g. what was merged)")
    parser.add_argument("--suggest", action="store_true", help="list non-native OpInfos whose samples all ran natively")
    args = parser.parse_args(argv)
    which = "full" if args.full else "ci"
    ops = set(args.ops.split(",")) if args.ops else None
    if args.native:
        ops = NATIVE_OPINFOS if ops is None else ops & NATIVE_OPINFOS
    carried = load_report(args.merge_report) if args.merge_report else None
    every = tasks(which)
    # A name no task has (a typo) is an error: the run would "pass" with 0 tasks.
    for option, given, known in (("--ops", args.ops, set(op_db())), ("--checks", args.checks, set(CHECKS)),
                                 ("--dtypes", args.dtypes, set(DTYPE_NAMES.values()) | {t.dtype for t in every})):
        unknown = sorted(set(given.split(",")) - known) if given else []
        if unknown:
            names = sorted(known)
            parser.error(f"argument {option}: unknown {', '.join(map(repr, unknown))} (known: " +
                         (", ".join(names) if len(names) < 40 else f"{len(names)} names, e.g. {', '.join(names[:8])}") +
                         ")")
    task_list = every if ops is None else [t for t in every if t.op in ops]
    if args.checks:
        task_list = [t for t in task_list if t.check in args.checks.split(",")]
    if args.dtypes:
        task_list = [t for t in task_list if t.dtype in args.dtypes.split(",")]
    start = time.perf_counter()
    results = sweep(task_list, jobs=args.jobs, results_path=args.results)
    seconds = time.perf_counter() - start
    for path in args.merge:
        for task, outs in load_results(path).items():
            if task not in results and (task.op not in NATIVE_OPINFOS or args.merge_native):
                # A full task (every sample) replaces the CI task (first samples) it contains.
                for t in [t for t in results if (t.op, t.dtype, t.check) == (task.op, task.dtype, task.check)]:
                    del results[t]
                results[task] = outs
    bad = {t: failures_of(t, o) for t, o in results.items()}
    bad = {t: f for t, f in bad.items() if f}
    for t, f in sorted(bad.items(), key=lambda kv: kv[0].id):
        print(f"FAIL {t.id}: {f[0][:300]}" + (f" (+{len(f) - 1} more)" if len(f) > 1 else ""))
    n = sum(len(o) for o in results.values())
    print(f"{len(task_list)} tasks, {n} samples, {len(bad)} failing tasks, {seconds:.0f}s")
    if args.suggest:
        for op_id in sorted({t.op for t in results}):
            if op_id in NATIVE_OPINFOS:
                continue
            outs = [o for t, os_ in results.items() if t.op == op_id and t.check == "forward" for o in os_]
            if outs and all(o.status == "pass" and o.path in ("native", "empty", "error") for o in outs) and \
                    any(o.path == "native" for o in outs):
                print(f"SUGGEST {op_id}")
    if args.report:
        ops_arg = args.ops if args.ops is None or len(args.ops) < 80 else f"<{len(ops)} OpInfos>"
        cmd = "python -m thunder.testing_opinfo --report " + args.report + (" --full" if args.full else "") + \
              (" --native" if args.native else "") + (f" --ops {ops_arg}" if args.ops else "") + \
              (f" --checks {args.checks}" if args.checks else "") + \
              (f" --dtypes {args.dtypes}" if args.dtypes else "") + (f" --jobs {args.jobs}" if args.jobs > 1 else "") + \
              "".join(f" --merge {m}" for m in args.merge) + (" --merge-native" if args.merge_native else "") + \
              (f" --merge-report {args.merge_report}" if args.merge_report else "")
        report(results, args.report, cmd, seconds, args.note, carried)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
