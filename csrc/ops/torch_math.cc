// More torch-level math: elementwise functions, activations, reductions and
// scans. Each is a decomposition into prims (through other torch-level ops),
// with torch's type promotion; scans and sorts are single torch-level symbols
// with shape/dtype rules (def_meta).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/torch_common.h"

namespace thunder::ops {
namespace {

using ir::kElementwise;
using ir::kReduction;
const ir::Param kInput = req("input");

// The dtype an IntToFloat op computes in for these operands.
DType float_result(Builder& b, const Args& xs) {
  DType d = result_type(b, xs);
  return is_float(d) ? d : DType::Float32;
}
void require_float(Builder& b, const char* op, const Value& x) {
  if (!is_float(tensor(b, op, x).dtype)) fail(op, "expected a floating-point input");
}

void unary(const std::string& name, DecompFn f) { def_decomposed(name, kElementwise, {kInput}, std::move(f)); }

// ---- elementwise ----

void register_elementwise() {
  unary("square", [](Builder& b, const Args& a) {
    Value x = b.meta(a[0]).dtype == DType::Bool ? cast(b, a[0], DType::Int64) : a[0];
    return T(b, "mul", {x, x});
  });
  unary("frac", [](Builder& b, const Args& a) {
    require_float(b, "ltorch.frac", a[0]);
    return T(b, "sub", {a[0], T(b, "trunc", {a[0]})});
  });
  unary("positive", [](Builder& b, const Args& a) {
    if (b.meta(a[0]).dtype == DType::Bool) fail("ltorch.positive", "not supported for bool tensors");
    return a[0];
  });
  unary("sgn", [](Builder& b, const Args& a) {
    // A complex sgn is z / |z|, which prims.sign (torch.sign, real only) is not: torch runs it, and differentiates it.
    if (ir::is_complex(b.meta(a[0]).dtype)) throw NotNative("sgn of a complex tensor");
    return T(b, "sign", {a[0]});
  });
  for (auto [name, factor] : {std::pair{"deg2rad", M_PI / 180.0}, std::pair{"rad2deg", 180.0 / M_PI}}) {
    double f = factor;
    unary(name, [f](Builder& b, const Args& a) {
      DType d = float_result(b, {a[0]});
      return T(b, "mul", {cast(b, a[0], d), F(f)});
    });
  }
  unary("sinc", [](Builder& b, const Args& a) {
    DType d = float_result(b, {a[0]});
    Value x = cast(b, a[0], opmath(d));
    Value px = T(b, "mul", {x, F(M_PI)});
    Value r = T(b, "where", {T(b, "eq", {x, Int(0)}), F(1.0), T(b, "div", {T(b, "sin", {px}), px})});
    return cast(b, r, d);
  });
  unary("isposinf", [](Builder& b, const Args& a) {
    if (!is_float(b.meta(a[0]).dtype)) return T(b, "zeros_like", {a[0], Value(DType::Bool)});
    return T(b, "logical_and", {T(b, "isinf", {a[0]}), T(b, "gt", {a[0], Int(0)})});
  });
  unary("isneginf", [](Builder& b, const Args& a) {
    if (!is_float(b.meta(a[0]).dtype)) return T(b, "zeros_like", {a[0], Value(DType::Bool)});
    return T(b, "logical_and", {T(b, "isinf", {a[0]}), T(b, "lt", {a[0], Int(0)})});
  });
  unary("isreal", [](Builder& b, const Args& a) { return T(b, "ones_like", {a[0], Value(DType::Bool)}); });
  def_decomposed("logit", kElementwise, {kInput, opt("eps", Value())}, [](Builder& b, const Args& a) {
    DType d = float_result(b, {a[0]});
    Value x = cast(b, a[0], d);
    // ATen's x < lo ? lo : (x > hi ? hi : x), lo = eps, hi = 1 - eps: not a clamp where lo > hi (eps > 0.5), and
    // a NaN eps leaves x as it is.
    if (!a[1].is_none()) {
      require_convertible(b, "ltorch.logit", "eps", a[1], d);
      const Value lo = a[1], hi = a[1].is_proxy() ? T(b, "rsub", {a[1], F(1.0)}) : F(1.0 - a[1].as_double());
      x = T(b, "where", {T(b, "lt", {x, lo}), lo, T(b, "where", {T(b, "gt", {x, hi}), hi, x})});
    }
    return T(b, "log", {T(b, "div", {x, T(b, "rsub", {x, Int(1)})})});
  });
  def_decomposed("nan_to_num", kElementwise, {kInput, opt("nan", F(0.0)), opt("posinf", Value()), opt("neginf", Value())},
                 [](Builder& b, const Args& a) {
                   DType d = b.meta(a[0]).dtype;
                   if (!is_float(d)) return T(b, "clone", {a[0]});
                   Value pos = a[2].is_none() ? F(finfo_max(d)) : a[2], neg = a[3].is_none() ? F(-finfo_max(d)) : a[3];
                   Value nan = a[1].is_none() ? F(0.0) : a[1];
                   Value x = T(b, "where", {T(b, "isnan", {a[0]}), nan, a[0]});
                   x = T(b, "where", {T(b, "isposinf", {a[0]}), pos, x});
                   return T(b, "where", {T(b, "isneginf", {a[0]}), neg, x});
                 });
  def_decomposed("rsub", kElementwise, {kInput, req("other"), opt("alpha", Int(1))}, [](Builder& b, const Args& a) {
    return b.torch("sub", {a[1], a[0], a[2]});
  });
  def_decomposed("clamp_min", kElementwise, {kInput, req("min")}, [](Builder& b, const Args& a) {
    return b.torch("clamp", {a[0], a[1], Value()});
  });
  def_decomposed("clamp_max", kElementwise, {kInput, req("max")}, [](Builder& b, const Args& a) {
    return b.torch("clamp", {a[0], Value(), a[1]});
  });
  auto binary = [](const std::string& name, DecompFn f) {
    def_decomposed(name, kElementwise, {kInput, req("other")}, std::move(f));
  };
  // x * log(y) (xlogy) or x * log1p(y) (xlog1py): 0 where x == 0, NaN where y is NaN.
  auto x_times_log = [](const char* log) {
    return [log](Builder& b, const Args& a) {
      DType d = float_result(b, {a[0], a[1]});
      Value x = cast(b, a[0], d), y = cast(b, a[1], d);
      Value r = T(b, "mul", {x, T(b, log, {y})});
      r = T(b, "where", {T(b, "eq", {x, Int(0)}), F(0.0), r});
      return T(b, "where", {T(b, "isnan", {y}), F(NAN), r});
    };
  };
  binary("xlogy", x_times_log("log"));
  binary("hypot", [](Builder& b, const Args& a) {
    DType d = result_type(b, {a[0], a[1]});
    if (!is_float(d)) fail("ltorch.hypot", "expected floating-point inputs");
    // hi sqrt(1 + (lo / hi)^2) for hi = max(|x|, |y|), lo = min: sqrt(x^2 + y^2) underflowed to 0 where the squares
    // do (|x| < 1e-154 in float64, 1e-19 in float32) and overflowed from 1e154; ATen calls a scaling hypot. 0 at
    // the origin; inf where either is infinite, a NaN in the other notwithstanding (C's hypot).
    Value x = T(b, "abs", {in_opmath(b, a[0], d)}), y = T(b, "abs", {in_opmath(b, a[1], d)});
    Value hi = T(b, "maximum", {x, y}), lo = T(b, "minimum", {x, y});
    Value q = T(b, "div", {lo, hi});
    Value r = T(b, "mul", {hi, T(b, "sqrt", {T(b, "add", {T(b, "mul", {q, q}), Int(1)})})});
    r = T(b, "where", {T(b, "eq", {hi, Int(0)}), F(0.0), r});
    r = T(b, "where", {T(b, "logical_or", {T(b, "isinf", {x}), T(b, "isinf", {y})}), F(INFINITY), r});
    return cast(b, r, d);
  });
  for (const char* name : {"logaddexp", "logaddexp2"}) {
    bool two = std::string(name) == "logaddexp2";
    binary(name, [two, name](Builder& b, const Args& a) {
      DType d = result_type(b, {a[0], a[1]});
      // (maximum is real only: torch runs, and differentiates, a complex logaddexp.)
      if (ir::is_complex(d)) throw NotNative(std::string(name) + " of complex tensors");
      if (!is_float(d)) fail(std::string("ltorch.") + name, "expected floating-point inputs");
      Value x = in_opmath(b, a[0], d), y = in_opmath(b, a[1], d);
      Value m = T(b, "maximum", {x, y});
      Value diff = T(b, "neg", {T(b, "abs", {T(b, "sub", {x, y})})});
      Value r = two ? T(b, "add", {m, T(b, "div", {T(b, "log1p", {T(b, "exp2", {diff})}), F(M_LN2)})})
                    : T(b, "add", {m, T(b, "log1p", {T(b, "exp", {diff})})});
      r = T(b, "where", {T(b, "logical_and", {T(b, "isinf", {x}), T(b, "eq", {x, y})}), x, r});
      return cast(b, r, d);
    });
  }
  for (const char* name : {"fmax", "fmin"}) {
    bool is_max = std::string(name) == "fmax";
    binary(name, [is_max](Builder& b, const Args& a) {
      DType d = result_type(b, {a[0], a[1]});
      Value x = cast(b, a[0], d), y = cast(b, a[1], d);
      Value m = T(b, is_max ? "maximum" : "minimum", {x, y});
      if (!is_float(d)) return m;
      m = T(b, "where", {T(b, "isnan", {y}), x, m});
      return T(b, "where", {T(b, "isnan", {x}), y, m});
    });
  }
  def_decomposed("heaviside", kElementwise, {kInput, req("values")}, [](Builder& b, const Args& a) {
    DType d = result_type(b, {a[0], a[1]});
    if (b.is_tensor(a[1]) && b.meta(a[1]).dtype != b.meta(a[0]).dtype)
      fail("ltorch.heaviside", "input and values must have the same dtype");
    Value x = cast(b, a[0], d);
    Value pos = cast(b, T(b, "gt", {x, Int(0)}), d);
    return T(b, "where", {T(b, "eq", {x, Int(0)}), cast(b, a[1], d), pos});
  });
  binary("float_power", [](Builder& b, const Args& a) {
    return T(b, "pow", {cast(b, a[0], DType::Float64), cast(b, a[1], DType::Float64)});
  });
  binary("ldexp", [](Builder& b, const Args& a) {
    // ATen's: input * pow(2.0, other), the power in other's dtype when it is floating (2**16 overflows float16),
    // else in the result's.
    const bool floating = b.is_tensor(a[1]) && ir::is_floating(b.meta(a[1]).dtype);
    return T(b, "mul", {a[0], T(b, "pow", {F(2.0), floating ? a[1] : cast(b, a[1], float_result(b, {a[0], a[1]}))})});
  });
  def_decomposed("lerp", kElementwise, {kInput, req("end"), req("weight")}, [](Builder& b, const Args& a) {
    DType d = result_type(b, {a[0], a[1]});
    if (!is_float(d)) fail("ltorch.lerp", "expected floating-point inputs");
    require_convertible(b, "ltorch.lerp", "weight", a[2], opmath(d));
    Value x = cast(b, a[0], opmath(d)), y = cast(b, a[1], opmath(d)), w = cast(b, a[2], opmath(d));
    Value diff = T(b, "sub", {y, x});
    if (!b.is_tensor(w) && !w.is_proxy()) {  // a constant weight picks the formula at compile time
      // ATen takes the weight in the op's math type (float for float32) and computes 1 - w in it.
      const double weight = a[2].as_double();
      const bool single = opmath(d) == DType::Float32;
      const double w_math = single ? static_cast<double>(static_cast<float>(weight)) : weight;
      const double rest = single ? static_cast<double>(1.0f - static_cast<float>(weight)) : 1.0 - weight;
      return cast(b, std::abs(weight) < 0.5 ? T(b, "add", {x, T(b, "mul", {F(w_math), diff})})
                                            : T(b, "sub", {y, T(b, "mul", {diff, F(rest)})}), d);
    }
    Value low = T(b, "add", {x, T(b, "mul", {w, diff})});
    Value high = T(b, "sub", {y, T(b, "mul", {diff, T(b, "rsub", {w, Int(1)})})});
    Value small = T(b, "lt", {T(b, "abs", {w}), F(0.5)});
    if (!b.is_tensor(small))  // a weight known only at run time: its test as a 0-dim tensor, which `where` broadcasts
      small = b.prim("full", {Value::dims({}), small, Value(DType::Bool), Value(ir::Str{tensor(b, "ltorch.lerp", a[0]).device})});
    return cast(b, T(b, "where", {small, low, high}), d);
  });
  for (const char* name : {"addcmul", "addcdiv"}) {
    bool mul = std::string(name) == "addcmul";
    def_decomposed(name, kElementwise, {kInput, req("tensor1"), req("tensor2"), opt("value", Int(1))},
                   [mul](Builder& b, const Args& a) {
                     DType d = result_type(b, {a[0], a[1], a[2]});
                     if (!mul && !is_float(d)) fail("ltorch.addcdiv", "integer division with addcdiv is not supported");
                     // ATen has no bool kernel ("addcmul_cpu_out" not implemented for 'Bool'): eager raises its error.
                     if (d == DType::Bool) throw NotNative("addcmul of bool tensors, which torch does not implement");
                     // Computed in float32 for half types and rounded once, as ATen's kernel does.
                     const DType c = opmath(d);
                     require_convertible(b, mul ? "ltorch.addcmul" : "ltorch.addcdiv", "value", a[3], c);
                     Value value = a[3];
                     // Over integers ATen converts the value to the dtype first: 0.5 scales by 0.
                     if (!is_float(d) && d != DType::Bool) {
                       if (!value.is_number()) throw NotNative("addcmul of integers with a value known only at run time");
                       if (std::holds_alternative<double>(value.v)) {
                         const double v = std::trunc(value.as_double());
                         if (!(std::abs(v) < 9.2e18)) throw NotNative("addcmul of integers with a value beyond int64");
                         value = Int(static_cast<int64_t>(v));
                       }
                     }
                     // value * t1 first, then t2, as ATen's kernel (t1 * t2 could overflow where v * t1 * t2 does not).
                     Value t1 = cast(b, a[1], c);
                     if (!(value == Int(1))) t1 = T(b, "mul", {value, t1});
                     Value prod = T(b, mul ? "mul" : "div", {t1, cast(b, a[2], c)});
                     return cast(b, T(b, "add", {cast(b, a[0], c), prod}), d);
                   });
  }
  // torch.special functions.
  unary("ndtr", [](Builder& b, const Args& a) {
    DType d = float_result(b, {a[0]});
    Value x = cast(b, a[0], d);
    return T(b, "mul", {T(b, "erfc", {T(b, "mul", {x, F(-M_SQRT1_2)})}), F(0.5)});
  });
  unary("entr", [](Builder& b, const Args& a) {
    DType d = float_result(b, {a[0]});
    Value x = cast(b, a[0], d);
    Value r = T(b, "neg", {T(b, "mul", {x, T(b, "log", {x})})});
    r = T(b, "where", {T(b, "eq", {x, Int(0)}), F(0.0), r});
    r = T(b, "where", {T(b, "lt", {x, Int(0)}), F(-INFINITY), r});
    return T(b, "where", {T(b, "isnan", {x}), x, r});
  });
  binary("xlog1py", x_times_log("log1p"));
}

// ---- activations (torch.nn.functional) ----

Value where_positive(Builder& b, const Value& x, const Value& neg) {
  return T(b, "where", {T(b, "gt", {x, Int(0)}), x, neg});
}

void no_inplace(const Value& v, const char* what) {
  if (!v.is_none() && v.as_bool()) throw NotNative(what);
}

void register_activations() {
  auto act = [](const std::string& name, std::vector<ir::Param> extra, DecompFn f) {
    std::vector<ir::Param> ps{kInput};
    ps.insert(ps.end(), extra.begin(), extra.end());
    def_decomposed(name, kElementwise, std::move(ps), std::move(f));
  };
  act("hardtanh", {opt("min_val", F(-1.0)), opt("max_val", F(1.0)), opt("inplace", Value(false))},
      [](Builder& b, const Args& a) {
        no_inplace(a[3], "in-place hardtanh");
        DType d = b.meta(a[0]).dtype;
        if (d == DType::Bool) fail("ltorch.hardtanh", "not supported for bool");
        if (ir::is_integer(d)) {  // torch clamps integers with integer bounds (the result stays integer)
          return T(b, "clamp", {a[0], truncated_int("ltorch.hardtanh", "min_val", a[1]),
                                truncated_int("ltorch.hardtanh", "max_val", a[2])});
        }
        return T(b, "clamp", {a[0], a[1], a[2]});
      });
  act("relu6", {opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[1], "in-place relu6");
    return b.torch("hardtanh", {a[0], F(0.0), F(6.0)});
  });
  // hardsigmoid and hardswish: one ATen kernel each, which computes a half-precision input in float32 and rounds
  // once (rounding after each step was 1-2 ulp off in float16).
  act("hardsigmoid", {opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[1], "in-place hardsigmoid");
    require_float(b, "ltorch.hardsigmoid", a[0]);
    const DType d = b.meta(a[0]).dtype;
    const Value x = cast(b, a[0], opmath(d));
    return cast(b, T(b, "div", {T(b, "clamp", {T(b, "add", {x, F(3.0)}), F(0.0), F(6.0)}), F(6.0)}), d);
  });
  act("hardswish", {opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[1], "in-place hardswish");
    require_float(b, "ltorch.hardswish", a[0]);
    const DType d = b.meta(a[0]).dtype;
    const Value x = cast(b, a[0], opmath(d));
    Value r6 = T(b, "clamp", {T(b, "add", {x, F(3.0)}), F(0.0), F(6.0)});
    return cast(b, T(b, "div", {T(b, "mul", {x, r6}), F(6.0)}), d);
  });
  // The ELU family is one ATen kernel, which computes a half-precision input in float32 and rounds once.
  act("elu", {opt("alpha", F(1.0)), opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[2], "in-place elu");
    require_float(b, "ltorch.elu", a[0]);
    const DType d = b.meta(a[0]).dtype;
    require_convertible(b, "ltorch.elu", "alpha", a[1], opmath(d));
    const Value x = cast(b, a[0], opmath(d));
    return cast(b, where_positive(b, x, T(b, "mul", {T(b, "expm1", {x}), a[1]})), d);
  });
  act("celu", {opt("alpha", F(1.0)), opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[2], "in-place celu");
    require_float(b, "ltorch.celu", a[0]);
    const DType d = b.meta(a[0]).dtype;
    require_convertible(b, "ltorch.celu", "alpha", a[1], opmath(d));
    const Value x = cast(b, a[0], opmath(d));
    return cast(b, where_positive(b, x, T(b, "mul", {T(b, "expm1", {T(b, "div", {x, a[1]})}), a[1]})), d);
  });
  act("selu", {opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[1], "in-place selu");
    require_float(b, "ltorch.selu", a[0]);
    const DType d = b.meta(a[0]).dtype;
    const Value x = cast(b, a[0], opmath(d));
    Value r = where_positive(b, x, T(b, "mul", {T(b, "expm1", {x}), F(kSeluAlpha)}));
    return cast(b, T(b, "mul", {r, F(kSeluScale)}), d);
  });
  act("leaky_relu", {opt("negative_slope", F(0.01)), opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[2], "in-place leaky_relu");
    require_float(b, "ltorch.leaky_relu", a[0]);
    require_convertible(b, "ltorch.leaky_relu", "negative_slope", a[1], opmath(b.meta(a[0]).dtype));
    return where_positive(b, a[0], T(b, "mul", {a[0], a[1]}));
  });
  act("log_sigmoid", {}, [](Builder& b, const Args& a) {
    require_float(b, "ltorch.log_sigmoid", a[0]);
    DType d = b.meta(a[0]).dtype;
    Value x = cast(b, a[0], opmath(d));
    Value r = T(b, "sub", {T(b, "minimum", {x, Int(0)}), T(b, "log1p", {T(b, "exp", {T(b, "neg", {T(b, "abs", {x})})})})});
    return cast(b, r, d);
  });
  act("softplus", {opt("beta", F(1.0)), opt("threshold", F(20.0))}, [](Builder& b, const Args& a) {
    require_float(b, "ltorch.softplus", a[0]);
    DType d = b.meta(a[0]).dtype;
    require_convertible(b, "ltorch.softplus", "beta", a[1], opmath(d));
    require_convertible(b, "ltorch.softplus", "threshold", a[2], opmath(d));
    Value x = cast(b, a[0], opmath(d));
    Value bx = T(b, "mul", {x, a[1]});
    Value soft = T(b, "div", {T(b, "log1p", {T(b, "exp", {bx})}), a[1]});
    return cast(b, T(b, "where", {T(b, "gt", {bx, a[2]}), x, soft}), d);
  });
  act("mish", {opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[1], "in-place mish");
    require_float(b, "ltorch.mish", a[0]);
    DType d = b.meta(a[0]).dtype;
    Value x = cast(b, a[0], opmath(d));
    return cast(b, T(b, "mul", {x, T(b, "tanh", {b.torch("softplus", {x})})}), d);
  });
  act("softsign", {}, [](Builder& b, const Args& a) {
    return T(b, "div", {a[0], T(b, "add", {T(b, "abs", {a[0]}), Int(1)})});
  });
  act("tanhshrink", {}, [](Builder& b, const Args& a) { return T(b, "sub", {a[0], T(b, "tanh", {a[0]})}); });
  act("hardshrink", {opt("lambd", F(0.5))}, [](Builder& b, const Args& a) {
    require_float(b, "ltorch.hardshrink", a[0]);
    require_convertible(b, "ltorch.hardshrink", "lambd", a[1], b.meta(a[0]).dtype);
    // ATen: 0 where -lambd <= x <= lambd, else x (a NaN stays NaN).
    return T(b, "where", {T(b, "le", {T(b, "abs", {a[0]}), a[1]}), F(0.0), a[0]});
  });
  act("softshrink", {opt("lambd", F(0.5))}, [](Builder& b, const Args& a) {
    require_float(b, "ltorch.softshrink", a[0]);
    // ATen computes a half-precision input in float32 with lambd unrounded, and rounds once.
    const DType d = b.meta(a[0]).dtype;
    const Value x = cast(b, a[0], opmath(d));
    Value up = T(b, "sub", {x, a[1]}), down = T(b, "add", {x, a[1]});
    // ATen: x * 0 between the bounds (a NaN stays NaN, a negative x gives -0).
    Value r = T(b, "where", {T(b, "gt", {x, a[1]}), up, T(b, "mul", {x, Int(0)})});
    return cast(b, T(b, "where", {T(b, "lt", {x, scaled_number(b, a[1], -1.0)}), down, r}), d);
  });
  act("threshold", {req("threshold"), req("value"), opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    no_inplace(a[3], "in-place threshold");
    DType d = b.meta(a[0]).dtype;
    if (d == DType::Bool) fail("ltorch.threshold", "not supported for bool");
    require_convertible(b, "ltorch.threshold", "threshold", a[1], opmath(d));
    require_convertible(b, "ltorch.threshold", "value", a[2], d);
    Value value = is_float(d) ? a[2] : truncated_int("ltorch.threshold", "value", a[2]);
    // ATen compares a half-precision input with the threshold in float32, the threshold unrounded.
    return T(b, "where", {T(b, "le", {cast(b, a[0], opmath(d)), a[1]}), value, a[0]});
  });
  act("glu", {opt("dim", Int(-1))}, [](Builder& b, const Args& a) {
    require_float(b, "ltorch.glu", a[0]);
    const TensorMeta& m = b.meta(a[0]);
    int64_t d = canonical_dim("ltorch.glu", a[1].as_int(), m.ndim());
    if (m.ndim() == 0 || m.shape[d].divide(2, "ltorch.glu") * 2 != m.shape[d])
      fail("ltorch.glu", "halving dimension must be even");
    Value halves = b.torch("chunk", {a[0], Int(2), Int(d)});
    return T(b, "mul", {halves.items()[0], T(b, "sigmoid", {halves.items()[1]})});
  });
  def_decomposed("prelu", kElementwise, {kInput, req("weight")}, [](Builder& b, const Args& a) {
    require_float(b, "ltorch.prelu", a[0]);
    const TensorMeta& m = b.meta(a[0]);
    const TensorMeta& w = tensor(b, "ltorch.prelu", a[1]);
    Value weight = a[1];
    if (w.numel() != 1) {
      const std::string what = "weight must have one element or one per channel";
      if (m.ndim() < 2 || w.ndim() != 1) fail("ltorch.prelu", what);
      if (w.shape[0] != m.shape[1]) {
        if (!w.shape[0].is_constant() || !m.shape[1].is_constant())
          throw ir::SymbolicShapeError("ltorch.prelu: " + what);
        fail("ltorch.prelu", what);
      }
      Shape shape(m.ndim(), 1);
      shape[1] = w.shape[0];
      weight = b.torch("reshape", {a[1], Value::dims(shape)});
    } else if (w.ndim() > m.ndim() && m.ndim() > 0) {
      fail("ltorch.prelu", "weight has more dims than input");
    }
    return where_positive(b, a[0], T(b, "mul", {weight, a[0]}));
  });
}

