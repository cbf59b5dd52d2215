#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "ops/op_table.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

using ir::Value;

using Numbers = std::vector<Value>;
/// Folds one prim over literal numbers; nullopt leaves the symbol in the trace.
using NumberRule = std::function<std::optional<Value>(const Numbers&)>;

bool is_bool(const Value& v) { return std::holds_alternative<bool>(v.v); }
bool all_ints(const Numbers& a) {
  return std::none_of(a.begin(), a.end(), [](const Value& v) { return std::holds_alternative<double>(v.v); });
}

template <class Compare>
NumberRule comparison() {
  return [](const Numbers& a) -> std::optional<Value> { return Value(Compare{}(a[0].as_double(), a[1].as_double())); };
}

// Python's arithmetic: ints stay ints (an int rule may decline, e.g. int ** int); bool operands are left to Python.
NumberRule arithmetic(std::function<std::optional<Value>(int64_t, int64_t)> on_ints,
                      std::function<std::optional<Value>(double, double)> on_floats) {
  return [on_ints, on_floats](const Numbers& a) -> std::optional<Value> {
    if (is_bool(a[0]) || is_bool(a[1])) return std::nullopt;
    if (all_ints(a)) return on_ints ? on_ints(a[0].as_int(), a[1].as_int()) : std::nullopt;
    return on_floats(a[0].as_double(), a[1].as_double());
  };
}

NumberRule unary(double (*f)(double)) {
  return [f](const Numbers& a) -> std::optional<Value> {
    if (is_bool(a[0])) return std::nullopt;
    return Value(f(a[0].as_double()));
  };
}

// The number-folding table: prims over Python numbers, following Python's arithmetic (which is what
// torch does with number operands known at trace time). Prims without a row are not folded.
const ir::PrimTable<NumberRule>& number_rules() {
  static const ir::PrimTable<NumberRule> table = [] {
    using ir::PrimId;
    ir::PrimTable<NumberRule> t("number folding");
    t.set(PrimId::eq, comparison<std::equal_to<>>()).set(PrimId::ne, comparison<std::not_equal_to<>>());
    t.set(PrimId::lt, comparison<std::less<>>()).set(PrimId::le, comparison<std::less_equal<>>());
    t.set(PrimId::gt, comparison<std::greater<>>()).set(PrimId::ge, comparison<std::greater_equal<>>());
    using I = int64_t;
    t.set(PrimId::add, arithmetic([](I i, I j) { return Value(i + j); }, [](double x, double y) { return Value(x + y); }));
    t.set(PrimId::sub, arithmetic([](I i, I j) { return Value(i - j); }, [](double x, double y) { return Value(x - y); }));
    t.set(PrimId::mul, arithmetic([](I i, I j) { return Value(i * j); }, [](double x, double y) { return Value(x * y); }));
    t.set(PrimId::div, arithmetic(
        [](I i, I j) { return j == 0 ? std::nullopt : std::optional<Value>(Value(static_cast<double>(i) / j)); },
        [](double x, double y) { return y == 0 ? std::nullopt : std::optional<Value>(Value(x / y)); }));
    t.set(PrimId::maximum, arithmetic([](I i, I j) { return Value(std::max(i, j)); }, [](double x, double y) {
      return Value(std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y));
    }));
    t.set(PrimId::minimum, arithmetic([](I i, I j) { return Value(std::min(i, j)); }, [](double x, double y) {
      return Value(std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y));
    }));
    t.set(PrimId::pow, arithmetic(nullptr, [](double x, double y) { return Value(std::pow(x, y)); }));
    // Plain ifs rather than `cond ? Value(..) : Value(..)`: GCC 12 at -O3 reports the
    // variant temporary of the conditional as maybe-uninitialized, failing -Werror builds.
    t.set(PrimId::neg, [](const Numbers& a) -> std::optional<Value> {
      if (is_bool(a[0])) return std::nullopt;
      if (all_ints(a)) return Value(-a[0].as_int());
      return Value(-a[0].as_double());
    });
    t.set(PrimId::abs, [](const Numbers& a) -> std::optional<Value> {
      if (is_bool(a[0])) return std::nullopt;
      if (all_ints(a)) return Value(static_cast<int64_t>(std::llabs(a[0].as_int())));
      return Value(std::fabs(a[0].as_double()));
    });
    t.set(PrimId::sqrt, unary([](double x) { return std::sqrt(x); }));
    t.set(PrimId::exp, unary([](double x) { return std::exp(x); }));
    t.set(PrimId::log, unary([](double x) { return std::log(x); }));
    return t;
  }();
  return table;
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
  if (!b.output.is_proxy()) return false;
  const NumberRule* rule = number_rules().find(b.sym->prim);
  if (rule == nullptr) return false;
  std::optional<Value> r = (*rule)(args);
  if (!r) return false;
  env[b.output.proxy()] = *r;
  return true;
}

}  // namespace

Trace constant_folding(const Trace& t, const PassContext& ctx) {
  std::set<ProxyId> observable = observable_proxies(t);
  Env numbers;                                // number proxy -> its literal value
  std::map<ProxyId, int64_t> tensors;         // tensor proxy -> constant index
  const ir::Symbol* constant = &ops::prim_symbol(ir::PrimId::tensor_constant);
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
    bool foldable = !b.sym->has(ir::kEffect) && !draws_random_numbers(b);
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
        c.args = {Value(*index), Value(m.dtype), Value::dims(m.shape), Value(ir::Str{m.device})};
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
