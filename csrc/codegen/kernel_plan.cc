#include "codegen/kernel_plan.h"

#include <algorithm>

namespace thunder::codegen {

std::vector<int64_t> shape_of(const ir::Trace& t, ProxyId v) {
  std::vector<int64_t> out;
  for (const ir::Dim& d : t.tensor(v).shape) out.push_back(t.at_hints(d, "code generation"));
  return out;
}

int64_t numel_of(const ir::Trace& t, ProxyId v) {
  int64_t n = 1;
  for (const ir::Dim& d : t.tensor(v).shape) n *= t.at_hints(d, "code generation");
  return n;
}

namespace {

using ir::PrimId;

// The plan table: what a kernel does with each prim it can fuse (a prim without a row is not fusible).
// Every dialect writes each row's prims its own way (cpu_expressions.cc for the C++ dialect).
ir::PrimTable<PrimKind> make_plan_table() {
  ir::PrimTable<PrimKind> t("kernel plan");
  const PrimKind elementwise{PrimRole::Elementwise}, float_only{PrimRole::Elementwise, Operands::FloatOnly};
  // C++'s &, |, ^ and ~ have no floating-point overloads (torch's bitwise ops none either): a kernel claiming
  // these on floats would not compile.
  const PrimKind integer_only{PrimRole::Elementwise, Operands::IntegerOnly};
  for (PrimId id : {PrimId::neg, PrimId::abs, PrimId::floor, PrimId::ceil, PrimId::round, PrimId::trunc, PrimId::sign,
                    PrimId::isnan, PrimId::isinf, PrimId::isfinite, PrimId::signbit, PrimId::logical_not, PrimId::add,
                    PrimId::sub, PrimId::mul, PrimId::maximum, PrimId::minimum, PrimId::eq, PrimId::ne, PrimId::lt,
                    PrimId::le, PrimId::gt, PrimId::ge, PrimId::logical_and, PrimId::logical_or, PrimId::logical_xor,
                    PrimId::where, PrimId::convert_element_type})
    t.set(id, elementwise);
  for (PrimId id : {PrimId::exp, PrimId::exp2, PrimId::log, PrimId::log2, PrimId::log10, PrimId::log1p, PrimId::expm1,
                    PrimId::sqrt, PrimId::rsqrt, PrimId::sin, PrimId::cos, PrimId::tan, PrimId::asin, PrimId::acos,
                    PrimId::atan, PrimId::sinh, PrimId::cosh, PrimId::tanh, PrimId::asinh, PrimId::acosh,
                    PrimId::atanh, PrimId::erf, PrimId::erfc, PrimId::lgamma, PrimId::reciprocal, PrimId::sigmoid,
                    PrimId::pow, PrimId::atan2, PrimId::copysign, PrimId::remainder, PrimId::fmod, PrimId::div})
    t.set(id, float_only);
  for (PrimId id : {PrimId::bitwise_not, PrimId::bitwise_and, PrimId::bitwise_or, PrimId::bitwise_xor})
    t.set(id, integer_only);
  // data movement the loop nest absorbs (detach: its value, read where autograd no longer looks -- a symbol whose
  // output requires grad is never fused -- as in a branch arm's gradient mask after thunder's autodiff split)
  for (PrimId id : {PrimId::broadcast_in_dim, PrimId::reshape, PrimId::squeeze, PrimId::alias, PrimId::detach})
    t.set(id, {PrimRole::IndexOnly});
  for (PrimId id : {PrimId::sum, PrimId::prod, PrimId::amax, PrimId::amin}) t.set(id, {PrimRole::Reduction});
  // a gather along the reduced dim, read at row level (cross-entropy's pick of the target's log-probability)
  t.set(PrimId::take_along_axis, {PrimRole::Pick});
  // index remapping, in kernels without reductions: a slice reads its source at shifted indices, a cat
  // selects among its inputs by index range (RoPE's rotate-half), a slice_update its update inside a box
  for (PrimId id : {PrimId::slice, PrimId::cat, PrimId::slice_update}) t.set(id, {PrimRole::Remap});
  // a constant, evaluated where it is read (the zeros a slice's gradient is written into)
  t.set(PrimId::full, {PrimRole::Constant});
  // counter-based uniforms, computed per element from the seed (a 0-d operand) and the element's flat index
  t.set(PrimId::uniform_philox, elementwise);
  return t;
}

// A reduction whose reduced dims are followed by kept dims of at least this many elements stays out of kernels.
constexpr int64_t kMinStridedKept = 16;

bool fail(std::string* why, std::string msg) {
  if (why) *why = std::move(msg);
  return false;
}

bool has_role(const ir::BoundSymbol& b, PrimRole role) {
  const PrimKind* k = plan_table().find(b.sym->prim);
  return k != nullptr && k->role == role;
}
bool remaps_indices(const ir::BoundSymbol& b) { return has_role(b, PrimRole::Remap); }

std::vector<int64_t> steps_of(const ir::Value& v, size_t rank) {
  return v.is_none() ? std::vector<int64_t>(rank, 1) : v.as_ints();
}

// A slice's start indices as integers: their values, or their values at the trace's size hints.
std::vector<int64_t> starts_of(const ir::Trace& t, const ir::Value& v) {
  if (!v.is_seq()) return {t.at_hints(v.as_dim(), "code generation")};
  std::vector<int64_t> out;
  for (const ir::Value& item : v.items()) out.push_back(t.at_hints(item.as_dim(), "code generation"));
  return out;
}

// Whether two alignments of a value of this shape read the same elements: a dim of size 1 reads its one
// element whether it is aligned to a domain dim (of extent 1) or broadcast.
bool same_alignment(const std::vector<int>& a, const std::vector<int>& b, const std::vector<int64_t>& shape) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && shape[i] != 1) return false;
  return true;
}

