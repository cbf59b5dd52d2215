// This file builds its output with `"literal" + std::string` throughout, for which GCC 12's libstdc++
// reports false -Wrestrict warnings at -O2 and above (GCC bug 105329); they would fail -Werror builds.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "codegen/cpu_expressions.h"

#include <cmath>
#include <cstdio>

namespace thunder::codegen::cpu {

using ir::DType;
using ir::PrimId;

bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

// The C++ type a value is computed in.
std::string compute_type(DType d) {
  switch (d) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8_t";
    case DType::Int8: return "int8_t";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::Float64: return "double";
    default: return "float";
  }
}

// The C++ type a value is stored in.
std::string storage_type(DType d) {
  if (d == DType::Float16) return "_Float16";
  if (d == DType::BFloat16) return "uint16_t";
  return compute_type(d);
}

std::string load(DType d, const std::string& lvalue) {
  if (d == DType::Float16) return "(float)" + lvalue;
  if (d == DType::BFloat16) return "bf16_to_float(" + lvalue + ")";
  return lvalue;
}

std::string store(DType d, const std::string& v) {
  if (d == DType::Float16) return "(_Float16)" + v;
  if (d == DType::BFloat16) return "float_to_bf16(" + v + ")";
  return v;
}

// Rounds a float computed for a half-precision value to that precision.
std::string round_to(DType d, const std::string& e) {
  if (d == DType::Float16) return "(float)(_Float16)(" + e + ")";
  if (d == DType::BFloat16) return "bf16_round(" + e + ")";
  return e;
}

// A Python number operand of an elementwise prim over `in` tensors. ATen converts it to the tensor's dtype
// first, so over float16/bfloat16 it is rounded to that precision -- except in mul and the divisions, whose CPU
// kernels read it unrounded in float32 (x * 0.1 computes float(x) * 0.1f; see second_operand_in_opmath in
// ops/torch_elementwise.cc for the same rule with a 0-dim tensor).
std::string number_operand(PrimId op, const std::string& e, DType in) {
  const bool unrounded = op == PrimId::mul || op == PrimId::div || op == PrimId::floor_divide;
  return is_half(in) && !unrounded ? round_to(in, e) : e;
}

// x ** e for the exponents torch's pow kernel also special-cases (as multiplications, a square
// root or a reciprocal); "" for any other exponent.
std::string small_power(const std::string& a, double e, ir::DType d, const std::string& T) {
  if (e == 1) return a;
  if (e == 2) return "(" + a + " * " + a + ")";
  // ATen's bfloat16 kernels multiply in bfloat16: the square is rounded before the third factor or the reciprocal
  // (float16's, whose vectors compute in float32, and bfloat16's rsqrt round once).
  const std::string square = d == ir::DType::BFloat16 ? round_to(d, "(" + a + " * " + a + ")") : a + " * " + a;
  if (e == 3) return "(" + square + " * " + a + ")";
  // ATen takes x ** 0.5 and x ** -0.5 as sqrt and rsqrt except in float16 (pow(-inf, 0.5) = inf, sqrt(-inf) NaN).
  if (e == 0.5 && d != ir::DType::Float16) return "kmath::sqrt(" + a + ")";
  if (e == -0.5 && d != ir::DType::Float16) return "((" + T + ")1 / kmath::sqrt(" + a + "))";
  if (e == -1) return "((" + T + ")1 / " + a + ")";
  if (e == -2) return "((" + T + ")1 / (" + square + "))";
  return "";
}

// The per-op string table: the C++ expression of an elementwise prim.

