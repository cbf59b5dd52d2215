// Torch-level neural-network ops (torch.nn.functional), each defined by its
// decomposition; half-precision inputs are computed in float32 as torch does.
#include <cmath>

#include "ops/torch_common.h"

namespace thunder::ops {
namespace {

const ir::Param kInput = req("input");


// (The torch op amax, differentiated by its own rule: a row holding a NaN gets NaN gradients, as its every use here
// -- softmax's shift, attention's row maximum -- does in eager.)
Value amax_keep(Builder& b, const Value& x, int64_t dim) {
  return b.torch("amax", {x, Value::ints({dim}), Value(true)});
}
Value sum_keep(Builder& b, const Value& x, const std::vector<int64_t>& dims) {
  return b.torch("sum", {x, Value::ints(dims), Value(true)});
}
Value mean_keep(Builder& b, const Value& x, const std::vector<int64_t>& dims) {
  return b.torch("mean", {x, Value::ints(dims), Value(true)});
}

// softmax / log_softmax: subtract the row max for stability (torch.softmax, torch.log_softmax).
Value softmax(Builder& b, const Args& a, bool log) {
  const char* op = log ? "ltorch.log_softmax" : "ltorch.softmax";
  DType out = a[2].is_none() ? b.meta(a[0]).dtype : a[2].as_dtype();
  if (!ir::is_floating(out)) fail(op, "expected a floating-point input or dtype");
  int64_t dim = canonical_dim(op, a[1].as_int(), b.meta(a[0]).ndim());
  // The input is cast to `dtype` first, as torch's: float32 values given dtype=float16 are rounded to it.
  Value x = cast(b, cast(b, a[0], out), opmath(out));
  // A zero-size dim has no max to subtract (and the result is empty).
  bool empty = b.meta(x).ndim() > 0 && b.meta(x).shape[dim] == 0;
  Value shifted = empty ? x : b.torch("sub", {x, amax_keep(b, x, dim)});
  Value e = b.torch("exp", {shifted});
  Value s = sum_keep(b, e, {dim});
  // softmax multiplies by the sum's reciprocal, as ATen's vectorized CPU kernel does (one division per row).
  Value r = log ? b.torch("sub", {shifted, b.torch("log", {s})}) : b.torch("mul", {e, b.torch("reciprocal", {s})});
  return cast(b, r, out);
}

std::vector<int64_t> trailing_dims(std::string_view op, const TensorMeta& m, const Value& normalized_shape) {
  Shape ns = normalized_shape.as_dims();
  const std::string what =
      "normalized_shape " + shape_string(ns) + " does not match the input's trailing dims " + shape_string(m.shape);
  if (ns.size() > m.shape.size()) fail(op, what);
  require_same_shape(op, ns, Shape(m.shape.end() - static_cast<int64_t>(ns.size()), m.shape.end()), what);
  std::vector<int64_t> dims;
  for (size_t i = m.shape.size() - ns.size(); i < m.shape.size(); ++i) dims.push_back(static_cast<int64_t>(i));
  return dims;
}

Value layer_norm(Builder& b, const Args& a) {
  const TensorMeta m = b.meta(a[0]);
  auto dims = trailing_dims("ltorch.layer_norm", m, a[1]);
  // ATen's kernel takes a weight and bias of the input's dtype, or both float32 for a half-precision input, and
  // raises for others ("mixed dtype"): refused here, the op runs with torch, which raises its own error.
  bool same = true, float32 = m.dtype == DType::Float16 || m.dtype == DType::BFloat16;
  for (size_t i : {size_t{2}, size_t{3}}) {
    if (a[i].is_none() || !b.is_tensor(a[i])) continue;
    same &= b.meta(a[i]).dtype == m.dtype;
    float32 &= b.meta(a[i]).dtype == DType::Float32;
  }
  if (!same && !float32)
    fail("ltorch.layer_norm", "a weight or bias of another dtype than the input's " +
                                  std::string(ir::dtype_name(m.dtype)) + " (expected the input's for both, or "
                                  "float32 for both with a half-precision input)");
  Value x = cast(b, a[0], opmath(m.dtype));
  auto [centered, var] = centered_moments(b, x, dims);
  Value y = b.torch("mul", {centered, b.torch("rsqrt", {b.torch("add", {var, a[4]})})});
  if (!a[2].is_none()) y = b.torch("mul", {y, a[2]});
  if (!a[3].is_none()) y = b.torch("add", {y, a[3]});
  return cast(b, y, m.dtype);
}

double finfo_eps(DType d) {
  switch (d) {
    case DType::Float16: return 0.0009765625;
    case DType::BFloat16: return 0.0078125;
    case DType::Float64: return 2.220446049250313e-16;
    default: return 1.1920928955078125e-07;
  }
}

Value rms_norm(Builder& b, const Args& a) {
  const TensorMeta m = b.meta(a[0]);
  auto dims = trailing_dims("ltorch.rms_norm", m, a[1]);
  // eps=None: the machine epsilon of the type the norm is computed in (float32 for half inputs), as ATen does.
  Value eps = a[3].is_none() ? Value(finfo_eps(opmath(m.dtype))) : a[3];
  Value x = cast(b, a[0], opmath(m.dtype));
  Value ms = mean_keep(b, b.torch("mul", {x, x}), dims);
  Value y = b.torch("mul", {x, b.torch("rsqrt", {b.torch("add", {ms, eps})})});
  if (!a[2].is_none()) y = b.torch("mul", {y, a[2]});
  return cast(b, y, m.dtype);
}

Value linear(Builder& b, const Args& a) {
  const TensorMeta& w = b.meta(a[1]);
  if (w.ndim() > 2) fail("ltorch.linear", "expected a 1-D or 2-D weight, got " + std::to_string(w.ndim()) + " dims");
  Value wt = w.ndim() == 2 ? b.torch("t", {a[1]}) : a[1];
  Value y = b.torch("matmul", {a[0], wt});
  return a[2].is_none() ? y : b.torch("add", {y, a[2]});
}

// torch.nn.functional.dropout as ATen's CPU implementation computes it (_dropout_impl): the input itself when not
// training, for p = 0 or an empty input; input * 0 for p = 1 (NaN stays NaN); else input * noise, where noise is
// keep / (1 - p) in the input's dtype and keep holds with probability 1 - p. keep is u < 1 - p for u uniform in
// [0, 1) from prims.uniform_philox under a seed drawn from torch's generator at each run (float32 uniforms, float64
// for a float64 input): a pure function of the seed, so a training program saves the seed and regenerates the
// mask in the backward. The masks equal eager's in distribution, not bit for bit (docs/autodiff.md).
Value dropped(Builder& b, const Value& x, const Value& keep_p, bool may_keep_none);

Value dropout(Builder& b, const Value& x, double p, bool training, bool inplace) {
  if (!(p >= 0.0 && p <= 1.0))
    fail("ltorch.dropout", "dropout probability has to be between 0 and 1, but got " + std::to_string(p));
  if (inplace) throw NotNative("in-place dropout");
  const TensorMeta m = b.meta(x);
  if (!training || p == 0.0 || m.numel() == 0) return x;
  if (!ir::is_floating(m.dtype)) throw NotNative("dropout of a tensor that is not floating-point");
  if (p == 1.0) return b.torch("mul", {x, num(0.0)});
  return dropped(b, x, num(1.0 - p), false);
}

// x * noise for dropout in training (see dropout), keep_p (1 - p) a number or a number proxy, 0 < keep_p <= 1, or
// also 0 where may_keep_none: where no element is kept, the noise (0 / 0) is made 0 by a select.
Value dropped(Builder& b, const Value& x, const Value& keep_p, bool may_keep_none) {
  const TensorMeta m = b.meta(x);
  const DType u_dtype = m.dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  Value seed = b.prim("random_seed", {});
  Value u = b.prim("uniform_philox", {Value::dims(m.shape), seed, Int(0), Value(u_dtype), Value(ir::Str{m.device})});
  Value keep = b.torch("lt", {u, keep_p});
  // keep as 1.0 or 0.0 by a select, not a bool-to-float conversion: GCC does not vectorize a loop converting a bool.
  Value ones = b.prim("where", {keep, num(1.0), num(0.0)});
  Value noise = b.torch("div", {cast(b, ones, m.dtype), keep_p});
  if (may_keep_none) noise = b.prim("where", {keep, noise, num(0.0)});
  return b.torch("mul", {x, noise});
}

// dropout in training with p a number read at run time (a module's float under dynamic=True: Dynamo's guards on
// F.dropout's range check hold it in [0, 1]). As dropout, but for p = 0 a product with ones, not the input itself
// (as Inductor's decomposition), and for p = 1 a product with zeros (x * 0: NaN stays NaN) through the noise's
// select.
Value dropout_at_run_time(Builder& b, const Value& x, const Value& p) {
  const TensorMeta m = b.meta(x);
  if (m.numel() == 0) return x;
  if (!ir::is_floating(m.dtype)) throw NotNative("dropout of a tensor that is not floating-point");
  return dropped(b, x, b.torch("sub", {num(1.0), p}), true);
}

}  // namespace

std::pair<Value, Value> attention_heads(Builder& b, const Value& q, const Value& k, const Value& v, bool enable_gqa) {
  const TensorMeta qm = b.meta(q), km = b.meta(k);
  if (qm.ndim() < 2 || km.ndim() < 2) fail("ltorch.scaled_dot_product_attention", "query and key must be at least 2-D");
  if (!enable_gqa || qm.ndim() < 3 || km.ndim() < 3 || qm.shape[qm.ndim() - 3] == km.shape[km.ndim() - 3]) return {k, v};
  const Dim hq = qm.shape[qm.ndim() - 3], hk = km.shape[km.ndim() - 3];
  if (hk == 0 || (hq.is_constant() && hk.is_constant() && *hq.constant() % *hk.constant() != 0))
    fail("ltorch.scaled_dot_product_attention", "query heads must be a multiple of key heads");
  const Dim groups = hq.divide(hk, "ltorch.scaled_dot_product_attention");
  // Each key/value head serves hq / hk consecutive query heads (torch's repeat_interleave on the head dim).
  auto repeat_heads = [&](const Value& t) {
    Shape shape = b.meta(t).shape;
    int64_t head_dim = static_cast<int64_t>(shape.size()) - 3;
    Value u = b.torch("unsqueeze", {t, Int(head_dim + 1)});
    Shape expanded = b.meta(u).shape;
    expanded[head_dim + 1] = groups;
    shape[head_dim] = hq;
    return b.torch("reshape", {b.torch("expand", {u, Value::dims(expanded)}), Value::dims(shape)});
  };
  return {repeat_heads(k), repeat_heads(v)};
}

double attention_scale(Builder& b, const Value& q, const Value& scale) {
  if (!scale.is_none()) return scale.as_double();
  const Dim E = b.meta(q).shape.back();
  return 1.0 / std::sqrt(static_cast<double>(E.value("ltorch.scaled_dot_product_attention")));
}

Value attention_scores(Builder& b, const Value& q, const Value& key, const Value& mask, bool is_causal, double scale) {
  const TensorMeta qm = b.meta(q), km = b.meta(key);
  if (qm.ndim() < 2 || km.ndim() < 2) fail("ltorch.scaled_dot_product_attention", "query and key must be at least 2-D");
  const Dim L = qm.shape[qm.ndim() - 2], S = km.shape[km.ndim() - 2];
  const DType d = opmath(qm.dtype);
  Value qs = cast(b, q, d), ks = cast(b, key, d);
  Value scores = b.torch("mul", {b.torch("matmul", {qs, b.torch("transpose", {ks, Int(-2), Int(-1)})}), Value(scale)});
  if (is_causal) {
    if (!mask.is_none()) fail("ltorch.scaled_dot_product_attention", "attn_mask and is_causal cannot both be set");
    Value rows = b.torch("unsqueeze", {b.torch("arange", {Value(L), Value(), Int(1), Value(), Value(ir::Str{qm.device})}), Int(-1)});
    Value cols = b.torch("arange", {Value(S), Value(), Int(1), Value(), Value(ir::Str{qm.device})});
    Value keep = b.torch("le", {cols, rows});
    return b.torch("masked_fill", {scores, b.torch("logical_not", {keep}), Value(-INFINITY)});
  }
  if (mask.is_none()) return scores;
  if (b.meta(mask).dtype == DType::Bool)
    return b.torch("masked_fill", {scores, b.torch("logical_not", {mask}), Value(-INFINITY)});
  return b.torch("add", {scores, cast(b, mask, d)});
}

namespace {

// softmax(q k^T * scale + mask) v, with an optional causal mask and grouped-query heads; with dropout_p, the
// attention weights go through dropout before the product with v (as torch's math backend does).
Value sdpa(Builder& b, const Args& a) {
  const Value &q = a[0], &mask = a[3];
  const DType d = b.meta(q).dtype;
  auto [key, value] = attention_heads(b, q, a[1], a[2], a[7].as_bool());
  Value scores = attention_scores(b, q, key, mask, a[5].as_bool(), attention_scale(b, q, a[6]));
  Value probs = b.torch("softmax", {scores, Int(-1)});
  if (!mask.is_none()) {
    // torch's safe softmax: a row the mask hides entirely attends to nothing (zeros), not NaN.
    Value row_max = b.torch("amax", {scores, Value::ints({-1}), Value(true)});
    probs = b.torch("where", {b.torch("eq", {row_max, Value(-INFINITY)}), num(0.0), probs});
  }
  if (a[4].as_double() != 0.0) probs = dropout(b, probs, a[4].as_double(), true, false);
  return cast(b, b.torch("matmul", {probs, cast(b, value, opmath(d))}), d);
}

// Attention without dropout and the log-sum-exp of each row of its scores, [..., L] in float32: what torch's
// fused CPU kernel (aten._scaled_dot_product_flash_attention_for_cpu) returns, and all that the VJP rule of this op
// reads besides q, k, v and the output (the probabilities are exp(scores - lse), recomputed in the backward). A row
// the mask hides entirely has the output 0 and the log-sum-exp 0, as the kernel gives.
Value attention_with_logsumexp(Builder& b, const Args& a) {
  const Value &q = a[0], &mask = a[3];
  const DType d = b.meta(q).dtype;
  auto [key, value] = attention_heads(b, q, a[1], a[2], a[6].as_bool());
  Value scores = attention_scores(b, q, key, mask, a[4].as_bool(), attention_scale(b, q, a[5]));
  Value row_max = b.torch("amax", {scores, Value::ints({-1}), Value(true)});
  Value hidden = b.torch("eq", {row_max, Value(-INFINITY)});
  Value shift = b.torch("where", {hidden, num(0.0), row_max});
  Value e = b.torch("exp", {b.torch("sub", {scores, shift})});
  Value sums = b.torch("sum", {e, Value::ints({-1}), Value(true)});
  Value probs = b.torch("where", {hidden, num(0.0), b.torch("div", {e, sums})});
  Value lse = b.torch("where", {hidden, num(0.0), b.torch("add", {b.torch("log", {sums}), shift})});
  Value out = cast(b, b.torch("matmul", {probs, cast(b, value, opmath(d))}), d);
  return Value::tuple({out, b.torch("squeeze", {lse, Value::ints({-1})})});
}

}  // namespace

// Class-index targets only; the mean divides by the total weight of non-ignored targets.
void require_class_target(std::string_view op, DType target) {
  if (target == DType::UInt8) throw NotNative(std::string(op) + " with a uint8 target");  // torch takes it
  if (target != DType::Int64)
    fail(op, "expected target dtype to be int64 or uint8 (class indices), got " + std::string(ir::dtype_name(target)));
}

Value nll_loss_of(Builder& b, const Value& logp, const Value& target, const Value& weight, const Value& ignore_index,
                  const std::string& reduction) {
  const TensorMeta im = b.meta(logp), tm = b.meta(target);
  const int64_t class_dim = im.ndim() == 1 ? 0 : 1;
  Value valid = b.torch("ne", {target, ignore_index});
  Value safe = b.torch("where", {valid, target, Int(0)});
  Value picked = b.prim("take_along_axis", {logp, b.torch("unsqueeze", {safe, Int(class_dim)}), Int(class_dim)});
  // An ignored row reads class 0 in its place: masked here, not only weighted by 0, so that neither its value
  // (-inf there gives inf * 0) nor its gradient (g / 0 when every row is ignored) turns into NaN; ATen's kernel
  // skips such rows.
  Value nll = b.torch("where", {valid, b.torch("neg", {b.torch("squeeze", {picked, Int(class_dim)})}), num(0.0)});
  Value w = b.torch("to", {valid, Value(im.dtype)});
  if (!weight.is_none()) {
    Value flat = b.torch("reshape", {safe, Value::ints({-1})});
    Value per = b.torch("reshape", {b.prim("take", {weight, flat, Int(0)}), Value::dims(tm.shape)});
    w = b.torch("mul", {w, per});
  }
  Value loss = b.torch("mul", {nll, w});
  if (reduction == "none") return loss;
  // Half-precision losses are summed and divided in float32, then rounded once, as ATen's kernel does.
  Value total = b.torch("sum", {cast(b, loss, opmath(im.dtype))});
  if (reduction == "sum") return cast(b, total, im.dtype);
  return cast(b, b.torch("div", {total, b.torch("sum", {cast(b, w, opmath(im.dtype))})}), im.dtype);
}

namespace {

Value cross_entropy(Builder& b, const Args& a) {
  const Value &input = a[0], &target = a[1], &weight = a[2];
  const std::string& reduction = a[6].as_str();
  if (!a[3].is_none() || !a[5].is_none()) throw NotNative("cross_entropy with size_average/reduce");
  if (a[7].as_double() != 0.0) throw NotNative("cross_entropy with label smoothing");
  const TensorMeta im = b.meta(input), tm = b.meta(target);
  if (ir::is_floating(tm.dtype)) throw NotNative("cross_entropy with probability targets");
  require_class_target("ltorch.cross_entropy", tm.dtype);
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    fail("ltorch.cross_entropy", "reduction must be 'mean', 'sum' or 'none', got '" + reduction + "'");
  int64_t class_dim = im.ndim() == 1 ? 0 : 1;
  Shape expected = im.shape;
  expected.erase(expected.begin() + class_dim);
  require_same_shape("ltorch.cross_entropy", tm.shape, expected,
                   "expected target of shape " + shape_string(expected) + ", got " + shape_string(tm.shape));
  return nll_loss_of(b, b.torch("log_softmax", {input, Int(class_dim)}), target, weight, a[4], reduction);
}

Value embedding(Builder& b, const Args& a) {
  if (!a[3].is_none()) throw NotNative("embedding with max_norm");
  const TensorMeta idx = b.meta(a[0]), w = b.meta(a[1]);
  if (w.ndim() != 2) fail("ltorch.embedding", "expected a 2-D weight");
  if (ir::is_floating(idx.dtype)) fail("ltorch.embedding", "expected argument 'input' to be an integer tensor");
  Value rows = b.prim("take", {a[1], b.torch("reshape", {a[0], Value::ints({-1})}), Int(0)});
  Shape shape = idx.shape;
  shape.push_back(w.shape[1]);
  return b.torch("reshape", {rows, Value::dims(shape)});
}

// torch.nn.functional.multi_head_attention_forward (nn.MultiheadAttention's forward in training, which Dynamo
// keeps as one call), as torch's Python code computes it, for the common case: batched (L, N, E) query and (S, N, E)
// key and value, the packed in-projection (one linear for self-attention, q and kv for key is value, else three),
// masks 2-D (L, S) or 3-D (N * heads, L, S) and a (N, S) key padding mask, bool (True: masked out) or float. With
// need_weights, softmax(q k^T / sqrt(head_dim) + mask) is computed and returned (averaged over heads or not);
// without, scaled_dot_product_attention. Anything else -- bias_k/bias_v, add_zero_attn, separate projection
// weights, static keys, unbatched inputs, shapes torch rejects -- is not native: the op runs with torch, which
// computes or raises as it does.
Value multi_head_attention(Builder& b, const Args& a) {
  const Value &query = a[0], &key = a[1], &value = a[2], &w_in = a[5], &b_in = a[6], &w_out = a[11], &b_out = a[12];
  if (!a[7].is_none() || !a[8].is_none()) throw NotNative("multi_head_attention_forward with bias_k/bias_v");
  if (a[9].as_bool()) throw NotNative("multi_head_attention_forward with add_zero_attn");
  if (a[17].as_bool() || !a[21].is_none() || !a[22].is_none())
    throw NotNative("multi_head_attention_forward with separate projection weights or static keys");
  auto integer = [](const Value& x) { return std::holds_alternative<int64_t>(x.v); };
  if (w_in.is_none() || !integer(a[3]) || !integer(a[4]) || a[10].is_proxy() || a[10].is_symbolic())
    throw NotNative("multi_head_attention_forward with these arguments");
  const TensorMeta qm = b.meta(query), km = b.meta(key), vm = b.meta(value);
  if (qm.ndim() != 3 || km.ndim() != 3 || !(km.shape == vm.shape) || !ir::is_floating(qm.dtype) ||
      km.dtype != qm.dtype || vm.dtype != qm.dtype || !(qm.shape[1] == km.shape[1]) || !(qm.shape[2] == km.shape[2]))
    throw NotNative("multi_head_attention_forward with these shapes or dtypes");
  const Dim L = qm.shape[0], N = qm.shape[1], S = km.shape[0];
  const std::optional<int64_t> embed = qm.shape[2].constant();
  const int64_t heads = a[4].as_int();
  if (!embed || *embed != a[3].as_int() || heads <= 0 || *embed % heads != 0)
    throw NotNative("multi_head_attention_forward with these dimensions");
  const int64_t E = *embed, head_dim = E / heads;
  const double p = a[13].as_bool() ? a[10].as_double() : 0.0;
  const bool need_weights = a[15].as_bool();
  bool is_causal = a[24].as_bool();
  // A bool mask marks what is masked out: -inf there, 0 elsewhere, in the query's dtype (torch's _canonical_mask).
  auto canonical = [&](const Value& mask) -> Value {
    if (mask.is_none()) return mask;
    const TensorMeta mm = b.meta(mask);
    if (mm.dtype == DType::Bool)
      return b.torch("masked_fill", {b.torch("zeros_like", {mask, Value(qm.dtype)}), mask, Value(-INFINITY)});
    if (!ir::is_floating(mm.dtype)) throw NotNative("multi_head_attention_forward with an integer mask");
    return mask;
  };
  Value padding = canonical(a[14]), mask = a[16];
  if (is_causal && mask.is_none()) throw NotNative("multi_head_attention_forward with is_causal and no attn_mask");
  if (is_causal && padding.is_none() && !need_weights) {
    mask = Value();
  } else {
    mask = canonical(mask);
    if (!padding.is_none()) is_causal = false;
  }
  // The in-projection, as torch's _in_projection_packed splits it.
  auto rows = [&](const Value& t, int64_t start, int64_t length) {
    return t.is_none() ? t : b.torch("narrow", {t, Int(0), Int(start), Int(length)});
  };
  auto same = [](const Value& x, const Value& y) { return x.is_proxy() && y.is_proxy() && x.proxy() == y.proxy(); };
  auto part = [&](const Value& t, int64_t k) { return b.torch("narrow", {t, Int(-1), Int(k * E), Int(E)}); };
  Value q, k, v;
  if (same(key, value) && same(query, key)) {
    Value proj = b.torch("linear", {query, w_in, b_in});
    q = part(proj, 0), k = part(proj, 1), v = part(proj, 2);
  } else if (same(key, value)) {
    q = b.torch("linear", {query, rows(w_in, 0, E), rows(b_in, 0, E)});
    Value kv = b.torch("linear", {key, rows(w_in, E, 2 * E), rows(b_in, E, 2 * E)});
    k = part(kv, 0), v = part(kv, 1);
  } else {
    q = b.torch("linear", {query, rows(w_in, 0, E), rows(b_in, 0, E)});
    k = b.torch("linear", {key, rows(w_in, E, E), rows(b_in, E, E)});
    v = b.torch("linear", {value, rows(w_in, 2 * E, E), rows(b_in, 2 * E, E)});
  }
  const Dim batch_heads = N * Dim(heads);
  if (!mask.is_none()) {
    const TensorMeta mm = b.meta(mask);
    if (mm.ndim() == 2 && mm.shape == Shape{L, S}) mask = b.torch("unsqueeze", {mask, Int(0)});
    else if (!(mm.ndim() == 3 && mm.shape == Shape{batch_heads, L, S}))
      throw NotNative("multi_head_attention_forward with a mask of another shape");
  }
  // (length, N, E) -> (N * heads, length, head_dim)
  auto split_heads = [&](const Value& t, const Dim& length) {
    return b.torch("transpose", {b.torch("reshape", {t, Value::dims({length, batch_heads, Dim(head_dim)})}), Int(0),
                                 Int(1)});
  };
  q = split_heads(q, L), k = split_heads(k, S), v = split_heads(v, S);
  if (!padding.is_none()) {
    if (!(b.meta(padding).shape == Shape{N, S}))
      throw NotNative("multi_head_attention_forward with a key padding mask of another shape");
    Value per_head = b.torch("expand", {b.torch("reshape", {padding, Value::dims({N, Dim(1), Dim(1), S})}),
                                        Value::dims({N, Dim(heads), Dim(1), S})});
    per_head = b.torch("reshape", {per_head, Value::dims({batch_heads, Dim(1), S})});
    mask = mask.is_none() ? per_head : b.torch("add", {mask, per_head});
  }
  auto project_out = [&](const Value& heads_first) {  // (L, N * heads, head_dim) -> (L, N, E)
    Value flat = b.torch("reshape", {heads_first, Value::dims({L * N, Dim(E)})});
    return b.torch("reshape", {b.torch("linear", {flat, w_out, b_out}), Value::dims({L, N, Dim(E)})});
  };
  if (need_weights) {
    Value scaled = b.torch("mul", {q, num(std::sqrt(1.0 / static_cast<double>(head_dim)))});
    Value scores = b.torch("bmm", {scaled, b.torch("transpose", {k, Int(-2), Int(-1)})});
    if (!mask.is_none()) scores = b.torch("add", {scores, mask});
    Value weights = b.torch("softmax", {scores, Int(-1)});
    if (p > 0.0) weights = b.torch("dropout", {weights, num(p)});
    Value out = project_out(b.torch("transpose", {b.torch("bmm", {weights, v}), Int(0), Int(1)}));
    weights = b.torch("reshape", {weights, Value::dims({N, Dim(heads), L, S})});
    if (a[23].as_bool()) weights = b.torch("mean", {weights, Value::ints({1})});
    return Value::tuple({out, weights});
  }
  if (!mask.is_none()) {
    const TensorMeta mm = b.meta(mask);
    mask = mm.shape[0] == Dim(1) ? b.torch("unsqueeze", {mask, Int(0)})
                                 : b.torch("reshape", {mask, Value::dims({N, Dim(heads), mm.shape[1], S})});
  }
  auto by_batch = [&](const Value& t, const Dim& length) {  // (N * heads, length, head_dim) -> (N, heads, ...)
    return b.torch("reshape", {t, Value::dims({N, Dim(heads), length, Dim(head_dim)})});
  };
  Value attended = b.torch("scaled_dot_product_attention",
                           {by_batch(q, L), by_batch(k, S), by_batch(v, S), mask, num(p), Value(is_causal)});
  Value out = project_out(b.torch("reshape", {b.torch("permute", {attended, Value::ints({2, 0, 1, 3})}),
                                              Value::dims({L, N * Dim(heads), Dim(head_dim)})}));
  return Value::tuple({out, Value()});
}

}  // namespace

void register_torch_nn() {
  def_decomposed("softmax", ir::kReduction, {kInput, req("dim"), opt("dtype", Value())},
                 [](Builder& b, const Args& a) { return softmax(b, a, false); });
  def_decomposed("log_softmax", ir::kReduction, {kInput, req("dim"), opt("dtype", Value())},
                 [](Builder& b, const Args& a) { return softmax(b, a, true); });
  def_decomposed("layer_norm", ir::kReduction,
                 {kInput, req("normalized_shape"), opt("weight", Value()), opt("bias", Value()), opt("eps", Value(1e-5))},
                 layer_norm);
  def_decomposed("rms_norm", ir::kReduction,
                 {kInput, req("normalized_shape"), opt("weight", Value()), opt("eps", Value())}, rms_norm);
  def_decomposed("linear", ir::kFreshOutput, {kInput, req("weight"), opt("bias", Value())}, linear);
  for (const char* name : {"matmul", "mm", "bmm"}) {
    std::string n = name;
    def_decomposed(name, ir::kFreshOutput, {kInput, req(n == "matmul" ? "other" : "mat2")},
                   [n](Builder& b, const Args& a) {
                     int64_t want = n == "mm" ? 2 : n == "bmm" ? 3 : -1;
                     if (want > 0 && (b.meta(a[0]).ndim() != want || b.meta(a[1]).ndim() != want))
                       fail("ltorch." + n, "expected " + std::to_string(want) + "-D tensors");
                     return b.prim("matmul", {a[0], a[1]});
                   });
  }
  def_decomposed("scaled_dot_product_attention", 0,
                 {req("query"), req("key"), req("value"), opt("attn_mask", Value()), opt("dropout_p", Value(0.0)),
                  opt("is_causal", Value(false)), opt("scale", Value()), opt("enable_gqa", Value(false))},
                 sdpa);
  def_decomposed("attention_with_logsumexp", 0,
                 {req("query"), req("key"), req("value"), opt("attn_mask", Value()), opt("is_causal", Value(false)),
                  opt("scale", Value()), opt("enable_gqa", Value(false))},
                 attention_with_logsumexp);
  // attention_with_logsumexp's gradients (dq, dk, dv) from torch's fused CPU kernel, the one eager's backward runs
  // (aten._scaled_dot_product_flash_attention_for_cpu_backward): its VJP rule calls it in float32, where that
  // kernel is as fast as thunder's rule, and spares the recomputed forward of the generic rule. No decomposition:
  // it runs with torch, on the CPU only (the rule emits it only there).
  def_meta("attention_backward", ir::kFreshOutput,
           {req("grad_out"), req("query"), req("key"), req("value"), req("out"), req("logsumexp"),
            opt("attn_mask", Value()), opt("is_causal", Value(false)), opt("scale", Value()),
            opt("enable_gqa", Value(false))},
           [](Builder& b, const Args& a) {
             std::vector<Value> grads;
             for (size_t i = 1; i <= 3; ++i) {
               TensorMeta m = tensor(b, "attention_backward", a[i]);
               m.requires_grad = false;
               grads.push_back(Value(ir::ProxyRef{b.new_tensor(m)}));
             }
             return Value::tuple(grads);
           });
  // kRandom: its dropout draws a mask.
  def_decomposed("multi_head_attention_forward", ir::kRandom,
                 {req("query"), req("key"), req("value"), req("embed_dim_to_check"), req("num_heads"),
                  req("in_proj_weight"), req("in_proj_bias"), req("bias_k"), req("bias_v"), req("add_zero_attn"),
                  req("dropout_p"), req("out_proj_weight"), req("out_proj_bias"), opt("training", Value(true)),
                  opt("key_padding_mask", Value()), opt("need_weights", Value(true)), opt("attn_mask", Value()),
                  opt("use_separate_proj_weight", Value(false)), opt("q_proj_weight", Value()),
                  opt("k_proj_weight", Value()), opt("v_proj_weight", Value()), opt("static_k", Value()),
                  opt("static_v", Value()), opt("average_attn_weights", Value(true)), opt("is_causal", Value(false))},
                 multi_head_attention);
  def_decomposed("cross_entropy", ir::kReduction,
                 {kInput, req("target"), opt("weight", Value()), opt("size_average", Value()),
                  opt("ignore_index", Int(-100)), opt("reduce", Value()), opt("reduction", Value(ir::Str{"mean"})),
                  opt("label_smoothing", Value(0.0))},
                 cross_entropy);
  def_decomposed("embedding", 0,
                 {kInput, req("weight"), opt("padding_idx", Value()), opt("max_norm", Value()),
                  opt("norm_type", Value(2.0)), opt("scale_grad_by_freq", Value(false)), opt("sparse", Value(false))},
                 embedding);
  // kRandom: two dropouts of one tensor draw two masks (CSE must not merge them).
  def_decomposed("dropout", ir::kRandom,
                 {kInput, opt("p", Value(0.5)), opt("training", Value(true)), opt("inplace", Value(false))},
                 [](Builder& b, const Args& a) {
                   // Not training: the input, whatever p is (a number read at run time under dynamic=True, where
                   // Dynamo passes a module's float attributes as 0-d tensors).
                   if (a[1].is_proxy() && !a[2].as_bool() && !a[3].as_bool()) return a[0];
                   if (a[1].is_proxy() && !a[3].as_bool()) return dropout_at_run_time(b, a[0], a[1]);
                   return dropout(b, a[0], a[1].as_double(), a[2].as_bool(), a[3].as_bool());
                 });
}

}  // namespace thunder::ops
