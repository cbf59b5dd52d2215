// More torch.nn.functional: convolutions and pooling (single torch-level
// symbols with shape rules), normalizations and losses (decompositions),
// matrix products, padding.
#include <cstring>
#include <cmath>
#include <tuple>

#include "ops/torch_common.h"

namespace thunder::ops {
namespace {

const ir::Param kInput = req("input");
// An int or a list of n ints.
std::vector<int64_t> expand_param(const std::string& op, const Value& v, size_t n, const char* what) {
  std::vector<int64_t> xs = v.is_seq() ? v.as_ints() : std::vector<int64_t>(n, v.as_int());
  if (xs.size() == 1 && n > 1) xs = std::vector<int64_t>(n, xs[0]);
  if (xs.size() != n) fail(op, std::string("expected ") + std::to_string(n) + " values for " + what);
  return xs;
}

// OpError(what) naming `op` unless the sizes are provably equal; SymbolicShapeError if one is symbolic (they may be
// equal at run time).
void require_equal(std::string_view op, const Dim& x, const Dim& y, const std::string& what) {
  if (x == y) return;
  if (!x.is_constant() || !y.is_constant()) throw ir::SymbolicShapeError(std::string(op) + ": " + what);
  fail(op, what);
}

// ---- convolution ----

Value conv(Builder& b, const Args& a, int64_t nd, bool transposed) {
  const std::string op = std::string("ltorch.conv") + (transposed ? "_transpose" : "") + std::to_string(nd) + "d";
  const TensorMeta& x = tensor(b, op, a[0]);
  const TensorMeta& w = tensor(b, op, a[1], "weight");
  if (x.dtype != w.dtype) fail(op, "input and weight must have the same dtype");
  if (x.dtype == DType::Bool) fail(op, "bool convolution is not supported");
  bool batched = x.ndim() == nd + 2;
  if (!batched && x.ndim() != nd + 1) fail(op, "expected a " + std::to_string(nd + 1) + "-d or " + std::to_string(nd + 2) + "-d input");
  if (w.ndim() != nd + 2) fail(op, "weight must be " + std::to_string(nd + 2) + "-d");
  if (!a[2].is_none() && tensor(b, op, a[2], "bias").dtype != x.dtype) fail(op, "bias must have the input's dtype");
  const Shape in(x.shape.end() - nd, x.shape.end());
  const Dim channels = x.shape[batched ? 1 : 0];
  std::vector<int64_t> stride = expand_param(op, a[3], nd, "stride");
  for (int64_t st : stride)
    if (st <= 0) fail(op, "non-positive stride is not supported (got " + std::to_string(st) + ")");
  Shape out_shape;
  if (batched) out_shape.push_back(x.shape[0]);
  if (!transposed) {
    int64_t groups = a[6].as_int();
    std::vector<int64_t> dilation = expand_param(op, a[5], nd, "dilation");
    std::vector<int64_t> pad(nd, 0);
    bool same = false;
    if (std::holds_alternative<ir::Str>(a[4].v)) {
      const std::string& p = a[4].as_str();
      if (p == "same") same = true;
      else if (p != "valid") fail(op, "padding must be 'valid', 'same' or ints");
    } else {
      pad = expand_param(op, a[4], nd, "padding");
    }
    const std::string mismatch = "input channels do not match the weight and groups";
    if (groups <= 0) fail(op, mismatch);
    require_equal(op, channels, w.shape[1] * groups, mismatch);
    require_equal(op, w.shape[0].divide(groups, op) * groups, w.shape[0], mismatch);
    out_shape.push_back(w.shape[0]);
    // The padded input is at least the kernel: every output size is at least 1.
    for (int64_t i = 0; i < nd; ++i) {
      const Dim k = dilation[i] * (w.shape[2 + i] - 1) + 1;
      if (!same && in[i] + 2 * pad[i] < k) fail(op, "kernel size can't be greater than the padded input size");
      out_shape.push_back(same ? in[i] : (in[i] + 2 * pad[i] - k).divide(stride[i], op) + 1);
    }
  } else {
    // conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation)
    std::vector<int64_t> pad = expand_param(op, a[4], nd, "padding");
    std::vector<int64_t> out_pad = expand_param(op, a[5], nd, "output_padding");
    int64_t groups = a[6].as_int();
    std::vector<int64_t> dilation = expand_param(op, a[7], nd, "dilation");
    if (groups <= 0) fail(op, "input channels do not match the weight");
    require_equal(op, channels, w.shape[0], "input channels do not match the weight");
    out_shape.push_back(w.shape[1] * groups);
    for (int64_t i = 0; i < nd; ++i) {
      const Dim o = (in[i] - 1) * stride[i] - 2 * pad[i] + dilation[i] * (w.shape[2 + i] - 1) + out_pad[i] + 1;
      if (o < 0) fail(op, "output size is too small");
      out_shape.push_back(o);
    }
  }
  TensorMeta m = x;
  m.shape = out_shape;
  return out_tensor(b, m);
}

// ---- pooling ----

int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  int64_t num = in + 2 * p - d * (k - 1) - 1;
  int64_t o = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  if (num < 0) o = (num + (ceil_mode ? s - 1 : 0)) / s + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

// A pooling result of metadata m, with its int64 argmax indices when return_indices (max pooling).
Value pooled_output(Builder& b, const TensorMeta& m, bool with_indices) {
  Value out = out_tensor(b, m);
  if (!with_indices) return out;
  TensorMeta idx = m;
  idx.dtype = DType::Int64;
  return Value::tuple({out, out_tensor(b, idx)});
}

Value pool(Builder& b, const Args& a, int64_t nd, bool is_max) {
  const std::string op = std::string("ltorch.") + (is_max ? "max" : "avg") + "_pool" + std::to_string(nd) + "d";
  const TensorMeta& x = tensor(b, op, a[0]);
  if (x.ndim() != nd + 1 && x.ndim() != nd + 2) fail(op, "unexpected input rank");
  if (!is_max && !is_float(x.dtype) && x.dtype != DType::Int64) throw NotNative("integer avg_pool");
  std::vector<int64_t> k = expand_param(op, a[1], nd, "kernel_size");
  std::vector<int64_t> s = (a[2].is_none() || (a[2].is_seq() && a[2].items().empty())) ? k : expand_param(op, a[2], nd, "stride");
  std::vector<int64_t> p = expand_param(op, a[3], nd, "padding");
  std::vector<int64_t> d = is_max ? expand_param(op, a[4], nd, "dilation") : std::vector<int64_t>(nd, 1);
  bool ceil_mode = (is_max ? a[5] : a[4]).as_bool();
  TensorMeta m = x;
  for (int64_t i = 0; i < nd; ++i) {
    if (k[i] <= 0 || s[i] <= 0 || p[i] < 0 || p[i] * 2 > k[i]) fail(op, "invalid kernel, stride or padding");
    const int64_t in = x.shape[x.ndim() - nd + i].value(op);
    int64_t o = pooled(in, k[i], s[i], p[i], d[i], ceil_mode);
    if (o <= 0) fail(op, "output size is too small");
    m.shape[x.ndim() - nd + i] = o;
  }
  return pooled_output(b, m, is_max && a[6].as_bool());
}

Value adaptive_pool(Builder& b, const Args& a, int64_t nd, bool is_max) {
  const std::string op = std::string("ltorch.adaptive_") + (is_max ? "max" : "avg") + "_pool" + std::to_string(nd) + "d";
  const TensorMeta& x = tensor(b, op, a[0]);
  if (x.ndim() != nd + 1 && x.ndim() != nd + 2) fail(op, "unexpected input rank");
  Shape out;
  if (a[1].is_seq()) {
    for (size_t i = 0; i < a[1].items().size(); ++i)
      out.push_back(a[1].items()[i].is_none() ? x.shape[x.ndim() - nd + i] : a[1].items()[i].as_dim());
    if (out.size() == 1 && nd > 1) out = Shape(nd, out[0]);
  } else {
    out = Shape(nd, a[1].as_dim());
  }
  if (static_cast<int64_t>(out.size()) != nd) fail(op, "output_size has the wrong length");
  TensorMeta m = x;
  for (int64_t i = 0; i < nd; ++i) m.shape[x.ndim() - nd + i] = out[i];
  return pooled_output(b, m, is_max && a[2].as_bool());
}

// ---- normalization ----

Value channel_shape(Builder& b, const Value& v, int64_t ndim) {
  Shape shape(ndim, 1);
  shape[1] = b.meta(v).numel();
  return b.torch("reshape", {v, Value::dims(shape)});
}

Value batch_norm(Builder& b, const Args& a) {
  // batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)
  const TensorMeta m = tensor(b, "ltorch.batch_norm", a[0]);
  bool training = a[5].as_bool();
  if (training && (!a[1].is_none() || !a[2].is_none())) throw NotNative("batch_norm updating running statistics");
  if (m.ndim() < 2) fail("ltorch.batch_norm", "expected at least 2-d input");
  DType acc = opmath(m.dtype);
  Value x = cast(b, a[0], acc);
  Value centered, var;
  if (training || a[1].is_none()) {
    if (!training) fail("ltorch.batch_norm", "running_mean and running_var must be given in eval mode");
    std::vector<int64_t> dims;
    Dim count = 1;
    for (int64_t i = 0; i < m.ndim(); ++i)
      if (i != 1) {
        dims.push_back(i);
        count *= m.shape[i];
      }
    if (m.shape[1] == 0) count = 0;
    if (count <= 1) fail("ltorch.batch_norm", "expected more than 1 value per channel when training");
    std::tie(centered, var) = centered_moments(b, x, dims);
  } else {
    centered = T(b, "sub", {x, channel_shape(b, cast(b, a[1], acc), m.ndim())});
    var = channel_shape(b, cast(b, a[2], acc), m.ndim());
  }
  Value y = T(b, "mul", {centered, T(b, "rsqrt", {T(b, "add", {var, a[7]})})});
  if (!a[3].is_none()) y = T(b, "mul", {y, channel_shape(b, a[3], m.ndim())});
  if (!a[4].is_none()) y = T(b, "add", {y, channel_shape(b, a[4], m.ndim())});
  return cast(b, y, m.dtype);
}

Value group_norm(Builder& b, const Args& a) {
  // group_norm(input, num_groups, weight, bias, eps)
  const TensorMeta m = tensor(b, "ltorch.group_norm", a[0]);
  if (m.ndim() < 2) fail("ltorch.group_norm", "expected at least 2-d input");
  const int64_t g = a[1].as_int();
  const Dim c = m.shape[1], n = m.shape[0];
  if (g <= 0 || c.divide(g, "ltorch.group_norm") * g != c)
    fail("ltorch.group_norm", "channels must be divisible by num_groups");
  const Shape spatial(m.shape.begin() + 2, m.shape.end());
  const Dim group_size = n == 0 ? Dim(0) : c.divide(g, "ltorch.group_norm") * ir::product(spatial);
  DType acc = opmath(m.dtype);
  Value x = b.torch("reshape", {cast(b, a[0], acc), Value::dims({n, g, group_size})});
  auto [centered, var] = centered_moments(b, x, {2});
  Value y = T(b, "mul", {centered, T(b, "rsqrt", {T(b, "add", {var, a[4]})})});
  y = b.torch("reshape", {y, Value::dims(m.shape)});
  if (!a[2].is_none()) y = T(b, "mul", {y, channel_shape(b, a[2], m.ndim())});
  if (!a[3].is_none()) y = T(b, "add", {y, channel_shape(b, a[3], m.ndim())});
  return cast(b, y, m.dtype);
}

Value normalize(Builder& b, const Args& a) {
  // (Its decomposition's amax/maximum are real only: torch runs, and differentiates, a complex normalize.)
  if (ir::is_complex(b.meta(a[0]).dtype)) throw NotNative("normalize of a complex tensor");
  // normalize(input, p=2.0, dim=1, eps=1e-12)
  const TensorMeta& m = tensor(b, "ltorch.normalize", a[0]);
  if (!is_float(m.dtype)) fail("ltorch.normalize", "expected a floating-point input");
  Value norm = b.torch("vector_norm", {a[0], a[1], Value::ints({a[2].as_int()}), Value(true)});
  Value denom = T(b, "expand", {b.torch("clamp_min", {norm, a[3]}), Value::dims(m.shape)});
  return T(b, "div", {a[0], denom});
}

// ---- losses ----

Value reduce_loss(Builder& b, const Value& loss, const Value& reduction, const char* op) {
  const std::string& r = reduction.as_str();
  if (r == "none") return loss;
  if (r == "sum") return T(b, "sum", {loss});
  if (r == "mean") return T(b, "mean", {loss});
  fail(op, "reduction must be 'none', 'mean' or 'sum'");
}

void legacy_reduction(const Args& a, size_t size_average, size_t reduce) {
  if (!a[size_average].is_none() || !a[reduce].is_none()) throw NotNative("legacy size_average/reduce arguments");
}

void register_losses() {
  const std::vector<ir::Param> common{kInput, req("target"), opt("size_average", Value()), opt("reduce", Value()),
                                      opt("reduction", Value(ir::Str{"mean"}))};
  def_decomposed("mse_loss", ir::kReduction, {kInput, req("target"), opt("size_average", Value()), opt("reduce", Value()),
                                              opt("reduction", Value(ir::Str{"mean"})), opt("weight", Value())},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 2, 3);
                   if (!a[5].is_none()) throw NotNative("mse_loss with weight");
                   Value d = T(b, "sub", {a[0], a[1]});
                   return reduce_loss(b, T(b, "mul", {d, d}), a[4], "ltorch.mse_loss");
                 });
  def_decomposed("l1_loss", ir::kReduction, {kInput, req("target"), opt("size_average", Value()), opt("reduce", Value()),
                                             opt("reduction", Value(ir::Str{"mean"})), opt("weight", Value())},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 2, 3);
                   if (!a[5].is_none()) throw NotNative("l1_loss with weight");
                   return reduce_loss(b, T(b, "abs", {T(b, "sub", {a[0], a[1]})}), a[4], "ltorch.l1_loss");
                 });
  def_decomposed("smooth_l1_loss", ir::kReduction,
                 {kInput, req("target"), opt("size_average", Value()), opt("reduce", Value()),
                  opt("reduction", Value(ir::Str{"mean"})), opt("beta", F(1.0))},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 2, 3);
                   const Value beta = a[5].is_proxy() ? a[5] : F(a[5].as_double());
                   if (!beta.is_proxy() && !(beta.as_double() >= 0.0))
                     fail("ltorch.smooth_l1_loss", "does not support negative values (or NaN) for beta");
                   Value d = T(b, "abs", {T(b, "sub", {a[0], a[1]})});
                   if (!beta.is_proxy() && beta.as_double() == 0.0) return reduce_loss(b, d, a[4], "ltorch.smooth_l1_loss");
                   // A beta known only at run time may be 0, where eager computes l1_loss: `lin` below (d < 0 never
                   // holds), and `quad` divides by 1 instead, so that its gradient, masked out, is 0 and not 0/0.
                   Value divisor = beta;
                   if (beta.is_proxy()) {
                     const Value t = b.prim("full", {Value::dims({}), beta, Value(b.meta(d).dtype), Value(ir::Str{b.meta(d).device})});
                     divisor = T(b, "where", {T(b, "eq", {t, Int(0)}), Int(1), t});
                   }
                   Value quad = T(b, "div", {T(b, "mul", {T(b, "mul", {d, d}), F(0.5)}), divisor});
                   Value lin = T(b, "sub", {d, scaled_number(b, beta, 0.5)});
                   return reduce_loss(b, T(b, "where", {T(b, "lt", {d, beta}), quad, lin}), a[4], "ltorch.smooth_l1_loss");
                 });
  def_decomposed("huber_loss", ir::kReduction,
                 {kInput, req("target"), opt("reduction", Value(ir::Str{"mean"})), opt("delta", F(1.0)), opt("weight", Value())},
                 [](Builder& b, const Args& a) {
                   if (!a[4].is_none()) throw NotNative("huber_loss with weight");
                   const Value delta = a[3].is_proxy() ? a[3] : F(a[3].as_double());  // perhaps known only at run time
                   Value d = T(b, "abs", {T(b, "sub", {a[0], a[1]})});
                   Value quad = T(b, "mul", {T(b, "mul", {d, d}), F(0.5)});
                   Value lin = T(b, "mul", {T(b, "sub", {d, scaled_number(b, delta, 0.5)}), delta});
                   return reduce_loss(b, T(b, "where", {T(b, "lt", {d, delta}), quad, lin}), a[2], "ltorch.huber_loss");
                 });
  def_decomposed("soft_margin_loss", ir::kReduction, common, [](Builder& b, const Args& a) {
    legacy_reduction(a, 2, 3);
    Value l = T(b, "log1p", {T(b, "exp", {T(b, "neg", {T(b, "mul", {a[0], a[1]})})})});
    return reduce_loss(b, l, a[4], "ltorch.soft_margin_loss");
  });
  def_decomposed("binary_cross_entropy", ir::kReduction,
                 {kInput, req("target"), opt("weight", Value()), opt("size_average", Value()), opt("reduce", Value()),
                  opt("reduction", Value(ir::Str{"mean"}))},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 3, 4);
                   require_same_shape("ltorch.binary_cross_entropy", b.meta(a[0]).shape, b.meta(a[1]).shape,
                                      "target and input must have the same shape");
                   DType d = b.meta(a[0]).dtype;
                   // ATen's kernel raises for an input or target outside [0, 1] (where the loss would be NaN).
                   Value p = b.prim("check_in_range", {a[0], F(0.0), F(1.0), Value(ir::Str{"all elements of input should be between 0 and 1"})});
                   Value q = b.prim("check_in_range", {a[1], F(0.0), F(1.0), Value(ir::Str{"all elements of target should be between 0 and 1"})});
                   Value x = cast(b, p, opmath(d)), y = cast(b, q, opmath(d));
                   Value logx = b.torch("clamp_min", {T(b, "log", {x}), F(-100.0)});
                   Value log1mx = b.torch("clamp_min", {T(b, "log", {T(b, "rsub", {x, Int(1)})}), F(-100.0)});
                   Value l = T(b, "neg", {T(b, "add", {T(b, "mul", {y, logx}), T(b, "mul", {T(b, "rsub", {y, Int(1)}), log1mx})})});
                   if (!a[2].is_none()) l = T(b, "mul", {l, a[2]});
                   return cast(b, reduce_loss(b, l, a[5], "ltorch.binary_cross_entropy"), d);
                 });
  def_decomposed("binary_cross_entropy_with_logits", ir::kReduction,
                 {kInput, req("target"), opt("weight", Value()), opt("size_average", Value()), opt("reduce", Value()),
                  opt("reduction", Value(ir::Str{"mean"})), opt("pos_weight", Value())},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 3, 4);
                   require_same_shape("ltorch.binary_cross_entropy_with_logits", b.meta(a[0]).shape, b.meta(a[1]).shape,
                                      "target and input must have the same shape");
                   const Value &x = a[0], &y = a[1];
                   // (1 - y) x - (1 + (pw - 1) y) log_sigmoid(x), as ATen computes it (log_sigmoid rounds a half
                   // input once); the gradient is the op's own VJP rule.
                   Value ls = b.torch("log_sigmoid", {x});
                   if (!a[6].is_none())
                     ls = T(b, "mul", {ls, T(b, "add", {T(b, "mul", {T(b, "sub", {a[6], Int(1)}), y}), Int(1)})});
                   Value l = T(b, "sub", {T(b, "mul", {T(b, "rsub", {y, Int(1)}), x}), ls});
                   if (!a[2].is_none()) l = T(b, "mul", {l, a[2]});
                   return reduce_loss(b, l, a[5], "ltorch.binary_cross_entropy_with_logits");
                 });
  def_decomposed("kl_div", ir::kReduction,
                 {kInput, req("target"), opt("size_average", Value()), opt("reduce", Value()),
                  opt("reduction", Value(ir::Str{"mean"})), opt("log_target", Value(false))},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 2, 3);
                   Value l = a[5].as_bool() ? T(b, "mul", {T(b, "exp", {a[1]}), T(b, "sub", {a[1], a[0]})})
                                            : T(b, "sub", {b.torch("xlogy", {a[1], a[1]}), T(b, "mul", {a[1], a[0]})});
                   const std::string& r = a[4].as_str();
                   if (r == "batchmean") {
                     Value s = T(b, "sum", {l});
                     const TensorMeta& m = b.meta(a[0]);
                     return m.ndim() == 0 ? s : T(b, "div", {s, Int(m.shape[0].value("ltorch.kl_div"))});
                   }
                   return reduce_loss(b, l, a[4], "ltorch.kl_div");
                 });
  def_decomposed("nll_loss", ir::kReduction,
                 {kInput, req("target"), opt("weight", Value()), opt("size_average", Value()), opt("ignore_index", Int(-100)),
                  opt("reduce", Value()), opt("reduction", Value(ir::Str{"mean"}))},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 3, 5);
                   const TensorMeta im = b.meta(a[0]), tm = b.meta(a[1]);
                   require_class_target("ltorch.nll_loss", tm.dtype);
                   int64_t class_dim = im.ndim() == 1 ? 0 : 1;
                   Shape expected = im.shape;
                   expected.erase(expected.begin() + class_dim);
                   require_same_shape("ltorch.nll_loss", tm.shape, expected, "target shape does not match the input");
                   const std::string& reduction = a[6].as_str();
                   if (im.numel() == 0 && reduction == "mean") throw NotNative("nll_loss mean over an empty batch");
                   if (reduction != "none" && reduction != "mean" && reduction != "sum")
                     fail("ltorch.nll_loss", "reduction must be 'none', 'mean' or 'sum'");
                   return nll_loss_of(b, a[0], a[1], a[2], a[4], reduction);
                 });
  def_decomposed("margin_ranking_loss", ir::kReduction,
                 {req("input1"), req("input2"), req("target"), opt("margin", F(0.0)), opt("size_average", Value()),
                  opt("reduce", Value()), opt("reduction", Value(ir::Str{"mean"}))},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 4, 5);
                   Value l = T(b, "add", {T(b, "mul", {T(b, "neg", {a[2]}), T(b, "sub", {a[0], a[1]})}), a[3]});
                   return reduce_loss(b, b.torch("clamp_min", {l, Int(0)}), a[6], "ltorch.margin_ranking_loss");
                 });
  def_decomposed("hinge_embedding_loss", ir::kReduction,
                 {kInput, req("target"), opt("margin", F(1.0)), opt("size_average", Value()), opt("reduce", Value()),
                  opt("reduction", Value(ir::Str{"mean"}))},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 3, 4);
                   Value zeros = T(b, "zeros_like", {a[0]});
                   Value margin_clamp = b.torch("clamp_min", {T(b, "rsub", {a[0], a[2]}), Int(0)});
                   Value out_margin = T(b, "where", {T(b, "ne", {a[1], Int(1)}), margin_clamp, zeros});
                   Value out_self = T(b, "where", {T(b, "ne", {a[1], Int(-1)}), a[0], zeros});
                   return reduce_loss(b, T(b, "add", {out_margin, out_self}), a[5], "ltorch.hinge_embedding_loss");
                 });
  def_decomposed("poisson_nll_loss", ir::kReduction,
                 {kInput, req("target"), opt("log_input", Value(true)), opt("full", Value(false)), opt("size_average", Value()),
                  opt("eps", F(1e-8)), opt("reduce", Value()), opt("reduction", Value(ir::Str{"mean"}))},
                 [](Builder& b, const Args& a) {
                   legacy_reduction(a, 4, 6);
                   if (a[3].as_bool()) throw NotNative("poisson_nll_loss with full=True");
                   Value l = a[2].as_bool() ? T(b, "sub", {T(b, "exp", {a[0]}), T(b, "mul", {a[1], a[0]})})
                                            : T(b, "sub", {a[0], T(b, "mul", {a[1], T(b, "log", {T(b, "add", {a[0], a[5]})})})});
                   return reduce_loss(b, l, a[7], "ltorch.poisson_nll_loss");
                 });
}

