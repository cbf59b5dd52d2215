// The op tables: one per level (prims, ltorch), and the Builder that binds
// arguments, applies shape/dtype rules and records decompositions.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ir/trace.h"

namespace thunder::ops {

using ir::Dim;
using ir::DType;
using ir::Shape;
using ir::ProxyId;
using ir::TensorMeta;
using ir::Value;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

/// Invalid arguments to an op: the message names the op, the argument and what was expected.
struct OpError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// A valid use of a torch op that the core does not represent natively
/// (e.g. dropout in training mode); the front end falls back to an opaque op.
struct NotNative : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Builder;

/// Computes the outputs of a prim (or of a torch op without decomposition)
/// from its bound arguments, creating output proxies through the builder.
using MetaFn = std::function<Value(Builder&, const Args&)>;
/// Emits a torch-level op's decomposition by calling lower-level ops on the builder.
using DecompFn = std::function<Value(Builder&, const Args&)>;

/// One entry of an op table.
struct OpDef {
  ir::Symbol symbol;
  MetaFn meta;          // prims, and torch ops with no decomposition
  DecompFn decompose;   // torch-level ops
};

/// Looks up an op by level and name; nullptr if absent.
const OpDef* find_op(ir::Level level, std::string_view name);
/// The symbol of a prim (every PrimId has one).
const ir::Symbol& prim_symbol(ir::PrimId id);
/// Every registered op of a level, in registration order.
std::vector<const OpDef*> ops_of(ir::Level level);
/// The symbol opaque bound symbols point to: with the kEffect tag (may mutate
/// its arguments or use a random generator) or without it (a pure function).
const ir::Symbol* opaque_symbol(bool effect = true);
/// The symbol of an opaque check: a call made only to raise for some values of its arguments (an assert), which
/// writes nothing and returns nothing -- an effect (never removed or moved past another), tagged kChecksValues.
const ir::Symbol* opaque_check_symbol();

/// Builds traces. Each call binds arguments to the op's parameters, checks
/// them, computes output metadata, and appends one bound symbol (with its
/// decomposition as sub-symbols) to the current trace.
class Builder {
 public:
  explicit Builder(ir::Trace& trace) : trace_(trace), sink_(&trace.symbols) {}

  ir::Trace& trace() { return trace_; }
  const ir::Trace& trace() const { return trace_; }
  const TensorMeta& meta(const Value& tensor) const;
  bool is_tensor(const Value& v) const;

  ProxyId add_input_tensor(TensorMeta meta, std::vector<int64_t> strides = {});
  ProxyId add_input_number(ir::NumberType type);
  ProxyId new_tensor(TensorMeta meta) { return trace_.new_tensor(std::move(meta)); }
  ProxyId new_number(ir::NumberType type) { return trace_.new_number(type); }

  /// Calls a prim ("add") or torch op ("softmax") by level and name.
  Value call(ir::Level level, std::string_view name, Args args, const Kwargs& kwargs = {});
  Value prim(std::string_view name, Args args) { return call(ir::Level::Prim, name, std::move(args)); }
  Value torch(std::string_view name, Args args, const Kwargs& kwargs = {}) {
    return call(ir::Level::Torch, name, std::move(args), kwargs);
  }
  /// Records an op the core does not know. `output` holds proxies the caller
  /// created with metadata it already knows; `callee` is the Python expression to call.
  Value opaque(std::string callee, Args args, Kwargs kwargs, Value output);

  /// Source location attached to the symbols recorded from now on.
  void set_source(std::string source) { source_ = std::move(source); }

 private:
  ir::Trace& trace_;
  std::vector<ir::BoundSymbol>* sink_;  // the top level, or a decomposition being recorded
  std::string source_;
  int depth_ = 0;
};

// ---- helpers shared by the rule tables ----

/// Raises OpError("<op>: <what>").
[[noreturn]] void fail(std::string_view op, const std::string& what);
/// NotNative where an op reads, with a nonempty index, a dimension of size 0 (cross_entropy over zero classes):
/// every index is out of range, and a kernel's bounds check, which clamps into [0, extent), has no element to
/// read in its place. torch runs the op, and raises as eager does.
void refuse_empty_indexed(std::string_view op, const ir::Dim& extent, const ir::TensorMeta& index);
std::string shape_string(const ir::Shape& shape);
std::string shape_string(const std::vector<int64_t>& shape);
/// Wraps a possibly negative dim into [0, ndim); OpError naming `op` if out of range.
int64_t canonical_dim(std::string_view op, int64_t dim, int64_t ndim);
/// torch's broadcast of two shapes; OpError naming `op` if incompatible.
/// OpError(what) naming `op` if the shapes differ in rank or in a pair of integer sizes; SymbolicShapeError if they
/// differ only where a size is symbolic (sizes that may be equal at run time).
void require_same_shape(std::string_view op, const ir::Shape& a, const ir::Shape& b, const std::string& what);
/// Sizes not provably equal nor 1 raise SymbolicShapeError.
ir::Shape broadcast_shapes(std::string_view op, const ir::Shape& a, const ir::Shape& b);

void register_prims();
void register_torch_elementwise();
void register_torch_shape();
void register_torch_reduction();
void register_torch_nn();
void register_torch_math();
void register_torch_layout();
void register_torch_conv_pool_loss();
void register_torch_mutation();
/// Adds an op to its level's table (at start-up only).
void register_op(OpDef def);

/// Makes an optional parameter.
inline ir::Param opt(std::string name, Value def) { return ir::Param{std::move(name), false, std::move(def)}; }
/// Makes a required parameter.
inline ir::Param req(std::string name) { return ir::Param{std::move(name), true, Value()}; }

}  // namespace thunder::ops
