// Tests of the functionalization pass (passes/functionalization.cc): writes through views of inputs and
// intermediates, copy-backs, the slice peepholes, branch regions with gradient masking, opaque effects,
// and what it refuses.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "ops/op_table.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

using ir::BoundSymbol;
using ir::DType;
using ir::TensorMeta;
using ir::Value;
using ops::Builder;
using Names = std::vector<std::string>;

Value P(ProxyId id) { return Value(ir::ProxyRef{id}); }
Value I(int64_t i) { return Value(i); }
Value S(Value start, Value stop) { return Value(ir::Seq{ir::Seq::Kind::Slice, {std::move(start), std::move(stop), Value()}}); }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::string> callees(const Trace& t) {
  std::vector<std::string> out;
  for (const BoundSymbol& b : t.symbols) out.push_back(b.printed_callee());
  return out;
}

int count(const Trace& t, const std::string& callee) {
  int n = 0;
  for (const BoundSymbol& b : t.symbols) n += b.printed_callee() == callee;
  return n;
}

class Functionalization : public ::testing::Test {
 protected:
  Trace trace;
  Builder b{trace};

  Value input(std::vector<int64_t> shape, bool requires_grad = false, DType dtype = DType::Float32) {
    return P(b.add_input_tensor(TensorMeta{dtype, ir::dims_of(shape), "cpu", requires_grad}));
  }
  Value pred(std::vector<int64_t> shape = {}) { return input(std::move(shape), false, DType::Bool); }
  void copy(const Value& dst, const Value& src) { b.torch("copy_", {dst, src}); }

  // Runs the pass and the verifier.
  Trace run() {
    Trace out = functionalize(trace);
    ir::verify(out);
    return out;
  }
  // The top-level symbol of `t` that defines `v`.
  static const BoundSymbol& producer(const Trace& t, const Value& v) {
    for (const BoundSymbol& s : t.symbols)
      for (ProxyId id : s.output_proxies())
        if (id == v.proxy()) return s;
    throw std::logic_error("no producer of " + t.proxy(v.proxy()).name);
  }
  static const BoundSymbol& first(const Trace& t, const std::string& callee, int skip = 0) {
    for (const BoundSymbol& s : t.symbols)
      if (s.printed_callee() == callee && skip-- == 0) return s;
    throw std::logic_error("no " + callee + " in the trace");
  }
};

// ---- writes ----

TEST_F(Functionalization, WriteToAnInputEmitsACopyBackAndReturnsTheInput) {
  Value x = input({3});
  Value t = b.torch("add", {x, I(1)});
  copy(x, t);
  Value y = b.torch("mul", {x, I(2)});
  trace.output = Value::tuple({x, y});
  Trace out = run();
  EXPECT_EQ(callees(out), (Names{"ltorch.add", "ltorch.mul", "prims.copy_to"}));
  EXPECT_EQ(first(out, "ltorch.mul").args[0], t);  // the read sees the written value
  EXPECT_EQ(out.symbols.back().args, (std::vector<Value>{x, t, Value()}));
  EXPECT_EQ(out.output, trace.output);  // eager returns the input itself, updated
  EXPECT_EQ(out.provenance, "Functionalization");
}

TEST_F(Functionalization, WriteThroughAGetitemOfAnInput) {
  Value x = input({2, 3});
  Value v = b.torch("getitem", {x, Value::tuple({I(0), I(1)})});
  Value s = b.torch("mul", {v, I(2)});
  copy(v, s);
  trace.output = b.torch("exp", {x});
  Trace out = run();
  const BoundSymbol& update = first(out, "prims.slice_update");
  EXPECT_EQ(update.args[0], x);
  EXPECT_EQ(update.args[2], Value::ints({0, 1}));
  EXPECT_EQ(update.args[3], Value::ints({1, 2}));
  EXPECT_TRUE(update.args[4].is_none());
  EXPECT_EQ(producer(out, update.args[1]).printed_callee(), "prims.reshape");  // s (0-d) back to [1, 1]
  EXPECT_EQ(producer(out, update.args[1]).args[0], s);
  EXPECT_EQ(first(out, "ltorch.exp").args[0], update.output);
  EXPECT_EQ(out.symbols.back().printed_callee(), "prims.copy_to");
  EXPECT_EQ(out.symbols.back().args, (std::vector<Value>{x, update.output, Value()}));
  EXPECT_EQ(count(out, "ltorch.copy_"), 0);
}