// ---- matrix products ----

void register_products() {
  def_decomposed("mv", 0, {kInput, req("vec")}, [](Builder& b, const Args& a) {
    if (b.meta(a[0]).ndim() != 2 || b.meta(a[1]).ndim() != 1) fail("ltorch.mv", "expected a matrix and a vector");
    return b.prim("matmul", {a[0], a[1]});
  });
  def_decomposed("dot", 0, {kInput, req("tensor")}, [](Builder& b, const Args& a) {
    if (b.meta(a[0]).ndim() != 1 || b.meta(a[1]).ndim() != 1) fail("ltorch.dot", "1D tensors expected");
    if (b.meta(a[0]).dtype != b.meta(a[1]).dtype) fail("ltorch.dot", "expected both vectors to have same dtype");
    require_same_shape("ltorch.dot", b.meta(a[0]).shape, b.meta(a[1]).shape, "inconsistent tensor size");
    return b.prim("matmul", {a[0], a[1]});
  });
  def_decomposed("outer", 0, {kInput, req("vec2")}, [](Builder& b, const Args& a) {
    if (b.meta(a[0]).ndim() != 1 || b.meta(a[1]).ndim() != 1) fail("ltorch.outer", "1D tensors expected");
    return T(b, "mul", {b.torch("unsqueeze", {a[0], Int(1)}), a[1]});
  });
  // ATen casts alpha and beta to the tensors' dtype: an integer tensor truncates them, a bool one tests
  // them, a float16/bfloat16 one rounds them (to nearest even).
  auto scalar_as = [](DType d, const Value& s) {
    if (d == DType::Bool) return Value(s.as_double() != 0.0);
    if (!ir::is_floating(d) && !ir::is_complex(d)) return truncated_int("ltorch.addmm", "alpha", s);  // checked before
    if (d == DType::Float16) return Value(static_cast<double>(static_cast<_Float16>(s.as_double())));
    if (d == DType::BFloat16) {
      float f = static_cast<float>(s.as_double());
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000u;
      std::memcpy(&f, &bits, 4);
      return Value(static_cast<double>(f));
    }
    return s;
  };
  // beta * input + alpha * (m1 @ m2); beta == 0 ignores input (NaNs included), like torch.
  auto addmm_like = [scalar_as](const char* name, const char* product, int64_t rank1, int64_t rank2, bool batch_sum) {
    std::string n = name, p = product;
    const char* first = rank2 == 1 ? "mat" : rank1 == 2 ? "mat1" : "batch1";
    const char* second = rank2 == 1 ? "vec" : rank1 == 2 ? "mat2" : "batch2";
    def_decomposed(name, ir::kFreshOutput | ir::kJoinsEveryArgument,
                   {kInput, req(first), req(second), opt("beta", Int(1)), opt("alpha", Int(1))},
                   [n, p, rank1, rank2, batch_sum, scalar_as](Builder& b, const Args& a) {
                     const TensorMeta& m1 = tensor(b, "ltorch." + n, a[1]);
                     const TensorMeta& m2 = tensor(b, "ltorch." + n, a[2]);
                     if (m1.ndim() != rank1 || m2.ndim() != rank2) fail("ltorch." + n, "unexpected operand ranks");
                     if (m1.dtype != m2.dtype || m1.dtype != b.meta(a[0]).dtype) fail("ltorch." + n, "expected one dtype");
                     require_convertible(b, "ltorch." + n, "beta", a[3], opmath(m1.dtype));
                     require_convertible(b, "ltorch." + n, "alpha", a[4], opmath(m1.dtype));
                     const Value alpha = scalar_as(m1.dtype, a[4]), beta = scalar_as(m1.dtype, a[3]);
                     Value prod = b.prim("matmul", {a[1], a[2]});
                     if (batch_sum) prod = b.torch("sum", {prod, Value::ints({0}), Value(false), Value(m1.dtype)});
                     if (!(alpha == Int(1))) prod = T(b, "mul", {prod, alpha});
                     const Shape shape = b.meta(prod).shape;
                     if (broadcast_shapes("ltorch." + n, b.meta(a[0]).shape, shape) != shape)
                       fail("ltorch." + n, "input cannot be broadcast to the product's shape");
                     if (beta.as_double() == 0.0) {
                       DType d = b.meta(a[0]).dtype;
                       return ir::is_floating(d) || d == b.meta(prod).dtype ? T(b, "add", {prod, Int(0)}) : prod;
                     }
                     Value in = a[0];
                     if (!(beta == Int(1))) in = T(b, "mul", {in, beta});
                     return T(b, "add", {in, prod});
                   });
  };
  addmm_like("addmm", "mm", 2, 2, false);
  addmm_like("baddbmm", "bmm", 3, 3, false);
  addmm_like("addbmm", "bmm", 3, 3, true);
  addmm_like("addmv", "mv", 2, 1, false);
  def_decomposed("addr", ir::kJoinsEveryArgument,
                 {kInput, req("vec1"), req("vec2"), opt("beta", Int(1)), opt("alpha", Int(1))},
                 [scalar_as](Builder& b, const Args& a) {
                   // beta * input + (alpha * vec1) outer vec2, each op in the dtype, in ATen's kernel's order.
                   const DType d = result_type(b, {a[1], a[2]});
                   require_convertible(b, "ltorch.addr", "beta", a[3], opmath(d));
                   require_convertible(b, "ltorch.addr", "alpha", a[4], opmath(d));
                   const Value alpha = scalar_as(d, a[4]), beta = scalar_as(d, a[3]);
                   Value v1 = alpha == Int(1) || alpha == Value(true) ? a[1] : T(b, "mul", {a[1], alpha});
                   Value prod = b.torch("outer", {v1, a[2]});
                   if (beta.as_double() == 0.0) return expand_to(b, T(b, "mul", {prod, scalar_as(d, Int(1))}), b.meta(prod).shape);
                   Value in = a[0];
                   if (!(beta == Int(1)) && !(beta == Value(true))) in = T(b, "mul", {in, beta});
                   return T(b, "add", {in, prod});
                 });
}

