"""Opaque fallback: an op the core does not know, or a use of a native op the
core declines, runs as the original torch call (printed as that call in the
final trace) and gives eager's result."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

import thunder
from conftest import PRIMS_ONLY, assert_same, check_program
from test_passes import code_lines

NATIVE = set(thunder._core.native_ops("ltorch"))


# Ops the core may not know, each with the call the final trace should print. The core's op tables grow, so
# the test takes those that are not native today (thunder._core.native_ops) and needs a few of them.
CANDIDATES = [
    ("fft", lambda x: torch.fft.fft(x).real + 1, "torch.fft.fft("),
    ("i0", lambda x: torch.special.i0(x) - x, "torch.special.i0("),
    ("bessel_j0", lambda x: torch.special.bessel_j0(x) * 2, "torch.special.bessel_j0("),
    ("erfcx", lambda x: torch.special.erfcx(x.abs()), "torch.special.erfcx("),
    ("einsum", lambda x: torch.einsum("ij,kj->ik", x, x), "torch.einsum("),
    ("kron", lambda x: torch.kron(x, x[:2, :2]), "torch.kron("),
    ("cdist", lambda x: torch.cdist(x, x), "torch.cdist("),
    ("tensordot", lambda x: torch.tensordot(x, x, dims=([1], [1])), "torch.tensordot("),
    ("diff", lambda x: torch.diff(x, dim=1) * 3, "torch.diff("),
    ("renorm", lambda x: torch.renorm(x, 2, 0, 1.0), "torch.renorm("),
    ("cumsum", lambda x: torch.cumsum(x, 0) * 2, "torch.cumsum("),
    ("logsumexp", lambda x: torch.logsumexp(x, -1), "torch.logsumexp("),
]
UNKNOWN = [c for c in CANDIDATES if c[0] not in NATIVE and f"special_{c[0]}" not in NATIVE]


def test_there_are_unknown_ops_to_test():
    assert len(UNKNOWN) >= 3, [c[0] for c in CANDIDATES]


@pytest.mark.parametrize("op,fn,printed", UNKNOWN, ids=[c[0] for c in UNKNOWN])
def test_unknown_op_runs_as_its_torch_call(op, fn, printed):
    jitted = check_program(fn, torch.randn(4, 5))
    final = "\n".join(code_lines(thunder.last_traces(jitted)[-1]))
    assert printed in final, final
    assert "_opaque" not in final  # a public torch function prints under its public name
    assert jitted._thunder_state.graphs[0].fallbacks == []  # not a declined native op: the core never knew it


def test_opaque_op_between_native_ops_keeps_native_ops_native():
    _, unknown, printed = UNKNOWN[0]

    def fn(x):
        return unknown(torch.exp(x) * 2).softmax(-1)

    jitted = check_program(fn, torch.randn(4, 5))
    imported = "\n".join(code_lines(thunder.last_traces(jitted)[0]))
    assert "ltorch.exp(" in imported and "ltorch.softmax(" in imported and printed in imported


def test_dropout_in_training_is_native_also_in_place():
    # Dropout in training is thunder's own (prims.random_seed, prims.uniform_philox: tests/test_random.py); its
    # masks equal eager's in distribution only, so here it is compared with itself, in place and not.
    assert "dropout" in NATIVE
    outs = []
    for inplace in (False, True):
        def fn(x):
            return F.dropout(x * 1, 0.5, training=True, inplace=inplace) * 3

        jitted = thunder.jit(fn)
        torch.manual_seed(0)
        outs.append(jitted(torch.arange(1.0, 65.0)))
        assert jitted._thunder_state.graphs[0].fallbacks == []
        assert "prims.random_seed()" in "\n".join(code_lines(thunder.last_traces(jitted)[-1]))
    assert torch.equal(outs[0], outs[1])
    assert (outs[0] == 0).any() and (outs[0] != 0).any()


def test_dropout_in_eval_is_native_and_the_identity():
    fn = lambda x: F.dropout(x, 0.5, training=False) + 1  # noqa: E731
    jitted = check_program(fn, torch.randn(8), native=True)
    assert "ltorch.dropout(" in "\n".join(code_lines(thunder.last_traces(jitted)[0]))
    # Its decomposition is the identity.
    decomposed = check_program(fn, torch.randn(8), native=True, executors=[PRIMS_ONLY])
    assert "dropout" not in "\n".join(code_lines(thunder.last_traces(decomposed)[-1]))


def test_cross_entropy_with_label_smoothing_falls_back():
    assert "cross_entropy" in NATIVE

    def fn(x, t):
        return F.cross_entropy(x, t, label_smoothing=0.1), F.cross_entropy(x, t)

    x, t = torch.randn(6, 5, dtype=torch.float64), torch.randint(0, 5, (6,))
    jitted = check_program(fn, x, t)
    graph = jitted._thunder_state.graphs[0]
    assert len(graph.fallbacks) == 1 and "label smoothing" in graph.fallbacks[0][2]
    final = "\n".join(code_lines(thunder.last_traces(jitted)[-1]))
    assert "label_smoothing=0.1" in final


def test_cross_entropy_with_probability_targets_falls_back():
    x = torch.randn(4, 3)
    p = torch.softmax(torch.randn(4, 3), -1)
    jitted = check_program(lambda x, p: F.cross_entropy(x, p), x, p)
    assert jitted._thunder_state.graphs[0].fallbacks


def test_opaque_ops_get_gradients():
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    xe = x.detach().clone().requires_grad_()

    def fn(x):
        return (torch.cumsum(x, 1).exp() * torch.logsumexp(x, 0)).sum()

    out, expected = thunder.jit(fn)(x), fn(xe)
    out.backward()
    expected.backward()
    assert_same(out, expected)
    assert_same(x.grad, xe.grad)


def test_in_place_opaque_op_on_an_input():
    def fn(x, y):
        y.mul_(2)
        return x + y

    check_program(fn, torch.randn(3), torch.randn(3), calls=2)


def test_unknown_method_and_attribute():
    def fn(x):
        return x.cumprod(0).T.flip(0) + x.new_ones(x.shape)

    check_program(fn, torch.randn(3, 3))


# ---- opaque calls that mutate an argument are effects, whatever their result and however they say so ----

def _leaky_relu_positional(x):
    F.leaky_relu(x, 0.1, True)
    return x + 0


def _module_inplace(x, m=torch.nn.Sequential(torch.nn.ReLU6(inplace=True))):
    m(x)
    return x * 1


def _aten_overload(x):
    torch.ops.aten.add_.Tensor(x, torch.ones_like(x))
    return x * 1


def _aten_packet(x):
    torch.ops.aten.relu_(x)
    return x * 1


@pytest.mark.parametrize("fn", [_leaky_relu_positional, _module_inplace, _aten_overload, _aten_packet])
def test_mutating_call_with_an_unused_result_is_kept(fn):
    x = torch.tensor([-1.0, 2.0, 9.0])
    ex, jx = x.clone(), x.clone()
    expected, actual = fn(ex), thunder.jit(fn)(jx)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(jx, ex)


def test_custom_op_that_mutates_its_argument_is_kept():
    @torch.library.custom_op("thunder_test::scale_", mutates_args={"x"})
    def scale_(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x.clone()

    @scale_.register_fake
    def _(x):
        return torch.empty_like(x)

    def fn(x):
        scale_(x)
        return x + 1

    x = torch.tensor([1.0, 2.0])
    ex, jx = x.clone(), x.clone()
    torch.testing.assert_close(thunder.jit(fn)(jx), fn(ex))
    torch.testing.assert_close(jx, ex)


# ---- a torch.nn.functional function wrapped by user code (fake quantisation, a LoRA-style patch) runs once ----
# Dynamo traces the wrapper into the graph; the torch executor runs the call inside it as torch's function, bound when
# thunder is imported (thunder.executors.torchex.torch_functional). It called torch.nn.functional.<op> as it was when
# the trace ran, through the wrapper again: each wrapper applied twice, in the loss and in the gradients.

def _halved(fn):
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 0.5
    return wrapper


_WRAPPED = {
    "conv2d": lambda x, w: F.conv2d(x.reshape(1, 2, 2, 3), w.reshape(2, 2, 2, 2)),
    "linear": lambda x, w: F.linear(x, w[:8].reshape(2, 4)),                 # ltorch.linear: torchex._linear
    "layer_norm": lambda x, w: F.layer_norm(x, (4,), w[:4]),                 # a Python function of F
    "gelu": lambda x, w: F.gelu(x * w[:4]),                                  # a builtin of torch._C._nn
    "embedding": lambda x, w: F.embedding(torch.tensor([2, 0]), x) * w[:4],  # printed in the replays
}


@pytest.mark.parametrize("executors", ["default", "torch"])
@pytest.mark.parametrize("name", list(_WRAPPED))
def test_a_functional_wrapped_after_import_is_applied_once(monkeypatch, name, executors):
    from thunder.executors.torchex import torch_executor

    monkeypatch.setattr(F, name, _halved(getattr(F, name)))
    fn = _WRAPPED[name]
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    # No round trip: the FX graph it compares the traces with calls F.<name> by its name, through the wrapper again.
    jitted = check_program(fn, x, w, executors=[torch_executor] if executors == "torch" else None, round_trip=False)
    grads = [torch.autograd.grad(f(x, w).pow(2).sum(), (x, w)) for f in (jitted, fn)]
    assert_same(grads[0], grads[1])
    final = "\n".join(code_lines(thunder.last_traces(jitted)[-1]))
    assert "torch.nn.functional." not in final, final  # torch's function, printed under thunder's name: ltorch.<op>
    with torch.no_grad():  # inference: the op whole, where training runs layer_norm's and gelu's decompositions
        jitted = thunder.jit(fn, executors=[torch_executor] if executors == "torch" else None)
        assert_same(jitted(x, w), fn(x, w))


def test_the_functional_torch_defines_is_found_behind_a_replacement(monkeypatch):
    """What the torch executor binds for an F function replaced before thunder's import: the builtin torch's
    functional.py names, or the function it aliases; the replacement, with a warning, for a Python function."""
    from thunder.executors.torchex import defined_by_torch, torch_functional

    originals = {n: getattr(F, n) for n in ("conv2d", "linear", "logsigmoid", "threshold", "layer_norm")}
    for name, fn in originals.items():
        monkeypatch.setattr(F, name, _halved(fn))
        assert not defined_by_torch(getattr(F, name))
    assert torch_functional("conv2d") is torch.conv2d is originals["conv2d"]
    assert torch_functional("linear") is torch._C._nn.linear is originals["linear"]
    assert torch_functional("logsigmoid") is torch._C._nn.log_sigmoid is originals["logsigmoid"]
    assert torch_functional("relu") is F.relu                          # not replaced
    with pytest.warns(UserWarning, match="replaced before thunder was imported"):
        assert torch_functional("layer_norm") is F.layer_norm


_WRAPPED_BEFORE_IMPORT = """
import copy, sys, torch, torch.nn as nn, torch.nn.functional as F
_conv2d = F.conv2d
F.conv2d = lambda *args, **kwargs: _conv2d(*args, **kwargs) * 0.5  # before thunder's import
import thunder
from thunder.executors.torchex import ltorch, torch_executor
assert ltorch.conv2d is torch.conv2d
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(12, 2)).double()
mine = copy.deepcopy(model)
x = torch.randn(3, 2, 4, 4, dtype=torch.float64)
for executors in (None, [torch_executor]):
    for m in (model, mine):
        m.zero_grad()
    out, expected = thunder.jit(mine, executors=executors)(x), model(x)
    out.pow(2).sum().backward()
    expected.pow(2).sum().backward()
    torch.testing.assert_close(out, expected)
    for a, b in zip(mine.parameters(), model.parameters()):
        torch.testing.assert_close(a.grad, b.grad)