// Assigns `al` to `v`, or checks it agrees with the alignment already assigned.
bool assign(const ir::Trace& t, KernelPlan& p, ProxyId v, const std::vector<int>& al, std::string* why) {
  auto [it, inserted] = p.align.emplace(v, al);
  if (!inserted && !same_alignment(it->second, al, shape_of(t, v)))
    return fail(why, "a value is used with two different alignments");
  return true;
}

// The alignment of a reshape's input given its output's: only size-1 dims may appear or vanish.
std::optional<std::vector<int>> reshape_input_alignment(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                                                        const std::vector<int>& out_al) {
  std::vector<int> al(in.size(), -1);
  size_t j = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == 1) continue;
    while (j < out.size() && out[j] == 1) ++j;
    if (j == out.size() || out[j] != in[i]) return std::nullopt;
    al[i] = out_al[j++];
  }
  while (j < out.size() && out[j] == 1) ++j;
  if (j != out.size()) return std::nullopt;
  return al;
}

// An elementwise operand is aligned as the result, unless it is a one-element tensor of another shape (the
// 0-d predicate of a where over tensors): that one is broadcast along each of its dims.
std::vector<int> operand_alignment(const ir::Trace& t, ProxyId operand, ProxyId out, const std::vector<int>& out_al) {
  const std::vector<int64_t>& shape = shape_of(t, operand);
  return shape == shape_of(t, out) ? out_al : std::vector<int>(shape.size(), -1);
}

// The walk of plan_kernel from the region's last symbol back to its first: it gives each value its
// alignment and its extents (the index ranges it is read over, per domain dim: the domain's, except under a
// remap, where an operand may span more or less), and each data mover its Remap. A value may be read over
// ranges that differ along the dims it is not aligned to (a 0-d value both inside a one-element update and
// outside it): there its index is not used. Along its aligned dims they must agree; plan_kernel checks that
// once every value is aligned.
struct Walk {
  const ir::Trace& t;
  KernelPlan& p;
  std::string* why;
  std::map<ProxyId, std::vector<int64_t>> extent;             // the first range each value is read over
  std::map<ProxyId, std::set<std::vector<int64_t>>> ranges;  // all of them

  bool align(ProxyId v, const std::vector<int>& al) { return assign(t, p, v, al, why); }
  bool read_over(ProxyId v, const std::vector<int64_t>& e) {
    extent.emplace(v, e);
    ranges[v].insert(e);
    return true;
  }
  bool place(ProxyId v, const std::vector<int>& al, const std::vector<int64_t>& e) {
    return align(v, al) && read_over(v, e);
  }
};

// The domain dim that carries dim i of a slice's source where the slice's result is broadcast (one element
// read everywhere, as in x[0:1, 3:4].reshape(())): inside the source's evaluation its index is a constant,
// so any domain dim the source's other dims leave free will do. The source's own alignment when it has one,
// else the dim of the same position, else one of the same length; -1 if every dim is taken.
int pinned_dim(const Walk& w, ProxyId src, size_t i, const std::vector<int>& al) {
  auto taken = [&](int d) {
    for (size_t j = 0; j < al.size(); ++j)
      if (j != i && al[j] == d) return true;
    return false;
  };
  const int64_t length = shape_of(w.t, src)[i];
  std::vector<int> preferred;
  if (auto known = w.p.align.find(src); known != w.p.align.end()) preferred.push_back(known->second[i]);
  preferred.push_back(static_cast<int>(i));
  for (size_t d = 0; d < w.p.domain.size(); ++d)
    if (w.p.domain[d] == length) preferred.push_back(static_cast<int>(d));
  for (size_t d = 0; d < w.p.domain.size(); ++d) preferred.push_back(static_cast<int>(d));
  for (int d : preferred)
    if (d >= 0 && d < static_cast<int>(w.p.domain.size()) && !taken(d)) return d;
  return -1;
}

