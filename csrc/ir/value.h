// Values: the arguments and results of bound symbols.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "ir/dtype.h"

namespace thunder::ir {

/// Index of a proxy in its trace's proxy table.
using ProxyId = int32_t;

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
/// a verbatim literal, a proxy, or a list/tuple/slice of values.
struct Value {
  std::variant<NoneT, bool, int64_t, double, Str, DType, EllipsisT, Literal, ProxyRef, Seq> v;

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

  static Value list(std::vector<Value> items) { return Value(Seq{Seq::Kind::List, std::move(items)}); }
  static Value tuple(std::vector<Value> items) { return Value(Seq{Seq::Kind::Tuple, std::move(items)}); }
  static Value ints(const std::vector<int64_t>& xs);

  bool is_none() const { return std::holds_alternative<NoneT>(v); }
  bool is_proxy() const { return std::holds_alternative<ProxyRef>(v); }
  bool is_seq() const { return std::holds_alternative<Seq>(v); }
  /// True for bool, int and float literals (not proxies).
  bool is_number() const;

  ProxyId proxy() const;                // throws if not a proxy
  int64_t as_int() const;               // accepts bool and int
  double as_double() const;             // accepts bool, int, float
  bool as_bool() const;
  DType as_dtype() const;
  const std::string& as_str() const;
  const std::vector<Value>& items() const;  // list, tuple or slice
  std::vector<int64_t> as_ints() const;     // a list/tuple of ints, or one int

  bool operator==(const Value& o) const { return v == o.v; }
};

/// Calls f(ProxyId) for every proxy inside `v`, depth first, left to right.
template <class F>
void for_each_proxy(const Value& v, F&& f) {
  if (auto* p = std::get_if<ProxyRef>(&v.v)) f(p->id);
  else if (auto* s = std::get_if<Seq>(&v.v))
    for (const Value& item : s->items) for_each_proxy(item, f);
}

/// Returns `v` with every proxy replaced by f(ProxyId) (a Value).
template <class F>
Value map_proxies(const Value& v, F&& f) {
  if (auto* p = std::get_if<ProxyRef>(&v.v)) return f(p->id);
  if (auto* s = std::get_if<Seq>(&v.v)) {
    Seq out{s->kind, {}};
    out.items.reserve(s->items.size());
    for (const Value& item : s->items) out.items.push_back(map_proxies(item, f));
    return Value(std::move(out));
  }
  return v;
}

}  // namespace thunder::ir