TEST_F(Functionalization, WriteThroughAViewOfAnIntermediateNeedsNoCopyBack) {
  Value x = input({2, 3});
  Value a = b.torch("add", {x, I(1)});
  Value row = b.torch("getitem", {a, I(0)});
  copy(row, Value(0.0));
  trace.output = b.torch("sum", {a});
  Trace out = run();
  EXPECT_EQ(count(out, "prims.copy_to"), 0);
  EXPECT_EQ(count(out, "ltorch.full"), 1);  // the number, as a tensor of the row's shape
  const BoundSymbol& update = first(out, "prims.slice_update");
  EXPECT_EQ(update.args[0], a);
  EXPECT_EQ(first(out, "ltorch.sum").args[0], update.output);
}

TEST_F(Functionalization, ALaterReadOfAnotherViewOfTheRootSeesTheWrite) {
  Value x = input({4});
  Value w = input({2});
  Value v1 = b.torch("getitem", {x, S(I(0), I(2))});
  Value v2 = b.torch("getitem", {x, S(I(1), I(3))});
  copy(v1, w);
  trace.output = b.torch("mul", {v2, I(3)});
  Trace out = run();
  const BoundSymbol& update = first(out, "prims.slice_update");
  const BoundSymbol& read = producer(out, first(out, "ltorch.mul").args[0]);
  EXPECT_EQ(read.printed_callee(), "prims.slice");  // [1:3] overlaps [0:2]: sliced from the update
  EXPECT_EQ(read.args[0], update.output);
  EXPECT_EQ(read.args[1], Value::ints({1}));
}

TEST_F(Functionalization, WriteThroughATranspose) {
  Value x = input({2, 3});
  Value w = input({3, 2});
  Value t = b.torch("transpose", {x, I(0), I(1)});
  copy(t, w);
  trace.output = b.torch("neg", {x});
  Trace out = run();
  const BoundSymbol& back = first(out, "prims.transpose");
  EXPECT_EQ(back.args[0], w);
  EXPECT_EQ(back.args[1], Value::ints({1, 0}));
  EXPECT_EQ(first(out, "ltorch.neg").args[0], back.output);
  EXPECT_EQ(out.symbols.back().args, (std::vector<Value>{x, back.output, Value()}));
}

TEST_F(Functionalization, WriteThroughAReshapeOfAContiguousTensor) {
  Value x = input({2, 3});
  Value w = input({6});
  copy(b.torch("reshape", {x, Value::ints({6})}), w);
  trace.output = b.torch("neg", {x});
  Trace out = run();
  const BoundSymbol& back = first(out, "prims.reshape");
  EXPECT_EQ(back.args[0], w);
  EXPECT_EQ(first(out, "ltorch.neg").args[0], back.output);
}

TEST_F(Functionalization, AReshapeTorchWouldCopyIsNoView) {
  Value x = input({2, 3});
  Value w = input({6});
  Value r = b.torch("reshape", {b.torch("t", {x}), Value::ints({6})});  // not expressible as strides of x
  copy(r, w);
  trace.output = Value::tuple({b.torch("neg", {x}), b.torch("neg", {r})});
  Trace out = run();
  EXPECT_EQ(count(out, "prims.copy_to"), 0);
  EXPECT_EQ(first(out, "ltorch.neg").args[0], x);
  EXPECT_EQ(first(out, "ltorch.neg", 1).args[0], w);
}

TEST_F(Functionalization, ContiguousOfANonContiguousTensorIsACopy) {
  Value x = input({2, 3});
  Value w = input({3, 2});
  copy(b.torch("contiguous", {b.torch("t", {x})}), w);
  trace.output = b.torch("neg", {x});
  EXPECT_EQ(count(run(), "prims.copy_to"), 0);
}

TEST_F(Functionalization, ToTheSameDtypeAndContiguousOfAContiguousTensorAreViews) {
  Value x = input({3});
  copy(b.torch("to", {x, Value(DType::Float32)}), input({3}));
  copy(b.torch("contiguous", {x}), I(2));
  trace.output = b.torch("neg", {x});
  Trace out = run();
  EXPECT_EQ(count(out, "prims.copy_to"), 1);
  EXPECT_EQ(first(out, "ltorch.neg").args[0], first(out, "ltorch.full").output);
}

