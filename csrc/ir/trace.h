// The IR: proxies, symbols, bound symbols and traces.
//
// A trace is a straight-line program: inputs (proxies), an ordered list of
// bound symbols, and an output value. It prints as a runnable Python function
// (see printer.h). Traces are values: passes take one and return a new one.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/prim_id.h"
#include "ir/value.h"

namespace thunder::ir {

/// Metadata of a tensor proxy. Strides are not tracked: the core assumes
/// nothing about memory layout. A dim is an integer or a symbolic size (ir/dim.h).
struct TensorMeta {
  DType dtype = DType::Float32;
  Shape shape;
  std::string device = "cpu";
  bool requires_grad = false;

  int64_t ndim() const { return static_cast<int64_t>(shape.size()); }
  Dim numel() const;
  bool operator==(const TensorMeta&) const = default;
};

/// A named placeholder for a value computed at run time: a tensor or a number.
struct ProxyInfo {
  std::string name;
  bool is_tensor = true;
  TensorMeta tensor;                         // when is_tensor
  NumberType number = NumberType::Int;       // when !is_tensor
  // A trace input's element strides when it is not contiguous (the guards that select the trace check
  // them); empty for contiguous inputs and for every computed value (whose layout kernels do not assume).
  std::vector<int64_t> strides;
  // A computed tensor's strides in eager (the capture's example value) when not contiguous: eager lays an
  // elementwise result out as its inputs (a transposed input's product is transposed), which decides whether a
  // later contiguous() or reshape is a view or a copy. Functionalization reads them; kernels never do (the value
  // thunder computes is laid out its own way). Empty for inputs and where not known.
  std::vector<int64_t> eager_strides;
  // A value of the forward that the backward recomputes (rematerialization): in half precision its kernels round
  // it after every op, as the forward's did, whatever the backward's rounding (codegen::HalfRounding::AtStores).
  // Kept in float32, it was not the value the forward computed: a gradient taken at it differed, and a mask
  // recomputed from it could flip.
  bool rounded_as_forward = false;
};

/// Properties of a symbol, used by passes and executors.
enum Tag : uint32_t {
  kElementwise = 1u << 0,
  kReduction = 1u << 1,
  kShape = 1u << 2,        // reshapes, permutes, broadcasts, slices: no arithmetic
  kCreation = 1u << 3,     // makes a tensor from numbers only
  kRandom = 1u << 4,       // reads or advances a random generator
  kEffect = 1u << 5,       // may mutate an argument or global state: never removed, merged or folded
  kOpaque = 1u << 6,       // not known to the core; runs through torch as captured
  kConstant = 1u << 7,     // materializes a compile-time constant
  kRelease = 1u << 8,      // drops the references to its arguments (prints as `del a, b`)
  kNoGrad = 1u << 9,       // its outputs never require grad, whatever its inputs (detach)
  kView = 1u << 10,        // torch may return a view of its first argument (sharing storage): a write into the
                           // output writes the argument; reshape, transpose, slice, squeeze, broadcast_in_dim,
                           // alias, detach
  kFreshOutput = 1u << 11,  // its output is always a new tensor, whatever torch's arguments (matmul, linear): a
                            // kernel may write over it where it dies (translation_units.cc)
  kChecksValues = 1u << 12,  // raises for some values of its inputs (an index out of range), not only for their
                             // metadata, which the capture's guards fix
  kJoinsEveryArgument = 1u << 13,  // eager's autograd node joins every tensor argument to the output, also one its
                                  // decomposition may not read (addmm's input with beta=0): a gradient reaching the
                                  // output reaches each, zero where the rule gives nothing
};

/// Prims and torch-level ops come from the op tables; opaque symbols from capture;
/// fusion symbols from the fusion pass (their sub-symbols are what they compute).
enum class Level : uint8_t { Prim, Torch, Opaque, Fusion };

/// A formal parameter of a symbol. `required` parameters print positionally;
/// the others print as `name=value` only where they differ from their default.
struct Param {
  std::string name;
  bool required = true;
  Value default_value;
};

/// An operation: its name, level, tags and signature. The rules that give it
/// meaning (meta, decomposition, folding, execution) live in tables keyed by it.
struct Symbol {
  std::string name;      // "add", "softmax"
  Level level;
  uint32_t tags = 0;
  std::vector<Param> params;
  /// Which prim this is (set when a prim is registered); PrimId::none for every other symbol.
  PrimId prim = PrimId::none;