// ATen's backwards of the piecewise-linear activations, which their VJP rules (ops/vjp_rules.cc) emit: the
// gradient masked by where the input lies. Each is one op rather than its where so that a backward run with torch
// ops (create_graph=True) runs ATen's, which autograd connects to `self` with a zero derivative, as eager does: a
// second backward gives that input zeros, not None, and the first gradient requires grad (torch.where's mask
// connects nothing). `self` is the input, or relu's output for threshold_backward (as eager's relu saves it).
void register_activation_backwards() {
  auto backward = [](const std::string& name, std::vector<ir::Param> extra, DecompFn f) {
    std::vector<ir::Param> ps{req("grad_output"), req("self")};
    ps.insert(ps.end(), extra.begin(), extra.end());
    def_decomposed(name, kElementwise, std::move(ps), std::move(f));
  };
  // 0 where self <= threshold (a NaN takes the gradient). ATen compares a half-precision self in float32 with the
  // threshold unrounded, as threshold's forward; 0 (relu's) compares alike in either type.
  backward("threshold_backward", {req("threshold")}, [](Builder& b, const Args& a) {
    const bool zero = a[2].is_number() && !a[2].is_symbolic() && a[2].as_double() == 0.0;
    const Value self = zero ? a[1] : cast(b, a[1], opmath(b.meta(a[1]).dtype));
    return T(b, "where", {T(b, "le", {self, a[2]}), F(0.0), a[0]});
  });
  // The gradient where min_val < self < max_val, as torch's vectorized CPU kernel (a NaN takes none; its scalar
  // loop, which serves a tensor's last few elements, gives a NaN the gradient).
  backward("hardtanh_backward", {req("min_val"), req("max_val")}, [](Builder& b, const Args& a) {
    Value inside = T(b, "logical_and", {T(b, "gt", {a[1], a[2]}), T(b, "lt", {a[1], a[3]})});
    return T(b, "where", {inside, a[0], F(0.0)});
  });
  // The gradient where |self| > lambd, as torch's vectorized CPU kernels (a NaN takes none).
  for (const char* name : {"hardshrink_backward", "softshrink_backward"}) {
    backward(name, {req("lambd")}, [](Builder& b, const Args& a) {
      return T(b, "where", {T(b, "gt", {T(b, "abs", {a[1]}), a[2]}), a[0], F(0.0)});
    });
  }
  // grad where self > 0, else grad * negative_slope (a NaN slope reaches only that side), computed in float32
  // for half-precision inputs as ATen does.
  backward("leaky_relu_backward", {req("negative_slope"), req("self_is_result")}, [](Builder& b, const Args& a) {
    const DType d = b.meta(a[1]).dtype, math = opmath(d);
    const Value x = cast(b, a[1], math), g = cast(b, a[0], math);
    return cast(b, T(b, "where", {T(b, "gt", {x, F(0.0)}), g, T(b, "mul", {g, a[2]})}), d);
  });
}

