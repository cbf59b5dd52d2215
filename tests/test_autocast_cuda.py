"""torch.autocast("cuda") regions written as casts, checked without a GPU: fake CUDA tensors (FakeTensorMode) go
through torch's own AutocastCUDA kernels when CUDA autocast is switched on, so torch says what each op's dtype is,
and the importer's CUDA lists (fx_import._AUTOCAST_LISTS["cuda"]) must agree."""
import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from thunder.core.dtypes import to_torch
from thunder.frontend import fx_import


@contextlib.contextmanager
def _cuda_autocast(dtype):
    """CUDA autocast on (torch.autocast("cuda") turns itself off where CUDA is not available)."""
    was, old = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", was)
        torch.set_autocast_dtype("cuda", old)


def _fake(mode, *shape, dtype=torch.float16):
    with mode:
        return torch.randn(*shape, device="cuda", dtype=dtype)


#: op name (as the importer sees it) -> a call on (x: [4, 8] half, w: [8, 8] half, v: [8] half). bmm and
#: scaled_dot_product_attention are left out: their fake CUDA kernels ask for a device.
_CALLS = {
    "linear": lambda x, w, v: F.linear(x.float(), w.float()),   # float32 operands: cast down
    "matmul": lambda x, w, v: torch.matmul(x.float(), w.float()),
    "mm": lambda x, w, v: torch.mm(x.float(), w.float()),
    "addmm": lambda x, w, v: torch.addmm(v.float(), x.float(), w.float()),
    "mv": lambda x, w, v: torch.mv(w.float(), v.float()),
    "einsum": lambda x, w, v: torch.einsum("ij,jk->ik", x.float(), w.float()),
    "exp": lambda x, w, v: torch.exp(x), "log": lambda x, w, v: torch.log(x), "rsqrt": lambda x, w, v: torch.rsqrt(x),
    "pow": lambda x, w, v: torch.pow(x, 2), "reciprocal": lambda x, w, v: torch.reciprocal(x),
    "expm1": lambda x, w, v: torch.expm1(x), "log1p": lambda x, w, v: torch.log1p(x), "tan": lambda x, w, v: torch.tan(x),
    "layer_norm": lambda x, w, v: F.layer_norm(x, (8,), v, v), "group_norm": lambda x, w, v: F.group_norm(x, 2),
    "softmax": lambda x, w, v: torch.softmax(x, -1), "log_softmax": lambda x, w, v: torch.log_softmax(x, -1),
    "sum": lambda x, w, v: torch.sum(x), "prod": lambda x, w, v: torch.prod(x, -1),
    "cumsum": lambda x, w, v: torch.cumsum(x, -1), "logsumexp": lambda x, w, v: torch.logsumexp(x, -1),
    "softplus": lambda x, w, v: F.softplus(x), "mse_loss": lambda x, w, v: F.mse_loss(x, x),
    "cross_entropy": lambda x, w, v: F.cross_entropy(x, torch.zeros(4, dtype=torch.int64, device="cuda")),
    "nll_loss": lambda x, w, v: F.nll_loss(x, torch.zeros(4, dtype=torch.int64, device="cuda")),
    "binary_cross_entropy_with_logits": lambda x, w, v: F.binary_cross_entropy_with_logits(x, x),
    "cosine_similarity": lambda x, w, v: F.cosine_similarity(x, x),
    "linalg_vector_norm": lambda x, w, v: torch.linalg.vector_norm(x),
    "cdist": lambda x, w, v: torch.cdist(x, x),
    # not on a list: they run on their operands as they come
    "add": lambda x, w, v: x + v, "mul": lambda x, w, v: x * 2, "gelu": lambda x, w, v: F.gelu(x),
    "silu": lambda x, w, v: F.silu(x), "tanh": lambda x, w, v: torch.tanh(x), "sigmoid": lambda x, w, v: torch.sigmoid(x),
    "mean": lambda x, w, v: x.mean(-1), "relu": lambda x, w, v: F.relu(x), "sqrt": lambda x, w, v: torch.sqrt(x),
    "sin": lambda x, w, v: torch.sin(x), "amax": lambda x, w, v: x.amax(-1), "where": lambda x, w, v: torch.where(x > 0, x, v),
    "cat": lambda x, w, v: torch.cat((x, x)), "dropout": lambda x, w, v: F.dropout(x, 0.1),
    "rms_norm": lambda x, w, v: F.rms_norm(x, (8,), v), "var": lambda x, w, v: x.var(-1),
}