TEST_F(Functionalization, ReshapesOfANonContiguousInputFollowItsStrides) {
  // x has strides (1, 2) (a transposed [3, 2]): x.reshape(6) copies, x[0].reshape(3, 1) is a view.
  Value x = P(b.add_input_tensor(TensorMeta{DType::Float32, {2, 3}}, {1, 2}));
  copy(b.torch("reshape", {x, Value::ints({6})}), input({6}));
  trace.output = b.torch("neg", {x});
  EXPECT_EQ(count(run(), "prims.copy_to"), 0);
  copy(b.torch("reshape", {b.torch("getitem", {x, I(0)}), Value::ints({3, 1})}), input({3, 1}));
  trace.output = b.torch("neg", {x});
  EXPECT_EQ(count(run(), "prims.copy_to"), 1);
}

TEST_F(Functionalization, EachOutputOfASplitIsAView) {
  Value x = input({4, 2});
  Value w = input({2, 2});
  Value parts = b.torch("split", {x, I(2)});
  copy(parts.items()[1], w);
  trace.output = Value::tuple({b.torch("neg", {parts.items()[0]}), b.torch("exp", {parts.items()[1]})});
  Trace out = run();
  const BoundSymbol& update = first(out, "prims.slice_update");
  EXPECT_EQ(update.args[2], Value::ints({2, 0}));
  const BoundSymbol& other = producer(out, first(out, "ltorch.neg").args[0]);
  EXPECT_EQ(other.printed_callee(), "prims.slice");  // the other half: disjoint from the write, read from x
  EXPECT_EQ(other.args[0], x);
  EXPECT_EQ(first(out, "ltorch.exp").args[0], w);                 // the written region: what was written
  EXPECT_EQ(out.symbols.back().args, (std::vector<Value>{x, update.output, Value()}));
}

TEST_F(Functionalization, ChainedWritesBuildOnEachOther) {
  Value x = input({4});
  Value a = input({});
  Value c = input({});
  copy(b.torch("getitem", {x, I(0)}), a);
  copy(b.torch("getitem", {x, I(1)}), c);
  trace.output = b.torch("sum", {x});
  Trace out = run();
  const BoundSymbol& u1 = first(out, "prims.slice_update");
  const BoundSymbol& u2 = first(out, "prims.slice_update", 1);
  EXPECT_EQ(u1.args[0], x);
  EXPECT_EQ(u2.args[0], u1.output);
  EXPECT_EQ(first(out, "ltorch.sum").args[0], u2.output);
  EXPECT_EQ(out.symbols.back().args[1], u2.output);
}

TEST_F(Functionalization, RewritingARegionReplacesTheEarlierUpdate) {
  Value x = input({4});
  copy(b.torch("getitem", {x, I(0)}), input({}));
  copy(b.torch("getitem", {x, I(0)}), input({}));
  trace.output = b.torch("sum", {x});
  Trace out = run();
  EXPECT_EQ(first(out, "prims.slice_update", 1).args[0], x);  // the first update is dead
}

TEST_F(Functionalization, WritingAWholeViewReplacesTheValue) {
  Value x = input({2, 3});
  Value w = input({3});
  copy(b.torch("getitem", {x, Value::tuple({Value(ir::EllipsisT{}), S(Value(), Value())})}), w);  // x[..., :] broadcasts w
  trace.output = b.torch("neg", {x});
  Trace out = run();
  EXPECT_EQ(count(out, "prims.slice_update"), 0);
  // w broadcast, as a dense tensor of its own (an expanded view returned or written later shares its elements)
  const BoundSymbol& dense = producer(out, first(out, "ltorch.neg").args[0]);
  EXPECT_EQ(dense.printed_callee(), "prims.clone");
  EXPECT_EQ(dense.args[0], first(out, "ltorch.expand").output);
}

// ---- the slice peepholes ----

