#include "ops/torch_common.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>

namespace thunder::ops {
namespace {

ir::NumberType number_type(const Builder& b, const Value& v) {
  if (v.is_proxy()) return b.trace().proxy(v.proxy()).number;
  if (std::holds_alternative<bool>(v.v)) return ir::NumberType::Bool;
  if (std::holds_alternative<int64_t>(v.v) || v.is_symbolic()) return ir::NumberType::Int;
  return ir::NumberType::Float;
}

void update(std::optional<DType>& acc, DType d) { acc = acc ? ir::promote_types(*acc, d) : d; }

// c10::combine_categories: a lower-priority group only raises the category.
std::optional<DType> combine(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (ir::is_complex(*higher)) return higher;
  if (ir::is_complex(*lower)) return ir::is_floating(*higher) ? ir::to_complex(*higher) : *lower;
  if (ir::is_floating(*higher)) return higher;
  if (*higher == DType::Bool || ir::is_floating(*lower)) return ir::promote_types(*higher, *lower);
  return higher;
}

}  // namespace

DType result_type(const Builder& b, const Args& operands) {
  std::optional<DType> dim, zero, wrapped;
  for (const Value& v : operands) {
    if (b.is_tensor(v)) {
      const TensorMeta& m = b.meta(v);
      update(m.ndim() > 0 ? dim : zero, m.dtype);
    } else if (v.is_number() || v.is_proxy()) {
      update(wrapped, ir::default_dtype_for(number_type(b, v)));
    }
  }
  std::optional<DType> r = combine(dim, combine(zero, wrapped));
  if (!r) throw OpError("result_type: expected at least one tensor or number operand");
  return *r;
}

double finfo_max(DType d) {
  switch (d) {
    case DType::Float16: return 65504.0;
    case DType::BFloat16: return 3.3895313892515355e+38;
    case DType::Float32: return 3.4028234663852886e+38;
    default: return std::numeric_limits<double>::max();
  }
}

namespace {

// The range of an integer dtype as c10's checked conversion accepts it: [lo, hi], where uint8 also takes ints
// down to -255 (they wrap, as c10::overflows allows).
std::pair<double, double> integer_range(DType dtype) {
  const int bits = ir::item_size(dtype) * 8;
  if (dtype == DType::UInt8) return {-(std::ldexp(1.0, bits) - 1), std::ldexp(1.0, bits) - 1};
  return {-std::ldexp(1.0, bits - 1), std::ldexp(1.0, bits - 1) - 1};
}

// require_convertible for a constant number (anything else passes).
void require_constant_convertible(std::string_view op, const char* arg, const Value& v, DType dtype) {
  const auto* f = std::get_if<double>(&v.v);
  const auto* i = std::get_if<int64_t>(&v.v);
  if ((!f && !i) || dtype == DType::Bool || ir::is_complex(dtype)) return;
  bool overflows = false;
  if (ir::is_floating(dtype)) {
    const double x = f ? *f : static_cast<double>(*i);
    overflows = std::isfinite(x) && std::abs(x) > finfo_max(dtype);
  } else {
    const auto [lo, hi] = integer_range(dtype);
    if (f) {
      // A float converts to uint8 from 0 on. For int64 the bound 2^63 - 1 rounds up to 2^63, which does not
      // convert: compare against 2^63 itself.
      overflows = std::isnan(*f) || *f < (dtype == DType::UInt8 ? 0.0 : lo) ||
                  (dtype == DType::Int64 ? *f >= std::ldexp(1.0, 63) : *f > hi);
    } else if (dtype != DType::Int64) {
      const auto x = static_cast<double>(*i);
      overflows = x > hi || x < lo;
    }
  }
  if (!overflows) return;
  char text[32];
  if (f) std::snprintf(text, sizeof text, "%.17g", *f);
  else std::snprintf(text, sizeof text, "%lld", static_cast<long long>(*i));
  fail(op, std::string("argument '") + arg + "' (" + text + ") cannot be converted to " +
               std::string(ir::dtype_name(dtype)) + " without overflow (torch raises here)");
}

}  // namespace

void require_convertible(const Builder& b, std::string_view op, const char* arg, const Value& v, DType dtype) {
  const bool run_time = v.is_symbolic() || (v.is_proxy() && !b.is_tensor(v));
  if (!run_time) return require_constant_convertible(op, arg, v, dtype);
  if (dtype == DType::Bool || ir::is_complex(dtype)) return;
  // Known only at run time: a size (an int >= 2) or a number of the graph's. Where some value of it would not
  // convert -- to an integer dtype narrower than int64 or to float16; a float also to int64 (NaN, infinity) -- the
  // op runs with torch, which checks the value. (float32 and bfloat16 take any int; a float beyond their range,
  // which torch refuses, becomes infinity: not checked.)
  const bool is_float = number_type(b, v) == ir::NumberType::Float;
  if (dtype == DType::Float16 || (ir::is_integer(dtype) && (dtype != DType::Int64 || is_float)))
    fail(op, std::string("argument '") + arg + "' is known only at run time (" +
                 (v.is_symbolic() ? "a size" : "a number of the graph") + ") and not every value of it converts to " +
                 std::string(ir::dtype_name(dtype)) + " (torch checks it when the op runs)");
}

Value item_converted(Builder& b, std::string_view op, const char* arg, const Value& v, DType dtype) {
  const DType from = b.meta(v).dtype;
  if (from == dtype || dtype == DType::Bool || ir::is_complex(dtype) || from == DType::Bool) return cast(b, v, dtype);
  if (ir::is_floating(dtype)) {
    const double from_max = ir::is_integer(from) ? integer_range(from).second : finfo_max(from);
    if (ir::is_complex(from) || from_max > finfo_max(dtype))
      fail(op, std::string("argument '") + arg + "' is a 0-dim " + std::string(ir::dtype_name(from)) +
                   " tensor, known only at run time, and not every value of it converts to " +
                   std::string(ir::dtype_name(dtype)) + " (torch checks it when the op runs)");
    return cast(b, v, dtype);
  }
  auto [lo, hi] = integer_range(dtype);
  const bool from_float = ir::is_floating(from) || ir::is_complex(from);
  if (from_float && dtype == DType::UInt8) lo = 0.0;
  // 2^63 - 1 is no double: the largest double below 2^63 bounds a float converted to int64.
  if (dtype == DType::Int64) hi = std::nextafter(std::ldexp(1.0, 63), 0.0);
  if (!from_float) {  // an integer dtype whose every value converts (a uint8 tensor holds no negative value)
    const auto [from_lo, from_hi] = integer_range(from);
    if (from_hi <= hi && (from == DType::UInt8 ? 0.0 : from_lo) >= lo) return cast(b, v, dtype);
  }
  static const std::map<DType, const char*> c10_names = {{DType::Int8, "int8_t"}, {DType::UInt8, "uint8_t"},
                                                          {DType::Int16, "int16_t"}, {DType::Int32, "int"},
                                                          {DType::Int64, "int64_t"}};
  const std::string message = std::string("value cannot be converted to type ") + c10_names.at(dtype) + " without overflow";
  return cast(b, b.prim("check_in_range", {v, Value(lo), Value(hi), Value(ir::Str{message})}), dtype);
}

Value count_divisor(const Dim& n) {
  return n.is_constant() ? Value(static_cast<double>(*n.constant())) : Value(n);
}

Value wrapped_index(Builder& b, const Value& index, const Dim& size) {
  return b.torch("where", {b.torch("lt", {index, Value(int64_t{0})}), b.torch("add", {index, Value(size)}), index});
}

Value read_at_indices(Builder& b, const Value& x, int64_t dim, const std::vector<Value>& indices) {
  const Shape shape = b.meta(x).shape;
  const auto d = static_cast<size_t>(dim), k = indices.size();
  Value linear;
  Dim span = 1;  // the product of the dims already linearized (the last ones)
  for (size_t i = k; i-- > 0;) {
    Value wrapped = wrapped_index(b, indices[i], shape[d + i]);
    Value term = span == Dim(1) ? wrapped : b.torch("mul", {wrapped, Value(span)});
    linear = linear.is_none() ? term : b.torch("add", {linear, term});
    span *= shape[d + i];
  }
  const Shape index_shape = b.meta(linear).shape;
  Shape merged(shape.begin(), shape.begin() + dim), out = merged;
  merged.push_back(span);
  merged.insert(merged.end(), shape.begin() + dim + static_cast<int64_t>(k), shape.end());
  out.insert(out.end(), index_shape.begin(), index_shape.end());
  out.insert(out.end(), shape.begin() + dim + static_cast<int64_t>(k), shape.end());
  Value source = k == 1 ? x : b.torch("reshape", {x, Value::dims(merged)});
  Value flat = index_shape.size() == 1 ? linear : b.torch("reshape", {linear, Value::ints({-1})});
  Value taken = b.torch("index_select", {source, Value(dim), flat});
  return b.meta(taken).shape == out ? taken : b.torch("reshape", {taken, Value::dims(out)});
}

Value truncated_int(std::string_view op, const char* arg, const Value& v) {
  if (const auto* i = std::get_if<int64_t>(&v.v)) return Value(*i);
  require_constant_convertible(op, arg, v, DType::Int64);
  return Value(static_cast<int64_t>(v.as_double()));
}

Value scaled_number(Builder& b, const Value& v, double k) {
  if (!v.is_proxy()) return Value(k * v.as_double());
  return b.torch("mul", {v, Value(k)});
}

std::pair<Value, Value> centered_moments(Builder& b, const Value& x, const std::vector<int64_t>& dims) {
  auto mean = [&](const Value& v) { return b.torch("mean", {v, Value::ints(dims), Value(true)}); };
  Value first = b.torch("sub", {x, mean(x)});
  Value error = mean(first);
  Value var = b.torch("sub", {mean(b.torch("mul", {first, first})), b.torch("mul", {error, error})});
  return {b.torch("sub", {first, error}), b.torch("clamp_min", {var, 0.0})};
}

Value cast(Builder& b, const Value& v, DType dtype) {
  if (!b.is_tensor(v) || b.meta(v).dtype == dtype) return v;
  return b.prim("convert_element_type", {v, Value(dtype)});
}

Value expand_to(Builder& b, const Value& v, const Shape& shape) {
  if (!b.is_tensor(v)) return v;
  const Shape& s = b.meta(v).shape;
  if (s == shape) return v;
  broadcast_shapes("broadcast", s, shape);
  std::vector<int64_t> dims;
  for (size_t i = 0; i < s.size(); ++i) dims.push_back(static_cast<int64_t>(shape.size() - s.size() + i));
  return b.prim("broadcast_in_dim", {v, Value::dims(shape), Value::ints(dims)});
}

Value elementwise(Builder& b, std::string_view prim, const Args& operands, Promotion promotion) {
  DType computation = result_type(b, operands);
  if (promotion == Promotion::IntToFloat && !ir::is_floating(computation) && !ir::is_complex(computation))
    computation = DType::Float32;
  // A 0-dim CPU tensor among tensors on another device stays a scalar: not broadcast (which would make a CPU tensor).
  std::string device;
  for (const Value& v : operands)
    if (b.is_tensor(v) && (device.empty() || b.meta(v).ndim() > 0)) device = b.meta(v).device;
  auto scalar = [&](const Value& v) {
    return device != "cpu" && b.is_tensor(v) && b.meta(v).ndim() == 0 && b.meta(v).device == "cpu";
  };
  Shape shape;
  bool any_tensor = false;
  for (const Value& v : operands)
    if (b.is_tensor(v) && !scalar(v)) {
      shape = any_tensor ? broadcast_shapes(prim, shape, b.meta(v).shape) : b.meta(v).shape;
      any_tensor = true;
    }
  Args args;
  for (const Value& v : operands) args.push_back(scalar(v) ? cast(b, v, computation) : expand_to(b, cast(b, v, computation), shape));
  return b.prim(prim, std::move(args));
}

std::vector<int64_t> reduction_dims(std::string_view op, const TensorMeta& m, const Value& dims) {
  std::vector<int64_t> out;
  if (dims.is_none() || (dims.is_seq() && dims.items().empty())) {
    for (int64_t i = 0; i < m.ndim(); ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims.as_ints()) out.push_back(canonical_dim(op, d, m.ndim()));
  if (m.ndim() == 0) out.clear();
  return out;
}

void def_decomposed(std::string name, uint32_t tags, std::vector<ir::Param> params, DecompFn decomposition) {
  register_op(OpDef{ir::Symbol{std::move(name), ir::Level::Torch, tags, std::move(params)}, nullptr,
                    std::move(decomposition)});
}

void def_meta(std::string name, uint32_t tags, std::vector<ir::Param> params, MetaFn meta) {
  register_op(OpDef{ir::Symbol{std::move(name), ir::Level::Torch, tags, std::move(params)}, std::move(meta), nullptr});
}

}  // namespace thunder::ops
