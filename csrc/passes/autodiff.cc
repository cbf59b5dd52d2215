// Reverse-mode autodiff: one functional trace becomes a forward trace and a backward trace (see passes.h).
#include <algorithm>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "ops/vjp.h"
#include "passes/min_cut.h"
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
// precision attention on the CPU is differentiated by thunder: from its rows' log-sum-exps where torch's fused
// forward kernel takes it (attention_by_logsumexp), else through its decomposition.
bool half_on_cpu(const Trace& t, const BoundSymbol& b) {
  if (b.args.empty() || !b.args[0].is_proxy() || !t.proxy(b.args[0].proxy()).is_tensor) return false;
  const ir::TensorMeta& m = t.tensor(b.args[0].proxy());
  return (m.dtype == ir::DType::BFloat16 || m.dtype == ir::DType::Float16) && m.device == "cpu";
}

// Whether b's first argument is a float32, float16 or bfloat16 tensor on the CPU.
bool floating_on_cpu(const Trace& t, const BoundSymbol& b) {
  if (half_on_cpu(t, b)) return true;
  if (b.args.empty() || !b.args[0].is_proxy() || !t.proxy(b.args[0].proxy()).is_tensor) return false;
  const ir::TensorMeta& m = t.tensor(b.args[0].proxy());
  return m.dtype == ir::DType::Float32 && m.device == "cpu";
}

// Whether b is an attention that the autodiff computes as ltorch.attention_with_logsumexp: one whose result
// requires grad, on the CPU in float32 or half precision (floating_on_cpu), without dropout, and within what
// torch's fused CPU kernel takes -- 4-D query, key and value of one dtype, batch size and head size, no broadcast
// heads, no empty sequence (the kernel divides by zero there), a mask that is bool, of the query's dtype or
// float32, 2-D or 4-D. Its forward is then that kernel (eager's), which also returns the rows' log-sum-exps. In
// half precision its backward recomputes the probabilities from them (the op's VJP rule) instead of saving them: a
// GPT-2 layer saved its float32 probabilities, 512 KiB, through the decomposition. In float32 its backward is
// torch's fused kernel (ltorch.attention_backward), where the generic rule ran the forward again before it. Other
// attentions keep their decomposition (half precision) or the generic rule (float32).
bool attention_by_logsumexp(const Trace& t, const BoundSymbol& b) {
  static const ir::Symbol* const sdpa = &ops::find_op(ir::Level::Torch, "scaled_dot_product_attention")->symbol;
  if (b.sym != sdpa || !any_output_requires_grad(t, b) || !floating_on_cpu(t, b)) return false;
  auto meta = [&](const Value& v) -> const ir::TensorMeta* {
    return v.is_proxy() && t.proxy(v.proxy()).is_tensor ? &t.tensor(v.proxy()) : nullptr;
  };
  const ir::TensorMeta *q = meta(b.args[0]), *k = meta(b.args[1]), *v = meta(b.args[2]);
  if (q == nullptr || k == nullptr || v == nullptr) return false;
  for (const ir::TensorMeta* m : {q, k, v})
    if (m->ndim() != 4 || m->dtype != q->dtype || m->device != "cpu" || !(m->shape[3] == q->shape[3])) return false;
  for (const ir::Dim& n : {q->shape[2], k->shape[2], q->shape[3]})
    if (n.is_constant() && *n.constant() == 0) return false;
  // The kernel broadcasts nothing: one batch size, keys and values of one shape, as many key heads as query heads
  // (or grouped-query heads, which it is given repeated). Eager's dispatcher sends broadcast ones (a batch or a
  // key head of 1 against more) to its math backend; given them, the fused backward wrote out of bounds.
  if (!(k->shape[0] == q->shape[0]) || !(v->shape[0] == q->shape[0]) || !(v->shape[1] == k->shape[1]) ||
      !(v->shape[2] == k->shape[2]) || !(k->shape[1] == q->shape[1] || b.args[7].as_bool()))
    return false;
  const Value& dropout_p = b.args[4];
  if (dropout_p.is_proxy() || dropout_p.is_symbolic() || dropout_p.as_double() != 0.0) return false;
  if (b.args[3].is_none()) return true;
  const ir::TensorMeta* mask = meta(b.args[3]);
  return mask != nullptr && mask->device == "cpu" && (mask->ndim() == 2 || mask->ndim() == 4) &&
         (mask->dtype == ir::DType::Bool || mask->dtype == q->dtype || mask->dtype == ir::DType::Float32);
}

