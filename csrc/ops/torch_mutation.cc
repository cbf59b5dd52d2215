// Mutation, gradient and control-flow ops: what the front end lowers in-place
// ops, subscript writes and data-dependent branches into, and what the
// functionalization pass (passes/functionalization.cc) turns them into.
//
//   ltorch.copy_(a, src)                 write src into a in place (the only write the importer emits)
//   prims.copy_to(a, src[, when])        the same write, emitted by functionalization as a copy-back; skipped
//                                        where `when` (a bool tensor) is false
//   prims.slice_update(a, src, start, stop, step)   out of place: a copy of a with one slice replaced by src
//   ltorch.detach(a) -> prims.detach(a)  a's data, cut from autograd
//   prims.branch_begin/else/end(pred)    region markers: `if pred: <then> else: <else>`, both arms traced
#include "ops/torch_common.h"

namespace thunder::ops {
namespace {

void prim(std::string name, uint32_t tags, std::vector<ir::Param> params, MetaFn meta) {
  register_op(OpDef{ir::Symbol{std::move(name), ir::Level::Prim, tags, std::move(params)}, std::move(meta), nullptr});
}

// The checks of a write of `src` into `a`: a is a tensor; src a tensor whose shape broadcasts to a's
// (one way: a's shape does not change), or a number.
void check_write(Builder& b, const std::string& op, const Args& args) {
  const TensorMeta& a = tensor(b, op, args[0], "a");
  const Value& src = args[1];
  if (!b.is_tensor(src)) {
    if (!src.is_number() && !src.is_proxy()) fail(op, "expected argument 'src' to be a tensor or a number");
    return;
  }
  const Shape& s = b.meta(src).shape;
  bool ok = s.size() <= a.shape.size();
  for (size_t i = 0; ok && i < s.size(); ++i) {
    const Dim& want = a.shape[a.shape.size() - s.size() + i];
    ok = s[i] == want || s[i] == 1;
  }
  if (!ok)
    fail(op, "argument 'src' of shape " + shape_string(s) + " does not broadcast to the shape " +
                 shape_string(a.shape) + " of argument 'a'");
}

// A region marker's predicate (or copy_to's condition): a bool tensor of exactly one element (any rank).
void check_pred(Builder& b, const std::string& op, const Value& pred, const std::string& name = "pred") {
  if (!b.is_tensor(pred)) fail(op, "expected argument '" + name + "' to be a bool tensor with one element");
  const TensorMeta& m = b.meta(pred);
  if (m.dtype != DType::Bool || m.numel() != 1)
    fail(op, "expected argument '" + name + "' to be a bool tensor with one element, got a " +
                 std::string(ir::dtype_name(m.dtype)) + " tensor of shape " + shape_string(m.shape));
}

Value slice_update_meta(Builder& b, const Args& a) {
  const std::string op = "prims.slice_update";
  const TensorMeta& m = tensor(b, op, a[0], "a");
  const TensorMeta& src = tensor(b, op, a[1], "src");
  Shape start = a[2].as_dims(), stop = a[3].as_dims();
  std::vector<int64_t> step = a[4].is_none() ? std::vector<int64_t>(m.shape.size(), 1) : a[4].as_ints();
  if (start.size() != m.shape.size() || stop.size() != m.shape.size() || step.size() != m.shape.size())
    fail(op, "expected one start, stop and step per dimension of 'a' (" + std::to_string(m.ndim()) + ")");
  Shape shape;
  for (size_t i = 0; i < m.shape.size(); ++i) {
    if (start[i] < 0 || stop[i] > m.shape[i] || start[i] > stop[i] || step[i] < 1)
      fail(op, "invalid slice [" + start[i].str() + ":" + stop[i].str() + ":" + std::to_string(step[i]) +
                   "] of dimension " + std::to_string(i) + " of length " + m.shape[i].str());
    shape.push_back((stop[i] - start[i]).ceil_divide(step[i], op));
  }
  if (src.shape != shape)
    fail(op, "argument 'src' has shape " + shape_string(src.shape) + ", the slice has shape " + shape_string(shape));
  if (src.dtype != m.dtype)
    fail(op, "argument 'src' has dtype " + std::string(ir::dtype_name(src.dtype)) + ", 'a' has dtype " +
                 std::string(ir::dtype_name(m.dtype)));
  return out_tensor(b, m);
}

}  // namespace

void register_torch_mutation() {
  def_meta("copy_", ir::kEffect, {req("a"), req("src")}, [](Builder& b, const Args& a) {
    check_write(b, "ltorch.copy_", a);
    return Value();
  });
  // `when`: None, or a 0-d bool tensor; false skips the write (a converted branch's arm not taken wrote the input
  // in eager: no write, no version bump).
  prim("copy_to", ir::kEffect, {req("a"), req("src"), opt("when", Value())}, [](Builder& b, const Args& a) {
    check_write(b, "prims.copy_to", a);
    if (!a[2].is_none()) check_pred(b, "prims.copy_to", a[2], "when");
    return Value();
  });
  prim("slice_update", 0, {req("a"), req("src"), req("start"), req("stop"), opt("step", Value())}, slice_update_meta);
  // A view of a's data that autograd does not see: only the torch executor claims it (no kernel may take it
  // while gradients matter, and its output never requires grad).
  prim("detach", ir::kShape | ir::kView | ir::kNoGrad, {req("a")},
       [](Builder& b, const Args& a) { return out_tensor(b, tensor(b, "prims.detach", a[0], "a")); });
  def_decomposed("detach", ir::kShape | ir::kNoGrad, {req("input")}, [](Builder& b, const Args& a) {
    tensor(b, "ltorch.detach", a[0]);
    return b.prim("detach", {a[0]});
  });
  for (const char* name : {"branch_begin", "branch_else", "branch_end"}) {
    std::string op = std::string("prims.") + name;
    prim(name, ir::kEffect, {req("pred")}, [op](Builder& b, const Args& a) {
      check_pred(b, op, a[0]);
      return Value();
    });
  }
}

}  // namespace thunder::ops
