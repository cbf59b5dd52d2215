// Functionalization: writes and branch regions out, values and copy-backs in.
//
// The importer lowers `x.add_(y)` into `t5 = ltorch.add(x, y); ltorch.copy_(x, t5)`, `x[0, i] = v` into
// `t6 = ltorch.getitem(x, (0, i)); ltorch.copy_(t6, v)`, and a data-dependent `if` into both arms between
// region markers. This pass gives each written tensor's *root* (the tensor that owns the memory) a current
// value, rewrites every later read to that value (or to the view replayed on it), merges the arms of a region
// with `where`, and ends with a `prims.copy_to` for each written trace input. See docs/functionalization.md.
//
// Two tables drive it, both below and nowhere else: which torch-level ops return views in eager
// (`torch_views`), and, per prim a view decomposes into, how the view is made again and how a write
// through it is undone (`view_rules`).
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "ir/printer.h"
#include "ops/op_table.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

using ir::BoundSymbol;
using ir::TensorMeta;
using ir::Value;
using Ints = std::vector<int64_t>;

// Functionalization tracks strides and storage offsets as integers: a trace with symbolic sizes that writes in
// place is compiled per concrete shape (SymbolicShapeError).
Ints ints(const ir::Shape& shape) { return ir::concrete(shape, "functionalization"); }

Value P(ProxyId id) { return Value(ir::ProxyRef{id}); }

[[noreturn]] void refuse(const std::string& what) { throw std::runtime_error("functionalize: " + what); }

std::string where_from(const BoundSymbol& b) { return b.source.empty() ? "(no source location)" : "at " + b.source; }

std::string op_name(const BoundSymbol& b) { return b.printed_callee(); }

// ---- strides: which reshapes torch makes as views ----

Ints contiguous_strides(const Ints& shape) {
  Ints s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(shape[i], 1);
  return s;
}