// slice: one case, the source read at start + i * step along each sliced dim; along a dim where the result
// is broadcast, at the constant start.
bool walk_slice(Walk& w, const ir::BoundSymbol& b) {
  const ProxyId src = b.args[0].proxy(), out = b.output.proxy();
  const std::vector<int> out_al = w.p.align.at(out);
  const std::vector<int64_t> out_extent = w.extent.at(out);
  const std::vector<int64_t>& src_shape = shape_of(w.t, src);
  const std::vector<int64_t>& out_shape = shape_of(w.t, out);
  const std::vector<int64_t> start = starts_of(w.t, b.args[1]), step = steps_of(b.args[3], src_shape.size());
  std::vector<int> al = out_al;
  std::vector<int64_t> e = out_extent;
  RemapCase c{src, {}, {}};
  for (size_t i = 0; i < src_shape.size(); ++i) {
    if (src_shape[i] == 1 || out_al[i] < 0) continue;  // the first (and only) element; pinned below
    if (out_shape[i] != src_shape[i]) e[out_al[i]] = src_shape[i];
    if (start[i] != 0 || step[i] != 1) c.at.push_back({out_al[i], step[i], start[i], 1, src_shape[i]});
  }
  for (size_t i = 0; i < src_shape.size(); ++i) {
    if (src_shape[i] == 1 || out_al[i] >= 0) continue;
    const int d = pinned_dim(w, src, i, al);
    if (d < 0) return fail(w.why, "a one-element slice with no domain dim to read it along");
    al[i] = d;
    e[d] = src_shape[i];
    c.at.push_back({d, 0, start[i], 1, src_shape[i]});
  }
  w.p.remaps[out] = Remap{{c}};
  return w.place(src, al, e);
}

// cat: a case per non-empty input, over its part of the dim, read at the index within the part.
bool walk_cat(Walk& w, const ir::BoundSymbol& b) {
  const ProxyId out = b.output.proxy();
  const std::vector<int> out_al = w.p.align.at(out);
  const std::vector<int64_t> out_extent = w.extent.at(out);
  int64_t k = b.args[1].as_int();
  if (k < 0) k += w.t.tensor(out).ndim();
  const int d = out_al[k];
  if (d < 0) return fail(w.why, "a cat along a broadcast dim");
  const int64_t total = shape_of(w.t, out)[k];
  Remap r;
  int64_t begin = 0;
  for (const ir::Value& part : b.args[0].items()) {
    const int64_t len = shape_of(w.t, part.proxy())[k];
    std::vector<int64_t> e = out_extent;
    e[d] = len;
    if (!w.place(part.proxy(), out_al, e)) return false;
    if (len == 0) continue;  // no element to read (and maybe no memory)
    RemapCase c{part.proxy(), {}, {{d, 1, -begin, 1, len}}};
    const int64_t end = begin + len;
    if (begin > 0 || end < total) c.when.push_back({d, begin, end < total ? end : IndexRange::kUnbounded, 1});
    r.cases.push_back(std::move(c));
    begin = end;
  }
  w.p.remaps[out] = std::move(r);
  return true;
}

// slice_update(a, src, start, stop, step): src over its box and grid, read at (i - start) / step; a elsewhere.
bool walk_slice_update(Walk& w, const ir::BoundSymbol& b) {
  const ProxyId a = b.args[0].proxy(), src = b.args[1].proxy(), out = b.output.proxy();
  const std::vector<int> out_al = w.p.align.at(out);
  const std::vector<int64_t> out_extent = w.extent.at(out);
  const std::vector<int64_t>& src_shape = shape_of(w.t, src);
  const std::vector<int64_t>& out_shape = shape_of(w.t, out);
  const std::vector<int64_t> start = starts_of(w.t, b.args[2]), step = steps_of(b.args[4], src_shape.size());
  std::vector<int64_t> e = out_extent;
  RemapCase c{src, {}, {}};
  for (size_t i = 0; i < src_shape.size(); ++i) {
    const int d = out_al[i];
    if (d < 0) continue;  // a broadcast dim of length 1: the update covers it
    e[d] = src_shape[i];
    if (start[i] == 0 && step[i] == 1 && src_shape[i] == out_shape[i]) continue;  // the whole dim
    const int64_t end = start[i] + (src_shape[i] - 1) * step[i] + 1;
    c.when.push_back({d, start[i], end < out_shape[i] ? end : IndexRange::kUnbounded, step[i]});
    c.at.push_back({d, 1, -start[i], step[i], src_shape[i]});
  }
  Remap r;
  if (numel_of(w.t, src) > 0) r.cases.push_back(std::move(c));
  r.cases.push_back(RemapCase{a, {}, {}});
  w.p.remaps[out] = std::move(r);
  return w.place(a, out_al, out_extent) && w.place(src, out_al, e);
}

