// The CUDA dialect's op-expression table: how each prim a GPU kernel computes is written in CUDA C++, keyed
// by prim. Same shape as the C++ dialect's table (cpu_expressions.h): an elementwise prim's expression, or a
// reduction's accumulator and combining rule; a missing row is an error naming the prim and the transform.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "codegen/expressions.h"
#include "ir/prim_id.h"
#include "ir/trace.h"

namespace thunder::codegen::cuda {

/// The CUDA type a value of dtype `d` is computed in (float16/bfloat16: float; bool: bool).
std::string compute_type(ir::DType d);
/// The CUDA type it is stored in (float16/bfloat16: their 16 bits, as unsigned short).
std::string storage_type(ir::DType d);
/// A stored element (an lvalue of the storage type) as the compute type, and back.
std::string load(ir::DType d, const std::string& lvalue);
std::string store(ir::DType d, const std::string& v);
/// A float computed for a half-precision value, rounded to that precision (as eager rounds after every op).
std::string round_to(ir::DType d, const std::string& e);
/// A number operand of an elementwise prim `op` over tensors of dtype `in`, from `number`, its expression in
/// the compute type of `in` (number_text: a literal or a run-time number).
std::string number_operand(ir::PrimId op, const std::string& number, ir::DType in);
/// x ** e as torch's pow kernel special-cases it; "" otherwise.
std::string small_power(const std::string& a, double e, ir::DType d, const std::string& T);

using codegen::ExprArgs;
using codegen::literal;

/// How a reduction accumulates: its accumulator's type and initial value and the combining expression of
/// `acc` and `x` (also used to combine two partial results across the lanes of a warp and across warps).
struct Reduction {
  std::string acc_type, init, combine;
};

/// One row of the table.
struct CudaOp {
  std::function<std::string(const ExprArgs&)> expr;
  std::function<Reduction(ir::DType d)> reduce;
  int operands = -1;  // leading arguments that are operands (-1: all)
};

/// The table ("cuda expression"): a row for every prim of the plan table except the index arithmetic
/// (slice, cat, slice_update, take_along_axis) and constants (full), which the dialect writes itself.
const ir::PrimTable<CudaOp>& cuda_expressions();

}  // namespace thunder::codegen::cuda
