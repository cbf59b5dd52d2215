// The VJP table: for each differentiable op, the rule that emits its vector-Jacobian product.
//
// A rule receives the forward bound symbol (its arguments and output are proxies of the forward trace, which the
// backward may read: they become saved values) and the gradient of its output, and emits, through the builder,
// the gradient of each argument. The table is keyed by the op's symbol (its identity), not by its name.
#pragma once

#include <functional>
#include <vector>

#include "ops/op_table.h"

namespace thunder::ops {

/// One gradient per argument of `fwd`, in order: None where the argument gets none (numbers, integer tensors,
/// predicates, arguments the op does not differentiate), a list of gradients for a list argument (cat).
using VjpRule = std::function<std::vector<Value>(Builder& b, const ir::BoundSymbol& fwd, const Value& grad)>;

/// The rule for an op, or nullptr. Ops whose outputs never carry a gradient (comparisons, creation ops,
/// detach) need none: the autodiff never asks for them.
const VjpRule* find_vjp(const ir::Symbol* op);

/// The rule for this use of an op, or nullptr: an op's rule may cover only some of its uses (div's rounding
/// modes), the others are differentiated through its decomposition.
const VjpRule* find_vjp(const ir::BoundSymbol& use);

/// Whether the op is differentiated whole by torch's autograd (the generic rule) although it has a decomposition:
/// ops whose torch kernels, forward and backward, beat their decomposed prims (attention: the fused CPU kernel and
/// its backward against batched matmuls and a softmax, GQA's expanded keys and values materialized).
bool vjp_by_torch(const ir::Symbol* op);
/// Whether this use of an op is differentiated whole by torch's autograd: the op's, or a use its partial rule
/// does not cover and leaves to torch (embedding with sparse=True: torch's sparse gradient).
bool vjp_by_torch(const ir::BoundSymbol& use);

/// Whether the op's rule compares its tensor arguments with its result (amax, amin) or with each other (maximum,
/// minimum): the autodiff saves them for the backward, never recomputes them (see autodiff.cc).
bool vjp_compares_arguments(const ir::Symbol* op);

/// A tensor of zeros with metadata m (prims.full), as gradients that nothing reaches are.
Value zeros(Builder& b, const TensorMeta& m);

/// "level.name" of every op with a VJP rule (for docs and tests).
std::vector<std::string> ops_with_vjp();

}  // namespace thunder::ops
