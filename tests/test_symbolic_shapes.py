"""Graphs Dynamo captures with symbolic sizes (dynamic=None after a dimension changes, dynamic=True) are compiled,
never declined: imported once as one trace whose sizes are polynomials in the graph's size inputs (ir::Dim), then
compiled per shape signature with the sizes bound (or, where the trace cannot be made, traced again per signature:
thunder/frontend/specialize.py). Serving over many lengths and generation with a growing KV cache compile a handful
of Dynamo graphs, with results equal to eager's."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import thunder
from conftest import assert_same
from thunder.jit import compiled_graphs


def scaled_rows(x, y):
    z = x.sin() * 2 + y
    return z.view(x.shape[0], -1).sum(-1) / x.shape[1]  # size arithmetic in the graph: x.shape[0], x.shape[1]


def test_every_length_compiles_in_at_most_three_dynamo_graphs():
    jitted = thunder.jit(scaled_rows)
    for n in range(1, 25):
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        assert_same(jitted(x, y), scaled_rows(x, y))
    stats = thunder.compile_stats(jitted)
    assert stats.dynamo_graphs <= 3 and stats.symbolic_graphs == 1, stats
    assert all(g["compiled"] for g in stats.graphs) and stats.eager_calls == 0
    specialized = [g for g in stats.graphs if g["symbolic"] is not None]
    assert specialized and all(g["shapes"] for g in specialized)
    assert "; symbolic graph 1 at shapes " in thunder.summary(jitted)


def test_a_symbolic_graph_is_imported_once_and_its_sizes_bound_at_each_new_shape(monkeypatch):
    from thunder.frontend import fx_import

    imports = []
    run = fx_import._Importer.run
    monkeypatch.setattr(fx_import._Importer, "run", lambda self: imports.append(self.symbolic) or run(self))

    def attention_like(x, w):
        h = torch.nn.functional.gelu(x @ w).view(x.shape[0], 2, -1).transpose(0, 1)
        return h.softmax(-1).reshape(-1, 8)[-1:] * 2 + x[1:].sum()

    jitted = thunder.jit(attention_like)
    w = torch.randn(16, 16)
    for n in range(2, 22):
        x = torch.randn(n, 16)
        assert_same(jitted(x, w), attention_like(x, w))
    # The first shape compiles a graph with static sizes; the second brings the symbolic graph, imported once.
    assert imports == [False, True]
    stats = thunder.compile_stats(jitted)
    specialized = [g for g in stats.graphs if g["symbolic"] is not None]
    assert len(specialized) == 19 and all(g["compiled"] and g["retraced"] is None for g in specialized)
    assert "(its symbolic trace, sizes bound)" in thunder.summary(jitted)
    # Its traces: the import with symbolic sizes, the passes on it, the final trace with the call's sizes bound,
    # and the program that runs (sizes symbolic, the kernels generated from the bound trace).
    traces = thunder.last_traces(jitted)
    assert traces[0].name == "Imported from the FX graph, sizes symbolic"
    assert traces[-2].name.startswith("Sizes bound to the call's") and traces[-1].name == traces[-3].name
    symbolic = str(traces[0])
    size = next(line.split(":")[0].strip("# ").strip() for line in symbolic.splitlines() if ': "int"' in line)
    assert f'f32[{size}, 16]' in symbolic and f'f32[{size} - 1, 16]' in symbolic, symbolic
    assert f'f32[{size}, 16]' not in str(traces[-2]) and 'f32[21, 16]' in str(traces[-2])
    assert f'f32[{size}, 16]' in str(traces[-1])


def test_the_passes_run_once_per_symbolic_graph_and_each_new_shape_only_lowers(monkeypatch):
    from thunder import _core

    pipelines = []
    run_pipeline = _core.run_pipeline
    monkeypatch.setattr(_core, "run_pipeline", lambda *a: pipelines.append(1) or run_pipeline(*a))
    jitted = thunder.jit(scaled_rows, dynamic=True)
    for n in (3, 5, 9, 17, 5):
        x, y = torch.randn(n, 6), torch.randn(n, 6)
        assert_same(jitted(x, y), scaled_rows(x, y))
    assert len(pipelines) == 1
    stats = thunder.compile_stats(jitted)
    assert len(stats.graphs) == 4 and all(g["compiled"] and g["retraced"] is None for g in stats.graphs)
    # The first shape's compile counts the passes; the others bind sizes and lower only.
    assert "fusion" in stats.graphs[0]["stage_seconds"]
    assert all("fusion" not in g["stage_seconds"] and "bind sizes" in g["stage_seconds"] for g in stats.graphs[1:])
    # The program that runs is the execution trace with symbolic sizes; the kernels came from the trace bound.
    traces = thunder.last_traces(jitted)
    assert "cpu_fusion0(" in str(traces[-1]) and "[17" not in str(traces[-1])
    assert traces[-2].name.startswith("Sizes bound to the call's") and "f32[17, 6]" in str(traces[-2])


def test_a_fusion_formed_at_the_first_sizes_that_does_not_plan_at_others_runs_the_passes_for_those(caplog):
    def column_sums(x):
        return (x.sin() * 2).sum(0)  # fused while the rows are short; torch sums long rows' columns

    jitted = thunder.jit(column_sums, dynamic=True)
    with caplog.at_level("INFO", logger="thunder"):
        for shape in ((3, 4), (3, 40), (5, 6)):
            x = torch.randn(shape)
            assert_same(jitted(x), column_sums(x))
    stats = thunder.compile_stats(jitted)
    assert all(g["compiled"] for g in stats.graphs) and len(stats.graphs) == 3
    assert "fusion" in stats.graphs[1]["stage_seconds"] and "fusion" not in stats.graphs[2]["stage_seconds"]
    assert "the symbolic graph's fusions do not lower at shapes s" in caplog.text, caplog.text
    assert "no longer plans: a reduction over outer dims of longer rows (40 elements)" in caplog.text


def test_an_int_argument_dynamo_specializes_to_one_keeps_the_symbolic_import():
    # Under dynamic=True an int argument of 1 (generate's logits_to_keep) is a size input whose value Dynamo fixed:
    # a constant of the trace, not a reason to trace the graph again at every shape.
    def last_rows(x, k):
        return x[-k:].sin() * x.shape[0]

    jitted = thunder.jit(last_rows, dynamic=True)
    for n, k in ((4, 1), (6, 1), (6, 3), (9, 1), (9, 2)):
        x = torch.randn(n, 3)
        assert_same(jitted(x, k), last_rows(x, k))
    stats = thunder.compile_stats(jitted)
    assert stats.symbolic_graphs == 2 and len(stats.graphs) == 5
    assert all(g["compiled"] and g["retraced"] is None for g in stats.graphs), stats.graphs


def test_a_graph_whose_sizes_are_not_polynomials_is_traced_again_per_shape():
    def halves(x):
        return x.view(x.shape[0] * 2, -1).sum(0)  # Dynamo's size of the view: s1 // 2

    jitted = thunder.jit(halves, dynamic=True)
    for n in (4, 6, 8):
        x = torch.randn(3, n)
        assert_same(jitted(x), halves(x))
    stats = thunder.compile_stats(jitted)
    assert all(g["compiled"] for g in stats.graphs) and len(stats.graphs) == 3
    assert all("not a polynomial" in g["retraced"] for g in stats.graphs), stats
    assert "traced again: " in thunder.summary(jitted)


@pytest.mark.parametrize("fn", [lambda x, y: torch.cat([x, y], -1) * 2, lambda x, y: x[:, 1:] + y[:, 1:],
                                lambda x, y: y[:1] * x, lambda x, y: (x + y).softmax(-1)],
                         ids=["cat", "slice", "broadcast", "softmax"])
def test_an_input_whose_row_stride_changes_is_read_with_each_calls_stride(fn):
    """Once an input's stride changes, Dynamo makes it a symbol (s7) while its sizes stay static: the import took
    int() of it, the hint of one call, and kernels read every later stride with that one (the third call read rows
    24 apart where they were 48: wrong values). Such a graph is now traced again per stride."""
    base = torch.arange(16 * 40.0).view(16, 40)
    y = -torch.arange(32.0).view(4, 8) - 1
    xs = [torch.arange(32.0).view(8, 4).t(), base[:4, 3:11], base[::2, :8][:4], base[::3, 1:9][:4],
          base[::2, :8][:4], base[:4, 3:11]]
    jitted = thunder.jit(fn)
    for x in xs:
        with torch.no_grad():
            assert_same(jitted(x, y), fn(x, y))
    stats = thunder.compile_stats(jitted)
    assert all(g["compiled"] for g in stats.graphs), stats
    assert any("symbolic strides" in (g["retraced"] or "") for g in stats.graphs), stats


class _ScaledNorm(nn.Module):
    """Float attributes (eps, a scale, a dropout probability): under dynamic=True Dynamo passes each as a 0-d
    tensor and reads it with .item() in the graph."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8, eps=1e-5)
        self.drop = nn.Dropout(0.1)
        self.scale = 0.125

    def forward(self, x):
        return self.drop(self.norm(x) * self.scale).sum(-1)