TEST_F(Functionalization, ALoopOverElementsReadsTheOriginalElements) {
  // for i in range(3): x[0, i] = x[0, i] * 2
  Value x = input({2, 3});
  std::vector<Value> products, views;
  for (int64_t i = 0; i < 3; ++i) {
    Value v = b.torch("getitem", {x, Value::tuple({I(0), I(i)})});
    Value p = b.torch("mul", {v, I(2)});
    copy(v, p);
    views.push_back(v);
    products.push_back(p);
  }
  Value later = b.torch("add", {views[0], I(1)});
  trace.output = Value::tuple({x, later});
  Trace out = run();
  for (int i = 1; i < 3; ++i) {
    // each element is read from x itself, not from the updates of the earlier iterations
    const BoundSymbol& reshape = producer(out, first(out, "ltorch.mul", i).args[0]);
    ASSERT_EQ(reshape.printed_callee(), "prims.reshape");
    const BoundSymbol& slice = producer(out, reshape.args[0]);
    ASSERT_EQ(slice.printed_callee(), "prims.slice");
    EXPECT_EQ(slice.args[0], x);
  }
  EXPECT_EQ(first(out, "ltorch.add").args[0], products[0]);  // x[0, 0] after the loop: what was written there
  EXPECT_EQ(count(out, "prims.slice_update"), 3);
  EXPECT_EQ(out.output, trace.output);
}

TEST_F(Functionalization, AReadInsideAWrittenSliceReadsTheUpdate) {
  Value x = input({6});
  Value w = input({3});
  copy(b.torch("getitem", {x, S(I(0), I(3))}), w);
  trace.output = b.torch("neg", {b.torch("getitem", {x, I(1)})});
  Trace out = run();
  const BoundSymbol& slice = first(out, "prims.slice");
  EXPECT_EQ(slice.args[0], w);  // x[1] lies in x[0:3]: element 1 of w
  EXPECT_EQ(slice.args[1], Value::ints({1}));
}

// ---- regions ----

TEST_F(Functionalization, AWriteInTheThenArmOnly) {
  Value c = pred({1});
  Value x = input({3});
  b.prim("branch_begin", {c});
  Value t = b.torch("add", {x, I(1)});
  copy(x, t);
  b.prim("branch_end", {c});
  trace.output = b.torch("mul", {x, I(2)});
  Trace out = run();
  EXPECT_EQ(count(out, "prims.branch_begin") + count(out, "prims.branch_end"), 0);
  const BoundSymbol& merge = first(out, "ltorch.where");
  EXPECT_EQ(producer(out, merge.args[0]).printed_callee(), "ltorch.reshape");  // pred as a 0-d tensor
  EXPECT_EQ(merge.args[1], t);
  EXPECT_EQ(merge.args[2], x);
  EXPECT_EQ(first(out, "ltorch.mul").args[0], merge.output);  // a read after the region
  // The copy-back runs only where the arm was taken (an untaken arm's write bumps no version in eager).
  EXPECT_EQ(out.symbols.back().args, (std::vector<Value>{x, merge.output, merge.args[0]}));
}

TEST_F(Functionalization, WritesInBothArms) {
  Value c = pred();
  Value x = input({3});
  b.prim("branch_begin", {c});
  Value t = b.torch("add", {x, I(1)});
  copy(x, t);
  b.prim("branch_else", {c});
  Value u = b.torch("sub", {x, I(1)});
  copy(x, u);
  b.prim("branch_end", {c});
  trace.output = b.torch("exp", {x});
  Trace out = run();
  EXPECT_EQ(first(out, "ltorch.sub").args[0], x);  // the else arm starts from the state before the region
  const BoundSymbol& merge = first(out, "ltorch.where");
  EXPECT_EQ(merge.args, (std::vector<Value>{c, t, u}));
  EXPECT_EQ(first(out, "ltorch.exp").args[0], merge.output);
}