int64_t numel(const Ints& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// torch's is_contiguous: dims of length 1 may have any stride; an empty tensor is contiguous.
bool is_contiguous(const Ints& shape, const Ints& strides) {
  if (numel(shape) == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

// The strides of `new_shape` viewing a tensor of `old_shape` and `old_strides`, or nullopt where no strides
// can (torch's rule for view and reshape: each run of dims that is contiguous in memory splits or merges only
// within itself; reshape copies where view would fail).
std::optional<Ints> view_strides(const Ints& old_shape, const Ints& old_strides, const Ints& new_shape) {
  if (numel(old_shape) == 0) return contiguous_strides(new_shape);
  if (old_shape.empty()) return Ints(new_shape.size(), 1);
  Ints out(new_shape.size(), 1);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t base = old_strides.back(), run_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    run_numel *= old_shape[d];
    const bool run_ends = d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != run_numel * base);
    if (!run_ends) continue;
    while (view_d >= 0 && (view_numel < run_numel || new_shape[view_d] == 1)) {
      out[view_d] = view_numel * base;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != run_numel) return std::nullopt;
    if (d > 0) base = old_strides[d - 1], run_numel = 1, view_numel = 1;
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// ---- slice regions ----

// The elements a slice selects: per dim, start + k * step for k < count.
struct Region {
  Ints start, stop, step;

  size_t ndim() const { return start.size(); }
  int64_t count(size_t d) const { return stop[d] > start[d] ? (stop[d] - start[d] + step[d] - 1) / step[d] : 0; }
  int64_t last(size_t d) const { return start[d] + (count(d) - 1) * step[d]; }
  bool unit_steps() const {
    return std::all_of(step.begin(), step.end(), [](int64_t s) { return s == 1; });
  }
};

// A slice's region from its bound arguments (start, stop, step-or-None) at `first`.
Region region_of(const BoundSymbol& b, size_t first, size_t ndim) {
  Region r{b.args[first].as_ints(), b.args[first + 1].as_ints(), {}};
  r.step = b.args[first + 2].is_none() ? Ints(ndim, 1) : b.args[first + 2].as_ints();
  return r;
}

bool covers(const Region& r, const Ints& shape) {
  for (size_t d = 0; d < r.ndim(); ++d)
    if (r.start[d] != 0 || r.count(d) != shape[d] || (r.count(d) > 1 && r.step[d] != 1)) return false;
  return true;
}

bool same_region(const Region& a, const Region& b) {
  for (size_t d = 0; d < a.ndim(); ++d) {
    if (a.count(d) != b.count(d)) return false;
    if (a.count(d) == 0) continue;
    if (a.start[d] != b.start[d] || (a.count(d) > 1 && a.step[d] != b.step[d])) return false;
  }
  return true;
}

// Whether two arithmetic progressions share an element (walks the shorter one: at most a dim's length).
bool progressions_meet(const Region& a, const Region& b, size_t d) {
  const Region* x = &a;
  const Region* y = &b;
  if (x->count(d) > y->count(d)) std::swap(x, y);
  for (int64_t k = 0; k < x->count(d); ++k) {
    int64_t i = x->start[d] + k * x->step[d];
    if (i >= y->start[d] && i <= y->last(d) && (i - y->start[d]) % y->step[d] == 0) return true;
  }
  return false;
}

bool disjoint_regions(const Region& a, const Region& b) {
  for (size_t d = 0; d < a.ndim(); ++d) {
    if (a.count(d) == 0 || b.count(d) == 0) return true;
    if (a.last(d) < b.start[d] || b.last(d) < a.start[d]) return true;
    if (!progressions_meet(a, b, d)) return true;
  }
  return false;
}

// `inner` as a region of the slice `outer` selects, if every element of inner lies in outer on its grid.
std::optional<Region> region_within(const Region& inner, const Region& outer) {
  Region rel{Ints(inner.ndim()), Ints(inner.ndim()), Ints(inner.ndim())};
  for (size_t d = 0; d < inner.ndim(); ++d) {
    const int64_t n = inner.count(d), offset = inner.start[d] - outer.start[d];
    if (n == 0 || offset < 0 || offset % outer.step[d] != 0 || inner.last(d) > outer.last(d)) return std::nullopt;
    if (n > 1 && inner.step[d] % outer.step[d] != 0) return std::nullopt;
    rel.start[d] = offset / outer.step[d];
    rel.step[d] = n > 1 ? inner.step[d] / outer.step[d] : 1;
    rel.stop[d] = rel.start[d] + (n - 1) * rel.step[d] + 1;
  }
  return rel;
}

// ---- the output trace and the values the pass makes ----

// Appends to the output trace, and remembers of each value it makes how (for the peepholes), whose memory a
// view shares (which copy-backs an in-place effect needs first), and when it was defined (for gradient masking).
class Emitter {
 public:
  explicit Emitter(Trace& out) : out_(out), b_(out) {}

  Trace& trace() { return out_; }
  const TensorMeta& meta(const Value& v) const { return out_.tensor(v.proxy()); }
  void set_source(const std::string& source) { b_.set_source(source); }
  int64_t now() const { return static_cast<int64_t>(out_.symbols.size()); }
  /// When a value was defined: the index of its symbol in the output trace; -1 for trace inputs.
  int64_t defined_at(ProxyId id) const {
    auto it = defined_at_.find(id);
    return it == defined_at_.end() ? -1 : it->second;
  }
  /// Whether `v` is `from` or computed from it by ops a gradient flows through (not a detach), searched back
  /// through the symbols emitted since `from` was defined.
  bool differentiably_computed_from(ProxyId v, ProxyId from) const {
    const int64_t start = defined_at(from);
    std::vector<ProxyId> stack{v};
    std::set<ProxyId> seen;
    while (!stack.empty()) {
      const ProxyId p = stack.back();
      stack.pop_back();
      if (p == from) return true;
      const int64_t at = defined_at(p);
      if (at <= start || !seen.insert(p).second) continue;  // made before `from`, or already searched
      const BoundSymbol& b = out_.symbols[static_cast<size_t>(at)];
      if (b.sym->name == "detach") continue;  // (`c.copy_(c.detach())`: no gradient reaches c's old value)
      for (ProxyId q : b.input_proxies()) stack.push_back(q);
    }
    return false;
  }
  /// The value whose memory `id` views at run time (itself if it is no view).
  ProxyId storage(ProxyId id) const {
    auto it = storage_.find(id);
    return it == storage_.end() ? id : it->second;
  }
  void share_storage(ProxyId view, ProxyId of) {
    if (storage(of) != view) storage_[view] = storage(of);
  }

  void push(BoundSymbol b) {
    const size_t first = out_.symbols.size();
    out_.symbols.push_back(std::move(b));
    note(first);
  }
  Value prim(std::string_view name, ops::Args args) {
    const size_t first = out_.symbols.size();
    Value v = b_.prim(name, std::move(args));
    note(first);
    return v;
  }
  Value torch(std::string_view name, ops::Args args) {
    const size_t first = out_.symbols.size();
    Value v = b_.torch(name, std::move(args));
    note(first);
    return v;
  }

  // View constructors with peepholes: a slice of a slice_update reads the update or its base; reshapes and
  // transposes of reshapes and transposes collapse.
  Value slice(const Value& v, const Region& r) {
    if (covers(r, ints(meta(v).shape))) return v;
    auto it = made_.find(v.proxy());
    if (it != made_.end() && it->second.kind == Made::SliceUpdate) {
      const Made& m = it->second;
      if (same_region(r, m.region)) return P(m.src);
      if (disjoint_regions(r, m.region)) return slice(P(m.input), r);
      if (auto rel = region_within(r, m.region)) return slice(P(m.src), *rel);
    }
    Value out = cached("slice", {v, Value::ints(r.start), Value::ints(r.stop), r.unit_steps() ? Value() : Value::ints(r.step)});
    share_storage(out.proxy(), v.proxy());
    return out;
  }
  Value slice_update(Value base, const Value& src, const Region& r) {
    if (covers(r, ints(meta(base).shape))) return src;
    auto it = made_.find(base.proxy());
    if (it != made_.end() && it->second.kind == Made::SliceUpdate && same_region(r, it->second.region))
      base = P(it->second.input);  // the region is overwritten whole: the earlier update is dead
    Value out = cached("slice_update",
                     {base, src, Value::ints(r.start), Value::ints(r.stop), r.unit_steps() ? Value() : Value::ints(r.step)});
    made_[out.proxy()] = Made{Made::SliceUpdate, base.proxy(), src.proxy(), r, {}};
    return out;
  }
  /// where(c, t, e) for a root's value after a region. When the arms updated the same region of one base
  /// (or one arm updated a region and the other left the base), the select moves inside the update:
  /// slice_update(base, where(c, src_t, src_e), region); later reads of other regions then see the base.
  Value select(const Value& c, const Value& t, const Value& e) {
    if (t == e) return t;
    const Made* ut = slice_update_of(t);
    const Made* ue = slice_update_of(e);
    if (ut && ue && ut->input == ue->input && same_region(ut->region, ue->region)) {
      const Region r = ut->region;
      return slice_update(P(ut->input), torch("where", {c, P(ut->src), P(ue->src)}), r);
    }
    if (ut && ut->input == e.proxy()) {
      const Region r = ut->region;
      const Value src = P(ut->src);
      return slice_update(e, torch("where", {c, src, slice(e, r)}), r);
    }
    if (ue && ue->input == t.proxy()) {
      const Region r = ue->region;
      const Value src = P(ue->src);
      return slice_update(t, torch("where", {c, slice(t, r), src}), r);
    }
    return torch("where", {c, t, e});
  }
  Value reshape(Value v, const Ints& shape) {
    if (ints(meta(v).shape) == shape) return v;
    auto it = made_.find(v.proxy());
    if (it != made_.end() && it->second.kind == Made::Reshape) {
      v = P(it->second.input);
      if (ints(meta(v).shape) == shape) return v;
    }
    Value out = cached("reshape", {v, Value::ints(shape)});
    made_[out.proxy()] = Made{Made::Reshape, v.proxy(), 0, {}, {}};
    share_storage(out.proxy(), v.proxy());
    return out;
  }
  Value transpose(Value v, Ints perm) {
    auto it = made_.find(v.proxy());
    if (it != made_.end() && it->second.kind == Made::Transpose) {
      Ints composed(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) composed[i] = it->second.perm[perm[i]];
      v = P(it->second.input), perm = composed;
    }
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == static_cast<int64_t>(i);
    if (identity) return v;
    Value out = cached("transpose", {v, Value::ints(perm)});
    made_[out.proxy()] = Made{Made::Transpose, v.proxy(), 0, {}, perm};
    share_storage(out.proxy(), v.proxy());
    return out;
  }
  /// Forgets the values made so far (an effect may have changed the memory they were computed from).
  void forget() { cache_.clear(); }
  /// Whether `id` is a tensor the pass made in memory of its own: the output of an allocating op it emits (a
  /// slice_update, a select, a clone, a fill), not a view and not a value of the input trace.
  bool fresh(ProxyId id) const {
    static const std::set<std::string_view> allocating{"slice_update", "where", "clone", "full"};
    const int64_t at = defined_at(id);
    return at >= 0 && storage(id) == id && allocating.count(out_.symbols[static_cast<size_t>(at)].sym->name);
  }
  /// The peepholes stop seeing through `id`, whose memory becomes a root's and may be written in place.
  void forget_made(ProxyId id) { made_.erase(id); }
  /// The tensor `id` is a transpose of, where the pass made it as one (a write's inverse of `h.t()`): laid out
  /// transposed at run time.
  std::optional<ProxyId> transpose_of(ProxyId id) const {
    auto it = made_.find(id);
    if (it == made_.end() || it->second.kind != Made::Transpose) return std::nullopt;
    return it->second.input;
  }
  /// The tensor `id` is a reshape of, where the pass made it as one (a write's inverse of `h.view(-1)`).
  std::optional<ProxyId> reshape_of(ProxyId id) const {
    auto it = made_.find(id);
    if (it == made_.end() || it->second.kind != Made::Reshape) return std::nullopt;
    return it->second.input;
  }
  /// A view prim without peepholes (broadcast_in_dim, detach): `args` after the viewed value.
  Value view(std::string_view name, const Value& v, ops::Args rest) {
    rest.insert(rest.begin(), v);
    Value out = cached(name, std::move(rest));
    share_storage(out.proxy(), v.proxy());
    return out;
  }

 private:
  // How the pass made a value, for the peepholes.
  struct Made {
    enum Kind { SliceUpdate, Reshape, Transpose } kind;
    ProxyId input;  // the base of a slice_update; the tensor reshaped or transposed
    ProxyId src;    // slice_update: the new values of the region
    Region region;  // slice_update
    Ints perm;      // transpose
  };

  const Made* slice_update_of(const Value& v) const {
    auto it = made_.find(v.proxy());
    return it != made_.end() && it->second.kind == Made::SliceUpdate ? &it->second : nullptr;
  }

  // A prim made once per distinct arguments (a view replayed twice is one value).
  Value cached(std::string_view name, ops::Args args) {
    std::string key(name);
    for (const Value& a : args) key += "|" + ir::python_repr(out_, a);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    Value v = prim(name, std::move(args));
    cache_.emplace(std::move(key), v);
    return v;
  }

  void note(size_t first) {
    for (size_t i = first; i < out_.symbols.size(); ++i)
      for (ProxyId id : out_.symbols[i].output_proxies()) defined_at_[id] = static_cast<int64_t>(i);
  }

  Trace& out_;
  ops::Builder b_;
  std::unordered_map<ProxyId, Made> made_;
  std::unordered_map<ProxyId, ProxyId> storage_;
  std::unordered_map<ProxyId, int64_t> defined_at_;
  std::unordered_map<std::string, Value> cache_;
};

// ---- the view tables ----

/// How a prim that a view decomposes into is replayed, and undone by a write.
struct ViewRule {
  /// The output's strides from the input's; nullopt where this use is no view (a reshape torch would copy,
  /// a conversion to another dtype).
  std::optional<Ints> (*strides)(const Trace& in, const BoundSymbol& prim, const Ints& input_strides);
  /// The view made again on `input`, a (newer) value of the prim's input.
  Value (*forward)(Emitter& e, const Trace& in, const BoundSymbol& prim, const Value& input);
  /// The input's new value once the view's is `view_value`; `input` is the input's current value (read only
  /// where `needs_input`). nullptr: a write through this view is refused, saying `refusal`.
  Value (*inverse)(Emitter& e, const Trace& in, const BoundSymbol& prim, const Value& input, const Value& view_value);
  bool needs_input = false;
  const char* refusal = "";
};

Ints in_shape(const Trace& in, const BoundSymbol& p) { return ints(in.tensor(p.args[0].proxy()).shape); }
Ints out_shape(const Trace& in, const BoundSymbol& p) { return ints(in.tensor(p.output.proxy()).shape); }
Region slice_region(const Trace& in, const BoundSymbol& p) { return region_of(p, 1, in_shape(in, p).size()); }

std::optional<Ints> same_strides(const Trace&, const BoundSymbol&, const Ints& s) { return s; }
Value same_value(Emitter&, const Trace&, const BoundSymbol&, const Value& v) { return v; }
Value write_through(Emitter&, const Trace&, const BoundSymbol&, const Value&, const Value& v) { return v; }
Value reshape_back(Emitter& e, const Trace& in, const BoundSymbol& p, const Value&, const Value& v) {
  return e.reshape(v, in_shape(in, p));
}

/// The view prims' rules; a prim without a row is no view.
const ir::PrimTable<ViewRule>& view_rules() {
  static const ir::PrimTable<ViewRule> table = [] {
    ir::PrimTable<ViewRule> t("view");
    for (const auto& [id, rule] : std::initializer_list<std::pair<ir::PrimId, ViewRule>>{
      {ir::PrimId::slice,
       {[](const Trace& in, const BoundSymbol& p, const Ints& s) -> std::optional<Ints> {
          Region r = slice_region(in, p);
          Ints out = s;
          for (size_t d = 0; d < out.size(); ++d) out[d] *= r.step[d];
          return out;
        },
        [](Emitter& e, const Trace& in, const BoundSymbol& p, const Value& x) { return e.slice(x, slice_region(in, p)); },
        [](Emitter& e, const Trace& in, const BoundSymbol& p, const Value& x, const Value& v) {
          return e.slice_update(x, v, slice_region(in, p));
        },
        true}},
      {ir::PrimId::reshape,
       {[](const Trace& in, const BoundSymbol& p, const Ints& s) { return view_strides(in_shape(in, p), s, out_shape(in, p)); },
        [](Emitter& e, const Trace& in, const BoundSymbol& p, const Value& x) { return e.reshape(x, out_shape(in, p)); },
        reshape_back}},
      {ir::PrimId::squeeze,
       {[](const Trace&, const BoundSymbol& p, const Ints& s) -> std::optional<Ints> {
          const int64_t n = static_cast<int64_t>(s.size());
          std::vector<bool> drop(s.size(), false);
          for (int64_t d : p.args[1].as_ints())
            if (n > 0) drop[(d % n + n) % n] = true;
          Ints out;
          for (size_t d = 0; d < s.size(); ++d)
            if (!drop[d]) out.push_back(s[d]);
          return out;
        },
        [](Emitter& e, const Trace& in, const BoundSymbol& p, const Value& x) { return e.reshape(x, out_shape(in, p)); },
        reshape_back}},
      {ir::PrimId::transpose,
       {[](const Trace&, const BoundSymbol& p, const Ints& s) -> std::optional<Ints> {
          Ints out;
          for (int64_t d : p.args[1].as_ints()) out.push_back(s[d]);
          return out;
        },
        [](Emitter& e, const Trace&, const BoundSymbol& p, const Value& x) { return e.transpose(x, p.args[1].as_ints()); },
        [](Emitter& e, const Trace&, const BoundSymbol& p, const Value&, const Value& v) {
          Ints perm = p.args[1].as_ints(), inverse(perm.size());
          for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
          return e.transpose(v, inverse);
        }}},
      // An expanded view: its elements share memory, so a write through it has no functional meaning.
      {ir::PrimId::broadcast_in_dim,
       {[](const Trace& in, const BoundSymbol& p, const Ints& s) -> std::optional<Ints> {
          const Ints& from = in_shape(in, p);
          const Ints& to = out_shape(in, p);
          Ints dims = p.args[2].as_ints(), out(to.size(), 0);
          for (size_t i = 0; i < dims.size(); ++i) out[dims[i]] = from[i] == 1 && to[dims[i]] != 1 ? 0 : s[i];
          return out;
        },
        [](Emitter& e, const Trace&, const BoundSymbol& p, const Value& x) {
          return e.view("broadcast_in_dim", x, {p.args[1], p.args[2]});
        },
        nullptr, false, "an expanded view, whose elements share memory"}},
      {ir::PrimId::alias, {same_strides, same_value, write_through}},
      // A conversion to the dtype the tensor has returns the tensor itself (x.to(x.dtype) is x).
      {ir::PrimId::convert_element_type,
       {[](const Trace& in, const BoundSymbol& p, const Ints& s) -> std::optional<Ints> {
          if (in.tensor(p.args[0].proxy()).dtype != in.tensor(p.output.proxy()).dtype) return std::nullopt;
          return s;
        },
        same_value, write_through}},
      {ir::PrimId::detach,
       {same_strides, [](Emitter& e, const Trace&, const BoundSymbol&, const Value& x) { return e.view("detach", x, {}); },
        write_through}},
     })
      t.set(id, rule);
    return t;
  }();
  return table;
}

/// The torch-level ops that return views of their tensor arguments in eager, and when.
enum class ViewKind {
  View,          // always (a reshape step among its prims is a view exactly when the strides allow it)
  IfContiguous,  // only when its input is contiguous (otherwise it copies)
};

const std::map<std::string, ViewKind, std::less<>>& torch_views() {
  static const std::map<std::string, ViewKind, std::less<>> table{
      {"getitem", ViewKind::View},      {"view", ViewKind::View},           {"view_as", ViewKind::View},
      {"reshape", ViewKind::View},      {"reshape_as", ViewKind::View},     {"flatten", ViewKind::View},
      {"unflatten", ViewKind::View},    {"transpose", ViewKind::View},      {"permute", ViewKind::View},
      {"t", ViewKind::View},            {"movedim", ViewKind::View},        {"unsqueeze", ViewKind::View},
      {"squeeze", ViewKind::View},      {"expand", ViewKind::View},         {"expand_as", ViewKind::View},
      {"broadcast_to", ViewKind::View}, {"broadcast_tensors", ViewKind::View}, {"narrow", ViewKind::View},
      {"select", ViewKind::View},       {"split", ViewKind::View},          {"split_with_sizes", ViewKind::View},
      {"chunk", ViewKind::View},        {"unbind", ViewKind::View},         {"tensor_split", ViewKind::View},
      {"hsplit", ViewKind::View},       {"vsplit", ViewKind::View},         {"dsplit", ViewKind::View},
      {"atleast_1d", ViewKind::View},   {"atleast_2d", ViewKind::View},     {"atleast_3d", ViewKind::View},
      {"detach", ViewKind::View},       {"to", ViewKind::View},             {"type_as", ViewKind::View},
      {"contiguous", ViewKind::IfContiguous}, {"ravel", ViewKind::IfContiguous},
      // The input itself when not training, for p = 0 or an empty input (ATen's _dropout_impl): its
      // decomposition is then an alias, a view; otherwise it computes a new tensor, no view.
      {"dropout", ViewKind::View},
  };
  return table;
}

/// One prim of a view chain: `prim` (whose args[0] is the viewed tensor) from the decomposition of `op`.
struct Step {
  const BoundSymbol* prim;
  const ViewRule* rule;
  const BoundSymbol* op;
};

void flatten_prims(const BoundSymbol& b, std::vector<const BoundSymbol*>& out) {
  if (b.subsymbols.empty()) out.push_back(&b);
  for (const BoundSymbol& s : b.subsymbols) flatten_prims(s, out);
}

/// Views among a symbol's outputs: output -> (the argument it views, the prims from the argument to it).
using ViewMap = std::map<ProxyId, std::pair<ProxyId, std::vector<Step>>>;

/// The outputs of `b` that its decomposition reaches from one of its tensor arguments through view prims (of
/// `view_rules`) alone, each with that argument and those prims.
ViewMap view_chains(const Trace& in, const BoundSymbol& b) {
  ViewMap known;
  for (ProxyId id : b.input_proxies())
    if (in.proxy(id).is_tensor) known[id] = {id, {}};
  std::vector<const BoundSymbol*> prims;
  flatten_prims(b, prims);
  for (const BoundSymbol* p : prims) {
    const ViewRule* rule = view_rules().find(p->sym->prim);
    if (rule == nullptr || p->args.empty() || !p->args[0].is_proxy() || !p->output.is_proxy()) continue;
    auto from = known.find(p->args[0].proxy());
    if (from == known.end()) continue;
    auto entry = from->second;
    entry.second.push_back(Step{p, rule, &b});
    known[p->output.proxy()] = std::move(entry);
  }
  ViewMap out;
  for (ProxyId id : b.output_proxies())
    if (known.count(id) && !known[id].second.empty()) out[id] = known[id];
  return out;
}

/// The outputs of `b` that are views of one of its tensor arguments (those of a torch-level op of
/// `torch_views`, or a prim of `view_rules`), found by following its decomposition's view prims.
ViewMap view_outputs(const Trace& in, const BoundSymbol& b) {
  const bool torch_view = b.sym->level == ir::Level::Torch && torch_views().count(b.sym->name);
  if (!torch_view && b.sym->level != ir::Level::Prim) return {};
  return view_chains(in, b);
}

/// The tensor arguments of a torch-level op that is no view in eager (`repeat`, `cat` of one tensor) but
/// whose decomposition reaches an output from them through view prims alone (`x.repeat(1)` is reshapes of
/// `x`): run by torch, such an output shares its argument's memory.
std::set<ProxyId> aliasing_decomposition(const Trace& in, const BoundSymbol& b) {
  std::set<ProxyId> out;
  if (b.sym->level != ir::Level::Torch || torch_views().count(b.sym->name)) return out;
  for (const auto& [o, view] : view_chains(in, b)) out.insert(view.first);
  return out;
}

// ---- the pass ----

class Functionalizer {
 public:
  explicit Functionalizer(const Trace& in)
      : in_(in), out_(in.empty_copy("Functionalization")), e_(out_),
        copy_(&ops::find_op(ir::Level::Torch, "copy_")->symbol),
        copy_to_(&ops::prim_symbol(ir::PrimId::copy_to)),
        begin_(&ops::prim_symbol(ir::PrimId::branch_begin)),
        else_(&ops::prim_symbol(ir::PrimId::branch_else)),
        end_(&ops::prim_symbol(ir::PrimId::branch_end)) {}

  // Whether the trace writes (copy_, or an effect that may write a tensor it reads) or has branches.
  bool needed() const {
    for (const BoundSymbol& s : in_.symbols) {
      if (s.sym == copy_ || s.sym == begin_ || s.sym == else_ || s.sym == end_) return true;
      if (s.sym->has(ir::kEffect))
        for (ProxyId p : s.input_proxies())
          if (in_.proxy(p).is_tensor) return true;
    }
    return false;
  }

  // Whether a symbol or its decomposition detaches (`x.detach()`, `x.data`).
  static bool detaches(const BoundSymbol& s) {
    if (s.is(ir::PrimId::detach)) return true;
    return std::any_of(s.subsymbols.begin(), s.subsymbols.end(), [](const BoundSymbol& b) { return detaches(b); });
  }

  Trace run() {
    std::unordered_set<ProxyId> detached;  // values computed from a detach: a write into one may stay in place
    for (const BoundSymbol& s : in_.symbols) {
      // (A check -- an assert -- writes nothing: no effect here.)
      has_effects_ |= s.sym != copy_ && s.sym != begin_ && s.sym != else_ && s.sym != end_ && s.sym->has(ir::kEffect) &&
                      !is_check(s);
      // A write through a detached view stays in place where autograd takes part (unrecorded_write): an effect.
      has_effects_ |= s.sym == copy_ && s.args[0].is_proxy() && detached.count(s.args[0].proxy()) > 0;
      const std::vector<ProxyId> reads = s.input_proxies();
      if (detaches(s) || std::any_of(reads.begin(), reads.end(), [&](ProxyId p) { return detached.count(p) > 0; }))
        for (ProxyId p : s.output_proxies()) detached.insert(p);
      for (ProxyId p : reads) ++reads_[p];
    }
    ir::for_each_proxy(in_.output, [&](ProxyId p) { ++reads_[p]; });
    for (ProxyId id : in_.inputs)
      if (in_.proxy(id).is_tensor) {
        const ir::ProxyInfo& p = in_.proxy(id);
        add_root(id, p.strides.empty() ? contiguous_strides(ints(p.tensor.shape)) : p.strides, -1);
      }
    for (const BoundSymbol& s : in_.symbols) {
      e_.set_source(s.source);
      if (s.sym == copy_) write(s);
      else if (s.sym == begin_) begin(s);
      else if (s.sym == else_) otherwise(s);
      else if (s.sym == end_) end(s);
      else if (is_check(s)) check(s);
      else if (s.sym->has(ir::kEffect)) effect(s);
      else ordinary(s);
    }
    if (!frames_.empty())
      refuse("prims.branch_begin " + where_from(*frames_.back().marker) + " has no matching prims.branch_end");
    finish();
    return std::move(out_);
  }

 private:
  // Where a tensor proxy of the input trace lives: its root, the view prims from the root to it, its strides
  // (as eager's), and the root's version when it was defined.
  struct Alias {
    ProxyId root;
    std::vector<Step> chain;
    Ints strides;
    int64_t version;
  };
  // A root's current value: the root itself until a write, then the value the writes computed.
  struct RootState {
    Value value;
    int64_t version;
    std::string source;  // of the last write
    // Whether eager has written the root by now, as far as its copy-back goes: false (no write pending), true,
    // or a 0-d bool tensor where only some arms of converted branches wrote it (the copy-back then runs only
    // where they were taken: an untaken arm's write bumped no version in eager).
    Value when = false;
  };
  // An open branch region.
  struct Frame {
    const BoundSymbol* marker;
    ProxyId pred;
    Value pred_value;
    std::optional<Value> pred0;  // pred_value as a 0-d tensor
    int64_t begin;               // the output trace's length at branch_begin
    bool in_else = false;
    std::map<ProxyId, RootState> before;      // roots written in the region: their state at branch_begin
    std::map<ProxyId, RootState> then_state;  // and at branch_else
    std::unordered_map<ProxyId, Value> masks;  // value -> its gradient-masked form in the current arm
  };

  // `born`: when the root is defined (the output trace's length then; -1 for inputs).
  void add_root(ProxyId id, Ints strides, int64_t born) {
    alias_[id] = Alias{id, {}, std::move(strides), 0};
    roots_[id] = RootState{P(id), 0, {}, false};
    born_[id] = born;
  }
  // A computed root: laid out as eager lays it out where the capture said (a transposed input's product), else
  // contiguous.
  void add_root(ProxyId id) {
    const Ints& eager = in_.proxy(id).eager_strides;
    add_root(id, eager.empty() ? contiguous_strides(ints(in_.tensor(id).shape)) : eager, e_.now());
  }

  bool requires_grad(const Value& v) const {
    return v.is_proxy() && out_.proxy(v.proxy()).is_tensor && out_.proxy(v.proxy()).tensor.requires_grad;
  }

  // The view chain `chain` replayed on `base` (a value of its root), memoized per proxy and base.
  Value replay(ProxyId p, const std::vector<Step>& chain, const Value& base) {
    auto key = std::make_pair(p, base.proxy());
    auto it = replays_.find(key);
    if (it != replays_.end()) return it->second;
    Value v = base;
    for (const Step& s : chain) v = s.rule->forward(e_, in_, *s.prim, v);
    replays_.emplace(key, v);
    return v;
  }

  // The up-to-date value of `p`, and in *origin when the data it derives from was defined (for masking).
  Value current(ProxyId p, int64_t* origin) {
    const Alias& a = alias_.at(p);
    const RootState& r = roots_.at(a.root);
    if (r.version == a.version) {
      auto it = value_of_.find(p);
      Value v = it == value_of_.end() ? P(p) : it->second;
      *origin = e_.defined_at(v.proxy());
      return v;
    }
    *origin = e_.defined_at(r.value.proxy());
    return replay(p, a.chain, r.value);
  }

  // Gradient masking: inside an arm of `if c`, a value from before the region that requires grad is read as
  // where(c, v, detach(v)) (then) or where(c, detach(v), v) (else), once per enclosing region begun after it. Every
  // arm masks: the arm not taken is computed too, and its backward, given zeros, still makes NaN where its
  // derivative is not finite -- at a value like sqrt's at 0, or an operand that is itself inf (x * w with x = -inf
  // gives w 0 * -inf); the mask's where gives what it reads zero there. (After thunder's autodiff split the detach
  // is an identity the kernels fuse.)
  Value mask(Value v, int64_t origin) {
    if (!requires_grad(v)) return v;
    for (Frame& f : frames_) {
      if (origin >= f.begin) continue;
      auto it = f.masks.find(v.proxy());
      if (it != f.masks.end()) {
        v = it->second;
        continue;
      }
      Value c = pred0(f), d = e_.torch("detach", {v});
      Value m = f.in_else ? e_.torch("where", {c, d, v}) : e_.torch("where", {c, v, d});
      f.masks.emplace(v.proxy(), m);
      v = m;
    }
    return v;
  }

  // What a symbol reads in place of `p`: its up-to-date value, masked inside arms.
  Value read(ProxyId p) {
    if (!alias_.count(p)) return P(p);  // a number, or a value inside a decomposition
    int64_t origin = 0;
    Value v = current(p, &origin);
    return mask(v, origin);
  }

  Value pred0(Frame& f) {
    if (!f.pred0) {
      const TensorMeta& m = e_.meta(f.pred_value);
      f.pred0 = m.ndim() == 0 ? f.pred_value : e_.torch("reshape", {f.pred_value, Value::ints({})});
    }
    return *f.pred0;
  }

  // A pure symbol: its reads substituted; its tensor outputs become roots, or views of an argument's root.
  void ordinary(const BoundSymbol& s) {
    const ViewMap views = view_outputs(in_, s);
    const bool all_views = alias_outputs(s, views);
    // A view op eager copies with (contiguous() of a non-contiguous tensor, a reshape its strides do not allow)
    // may return its argument itself at run time, where thunder's value is laid out otherwise (kernels write
    // contiguous outputs): where an in-place effect may write into either later, the op reads a clone, so that
    // the write reaches only the one eager's reaches.
    // Likewise an op eager copies with whose decomposition is views (`x.repeat(1)`).
    std::set<ProxyId> cloned;
    if (has_effects_) {
      for (const auto& [o, view] : views)
        if (alias_.at(o).root == o) cloned.insert(view.first);
      cloned.merge(aliasing_decomposition(in_, s));
    }
    std::unordered_map<ProxyId, Value> reads;
    bool replaced = false;
    BoundSymbol b = ir::substitute_inputs(s, [&](ProxyId p) {
      auto it = reads.find(p);
      if (it != reads.end()) return it->second;
      Value v = read(p);
      if (cloned.count(p)) v = e_.prim("clone", {v});
      replaced |= !(v == P(p));
      reads.emplace(p, v);
      return v;
    });
    if (replaced && all_views) {
      // Made again from the up-to-date argument, so that the peepholes see through earlier writes.
      for (const auto& [o, view] : views) {
        Value v = reads.at(view.first);
        for (const Step& step : view.second) v = step.rule->forward(e_, in_, *step.prim, v);
        value_of_[o] = v;
        if (recorded_.count(view.first)) recorded_.insert(o);  // a view of a written value, not of memory
      }
      return;
    }
    if (replaced) propagate_requires_grad(b);
    for (const auto& [o, view] : views)
      if (alias_.at(o).root != o) e_.share_storage(o, reads.at(view.first).proxy());
    e_.push(std::move(b));
  }

  // Gives each tensor output of `s` its root and chain: a view (of `views`) whose strides allow it, or a new
  // root. Returns whether every output is a view.
  bool alias_outputs(const BoundSymbol& s, const ViewMap& views) {
    bool all_views = !views.empty();
    const bool if_contiguous = s.sym->level == ir::Level::Torch && torch_views().count(s.sym->name) &&
                               torch_views().at(s.sym->name) == ViewKind::IfContiguous;
    for (ProxyId o : s.output_proxies()) {
      if (!in_.proxy(o).is_tensor) continue;
      auto v = views.find(o);
      std::optional<Ints> strides;
      if (v != views.end()) {
        const ProxyId input = v->second.first;
        strides = alias_.at(input).strides;
        if (if_contiguous && !is_contiguous(ints(in_.tensor(input).shape), *strides)) strides.reset();
        for (const Step& step : v->second.second)
          if (strides) strides = step.rule->strides(in_, *step.prim, *strides);
      }
      if (!strides) {
        all_views = false;
        add_root(o);
        continue;
      }
      const Alias& from = alias_.at(v->second.first);
      Alias a{from.root, from.chain, *strides, roots_.at(from.root).version};
      a.chain.insert(a.chain.end(), v->second.second.begin(), v->second.second.end());
      alias_[o] = std::move(a);
    }
    return all_views;
  }

  // An argument that now requires grad makes the outputs of what reads it require grad.
  void propagate_requires_grad(const BoundSymbol& b) {
    for (const BoundSymbol& sub : b.subsymbols) propagate_requires_grad(sub);
    if (b.sym->has(ir::kCreation) || b.sym->has(ir::kNoGrad)) return;
    bool any = false;
    for (ProxyId id : b.input_proxies()) any |= requires_grad(P(id));
    if (!any) return;
    for (ProxyId id : b.output_proxies()) {
      ir::ProxyInfo& p = out_.proxies[static_cast<size_t>(id)];
      if (p.is_tensor && (ir::is_floating(p.tensor.dtype) || ir::is_complex(p.tensor.dtype))) p.tensor.requires_grad = true;
    }
  }

  // src as the value a write into a tensor of `m` stores: broadcast to its shape, cast to its dtype.
  Value conform(const Value& src, const TensorMeta& m, const BoundSymbol& s) {
    if (!src.is_proxy() || !out_.proxy(src.proxy()).is_tensor)
      return e_.torch("full", {Value::dims(m.shape), src, Value(m.dtype), Value(ir::Str{m.device})});
    Value v = src;
    if (e_.meta(v).device != m.device)
      refuse(op_name(s) + " " + where_from(s) + " copies between devices (" + e_.meta(v).device + " to " + m.device +
             "), which functionalization does not express");
    if (e_.meta(v).dtype != m.dtype) v = e_.torch("to", {v, Value(m.dtype)});
    // Broadcast, the value is a tensor of its own, dense as eager's written tensor: an expanded view, returned
    // or written in place later, has elements that share memory (torch refuses writes into it).
    if (e_.meta(v).shape != m.shape) v = e_.prim("clone", {e_.torch("expand", {v, Value::dims(m.shape)})});
    return v;
  }

  // A write through `detach` (x.detach(), x.data) changes the root's values but not its autograd history. When
  // the root (or the written value) takes part in autograd, a new value of the root cannot say that: the write
  // stays in place, as `prims.copy_to` into the view, an effect (eager's in-place write, which autograd does not
  // record). Otherwise the root's new value is the written one.
  bool unrecorded_write(const BoundSymbol& s, const Alias& a) {
    const bool through_detach = std::any_of(a.chain.begin(), a.chain.end(),
                                            [](const Step& step) { return step.prim->is(ir::PrimId::detach); });
    if (!through_detach) return false;
    const Value& src = s.args[1];
    return in_.tensor(a.root).requires_grad ||
           (src.is_proxy() && in_.proxy(src.proxy()).is_tensor && in_.tensor(src.proxy()).requires_grad);
  }

  void write(const BoundSymbol& s) {
    const ProxyId dst = s.args[0].proxy();
    const Alias a = alias_.at(dst);
    if (unrecorded_write(s, a)) {
      BoundSymbol in_place = s;
      in_place.sym = copy_to_;
      effect(in_place);
      // Eager records the write on the view itself, which then requires grad where the written value does
      // (`t = x.detach(); t.add_(a)`: t's gradient reaches a): until its root is written again, the view reads
      // as the written value.
      const Value& src = s.args[1];
      if (src.is_proxy() && in_.proxy(src.proxy()).is_tensor && in_.tensor(src.proxy()).requires_grad) {
        value_of_[dst] = conform(read(src.proxy()), in_.tensor(dst), s);
        alias_.at(dst).version = roots_.at(a.root).version;
        recorded_.insert(dst);
        // The detached tensor the view was taken of (the op of the chain's last detach) is the view's base in
        // eager's autograd, which records the write on it (`h = y.detach(); h[:, :2].add_(w)`: h then requires
        // grad): it reads as itself, the tensor the write went into, until its root is written again. Made
        // again from the root, a detach dropped that history (h.requires_grad False: w got no gradient).
        for (size_t k = a.chain.size(); k-- > 0;) {
          if (!a.chain[k].prim->is(ir::PrimId::detach)) continue;
          for (ProxyId base : a.chain[k].op->output_proxies())
            if (base != dst && alias_.count(base) && !value_of_.count(base))
              alias_.at(base).version = roots_.at(a.root).version;
          break;
        }
      }
      return;
    }
    for (const Step& step : a.chain)
      if (step.rule->inverse == nullptr)
        refuse("cannot write through " + op_name(*step.op) + " " + where_from(*step.op) + " (prims." +
               step.prim->sym->name + ": " + step.rule->refusal + "); the write is " + op_name(s) + " " +
               where_from(s));
    Value value = conform(s.args[1].is_proxy() ? read(s.args[1].proxy()) : s.args[1], in_.tensor(dst), s);
    // The current values along the chain, as far as an inverse needs its input.
    size_t needed = 0;
    for (size_t k = 0; k < a.chain.size(); ++k)
      if (a.chain[k].rule->needs_input) needed = k + 1;
    const RootState& r = roots_.at(a.root);
    std::vector<Value> along;
    if (needed > 0) along.push_back(mask(r.value, e_.defined_at(r.value.proxy())));
    for (size_t k = 0; k + 1 < needed; ++k)
      along.push_back(a.chain[k].rule->forward(e_, in_, *a.chain[k].prim, along.back()));
    for (size_t k = a.chain.size(); k-- > 0;) {
      const Step& step = a.chain[k];
      value = step.rule->inverse(e_, in_, *step.prim, k < along.size() ? along[k] : Value(), value);
    }
    // A tensor taking part in autograd that is overwritten whole in grad mode (x.zero_(), x.fill_(v), x.copy_(w):
    // the importer marks such a value as requiring grad) still takes part, as in eager, and what it was gets a
    // zero gradient, not None (optimizers tell the two apart: weight decay skips a parameter whose .grad is None).
    // Its new value, which does not read what it was, is where(True, value, what it was), which passes that zero
    // gradient -- and, as in eager, a NaN where the overwritten value's own backward makes one of it (y[0] =
    // log(w[0]) then y[0] = 2 at w[0] = 0: 0 / 0), in a converted branch's arm too.
    if (requires_grad(r.value) && requires_grad(value) &&
        !e_.differentiably_computed_from(value.proxy(), r.value.proxy())) {
      const TensorMeta& m = e_.meta(value);
      const Value yes =
          e_.torch("full", {Value::dims({}), Value(true), Value(ir::DType::Bool), Value(ir::Str{m.device})});
      value = e_.torch("where", {yes, value, mask(r.value, e_.defined_at(r.value.proxy()))});
    }
    set_root(a.root, value, s.source);
  }

  void set_root(ProxyId root, const Value& value, const std::string& source, const Value& when = true) {
    note_write(root);
    roots_[root] = RootState{value, ++clock_, source, when};
    written_.insert(root);
  }

  // Before a root changes inside regions, each region it existed before remembers its state at branch_begin.
  void note_write(ProxyId root) {
    for (Frame& f : frames_)
      if (born_.at(root) < f.begin && !f.before.count(root)) f.before.emplace(root, roots_.at(root));
  }

  // A check (an assert: is_check) writes nothing: it reads the current values of its arguments, as a pure op
  // would, and stays where it is. As an effect it stored the pending writes of what it read into their memory in
  // the middle of the trace.
  void check(const BoundSymbol& s) {
    if (!frames_.empty())
      refuse(op_name(s) + " " + where_from(s) + " is a check inside a branch region (prims.branch_begin " +
             where_from(*frames_.back().marker) + "); both arms of a traced branch run, so it cannot be made "
             "conditional");
    e_.push(ir::substitute_inputs(s, [&](ProxyId p) { return read(p); }));
  }

  // An effect the pass does not know (an in-place op the importer could not lower): it may mutate what it
  // reads, so pending writes to those roots land first, and later reads see the roots afresh.
  void effect(const BoundSymbol& s) {
    if (!frames_.empty())
      refuse(op_name(s) + " " + where_from(s) + " has effects inside a branch region (prims.branch_begin " +
             where_from(*frames_.back().marker) + "); both arms of a traced branch run, so its effects cannot be "
             "made conditional");
    std::set<ProxyId> touched;
    for (ProxyId p : s.input_proxies()) {
      if (alias_.count(p)) touched.insert(alias_.at(p).root);
      if (recorded_.erase(p)) {  // the effect takes the view's memory, not the value written into it (write())
        value_of_.erase(p);
        alias_.at(p).version = -1;
      }
    }
    auto materialize = [&](ProxyId root, RootState& state) {
      copy_back(memory(root), state);
      state = RootState{memory(root), ++clock_, state.source, false};
    };
    auto pending = [&](ProxyId root, const RootState& state) { return state.value != memory(root); };
    // An effect that reads no tensor changes global state (grad mode: torch._C._set_grad_enabled): a pending
    // write whose value requires grad lands before it, in the grad mode it was made in, so that it records its
    // autograd history as eager's did (`x.sub_(w)` then, under no_grad, `x.add_(1)`: x keeps its grad_fn). Such
    // a root is touched like the effect's arguments: what reads its memory is cloned first (`buf.copy_(h[0])`
    // under no_grad, then `h.t().add_(w)`: buf's value read h as it was).
    if (s.input_proxies().empty())
      for (const auto& [root, state] : roots_)
        if (pending(root, state) && requires_grad(state.value)) touched.insert(root);
    // A pending value that is a touched root's memory as it is now (a copy_ from it, into another root or a
    // touched one) is cloned first: the stores below and the effect change that memory.
    std::set<ProxyId> touched_memory;
    for (ProxyId root : touched) touched_memory.insert(e_.storage(memory(root).proxy()));
    for (auto& [root, state] : roots_)
      if (pending(root, state) && touched_memory.count(e_.storage(state.value.proxy())))
        state = RootState{e_.prim("clone", {state.value}), ++clock_, state.source, state.when};  // views made again on it
    // A root that is a value of this trace, whose pending value is a tensor of its own that only the write reads,
    // is not stored into: the effect takes that value's memory, which is the root's from then on (memory_; `t = a
    // * 2; t.mul_(a); t[i] = 0`). The store into the old memory bumped its version, which autograd had saved for
    // mul's backward (its backward then raised), and cost a copy. (The root's views read it as any value of the
    // root: made again on it.)
    std::set<ProxyId> moved;
    for (ProxyId root : touched)
      if (pending(root, roots_.at(root)) && movable(root, roots_.at(root).value)) moved.insert(root);
    for (ProxyId root : touched)
      if (pending(root, roots_.at(root)) && !moved.count(root)) materialize(root, roots_.at(root));
    for (ProxyId root : moved) {
      RootState& state = roots_.at(root);
      // A transpose (written through `h.t()`) moves as a contiguous copy, laid out as the root: a store would have
      // cost the same copy, and bumped the version of the view autograd saved. The root's views made on the
      // transpose are made again on the copy (a new version): the effect writes through them into its memory.
      if (e_.transpose_of(state.value.proxy())) state.value = e_.torch("contiguous", {state.value});
      // A new version: the root's views are made again on its memory, without the peepholes that saw through it
      // (a slice of the slice_update read the update's source: `y[1:] = c[:-1]; y[1:3].sub_(...)` wrote into c).
      state.version = ++clock_;
      memory_[root] = state.value.proxy();
      e_.forget_made(memory_[root]);
    }
    e_.set_source(s.source);
    replays_.clear();  // what was computed before may be copies of memory the effect changes
    e_.forget();
    BoundSymbol b = ir::substitute_inputs(s, [&](ProxyId p) { return read(p); });
    // A pending value that shares memory with what the effect may mutate (a root written with a view of
    // another, untouched) is stored into its root before the effect changes that memory.
    std::set<ProxyId> storages(touched.begin(), touched.end());
    for (ProxyId root : touched) storages.insert(e_.storage(memory(root).proxy()));
    for (ProxyId p : b.input_proxies()) storages.insert(e_.storage(p));
    for (auto& [root, state] : roots_)
      if (pending(root, state) && storages.count(e_.storage(state.value.proxy()))) materialize(root, state);
    e_.set_source(s.source);
    e_.push(std::move(b));
    replays_.clear();
    e_.forget();
    for (ProxyId root : touched) {
      roots_[root] = RootState{memory(root), ++clock_, s.source, false};
      written_.insert(root);
    }
    for (ProxyId o : s.output_proxies())
      if (in_.proxy(o).is_tensor) add_root(o);
  }

  // Whether an effect may take `value`, the pending value of `root`, as the root's memory (see effect()): the root
  // is no input; the value is a tensor of the input trace that may move itself (movable_tensor), a tensor the
  // pass made for the write in memory of its own (the slice_update of `v = h[:2]; v.mul_(x)`), or a reshape or a
  // transpose the pass made of such a tensor of the input trace, laid out as the root (`h.view(-1).mul_(s)`:
  // contiguous both; `h.t().mul_(w)`: a contiguous copy); and no other root's value shares that memory.
  bool movable(ProxyId root, const Value& value) const {
    if (born_.at(root) < 0 || !value.is_proxy()) return false;
    const ProxyId v = value.proxy();
    const bool root_contiguous = is_contiguous(ints(in_.tensor(root).shape), alias_.at(root).strides);
    bool may = false;
    ProxyId base = v;  // the tensor whose memory the root takes
    if (alias_.count(v)) {
      may = movable_tensor(v);
    } else if (std::optional<ProxyId> reshaped = e_.reshape_of(v)) {
      base = *reshaped;
      may = alias_.count(base) && movable_tensor(base) && root_contiguous &&
            is_contiguous(ints(in_.tensor(base).shape), alias_.at(base).strides);
    } else if (std::optional<ProxyId> transposed = e_.transpose_of(v)) {
      base = *transposed;  // (moved as a contiguous copy: effect())
      may = alias_.count(base) && movable_tensor(base) && root_contiguous;
    } else {
      may = e_.fresh(v);
    }
    return may && !shared(root, base);
  }

  // Whether memory `base` holds the value of a root other than `root` (and than `base` itself, a tensor of the
  // input trace only the write reads): its pending value or its memory, or a view read as such a root's value
  // (`c.copy_(h)` after h's write leaves c's pending value h's: moving h into it, a later write into h would change
  // c).
  bool shared(ProxyId root, ProxyId base) const {
    for (const auto& [other, state] : roots_)
      if (other != root && other != base &&
          ((state.value.is_proxy() && e_.storage(state.value.proxy()) == base) ||
           e_.storage(memory(other).proxy()) == base))
        return true;
    for (const auto& [p, w] : value_of_)
      if (alias_.at(p).root != root && w.is_proxy() && e_.storage(w.proxy()) == base) return true;
    return false;
  }

  // Whether `v`, a tensor of the input trace, may become a root's memory: a root of its own, not an input, without
  // views or writes, which nothing but the write into that root reads (reads_ counts the input trace's top-level
  // symbols: a decomposition's reads are its symbol's).
  bool movable_tensor(ProxyId v) const {
    auto root_of = alias_.find(v);
    if (root_of == alias_.end() || root_of->second.root != v || born_.at(v) < 0 || roots_.at(v).value != P(v))
      return false;
    auto reads = reads_.find(v);
    if (reads == reads_.end() || reads->second != 1 || e_.storage(v) != v) return false;
    for (const auto& [p, a] : alias_)
      if (p != a.root && a.root == v) return false;
    return true;
  }

  // The memory a root's values live in: the root's own, or the value an effect took (effect(), memory_).
  Value memory(ProxyId root) const {
    auto it = memory_.find(root);
    return P(it == memory_.end() ? root : it->second);
  }

  Frame& frame_for(const BoundSymbol& s) {
    if (frames_.empty()) refuse(op_name(s) + " " + where_from(s) + " has no matching prims.branch_begin");
    Frame& f = frames_.back();
    if (s.args[0] != P(f.pred))
      refuse(op_name(s) + " " + where_from(s) + " closes the region of prims.branch_begin " + where_from(*f.marker) +
             ", whose predicate is another value");
    return f;
  }

  void begin(const BoundSymbol& s) {
    Frame f;
    f.marker = &s;
    f.pred = s.args[0].proxy();
    f.pred_value = read(f.pred);
    f.begin = e_.now();
    frames_.push_back(std::move(f));
  }

  void otherwise(const BoundSymbol& s) {
    Frame& f = frame_for(s);
    if (f.in_else) refuse(op_name(s) + " " + where_from(s) + ": a second prims.branch_else in one region");
    for (const auto& [root, state] : f.before) {
      f.then_state.emplace(root, roots_.at(root));
      roots_[root] = state;
    }
    f.in_else = true;
    f.masks.clear();
  }

  void end(const BoundSymbol& s) {
    if (!frame_for(s).in_else) otherwise(s);  // no else arm: it wrote nothing
    Frame f = std::move(frames_.back());
    frames_.pop_back();
    for (const auto& [root, state] : f.before) {
      auto then = f.then_state.find(root);
      const RootState& then_state = then == f.then_state.end() ? state : then->second;
      const RootState& else_state = roots_.at(root);
      if (then_state.value == else_state.value) continue;
      const Value value = e_.select(pred0(f), then_state.value, else_state.value);
      set_root(root, value, s.source, written_if(pred0(f), then_state.when, else_state.when));
    }
  }

  // Whether a root is written after a region, from whether each arm left it written (RootState::when).
  Value written_if(const Value& c, const Value& then_when, const Value& else_when) {
    if (then_when == else_when) return then_when;
    if (then_when == Value(true) && else_when == Value(false)) return c;
    return e_.torch("where", {c, then_when, else_when});
  }

  // The write of a root's pending value into its memory, skipped at run time where no arm that wrote it was taken.
  void copy_back(const Value& memory, const RootState& state) {
    e_.set_source(state.source);
    if (state.when == Value(true)) e_.prim("copy_to", {memory, state.value});
    else e_.prim("copy_to", {memory, state.value, state.when});
  }

  // The copy-backs into the written inputs, then the outputs. A copy-back overwrites its input's memory, which
  // the values read after it may still stand for as they were (a tensor filled from the input by copy_ before the
  // input was written, `v.copy_(a); a.zero_(); return v`; another input's copy-back, `prev.copy_(cur);
  // cur.add_(1)`): such a value (the input's proxy or a view of it) is cloned before the first copy-back.
  void finish() {
    std::set<ProxyId> inputs(in_.inputs.begin(), in_.inputs.end());
    std::vector<ProxyId> copied_back;
    for (ProxyId id : in_.inputs) {
      auto it = roots_.find(id);
      if (it != roots_.end() && !(it->second.value == P(id))) copied_back.push_back(id);
    }
    std::set<ProxyId> overwritten(copied_back.begin(), copied_back.end());
    std::map<ProxyId, Value> kept;
    auto before_copy_backs = [&](const Value& v) -> Value {
      if (!v.is_proxy() || !overwritten.count(e_.storage(v.proxy()))) return v;
      auto [it, fresh] = kept.try_emplace(v.proxy());
      if (fresh) it->second = e_.prim("clone", {v});
      return it->second;
    };
    // Outputs that are no written input's (or view's): their values, read before the copy-backs.
    std::map<ProxyId, Value> values;
    ir::for_each_proxy(in_.output, [&](ProxyId p) {
      if (!alias_.count(p) || values.count(p)) return;
      const Alias& a = alias_.at(p);
      if (inputs.count(a.root) && written_.count(a.root)) return;
      Value v = before_copy_backs(read(p));
      // A tensor contiguous in eager whose value is a transpose the pass made (written through `y.t()`) is returned
      // laid out as eager's (y.view(-1) by the caller raised "view size is not compatible").
      if (a.root == p && v.is_proxy() && e_.transpose_of(v.proxy()) &&
          is_contiguous(ints(in_.tensor(p).shape), a.strides))
        v = e_.torch("contiguous", {v});
      values.emplace(p, v);
    });
    std::vector<RootState> sources;
    for (ProxyId id : copied_back) {
      RootState state = roots_.at(id);
      state.value = before_copy_backs(state.value);
      sources.push_back(std::move(state));
    }
    for (size_t i = 0; i < copied_back.size(); ++i) copy_back(P(copied_back[i]), sources[i]);
    e_.set_source("");
    out_.output = ir::map_proxies(in_.output, [&](ProxyId p) -> Value {
      if (!alias_.count(p)) return P(p);
      if (values.count(p)) return values.at(p);
      // Eager returns the written input (or a view of it): the same tensor, updated in place by the copy-back.
      const Alias& a = alias_.at(p);
      if (!value_of_.count(p) && e_.storage(p) == a.root && !memory_.count(a.root)) return P(p);
      return replay(p, a.chain, memory(a.root));
    });
  }

  const Trace& in_;
  Trace out_;
  Emitter e_;
  const ir::Symbol* copy_;
  const ir::Symbol* copy_to_;
  const ir::Symbol* begin_;
  const ir::Symbol* else_;
  const ir::Symbol* end_;
  std::unordered_map<ProxyId, Alias> alias_;          // every tensor proxy of the input trace's top level
  std::map<ProxyId, RootState> roots_;                // ordered, so that copy-backs come in a fixed order
  std::unordered_map<ProxyId, int64_t> born_;         // when each root was defined (-1: an input)
  std::unordered_map<ProxyId, Value> value_of_;       // views made again from a newer value: their value
  std::set<ProxyId> recorded_;                        // detached views read as the value written into them
  std::map<ProxyId, ProxyId> memory_;                 // roots whose memory an effect took from a value: that value
  std::map<std::pair<ProxyId, ProxyId>, Value> replays_;  // (proxy, root value) -> the view replayed on it
  std::set<ProxyId> written_;                         // roots written or mutated at some point
  std::unordered_map<ProxyId, int> reads_;            // how many top-level symbols of the input trace read each
                                                      // proxy (the trace's output counts as one)
  std::vector<Frame> frames_;                         // open branch regions, outermost first
  int64_t clock_ = 0;                                 // versions: every write makes a new one
  bool has_effects_ = false;                          // an in-place op the importer could not lower (effect()),
                                                      // or a write through a detached tensor
};

}  // namespace

Trace functionalize(const Trace& t, const PassContext&) {
  Functionalizer f(t);
  if (!f.needed()) {
    Trace out = t.empty_copy("Functionalization");
    out.symbols = t.symbols;
    out.output = t.output;
    return out;
  }
  return f.run();
}

}  // namespace thunder::passes
