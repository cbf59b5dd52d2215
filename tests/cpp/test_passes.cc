// Tests of the passes (passes/passes.h): DCE, CSE, constant folding, executor
// claiming, the pipeline, and the verifier they rely on.
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "ops/op_table.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

using ir::DType;
using ir::TensorMeta;
using ir::Value;
using ops::Builder;

Value P(ProxyId id) { return Value(ir::ProxyRef{id}); }
Value I(int64_t i) { return Value(i); }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The printed callees of a trace's top-level symbols, in order.
std::vector<std::string> callees(const Trace& t) {
  std::vector<std::string> out;
  for (const ir::BoundSymbol& b : t.symbols) out.push_back(b.printed_callee());
  return out;
}

using Names = std::vector<std::string>;

class Passes : public ::testing::Test {
 protected:
  Trace trace;
  Builder b{trace};

  Value input(DType dtype, std::vector<int64_t> shape) {
    return P(b.add_input_tensor(TensorMeta{dtype, ir::dims_of(shape)}));
  }
  // An opaque call that mutates `x` in place (tagged kEffect) and returns a new proxy.
  Value mutate(const Value& x) {
    Value out = P(b.new_tensor(b.meta(x)));
    return b.opaque("torch.Tensor.add_", {x, I(1)}, {}, out);
  }
  // An opaque call with no effects (as the bindings make with effect=false).
  Value pure_opaque(const Value& x) {
    Value out = P(b.new_tensor(b.meta(x)));
    b.opaque("torch.special.expit", {x}, {}, out);
    trace.symbols.back().sym = ops::opaque_symbol(false);
    return out;
  }
};

// ---- dead-code elimination ----

TEST_F(Passes, DceRemovesAnUnusedPureSymbol) {
  Value x = input(DType::Float32, {2});
  b.torch("exp", {x});
  trace.output = b.torch("neg", {x});
  Trace out = dead_code_elimination(trace);
  EXPECT_EQ(callees(out), (Names{"ltorch.neg"}));
  EXPECT_EQ(out.output, trace.output);
  EXPECT_EQ(out.provenance, "Dead-code elimination");
  EXPECT_NO_THROW(ir::verify(out));
}

TEST_F(Passes, DceKeepsWhatTheOutputNeeds) {
  Value x = input(DType::Float32, {2});
  trace.output = b.torch("neg", {b.torch("exp", {x})});
  EXPECT_EQ(callees(dead_code_elimination(trace)), (Names{"ltorch.exp", "ltorch.neg"}));
}

TEST_F(Passes, DceKeepsAnUnusedEffectfulOpaqueSymbol) {
  Value x = input(DType::Float32, {2});
  mutate(x);
  trace.output = b.torch("neg", {x});
  EXPECT_EQ(callees(dead_code_elimination(trace)), (Names{"torch.Tensor.add_", "ltorch.neg"}));
}

TEST_F(Passes, DceKeepsTheInputsOfEffectfulSymbols) {
  Value x = input(DType::Float32, {2});
  mutate(b.torch("exp", {x}));
  trace.output = x;
  EXPECT_EQ(callees(dead_code_elimination(trace)), (Names{"ltorch.exp", "torch.Tensor.add_"}));
}

TEST_F(Passes, DceRemovesAnUnusedPureOpaqueSymbol) {
  Value x = input(DType::Float32, {2});
  pure_opaque(x);
  trace.output = b.torch("neg", {x});
  EXPECT_EQ(callees(dead_code_elimination(trace)), (Names{"ltorch.neg"}));
}

TEST_F(Passes, PassesDoNotModifyTheirInput) {
  Value x = input(DType::Float32, {2});
  b.torch("exp", {x});
  b.torch("exp", {x});
  trace.output = b.torch("neg", {x});
  std::string before = ir::to_python(trace);
  dead_code_elimination(trace);
  common_subexpression_elimination(trace);
  constant_folding(trace, {});
  EXPECT_EQ(ir::to_python(trace), before);
}

// ---- common-subexpression elimination ----