TEST_F(Functionalization, NestedRegions) {
  Value c1 = pred(), c2 = pred();
  Value x = input({3});
  Value a = input({3}), d = input({3});
  b.prim("branch_begin", {c1});
  b.prim("branch_begin", {c2});
  copy(x, a);
  b.prim("branch_end", {c2});
  b.prim("branch_else", {c1});
  copy(x, d);
  b.prim("branch_end", {c1});
  trace.output = b.torch("neg", {x});
  Trace out = run();
  const BoundSymbol& inner = first(out, "ltorch.where");
  const BoundSymbol& outer = first(out, "ltorch.where", 1);
  EXPECT_EQ(inner.args, (std::vector<Value>{c2, a, x}));
  EXPECT_EQ(outer.args, (std::vector<Value>{c1, inner.output, d}));
  EXPECT_EQ(first(out, "ltorch.neg").args[0], outer.output);
  // x is written where c2 (given c1) or the else arm ran: where(c1, c2, True).
  const BoundSymbol& when = first(out, "ltorch.where", 2);
  EXPECT_EQ(when.args, (std::vector<Value>{c1, c2, Value(true)}));
  EXPECT_EQ(out.symbols.back().args, (std::vector<Value>{x, outer.output, when.output}));
}

TEST_F(Functionalization, ARootMadeInsideAnArmIsNotMerged) {
  Value c = pred();
  Value x = input({3});
  b.prim("branch_begin", {c});
  Value y = b.torch("add", {x, I(1)});
  copy(y, I(0));
  b.prim("branch_end", {c});
  trace.output = b.torch("neg", {y});
  Trace out = run();
  EXPECT_EQ(count(out, "ltorch.where"), 0);
  EXPECT_EQ(first(out, "ltorch.neg").args[0], first(out, "ltorch.full").output);
}

TEST_F(Functionalization, ArmsMaskGradientsOfWhatTheyReadFromBefore) {
  // if c: y = sqrt(x) else: y = log(x), with y a buffer written whole in both arms. A write over a tensor that
  // requires grad joins what it was (where(True, value, old), as outside arms): each arm reads y's old value too.
  Value c = pred();
  Value x = input({3}, true);
  Value y = b.torch("mul", {x, I(0)});
  b.prim("branch_begin", {c});
  Value r = b.torch("sqrt", {x});
  copy(y, r);
  Value r2 = b.torch("exp", {x});  // a second read in the arm: the same masked value
  copy(y, r2);
  b.prim("branch_else", {c});
  copy(y, b.torch("log", {x}));
  b.prim("branch_end", {c});
  trace.output = y;
  Trace out = run();
  EXPECT_EQ(count(out, "ltorch.detach"), 4);  // x and y, once per arm
  const BoundSymbol& then_mask = producer(out, first(out, "ltorch.sqrt").args[0]);
  EXPECT_EQ(then_mask.printed_callee(), "ltorch.where");
  EXPECT_EQ(then_mask.args[1], x);
  EXPECT_EQ(producer(out, then_mask.args[2]).printed_callee(), "ltorch.detach");
  EXPECT_EQ(first(out, "ltorch.exp").args[0], then_mask.output);
  const BoundSymbol& else_mask = producer(out, first(out, "ltorch.log").args[0]);
  EXPECT_EQ(producer(out, else_mask.args[1]).printed_callee(), "ltorch.detach");
  EXPECT_EQ(else_mask.args[2], x);
  EXPECT_FALSE(out.tensor(first(out, "ltorch.detach").output.proxy()).requires_grad);
  const BoundSymbol& merge = producer(out, out.output);
  EXPECT_EQ(merge.printed_callee(), "ltorch.where");
  const BoundSymbol& joined = producer(out, merge.args[1]);  // the then-arm's last write, joined to what y was
  EXPECT_EQ(joined.printed_callee(), "ltorch.where");
  EXPECT_EQ(joined.args[1], r2);
}

TEST_F(Functionalization, ArmsOfFiniteDerivativesMaskToo) {
  // if c: y = y + x * x else: y = y - x (the seed's loop): add, mul and sub have finite derivatives, but an operand
  // that is inf makes the untaken arm's backward 0 * inf = NaN: each arm masks what it reads, x and y, once.
  Value c = pred();
  Value x = input({3}, true);
  Value y = b.torch("mul", {x, I(0)});
  b.prim("branch_begin", {c});
  copy(y, b.torch("add", {y, b.torch("mul", {x, x})}));
  b.prim("branch_else", {c});
  copy(y, b.torch("sub", {y, x}));
  b.prim("branch_end", {c});
  trace.output = y;
  Trace out = run();
  EXPECT_EQ(count(out, "ltorch.detach"), 4);
}

