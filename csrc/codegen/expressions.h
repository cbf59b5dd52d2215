// What the C++ and CUDA dialects' op-expression tables (cpu_expressions.h, cuda_expressions.h) share: the
// arguments an elementwise expression is written from, and numbers written as literals of a type.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_plan.h"
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

/// How both dialects write a kernel's sizes: literals where the plan fixes them, the size arguments
/// (size_arguments: `n<d>`, `s<k>_<i>`) where it takes them (KernelPlan::generic_dim).
class SizeTexts {
 public:
  SizeTexts(const ir::Trace& t, const KernelPlan& p);
  /// Domain dim d's extent: "n<d>", or the literal "<n>LL".
  std::string extent(int d) const;
  /// The product of the extents of `dims`: the literal ones multiplied into one factor; "" if it is 1,
  /// parenthesized if it has several factors.
  std::string extent_product(const std::vector<int>& dims) const;
  /// The stride of v's dim i as a factor ("" for 1): the product of v's extents inside it (contiguous: v's own
  /// size along a literal dim, a slice's source being longer than the domain there); for a trace input read in
  /// place, its stride argument in a shape-generic kernel (0 and 1 stay literal: they are the layout), else
  /// the literal.
  std::string stride(ProxyId v, size_t i) const;

 private:
  std::string product(int64_t n, const std::vector<int>& dims) const;
  const ir::Trace& t_;
  const KernelPlan& p_;
  std::map<ProxyId, size_t> input_index_;
};

/// A reduction's combine expression (KernelPlan's `combine`, written over the names `acc` and `x`) with those
/// whole words replaced by `acc` and `x`: "acc + x" -> "a3 + v[i]".
std::string combine_text(const std::string& combine, const std::string& acc, const std::string& x);
/// `text` with `by` put before each of its non-empty lines.
std::string indent(const std::string& text, const std::string& by);

/// A number as a literal of `type` in either dialect: "(float)0.5", "(int64_t)3LL", "(float)NAN"; a bool or
/// int keeps its kind, typed like every number (a prim's number follows its tensor's dtype).
std::string literal(const ir::Value& v, const std::string& type);

/// A number argument of one of the plan's prims as an expression of `type`, in either dialect: its literal, or
/// for a number computed at run time (KernelPlan::scalars) the kernel's argument `x<k>` converted ("(float)x0"),
/// and for a size read as a number the polynomial in those arguments ("(float)(x0*x1)").
std::string number_text(const KernelPlan& p, const ir::Value& v, const std::string& type);
/// The name of the plan's k-th run-time number among a kernel's arguments.
inline std::string scalar_name(size_t k) { return "x" + std::to_string(k); }
/// The type it is passed in, 8 bytes in either dialect: "double" for a float, "int64_t" for an int or a bool.
std::string scalar_type(const ir::Trace& t, const KernelPlan& p, size_t k);

/// A kernel's text (either dialect's) without its name, where it is declared (`... <name>(`): kernels whose
/// texts are equal so compute alike, and one compiled function serves them all.
std::string text_apart_from_name(const std::string& text, const std::string& name);

}  // namespace thunder::codegen
