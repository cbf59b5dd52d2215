#include "ops/op_table.h"

#include <map>
#include <mutex>
#include <unordered_set>

namespace thunder::ops {
namespace {

struct Registry {
  // std::map keeps pointers stable as entries are added; `order` keeps registration order.
  std::map<std::pair<ir::Level, std::string>, OpDef, std::less<>> ops;
  std::vector<const OpDef*> order;
  ir::Symbol opaque_effect{"opaque", ir::Level::Opaque, ir::kOpaque | ir::kEffect, {}};
  ir::Symbol opaque_pure{"opaque", ir::Level::Opaque, ir::kOpaque, {}};
  ir::Symbol opaque_check{"opaque", ir::Level::Opaque, ir::kOpaque | ir::kEffect | ir::kChecksValues, {}};
};

Registry& registry_unlocked() {
  static Registry r;
  return r;
}

Registry& registry() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_prims();
    register_torch_elementwise();
    register_torch_shape();
    register_torch_reduction();
    register_torch_nn();
    register_torch_math();
    register_torch_layout();
    register_torch_conv_pool_loss();
    register_torch_mutation();
  });
  return registry_unlocked();
}

std::string qualified(ir::Level level, std::string_view name) {
  return std::string(level == ir::Level::Prim ? "prims." : "ltorch.") + std::string(name);
}

// Binds positional and keyword arguments to the op's parameters, Python style.
Args bind(const ir::Symbol& sym, Args args, const Kwargs& kwargs) {
  const std::string op = qualified(sym.level, sym.name);
  const auto& params = sym.params;
  if (args.size() > params.size())
    fail(op, "takes at most " + std::to_string(params.size()) + " arguments but " + std::to_string(args.size()) +
                 " were given");
  std::vector<bool> given(params.size(), false);
  for (size_t i = 0; i < args.size(); ++i) given[i] = true;
  args.resize(params.size());
  for (const auto& [name, v] : kwargs) {
    size_t i = 0;
    while (i < params.size() && params[i].name != name) ++i;
    if (i == params.size()) fail(op, "got an unexpected keyword argument '" + name + "'");
    if (given[i]) fail(op, "got multiple values for argument '" + name + "'");
    args[i] = v;
    given[i] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (given[i]) continue;
    if (params[i].required) fail(op, "missing required argument '" + params[i].name + "'");
    args[i] = params[i].default_value;
  }
  return args;
}

bool any_input_requires_grad(const ir::Trace& t, const ir::BoundSymbol& b) {
  for (ProxyId id : b.input_proxies())
    if (t.proxy(id).is_tensor && t.proxy(id).tensor.requires_grad) return true;
  return false;
}

}  // namespace

void register_op(OpDef def) {
  if (def.symbol.level == ir::Level::Prim) {
    std::optional<ir::PrimId> id = ir::prim_id(def.symbol.name);
    if (!id) throw std::logic_error("prims." + def.symbol.name + " has no PrimId: add it to THUNDER_PRIMS (ir/prim_id.h)");
    def.symbol.prim = *id;
  }
  Registry& r = registry_unlocked();
  auto key = std::make_pair(def.symbol.level, def.symbol.name);
  auto [it, inserted] = r.ops.emplace(key, std::move(def));
  if (!inserted) throw std::logic_error("op registered twice: " + key.second);
  r.order.push_back(&it->second);
}

const ir::Symbol& prim_symbol(ir::PrimId id) {
  const OpDef* def = find_op(ir::Level::Prim, ir::prim_name(id));
  if (def == nullptr) throw std::logic_error("no registered prim for PrimId " + std::to_string(static_cast<int>(id)));
  return def->symbol;
}

const OpDef* find_op(ir::Level level, std::string_view name) {
  Registry& r = registry();
  auto it = r.ops.find(std::make_pair(level, std::string(name)));
  return it == r.ops.end() ? nullptr : &it->second;
}

std::vector<const OpDef*> ops_of(ir::Level level) {
  std::vector<const OpDef*> out;
  for (const OpDef* d : registry().order)
    if (d->symbol.level == level) out.push_back(d);
  return out;
}

const ir::Symbol* opaque_symbol(bool effect) {
  return effect ? &registry().opaque_effect : &registry().opaque_pure;
}

const ir::Symbol* opaque_check_symbol() { return &registry().opaque_check; }

const TensorMeta& Builder::meta(const Value& tensor) const { return trace_.tensor(tensor.proxy()); }

bool Builder::is_tensor(const Value& v) const { return v.is_proxy() && trace_.proxy(v.proxy()).is_tensor; }

ProxyId Builder::add_input_tensor(TensorMeta meta, std::vector<int64_t> strides) {
  ProxyId id = trace_.new_tensor(std::move(meta));
  if (strides.size() != trace_.proxy(id).tensor.shape.size()) strides.clear();
  trace_.proxies[static_cast<size_t>(id)].strides = std::move(strides);
  trace_.inputs.push_back(id);
  return id;
}

