#include "codegen/kernel_plan.h"

#include <algorithm>
#include <unordered_set>

namespace thunder::codegen {
namespace {

const std::unordered_set<std::string> kFusible = {
    // elementwise
    "neg", "abs", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "floor",
    "ceil", "round", "trunc", "sign", "reciprocal", "sigmoid", "bitwise_not", "isnan", "isinf", "isfinite",
    "signbit", "logical_not", "add", "sub", "mul", "div", "remainder", "fmod", "pow", "maximum", "minimum", "atan2",
    "bitwise_and", "bitwise_or", "bitwise_xor", "copysign", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_xor", "where", "convert_element_type",
    // data movement the loop nest absorbs
    "broadcast_in_dim", "reshape", "squeeze", "alias",
    // reductions
    "sum", "prod", "amax", "amin",
    // a gather along the reduced dim, read at row level (cross-entropy's pick of the target's log-probability)
    "take_along_axis",
    // index remapping, in kernels without reductions: a slice reads its source at shifted indices, a cat
    // selects among its inputs by index range (RoPE's rotate-half)
    "slice", "cat",
};

const std::unordered_set<std::string> kFloatOnly = {
    "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc", "lgamma", "reciprocal", "sigmoid",
    "pow", "atan2", "copysign", "remainder", "fmod", "div"};

// C++'s &, | , ^ and ~ have no floating-point overloads (torch's bitwise ops none either): a kernel claiming
// these on floats would not compile.
const std::unordered_set<std::string> kIntegerOnly = {"bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor"};

bool fail(std::string* why, std::string msg) {
  if (why) *why = std::move(msg);
  return false;
}

bool is_reduction(const std::string& n) { return n == "sum" || n == "prod" || n == "amax" || n == "amin"; }

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
  if (!inserted && !same_alignment(it->second, al, t.tensor(v).shape))
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

}  // namespace

bool is_fusible_prim(const std::string& name) { return kFusible.count(name) > 0; }

std::vector<std::string> fusible_prims() {
  std::vector<std::string> out(kFusible.begin(), kFusible.end());
  std::sort(out.begin(), out.end());
  return out;
}

bool KernelPlan::has_reduction() const { return std::find(reduced.begin(), reduced.end(), true) != reduced.end(); }

bool KernelPlan::element_level(ProxyId v) const {
  for (int d : align.at(v))
    if (d >= 0 && reduced[d]) return true;
  return false;
}

std::optional<KernelPlan> plan_kernel(const ir::Trace& t, const std::vector<ir::BoundSymbol>& symbols,
                                      const std::set<ProxyId>& live_out, std::string* why) {
  KernelPlan p;
  p.symbols = symbols;
  std::set<ProxyId> produced;
  const ir::TensorMeta* reduction_input = nullptr;
  std::vector<int64_t> rdims;
  std::string device;
  for (const ir::BoundSymbol& b : symbols) {
    const std::string& n = b.sym->name;
    if (b.sym->level != ir::Level::Prim || !is_fusible_prim(n)) return fail(why, "prims." + n + " is not fusible"), std::nullopt;
    for (ProxyId id : b.input_proxies()) {
      const ir::ProxyInfo& info = t.proxy(id);
      if (!info.is_tensor) return fail(why, "number proxies as kernel inputs"), std::nullopt;
      if (!produced.count(id) && std::find(p.inputs.begin(), p.inputs.end(), id) == p.inputs.end()) p.inputs.push_back(id);
    }
    for (ProxyId id : b.output_proxies()) {
      const ir::ProxyInfo& info = t.proxy(id);
      if (!info.is_tensor) return fail(why, "number outputs"), std::nullopt;
      if (ir::is_complex(info.tensor.dtype)) return fail(why, "complex dtypes"), std::nullopt;
      if (device.empty()) device = info.tensor.device;
      if (info.tensor.device != device || device != "cpu") return fail(why, "non-CPU tensors"), std::nullopt;
      produced.insert(id);
      if (live_out.count(id)) p.outputs.push_back(id);
    }
    if (kFloatOnly.count(n)) {
      for (ProxyId id : b.input_proxies())
        if (!ir::is_floating(t.tensor(id).dtype)) return fail(why, "prims." + n + " on integers"), std::nullopt;
    }
    if (kIntegerOnly.count(n)) {
      for (ProxyId id : b.input_proxies())
        if (ir::is_floating(t.tensor(id).dtype)) return fail(why, "prims." + n + " on floating-point tensors"), std::nullopt;
    }
    if (is_reduction(n)) {
      const ir::TensorMeta& in = t.tensor(b.args[0].proxy());
      std::vector<int64_t> dims = b.args[1].as_ints();
      std::sort(dims.begin(), dims.end());
      if (dims.empty()) return fail(why, "empty reduction"), std::nullopt;
      if (reduction_input && (reduction_input->shape != in.shape || rdims != dims))
        return fail(why, "reductions over different domains"), std::nullopt;
      reduction_input = &in;
      rdims = dims;
    }
  }
  for (const ir::BoundSymbol& b : symbols) {
    if (b.sym->name != "take_along_axis") continue;
    // Fused only as a pick along the one reduced dim: the source spans the reductions' domain, the index
    // is the domain with that dim of size 1; the result is one row-level value per row.
    const ir::TensorMeta& src = t.tensor(b.args[0].proxy());
    const ir::TensorMeta& index = t.tensor(b.args[1].proxy());
    int64_t dim = b.args[2].as_int() < 0 ? b.args[2].as_int() + src.ndim() : b.args[2].as_int();
    std::vector<int64_t> picked = src.shape;
    if (dim >= 0 && dim < src.ndim()) picked[dim] = 1;
    if (!reduction_input || reduction_input->shape != src.shape || rdims != std::vector<int64_t>{dim} ||
        index.shape != picked || ir::is_floating(index.dtype) || index.dtype == ir::DType::Bool)
      return fail(why, "take_along_axis other than a pick along the reduced dim"), std::nullopt;
  }
  bool narrow = false;  // an input of fewer than 4 bytes per element
  for (ProxyId id : p.inputs) narrow = narrow || ir::item_size(t.tensor(id).dtype) < 4;
  for (const ir::BoundSymbol& b : symbols)
    if ((b.sym->name == "slice" || b.sym->name == "cat") && reduction_input)
      return fail(why, "slice or cat in a kernel with reductions"), std::nullopt;
  for (ProxyId id : p.inputs)
    if (ir::is_complex(t.tensor(id).dtype) || t.tensor(id).device != "cpu") return fail(why, "input dtype/device"), std::nullopt;
  if (p.outputs.empty()) return fail(why, "no outputs"), std::nullopt;

  // The domain: the reductions' input shape, else the largest output's shape (a slice's source may be larger).
  if (reduction_input) {
    p.domain = reduction_input->shape;
  } else {
    int64_t best = -1;
    for (ProxyId id : p.outputs)
      if (t.tensor(id).numel() > best) best = t.tensor(id).numel(), p.domain = t.tensor(id).shape;
  }
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
    return std::nullopt;
  };

