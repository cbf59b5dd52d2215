// Dimensions: the size of one axis of a tensor, an integer or a polynomial in size symbols.
//
// A graph Dynamo captures with symbolic sizes names each free size by a symbol (its `s0` input, a
// `torch.SymInt`); thunder makes that input an int number proxy of the trace and every size computed from it a
// polynomial with integer coefficients in such proxies (`s0`, `12*s0`, `s0*s1`, `s0 + 1`). Shape rules compute
// with Dims as they would with integers; where a rule needs a decision the polynomial does not settle, or an
// integer it does not have, it throws SymbolicShapeError, and that op goes opaque in that graph (or the graph
// is compiled per concrete shape) -- never a wrong shape.
//
// Facts assumed about symbols, which Dynamo's guards establish (sizes 0 and 1 are specialized, never symbols):
// every symbol is at least 2. Two different polynomials may still be equal at run time (s0 and s1 both 5);
// `==` is identity of polynomials, so a rule that requires equal sizes accepts only sizes it can prove equal.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace thunder::ir {

using ProxyId = int32_t;

/// A shape rule met a symbolic size it cannot decide on or compute with; the message names the op and the size.
/// The importer makes that op opaque; a pass that throws it makes the graph compile per concrete shape.
struct SymbolicShapeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Dim {
 public:
  /// One monomial: its coefficient times the product of its symbols (sorted, repeated for powers).
  struct Term {
    std::vector<ProxyId> symbols;
    int64_t coefficient = 0;
    bool operator==(const Term&) const = default;
  };

  Dim() = default;
  template <std::integral T>
  Dim(T value) : constant_(static_cast<int64_t>(value)) {}  // NOLINT: an integer is a dimension
  /// The size symbol `id` (an int number proxy of the trace).
  static Dim symbol(ProxyId id);

  bool is_constant() const { return terms_.empty(); }
  /// The integer, if this is one.
  std::optional<int64_t> constant() const;
  /// The integer; SymbolicShapeError naming `op` if this is symbolic.
  int64_t value(std::string_view op) const;
  /// The constant term and the monomials with a symbol (sorted, no zero coefficients).
  int64_t constant_term() const { return constant_; }
  const std::vector<Term>& terms() const { return terms_; }

  friend Dim operator+(const Dim& a, const Dim& b);
  friend Dim operator-(const Dim& a, const Dim& b);
  friend Dim operator*(const Dim& a, const Dim& b);
  Dim& operator+=(const Dim& o) { return *this = *this + o; }
  Dim& operator-=(const Dim& o) { return *this = *this - o; }
  Dim& operator*=(const Dim& o) { return *this = *this * o; }
  /// This divided by `d`, which must divide it exactly (every coefficient, or the constant), else
  /// SymbolicShapeError naming `op`. Constants divide as C++ does (the caller checks divisibility).
  Dim divide(const Dim& d, std::string_view op) const;
  /// ceil(this / d) for a positive integer d: exact division for symbolic values that d divides, else
  /// SymbolicShapeError naming `op`.
  Dim ceil_divide(int64_t d, std::string_view op) const;

  /// Identity of polynomials (sizes that are provably equal).
  friend bool operator==(const Dim& a, const Dim& b) = default;
  /// Ordering, decided where the sign of a - b is provable with every symbol at least 2; else
  /// SymbolicShapeError.
  friend bool operator<(const Dim& a, const Dim& b);
  friend bool operator>(const Dim& a, const Dim& b) { return b < a; }
  friend bool operator<=(const Dim& a, const Dim& b) { return !(b < a); }
  friend bool operator>=(const Dim& a, const Dim& b) { return !(a < b); }

  /// Python source of the value: "12*s0 + 1", symbols named by `name`.
  std::string str(const std::function<std::string(ProxyId)>& name) const;
  /// The same with symbols named "s<id>" (for messages).
  std::string str() const;
  /// The value with every symbol replaced by f(symbol).
  Dim substitute(const std::function<Dim(ProxyId)>& f) const;
  /// Calls f(symbol) for every symbol, once each, in increasing order.
  void for_each_symbol(const std::function<void(ProxyId)>& f) const;

 private:
  int64_t constant_ = 0;
  std::vector<Term> terms_;
  void normalize();
};

using Shape = std::vector<Dim>;

/// The dims as integers; SymbolicShapeError naming `op` if one is symbolic.
std::vector<int64_t> concrete(const Shape& shape, std::string_view op);
/// Whether every dim is an integer.
bool is_concrete(const Shape& shape);
/// The dims of an integer shape.
Shape dims_of(const std::vector<int64_t>& shape);
/// The product of the dims.
Dim product(const Shape& shape);

}  // namespace thunder::ir
