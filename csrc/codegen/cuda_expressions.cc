// This file builds its output with `"literal" + std::string` throughout, for which GCC 12's libstdc++
// reports false -Wrestrict warnings at -O2 and above (GCC bug 105329); they would fail -Werror builds.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "codegen/cuda_expressions.h"

#include <cmath>
#include <cstdio>

namespace thunder::codegen::cuda {

using ir::DType;
using ir::PrimId;

namespace {
bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }
}  // namespace

// NVRTC compiles without the C library's headers: the prelude (cuda_dialect.cc) defines these integer types.
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

std::string storage_type(DType d) { return is_half(d) ? "uint16_t" : compute_type(d); }

std::string load(DType d, const std::string& lvalue) {
  if (d == DType::Float16) return "f16_to_float(" + lvalue + ")";
  if (d == DType::BFloat16) return "bf16_to_float(" + lvalue + ")";
  return lvalue;
}

std::string store(DType d, const std::string& v) {
  if (d == DType::Float16) return "float_to_f16(" + v + ")";
  if (d == DType::BFloat16) return "float_to_bf16(" + v + ")";
  return v;
}

std::string round_to(DType d, const std::string& e) {
  if (d == DType::Float16) return "f16_round(" + e + ")";
  if (d == DType::BFloat16) return "bf16_round(" + e + ")";
  return e;
}

// ATen's CUDA kernels for add, sub, mul and div read a Python number operand in float32 unrounded
// (opmath kernels with the scalar's original value); other ops convert it to the tensor's dtype first.
std::string number_operand(PrimId op, const std::string& e, DType in) {
  const bool unrounded = op == PrimId::add || op == PrimId::sub || op == PrimId::mul || op == PrimId::div;
  return is_half(in) && !unrounded ? round_to(in, e) : e;
}

std::string small_power(const std::string& a, double e, ir::DType d, const std::string& T) {
  const std::string f = T == "float" ? "f" : "";
  if (e == 1) return a;
  if (e == 2) return "(" + a + " * " + a + ")";
  if (e == 3) return "(" + a + " * " + a + " * " + a + ")";
  if (e == 0.5 && d != ir::DType::Float16) return "sqrt" + f + "(" + a + ")";  // as the C++ dialect's
  if (e == -0.5 && d != ir::DType::Float16) return "((" + T + ")1 / sqrt" + f + "(" + a + "))";
  if (e == -1) return "((" + T + ")1 / " + a + ")";
  if (e == -2) return "((" + T + ")1 / (" + a + " * " + a + "))";
  return "";
}

