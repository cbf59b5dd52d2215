// Reverse-mode autodiff: one functional trace becomes a forward trace and a backward trace (see passes.h).
#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "ops/vjp.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

using ir::BoundSymbol;
using ir::ProxyRef;
using ir::Value;

bool requires_grad(const Trace& t, ProxyId id) {
  const ir::ProxyInfo& p = t.proxy(id);
  return p.is_tensor && p.tensor.requires_grad;
}

bool any_output_requires_grad(const Trace& t, const BoundSymbol& b) {
  for (ProxyId id : b.output_proxies())
    if (requires_grad(t, id)) return true;
  return false;
}

std::string qualified(const BoundSymbol& b) {
  return b.sym->level == ir::Level::Opaque ? "the opaque op " + b.printed_callee() : b.printed_callee();
}

// Whether b's first argument is a float16/bfloat16 tensor on the CPU. There torch's fused attention backward is slow:
// in bfloat16 ([8, 4, 64, 64], one thread) its forward and backward took 4.8 ms where the decomposition's batched
// matmuls and softmax take 1.3 ms together (in float32 both about 2 ms, and the fused one saves memory), so half
// precision attention on the CPU is differentiated through its decomposition.
bool half_on_cpu(const Trace& t, const BoundSymbol& b) {
  if (b.args.empty() || !b.args[0].is_proxy() || !t.proxy(b.args[0].proxy()).is_tensor) return false;
  const ir::TensorMeta& m = t.tensor(b.args[0].proxy());
  return (m.dtype == ir::DType::BFloat16 || m.dtype == ir::DType::Float16) && m.device == "cpu";
}

// The symbols the backward differentiates, in forward order: a symbol with a VJP rule, or else the symbols of its
// decomposition. Symbols none of whose outputs require grad carry no gradient and are left out.
void collect_units(const Trace& t, const BoundSymbol& b, std::vector<const BoundSymbol*>& units) {
  if (!any_output_requires_grad(t, b)) return;
  if (ops::find_vjp(b.sym) != nullptr) {
    units.push_back(&b);
    return;
  }
  if (b.sym->has(ir::kEffect))
    throw NotDifferentiable(qualified(b) + " has effects (it may use a random generator or mutate an argument) and "
                            "its result requires grad");
  // No rule and no decomposition, or an op torch differentiates better whole: the generic rule asks torch's autograd.
  // It recomputes the op, which would draw other random numbers: attention with dropout goes through its
  // decomposition (its mask regenerated from the saved seed).
  if (b.subsymbols.empty() || (ops::vjp_by_torch(b.sym) && !draws_random_numbers(b) && !half_on_cpu(t, b))) {
    units.push_back(&b);
    return;
  }
  for (const BoundSymbol& s : b.subsymbols) collect_units(t, s, units);
}

// Effects the forward may run while the backward is thunder's: writes into tensors that do not require grad
// (a module's running statistics). Others -- changes of grad mode, writes into tensors autograd tracks, opaque
// effects -- would need autograd to see the forward as it runs.
void check_effect(const Trace& t, const BoundSymbol& b) {
  if (!b.sym->has(ir::kEffect)) return;
  if (b.is(ir::PrimId::copy_to) && b.args[0].is_proxy() &&
      !requires_grad(t, b.args[0].proxy()))
    return;
  throw NotDifferentiable(qualified(b) + " is an effect (" +
                          (b.sym->level == ir::Level::Opaque ? "an op thunder does not know, or one that uses a random "
                                                               "generator, changes grad mode or writes into a tensor"
                                                             : "a write into a tensor that requires grad") + ")");
}

bool defines(const BoundSymbol& b, ProxyId id) {
  for (ProxyId o : b.output_proxies())
    if (o == id) return true;
  for (const BoundSymbol& s : b.subsymbols)
    if (defines(s, id)) return true;
  return false;
}

// Appends b's leaf prims to out (a torch-level op inside a decomposition may take arguments its torch callable
// does not, such as a number where torch.minimum wants a tensor; the prims take them all).
void flatten(BoundSymbol& b, const std::string& source, std::vector<BoundSymbol>& out) {
  for (BoundSymbol& s : b.subsymbols) {
    if (s.source.empty()) s.source = source;
    if (s.subsymbols.empty()) out.push_back(std::move(s));
    else flatten(s, source, out);
  }
}