TEST_F(Passes, CseMergesIdenticalCallsAndRewritesLaterUses) {
  Value x = input(DType::Float32, {2});
  Value e1 = b.torch("exp", {x});
  Value e2 = b.torch("exp", {x});
  trace.output = b.torch("add", {e1, e2});
  Trace out = common_subexpression_elimination(trace);
  ASSERT_EQ(callees(out), (Names{"ltorch.exp", "ltorch.add"}));
  const ir::BoundSymbol& add = out.symbols[1];
  EXPECT_EQ(add.args[0], e1);
  EXPECT_EQ(add.args[1], e1);
  // The decomposition reads the merged value too.
  ASSERT_FALSE(add.subsymbols.empty());
  EXPECT_EQ(add.subsymbols.back().args[1], e1);
  EXPECT_EQ(out.provenance, "Common-subexpression elimination");
  EXPECT_NO_THROW(ir::verify(out));
}

TEST_F(Passes, CseRewritesTheTraceOutput) {
  Value x = input(DType::Float32, {2});
  Value e1 = b.torch("exp", {x});
  Value n1 = b.torch("neg", {e1});
  Value e2 = b.torch("exp", {x});
  trace.output = Value::tuple({n1, b.torch("abs", {e2})});
  Trace out = common_subexpression_elimination(trace);
  EXPECT_EQ(callees(out), (Names{"ltorch.exp", "ltorch.neg", "ltorch.abs"}));
  EXPECT_EQ(out.symbols[2].args[0], e1);
}

TEST_F(Passes, CseDoesNotMergeDifferentArguments) {
  Value x = input(DType::Float32, {2}), y = input(DType::Float32, {2});
  Value a = b.torch("mul", {x, I(2)});
  Value c = b.torch("mul", {x, I(3)});
  Value d = b.torch("mul", {y, I(2)});
  trace.output = Value::tuple({a, c, d});
  EXPECT_EQ(common_subexpression_elimination(trace).symbols.size(), 3u);
}

TEST_F(Passes, CseDoesNotMergeAcrossAnEffectfulOpaqueSymbol) {
  Value x = input(DType::Float32, {2});
  Value e1 = b.torch("exp", {x});
  mutate(x);
  Value e2 = b.torch("exp", {x});
  trace.output = b.torch("add", {e1, e2});
  Trace out = common_subexpression_elimination(trace);
  EXPECT_EQ(callees(out), (Names{"ltorch.exp", "torch.Tensor.add_", "ltorch.exp", "ltorch.add"}));
  EXPECT_EQ(out.symbols[3].args[1], e2);
}

TEST_F(Passes, CseNeverMergesEffectfulSymbols) {
  Value x = input(DType::Float32, {2});
  mutate(x);
  mutate(x);
  trace.output = x;
  EXPECT_EQ(common_subexpression_elimination(trace).symbols.size(), 2u);
}

TEST_F(Passes, CseKeepsReturnedValuesDistinct) {
  Value x = input(DType::Float32, {2});
  trace.output = Value::tuple({b.torch("exp", {x}), b.torch("exp", {x})});
  EXPECT_EQ(common_subexpression_elimination(trace).symbols.size(), 2u);
}

TEST_F(Passes, CseDoesNotMergeAPrimWithTheTorchOpOfTheSameName) {
  // prims.exp keeps an integer dtype; ltorch.exp promotes to float32.
  Value x = input(DType::Int64, {2});
  Value p = b.prim("exp", {x});
  Value t = b.torch("exp", {x});
  ASSERT_NE(b.meta(p).dtype, b.meta(t).dtype);
  trace.output = b.torch("add", {p, t});
  Trace out = common_subexpression_elimination(trace);
  EXPECT_EQ(callees(out), (Names{"prims.exp", "ltorch.exp", "ltorch.add"}));
  EXPECT_EQ(out.symbols[2].args[1], t);
}

// ---- constant folding ----

