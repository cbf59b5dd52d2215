#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "passes/passes.h"

namespace thunder::passes {
namespace {

std::string op_key(const ir::BoundSymbol& b) {
  return b.sym->level == ir::Level::Opaque ? "opaque" : std::string(b.sym->module()) + "." + b.sym->name;
}

bool outputs_require_grad(const Trace& t, const ir::BoundSymbol& b) {
  for (ProxyId id : b.output_proxies())
    if (t.proxy(id).is_tensor && t.proxy(id).tensor.requires_grad) return true;
  return false;
}

// Whether every tensor b reads or makes has one of ex's dtypes (any, if it names none).
bool of_its_dtypes(const Trace& t, const ir::BoundSymbol& b, const ExecutorTable& ex) {
  if (ex.dtypes.empty()) return true;
  for (const std::vector<ProxyId>& ids : {b.input_proxies(), b.output_proxies()})
    for (ProxyId id : ids)
      if (t.proxy(id).is_tensor &&
          std::find(ex.dtypes.begin(), ex.dtypes.end(), t.proxy(id).tensor.dtype) == ex.dtypes.end())
        return false;
  return true;
}

bool claims_prim(const ir::BoundSymbol& b, const ExecutorTable& ex) {
  return b.sym->level == ir::Level::Prim && ex.callees.count(op_key(b)) > 0;
}

// Whether every tensor b reads or makes is on one of ex's devices (any, if it names none), which name device
// types: "cuda" takes "cuda:0" and "cuda:1". A 0-dim CPU tensor b reads is a scalar, which kernels on every device
// take (torch runs cuda_x * torch.tensor(2.0)).
bool on_its_devices(const Trace& t, const ir::BoundSymbol& b, const ExecutorTable& ex) {
  if (ex.devices.empty()) return true;
  auto on = [&](ProxyId id, bool input) {
    const ir::ProxyInfo& p = t.proxy(id);
    if (!p.is_tensor || (input && p.tensor.ndim() == 0 && p.tensor.device == "cpu")) return true;
    const std::string type = p.tensor.device.substr(0, p.tensor.device.find(':'));
    return std::find(ex.devices.begin(), ex.devices.end(), type) != ex.devices.end();
  };
  for (ProxyId id : b.input_proxies())
    if (!on(id, true)) return false;
  for (ProxyId id : b.output_proxies())
    if (!on(id, false)) return false;
  return true;
}

// Counts the leaf prims of b the fusion executor claims (`fused`, those that
// compute, not just move or view data) and the others; `closed` notes a leaf of ex.closed_by.
void count_leaves(const ir::BoundSymbol& b, const ExecutorTable& ex, int& fused, int& other, bool& closed) {
  if (b.subsymbols.empty()) {
    closed |= std::find(ex.closed_by.begin(), ex.closed_by.end(), op_key(b)) != ex.closed_by.end();
    if (claims_prim(b, ex)) fused += b.sym->has(ir::kShape) || b.sym->has(ir::kView) ? 0 : 1;
    else ++other;
    return;
  }
  for (const ir::BoundSymbol& s : b.subsymbols) count_leaves(s, ex, fused, other, closed);
}

// Whether a fusion executor takes b: a prim it claims, or a composite worth
// opening: one with arithmetic it can fuse and no leaf of its `closed_by`.
// Leaves it cannot fuse (e.g. the gather in cross_entropy) go to the next executor.
bool fusible(const Trace& t, const ir::BoundSymbol& b, const ExecutorTable& ex) {
  if (b.sym->level == ir::Level::Opaque || !on_its_devices(t, b, ex)) return false;
  if (b.subsymbols.empty()) return claims_prim(b, ex);
  int fused = 0, other = 0;
  bool closed = false;
  count_leaves(b, ex, fused, other, closed);
  return fused > 0 && !closed;
}

// A composite that only moves data (a slicing getitem, cat) and whose leaves the fusion executor claims.
bool moves_data_only(const Trace& t, const ir::BoundSymbol& b, const ExecutorTable& ex) {
  if (b.sym->level == ir::Level::Opaque || b.subsymbols.empty() || !on_its_devices(t, b, ex)) return false;
  int fused = 0, other = 0;
  bool closed = false;
  count_leaves(b, ex, fused, other, closed);
  return fused == 0 && other == 0;
}

// The data-moving composites among `symbols` a fusion executor opens: those whose every output is read
// only by symbols (of the same list) it fuses, so that a kernel reads them at remapped indices and no view
// of an input escapes as a copy; `escaping` holds the values read elsewhere (the trace's or the enclosing
// composite's outputs). Decided last consumer first, since a consumer may be such a composite too.
std::unordered_set<size_t> data_movers_to_open(const Trace& t, const std::vector<ir::BoundSymbol>& symbols,
                                               const std::unordered_set<ProxyId>& escaping, const ExecutorTable& ex) {
  std::unordered_map<ProxyId, std::vector<size_t>> readers;
  for (size_t i = 0; i < symbols.size(); ++i)
    for (ProxyId id : symbols[i].input_proxies()) readers[id].push_back(i);
  std::unordered_set<size_t> open;
  for (size_t i = symbols.size(); i-- > 0;) {
    const ir::BoundSymbol& b = symbols[i];
    if (!moves_data_only(t, b, ex) || outputs_require_grad(t, b)) continue;
    bool all_fused = true;
    for (ProxyId id : b.output_proxies()) {
      all_fused &= !escaping.count(id) && !readers[id].empty();
      for (size_t r : readers[id]) {
        const ir::BoundSymbol& c = symbols[r];
        all_fused &= !outputs_require_grad(t, c) && (open.count(r) || (fusible(t, c, ex) && !moves_data_only(t, c, ex)));
      }
    }
    if (all_fused) open.insert(i);
  }
  return open;
}

// Symbols whose outputs require grad stay with the non-fusion executors, whose ops torch's autograd
// differentiates: a trace thunder's autodiff declined (its forward and backward traces require no grad).
void claim_into(const Trace& t, const ir::BoundSymbol& b, const PassContext& ctx, bool allow_fusion,
                std::vector<ir::BoundSymbol>& out, bool open_data_mover = false) {
  const std::string key = op_key(b);
  for (const ExecutorTable& ex : ctx.executors) {
    if (ex.fusion) {
      if (!allow_fusion || !of_its_dtypes(t, b, ex) || !(open_data_mover || fusible(t, b, ex))) continue;
      if (b.subsymbols.empty()) {
        ir::BoundSymbol claimed = b;
        claimed.executor = ex.name;
        out.push_back(std::move(claimed));
        return;
      }
      break;  // descend below; the fusion executor claims each prim
    }
    auto it = ex.callees.find(key);
    if (it == ex.callees.end() || !of_its_dtypes(t, b, ex) || !on_its_devices(t, b, ex)) continue;
    ir::BoundSymbol claimed = b;
    claimed.executor = ex.name;
    if (b.sym->level != ir::Level::Opaque) claimed.callee = it->second;
    out.push_back(std::move(claimed));
    return;
  }
  if (b.subsymbols.empty()) throw std::runtime_error("no executor can run " + key);
  std::unordered_set<size_t> open;
  if (allow_fusion) {
    std::unordered_set<ProxyId> escaping;
    for (ProxyId id : b.output_proxies()) escaping.insert(id);
    for (const ExecutorTable& ex : ctx.executors)
      if (ex.fusion) open = data_movers_to_open(t, b.subsymbols, escaping, ex);
  }
  for (size_t i = 0; i < b.subsymbols.size(); ++i) {
    ir::BoundSymbol s = b.subsymbols[i];
    if (s.source.empty()) s.source = b.source;
    claim_into(t, s, ctx, allow_fusion, out, open.count(i) > 0);
  }
}

std::string format_seconds(double s) {
  char buf[64];
  if (s < 1e-3) std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

}  // namespace

Trace claim_executors(const Trace& t, const PassContext& ctx) {
  Trace out = t.empty_copy("Executor claiming");
  out.output = t.output;
  std::unordered_set<ProxyId> outputs;
  ir::for_each_proxy(t.output, [&](ProxyId id) { outputs.insert(id); });
  std::unordered_set<size_t> open;
  for (const ExecutorTable& ex : ctx.executors)
    if (ex.fusion) open = data_movers_to_open(t, t.symbols, outputs, ex);
  for (size_t i = 0; i < t.symbols.size(); ++i)
    claim_into(t, t.symbols[i], ctx, !outputs_require_grad(t, t.symbols[i]), out.symbols, open.count(i) > 0);
  // A composite claimed through its decomposition can leave values only it read dead (dropout's p, read at run
  // time under dynamic=True, when not training): those go, and only those -- code that was dead before claiming
  // is the DCE pass's, which a pipeline may leave out.
  std::unordered_set<ProxyId> dead_before;
  const std::vector<bool> needed_before = needed_symbols(t);
  for (size_t i = 0; i < t.symbols.size(); ++i)
    if (!needed_before[i])
      for (ProxyId id : t.symbols[i].output_proxies()) dead_before.insert(id);
  const std::vector<bool> needed = needed_symbols(out);
  std::vector<ir::BoundSymbol> kept;
  for (size_t i = 0; i < out.symbols.size(); ++i) {
    const std::vector<ProxyId> made = out.symbols[i].output_proxies();
    const bool was_live = std::any_of(made.begin(), made.end(), [&](ProxyId id) { return !dead_before.count(id); });
    if (needed[i] || !was_live) kept.push_back(std::move(out.symbols[i]));
  }
  out.symbols = std::move(kept);
  return out;
}

Trace release_dead_values(const Trace& t, const PassContext&) {
  static const ir::Symbol kDel{"del", ir::Level::Prim, ir::kRelease | ir::kEffect, {}};
  std::unordered_map<ProxyId, size_t> last_use;
  for (size_t i = 0; i < t.symbols.size(); ++i) {
    for (ProxyId id : t.symbols[i].input_proxies()) last_use[id] = i;
    for (ProxyId id : t.symbols[i].output_proxies()) last_use.emplace(id, i);  // defined, maybe never read
  }
  std::unordered_set<ProxyId> keep;
  ir::for_each_proxy(t.output, [&](ProxyId id) { keep.insert(id); });
  std::vector<std::vector<ProxyId>> release(t.symbols.size());
  for (const auto& [id, i] : last_use)
    if (!keep.count(id) && t.proxy(id).is_tensor) release[i].push_back(id);
  Trace out = t.empty_copy("Memory planning");
  out.output = t.output;
  for (size_t i = 0; i < t.symbols.size(); ++i) {
    out.symbols.push_back(t.symbols[i]);
    if (release[i].empty()) continue;
    std::sort(release[i].begin(), release[i].end());
    ir::BoundSymbol del;
    del.sym = &kDel;
    for (ProxyId id : release[i]) del.args.push_back(ir::Value(ir::ProxyRef{id}));
    out.symbols.push_back(std::move(del));
  }
  return out;
}

const std::vector<Pass>& pass_table() {
  static const std::vector<Pass> table{
      {"functionalize", "Functionalization", functionalize},
      {"cse", "Common-subexpression elimination", common_subexpression_elimination},
      {"constant_folding", "Constant folding", constant_folding},
      {"dce", "Dead-code elimination", dead_code_elimination},
      {"claim", "Executor claiming", claim_executors},
      {"fusion", "Fusion", fuse},
      {"release", "Memory planning (del after last use)", release_dead_values},
  };
  return table;
}

std::vector<PassResult> run_pipeline(const Trace& t, const std::vector<std::string>& names, const PassContext& ctx) {
  std::vector<PassResult> results;
  const Trace* current = &t;
  for (const std::string& name : names) {
    const Pass* pass = nullptr;
    for (const Pass& p : pass_table())
      if (p.name == name) pass = &p;
    if (pass == nullptr) throw std::invalid_argument("unknown pass '" + name + "'");
    auto start = std::chrono::steady_clock::now();
    Trace next = pass->fn(*current, ctx);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ir::verify(next);
    next.provenance = pass->title + " (took " + format_seconds(seconds) + ")";
    results.push_back(PassResult{std::move(next), name, seconds});
    current = &results.back().trace;
  }
  return results;
}

}  // namespace thunder::passes
