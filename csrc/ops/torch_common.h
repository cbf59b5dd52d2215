// Helpers shared by the torch-level op tables: PyTorch's type promotion,
// broadcasting, and registration.
#pragma once

#include <utility>

#include "ops/op_table.h"

namespace thunder::ops {

/// How an elementwise op derives its computation and result dtypes from the
/// promoted dtype of its operands (the ELEMENTWISE_TYPE_PROMOTION_KIND of torch._prims_common).
enum class Promotion {
  Default,     // the promoted dtype
  IntToFloat,  // integers and bool become the default float dtype (torch.exp, torch.div)
  AlwaysBool,  // computed in the promoted dtype, the result is bool (comparisons)
};

/// torch.result_type over tensors and numbers: dimensioned tensors, zero-dim
/// tensors and Python numbers form three priority groups (c10's ResultTypeState).
DType result_type(const Builder& b, const Args& operands);

/// OpError naming `op` and `arg` where ATen would raise "value cannot be converted to type ... without overflow":
/// `v`, a constant number that an ATen kernel converts to `dtype` with c10's checked conversion (Scalar::to<T>),
/// lies beyond `dtype`'s range -- a finite float past the largest finite value (65504 for float16), a NaN or an
/// infinity for an integer dtype, an int outside the integer dtype's range (for uint8 an int down to -255 wraps, as
/// c10::overflows allows). The op then runs as an opaque torch op, and eager raises its own error. Which dtype a
/// kernel converts to is the op's (its result dtype, or the math type opmath(d) of a half-precision kernel): the
/// callers say, each as found in eager. A number known only at run time (a symbolic size, a number proxy) fails
/// where some value of it would not convert: to float16 or an integer dtype narrower than int64 (a float also to
/// int64). Tensors, bools, and bool or complex dtypes pass.
void require_convertible(const Builder& b, std::string_view op, const char* arg, const Value& v, DType dtype);
/// A 0-dim tensor `v` that an ATen kernel reads as a number (`item()`) and converts to `dtype` with
/// require_convertible's check (masked_fill's value), converted: where some value of its dtype would not convert
/// (int64 to int8, any float to an integer dtype, float32 to float16), checked when the op runs -- for an integer
/// dtype by prims.check_in_range, which raises eager's RuntimeError; for a floating one the op fails (OpError) and
/// runs with torch, which checks it.
Value item_converted(Builder& b, std::string_view op, const char* arg, const Value& v, DType dtype);
/// The largest finite value of a floating dtype (torch.finfo(d).max); float64's for any other dtype.
double finfo_max(DType d);
/// A constant number as ATen converts it to an integer dtype: an int exactly (int64 values beyond 2^53 too, which
/// a double would round), a float truncated toward zero, a bool as 0 or 1. OpError (require_convertible's) where
/// it lies beyond int64; the caller checks the narrower dtype it converts to.
Value truncated_int(std::string_view op, const char* arg, const Value& v);
/// A count of elements (a product of sizes) as a divisor: a float where it is an integer, else the symbolic size
/// itself, which a kernel takes as an argument once the sizes are bound (ir::bind_sizes for kernels), so that one
/// compiled kernel serves every size. mean's, and the 'mean' factor of var's and the losses' gradients.
Value count_divisor(const Dim& n);
/// The dtypes torch takes for index tensors: int64 and int32.
inline bool is_index_dtype(DType d) { return d == DType::Int64 || d == DType::Int32; }
/// An integer index tensor with each negative index counted from the end of a dim of `size` (i + size where i < 0),
/// as torch's indexing reads it: where(index < 0, index + size, index).
Value wrapped_index(Builder& b, const Value& index, const Dim& size);
/// `x` read at integer index tensors for its dims dim, dim + 1, ... (advanced indexing with the index tensors
/// adjacent, `x[:, i, j]`): the indices wrapped (wrapped_index), broadcast together and linearized over those dims,
/// then index_select of `x` with those dims flattened into one. The result has the indices' broadcast shape in
/// place of the dims they index.
Value read_at_indices(Builder& b, const Value& x, int64_t dim, const std::vector<Value>& indices);
/// Casts a tensor to `dtype` if it has another dtype; numbers pass unchanged.
Value cast(Builder& b, const Value& v, DType dtype);
/// Raises for a class-index target of another dtype than torch's nll_loss takes (int64; uint8 goes to torch).
void require_class_target(std::string_view op, DType target);
/// torch.nn.functional.nll_loss of log-probabilities `logp` (classes along dim 1, or dim 0 if 1-D) and
/// int64 class indices `target`; `weight` (per class) may be None; reduction "none", "mean" or "sum".
/// Decomposes into take_along_axis and arithmetic (cross_entropy is nll_loss of log_softmax).
Value nll_loss_of(Builder& b, const Value& logp, const Value& target, const Value& weight, const Value& ignore_index,
                  const std::string& reduction);
/// Attention's keys and values (scaled_dot_product_attention's k and v) with each head repeated for the
/// hq / hk consecutive query heads it serves, where enable_gqa is set and the query has more heads (grouped-query
/// attention, as torch's repeat_interleave on the head dim); otherwise k and v. OpError unless q and k are at least
/// 2-D (it comes first: attention_scale reads q's last dim).
std::pair<Value, Value> attention_heads(Builder& b, const Value& q, const Value& k, const Value& v, bool enable_gqa);
/// Attention's scale: `scale`, or 1 / sqrt(E) for None (E the query's last dim).
double attention_scale(Builder& b, const Value& q, const Value& scale);
/// Attention's scores q k^T * scale in the math type of q's dtype (float32 for half precision), -inf where a
/// causal or bool mask hides a key, plus a float mask (`mask` None, bool or floating).
Value attention_scores(Builder& b, const Value& q, const Value& key, const Value& mask, bool is_causal, double scale);
/// The normalizing ops' moments of `x` over `dims` (kept as size 1): x minus its mean, and its biased variance.
/// Corrected two-pass (Chan, Golub and LeVeque, "Algorithms for computing the sample variance", 1983): the
/// rounding error e of the first mean is taken out again, c = (x - mean) - e with e = mean(x - mean), and
/// var = mean((x - mean)^2) - e^2 (at least 0). A row of equal values then centres to exactly 0, as eager's
/// Welford moments do, where x - mean alone left e, which rsqrt(var + eps) scaled up by as much as 1/sqrt(eps)
/// (0.3 for a row of 8192 values 1000.1). It costs a third pass over the row, in the same kernel; the row is in
/// cache. (Shifting the row by its first element instead, as the shifted-data algorithm does, split the kernel
/// at the slice.)
std::pair<Value, Value> centered_moments(Builder& b, const Value& x, const std::vector<int64_t>& dims);
/// Broadcasts a tensor to `shape` (torch's rules) if it has another shape; numbers pass unchanged.
Value expand_to(Builder& b, const Value& v, const Shape& shape);
/// The elementwise prim `prim` over operands promoted and broadcast as torch does.
Value elementwise(Builder& b, std::string_view prim, const Args& operands, Promotion promotion);

/// The dims a reduction reduces, canonical; `dims` None or empty means all of them
/// (a 0-dim tensor reduces over none).
std::vector<int64_t> reduction_dims(std::string_view op, const TensorMeta& m, const Value& dims);

/// The dims (canonical) and correction of torch.var/std/var_mean/std_mean(input, dim, unbiased, keepdim, *,
/// correction), args as bound: `dim` may be the legacy `unbiased` bool; correction defaults to 1.
std::pair<std::vector<int64_t>, double> variance_args(Builder& b, const Args& a, const char* op);

/// Registers a torch-level op defined by its decomposition.
void def_decomposed(std::string name, uint32_t tags, std::vector<ir::Param> params, DecompFn decomposition);
/// Registers a torch-level op with a shape/dtype rule and no decomposition.
void def_meta(std::string name, uint32_t tags, std::vector<ir::Param> params, MetaFn meta);

/// A scalar literal Value for a double, as a Python float.
inline Value num(double d) { return Value(d); }
/// k * v for a number `v`: a literal of the product where `v` is a constant, the product computed at run time
/// where `v` is known only then (a number proxy: a module's float under dynamic=True).
Value scaled_number(Builder& b, const Value& v, double k);

// Shorthands shared by the torch-level op tables.
/// selu(x) = scale * elu(x, alpha), with the constants of Klambauer et al., "Self-Normalizing Neural Networks".
inline constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
inline constexpr double kSeluScale = 1.0507009873554804934193349852946;

inline Value Int(int64_t i) { return Value(i); }
inline Value F(double d) { return Value(d); }
/// Calls a torch-level op on the builder (decompositions read better with it).
inline Value T(Builder& b, const char* name, Args args) { return b.torch(name, std::move(args)); }
inline bool is_float(DType d) { return ir::is_floating(d) || ir::is_complex(d); }
inline bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }
/// The dtype torch computes a half-precision op in.
inline DType opmath(DType d) { return is_half(d) ? DType::Float32 : d; }
/// An operand of an op whose result dtype is `d`, as ATen's kernels read it: converted to `d` first (a wider
/// 0-dim tensor is rounded to it), then widened to the math type opmath(d). Numbers pass unchanged.
inline Value in_opmath(Builder& b, const Value& v, DType d) { return cast(b, cast(b, v, d), opmath(d)); }
/// A fresh tensor proxy with metadata `m` (outputs never start out requiring grad).
inline Value out_tensor(Builder& b, TensorMeta m) {
  m.requires_grad = false;
  return Value(ir::ProxyRef{b.new_tensor(std::move(m))});
}
/// The metadata of argument `arg` of `op`; OpError if it is not a tensor.
inline const TensorMeta& tensor(Builder& b, const std::string& op, const Value& v, const char* arg = "input") {
  if (!b.is_tensor(v)) fail(op, std::string("expected argument '") + arg + "' to be a tensor");
  return b.meta(v);
}

}  // namespace thunder::ops