TEST_F(Functionalization, NoMaskingWithoutGradients) {
  Value c = pred();
  Value x = input({3});
  Value y = input({3});
  b.prim("branch_begin", {c});
  copy(y, b.torch("sqrt", {x}));
  b.prim("branch_end", {c});
  trace.output = y;
  Trace out = run();
  EXPECT_EQ(count(out, "ltorch.detach"), 0);
  EXPECT_EQ(first(out, "ltorch.sqrt").args[0], x);
}

TEST_F(Functionalization, NestedArmsMaskOncePerRegionBegunAfterTheValue) {
  Value c1 = pred(), c2 = pred();
  Value x = input({3}, true);
  Value y = input({3});
  b.prim("branch_begin", {c1});
  Value inside = b.torch("mul", {x, I(2)});  // defined in the outer arm: masked by the inner region only
  b.prim("branch_begin", {c2});
  copy(y, b.torch("div", {x, inside}));  // both regions mask
  b.prim("branch_end", {c2});
  b.prim("branch_end", {c1});
  trace.output = y;
  Trace out = run();
  const BoundSymbol& add = first(out, "ltorch.div");
  const BoundSymbol& x_mask = producer(out, add.args[0]);   // inner mask of the outer mask of x
  const BoundSymbol& inside_mask = producer(out, add.args[1]);
  EXPECT_EQ(x_mask.args[0], c2);
  EXPECT_EQ(producer(out, x_mask.args[1]).args[0], c1);
  EXPECT_EQ(inside_mask.args[0], c2);
  EXPECT_EQ(inside_mask.args[1], inside);
  EXPECT_EQ(count(out, "ltorch.detach"), 3);
}

// ---- opaque effects ----

TEST_F(Functionalization, AnOpaqueEffectSeesPendingWritesAndIsSeenAfter) {
  Value x = input({2, 3});
  Value w = input({3});
  Value row = b.torch("getitem", {x, I(0)});
  copy(row, w);
  Value out_proxy = P(b.new_tensor(b.meta(x)));
  b.opaque("torch.Tensor.mul_", {x, I(2)}, {}, out_proxy);
  trace.output = b.torch("neg", {row});
  Trace out = run();
  ASSERT_EQ(count(out, "prims.copy_to"), 1);  // before the effect; none at the end
  const BoundSymbol& copy_back = first(out, "prims.copy_to");
  EXPECT_EQ(copy_back.args[0], x);
  EXPECT_EQ(copy_back.args[1], first(out, "prims.slice_update").output);
  EXPECT_EQ(first(out, "torch.Tensor.mul_").args[0], x);
  const BoundSymbol& read = producer(out, first(out, "ltorch.neg").args[0]);
  EXPECT_EQ(read.printed_callee(), "prims.reshape");  // the row replayed on x after the effect
  EXPECT_EQ(producer(out, read.args[0]).args[0], x);
}

TEST_F(Functionalization, AViewReadAfterAnOpaqueWriteIsMadeAgainOnItsRoot) {
  // No copy_, but an opaque op that may write x: reads of x's views after it see what it wrote.
  Value x = input({2, 3});
  Value v = b.torch("getitem", {x, I(0)});
  b.opaque("torch.Tensor.mul_", {x, I(2)}, {}, P(b.new_tensor(b.meta(x))));
  trace.output = b.torch("exp", {v});
  Trace out = run();
  const BoundSymbol& read = producer(out, first(out, "ltorch.exp").args[0]);
  EXPECT_EQ(read.printed_callee(), "prims.reshape");  // the row replayed on x after the effect
  EXPECT_EQ(producer(out, read.args[0]).args[0], x);
}

TEST_F(Functionalization, AnOpEagerCopiesWithIsNotAViewBeforeAnOpaqueWrite) {
  // x.repeat(1) decomposes into reshapes of x, which torch runs as views; the effect writes x after it.
  Value x = input({3});
  Value r = b.torch("repeat", {x, Value::ints({1})});
  b.opaque("torch.Tensor.relu_", {x}, {}, P(b.new_tensor(b.meta(x))));
  trace.output = b.torch("neg", {r});
  Trace out = run();
  const BoundSymbol& repeat = producer(out, first(out, "ltorch.neg").args[0]);
  EXPECT_EQ(repeat.printed_callee(), "ltorch.repeat");
  EXPECT_EQ(producer(out, repeat.args[0]).printed_callee(), "prims.clone");
}