// Replaces, in `symbols`, each composite whose decomposition defines one of `needed` by its leaf prims, until
// every needed proxy is defined at the top level (the executors run top-level symbols only).
void expose(std::vector<BoundSymbol>& symbols, const std::vector<ProxyId>& needed) {
  for (bool changed = true; changed;) {
    changed = false;
    std::unordered_set<ProxyId> top;
    for (const BoundSymbol& b : symbols)
      for (ProxyId o : b.output_proxies()) top.insert(o);
    std::vector<BoundSymbol> out;
    for (BoundSymbol& b : symbols) {
      bool open = false;
      for (ProxyId id : needed) open |= !top.count(id) && !b.subsymbols.empty() && defines(b, id);
      if (!open) {
        out.push_back(std::move(b));
        continue;
      }
      changed = true;
      flatten(b, b.source, out);
    }
    symbols = std::move(out);
  }
}

// Records how the top-level symbol b is differentiated, from the units collect_units made of it.
void ops_used(const BoundSymbol& b, const std::vector<const BoundSymbol*>& units, std::vector<VjpUse>& out) {
  VjpUse use{b.printed_callee(), "", {}};
  if (units.size() == 1 && units[0] == &b) {
    use.rule = ops::find_vjp(b.sym) != nullptr ? "own" : "generic";
  } else {
    use.rule = "decomposition";
    for (const BoundSymbol* u : units)
      if (ops::find_vjp(u->sym) == nullptr) use.generic.push_back(u->printed_callee());
  }
  out.push_back(std::move(use));
}

class Differentiator {
 public:
  explicit Differentiator(const Trace& t) : t_(t), bwd_(t.empty_copy("Backward (VJP rules)")), b_(bwd_) {}

