// Tensor element types and PyTorch's type-promotion lattice.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace thunder::ir {

/// Element type of a tensor; the names follow torch.dtype.
enum class DType : uint8_t {
  Bool, UInt8, Int8, Int16, Int32, Int64,
  Float16, BFloat16, Float32, Float64, Complex64, Complex128,
};

/// Category used by type promotion: bool < integer < floating < complex.
enum class DTypeCategory : uint8_t { Bool = 0, Integer = 1, Floating = 2, Complex = 3 };

/// The Python type of a number proxy or literal.
enum class NumberType : uint8_t { Bool, Int, Float, Complex };

DTypeCategory category(DType d);
bool is_floating(DType d);
bool is_complex(DType d);
bool is_integer(DType d);  // excludes bool
int item_size(DType d);    // bytes per element

/// "float32", as in torch.float32.
std::string_view dtype_name(DType d);
/// "f32", the short form used in trace comments.
std::string_view dtype_short_name(DType d);
/// Inverse of dtype_name; throws std::invalid_argument for an unknown name.
DType dtype_from_name(std::string_view name);

/// torch.promote_types(a, b).
DType promote_types(DType a, DType b);

/// The dtype a Python number of this type takes when it meets tensors
/// (bool -> bool, int -> int64, float -> float32 (torch's default dtype), complex -> complex64).
DType default_dtype_for(NumberType t);
/// The Python type's name: "bool", "int", "float", "complex".
const char* number_type_name(NumberType t);

/// The complex dtype whose parts have the precision of `d` (float64 -> complex128, else complex64).
DType to_complex(DType d);
/// The real dtype of a complex `d`; `d` itself otherwise.
DType to_real(DType d);

/// A Python float stored in a floating-point `d`, read back: rounded to float32 for float32, and through
/// float32 to the nearest even float16 or bfloat16 for those (as c10's conversions from double do); any other
/// dtype leaves it unchanged. E.g. 2.3456 -> 2.34375 in bfloat16.
double round_to(double v, DType d);

}  // namespace thunder::ir