def test_float_attributes_read_at_run_time_keep_the_symbolic_import():
    model = _ScaledNorm().eval()
    jitted = thunder.jit(model, dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 7):
            x = torch.randn(n, 8)
            assert_same(jitted(x), model(x))
    stats = thunder.compile_stats(jitted)
    assert len(stats.graphs) == 3 and all(g["compiled"] and g["retraced"] is None for g in stats.graphs), stats
    final = str(thunder.last_traces(jitted)[-1])
    assert "dropout" not in final  # not training: the input, whatever p is (and p is not read)
    assert final.count("torch.Tensor.item(") == 2, final  # eps and the scale, read at each call
    # ... and passed to the one kernel of the norm, the scale and the sum (a kernel takes run-time numbers)
    computed = [b.callee for b in compiled_graphs(jitted)[-1].execution_trace.symbols if b.executor]
    assert computed == ["torch.Tensor.item", "torch.Tensor.item", "cpu_fusion0"], computed


def test_a_shape_seen_again_is_a_cache_hit():
    jitted = thunder.jit(lambda x: x.exp() + 1, dynamic=True)
    for n in (3, 5, 3, 5):
        x = torch.randn(n)
        assert_same(jitted(x), x.exp() + 1)
    stats = thunder.compile_stats(jitted)
    assert (stats.dynamo_graphs, stats.symbolic_graphs, len(stats.graphs)) == (1, 1, 2)
    assert (stats.cache_misses, stats.cache_hits) == (2, 2)