TEST_F(Passes, ConstantFoldingFoldsNumberArithmetic) {
  Value x = input(DType::Float32, {2});
  Value five = b.prim("add", {I(2), I(3)});
  Value scale = b.prim("mul", {five, Value(2.5)});
  trace.output = b.torch("mul", {x, scale});
  Trace out = constant_folding(trace, {});
  ASSERT_EQ(callees(out), (Names{"ltorch.mul"}));
  EXPECT_EQ(out.symbols[0].args[1], Value(12.5));
  ASSERT_FALSE(out.symbols[0].subsymbols.empty());
  EXPECT_EQ(out.symbols[0].subsymbols.back().args[1], Value(12.5));  // and in the decomposition
  EXPECT_EQ(out.provenance, "Constant folding");
  EXPECT_NO_THROW(ir::verify(out));
  EXPECT_TRUE(contains(ir::to_python(out), "ltorch.mul(t0, 12.5)"));
}

TEST_F(Passes, ConstantFoldingFollowsPythonNumberSemantics) {
  Value x = input(DType::Float32, {2});
  Value q = b.prim("div", {I(7), I(2)});       // true division: 3.5
  Value i = b.prim("sub", {I(7), I(9)});       // stays an int: -2
  Value n = b.prim("neg", {I(4)});             // -4
  Value c = b.prim("lt", {I(2), Value(2.5)});  // True
  Value y = b.torch("add", {x, q});
  Value z = b.torch("mul", {y, i});
  Value w = b.torch("sub", {z, n});
  trace.output = b.torch("where", {input(DType::Bool, {2}), w, c});
  Trace out = constant_folding(trace, {});
  ASSERT_EQ(callees(out), (Names{"ltorch.add", "ltorch.mul", "ltorch.sub", "ltorch.where"}));
  EXPECT_EQ(out.symbols[0].args[1], Value(3.5));
  EXPECT_EQ(out.symbols[1].args[1], I(-2));
  EXPECT_EQ(out.symbols[2].args[1], I(-4));
  EXPECT_EQ(out.symbols[3].args[2], Value(true));
}

TEST_F(Passes, ConstantFoldingFoldsTorchOpsOverNumbersAway) {
  Value x = input(DType::Float32, {2});
  Value p = b.torch("mul", {b.prim("sub", {I(7), I(9)}), b.prim("neg", {I(4)})});  // -2 * -4
  ASSERT_FALSE(trace.proxy(p.proxy()).is_tensor);
  trace.output = b.torch("add", {x, p});
  Trace out = constant_folding(trace, {});
  ASSERT_EQ(callees(out), (Names{"ltorch.add"}));
  EXPECT_EQ(out.symbols[0].args[1], I(8));
}

TEST_F(Passes, ConstantFoldingFoldsTorchOpsOverNumbersThroughTheirDecomposition) {
  Value x = input(DType::Float32, {2});
  Value s = b.torch("add", {I(2), I(3)}, {{"alpha", I(2)}});  // 2 + 2 * 3
  trace.output = b.torch("mul", {x, s});
  Trace out = constant_folding(trace, {});
  ASSERT_EQ(callees(out), (Names{"ltorch.mul"}));
  EXPECT_EQ(out.symbols[0].args[1], I(8));
}

TEST_F(Passes, ConstantFoldingLeavesDivisionByZeroToRunTime) {
  Value x = input(DType::Float32, {2});
  trace.output = b.torch("mul", {x, b.prim("div", {I(1), I(0)})});
  EXPECT_EQ(callees(constant_folding(trace, {})), (Names{"prims.div", "ltorch.mul"}));
}

TEST_F(Passes, ConstantFoldingLeavesNumberInputsAlone) {
  Value x = input(DType::Float32, {2});
  Value n = P(b.add_input_number(ir::NumberType::Int));
  trace.output = b.torch("mul", {x, b.prim("add", {n, I(1)})});
  EXPECT_EQ(callees(constant_folding(trace, {})), (Names{"prims.add", "ltorch.mul"}));
}

// An evaluator that hands out constant indices in order and records what it saw.
struct RecordingEvaluator {
  std::vector<std::string> calls;
  std::vector<std::map<ProxyId, int64_t>> constants;
  int64_t next = 0;
  Evaluator fn() {
    return [this](const Trace&, const ir::BoundSymbol& bsym, const std::map<ProxyId, int64_t>& c) -> std::optional<int64_t> {
      calls.push_back(bsym.printed_callee());
      constants.push_back(c);
      return next++;
    };
  }
};