// Whether reading the remapped operands along the innermost dim needs gathers: a strided or divided index
// along it, or a select along it where the renderer does not split the loop into pieces (a 1-d domain, or
// more range bounds than pieces).
bool gathers_along_innermost(const KernelPlan& p) {
  const int inner = static_cast<int>(p.domain.size()) - 1;
  const bool split = p.domain.size() >= 2 && p.range_bounds(inner).size() < kMaxLoopPieces;
  for (const auto& [v, remap] : p.remaps)
    for (const RemapCase& c : remap.cases) {
      for (const IndexMap& m : c.at)
        if (m.dim == inner && ((m.scale != 0 && m.scale != 1) || m.divisor != 1)) return true;
      for (const IndexRange& r : c.when)
        if (r.dim == inner && !split) return true;
    }
  return false;
}

}  // namespace

const ir::PrimTable<PrimKind>& plan_table() {
  static const ir::PrimTable<PrimKind> table = make_plan_table();
  return table;
}

bool is_fusible_prim(const std::string& name) {
  const std::optional<PrimId> id = ir::prim_id(name);
  return id && plan_table().contains(*id);
}

std::vector<std::string> fusible_prims() {
  std::vector<std::string> out;
  for (size_t i = 1; i <= ir::kNumPrims; ++i)
    if (plan_table().contains(static_cast<PrimId>(i))) out.emplace_back(ir::prim_name(static_cast<PrimId>(i)));
  std::sort(out.begin(), out.end());
  return out;
}

bool KernelPlan::has_reduction() const { return std::find(reduced.begin(), reduced.end(), true) != reduced.end(); }

bool KernelPlan::element_level(ProxyId v) const {
  for (int d : align.at(v))
    if (d >= 0 && reduced[d]) return true;
  return false;
}

std::vector<int64_t> KernelPlan::range_bounds(int dim) const {
  std::set<int64_t> bounds;
  for (const auto& [v, remap] : remaps)
    for (const RemapCase& c : remap.cases)
      for (const IndexRange& r : c.when) {
        if (r.dim != dim) continue;
        for (int64_t b : {r.lo, r.hi})
          if (b > 0 && b < domain[dim]) bounds.insert(b);
      }
  return {bounds.begin(), bounds.end()};
}

std::vector<int> written_over(const ir::Trace& t, const KernelPlan& p, const std::set<ProxyId>& dying) {
  if (dying.empty() || p.has_reduction() || !p.remaps.empty()) return {};
  for (const ir::BoundSymbol& b : p.symbols) {
    const PrimRole role = plan_table().at(b.sym->prim).role;
    if (role != PrimRole::Elementwise && role != PrimRole::IndexOnly && role != PrimRole::Constant) return {};
  }
  // The value spans the domain and is indexed by it: its dim i is domain dim i (a dim of one may be broadcast).
  auto spans_domain = [&](ProxyId v) {
    const std::vector<int64_t> shape = shape_of(t, v);
    const std::vector<int>& al = p.align.at(v);
    if (shape != p.domain) return false;
    for (size_t i = 0; i < al.size(); ++i)
      if (al[i] != static_cast<int>(i) && !(al[i] < 0 && shape[i] == 1)) return false;
    return true;
  };
  std::vector<int> over(p.outputs.size(), -1);
  std::set<size_t> taken;
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    if (!spans_domain(p.outputs[i])) continue;
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      const ProxyId in = p.inputs[k];
      const ir::TensorMeta &from = t.tensor(in), &to = t.tensor(p.outputs[i]);
      if (taken.count(k) || !dying.count(in) || from.dtype != to.dtype || from.device != to.device || !spans_domain(in))
        continue;
      over[i] = static_cast<int>(k);
      taken.insert(k);
      break;
    }
  }
  return taken.empty() ? std::vector<int>{} : over;
}

namespace {

// Whether a kernel may take the numbers among a fusible prim's arguments at run time: an elementwise prim's
// operands (not uniform_philox's offset, which the kernel writes in as a literal) and the value full fills with.
bool takes_run_time_numbers(const ir::BoundSymbol& b, const PrimKind& kind) {
  return (kind.role == PrimRole::Elementwise || b.is(ir::PrimId::full)) && !b.is(ir::PrimId::uniform_philox);
}

// Whether `id` is among `b`'s arguments as a number, not only in a shape (a sequence: full's), where it is a size.
bool read_as_number(const ir::BoundSymbol& b, ProxyId id) {
  bool found = false;
  for (const ir::Value& a : b.args)
    if (!a.is_seq()) ir::for_each_proxy(a, [&](ProxyId p) { found |= p == id; });
  return found;
}

}  // namespace

