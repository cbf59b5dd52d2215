// Torch-level elementwise ops: type promotion and broadcasting, then prims.
#include <cmath>
#include <optional>
#include <set>

#include "ops/torch_common.h"

namespace thunder::ops {
namespace {

using ir::kElementwise;
const ir::Param kInput = req("input");

// The bitwise ops are defined on integers, and all but the shifts on bool (ATen's kernels exist for those
// dtypes only): an operand that promotes them to another dtype is an error naming it, as eager raises.
void check_bitwise(const Builder& b, const std::string& op, const Args& a) {
  const bool shift = op.find("shift") != std::string::npos;
  auto ok = [&](DType d) { return ir::is_integer(d) || (!shift && d == DType::Bool); };
  const DType d = result_type(b, a);
  if (ok(d)) return;
  static const char* const kNames[] = {"input", "other"};
  size_t culprit = 0;
  while (culprit + 1 < a.size() && ok(result_type(b, {a[culprit]}))) ++culprit;
  const std::string what = b.is_tensor(a[culprit]) ? std::string(ir::dtype_name(b.meta(a[culprit]).dtype)) + " tensor"
                                                    : "non-integer number";
  fail("ltorch." + op, "not implemented for " + std::string(ir::dtype_name(d)) + ": argument '" + kNames[culprit] +
                           "' is a " + what + "; expected integer" + (shift ? "" : " or bool") + " operands");
}

// The dtype rules of ops whose ATen kernels exist for some dtypes only (what eager raises NotImplementedError
// for): the bitwise ops, and rounding and abs, which have no bool kernel.
void check_dtypes(const Builder& b, const std::string& op, const Args& a) {
  if (op.rfind("bitwise_", 0) == 0) return check_bitwise(b, op, a);
  static const std::set<std::string> kNoBool = {"abs", "floor", "ceil", "round", "trunc"};
  if (kNoBool.count(op) && b.is_tensor(a[0]) && b.meta(a[0]).dtype == DType::Bool)
    fail("ltorch." + op, "not implemented for bool: argument 'input' is a bool tensor");
}

void unary(const std::string& name, Promotion p, const std::string& prim) {
  def_decomposed(name, kElementwise, {kInput}, [name, prim, p](Builder& b, const Args& a) {
    check_dtypes(b, name, a);
    return elementwise(b, prim, {a[0]}, p);
  });
}

void binary(const std::string& name, Promotion p, const std::string& prim) {
  def_decomposed(name, kElementwise, {kInput, req("other")}, [name, prim, p](Builder& b, const Args& a) {
    check_dtypes(b, name, a);
    return elementwise(b, prim, {a[0], a[1]}, p);
  });
}

// ATen's CPU kernels for mul and the divisions (true, trunc, floor) read their second operand as a scalar in the
// op's math type when it is a 0-dim tensor of another dtype and the result is float16 or bfloat16: x * s computes
// float(x) * float(s) and rounds once, exactly as x * s.item() does (BinaryOpsKernel.cpp reads it with
// original_scalar_value), instead of rounding s to the result dtype first as every other binary op does.
bool second_operand_in_opmath(Builder& b, const Args& a) {
  if (!b.is_tensor(a[0]) || !b.is_tensor(a[1])) return false;
  const TensorMeta &x = b.meta(a[0]), &s = b.meta(a[1]);
  const DType d = result_type(b, {a[0], a[1]});
  return x.ndim() > 0 && s.ndim() == 0 && s.device == "cpu" && x.device == "cpu" && is_half(d) && s.dtype != d;
}

// op(a), or, where ATen reads the second operand as a float32 scalar (second_operand_in_opmath), op of both operands
// cast to float32, rounded once to the result dtype.
// A number as the *first* operand is not read so: ATen wraps it in a tensor, which the iterator casts to the result
// dtype (torch.mul(70000, half) is inf * x, where x * 70000 multiplies in float32).
template <class Op>
Value with_scalar_rule(Builder& b, const Args& a, Op op) {
  if (b.is_tensor(a[1]) && (std::holds_alternative<double>(a[0].v) || std::holds_alternative<int64_t>(a[0].v))) {
    const DType d = result_type(b, {a[0], a[1]});
    if (is_half(d)) return op(Args{Value(ir::round_to(a[0].as_double(), d)), a[1]});
  }
  if (!second_operand_in_opmath(b, a)) return op(a);
  const DType d = result_type(b, {a[0], a[1]});
  return cast(b, op(Args{cast(b, a[0], DType::Float32), cast(b, a[1], DType::Float32)}), d);
}

// A binary op that follows ATen's scalar rule of mul and the divisions.
void scalar_rule_binary(const std::string& name, Promotion p, const std::string& prim) {
  def_decomposed(name, kElementwise, {kInput, req("other")}, [prim, p](Builder& b, const Args& a) {
    return with_scalar_rule(b, a, [&](const Args& x) { return elementwise(b, prim, {x[0], x[1]}, p); });
  });
}

// other * alpha of two numbers known at trace time, as Python computes it (ints stay ints), so that no op computes
// it at run time (x.add_(0.5, alpha=2) left a prims.mul(0.5, 2) for every call); none for a tensor, a number read
// at run time, a symbolic size, a bool, or an int product beyond int64.
std::optional<Value> literal_product(const Value& other, const Value& alpha) {
  for (const Value* v : {&other, &alpha})
    if (!std::holds_alternative<int64_t>(v->v) && !std::holds_alternative<double>(v->v)) return std::nullopt;
  if (std::holds_alternative<double>(other.v) || std::holds_alternative<double>(alpha.v))
    return Value(other.as_double() * alpha.as_double());
  int64_t product = 0;
  if (__builtin_mul_overflow(other.as_int(), alpha.as_int(), &product)) return std::nullopt;
  return Value(product);
}

// add and sub take alpha: input + alpha * other.
void add_like(const std::string& name) {
  def_decomposed(name, kElementwise, {kInput, req("other"), opt("alpha", Value(int64_t{1}))},
                 [name](Builder& b, const Args& a) {
                   if (name == "sub")  // as ATen refuses it (a bool number is a bool operand too)
                     for (const Value& v : {a[0], a[1]})
                       if ((b.is_tensor(v) && b.meta(v).dtype == DType::Bool) || std::holds_alternative<bool>(v.v))
                         fail("ltorch.sub", "subtraction with a bool operand is not supported (use ~ or logical_not "
                                            "to invert a mask, ^ or logical_xor for two masks)");
                   if (a[2] == Value(int64_t{1})) return elementwise(b, name, {a[0], a[1]}, Promotion::Default);
                   // ATen computes input + alpha * other in one kernel: for half precision in float32 with alpha
                   // rounded to the result dtype (as its vectorized loop does), and rounded once.
                   const DType d = result_type(b, {a[0], a[1]});
                   // ATen's alpha_check
                   if (std::holds_alternative<bool>(a[2].v) && d != DType::Bool)
                     fail("ltorch." + name, "a bool alpha is only supported for bool results");
                   if (std::holds_alternative<double>(a[2].v) && !ir::is_floating(d) && !ir::is_complex(d))
                     fail("ltorch." + name, "for integral inputs, argument 'alpha' must not be a floating point number");
                   require_convertible(b, "ltorch." + name, "alpha", a[2], d);
                   if (!is_half(d) || !a[2].is_number() || std::holds_alternative<bool>(a[2].v)) {
                     const std::optional<Value> product = literal_product(a[1], a[2]);
                     if (product) return elementwise(b, name, {a[0], *product}, Promotion::Default);
                     // alpha * other in the result dtype, other converted first, as ATen's kernel reads its
                     // operands: an int8 other times 3 wrapped, a bfloat16 one rounded, in other's own dtype.
                     const bool narrower = b.is_tensor(a[1]) && b.meta(a[1]).dtype != d;
                     return elementwise(b, name, {a[0], b.torch("mul", {narrower ? cast(b, a[1], d) : a[1], a[2]})},
                                        Promotion::Default);
                   }
                   // (A number operand is rounded to the result dtype first too, as ATen's kernel reads it: rsub's
                   // is the input.)
                   const auto operand = [&](const Value& v) {
                     return v.is_number() && !std::holds_alternative<bool>(v.v) ? F(ir::round_to(v.as_double(), d))
                                                                                 : in_opmath(b, v, d);
                   };
                   const Value other = b.torch("mul", {operand(a[1]), F(ir::round_to(a[2].as_double(), d))});
                   return cast(b, elementwise(b, name, {operand(a[0]), other}, Promotion::Default), d);
                 });
}

// GELU and SiLU are one ATen kernel each, which computes a half-precision input in float32 and rounds once
// (rounding erf(x / sqrt 2) to float16 before adding 1 would cancel to 0 below x = -3); so do these.
Value gelu(Builder& b, const Args& a) {
  const DType d = tensor(b, "ltorch.gelu", a[0]).dtype;
  // ATen's kernels are floating only (NotImplementedError for an integer or bool tensor, raised by torch).
  if (!is_float(d)) throw NotNative("gelu of a non-floating tensor, which torch does not implement");
  const Value x = cast(b, a[0], opmath(d));
  const std::string& approximate = a[1].as_str();
  if (approximate == "none") {  // x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
    Value cdf = b.torch("add", {b.torch("erf", {b.torch("mul", {x, num(M_SQRT1_2)})}), num(1.0)});
    return cast(b, b.torch("mul", {b.torch("mul", {x, num(0.5)}), cdf}), d);
  }
  if (approximate == "tanh") {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    Value cube = b.torch("mul", {b.torch("mul", {x, x}), x});
    Value inner = b.torch("mul", {b.torch("add", {x, b.torch("mul", {cube, num(0.044715)})}), num(M_2_SQRTPI * M_SQRT1_2)});
    return cast(b, b.torch("mul", {b.torch("mul", {x, num(0.5)}), b.torch("add", {b.torch("tanh", {inner}), num(1.0)})}), d);
  }
  fail("ltorch.gelu", "argument 'approximate' must be 'none' or 'tanh', got '" + approximate + "'");
}

void register_math() {
  for (const char* n : {"exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
                        "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
                        "erfinv", "lgamma", "digamma", "sigmoid", "reciprocal"})
    unary(n, Promotion::IntToFloat, n);
  for (const char* n : {"neg", "abs", "floor", "ceil", "round", "trunc", "sign", "bitwise_not"})
    unary(n, Promotion::Default, n);
  for (const char* n : {"isnan", "isinf", "isfinite", "signbit", "logical_not"})
    unary(n, Promotion::Default, n);
  scalar_rule_binary("true_divide", Promotion::IntToFloat, "div");  // torch.true_divide(input, other)
  scalar_rule_binary("mul", Promotion::Default, "mul");
  scalar_rule_binary("floor_divide", Promotion::Default, "floor_divide");
  add_like("add");
  add_like("sub");
  for (const char* n : {"remainder", "fmod", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor",
                        "bitwise_left_shift", "bitwise_right_shift"})
    binary(n, Promotion::Default, n);
  def_decomposed("pow", kElementwise, {kInput, req("exponent")}, [](Builder& b, const Args& a) {
    check_dtypes(b, "pow", a);
    // ATen converts a number exponent to a float16, bfloat16 or integer base's dtype (float32 and float64 bases
    // take it as a double).
    const DType d = result_type(b, {a[0], a[1]});
    if (b.is_tensor(a[0]) && (is_half(d) || ir::is_integer(d))) require_convertible(b, "ltorch.pow", "exponent", a[1], d);
    // ATen refuses a negative number exponent of an integer tensor before computing anything.
    if (b.is_tensor(a[0]) && ir::is_integer(d) && a[1].is_number() && !a[1].is_proxy() && a[1].as_double() < 0)
      fail("ltorch.pow", "Integers to negative integer powers are not allowed.");
    return elementwise(b, "pow", {a[0], a[1]}, Promotion::Default);
  });
  binary("copysign", Promotion::IntToFloat, "copysign");
  binary("atan2", Promotion::IntToFloat, "atan2");
  for (const char* n : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"})
    binary(n, Promotion::AlwaysBool, n);
  def_decomposed("div", kElementwise, {kInput, req("other"), opt("rounding_mode", Value())},
                 [](Builder& b, const Args& a) {
                   return with_scalar_rule(b, a, [&](const Args& x) {
                     if (a[2].is_none()) return elementwise(b, "div", {x[0], x[1]}, Promotion::IntToFloat);
                     const std::string& mode = a[2].as_str();
                     if (mode == "floor") return elementwise(b, "floor_divide", {x[0], x[1]}, Promotion::Default);
                     if (mode != "trunc") fail("ltorch.div", "rounding_mode must be None, 'trunc' or 'floor', got '" + mode + "'");
                     // trunc(x / y). ATen's CPU kernel divides a half-precision tensor by a scalar (a number, or a
                     // tensor of one element) in float32, truncates and rounds once; by another tensor it divides in
                     // the dtype (rounding) before truncating.
                     DType d = result_type(b, {x[0], x[1]});
                     if (!ir::is_floating(d)) return elementwise(b, "div", {x[0], x[1]}, Promotion::Default);
                     const bool scalar = !b.is_tensor(x[1]) || (b.meta(x[1]).numel() == 1 && b.meta(x[1]).device == "cpu");
                     if (!is_half(d) || !scalar) return b.prim("trunc", {elementwise(b, "div", {x[0], x[1]}, Promotion::Default)});
                     Value q = elementwise(b, "div", {in_opmath(b, x[0], d), in_opmath(b, x[1], d)}, Promotion::Default);
                     return cast(b, b.prim("trunc", {q}), d);
                   });
                 });
}

void register_activations() {
  def_decomposed("relu", kElementwise, {kInput, opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    if (a[1].as_bool()) throw NotNative("in-place relu");
    if (b.meta(a[0]).dtype == DType::Bool) fail("ltorch.relu", "not implemented for bool tensors");
    return elementwise(b, "maximum", {a[0], Value(int64_t{0})}, Promotion::Default);
  });
  def_decomposed("gelu", kElementwise, {kInput, opt("approximate", Value(ir::Str{"none"}))}, gelu);
  def_decomposed("silu", kElementwise, {kInput, opt("inplace", Value(false))}, [](Builder& b, const Args& a) {
    if (a[1].as_bool()) throw NotNative("in-place silu");
    const DType d = tensor(b, "ltorch.silu", a[0]).dtype;
    if (!is_float(d)) throw NotNative("silu of a non-floating tensor, which torch does not implement");
    const Value x = cast(b, a[0], opmath(d));
    return cast(b, b.torch("mul", {x, b.torch("sigmoid", {x})}), d);
  });
  def_decomposed("where", kElementwise, {req("condition"), kInput, req("other")}, [](Builder& b, const Args& a) {
    DType d = result_type(b, {a[1], a[2]});
    // ATen makes a number operand a tensor of opmath(d); two numbers, a tensor of their result dtype.
    require_convertible(b, "ltorch.where", "input", a[1], opmath(d));
    require_convertible(b, "ltorch.where", "other", a[2], opmath(d));
    Shape shape = b.meta(a[0]).shape;
    for (const Value& v : {a[1], a[2]})
      if (b.is_tensor(v)) shape = broadcast_shapes("ltorch.where", shape, b.meta(v).shape);
    Value cond = expand_to(b, cast(b, a[0], DType::Bool), shape);
    Value x = expand_to(b, cast(b, a[1], d), shape), y = expand_to(b, cast(b, a[2], d), shape);
    if (!b.is_tensor(x) && !b.is_tensor(y)) x = b.prim("full", {Value::dims(shape), x, Value(d), Value(ir::Str{b.meta(a[0]).device})});
    return b.prim("where", {cond, x, y});
  });
  def_decomposed("masked_fill", kElementwise, {kInput, req("mask"), req("value")}, [](Builder& b, const Args& a) {
    if (!b.is_tensor(a[1]) || b.meta(a[1]).dtype != DType::Bool)
      fail("ltorch.masked_fill", "expected argument 'mask' to be a bool tensor");
    DType d = b.meta(a[0]).dtype;
    Value value = a[2];
    if (b.is_tensor(value)) {
      if (b.meta(value).ndim() != 0) fail("ltorch.masked_fill", "expected argument 'value' to be a number or a 0-dim tensor");
      value = item_converted(b, "ltorch.masked_fill", "value", value, d);
    } else if (value.is_number()) {
      require_convertible(b, "ltorch.masked_fill", "value", value, d);
      // torch converts the fill value to the input's dtype (1.7 fills an int tensor with 1): never promotes.
      if (d == DType::Bool) value = Value(value.as_double() != 0);
      else if (ir::is_integer(d)) value = truncated_int("ltorch.masked_fill", "value", value);
      else value = Value(value.as_double());
    }
    // Out of place, input and mask broadcast together (the result may be larger than the input).
    Shape shape = broadcast_shapes("ltorch.masked_fill", b.meta(a[1]).shape, b.meta(a[0]).shape);
    return b.prim("where", {expand_to(b, a[1], shape), expand_to(b, value, shape), expand_to(b, a[0], shape)});
  });
  def_decomposed("clamp", kElementwise, {kInput, opt("min", Value()), opt("max", Value())},
                 [](Builder& b, const Args& a) {
                   if (a[1].is_none() && a[2].is_none()) fail("ltorch.clamp", "at least one of 'min' and 'max' must not be None");
                   Args operands{a[0]};
                   for (const Value& bound : {a[1], a[2]})
                     if (!bound.is_none()) operands.push_back(bound);
                   const DType d = result_type(b, operands);
                   // ATen's clamp of bools takes tensor bounds only (its scalar kernels exclude bool).
                   for (const Value& bound : {a[1], a[2]})
                     if (d == DType::Bool && !bound.is_none() && !b.is_tensor(bound))
                       fail("ltorch.clamp", "not implemented for bool with a number bound");
                   require_convertible(b, "ltorch.clamp", "min", a[1], d);
                   require_convertible(b, "ltorch.clamp", "max", a[2], d);
                   Value x = a[0];
                   if (!a[1].is_none()) x = elementwise(b, "maximum", {x, a[1]}, Promotion::Default);
                   if (!a[2].is_none()) x = elementwise(b, "minimum", {x, a[2]}, Promotion::Default);
                   return x;
                 });
  def_decomposed("to", kElementwise, {kInput, req("dtype")}, [](Builder& b, const Args& a) {
    if (!b.is_tensor(a[0])) fail("ltorch.to", "expected argument 'input' to be a tensor");
    return b.prim("convert_element_type", {a[0], a[1]});
  });
}

}  // namespace

void register_torch_elementwise() {
  register_math();
  register_activations();
}

}  // namespace thunder::ops
