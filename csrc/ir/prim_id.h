// The identity of each prim: the closed set of primitives every trace lowers to.
//
// Passes, code generators and executors key their per-prim rules by PrimId (see
// PrimTable), never by comparing names. Adding a prim is one X(...) line here, its
// shape/dtype rule in ops/prims.cc (or torch_layout.cc / torch_mutation.cc), and one
// row in each transform's table; a missing row is an error naming the prim and the transform.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#define THUNDER_PRIMS(X)                                                                                       \
  /* unary elementwise */                                                                                      \
  X(neg) X(exp) X(exp2) X(log) X(log2) X(log10) X(log1p) X(expm1) X(sqrt) X(rsqrt) X(sin) X(cos) X(tan)        \
  X(asin) X(acos) X(atan) X(sinh) X(cosh) X(tanh) X(asinh) X(acosh) X(atanh) X(erf) X(erfc) X(erfinv)         \
  X(lgamma) X(digamma) X(floor) X(ceil) X(round) X(trunc) X(sign) X(reciprocal) X(bitwise_not) X(sigmoid)     \
  X(abs) X(isnan) X(isinf) X(isfinite) X(signbit) X(logical_not)                                               \
  /* binary elementwise */                                                                                     \
  X(add) X(sub) X(mul) X(div) X(remainder) X(fmod) X(pow) X(maximum) X(minimum) X(atan2) X(bitwise_and)        \
  X(bitwise_or) X(bitwise_xor) X(bitwise_left_shift) X(bitwise_right_shift) X(floor_divide) X(copysign)        \
  X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(logical_and) X(logical_or) X(logical_xor)                              \
  /* ternary elementwise, type conversion */                                                                   \
  X(where) X(convert_element_type)                                                                             \
  /* shape */                                                                                                  \
  X(broadcast_in_dim) X(reshape) X(transpose) X(slice) X(squeeze) X(cat) X(flip) X(alias)                      \
  /* reductions */                                                                                             \
  X(sum) X(prod) X(amax) X(amin) X(var) X(argmax) X(argmin)                                                     \
  /* linear algebra, creation, indexing */                                                                     \
  X(matmul) X(full) X(iota) X(tensor_constant) X(take) X(take_along_axis) X(clone) X(gather) X(scatter)        \
  X(scatter_add) X(scatter_reduce) X(index_add) X(index_copy) X(index_fill) X(index_put)                        \
  /* randomness: a seed drawn from torch's generator, and counter-based uniforms (a pure function of it) */     \
  X(random_seed) X(uniform_philox)                                                                             \
  /* writes, autograd and regions */                                                                           \
  X(copy_to) X(slice_update) X(detach) X(branch_begin) X(branch_else) X(branch_end)                        \
  /* a check of the values eager's kernel makes, raising as it does */                                       \
  X(check_in_range)

namespace thunder::ir {

/// One value per prim; `none` marks a symbol that is not a prim (torch-level, opaque, fusion).
enum class PrimId : uint16_t {
  none,
#define THUNDER_PRIM_ENUM(n) n,
  THUNDER_PRIMS(THUNDER_PRIM_ENUM)
#undef THUNDER_PRIM_ENUM
};

/// How many prims there are.
inline constexpr size_t kNumPrims = 0
#define THUNDER_PRIM_COUNT(n) +1
    THUNDER_PRIMS(THUNDER_PRIM_COUNT)
#undef THUNDER_PRIM_COUNT
    ;

/// A prim's name as traces print it after "prims." ("add"); "" for PrimId::none.
std::string_view prim_name(PrimId id);
/// The PrimId of a prim's name, or nullopt if no prim has it.
std::optional<PrimId> prim_id(std::string_view name);

/// One rule per prim for one transform (folding, CPU expressions, VJPs, ...). Rows left
/// unset are absent: `at` names the prim and the transform in its error.
template <class Rule>
class PrimTable {
 public:
  explicit PrimTable(std::string transform) : transform_(std::move(transform)) {}
  PrimTable& set(PrimId id, Rule rule) {
    rows_[index(id)] = std::move(rule);
    return *this;
  }
  /// The row of `id`, or nullptr if it has none (also for PrimId::none).
  const Rule* find(PrimId id) const {
    if (id == PrimId::none) return nullptr;
    const std::optional<Rule>& r = rows_[index(id)];
    return r ? &*r : nullptr;
  }
  /// The row of `id`; std::logic_error "no <transform> rule for prims.<name>" if absent.
  const Rule& at(PrimId id) const {
    if (const Rule* r = find(id)) return *r;
    throw std::logic_error("no " + transform_ + " rule for prims." + std::string(prim_name(id)));
  }
  bool contains(PrimId id) const { return find(id) != nullptr; }

 private:
  static size_t index(PrimId id) {
    if (id == PrimId::none) throw std::logic_error("PrimTable: PrimId::none has no row");
    return static_cast<size_t>(id) - 1;
  }
  std::string transform_;
  std::array<std::optional<Rule>, kNumPrims> rows_{};
};

}  // namespace thunder::ir