bool reads_numbers_at_run_time(const ir::BoundSymbol& b) {
  if (b.sym->level == ir::Level::Fusion) return true;
  const PrimKind* kind = b.sym->level == ir::Level::Prim ? plan_table().find(b.sym->prim) : nullptr;
  // (pow's exponent is special-cased by its value, as torch's kernel does: x ** 2 a product; its VJP reads a
  // constant base or exponent as one.)
  return kind != nullptr && takes_run_time_numbers(b, *kind) && !b.is(ir::PrimId::pow);
}

std::vector<SizeArgument> size_arguments(const ir::Trace& t, const KernelPlan& p) {
  std::vector<SizeArgument> out;
  for (size_t d = 0; d < p.domain.size(); ++d) {
    if (!p.generic_dim(static_cast<int>(d))) continue;
    SizeArgument a{"n" + std::to_string(d), false, -1, -1, p.domain[d]};
    for (size_t k = 0; k < p.inputs.size() && a.input < 0; ++k) {
      const std::vector<int>& al = p.align.at(p.inputs[k]);
      for (size_t i = 0; i < al.size() && a.input < 0; ++i)
        if (al[i] == static_cast<int>(d) && shape_of(t, p.inputs[k])[i] != 1)
          a.input = static_cast<int>(k), a.input_dim = static_cast<int>(i);
    }
    out.push_back(std::move(a));
  }
  // Strides of inputs read in place: arguments of shape-generic kernels only (a kernel with remaps writes them in).
  for (size_t k = 0; k < p.inputs.size() && p.shape_generic(); ++k) {
    const std::vector<int64_t>& strides = t.proxy(p.inputs[k]).strides;
    const std::vector<int>& al = p.align.at(p.inputs[k]);
    for (size_t i = 0; i < strides.size(); ++i)
      if (al[i] >= 0 && shape_of(t, p.inputs[k])[i] != 1 && strides[i] != 0 && strides[i] != 1)
        out.push_back({"s" + std::to_string(k) + "_" + std::to_string(i), true, static_cast<int>(k),
                       static_cast<int>(i), strides[i]});
  }
  return out;
}