ProxyId Builder::add_input_number(ir::NumberType type) {
  ProxyId id = trace_.new_number(type);
  trace_.inputs.push_back(id);
  return id;
}

Value Builder::call(ir::Level level, std::string_view name, Args args, const Kwargs& kwargs) {
  const OpDef* def = find_op(level, name);
  if (def == nullptr) throw NotNative("no native op " + qualified(level, name));
  ir::BoundSymbol bsym;
  bsym.sym = &def->symbol;
  bsym.args = bind(def->symbol, std::move(args), kwargs);
  bsym.source = source_;
  const size_t first_new_proxy = trace_.proxies.size();
  if (def->decompose) {
    std::vector<ir::BoundSymbol>* outer = sink_;
    sink_ = &bsym.subsymbols;
    ++depth_;
    try {
      bsym.output = def->decompose(*this, bsym.args);
    } catch (...) {
      sink_ = outer;
      --depth_;
      throw;
    }
    // An output the decomposition passed through unchanged gets a fresh name,
    // so that every bound symbol defines its outputs.
    bsym.output = ir::map_proxies(bsym.output, [&](ProxyId id) -> Value {
      if (static_cast<size_t>(id) >= first_new_proxy) return Value(ir::ProxyRef{id});
      return prim("alias", {Value(ir::ProxyRef{id})});
    });
    sink_ = outer;
    --depth_;
  } else {
    bsym.output = def->meta(*this, bsym.args);
  }
  if (!def->symbol.has(ir::kCreation) && !def->symbol.has(ir::kNoGrad) && any_input_requires_grad(trace_, bsym))
    for (ProxyId id : bsym.output_proxies()) {
      ir::ProxyInfo& p = trace_.proxies[static_cast<size_t>(id)];
      if (p.is_tensor && (ir::is_floating(p.tensor.dtype) || ir::is_complex(p.tensor.dtype)))
        p.tensor.requires_grad = true;
    }
  Value out = bsym.output;
  sink_->push_back(std::move(bsym));
  return out;
}

Value Builder::opaque(std::string callee, Args args, Kwargs kwargs, Value output) {
  ir::BoundSymbol bsym;
  bsym.sym = opaque_symbol();
  bsym.args = std::move(args);
  bsym.kwargs = std::move(kwargs);
  bsym.output = std::move(output);
  bsym.callee = std::move(callee);
  bsym.source = source_;
  sink_->push_back(bsym);
  return bsym.output;
}

void fail(std::string_view op, const std::string& what) { throw OpError(std::string(op) + ": " + what); }

void refuse_empty_indexed(std::string_view op, const ir::Dim& extent, const ir::TensorMeta& index) {
  if (extent == ir::Dim(0) && !(index.numel() == ir::Dim(0)))
    throw NotNative(std::string(op) + " indexes a dimension of size 0");
}

std::string shape_string(const ir::Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i].str();
  return s + "]";
}

std::string shape_string(const std::vector<int64_t>& shape) { return shape_string(ir::dims_of(shape)); }

int64_t canonical_dim(std::string_view op, int64_t dim, int64_t ndim) {
  int64_t n = ndim == 0 ? 1 : ndim;  // torch lets a 0-dim tensor take dim 0 or -1
  if (dim < -n || dim >= n)
    fail(op, "dim " + std::to_string(dim) + " is out of range for a tensor of " + std::to_string(ndim) +
                 " dimensions (expected a dim in [" + std::to_string(-n) + ", " + std::to_string(n - 1) + "])");
  return dim < 0 ? dim + n : dim;
}

void require_same_shape(std::string_view op, const ir::Shape& a, const ir::Shape& b, const std::string& what) {
  if (a == b) return;
  bool undecided = a.size() == b.size();
  for (size_t i = 0; undecided && i < a.size(); ++i)
    undecided = a[i] == b[i] || !a[i].is_constant() || !b[i].is_constant();
  if (undecided) throw ir::SymbolicShapeError(std::string(op) + ": " + what);
  fail(op, what);
}

ir::Shape broadcast_shapes(std::string_view op, const ir::Shape& a, const ir::Shape& b) {
  size_t n = std::max(a.size(), b.size());
  ir::Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    ir::Dim x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    ir::Dim y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) {
      std::string what = "shapes " + shape_string(a) + " and " + shape_string(b) + " cannot be broadcast together";
      // Sizes that are not provably equal may be equal at run time: undecided, not an error.
      if (!x.is_constant() || !y.is_constant()) throw ir::SymbolicShapeError(std::string(op) + ": " + what);
      fail(op, what);
    }
    out[i] = x == 1 ? y : x;
  }
  return out;
}

}  // namespace thunder::ops