// ---- padding and shuffles ----

void register_misc() {
  def_meta("pad", 0, {kInput, req("pad"), opt("mode", Value(ir::Str{"constant"})), opt("value", Value())},
           [](Builder& b, const Args& a) {
             TensorMeta m = tensor(b, "ltorch.pad", a[0]);
             std::vector<int64_t> pad = a[1].as_ints();
             if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size() / 2) > m.ndim())
               fail("ltorch.pad", "padding length must be even and at most twice the rank");
             if (a[2].as_str() != "constant") throw NotNative("non-constant padding modes");
             for (size_t i = 0; i < pad.size() / 2; ++i) {
               int64_t d = m.ndim() - 1 - static_cast<int64_t>(i);
               m.shape[d] += pad[2 * i] + pad[2 * i + 1];
               if (m.shape[d] < 0) fail("ltorch.pad", "resulting padded size is negative");
             }
             return out_tensor(b, m);
           });
  // Both are reshape (..., c, a, b, d, e) -> permute -> reshape over the last three dims.
  auto shuffle = [](Builder& b, const Value& in, const Shape& lead, const Shape& split,
                    const std::vector<int64_t>& order, const Shape& merged) {
    Shape s1 = lead, s2 = lead;
    std::vector<int64_t> perm;
    s1.insert(s1.end(), split.begin(), split.end());
    int64_t k = static_cast<int64_t>(lead.size());
    for (int64_t i = 0; i < k; ++i) perm.push_back(i);
    for (int64_t o : order) perm.push_back(k + o);
    s2.insert(s2.end(), merged.begin(), merged.end());
    Value x = b.torch("permute", {b.torch("reshape", {in, Value::dims(s1)}), Value::ints(perm)});
    return b.torch("reshape", {x, Value::dims(s2)});
  };
  def_decomposed("pixel_shuffle", ir::kShape, {kInput, req("upscale_factor")}, [shuffle](Builder& b, const Args& a) {
    const TensorMeta m = tensor(b, "ltorch.pixel_shuffle", a[0]);
    const int64_t r = a[1].as_int(), n = m.ndim();
    const std::string op = "ltorch.pixel_shuffle";
    if (n < 3 || r <= 0 || m.shape[n - 3].divide(r * r, op) * (r * r) != m.shape[n - 3])
      fail(op, "invalid input or upscale_factor");
    const Shape lead(m.shape.begin(), m.shape.end() - 3);
    const Dim c = m.shape[n - 3].divide(r * r, op), h = m.shape[n - 2], w = m.shape[n - 1];
    return shuffle(b, a[0], lead, {c, r, r, h, w}, {0, 3, 1, 4, 2}, {c, h * r, w * r});
  });
  def_decomposed("pixel_unshuffle", ir::kShape, {kInput, req("downscale_factor")}, [shuffle](Builder& b, const Args& a) {
    const TensorMeta m = tensor(b, "ltorch.pixel_unshuffle", a[0]);
    const int64_t r = a[1].as_int(), n = m.ndim();
    const std::string op = "ltorch.pixel_unshuffle";
    if (n < 3 || r <= 0 || m.shape[n - 2].divide(r, op) * r != m.shape[n - 2] ||
        m.shape[n - 1].divide(r, op) * r != m.shape[n - 1])
      fail(op, "invalid input or downscale_factor");
    const Shape lead(m.shape.begin(), m.shape.end() - 3);
    const Dim c = m.shape[n - 3], h = m.shape[n - 2].divide(r, op), w = m.shape[n - 1].divide(r, op);
    return shuffle(b, a[0], lead, {c, h, r, w, r}, {0, 2, 4, 1, 3}, {c * r * r, h, w});
  });
  def_decomposed("softmin", ir::kReduction, {kInput, req("dim"), opt("dtype", Value())}, [](Builder& b, const Args& a) {
    Value x = a[2].is_none() ? a[0] : cast(b, a[0], a[2].as_dtype());
    return b.torch("softmax", {T(b, "neg", {x}), a[1]});
  });
}

}  // namespace