  bool has(Tag t) const { return (tags & t) != 0; }
  /// The module prefix under which traces print it: "prims", "ltorch" or "".
  std::string_view module() const;
};

/// One operation applied to values: the unit of a trace.
struct BoundSymbol {
  const Symbol* sym = nullptr;
  /// One value per parameter of `sym`, in order (opaque symbols: as captured).
  std::vector<Value> args;
  /// Keyword arguments; only opaque symbols use them.
  std::vector<std::pair<std::string, Value>> kwargs;
  Value output;
  /// The symbol's decomposition into lower-level symbols (empty for prims).
  std::vector<BoundSymbol> subsymbols;
  /// The printed callable: set for opaque symbols and by executor claiming.
  std::string callee;
  /// The executor that runs this symbol, once claimed ("" before).
  std::string executor;
  /// Where the user wrote it ("file.py:12 in forward: x = self.fc1(x)"), if known.
  std::string source;

  /// Whether this applies the prim `id`.
  bool is(PrimId id) const { return sym != nullptr && sym->prim == id && id != PrimId::none; }
  /// The proxies read by this symbol, in order of first appearance.
  std::vector<ProxyId> input_proxies() const;
  /// input_proxies(), then those its decomposition reads from outside it (a size symbol that a prim reads as a
  /// number where the symbol's own arguments have the size bound, or in a shape the symbol does not name: the
  /// `(s0, s1)` of `full_like(x, v)`'s prims.full).
  std::vector<ProxyId> reads_with_decomposition() const;
  /// The proxies produced by this symbol.
  std::vector<ProxyId> output_proxies() const;
  /// callee, or "<module>.<name>" if unset.
  std::string printed_callee() const;
};

struct Trace {
  // Indexed by ProxyId; shared by every trace derived from one capture. A deque,
  // so references to a proxy stay valid while rules create more proxies.
  std::deque<ProxyInfo> proxies;
  std::vector<ProxyId> inputs;
  std::vector<BoundSymbol> symbols;
  Value output;
  std::string name = "computation";
  /// One line saying which pass made this trace and how long it took.
  std::string provenance;
  /// The first `boxed_inputs` inputs arrive in one list, which the function empties as it unpacks them: then
  /// its `del` of such a value frees it (a positional argument stays alive, held by the caller, until the call
  /// returns). A backward takes its saved values so, each freed after its last use (docs/autodiff.md).
  size_t boxed_inputs = 0;
  /// For a trace with symbolic sizes compiled once for every shape: a value of each size symbol (one call's), which
  /// code generation's planning reads where it needs integers (codegen::shape_of). Decisions made at these values
  /// are checked again when the trace is lowered with its sizes bound; bind_sizes drops them.
  std::map<ProxyId, int64_t> size_hints;

  const ProxyInfo& proxy(ProxyId id) const { return proxies.at(static_cast<size_t>(id)); }
  const TensorMeta& tensor(ProxyId id) const;
  /// `d` as an integer: its value, or its value at the size hints; SymbolicShapeError naming `op` where it has a
  /// symbol without a hint.
  int64_t at_hints(const Dim& d, std::string_view op) const;
  /// Adds a proxy and names it deterministically ("t12" for tensors, "i12"/"f12"/"b12" for numbers).
  ProxyId new_tensor(TensorMeta meta);
  ProxyId new_number(NumberType type);
  /// A trace with the same proxies and inputs and no symbols, for passes to fill.
  Trace empty_copy(std::string provenance) const;
};

/// `b` with every proxy it reads (in its arguments and, recursively, in its
/// sub-symbols) replaced by f(ProxyId) -> Value. Outputs are left alone.
BoundSymbol substitute_inputs(const BoundSymbol& b, const std::function<Value(ProxyId)>& f);

/// `trace` with its size symbols (int inputs; ir/dim.h) at `values`: every symbolic size in the metadata of its
/// proxies and in the arguments and output of its symbols becomes an integer. The symbols stay inputs (the
/// calling convention is unchanged). std::invalid_argument if a size symbol in it has no value.
///
/// `reads_numbers`, where given, names the symbols whose number arguments are computed at run time, not sizes
/// (codegen::reads_numbers_at_run_time: elementwise prims, full and fusions). Those arguments (not a sequence: a
/// shape) keep the symbols that are inputs of `trace`, so a kernel takes such a number (`mean`'s divisor, the fill
/// value of `full_like(x, x.shape[-1])`) as an argument instead of a literal and one compiled kernel serves every
/// value; their sub-symbols are bound as the rest.
Trace bind_sizes(const Trace& trace, const std::map<ProxyId, int64_t>& values,
                 const std::function<bool(const BoundSymbol&)>& reads_numbers = nullptr);

/// Throws std::logic_error naming the first problem: a proxy used before it
/// is defined, defined twice, or an output that is never defined.
void verify(const Trace& trace);

}  // namespace thunder::ir
