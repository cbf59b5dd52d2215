"""Round trips: every trace of every test program, printed as Python and run on
the same inputs, gives what eager PyTorch gives; and the same programs compiled
with a prims-only executor (every torch-level op replaced by its prims
decomposition, which the C++ op tables define) agree with eager within the
dtype's tolerance."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunder
from conftest import PRIMS_ONLY, assert_same, check_program, clone


def make(*shape, dtype=torch.float32, low=-2.0, high=2.0, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed + 7 * len(shape) + sum(shape))
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low), int(high) + 1, shape, generator=g).to(dtype)
    t = (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    return t.requires_grad_(requires_grad)


def positive(*shape, dtype=torch.float32):
    return make(*shape, dtype=dtype, low=0.5, high=3.0)


# ---- the programs: (id, function, argument factory) ----

def _elementwise(x, y):
    return torch.sin(x) * torch.cos(y) + x / (y.abs() + 1) - torch.exp(x).log1p() + torch.tanh(x) * torch.sigmoid(y)


def _unary_zoo(x):
    a = x.abs() + 0.5
    return (torch.sqrt(a) + torch.rsqrt(a) + torch.log(a) + torch.log2(a) + torch.log10(a) + torch.exp2(x)
            + torch.expm1(x) + torch.erf(x) + torch.erfc(x) + torch.floor(x) + torch.ceil(x) + torch.round(x)
            + torch.trunc(x) + torch.sign(x) + torch.reciprocal(a) + torch.atan(x) + torch.sinh(x) + torch.cosh(x)
            + torch.asinh(x) + torch.lgamma(a) + torch.digamma(a) + torch.atan2(x, a) + torch.neg(x)
            + torch.acos(x.clamp(-0.9, 0.9)) + torch.asin(x.clamp(-0.9, 0.9)) + torch.atanh(x.clamp(-0.9, 0.9))
            + torch.acosh(a + 1) + torch.erfinv(x.clamp(-0.9, 0.9)) + torch.tan(x.clamp(-1, 1)))


def _binary_zoo(x, y):
    b = y.abs() + 0.5
    return (x ** 2 + b ** 0.5 + torch.pow(b, x) + torch.remainder(x, b) + torch.fmod(x, b) + x % b + x // b
            + torch.maximum(x, y) + torch.minimum(x, y) + torch.copysign(x, y) + 2 ** x + 3.0 - x + 1 / b)


def _compare_logical(x, y):
    a = (x > y) & (x < 0.5) | ~(x == y)
    b = torch.logical_and(x >= 0, y <= 0) ^ torch.logical_not(x != y)
    c = torch.logical_or(a, b) & torch.logical_xor(a, x.signbit())
    return a, b, c, torch.isnan(x / y) | torch.isinf(x / 0.0), torch.isfinite(x)


def _integer_ops(a, b):
    b = torch.where(b == 0, torch.ones_like(b), b)
    return (a & b, a | b, a ^ b, ~a, a << 1, a >> 1, a // b, a % b, torch.floor_divide(a, b),
            torch.remainder(a, b), torch.fmod(a, b), a / b, torch.true_divide(a, b), -a, a * 3, a + 2, abs(a))


def _bool_and_int_scalars(x):
    return x % True, x * True + False, torch.where(x > 0, True, x), x + 3, x // 2, torch.maximum(x, torch.tensor(True))


def _reductions(x):
    return (x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.sum(-1), x.mean(), x.mean(dim=1), x.mean((-1, -2)),
            x.amax(), x.amax(1), x.amin(-1, keepdim=True), x.prod(1), x.argmax(), x.argmax(1), x.argmin(-1, True),
            torch.max(x), torch.min(x), torch.sum(x, 1, dtype=torch.float64))


def _int_reductions(a, m):
    return a.sum(), a.sum(0), m.sum(), m.sum(-1), a.prod(1), a.amax(0), a.argmax(1), torch.max(a)


def _softmaxes(x):
    return (F.softmax(x, -1), F.softmax(x, dim=0), torch.softmax(x, 1), x.softmax(-1), F.log_softmax(x, -1),
            x.log_softmax(dim=1), torch.log_softmax(x, 0), F.softmax(x, -1, dtype=torch.float64))


def _norms(x, w, b):
    return (F.layer_norm(x, (8,), w, b), F.layer_norm(x, (8,)), F.layer_norm(x, (4, 8), eps=1e-3),
            F.rms_norm(x, (8,), w), F.rms_norm(x, (8,), eps=1e-6), F.rms_norm(x, (4, 8)))


def _activations(x):
    return (F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.relu(x), torch.relu(x), x.relu(), F.sigmoid(x),
            F.tanh(x), F.dropout(x, 0.5, training=False))


def _linear(x, w, b):
    return F.linear(x, w, b), F.linear(x, w), x @ w.t(), torch.matmul(x, w.T) + b


def _matmuls(a, b, c, v):
    return (torch.mm(a, b), torch.bmm(c, c.transpose(1, 2)), torch.matmul(c, b), v @ b, a @ v[:, None], v @ v,
            torch.matmul(c, a.t()[None].expand(2, 4, 3)))


def _cross_entropy(logits, target, weight):
    return (F.cross_entropy(logits, target), F.cross_entropy(logits, target, reduction="sum"),
            F.cross_entropy(logits, target, reduction="none"), F.cross_entropy(logits, target, ignore_index=2),
            F.cross_entropy(logits, target, weight=weight))


def _cross_entropy_3d(logits, target):
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), target.view(-1)), F.cross_entropy(
        logits.transpose(1, 2), target)


def _sdpa(q, k, v, mask):
    return (F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask > 0),
            F.scaled_dot_product_attention(q, k, v, scale=0.3))


def _sdpa_gqa(q, k, v):
    return (F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


def _indexing(x):
    return (x[0], x[1:3], x[:, None], x[..., 1], x[None, ..., ::2], x[-1, :, 1:], x[1:-1:2], x[:, 0, None],
            x[..., None, -1], x[0, 1, 2], x[:, :, :], x[2:], x[:-1], x[::2, ::2],
            x[None], x[...], x[1, ..., None, 1:3])


def _views(x):
    return (x.view(4, 6), x.view(-1), x.reshape(2, -1, 3), x.permute(2, 0, 1), x.permute(1, 0, 2).contiguous(),
            x.transpose(0, 2), x[0].t(), torch.flatten(x), x.flatten(1), x.unsqueeze(0), x.unsqueeze(-1).squeeze(-1),
            x[:, :1].squeeze(), x[:, :1].squeeze(1), x.expand(3, 2, 3, 4), x[:, :1].expand(-1, 3, -1),
            torch.reshape(x, (24,)), torch.unsqueeze(x, 1), torch.squeeze(x[None]), x.mT, x.view(2, 3, 2, 2).sum(2))


def _cat_stack_split(x, y):
    parts = torch.split(x, 2, dim=1)
    p2 = x.split([1, 2], 0)
    ch = x.chunk(2, -1)
    return (torch.cat([x, y], 1), torch.cat((x, y, x), dim=-1), torch.stack([x, y]), torch.stack((x, y), dim=-1),
            parts[0] * 2, parts[-1], p2[1], ch[0] + ch[1], torch.unbind(x, 0)[2], torch.concat([x, y], 0),
            *torch.chunk(y, 3, 1))


def _where_fill_clamp(x, y):
    mask = x > 0
    return (torch.where(mask, x, y), torch.where(mask, x, 0.0), torch.where(mask, 1.0, y), x.masked_fill(mask, -1e9),
            x.masked_fill(~mask, float("-inf")).softmax(-1), torch.clamp(x, -0.5, 0.5), x.clamp(min=0),
            x.clamp(max=0.1), torch.clamp(x, y, y + 1), x.clip(-1, 1), torch.masked_fill(x, mask, y[0, 0]))


def _creation(x):
    return (x + torch.ones(2, 3), torch.zeros(3) + x, torch.full((2, 3), 1.5), torch.arange(5), torch.arange(1, 10, 2),
            torch.arange(0.0, 1.0, 0.25), torch.zeros_like(x), torch.ones_like(x, dtype=torch.int64),
            torch.full_like(x, 7.0), torch.ones(3, dtype=torch.int32), torch.zeros((2, 2), dtype=torch.bool),
            torch.full((2,), 3), torch.arange(6).view(2, 3) * x)


def _promotion(i32, i64, f32, f16, bf16, b, u8, f64_0d):
    return (i32 + 2.5, i32 * f32, i64 + f32, b + i32, b + b, b * 2, u8 + i32, f16 + f32, bf16 * f16, i32 / i64,
            f16 + f64_0d, i32 + f64_0d, b + 1.5, f16 * 2, i64 + True, u8 * 3, bf16 + 1, f32 ** i32, torch.sqrt(i32),
            torch.exp(b), i32.float() + i64.double(), f32.to(torch.int64), f32.to(torch.float16) + f16,
            f32.half(), f32.long(), i32.bool(), f32.int(), f16.type(torch.float32), f32.to(dtype=torch.bfloat16),
            f32.to("cpu", torch.float64))


def _embedding(idx, w):
    return F.embedding(idx, w), F.embedding(idx[0], w) * 2


class _MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(16, 4, bias=False)
        self.rms = nn.RMSNorm(4)

    def forward(self, idx):
        h = self.emb(idx)
        h = self.drop(self.act(self.norm(self.fc1(h))))
        return F.log_softmax(self.rms(self.fc2(h)), dim=-1)


class _Attention(nn.Module):
    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c)) + x


def _module(cls):
    torch.manual_seed(0)
    return cls().eval()


PROGRAMS = [
    ("elementwise", _elementwise, lambda: (make(3, 4), make(3, 4, seed=1))),
    ("elementwise_broadcast", _elementwise, lambda: (make(2, 3, 4), make(4, seed=1))),
    ("elementwise_f64", _elementwise, lambda: (make(3, 4, dtype=torch.float64), make(3, 4, seed=1, dtype=torch.float64))),
    ("unary_zoo", _unary_zoo, lambda: (make(5, 6),)),
    ("binary_zoo", _binary_zoo, lambda: (make(4, 5), make(4, 5, seed=3))),
    ("compare_logical", _compare_logical, lambda: (make(3, 4), make(3, 4, seed=2))),
    ("integer_ops", _integer_ops, lambda: (make(4, 5, dtype=torch.int64, low=-9, high=9),
                                           make(4, 5, dtype=torch.int64, low=-4, high=4, seed=1))),
    ("integer_ops_i32", _integer_ops, lambda: (make(4, 5, dtype=torch.int32, low=-9, high=9),
                                               make(5, dtype=torch.int32, low=-4, high=4, seed=1))),
    ("bool_and_int_scalars", _bool_and_int_scalars, lambda: (make(3, 4) * 3,)),
    ("bool_and_int_scalars_f16", _bool_and_int_scalars, lambda: (make(3, 4, dtype=torch.float16) * 3,)),
    ("reductions", _reductions, lambda: (make(3, 4, 5),)),
    ("int_reductions", _int_reductions, lambda: (make(3, 4, dtype=torch.int32, low=-5, high=5),
                                                 make(3, 4, dtype=torch.bool))),
    ("softmax", _softmaxes, lambda: (make(3, 5) * 4,)),
    ("softmax_f16", _softmaxes, lambda: (make(3, 5, dtype=torch.float16) * 4,)),
    ("norms", _norms, lambda: (make(2, 4, 8), make(8, seed=1), make(8, seed=2))),
    ("activations", _activations, lambda: (make(4, 6) * 3,)),
    ("linear", _linear, lambda: (make(2, 3, 5), make(4, 5, seed=1), make(4, seed=2))),
    ("matmuls", _matmuls, lambda: (make(3, 4), make(4, 5, seed=1), make(2, 3, 4, seed=2), make(4, seed=3))),
    ("cross_entropy", _cross_entropy, lambda: (make(6, 5) * 3, make(6, dtype=torch.int64, low=0, high=4),
                                               positive(5))),
    ("cross_entropy_3d", _cross_entropy_3d, lambda: (make(2, 3, 7), make(2, 3, dtype=torch.int64, low=0, high=6))),
    ("sdpa", _sdpa, lambda: (make(2, 3, 5, 8), make(2, 3, 5, 8, seed=1), make(2, 3, 5, 8, seed=2),
                             make(5, 5, seed=3))),
    ("sdpa_gqa", _sdpa_gqa, lambda: (make(2, 4, 5, 8), make(2, 2, 5, 8, seed=1), make(2, 2, 5, 8, seed=2))),
    ("indexing", _indexing, lambda: (make(4, 3, 5),)),
    ("views", _views, lambda: (make(2, 3, 4),)),
    ("cat_stack_split", _cat_stack_split, lambda: (make(3, 6), make(3, 6, seed=1))),
    ("where_fill_clamp", _where_fill_clamp, lambda: (make(3, 4), make(3, 4, seed=1))),
    ("creation", _creation, lambda: (make(2, 3),)),
    ("promotion", _promotion, lambda: (make(2, 3, dtype=torch.int32, low=1, high=5), make(2, 3, dtype=torch.int64),
                                       make(2, 3, seed=1), make(2, 3, dtype=torch.float16, seed=2),
                                       make(2, 3, dtype=torch.bfloat16, seed=3), make(2, 3, dtype=torch.bool),
                                       make(2, 3, dtype=torch.uint8, low=0, high=9),
                                       torch.tensor(1.25, dtype=torch.float64))),
    ("embedding", _embedding, lambda: (make(2, 3, dtype=torch.int64, low=0, high=9), make(10, 4))),
    ("mlp_module", _module(_MLP), lambda: (make(2, 5, dtype=torch.int64, low=0, high=10),)),
    ("attention_module", _module(_Attention), lambda: (make(2, 6, 16),)),
]
# The numerically delicate ops in half precision: decompositions compute in float32 and round once, like torch.
for _dt, _tag in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
    PROGRAMS += [
        (f"norms_{_tag}", _norms, lambda d=_dt: (make(2, 4, 8, dtype=d), make(8, seed=1, dtype=d),
                                                 make(8, seed=2, dtype=d))),
        (f"softmax_{_tag}" if _tag != "f16" else "softmax_f16_2", _softmaxes, lambda d=_dt: (make(3, 5, dtype=d) * 4,)),
        (f"activations_{_tag}", _activations, lambda d=_dt: (make(4, 6, dtype=d) * 3,)),
        (f"linear_{_tag}", _linear, lambda d=_dt: (make(2, 3, 5, dtype=d), make(4, 5, seed=1, dtype=d),
                                                   make(4, seed=2, dtype=d))),
        (f"sdpa_{_tag}", _sdpa, lambda d=_dt: tuple(make(2, 3, 5, 8, seed=s, dtype=d) for s in range(3))
         + (make(5, 5, seed=3, dtype=d),)),
        (f"sdpa_gqa_{_tag}", _sdpa_gqa, lambda d=_dt: (make(2, 4, 5, 8, dtype=d), make(2, 2, 5, 8, seed=1, dtype=d),
                                                       make(2, 2, 5, 8, seed=2, dtype=d))),
        (f"cross_entropy_{_tag}", _cross_entropy, lambda d=_dt: (make(6, 5, dtype=d) * 3,
                                                                 make(6, dtype=torch.int64, low=0, high=4),
                                                                 positive(5, dtype=d))),
    ]
IDS = [p[0] for p in PROGRAMS]


def _advanced_indexing(x, idx, mask):
    return x[idx], x[:, idx], x[idx, 1:], x[mask.any(1) | True][0], x.index_select(1, idx), torch.gather(x, 1, idx[None])


def _in_place_on_intermediates(x):
    y = x.clone()
    y.add_(1).mul_(2)
    y[0] = 0.0
    y[:, 1] += x[:, 0]
    return y, torch.relu_(x * 1)


def _opaque_mix(x):
    return torch.cumsum(x.exp(), 1).softmax(-1) + torch.tril(x).sum(), torch.logsumexp(x * 2, 0), x.sort(1).values


#: Programs mixing native and opaque ops (no requirement that everything is native).
MIXED = [
    ("advanced_indexing", _advanced_indexing, lambda: (make(4, 5), torch.tensor([2, 0, 2]), make(4, 5, dtype=torch.bool))),
    ("in_place_on_intermediates", _in_place_on_intermediates, lambda: (make(3, 4),)),
    ("opaque_mix", _opaque_mix, lambda: (make(3, 4),)),
]


# ---- in-place ops: every pass (CSE, folding, fusion, ordering) must respect the order of mutations ----

def _sum_before_and_after_add_(x):
    a = x.sum()
    x.add_(1)
    return a, x.sum()


def _mutate_through_a_view(x):
    y = x * 2
    y.view(-1).add_(1)
    return y, y.exp()


def _mutate_through_getitem(x):
    y = x * 2
    y[0].mul_(10)
    return y + 1


def _setitem_then_reduce(x):
    y = x * 2
    y[1:] = 0.0
    return y.sum(), y


def _exp_before_and_after_mul_(x):
    e = x.exp()
    x.mul_(2)
    return e, x.exp()


def _mutate_a_folded_constant(x):
    k = torch.ones(3) * 2
    k.add_(1)
    return x + k


def _mutate_through_transpose(x):
    y = x * 1
    y.t()[0].add_(1)
    return y * 3


def _mutate_input_through_views(x):
    x.t()[1:].mul_(0.5)
    return x.sum(0)


MUTATING = [
    ("sum_before_and_after_add_", _sum_before_and_after_add_, lambda: (make(3, 3),)),
    ("mutate_through_a_view", _mutate_through_a_view, lambda: (make(3, 3),)),
    ("mutate_through_getitem", _mutate_through_getitem, lambda: (make(3, 3),)),
    ("setitem_then_reduce", _setitem_then_reduce, lambda: (make(3, 3),)),
    ("exp_before_and_after_mul_", _exp_before_and_after_mul_, lambda: (make(3, 3),)),
    ("mutate_a_folded_constant", _mutate_a_folded_constant, lambda: (make(3),)),
    ("mutate_through_transpose", _mutate_through_transpose, lambda: (make(3, 3),)),
    ("mutate_input_through_views", _mutate_input_through_views, lambda: (make(3, 3),)),
]


@pytest.mark.parametrize("name,fn,inputs", MUTATING, ids=[p[0] for p in MUTATING])
@pytest.mark.parametrize("executors", [None, [PRIMS_ONLY]], ids=["default", "prims_only"])
def test_in_place_ops_keep_their_order(name, fn, inputs, executors):
    """Called twice (the second call reuses the compiled graph); inputs are compared after each call too."""
    check_program(fn, *inputs(), executors=executors, calls=2)


@pytest.mark.parametrize("name,fn,inputs", MIXED, ids=[p[0] for p in MIXED])
@pytest.mark.parametrize("executors", [None, [PRIMS_ONLY]], ids=["default", "prims_only"])
def test_round_trip_mixed_native_and_opaque(name, fn, inputs, executors):
    check_program(fn, *inputs(), executors=executors)


@pytest.mark.parametrize("name,fn,inputs", PROGRAMS, ids=IDS)
def test_round_trip(name, fn, inputs):
    """Every trace (import and each pass) round-trips through Python and matches eager."""
    jitted = check_program(fn, *inputs(), native=True)
    # The last trace is the one that runs; its program runs exactly what thunder runs.
    assert thunder.last_traces(jitted)[-1].provenance


@pytest.mark.parametrize("name,fn,inputs", PROGRAMS, ids=IDS)
def test_decompositions(name, fn, inputs):
    """With only prims and opaque ops executable, every torch-level op runs as its prims decomposition."""
    jitted = check_program(fn, *inputs(), executors=[PRIMS_ONLY], native=True, rtol=_DECOMP_RTOL.get(name),
                           atol=_DECOMP_ATOL.get(name))
    for graph in jitted._thunder_state.graphs:
        text = str(graph.execution_trace)
        body = text.split("def computation", 1)[1]
        assert "ltorch." not in "\n".join(l for l in body.splitlines() if not l.strip().startswith("#")), text
        statements = [l for l in body.splitlines() if l.strip() and not l.strip().startswith("#")]
        # (a graph that only returns views of its inputs computes nothing: the backend makes them again)
        assert any("prims." in l for l in statements) or graph.output_views, text


# Decompositions reorder floating-point work; these programs compute long chains (or float16) and get a looser
# tolerance than a single op would.
_DECOMP_RTOL = {}
_DECOMP_ATOL = {}


def test_decompositions_float64_tight():
    """In float64 the decompositions of the numerically delicate ops agree with torch to ~1e-12."""
    x = make(3, 4, 8, dtype=torch.float64) * 3
    w, b = make(8, dtype=torch.float64, seed=1), make(8, dtype=torch.float64, seed=2)
    q, k, v = (make(2, 4, 5, 8, dtype=torch.float64, seed=s) for s in range(3))
    kg, vg = make(2, 2, 5, 8, dtype=torch.float64, seed=4), make(2, 2, 5, 8, dtype=torch.float64, seed=5)
    target = make(3, dtype=torch.int64, low=0, high=7)

    def fn(x, w, b, q, k, v, kg, vg, target):
        return (F.softmax(x, -1), F.log_softmax(x, 1), F.layer_norm(x, (8,), w, b), F.rms_norm(x, (8,), w),
                F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), F.linear(x, w[None], b[:1]),
                F.cross_entropy(x[:, 0], target), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                F.scaled_dot_product_attention(q, kg, vg, enable_gqa=True), x.mean(-1), torch.sigmoid(x))

    check_program(fn, x, w, b, q, k, v, kg, vg, target, executors=[PRIMS_ONLY], rtol=1e-12, atol=1e-12)


def test_round_trip_two_shapes_two_graphs():
    """A recompilation's traces round-trip too, and last_traces(graph=0) still gives the first graph's."""
    def fn(x):
        return F.softmax(x * 2, -1).sum(0)

    jitted = check_program(fn, make(3, 4))
    first = str(thunder.last_traces(jitted)[-1])
    out = jitted(make(5, 2))
    assert_same(out, fn(make(5, 2)))
    # The second shape comes through Dynamo's symbolic graph: its symbolic trace, the same passes as the first
    # graph's on it, the final trace with the sizes bound (its kernels are generated from it), and the program that
    # runs: the final trace, sizes symbolic, with those kernels.
    static, bound = thunder.last_traces(jitted, graph=0), thunder.last_traces(jitted)
    assert [v.name for v in bound[1:-2]] == [v.name for v in static[1:]] and bound[-1].name == static[-1].name
    assert bound[0].name == "Imported from the FX graph, sizes symbolic" and "f32[5, 2]" not in str(bound[0])
    assert str(thunder.last_traces(jitted, graph=0)[-1]) == first
    assert str(thunder.last_traces(jitted)[-1]) != first
    assert "[5, 2]" in str(bound[-2]) and "[5, 2]" not in str(bound[-1])


def test_trace_views_print_runnable_programs():
    """Each trace prints as a complete program: imports, a computation function, a return."""
    def fn(x, y):
        return torch.exp(x) + torch.exp(x) + y * 0

    jitted = check_program(fn, make(2, 2), make(2, 2))
    traces = thunder.last_traces(jitted)
    assert len(traces) == 1 + len(thunder.core.options.DEFAULT_PASSES)
    for view in traces:
        text = str(view)
        assert "def computation(" in text and "return" in text and "import torch" in text
        assert callable(view.python_callable())
        assert len(view.symbols) > 0
    # Each pass's trace says which pass produced it.
    for view, name in zip(traces[1:], thunder.core.options.DEFAULT_PASSES):
        assert view.provenance, name
        assert str(view).startswith("# " + view.provenance.splitlines()[0])


def test_clone_helper_keeps_requires_grad():
    t = make(2, requires_grad=True)
    assert clone(t).requires_grad and clone(t) is not t
