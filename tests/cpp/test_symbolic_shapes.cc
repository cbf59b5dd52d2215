// Tests of symbolic sizes: ir::Dim's arithmetic, ordering and printing, and the shape rules of the common ops
// on tensors whose sizes are symbols (computed where they are provable; SymbolicShapeError where not).
#include <gtest/gtest.h>

#include <string>

#include "codegen/expressions.h"
#include "codegen/kernel_plan.h"
#include "ir/dim.h"
#include "ir/printer.h"
#include "ir/trace.h"
#include "ops/op_table.h"

namespace thunder::ops {
namespace {

using ir::ProxyRef;
using ir::SymbolicShapeError;

TEST(Dim, ArithmeticNormalizesPolynomials) {
  const Dim s = Dim::symbol(0), t = Dim::symbol(1);
  EXPECT_EQ(s * 2 + s, s * 3);
  EXPECT_EQ((s + 1) * (s - 1), s * s - 1);
  EXPECT_EQ(s * t, t * s);
  EXPECT_EQ(s - s, Dim(0));
  EXPECT_TRUE((s - s).is_constant());
  EXPECT_EQ((s * 12 + 4).str(), "12*s0 + 4");
  EXPECT_EQ((Dim(1) - s).str(), "-s0 + 1");
  EXPECT_EQ((s * t * 2).str(), "2*s0*s1");
}

TEST(Dim, DividesOnlyExactly) {
  const Dim s = Dim::symbol(0), t = Dim::symbol(1);
  EXPECT_EQ((s * 768).divide(64, "op"), s * 12);
  EXPECT_EQ((s * t * 64).divide(t, "op"), s * 64);
  EXPECT_EQ((s * 4 + 8).ceil_divide(4, "op"), s + 2);
  EXPECT_EQ(Dim(7).ceil_divide(2, "op"), Dim(4));
  EXPECT_THROW((s * 3).divide(2, "op"), SymbolicShapeError);
  EXPECT_THROW(s.divide(t, "op"), SymbolicShapeError);
  EXPECT_THROW(s.value("ltorch.chunk"), SymbolicShapeError);
}

TEST(Dim, OrdersWhereProvableWithSymbolsAtLeastTwo) {
  const Dim s = Dim::symbol(0), t = Dim::symbol(1);
  EXPECT_TRUE(s > 1);
  EXPECT_FALSE(s == 1);  // sizes 0 and 1 are never symbols
  EXPECT_TRUE(s - 1 >= 1);
  EXPECT_TRUE(s * t + s > s - 1);
  EXPECT_FALSE(s + 1 < s);
  EXPECT_THROW((void)(s < 5), SymbolicShapeError);  // s may be 3 or 8
  EXPECT_THROW((void)(s < t), SymbolicShapeError);
}

class SymbolicOps : public ::testing::Test {
 protected:
  ir::Trace trace;
  Builder b{trace};
  Dim s;  // the sequence length
  Value x;  // [s, 768]