namespace {

using Expr = std::function<std::string(const ExprArgs&)>;

// The lowest and highest value of an integer compute type, as literals.
std::pair<std::string, std::string> integer_limits(DType d) {
  switch (d) {
    case DType::Bool: return {"0", "1"};
    case DType::UInt8: return {"0", "255"};
    case DType::Int8: return {"(-128)", "127"};
    case DType::Int16: return {"(-32768)", "32767"};
    case DType::Int32: return {"(-2147483647 - 1)", "2147483647"};
    default: return {"(-9223372036854775807LL - 1)", "9223372036854775807LL"};
  }
}

ir::PrimTable<CudaOp> make_cuda_expressions() {
  ir::PrimTable<CudaOp> t("cuda expression");
  auto expr = [&](PrimId id, Expr e) { t.set(id, CudaOp{std::move(e), {}, -1}); };
  // CUDA's math library, by its C names (expf, erff, ...): declared by NVRTC itself.
  for (PrimId id : {PrimId::exp, PrimId::exp2, PrimId::log, PrimId::log2, PrimId::log10, PrimId::log1p, PrimId::expm1,
                    PrimId::sin, PrimId::cos, PrimId::tan, PrimId::asin, PrimId::acos, PrimId::atan, PrimId::sinh,
                    PrimId::cosh, PrimId::tanh, PrimId::asinh, PrimId::acosh, PrimId::atanh, PrimId::erf, PrimId::erfc,
                    PrimId::lgamma, PrimId::sqrt}) {
    const std::string name(ir::prim_name(id));
    expr(id, [name](const ExprArgs& o) { return name + o.suffix + "(" + o.a() + ")"; });
  }
  expr(PrimId::neg, [](const ExprArgs& o) { return "(" + o.T + ")(-" + o.a() + ")"; });
  expr(PrimId::abs, [](const ExprArgs& o) {
    return o.fl ? "fabs" + o.suffix + "(" + o.a() + ")"
                : "(" + o.T + ")(" + o.a() + " < 0 ? -" + o.a() + " : " + o.a() + ")";
  });
  for (PrimId id : {PrimId::floor, PrimId::ceil, PrimId::trunc}) {
    const std::string name(ir::prim_name(id));
    expr(id, [name](const ExprArgs& o) { return o.fl ? name + o.suffix + "(" + o.a() + ")" : o.a(); });
  }
  expr(PrimId::round, [](const ExprArgs& o) { return o.fl ? "rint" + o.suffix + "(" + o.a() + ")" : o.a(); });
  expr(PrimId::sign, [](const ExprArgs& o) { return "(" + o.T + ")((" + o.a() + " > 0) - (" + o.a() + " < 0))"; });
  expr(PrimId::reciprocal, [](const ExprArgs& o) { return "((" + o.T + ")1 / " + o.a() + ")"; });
  expr(PrimId::rsqrt, [](const ExprArgs& o) { return "((" + o.T + ")1 / sqrt" + o.suffix + "(" + o.a() + "))"; });
  expr(PrimId::sigmoid, [](const ExprArgs& o) {
    return "((" + o.T + ")1 / ((" + o.T + ")1 + exp" + o.suffix + "(-" + o.a() + ")))";
  });
  expr(PrimId::bitwise_not,
       [](const ExprArgs& o) { return o.in == DType::Bool ? "!" + o.a() : "(" + o.T + ")(~" + o.a() + ")"; });
  expr(PrimId::logical_not, [](const ExprArgs& o) { return "!(" + o.a() + ")"; });
  expr(PrimId::isnan, [](const ExprArgs& o) { return o.fl ? "(" + o.a() + " != " + o.a() + ")" : "false"; });
  expr(PrimId::isinf, [](const ExprArgs& o) {
    return o.fl ? "(" + o.a() + " == INFINITY || " + o.a() + " == -INFINITY)" : "false";
  });
  expr(PrimId::isfinite, [](const ExprArgs& o) {  // NaN and infinities fail x - x == 0
    return o.fl ? "(" + o.a() + " - " + o.a() + " == 0)" : "true";
  });
  expr(PrimId::signbit, [](const ExprArgs& o) { return o.fl ? "sign_bit(" + o.a() + ")" : "(" + o.a() + " < 0)"; });
  for (auto [id, op] : {std::pair{PrimId::add, "+"}, {PrimId::sub, "-"}, {PrimId::mul, "*"}, {PrimId::bitwise_and, "&"},
                        {PrimId::bitwise_or, "|"}, {PrimId::bitwise_xor, "^"}}) {
    const std::string sym = op;
    expr(id, [sym](const ExprArgs& o) { return "(" + o.T + ")(" + o.a() + " " + sym + " " + o.b() + ")"; });
  }
  expr(PrimId::div, [](const ExprArgs& o) { return "(" + o.a() + " / " + o.b() + ")"; });
  for (PrimId id : {PrimId::pow, PrimId::atan2, PrimId::copysign, PrimId::fmod}) {
    const std::string name(ir::prim_name(id));
    expr(id, [name](const ExprArgs& o) { return name + o.suffix + "(" + o.a() + ", " + o.b() + ")"; });
  }
  expr(PrimId::remainder, [](const ExprArgs& o) { return "py_remainder(" + o.a() + ", " + o.b() + ")"; });
  expr(PrimId::maximum, [](const ExprArgs& o) {
    return (o.fl ? "nan_max(" : "int_max(") + o.a() + ", " + o.b() + ")";
  });
  expr(PrimId::minimum, [](const ExprArgs& o) {
    return (o.fl ? "nan_min(" : "int_min(") + o.a() + ", " + o.b() + ")";
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
  t.set(PrimId::convert_element_type,
        CudaOp{[](const ExprArgs& o) { return o.out == DType::Bool ? "(" + o.a() + " != 0)" : "(" + o.T + ")(" + o.a() + ")"; },
               {}, 1});
  // uniform_philox's operands are its seed and the element's counter (the offset plus the element's flat index,
  // which the dialect writes); the functions are in the module's prelude when a kernel draws (codegen/philox.h).
  t.set(PrimId::uniform_philox, CudaOp{[](const ExprArgs& o) {
          if (o.out == DType::Float64) return "thunder_uniform_double(" + o.a() + ", " + o.b() + ")";
          const int bits = o.out == DType::Float16 ? 11 : o.out == DType::BFloat16 ? 8 : 24;
          return "thunder_uniform_float(" + o.a() + ", " + o.b() + ", " + std::to_string(bits) + ")";
        }, {}, 2});
  for (PrimId id : {PrimId::alias, PrimId::broadcast_in_dim, PrimId::reshape, PrimId::squeeze, PrimId::detach})
    t.set(id, CudaOp{[](const ExprArgs& o) { return o.a(); }, {}, 1});

  // Reductions: floating point accumulates in float (float16/bfloat16/float32, as ATen's CUDA reductions)
  // or double, integers and bool in 64 bits. The combining rule also merges partial results (warp shuffles,
  // the block's shared memory, a full reduction's second stage), in a fixed order: deterministic.
  for (PrimId id : {PrimId::sum, PrimId::prod}) {
    const bool sum = id == PrimId::sum;
    t.set(id, CudaOp{{}, [sum](DType d) {
                       const std::string T = compute_type(d);
                       const std::string acc = ir::is_floating(d) ? T : d == DType::UInt8 ? "uint64_t" : "int64_t";
                       if (sum) return Reduction{acc, "0", "acc + (" + acc + ")x"};
                       return Reduction{acc, "1", "acc * (" + acc + ")x"};
                     }});
  }
  for (PrimId id : {PrimId::amax, PrimId::amin}) {
    const bool max = id == PrimId::amax;
    t.set(id, CudaOp{{}, [max](DType d) {
                       const std::string fn = max ? "max" : "min";
                       if (ir::is_floating(d))  // any NaN wins, as in torch
                         return Reduction{compute_type(d), max ? "-INFINITY" : "INFINITY", "nan_" + fn + "(acc, x)"};
                       const auto [lo, hi] = integer_limits(d);
                       return Reduction{"int64_t", max ? lo : hi, "int_" + fn + "(acc, (int64_t)x)"};
                     }});
  }
  return t;
}

}  // namespace

const ir::PrimTable<CudaOp>& cuda_expressions() {
  static const ir::PrimTable<CudaOp> table = make_cuda_expressions();
  return table;
}

}  // namespace thunder::codegen::cuda
