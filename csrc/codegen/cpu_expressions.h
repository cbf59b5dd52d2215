// The C++ dialect's op-expression table: how each prim a kernel computes is written in C++, keyed by prim
// (the CUDA dialect has a table of the same shape), plus the dialect's types and literals.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codegen/expressions.h"
#include "ir/prim_id.h"
#include "ir/trace.h"

namespace thunder::codegen::cpu {

/// The C++ type a value of dtype `d` is computed in (float16/bfloat16: float).
std::string compute_type(ir::DType d);
/// The C++ type it is stored in.
std::string storage_type(ir::DType d);
bool is_half(ir::DType d);
/// A stored element (an lvalue of the storage type) as the compute type, and back.
std::string load(ir::DType d, const std::string& lvalue);
std::string store(ir::DType d, const std::string& v);
/// A float computed for a half-precision value, rounded to that precision (as eager rounds after every op).
std::string round_to(ir::DType d, const std::string& e);
/// A number operand of an elementwise prim `op` over tensors of dtype `in`, from `number`, its expression in
/// the compute type of `in` (number_text: a literal or a run-time number).
std::string number_operand(ir::PrimId op, const std::string& number, ir::DType in);
/// x ** e for x of dtype d as torch's pow kernel special-cases it (multiplications, a square root, a reciprocal);
/// "" otherwise.
std::string small_power(const std::string& a, double e, ir::DType d, const std::string& T);

using codegen::ExprArgs;
using codegen::literal;

/// How a reduction accumulates: its accumulator's type and initial value, the combining expression of
/// `acc` and `x`, and the OpenMP reduction operator.
struct Reduction {
  std::string acc_type, init, combine, pragma_op;
  bool nan_flag = false;  // float max/min: NaN is tracked in a flag beside the (vectorizable) max/min
};

/// One row of the table: an elementwise prim's expression, or a reduction's accumulation.
struct CppOp {
  std::function<std::string(const ExprArgs&)> expr;
  /// For a reduction: its rule over inputs of dtype d (float_acc: float sums may accumulate in float).
  std::function<Reduction(ir::DType d, bool float_acc)> reduce;
  /// A call into libmvec (declared `omp declare simd`): costly, so a value worth keeping in a row buffer.
  bool vector_math = false;
  /// How many leading arguments are operands of the expression (-1: all; convert_element_type's dtype and
  /// a broadcast's shape are not).
  int operands = -1;
};

/// The table ("cpu expression"): a row for every prim of the plan table except those that are index
/// arithmetic (slice, cat, slice_update, take_along_axis) or constants (full), which the dialect writes itself.
const ir::PrimTable<CppOp>& cpu_expressions();

}  // namespace thunder::codegen::cpu