// Replaces every proxy `from` in b (arguments, outputs, decomposition) by `to`.
void rename(BoundSymbol& b, ProxyId from, ProxyId to) {
  auto f = [&](ProxyId id) { return Value(ProxyRef{id == from ? to : id}); };
  for (Value& a : b.args) a = ir::map_proxies(a, f);
  b.output = ir::map_proxies(b.output, f);
  for (BoundSymbol& s : b.subsymbols) rename(s, from, to);
}

// t with each attention that attention_by_logsumexp selects made ltorch.attention_with_logsumexp, whose output
// is the attention's own proxy (its readers unchanged) and whose log-sum-exps are a new one.
Trace with_attention_logsumexp(const Trace& t) {
  Trace out = t;
  out.symbols.clear();
  ops::Builder builder(out);
  for (const BoundSymbol& b : t.symbols) {
    if (!attention_by_logsumexp(t, b)) {
      out.symbols.push_back(b);
      continue;
    }
    builder.set_source(b.source);  // (query, key, value, attn_mask, is_causal, scale, enable_gqa)
    const Value made = builder.torch("attention_with_logsumexp", {b.args[0], b.args[1], b.args[2], b.args[3],
                                                                  b.args[5], b.args[6], b.args[7]});
    rename(out.symbols.back(), made.items()[0].proxy(), b.output.proxy());
  }
  return out;
}

// The symbols the backward differentiates, in forward order: a symbol with a VJP rule, or else the symbols of its
// decomposition. Symbols none of whose outputs require grad carry no gradient and are left out.
void collect_units(const Trace& t, const BoundSymbol& b, std::vector<const BoundSymbol*>& units) {
  if (!any_output_requires_grad(t, b)) return;
  if (ops::find_vjp(b) != nullptr) {
    units.push_back(&b);
    return;
  }
  if (b.sym->has(ir::kEffect))
    throw NotDifferentiable(qualified(b) + " has effects (it may use a random generator or mutate an argument) and "
                            "its result requires grad");
  // No rule and no decomposition, or an op torch differentiates better whole: the generic rule asks torch's autograd.
  // It recomputes the op, which would draw other random numbers: attention with dropout goes through its
  // decomposition (its mask regenerated from the saved seed).
  if (b.subsymbols.empty() || (ops::vjp_by_torch(b) && !draws_random_numbers(b) && !half_on_cpu(t, b))) {
    units.push_back(&b);
    return;
  }
  for (const BoundSymbol& s : b.subsymbols) collect_units(t, s, units);
}

// Effects the forward may run while the backward is thunder's: writes into tensors that do not require grad
// (a module's running statistics), and checks that only raise for some values (an assert on a tensor that does
// not require grad: ops::opaque_check_symbol). Others -- changes of grad mode, writes into tensors autograd
// tracks, opaque effects -- would need autograd to see the forward as it runs.
void check_effect(const Trace& t, const BoundSymbol& b) {
  if (!b.sym->has(ir::kEffect)) return;
  if (b.is(ir::PrimId::copy_to) && b.args[0].is_proxy() &&
      !requires_grad(t, b.args[0].proxy()))
    return;
  const std::vector<ProxyId> read = b.input_proxies();
  if (is_check(b) && std::none_of(read.begin(), read.end(), [&](ProxyId p) { return requires_grad(t, p); }))
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
    use.rule = ops::find_vjp(b) != nullptr ? "own" : "generic";
  } else {
    use.rule = "decomposition";
    for (const BoundSymbol* u : units)
      if (ops::find_vjp(*u) == nullptr) use.generic.push_back(u->printed_callee());
  }
  out.push_back(std::move(use));
}

class Differentiator {
 public:
  Differentiator(const Trace& t, const std::vector<ProxyId>& activation_inputs)
      : t_(t), bwd_(t.empty_copy("Backward (VJP rules)")), b_(bwd_),
        activations_(activation_inputs.begin(), activation_inputs.end()) {}