std::optional<KernelPlan> plan_kernel(const ir::Trace& t, const std::vector<ir::BoundSymbol>& symbols,
                                      const std::set<ProxyId>& live_out, std::string* why) {
  KernelPlan p;
  p.symbols = symbols;
  std::set<ProxyId> produced;
  const ir::TensorMeta* reduction_input = nullptr;
  ProxyId reduction_symbol = -1;  // the proxy reduction_input describes
  std::vector<int64_t> rdims;
  std::string device;
  for (const ir::BoundSymbol& b : symbols) {
    const std::string& n = b.sym->name;
    const PrimKind* kind = b.sym->level == ir::Level::Prim ? plan_table().find(b.sym->prim) : nullptr;
    if (kind == nullptr) return fail(why, "prims." + n + " is not fusible"), std::nullopt;
    for (ProxyId id : b.input_proxies()) {
      const ir::ProxyInfo& info = t.proxy(id);
      // A size symbol in a shape argument is planned at its hint; the trace is lowered with it bound to an
      // integer, so the kernel does not take it. Read as a number by arithmetic (`mean`'s divisor), it stays a
      // symbol when bound (reads_numbers_at_run_time) and the kernel takes it, as any number computed at run time.
      if (!info.is_tensor && t.size_hints.count(id) && (!reads_numbers_at_run_time(b) || !read_as_number(b, id)))
        continue;
      // Any other number is computed at run time: a kernel argument, where it is an operand of arithmetic or the
      // value full fills with.
      if (!info.is_tensor) {
        if (!takes_run_time_numbers(b, *kind))
          return fail(why, "a number computed at run time as an argument of prims." + n), std::nullopt;
        if (info.number == ir::NumberType::Complex) return fail(why, "complex numbers"), std::nullopt;
        if (std::find(p.scalars.begin(), p.scalars.end(), id) == p.scalars.end()) p.scalars.push_back(id);
        continue;
      }
      if (!produced.count(id) && std::find(p.inputs.begin(), p.inputs.end(), id) == p.inputs.end()) p.inputs.push_back(id);
    }
    for (ProxyId id : b.output_proxies()) {
      const ir::ProxyInfo& info = t.proxy(id);
      if (!info.is_tensor) return fail(why, "number outputs"), std::nullopt;
      if (ir::is_complex(info.tensor.dtype)) return fail(why, "complex dtypes"), std::nullopt;
      if (device.empty()) device = info.tensor.device;
      if (info.tensor.device != device) return fail(why, "tensors on two devices"), std::nullopt;
      produced.insert(id);
      if (live_out.count(id)) p.outputs.push_back(id);
    }
    if (kind->operands == Operands::FloatOnly) {
      for (ProxyId id : b.input_proxies())
        if (t.proxy(id).is_tensor && !ir::is_floating(t.tensor(id).dtype))
          return fail(why, "prims." + n + " on integers"), std::nullopt;
    }
    if (kind->operands == Operands::IntegerOnly) {
      for (ProxyId id : b.input_proxies())
        if (t.proxy(id).is_tensor && ir::is_floating(t.tensor(id).dtype))
          return fail(why, "prims." + n + " on floating-point tensors"), std::nullopt;
    }
    if (kind->role == PrimRole::Reduction) {
      const ir::TensorMeta& in = t.tensor(b.args[0].proxy());
      std::vector<int64_t> dims = b.args[1].as_ints();
      std::sort(dims.begin(), dims.end());
      if (dims.empty()) return fail(why, "empty reduction"), std::nullopt;
      if (reduction_input && (reduction_input->shape != in.shape || rdims != dims))
        return fail(why, "reductions over different domains"), std::nullopt;
      // The loops put the reduced dims innermost: reducing outer dims of rows that are kept (a bias's or a
      // LayerNorm weight's gradient, x.sum((0, 1)) of [8, 64, 256]) would read every element at a large
      // stride, one kept column at a time (1.2 ms against torch's 0.1 ms there); torch sums those.
      int64_t kept_inside = 1;
      for (int64_t d = dims.back() + 1; d < static_cast<int64_t>(in.shape.size()); ++d)
        kept_inside *= t.at_hints(in.shape[d], "code generation");
      if (kept_inside >= kMinStridedKept)
        return fail(why, "a reduction over outer dims of longer rows (" + std::to_string(kept_inside) + " elements)"),
               std::nullopt;
      reduction_input = &in;
      reduction_symbol = b.args[0].proxy();
      rdims = dims;
    }
  }
  for (const ir::BoundSymbol& b : symbols) {
    if (!b.is(PrimId::take_along_axis)) continue;
    // Fused only as a pick along the one reduced dim: the source spans the reductions' domain, the index
    // is the domain with that dim of size 1; the result is one row-level value per row.
    const ir::TensorMeta& src = t.tensor(b.args[0].proxy());
    const ir::TensorMeta& index = t.tensor(b.args[1].proxy());
    int64_t dim = b.args[2].as_int() < 0 ? b.args[2].as_int() + src.ndim() : b.args[2].as_int();
    ir::Shape picked = src.shape;
    if (dim >= 0 && dim < src.ndim()) picked[dim] = 1;
    if (!reduction_input || reduction_input->shape != src.shape || rdims != std::vector<int64_t>{dim} ||
        index.shape != picked || ir::is_floating(index.dtype) || index.dtype == ir::DType::Bool)
      return fail(why, "take_along_axis other than a pick along the reduced dim"), std::nullopt;
  }
  bool narrow = false;  // an input of fewer than 4 bytes per element
  for (ProxyId id : p.inputs) narrow = narrow || ir::item_size(t.tensor(id).dtype) < 4;
  for (const ir::BoundSymbol& b : symbols)
    if (remaps_indices(b) && reduction_input)
      return fail(why, "prims." + b.sym->name + " in a kernel with reductions"), std::nullopt;
  // One device: the outputs', which every input is on -- but a 0-dim CPU tensor, a scalar to a kernel on any device.
  for (ProxyId id : p.inputs) {
    const ir::TensorMeta& in = t.tensor(id);
    if (ir::is_complex(in.dtype) || (in.device != device && !(in.ndim() == 0 && in.device == "cpu")))
      return fail(why, "input dtype/device"), std::nullopt;
  }
  if (p.outputs.empty()) return fail(why, "no outputs"), std::nullopt;

  // The domain: the reductions' input shape, else the largest output's shape (a slice's source may be larger).
  if (reduction_input) {
    p.domain = shape_of(t, reduction_symbol);
  } else {
    int64_t best = -1;
    for (ProxyId id : p.outputs)
      if (numel_of(t, id) > best) best = numel_of(t, id), p.domain = shape_of(t, id);
  }
  // A one-element result read from a larger tensor (x[i] of a loop over a tensor's elements) reads it at a
  // constant index along a domain dim; a 0-d domain has none, so it gets one of extent 1.
  if (!reduction_input && p.domain.empty() &&
      std::any_of(symbols.begin(), symbols.end(), [&](const ir::BoundSymbol& b) {
        return b.is(PrimId::slice) && numel_of(t, b.args[0].proxy()) > 1;
      }))
    p.domain = {1};
  p.reduced.assign(p.domain.size(), false);
  for (int64_t d : rdims) p.reduced[d] = true;

  // Outputs not consumed inside are aligned to the domain directly: the whole
  // domain, or the domain without R (with or without size-1 kept dims).
  auto default_alignment = [&](const std::vector<int64_t>& shape) -> std::optional<std::vector<int>> {
    std::vector<int> al;
    if (shape == p.domain) {
      for (size_t d = 0; d < shape.size(); ++d) al.push_back(static_cast<int>(d));
      return al;
    }
    std::vector<int64_t> kept, keepdim;
    std::vector<int> kept_al, keepdim_al;
    for (size_t d = 0; d < p.domain.size(); ++d) {
      keepdim.push_back(p.reduced[d] ? 1 : p.domain[d]);
      keepdim_al.push_back(p.reduced[d] ? -1 : static_cast<int>(d));
      if (!p.reduced[d]) kept.push_back(p.domain[d]), kept_al.push_back(static_cast<int>(d));
    }
    if (p.has_reduction() && shape == kept) return kept_al;
    if (p.has_reduction() && shape == keepdim) return keepdim_al;
    // One element (the 0-d gradient of a scalar next to a tensor's): the same at every point, stored once.
    int64_t numel = 1;
    for (int64_t n : shape) numel *= n;
    if (!p.has_reduction() && numel == 1) return std::vector<int>(shape.size(), -1);
    return std::nullopt;
  };

  Walk w{t, p, why, {}, {}};
  for (auto it = symbols.rbegin(); it != symbols.rend(); ++it) {
    const ir::BoundSymbol& b = *it;
    const PrimRole role = plan_table().at(b.sym->prim).role;
    ProxyId out = b.output.proxy();
    if (!p.align.count(out)) {
      auto al = default_alignment(shape_of(t, out));
      if (!al) return fail(why, "a value of shape " + std::to_string(t.tensor(out).ndim()) + "-d does not align to the domain"), std::nullopt;
      p.align[out] = *al;
    }
    if (!w.extent.count(out) || std::find(p.outputs.begin(), p.outputs.end(), out) != p.outputs.end())
      w.read_over(out, p.domain);  // stored over the whole domain
    const std::vector<int> out_al = p.align.at(out);
    const std::vector<int64_t> out_extent = w.extent.at(out);
    // (A number proxy among the arguments is a size symbol, planned at its hint: a scalar once the sizes are bound.)
    auto arg_tensor = [&](size_t i) {
      return i < b.args.size() && b.args[i].is_proxy() && t.proxy(b.args[i].proxy()).is_tensor;
    };
    if (role == PrimRole::Remap) {
      const bool ok = b.is(PrimId::slice) ? walk_slice(w, b) : b.is(PrimId::cat) ? walk_cat(w, b) : walk_slice_update(w, b);
      if (!ok) return std::nullopt;
      continue;
    }
    const bool broadcast = b.is(PrimId::broadcast_in_dim);
    const bool reshape = b.is(PrimId::reshape) || b.is(PrimId::squeeze);  // squeeze: a reshape dropping size-1 dims
    if (!broadcast && !reshape && role != PrimRole::Reduction && role != PrimRole::Pick) {  // alias: as elementwise
      for (size_t i = 0; i < b.args.size(); ++i)
        if (arg_tensor(i) && !w.read_over(b.args[i].proxy(), out_extent)) return std::nullopt;
    } else if (broadcast || reshape) {
      if (!w.read_over(b.args[0].proxy(), out_extent)) return std::nullopt;
    }
    if (broadcast) {
      const auto& in = shape_of(t, b.args[0].proxy());
      const auto& shape = shape_of(t, out);
      std::vector<int64_t> bdims = b.args[2].as_ints();
      std::vector<int> al(in.size());
      for (size_t i = 0; i < in.size(); ++i) al[i] = in[i] == shape[bdims[i]] ? out_al[bdims[i]] : -1;
      if (!assign(t, p, b.args[0].proxy(), al, why)) return std::nullopt;
    } else if (reshape) {
      auto al = reshape_input_alignment(shape_of(t, b.args[0].proxy()), shape_of(t, out), out_al);
      if (!al) return fail(why, "a reshape that moves data"), std::nullopt;
      if (!assign(t, p, b.args[0].proxy(), *al, why)) return std::nullopt;
    } else if (role == PrimRole::Pick) {
      std::vector<int> al, keepdim;
      for (size_t d = 0; d < p.domain.size(); ++d) {
        al.push_back(static_cast<int>(d));
        keepdim.push_back(p.reduced[d] ? -1 : static_cast<int>(d));
      }
      if (!same_alignment(out_al, keepdim, shape_of(t, out)))
        return fail(why, "a picked value used against another layout"), std::nullopt;
      if (!assign(t, p, b.args[0].proxy(), al, why) || !assign(t, p, b.args[1].proxy(), keepdim, why)) return std::nullopt;
    } else if (role == PrimRole::Reduction) {
      std::vector<int> al;
      for (size_t d = 0; d < p.domain.size(); ++d) al.push_back(static_cast<int>(d));
      std::vector<int> kept;
      for (size_t d = 0; d < p.domain.size(); ++d)
        if (!p.reduced[d]) kept.push_back(static_cast<int>(d));
      if (!same_alignment(out_al, kept, shape_of(t, out)))
        return fail(why, "a reduction result used against another layout"), std::nullopt;
      if (!assign(t, p, b.args[0].proxy(), al, why)) return std::nullopt;
    } else {
      for (size_t i = 0; i < b.args.size(); ++i)
        if (arg_tensor(i) && !w.align(b.args[i].proxy(), operand_alignment(t, b.args[i].proxy(), out, out_al)))
          return std::nullopt;
    }
  }
  // Reads at remapped indices along the innermost dim are gathers (a strided slice, or a select that the
  // code generator cannot split the innermost loop at, in a 1-d domain), which the CPU has for 4- and
  // 8-byte elements only: with narrower inputs (float16, bfloat16, bool, 8/16-bit integers) the loop would
  // not vectorize at all (RoPE in bfloat16 ran 5x slower).
  if (narrow && gathers_along_innermost(p))
    return fail(why, "gathers along the innermost dim of narrow dtypes"), std::nullopt;
  // Outputs are stored by the loops over the whole domain: one read inside over other indices (a part of a
  // cat, the update of a slice_update) would be stored from the wrong indices, and out of its bounds.
  for (ProxyId v : p.outputs)
    for (const std::vector<int64_t>& range : w.ranges.at(v))
      for (int d : p.align.at(v))
        if (d >= 0 && range[d] != p.domain[d]) return fail(why, "an output also read over other indices"), std::nullopt;
  // Every aligned dim must have the size of the index range it is read over (the domain's, but under a
  // remap), every broadcast dim size 1.
  for (const auto& [v, al] : p.align) {
    const auto& shape = shape_of(t, v);
    auto e = w.ranges.find(v);
    const std::set<std::vector<int64_t>> read = e == w.ranges.end() ? std::set{p.domain} : e->second;
    for (const std::vector<int64_t>& range : read)
      for (size_t i = 0; i < al.size(); ++i)
        if (al[i] >= 0 ? shape[i] != range[al[i]] : shape[i] != 1)
          return fail(why, "a value's shape does not fit the domain"), std::nullopt;
  }
  // The dims whose extents the kernel takes as arguments: those no remap indexes along and every value is
  // read over whole.
  p.generic.assign(p.domain.size(), true);
  for (const auto& [v, remap] : p.remaps)
    for (const RemapCase& c : remap.cases) {
      for (const IndexRange& r : c.when) p.generic[static_cast<size_t>(r.dim)] = false;
      for (const IndexMap& m : c.at) p.generic[static_cast<size_t>(m.dim)] = false;
    }
  for (const auto& [v, ranges] : w.ranges)
    for (const std::vector<int64_t>& range : ranges)
      for (size_t d = 0; d < range.size() && d < p.domain.size(); ++d)
        if (range[d] != p.domain[d]) p.generic[d] = false;
  return p;
}

