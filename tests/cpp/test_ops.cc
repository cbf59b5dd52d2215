// Tests of the op tables through ops::Builder: output shapes and dtypes
// (torch's type promotion and broadcasting), decompositions, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ir/trace.h"
#include "ops/op_table.h"
#include "ops/torch_common.h"
#include "passes/passes.h"

namespace thunder::ops {
namespace {

using ir::Level;
using ir::NumberType;
using ir::ProxyRef;
using Shape = std::vector<int64_t>;

Value P(ProxyId id) { return Value(ProxyRef{id}); }
Value I(int64_t i) { return Value(i); }
Value S(const char* s) { return Value(ir::Str{s}); }
Value slice(Value start, Value stop, Value step = Value()) {
  return Value(ir::Seq{ir::Seq::Kind::Slice, {std::move(start), std::move(stop), std::move(step)}});
}

class Ops : public ::testing::Test {
 protected:
  ir::Trace trace;
  Builder b{trace};

  Value input(DType dtype, Shape shape, bool requires_grad = false) {
    return P(b.add_input_tensor(TensorMeta{dtype, ir::dims_of(shape), "cpu", requires_grad}));
  }
  const TensorMeta& meta(const Value& v) { return b.meta(v); }
  DType dtype(const Value& v) { return b.meta(v).dtype; }
  Shape shape(const Value& v) { return ir::concrete(b.meta(v).shape, "test"); }
  const ir::BoundSymbol& last() { return trace.symbols.back(); }
};

// Runs `f`, expecting an OpError whose message contains every one of `parts`.
void expect_op_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected ops::OpError";
  } catch (const OpError& e) {
    std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

bool contains_symbol(const std::vector<ir::BoundSymbol>& syms, std::string_view qualified) {
  for (const ir::BoundSymbol& s : syms)
    if (s.printed_callee() == qualified || contains_symbol(s.subsymbols, qualified)) return true;
  return false;
}

// ---- the builder itself ----

TEST_F(Ops, TorchCallAppendsOneTopLevelSymbolWithPrimSubsymbols) {
  Value x = input(DType::Float32, {2, 3});
  Value y = b.torch("add", {x, x});
  ASSERT_EQ(trace.symbols.size(), 1u);
  EXPECT_EQ(last().printed_callee(), "ltorch.add");
  EXPECT_EQ(last().output, y);
  ASSERT_FALSE(last().subsymbols.empty());
  EXPECT_EQ(last().subsymbols.back().printed_callee(), "prims.add");
  EXPECT_EQ(last().subsymbols.back().output, y);
}

TEST_F(Ops, OptionalArgumentsAreBoundToTheirDefaults) {
  Value x = input(DType::Float32, {2});
  b.torch("add", {x, x});
  ASSERT_EQ(last().args.size(), 3u);  // input, other, alpha
  EXPECT_EQ(last().args[2], I(1));
}

TEST_F(Ops, KeywordArgumentsAreBoundByName) {
  Value x = input(DType::Float32, {2, 3});
  Value y = b.torch("sum", {x}, {{"keepdim", Value(true)}, {"dim", I(1)}});
  EXPECT_EQ(shape(y), (Shape{2, 1}));
}

TEST_F(Ops, UnexpectedKeywordRaisesOpError) {
  Value x = input(DType::Float32, {2});
  expect_op_error([&] { b.torch("sum", {x}, {{"axis", I(0)}}); }, {"ltorch.sum", "axis"});
}

TEST_F(Ops, MissingRequiredArgumentRaisesOpError) {
  Value x = input(DType::Float32, {2});
  expect_op_error([&] { b.torch("add", {x}); }, {"ltorch.add", "other"});
}

TEST_F(Ops, TooManyArgumentsRaisesOpError) {
  Value x = input(DType::Float32, {2});
  expect_op_error([&] { b.torch("exp", {x, x}); }, {"ltorch.exp"});
}

TEST_F(Ops, UnknownOpRaisesNotNative) {
  Value x = input(DType::Float32, {2});
  EXPECT_THROW(b.torch("no_such_op", {x}), NotNative);
  EXPECT_THROW(b.prim("no_such_prim", {x}), NotNative);
}

TEST_F(Ops, FailedCallLeavesTheTraceUnchanged) {
  Value x = input(DType::Float32, {2, 3});
  b.torch("exp", {x});
  EXPECT_THROW(b.torch("sum", {x, I(7)}), OpError);
  EXPECT_EQ(trace.symbols.size(), 1u);
  Value y = b.torch("neg", {x});  // and the builder still records at top level
  EXPECT_EQ(trace.symbols.size(), 2u);
  EXPECT_EQ(last().output, y);
}

TEST_F(Ops, PassThroughDecompositionGetsAFreshOutput) {
  Value x = input(DType::Float32, {2, 3});
  Value y = b.torch("contiguous", {x});
  EXPECT_NE(y, x);  // every bound symbol defines its outputs
  EXPECT_EQ(meta(y), meta(x));
  ASSERT_EQ(last().subsymbols.size(), 1u);
  EXPECT_EQ(last().subsymbols[0].printed_callee(), "prims.alias");
  EXPECT_NO_THROW(ir::verify(trace));
}

TEST_F(Ops, SourceIsAttachedToRecordedSymbols) {
  Value x = input(DType::Float32, {2});
  b.set_source("model.py:3 in forward: y = x.exp()");
  b.torch("exp", {x});
  EXPECT_EQ(last().source, "model.py:3 in forward: y = x.exp()");
}

TEST_F(Ops, RequiresGradPropagatesToFloatingOutputsOnly) {
  Value x = input(DType::Float32, {2}, /*requires_grad=*/true);
  EXPECT_TRUE(meta(b.torch("exp", {x})).requires_grad);
  EXPECT_FALSE(meta(b.torch("lt", {x, I(0)})).requires_grad);  // bool results carry no gradient
  EXPECT_FALSE(meta(b.torch("zeros", {Value::ints({2})})).requires_grad);
}

TEST_F(Ops, PrimRejectsMismatchedShapes) {
  Value x = input(DType::Float32, {2}), y = input(DType::Float32, {3});
  expect_op_error([&] { b.prim("add", {x, y}); }, {"prims.add", "[2]", "[3]"});
}

TEST_F(Ops, PrimRejectsMismatchedDtypes) {
  Value x = input(DType::Float32, {2}), y = input(DType::Float64, {2});
  expect_op_error([&] { b.prim("mul", {x, y}); }, {"prims.mul", "float32", "float64"});
}

TEST_F(Ops, PrimOverNumbersMakesANumberProxy) {
  Value r = b.prim("add", {I(2), Value(0.5)});
  ASSERT_TRUE(r.is_proxy());
  const ir::ProxyInfo& p = trace.proxy(r.proxy());
  EXPECT_FALSE(p.is_tensor);
  EXPECT_EQ(p.number, NumberType::Float);
  EXPECT_EQ(trace.proxy(b.prim("lt", {I(2), I(3)}).proxy()).number, NumberType::Bool);
}

TEST_F(Ops, DivOfNumbersIsAFloatLikePythonTrueDivision) {
  EXPECT_EQ(trace.proxy(b.prim("div", {I(7), I(2)}).proxy()).number, NumberType::Float);
  Value n = P(b.add_input_number(NumberType::Int));
  Value half = b.torch("div", {n, I(2)});
  EXPECT_EQ(trace.proxy(half.proxy()).number, NumberType::Float);
  // So an int tensor scaled by it promotes to float32, as in eager torch.
  EXPECT_EQ(dtype(b.torch("mul", {input(DType::Int64, {2}), half})), DType::Float32);
  EXPECT_EQ(trace.proxy(b.prim("mul", {n, I(2)}).proxy()).number, NumberType::Int);
}

// ---- type promotion ----

TEST_F(Ops, ZeroDimTensorDoesNotPromoteADimensionedTensorOfItsCategory) {
  Value x = input(DType::Float32, {2}), s = input(DType::Float64, {});
  Value y = b.torch("add", {x, s});
  EXPECT_EQ(dtype(y), DType::Float32);
  EXPECT_EQ(shape(y), (Shape{2}));
}

TEST_F(Ops, ZeroDimTensorOfAHigherCategoryPromotes) {
  Value x = input(DType::Int32, {2}), s = input(DType::Float64, {});
  EXPECT_EQ(dtype(b.torch("add", {x, s})), DType::Float64);  // torch.result_type gives float64
}

TEST_F(Ops, ZeroDimTensorsAloneFollowPromoteTypes) {
  Value a = input(DType::Int32, {}), c = input(DType::Int64, {});
  Value y = b.torch("add", {a, c});
  EXPECT_EQ(dtype(y), DType::Int64);
  EXPECT_EQ(shape(y), Shape{});
}

TEST_F(Ops, UInt8TensorWithInt8ZeroDimTensorStaysUInt8) {
  Value x = input(DType::UInt8, {2}), s = input(DType::Int8, {});
  EXPECT_EQ(dtype(b.torch("sub", {x, s})), DType::UInt8);
}

TEST_F(Ops, IntTensorPlusPythonFloatIsFloat32) {
  Value x = input(DType::Int64, {2});
  EXPECT_EQ(dtype(b.torch("add", {x, Value(2.5)})), DType::Float32);
}

TEST_F(Ops, IntTensorPlusPythonIntKeepsItsDtype) {
  Value x = input(DType::Int32, {2});
  EXPECT_EQ(dtype(b.torch("add", {x, I(2)})), DType::Int32);
}

TEST_F(Ops, HalfTensorPlusPythonFloatStaysHalf) {
  Value x = input(DType::Float16, {2});
  EXPECT_EQ(dtype(b.torch("mul", {x, Value(0.5)})), DType::Float16);
}

TEST_F(Ops, NumberProxyOperandsPromoteLikePythonNumbers) {
  Value x = input(DType::Int32, {2});
  Value f = P(b.add_input_number(NumberType::Float));
  Value y = b.torch("mul", {x, f});
  EXPECT_EQ(dtype(y), DType::Float32);
}

TEST_F(Ops, IntDivIntIsFloat32) {
  Value x = input(DType::Int64, {2}), y = input(DType::Int64, {2});
  EXPECT_EQ(dtype(b.torch("div", {x, y})), DType::Float32);
}

TEST_F(Ops, TrueDivideIsBinaryAndIntToFloat) {
  Value x = input(DType::Int64, {2}), y = input(DType::Int64, {2});
  Value z = b.torch("true_divide", {x, y});
  EXPECT_EQ(dtype(z), DType::Float32);
  EXPECT_EQ(shape(z), (Shape{2}));
}

TEST_F(Ops, FloorDivisionOfIntsStaysInteger) {
  Value x = input(DType::Int32, {2});
  EXPECT_EQ(dtype(b.torch("div", {x, I(2)}, {{"rounding_mode", S("floor")}})), DType::Int32);
  EXPECT_EQ(dtype(b.torch("div", {x, I(2)}, {{"rounding_mode", S("trunc")}})), DType::Int32);
  expect_op_error([&] { b.torch("div", {x, I(2)}, {{"rounding_mode", S("round")}}); }, {"ltorch.div", "round"});
}

TEST_F(Ops, BoolTensorPlusBoolIsBool) {
  Value x = input(DType::Bool, {3});
  EXPECT_EQ(dtype(b.torch("add", {x, Value(true)})), DType::Bool);
}

TEST_F(Ops, BoolTensorPlusIntIsInt64) {
  Value x = input(DType::Bool, {3});
  EXPECT_EQ(dtype(b.torch("add", {x, I(1)})), DType::Int64);
}

TEST_F(Ops, ComparisonsAreBool) {
  Value x = input(DType::Float32, {2, 3}), i = input(DType::Int32, {3});
  Value lt = b.torch("lt", {x, I(0)});
  EXPECT_EQ(dtype(lt), DType::Bool);
  EXPECT_EQ(shape(lt), (Shape{2, 3}));
  Value eq = b.torch("eq", {i, x});
  EXPECT_EQ(dtype(eq), DType::Bool);
  EXPECT_EQ(shape(eq), (Shape{2, 3}));
  // The comparison itself runs in the promoted dtype.
  EXPECT_TRUE(contains_symbol(last().subsymbols, "prims.convert_element_type"));
}

TEST_F(Ops, ExpOfIntIsFloat32) {
  Value x = input(DType::Int64, {4});
  EXPECT_EQ(dtype(b.torch("exp", {x})), DType::Float32);
}

TEST_F(Ops, AbsOfIntKeepsIntAndNegOfFloatKeepsFloat) {
  EXPECT_EQ(dtype(b.torch("abs", {input(DType::Int16, {2})})), DType::Int16);
  EXPECT_EQ(dtype(b.torch("neg", {input(DType::BFloat16, {2})})), DType::BFloat16);
}

TEST_F(Ops, ClampOfIntByFloatIsFloat32) {
  Value x = input(DType::Int32, {2});
  EXPECT_EQ(dtype(b.torch("clamp", {x}, {{"min", Value(0.5)}})), DType::Float32);
  expect_op_error([&] { b.torch("clamp", {x}); }, {"ltorch.clamp"});
}

TEST_F(Ops, WherePromotesItsBranches) {
  Value c = input(DType::Bool, {2, 1}), x = input(DType::Int32, {3});
  Value y = b.torch("where", {c, x, Value(2.5)});
  EXPECT_EQ(dtype(y), DType::Float32);
  EXPECT_EQ(shape(y), (Shape{2, 3}));
  Value z = b.torch("where", {c, Value(1.0), Value(0.0)});
  EXPECT_EQ(dtype(z), DType::Float32);
  EXPECT_EQ(shape(z), (Shape{2, 1}));
}

TEST_F(Ops, MaskedFillKeepsTheInputDtype) {
  Value x = input(DType::Float16, {2, 3}), m = input(DType::Bool, {3});
  Value y = b.torch("masked_fill", {x, m, Value(-INFINITY)});
  EXPECT_EQ(dtype(y), DType::Float16);
  EXPECT_EQ(shape(y), (Shape{2, 3}));
  expect_op_error([&] { b.torch("masked_fill", {x, x, I(0)}); }, {"ltorch.masked_fill", "mask"});
}

TEST_F(Ops, ToConvertsTheDtype) {
  Value x = input(DType::Float32, {2});
  EXPECT_EQ(dtype(b.torch("to", {x, Value(DType::BFloat16)})), DType::BFloat16);
}

TEST_F(Ops, ActivationsKeepShapeAndDtype) {
  Value x = input(DType::BFloat16, {2, 3});
  for (const char* op : {"relu", "gelu", "silu", "sigmoid", "tanh"}) {
    Value y = b.torch(op, {x});
    EXPECT_EQ(meta(y), meta(x)) << op;
  }
  EXPECT_EQ(meta(b.torch("gelu", {x}, {{"approximate", S("tanh")}})), meta(x));
  expect_op_error([&] { b.torch("gelu", {x}, {{"approximate", S("fast")}}); }, {"ltorch.gelu", "fast"});
  EXPECT_THROW(b.torch("relu", {x, Value(true)}), NotNative);  // in-place
}

// ---- broadcasting ----

TEST_F(Ops, BinaryOpsBroadcast) {
  Value x = input(DType::Float32, {2, 1, 3}), y = input(DType::Float32, {4, 1});
  Value z = b.torch("mul", {x, y});
  EXPECT_EQ(shape(z), (Shape{2, 4, 3}));
  EXPECT_TRUE(contains_symbol(last().subsymbols, "prims.broadcast_in_dim"));
}

TEST_F(Ops, BroadcastWithZeroSizedDim) {
  Value x = input(DType::Float32, {0, 1}), y = input(DType::Float32, {3});
  EXPECT_EQ(shape(b.torch("add", {x, y})), (Shape{0, 3}));
}

TEST_F(Ops, IncompatibleBroadcastRaisesOpError) {
  Value x = input(DType::Float32, {2, 3}), y = input(DType::Float32, {4});
  expect_op_error([&] { b.torch("add", {x, y}); }, {"[2, 3]", "[4]", "broadcast"});
}

TEST_F(Ops, ExpandWithMinusOneKeepsTheDim) {
  Value x = input(DType::Float32, {3, 1});
  EXPECT_EQ(shape(b.torch("expand", {x, Value::ints({2, -1, 4})})), (Shape{2, 3, 4}));
  expect_op_error([&] { b.torch("expand", {x, Value::ints({-1, 3, 4})}); }, {"ltorch.expand"});
}

// ---- reductions ----

TEST_F(Ops, SumOverOneDim) {
  Value x = input(DType::Float32, {2, 3, 4});
  EXPECT_EQ(shape(b.torch("sum", {x, I(1)})), (Shape{2, 4}));
}

TEST_F(Ops, SumWithKeepdim) {
  Value x = input(DType::Float32, {2, 3, 4});
  EXPECT_EQ(shape(b.torch("sum", {x, I(1), Value(true)})), (Shape{2, 1, 4}));
  EXPECT_EQ(shape(b.torch("sum", {x, Value::ints({0, -1}), Value(true)})), (Shape{1, 3, 1}));
}

TEST_F(Ops, SumOverAllDims) {
  Value x = input(DType::Float32, {2, 3});
  EXPECT_EQ(shape(b.torch("sum", {x})), Shape{});
  EXPECT_EQ(shape(b.torch("sum", {x, Value(), Value(true)})), (Shape{1, 1}));
  EXPECT_EQ(shape(b.torch("sum", {x, Value::tuple({})})), Shape{});
}

TEST_F(Ops, SumOfInt32IsInt64) {
  EXPECT_EQ(dtype(b.torch("sum", {input(DType::Int32, {5})})), DType::Int64);
  EXPECT_EQ(dtype(b.torch("sum", {input(DType::Bool, {5})})), DType::Int64);
  EXPECT_EQ(dtype(b.torch("prod", {input(DType::UInt8, {5})})), DType::Int64);
}

TEST_F(Ops, SumOfHalfStaysHalfAndDtypeArgumentWins) {
  Value x = input(DType::Float16, {5});
  EXPECT_EQ(dtype(b.torch("sum", {x})), DType::Float16);
  EXPECT_EQ(dtype(b.torch("sum", {x}, {{"dtype", Value(DType::Float64)}})), DType::Float64);
}

TEST_F(Ops, SumOfZeroDimTensorOverDimZero) {
  Value x = input(DType::Float32, {});
  EXPECT_EQ(shape(b.torch("sum", {x, I(0)})), Shape{});
  EXPECT_EQ(shape(b.torch("sum", {x, I(-1), Value(true)})), Shape{});
}

TEST_F(Ops, BadDimRaisesOpErrorNamingTheOpAndTheDim) {
  Value x = input(DType::Float32, {2, 3, 4});
  expect_op_error([&] { b.torch("sum", {x, I(3)}); }, {"ltorch.sum", "dim 3"});
  expect_op_error([&] { b.torch("sum", {x, I(-4)}); }, {"ltorch.sum", "dim -4"});
  expect_op_error([&] { b.torch("mean", {x, I(5)}); }, {"ltorch.mean", "dim 5"});
  expect_op_error([&] { b.torch("softmax", {x, I(3)}); }, {"ltorch.softmax", "dim 3"});
  expect_op_error([&] { b.torch("argmax", {x, I(3)}); }, {"ltorch.argmax", "dim 3"});
  expect_op_error([&] { b.torch("unsqueeze", {x, I(5)}); }, {"ltorch.unsqueeze", "dim 5"});
}

TEST_F(Ops, AmaxBadDimNamesTheTorchOp) {
  Value x = input(DType::Float32, {2, 3});
  expect_op_error([&] { b.torch("amax", {x, I(2)}); }, {"ltorch.amax", "dim 2"});
  expect_op_error([&] { b.torch("amin", {x, I(-3)}); }, {"ltorch.amin", "dim -3"});
}

TEST_F(Ops, MeanKeepsDtypeAndKeepdim) {
  Value x = input(DType::Float16, {2, 3});
  Value m = b.torch("mean", {x, I(1), Value(true)});
  EXPECT_EQ(dtype(m), DType::Float16);
  EXPECT_EQ(shape(m), (Shape{2, 1}));
}

TEST_F(Ops, MeanOfIntRaisesOpError) {
  Value x = input(DType::Int64, {2, 3});
  expect_op_error([&] { b.torch("mean", {x}); }, {"ltorch.mean", "int64"});
}

TEST_F(Ops, AmaxDefaultsToAllDims) {
  Value x = input(DType::Float32, {2, 3});
  EXPECT_EQ(shape(b.torch("amax", {x})), Shape{});
  EXPECT_EQ(shape(b.torch("amin", {x, I(0), Value(true)})), (Shape{1, 3}));
}

TEST_F(Ops, AmaxOverZeroSizedDimRaises) {
  Value x = input(DType::Float32, {0, 3});
  expect_op_error([&] { b.torch("amax", {x, I(0)}); }, {"ltorch.amax"});
}

TEST_F(Ops, ArgmaxIsInt64) {
  Value x = input(DType::Float32, {2, 3});
  Value a = b.torch("argmax", {x, I(1)});
  EXPECT_EQ(dtype(a), DType::Int64);
  EXPECT_EQ(shape(a), (Shape{2}));
  EXPECT_EQ(shape(b.torch("argmax", {x, I(1), Value(true)})), (Shape{2, 1}));
  EXPECT_EQ(shape(b.torch("argmin", {x})), Shape{});
  EXPECT_EQ(shape(b.torch("argmin", {x, Value(), Value(true)})), (Shape{1, 1}));
}

// ---- shapes ----

TEST_F(Ops, ReshapeInfersMinusOne) {
  Value x = input(DType::Float32, {2, 3, 4});
  EXPECT_EQ(shape(b.torch("reshape", {x, Value::ints({-1})})), (Shape{24}));
  EXPECT_EQ(shape(b.torch("reshape", {x, Value::ints({4, -1})})), (Shape{4, 6}));
  EXPECT_EQ(shape(b.torch("view", {x, Value::ints({-1, 2, 3})})), (Shape{4, 2, 3}));
}

TEST_F(Ops, ReshapeRejectsBadShapes) {
  Value x = input(DType::Float32, {2, 3});
  expect_op_error([&] { b.torch("reshape", {x, Value::ints({4, -1})}); }, {"ltorch.reshape", "[4, -1]"});
  expect_op_error([&] { b.torch("reshape", {x, Value::ints({-1, -1})}); }, {"ltorch.reshape"});
  expect_op_error([&] { b.torch("reshape", {x, Value::ints({7})}); }, {"ltorch.reshape"});
}

TEST_F(Ops, PermuteTransposeAndT) {
  Value x = input(DType::Float32, {2, 3, 4});
  EXPECT_EQ(shape(b.torch("permute", {x, Value::ints({2, 0, 1})})), (Shape{4, 2, 3}));
  EXPECT_EQ(shape(b.torch("transpose", {x, I(-1), I(0)})), (Shape{4, 3, 2}));
  EXPECT_EQ(shape(b.torch("t", {input(DType::Float32, {5, 7})})), (Shape{7, 5}));
  expect_op_error([&] { b.torch("t", {x}); }, {"ltorch.t"});
  expect_op_error([&] { b.torch("permute", {x, Value::ints({0, 1})}); }, {"ltorch.permute"});
}

TEST_F(Ops, SqueezeUnsqueezeFlatten) {
  Value x = input(DType::Float32, {2, 1, 3, 1});
  EXPECT_EQ(shape(b.torch("squeeze", {x})), (Shape{2, 3}));
  EXPECT_EQ(shape(b.torch("squeeze", {x, I(1)})), (Shape{2, 3, 1}));
  EXPECT_EQ(shape(b.torch("squeeze", {x, I(0)})), (Shape{2, 1, 3, 1}));  // not size 1: unchanged
  EXPECT_EQ(shape(b.torch("unsqueeze", {x, I(-1)})), (Shape{2, 1, 3, 1, 1}));
  EXPECT_EQ(shape(b.torch("flatten", {x})), (Shape{6}));
  EXPECT_EQ(shape(b.torch("flatten", {x, I(1), I(2)})), (Shape{2, 3, 1}));
  EXPECT_EQ(shape(b.torch("flatten", {input(DType::Float32, {})})), (Shape{1}));
}

TEST_F(Ops, GetitemWithInt) {
  Value x = input(DType::Float32, {2, 3, 4});
  EXPECT_EQ(shape(b.torch("getitem", {x, I(1)})), (Shape{3, 4}));
  EXPECT_EQ(shape(b.torch("getitem", {x, I(-1)})), (Shape{3, 4}));
}

TEST_F(Ops, GetitemWithSlices) {
  Value x = input(DType::Float32, {2, 3, 4});
  EXPECT_EQ(shape(b.torch("getitem", {x, Value::tuple({slice(Value(), Value()), slice(I(1), Value())})})),
            (Shape{2, 2, 4}));
  EXPECT_EQ(shape(b.torch("getitem", {x, Value::tuple({I(-1), slice(I(-2), Value())})})), (Shape{2, 4}));
  // Python clamps slice bounds: x[:, 5:] is empty along dim 1.
  EXPECT_EQ(shape(b.torch("getitem", {x, Value::tuple({slice(Value(), Value()), slice(I(5), Value())})})),
            (Shape{2, 0, 4}));
}

TEST_F(Ops, GetitemWithStep) {
  Value x = input(DType::Float32, {2, 3, 4});
  Value y = b.torch("getitem", {x, Value::tuple({slice(I(1), Value()), Value(), Value(ir::EllipsisT{}),
                                                 slice(Value(), Value(), I(3))})});
  EXPECT_EQ(shape(y), (Shape{1, 1, 3, 2}));  // x[1:, None, ..., ::3]
  expect_op_error([&] { b.torch("getitem", {x, slice(Value(), Value(), I(-1))}); }, {"ltorch.getitem"});
}

TEST_F(Ops, GetitemWithNoneAndEllipsis) {
  Value x = input(DType::Float32, {2, 3, 4});
  EXPECT_EQ(shape(b.torch("getitem", {x, Value()})), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(shape(b.torch("getitem", {x, Value::tuple({Value(ir::EllipsisT{}), Value()})})), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(shape(b.torch("getitem", {x, Value::tuple({Value(ir::EllipsisT{}), I(-1)})})), (Shape{2, 3}));
  // x[0, ..., None, 1:3]
  Value y = b.torch("getitem", {x, Value::tuple({I(0), Value(ir::EllipsisT{}), Value(), slice(I(1), I(3))})});
  EXPECT_EQ(shape(y), (Shape{3, 1, 2}));
}

TEST_F(Ops, GetitemErrors) {
  Value x = input(DType::Float32, {2, 3});
  expect_op_error([&] { b.torch("getitem", {x, I(2)}); }, {"ltorch.getitem", "index 2", "size 2"});
  expect_op_error([&] { b.torch("getitem", {x, Value::tuple({I(0), I(0), I(0)})}); }, {"ltorch.getitem", "too many"});
  expect_op_error(
      [&] { b.torch("getitem", {x, Value::tuple({Value(ir::EllipsisT{}), Value(ir::EllipsisT{})})}); },
      {"ltorch.getitem", "ellipsis"});
  EXPECT_THROW(b.torch("getitem", {x, Value(true)}), NotNative);
  EXPECT_THROW(b.torch("getitem", {x, input(DType::Bool, {2})}), NotNative);  // a mask
  Value i = input(DType::Int64, {2});
  EXPECT_THROW(b.torch("getitem", {x, Value::tuple({i, i})}), NotNative);  // several index tensors
  EXPECT_THROW(b.torch("getitem", {x, Value::tuple({I(0), i})}), NotNative);  // an int beside one
}

// x[idx] and x[:, idx] of an integer index tensor: index_select along its dim of the wrapped, flattened index.
TEST_F(Ops, GetitemOfOneIndexTensorSelectsAlongItsDim) {
  Value x = input(DType::Float32, {2, 3});
  EXPECT_EQ(b.meta(b.torch("getitem", {x, input(DType::Int64, {4})})).shape, ir::dims_of({4, 3}));
  Value y = b.torch("getitem", {x, Value::tuple({slice(Value(), Value()), input(DType::Int32, {2, 5})})});
  EXPECT_EQ(b.meta(y).shape, ir::dims_of({2, 2, 5}));
  Value z = b.torch("getitem", {x, Value::tuple({Value(ir::EllipsisT{}), input(DType::Int64, {1})})});
  EXPECT_EQ(b.meta(z).shape, ir::dims_of({2, 1}));
  EXPECT_THROW(b.torch("getitem", {x, input(DType::Int64, {})}), NotNative);  // eager's x[tensor(1)] is a view
}

TEST_F(Ops, GetitemOfTheWholeTensorAddsNoSlice) {
  Value x = input(DType::Float32, {2, 3});
  Value y = b.torch("getitem", {x, slice(Value(), Value())});
  EXPECT_EQ(meta(y), meta(x));
  EXPECT_FALSE(contains_symbol(last().subsymbols, "prims.slice"));
}

TEST_F(Ops, CatPromotesBFloat16AndFloat16ToFloat32) {
  Value x = input(DType::BFloat16, {2, 3}), y = input(DType::Float16, {4, 3});
  Value z = b.torch("cat", {Value::list({x, y})});
  EXPECT_EQ(dtype(z), DType::Float32);
  EXPECT_EQ(shape(z), (Shape{6, 3}));
}

TEST_F(Ops, CatAlongLastDimAndMismatchedSizes) {
  Value x = input(DType::Float32, {2, 3}), y = input(DType::Float32, {2, 5});
  EXPECT_EQ(shape(b.torch("cat", {Value::list({x, y}), I(-1)})), (Shape{2, 8}));
  expect_op_error([&] { b.torch("cat", {Value::list({x, y}), I(0)}); }, {"cat"});
}

TEST_F(Ops, StackSplitChunkUnbind) {
  Value x = input(DType::Float32, {2, 3});
  EXPECT_EQ(shape(b.torch("stack", {Value::list({x, x, x}), I(1)})), (Shape{2, 3, 3}));
  Value parts = b.torch("split", {input(DType::Float32, {5, 2}), I(2)});
  ASSERT_EQ(parts.items().size(), 3u);
  EXPECT_EQ(shape(parts.items()[2]), (Shape{1, 2}));
  Value chunks = b.torch("chunk", {x, I(2), I(1)});
  ASSERT_EQ(chunks.items().size(), 2u);
  EXPECT_EQ(shape(chunks.items()[0]), (Shape{2, 2}));
  EXPECT_EQ(shape(chunks.items()[1]), (Shape{2, 1}));
  Value rows = b.torch("unbind", {x});
  ASSERT_EQ(rows.items().size(), 2u);
  EXPECT_EQ(shape(rows.items()[1]), (Shape{3}));
  EXPECT_NO_THROW(ir::verify(trace));
}

// ---- creation ----

TEST_F(Ops, FullWithBoolFillIsBool) {
  Value t = b.torch("full", {Value::ints({1}), Value(false)});
  EXPECT_EQ(dtype(t), DType::Bool);
  EXPECT_EQ(shape(t), (Shape{1}));
  EXPECT_EQ(dtype(b.torch("full", {Value::ints({2}), I(1)})), DType::Int64);
  EXPECT_EQ(dtype(b.torch("full", {Value::ints({2}), Value(1.5)})), DType::Float32);
}

TEST_F(Ops, ZerosOnesAndLike) {
  Value z = b.torch("zeros", {Value::ints({2, 3})});
  EXPECT_EQ(meta(z), (TensorMeta{DType::Float32, {2, 3}, "cpu", false}));
  EXPECT_EQ(dtype(b.torch("ones", {Value::ints({2})}, {{"dtype", Value(DType::Int32)}})), DType::Int32);
  Value x = input(DType::BFloat16, {4, 1}, /*requires_grad=*/true);
  Value o = b.torch("ones_like", {x});
  EXPECT_EQ(dtype(o), DType::BFloat16);
  EXPECT_EQ(shape(o), (Shape{4, 1}));
  EXPECT_FALSE(meta(o).requires_grad);  // creation ops do not inherit requires_grad
}

TEST_F(Ops, ArangeOfIntsIsInt64) {
  Value a = b.torch("arange", {I(5)});
  EXPECT_EQ(dtype(a), DType::Int64);
  EXPECT_EQ(shape(a), (Shape{5}));
  EXPECT_EQ(shape(b.torch("arange", {I(10), I(0), I(-3)})), (Shape{4}));
}

TEST_F(Ops, ArangeWithAnyFloatIsFloat32) {
  Value a = b.torch("arange", {I(0), I(1), Value(0.25)});
  EXPECT_EQ(dtype(a), DType::Float32);
  EXPECT_EQ(shape(a), (Shape{4}));
  EXPECT_EQ(shape(b.torch("arange", {Value(1.0), I(3)})), (Shape{2}));
  EXPECT_EQ(dtype(b.torch("arange", {Value(5.0)})), DType::Float32);
}

TEST_F(Ops, ArangeDtypeArgumentWins) {
  EXPECT_EQ(dtype(b.torch("arange", {I(5)}, {{"dtype", Value(DType::Float64)}})), DType::Float64);
}

TEST_F(Ops, ArangeErrors) {
  expect_op_error([&] { b.torch("arange", {I(0), I(5), I(0)}); }, {"ltorch.arange", "step"});
  expect_op_error([&] { b.torch("arange", {I(5), I(0)}); }, {"ltorch.arange"});
  EXPECT_THROW(b.torch("arange", {P(b.add_input_number(NumberType::Int))}), NotNative);
}

// ---- nn ----

TEST_F(Ops, SoftmaxKeepsShapeAndHasSubsymbols) {
  Value x = input(DType::Float32, {2, 5});
  Value y = b.torch("softmax", {x, I(-1)});
  EXPECT_EQ(meta(y), meta(x));
  EXPECT_FALSE(last().subsymbols.empty());
  EXPECT_TRUE(contains_symbol(last().subsymbols, "ltorch.exp"));
  EXPECT_TRUE(contains_symbol(last().subsymbols, "ltorch.amax"));
}

TEST_F(Ops, SoftmaxOfHalfIsComputedInFloat32AndReturnsHalf) {
  Value x = input(DType::Float16, {2, 5});
  Value y = b.torch("softmax", {x, I(1)});
  EXPECT_EQ(dtype(y), DType::Float16);
  EXPECT_TRUE(contains_symbol(last().subsymbols, "prims.convert_element_type"));
  EXPECT_EQ(dtype(b.torch("log_softmax", {x, I(1)}, {{"dtype", Value(DType::Float64)}})), DType::Float64);
  expect_op_error([&] { b.torch("softmax", {input(DType::Int32, {3}), I(0)}); }, {"ltorch.softmax"});
}

TEST_F(Ops, LayerNormKeepsShapeAndHasSubsymbols) {
  Value x = input(DType::BFloat16, {2, 3, 4});
  Value w = input(DType::BFloat16, {4}), bias = input(DType::BFloat16, {4});
  Value y = b.torch("layer_norm", {x, Value::ints({4}), w, bias});
  EXPECT_EQ(shape(y), (Shape{2, 3, 4}));
  EXPECT_EQ(dtype(y), DType::BFloat16);
  EXPECT_FALSE(last().subsymbols.empty());
  EXPECT_TRUE(contains_symbol(last().subsymbols, "ltorch.rsqrt"));
  EXPECT_EQ(last().args[4], Value(1e-5));  // eps default
}

TEST_F(Ops, LayerNormRejectsMismatchedNormalizedShape) {
  Value x = input(DType::Float32, {2, 3, 4});
  expect_op_error([&] { b.torch("layer_norm", {x, Value::ints({3})}); }, {"ltorch.layer_norm", "normalized_shape"});
}

TEST_F(Ops, RmsNormKeepsShape) {
  Value x = input(DType::Float16, {2, 8});
  Value y = b.torch("rms_norm", {x, Value::ints({8}), input(DType::Float16, {8})});
  EXPECT_EQ(meta(y), meta(x));
}

TEST_F(Ops, LinearShapes) {
  Value x = input(DType::Float32, {2, 7, 3}), w = input(DType::Float32, {5, 3}), bias = input(DType::Float32, {5});
  Value y = b.torch("linear", {x, w, bias});
  EXPECT_EQ(shape(y), (Shape{2, 7, 5}));
  EXPECT_FALSE(last().subsymbols.empty());
  EXPECT_EQ(shape(b.torch("linear", {x, w})), (Shape{2, 7, 5}));
  EXPECT_EQ(shape(b.torch("linear", {x, input(DType::Float32, {3})})), (Shape{2, 7}));
}

TEST_F(Ops, LinearWithMismatchedInnerDimRaises) {
  Value x = input(DType::Float32, {2, 3}), w = input(DType::Float32, {5, 4});
  expect_op_error([&] { b.torch("linear", {x, w}); }, {"matmul", "3 != 4"});
}

TEST_F(Ops, MatmulShapes) {
  Value a = input(DType::Float32, {4, 2, 3}), m = input(DType::Float32, {3, 5}), v = input(DType::Float32, {3});
  EXPECT_EQ(shape(b.torch("matmul", {a, m})), (Shape{4, 2, 5}));
  EXPECT_EQ(shape(b.torch("matmul", {a, v})), (Shape{4, 2}));
  EXPECT_EQ(shape(b.torch("matmul", {v, m})), (Shape{5}));
  EXPECT_EQ(shape(b.torch("matmul", {v, v})), Shape{});
  expect_op_error([&] { b.torch("mm", {a, m}); }, {"ltorch.mm"});
}

TEST_F(Ops, ScaledDotProductAttentionShapes) {
  Value q = input(DType::Float16, {2, 4, 8, 16}), k = input(DType::Float16, {2, 4, 10, 16}),
        v = input(DType::Float16, {2, 4, 10, 32});
  Value y = b.torch("scaled_dot_product_attention", {q, k, v});
  EXPECT_EQ(shape(y), (Shape{2, 4, 8, 32}));
  EXPECT_EQ(dtype(y), DType::Float16);
  EXPECT_FALSE(last().subsymbols.empty());
  EXPECT_TRUE(contains_symbol(last().subsymbols, "ltorch.softmax"));
}

TEST_F(Ops, ScaledDotProductAttentionWithGroupedQueryHeads) {
  Value q = input(DType::Float32, {1, 8, 4, 16}), k = input(DType::Float32, {1, 2, 6, 16}),
        v = input(DType::Float32, {1, 2, 6, 32});
  Value y = b.torch("scaled_dot_product_attention", {q, k, v}, {{"enable_gqa", Value(true)}});
  EXPECT_EQ(shape(y), (Shape{1, 8, 4, 32}));
  EXPECT_NO_THROW(ir::verify(trace));
  Value k3 = input(DType::Float32, {1, 3, 6, 16});
  expect_op_error([&] { b.torch("scaled_dot_product_attention", {q, k3, k3}, {{"enable_gqa", Value(true)}}); },
                  {"ltorch.scaled_dot_product_attention", "multiple"});
}

TEST_F(Ops, ScaledDotProductAttentionCausalAndMasked) {
  Value q = input(DType::Float32, {2, 8, 16}), k = input(DType::Float32, {2, 10, 16}), v = input(DType::Float32, {2, 10, 16});
  Value y = b.torch("scaled_dot_product_attention", {q, k, v}, {{"is_causal", Value(true)}});
  EXPECT_EQ(shape(y), (Shape{2, 8, 16}));
  EXPECT_TRUE(contains_symbol(last().subsymbols, "ltorch.masked_fill"));
  Value mask = input(DType::Bool, {8, 10});
  EXPECT_EQ(shape(b.torch("scaled_dot_product_attention", {q, k, v, mask})), (Shape{2, 8, 16}));
  expect_op_error([&] { b.torch("scaled_dot_product_attention", {q, k, v, mask}, {{"is_causal", Value(true)}}); },
                  {"ltorch.scaled_dot_product_attention"});
  // attention dropout: the weights go through dropout (a seed drawn inside the decomposition)
  Value dropped = b.torch("scaled_dot_product_attention", {q, k, v}, {{"dropout_p", Value(0.1)}});
  EXPECT_EQ(shape(dropped), (Shape{2, 8, 16}));
  EXPECT_TRUE(passes::draws_random_numbers(trace.symbols.back()));
  EXPECT_NO_THROW(ir::verify(trace));
}

TEST_F(Ops, AttentionWithLogsumexpShapes) {
  // (output, the rows' log-sum-exps in float32): what torch's fused CPU kernel returns; grouped heads repeated
  Value q = input(DType::BFloat16, {2, 8, 4, 16}), k = input(DType::BFloat16, {2, 2, 6, 16}),
        v = input(DType::BFloat16, {2, 2, 6, 16});
  Value r = b.torch("attention_with_logsumexp", {q, k, v}, {{"is_causal", Value(true)}, {"enable_gqa", Value(true)}});
  ASSERT_TRUE(r.is_seq());
  EXPECT_EQ(shape(r.items()[0]), (Shape{2, 8, 4, 16}));
  EXPECT_EQ(dtype(r.items()[0]), DType::BFloat16);
  EXPECT_EQ(shape(r.items()[1]), (Shape{2, 8, 4}));
  EXPECT_EQ(dtype(r.items()[1]), DType::Float32);
  EXPECT_TRUE(contains_symbol(last().subsymbols, "ltorch.masked_fill"));
  EXPECT_NO_THROW(ir::verify(trace));
}

TEST_F(Ops, CrossEntropyShapes) {
  Value logits = input(DType::Float32, {4, 10}), target = input(DType::Int64, {4});
  Value loss = b.torch("cross_entropy", {logits, target});
  EXPECT_EQ(shape(loss), Shape{});
  EXPECT_EQ(dtype(loss), DType::Float32);
  EXPECT_FALSE(last().subsymbols.empty());
  EXPECT_TRUE(contains_symbol(last().subsymbols, "ltorch.log_softmax"));
  EXPECT_EQ(shape(b.torch("cross_entropy", {logits, target}, {{"reduction", S("none")}})), (Shape{4}));
  Value w = input(DType::Float32, {10});
  EXPECT_EQ(shape(b.torch("cross_entropy", {logits, target, w}, {{"reduction", S("sum")}})), Shape{});
  EXPECT_NO_THROW(ir::verify(trace));
}

TEST_F(Ops, CrossEntropyErrors) {
  Value logits = input(DType::Float32, {4, 10});
  expect_op_error([&] { b.torch("cross_entropy", {logits, input(DType::Int64, {5})}); }, {"ltorch.cross_entropy", "[4]"});
  expect_op_error([&] { b.torch("cross_entropy", {logits, input(DType::Int64, {4})}, {{"reduction", S("avg")}}); },
                  {"ltorch.cross_entropy", "avg"});
  EXPECT_THROW(b.torch("cross_entropy", {logits, input(DType::Float32, {4, 10})}), NotNative);
}

TEST_F(Ops, EmbeddingShape) {
  Value idx = input(DType::Int64, {2, 3}), w = input(DType::Float32, {100, 8});
  EXPECT_EQ(shape(b.torch("embedding", {idx, w})), (Shape{2, 3, 8}));
  expect_op_error([&] { b.torch("embedding", {input(DType::Float32, {2}), w}); }, {"ltorch.embedding"});
}

TEST_F(Ops, DropoutInTrainingDrawsASeedAndCounterBasedUniforms) {
  Value x = input(DType::Float32, {2, 3});
  Value y = b.torch("dropout", {x, Value(0.1), Value(true)});
  EXPECT_EQ(meta(y), meta(x));
  ASSERT_EQ(trace.symbols.size(), 1u);
  EXPECT_TRUE(trace.symbols[0].sym->has(ir::kRandom));
  std::vector<std::string> prims;
  for (const ir::BoundSymbol& s : trace.symbols[0].subsymbols) prims.push_back(s.sym->name);
  EXPECT_EQ(prims, (std::vector<std::string>{"random_seed", "uniform_philox", "lt", "where", "div", "mul"}));
  const ir::BoundSymbol& seed = trace.symbols[0].subsymbols[0];
  EXPECT_TRUE(seed.sym->has(ir::kRandom) && !seed.sym->has(ir::kEffect));
  EXPECT_EQ(meta(seed.output), (TensorMeta{DType::Int64, {}, "cpu", false}));
  const ir::BoundSymbol& u = trace.symbols[0].subsymbols[1];
  EXPECT_TRUE(u.sym->has(ir::kCreation) && !u.sym->has(ir::kRandom));
  EXPECT_EQ(shape(u.output), (Shape{2, 3}));
  // p = 1: input * 0; in place: not native; p outside [0, 1]: an error as torch's.
  EXPECT_EQ(meta(b.torch("dropout", {x, Value(1.0), Value(true)})), meta(x));
  EXPECT_THROW(b.torch("dropout", {x, Value(0.1), Value(true), Value(true)}), NotNative);
  expect_op_error([&] { b.torch("dropout", {x, Value(1.5)}); }, {"ltorch.dropout", "between 0 and 1"});
  EXPECT_NO_THROW(ir::verify(trace));
}

TEST_F(Ops, UniformPhiloxChecksItsArguments) {
  Value seed = b.prim("random_seed", {});
  const Value cpu(ir::Str{"cpu"});
  EXPECT_EQ(meta(b.prim("uniform_philox", {Value::ints({4}), seed, Value(int64_t{0}), Value(DType::BFloat16), cpu})).dtype,
            DType::BFloat16);
  expect_op_error([&] { b.prim("uniform_philox", {Value::ints({4}), seed, Value(int64_t{0}), Value(DType::Int32), cpu}); },
                  {"prims.uniform_philox", "floating-point"});
  Value not_a_seed = input(DType::Int64, {2});
  expect_op_error([&] { b.prim("uniform_philox", {Value::ints({4}), not_a_seed, Value(int64_t{0}), Value(DType::Float32), cpu}); },
                  {"prims.uniform_philox", "seed"});
  expect_op_error([&] { b.prim("uniform_philox", {Value::ints({4}), seed, Value(0.5), Value(DType::Float32), cpu}); },
                  {"prims.uniform_philox", "offset"});
}

TEST_F(Ops, DropoutInEvalOrWithZeroPIsIdentity) {
  Value x = input(DType::Float32, {2, 3});
  EXPECT_EQ(meta(b.torch("dropout", {x, Value(0.5), Value(false)})), meta(x));
  EXPECT_EQ(meta(b.torch("dropout", {x, Value(0.0)})), meta(x));
}

// ---- the op tables ----

TEST(OpTable, FindsOpsByLevel) {
  const OpDef* add = find_op(Level::Prim, "add");
  ASSERT_NE(add, nullptr);
  EXPECT_TRUE(add->symbol.has(ir::kElementwise));
  EXPECT_TRUE(add->meta);
  const OpDef* softmax = find_op(Level::Torch, "softmax");
  ASSERT_NE(softmax, nullptr);
  EXPECT_TRUE(softmax->decompose);
  EXPECT_EQ(find_op(Level::Prim, "softmax"), nullptr);
  EXPECT_FALSE(ops_of(Level::Prim).empty());
  EXPECT_FALSE(ops_of(Level::Torch).empty());
}

TEST(OpTable, EveryPrimHasAnIdentityAndEveryIdentityAPrim) {
  std::vector<const OpDef*> prims = ops_of(Level::Prim);
  EXPECT_EQ(prims.size(), ir::kNumPrims);
  for (const OpDef* def : prims) {
    ASSERT_NE(def->symbol.prim, ir::PrimId::none) << def->symbol.name;
    EXPECT_EQ(ir::prim_name(def->symbol.prim), def->symbol.name);
  }
  EXPECT_EQ(find_op(Level::Torch, "softmax")->symbol.prim, ir::PrimId::none);
  EXPECT_EQ(ir::prim_id("softmax"), std::nullopt);
}

TEST(OpTable, PrimTableNamesTheMissingRow) {
  ir::PrimTable<int> table("folding");
  table.set(ir::PrimId::add, 1);
  EXPECT_EQ(table.at(ir::PrimId::add), 1);
  EXPECT_EQ(table.find(ir::PrimId::sub), nullptr);
  EXPECT_EQ(table.find(ir::PrimId::none), nullptr);
  try {
    table.at(ir::PrimId::sub);
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "no folding rule for prims.sub");
  }
}

TEST(OpTable, OpaqueSymbolsDifferInTheEffectTag) {
  EXPECT_TRUE(opaque_symbol(true)->has(ir::kEffect));
  EXPECT_FALSE(opaque_symbol(false)->has(ir::kEffect));
  EXPECT_TRUE(opaque_symbol(false)->has(ir::kOpaque));
}

TEST(OpTable, CanonicalDimAndBroadcastShapes) {
  EXPECT_EQ(canonical_dim("op", -1, 3), 2);
  EXPECT_EQ(canonical_dim("op", 0, 0), 0);  // a 0-dim tensor takes dim 0 or -1
  EXPECT_EQ(canonical_dim("op", -1, 0), 0);
  EXPECT_THROW(canonical_dim("op", 1, 0), OpError);
  EXPECT_EQ(broadcast_shapes("op", {3, 1}, {4}), ir::dims_of({3, 4}));
  EXPECT_EQ(broadcast_shapes("op", {}, {2}), ir::dims_of({2}));
  EXPECT_THROW(broadcast_shapes("op", {3}, {4}), OpError);
}

// c10's checked conversion of a number to a dtype (Scalar::to<T>), as eager raises "without overflow".
TEST(OpTable, RequireConvertibleFollowsC10sOverflowRule) {
  ir::Trace trace;
  Builder b{trace};
  auto fits = [&](const Value& v, DType d) {
    try {
      require_convertible(b, "op", "arg", v, d);
      return true;
    } catch (const OpError&) {
      return false;
    }
  };
  EXPECT_TRUE(fits(Value(65504.0), DType::Float16));
  EXPECT_FALSE(fits(Value(65505.0), DType::Float16));  // beyond the largest finite value, though it rounds to it
  EXPECT_FALSE(fits(Value(int64_t{70000}), DType::Float16));
  EXPECT_TRUE(fits(Value(INFINITY), DType::Float16));  // an infinity or NaN converts to a float dtype
  EXPECT_TRUE(fits(Value(NAN), DType::BFloat16));
  EXPECT_FALSE(fits(Value(1e39), DType::BFloat16));
  EXPECT_FALSE(fits(Value(-1e300), DType::Float32));
  EXPECT_TRUE(fits(Value(1e300), DType::Float64));
  EXPECT_TRUE(fits(Value(int64_t{127}), DType::Int8));
  EXPECT_FALSE(fits(Value(int64_t{128}), DType::Int8));
  EXPECT_FALSE(fits(Value(127.5), DType::Int8));  // a float is compared before it is truncated
  EXPECT_FALSE(fits(Value(NAN), DType::Int32));
  EXPECT_FALSE(fits(Value(INFINITY), DType::Int64));
  EXPECT_FALSE(fits(Value(9223372036854775808.0), DType::Int64));
  EXPECT_TRUE(fits(Value(int64_t{-255}), DType::UInt8));  // an int wraps into uint8 down to -255
  EXPECT_FALSE(fits(Value(int64_t{-256}), DType::UInt8));
  EXPECT_FALSE(fits(Value(-1.0), DType::UInt8));  // a float does not wrap
  EXPECT_TRUE(fits(Value(int64_t{5}), DType::Bool));
  EXPECT_TRUE(fits(Value(true), DType::Int8));
  EXPECT_TRUE(fits(Value(), DType::Int8));
  // Known only at run time: refused where some value would not convert (the op then runs with torch).
  const Value size(Dim::symbol(trace.new_number(ir::NumberType::Int)));
  const Value integer(ProxyRef{trace.new_number(ir::NumberType::Int)});
  const Value real(ProxyRef{trace.new_number(ir::NumberType::Float)});
  EXPECT_FALSE(fits(size, DType::Int8));
  EXPECT_FALSE(fits(size, DType::Float16));  // a length of 70000
  EXPECT_TRUE(fits(size, DType::Int64));
  EXPECT_TRUE(fits(size, DType::Float32));
  EXPECT_FALSE(fits(integer, DType::Int32));
  EXPECT_TRUE(fits(integer, DType::BFloat16));
  EXPECT_FALSE(fits(real, DType::Int64));  // NaN, infinity
  EXPECT_TRUE(fits(real, DType::Float32));
}

}  // namespace
}  // namespace thunder::ops
