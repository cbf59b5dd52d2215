// What the C++ and CUDA dialects' op-expression tables (cpu_expressions.h, cuda_expressions.h) share: the
// arguments an elementwise expression is written from, and numbers written as literals of a type.
#pragma once

#include <string>
#include <vector>

#include "ir/trace.h"

namespace thunder::codegen {

/// What an elementwise expression is written from: the operands' expressions, already in the compute type
/// `T` of the result (comparisons get them in their own types), and the dtypes involved.
struct ExprArgs {
  ir::DType out, in;  // the result's dtype; the operands' (where's: its second operand's)
  const std::vector<std::string>& x;
  std::string T;       // the dialect's compute type of `out`
  bool fl = false;     // the operands are floating point
  std::string suffix;  // "f" where T is float: the float versions of the math functions
  const std::string& a() const { return x.at(0); }
  const std::string& b() const { return x.at(1); }
  const std::string& c() const { return x.at(2); }
};

/// Where a kernel rounds a float16/bfloat16 value it computes (in float32) to its dtype.
///  - EveryOp: after every op, as eager PyTorch does op by op (inference, and a training step's forward).
///  - AtStores: only where it leaves the kernel (stores) and at explicit conversions (convert_element_type to a
///    half-precision dtype); between ops inside a kernel the float32 value is used as it is. A backward's kernels
///    are rendered so: their ops come from VJP rules, not from the user's program, and eager's derivative
///    kernels compute each op's gradient formula in float32 too (tanh_backward is `g * (1 - y * y)` rounded
///    once). Rounding after every op cost a bfloat16 GPT-2 backward 3-4x its float32 kernel time.
enum class HalfRounding { EveryOp, AtStores };

/// A number as a literal of `type` in either dialect: "(float)0.5", "(int64_t)3LL", "(float)NAN"; a bool or
/// int keeps its kind, typed like every number (a prim's number follows its tensor's dtype).
std::string literal(const ir::Value& v, const std::string& type);

}  // namespace thunder::codegen
