#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "passes/passes.h"

namespace thunder::passes {
namespace {

void claim_into(const ir::BoundSymbol& b, const PassContext& ctx, std::vector<ir::BoundSymbol>& out) {
  std::string key = b.sym->level == ir::Level::Opaque ? "opaque" : std::string(b.sym->module()) + "." + b.sym->name;
  for (const ExecutorTable& ex : ctx.executors) {
    auto it = ex.callees.find(key);
    if (it == ex.callees.end()) continue;
    ir::BoundSymbol claimed = b;
    claimed.executor = ex.name;
    if (b.sym->level != ir::Level::Opaque) claimed.callee = it->second;
    out.push_back(std::move(claimed));
    return;
  }
  if (b.subsymbols.empty()) throw std::runtime_error("no executor can run " + key);
  for (const ir::BoundSymbol& sub : b.subsymbols) {
    ir::BoundSymbol s = sub;
    if (s.source.empty()) s.source = b.source;
    claim_into(s, ctx, out);
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
  for (const ir::BoundSymbol& b : t.symbols) claim_into(b, ctx, out.symbols);
  return out;
}

const std::vector<Pass>& pass_table() {
  static const std::vector<Pass> table{
      {"cse", "Common-subexpression elimination", common_subexpression_elimination},
      {"constant_folding", "Constant folding", constant_folding},
      {"dce", "Dead-code elimination", dead_code_elimination},
      {"claim", "Executor claiming", claim_executors},
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