// ---- reductions ----

Value keep(Builder& b, const Value& r, const TensorMeta& in, const std::vector<int64_t>& dims, bool keepdim) {
  if (!keepdim) return r;
  Shape shape = in.shape;
  for (int64_t d : dims) shape[d] = 1;
  if (shape == b.meta(r).shape) return r;
  return b.prim("reshape", {r, Value::dims(shape)});
}

Value variance(Builder& b, const Args& a, const char* op) {
  const TensorMeta m = tensor(b, op, a[0]);
  if (!is_float(m.dtype)) fail(op, "expected a floating-point input");
  auto [dims, correction] = variance_args(b, a, op);
  Value v = b.prim("var", {a[0], Value::ints(dims), F(correction)});
  return keep(b, v, m, dims, a[3].as_bool());
}

// std: the square root of the variance computed in torch's accumulation type, rounded to the input's dtype once
// (ATen's std_var kernels): float32 for half inputs (a float16 std above 256 has a variance beyond 65504) and, on the
// CPU, double for float32 ones (data near 1e20 or 1e-25 has a variance beyond float32's range, and a std within it).
Value standard_deviation(Builder& b, const Args& a, const char* op) {
  const TensorMeta m = tensor(b, op, a[0]);
  if (!ir::is_floating(m.dtype)) return T(b, "sqrt", {variance(b, a, op)});
  const DType acc = m.dtype == DType::Float32 && m.device == "cpu" ? DType::Float64 : opmath(m.dtype);
  Args wide = a;
  wide[0] = cast(b, a[0], acc);
  return cast(b, T(b, "sqrt", {variance(b, wide, op)}), m.dtype);
}

