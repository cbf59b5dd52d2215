// Values: the arguments and results of bound symbols.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "ir/dim.h"
#include "ir/dtype.h"

namespace thunder::ir {

struct NoneT { bool operator==(const NoneT&) const = default; };
struct EllipsisT { bool operator==(const EllipsisT&) const = default; };
/// A reference to a tensor or number proxy.
struct ProxyRef {
  ProxyId id;
  bool operator==(const ProxyRef&) const = default;
};
/// A Python object the core does not interpret, kept as the source text that
/// recreates it (e.g. "torch.contiguous_format"); printed verbatim.
struct Literal {
  std::string text;
  bool operator==(const Literal&) const = default;
};
struct Str {
  std::string text;
  bool operator==(const Str&) const = default;
};
struct Value;
/// A Python list, tuple or slice (a slice holds exactly start, stop, step).
struct Seq {
  enum class Kind : uint8_t { List, Tuple, Slice };
  Kind kind;
  std::vector<Value> items;
  bool operator==(const Seq&) const;
};

/// An argument or result: None, bool, int, float, str, dtype, Ellipsis,
/// a verbatim literal, a proxy, a list/tuple/slice of values, or a symbolic size (a Dim that is not an
/// integer: integers are always held as int64_t).
struct Value {
  std::variant<NoneT, bool, int64_t, double, Str, DType, EllipsisT, Literal, ProxyRef, Seq, Dim> v;

  Value() : v(NoneT{}) {}
  Value(bool b) : v(b) {}
  Value(int64_t i) : v(i) {}
  Value(int i) : v(static_cast<int64_t>(i)) {}
  Value(double d) : v(d) {}
  Value(DType d) : v(d) {}
  Value(ProxyRef p) : v(p) {}
  Value(Str s) : v(std::move(s)) {}
  Value(Literal l) : v(std::move(l)) {}
  Value(EllipsisT e) : v(e) {}
  Value(Seq s) : v(std::move(s)) {}
  Value(const Dim& d) {
    if (auto c = d.constant()) v = *c;
    else v = d;
  }

  static Value list(std::vector<Value> items) { return Value(Seq{Seq::Kind::List, std::move(items)}); }
  static Value tuple(std::vector<Value> items) { return Value(Seq{Seq::Kind::Tuple, std::move(items)}); }
  static Value ints(const std::vector<int64_t>& xs);
  static Value dims(const Shape& xs);

  bool is_none() const { return std::holds_alternative<NoneT>(v); }
  bool is_proxy() const { return std::holds_alternative<ProxyRef>(v); }
  bool is_seq() const { return std::holds_alternative<Seq>(v); }
  /// A symbolic size (never an integer).
  bool is_symbolic() const { return std::holds_alternative<Dim>(v); }
  /// True for bool, int and float literals and symbolic sizes (an int known when the sizes are bound); not
  /// for proxies.
  bool is_number() const;

  ProxyId proxy() const;                // throws if not a proxy
  int64_t as_int() const;               // accepts bool and int; SymbolicShapeError for a symbolic size
  Dim as_dim() const;                   // accepts bool, int and symbolic sizes
  double as_double() const;             // accepts bool, int, float
  bool as_bool() const;
  DType as_dtype() const;
  const std::string& as_str() const;
  const std::vector<Value>& items() const;  // list, tuple or slice
  std::vector<int64_t> as_ints() const;     // a list/tuple of ints, or one int
  Shape as_dims() const;                    // the same, its items ints or symbolic sizes

  bool operator==(const Value& o) const { return v == o.v; }
};

/// Calls f(ProxyId) for every proxy inside `v` (the symbols of a symbolic size included), depth first, left
/// to right.
template <class F>
void for_each_proxy(const Value& v, F&& f) {
  if (auto* p = std::get_if<ProxyRef>(&v.v)) f(p->id);
  else if (auto* d = std::get_if<Dim>(&v.v)) d->for_each_symbol([&](ProxyId id) { f(id); });
  else if (auto* s = std::get_if<Seq>(&v.v))
    for (const Value& item : s->items) for_each_proxy(item, f);
}

/// A symbol of a symbolic size replaced by the Value a substitution maps it to: a proxy, an int or a size.
Dim substituted_symbol(const Value& replacement);

/// Returns `v` with every proxy replaced by f(ProxyId) (a Value; in a symbolic size, a proxy, int or size).
template <class F>
Value map_proxies(const Value& v, F&& f) {
  if (auto* p = std::get_if<ProxyRef>(&v.v)) return f(p->id);
  if (auto* d = std::get_if<Dim>(&v.v)) return Value(d->substitute([&](ProxyId id) { return substituted_symbol(f(id)); }));
  if (auto* s = std::get_if<Seq>(&v.v)) {
    Seq out{s->kind, {}};
    out.items.reserve(s->items.size());
    for (const Value& item : s->items) out.items.push_back(map_proxies(item, f));
    return Value(std::move(out));
  }
  return v;
}

}  // namespace thunder::ir
