#include <unordered_map>
#include <unordered_set>

#include "ir/printer.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

bool may_alias_inputs(const ir::BoundSymbol& b) {
  return b.sym->has(ir::kShape) || b.sym->has(ir::kView) || b.sym->has(ir::kOpaque);
}

}  // namespace

bool draws_random_numbers(const ir::BoundSymbol& b) {
  if (b.sym->has(ir::kRandom)) return true;
  for (const ir::BoundSymbol& s : b.subsymbols)
    if (draws_random_numbers(s)) return true;
  return false;
}

bool is_check(const ir::BoundSymbol& b) {
  return b.sym->has(ir::kEffect) && b.sym->has(ir::kChecksValues) && b.output_proxies().empty();
}

std::set<ProxyId> observable_proxies(const Trace& t) {
  std::set<ProxyId> out;
  ir::for_each_proxy(t.output, [&](ProxyId id) { out.insert(id); });
  for (const ir::BoundSymbol& b : t.symbols)
    if (b.sym->has(ir::kEffect))
      for (ProxyId id : b.input_proxies()) out.insert(id);
  for (auto it = t.symbols.rbegin(); it != t.symbols.rend(); ++it) {
    if (!may_alias_inputs(*it)) continue;
    bool observed = false;
    for (ProxyId id : it->output_proxies()) observed |= out.count(id) > 0;
    if (observed)
      for (ProxyId id : it->input_proxies()) out.insert(id);
  }
  return out;
}

std::vector<bool> needed_symbols(const Trace& t) {
  std::unordered_set<ProxyId> live;
  ir::for_each_proxy(t.output, [&](ProxyId id) { live.insert(id); });
  std::vector<bool> keep(t.symbols.size(), false);
  for (size_t i = t.symbols.size(); i-- > 0;) {
    const ir::BoundSymbol& b = t.symbols[i];
    bool needed = b.sym->has(ir::kEffect);
    for (ProxyId id : b.output_proxies()) needed |= live.count(id) > 0;
    if (!needed) continue;
    keep[i] = true;
    for (ProxyId id : b.input_proxies()) live.insert(id);
  }
  return keep;
}

Trace dead_code_elimination(const Trace& t, const PassContext&) {
  const std::vector<bool> keep = needed_symbols(t);
  Trace out = t.empty_copy("Dead-code elimination");
  out.output = t.output;
  for (size_t i = 0; i < t.symbols.size(); ++i)
    if (keep[i]) out.symbols.push_back(t.symbols[i]);
  return out;
}

Trace common_subexpression_elimination(const Trace& t, const PassContext&) {
  std::set<ProxyId> observable = observable_proxies(t);
  std::unordered_map<ProxyId, ir::Value> replace;
  std::function<ir::Value(ProxyId)> lookup = [&](ProxyId id) {
    auto it = replace.find(id);
    return it == replace.end() ? ir::Value(ir::ProxyRef{id}) : it->second;
  };
  std::unordered_map<std::string, ir::Value> available;  // symbol key -> its output
  Trace out = t.empty_copy("Common-subexpression elimination");
  for (const ir::BoundSymbol& original : t.symbols) {
    ir::BoundSymbol b = replace.empty() ? original : ir::substitute_inputs(original, lookup);
    if (b.sym->has(ir::kEffect)) {
      available.clear();  // an effect may change what earlier symbols computed
      out.symbols.push_back(std::move(b));
      continue;
    }
    if (draws_random_numbers(b)) {  // each draw is its own (it changes nothing else)
      out.symbols.push_back(std::move(b));
      continue;
    }
    bool touches_observable = false;
    for (ProxyId id : b.output_proxies()) touches_observable |= observable.count(id) > 0;
    // The module is part of the key: prims.exp and ltorch.exp share a name but not a meaning.
    std::string key = std::string(b.sym->module()) + "." + b.sym->name + "|" + b.callee + "(";
    for (const ir::Value& a : b.args) key += ir::python_repr(t, a) + ",";
    for (const auto& [name, v] : b.kwargs) key += name + "=" + ir::python_repr(t, v) + ",";
    auto it = available.find(key);
    if (!touches_observable && it != available.end()) {
      std::vector<ProxyId> mine = b.output_proxies(), theirs;
      ir::for_each_proxy(it->second, [&](ProxyId id) { theirs.push_back(id); });
      for (size_t i = 0; i < mine.size(); ++i) replace[mine[i]] = ir::Value(ir::ProxyRef{theirs[i]});
      continue;
    }
    if (!touches_observable) available.emplace(key, b.output);
    out.symbols.push_back(std::move(b));
  }
  out.output = ir::map_proxies(t.output, lookup);
  return out;
}

}  // namespace thunder::passes
