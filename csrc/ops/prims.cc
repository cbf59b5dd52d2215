// The prim table: the small closed set of operations every torch op
// decomposes into. Each entry is a symbol plus its shape and dtype rule.
// Elementwise prims take tensors of one shape and dtype, or Python numbers;
// broadcasting and type promotion happen in the torch-level decompositions.
#include <algorithm>
#include <numeric>

#include "ops/op_table.h"

namespace thunder::ops {
namespace {

using ir::Level;
using ir::NumberType;
using ir::ProxyRef;

std::string prim_name(std::string_view n) { return "prims." + std::string(n); }

NumberType number_type_of(const Builder& b, const Value& v) {
  if (v.is_proxy()) return b.trace().proxy(v.proxy()).number;
  if (std::holds_alternative<bool>(v.v)) return NumberType::Bool;
  if (std::holds_alternative<int64_t>(v.v) || v.is_symbolic()) return NumberType::Int;
  return NumberType::Float;
}

const TensorMeta& tensor_arg(Builder& b, std::string_view op, const Value& v, const char* arg) {
  if (!b.is_tensor(v)) fail(prim_name(op), std::string("expected argument '") + arg + "' to be a tensor");
  return b.meta(v);
}

// What an elementwise prim produces from its input dtype.
enum class Out { Same, Bool, Real };

// Checks that the tensor operands agree and returns the result proxy (a
// number proxy when every operand is a number). Tensors are on one device,
// except that a 0-dim CPU tensor among tensors on another device is a scalar
// (as torch takes cuda_x + torch.tensor(2.0)): it may have any shape rank 0.
Value elementwise(Builder& b, std::string_view op, const Args& args, Out out) {
  // where's result has the shape of its tensor branches; its predicate may be one element of no higher
  // rank (a 0-d condition choosing between whole tensors), which torch.where broadcasts to that shape.
  const bool where_of_tensors = op == "where" && (b.is_tensor(args[1]) || b.is_tensor(args[2]));
  const TensorMeta* first = nullptr;
  for (size_t i = where_of_tensors ? 1 : 0; i < args.size(); ++i)
    if (b.is_tensor(args[i]) && (first == nullptr || (first->ndim() == 0 && first->device == "cpu")))
      first = &b.meta(args[i]);
  for (size_t i = 0; i < args.size(); ++i) {
    const Value& a = args[i];
    if (b.is_tensor(a)) {
      const TensorMeta& m = b.meta(a);
      const bool scalar = m.ndim() == 0 && m.device == "cpu" && first->device != "cpu";
      const bool one_element_pred = where_of_tensors && i == 0 && m.numel() == 1 && m.ndim() <= first->ndim();
      if (m.device != first->device && !scalar) {
        fail(prim_name(op), "expected tensors on one device, got " + first->device + " and " + m.device +
                                 " (argument " + std::to_string(i) + ")");
      } else if (m.shape != first->shape && !scalar && !one_element_pred) {
        fail(prim_name(op), "expected tensors of one shape, got " + shape_string(first->shape) + " and " +
                                 shape_string(m.shape) + " (argument " + std::to_string(i) + ")");
      } else if (m.dtype != first->dtype && op != "where") {
        fail(prim_name(op), "expected tensors of one dtype, got " + std::string(ir::dtype_name(first->dtype)) +
                                 " and " + std::string(ir::dtype_name(m.dtype)));
      }
    } else if (!a.is_number() && !a.is_proxy()) {
      fail(prim_name(op), "argument " + std::to_string(i) + " must be a tensor or a number");
    }
  }
  if (first == nullptr) {
    NumberType t = NumberType::Bool;
    for (const Value& a : args) t = std::max(t, number_type_of(b, a));
    // div over numbers is Python's true division (as constant folding and the executors compute it): int / int is a float.
    if (op == "div") t = std::max(t, NumberType::Float);
    if (out == Out::Bool) t = NumberType::Bool;
    return Value(ProxyRef{b.new_number(t)});
  }
  TensorMeta m = *first;
  m.requires_grad = false;
  if (op == "where") {
    // where(pred, a, b): the result takes the dtype of a and b, which must agree.
    const Value& x = args[1];
    const Value& y = args[2];
    if (!b.is_tensor(args[0]) || b.meta(args[0]).dtype != DType::Bool)
      fail(prim_name(op), "expected argument 'pred' to be a bool tensor");
    if (b.is_tensor(x)) m.dtype = b.meta(x).dtype;
    else if (b.is_tensor(y)) m.dtype = b.meta(y).dtype;
    else m.dtype = ir::default_dtype_for(number_type_of(b, x));
    if (b.is_tensor(x) && b.is_tensor(y) && b.meta(x).dtype != b.meta(y).dtype)
      fail(prim_name(op), "expected 'a' and 'b' of one dtype");
  }
  if (out == Out::Bool) m.dtype = DType::Bool;
  if (out == Out::Real) m.dtype = ir::to_real(m.dtype);
  return Value(ProxyRef{b.new_tensor(m)});
}

void def(std::string name, uint32_t tags, std::vector<ir::Param> params, MetaFn meta) {
  register_op(OpDef{ir::Symbol{std::move(name), Level::Prim, tags, std::move(params)}, std::move(meta), nullptr});
}

// The bitwise prims compute on integers, and all but the shifts on bool: a float operand (which the code
// generator could not even express) is an error naming it.
void check_bitwise(const Builder& b, const std::string& op, const Args& a) {
  if (op.rfind("bitwise_", 0) != 0) return;
  const bool shift = op.find("shift") != std::string::npos;
  static const char* const kNames[] = {"a", "b"};
  for (size_t i = 0; i < a.size(); ++i) {
    const bool tensor = b.is_tensor(a[i]);
    const bool ok = tensor ? ir::is_integer(b.meta(a[i]).dtype) || (!shift && b.meta(a[i]).dtype == DType::Bool)
                           : number_type_of(b, a[i]) <= NumberType::Int;
    if (ok) continue;
    const std::string got = tensor ? std::string(ir::dtype_name(b.meta(a[i]).dtype)) + " tensor" : "non-integer number";
    fail(prim_name(op), std::string("expected argument '") + kNames[i] + "' to be an integer" +
                            (shift ? " tensor or an int" : " or bool tensor or an int") + ", got a " + got);
  }
}

void unary(const std::string& name, Out out = Out::Same) {
  def(name, ir::kElementwise, {req("a")}, [name, out](Builder& b, const Args& a) {
    check_bitwise(b, name, a);
    return elementwise(b, name, a, out);
  });
}

void binary(const std::string& name, Out out = Out::Same) {
  def(name, ir::kElementwise, {req("a"), req("b")}, [name, out](Builder& b, const Args& a) {
    check_bitwise(b, name, a);
    return elementwise(b, name, a, out);
  });
}

Value reduction(Builder& b, std::string_view op, const Args& args, bool keep_dtype_int) {
  TensorMeta m = tensor_arg(b, op, args[0], "a");
  std::vector<int64_t> dims = args[1].as_ints();
  std::vector<bool> reduced(m.shape.size(), false);
  for (int64_t d : dims) reduced[canonical_dim(prim_name(op), d, m.ndim())] = true;
  Shape shape;
  for (size_t i = 0; i < m.shape.size(); ++i)
    if (!reduced[i]) shape.push_back(m.shape[i]);
  m.shape = shape;
  m.requires_grad = false;
  (void)keep_dtype_int;
  return Value(ProxyRef{b.new_tensor(m)});
}

Value new_tensor_like(Builder& b, TensorMeta m, Shape shape) {
  m.shape = std::move(shape);
  m.requires_grad = false;
  return Value(ProxyRef{b.new_tensor(std::move(m))});
}

void register_shape_prims() {
  def("broadcast_in_dim", ir::kShape | ir::kView, {req("a"), req("shape"), req("broadcast_dimensions")},
      [](Builder& b, const Args& a) {
        const TensorMeta& m = tensor_arg(b, "broadcast_in_dim", a[0], "a");
        Shape shape = a[1].as_dims();
        std::vector<int64_t> dims = a[2].as_ints();
        if (dims.size() != m.shape.size())
          fail("prims.broadcast_in_dim", "expected one broadcast dimension per input dimension");
        for (size_t i = 0; i < dims.size(); ++i) {
          if (dims[i] < 0 || dims[i] >= static_cast<int64_t>(shape.size()) ||
              (m.shape[i] != 1 && m.shape[i] != shape[dims[i]]))
            fail("prims.broadcast_in_dim", "cannot broadcast " + shape_string(m.shape) + " to " + shape_string(shape));
        }
        return new_tensor_like(b, m, shape);
      });
  def("reshape", ir::kShape | ir::kView, {req("a"), req("shape")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor_arg(b, "reshape", a[0], "a");
    Shape shape = a[1].as_dims();
    if (ir::product(shape) != m.numel())
      fail("prims.reshape", "cannot reshape " + shape_string(m.shape) + " to " + shape_string(shape));
    return new_tensor_like(b, m, shape);
  });
  def("transpose", ir::kShape | ir::kView, {req("a"), req("permutation")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor_arg(b, "transpose", a[0], "a");
    std::vector<int64_t> perm = a[1].as_ints();
    std::vector<int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(m.shape.size());
    std::iota(iota.begin(), iota.end(), 0);
    if (sorted != iota) fail("prims.transpose", "permutation " + shape_string(perm) + " is not a permutation of the dims");
    Shape shape;
    for (int64_t p : perm) shape.push_back(m.shape[p]);
    return new_tensor_like(b, m, shape);
  });
  def("slice", ir::kShape | ir::kView, {req("a"), req("start_indices"), req("end_indices"), opt("strides", Value())},
      [](Builder& b, const Args& a) {
        const TensorMeta& m = tensor_arg(b, "slice", a[0], "a");
        Shape start = a[1].as_dims(), end = a[2].as_dims();
        std::vector<int64_t> strides = a[3].is_none() ? std::vector<int64_t>(m.shape.size(), 1) : a[3].as_ints();
        if (start.size() != m.shape.size() || end.size() != m.shape.size() || strides.size() != m.shape.size())
          fail("prims.slice", "expected one start, end and stride per dimension");
        Shape shape;
        for (size_t i = 0; i < m.shape.size(); ++i) {
          if (start[i] < 0 || end[i] > m.shape[i] || start[i] > end[i] || strides[i] < 1)
            fail("prims.slice", "invalid slice [" + start[i].str() + ":" + end[i].str() +
                                    "] of a dimension of length " + m.shape[i].str());
          shape.push_back((end[i] - start[i]).ceil_divide(strides[i], "prims.slice"));
        }
        return new_tensor_like(b, m, shape);
      });
  def("squeeze", ir::kShape | ir::kView, {req("a"), req("dims")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor_arg(b, "squeeze", a[0], "a");
    std::vector<bool> drop(m.shape.size(), false);
    for (int64_t d : a[1].as_ints()) {
      int64_t c = canonical_dim("prims.squeeze", d, m.ndim());
      if (m.shape.empty()) continue;
      if (m.shape[c] != 1) fail("prims.squeeze", "dimension " + std::to_string(d) + " has length " + m.shape[c].str() + ", not 1");
      drop[c] = true;
    }
    Shape shape;
    for (size_t i = 0; i < m.shape.size(); ++i)
      if (!drop[i]) shape.push_back(m.shape[i]);
    return new_tensor_like(b, m, shape);
  });
  def("cat", ir::kShape, {req("tensors"), req("dim")}, [](Builder& b, const Args& a) {
    const auto& ts = a[0].items();
    if (ts.empty()) fail("prims.cat", "expected a non-empty list of tensors");
    TensorMeta m = tensor_arg(b, "cat", ts[0], "tensors");
    int64_t dim = canonical_dim("prims.cat", a[1].as_int(), m.ndim());
    for (size_t i = 1; i < ts.size(); ++i) {
      const TensorMeta& o = tensor_arg(b, "cat", ts[i], "tensors");
      if (o.dtype != m.dtype) fail("prims.cat", "expected tensors of one dtype");
      if (o.ndim() != m.ndim()) fail("prims.cat", "expected tensors of one rank");
      for (int64_t d = 0; d < m.ndim(); ++d)
        if (d != dim && o.shape[d] != m.shape[d] && o.shape[d].is_constant() && m.shape[d].is_constant())
          fail("prims.cat", "sizes of tensors must match except in dimension " + std::to_string(dim));
      m.shape[dim] += o.shape[dim];
    }
    return new_tensor_like(b, m, m.shape);
  });
  def("flip", ir::kShape, {req("a"), req("dims")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor_arg(b, "flip", a[0], "a");
    for (int64_t d : a[1].as_ints()) canonical_dim("prims.flip", d, m.ndim());
    return new_tensor_like(b, m, m.shape);
  });
  def("alias", ir::kView, {req("a")}, [](Builder& b, const Args& a) {
    if (b.is_tensor(a[0])) return new_tensor_like(b, b.meta(a[0]), b.meta(a[0]).shape);
    return Value(ProxyRef{b.new_number(a[0].is_proxy() ? b.trace().proxy(a[0].proxy()).number : NumberType::Float)});
  });
}

void register_other_prims() {
  // check_in_range(a, low, high, message): a itself, once every element is checked to lie in [low, high] (NaN
  // fails) -- RuntimeError(message) otherwise: ATen's binary cross entropy checks its input and target so, and
  // masked_fill the value it converts. Not fusible: the torch executor runs it (a pass over a and a host sync), so
  // it ends the kernel computing a. Its gradient passes through.
  def("check_in_range", ir::kChecksValues, {req("a"), req("low"), req("high"), req("message")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor_arg(b, "check_in_range", a[0], "a");
    if (!a[1].is_number() || !a[2].is_number())
      fail("prims.check_in_range", "expected numbers for 'low' and 'high'");
    a[3].as_str();  // the error's message
    return new_tensor_like(b, m, m.shape);
  });
  def("convert_element_type", ir::kElementwise, {req("a"), req("dtype")}, [](Builder& b, const Args& a) {
    DType d = a[1].as_dtype();
    if (!b.is_tensor(a[0])) {
      NumberType t = ir::is_complex(d) ? NumberType::Complex : ir::is_floating(d) ? NumberType::Float
                   : d == DType::Bool ? NumberType::Bool : NumberType::Int;
      return Value(ProxyRef{b.new_number(t)});
    }
    TensorMeta m = b.meta(a[0]);
    m.dtype = d;
    return new_tensor_like(b, m, m.shape);
  });
  for (const char* r : {"sum", "prod", "amax", "amin"})
    def(r, ir::kReduction, {req("a"), req("dims")}, [r](Builder& b, const Args& a) { return reduction(b, r, a, true); });
  def("var", ir::kReduction, {req("a"), req("dims"), req("correction")},
      [](Builder& b, const Args& a) {
        Value out = reduction(b, "var", a, false);
        ir::ProxyInfo& p = b.trace().proxies[out.proxy()];
        p.tensor.dtype = ir::to_real(p.tensor.dtype);
        return out;
      });
  for (const char* r : {"argmax", "argmin"})
    def(r, ir::kReduction, {req("a"), req("dim")}, [r](Builder& b, const Args& a) {
      TensorMeta m = tensor_arg(b, r, a[0], "a");
      Shape shape;
      if (!a[1].is_none()) {
        int64_t d = canonical_dim(prim_name(r), a[1].as_int(), m.ndim());
        for (int64_t i = 0; i < m.ndim(); ++i)
          if (i != d) shape.push_back(m.shape[i]);
      }
      m.dtype = DType::Int64;
      return new_tensor_like(b, m, shape);
    });
  def("matmul", ir::kFreshOutput, {req("a"), req("b")}, [](Builder& b, const Args& a) {
    // torch.matmul: vectors are promoted to matrices, batch dims broadcast.
    const TensorMeta& x = tensor_arg(b, "matmul", a[0], "a");
    const TensorMeta& y = tensor_arg(b, "matmul", a[1], "b");
    if (x.ndim() == 0 || y.ndim() == 0) fail("prims.matmul", "both arguments must be at least 1-dimensional");
    if (x.dtype != y.dtype) fail("prims.matmul", "expected tensors of one dtype, got " + std::string(ir::dtype_name(x.dtype)) + " and " + std::string(ir::dtype_name(y.dtype)));
    Shape xs = x.shape, ys = y.shape;
    bool x_vec = xs.size() == 1, y_vec = ys.size() == 1;
    if (x_vec) xs.insert(xs.begin(), 1);
    if (y_vec) ys.push_back(1);
    Dim k1 = xs.back(), k2 = ys[ys.size() - 2];
    if (k1 != k2) {
      std::string what = "shapes " + shape_string(x.shape) + " and " + shape_string(y.shape) +
                         " cannot be multiplied (" + k1.str() + " != " + k2.str() + ")";
      if (!k1.is_constant() || !k2.is_constant()) throw ir::SymbolicShapeError("prims.matmul: " + what);
      fail("prims.matmul", what);
    }
    Shape xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2);
    Shape shape = broadcast_shapes("prims.matmul", xb, yb);
    if (!x_vec) shape.push_back(xs[xs.size() - 2]);
    if (!y_vec) shape.push_back(ys.back());
    return new_tensor_like(b, x, shape);
  });
  def("full", ir::kCreation, {req("shape"), req("fill_value"), req("dtype"), req("device")},
      [](Builder& b, const Args& a) {
        TensorMeta m{a[2].as_dtype(), a[0].as_dims(), a[3].is_none() ? "cpu" : a[3].as_str(), false};
        for (const Dim& s : m.shape) if (s < 0) fail("prims.full", "negative dimension in shape " + shape_string(m.shape));
        return Value(ProxyRef{b.new_tensor(m)});
      });
  def("iota", ir::kCreation, {req("length"), req("start"), req("step"), req("dtype"), req("device")},
      [](Builder& b, const Args& a) {
        Dim n = a[0].as_dim();
        if (n < 0) fail("prims.iota", "length must be non-negative, got " + n.str());
        TensorMeta m{a[3].as_dtype(), {n}, a[4].is_none() ? "cpu" : a[4].as_str(), false};
        return Value(ProxyRef{b.new_tensor(m)});
      });
  def("take", ir::kChecksValues, {req("a"), req("index"), req("dim")}, [](Builder& b, const Args& a) {
    // index_select: the result has the index's length along dim.
    TensorMeta m = tensor_arg(b, "take", a[0], "a");
    const TensorMeta& idx = tensor_arg(b, "take", a[1], "index");
    if (ir::is_floating(idx.dtype) || idx.ndim() > 1) fail("prims.take", "expected a 0-d or 1-d integer index tensor");
    int64_t d = canonical_dim("prims.take", a[2].as_int(), m.ndim());
    if (m.ndim() > 0) refuse_empty_indexed("prims.take", m.shape[d], idx);
    if (m.ndim() > 0) m.shape[d] = idx.numel();
    return new_tensor_like(b, m, m.shape);
  });
  def("take_along_axis", ir::kChecksValues, {req("a"), req("index"), req("dim")}, [](Builder& b, const Args& a) {
    // gather: the result has the index's shape.
    TensorMeta m = tensor_arg(b, "take_along_axis", a[0], "a");
    const TensorMeta& idx = tensor_arg(b, "take_along_axis", a[1], "index");
    if (idx.ndim() != m.ndim()) fail("prims.take_along_axis", "index must have as many dims as the input");
    const int64_t d = canonical_dim("prims.take_along_axis", a[2].as_int(), m.ndim());
    refuse_empty_indexed("prims.take_along_axis", m.shape[d], idx);
    return new_tensor_like(b, m, idx.shape);
  });
  // Randomness. random_seed draws a seed from torch's default generator at each run: the one op that reads a
  // generator (kRandom: never merged, folded or recomputed; not kEffect, so it is no fusion barrier and, when
  // nothing reads it, dead code). Its result is a 0-d int64 CPU tensor, which kernels on any device read as a
  // scalar, and which a training program saves for the backward (8 bytes) instead of a mask.
  def("random_seed", ir::kRandom, {}, [](Builder& b, const Args&) {
    return Value(ProxyRef{b.new_tensor(TensorMeta{DType::Int64, {}, "cpu", false})});
  });
  // uniform_philox(shape, seed, offset, dtype, device): uniform values in [0, 1), element i (row-major) a pure
  // function of (seed, offset + i) by Philox4x32-10 (codegen/philox.h states the exact mapping; the torch
  // executor and the kernels agree bit for bit). Deterministic, so a creation op like full: CSE merges equal
  // calls, DCE drops unused ones, and autodiff recomputes it in the backward instead of saving what it made.
  def("uniform_philox", ir::kCreation, {req("shape"), req("seed"), req("offset"), req("dtype"), req("device")},
      [](Builder& b, const Args& a) {
        TensorMeta m{a[3].as_dtype(), a[0].as_dims(), a[4].is_none() ? "cpu" : a[4].as_str(), false};
        for (const Dim& s : m.shape)
          if (s < 0) fail("prims.uniform_philox", "negative dimension in shape " + shape_string(m.shape));
        if (!ir::is_floating(m.dtype))
          fail("prims.uniform_philox", "expected a floating-point dtype, got " + std::string(ir::dtype_name(m.dtype)));
        const TensorMeta& seed = tensor_arg(b, "uniform_philox", a[1], "seed");
        if (seed.dtype != DType::Int64 || seed.ndim() != 0 || seed.device != "cpu")
          fail("prims.uniform_philox", "expected argument 'seed' to be a 0-d int64 CPU tensor (prims.random_seed())");
        if (b.is_tensor(a[2]) || number_type_of(b, a[2]) != NumberType::Int)
          fail("prims.uniform_philox", "expected argument 'offset' to be an int");
        return Value(ProxyRef{b.new_tensor(m)});
      });
  // A compile-time tensor constant: the index into the trace's constant table,
  // and its metadata, set by the pass that made it.
  def("tensor_constant", ir::kConstant, {req("index"), req("dtype"), req("shape"), req("device")},
      [](Builder& b, const Args& a) {
        TensorMeta m{a[1].as_dtype(), a[2].as_dims(), a[3].as_str(), false};

        return Value(ProxyRef{b.new_tensor(m)});
      });
}

}  // namespace

void register_prims() {
  for (const char* n : {"neg", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos",
                        "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
                        "erfinv", "lgamma", "digamma", "floor", "ceil", "round", "trunc", "sign", "reciprocal",
                        "bitwise_not", "sigmoid"})
    unary(n);
  unary("abs", Out::Real);
  for (const char* n : {"isnan", "isinf", "isfinite", "signbit", "logical_not"}) unary(n, Out::Bool);
  for (const char* n : {"add", "sub", "mul", "div", "remainder", "fmod", "pow", "maximum", "minimum", "atan2",
                        "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
                        "floor_divide", "copysign"})
    binary(n);
  for (const char* n : {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor"})
    binary(n, Out::Bool);
  def("where", ir::kElementwise, {req("pred"), req("a"), req("b")},
      [](Builder& b, const Args& a) { return elementwise(b, "where", a, Out::Same); });
  register_shape_prims();
  register_other_prims();
}

}  // namespace thunder::ops