def _predicted(name, dtype):
    lower, float32 = fx_import._AUTOCAST_LISTS["cuda"]
    return dtype if name in lower else torch.float32 if name in float32 else torch.float16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(_CALLS))
def test_cuda_lists_agree_with_torchs_cuda_autocast(name, dtype):
    mode = FakeTensorMode()
    x, w, v = _fake(mode, 4, 8, dtype=dtype), _fake(mode, 8, 8, dtype=dtype), _fake(mode, 8, dtype=dtype)
    with mode, _cuda_autocast(dtype):
        out = _CALLS[name](x, w, v)
    expected = _predicted(name, dtype)
    if expected == torch.float16:  # not on a list: the operands' dtype
        expected = dtype
    assert out.dtype == expected, f"{name}: torch's CUDA autocast gives {out.dtype}, the lists say {expected}"


def _graph_under_cuda_autocast(dtype):
    """A Dynamo-like FX graph: linear, layer_norm, gelu, softmax, exp, sum inside `with torch.autocast("cuda")`,
    each node's example value computed by torch's CUDA autocast on fake CUDA tensors."""
    g = torch.fx.Graph()
    x, w, b, lw = (g.placeholder(n) for n in ("x", "w", "b", "lw"))
    enter = g.call_function(torch.amp.autocast_mode._enter_autocast, ("cuda", dtype, True, None))
    h = g.call_function(F.linear, (x, w, b))
    n = g.call_function(F.layer_norm, (h, (16,), lw))
    a = g.call_function(F.gelu, (n,))
    s = g.call_function(torch.softmax, (a, -1))
    e = g.call_method("exp", (s,))
    t = g.call_method("sum", (e, -1))
    m = g.call_function(torch.mul, (h, 2.0))
    g.call_function(torch.amp.autocast_mode._exit_autocast, (enter,))
    g.output((s, t, m))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    mode = FakeTensorMode()
    inputs = [_fake(mode, 4, 16, dtype=torch.float32), _fake(mode, 16, 16, dtype=torch.float32),
              _fake(mode, 16, dtype=torch.float32), _fake(mode, 16, dtype=torch.float32)]
    env = dict(zip([x, w, b, lw], inputs))
    with mode:
        for node in g.nodes:
            if node.op == "placeholder":
                node.meta["example_value"] = env[node]
            elif node.target is torch.amp.autocast_mode._enter_autocast:
                stack = contextlib.ExitStack()
                stack.enter_context(_cuda_autocast(dtype))
                env[node] = None
            elif node.target is torch.amp.autocast_mode._exit_autocast:
                stack.close()
                env[node] = None
            elif node.op in ("call_function", "call_method"):
                args = torch.fx.node.map_arg(node.args, env.get)
                fn = node.target if node.op == "call_function" else getattr(torch.Tensor, node.target)
                env[node] = node.meta["example_value"] = fn(*args)
    names = ("linear", "layer_norm", "gelu", "softmax", "exp", "sum", "mul")
    return gm, inputs, {name: env[node] for name, node in zip(names, (h, n, a, s, e, t, m))}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_a_cuda_autocast_region_is_written_as_casts(dtype):
    """The region's calls are dropped and its casts written out, so thunder fuses and differentiates it: linear in
    the region's dtype, layer_norm/softmax/exp/sum in float32 (CUDA's lists), gelu and mul as their operands come."""
    gm, inputs, examples = _graph_under_cuda_autocast(dtype)
    imported = fx_import.import_graph(gm, inputs)
    assert not imported.sets_global_state and not imported.under_autocast and not imported.fallbacks
    text = imported.trace.python()
    assert "_autocast" not in text and "enter_autocast" not in text, text
    out = imported.trace.output
    s, t, m = (imported.trace.meta(p) for p in out)
    assert [to_torch(s[0]), to_torch(t[0]), to_torch(m[0])] == [torch.float32, torch.float32, dtype]
    assert examples["linear"].dtype == dtype and examples["mul"].dtype == dtype  # torch agrees
    assert examples["softmax"].dtype == torch.float32 and examples["sum"].dtype == torch.float32


