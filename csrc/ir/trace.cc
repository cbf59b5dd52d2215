#include "ir/trace.h"

#include <set>
#include <stdexcept>
#include <unordered_set>

namespace thunder::ir {

bool Seq::operator==(const Seq& o) const { return kind == o.kind && items == o.items; }

Value Value::ints(const std::vector<int64_t>& xs) { return dims(dims_of(xs)); }

Value Value::dims(const Shape& xs) {
  std::vector<Value> items(xs.begin(), xs.end());
  return tuple(std::move(items));
}

Dim substituted_symbol(const Value& replacement) {
  if (auto* p = std::get_if<ProxyRef>(&replacement.v)) return Dim::symbol(p->id);
  if (auto* d = std::get_if<Dim>(&replacement.v)) return *d;
  return Dim(replacement.as_int());
}

bool Value::is_number() const {
  return std::holds_alternative<bool>(v) || std::holds_alternative<int64_t>(v) ||
         std::holds_alternative<double>(v) || std::holds_alternative<Dim>(v);
}

ProxyId Value::proxy() const {
  if (auto* p = std::get_if<ProxyRef>(&v)) return p->id;
  throw std::invalid_argument("expected a proxy");
}

int64_t Value::as_int() const {
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (auto* d = std::get_if<Dim>(&v)) return d->value("an integer argument");
  // (A number proxy: computed at run time, e.g. a float Dynamo passes as a tensor under dynamic=True.)
  if (std::holds_alternative<ProxyRef>(v))
    throw std::invalid_argument("needs a constant number, got one known only at run time");
  throw std::invalid_argument("expected an int");
}

Dim Value::as_dim() const {
  if (auto* d = std::get_if<Dim>(&v)) return *d;
  return Dim(as_int());
}

double Value::as_double() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  return static_cast<double>(as_int());
}

bool Value::as_bool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  throw std::invalid_argument("expected a bool");
}

DType Value::as_dtype() const {
  if (auto* d = std::get_if<DType>(&v)) return *d;
  throw std::invalid_argument("expected a dtype");
}

const std::string& Value::as_str() const {
  if (auto* s = std::get_if<Str>(&v)) return s->text;
  throw std::invalid_argument("expected a string");
}

const std::vector<Value>& Value::items() const {
  if (auto* s = std::get_if<Seq>(&v)) return s->items;
  throw std::invalid_argument("expected a list or tuple");
}

std::vector<int64_t> Value::as_ints() const {
  if (!is_seq()) return {as_int()};
  std::vector<int64_t> out;
  for (const Value& item : items()) out.push_back(item.as_int());
  return out;
}

Shape Value::as_dims() const {
  if (!is_seq()) return {as_dim()};
  Shape out;
  for (const Value& item : items()) out.push_back(item.as_dim());
  return out;
}

Dim TensorMeta::numel() const { return product(shape); }

namespace {
constexpr std::string_view kPrimNames[] = {
#define THUNDER_PRIM_NAME(n) #n,
    THUNDER_PRIMS(THUNDER_PRIM_NAME)
#undef THUNDER_PRIM_NAME
};
static_assert(std::size(kPrimNames) == kNumPrims);
}  // namespace

std::string_view prim_name(PrimId id) {
  return id == PrimId::none ? std::string_view() : kPrimNames[static_cast<size_t>(id) - 1];
}

std::optional<PrimId> prim_id(std::string_view name) {
  for (size_t i = 0; i < kNumPrims; ++i)
    if (kPrimNames[i] == name) return static_cast<PrimId>(i + 1);
  return std::nullopt;
}

std::string_view Symbol::module() const {
  switch (level) {
    case Level::Prim: return "prims";
    case Level::Torch: return "ltorch";
    case Level::Opaque:
    case Level::Fusion: return "";
  }
  return "";
}

std::vector<ProxyId> BoundSymbol::input_proxies() const {
  std::vector<ProxyId> out;
  std::unordered_set<ProxyId> seen;
  auto add = [&](ProxyId id) {
    if (seen.insert(id).second) out.push_back(id);
  };
  for (const Value& a : args) for_each_proxy(a, add);
  for (const auto& [name, v] : kwargs) for_each_proxy(v, add);
  return out;
}

std::vector<ProxyId> BoundSymbol::reads_with_decomposition() const {
  std::vector<ProxyId> out = input_proxies();
  std::unordered_set<ProxyId> seen(out.begin(), out.end());
  const std::function<void(const std::vector<BoundSymbol>&)> visit = [&](const std::vector<BoundSymbol>& subs) {
    for (const BoundSymbol& s : subs) {
      for (ProxyId id : s.input_proxies())
        if (seen.insert(id).second) out.push_back(id);
      visit(s.subsymbols);
      for (ProxyId id : s.output_proxies()) seen.insert(id);  // defined inside: not read from outside after this
    }
  };
  visit(subsymbols);
  return out;
}

std::vector<ProxyId> BoundSymbol::output_proxies() const {
  std::vector<ProxyId> out;
  for_each_proxy(output, [&](ProxyId id) { out.push_back(id); });
  return out;
}

std::string BoundSymbol::printed_callee() const {
  if (!callee.empty()) return callee;
  std::string_view mod = sym->module();
  return mod.empty() ? sym->name : std::string(mod) + "." + sym->name;
}