  // Each value's extent per domain dim where it is read: the domain's, except under a slice (its source
  // spans more) or a cat (each input spans its part).
  std::map<ProxyId, std::vector<int64_t>> extent;
  auto assign_extent = [&](ProxyId v, const std::vector<int64_t>& e) {
    auto [it, inserted] = extent.emplace(v, e);
    return inserted || it->second == e || fail(why, "a value read over two different index ranges");
  };
  for (auto it = symbols.rbegin(); it != symbols.rend(); ++it) {
    const ir::BoundSymbol& b = *it;
    const std::string& n = b.sym->name;
    ProxyId out = b.output.proxy();
    if (!p.align.count(out)) {
      auto al = default_alignment(t.tensor(out).shape);
      if (!al) return fail(why, "a value of shape " + std::to_string(t.tensor(out).ndim()) + "-d does not align to the domain"), std::nullopt;
      p.align[out] = *al;
    }
    extent.emplace(out, p.domain);
    const std::vector<int> out_al = p.align.at(out);
    const std::vector<int64_t> out_extent = extent.at(out);
    auto arg_tensor = [&](size_t i) { return i < b.args.size() && b.args[i].is_proxy(); };
    if (n == "slice") {
      ProxyId src = b.args[0].proxy();
      std::vector<int64_t> e = out_extent;
      const auto& src_shape = t.tensor(src).shape;
      for (size_t i = 0; i < src_shape.size(); ++i) {
        if (t.tensor(out).shape[i] == src_shape[i]) continue;  // not sliced (whole dim)
        if (out_al[i] < 0) return fail(why, "a slice along a broadcast dim"), std::nullopt;
        e[out_al[i]] = src_shape[i];
      }
      if (!assign(t, p, src, out_al, why) || !assign_extent(src, e)) return std::nullopt;
      continue;
    }
    if (n == "cat") {
      const auto& parts = b.args[0].items();
      int64_t k = b.args[1].as_int();
      if (k < 0) k += t.tensor(out).ndim();
      if (out_al[k] < 0) return fail(why, "a cat along a broadcast dim"), std::nullopt;
      for (const ir::Value& part : parts) {
        std::vector<int64_t> e = out_extent;
        e[out_al[k]] = t.tensor(part.proxy()).shape[k];
        if (!assign(t, p, part.proxy(), out_al, why) || !assign_extent(part.proxy(), e)) return std::nullopt;
      }
      continue;
    }
    const bool reshape = n == "reshape" || n == "squeeze";  // squeeze: a reshape dropping size-1 dims
    if (n != "broadcast_in_dim" && !reshape && !is_reduction(n) && n != "take_along_axis") {
      for (size_t i = 0; i < b.args.size(); ++i)
        if (arg_tensor(i) && !assign_extent(b.args[i].proxy(), out_extent)) return std::nullopt;
    } else if (n == "broadcast_in_dim" || reshape) {
      if (!assign_extent(b.args[0].proxy(), out_extent)) return std::nullopt;
    }
    if (n == "broadcast_in_dim") {
      const auto& in = t.tensor(b.args[0].proxy()).shape;
      const auto& shape = t.tensor(out).shape;
      std::vector<int64_t> bdims = b.args[2].as_ints();
      std::vector<int> al(in.size());
      for (size_t i = 0; i < in.size(); ++i) al[i] = in[i] == shape[bdims[i]] ? out_al[bdims[i]] : -1;
      if (!assign(t, p, b.args[0].proxy(), al, why)) return std::nullopt;
    } else if (reshape) {
      auto al = reshape_input_alignment(t.tensor(b.args[0].proxy()).shape, t.tensor(out).shape, out_al);
      if (!al) return fail(why, "a reshape that moves data"), std::nullopt;
      if (!assign(t, p, b.args[0].proxy(), *al, why)) return std::nullopt;
    } else if (n == "take_along_axis") {
      std::vector<int> al, keepdim;
      for (size_t d = 0; d < p.domain.size(); ++d) {
        al.push_back(static_cast<int>(d));
        keepdim.push_back(p.reduced[d] ? -1 : static_cast<int>(d));
      }
      if (!same_alignment(out_al, keepdim, t.tensor(out).shape))
        return fail(why, "a picked value used against another layout"), std::nullopt;
      if (!assign(t, p, b.args[0].proxy(), al, why) || !assign(t, p, b.args[1].proxy(), keepdim, why)) return std::nullopt;
    } else if (is_reduction(n)) {
      std::vector<int> al;
      for (size_t d = 0; d < p.domain.size(); ++d) al.push_back(static_cast<int>(d));
      std::vector<int> kept;
      for (size_t d = 0; d < p.domain.size(); ++d)
        if (!p.reduced[d]) kept.push_back(static_cast<int>(d));
      if (!same_alignment(out_al, kept, t.tensor(out).shape))
        return fail(why, "a reduction result used against another layout"), std::nullopt;
      if (!assign(t, p, b.args[0].proxy(), al, why)) return std::nullopt;
    } else {
      for (size_t i = 0; i < b.args.size(); ++i)
        if (arg_tensor(i) && !assign(t, p, b.args[i].proxy(), out_al, why)) return std::nullopt;
    }
  }
  // Reads at remapped indices along the innermost dim are gathers (a strided slice, or a cat that the code
  // generator cannot split the innermost loop at, in a 1-d domain), which the CPU has for 4- and 8-byte
  // elements only: with narrower inputs (float16, bfloat16, bool, 8/16-bit integers) the loop would not
  // vectorize at all (RoPE in bfloat16 ran 5x slower).
  const int inner = static_cast<int>(p.domain.size()) - 1;
  for (const ir::BoundSymbol& b : symbols) {
    if (!narrow || (b.sym->name != "slice" && b.sym->name != "cat")) continue;
    const std::vector<int>& out_al = p.align.at(b.output.proxy());
    if (b.sym->name == "slice" && !b.args[3].is_none()) {
      const std::vector<int64_t> step = b.args[3].as_ints();
      for (size_t i = 0; i < step.size(); ++i)
        if (step[i] != 1 && out_al[i] == inner) return fail(why, "a strided slice along the innermost dim of narrow dtypes"), std::nullopt;
    }
    if (b.sym->name == "cat" && p.domain.size() < 2) return fail(why, "a 1-d cat of narrow dtypes"), std::nullopt;
  }
  // Every aligned dim must have the size of the index range it is read over (the domain's, but under a
  // slice or a cat), every broadcast dim size 1.
  for (const auto& [v, al] : p.align) {
    const auto& shape = t.tensor(v).shape;
    auto e = extent.find(v);
    const std::vector<int64_t>& range = e == extent.end() ? p.domain : e->second;
    for (size_t i = 0; i < al.size(); ++i)
      if (al[i] >= 0 ? shape[i] != range[al[i]] : shape[i] != 1)
        return fail(why, "a value's shape does not fit the domain"), std::nullopt;
  }
  return p;
}

}  // namespace thunder::codegen