"""


def test_a_functional_wrapped_before_import_is_applied_once(tmp_path):
    """F.conv2d wrapped before thunder is imported (the tester's case): ltorch.conv2d is torch's builtin, not the
    wrapper, and a model using it trains as eager."""
    script = tmp_path / "wrapped.py"
    script.write_text(_WRAPPED_BEFORE_IMPORT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr


_PYTHON_FUNCTIONAL_WRAPPED_BEFORE_IMPORT = """
import torch, torch.nn.functional as F
_layer_norm = F.layer_norm
F.layer_norm = lambda *args, **kwargs: _layer_norm(*args, **kwargs) * 0.5  # before thunder's import
import thunder
from thunder.executors.torchex import ltorch, torch_executor
fn = lambda x: F.layer_norm(x, (4,)) + 1
x = torch.randn(3, 4)
for executors in (None, [torch_executor]):
    torch.testing.assert_close(thunder.jit(fn, executors=executors)(x), fn(x))
"""


def test_a_python_functional_wrapped_before_import_is_applied_once(tmp_path):
    """F.layer_norm (a Python function of F) wrapped before thunder is imported: Dynamo records the wrapper itself
    as one call, which runs as an opaque call (once), not as torch's layer_norm (the wrapper never)."""
    script = tmp_path / "wrapped.py"
    script.write_text(_PYTHON_FUNCTIONAL_WRAPPED_BEFORE_IMPORT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("fn", [
    lambda x, w: torch.repeat_interleave(x @ w, 2, dim=1),  # a view of its own copy: a new value
    lambda x, w: torch.cat([x @ w, x], axis=1),  # torch's `axis` for `dim`
], ids=["repeat_interleave", "cat_axis"])
def test_an_opaque_op_whose_result_is_read_leaves_the_backward_to_thunder(fn):
    """repeat_interleave's example value is a view (of the copy it makes), and `axis=` made the native cat reject
    its arguments: both were taken for effects, which sent the whole graph's backward to torch (GPT-J, CodeGen,
    Funnel)."""
    x = torch.randn(4, 8)
    w = torch.randn(8, 8, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    jitted = thunder.jit(lambda x, w: fn(x, w).tanh().sum())
    jitted(x, w).backward()
    fn(x, w_ref).tanh().sum().backward()
    assert_same(w.grad, w_ref.grad)
    assert [g["backward"] for g in thunder.compile_stats(jitted).graphs] == ["thunder"]


def test_requires_grad_of_a_computed_value_compiles():
    """Dynamo brackets an in-graph y.requires_grad_() (Hugging Face's gradient checkpointing sets it on the input
    embeddings' output) with a functorch flag, taken for torch.func's transforms: the whole graph ran uncompiled."""
    def fn(x, w):
        y = x @ w
        y.requires_grad_()
        return torch.nn.functional.gelu(y) * 2 + 1

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    jitted = thunder.jit(fn)
    with torch.no_grad():
        assert_same(jitted(x, w), fn(x, w))
    assert all(g["compiled"] for g in thunder.compile_stats(jitted).graphs)


_VIEW_LIBRARY = torch.library.Library("thunder_test_views", "DEF")
_VIEW_LIBRARY.define("flat(Tensor(a) x) -> Tensor(a)")
_VIEW_LIBRARY.impl("flat", lambda x: x.view(-1), "CompositeExplicitAutograd")
_VIEW_LIBRARY.impl("flat", lambda x: x.view(-1), "Meta")


def _through_a_custom_view(x):
    v = torch.ops.thunder_test_views.flat(x)
    v.mul_(2)
    return v + 0, x + 1


def _through_a_dtype_view(x):
    return torch.ops.aten.view.dtype(x, torch.int32).add_(2)


def _through_unsafe_split(x):
    a, _ = x.unsafe_split(3)
    a.mul_(2)
    return x + 1


@pytest.mark.parametrize("fn", [_through_a_custom_view, _through_a_dtype_view, _through_unsafe_split])
def test_a_write_through_an_opaque_op_returning_a_view_reaches_its_base(fn):
    """Fake results of these ops share their argument's memory without being marked as views: imported as new
    tensors, the write into them was dropped (the input kept its values, and later reads saw the old ones)."""
    x_eager, x_jitted = torch.arange(6.), torch.arange(6.)
    assert_same(thunder.jit(fn)(x_jitted), fn(x_eager))
    assert_same(x_jitted, x_eager)


class _RenormalizedLookup(torch.nn.Module):
    """nn.Embedding with max_norm renormalizes the rows it looks up in its weight, in place (embedding_renorm_)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4, max_norm=1.0)

    def forward(self, i):
        before = self.emb.weight.pow(2).sum()
        x = self.emb(i)
        self.emb(i + 3)  # its result unused: called for the renormalization alone
        return x.sum() + self.emb.weight.pow(2).sum() - before


def test_a_torch_function_writing_an_argument_is_an_effect():
    """F.embedding with max_norm writes its weight. Its opaque call was taken for a pure one: the reads of the weight
    before and after it were merged, and a call whose result is unused was dropped."""
    torch.manual_seed(0)
    eager = _RenormalizedLookup()
    mine = _RenormalizedLookup()
    mine.load_state_dict(eager.state_dict())
    i = torch.tensor([1, 2])
    with torch.no_grad():
        assert_same(thunder.jit(mine)(i), eager(i))
    assert_same(mine.emb.weight, eager.emb.weight)


def test_a_keyword_tensor_of_an_opaque_op_gets_its_gradient():
    """multi_head_attention_forward with separate projection weights (kdim, vdim) runs opaque, taking them by
    keyword; a backward given no gradient for the attention weights left them without .grad."""
    torch.manual_seed(0)
    eager = torch.nn.MultiheadAttention(16, 4, batch_first=True, kdim=8, vdim=12)
    mine = torch.nn.MultiheadAttention(16, 4, batch_first=True, kdim=8, vdim=12)
    mine.load_state_dict(eager.state_dict())
    q, k, v = torch.randn(2, 5, 16), torch.randn(2, 5, 8), torch.randn(2, 5, 12)
    eager(q, k, v)[0].square().mean().backward()
    thunder.jit(mine)(q, k, v)[0].square().mean().backward()
    for (name, p), q_ in zip(mine.named_parameters(), eager.parameters()):
        assert p.grad is not None, name
        assert_same(p.grad, q_.grad, rtol=1e-4, atol=1e-5, path=name)


def test_an_opaque_result_unlike_its_fake_tensor_runs_the_graph_with_torch(caplog):
    """torch's fake implementation of the encoder layer's fast path says float32 under a bfloat16 autocast region,
    where the op returns bfloat16: a kernel read it as float32 (garbage, past the tensor's end). The launcher finds
    it, and the graph runs with torch from then on, saying so once."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()

    def fn(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = layer(x)
        return y.float() * 2

    jitted = thunder.jit(fn)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 5, 16)
            assert_same(jitted(x), fn(x))
    warnings = [r for r in caplog.records if "runs with torch as captured from this call on" in r.getMessage()]
    assert len(warnings) == 1 and "returned bfloat16[2, 5, 16]" in warnings[0].getMessage()
    assert "released: runs with torch as captured" in str(jitted)


def test_an_opaque_result_unlike_its_fake_tensor_with_a_write_after_it():
    """A write after the kernels that read opaque results (here the copy-back of counter.add_(1), at the trace's
    end) has not happened when the launcher raises: the call runs again with torch."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()

    def fn(x, counter):
        counter.add_(1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return layer(x) * 2 + 1

    jitted = thunder.jit(fn)
    with torch.no_grad():
        for _ in range(2):
            x, eager_counter, counter = torch.randn(2, 5, 16), torch.zeros(1), torch.zeros(1)
            assert_same(jitted(x, counter), fn(x, eager_counter))
            assert_same(counter, eager_counter)


def test_bitwise_and_of_bool_tensors_is_no_write():
    # `m & m` is operator.and_ in the graph, whose name ends in "_" as in-place calls' do: it was taken for a write,
    # which, with an opaque view in the graph (a slice by a symbolic size), sent the graph's backward to torch.
    def f(x, w, pos, m):
        p = pos[:x.shape[1]]
        return ((x + p) @ w).masked_fill(~(m & m)[..., None], 0).sum()

    jitted = thunder.jit(f)
    w, pos = torch.randn(4, 4, requires_grad=True), torch.randn(16, 4, requires_grad=True)
    for length in (5, 7):  # the second call compiles a graph with symbolic sizes
        x, m = torch.randn(2, length, 4), torch.rand(2, length) > 0.3
        jitted(x, w, pos, m).backward()
    assert thunder.compile_stats(jitted).graphs[-1]["backward"] == "thunder"
