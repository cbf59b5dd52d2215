// Tests of the dtype table and torch's type-promotion lattice (ir/dtype.h).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include "ir/dtype.h"

namespace thunder::ir {
namespace {

constexpr std::array<DType, 12> kAll{DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int16,
                                     DType::Int32,   DType::Int64,    DType::Float16, DType::BFloat16,
                                     DType::Float32, DType::Float64,  DType::Complex64, DType::Complex128};

TEST(DType, PromoteUInt8WithInt8IsInt16) {
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int8), DType::Int16);
  EXPECT_EQ(promote_types(DType::Int8, DType::UInt8), DType::Int16);
}

TEST(DType, PromoteUInt8WithWiderSignedKeepsTheSignedType) {
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int16), DType::Int16);
  EXPECT_EQ(promote_types(DType::UInt8, DType::Int64), DType::Int64);
}

TEST(DType, PromoteBFloat16WithFloat16IsFloat32) {
  EXPECT_EQ(promote_types(DType::BFloat16, DType::Float16), DType::Float32);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
}

TEST(DType, PromoteBoolWithAnythingIsTheOther) {
  for (DType d : kAll) {
    EXPECT_EQ(promote_types(DType::Bool, d), d) << dtype_name(d);
    EXPECT_EQ(promote_types(d, DType::Bool), d) << dtype_name(d);
  }
}

TEST(DType, PromoteIntegerWithFloatTakesTheFloatEvenIfNarrower) {
  EXPECT_EQ(promote_types(DType::Int64, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Int64, DType::BFloat16), DType::BFloat16);
  EXPECT_EQ(promote_types(DType::Int32, DType::Float32), DType::Float32);
}

TEST(DType, PromoteComplex64WithFloat64IsComplex128) {
  EXPECT_EQ(promote_types(DType::Complex64, DType::Float64), DType::Complex128);
  EXPECT_EQ(promote_types(DType::Float64, DType::Complex64), DType::Complex128);
  EXPECT_EQ(promote_types(DType::Complex64, DType::Float32), DType::Complex64);
  EXPECT_EQ(promote_types(DType::Complex64, DType::Int64), DType::Complex64);
}

// The whole of torch.promote_types over these dtypes, as printed by torch 2.x.
TEST(DType, PromoteTypesMatchesTorchTable) {
  using enum DType;
  constexpr DType U8 = UInt8, I8 = Int8, I16 = Int16, I32 = Int32, I64 = Int64, F16 = Float16, BF16 = BFloat16,
                  F32 = Float32, F64 = Float64, C64 = Complex64, C128 = Complex128;
  const DType table[12][12] = {
      /* Bool */ {Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64, C64, C128},
      /* U8   */ {U8, U8, I16, I16, I32, I64, F16, BF16, F32, F64, C64, C128},
      /* I8   */ {I8, I16, I8, I16, I32, I64, F16, BF16, F32, F64, C64, C128},
      /* I16  */ {I16, I16, I16, I16, I32, I64, F16, BF16, F32, F64, C64, C128},
      /* I32  */ {I32, I32, I32, I32, I32, I64, F16, BF16, F32, F64, C64, C128},
      /* I64  */ {I64, I64, I64, I64, I64, I64, F16, BF16, F32, F64, C64, C128},
      /* F16  */ {F16, F16, F16, F16, F16, F16, F16, F32, F32, F64, C64, C128},
      /* BF16 */ {BF16, BF16, BF16, BF16, BF16, BF16, F32, BF16, F32, F64, C64, C128},
      /* F32  */ {F32, F32, F32, F32, F32, F32, F32, F32, F32, F64, C64, C128},
      /* F64  */ {F64, F64, F64, F64, F64, F64, F64, F64, F64, F64, C128, C128},
      /* C64  */ {C64, C64, C64, C64, C64, C64, C64, C64, C64, C128, C64, C128},
      /* C128 */ {C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128, C128},
  };
  for (size_t i = 0; i < kAll.size(); ++i)
    for (size_t j = 0; j < kAll.size(); ++j)
      EXPECT_EQ(promote_types(kAll[i], kAll[j]), table[i][j])
          << dtype_name(kAll[i]) << " + " << dtype_name(kAll[j]) << " gave " << dtype_name(promote_types(kAll[i], kAll[j]))
          << ", expected " << dtype_name(table[i][j]);
}