void register_torch_conv_pool_loss() {
  for (int64_t nd = 1; nd <= 3; ++nd) {
    std::string n = std::to_string(nd);
    def_meta("conv" + n + "d", 0,
             {kInput, req("weight"), opt("bias", Value()), opt("stride", Int(1)), opt("padding", Int(0)),
              opt("dilation", Int(1)), opt("groups", Int(1))},
             [nd](Builder& b, const Args& a) { return conv(b, a, nd, false); });
    def_meta("conv_transpose" + n + "d", 0,
             {kInput, req("weight"), opt("bias", Value()), opt("stride", Int(1)), opt("padding", Int(0)),
              opt("output_padding", Int(0)), opt("groups", Int(1)), opt("dilation", Int(1))},
             [nd](Builder& b, const Args& a) { return conv(b, a, nd, true); });
    def_meta("max_pool" + n + "d", 0,
             {kInput, req("kernel_size"), opt("stride", Value()), opt("padding", Int(0)), opt("dilation", Int(1)),
              opt("ceil_mode", Value(false)), opt("return_indices", Value(false))},
             [nd](Builder& b, const Args& a) { return pool(b, a, nd, true); });
    def_meta("avg_pool" + n + "d", 0,
             {kInput, req("kernel_size"), opt("stride", Value()), opt("padding", Int(0)), opt("ceil_mode", Value(false)),
              opt("count_include_pad", Value(true)), opt("divisor_override", Value())},
             [nd](Builder& b, const Args& a) {
               if (nd == 1 && !a[6].is_none()) fail("ltorch.avg_pool1d", "no divisor_override");
               return pool(b, a, nd, false);
             });
    def_meta("adaptive_avg_pool" + n + "d", 0, {kInput, req("output_size")},
             [nd](Builder& b, const Args& a) { return adaptive_pool(b, a, nd, false); });
    def_meta("adaptive_max_pool" + n + "d", 0, {kInput, req("output_size"), opt("return_indices", Value(false))},
             [nd](Builder& b, const Args& a) { return adaptive_pool(b, a, nd, true); });
  }
  def_decomposed("batch_norm", ir::kReduction,
                 {kInput, req("running_mean"), req("running_var"), opt("weight", Value()), opt("bias", Value()),
                  opt("training", Value(false)), opt("momentum", F(0.1)), opt("eps", F(1e-5))},
                 batch_norm);
  def_decomposed("group_norm", ir::kReduction,
                 {kInput, req("num_groups"), opt("weight", Value()), opt("bias", Value()), opt("eps", F(1e-5))}, group_norm);
  def_decomposed("normalize", ir::kReduction, {kInput, opt("p", F(2.0)), opt("dim", Int(1)), opt("eps", F(1e-12))},
                 normalize);
  register_losses();
  register_products();
  register_misc();
}

}  // namespace thunder::ops
