#include "ir/dtype.h"

#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace thunder::ir {
namespace {

struct DTypeInfo {
  std::string_view name;
  std::string_view short_name;
  DTypeCategory category;
  int size;
};

constexpr std::array<DTypeInfo, 12> kInfo{{
    {"bool", "b8", DTypeCategory::Bool, 1},
    {"uint8", "u8", DTypeCategory::Integer, 1},
    {"int8", "i8", DTypeCategory::Integer, 1},
    {"int16", "i16", DTypeCategory::Integer, 2},
    {"int32", "i32", DTypeCategory::Integer, 4},
    {"int64", "i64", DTypeCategory::Integer, 8},
    {"float16", "f16", DTypeCategory::Floating, 2},
    {"bfloat16", "bf16", DTypeCategory::Floating, 2},
    {"float32", "f32", DTypeCategory::Floating, 4},
    {"float64", "f64", DTypeCategory::Floating, 8},
    {"complex64", "c64", DTypeCategory::Complex, 8},
    {"complex128", "c128", DTypeCategory::Complex, 16},
}};

const DTypeInfo& info(DType d) { return kInfo[static_cast<size_t>(d)]; }

}  // namespace

DTypeCategory category(DType d) { return info(d).category; }
bool is_floating(DType d) { return category(d) == DTypeCategory::Floating; }
bool is_complex(DType d) { return category(d) == DTypeCategory::Complex; }
bool is_integer(DType d) { return category(d) == DTypeCategory::Integer; }
int item_size(DType d) { return info(d).size; }
std::string_view dtype_name(DType d) { return info(d).name; }
std::string_view dtype_short_name(DType d) { return info(d).short_name; }

DType dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name) return static_cast<DType>(i);
  throw std::invalid_argument("unknown dtype name '" + std::string(name) + "'");
}

DType to_complex(DType d) {
  if (is_complex(d)) return d;
  return d == DType::Float64 ? DType::Complex128 : DType::Complex64;
}

DType to_real(DType d) {
  if (d == DType::Complex64) return DType::Float32;
  if (d == DType::Complex128) return DType::Float64;
  return d;
}

// The rules of c10::promoteTypes, written as cases rather than a 12x12 table.
DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  DTypeCategory ca = category(a), cb = category(b);
  if (ca != cb) {
    DType hi = ca > cb ? a : b, lo = ca > cb ? b : a;
    // complex meets float: keep the wider precision (complex64 + float64 -> complex128).
    if (is_complex(hi) && is_floating(lo) && lo == DType::Float64) return DType::Complex128;
    return hi;
  }
  if (ca == DTypeCategory::Integer) {
    bool a_unsigned = a == DType::UInt8, b_unsigned = b == DType::UInt8;
    if (a_unsigned || b_unsigned) {
      DType other = a_unsigned ? b : a;
      return other == DType::Int8 ? DType::Int16 : other;
    }
    return item_size(a) >= item_size(b) ? a : b;
  }
  if (ca == DTypeCategory::Floating) {
    bool a_half = item_size(a) == 2, b_half = item_size(b) == 2;
    if (a_half && b_half) return DType::Float32;  // float16 with bfloat16
    return item_size(a) >= item_size(b) ? a : b;
  }
  return item_size(a) >= item_size(b) ? a : b;  // both complex
}

const char* number_type_name(NumberType t) {
  switch (t) {
    case NumberType::Bool: return "bool";
    case NumberType::Int: return "int";
    case NumberType::Float: return "float";
    case NumberType::Complex: return "complex";
  }
  return "float";
}

DType default_dtype_for(NumberType t) {
  switch (t) {
    case NumberType::Bool: return DType::Bool;
    case NumberType::Int: return DType::Int64;
    case NumberType::Float: return DType::Float32;
    case NumberType::Complex: return DType::Complex64;
  }
  return DType::Float32;
}

double round_to(double v, DType d) {
  const float f = static_cast<float>(v);
  if (d == DType::Float32) return f;
  if (d == DType::Float16) return static_cast<float>(static_cast<_Float16>(f));
  if (d != DType::BFloat16 || std::isnan(f)) return d == DType::Float64 || !is_floating(d) ? v : f;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest, ties to even, on the 16 bits kept
  bits &= 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

}  // namespace thunder::ir
