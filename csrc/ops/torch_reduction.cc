// Torch-level reductions: dims and keepdim handling, accumulation dtypes.
#include "ops/torch_common.h"

namespace thunder::ops {
namespace {

using ir::kReduction;
const ir::Param kInput = req("input");

// Reinserts reduced dims as size-1 dims.
Value keep_dims(Builder& b, const Value& reduced, const TensorMeta& in, const std::vector<int64_t>& dims) {
  Shape shape = in.shape;
  for (int64_t d : dims) shape[d] = 1;
  if (shape == b.meta(reduced).shape) return reduced;
  return b.prim("reshape", {reduced, Value::dims(shape)});
}

Value reduce(Builder& b, std::string_view prim, const Value& x, const std::vector<int64_t>& dims, bool keepdim) {
  TensorMeta in = b.meta(x);
  Value r = b.prim(prim, {x, Value::ints(dims)});
  return keepdim ? keep_dims(b, r, in, dims) : r;
}


}  // namespace

void register_torch_reduction() {
  // sum: integers and bool accumulate in int64, like torch.sum.
  def_decomposed("sum", kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false)), opt("dtype", Value())},
                 [](Builder& b, const Args& a) {
                   const TensorMeta& m = b.meta(a[0]);
                   DType d = a[3].is_none() ? (ir::is_integer(m.dtype) || m.dtype == DType::Bool ? DType::Int64 : m.dtype)
                                            : a[3].as_dtype();
                   auto dims = reduction_dims("ltorch.sum", m, a[1]);
                   return reduce(b, "sum", cast(b, a[0], d), dims, a[2].as_bool());
                 });
  def_decomposed("prod", kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false)), opt("dtype", Value())},
                 [](Builder& b, const Args& a) {
                   const TensorMeta& m = b.meta(a[0]);
                   DType d = a[3].is_none() ? (ir::is_integer(m.dtype) || m.dtype == DType::Bool ? DType::Int64 : m.dtype)
                                            : a[3].as_dtype();
                   auto dims = reduction_dims("ltorch.prod", m, a[1]);
                   return reduce(b, "prod", cast(b, a[0], d), dims, a[2].as_bool());
                 });
  // mean = sum / count, accumulated in float32 for half types.
  def_decomposed("mean", kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false)), opt("dtype", Value())},
                 [](Builder& b, const Args& a) {
                   const TensorMeta& m = b.meta(a[0]);
                   DType d = a[3].is_none() ? m.dtype : a[3].as_dtype();
                   if (!ir::is_floating(d) && !ir::is_complex(d))
                     fail("ltorch.mean", "could not infer output dtype: input dtype must be floating point or complex, got " +
                                             std::string(ir::dtype_name(d)));
                   auto dims = reduction_dims("ltorch.mean", m, a[1]);
                   Dim count = 1;
                   for (int64_t dim : dims) count *= m.shape[dim];
                   DType acc = is_half(d) ? DType::Float32 : d;
                   Value s = reduce(b, "sum", cast(b, a[0], acc), dims, a[2].as_bool());
                   return cast(b, b.torch("div", {s, count_divisor(count)}), d);
                 });
  for (const char* name : {"amax", "amin"}) {
    def_decomposed(name, kReduction, {kInput, opt("dim", Value::tuple({})), opt("keepdim", Value(false))},
                   [name](Builder& b, const Args& a) {
                     const TensorMeta& m = b.meta(a[0]);
                     const std::string op = std::string("ltorch.") + name;  // errors name the torch op
                     std::vector<int64_t> dims = reduction_dims(op, m, a[1]);
                     for (int64_t d : dims)
                       if (m.shape[d] == 0) fail(op, "cannot reduce over a zero-size dimension");
                     return reduce(b, name, a[0], dims, a[2].as_bool());
                   });
  }
  // torch.max(x) / torch.min(x): amax / amin over every dim, differentiated by the prims' rule, which shares the
  // gradient among the NaNs of a NaN result as torch's evenly_distribute_backward does (amax's own rule does not).
  for (const char* name : {"max", "min"}) {
    const char* prim = std::string(name) == "max" ? "amax" : "amin";
    def_decomposed(name, kReduction, {kInput}, [name, prim](Builder& b, const Args& a) {
      const TensorMeta& m = b.meta(a[0]);
      if (m.numel() == 0) fail(std::string("ltorch.") + name, "cannot reduce an empty tensor");
      return reduce(b, prim, a[0], reduction_dims(std::string("ltorch.") + name, m, Value::tuple({})), false);
    });
  }
  for (const char* name : {"argmax", "argmin"}) {
    def_decomposed(name, kReduction, {kInput, opt("dim", Value()), opt("keepdim", Value(false))},
                   [name](Builder& b, const Args& a) {
                     const TensorMeta& m = b.meta(a[0]);
                     if (a[1].is_none()) {
                       Value r = b.prim(name, {a[0], Value()});
                       if (!a[2].as_bool()) return r;
                       return b.prim("reshape", {r, Value::ints(std::vector<int64_t>(m.shape.size(), 1))});
                     }
                     int64_t d = canonical_dim(std::string("ltorch.") + name, a[1].as_int(), m.ndim());
                     if (m.ndim() == 0) return b.prim(name, {a[0], Value()});
                     Value r = b.prim(name, {a[0], Value(d)});
                     return a[2].as_bool() ? keep_dims(b, r, m, {d}) : r;
                   });
  }
}

}  // namespace thunder::ops