  void SetUp() override {
    s = Dim::symbol(b.add_input_number(ir::NumberType::Int));
    x = input({s, 768});
  }
  Value input(Shape shape, DType dtype = DType::Float32) {
    return Value(ProxyRef{b.add_input_tensor(TensorMeta{dtype, std::move(shape)})});
  }
  Shape shape(const Value& v) { return b.meta(v).shape; }
  const ir::BoundSymbol& last() { return trace.symbols.back(); }
};

TEST_F(SymbolicOps, ElementwiseBroadcastsAgainstIntegersAndOnes) {
  EXPECT_EQ(shape(b.torch("add", {x, input({768})})), (Shape{s, 768}));
  EXPECT_EQ(shape(b.torch("mul", {x, input({s, 1})})), (Shape{s, 768}));
  EXPECT_EQ(shape(b.torch("gelu", {x})), (Shape{s, 768}));
  // Another symbol may or may not equal s at run time: undecided.
  const Dim t = Dim::symbol(b.add_input_number(ir::NumberType::Int));
  EXPECT_THROW(b.torch("add", {x, input({t, 768})}), SymbolicShapeError);
}

TEST_F(SymbolicOps, ReshapesSplitAndMergeSymbolicDims) {
  Value heads = b.torch("view", {x, Value::dims({s, 12, 64})});
  EXPECT_EQ(shape(heads), (Shape{s, 12, 64}));
  EXPECT_EQ(shape(b.torch("reshape", {heads, Value::ints({-1, 64})})), (Shape{s * 12, 64}));
  EXPECT_EQ(shape(b.torch("transpose", {heads, Value(0), Value(1)})), (Shape{12, s, 64}));
  EXPECT_EQ(shape(b.torch("flatten", {x})), (Shape{s * 768}));
  EXPECT_EQ(shape(b.torch("unsqueeze", {x, Value(0)})), (Shape{1, s, 768}));
  // -1 against a size that does not divide: undecided (it would need s to be a multiple of 5).
  EXPECT_THROW(b.torch("reshape", {x, Value::ints({-1, 5})}), SymbolicShapeError);
}

TEST_F(SymbolicOps, MatmulLinearReductionsAndNormalizations) {
  Value w = input({3072, 768});
  EXPECT_EQ(shape(b.torch("linear", {x, w})), (Shape{s, 3072}));
  EXPECT_EQ(shape(b.torch("matmul", {x, input({768, 3072})})), (Shape{s, 3072}));
  EXPECT_EQ(shape(b.torch("softmax", {x, Value(-1)})), (Shape{s, 768}));
  EXPECT_EQ(shape(b.torch("layer_norm", {x, Value::ints({768}), input({768}), input({768})})), (Shape{s, 768}));
  EXPECT_EQ(shape(b.torch("sum", {x, Value(0)})), (Shape{768}));
  EXPECT_EQ(shape(b.torch("amax", {x, Value(-1), Value(true)})), (Shape{s, 1}));
  // A mean over a symbolic dim divides by the size, a number known once the sizes are bound.
  EXPECT_EQ(shape(b.torch("mean", {x, Value(0)})), (Shape{768}));
  EXPECT_EQ(last().subsymbols.back().args.at(1), Value(s));
  EXPECT_EQ(shape(b.torch("mean", {x, Value(-1)})), (Shape{s}));
  // Where a rule needs the integer (a split into pieces of 2), the op is undecided.
  EXPECT_THROW(b.torch("split", {x, Value(2)}), SymbolicShapeError);
}

TEST_F(SymbolicOps, IndexingJoinsAndCreation) {
  auto slice = [](Value start, Value stop) {
    return Value(ir::Seq{ir::Seq::Kind::Slice, {std::move(start), std::move(stop), Value()}});
  };
  // The last position of a sequence (a generation step reads it), and everything but the first.
  EXPECT_EQ(shape(b.torch("getitem", {x, slice(Value(-1), Value())})), (Shape{1, 768}));
  EXPECT_EQ(shape(b.torch("getitem", {x, slice(Value(1), Value())})), (Shape{s - 1, 768}));
  EXPECT_EQ(shape(b.torch("getitem", {x, slice(Value(), Value(s))})), (Shape{s, 768}));
  // x[:5] is 5 long only if s >= 5.
  EXPECT_THROW(b.torch("getitem", {x, slice(Value(), Value(5))}), SymbolicShapeError);
  // A KV cache grows by one position.
  EXPECT_EQ(shape(b.torch("cat", {Value::list({x, input({1, 768})}), Value(0)})), (Shape{s + 1, 768}));
  EXPECT_EQ(shape(b.torch("arange", {Value(s)})), (Shape{s}));
  EXPECT_EQ(shape(b.torch("zeros_like", {x})), (Shape{s, 768}));
  Value ids = input({2, s}, DType::Int64);
  EXPECT_EQ(shape(b.torch("embedding", {ids, input({50257, 768})})), (Shape{2, s, 768}));
}

TEST_F(SymbolicOps, TracesPrintSizesAsExpressionsOfTheirSymbols) {
  b.torch("reshape", {x, Value::ints({-1, 64})});
  const std::string text = ir::to_python(trace);
  const std::string sym = trace.proxy(trace.inputs[0]).name;
  EXPECT_NE(text.find("(12*" + sym + ", 64)"), std::string::npos) << text;
  EXPECT_NE(text.find("f32[" + sym + ", 768]"), std::string::npos) << text;
}

// A graph's passes run once on its symbolic trace (thunder.core.compile.SymbolicPlan): a kernel is planned from
// the trace's size hints, its size symbols in shape arguments are not kernel inputs, and the trace bound to sizes
// (what is lowered) has no hints.
TEST_F(SymbolicOps, KernelsArePlannedAtTheTracesSizeHints) {
  // x - x.sum(-1, keepdim=True): the reshape to [s, 1] and the broadcast back name the size symbol s.
  Value rows = b.prim("reshape", {b.prim("sum", {x, Value::ints({1})}), Value::dims({s, 1})});
  Value y = b.prim("sub", {x, b.prim("broadcast_in_dim", {rows, Value::dims({s, 768}), Value::ints({0, 1})})});
  const std::set<ir::ProxyId> live{y.proxy()};
  EXPECT_FALSE(codegen::plan_kernel(trace, trace.symbols, live));  // the symbol would be a kernel input
  const ir::ProxyId symbol = trace.inputs[0];
  trace.size_hints = {{symbol, 5}};
  std::string why;
  const auto plan = codegen::plan_kernel(trace, trace.symbols, live, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->domain, (std::vector<int64_t>{5, 768}));
  EXPECT_EQ(plan->inputs, (std::vector<ir::ProxyId>{x.proxy()}));  // not the size symbol
  EXPECT_EQ(trace.empty_copy("a pass").size_hints, trace.size_hints);
  const ir::Trace bound = ir::bind_sizes(trace, {{symbol, 7}});
  EXPECT_TRUE(bound.size_hints.empty());
  EXPECT_EQ(codegen::plan_kernel(bound, bound.symbols, live)->domain, (std::vector<int64_t>{7, 768}));
}

// x.sum(1) / s (a divisor that is a size, as mean's is): a size read as a number by arithmetic is a kernel argument at the hints, and
// stays the trace's size symbol when the sizes are bound for kernels, so the kernel's text serves every s.
TEST_F(SymbolicOps, ASizeReadAsANumberIsAKernelArgumentNotALiteral) {
  Value y = b.prim("div", {b.prim("sum", {x, Value::ints({1})}), Value(s)});
  const std::set<ir::ProxyId> live{y.proxy()};
  const ir::ProxyId symbol = trace.inputs[0];
  trace.size_hints = {{symbol, 5}};
  std::string why;
  const auto planned = codegen::plan_kernel(trace, trace.symbols, live, &why);
  ASSERT_TRUE(planned) << why;
  EXPECT_EQ(planned->scalars, (std::vector<ir::ProxyId>{symbol}));
  for (int64_t n : {7, 9}) {
    const ir::Trace bound = ir::bind_sizes(trace, {{symbol, n}}, codegen::reads_numbers_at_run_time);
    const auto plan = codegen::plan_kernel(bound, bound.symbols, live);
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->domain, (std::vector<int64_t>{n, 768}));  // the reduced dim kept in the domain
    EXPECT_EQ(plan->scalars, (std::vector<ir::ProxyId>{symbol}));
    EXPECT_EQ(codegen::number_text(*plan, bound.symbols.back().args[1], "float"), "(float)(x0)");
  }
  // Bound without it (an import compiled per shape): the divisor is the integer.
  const ir::Trace literal = ir::bind_sizes(trace, {{symbol, 7}});
  EXPECT_EQ(literal.symbols.back().args[1], Value(int64_t{7}));
}

TEST_F(SymbolicOps, SlicesWithSymbolicBoundsArePlannedAtTheHints) {
  // x[-1:] * 2: the slice starts at s - 1.
  Value last = b.prim("slice", {x, Value::dims({s - 1, 0}), Value::dims({s, 768}), Value()});
  Value y = b.prim("mul", {last, Value(2.0)});
  const std::set<ir::ProxyId> live{y.proxy()};
  EXPECT_FALSE(codegen::plan_kernel(trace, trace.symbols, live));  // without hints: not a kernel
  trace.size_hints = {{trace.inputs[0], 5}};
  std::string why;
  const auto plan = codegen::plan_kernel(trace, trace.symbols, live, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->domain, (std::vector<int64_t>{1, 768}));
}

}  // namespace
}  // namespace thunder::ops
