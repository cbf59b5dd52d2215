#include "ir/dim.h"

#include <algorithm>
#include <map>

namespace thunder::ir {

Dim Dim::symbol(ProxyId id) {
  Dim d;
  d.terms_.push_back(Term{{id}, 1});
  return d;
}

std::optional<int64_t> Dim::constant() const {
  if (!is_constant()) return std::nullopt;
  return constant_;
}

int64_t Dim::value(std::string_view op) const {
  if (!is_constant())
    throw SymbolicShapeError(std::string(op) + ": needs a concrete size, got the symbolic size " + str());
  return constant_;
}

void Dim::normalize() {
  std::map<std::vector<ProxyId>, int64_t> sums;
  for (Term& t : terms_) {
    std::sort(t.symbols.begin(), t.symbols.end());
    if (t.symbols.empty()) constant_ += t.coefficient;
    else sums[t.symbols] += t.coefficient;
  }
  terms_.clear();
  for (auto& [symbols, c] : sums)
    if (c != 0) terms_.push_back(Term{symbols, c});
}

Dim operator+(const Dim& a, const Dim& b) {
  Dim r = a;
  r.constant_ += b.constant_;
  r.terms_.insert(r.terms_.end(), b.terms_.begin(), b.terms_.end());
  r.normalize();
  return r;
}

Dim operator-(const Dim& a, const Dim& b) { return a + b * Dim(-1); }

Dim operator*(const Dim& a, const Dim& b) {
  Dim r;
  // (c_a + sum A)(c_b + sum B), every product of a term of one with a term of the other.
  std::vector<Dim::Term> left = a.terms_, right = b.terms_;
  left.push_back(Dim::Term{{}, a.constant_});
  right.push_back(Dim::Term{{}, b.constant_});
  for (const Dim::Term& x : left)
    for (const Dim::Term& y : right) {
      Dim::Term t{x.symbols, x.coefficient * y.coefficient};
      t.symbols.insert(t.symbols.end(), y.symbols.begin(), y.symbols.end());
      r.terms_.push_back(std::move(t));
    }
  r.normalize();
  return r;
}

Dim Dim::divide(const Dim& d, std::string_view op) const {
  if (is_constant() && d.is_constant()) {
    if (d.constant_ == 0) throw std::invalid_argument(std::string(op) + ": division of a size by zero");
    return Dim(constant_ / d.constant_);
  }
  if (*this == d) return Dim(1);
  if (d.is_constant() && d.constant_ != 0) {
    bool exact = constant_ % d.constant_ == 0;
    for (const Term& t : terms_) exact = exact && t.coefficient % d.constant_ == 0;
    if (exact) {
      Dim r = *this;
      r.constant_ /= d.constant_;
      for (Term& t : r.terms_) t.coefficient /= d.constant_;
      return r;
    }
  }
  // A monomial divisor that divides every term (s0*s1*768 / s1).
  if (d.constant_ == 0 && d.terms_.size() == 1 && constant_ == 0) {
    const Term& m = d.terms_[0];
    Dim r;
    bool exact = true;
    for (const Term& t : terms_) {
      std::vector<ProxyId> rest;
      bool contains = std::includes(t.symbols.begin(), t.symbols.end(), m.symbols.begin(), m.symbols.end());
      if (!contains || t.coefficient % m.coefficient != 0) { exact = false; break; }
      std::set_difference(t.symbols.begin(), t.symbols.end(), m.symbols.begin(), m.symbols.end(),
                          std::back_inserter(rest));
      r.terms_.push_back(Term{rest, t.coefficient / m.coefficient});
    }
    if (exact) {
      r.normalize();
      return r;
    }
  }
  throw SymbolicShapeError(std::string(op) + ": cannot divide the size " + str() + " by " + d.str() + " exactly");
}

Dim Dim::ceil_divide(int64_t d, std::string_view op) const {
  if (is_constant()) return Dim((constant_ + d - 1) / d);
  return divide(Dim(d), op);
}

namespace {
// Whether x > 0, where it is provable with every symbol at least 2; nullopt if not. A polynomial whose
// non-constant coefficients are all positive grows with every symbol, so it is smallest with them at 2; one
// whose coefficients are all negative is largest there.
std::optional<bool> positive(const Dim& x) {
  if (x.is_constant()) return *x.constant() > 0;
  bool all_positive = true, all_negative = true;
  int64_t at_two = x.constant_term();
  for (const Dim::Term& t : x.terms()) {
    all_positive = all_positive && t.coefficient > 0;
    all_negative = all_negative && t.coefficient < 0;
    at_two += t.coefficient * (int64_t{1} << std::min<size_t>(t.symbols.size(), 30));
  }
  if (all_positive && at_two > 0) return true;
  if (all_negative && at_two <= 0) return false;
  return std::nullopt;
}
}  // namespace

bool operator<(const Dim& a, const Dim& b) {
  std::optional<bool> p = positive(b - a);
  if (!p) throw SymbolicShapeError("cannot compare the sizes " + a.str() + " and " + b.str());
  return *p;
}

std::string Dim::str(const std::function<std::string(ProxyId)>& name) const {
  std::string out;
  for (const Term& t : terms_) {
    int64_t c = t.coefficient;
    if (!out.empty()) {
      out += c < 0 ? " - " : " + ";
      c = c < 0 ? -c : c;
    } else if (c == -1) {
      out += "-";
    }
    std::string product;
    if (c != 1 && c != -1) product = std::to_string(c);
    for (ProxyId s : t.symbols) product += (product.empty() ? "" : "*") + name(s);
    out += product;
  }
  if (out.empty()) return std::to_string(constant_);
  if (constant_ > 0) out += " + " + std::to_string(constant_);
  if (constant_ < 0) out += " - " + std::to_string(-constant_);
  return out;
}

std::string Dim::str() const {
  return str([](ProxyId id) { return "s" + std::to_string(id); });
}

Dim Dim::substitute(const std::function<Dim(ProxyId)>& f) const {
  Dim r(constant_);
  for (const Term& t : terms_) {
    Dim m(t.coefficient);
    for (ProxyId s : t.symbols) m = m * f(s);
    r = r + m;
  }
  return r;
}

void Dim::for_each_symbol(const std::function<void(ProxyId)>& f) const {
  std::vector<ProxyId> all;
  for (const Term& t : terms_) all.insert(all.end(), t.symbols.begin(), t.symbols.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  for (ProxyId s : all) f(s);
}

std::vector<int64_t> concrete(const Shape& shape, std::string_view op) {
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const Dim& d : shape) out.push_back(d.value(op));
  return out;
}

bool is_concrete(const Shape& shape) {
  return std::all_of(shape.begin(), shape.end(), [](const Dim& d) { return d.is_constant(); });
}

Shape dims_of(const std::vector<int64_t>& shape) { return Shape(shape.begin(), shape.end()); }

Dim product(const Shape& shape) {
  Dim n(1);
  for (const Dim& d : shape) n *= d;
  return n;
}

}  // namespace thunder::ir