  ForwardBackward run() {
    if (!t_.output.is_seq()) throw NotDifferentiable("the trace's output is not a tuple");
    for (const BoundSymbol& b : t_.symbols) check_effect(t_, b);
    ForwardBackward fb;
    // One gradient input per output that requires grad.
    const std::vector<Value>& outs = t_.output.items();
    std::vector<ProxyId> grad_inputs;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].is_proxy() || !requires_grad(t_, outs[i].proxy())) continue;
      ir::TensorMeta m = t_.tensor(outs[i].proxy());
      m.requires_grad = false;
      ProxyId g = bwd_.new_tensor(m);
      grad_inputs.push_back(g);
      fb.grad_outputs.push_back(i);
      accumulate(outs[i].proxy(), Value(ProxyRef{g}));
    }
    std::vector<const BoundSymbol*> units;
    for (const BoundSymbol& b : t_.symbols) {
      const size_t first = units.size();
      collect_units(t_, b, units);
      if (units.size() == first) continue;  // nothing in it requires grad
      ops_used(b, std::vector<const BoundSymbol*>(units.begin() + static_cast<std::ptrdiff_t>(first), units.end()),
               fb.rules);
    }
    for (auto it = units.rbegin(); it != units.rend(); ++it) differentiate(**it);
    std::vector<Value> input_grads;
    for (ProxyId id : t_.inputs) {
      auto g = grads_.find(id);
      input_grads.push_back(requires_grad(t_, id) && g != grads_.end() ? g->second : Value());
    }
    bwd_.output = Value::tuple(std::move(input_grads));

    // Rules compute what a gradient nobody reads would need: drop it before deciding what to save.
    bwd_ = dead_code_elimination(bwd_);
    bwd_.provenance = "Backward (VJP rules)";
    // Saved values: what the backward reads that it does not compute.
    std::unordered_set<ProxyId> defined(grad_inputs.begin(), grad_inputs.end());
    std::vector<ProxyId> saved;
    auto read = [&](ProxyId id) {
      if (defined.insert(id).second) saved.push_back(id);
    };
    for (const BoundSymbol& b : bwd_.symbols) {
      for (ProxyId id : b.input_proxies()) read(id);
      for (ProxyId id : b.output_proxies()) defined.insert(id);
    }
    ir::for_each_proxy(bwd_.output, read);
    fb.forward = t_;
    fb.forward.provenance = "Forward (returns the outputs and the values the backward saves)";
    expose(fb.forward.symbols, saved);  // the composites that compute saved values inside, opened
    saved = rematerialize(fb.forward, saved);
    expose(fb.forward.symbols, saved);
    bwd_.inputs = saved;
    bwd_.inputs.insert(bwd_.inputs.end(), grad_inputs.begin(), grad_inputs.end());
    fb.saved = saved.size();
    std::vector<Value> saved_values;
    for (ProxyId id : saved) saved_values.push_back(Value(ProxyRef{id}));
    fb.forward.output = Value::tuple({t_.output, Value::tuple(std::move(saved_values))});
    fb.backward = std::move(bwd_);
    // Both run without autograd recording: nothing in them requires grad any more.
    for (Trace* tr : {&fb.forward, &fb.backward})
      for (ir::ProxyInfo& p : tr->proxies) p.tensor.requires_grad = false;
    return fb;
  }

 private:
  // Rematerialization, greedy and local: a saved value made by a cheap symbol (elementwise and shape ops) is
  // recomputed in the backward, next to its first reader (place_near_use) -- where the fusion pass fuses the
  // recomputation into the backward's kernels -- when the symbol's inputs the backward would newly have to save take no more bytes than what it
  // stops saving (trace inputs are free: they are alive anyway). So a broadcast of a saved mean, or a GELU's
  // intermediates computed from a saved matmul result, are recomputed, not saved. (A min-cut over the whole
  // joint graph would find more.) Returns the new saved values; adds the recomputation to the backward.
  std::vector<ProxyId> rematerialize(const Trace& fwd, const std::vector<ProxyId>& saved) {
    // A write the forward makes in place (prims.copy_to, through a view) changes values a recomputation would
    // not see: then nothing is recomputed.
    for (const BoundSymbol& b : fwd.symbols)
      if (b.sym->has(ir::kEffect)) return saved;
    std::unordered_set<ProxyId> inputs(fwd.inputs.begin(), fwd.inputs.end());
    std::unordered_map<ProxyId, size_t> producer;  // value -> the forward symbol computing it
    for (size_t i = 0; i < fwd.symbols.size(); ++i) defined_by(fwd.symbols[i], i, producer);
    auto bytes = [&](ProxyId id) -> int64_t {
      const ir::ProxyInfo& p = fwd.proxy(id);
      if (!p.is_tensor || inputs.count(id)) return 0;
      return p.tensor.numel().value("rematerialization") * ir::item_size(p.tensor.dtype);
    };
    std::vector<ProxyId> order = saved;  // saved values, in order of first appearance
    std::unordered_set<ProxyId> kept(saved.begin(), saved.end());
    std::vector<bool> recompute(fwd.symbols.size(), false);
    auto recomputed = [&](ProxyId id) {
      auto it = producer.find(id);
      return it != producer.end() && recompute[it->second];
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t k = 0; k < order.size(); ++k) {
        const ProxyId id = order[k];
        auto it = producer.find(id);
        if (!kept.count(id) || inputs.count(id) || it == producer.end() || recompute[it->second]) continue;
        const BoundSymbol& b = fwd.symbols[it->second];
        if (!cheap(b)) continue;
        // An input made from (almost) nothing -- a dropout's uniforms, from a 0-d seed -- is regenerated with b
        // rather than saved: what it costs is what its own inputs cost.
        std::vector<size_t> regenerated;
        auto input_cost = [&](ProxyId x) -> int64_t {
          if (kept.count(x) || recomputed(x)) return 0;
          auto px = producer.find(x);
          if (px == producer.end() || !regenerable(fwd, fwd.symbols[px->second])) return bytes(x);
          regenerated.push_back(px->second);
          int64_t c = 0;
          for (ProxyId y : fwd.symbols[px->second].input_proxies())
            if (!kept.count(y) && !recomputed(y)) c += bytes(y);
          return c;
        };
        int64_t cost = 0, gain = 0;
        for (ProxyId x : b.input_proxies()) cost += input_cost(x);
        for (ProxyId o : kept)
          if (producer.count(o) && producer.at(o) == it->second) gain += bytes(o);
        if (cost > gain) continue;
        changed = true;
        for (size_t s : regenerated) {
          recompute[s] = true;
          for (ProxyId y : fwd.symbols[s].input_proxies())
            if (!recomputed(y) && kept.insert(y).second) order.push_back(y);
        }
        recompute[it->second] = true;
        for (auto o = kept.begin(); o != kept.end();)
          o = producer.count(*o) && recompute[producer.at(*o)] ? kept.erase(o) : std::next(o);
        for (ProxyId x : b.input_proxies())
          if (!recomputed(x) && kept.insert(x).second) order.push_back(x);
      }
    }
    std::vector<ProxyId> result;
    for (ProxyId id : order)
      if (kept.count(id) && !recomputed(id)) result.push_back(id);
    std::vector<BoundSymbol> symbols;
    for (size_t i = 0; i < fwd.symbols.size(); ++i)
      if (recompute[i]) symbols.push_back(fwd.symbols[i]);
    if (symbols.empty()) return saved;
    // The VJPs may read values the recomputed composites define inside their decompositions: open those.
    std::vector<ProxyId> reads;
    for (const BoundSymbol& b : bwd_.symbols)
      for (ProxyId id : b.input_proxies()) reads.push_back(id);
    expose(symbols, reads);
    bwd_.symbols = place_near_use(std::move(symbols), std::move(bwd_.symbols), bwd_.output);
    return result;
  }

  // The backward with each recomputed symbol placed just before the first symbol that reads what it computes
  // (after the recomputed symbols it reads in turn): a layer's recomputation is alive while that layer's
  // gradients are computed, not from the start of the backward, and the fusion pass finds it next to its
  // readers. Recomputed symbols nothing reads are dropped.
  static std::vector<BoundSymbol> place_near_use(std::vector<BoundSymbol> recomputed, std::vector<BoundSymbol> backward,
                                                 const Value& output) {
    std::unordered_map<ProxyId, size_t> made_by;
    for (size_t i = 0; i < recomputed.size(); ++i)
      for (ProxyId o : recomputed[i].output_proxies()) made_by.emplace(o, i);
    std::vector<bool> placed(recomputed.size(), false);
    std::vector<BoundSymbol> out;
    std::function<void(ProxyId)> need = [&](ProxyId id) {
      auto it = made_by.find(id);
      if (it == made_by.end() || placed[it->second]) return;
      placed[it->second] = true;
      for (ProxyId x : recomputed[it->second].input_proxies()) need(x);
      out.push_back(std::move(recomputed[it->second]));
    };
    for (BoundSymbol& b : backward) {
      for (ProxyId x : b.input_proxies()) need(x);
      out.push_back(std::move(b));
    }
    ir::for_each_proxy(output, need);
    return out;
  }

  // Maps every value b defines, in its decomposition too, to the forward symbol i.
  static void defined_by(const BoundSymbol& b, size_t i, std::unordered_map<ProxyId, size_t>& producer) {
    for (ProxyId o : b.output_proxies()) producer.emplace(o, i);
    for (const BoundSymbol& s : b.subsymbols) defined_by(s, i, producer);
  }

  // Whether recomputing b costs no more than reading its result: elementwise, shape and creation prims
  // (prims.uniform_philox regenerates a dropout's uniforms from the saved seed), or a composite of those; no
  // reductions, no matmuls, nothing that draws from a generator or has effects.
  static bool cheap(const BoundSymbol& b) {
    if (b.sym->level == ir::Level::Opaque || b.sym->has(ir::kEffect) || b.sym->has(ir::kRandom)) return false;
    if (b.subsymbols.empty())
      return b.sym->level == ir::Level::Prim &&
             (b.sym->has(ir::kElementwise) || b.sym->has(ir::kShape) || b.sym->has(ir::kCreation));
    return std::all_of(b.subsymbols.begin(), b.subsymbols.end(), cheap);
  }

  // A creation prim whose tensor inputs are single elements (uniform_philox of a seed, full, iota): it is made
  // from almost nothing, so a value it makes is regenerated where needed, never saved for its bytes.
  static bool regenerable(const Trace& t, const BoundSymbol& b) {
    if (b.sym->level != ir::Level::Prim || !b.sym->has(ir::kCreation) || !cheap(b)) return false;
    for (ProxyId x : b.input_proxies())
      if (t.proxy(x).is_tensor && t.tensor(x).numel() > 1) return false;
    return true;
  }

  void accumulate(ProxyId id, Value g) {
    const ir::TensorMeta& m = t_.tensor(id);
    if (bwd_.tensor(g.proxy()).shape != m.shape)
      throw std::logic_error("autodiff: gradient of " + t_.proxy(id).name + " has shape " +
                             ops::shape_string(bwd_.tensor(g.proxy()).shape) + ", expected " + ops::shape_string(m.shape));
    if (bwd_.tensor(g.proxy()).dtype != m.dtype) g = b_.prim("convert_element_type", {g, Value(m.dtype)});
    auto [it, fresh] = grads_.emplace(id, g);
    if (!fresh) it->second = b_.prim("add", {it->second, g});
  }

  void accumulate_arg(const Value& arg, const Value& g) {
    if (g.is_none()) return;
    if (arg.is_seq()) {
      for (size_t i = 0; i < arg.items().size() && i < g.items().size(); ++i) accumulate_arg(arg.items()[i], g.items()[i]);
      return;
    }
    if (arg.is_proxy() && requires_grad(t_, arg.proxy())) accumulate(arg.proxy(), g);
  }

  void differentiate(const BoundSymbol& b) {
    const ops::VjpRule* rule = ops::find_vjp(b.sym);
    if (rule == nullptr) return differentiate_by_autograd(b);
    // The gradient of the output: one value, or a tuple with None for outputs whose gradient nothing gives.
    Value g;
    if (b.output.is_proxy()) {
      auto it = grads_.find(b.output.proxy());
      if (it == grads_.end()) return;  // its result does not reach an output
      g = it->second;
    } else {
      std::vector<Value> items;
      bool any = false;
      ir::for_each_proxy(b.output, [&](ProxyId id) {
        auto it = grads_.find(id);
        any |= it != grads_.end();
        items.push_back(it == grads_.end() ? Value() : it->second);
      });
      if (!any) return;
      g = Value::tuple(std::move(items));
    }
    b_.set_source(b.source);
    std::vector<Value> arg_grads;
    try {
      arg_grads = (*rule)(b_, b, g);
    } catch (const std::invalid_argument& e) {  // the rule does not cover this use of the op
      throw NotDifferentiable(std::string(e.what()));
    }
    for (size_t i = 0; i < b.args.size(); ++i) accumulate_arg(b.args[i], arg_grads[i]);
  }

  // The generic rule, for an op without a VJP rule or a decomposition (opaque ops, torch-level ops such as conv):
  // the backward calls torch.autograd on that op alone, recomputing it from its saved arguments
  // (thunder.executors.torchex.autograd_vjp). Only ops without effects get here, so the recomputation is exact.
  void differentiate_by_autograd(const BoundSymbol& b) {
    std::vector<Value> out_grads;
    bool any = false;
    ir::for_each_proxy(b.output, [&](ProxyId id) {
      auto g = grads_.find(id);
      any |= g != grads_.end();
      const ir::ProxyInfo& p = t_.proxy(id);
      const bool floating = p.is_tensor && (ir::is_floating(p.tensor.dtype) || ir::is_complex(p.tensor.dtype));
      if (g != grads_.end()) out_grads.push_back(g->second);
      else if (floating) out_grads.push_back(ops::zeros(b_, p.tensor));
      else out_grads.push_back(Value());
    });
    if (!any) return;
    auto nested_grad_input = [&](const Value& v) {
      bool found = false;
      if (v.is_seq()) ir::for_each_proxy(v, [&](ProxyId id) { found |= requires_grad(t_, id); });
      return found;
    };
    // The call as the printer writes it: an op's required parameters positionally, the others by keyword where
    // they differ from their default.
    std::vector<Value> args;
    std::vector<std::pair<std::string, Value>> kwargs = b.kwargs;
    for (size_t i = 0; i < b.args.size(); ++i) {
      const bool keyword = b.sym->level != ir::Level::Opaque && i < b.sym->params.size() && !b.sym->params[i].required;
      if (!keyword) args.push_back(b.args[i]);
      else if (!(b.args[i] == b.sym->params[i].default_value)) kwargs.emplace_back(b.sym->params[i].name, b.args[i]);
    }
    std::string wants;  // the positions and keywords of the arguments that take a gradient
    std::vector<Value> outputs;
    std::vector<ProxyId> targets;
    auto want = [&](const Value& a, const std::string& key) {
      if (nested_grad_input(a))
        throw NotDifferentiable(qualified(b) + " takes a list of tensors that require grad (the generic VJP rule "
                                "differentiates tensor arguments only)");
      if (!a.is_proxy() || !requires_grad(t_, a.proxy())) return;
      wants += key + ", ";
      ir::TensorMeta m = t_.tensor(a.proxy());
      m.requires_grad = false;
      outputs.push_back(Value(ProxyRef{bwd_.new_tensor(m)}));
      targets.push_back(a.proxy());
    };
    for (size_t i = 0; i < args.size(); ++i) want(args[i], std::to_string(i));
    for (const auto& [name, v] : kwargs) want(v, "'" + name + "'");
    if (targets.empty()) return;
    BoundSymbol vjp;
    vjp.sym = ops::opaque_symbol(false);
    vjp.callee = "autograd_vjp(" + b.printed_callee() + ", (" + wants + "))";
    vjp.args.push_back(Value::tuple(std::move(out_grads)));
    vjp.args.insert(vjp.args.end(), args.begin(), args.end());
    vjp.kwargs = std::move(kwargs);
    vjp.output = Value::tuple(outputs);
    vjp.source = b.source;
    bwd_.symbols.push_back(std::move(vjp));
    for (size_t i = 0; i < targets.size(); ++i) accumulate(targets[i], outputs[i]);
  }


  const Trace& t_;
  Trace bwd_;
  ops::Builder b_;
  std::unordered_map<ProxyId, Value> grads_;
};

}  // namespace

ForwardBackward split_forward_backward(const Trace& t) { return Differentiator(t).run(); }

}  // namespace thunder::passes
