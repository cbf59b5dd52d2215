#include <chrono>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "ops/op_table.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

using ir::Value;

// Folding rules for prims over Python numbers, following Python's arithmetic
// (which is what torch does with number operands known at trace time).
std::optional<Value> fold_number_prim(const std::string& op, const std::vector<Value>& a) {
  auto all_ints = [&] {
    for (const Value& v : a)
      if (std::holds_alternative<double>(v.v)) return false;
    return true;
  };
  auto is_bool = [&](const Value& v) { return std::holds_alternative<bool>(v.v); };
  if (a.size() == 2) {
    double x = a[0].as_double(), y = a[1].as_double();
    if (op == "eq") return Value(x == y);
    if (op == "ne") return Value(x != y);
    if (op == "lt") return Value(x < y);
    if (op == "le") return Value(x <= y);
    if (op == "gt") return Value(x > y);
    if (op == "ge") return Value(x >= y);
    if (is_bool(a[0]) || is_bool(a[1])) return std::nullopt;  // bool arithmetic: leave to Python
    if (all_ints()) {
      int64_t i = a[0].as_int(), j = a[1].as_int();
      if (op == "add") return Value(i + j);
      if (op == "sub") return Value(i - j);
      if (op == "mul") return Value(i * j);
      if (op == "maximum") return Value(std::max(i, j));
      if (op == "minimum") return Value(std::min(i, j));
      if (op == "div") return j == 0 ? std::nullopt : std::optional<Value>(Value(static_cast<double>(i) / j));
      return std::nullopt;
    }
    if (op == "add") return Value(x + y);
    if (op == "sub") return Value(x - y);
    if (op == "mul") return Value(x * y);
    if (op == "div") return y == 0 ? std::nullopt : std::optional<Value>(Value(x / y));
    if (op == "maximum") return Value(std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y));
    if (op == "minimum") return Value(std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y));
    if (op == "pow") return Value(std::pow(x, y));
    return std::nullopt;
  }
  if (a.size() == 1 && !is_bool(a[0])) {
    // Plain ifs rather than `cond ? Value(..) : Value(..)`: GCC 12 at -O3 reports the
    // variant temporary of the conditional as maybe-uninitialized, failing -Werror builds.
    if (op == "neg" && all_ints()) return Value(-a[0].as_int());
    if (op == "neg") return Value(-a[0].as_double());
    if (op == "abs" && all_ints()) return Value(static_cast<int64_t>(std::llabs(a[0].as_int())));
    if (op == "abs") return Value(std::fabs(a[0].as_double()));
    double x = a[0].as_double();
    if (op == "sqrt") return Value(std::sqrt(x));
    if (op == "exp") return Value(std::exp(x));
    if (op == "log") return Value(std::log(x));
  }
  return std::nullopt;
}

using Env = std::unordered_map<ProxyId, Value>;

Value resolve(const Value& v, const Env& env) {
  return ir::map_proxies(v, [&](ProxyId id) {
    auto it = env.find(id);
    return it == env.end() ? Value(ir::ProxyRef{id}) : it->second;
  });
}

bool has_proxy(const Value& v) {
  bool found = false;
  ir::for_each_proxy(v, [&](ProxyId) { found = true; });
  return found;
}

// Folds a symbol over numbers: a prim by the rules above, a torch op by
// folding its decomposition. Records the results in env on success.
bool fold_numbers(const ir::BoundSymbol& b, Env& env) {
  if (b.sym->has(ir::kOpaque) || b.sym->has(ir::kEffect)) return false;
  if (!b.subsymbols.empty()) {
    Env local = env;
    for (const ir::BoundSymbol& sub : b.subsymbols)
      if (!fold_numbers(sub, local)) return false;
    Value out = resolve(b.output, local);
    if (has_proxy(out)) return false;
    for (ProxyId id : b.output_proxies()) env[id] = local.at(id);
    return true;
  }
  std::vector<Value> args;
  for (const Value& a : b.args) {
    Value r = resolve(a, env);
    if (!r.is_number()) return false;
    args.push_back(r);
  }
  if (!b.output.is_proxy() || b.sym->level != ir::Level::Prim) return false;
  std::optional<Value> r = fold_number_prim(b.sym->name, args);
  if (!r) return false;
  env[b.output.proxy()] = *r;
  return true;
}

}  // namespace

Trace constant_folding(const Trace& t, const PassContext& ctx) {
  std::set<ProxyId> observable = observable_proxies(t);
  Env numbers;                                // number proxy -> its literal value
  std::map<ProxyId, int64_t> tensors;         // tensor proxy -> constant index
  const ir::Symbol* constant = &ops::find_op(ir::Level::Prim, "tensor_constant")->symbol;
  std::function<Value(ProxyId)> literal = [&](ProxyId id) {
    auto it = numbers.find(id);
    return it == numbers.end() ? Value(ir::ProxyRef{id}) : it->second;
  };
  Trace out = t.empty_copy("Constant folding");
  for (const ir::BoundSymbol& original : t.symbols) {
    ir::BoundSymbol b = numbers.empty() ? original : ir::substitute_inputs(original, literal);
    if (b.sym == constant) {
      tensors[b.output.proxy()] = b.args[0].as_int();
      out.symbols.push_back(std::move(b));
      continue;
    }
    bool foldable = !b.sym->has(ir::kEffect) && !b.sym->has(ir::kRandom);
    for (ProxyId id : b.input_proxies()) foldable &= tensors.count(id) > 0;
    for (ProxyId id : b.output_proxies()) foldable &= observable.count(id) == 0;
    if (!foldable) {
      out.symbols.push_back(std::move(b));
      continue;
    }
    bool number_outputs = true;
    for (ProxyId id : b.output_proxies()) number_outputs &= !t.proxy(id).is_tensor;
    if (number_outputs && !b.output_proxies().empty()) {
      if (fold_numbers(b, numbers)) continue;
    } else if (ctx.evaluator && b.output.is_proxy() && t.proxy(b.output.proxy()).is_tensor &&
               t.tensor(b.output.proxy()).numel() <= ctx.max_constant_numel) {
      std::map<ProxyId, int64_t> inputs;  // the evaluator gets the constants this symbol reads, not all of them
      for (ProxyId id : b.input_proxies()) inputs[id] = tensors.at(id);
      std::optional<int64_t> index = ctx.evaluator(t, b, inputs);
      if (index) {
        const ir::TensorMeta& m = t.tensor(b.output.proxy());
        ir::BoundSymbol c;
        c.sym = constant;
        c.args = {Value(*index), Value(m.dtype), Value::ints(m.shape), Value(ir::Str{m.device})};
        c.output = b.output;
        c.source = b.source;
        tensors[b.output.proxy()] = *index;
        out.symbols.push_back(std::move(c));
        continue;
      }
    }
    out.symbols.push_back(std::move(b));
  }
  out.output = ir::map_proxies(t.output, literal);
  return out;
}

}  // namespace thunder::passes
