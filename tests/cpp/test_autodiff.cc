// Tests of the autodiff (passes::split_forward_backward) and the VJP table (ops/vjp.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/printer.h"
#include "ops/op_table.h"
#include "ops/vjp.h"
#include "passes/min_cut.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

using ir::DType;
using ir::TensorMeta;
using ir::Value;
using ops::Builder;

Value P(ProxyId id) { return Value(ir::ProxyRef{id}); }

std::vector<std::string> callees(const Trace& t) {
  std::vector<std::string> out;
  for (const ir::BoundSymbol& b : t.symbols) out.push_back(b.printed_callee());
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

class Autodiff : public ::testing::Test {
 protected:
  Trace trace;
  Builder b{trace};

  Value input(std::vector<int64_t> shape, bool requires_grad = true, DType dtype = DType::Float32) {
    return P(b.add_input_tensor(TensorMeta{dtype, ir::dims_of(shape), "cpu", requires_grad}));
  }
  // The names of a trace's input proxies.
  std::vector<std::string> input_names(const Trace& t) {
    std::vector<std::string> out;
    for (ProxyId id : t.inputs) out.push_back(t.proxy(id).name);
    return out;
  }
};

TEST_F(Autodiff, SinSavesItsInputAndTheBackwardMultipliesByCos) {
  Value x = input({3});
  Value y = b.prim("sin", {x});
  trace.output = Value::tuple({y});
  ForwardBackward fb = split_forward_backward(trace);
  EXPECT_NO_THROW(ir::verify(fb.forward));
  EXPECT_NO_THROW(ir::verify(fb.backward));
  EXPECT_EQ(fb.grad_outputs, (std::vector<size_t>{0}));
  EXPECT_EQ(fb.saved, 1u);
  // backward(saved x, grad of y) -> (grad of x,)
  ASSERT_EQ(fb.backward.inputs.size(), 2u);
  EXPECT_EQ(fb.backward.inputs[0], x.proxy());
  EXPECT_EQ(callees(fb.backward), (std::vector<std::string>{"prims.cos", "prims.mul"}));
  // Neither trace requires grad any more.
  for (const Trace* t : {&fb.forward, &fb.backward})
    for (const ir::ProxyInfo& p : t->proxies) EXPECT_FALSE(p.is_tensor && p.tensor.requires_grad);
}

TEST_F(Autodiff, GradientsOfAValueReadTwiceAreSummed) {
  Value x = input({4});
  trace.output = Value::tuple({b.prim("mul", {x, x})});
  ForwardBackward fb = split_forward_backward(trace);
  EXPECT_EQ(callees(fb.backward), (std::vector<std::string>{"prims.mul", "prims.mul", "prims.add"}));
}

TEST_F(Autodiff, InputsThatDoNotRequireGradGetNone) {
  Value x = input({2}), w = input({2}, false);
  trace.output = Value::tuple({b.torch("mul", {x, w})});
  ForwardBackward fb = split_forward_backward(trace);
  const std::vector<Value>& grads = fb.backward.output.items();
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_TRUE(grads[0].is_proxy());
  EXPECT_TRUE(grads[1].is_none());
  EXPECT_EQ(fb.saved, 1u);  // w: x's gradient is g * w
}

TEST_F(Autodiff, ElementwiseChainsFromInputsAreRecomputedNotSaved) {
  Value x = input({8});
  Value e = b.torch("exp", {x});
  Value s = b.torch("mul", {e, 2.0});
  trace.output = Value::tuple({b.torch("sin", {s})});
  ForwardBackward fb = split_forward_backward(trace);
  EXPECT_EQ(fb.saved, 1u);
  EXPECT_EQ(input_names(fb.backward)[0], trace.proxy(x.proxy()).name);
  EXPECT_TRUE(contains(callees(fb.backward), "ltorch.exp"));  // recomputed at the backward's start
}

TEST_F(Autodiff, AMatmulResultIsSavedNotRecomputed) {
  Value a = input({2, 3}), w = input({3, 4});
  Value m = b.torch("matmul", {a, w});
  trace.output = Value::tuple({b.torch("tanh", {m})});
  ForwardBackward fb = split_forward_backward(trace);
  EXPECT_FALSE(contains(callees(fb.backward), "ltorch.matmul"));
}

TEST_F(Autodiff, EffectsOnValuesThatRequireGradAreNotDifferentiated) {
  Value x = input({2});
  Value out = P(b.new_tensor(b.meta(x)));
  b.opaque("torch.nn.functional.dropout", {x}, {}, out);  // an opaque effect (random)
  trace.proxies[static_cast<size_t>(out.proxy())].tensor.requires_grad = true;
  trace.output = Value::tuple({out});
  try {
    split_forward_backward(trace);
    FAIL() << "expected NotDifferentiable";
  } catch (const NotDifferentiable& e) {
    EXPECT_NE(std::string(e.what()).find("torch.nn.functional.dropout"), std::string::npos);
  }
}

TEST_F(Autodiff, AnOpWithoutARuleUsesTheGenericRule) {
  Value x = input({2, 3});
  Value out = P(b.new_tensor(TensorMeta{DType::Float32, {2, 3}, "cpu", true}));
  b.opaque("torch.special.expit", {x}, {}, out);
  trace.symbols.back().sym = ops::opaque_symbol(false);
  trace.output = Value::tuple({out});
  ForwardBackward fb = split_forward_backward(trace);
  ASSERT_EQ(fb.backward.symbols.size(), 1u);
  EXPECT_EQ(fb.backward.symbols[0].callee, "autograd_vjp(torch.special.expit, (0, ))");
}

TEST_F(Autodiff, RecordsTheRuleEachTopLevelSymbolTook) {
  Value x = input({2, 3}), w = input({2, 3}, false);
  Value r = b.torch("relu", {x});   // its own rule
  Value s = b.torch("sin", {r});    // its decomposition's (prims.sin)
  Value out = P(b.new_tensor(TensorMeta{DType::Float32, {2, 3}, "cpu", true}));
  b.opaque("torch.special.expit", {s}, {}, out);  // the generic rule
  trace.symbols.back().sym = ops::opaque_symbol(false);
  Value m = b.torch("mul", {w, 2.0});  // requires no grad: not listed
  trace.output = Value::tuple({out, m});
  ForwardBackward fb = split_forward_backward(trace);
  ASSERT_EQ(fb.rules.size(), 3u);
  EXPECT_EQ(fb.rules[0].op, "ltorch.relu");
  EXPECT_EQ(fb.rules[0].rule, "own");
  EXPECT_EQ(fb.rules[1].op, "ltorch.sin");
  EXPECT_EQ(fb.rules[1].rule, "decomposition");
  EXPECT_TRUE(fb.rules[1].generic.empty());
  EXPECT_EQ(fb.rules[2].op, "torch.special.expit");
  EXPECT_EQ(fb.rules[2].rule, "generic");
}

TEST_F(Autodiff, CloneTakesTheGradientThrough) {
  Value x = input({4});
  trace.output = Value::tuple({b.torch("clone", {x})});
  ForwardBackward fb = split_forward_backward(trace);
  ASSERT_EQ(fb.rules.size(), 1u);
  EXPECT_EQ(fb.rules[0].rule, "decomposition");
  EXPECT_TRUE(fb.rules[0].generic.empty());  // prims.clone has a rule: no autograd_vjp
  EXPECT_TRUE(fb.backward.symbols.empty());
  EXPECT_EQ(fb.backward.output.items()[0].proxy(), fb.backward.inputs.back());  // the output's gradient itself
}

TEST_F(Autodiff, AMinimumCutSavesOneInputOfTwoRecomputedValues) {
  // The backward reads exp(m) and sin(m) (the weight gradients) and m (sin's derivative): saving m alone, and
  // recomputing both from it, saves half the bytes. A choice made value by value would need a tie to find it.
  Value a = input({4, 8}), w = input({8, 8}), w2 = input({8, 2}), w3 = input({8, 2});
  Value m = b.torch("matmul", {a, w});
  Value p = b.torch("exp", {m}), q = b.torch("sin", {m});
  trace.output = Value::tuple({b.torch("add", {b.torch("matmul", {p, w2}), b.torch("matmul", {q, w3})})});
  ForwardBackward fb = split_forward_backward(trace);
  EXPECT_NO_THROW(ir::verify(fb.forward));
  EXPECT_NO_THROW(ir::verify(fb.backward));
  const std::vector<ProxyId>& reads = fb.backward.inputs;
  EXPECT_NE(std::find(reads.begin(), reads.end(), m.proxy()), reads.end());
  EXPECT_EQ(std::find(reads.begin(), reads.end(), p.proxy()), reads.end());
  EXPECT_EQ(std::find(reads.begin(), reads.end(), q.proxy()), reads.end());
  EXPECT_TRUE(contains(callees(fb.backward), "ltorch.exp"));
  EXPECT_TRUE(contains(callees(fb.backward), "ltorch.sin"));
  EXPECT_FALSE(contains(callees(fb.backward), "ltorch.matmul"));
}

TEST_F(Autodiff, AValueIsRecomputedOnlyWhenThatSavesBytes) {
  // y = m + 1 takes as many bytes as m: saving y or m costs the same, and y is saved (nothing recomputed).
  Value a = input({4, 8}), w = input({8, 8}), w2 = input({8, 2});
  Value m = b.torch("matmul", {a, w});
  Value y = b.torch("add", {m, 1.0});
  trace.output = Value::tuple({b.torch("matmul", {y, w2})});
  ForwardBackward fb = split_forward_backward(trace);
  const std::vector<ProxyId>& reads = fb.backward.inputs;
  EXPECT_NE(std::find(reads.begin(), reads.end(), y.proxy()), reads.end());
  EXPECT_EQ(std::find(reads.begin(), reads.end(), m.proxy()), reads.end());
}

TEST_F(Autodiff, ABackwardForSomeOutputGradientsDifferentiatesOnlyWhatTheyReach) {
  Value x = input({3});
  trace.output = Value::tuple({b.prim("sin", {x}), b.prim("log", {x}), b.prim("exp", {x})});
  ForwardBackward fb = split_forward_backward(trace);
  // Only sin's gradient given: log's VJP (a division) and exp's are not computed, nor are the sums with them.
  Trace only_sin = specialize_backward(trace, fb.forward, {true, false, false});
  EXPECT_NO_THROW(ir::verify(only_sin));
  EXPECT_EQ(only_sin.inputs.size(), fb.backward.inputs.size());
  EXPECT_EQ(only_sin.boxed_inputs, fb.backward.boxed_inputs);
  EXPECT_EQ(callees(only_sin), (std::vector<std::string>{"prims.cos", "prims.mul"}));
  EXPECT_TRUE(specialize_backward(trace, fb.forward, {false, false, false}).output.items()[0].is_none());
  EXPECT_EQ(callees(specialize_backward(trace, fb.forward, {true, true, true})), callees(fb.backward));
  EXPECT_THROW(specialize_backward(trace, fb.forward, {true}), std::invalid_argument);
}

TEST_F(Autodiff, AZeroByRuleGradientIsGivenWhereItsOutputsIs) {
  // floor's VJP is zeros, which eager's autograd computes and passes on when floor's output has a gradient (sqrt's
  // VJP then divides them by 2 sqrt(x): NaN at 0, in eager too), and not at all when it has none.
  Value x = input({3});
  Value y = b.prim("sqrt", {x});
  trace.output = Value::tuple({y, b.prim("floor", {y}), b.prim("sin", {x})});
  ForwardBackward fb = split_forward_backward(trace);
  EXPECT_TRUE(contains(callees(specialize_backward(trace, fb.forward, {false, true, false})), "prims.div"));
  const std::vector<std::string> only_sin = callees(specialize_backward(trace, fb.forward, {false, false, true}));
  EXPECT_FALSE(contains(only_sin, "prims.div")) << only_sin.size();
  EXPECT_TRUE(contains(only_sin, "prims.cos"));
}

TEST_F(Autodiff, ABackwardForSomeOutputGradientsRecomputesWhatTheForwardDoesNotSave) {
  // The forward saves x only (an input: free), from which the full backward recomputes both outputs, which their
  // VJPs read; the backward of the second output's gradient recomputes only tanh(cos(x)).
  Value x = input({4});
  trace.output = Value::tuple({b.prim("exp", {b.prim("sin", {x})}), b.prim("tanh", {b.prim("cos", {x})})});
  ForwardBackward fb = split_forward_backward(trace);
  ASSERT_EQ(fb.saved, 1u);
  Trace second = specialize_backward(trace, fb.forward, {false, true});
  EXPECT_NO_THROW(ir::verify(second));
  EXPECT_EQ(second.inputs, fb.backward.inputs);
  const std::vector<std::string> ops = callees(second);
  EXPECT_TRUE(contains(ops, "prims.tanh") && contains(ops, "prims.cos"));
  EXPECT_FALSE(contains(ops, "prims.exp"));  // (prims.sin: the VJP of cos)
}

TEST(FlowGraph, MaximumFlowAndTheCutNearestTheSink) {
  // 0 -> 2 (3), 0 -> 3 (2), 2 -> 3 (5), 2 -> 1 (2), 3 -> 1 (3): the maximum flow is 5.
  FlowGraph g(4);
  g.add_edge(0, 2, 3);
  g.add_edge(0, 3, 2);
  g.add_edge(2, 3, 5);
  g.add_edge(2, 1, 2);
  g.add_edge(3, 1, 3);
  EXPECT_EQ(g.max_flow(0, 1), 5);
  // Both the cut at the source's edges and the one at the sink's cost 5: the sink's side is the sink alone.
  EXPECT_EQ(g.sink_side(1), (std::vector<bool>{false, true, false, false}));
  EXPECT_THROW(g.add_edge(0, 4, 1), std::out_of_range);
}

TEST(FlowGraph, AChainIsCutAtItsNarrowestEdge) {
  FlowGraph g(5);  // 0 -> 2 -> 3 -> 4 -> 1 with capacities inf, 7, 4, 9
  g.add_edge(0, 2, FlowGraph::kInfinite);
  g.add_edge(2, 3, 7);
  g.add_edge(3, 4, 4);
  g.add_edge(4, 1, 9);
  EXPECT_EQ(g.max_flow(0, 1), 4);
  EXPECT_EQ(g.sink_side(1), (std::vector<bool>{false, true, false, false, true}));
}

TEST(VjpTable, KeyedByOpIdentity) {
  const ops::OpDef* sin = ops::find_op(ir::Level::Prim, "sin");
  const ops::OpDef* gt = ops::find_op(ir::Level::Prim, "gt");
  ASSERT_NE(sin, nullptr);
  EXPECT_NE(ops::find_vjp(&sin->symbol), nullptr);
  EXPECT_EQ(ops::find_vjp(&gt->symbol), nullptr);  // a comparison's result never carries a gradient
  ir::Symbol impostor = sin->symbol;                 // same name, another op
  EXPECT_EQ(ops::find_vjp(&impostor), nullptr);
}

}  // namespace
}  // namespace thunder::passes