  ForwardBackward run() {
    ForwardBackward fb;
    const std::vector<ProxyId> grad_inputs = differentiate_all(nullptr, fb);
    std::vector<ProxyId> saved = forward_reads(grad_inputs);
    fb.forward = t_;
    fb.forward.provenance = "Forward (returns the outputs and the values the backward saves)";
    expose(fb.forward.symbols, saved);  // the composites that compute saved values inside, opened
    const auto remat_start = std::chrono::steady_clock::now();
    saved = rematerialize(fb.forward, saved);
    expose(fb.forward.symbols, saved);
    fb.rematerialization_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - remat_start).count();
    fb.saved = saved.size();
    std::vector<Value> saved_values;
    for (ProxyId id : saved) saved_values.push_back(Value(ProxyRef{id}));
    fb.forward.output = Value::tuple({t_.output, Value::tuple(std::move(saved_values))});
    fb.backward = finish_backward(saved, grad_inputs);
    for (ir::ProxyInfo& p : fb.forward.proxies) p.tensor.requires_grad = false;
    return fb;
  }

  // The backward for a call given only the output gradients `given` flags, reading the values `forward` (run's
  // forward of this trace) saves, recomputing from them what else it reads (see specialize_backward).
  Trace backward_given(const Trace& forward, const std::vector<bool>& given) {
    ForwardBackward fb;
    const std::vector<ProxyId> grad_inputs = differentiate_all(&given, fb);
    std::vector<ProxyId> saved;
    if (forward.output.is_seq() && forward.output.items().size() == 2)
      ir::for_each_proxy(forward.output.items()[1], [&](ProxyId id) { saved.push_back(id); });
    const std::unordered_set<ProxyId> available(saved.begin(), saved.end());
    std::vector<ProxyId> missing;
    for (ProxyId id : forward_reads(grad_inputs))
      if (!available.count(id)) missing.push_back(id);
    if (!missing.empty()) {
      for (const BoundSymbol& b : forward.symbols)
        if (b.sym->has(ir::kEffect))
          throw NotDifferentiable("the backward for these output gradients reads " + forward.proxy(missing[0]).name +
                                  ", which the forward does not save, and the forward writes into a tensor");
      std::unordered_map<ProxyId, size_t> producer;
      for (size_t i = 0; i < forward.symbols.size(); ++i) defined_by(forward.symbols[i], i, producer);
      std::vector<bool> recompute(forward.symbols.size(), false);
      std::unordered_set<ProxyId> seen;
      while (!missing.empty()) {
        const ProxyId id = missing.back();
        missing.pop_back();
        if (available.count(id) || !seen.insert(id).second) continue;
        auto made = producer.find(id);
        if (made == producer.end() || !cheap(forward.symbols[made->second]))
          throw NotDifferentiable("the backward for these output gradients reads " + forward.proxy(id).name +
                                  ", which the forward neither saves nor can recompute");
        recompute[made->second] = true;
        const std::vector<ProxyId> reads = forward.symbols[made->second].reads_with_decomposition();
        missing.insert(missing.end(), reads.begin(), reads.end());
      }
      add_recomputation(forward, recompute);
    }
    return finish_backward(saved, grad_inputs);
  }

 private:
  // Makes bwd_ the backward of the trace's outputs: one gradient input per output that requires grad (of which,
  // where `given` is not null, only the flagged ones carry a gradient: the others are not read, and the symbols
  // only they would reach are not differentiated, as eager's autograd does not run those nodes), the VJP of every
  // unit reached, summed per value; its output, one gradient per trace input. Records the rules used in fb.
  // Returns the gradient inputs.
  std::vector<ProxyId> differentiate_all(const std::vector<bool>* given, ForwardBackward& fb) {
    if (!t_.output.is_seq()) throw NotDifferentiable("the trace's output is not a tuple");
    for (const BoundSymbol& b : t_.symbols) check_effect(t_, b);
    const std::vector<Value>& outs = t_.output.items();
    std::vector<ProxyId> grad_inputs;
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!outs[i].is_proxy() || !requires_grad(t_, outs[i].proxy())) continue;
      ir::TensorMeta m = t_.tensor(outs[i].proxy());
      m.requires_grad = false;
      ProxyId g = bwd_.new_tensor(m);
      grad_inputs.push_back(g);
      if (given != nullptr && grad_inputs.size() <= given->size() && !(*given)[grad_inputs.size() - 1]) continue;
      fb.grad_outputs.push_back(i);
      accumulate(outs[i].proxy(), Value(ProxyRef{g}));
    }
    if (given != nullptr && given->size() != grad_inputs.size())
      throw std::invalid_argument("specialize_backward: " + std::to_string(given->size()) + " flags for " +
                                  std::to_string(grad_inputs.size()) + " output gradients");
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
    return grad_inputs;
  }

  // The forward values bwd_ reads (what it reads and does not compute, but for the gradient inputs), in order.
  std::vector<ProxyId> forward_reads(const std::vector<ProxyId>& grad_inputs) const {
    std::unordered_set<ProxyId> defined(grad_inputs.begin(), grad_inputs.end());
    std::vector<ProxyId> reads;
    auto read = [&](ProxyId id) {
      if (defined.insert(id).second) reads.push_back(id);
    };
    for (const BoundSymbol& b : bwd_.symbols) {
      for (ProxyId id : b.input_proxies()) read(id);
      for (ProxyId id : b.output_proxies()) defined.insert(id);
    }
    ir::for_each_proxy(bwd_.output, read);
    return reads;
  }

  // bwd_ as the backward trace: its inputs the saved values (boxed, in one list) then the gradient inputs, and
  // nothing in it requiring grad (it runs without autograd recording).
  Trace finish_backward(const std::vector<ProxyId>& saved, const std::vector<ProxyId>& grad_inputs) {
    bwd_.inputs = saved;
    bwd_.boxed_inputs = saved.size();
    bwd_.inputs.insert(bwd_.inputs.end(), grad_inputs.begin(), grad_inputs.end());
    for (ir::ProxyInfo& p : bwd_.proxies) p.tensor.requires_grad = false;
    return std::move(bwd_);
  }

  // Rematerialization: which forward values the backward saves, and which it recomputes from them, chosen by a
  // minimum cut (the formulation of AOTAutograd's partitioner, Chen et al. 2016's checkpointing as a cut). Each
  // forward value v is two nodes joined by an edge of v's bytes (cutting it: save v); every input of a symbol
  // feeds each of its outputs with no limit; values the backward reads drain into the sink; the trace inputs
  // (alive anyway: free to save, but for the activation inputs, see split_forward_backward) and the values of
  // symbols too costly to recompute -- reductions, matmuls, opaque ops, anything not `cheap` -- come from the
  // source. A minimum cut saves the fewest bytes from which everything the backward reads can be made: a GELU's
  // output is recomputed from its saved input, a dropout's uniforms from the 0-d seed, a LayerNorm's normalized
  // values from its input, mean and rstd. Of cuts of equal size the one nearest the backward is taken, so a value
  // is recomputed only when that saves bytes. The recomputation is placed next to its first reader
  // (place_near_use), where the fusion pass fuses it into the backward's kernels. Returns the saved values; adds
  // the recomputation to the backward.
  std::vector<ProxyId> rematerialize(const Trace& fwd, const std::vector<ProxyId>& saved) {
    // A write the forward makes in place (prims.copy_to, through a view) changes values a recomputation would
    // not see: then nothing is recomputed.
    for (const BoundSymbol& b : fwd.symbols)
      if (b.sym->has(ir::kEffect) && !is_check(b)) return saved;  // (a check writes nothing)
    std::unordered_map<ProxyId, size_t> producer;  // value -> the forward symbol computing it
    for (size_t i = 0; i < fwd.symbols.size(); ++i) defined_by(fwd.symbols[i], i, producer);
    // Nodes: 0 the source, 1 the sink, then an (in, out) pair per value.
    std::unordered_map<ProxyId, size_t> node;
    std::vector<ProxyId> values;
    auto node_of = [&](ProxyId id) {
      auto [it, fresh] = node.emplace(id, 2 + 2 * values.size());
      if (fresh) values.push_back(id);
      return it->second;
    };
    for (ProxyId id : fwd.inputs) node_of(id);
    for (const BoundSymbol& b : fwd.symbols)
      for (const std::vector<ProxyId>& ids : {b.input_proxies(), b.output_proxies()})
        for (ProxyId id : ids) node_of(id);
    for (ProxyId id : saved) node_of(id);
    const std::unordered_set<ProxyId> inputs(fwd.inputs.begin(), fwd.inputs.end());
    std::vector<bool> recomputable(fwd.symbols.size());
    for (size_t i = 0; i < fwd.symbols.size(); ++i) recomputable[i] = cheap(fwd.symbols[i]);
    FlowGraph graph(2 + 2 * values.size());
    for (ProxyId id : values) {
      const size_t n = node.at(id);
      const ir::ProxyInfo& p = fwd.proxy(id);
      const bool activation = activations_.count(id) > 0;
      const bool free = (inputs.count(id) && !activation) || !p.is_tensor;
      // A symbolic size weighs as much as it does at the size hints (a graph compiled once for every shape).
      int64_t bytes = free ? 0 : fwd.at_hints(p.tensor.numel(), "rematerialization") * ir::item_size(p.tensor.dtype);
      // An activation input is saved only where a VJP reads it itself (as eager's ops would save it), not to
      // recompute other values from: those are saved instead (unless they weigh 2^16 times more).
      if (activation) bytes = (bytes + 1) << 16;
      graph.add_edge(n, n + 1, bytes);
      auto made = producer.find(id);
      if (inputs.count(id) || made == producer.end() || !recomputable[made->second] || compared_.count(id))
        graph.add_edge(0, n, FlowGraph::kInfinite);
    }
    for (const BoundSymbol& b : fwd.symbols)
      for (ProxyId x : b.input_proxies())
        for (ProxyId o : b.output_proxies()) graph.add_edge(node.at(x) + 1, node.at(o), FlowGraph::kInfinite);
    for (ProxyId id : saved) graph.add_edge(node.at(id) + 1, 1, FlowGraph::kInfinite);
    graph.max_flow(0, 1);
    const std::vector<bool> sink_side = graph.sink_side(1);
    // The symbols the backward runs again: those making what it reads, back to the values the forward computes
    // (those on the source's side of the cut), which it saves.
    std::vector<bool> recompute(fwd.symbols.size(), false);
    std::vector<ProxyId> result, pending(saved.rbegin(), saved.rend());
    std::unordered_set<ProxyId> seen;
    while (!pending.empty()) {
      const ProxyId id = pending.back();
      pending.pop_back();
      if (!seen.insert(id).second) continue;
      auto made = producer.find(id);
      if (!sink_side[node.at(id)] || inputs.count(id) || made == producer.end()) {
        result.push_back(id);
        continue;
      }
      if (!recomputable[made->second]) throw std::logic_error("rematerialization: a minimum cut recomputes " +
                                                              fwd.proxy(id).name + ", which is not recomputable");
      recompute[made->second] = true;
      // (What its decomposition reads too: the backward runs the recomputed symbol's prims.)
      const std::vector<ProxyId> reads = fwd.symbols[made->second].reads_with_decomposition();
      pending.insert(pending.end(), reads.rbegin(), reads.rend());
    }
    if (std::none_of(recompute.begin(), recompute.end(), [](bool r) { return r; })) return saved;
    add_recomputation(fwd, recompute);
    return result;
  }

  // Adds the forward symbols `recompute` flags to bwd_, each placed near its first reader (place_near_use). The
  // VJPs may read values the recomputed composites define inside their decompositions: those are opened.
  void add_recomputation(const Trace& fwd, const std::vector<bool>& recompute) {
    std::vector<BoundSymbol> symbols;
    for (size_t i = 0; i < fwd.symbols.size(); ++i)
      if (recompute[i]) {
        symbols.push_back(fwd.symbols[i]);
        round_as_forward(symbols.back());
      }
    std::vector<ProxyId> reads;
    for (const BoundSymbol& b : bwd_.symbols)
      for (ProxyId id : b.input_proxies()) reads.push_back(id);
    expose(symbols, reads);
    bwd_.symbols = place_near_use(std::move(symbols), std::move(bwd_.symbols), bwd_.output);
  }

  // Marks what a recomputed symbol computes, its decomposition's values included, to be rounded as the forward
  // rounded it (ProxyInfo::rounded_as_forward).
  void round_as_forward(const BoundSymbol& b) {
    for (ProxyId o : b.output_proxies()) bwd_.proxies[o].rounded_as_forward = true;
    for (const BoundSymbol& sub : b.subsymbols) round_as_forward(sub);
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

  // Whether b reads or makes a complex tensor that requires grad: thunder's rules are written for real values
  // (a complex derivative conjugates: abs(z) differentiates to g * z / |z|), so torch's autograd differentiates it.
  bool complex_gradient(const BoundSymbol& b) const {
    bool found = false;
    auto check = [&](ProxyId id) {
      const ir::ProxyInfo& p = t_.proxy(id);
      found |= p.is_tensor && p.tensor.requires_grad && ir::is_complex(p.tensor.dtype);
    };
    for (const Value& a : b.args) ir::for_each_proxy(a, check);
    ir::for_each_proxy(b.output, check);
    return found;
  }

  void differentiate(const BoundSymbol& b) {
    const ops::VjpRule* rule = ops::find_vjp(b);
    if (rule == nullptr || complex_gradient(b)) return differentiate_by_autograd(b);
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
    // The VJPs of amax/amin compare their input with their result, those of maximum/minimum two tensor operands:
    // these values are saved, never recomputed (rematerialize). A recomputation in another kernel may round
    // differently in the last bit (a vectorized sin and a scalar one), and the comparison then finds no maximum
    // in a row (a 0/0 gradient) or a tie that was none. torch's autograd saves them too. (maximum with a number
    // compares a tensor with a constant, which a recomputation does not move across.)
    if (ops::vjp_compares_arguments(b.sym)) {
      std::vector<ir::ProxyId> tensors;
      for (const Value& a : b.args)
        if (a.is_proxy() && t_.proxy(a.proxy()).is_tensor) tensors.push_back(a.proxy());
      if (b.sym->has(ir::kReduction) || tensors.size() > 1) compared_.insert(tensors.begin(), tensors.end());
    }
  }

  // The generic rule, for an op without a VJP rule or a decomposition (opaque ops, torch-level ops such as conv):
  // the backward calls torch.autograd on that op alone, recomputing it from its saved arguments
  // (thunder.executors.torchex.autograd_vjp). Only ops without effects get here, so the recomputation is exact.
  // An output no gradient reaches gets None, as in eager: torch's autograd then gives the op's backward zeros or
  // None for it as the op asks (a torch.autograd.Function with set_materialize_grads(False) skips its term).
  void differentiate_by_autograd(const BoundSymbol& b) {
    std::vector<Value> out_grads;
    bool any = false;
    ir::for_each_proxy(b.output, [&](ProxyId id) {
      auto g = grads_.find(id);
      any |= g != grads_.end();
      out_grads.push_back(g != grads_.end() ? g->second : Value());
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
  std::unordered_set<ProxyId> compared_;  // forward values a VJP compares for equality (differentiate)
  const std::unordered_set<ProxyId> activations_;  // inputs not free to save (split_forward_backward)
};

// f(the Differentiator of t), t's attentions that attention_by_logsumexp selects made attention_with_logsumexp.
template <class F>
auto differentiate(const Trace& t, const std::vector<ProxyId>& activation_inputs, F f) {
  auto by_logsumexp = [&](const BoundSymbol& b) { return attention_by_logsumexp(t, b); };
  if (std::none_of(t.symbols.begin(), t.symbols.end(), by_logsumexp)) {
    Differentiator d(t, activation_inputs);
    return f(d);
  }
  const Trace with_logsumexp = with_attention_logsumexp(t);
  Differentiator d(with_logsumexp, activation_inputs);
  return f(d);
}

}  // namespace

ForwardBackward split_forward_backward(const Trace& t, const std::vector<ProxyId>& activation_inputs) {
  return differentiate(t, activation_inputs, [](Differentiator& d) { return d.run(); });
}

Trace specialize_backward(const Trace& t, const Trace& forward, const std::vector<bool>& given,
                          const std::vector<ProxyId>& activation_inputs) {
  return differentiate(t, activation_inputs, [&](Differentiator& d) { return d.backward_given(forward, given); });
}

}  // namespace thunder::passes