TEST_F(Functionalization, AnEffectInsideARegionIsRefused) {
  Value c = pred();
  Value x = input({3});
  b.prim("branch_begin", {c});
  b.set_source("f.py:3 in f: x.mul_(2)");
  b.opaque("torch.Tensor.mul_", {x, I(2)}, {}, P(b.new_tensor(b.meta(x))));
  b.prim("branch_end", {c});
  trace.output = x;
  try {
    functionalize(trace);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "functionalize: torch.Tensor.mul_ at f.py:3")) << e.what();
  }
}

// ---- refusals ----

TEST_F(Functionalization, AWriteThroughAnExpandedViewIsRefused) {
  Value x = input({1, 3});
  b.set_source("f.py:2 in f: e = x.expand(2, 3)");
  Value e = b.torch("expand", {x, Value::ints({2, 3})});
  b.set_source("f.py:3 in f: e[0] = 1");
  copy(b.torch("getitem", {e, I(0)}), I(1));
  trace.output = x;
  try {
    functionalize(trace);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "functionalize: cannot write through ltorch.expand at f.py:2")) << e.what();
    EXPECT_TRUE(contains(e.what(), "broadcast_in_dim")) << e.what();
    EXPECT_TRUE(contains(e.what(), "ltorch.copy_ at f.py:3")) << e.what();
  }
}

TEST_F(Functionalization, UnbalancedMarkersAreRefused) {
  Value c = pred(), d = pred();
  b.prim("branch_begin", {c});
  trace.output = c;
  EXPECT_THROW(functionalize(trace), std::runtime_error);
  b.prim("branch_end", {d});  // another predicate
  EXPECT_THROW(functionalize(trace), std::runtime_error);
}

// ---- no writes ----

TEST_F(Functionalization, ATraceWithoutWritesIsUnchanged) {
  Value x = input({2, 3});
  Value v = b.torch("getitem", {x, I(0)});
  b.opaque("torch._C._set_grad_enabled", {Value(false)}, {}, Value());  // an effect that reads no tensor
  trace.output = b.torch("exp", {v});
  Trace out = run();
  ASSERT_EQ(out.symbols.size(), trace.symbols.size());
  for (size_t i = 0; i < out.symbols.size(); ++i) {
    EXPECT_EQ(out.symbols[i].sym, trace.symbols[i].sym);
    EXPECT_EQ(out.symbols[i].args, trace.symbols[i].args);
    EXPECT_EQ(out.symbols[i].output, trace.symbols[i].output);
  }
  EXPECT_EQ(out.output, trace.output);
}

TEST_F(Functionalization, IsTheFirstPass) {
  ASSERT_FALSE(pass_table().empty());
  EXPECT_EQ(pass_table().front().name, "functionalize");
}

// ---- the ops ----

TEST_F(Functionalization, OpsCheckTheirArguments) {
  Value x = input({2, 3});
  EXPECT_THROW(b.torch("copy_", {x, input({4})}), ops::OpError);
  EXPECT_THROW(b.prim("branch_begin", {input({2}, false, DType::Bool)}), ops::OpError);
  EXPECT_THROW(b.prim("branch_begin", {input({})}), ops::OpError);
  EXPECT_THROW(b.prim("slice_update", {x, input({1, 2}), Value::ints({0, 0}), Value::ints({1, 3})}), ops::OpError);
  EXPECT_NO_THROW(b.prim("slice_update", {x, input({1, 2}), Value::ints({0, 0}), Value::ints({1, 3}), Value::ints({1, 2})}));
  EXPECT_TRUE(b.torch("copy_", {x, input({3})}).is_none());
  Value d = b.torch("detach", {input({3}, true)});
  EXPECT_FALSE(b.meta(d).requires_grad);
  try {
    b.torch("copy_", {x, input({4})});
  } catch (const ops::OpError& e) {
    EXPECT_TRUE(contains(e.what(), "ltorch.copy_")) << e.what();
    EXPECT_TRUE(contains(e.what(), "'src'")) << e.what();
  }
}

}  // namespace
}  // namespace thunder::passes
