// VJP rules of the prims (see vjp.h). Each rule is the derivative PyTorch's autograd uses for the same
// operation (tools/autograd/derivatives.yaml states them), written over prims: the operands of an elementwise
// prim have the output's shape and dtype, so most rules are elementwise prims on the gradient.
#include "ops/vjp.h"

#include "ops/torch_common.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace thunder::ops {
namespace {

using ir::ProxyRef;
using Grads = std::vector<Value>;

constexpr double kPi = 3.14159265358979323846;

struct Ctx {
  Builder& b;
  const ir::BoundSymbol& fwd;
  Value g;

  const Value& arg(size_t i) const { return fwd.args[i]; }
  const Value& out() const { return fwd.output; }
  bool tensor(const Value& v) const { return b.is_tensor(v); }
  const TensorMeta& meta(const Value& v) const { return b.meta(v); }
  // An argument that takes a gradient: a floating (or complex) tensor.
  bool differentiable(size_t i) const {
    return i < fwd.args.size() && tensor(arg(i)) && (ir::is_floating(meta(arg(i)).dtype) || ir::is_complex(meta(arg(i)).dtype));
  }

  Value prim(const char* name, Args args) { return b.prim(name, std::move(args)); }
  Value mul(const Value& x, const Value& y) { return prim("mul", {x, y}); }
  Value div(const Value& x, const Value& y) { return prim("div", {x, y}); }
  Value add(const Value& x, const Value& y) { return prim("add", {x, y}); }
  Value sub(const Value& x, const Value& y) { return prim("sub", {x, y}); }
  Value neg(const Value& x) { return prim("neg", {x}); }
  Value un(const char* name, const Value& x) { return prim(name, {x}); }
  Value where(const Value& pred, const Value& x, const Value& y) { return prim("where", {pred, x, y}); }
  Value zeros(const TensorMeta& m) { return ops::zeros(b, m); }
  Value zeros_like(const Value& v) { return zeros(meta(v)); }
  Value convert(const Value& v, DType d) { return tensor(v) && meta(v).dtype != d ? prim("convert_element_type", {v, Value(d)}) : v; }
  // g broadcast back over the dims a reduction of `full` removed (`dims`, canonical).
  Value unreduce(const Value& v, const Shape& full, const std::vector<int64_t>& dims) {
    std::vector<bool> reduced(full.size(), false);
    for (int64_t d : dims) reduced[static_cast<size_t>(d)] = true;
    std::vector<int64_t> kept;
    for (size_t i = 0; i < full.size(); ++i)
      if (!reduced[i]) kept.push_back(static_cast<int64_t>(i));
    return prim("broadcast_in_dim", {v, Value::dims(full), Value::ints(kept)});
  }
  // A gradient with the shape `shape` of the argument it flows to: summed over the dims it was broadcast
  // along (a 0-dim CPU tensor is a scalar to an elementwise prim on another device).
  Value sum_to(const Value& v, const Shape& shape) {
    if (!tensor(v) || meta(v).shape == shape) return v;
    const Shape& from = meta(v).shape;
    const size_t lead = from.size() - shape.size();
    std::vector<int64_t> dims;
    for (size_t i = 0; i < from.size(); ++i)
      if (i < lead || (shape[i - lead] == 1 && from[i] != 1)) dims.push_back(static_cast<int64_t>(i));
    Value s = dims.empty() ? v : prim("sum", {v, Value::ints(dims)});
    return meta(s).shape == shape ? s : prim("reshape", {s, Value::dims(shape)});
  }
};

using Rule = std::function<Grads(Ctx&)>;

// ---- elementwise ----

// A unary prim whose derivative is g * f(x, out).
Rule unary(std::function<Value(Ctx&, const Value& x, const Value& out)> dfdx) {
  return [dfdx](Ctx& c) { return Grads{c.mul(c.g, dfdx(c, c.arg(0), c.out()))}; };
}

Rule zero_grad() {
  return [](Ctx& c) { return Grads{c.differentiable(0) ? c.zeros_like(c.arg(0)) : Value()}; };
}

// 1 / sqrt(v)
Value rsqrt(Ctx& c, const Value& v) { return c.un("rsqrt", v); }

std::unordered_map<std::string, Rule> unary_rules() {
  std::unordered_map<std::string, Rule> r;
  r["neg"] = [](Ctx& c) { return Grads{c.neg(c.g)}; };
  r["exp"] = unary([](Ctx&, const Value&, const Value& out) { return out; });
  r["exp2"] = unary([](Ctx& c, const Value&, const Value& out) { return c.mul(out, std::log(2.0)); });
  r["expm1"] = unary([](Ctx& c, const Value&, const Value& out) { return c.add(out, 1.0); });
  r["log"] = [](Ctx& c) { return Grads{c.div(c.g, c.arg(0))}; };
  r["log2"] = [](Ctx& c) { return Grads{c.div(c.g, c.mul(c.arg(0), std::log(2.0)))}; };
  r["log10"] = [](Ctx& c) { return Grads{c.div(c.g, c.mul(c.arg(0), std::log(10.0)))}; };
  r["log1p"] = [](Ctx& c) { return Grads{c.div(c.g, c.add(c.arg(0), 1.0))}; };
  r["sqrt"] = [](Ctx& c) { return Grads{c.div(c.g, c.mul(c.out(), 2.0))}; };
  r["rsqrt"] = unary([](Ctx& c, const Value&, const Value& out) { return c.mul(c.mul(c.mul(out, out), out), -0.5); });
  r["reciprocal"] = unary([](Ctx& c, const Value&, const Value& out) { return c.neg(c.mul(out, out)); });
  r["sin"] = unary([](Ctx& c, const Value& x, const Value&) { return c.un("cos", x); });
  r["cos"] = unary([](Ctx& c, const Value& x, const Value&) { return c.neg(c.un("sin", x)); });
  r["tan"] = unary([](Ctx& c, const Value&, const Value& out) { return c.add(c.mul(out, out), 1.0); });
  r["asin"] = unary([](Ctx& c, const Value& x, const Value&) { return rsqrt(c, c.sub(1.0, c.mul(x, x))); });
  r["acos"] = unary([](Ctx& c, const Value& x, const Value&) { return c.neg(rsqrt(c, c.sub(1.0, c.mul(x, x)))); });
  r["atan"] = [](Ctx& c) { return Grads{c.div(c.g, c.add(c.mul(c.arg(0), c.arg(0)), 1.0))}; };
  r["sinh"] = unary([](Ctx& c, const Value& x, const Value&) { return c.un("cosh", x); });
  r["cosh"] = unary([](Ctx& c, const Value& x, const Value&) { return c.un("sinh", x); });
  r["tanh"] = unary([](Ctx& c, const Value&, const Value& out) { return c.sub(1.0, c.mul(out, out)); });
  r["asinh"] = unary([](Ctx& c, const Value& x, const Value&) { return rsqrt(c, c.add(c.mul(x, x), 1.0)); });
  r["acosh"] = unary([](Ctx& c, const Value& x, const Value&) { return rsqrt(c, c.sub(c.mul(x, x), 1.0)); });
  r["atanh"] = [](Ctx& c) { return Grads{c.div(c.g, c.sub(1.0, c.mul(c.arg(0), c.arg(0))))}; };
  r["sigmoid"] = unary([](Ctx& c, const Value&, const Value& out) { return c.mul(out, c.sub(1.0, out)); });
  r["erf"] = unary([](Ctx& c, const Value& x, const Value&) {
    return c.mul(c.un("exp", c.neg(c.mul(x, x))), 2.0 / std::sqrt(kPi));
  });
  r["erfc"] = unary([](Ctx& c, const Value& x, const Value&) {
    return c.mul(c.un("exp", c.neg(c.mul(x, x))), -2.0 / std::sqrt(kPi));
  });
  r["erfinv"] = unary([](Ctx& c, const Value&, const Value& out) {
    return c.mul(c.un("exp", c.mul(out, out)), std::sqrt(kPi) / 2.0);
  });
  r["lgamma"] = unary([](Ctx& c, const Value& x, const Value&) { return c.un("digamma", x); });
  // abs of a real tensor: sign(x) (0 at 0, as torch); a complex one is differentiated by torch (autodiff.cc).
  r["abs"] = [](Ctx& c) -> Grads { return {c.mul(c.g, c.un("sign", c.arg(0)))}; };
  for (const char* n : {"floor", "ceil", "round", "trunc", "sign"}) r[n] = zero_grad();
  r["alias"] = [](Ctx& c) { return Grads{c.g}; };
  r["check_in_range"] = [](Ctx& c) { return Grads{c.g, Value(), Value(), Value()}; };
  return r;
}

// The gradient of operand i of an elementwise prim, summed back to its shape; None for numbers and
// operands that take none.
Value operand_grad(Ctx& c, size_t i, const Value& v) {
  if (!c.differentiable(i) || v.is_none()) return Value();
  return c.sum_to(c.convert(v, c.meta(c.arg(i)).dtype), c.meta(c.arg(i)).shape);
}

Rule binary(std::function<std::pair<Value, Value>(Ctx&, const Value& a, const Value& b)> grads) {
  return [grads](Ctx& c) {
    auto [ga, gb] = grads(c, c.arg(0), c.arg(1));
    return Grads{operand_grad(c, 0, ga), operand_grad(c, 1, gb)};
  };
}

std::unordered_map<std::string, Rule> binary_rules() {
  std::unordered_map<std::string, Rule> r;
  // Each computes only the gradients asked for: differentiable(i) is false for numbers and integer tensors.
  r["add"] = binary([](Ctx& c, const Value&, const Value&) { return std::pair{c.g, c.g}; });
  r["sub"] = binary([](Ctx& c, const Value&, const Value&) {
    return std::pair{c.g, c.differentiable(1) ? c.neg(c.g) : Value()};
  });
  r["mul"] = binary([](Ctx& c, const Value& a, const Value& b) {
    return std::pair{c.differentiable(0) ? c.mul(c.g, b) : Value(), c.differentiable(1) ? c.mul(c.g, a) : Value()};
  });
  // div: d/db = -g (a / b) / b, from the operands as torch's div_tensor_other_backward computes it (reading the
  // quotient, an output the caller may write in place, made the backward raise where eager's does not).
  r["div"] = binary([](Ctx& c, const Value& a, const Value& b) {
    Value ga = c.differentiable(0) ? c.div(c.g, b) : Value();
    Value gb = c.differentiable(1) ? c.mul(c.neg(c.g), c.div(c.div(a, b), b)) : Value();
    return std::pair{ga, gb};
  });
  // pow: d/da = b * a^(b-1) (0 where b == 0), d/db = out * log(a) (0 where a == 0 and b >= 0), as torch.
  r["pow"] = binary([](Ctx& c, const Value& a, const Value& b) {
    Value ga, gb;
    if (c.differentiable(0)) {
      Value b_minus_1 = b.is_number() ? Value(b.as_double() - 1.0) : c.sub(b, 1.0);
      Value d = c.mul(b, c.prim("pow", {a, b_minus_1}));
      if (b.is_proxy()) d = c.where(c.prim("eq", {b, 0.0}), 0.0, d);  // a tensor, or a number read at run time
      else if (b.is_number() && b.as_double() == 0.0) d = c.zeros_like(a);
      ga = c.mul(c.g, d);
    }
    if (c.differentiable(1)) {
      Value d = c.mul(c.out(), a.is_number() ? Value(std::log(a.as_double())) : c.un("log", a));
      if (a.is_proxy()) d = c.where(c.prim("logical_and", {c.prim("eq", {a, 0.0}), c.prim("ge", {b, 0.0})}), 0.0, d);
      else if (a.is_number() && a.as_double() == 0.0) d = c.where(c.prim("ge", {b, 0.0}), 0.0, d);
      gb = c.mul(c.g, d);
    }
    return std::pair{ga, gb};
  });
  // maximum / minimum: the gradient goes to the larger (smaller) operand, half to each where they are equal.
  for (const char* n : {"maximum", "minimum"}) {
    const bool max = std::string(n) == "maximum";
    r[n] = binary([max](Ctx& c, const Value& a, const Value& b) {
      // Each operand takes g unless the other wins; ties share it. A NaN, which neither wins nor ties, takes it
      // whole on both sides, as torch's masked_fill of the loser.
      Value half = c.mul(c.g, 0.5);
      Value equal = c.prim("eq", {a, b});
      Value a_wins = c.prim(max ? "gt" : "lt", {a, b}), b_wins = c.prim(max ? "lt" : "gt", {a, b});
      Value ga = c.where(equal, half, c.where(b_wins, 0.0, c.g));
      Value gb = c.where(equal, half, c.where(a_wins, 0.0, c.g));
      return std::pair{ga, gb};
    });
  }
  // atan2: g * b / (a² + b²) and -g * a / (a² + b²), through a reciprocal that is 0 where a² + b² is 0 (at the
  // origin, or where the squares underflow), as torch's derivative formula computes it.
  r["atan2"] = binary([](Ctx& c, const Value& a, const Value& b) {
    Value denom = c.add(c.mul(a, a), c.mul(b, b));
    Value recip = c.where(c.prim("eq", {denom, 0.0}), 0.0, c.un("reciprocal", denom));
    return std::pair{c.mul(c.mul(c.g, b), recip), c.mul(c.mul(c.g, c.neg(a)), recip)};
  });
  // remainder(a, b) = a - floor(a / b) * b; fmod(a, b) = a - trunc(a / b) * b.
  for (const char* n : {"remainder", "fmod"}) {
    const char* rounding = std::string(n) == "remainder" ? "floor" : "trunc";
    r[n] = binary([rounding](Ctx& c, const Value& a, const Value& b) {
      Value gb = c.differentiable(1) ? c.neg(c.mul(c.g, c.un(rounding, c.div(a, b)))) : Value();
      return std::pair{c.g, gb};
    });
  }
  // copysign: the gradient of a is out / a (0 where a is 0); b takes none.
  r["copysign"] = binary([](Ctx& c, const Value& a, const Value&) {
    Value ratio = c.where(c.prim("eq", {a, 0.0}), 0.0, c.div(c.out(), a));
    return std::pair{c.mul(c.g, ratio), c.differentiable(1) ? c.zeros_like(c.arg(1)) : Value()};
  });
  r["floor_divide"] = binary([](Ctx& c, const Value& a, const Value& b) {
    return std::pair{c.differentiable(0) ? c.zeros_like(a) : Value(), c.differentiable(1) ? c.zeros_like(b) : Value()};
  });
  r["where"] = [](Ctx& c) {
    Value ga = c.differentiable(1) ? c.where(c.arg(0), c.g, 0.0) : Value();
    Value gb = c.differentiable(2) ? c.where(c.arg(0), 0.0, c.g) : Value();
    return Grads{Value(), operand_grad(c, 1, ga), operand_grad(c, 2, gb)};
  };
  r["convert_element_type"] = [](Ctx& c) {
    return Grads{c.differentiable(0) ? c.convert(c.g, c.meta(c.arg(0)).dtype) : Value(), Value()};
  };
  return r;
}

// ---- shapes ----

std::vector<int64_t> canonical_dims(const Value& dims, int64_t ndim) {
  std::vector<int64_t> out;
  for (int64_t d : dims.as_ints()) out.push_back(d < 0 ? d + ndim : d);
  return out;
}

std::unordered_map<std::string, Rule> shape_rules() {
  std::unordered_map<std::string, Rule> r;
  r["reshape"] = [](Ctx& c) { return Grads{c.prim("reshape", {c.g, Value::dims(c.meta(c.arg(0)).shape)}), Value()}; };
  r["squeeze"] = [](Ctx& c) { return Grads{c.prim("reshape", {c.g, Value::dims(c.meta(c.arg(0)).shape)}), Value()}; };
  r["transpose"] = [](Ctx& c) {
    std::vector<int64_t> perm = c.arg(1).as_ints(), inverse(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    return Grads{c.prim("transpose", {c.g, Value::ints(inverse)}), Value()};
  };
  r["flip"] = [](Ctx& c) { return Grads{c.prim("flip", {c.g, c.arg(1)}), Value()}; };
  r["clone"] = [](Ctx& c) { return Grads{c.g}; };  // a copy: the gradient passes through
  // broadcast_in_dim: summed over the new dims and the size-1 dims it expanded.
  r["broadcast_in_dim"] = [](Ctx& c) {
    const Shape& in = c.meta(c.arg(0)).shape;
    const Shape out = c.arg(1).as_dims();
    const std::vector<int64_t> bdims = c.arg(2).as_ints();
    std::vector<bool> kept(out.size(), false);
    for (size_t i = 0; i < bdims.size(); ++i)
      kept[static_cast<size_t>(bdims[i])] = in[i] == out[static_cast<size_t>(bdims[i])];
    std::vector<int64_t> dims;
    for (size_t i = 0; i < out.size(); ++i)
      if (!kept[i]) dims.push_back(static_cast<int64_t>(i));
    Value s = dims.empty() ? c.g : c.prim("sum", {c.g, Value::ints(dims)});
    if (c.meta(s).shape != in) s = c.prim("reshape", {s, Value::dims(in)});
    return Grads{s, Value(), Value()};
  };
  r["slice"] = [](Ctx& c) {
    Value step = c.fwd.args.size() > 3 ? c.arg(3) : Value();
    return Grads{c.prim("slice_update", {c.zeros_like(c.arg(0)), c.g, c.arg(1), c.arg(2), step}), Value(), Value(),
                 Value()};
  };
  r["slice_update"] = [](Ctx& c) {
    const Value& step = c.arg(4);
    Value ga = c.differentiable(0) ? c.prim("slice_update", {c.g, c.zeros_like(c.arg(1)), c.arg(2), c.arg(3), step}) : Value();
    Value gs = c.differentiable(1) ? c.prim("slice", {c.g, c.arg(2), c.arg(3), step}) : Value();
    return Grads{ga, gs, Value(), Value(), Value()};
  };
  r["cat"] = [](Ctx& c) {
    const std::vector<Value>& parts = c.arg(0).items();
    const Shape& shape = c.meta(c.g).shape;
    const int64_t dim = canonical_dims(c.arg(1), static_cast<int64_t>(shape.size()))[0];
    std::vector<Value> grads;
    Dim offset = 0;
    for (const Value& p : parts) {
      Shape start(shape.size(), 0), stop = shape;
      const Dim n = c.meta(p).shape[static_cast<size_t>(dim)];
      start[static_cast<size_t>(dim)] = offset;
      stop[static_cast<size_t>(dim)] = offset + n;
      offset += n;
      const bool floating = ir::is_floating(c.meta(p).dtype) || ir::is_complex(c.meta(p).dtype);
      grads.push_back(floating ? c.prim("slice", {c.g, Value::dims(start), Value::dims(stop)}) : Value());
    }
    return Grads{Value::list(std::move(grads)), Value()};
  };
  r["take"] = [](Ctx& c) {
    const TensorMeta& m = c.meta(c.arg(0));
    Value index = c.arg(1);
    if (c.meta(index).ndim() == 0) index = c.prim("reshape", {index, Value::ints({1})});
    const int64_t dim = m.ndim() == 0 ? 0 : canonical_dims(c.arg(2), m.ndim())[0];
    return Grads{c.b.torch("index_add", {c.zeros_like(c.arg(0)), Value(dim), index, c.g}), Value(), Value()};
  };
  r["take_along_axis"] = [](Ctx& c) {
    return Grads{c.prim("scatter_add", {c.zeros_like(c.arg(0)), c.arg(2), c.arg(1), c.g}), Value(), Value()};
  };
  return r;
}

// ---- reductions, matmul ----

// The gradient of var(a, dims, correction) -- a = fwd.arg(0) -- for g over the reduced shape:
// g * 2 (a - mean) / (N - correction).
Value var_grad(Ctx& c, const Value& g, const Value& dims_arg, const Value& correction) {
  const TensorMeta& m = c.meta(c.arg(0));
  const std::vector<int64_t> dims = canonical_dims(dims_arg, m.ndim());
  Dim size = 1;
  for (int64_t d : dims) size *= m.shape[static_cast<size_t>(d)];
  Value mean = c.div(c.prim("sum", {c.arg(0), Value::ints(dims)}), count_divisor(size));
  Value centered = c.sub(c.arg(0), c.unreduce(mean, m.shape, dims));
  // N - correction: a symbolic size less an integral correction stays a size (a kernel argument when bound).
  Value denom;
  if (correction.is_number() && !size.is_constant() && correction.as_double() == std::floor(correction.as_double())) {
    denom = Value(size - static_cast<int64_t>(correction.as_double()));
  } else {
    const auto n = static_cast<double>(size.value("VJP of var"));
    denom = correction.is_number() ? Value(n - correction.as_double()) : c.sub(n, correction);
  }
  Value scale = c.div(c.mul(g, 2.0), denom);
  return c.mul(c.unreduce(scale, m.shape, dims), centered);
}

// A reduction's result (or its gradient), keepdim or not, as the shape without the reduced dims.
Value without_reduced(Ctx& c, const Value& v, const std::vector<int64_t>& dims) {
  Shape shape;
  const Shape& full = c.meta(c.arg(0)).shape;
  for (size_t i = 0; i < full.size(); ++i)
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(i)) == dims.end()) shape.push_back(full[i]);
  return c.meta(v).shape == shape ? v : c.prim("reshape", {v, Value::dims(shape)});
}