TEST_F(Passes, ConstantFoldingReplacesTensorOpsOverConstantsWithTensorConstants) {
  Value x = input(DType::Float32, {3});
  Value ones = b.torch("ones", {Value::ints({3})});
  Value twos = b.torch("mul", {ones, I(2)});
  trace.output = b.torch("add", {x, twos});
  RecordingEvaluator ev;
  PassContext ctx;
  ctx.evaluator = ev.fn();
  Trace out = constant_folding(trace, ctx);
  ASSERT_EQ(callees(out), (Names{"prims.tensor_constant", "prims.tensor_constant", "ltorch.add"}));
  EXPECT_EQ(ev.calls, (Names{"ltorch.ones", "ltorch.mul"}));
  EXPECT_TRUE(ev.constants[0].empty());
  EXPECT_EQ(ev.constants[1], (std::map<ProxyId, int64_t>{{ones.proxy(), 0}}));
  const ir::BoundSymbol& c = out.symbols[1];
  EXPECT_EQ(c.output, twos);  // the proxy keeps its name, so later uses need no rewrite
  EXPECT_EQ(c.args[0], I(1));
  EXPECT_EQ(c.args[1], Value(DType::Float32));
  EXPECT_EQ(c.args[2], Value::ints({3}));
  EXPECT_EQ(c.args[3], Value(ir::Str{"cpu"}));
  EXPECT_EQ(out.symbols[2].args[1], twos);
  EXPECT_NO_THROW(ir::verify(out));
  EXPECT_TRUE(contains(ir::to_python(out), "t2 = _constants[1]"));
}

TEST_F(Passes, ConstantFoldingGivesTheEvaluatorOnlyTheConstantsTheSymbolReads) {
  Value x = input(DType::Float32, {3});
  Value ones = b.torch("ones", {Value::ints({3})});
  Value zeros = b.torch("zeros", {Value::ints({3})});
  Value sum = b.torch("add", {zeros, zeros});
  trace.output = b.torch("add", {b.torch("mul", {x, ones}), sum});
  RecordingEvaluator ev;
  PassContext ctx;
  ctx.evaluator = ev.fn();
  Trace out = constant_folding(trace, ctx);
  ASSERT_EQ(ev.calls, (Names{"ltorch.ones", "ltorch.zeros", "ltorch.add"}));
  EXPECT_EQ(ev.constants[2], (std::map<ProxyId, int64_t>{{zeros.proxy(), 1}}));
}

TEST_F(Passes, ConstantFoldingDoesNotFoldATraceOutput) {
  Value ones = b.torch("ones", {Value::ints({3})});
  trace.output = b.torch("mul", {ones, I(2)});
  RecordingEvaluator ev;
  PassContext ctx;
  ctx.evaluator = ev.fn();
  Trace out = constant_folding(trace, ctx);
  EXPECT_EQ(callees(out), (Names{"prims.tensor_constant", "ltorch.mul"}));
  EXPECT_EQ(ev.calls, (Names{"ltorch.ones"}));
}

TEST_F(Passes, ConstantFoldingDoesNotFoldWhatAReturnedViewAliases) {
  Value ones = b.torch("ones", {Value::ints({6})});
  trace.output = b.torch("reshape", {ones, Value::ints({2, 3})});
  RecordingEvaluator ev;
  PassContext ctx;
  ctx.evaluator = ev.fn();
  EXPECT_EQ(callees(constant_folding(trace, ctx)), (Names{"ltorch.ones", "ltorch.reshape"}));
  EXPECT_TRUE(ev.calls.empty());
}

TEST_F(Passes, ConstantFoldingDoesNotFoldEffectfulSymbols) {
  Value x = input(DType::Float32, {3});
  Value ones = b.torch("ones", {Value::ints({3})});
  mutate(ones);
  trace.output = b.torch("add", {x, ones});
  RecordingEvaluator ev;
  PassContext ctx;
  ctx.evaluator = ev.fn();
  // `ones` is mutated, so it is observable: neither it nor the mutation folds.
  EXPECT_EQ(callees(constant_folding(trace, ctx)), (Names{"ltorch.ones", "torch.Tensor.add_", "ltorch.add"}));
}