IndexRefs::IndexRefs(const ir::Trace& trace, const KernelPlan& plan, std::function<bool(ProxyId)> flat)
    : t_(trace), p_(plan), flat_(std::move(flat)) {
  for (const ir::BoundSymbol& b : plan.symbols) producer_[b.output.proxy()] = &b;
}

const std::set<int>& IndexRefs::operator()(ProxyId v) {
  if (auto it = refs_.find(v); it != refs_.end()) return it->second;
  std::set<int> refs;
  if (!t_.proxy(v).is_tensor) return refs_[v] = refs;  // a number read at run time (KernelPlan::scalars)
  auto it = producer_.find(v);
  const bool input = it == producer_.end();
  if (input || it->second->is(ir::PrimId::uniform_philox)) {  // an input, or drawn per element
    const auto& al = p_.align.at(v);
    const std::vector<int64_t> shape = shape_of(t_, v);
    for (size_t i = 0; i < al.size(); ++i)
      if (al[i] >= 0 && shape[i] != 1) refs.insert(al[i]);
  } else if (auto r = p_.remaps.find(v); r != p_.remaps.end()) {
    for (const RemapCase& c : r->second.cases) {
      std::set<int> operand = (*this)(c.operand);
      for (const IndexMap& m : c.at)
        if (m.scale == 0) operand.erase(m.dim);
      refs.insert(operand.begin(), operand.end());
      for (const IndexRange& w : c.when) refs.insert(w.dim);
    }
  } else {
    for (ProxyId u : it->second->input_proxies()) {
      const std::set<int>& operand = (*this)(u);
      refs.insert(operand.begin(), operand.end());
    }
  }
  if (input && flat_ && flat_(v)) refs.insert(-1);
  return refs_[v] = std::move(refs);
}

}  // namespace thunder::codegen