def test_a_cpu_region_does_not_cast_cuda_tensors():
    """Each device's regions apply to its own tensors: torch.autocast("cpu") leaves a CUDA matmul in float32."""
    mode = FakeTensorMode()
    x = _fake(mode, 4, 4, dtype=torch.float32)
    g = torch.fx.Graph()
    p = g.placeholder("x")
    enter = g.call_function(torch.amp.autocast_mode._enter_autocast, ("cpu", torch.bfloat16, True, None))
    y = g.call_function(torch.matmul, (p, p))
    g.call_function(torch.amp.autocast_mode._exit_autocast, (enter,))
    g.output((y,))
    p.meta["example_value"] = x
    with mode:
        y.meta["example_value"] = torch.matmul(x, x)
    imported = fx_import.import_graph(torch.fx.GraphModule(torch.nn.Module(), g), [x])
    (out,) = imported.trace.output
    assert to_torch(imported.trace.meta(out)[0]) == torch.float32 and "ltorch.to" not in imported.trace.python()


def test_a_graph_started_inside_a_cuda_region_is_written_as_casts():
    """A jitted model called inside `with torch.autocast("cuda")`: no enter call in the graph, CUDA autocast on while
    it is imported; the graph is written as casts as a whole and its program runs with autocast off."""
    mode = FakeTensorMode()
    x, w = _fake(mode, 4, 8, dtype=torch.float32), _fake(mode, 8, 8, dtype=torch.float32)
    g = torch.fx.Graph()
    px, pw = g.placeholder("x"), g.placeholder("w")
    y = g.call_function(F.linear, (px, pw))
    z = g.call_function(torch.softmax, (y, -1))
    g.output((y, z))
    px.meta["example_value"], pw.meta["example_value"] = x, w
    with mode, _cuda_autocast(torch.bfloat16):
        y.meta["example_value"] = F.linear(x, w)
        z.meta["example_value"] = torch.softmax(y.meta["example_value"], -1)
    with _cuda_autocast(torch.bfloat16):
        imported = fx_import.import_graph(torch.fx.GraphModule(torch.nn.Module(), g), [x, w])
    assert imported.autocast_written_out and not imported.under_autocast
    assert [to_torch(imported.trace.meta(p)[0]) for p in imported.trace.output] == [torch.bfloat16, torch.float32]


def test_an_exit_closes_its_own_enters_region():
    """Regions of two devices: an exit closes the region its enter opened, not the last one opened (a CUDA region
    closed while a CPU region opened inside it is still open)."""
    mode = FakeTensorMode()
    x = _fake(mode, 4, 4, dtype=torch.float32)
    g = torch.fx.Graph()
    p = g.placeholder("x")
    cuda = g.call_function(torch.amp.autocast_mode._enter_autocast, ("cuda", torch.float16, True, None))
    cpu = g.call_function(torch.amp.autocast_mode._enter_autocast, ("cpu", torch.bfloat16, True, None))
    inside = g.call_function(torch.mm, (p, p))
    g.call_function(torch.amp.autocast_mode._exit_autocast, (cuda,))
    after = g.call_function(torch.mm, (p, p))
    g.call_function(torch.amp.autocast_mode._exit_autocast, (cpu,))
    g.output((inside, after))
    p.meta["example_value"] = x
    with mode:
        with _cuda_autocast(torch.float16):
            inside.meta["example_value"] = torch.mm(x, x)
        after.meta["example_value"] = torch.mm(x, x)
    imported = fx_import.import_graph(torch.fx.GraphModule(torch.nn.Module(), g), [x])
    assert not imported.sets_global_state
    assert [to_torch(imported.trace.meta(o)[0]) for o in imported.trace.output] == [torch.float16, torch.float32]