// std = sqrt(var): the variance takes g / (2 std), 0 where std is 0 (a constant slice), as torch's std_backward;
// the chain rule through sqrt gave inf * 0 = NaN there. std_mean adds the mean's gradient.
Grads std_grad(Ctx& c, const char* op, const Value& g_std, const Value& std, const Value& g_mean) {
  if (!c.differentiable(0)) return {};
  auto [dims, correction] = variance_args(c.b, c.fwd.args, op);
  Value gx;
  if (!g_std.is_none()) {
    Value s = without_reduced(c, std, dims), g = without_reduced(c, g_std, dims);
    Value gv = c.where(c.prim("eq", {s, 0.0}), 0.0, c.div(g, c.mul(s, 2.0)));
    gx = var_grad(c, gv, Value::ints(dims), Value(correction));
  }
  if (!g_mean.is_none()) {
    const TensorMeta& m = c.meta(c.arg(0));
    Dim size = 1;
    for (int64_t d : dims) size *= m.shape[static_cast<size_t>(d)];
    Value gm = c.unreduce(c.div(without_reduced(c, g_mean, dims), count_divisor(size)), m.shape, dims);
    gx = gx.is_none() ? gm : c.add(gx, gm);
  }
  return {gx};
}

std::unordered_map<std::string, Rule> reduction_rules() {
  std::unordered_map<std::string, Rule> r;
  r["sum"] = [](Ctx& c) {
    const TensorMeta& m = c.meta(c.arg(0));
    return Grads{c.unreduce(c.g, m.shape, canonical_dims(c.arg(1), m.ndim())), Value()};
  };
  // prod: out / a, computed without dividing by zero: where a is 0, the product of the other elements
  // (non-zero only if that is the only zero of its slice).
  r["prod"] = [](Ctx& c) {
    const TensorMeta& m = c.meta(c.arg(0));
    const std::vector<int64_t> dims = canonical_dims(c.arg(1), m.ndim());
    Value zero = c.prim("eq", {c.arg(0), 0.0});
    Value zeros = c.prim("sum", {c.convert(zero, m.dtype), Value::ints(dims)});
    Value others = c.prim("prod", {c.where(zero, 1.0, c.arg(0)), Value::ints(dims)});
    Value lone_zero = c.where(c.prim("eq", {zeros, 1.0}), others, 0.0);
    Value d = c.where(zero, c.unreduce(lone_zero, m.shape, dims), c.div(c.unreduce(c.out(), m.shape, dims), c.arg(0)));
    return Grads{c.mul(c.unreduce(c.g, m.shape, dims), d), Value()};
  };
  // amax / amin prims: the gradient is shared evenly among the elements equal to the result -- the NaNs where it
  // is NaN -- as torch's max()/min() (evenly_distribute_backward). The torch ops amax / amin have a rule of their own.
  for (const char* n : {"amax", "amin"}) {
    r[n] = [](Ctx& c) {
      const TensorMeta& m = c.meta(c.arg(0));
      const std::vector<int64_t> dims = canonical_dims(c.arg(1), m.ndim());
      Value result = c.unreduce(c.out(), m.shape, dims);
      Value equal = c.prim("eq", {c.arg(0), result});
      if (ir::is_floating(m.dtype))
        equal = c.prim("logical_or", {equal, c.prim("logical_and", {c.un("isnan", c.arg(0)), c.un("isnan", result)})});
      Value hit = c.convert(equal, m.dtype);
      Value count = c.prim("sum", {hit, Value::ints(dims)});
      return Grads{c.mul(c.unreduce(c.div(c.g, count), m.shape, dims), hit), Value()};
    };
  }
  r["var"] = [](Ctx& c) { return Grads{var_grad(c, c.g, c.arg(1), c.arg(2)), Value(), Value()}; };
  // matmul with torch's promotion of vectors to matrices and broadcast batch dims.
  r["matmul"] = [](Ctx& c) {
    const Value &a = c.arg(0), &b = c.arg(1);
    const Shape as = c.meta(a).shape, bs = c.meta(b).shape;
    Value a2 = as.size() == 1 ? c.prim("reshape", {a, Value::dims({1, as[0]})}) : a;
    Value b2 = bs.size() == 1 ? c.prim("reshape", {b, Value::dims({bs[0], 1})}) : b;
    Shape gs = c.meta(c.g).shape;
    if (as.size() == 1) gs.insert(gs.end() - (bs.size() == 1 ? 0 : 1), 1);
    if (bs.size() == 1) gs.push_back(1);
    Value g2 = gs == c.meta(c.g).shape ? c.g : c.prim("reshape", {c.g, Value::dims(gs)});
    auto mT = [&](const Value& v) {
      std::vector<int64_t> perm(c.meta(v).shape.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      return c.prim("transpose", {v, Value::ints(perm)});
    };
    auto back = [&](const Value& v, const Value& like2, const Shape& shape) {
      Value s = c.sum_to(v, c.meta(like2).shape);
      return c.meta(s).shape == shape ? s : c.prim("reshape", {s, Value::dims(shape)});
    };
    Value ga = c.differentiable(0) ? back(c.prim("matmul", {g2, mT(b2)}), a2, as) : Value();
    Value gb;
    if (c.differentiable(1) && bs.size() == 2 && as.size() >= 3) {
      // A weight applied to a batch of rows (a linear layer's [8, 64, 256] @ [256, 688]): its gradient is one
      // matmul over all the rows, not a batched matmul per leading index summed afterwards (a bmm with short
      // inner dims and a pass over its [8, 256, 688] result: the Llama training step spent 80 ms per step there).
      // (The rows counted as the product of the leading sizes: numel / k would divide by zero for k = 0.)
      const Dim rows = ir::product(Shape(as.begin(), as.end() - 1));
      Value a_rows = c.prim("reshape", {a, Value::dims({rows, as.back()})});
      Value g_rows = c.prim("reshape", {g2, Value::dims({rows, bs[1]})});
      gb = c.prim("matmul", {mT(a_rows), g_rows});
    } else if (c.differentiable(1)) {
      gb = back(c.prim("matmul", {mT(a2), g2}), b2, bs);
    }
    return Grads{ga, gb};
  };
  return r;
}

// ---- torch-level ops without a decomposition ----

std::unordered_map<std::string, Rule> torch_rules() {
  std::unordered_map<std::string, Rule> r;
  // pad(x, pad) with constant padding: g padded by the negated amounts (a crop where x was padded, zeros where it was
  // cropped), as torch's constant_pad_nd backward. It reads no forward value (the generic rule saved x).
  r["pad"] = [](Ctx& c) {
    if (c.arg(2).as_str() != "constant") throw std::invalid_argument("pad other than constant has no VJP rule");
    std::vector<int64_t> negated = c.arg(1).as_ints();
    for (int64_t& p : negated) p = -p;
    return Grads{c.b.torch("pad", {c.g, Value::ints(negated)}), Value(), Value(), Value()};
  };
  // cumsum(input, dim, dtype): the gradient is the reversed cumulative sum of g.
  r["cumsum"] = [](Ctx& c) {
    const TensorMeta& m = c.meta(c.arg(0));
    if (!c.differentiable(0)) return Grads{};
    const Value dim = Value(m.ndim() == 0 ? int64_t{0} : canonical_dims(c.arg(1), m.ndim())[0]);
    if (m.ndim() == 0) return Grads{c.convert(c.g, m.dtype)};
    Value flipped = c.prim("flip", {c.g, Value::ints({dim.as_int()})});
    Value summed = c.b.torch("cumsum", {flipped, dim});
    return Grads{c.convert(c.prim("flip", {summed, Value::ints({dim.as_int()})}), m.dtype)};
  };
  // sinc: g (pi x cos(pi x) - sin(pi x)) / (pi x^2), 0 where pi x^2 is 0 (x = 0, or so small it underflows), as
  // torch's sinc_backward; the decomposition's where let the untaken sin(pi x) / (pi x) make it NaN.
  r["sinc"] = [](Ctx& c) -> Grads {
    if (!c.differentiable(0)) return {};
    const Value& x = c.arg(0);
    Value px = c.b.torch("mul", {x, kPi});
    Value pxx = c.b.torch("mul", {c.b.torch("mul", {x, x}), kPi});
    Value num = c.b.torch("sub", {c.b.torch("mul", {px, c.b.torch("cos", {px})}), c.b.torch("sin", {px})});
    Value d = c.b.torch("div", {c.b.torch("mul", {c.g, num}), pxx});
    return {c.b.torch("where", {c.b.torch("eq", {pxx, 0.0}), 0.0, d})};
  };
  r["std"] = [](Ctx& c) { return std_grad(c, "VJP of ltorch.std", c.g, c.out(), Value()); };
  r["std_mean"] = [](Ctx& c) {
    return std_grad(c, "VJP of ltorch.std_mean", c.g.items()[0], c.out().items()[0], c.g.items()[1]);
  };
  // Piecewise-linear activations: which side of a boundary takes the gradient is each op's own rule in torch
  // (their decompositions into maximum/minimum would split it in half at the boundary). Each emits ATen's backward
  // op (ops/torch_math.cc), whose torch run connects the input to a second derivative as eager's does.
  auto masked = [](Ctx& c, const Value& keep) { return c.b.torch("where", {keep, c.g, 0.0}); };
  auto cmp = [](Ctx& c, const char* op, const Value& x, const Value& y) { return c.b.torch(op, {x, y}); };
  auto both = [](Ctx& c, const Value& p, const Value& q) { return c.b.torch("logical_and", {p, q}); };
  // relu: threshold_backward of the result, as eager's: the backward reads what eager saves, the output (an input
  // written in place after the graph changes nothing).
  r["relu"] = [](Ctx& c) { return Grads{c.b.torch("threshold_backward", {c.g, c.out(), 0.0})}; };
  r["threshold"] = [](Ctx& c) -> Grads {
    if (!c.differentiable(0)) return {};
    return {c.b.torch("threshold_backward", {c.g, c.arg(0), c.arg(1)})};
  };
  for (const char* n : {"hardshrink", "softshrink"}) {
    const std::string backward = std::string(n) + "_backward";
    r[n] = [backward](Ctx& c) { return Grads{c.b.torch(backward.c_str(), {c.g, c.arg(0), c.arg(1)})}; };
  }
  r["relu6"] = [](Ctx& c) { return Grads{c.b.torch("hardtanh_backward", {c.g, c.arg(0), 0.0, 6.0})}; };
  r["hardtanh"] = [](Ctx& c) {
    return Grads{c.b.torch("hardtanh_backward", {c.g, c.arg(0), c.arg(1), c.arg(2)})};
  };
  r["hardsigmoid"] = [=](Ctx& c) {
    Value inside = both(c, cmp(c, "gt", c.arg(0), -3.0), cmp(c, "lt", c.arg(0), 3.0));
    return Grads{c.b.torch("where", {inside, c.b.torch("div", {c.g, 6.0}), 0.0})};
  };
  r["hardswish"] = [=](Ctx& c) {
    const Value& x = c.arg(0);
    Value slope = c.b.torch("add", {c.b.torch("div", {x, 3.0}), 0.5});
    Value mid = c.b.torch("where", {cmp(c, "lt", x, 3.0), c.b.torch("mul", {c.g, slope}), c.g});
    return Grads{c.b.torch("where", {cmp(c, "le", x, -3.0), 0.0, mid})};
  };
  // Activations whose parameter scales one side only: the other side's gradient is g whatever the parameter
  // (a NaN slope, softplus' beta = 0), as torch's *_backward kernels compute it; the chain rule through their
  // decompositions gave 0 * NaN there. Half-precision inputs are computed in float32, as ATen does.
  auto in_opmath = [](Ctx& c, const std::function<Value(const Value& x, const Value& g)>& rule) {
    const DType d = c.meta(c.arg(0)).dtype, math = opmath(d);
    return Grads{c.convert(rule(c.convert(c.arg(0), math), c.convert(c.g, math)), d)};
  };
  r["leaky_relu"] = [](Ctx& c) {
    return Grads{c.b.torch("leaky_relu_backward", {c.g, c.arg(0), c.arg(1), Value(false)})};
  };
  // The ELU family, as torch's elu_backward: g * scale for x > 0, else g * alpha * scale * exp(x * input_scale) *
  // input_scale. Through the decompositions, expm1 of a large x overflowed and the untaken side made it NaN.
  auto elu_family = [=](Ctx& c, const Value& alpha, double scale, bool celu) {
    return in_opmath(c, [&](const Value& x, const Value& g) {
      Value e = c.b.torch("exp", {celu ? c.b.torch("div", {x, alpha}) : x});
      Value negative = c.b.torch("mul", {g, celu ? e : c.b.torch("mul", {e, alpha})});
      Value positive = g;
      if (scale != 1.0) {
        negative = c.b.torch("mul", {negative, scale});
        positive = c.b.torch("mul", {g, scale});
      }
      return c.b.torch("where", {cmp(c, "gt", x, 0.0), positive, negative});
    });
  };
  r["elu"] = [=](Ctx& c) { return elu_family(c, c.arg(1), 1.0, false); };
  r["celu"] = [=](Ctx& c) { return elu_family(c, c.arg(1), 1.0, true); };
  r["selu"] = [=](Ctx& c) { return elu_family(c, Value(kSeluAlpha), kSeluScale, false); };
  r["softplus"] = [=](Ctx& c) {
    return in_opmath(c, [&](const Value& x, const Value& g) {
      Value bx = c.b.torch("mul", {x, c.arg(1)});
      Value z = c.b.torch("exp", {bx});
      Value soft = c.b.torch("div", {c.b.torch("mul", {g, z}), c.b.torch("add", {z, 1.0})});
      return c.b.torch("where", {cmp(c, "gt", bx, c.arg(2)), g, soft});
    });
  };
  // entr = -x log(x): g * -(1 + log(x)), as torch (inf at 0, where the decomposition's where gave NaN).
  r["entr"] = [=](Ctx& c) -> Grads {
    if (!c.differentiable(0)) return {};
    return {c.b.torch("mul", {c.g, c.b.torch("neg", {c.b.torch("add", {c.b.torch("log", {c.arg(0)}), 1.0})})})};
  };
  // logit(x, eps), as torch's logit_backward: g / (x (1 - x)); without eps NaN outside [0, 1] and g * inf at 0
  // and 1, with eps 0 outside [eps, 1 - eps] (the clamp), eps and 1 - eps rounded to x's dtype as torch's kernel
  // computes them (float16's 1 - 0.01 is 0.990234375).
  r["logit"] = [=](Ctx& c) -> Grads {
    if (!c.differentiable(0)) return {};
    return {in_opmath(c, [&](const Value& x, const Value& g) {
      Value d = c.b.torch("div", {g, c.b.torch("mul", {x, c.b.torch("rsub", {x, 1.0})})});
      const Value& eps = c.arg(1);
      if (eps.is_none()) {
        Value outside = c.b.torch("logical_or", {cmp(c, "lt", x, 0.0), cmp(c, "gt", x, 1.0)});
        Value edge = c.b.torch("logical_or", {cmp(c, "eq", x, 0.0), cmp(c, "eq", x, 1.0)});
        d = c.b.torch("where", {edge, c.b.torch("mul", {g, INFINITY}), d});
        return c.b.torch("where", {outside, NAN, d});
      }
      const DType dt = c.meta(c.arg(0)).dtype;
      const Value lo = eps.is_proxy() ? eps : Value(ir::round_to(eps.as_double(), dt));
      const Value hi = eps.is_proxy() ? c.b.torch("rsub", {eps, 1.0}) : Value(ir::round_to(1.0 - lo.as_double(), dt));
      return c.b.torch("where", {c.b.torch("logical_or", {cmp(c, "lt", x, lo), cmp(c, "gt", x, hi)}), 0.0, d});
    })[0]};
  };
  // hypot(a, b): g a / out and g b / out, as torch (the decomposition's square underflowed for tiny operands).
  r["hypot"] = [=](Ctx& c) {
    auto part = [&](size_t i) {
      if (!c.differentiable(i)) return Value();
      return operand_grad(c, i, c.b.torch("div", {c.b.torch("mul", {c.g, c.arg(i)}), c.out()}));
    };
    return Grads{part(0), part(1)};
  };
  // clamp: the input takes the gradient inside [min, max], bounds included; a tensor bound where it clamps.
  auto clamp_rule = [=](Ctx& c, const Value& lo, const Value& hi) {
    const Value& x = c.arg(0);
    Value keep;
    if (!lo.is_none()) keep = cmp(c, "ge", x, lo);
    if (!hi.is_none()) keep = keep.is_none() ? cmp(c, "le", x, hi) : both(c, keep, cmp(c, "le", x, hi));
    // A tensor bound may broadcast the input: its gradient is summed back to its shape.
    Grads g{c.sum_to(keep.is_none() ? c.g : masked(c, keep), c.meta(x).shape)};
    // torch: with both bounds, min takes it where x < min < max, max where x > max or max < min (clamp gives max).
    for (const Value* bound : {&lo, &hi}) {
      if (!c.tensor(*bound) || !(ir::is_floating(c.meta(*bound).dtype))) {
        g.push_back(Value());
        continue;
      }
      Value clamps = cmp(c, bound == &lo ? "lt" : "gt", x, *bound);
      if (!lo.is_none() && !hi.is_none())
        clamps = bound == &lo ? both(c, clamps, cmp(c, "lt", lo, hi))
                              : c.b.torch("logical_or", {clamps, cmp(c, "lt", hi, lo)});
      g.push_back(c.sum_to(c.convert(masked(c, clamps), c.meta(*bound).dtype), c.meta(*bound).shape));
    }
    return g;
  };
  r["clamp"] = [=](Ctx& c) { return clamp_rule(c, c.arg(1), c.arg(2)); };
  r["clamp_min"] = [=](Ctx& c) {
    Grads g = clamp_rule(c, c.arg(1), Value());
    return Grads{g[0], g[1]};
  };
  r["clamp_max"] = [=](Ctx& c) {
    Grads g = clamp_rule(c, Value(), c.arg(1));
    return Grads{g[0], g[2]};
  };
  // fmax / fmin: ties and a NaN other go to the input.
  for (const char* n : {"fmax", "fmin"}) {
    const bool max = std::string(n) == "fmax";
    r[n] = [=](Ctx& c) {
      const Value &a = c.arg(0), &b = c.arg(1);
      Value to_a = c.b.torch("logical_or", {cmp(c, max ? "ge" : "le", a, b), c.b.torch("isnan", {b})});
      Value ga = c.differentiable(0) ? operand_grad(c, 0, masked(c, to_a)) : Value();
      Value gb = c.differentiable(1) ? operand_grad(c, 1, c.b.torch("where", {to_a, 0.0, c.g})) : Value();
      return Grads{ga, gb};
    };
  }
  // amax / amin: the gradient is shared evenly among the elements equal to the result, as torch's
  // (scale_grad_by_count): a slice whose result is NaN has no such element, and its gradient is g / 0 * 0, NaN.
  // torch.max(x) / torch.min(x) share it among the NaNs instead: they decompose into the prims, whose rule does.
  for (const char* n : {"amax", "amin"}) {
    const std::string op = std::string("VJP of ltorch.") + n;
    r[n] = [op](Ctx& c) -> Grads {
      if (!c.differentiable(0)) return {};
      const TensorMeta& m = c.meta(c.arg(0));
      Shape kept = m.shape;
      for (int64_t d : reduction_dims(op, m, c.arg(1))) kept[static_cast<size_t>(d)] = 1;
      auto with_kept_dims = [&](const Value& v) { return c.prim("reshape", {v, Value::dims(kept)}); };
      Value hit = c.convert(c.b.torch("eq", {c.arg(0), with_kept_dims(c.out())}), m.dtype);
      Value count = c.b.torch("sum", {hit, c.arg(1), Value(true)});
      return {c.b.torch("mul", {c.b.torch("div", {with_kept_dims(c.g), count}), hit})};
    };
  }
  // max(x, dim) / min(x, dim) -> (values, indices): the gradient goes to the element the index names.
  for (const char* n : {"max_dim", "min_dim"}) {
    r[n] = [](Ctx& c) -> Grads {
      const TensorMeta& m = c.meta(c.arg(0));
      const Value& g = c.g.items()[0];
      if (g.is_none() || m.ndim() == 0) return {g.is_none() ? Value() : c.prim("reshape", {g, Value::dims(m.shape)})};
      const int64_t dim = canonical_dims(c.arg(1), m.ndim())[0];
      Shape kept = m.shape;
      kept[static_cast<size_t>(dim)] = 1;
      Value index = c.prim("reshape", {c.out().items()[1], Value::dims(kept)});
      Value values = c.prim("reshape", {g, Value::dims(kept)});
      return {c.prim("scatter_add", {c.zeros_like(c.arg(0)), Value(dim), index, values})};
    };
  }
  // xlogy(x, y) = x * log(y) and xlog1py(x, y) = x * log1p(y), 0 where x is 0: d/dx = log(y) (log1p(y)), 0 where
  // the gradient is 0 or where x is 0 and y <= 0 (y <= -1); d/dy = x / y (x / (y + 1)). As torch's; the
  // decomposition's where let the untaken log make the gradient NaN, and gave x = 0 no gradient at all.
  for (const char* n : {"xlogy", "xlog1py"}) {
    const bool one_plus = std::string(n) == "xlog1py";
    r[n] = [=](Ctx& c) {
      const Value &x = c.arg(0), &y = c.arg(1);
      const double pole = one_plus ? -1.0 : 0.0;
      Value gx, gy;
      if (c.differentiable(0)) {
        Value log_y = c.b.torch(one_plus ? "log1p" : "log", {y});
        Value d = c.b.torch("where", {cmp(c, "eq", c.g, 0.0), 0.0, c.b.torch("mul", {c.g, log_y})});
        Value undefined = both(c, cmp(c, "eq", x, 0.0), cmp(c, "le", y, pole));
        gx = operand_grad(c, 0, c.b.torch("where", {undefined, 0.0, d}));
      }
      if (c.differentiable(1)) {
        Value y1 = one_plus ? c.b.torch("add", {y, 1.0}) : y;
        gy = operand_grad(c, 1, c.b.torch("div", {c.b.torch("mul", {c.g, x}), y1}));
      }
      return Grads{gx, gy};
    };
  }
  // The gradient of an elementwise loss at each element: g expanded to the loss's shape `shape` (a reduced loss), over
  // numel for 'mean', times the weight -- the factor torch's loss backwards apply to their pointwise derivative.
  auto loss_grad = [](Ctx& c, const Value& reduction_arg, const Value& weight, const Shape& shape) {
    const std::string reduction = reduction_arg.is_none() ? "mean" : reduction_arg.as_str();
    Value g = reduction == "none" ? c.g : c.b.torch("expand", {c.g, Value::dims(shape)});
    if (reduction == "mean") {
      Dim numel = 1;
      for (const Dim& d : shape) numel *= d;
      g = c.b.torch("div", {g, count_divisor(numel.is_constant() ? Dim(std::max<int64_t>(*numel.constant(), 1)) : numel)});
    }
    return weight.is_none() ? g : c.b.torch("mul", {g, weight});
  };
  // binary_cross_entropy(p, t, weight, size_average, reduce, reduction), as torch's backward: the input's
  // gradient is w (p - t) / max(p (1 - p), 1e-12), the target's -w logit(p) (infinite at p = 0 and 1: the loss's
  // clamped logs do not bound it).
  r["binary_cross_entropy"] = [=](Ctx& c) -> Grads {
    if (!c.arg(3).is_none() || !c.arg(4).is_none())
      throw std::invalid_argument("binary_cross_entropy with size_average/reduce has no VJP rule");
    const Value &p = c.arg(0), &t = c.arg(1);
    Value g = loss_grad(c, c.arg(5), c.arg(2), c.meta(p).shape);
    Value gp, gt;
    if (c.differentiable(0)) {
      Value denom = c.b.torch("clamp_min", {c.b.torch("mul", {c.b.torch("rsub", {p, 1.0}), p}), 1e-12});
      gp = c.b.torch("div", {c.b.torch("mul", {g, c.b.torch("sub", {p, t})}), denom});
    }
    if (c.differentiable(1)) gt = c.b.torch("mul", {g, c.b.torch("neg", {c.b.torch("logit", {p})})});
    return {gp, gt};
  };
  // binary_cross_entropy_with_logits(x, t, weight, size_average, reduce, reduction, pos_weight), as torch's
  // backward: the input's gradient is w (sigmoid(x) - t), with a pos_weight pw w ((pw t + 1 - t) sigmoid(x) - pw t);
  // the target's is -w x, with pw w (log_sigmoid(-x) - pw log_sigmoid(x)). Through the decomposition, |x| and
  // max(-x, 0) took the wrong one-sided slopes at x = 0 (a zero-initialised classifier's logits).
  r["binary_cross_entropy_with_logits"] = [=](Ctx& c) -> Grads {
    if (!c.arg(3).is_none() || !c.arg(4).is_none())
      throw std::invalid_argument("binary_cross_entropy_with_logits with size_average/reduce has no VJP rule");
    const Value &x = c.arg(0), &t = c.arg(1), &pw = c.arg(6);
    Value g = loss_grad(c, c.arg(5), c.arg(2),
                       c.meta(x).shape);
    Value gx, gt;
    if (c.differentiable(0)) {
      Value s = c.b.torch("sigmoid", {x});
      Value d = c.b.torch("sub", {s, t});
      if (!pw.is_none()) {
        Value pt = c.b.torch("mul", {pw, t});
        d = c.b.torch("sub", {c.b.torch("mul", {c.b.torch("sub", {c.b.torch("add", {pt, 1.0}), t}), s}), pt});
      }
      gx = operand_grad(c, 0, c.b.torch("mul", {d, g}));
    }
    if (c.differentiable(1)) {
      Value d = c.b.torch("neg", {x});
      if (!pw.is_none())
        d = c.b.torch("sub", {c.b.torch("log_sigmoid", {c.b.torch("neg", {x})}),
                              c.b.torch("mul", {c.b.torch("log_sigmoid", {x}), pw})});
      gt = operand_grad(c, 1, c.b.torch("mul", {d, g}));
    }
    return {gx, gt};
  };
  // smooth_l1_loss(x, t, size_average, reduce, reduction, beta) and huber_loss(x, t, reduction, delta, weight):
  // with d = x - t, the input's gradient is clamp(d / beta, -1, 1) (sign(d) for beta = 0) and clamp(d, -delta,
  // delta), the target's its negation, as torch's backwards. Through the decompositions, the square's gradient on
  // the side not taken was 0 * inf = NaN where d is infinite.
  for (const char* n : {"smooth_l1_loss", "huber_loss"}) {
    const bool huber = std::string(n) == "huber_loss";
    r[n] = [=](Ctx& c) -> Grads {
      if (!huber && (!c.arg(2).is_none() || !c.arg(3).is_none()))
        throw std::invalid_argument("smooth_l1_loss with size_average/reduce has no VJP rule");
      if (huber && !c.arg(4).is_none()) throw std::invalid_argument("huber_loss with a weight has no VJP rule");
      const Value& bound = c.arg(huber ? 3 : 5);
      Value d = c.b.torch("sub", {c.arg(0), c.arg(1)});
      Value g = loss_grad(c, c.arg(huber ? 2 : 4), Value(), c.meta(d).shape);
      Value dd;
      if (!huber && !bound.is_proxy() && bound.as_double() == 0.0) {
        dd = c.b.torch("sign", {d});  // l1_loss's (0 at a NaN)
      } else {
        Value inside = d;  // huber: d between the bounds; smooth_l1: d / beta, over 1 where beta is 0 (then d is 0)
        if (!huber) {
          Value divisor = bound;
          if (bound.is_proxy()) {
            const TensorMeta& m = c.meta(d);
            Value t = c.prim("full", {Value::dims({}), bound, Value(m.dtype), Value(ir::Str{m.device})});
            divisor = c.b.torch("where", {cmp(c, "eq", t, 0.0), 1.0, t});
          }
          inside = c.b.torch("div", {d, divisor});
        }
        const Value minus_bound = scaled_number(c.b, bound, -1.0);
        Value within = c.b.torch("where", {cmp(c, "gt", d, bound), huber ? bound : Value(1.0), inside});
        dd = c.b.torch("where", {cmp(c, "lt", d, minus_bound), huber ? minus_bound : Value(-1.0), within});
      }
      Value gx = c.b.torch("mul", {dd, g});
      return {operand_grad(c, 0, gx), c.differentiable(1) ? operand_grad(c, 1, c.b.torch("neg", {gx})) : Value()};
    };
  }
  // linear(x, w, bias): over all the rows of x at once, and the weight's gradient in the weight's own [out, in]
  // layout, g^T x. Its decomposition, matmul(x, w.t()), gives (x^T g)^T: a transposed view, which torch's
  // autograd copies into the parameter's layout at every step (a Llama training step: 29 such copies).
  r["linear"] = [](Ctx& c) -> Grads {
    const Value &x = c.arg(0), &w = c.arg(1);
    const Shape xs = c.meta(x).shape, ws = c.meta(w).shape;
    const Dim in = xs.back(), out = ws.size() == 2 ? ws[0] : Dim(1);
    const Dim rows = ir::product(Shape(xs.begin(), xs.end() - 1));
    auto as = [&](const Value& v, const Shape& shape) {
      return c.meta(v).shape == shape ? v : c.prim("reshape", {v, Value::dims(shape)});
    };
    Value g_rows = as(c.g, {rows, out});
    Value w2 = as(w, {out, in});
    Grads grads(3);
    if (c.differentiable(0)) grads[0] = as(c.prim("matmul", {g_rows, w2}), xs);
    if (c.differentiable(1)) {
      Value g_t = c.prim("transpose", {g_rows, Value::ints({1, 0})});
      grads[1] = as(c.prim("matmul", {g_t, as(x, {rows, in})}), ws);
    }
    if (c.differentiable(2)) grads[2] = c.sum_to(c.g, c.meta(c.arg(2)).shape);
    return grads;
  };
  // attention_with_logsumexp(q, k, v, attn_mask, is_causal, scale, enable_gqa) -> (out, lse): attention's backward
  // as flash attention computes it (Dao et al., "FlashAttention", 2022), from q, k, v, the output and the rows'
  // log-sum-exps, in float32: the probabilities P = exp(scores - lse) are recomputed from the scores, elementwise,
  // where a decomposition differentiated prim by prim would save them (float32, [..., L, S]). With dO the output's
  // gradient: dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)) (softmax's backward, rowsum(P * dP) being
  // rowsum(dO * O)), dQ = dS K * scale, dK = dS^T Q * scale, and a float mask takes dS. A key or value head serving
  // several query heads (grouped-query attention) sums their gradients. A position the mask hides has the score
  // -inf, so P = 0 there; a row it hides entirely has lse 0 and takes no gradient.
  // In float32 (a mask, if any, not requiring grad) the rule is torch's fused backward kernel instead
  // (ltorch.attention_backward), the one eager's runs: as fast there as these products and elementwise ops (about
  // 1.8 ms for [8, 4, 64, 64], one thread), and eager's gradients bit for bit.
  r["attention_with_logsumexp"] = [](Ctx& c) -> Grads {
    const Value& g = c.g.items()[0];
    if (!c.g.items()[1].is_none())
      throw std::invalid_argument("ltorch.attention_with_logsumexp: its log-sum-exp is differentiated nowhere");
    if (g.is_none()) return {};
    const Value &q = c.arg(0), &mask = c.arg(3);
    if (c.meta(q).dtype == DType::Float32 && (mask.is_none() || !c.meta(mask).requires_grad)) {
      Value fused = c.b.torch("attention_backward", {g, q, c.arg(1), c.arg(2), c.out().items()[0],
                                                     c.out().items()[1], mask, c.arg(4), c.arg(5), c.arg(6)});
      Grads grads(7);
      for (size_t i = 0; i < 3; ++i)
        if (c.differentiable(i)) grads[i] = fused.items()[i];
      return grads;
    }
    const DType math = opmath(c.meta(q).dtype);
    auto [key, value] = attention_heads(c.b, q, c.arg(1), c.arg(2), c.arg(6).as_bool());
    const double scale = attention_scale(c.b, q, c.arg(5));
    Value scores = attention_scores(c.b, q, key, mask, c.arg(4).as_bool(), scale);
    Value lse = c.b.torch("unsqueeze", {c.out().items()[1], Int(-1)});
    Value probs = c.un("exp", c.b.torch("sub", {scores, lse}));
    Value dout = c.convert(g, math), out = c.convert(c.out().items()[0], math);
    auto mT = [&](const Value& x) { return c.b.torch("transpose", {x, Int(-2), Int(-1)}); };
    auto matmul = [&](const Value& x, const Value& y) { return c.b.torch("matmul", {x, y}); };
    Value dprobs = matmul(dout, mT(c.convert(value, math)));
    Value delta = c.b.torch("sum", {c.b.torch("mul", {dout, out}), Value::ints({-1}), Value(true)});
    Value dscores = c.b.torch("mul", {probs, c.b.torch("sub", {dprobs, delta})});
    Value dscaled = c.b.torch("mul", {dscores, Value(scale)});
    // A gradient of the repeated keys or values, [..., hq, S, E], summed over the query heads each head serves.
    auto per_key_head = [&](const Value& grad, size_t arg) {
      const Shape& want = c.meta(c.arg(arg)).shape;
      const Shape& got = c.meta(grad).shape;
      Value summed = grad;
      if (got != want) {
        const size_t h = want.size() - 3;
        Shape split = want;
        split.insert(split.begin() + static_cast<std::ptrdiff_t>(h) + 1,
                     got[h].divide(want[h], "ltorch.attention_with_logsumexp"));
        summed = c.prim("sum", {c.prim("reshape", {grad, Value::dims(split)}), Value::ints({static_cast<int64_t>(h) + 1})});
      }
      return c.convert(summed, c.meta(c.arg(arg)).dtype);
    };
    Grads grads(7);
    if (c.differentiable(0)) grads[0] = c.convert(matmul(dscaled, c.convert(key, math)), c.meta(q).dtype);
    if (c.differentiable(1)) grads[1] = per_key_head(matmul(mT(dscaled), c.convert(q, math)), 1);
    if (c.differentiable(2)) grads[2] = per_key_head(matmul(mT(probs), dout), 2);
    if (c.differentiable(3)) grads[3] = c.convert(c.sum_to(dscores, c.meta(mask).shape), c.meta(mask).dtype);
    return grads;
  };
  // softmax / log_softmax (input, dim, dtype), from the output alone, in the math type of half precision:
  // softmax: out * (g - sum(g * out)); log_softmax: g - exp(out) * sum(g). One saved value, where the
  // decomposition's own rules would save its exponentials and sums.
  for (const char* n : {"softmax", "log_softmax"}) {
    const bool log = std::string(n) == "log_softmax";
    r[n] = [log](Ctx& c) -> Grads {
      if (!c.differentiable(0)) return {};
      const TensorMeta& m = c.meta(c.out());
      const DType math = m.dtype == DType::Float16 || m.dtype == DType::BFloat16 ? DType::Float32 : m.dtype;
      const int64_t dim = m.ndim() == 0 ? 0 : canonical_dims(c.arg(1), m.ndim())[0];
      Value g = c.convert(c.g, math), out = c.convert(c.out(), math);
      auto keep_sum = [&](const Value& v) {
        if (m.ndim() == 0) return v;
        return c.unreduce(c.prim("sum", {v, Value::ints({dim})}), m.shape, {dim});
      };
      Value gx = log ? c.sub(g, c.mul(c.un("exp", out), keep_sum(g))) : c.mul(out, c.sub(g, keep_sum(c.mul(g, out))));
      return {c.convert(gx, c.meta(c.arg(0)).dtype)};
    };
  }
  return r;
}

// Rules that cover only the uses `covers` accepts, by torch-level op; the others are differentiated through the
// op's decomposition, or whole by torch's autograd (`otherwise_by_torch`, see vjp_by_torch).
struct PartialRule {
  std::function<bool(const ir::BoundSymbol&)> covers;
  Rule rule;
  bool otherwise_by_torch = false;
  ir::Level level = ir::Level::Torch;  // a prim's rule: the generic rule differentiates the uses it does not cover
};

// The writes by index, as torch's backwards: the input's gradient is g with the written elements zeroed, a tensor
// written in takes g read where it went. None reads the forward's tensors, so a later in-place write of the input
// (under no_grad) leaves the backward as eager's; the generic rule saved the input, and that backward raised
// "modified by an inplace operation". Uses they do not cover (a reduce, a value tensor, an index gap) go generic.
void index_write_rules(std::unordered_map<std::string, PartialRule>& r) {
  r["scatter"] = {[](const ir::BoundSymbol& b) { return b.args.size() < 5 || b.args[4].is_none(); },
                  [](Ctx& c) {
                    Value gsrc;
                    if (c.differentiable(3)) {  // g where src went
                      // (torch's backward refuses a src larger than the index: the graph's backward is torch's)
                      if (c.meta(c.arg(3)).shape != c.meta(c.arg(2)).shape)
                        throw std::invalid_argument("scatter of a src that requires grad, larger than its index");
                      gsrc = c.prim("gather", {c.g, c.arg(1), c.arg(2)});
                    }
                    Value ga = c.differentiable(0) ? c.prim("scatter", {c.g, c.arg(1), c.arg(2), Value(0.0)}) : Value();
                    return Grads{ga, Value(), Value(), gsrc, Value()};
                  },
                  false, ir::Level::Prim};
  r["index_fill"] = {[](const ir::BoundSymbol& b) { return !b.args[3].is_proxy(); },  // a number, not a tensor
                     [](Ctx& c) {
                       Value ga = c.differentiable(0) ? c.prim("index_fill", {c.g, c.arg(1), c.arg(2), Value(0.0)})
                                                      : Value();
                       return Grads{ga, Value(), Value(), Value()};
                     },
                     false, ir::Level::Prim};
  // index_put(a, indices, values, accumulate) with index tensors for the leading dims (no gap).
  r["index_put"] = {[](const ir::BoundSymbol& b) {
                      for (const Value& i : b.args[1].items())
                        if (!i.is_proxy()) return false;
                      return !b.args[1].items().empty();
                    },
                    [](Ctx& c) {
                      Value ga;
                      if (c.differentiable(0)) {
                        TensorMeta scalar = c.meta(c.g);
                        scalar.shape = {};
                        ga = c.arg(3).as_bool() ? c.g
                                                : c.prim("index_put", {c.g, c.arg(1), c.zeros(scalar), Value(false)});
                      }
                      // values' gradient: g where each value went (read_at_indices), summed to values' shape
                      Value gv = c.differentiable(2) ? operand_grad(c, 2, read_at_indices(c.b, c.g, 0, c.arg(1).items()))
                                                     : Value();
                      return Grads{ga, Value(), gv, Value()};
                    },
                    false, ir::Level::Prim};
}

std::unordered_map<std::string, PartialRule> partial_rules() {
  std::unordered_map<std::string, PartialRule> r;
  index_write_rules(r);
  // div(a, b, rounding_mode): a rounded quotient has derivative 0 for both operands, as torch's. Through the
  // decomposition, trunc's zero gradient reached the quotient's rule as 0 / b: NaN where b is 0.
  r["div"] = {[](const ir::BoundSymbol& b) { return !b.args[2].is_none(); },
              [](Ctx& c) {
                return Grads{operand_grad(c, 0, c.differentiable(0) ? c.zeros_like(c.arg(0)) : Value()),
                             operand_grad(c, 1, c.differentiable(1) ? c.zeros_like(c.arg(1)) : Value())};
              }};
  // embedding(indices, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse): rows summed by index;
  // the padding row takes none. With max_norm, scale_grad_by_freq or sparse (a sparse gradient, as SparseAdam
  // needs), torch's autograd differentiates the op whole (the generic rule).
  auto embedding = [](Ctx& c) -> Grads {
    const TensorMeta& w = c.meta(c.arg(1));
    const Dim rows = w.shape[0], width = w.shape[1];
    const Dim n = c.meta(c.arg(0)).numel();
    Value index = c.prim("reshape", {c.arg(0), Value::dims({n})});
    Value src = c.prim("reshape", {c.g, Value::dims({n, width})});
    Value gw = c.b.torch("index_add", {c.zeros_like(c.arg(1)), Value(int64_t{0}), index, src});
    if (!c.arg(2).is_none()) {
      const Dim pad = c.arg(2).as_int() < 0 ? c.arg(2).as_int() + rows : Dim(c.arg(2).as_int());
      TensorMeta row = w;
      row.shape = {1, width};
      gw = c.prim("slice_update", {gw, c.zeros(row), Value::dims({pad, 0}), Value::dims({pad + 1, width}), Value()});
    }
    return {Value(), gw};
  };
  auto plain_embedding = [](const ir::BoundSymbol& b) {
    auto set = [&](size_t i) { return b.args[i].is_number() && b.args[i].as_bool(); };
    return b.args[3].is_none() && !set(5) && !set(6);
  };
  r["embedding"] = {plain_embedding, embedding, /*otherwise_by_torch=*/true};
  return r;
}

struct Table {
  std::unordered_map<const ir::Symbol*, VjpRule> rules;
  std::unordered_map<const ir::Symbol*, std::function<bool(const ir::BoundSymbol&)>> covers;  // partial rules
  std::unordered_set<const ir::Symbol*> otherwise_by_torch;  // partial rules whose other uses torch differentiates
  std::unordered_set<const ir::Symbol*> by_torch;  // see vjp_by_torch
  std::unordered_set<const ir::Symbol*> compares;  // see vjp_compares_arguments
  std::vector<std::string> names;
};

// Torch-level ops differentiated whole by torch's autograd (vjp_by_torch).
const std::vector<std::string> kByTorch = {"scaled_dot_product_attention"};

// Ops whose rules compare their tensor arguments (vjp_compares_arguments).
const std::vector<std::pair<ir::Level, std::string>> kComparing = {
    {ir::Level::Prim, "amax"},    {ir::Level::Prim, "amin"},       {ir::Level::Prim, "maximum"},
    {ir::Level::Prim, "minimum"}, {ir::Level::Torch, "amax"},      {ir::Level::Torch, "amin"},
    {ir::Level::Torch, "fmax"},   {ir::Level::Torch, "fmin"},      {ir::Level::Torch, "clamp"},
    {ir::Level::Torch, "clamp_min"}, {ir::Level::Torch, "clamp_max"}};

VjpRule as_vjp(Rule rule) {
  return [rule = std::move(rule)](Builder& b, const ir::BoundSymbol& fwd, const Value& grad) {
    Ctx c{b, fwd, grad};
    Grads g = rule(c);
    g.resize(fwd.args.size());
    return g;
  };
}

const Table& table() {
  static const Table t = [] {
    Table t;
    using Group = std::pair<ir::Level, std::unordered_map<std::string, Rule>>;
    for (const Group& group : {Group{ir::Level::Prim, unary_rules()}, Group{ir::Level::Prim, binary_rules()},
                               Group{ir::Level::Prim, shape_rules()}, Group{ir::Level::Prim, reduction_rules()},
                               Group{ir::Level::Torch, torch_rules()}}) {
      const std::string prefix = group.first == ir::Level::Prim ? "prims." : "ltorch.";
      for (const auto& [name, rule] : group.second) {
        const OpDef* def = find_op(group.first, name);
        if (def == nullptr) throw std::logic_error("VJP rule for an unknown op: " + prefix + name);
        t.rules[&def->symbol] = as_vjp(rule);
        t.names.push_back(prefix + name);
      }
    }
    for (const auto& [name, partial] : partial_rules()) {
      const std::string qualified = (partial.level == ir::Level::Prim ? "prims." : "ltorch.") + name;
      const OpDef* def = find_op(partial.level, name);
      if (def == nullptr) throw std::logic_error("VJP rule for an unknown op: " + qualified);
      t.rules[&def->symbol] = as_vjp(partial.rule);
      t.covers[&def->symbol] = partial.covers;
      if (partial.otherwise_by_torch) t.otherwise_by_torch.insert(&def->symbol);
      t.names.push_back(qualified);
    }
    for (const std::string& name : kByTorch) {
      const OpDef* def = find_op(ir::Level::Torch, name);
      if (def == nullptr) throw std::logic_error("torch-differentiated op unknown: ltorch." + name);
      t.by_torch.insert(&def->symbol);
    }
    for (const auto& [level, name] : kComparing) {
      const OpDef* def = find_op(level, name);
      if (def == nullptr) throw std::logic_error("comparing VJP of an unknown op: " + name);
      t.compares.insert(&def->symbol);
    }
    std::sort(t.names.begin(), t.names.end());
    return t;
  }();
  return t;
}

}  // namespace

const VjpRule* find_vjp(const ir::Symbol* op) {
  auto it = table().rules.find(op);
  return it == table().rules.end() ? nullptr : &it->second;
}

const VjpRule* find_vjp(const ir::BoundSymbol& use) {
  auto covers = table().covers.find(use.sym);
  if (covers != table().covers.end() && !covers->second(use)) return nullptr;
  return find_vjp(use.sym);
}

bool vjp_by_torch(const ir::Symbol* op) { return table().by_torch.count(op) > 0; }

bool vjp_compares_arguments(const ir::Symbol* op) { return table().compares.count(op) > 0; }

bool vjp_by_torch(const ir::BoundSymbol& use) {
  return vjp_by_torch(use.sym) || (table().otherwise_by_torch.count(use.sym) > 0 && find_vjp(use) == nullptr);
}

Value zeros(Builder& b, const TensorMeta& m) {
  return b.prim("full", {Value::dims(m.shape), Value(0.0), Value(m.dtype), Value(ir::Str{m.device})});
}

std::vector<std::string> ops_with_vjp() { return table().names; }

}  // namespace thunder::ops