TEST_F(Passes, ConstantFoldingKeepsSymbolsTheEvaluatorDeclines) {
  Value x = input(DType::Float32, {3});
  trace.output = b.torch("add", {x, b.torch("ones", {Value::ints({3})})});
  PassContext ctx;
  ctx.evaluator = [](const Trace&, const ir::BoundSymbol&, const std::map<ProxyId, int64_t>&) {
    return std::optional<int64_t>();
  };
  EXPECT_EQ(callees(constant_folding(trace, ctx)), (Names{"ltorch.ones", "ltorch.add"}));
  EXPECT_EQ(callees(constant_folding(trace, {})), (Names{"ltorch.ones", "ltorch.add"}));  // no evaluator
}

TEST_F(Passes, ConstantFoldingSkipsLargeTensors) {
  Value x = input(DType::Float32, {100});
  trace.output = b.torch("add", {x, b.torch("ones", {Value::ints({100})})});
  RecordingEvaluator ev;
  PassContext ctx;
  ctx.evaluator = ev.fn();
  ctx.max_constant_numel = 10;
  EXPECT_EQ(callees(constant_folding(trace, ctx)), (Names{"ltorch.ones", "ltorch.add"}));
  EXPECT_TRUE(ev.calls.empty());
}

// ---- observable proxies ----

TEST_F(Passes, ObservableProxiesAreOutputsEffectInputsAndWhatTheyAlias) {
  Value x = input(DType::Float32, {6});
  Value e = b.torch("exp", {x});
  Value v = b.torch("reshape", {e, Value::ints({2, 3})});
  Value m = b.torch("neg", {x});
  mutate(m);
  Value unrelated = b.torch("abs", {x});
  trace.output = v;
  std::set<ProxyId> obs = observable_proxies(trace);
  EXPECT_TRUE(obs.count(v.proxy()));
  EXPECT_TRUE(obs.count(e.proxy()));  // the reshape may return a view of it
  EXPECT_TRUE(obs.count(m.proxy()));
  EXPECT_FALSE(obs.count(unrelated.proxy()));
}

// ---- the pipeline ----

TEST_F(Passes, RunPipelineReturnsOneResultPerPassWithProvenance) {
  Value x = input(DType::Float32, {2});
  Value e1 = b.torch("exp", {x});
  Value e2 = b.torch("exp", {x});
  b.torch("abs", {x});
  trace.output = b.torch("add", {e1, e2});
  std::vector<PassResult> results = run_pipeline(trace, {"cse", "constant_folding", "dce"}, {});
  ASSERT_EQ(results.size(), 3u);
  const char* titles[] = {"Common-subexpression elimination", "Constant folding", "Dead-code elimination"};
  const char* names[] = {"cse", "constant_folding", "dce"};
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].name, names[i]);
    EXPECT_TRUE(contains(results[i].trace.provenance, titles[i])) << results[i].trace.provenance;
    EXPECT_TRUE(contains(results[i].trace.provenance, "took")) << results[i].trace.provenance;
    EXPECT_GE(results[i].seconds, 0.0);
    EXPECT_TRUE(contains(ir::to_python(results[i].trace), "# " + std::string(titles[i]) + " (took "));
  }
  // Each pass runs on the previous one's result.
  EXPECT_EQ(callees(results[0].trace), (Names{"ltorch.exp", "ltorch.abs", "ltorch.add"}));
  EXPECT_EQ(callees(results[2].trace), (Names{"ltorch.exp", "ltorch.add"}));
}

TEST_F(Passes, RunPipelineOfNoPassesReturnsNothing) {
  trace.output = b.torch("exp", {input(DType::Float32, {2})});
  EXPECT_TRUE(run_pipeline(trace, {}, {}).empty());
}

TEST_F(Passes, RunPipelineRejectsAnUnknownPassName) {
  trace.output = b.torch("exp", {input(DType::Float32, {2})});
  EXPECT_THROW(run_pipeline(trace, {"dce", "no_such_pass"}, {}), std::invalid_argument);
  try {
    run_pipeline(trace, {"no_such_pass"}, {});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "no_such_pass")) << e.what();
  }
}