TEST(DType, PromoteTypesIsCommutative) {
  for (DType a : kAll)
    for (DType b : kAll) EXPECT_EQ(promote_types(a, b), promote_types(b, a)) << dtype_name(a) << ", " << dtype_name(b);
}

TEST(DType, DTypeFromNameRoundTrips) {
  for (DType d : kAll) EXPECT_EQ(dtype_from_name(dtype_name(d)), d) << dtype_name(d);
}

TEST(DType, NamesFollowTorch) {
  EXPECT_EQ(dtype_name(DType::Float32), "float32");
  EXPECT_EQ(dtype_name(DType::BFloat16), "bfloat16");
  EXPECT_EQ(dtype_name(DType::Complex128), "complex128");
  EXPECT_EQ(dtype_short_name(DType::Float32), "f32");
  EXPECT_EQ(dtype_short_name(DType::Bool), "b8");
  EXPECT_EQ(dtype_short_name(DType::BFloat16), "bf16");
}

TEST(DType, UnknownNameThrowsInvalidArgument) {
  EXPECT_THROW(dtype_from_name("float128"), std::invalid_argument);
  EXPECT_THROW(dtype_from_name(""), std::invalid_argument);
  EXPECT_THROW(dtype_from_name("torch.float32"), std::invalid_argument);  // the bare name only
  try {
    dtype_from_name("quux");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("quux"), std::string::npos) << e.what();
  }
}

TEST(DType, Categories) {
  EXPECT_EQ(category(DType::Bool), DTypeCategory::Bool);
  EXPECT_TRUE(is_integer(DType::UInt8));
  EXPECT_FALSE(is_integer(DType::Bool));
  EXPECT_TRUE(is_floating(DType::BFloat16));
  EXPECT_FALSE(is_floating(DType::Complex64));
  EXPECT_TRUE(is_complex(DType::Complex64));
}

TEST(DType, ItemSizes) {
  EXPECT_EQ(item_size(DType::Bool), 1);
  EXPECT_EQ(item_size(DType::BFloat16), 2);
  EXPECT_EQ(item_size(DType::Int32), 4);
  EXPECT_EQ(item_size(DType::Float64), 8);
  EXPECT_EQ(item_size(DType::Complex64), 8);
  EXPECT_EQ(item_size(DType::Complex128), 16);
}

TEST(DType, DefaultDtypesOfPythonNumbers) {
  EXPECT_EQ(default_dtype_for(NumberType::Bool), DType::Bool);
  EXPECT_EQ(default_dtype_for(NumberType::Int), DType::Int64);
  EXPECT_EQ(default_dtype_for(NumberType::Float), DType::Float32);
  EXPECT_EQ(default_dtype_for(NumberType::Complex), DType::Complex64);
}

TEST(DType, ComplexAndRealCounterparts) {
  EXPECT_EQ(to_complex(DType::Float64), DType::Complex128);
  EXPECT_EQ(to_complex(DType::Float32), DType::Complex64);
  EXPECT_EQ(to_complex(DType::Complex128), DType::Complex128);
  EXPECT_EQ(to_real(DType::Complex64), DType::Float32);
  EXPECT_EQ(to_real(DType::Complex128), DType::Float64);
  EXPECT_EQ(to_real(DType::Int32), DType::Int32);
}

TEST(DType, RoundToAFloatingDtype) {
  EXPECT_EQ(round_to(2.3456, DType::BFloat16), 2.34375);  // torch.tensor(2.3456).bfloat16().item()
  EXPECT_EQ(round_to(257.0, DType::BFloat16), 256.0);     // a tie, to even
  EXPECT_EQ(round_to(259.0, DType::BFloat16), 260.0);     // a tie, to even
  EXPECT_EQ(round_to(2.3456, DType::Float16), 2.345703125);
  EXPECT_EQ(round_to(0.1, DType::Float32), static_cast<double>(0.1f));
  EXPECT_EQ(round_to(0.1, DType::Float64), 0.1);
  EXPECT_EQ(round_to(0.1, DType::Int64), 0.1);
  EXPECT_EQ(round_to(1e39, DType::BFloat16), INFINITY);
  EXPECT_TRUE(std::isnan(round_to(NAN, DType::BFloat16)));
}

}  // namespace
}  // namespace thunder::ir