namespace {

using Expr = std::function<std::string(const ExprArgs&)>;

// The table's rows, grouped as the dialect writes them.
ir::PrimTable<CppOp> make_cpu_expressions() {
  ir::PrimTable<CppOp> t("cpu expression");
  auto expr = [&](PrimId id, Expr e) { t.set(id, CppOp{std::move(e), {}, false, -1}); };
  // A call into libmvec: kept in a row buffer by a reduction's pass (see CppOp::vector_math). Recomputed in another
  // loop of the kernel, GCC may take the scalar function in one loop and the vector one in the other, which differ
  // in the last bit: a stored sigmoid(x) and its amax disagreed, and amax's VJP found no tie (NaN gradients).
  auto vector_expr = [&](PrimId id, Expr e) { t.set(id, CppOp{std::move(e), {}, true, -1}); };
  // Functions vectorizable through glibc's libmvec (declared `omp declare simd` in the prelude), by their C
  // names: erff and sinf under names of thunder's own (see the prelude).
  for (PrimId id : {PrimId::exp, PrimId::exp2, PrimId::log, PrimId::log2, PrimId::log10, PrimId::log1p, PrimId::expm1,
                    PrimId::sin, PrimId::cos, PrimId::tan, PrimId::asin, PrimId::acos, PrimId::atan, PrimId::sinh,
                    PrimId::cosh, PrimId::tanh, PrimId::asinh, PrimId::acosh, PrimId::atanh, PrimId::erf, PrimId::erfc}) {
    const std::string name(ir::prim_name(id));
    Expr e = [name](const ExprArgs& o) { return name + o.suffix + "(" + o.a() + ")"; };
    if (id == PrimId::erf)  // the prelude's own: 1.6x libmvec's speed
      e = [](const ExprArgs& o) { return o.T == "float" ? "thunder_erff(" + o.a() + ")" : "erf(" + o.a() + ")"; };
    if (id == PrimId::sin) e = [](const ExprArgs& o) { return "thunder_sin" + o.suffix + "(" + o.a() + ")"; };
    t.set(id, CppOp{std::move(e), {}, true, -1});
  }
  expr(PrimId::lgamma, [](const ExprArgs& o) { return "kmath::lgamma(" + o.a() + ")"; });
  expr(PrimId::sqrt, [](const ExprArgs& o) { return "kmath::sqrt(" + o.a() + ")"; });
  expr(PrimId::neg, [](const ExprArgs& o) { return "(" + o.T + ")(-" + o.a() + ")"; });
  expr(PrimId::abs, [](const ExprArgs& o) {
    return o.fl ? "kmath::fabs(" + o.a() + ")" : "(" + o.T + ")(" + o.a() + " < 0 ? -" + o.a() + " : " + o.a() + ")";
  });
  for (PrimId id : {PrimId::floor, PrimId::ceil, PrimId::trunc}) {
    const std::string name(ir::prim_name(id));
    expr(id, [name](const ExprArgs& o) { return o.fl ? "kmath::" + name + "(" + o.a() + ")" : o.a(); });
  }
  expr(PrimId::round, [](const ExprArgs& o) { return o.fl ? "kmath::nearbyint(" + o.a() + ")" : o.a(); });
  // torch.sign(nan) is 0
  expr(PrimId::sign, [](const ExprArgs& o) { return "(" + o.T + ")((" + o.a() + " > 0) - (" + o.a() + " < 0))"; });
  expr(PrimId::reciprocal, [](const ExprArgs& o) { return "((" + o.T + ")1 / " + o.a() + ")"; });
  expr(PrimId::rsqrt, [](const ExprArgs& o) { return "((" + o.T + ")1 / kmath::sqrt(" + o.a() + "))"; });
  vector_expr(PrimId::sigmoid, [](const ExprArgs& o) {
    return "((" + o.T + ")1 / ((" + o.T + ")1 + exp" + o.suffix + "(-" + o.a() + ")))";
  });
  expr(PrimId::bitwise_not, [](const ExprArgs& o) { return o.in == DType::Bool ? "!" + o.a() : "(" + o.T + ")(~" + o.a() + ")"; });
  expr(PrimId::logical_not, [](const ExprArgs& o) { return "!(" + o.a() + ")"; });
  expr(PrimId::isnan, [](const ExprArgs& o) { return o.fl ? "(" + o.a() + " != " + o.a() + ")" : "false"; });
  expr(PrimId::isinf, [](const ExprArgs& o) { return o.fl ? "kmath::isinf(" + o.a() + ")" : "false"; });
  expr(PrimId::isfinite, [](const ExprArgs& o) { return o.fl ? "kmath::isfinite(" + o.a() + ")" : "true"; });
  expr(PrimId::signbit, [](const ExprArgs& o) { return o.fl ? "sign_bit(" + o.a() + ")" : "(" + o.a() + " < 0)"; });
  // Binary operators: the result cast to T (integer promotion would widen int8 + int8).
  for (auto [id, op] : {std::pair{PrimId::add, "+"}, {PrimId::sub, "-"}, {PrimId::mul, "*"}, {PrimId::bitwise_and, "&"},
                        {PrimId::bitwise_or, "|"}, {PrimId::bitwise_xor, "^"}}) {
    const std::string sym = op;
    expr(id, [sym](const ExprArgs& o) { return "(" + o.T + ")(" + o.a() + " " + sym + " " + o.b() + ")"; });
  }
  expr(PrimId::div, [](const ExprArgs& o) { return "(" + o.a() + " / " + o.b() + ")"; });
  vector_expr(PrimId::pow, [](const ExprArgs& o) { return "pow" + o.suffix + "(" + o.a() + ", " + o.b() + ")"; });
  vector_expr(PrimId::atan2, [](const ExprArgs& o) { return "atan2" + o.suffix + "(" + o.a() + ", " + o.b() + ")"; });
  expr(PrimId::copysign, [](const ExprArgs& o) { return "kmath::copysign(" + o.a() + ", " + o.b() + ")"; });
  expr(PrimId::fmod, [](const ExprArgs& o) { return "kmath::fmod(" + o.a() + ", " + o.b() + ")"; });
  expr(PrimId::remainder, [](const ExprArgs& o) { return "py_remainder(" + o.a() + ", " + o.b() + ")"; });
  expr(PrimId::maximum, [](const ExprArgs& o) {
    return o.fl ? "nan_max(" + o.a() + ", " + o.b() + ")" : "kmath::max<" + o.T + ">(" + o.a() + ", " + o.b() + ")";
  });
  expr(PrimId::minimum, [](const ExprArgs& o) {
    return o.fl ? "nan_min(" + o.a() + ", " + o.b() + ")" : "kmath::min<" + o.T + ">(" + o.a() + ", " + o.b() + ")";
  });
  for (auto [id, op] : {std::pair{PrimId::eq, "=="}, {PrimId::ne, "!="}, {PrimId::lt, "<"}, {PrimId::le, "<="},
                        {PrimId::gt, ">"}, {PrimId::ge, ">="}}) {
    const std::string sym = op;
    expr(id, [sym](const ExprArgs& o) { return "(" + o.a() + " " + sym + " " + o.b() + ")"; });
  }
  expr(PrimId::logical_and, [](const ExprArgs& o) { return "((" + o.a() + " != 0) && (" + o.b() + " != 0))"; });
  expr(PrimId::logical_or, [](const ExprArgs& o) { return "((" + o.a() + " != 0) || (" + o.b() + " != 0))"; });
  expr(PrimId::logical_xor, [](const ExprArgs& o) { return "((" + o.a() + " != 0) != (" + o.b() + " != 0))"; });
  expr(PrimId::where, [](const ExprArgs& o) { return "(" + o.a() + " ? " + o.b() + " : " + o.c() + ")"; });
  // A bool becomes 1 or 0 by a select: GCC 12 does not vectorize a loop converting a bool to a number (a
  // bfloat16 `(x > 0).to(x.dtype) * y` ran 22x slower as `(float)(b)`).
  t.set(PrimId::convert_element_type, CppOp{[](const ExprArgs& o) {
          if (o.out == DType::Bool) return "(" + o.a() + " != 0)";
          if (o.in == DType::Bool) return "(" + o.a() + " ? (" + o.T + ")1 : (" + o.T + ")0)";
          // A float to an integer type narrower than 32 bits goes through int32, as ATen's vectorized conversion
          // does: -2.25 -> uint8 254, 300 -> 44. Converted directly (undefined beyond the type's range), GCC kept
          // the float's value where another op followed in the kernel (uint8 -2, 300).
          if (ir::is_floating(o.in) && ir::is_integer(o.out) && ir::item_size(o.out) < 4)
            return "(" + o.T + ")(int32_t)(" + o.a() + ")";
          // A float to int32/int64 is or'ed with the sign bit where x is NaN, which gives NaN eager's INT_MIN (as
          // x86's conversion does) and leaves every other value as it is. The point is the or: GCC, with
          // -fno-trapping-math, folds a float converted to an integer and straight back to its type into trunc(x),
          // which keeps -0.0 for x in (-1, 0) (`x.int().float()`; eager +0.0) and NaN. The or, with a value GCC
          // cannot prove 0, breaks that pattern (a select did not: GCC moved the conversion into its arms).
          if (ir::is_floating(o.in) && (o.out == DType::Int32 || o.out == DType::Int64)) {
            const std::string u = o.out == DType::Int32 ? "uint32_t" : "uint64_t";
            const std::string bits = o.out == DType::Int32 ? "31" : "63";
            return "((" + o.T + ")(" + o.a() + ") | (" + o.T + ")((" + u + ")((" + o.a() + ") != (" + o.a() + ")) << " +
                   bits + "))";
          }
          return "(" + o.T + ")(" + o.a() + ")";
        }, {}, false, 1});
  // uniform_philox's operands are its seed and the element's counter (the offset plus the element's flat index,
  // which the dialect writes); the functions are in the prelude of a unit that draws (codegen/philox.h).
  t.set(PrimId::uniform_philox, CppOp{[](const ExprArgs& o) {
          if (o.out == DType::Float64) return "thunder_uniform_double(" + o.a() + ", " + o.b() + ")";
          const int bits = o.out == DType::Float16 ? 11 : o.out == DType::BFloat16 ? 8 : 24;
          return "thunder_uniform_float(" + o.a() + ", " + o.b() + ", " + std::to_string(bits) + ")";
        }, {}, true, 2});
  // Index-only prims: the operand's value, unrounded (the plan says where it is read).
  for (PrimId id : {PrimId::alias, PrimId::broadcast_in_dim, PrimId::reshape, PrimId::squeeze, PrimId::detach})
    t.set(id, CppOp{[](const ExprArgs& o) { return o.a(); }, {}, false, 1});

  // Reductions. Float sums accumulate in float when the schedule allows it (rows short enough to stay
  // within float32 tolerance of an exact sum), else in double; integers in 64 bits, as torch does.
  for (PrimId id : {PrimId::sum, PrimId::prod}) {
    const bool sum = id == PrimId::sum;
    t.set(id, CppOp{{}, [sum](DType d, bool float_acc) {
                      const std::string T = compute_type(d);
                      const std::string fa = T == "float" && float_acc ? "float" : "double";
                      const std::string acc = ir::is_floating(d) ? fa
                                              : d == DType::Bool ? "int64_t"
                                              : T == "uint8_t"   ? "uint64_t"
                                                                 : "int64_t";
                      if (sum) return Reduction{acc, "0", "acc + (" + acc + ")x", "+"};
                      return Reduction{acc, "1", "acc * (" + acc + ")x", "*"};
                    }});
  }
  for (PrimId id : {PrimId::amax, PrimId::amin}) {
    const bool max = id == PrimId::amax;
    t.set(id, CppOp{{}, [max](DType d, bool) {
                      const std::string T = compute_type(d);
                      const bool fl = ir::is_floating(d);
                      const std::string lim = max ? (fl ? "-INFINITY" : "kmath::limits<" + T + ">::lowest()")
                                                  : (fl ? "INFINITY" : "kmath::limits<" + T + ">::max()");
                      const std::string fn = max ? "max" : "min";
                      // Floats: OpenMP's own max/min, which vectorizes, and a flag set by any NaN, which then
                      // wins (as in torch); integers: a reduction declared for kmath's max/min.
                      if (fl) return Reduction{T, lim, "kmath::" + fn + "<" + T + ">(acc, x)", fn, true};
                      return Reduction{T, lim, "kmath::" + fn + "<" + T + ">(acc, x)", "kmath_" + fn + "_" + T};
                    }});
  }
  return t;
}

}  // namespace

const ir::PrimTable<CppOp>& cpu_expressions() {
  static const ir::PrimTable<CppOp> table = make_cpu_expressions();
  return table;
}

}  // namespace thunder::codegen::cpu