TEST(PassTable, ListsTheCorePassesInTheDefaultOrder) {
  std::vector<std::string> names;
  for (const Pass& p : pass_table()) {
    EXPECT_FALSE(p.title.empty()) << p.name;
    EXPECT_NE(p.fn, nullptr) << p.name;
    names.push_back(p.name);
  }
  // functionalize, cse, constant_folding, dce, claim come first and in this order; later passes may follow.
  ASSERT_GE(names.size(), 5u);
  EXPECT_EQ(Names(names.begin(), names.begin() + 5),
            (Names{"functionalize", "cse", "constant_folding", "dce", "claim"}));
}

// ---- the verifier ----

TEST_F(Passes, VerifyAcceptsABuiltTrace) {
  Value x = input(DType::Float32, {2});
  trace.output = b.torch("softmax", {x, I(0)});
  EXPECT_NO_THROW(ir::verify(trace));
}

TEST_F(Passes, VerifyThrowsOnUseBeforeDef) {
  Value x = input(DType::Float32, {2});
  Value e = b.torch("exp", {x});
  trace.output = b.torch("neg", {e});
  std::swap(trace.symbols[0], trace.symbols[1]);
  try {
    ir::verify(trace);
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& err) {
    EXPECT_TRUE(contains(err.what(), "uses " + trace.proxy(e.proxy()).name + " before")) << err.what();
  }
}

TEST_F(Passes, VerifyThrowsOnRedefinitionAndUndefinedOutputs) {
  Value x = input(DType::Float32, {2});
  trace.output = b.torch("exp", {x});
  Trace twice = trace;
  twice.symbols.push_back(twice.symbols[0]);
  EXPECT_THROW(ir::verify(twice), std::logic_error);
  Trace undefined = trace;
  undefined.output = P(undefined.new_tensor(TensorMeta{DType::Float32, {2}}));
  EXPECT_THROW(ir::verify(undefined), std::logic_error);
  Trace dup_input = trace;
  dup_input.inputs.push_back(dup_input.inputs[0]);
  EXPECT_THROW(ir::verify(dup_input), std::logic_error);
}

// ---- executor claiming ----

TEST_F(Passes, ClaimingDescendsIntoUnclaimedDecompositions) {
  Value x = input(DType::Float32, {2, 5});
  b.set_source("model.py:7 in forward: return x.add(x).softmax(-1)");
  Value s = b.torch("add", {x, x});
  trace.output = b.torch("softmax", {s, I(-1)});
  PassContext ctx;
  ctx.executors.push_back(ExecutorTable{"torch",
                                        {{"ltorch.add", "torch.add"},
                                         {"ltorch.amax", "torch.amax"},
                                         {"ltorch.sub", "torch.sub"},
                                         {"ltorch.exp", "torch.exp"},
                                         {"ltorch.sum", "torch.sum"},
                                         {"ltorch.reciprocal", "torch.reciprocal"},
                                         {"ltorch.mul", "torch.mul"}}});
  Trace out = claim_executors(trace, ctx);
  EXPECT_EQ(callees(out), (Names{"torch.add", "torch.amax", "torch.sub", "torch.exp", "torch.sum", "torch.reciprocal",
                                 "torch.mul"}));
  for (const ir::BoundSymbol& bsym : out.symbols) {
    EXPECT_EQ(bsym.executor, "torch");
    EXPECT_EQ(bsym.source, "model.py:7 in forward: return x.add(x).softmax(-1)");
  }
  EXPECT_EQ(out.symbols.back().output, trace.output);
  EXPECT_EQ(out.provenance, "Executor claiming");
  EXPECT_NO_THROW(ir::verify(out));
}