const TensorMeta& Trace::tensor(ProxyId id) const {
  const ProxyInfo& p = proxy(id);
  if (!p.is_tensor) throw std::invalid_argument("proxy " + p.name + " is not a tensor");
  return p.tensor;
}

ProxyId Trace::new_tensor(TensorMeta meta) {
  ProxyId id = static_cast<ProxyId>(proxies.size());
  // Appending rather than `"t" + std::to_string(id)`: GCC 12 reports a false
  // -Wrestrict on `const char* + std::string&&`, which fails -Werror builds.
  std::string name = "t";
  name += std::to_string(id);
  proxies.push_back(ProxyInfo{std::move(name), true, std::move(meta), NumberType::Int, {}, {}, false});
  return id;
}

ProxyId Trace::new_number(NumberType type) {
  ProxyId id = static_cast<ProxyId>(proxies.size());
  const char* prefix = type == NumberType::Bool ? "b" : type == NumberType::Int ? "i" : "f";
  std::string name = prefix;  // appended for the same reason as in new_tensor
  name += std::to_string(id);
  proxies.push_back(ProxyInfo{std::move(name), false, {}, type, {}, {}, false});
  return id;
}

int64_t Trace::at_hints(const Dim& d, std::string_view op) const {
  if (d.is_constant() || size_hints.empty()) return d.value(op);
  return d.substitute([&](ProxyId id) {
    auto it = size_hints.find(id);
    return it == size_hints.end() ? Dim::symbol(id) : Dim(it->second);
  }).value(op);
}

Trace Trace::empty_copy(std::string why) const {
  Trace t;
  t.proxies = proxies;
  t.inputs = inputs;
  t.name = name;
  t.boxed_inputs = boxed_inputs;
  t.size_hints = size_hints;
  t.provenance = std::move(why);
  return t;
}

BoundSymbol substitute_inputs(const BoundSymbol& b, const std::function<Value(ProxyId)>& f) {
  BoundSymbol out = b;
  for (Value& a : out.args) a = map_proxies(a, f);
  for (auto& kv : out.kwargs) kv.second = map_proxies(kv.second, f);
  for (BoundSymbol& sub : out.subsymbols) sub = substitute_inputs(sub, f);
  return out;
}

Trace bind_sizes(const Trace& trace, const std::map<ProxyId, int64_t>& values,
                 const std::function<bool(const BoundSymbol&)>& reads_numbers) {
  auto value_of = [&](ProxyId id) -> Dim {
    auto it = values.find(id);
    if (it == values.end())
      throw std::invalid_argument("bind_sizes: no value for the size symbol " + trace.proxy(id).name);
    return Dim(it->second);
  };
  // A size symbol becomes its value wherever it is read: as a proxy or inside a symbolic size.
  const std::function<Value(ProxyId)> bound = [&](ProxyId id) {
    return values.count(id) ? Value(value_of(id)) : Value(ProxyRef{id});
  };
  Trace out = trace;
  out.size_hints.clear();
  for (ProxyInfo& p : out.proxies)
    if (p.is_tensor)
      for (Dim& d : p.tensor.shape) d = d.substitute(value_of);
  const std::set<ProxyId> inputs(trace.inputs.begin(), trace.inputs.end());
  const std::function<Value(ProxyId)> kept = [&](ProxyId id) {
    return values.count(id) && !inputs.count(id) ? Value(value_of(id)) : Value(ProxyRef{id});
  };
  // Symbol by symbol: a torch-level op's own arguments are bound while the prims of its decomposition that read a
  // size as a number keep it -- the same value either way; the prims are what kernels are made of.
  // (A shape among such a symbol's arguments, a sequence -- full's -- is bound all the same.)
  const std::function<void(BoundSymbol&)> bind = [&](BoundSymbol& b) {
    const bool keep = reads_numbers && reads_numbers(b);
    auto map = [&](const Value& a) { return map_proxies(a, keep && !a.is_seq() ? kept : bound); };
    for (Value& a : b.args) a = map(a);
    for (auto& kv : b.kwargs) kv.second = map(kv.second);
    for (BoundSymbol& sub : b.subsymbols) bind(sub);
  };
  for (BoundSymbol& b : out.symbols) bind(b);
  out.output = map_proxies(out.output, bound);
  return out;
}

void verify(const Trace& trace) {
  std::unordered_set<ProxyId> defined;
  auto name = [&](ProxyId id) { return trace.proxy(id).name; };
  for (ProxyId id : trace.inputs)
    if (!defined.insert(id).second) throw std::logic_error("input " + name(id) + " appears twice");
  for (const BoundSymbol& bsym : trace.symbols) {
    if (bsym.sym == nullptr) throw std::logic_error("a bound symbol has no symbol");
    for (ProxyId id : bsym.input_proxies())
      if (!defined.count(id))
        throw std::logic_error(bsym.sym->name + " uses " + name(id) + " before it is defined");
    for (ProxyId id : bsym.output_proxies())
      if (!defined.insert(id).second)
        throw std::logic_error(bsym.sym->name + " redefines " + name(id));
  }
  for_each_proxy(trace.output, [&](ProxyId id) {
    if (!defined.count(id)) throw std::logic_error("output " + name(id) + " is never defined");
  });
}

}  // namespace thunder::ir
