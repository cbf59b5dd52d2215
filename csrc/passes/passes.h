// Passes: pure functions Trace -> Trace, and the pipeline that runs them.
//
// Each pass returns a new trace whose `provenance` says what made it; the
// pipeline adds timing and runs the verifier after every pass.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/trace.h"

namespace thunder::passes {

using ir::ProxyId;
using ir::Trace;

/// Computes a symbol whose inputs are all compile-time constants, on the host
/// (the Python layer supplies one that runs torch). `constants` maps each
/// tensor-constant proxy among the inputs to its index in the constant table.
/// Returns the index of the new constant, or nullopt if it could not be computed.
/// `trace` is the trace being folded: it names every proxy the symbol reads (an earlier pass, such as
/// functionalization, may have made proxies the captured trace lacks).
using Evaluator = std::function<std::optional<int64_t>(const Trace& trace, const ir::BoundSymbol&,
                                                       const std::map<ProxyId, int64_t>& constants)>;

/// What an executor can run: qualified op name ("prims.add", "ltorch.softmax",
/// "opaque") -> the Python expression that runs it ("torch.add").
/// A fusion executor (`fusion` true) claims the prims in `callees` for its
/// kernels, and a torch-level op whose whole decomposition it claims (by
/// descending into it); it never claims a symbol whose outputs require grad.
/// Each executor states its claim policy; the claiming pass applies it and knows no executor's rules:
/// - `devices` ("cpu"): it claims only symbols whose tensors are all on them, 0-dim CPU inputs (scalars)
///   aside; none named: any device.
/// - `dtypes`: it claims only symbols whose tensors all have one of them; none named: any dtype.
/// - `closed_by` (fusion executors; qualified prims, "prims.matmul"): a torch-level op among whose leaves
///   one of these is stays whole, for the next executor (linear and attention keep torch's BLAS).
struct ExecutorTable {
  std::string name;
  std::map<std::string, std::string> callees;
  bool fusion = false;
  std::vector<std::string> devices;
  std::vector<ir::DType> dtypes;
  std::vector<std::string> closed_by;
};

struct PassContext {
  Evaluator evaluator;                 // used by constant folding; may be empty
  std::vector<ExecutorTable> executors;  // used by claiming, in priority order
  int64_t max_constant_numel = 1 << 16;  // larger tensors are not folded
};

/// Functionalization (docs/functionalization.md): removes every write (ltorch.copy_) and every branch region
/// (prims.branch_begin/else/end), giving a straight-line functional trace. A write computes the new value of
/// the written tensor's root (through the inverse of each view between them: slice -> prims.slice_update,
/// reshape and squeeze -> reshape back, transpose -> the inverse permutation); later reads of the root or of
/// any view of it read that value (the view replayed on it); a region merges what its arms wrote with
/// `where`, and masks the gradients of what its arms read from before it; written trace inputs get a
/// `prims.copy_to` at the end. Throws std::runtime_error ("functionalize: ...") for a write through an
/// expanded view and for effects inside a region. A trace without writes or regions is returned unchanged.
/// Before: t1 = ltorch.getitem(t0, 0); t2 = ltorch.mul(t1, 2); ltorch.copy_(t1, t2); t3 = ltorch.exp(t0); return t3
/// After:  t1 = ltorch.getitem(t0, 0); t2 = ltorch.mul(t1, 2); t4 = prims.reshape(t2, (1, 3));
///         t5 = prims.slice_update(t0, t4, (0, 0), (1, 3)); t3 = ltorch.exp(t5); prims.copy_to(t0, t5); return t3
Trace functionalize(const Trace& t, const PassContext& ctx = {});

/// Removes symbols whose outputs are unused and that have no effects.
/// Before: t1 = ltorch.exp(t0); t2 = ltorch.neg(t0); return t2. After: t2 = ltorch.neg(t0); return t2.
Trace dead_code_elimination(const Trace& t, const PassContext& ctx = {});
/// Per symbol of t: whether the output or an effect needs it (what dead_code_elimination keeps).
std::vector<bool> needed_symbols(const Trace& t);

/// Replaces a symbol that repeats an earlier one (same op, same arguments) by
/// the earlier one's outputs. Effectful symbols are never merged, and nothing
/// computed before an effect is reused after it.
/// Before: t1 = ltorch.exp(t0); t2 = ltorch.exp(t0); t3 = ltorch.add(t1, t2).
/// After:  t1 = ltorch.exp(t0); t3 = ltorch.add(t1, t1).
Trace common_subexpression_elimination(const Trace& t, const PassContext& ctx = {});

/// Computes at compile time every symbol whose inputs are all constants:
/// numbers by the C++ folding rules, tensors through ctx.evaluator (they become
/// prims.tensor_constant). Effectful and random symbols, values that are
/// returned or mutated (or alias such values), and tensors larger than
/// ctx.max_constant_numel are left alone.
/// Before: t1 = ltorch.ones((3,)); t2 = ltorch.mul(t1, 2); t3 = ltorch.add(t0, t2).
/// After:  t2 = prims.tensor_constant(0, ...); t3 = ltorch.add(t0, t2).
Trace constant_folding(const Trace& t, const PassContext& ctx);

/// Gives every symbol to the first executor in ctx.executors that claims its op;
/// a symbol no executor claims is replaced by its decomposition, claimed in
/// turn. Throws std::runtime_error naming the op if nothing can run it.
Trace claim_executors(const Trace& t, const PassContext& ctx);

/// Groups the symbols claimed by a fusion executor into regions that each plan
/// as one kernel (see codegen/kernel_plan.h), without creating cycles, and
/// replaces each region by one fusion symbol whose sub-symbols are the region.
/// Symbols left alone, and regions without arithmetic, go to the next executor.
Trace fuse(const Trace& t, const PassContext& ctx);

/// Memory planning: after the last use of each tensor an input or a symbol
/// defined, a `del` releases the trace's reference, so that intermediates are
/// freed as soon as they are dead (as in eager Python) instead of at return.
/// Outputs are never released. Run it last: later passes would not know `del`.
/// Before: t1 = f(t0); t2 = g(t1); return t2. After: t1 = f(t0); del t0; t2 = g(t1); del t1; return t2.
Trace release_dead_values(const Trace& t, const PassContext& ctx = {});

/// The proxies whose identity is observable: trace outputs and arguments of
/// effectful symbols, closed backward through symbols that may return views
/// of their inputs. Passes must not merge or fold these.
std::set<ProxyId> observable_proxies(const Trace& t);

/// Whether b draws from a random generator (kRandom: prims.random_seed, ltorch.dropout), itself or inside its
/// decomposition (attention with dropout_p). Such a symbol is never merged with another (CSE), folded into a
/// constant, or recomputed by running it again (autodiff's generic rule).
bool draws_random_numbers(const ir::BoundSymbol& b);

/// Whether b is a check (ops::opaque_check_symbol: an assert): an effect, kept in place and never removed, that
/// only raises for some values of what it reads -- it writes nothing and returns nothing. Passes read its arguments
/// as any op's; the autodiff runs it in the forward.
bool is_check(const ir::BoundSymbol& b);

/// A trace thunder's autodiff cannot differentiate (an op without a VJP rule, an effect on a value autograd
/// tracks): the message says which op and why. The caller leaves that graph's backward to torch's autograd.
struct NotDifferentiable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A training program made from one functional trace: the forward returns `(outputs, saved)`; the backward takes
/// `(*saved, *grads)` -- one gradient per output position in `grad_outputs`, the outputs that require grad -- and
/// returns one gradient per input of the trace (None for inputs that do not require grad or get none).
/// Neither trace requires grad: both run with autograd off, the pair wrapped in one torch.autograd.Function.
/// How the autodiff differentiates one top-level symbol of the trace whose result requires grad.
struct VjpUse {
  std::string op;    // the symbol's callee as printed: "ltorch.relu", "prims.add", an opaque op's "torch.foo"
  std::string rule;  // "own" (its VJP rule), "decomposition" (the rules of the symbols it decomposes into) or
                     // "generic" (torch.autograd on that op alone: thunder.executors.torchex.autograd_vjp)
  std::vector<std::string> generic;  // for "decomposition": the symbols inside it the generic rule differentiates
};

struct ForwardBackward {
  Trace forward;
  Trace backward;
  std::vector<size_t> grad_outputs;
  size_t saved = 0;
  std::vector<VjpUse> rules;  // one per top-level symbol whose result requires grad, in trace order
  double rematerialization_seconds = 0;  // of the split's time, the minimum cut and the recomputation it places
};

/// Reverse-mode autodiff (docs/autodiff.md): walks the symbols whose outputs require grad backwards, from the
/// outputs' gradients, emitting each one's VJP rule (ops/vjp.h) -- a torch-level op without a rule is
/// differentiated through its decomposition -- and summing the gradients of values read more than once. The
/// forward values the backward reads are its saved values (the forward exposes those its composites compute
/// internally by opening the composites). Effects other than writes into tensors that do not require grad are
/// not differentiated. Run on a functional trace (after functionalization and DCE), before claiming.
/// Throws NotDifferentiable naming the op it cannot differentiate.
/// Before: def f(t0): t1 = prims.sin(t0); return (t1,)   (t0 requires grad)
/// After:  forward: t1 = prims.sin(t0); return ((t1,), (t0,))
///         backward(t0, t2): t3 = prims.cos(t0); t4 = prims.mul(t2, t3); return (t4,)
/// `activation_inputs`: inputs computed before the graph with grad recorded (non-leaf tensors: an earlier graph's
/// or eager code's results), which code after the graph may write in place before the backward runs. Saving one
/// is not free to rematerialization: where eager's ops save their own outputs (sigmoid(c)), so does the forward,
/// rather than the input to recompute them from (which a later c.mul_(2) would change: the backward raised).
ForwardBackward split_forward_backward(const Trace& t, const std::vector<ProxyId>& activation_inputs = {});

/// The backward of split_forward_backward(t, activation_inputs) for a call in which only some output gradients
/// are given (`given[k]`: the k-th gradient input; torch's autograd passes None for an output nothing
/// differentiates): the autodiff run again from the given gradients only, so that a symbol only missing ones
/// would reach is not differentiated -- eager's autograd does not run the nodes they would flow through -- and a
/// multi-output one gets None for its missing outputs, as in eager (the generic rule passes torch's autograd
/// only the others). It reads the values `forward` (that split's forward) saves, recomputing from them what else
/// it reads; the calling convention is the split's backward's (the missing gradients are not read). Filling the
/// missing gradients with zeros instead computed 0 * inf = NaN where a VJP reads an infinite forward value (the
/// log of 0 in an unused output) and added it to the used outputs' gradients.
/// std::invalid_argument if `given` does not have one flag per gradient input; NotDifferentiable if the backward
/// reads a value the forward neither saves nor can recompute (a forward with effects).
Trace specialize_backward(const Trace& t, const Trace& forward, const std::vector<bool>& given,
                          const std::vector<ProxyId>& activation_inputs = {});

using PassFn = Trace (*)(const Trace&, const PassContext&);
struct Pass {
  std::string name;   // "dce"
  std::string title;  // "Dead-code elimination"
  PassFn fn;
};

/// The passes by name, in the default order: functionalize, cse, constant_folding, dce, claim, fusion, release.
const std::vector<Pass>& pass_table();

struct PassResult {
  Trace trace;
  std::string name;
  double seconds;
};

/// Runs the named passes in order; each result is verified and stamped with
/// its provenance ("<title> (took 12 us)"). Throws std::invalid_argument for
/// an unknown pass name.
std::vector<PassResult> run_pipeline(const Trace& t, const std::vector<std::string>& names, const PassContext& ctx);

}  // namespace thunder::passes