TEST_F(Passes, ClaimingCanDescendToPrims) {
  Value x = input(DType::Float16, {2, 5});
  trace.output = b.torch("add", {b.torch("softmax", {x, I(1)}), x});
  ExecutorTable torch{"torch", {{"ltorch.add", "torch.add"}}};
  ExecutorTable prims{"prims", {}};
  for (const ops::OpDef* def : ops::ops_of(ir::Level::Prim))
    prims.callees["prims." + def->symbol.name] = "prims_impl." + def->symbol.name;
  PassContext ctx;
  ctx.executors = {torch, prims};
  Trace out = claim_executors(trace, ctx);
  ASSERT_GT(out.symbols.size(), 2u);
  EXPECT_EQ(out.symbols.back().executor, "torch");
  for (size_t i = 0; i + 1 < out.symbols.size(); ++i) {
    EXPECT_EQ(out.symbols[i].executor, "prims") << out.symbols[i].printed_callee();
    EXPECT_EQ(out.symbols[i].sym->level, ir::Level::Prim);
  }
  EXPECT_NO_THROW(ir::verify(out));
}

TEST_F(Passes, ClaimingPrefersTheFirstExecutor) {
  trace.output = b.torch("exp", {input(DType::Float32, {2})});
  PassContext ctx;
  ctx.executors = {ExecutorTable{"fast", {{"ltorch.exp", "fast.exp"}}},
                   ExecutorTable{"torch", {{"ltorch.exp", "torch.exp"}}}};
  Trace out = claim_executors(trace, ctx);
  ASSERT_EQ(out.symbols.size(), 1u);
  EXPECT_EQ(out.symbols[0].executor, "fast");
  EXPECT_TRUE(contains(ir::to_python(out), "t1 = fast.exp(t0)"));
}

TEST_F(Passes, ClaimingKeepsTheCalleeOfOpaqueSymbols) {
  Value x = input(DType::Float32, {2});
  trace.output = mutate(x);
  PassContext ctx;
  ctx.executors = {ExecutorTable{"torch", {{"opaque", ""}}}};
  Trace out = claim_executors(trace, ctx);
  ASSERT_EQ(out.symbols.size(), 1u);
  EXPECT_EQ(out.symbols[0].executor, "torch");
  EXPECT_EQ(out.symbols[0].printed_callee(), "torch.Tensor.add_");
}

TEST_F(Passes, ClaimingWithNoExecutorThrowsNamingTheOp) {
  trace.output = b.prim("exp", {input(DType::Float32, {2})});
  try {
    claim_executors(trace, {});
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "prims.exp")) << e.what();
  }
}

TEST_F(Passes, ClaimingATorchOpWithNoExecutorThrowsNamingAnOp) {
  trace.output = b.torch("add", {input(DType::Float32, {2}), I(1)});
  try {
    claim_executors(trace, {});
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(contains(e.what(), "add")) << e.what();
  }
}

// ---- fusion ----

// A group that grows after one of its values was made depends, from then on, on what its new members read:
// a reader of that value may not join a group the new members depend on. Here G1 = {a, k, m} depends on
// G2 = {p} through the torch op u (k reads u); r reads m (made when G1 depended on nothing) and p, and must not
// join G2, which would then run both before u (u reads p) and after it (r reads m, after k, which reads u).
TEST_F(Passes, FusionGroupsStayConvexWhenAGroupGainsDependencies) {
  Value x = input(DType::Float32, {4});
  Value a = b.prim("add", {x, I(1)});
  Value p = b.prim("mul", {x, I(2)});
  Value u = b.prim("neg", {p});
  Value k = b.prim("add", {a, u});
  Value m = b.prim("mul", {a, I(3)});
  Value r = b.prim("add", {p, m});
  trace.output = Value::tuple({k, r});
  for (ir::BoundSymbol& bsym : trace.symbols) bsym.executor = bsym.output == u ? "torch" : "cpu";
  ExecutorTable cpu{"cpu", {{"prims.add", ""}, {"prims.mul", ""}}, true};
  ExecutorTable torch{"torch", {{"prims.add", "torch.add"}, {"prims.mul", "torch.mul"}, {"prims.neg", "torch.neg"}}};
  PassContext ctx;
  ctx.executors = {cpu, torch};
  Trace out;
  ASSERT_NO_THROW(out = fuse(trace, ctx));
  EXPECT_NO_THROW(ir::verify(out));
  // G2, then u, then G1 (which now holds r).
  EXPECT_EQ(callees(out), (Names{"cpu_fusion1", "prims.neg", "cpu_fusion0"})) << ir::to_python(out);
}

}  // namespace
}  // namespace thunder::passes