def test_torch_compile_dynamic_true_is_compiled_not_declined():
    compiled = torch.compile(scaled_rows, backend="thunder", dynamic=True)
    for n in (2, 6, 9):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        assert_same(compiled(x, y), scaled_rows(x, y))
    stats = thunder.compile_stats(compiled)
    assert stats.symbolic_graphs == 1 and len(stats.graphs) == 3 and all(g["compiled"] for g in stats.graphs)


def test_torch_compile_automatic_dynamic_is_compiled_not_declined():
    """torch.compile's default (dynamic=None): static at the first shape, symbolic once a size changes -- the
    symbolic graph Dynamo hands over is compiled, and the later shapes only bind its sizes."""
    compiled = torch.compile(scaled_rows, backend="thunder")
    for n in (2, 6, 9, 11):
        x, y = torch.randn(n, 3), torch.randn(n, 3)
        assert_same(compiled(x, y), scaled_rows(x, y))
    stats = thunder.compile_stats(compiled)
    assert stats.symbolic_graphs == 1 and all(g["compiled"] for g in stats.graphs), stats.graphs


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(8), nn.Linear(8, 8)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(self.norm(x))) + x


def _trains_like_eager_in_one_symbolic_graph(make, inputs):
    """A module made by ``make`` trained on each of ``inputs``, jitted and eager from the same weights: equal
    gradients, one graph with symbolic sizes, every graph's backward thunder's."""
    torch.manual_seed(0)
    model, reference = make(), make()
    reference.load_state_dict(model.state_dict())
    jitted = thunder.jit(model)
    for x in inputs:
        jitted(x).square().mean().backward()
        reference(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    stats = thunder.compile_stats(jitted)
    assert stats.symbolic_graphs == 1 and all(g["backward"] == "thunder" for g in stats.graphs), stats.graphs


def test_training_over_changing_batch_sizes_matches_eager_gradients():
    _trains_like_eager_in_one_symbolic_graph(Block, [torch.randn(n, 8) for n in (2, 3, 5, 7)])


class _LearnedPositions(nn.Module):
    """A learned position table sliced to the sequence length, and a causal mask buffer sliced likewise (nanoGPT)."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(16, 8))
        self.proj = nn.Linear(8, 8)
        self.register_buffer("bias", torch.tril(torch.ones(16, 16)).view(1, 16, 16))

    def forward(self, x):
        h = self.proj(x + self.pos[: x.shape[1]])
        scores = (h @ h.transpose(-2, -1)).masked_fill(self.bias[:, : x.shape[1], : x.shape[1]] == 0, float("-inf"))
        return scores.softmax(-1) @ h


def test_training_over_changing_lengths_with_slices_of_a_parameter_keeps_thunders_backward():
    """`pos[:T]` with T symbolic runs as an opaque view (its slice needs T <= 16, which Dynamo's guards know and
    the shape rules do not): in a graph that writes nothing, that is a pure op, and the graph keeps thunder's
    backward (as an effect it sent every length's backward to torch, saying the slice "is an effect")."""
    _trains_like_eager_in_one_symbolic_graph(_LearnedPositions, [torch.randn(2, n, 8) for n in (5, 6, 7)])


def test_a_training_graph_with_symbolic_sizes_is_differentiated_once(monkeypatch):
    from thunder import _core

    splits = []
    split = _core.split_forward_backward
    monkeypatch.setattr(_core, "split_forward_backward", lambda t, *a: splits.append(1) or split(t, *a))
    torch.manual_seed(0)
    model, reference = Block(), Block()
    reference.load_state_dict(model.state_dict())
    jitted = thunder.jit(model, dynamic=True)
    for n in (2, 3, 5, 7, 3):
        x = torch.randn(n, 8)
        y, expected = jitted(x), reference(x)
        assert_same(y, expected)
        y.square().mean().backward()
        expected.square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    assert len(splits) == 1
    stats = thunder.compile_stats(jitted)
    assert len(stats.graphs) == 4 and all(g["backward"] == "thunder" for g in stats.graphs), stats.graphs
    assert all("autodiff" not in g["stage_seconds"] for g in stats.graphs[1:])
    backward = str(thunder.last_backward_traces(jitted)[-1])
    assert "cpu_fusion" in backward and "f32[7, 8]" in backward, backward  # the last new signature's, bound


def test_a_backward_for_some_output_gradients_is_made_once_per_symbolic_graph(monkeypatch):
    # An LM's loss and logits: the backward runs from the loss alone, so it is made for that gradient only
    # (_specialized_backward). With symbolic sizes it is made once and each new shape only binds and lowers it.
    from thunder import _core

    made = []
    specialize = _core.specialize_backward
    monkeypatch.setattr(_core, "specialize_backward", lambda *a: made.append(1) or specialize(*a))

    def fn(x, w):
        logits = torch.tanh(x @ w)
        return logits, logits.square().mean()

    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)
    w_ref = w.detach().clone().requires_grad_()
    jitted = thunder.jit(fn, dynamic=True)
    for n in (2, 3, 5, 7, 3):
        x = torch.randn(n, 8)
        logits, loss = jitted(x, w)
        logits_ref, loss_ref = fn(x, w_ref)
        assert_same(logits, logits_ref)
        loss.backward()
        loss_ref.backward()
    torch.testing.assert_close(w.grad, w_ref.grad)
    assert len(made) == 1
    graphs = thunder._compiled_graphs(jitted, "test")
    assert len(graphs) == 4 and all(g.specialized_backward_traces for g in graphs), graphs


def test_greedy_generate_of_100_tokens_with_a_growing_kv_cache_compiles_at_most_four_graphs():
    pytest.importorskip("transformers")
    from thunder.testing import hf_gpt2

    torch.manual_seed(0)
    model = hf_gpt2(n_positions=128)
    ids = torch.randint(1, 100, (1, 5))
    new = 100
    options = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = model.generate(ids, **options)
        model.forward = thunder.jit(model.forward)
        tokens = model.generate(ids, **options)
    assert torch.equal(tokens, expected)
    stats = thunder.compile_stats(model.forward)
    assert stats.dynamo_graphs <= 4 and stats.calls == new and stats.eager_calls == 0, stats
    assert all(g["compiled"] for g in stats.graphs)


def test_inference_at_every_length_up_to_128_compiles_at_most_three_graphs():
    pytest.importorskip("transformers")
    from thunder.testing import hf_gpt2

    torch.manual_seed(0)
    model = hf_gpt2(n_positions=128)
    jitted = thunder.jit(model)
    with torch.no_grad():
        for n in range(1, 129):
            ids = torch.randint(0, 128, (1, n))
            torch.testing.assert_close(jitted(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-5)
    stats = thunder.compile_stats(jitted)
    assert stats.dynamo_graphs <= 3 and not stats.uncompiled and stats.eager_calls == 0, stats
    # Every length after the first two is GPT-2's one symbolic trace with its sizes bound, no op opaque in it.
    specialized = [g for g in stats.graphs if g["symbolic"] is not None]
    assert len(specialized) >= 120 and all(g["retraced"] is None for g in specialized)
    state = thunder._state_of(jitted, "test")
    assert not any(g.fallbacks for g in state.graphs), [g.fallbacks for g in state.graphs if g.fallbacks]


def softmax_scaled(x, scale):
    return x.softmax(-1) * scale


def test_a_float_argument_that_changes_is_read_at_run_time():
    # Once the float changed, Dynamo passes it as a 0-d tensor and reads it with .item() in the graph: the
    # specializations keep that read (a value of the call, not of its shapes), so each value is right.
    jitted = thunder.jit(softmax_scaled)
    for n, scale in ((4, 2.0), (4, 3.0), (5, 2.0), (6, 4.5), (6, -1.0)):
        x = torch.randn(3, n)
        assert_same(jitted(x, scale), softmax_scaled(x, scale))
    stats = thunder.compile_stats(jitted)
    assert all(g["compiled"] for g in stats.graphs), stats.graphs
    assert len(stats.graphs) == 4  # (4, 2.0) static; (4, 3.0) with the float as a tensor; then lengths 5 and 6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_float_read_at_run_time_is_an_argument_of_the_one_kernel(dtype):
    # Each value is right, over half-precision tensors too: eager's add, sub and comparisons round a Python
    # number to the tensor's dtype first, its mul and div read it unrounded.
    def f(x, t):
        y = torch.where(x > t, x * t, x - t)
        return (y + t).softmax(-1) / t

    jitted = thunder.jit(f)
    for t in (0.3, 0.7, -1.1, 0.1234567):
        x = torch.randn(5, 33).to(dtype)
        assert_same(jitted(x, t), f(x, t))
    computed = [b.callee for b in compiled_graphs(jitted)[-1].execution_trace.symbols if b.executor]
    assert computed == ["torch.Tensor.item", "cpu_fusion0"], computed


def test_a_run_time_int_beyond_64_bits_does_not_wrap():
    """The kernel refuses the number (OverflowError, "does not fit in 64 bits"); the graph then runs with torch,
    which computes with it as eager does."""
    def f(x, s):
        return x * int(s)

    jitted, x = thunder.jit(f), torch.ones(2)
    for s in (2.5, 3.5):  # once s changed, int(s) is a kernel's run-time number
        assert_same(jitted(x, s), f(x, s))
    assert_same(jitted(x, 1e19), f(x, 1e19))


def test_the_gradient_of_a_run_time_float_base_to_a_tensor_power():
    # Its backward takes the log of the base: a prim of a number, run by the torch executor on numbers.
    def f(x, s):
        return s ** x

    jitted = thunder.jit(f)
    for s in (0.7, 1.3, 2.2):
        x = torch.randn(5, requires_grad=True)
        expected_x = x.detach().clone().requires_grad_()
        jitted(x, s).sum().backward()
        f(expected_x, s).sum().backward()
        assert_same(x.grad, expected_x.grad)


def test_an_op_that_needs_a_constant_number_runs_opaque_and_says_why():
    # addmm decides at trace time what beta is (0 ignores the input, NaNs included): a beta read at run time
    # leaves the op to torch, with a reason that says so.
    def f(b, x, y, beta):
        return torch.addmm(b, x, y, beta=beta).relu()

    jitted = thunder.jit(f)
    b, x, y = torch.randn(3, 5), torch.randn(3, 4), torch.randn(4, 5)
    for beta in (0.5, 2.0, 3.0):
        assert_same(jitted(b, x, y, beta), f(b, x, y, beta))
    reasons = [r for g in thunder._state_of(jitted, "test").graphs for _, _, r in g.fallbacks]
    assert reasons == ["ValueError: needs a constant number, got one known only at run time"], reasons


@pytest.mark.parametrize("fn", [
    lambda x, y, s: torch.lerp(x, y, s),
    lambda x, y, s: F.softshrink(x, s),
    lambda x, y, s: F.hardtanh(x, -s, s),
    lambda x, y, s: F.softshrink(x, s * 0.5) + x * (1 - s),
    lambda x, y, s: F.elu(x, alpha=s) + x.clamp(max=s),
], ids=["lerp_weight", "softshrink_lambd", "hardtanh_negated", "number_arithmetic", "elu_and_clamp"])
def test_ops_of_a_float_read_at_run_time_stay_native(fn):
    # Under dynamic=True a float argument is read at run time (a number proxy). The ops above used to need it
    # constant (lerp picked its formula, softshrink negated it), and number arithmetic on it (-s, s * 0.5) was
    # taken for a mismatch with Dynamo's output; all of it now runs in the graph, on the number.
    jitted = thunder.jit(fn, dynamic=True)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    for s in (0.3, 0.7, 0.5, 0.25):
        torch.testing.assert_close(jitted(x, y, s), fn(x, y, s))
    reasons = [r for g in thunder._state_of(jitted, "test").graphs for _, _, r in g.fallbacks]
    assert not reasons, reasons
    assert len(thunder._state_of(jitted, "test").graphs) == 1


@pytest.mark.parametrize("fn,numbers", [
    (lambda x, s: F.smooth_l1_loss(x, x.flip(0) * 0.5, beta=s), (1.0, 0.0, 0.5)),
    (lambda x, s: (s ** x).sum(), (2.0, 0.0)),
    (lambda x, s: (x ** s).sum(), (2.0, 0.0, 1.0)),
    (lambda x, s: torch.logit(x.sigmoid(), eps=s).sum(), (0.1, 0.7, float("nan"))),
], ids=["smooth_l1_beta_zero", "number_pow_tensor", "tensor_pow_number", "logit_eps_past_half"])
def test_gradients_at_the_edges_of_a_number_read_at_run_time_equal_eagers(fn, numbers):
    # A beta of 0 (smooth_l1 is then l1), a base or exponent of 0, an eps above 0.5 or NaN: values eager treats
    # specially, which a number read at run time must also take (NaN gradients from a masked-out 0/0 before).
    jitted = thunder.jit(fn, dynamic=True)
    x0 = torch.tensor([0.5, -1.0, 2.0, 0.0, 0.75])
    for s in numbers:
        xe, xj = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        expected, actual = fn(xe, s), jitted(xj, s)
        expected.backward(), actual.backward()
        torch.testing.assert_close(actual, expected, equal_nan=True)
        torch.testing.assert_close(xj.grad, xe.grad, equal_nan=True)
    assert thunder.compile_stats(jitted).eager_calls == 0


@pytest.mark.parametrize("fn", [
    lambda x, a: x[: int(a)] * 2,
    lambda x, a: x.new_zeros(int(a)) + a,
    lambda x, a: torch.cat([x, x[: int(a * x.shape[0] / 8)]]) * 2,
    lambda x, a: torch.arange(0, a) + 1,
], ids=["slice", "new_zeros", "cat_of_a_slice", "arange"])
@pytest.mark.parametrize("dynamic", [True, None])
def test_a_size_computed_from_a_float_read_at_run_time_follows_its_value(fn, dynamic):
    # Dynamo passes the float as a 0-d tensor read with .item(); the size computed from it is not one of the
    # graph's size inputs, and each specialization fixed it: the first value's size served every later value
    # (a wrong length; a kernel compiled for 30M elements read past a 2-element input). Its value joins the key.
    # In the default mode the graph's inputs have static shapes: it ran uncompiled, counted as cache hits.
    jitted = thunder.jit(fn, dynamic=dynamic)
    x = torch.arange(6.0)
    for a in (1.0, 2.5, 3.7, 1.5, 3.7):
        assert_same(jitted(x, a), fn(x, a))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 0 and all(g["compiled"] for g in stats.graphs), stats.graphs


def test_a_size_read_from_an_int_tensor_follows_its_value():
    fn = lambda x, t: x[: t.item()] + 1  # noqa: E731
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        jitted = thunder.jit(fn, dynamic=True)
        x = torch.arange(6.0)
        for k in (1, 2, 3, 2):
            assert_same(jitted(x, torch.tensor(k)), fn(x, torch.tensor(k)))


def test_an_int_argument_beyond_int64_runs_its_graph_with_torch_and_says_why():
    jitted = thunder.jit(lambda x, s: x * s, dynamic=True)
    x = torch.tensor([1, -2, 3], dtype=torch.int32)
    jitted(x, 3)
    assert torch.equal(jitted(x, 2**63), x * 2**63)
    reasons = [g["reason"] for g in thunder.compile_stats(jitted).graphs if not g["compiled"]]
    assert any("an int read at run time (9223372036854775808), is beyond int64" in r for r in reasons), reasons
    assert torch.equal(jitted(x, 5), x * 5)


def test_a_new_wrapper_does_not_inherit_an_earlier_ones_dynamic_sizes():
    first = thunder.jit(softmax_scaled)
    for n in (4, 5, 6):
        first(torch.randn(3, n), 2.0)
    second = thunder.jit(softmax_scaled)
    second(torch.randn(3, 7), 2.0)
    stats = thunder.compile_stats(second)
    assert stats.graphs[0]["symbolic"] is None, "the new wrapper's first graph has static shapes"


def test_a_function_whose_first_call_captures_nothing_keeps_compiling():
    """The first call runs no tensor op: Dynamo skipped the function's code from then on (thunder warned that it
    did); an empty, guarded graph now keeps it compiling, and the calls that compute compile."""
    def wide(x):
        return x.shape[0] <= x.shape[1]

    def shrink_if_wide(x):
        return x * 2 if wide(x) else x  # (a test of a helper's result: not converted, which would compile it)

    jitted = thunder.jit(shrink_if_wide)
    for n in (2, 8, 9):
        x = torch.randn(5, n)
        assert_same(jitted(x), shrink_if_wide(x))
    stats = thunder.compile_stats(jitted)
    assert stats.eager_calls == 1 and stats.cache_misses == 2 and not stats.dynamo_stopped, stats


def test_outputs_sharing_memory_compile_when_a_float_argument_becomes_a_graph_input():
    # Once the float changed, it is a placeholder with no tensor behind it: the import's look for outputs that
    # view one another skips it (it compared it with a storage and failed, and the graph ran uncompiled).
    def f(x, k):
        y = x * k
        return y, y.t()

    jitted = thunder.jit(f)
    x = torch.randn(3, 4)
    for k in (2.0, 3.0, 4.5):
        for out, expected in zip(jitted(x, k), f(x, k)):
            assert_same(out, expected)
    stats = thunder.compile_stats(jitted)
    assert all(g["compiled"] for g in stats.graphs), [g["reason"] for g in stats.graphs]


def test_a_symbolic_graph_keeps_its_most_recently_used_specializations(monkeypatch):
    """Each shape signature of a graph with symbolic sizes holds its bound traces, launchers and output prototypes;
    a server seeing ever new lengths grew without end. Past THUNDER_MAX_SPECIALIZATIONS the least recently used
    one is released (print(jitted) and compile_stats say so) and its shapes compile again if they come back."""
    monkeypatch.setenv("THUNDER_MAX_SPECIALIZATIONS", "3")
    jitted = thunder.jit(scaled_rows, dynamic=True)
    lengths = [2, 3, 4, 2, 5, 6, 3]  # 2 is used again before 5 arrives, so 3 and 4 go first; 3 then compiles again
    for n in lengths:
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        assert_same(jitted(x, y), scaled_rows(x, y))
    stats = thunder.compile_stats(jitted)
    assert stats.symbolic_graphs == 1 and stats.eager_calls == 0
    shapes = [(g["shapes"], g["released"] != "") for g in stats.graphs]
    assert [released for _, released in shapes] == [True, True, True, False, False, False], shapes
    released = [g for g in compiled_graphs(jitted) if g.released]
    assert all(g.fn is None and not g.kernels and not any(v.namespace for v in g.traces) for g in released)
    assert "released: the least recently used of symbolic graph 1's 3 specializations" in str(jitted)
    # Its traces say so, printed and run (they raised a bare NameError for their kernels' names).
    assert str(released[0].traces[-1]).startswith("# Not runnable: its graph was released (the least recently")
    with pytest.raises(RuntimeError, match="cannot run: its graph was released"):
        released[0].traces[-1].python_callable()
    # Shapes that keep coming back: past as many released records again, the oldest are folded into counts.
    for n in [7, 8, 9, 10, 11, 12, 2]:
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        assert_same(jitted(x, y), scaled_rows(x, y))
    stats = thunder.compile_stats(jitted)
    assert [g["released"] != "" for g in stats.graphs] == [True] * 3 + [False] * 3, stats.graphs
    assert [g["index"] for g in stats.graphs] == [7, 8, 9, 10, 11, 12]
    folded = stats.folded_specializations[1]
    assert folded["specializations"] == 7 and folded["calls"] == 8 and folded["compile_seconds"] > 0, folded
    assert stats.cache_misses == 13 and stats.eager_calls == 0
    assert "symbolic graph 1: 7 more specializations released, their records folded" in str(jitted)
    # The headline counts every graph compiled, the folded ones too (it said 6: the records kept).
    assert f"{len(stats.graphs) + 7} graphs compiled" in str(jitted).splitlines()[0], str(jitted).splitlines()[0]
    monkeypatch.setenv("THUNDER_MAX_SPECIALIZATIONS", "0")
    with pytest.raises(ValueError, match="THUNDER_MAX_SPECIALIZATIONS must be an integer >= 1, got .0."):
        jitted(torch.randn(7, 4), torch.randn(7, 4))


def test_a_graph_running_torch_vmap_over_changing_sizes_matches_eager():
    # Traced again per shape (thunder runs torch.func transforms as captured): the copy kept
    # _vmap_increment_nesting, whose result no node reads; dropping it raised on the second shape.
    def fn(a, b):
        return torch.vmap(lambda x, y: (x * y).sum(-1))(a, b) + 1

    jitted = thunder.jit(fn)
    for n in (4, 5, 6):
        a, b = torch.randn(n, 3), torch.randn(n, 3)
        torch.testing.assert_close(jitted(a, b), fn(a, b))


def test_a_graph_returning_a_size_before_a_tensor_compiles():
    """Output (SymInt, Tensor): finding which outputs share memory compared a storage with the size's None, which
    raised, and the graph ran uncompiled (Mistral's sliding-window cache, from the second generated token on)."""
    def fn(x):
        return x.shape[0] + 1, x * 2

    jitted, x = thunder.jit(fn, dynamic=True), torch.randn(5, 3)
    n, y = jitted(x)
    assert n == 6
    assert_same(y, x * 2)
    assert "UNCOMPILED" not in thunder.summary(jitted)


def _normalized(x):
    c = x - x.mean(-1, keepdim=True)
    return c / ((c * c).mean(-1, keepdim=True) + 1e-5).sqrt() + x.mean((0, 2)).sum() + x.sum() / x.shape[-1]


def _centered_in_place(x):
    y = x * 2
    y.sub_(y.mean(-1, keepdim=True))  # a write: the passes run per shape, on the import with its sizes bound
    return y


@pytest.mark.parametrize("fn", [_normalized, lambda x: x.var(-1) + x.std((0, 2)).sum(),
                                lambda x: F.smooth_l1_loss(x, x.flip(-1)), _centered_in_place,
                                lambda x: x * torch.full_like(x, x.shape[-1]) + torch.full((3, 1, 1), x.shape[-1] * 2)],
                         ids=["mean", "var_std", "loss_mean", "in_place", "fill_value"])
@pytest.mark.parametrize("requires_grad", [False, True], ids=["inference", "training"])
def test_a_size_read_as_a_number_is_an_argument_of_the_one_kernel(fn, requires_grad):
    # mean's divisor (over one dim and over two), var's N - 1 in its backward, a loss's 'mean' and size arithmetic:
    # the kernels take the sizes as arguments (`(float)(x0)`), not literals, so every length runs the kernels the
    # first one compiled -- also where the passes run per shape (a write in the graph).
    jitted = thunder.jit(fn, dynamic=True)
    sources = set()
    for n in (5, 7, 12, 31):
        x = torch.randn(3, 4, n, requires_grad=requires_grad)
        out, ref = jitted(x), fn(x)
        assert_same(out, ref)
        if requires_grad:
            assert_same(torch.autograd.grad(out.sum(), x), torch.autograd.grad(ref.sum(), x))
        sources.add(tuple(k["source"] for k in thunder.last_kernels(jitted)))
    assert len(sources) == 1, "a kernel's source changed with the length"


@pytest.mark.parametrize("fn, dtype, n", [
    (lambda x: torch.where(x > 50, x, x.shape[-1]), torch.int8, 130),
    (lambda x: torch.clamp(x, max=x.shape[-1] - 100), torch.int8, 300),
    (lambda x: torch.clamp(x, min=x.shape[-1] - 100), torch.float16, 70000),
], ids=["where_int8", "clamp_int8", "clamp_float16"])
def test_a_size_that_does_not_fit_the_dtype_raises_as_eager(fn, dtype, n):
    # torch converts the number with a check ("cannot be converted to type int8_t without overflow"); a size known
    # only at run time cannot be checked when the graph is compiled, so the op runs with torch, which checks it.
    jitted = thunder.jit(fn, dynamic=True)
    small = torch.randint(0, 100, (1, 7)).to(dtype)
    assert_same(jitted(small), fn(small))
    x = torch.randint(0, 100, (1, n)).to(dtype)
    with pytest.raises(RuntimeError, match="without overflow"):
        fn(x)
    with pytest.raises(RuntimeError, match="without overflow"):
        jitted(x)


def test_a_size_as_an_exponent_compiles():
    # pow's exponent stays a literal when the sizes are bound (its kernel and VJP special-case its value); kept as
    # the size symbol, the graph ran uncompiled ("an integer argument: needs a concrete size").
    def f(x):
        return x ** x.shape[-1] + x.shape[-1] ** x

    jitted = thunder.jit(f, dynamic=True)
    for n in (3, 5):
        x = torch.rand(2, n, dtype=torch.float64, requires_grad=True) + 0.5
        out, ref = jitted(x), f(x)
        assert_same(out, ref)
        assert_same(torch.autograd.grad(out.sum(), x), torch.autograd.grad(ref.sum(), x))
    stats = thunder.compile_stats(jitted)
    assert all(g["compiled"] for g in stats.graphs) and stats.eager_calls == 0, stats.uncompiled


@pytest.mark.parametrize("fn", [lambda x: torch.zeros(x.shape[0]), lambda x: torch.ones(x.shape[0] * 2) + x.sum(),
                                lambda x: torch.full((x.shape[1] + 1,), 2.0), lambda x: x.new_zeros(x.shape[0])],
                         ids=["zeros", "ones", "full", "new_zeros"])
def test_a_factory_sized_by_one_symbolic_size(fn):
    # torch.zeros(n) with n a size symbol reached prims.full as a bare number: the torch executor raised
    # "'int' object is not iterable". A size given as one number is a shape of one dimension.
    jitted = thunder.jit(fn, dynamic=True)
    for n in (2, 5, 9):
        x = torch.randn(n, 3)
        assert_same(jitted(x), fn(x))
    assert "UNCOMPILED" not in thunder.summary(jitted)


def test_a_shape_of_one_symbolic_size_passed_as_varargs():
    # t.reshape(n) with n a symbolic size was not packed into a shape: the trace called torch.reshape(t, s0*s1)
    # (an int where torch takes a tuple) and raised TypeError where eager runs.
    fns = [lambda x: (x * 2).t().reshape(x.shape[0] * x.shape[1]),
           lambda x: (x * 2).view(x.shape[0] * x.shape[1]),
           lambda x: torch.zeros(x.shape[0]) + x.sum()]
    for fn in fns:
        jitted = thunder.jit(fn, dynamic=True)
        for n in (5, 7):
            x = torch.randn(n, 4)
            torch.testing.assert_close(jitted(x), fn(x))


def test_attention_trained_at_changing_lengths_keeps_thunders_backward():
    # With symbolic sizes Dynamo gives k's and v's lengths symbols of their own, so the attention is an opaque op
    # there; its CPU kernel is tagged as drawing random numbers (for dropout_p > 0), which made it an effect and
    # sent every symbolic graph's backward to torch. With dropout_p = 0 it draws none: the generic rule
    # differentiates it, and the rest of the graph is thunder's.
    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).tanh()

    jitted = thunder.jit(attn)
    for batch, length in [(2, 5), (2, 6), (3, 7)]:
        q, k, v = (torch.randn(batch, 4, length, 8, requires_grad=True) for _ in range(3))
        jitted(q, k, v).sum().backward()
        expected = torch.autograd.grad(attn(q, k, v).sum(), (q, k, v))
        for got, want in zip((q.grad, k.grad, v.grad), expected):
            torch.testing.assert_close(got, want)
    assert [g["backward"] for g in thunder.compile_stats(jitted).graphs] == ["thunder"] * 3


def test_an_opaque_slice_of_a_buffer_nothing_writes_is_no_effect_in_a_graph_that_writes():
    # position_ids[:, :n] by a symbolic length is an opaque view; the graph also writes a fresh mask (as HF BERT's
    # mask code does). The view was an effect, and the write was not lowered, whatever memory each touched: every
    # symbolic graph's backward went to torch.
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.lin = nn.Embedding(128, 4), nn.Linear(4, 4)
            self.register_buffer("position_ids", torch.arange(128).expand((1, -1)), persistent=False)

        def forward(self, x):
            pos = self.position_ids[:, 0:x.shape[1]]
            mask = torch.zeros(x.shape[0], x.shape[1], 1)
            mask[:, 0] = 1.0
            return (self.lin(x) + self.emb(pos)) * mask

    torch.manual_seed(0)
    model = Model()
    jitted = thunder.jit(model)
    for length in (5, 6, 7):
        x = torch.randn(2, length, 4)
        model.zero_grad()
        model(x).sum().backward()
        expected = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        jitted(x).sum().backward()
        for p, want in zip(model.parameters(), expected):
            torch.testing.assert_close(p.grad, want)
    assert [g["backward"] for g in thunder.compile_stats(jitted).graphs] == ["thunder"] * 3


def _split_heads_and_dropout(x, p):
    h = x * 2
    heads = h.view(h.size()[:-1] + (4, 2))  # HF's _split_heads: a view by a tuple of symbolic sizes
    return F.dropout(h, p, True).sin(), heads.sum(-1)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_probing_an_op_with_a_tuple_of_symbolic_sizes_does_not_pin_them(grad):
    """thunder runs some opaque ops once on fake tensors (fx_effects._probe), with each size's hint: a size in a tuple
    went unhinted, the probe's view added guards to Dynamo's shape environment, and the graph's later ops read the
    first call's sizes -- every new shape raised OpaqueResultMismatch (HF GPT-Neo with dynamic=True raised on its
    second length; with dynamic=None, each length warned and ran with torch)."""
    jitted = thunder.jit(_split_heads_and_dropout, dynamic=True)
    for length in (3, 5, 7):
        x = torch.randn(2, length, 8, requires_grad=grad)
        out, heads = jitted(x, 0.0)
        expected, expected_heads = _split_heads_and_dropout(x, 0.0)
        assert_same(out, expected)
        assert_same(heads, expected_heads)
    assert all(g["compiled"] for g in thunder.compile_stats(jitted).graphs)