void register_reductions() {
  const std::vector<ir::Param> var_params{kInput, opt("dim", Value()), opt("unbiased", Value()), opt("keepdim", Value(false)),
                                          opt("correction", Value())};
  def_decomposed("var", kReduction, var_params, [](Builder& b, const Args& a) { return variance(b, a, "ltorch.var"); });
  def_decomposed("std", kReduction, var_params,
                 [](Builder& b, const Args& a) { return standard_deviation(b, a, "ltorch.std"); });
  def_decomposed("var_mean", kReduction, var_params, [](Builder& b, const Args& a) {
    Value v = variance(b, a, "ltorch.var_mean");
    Value dim = std::holds_alternative<bool>(a[1].v) ? Value() : a[1];
    return Value::tuple({v, b.torch("mean", {a[0], dim, a[3]})});
  });
  def_decomposed("std_mean", kReduction, var_params, [](Builder& b, const Args& a) {
    Value v = standard_deviation(b, a, "ltorch.std_mean");
    Value dim = std::holds_alternative<bool>(a[1].v) ? Value() : a[1];
    return Value::tuple({v, b.torch("mean", {a[0], dim, a[3]})});
  });
  def_decomposed("logsumexp", kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false))},
                 [](Builder& b, const Args& a) {
                   const TensorMeta m = b.meta(a[0]);
                   // (amax is real only: torch runs, and differentiates, a complex logsumexp.)
                   if (ir::is_complex(m.dtype)) throw NotNative("logsumexp of a complex tensor");
                   DType d = is_float(m.dtype) ? m.dtype : DType::Float32;
                   auto dims = reduction_dims("ltorch.logsumexp", m, a[1]);
                   Value x = cast(b, a[0], d);
                   bool empty = false;
                   for (int64_t dd : dims) empty |= m.shape[dd] == 0;
                   if (m.numel() == 0 || empty)
                     return T(b, "log", {b.torch("sum", {T(b, "exp", {x}), Value::ints(dims), a[2]})});
                   Value mx = b.torch("amax", {x, Value::ints(dims), Value(true)});
                   mx = T(b, "where", {T(b, "isinf", {mx}), F(0.0), mx});
                   Value s = b.torch("sum", {T(b, "exp", {T(b, "sub", {x, mx})}), Value::ints(dims), Value(true)});
                   Value r = T(b, "add", {T(b, "log", {s}), mx});
                   if (!a[2].as_bool() && !dims.empty()) r = b.torch("squeeze", {r, Value::ints(dims)});
                   return r;
                 });
  for (const char* name : {"all", "any"}) {
    bool all = std::string(name) == "all";
    def_decomposed(name, kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false))},
                   [all](Builder& b, const Args& a) {
                     const TensorMeta m = b.meta(a[0]);
                     auto dims = reduction_dims(all ? "ltorch.all" : "ltorch.any", m, a[1]);
                     Value x = m.dtype == DType::Bool ? a[0] : T(b, "ne", {a[0], Int(0)});
                     // all = no zero; any = some nonzero, counted in int64.
                     Value counted = all ? T(b, "logical_not", {x}) : x;
                     Value n = b.torch("sum", {counted, Value::ints(dims), a[2]});
                     return T(b, all ? "eq" : "ne", {n, Int(0)});
                   });
  }
  def_decomposed("count_nonzero", kReduction, {kInput, opt("dim", Value())}, [](Builder& b, const Args& a) {
    const TensorMeta m = b.meta(a[0]);
    auto dims = reduction_dims("ltorch.count_nonzero", m, a[1]);
    return b.torch("sum", {T(b, "ne", {a[0], Int(0)}), Value::ints(dims)});
  });
  def_decomposed("nansum", kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false)), opt("dtype", Value())},
                 [](Builder& b, const Args& a) {
                   Value x = is_float(b.meta(a[0]).dtype) ? T(b, "where", {T(b, "isnan", {a[0]}), Int(0), a[0]}) : a[0];
                   return b.torch("sum", {x, a[1], a[2], a[3]});
                 });
  def_decomposed("nanmean", kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false)), opt("dtype", Value())},
                 [](Builder& b, const Args& a) {
                   DType d = a[3].is_none() ? b.meta(a[0]).dtype : a[3].as_dtype();
                   if (!is_float(d)) fail("ltorch.nanmean", "expected a floating-point input or dtype");
                   Value x = cast(b, a[0], d);
                   Value notnan = T(b, "logical_not", {T(b, "isnan", {x})});
                   Value s = b.torch("nansum", {x, a[1], a[2]});
                   Value n = b.torch("sum", {notnan, a[1], a[2]});
                   return T(b, "div", {s, n});
                 });
  // max/min along a dim: (values, indices).
  for (const char* name : {"max_dim", "min_dim"}) {
    bool is_max = std::string(name) == "max_dim";
    def_decomposed(name, kReduction, {kInput, req("dim"), opt("keepdim", Value(false))}, [is_max](Builder& b, const Args& a) {
      const TensorMeta m = b.meta(a[0]);
      int64_t d = canonical_dim(is_max ? "ltorch.max" : "ltorch.min", a[1].as_int(), m.ndim());
      if (m.ndim() > 0 && m.shape[d] == 0) fail(is_max ? "ltorch.max" : "ltorch.min", "cannot reduce a zero-size dimension");
      Value values = b.torch(is_max ? "amax" : "amin", {a[0], Value::ints({d}), a[2]});
      // torch.argmax takes no bool tensor; torch.max(bool, dim) does (False < True, as 0 < 1).
      Value ordered = m.dtype == DType::Bool ? cast(b, a[0], DType::UInt8) : a[0];
      Value indices = b.torch(is_max ? "argmax" : "argmin", {ordered, Int(d), a[2]});
      return Value::tuple({values, indices});
    });
  }
  def_decomposed("aminmax", kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false))},
                 [](Builder& b, const Args& a) {
                   const TensorMeta m = b.meta(a[0]);
                   Value dims = a[1].is_none() ? Value::tuple({}) : Value::ints({a[1].as_int()});
                   if (m.numel() == 0) fail("ltorch.aminmax", "cannot reduce an empty tensor");
                   if (a[1].is_none() && a[2].as_bool()) {
                     std::vector<int64_t> ones(m.ndim(), 1);
                     return Value::tuple({b.torch("reshape", {b.torch("amin", {a[0]}), Value::ints(ones)}),
                                          b.torch("reshape", {b.torch("amax", {a[0]}), Value::ints(ones)})});
                   }
                   return Value::tuple({b.torch("amin", {a[0], dims, a[2]}), b.torch("amax", {a[0], dims, a[2]})});
                 });
  // vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None), computed in the (given) float dtype.
  def_decomposed("vector_norm", kReduction,
                 {kInput, opt("ord", F(2.0)), opt("dim", Value()), opt("keepdim", Value(false)), opt("dtype", Value())},
                 [](Builder& b, const Args& a) {
                   const TensorMeta m = b.meta(a[0]);
                   if (!is_float(m.dtype)) fail("ltorch.vector_norm", "expected a floating-point input");
                   DType d = a[4].is_none() ? m.dtype : a[4].as_dtype();
                   DType acc = opmath(d);
                   double ord = a[1].as_double();
                   auto dims = reduction_dims("ltorch.vector_norm", m, a[2]);
                   Value x = T(b, "abs", {cast(b, a[0], acc)});
                   Value dv = Value::ints(dims);
                   Value r;
                   if (std::isinf(ord)) {
                     if (m.numel() == 0) fail("ltorch.vector_norm", "cannot compute the inf norm of an empty tensor");
                     // The prims' max/min, whose rule gives a NaN of the row its gradient (sgn(NaN) then makes it 0,
                     // as eager's norm backward); the torch op amax gives a NaN row NaN gradients.
                     r = keep(b, b.prim(ord > 0 ? "amax" : "amin", {x, dv}), m, dims, a[3].as_bool());
                   } else if (ord == 0.0) {
                     r = b.torch("sum", {cast(b, T(b, "ne", {x, Int(0)}), acc), dv, a[3]});
                   } else if (ord == 1.0) {
                     r = b.torch("sum", {x, dv, a[3]});
                   } else {
                     // The root of a zero sum (a zero vector) has eager's gradient, 0 (ATen's norm_backward masks
                     // it): the chain rule through sqrt/pow at 0 is inf * 0 = NaN. The root reads 1 there instead
                     // and the result selects 0; elsewhere the selects pass values and gradients through.
                     // For ord < 1, |x|^ord of a zero element (0, or inf for a negative ord) is selected from |x| = 1
                     // in its place: its derivative ord |x|^(ord - 1) is infinite at 0, and ATen's masks it to 0.
                     Value terms;
                     if (ord == 2.0) {
                       terms = T(b, "mul", {x, x});
                     } else if (ord < 1.0) {
                       Value zero_element = T(b, "eq", {x, Int(0)});
                       const double at_zero = ord > 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
                       terms = T(b, "where", {zero_element, F(at_zero),
                                              T(b, "pow", {T(b, "where", {zero_element, F(1.0), x}), F(ord)})});
                     } else {
                       terms = T(b, "pow", {x, F(ord)});
                     }
                     Value sum = b.torch("sum", {terms, dv, a[3]});
                     Value zero = T(b, "eq", {sum, Int(0)});
                     Value safe = T(b, "where", {zero, F(1.0), sum});
                     Value root = ord == 2.0 ? T(b, "sqrt", {safe}) : T(b, "pow", {safe, F(1.0 / ord)});
                     // 0^(1 / ord): 0, or inf for a negative ord (a vector of infinities, or of huge values whose
                     // negative powers underflow).
                     r = T(b, "where", {zero, F(ord > 0.0 ? 0.0 : std::numeric_limits<double>::infinity()), root});
                   }
                   return cast(b, r, d);
                 });
  // Scans and sorts: one torch-level symbol each, with a shape and dtype rule.
  for (const char* name : {"cumsum", "cumprod"}) {
    def_meta(name, kReduction, {kInput, req("dim"), opt("dtype", Value())}, [name](Builder& b, const Args& a) {
      TensorMeta m = tensor(b, name, a[0]);
      canonical_dim(std::string("ltorch.") + name, a[1].as_int(), m.ndim());
      m.dtype = !a[2].is_none() ? a[2].as_dtype()
                : (ir::is_integer(m.dtype) || m.dtype == DType::Bool) ? DType::Int64 : m.dtype;
      m.requires_grad = false;
      return Value(ir::ProxyRef{b.new_tensor(m)});
    });
  }
  for (const char* name : {"cummax", "cummin"}) {
    def_meta(name, kReduction, {kInput, req("dim")}, [name](Builder& b, const Args& a) {
      TensorMeta m = tensor(b, name, a[0]);
      canonical_dim(std::string("ltorch.") + name, a[1].as_int(), m.ndim());
      m.requires_grad = false;
      TensorMeta idx = m;
      idx.dtype = DType::Int64;
      return Value::tuple({Value(ir::ProxyRef{b.new_tensor(m)}), Value(ir::ProxyRef{b.new_tensor(idx)})});
    });
  }
  def_meta("logcumsumexp", kReduction, {kInput, req("dim")}, [](Builder& b, const Args& a) {
    TensorMeta m = tensor(b, "logcumsumexp", a[0]);
    if (!is_float(m.dtype)) fail("ltorch.logcumsumexp", "expected a floating-point input");
    canonical_dim("ltorch.logcumsumexp", a[1].as_int(), m.ndim());
    m.requires_grad = false;
    return Value(ir::ProxyRef{b.new_tensor(m)});
  });
  def_meta("sort", 0, {kInput, opt("dim", Int(-1)), opt("descending", Value(false)), opt("stable", Value(false))},
           [](Builder& b, const Args& a) {
             TensorMeta m = tensor(b, "sort", a[0]);
             if (std::holds_alternative<bool>(a[1].v)) throw NotNative("sort(stable, dim, descending) overload");
             canonical_dim("ltorch.sort", a[1].as_int(), m.ndim());
             m.requires_grad = false;
             TensorMeta idx = m;
             idx.dtype = DType::Int64;
             return Value::tuple({Value(ir::ProxyRef{b.new_tensor(m)}), Value(ir::ProxyRef{b.new_tensor(idx)})});
           });
  def_meta("argsort", 0, {kInput, opt("dim", Int(-1)), opt("descending", Value(false)), opt("stable", Value(false))},
           [](Builder& b, const Args& a) {
             TensorMeta m = tensor(b, "argsort", a[0]);
             if (std::holds_alternative<bool>(a[1].v)) throw NotNative("argsort(stable, dim, descending) overload");
             canonical_dim("ltorch.argsort", a[1].as_int(), m.ndim());
             m.requires_grad = false;
             m.dtype = DType::Int64;
             return Value(ir::ProxyRef{b.new_tensor(m)});
           });
  def_meta("topk", 0, {kInput, req("k"), opt("dim", Int(-1)), opt("largest", Value(true)), opt("sorted", Value(true))},
           [](Builder& b, const Args& a) {
             TensorMeta m = tensor(b, "topk", a[0]);
             int64_t d = canonical_dim("ltorch.topk", a[2].as_int(), m.ndim());
             const Dim k = a[1].as_dim();
             const Dim n = m.ndim() == 0 ? 1 : m.shape[d];
             if (k < 0 || k > n) fail("ltorch.topk", "k out of range");
             if (m.ndim() > 0) m.shape[d] = k;
             m.requires_grad = false;
             TensorMeta idx = m;
             idx.dtype = DType::Int64;
             return Value::tuple({Value(ir::ProxyRef{b.new_tensor(m)}), Value(ir::ProxyRef{b.new_tensor(idx)})});
           });
}

}  // namespace

std::pair<std::vector<int64_t>, double> variance_args(Builder& b, const Args& a, const char* op) {
  Value dim = a[1];
  double correction = 1.0;
  if (std::holds_alternative<bool>(dim.v)) {  // var(x, unbiased)
    correction = dim.as_bool() ? 1.0 : 0.0;
    dim = Value();
  }
  if (!a[2].is_none()) correction = a[2].as_bool() ? 1.0 : 0.0;
  if (!a[4].is_none()) correction = a[4].as_double();
  return {reduction_dims(op, tensor(b, op, a[0]), dim), correction};
}

void register_torch_math() {
  register_elementwise();
  register_activations();
  register_activation_backwards();
  register_reductions();
}

}  // namespace thunder::ops
