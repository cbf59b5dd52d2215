// Helpers shared by the torch-level op tables: PyTorch's type promotion,
// broadcasting, and registration.
#pragma once

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

/// Casts a tensor to `dtype` if it has another dtype; numbers pass unchanged.
Value cast(Builder& b, const Value& v, DType dtype);
/// Broadcasts a tensor to `shape` (torch's rules) if it has another shape; numbers pass unchanged.
Value expand_to(Builder& b, const Value& v, const std::vector<int64_t>& shape);
/// The elementwise prim `prim` over operands promoted and broadcast as torch does.
Value elementwise(Builder& b, std::string_view prim, const Args& operands, Promotion promotion);

/// Registers a torch-level op defined by its decomposition.
void def_decomposed(std::string name, uint32_t tags, std::vector<ir::Param> params, DecompFn decomposition);
/// Registers a torch-level op with a shape/dtype rule and no decomposition.
void def_meta(std::string name, uint32_t tags, std::vector<ir::Param> params, MetaFn meta);

/// A scalar literal Value for a double, as a Python float.
inline Value num(double d) { return Value(d); }

}  // namespace thunder::ops
