// Tests of the printer (ir/printer.h): traces print as runnable Python.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "ir/printer.h"
#include "ops/op_table.h"

namespace thunder::ir {
namespace {

using ops::Builder;

Value P(ProxyId id) { return Value(ProxyRef{id}); }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_TRUE(contains((haystack), (needle))) << "'" << (needle) << "' not in:\n" << (haystack)
#define EXPECT_NOT_CONTAINS(haystack, needle) \
  EXPECT_FALSE(contains((haystack), (needle))) << "'" << (needle) << "' unexpectedly in:\n" << (haystack)

class Printer : public ::testing::Test {
 protected:
  Trace trace;
  Builder b{trace};

  Value input(DType dtype, std::vector<int64_t> shape, bool requires_grad = false) {
    return P(b.add_input_tensor(TensorMeta{dtype, ir::dims_of(shape), "cpu", requires_grad}));
  }
  std::string repr(const Value& v) { return python_repr(trace, v); }
  std::string print(const PrintOptions& opt = {}) { return to_python(trace, opt); }
};

// ---- whole traces ----

TEST_F(Printer, DefinesTheComputationFunction) {
  Value x = input(DType::Float32, {2, 3}), y = input(DType::Float32, {2, 3});
  trace.output = b.torch("add", {x, y});
  std::string py = print();
  EXPECT_CONTAINS(py, "def computation(t0, t1):\n");
  EXPECT_CONTAINS(py, "import torch\n");
  EXPECT_CONTAINS(py, "from thunder.executors.torchex import prims, ltorch\n");
  EXPECT_CONTAINS(py, "  return t2\n");
}

TEST_F(Printer, PrintsTheImportsItIsGivenAfterTheStandardOnes) {
  trace.output = b.torch("exp", {input(DType::Float32, {2})});
  std::string py = print(PrintOptions{.imports = {"from thunder.core.registry import k_1a as k"}});
  EXPECT_CONTAINS(py, "from thunder.executors.torchex import prims, ltorch\n"
                      "from thunder.core.registry import k_1a as k\n\ndef computation(t0):\n");
}

TEST_F(Printer, UsesTheTraceName) {
  trace.name = "backward_fn";
  trace.output = b.torch("exp", {input(DType::Float32, {2})});
  EXPECT_CONTAINS(print(), "def backward_fn(t0):\n");
}

TEST_F(Printer, CommentsInputMetadata) {
  input(DType::Float32, {2, 3});
  P(b.add_input_number(NumberType::Int));
  std::string py = print();
  EXPECT_CONTAINS(py, "  # t0: \"cpu f32[2, 3]\"\n");
  EXPECT_CONTAINS(py, "  # i1: \"int\"\n");
}

TEST_F(Printer, CommentsTheMetadataOfEveryDefinedProxy) {
  Value x = input(DType::Float32, {2, 3});
  trace.output = b.torch("exp", {x});
  std::string py = print();
  EXPECT_CONTAINS(py, "  t1 = ltorch.exp(t0)  # t1: \"cpu f32[2, 3]\"\n");
}

TEST_F(Printer, MetadataStrings) {
  ProxyInfo t{"t0", true, TensorMeta{DType::BFloat16, {4}, "cuda:0", true}, NumberType::Int};
  EXPECT_EQ(metadata_string(Trace{}, t), "\"cuda:0 bf16[4]\" requires_grad");
  ProxyInfo s{"t1", true, TensorMeta{DType::Int64, {}, "cpu", false}, NumberType::Int};
  EXPECT_EQ(metadata_string(Trace{}, s), "\"cpu i64[]\"");
  ProxyInfo f{"f2", false, {}, NumberType::Float};
  EXPECT_EQ(metadata_string(Trace{}, f), "\"float\"");
  ProxyInfo bo{"b3", false, {}, NumberType::Bool};
  EXPECT_EQ(metadata_string(Trace{}, bo), "\"bool\"");
}

TEST_F(Printer, PrintsSubsymbolsAsIndentedComments) {
  Value x = input(DType::Int32, {2});
  trace.output = b.torch("exp", {x});
  std::string py = print();
  EXPECT_CONTAINS(py, "  t2 = ltorch.exp(t0)");
  EXPECT_CONTAINS(py, "\n  # t1 = prims.convert_element_type(t0, torch.float32)  # t1: \"cpu f32[2]\"\n");
  EXPECT_CONTAINS(py, "\n  # t2 = prims.exp(t1)");
  std::string bare = print(PrintOptions{.subsymbols = false});
  EXPECT_NOT_CONTAINS(bare, "prims.");
  EXPECT_CONTAINS(bare, "  t2 = ltorch.exp(t0)");
}

TEST_F(Printer, NestedSubsymbolsAreIndentedFurther) {
  Value x = input(DType::Float32, {2});
  trace.output = b.torch("silu", {x});  // silu -> ltorch.sigmoid -> prims.sigmoid
  std::string py = print();
  EXPECT_CONTAINS(py, "\n  # t1 = ltorch.sigmoid(t0)");
  EXPECT_CONTAINS(py, "\n    # t1 = prims.sigmoid(t0)");
}

TEST_F(Printer, OptionalArgumentsPrintAsKeywordsOnlyWhenNotDefault) {
  Value x = input(DType::Float32, {2, 3});
  Value s = b.torch("sum", {x, Value(int64_t{1})});
  b.torch("sum", {x, Value(int64_t{0}), Value(true)});
  b.torch("gelu", {x}, {{"approximate", Value(Str{"tanh"})}});
  trace.output = s;
  std::string py = print(PrintOptions{.subsymbols = false});
  EXPECT_CONTAINS(py, "ltorch.sum(t0, dim=1)  #");
  EXPECT_CONTAINS(py, "ltorch.sum(t0, dim=0, keepdim=True)  #");
  EXPECT_CONTAINS(py, "ltorch.gelu(t0, approximate='tanh')  #");
}

TEST_F(Printer, CallExpression) {
  Value x = input(DType::Float32, {2});
  b.torch("mul", {x, Value(int64_t{2})});
  EXPECT_EQ(call_expression(trace, trace.symbols.back()), "ltorch.mul(t0, 2)");
}

TEST_F(Printer, TupleOutputsUnpack) {
  Value x = input(DType::Float32, {4, 2});
  trace.output = b.torch("split", {x, Value(int64_t{2})});
  std::string py = print(PrintOptions{.subsymbols = false});
  EXPECT_CONTAINS(py, "  (t1, t2) = ltorch.split(t0, 2)  # t1: \"cpu f32[2, 2]\", t2: \"cpu f32[2, 2]\"\n");
  EXPECT_CONTAINS(py, "  return (t1, t2)\n");
}

TEST_F(Printer, OpaqueSymbolsPrintTheirCalleeAndKeywords) {
  Value x = input(DType::Float32, {2});
  Value out = P(b.new_tensor(TensorMeta{DType::Float32, {2}}));
  b.opaque("torch.nn.functional.dropout", {x}, {{"p", Value(0.25)}, {"training", Value(true)}}, out);
  b.opaque("print", {x}, {}, Value());  // no output: no assignment
  trace.output = out;
  std::string py = print();
  EXPECT_CONTAINS(py, "  t1 = torch.nn.functional.dropout(t0, p=0.25, training=True)  # t1: \"cpu f32[2]\"\n");
  EXPECT_CONTAINS(py, "\n  print(t0)\n");
}

TEST_F(Printer, TensorConstantsReadTheConstantsTable) {
  trace.output = b.prim("tensor_constant", {Value(int64_t{3}), Value(DType::Float32), Value::ints({2}), Value(Str{"cpu"})});
  std::string py = print();
  EXPECT_CONTAINS(py, "  t0 = _constants[3]  # t0: \"cpu f32[2]\"\n");
}

TEST_F(Printer, SourceLinesPrintOncePerRun) {
  Value x = input(DType::Float32, {2});
  b.set_source("model.py:3 in forward: y = x.exp().neg()");
  Value y = b.torch("neg", {b.torch("exp", {x})});
  b.set_source("model.py:4 in forward: return y * 2");
  trace.output = b.torch("mul", {y, Value(int64_t{2})});
  std::string py = print();
  EXPECT_CONTAINS(py, "\n  # model.py:3 in forward: y = x.exp().neg()\n  t1 = ltorch.exp(t0)");
  EXPECT_CONTAINS(py, "\n  # model.py:4 in forward: return y * 2\n  t3 = ltorch.mul(t2, 2)");
  size_t first = py.find("model.py:3");
  EXPECT_EQ(py.find("model.py:3", first + 1), std::string::npos) << py;
  EXPECT_NOT_CONTAINS(print(PrintOptions{.sources = false}), "model.py");
}

TEST_F(Printer, ProvenanceIsTheFirstLine) {
  trace.provenance = "Dead-code elimination (took 3 us)";
  trace.output = b.torch("exp", {input(DType::Float32, {2})});
  EXPECT_EQ(print().rfind("# Dead-code elimination (took 3 us)\n", 0), 0u);
}

// ---- values ----

TEST_F(Printer, FloatsReadBackAsTheSameDouble) {
  EXPECT_EQ(repr(Value(0.1)), "0.1");
  EXPECT_EQ(repr(Value(1e-5)), "1e-05");
  EXPECT_EQ(repr(Value(2.5)), "2.5");
  EXPECT_EQ(repr(Value(0.30000000000000004)), "0.30000000000000004");
  for (double d : {0.1, 1e-5, 1.0 / 3.0, 0.1 + 0.2, 5e-324, DBL_MAX, DBL_MIN, -1234.5678, 6.02214076e23,
                   9007199254740993.0, 1e16, 0.044715, M_SQRT1_2, 1.1920928955078125e-07}) {
    std::string s = repr(Value(d));
    EXPECT_EQ(std::strtod(s.c_str(), nullptr), d) << s;
    EXPECT_EQ(s.find_first_not_of("0123456789.e+-"), std::string::npos) << s;
  }
}

TEST_F(Printer, WholeFloatsKeepAFloatMarker) {
  // Python must read a float, not an int: "1.0", never "1".
  EXPECT_EQ(repr(Value(1.0)), "1.0");
  EXPECT_EQ(repr(Value(0.0)), "0.0");
  EXPECT_EQ(repr(Value(-0.0)), "-0.0");
  EXPECT_EQ(repr(Value(123456789.0)), "123456789.0");
  for (double d : {100.0, 1e16, 1e22, -3.0}) {
    std::string s = repr(Value(d));
    EXPECT_NE(s.find_first_of(".e"), std::string::npos) << s;
  }
}

TEST_F(Printer, NonFiniteFloatsUseFloatConstructor) {
  EXPECT_EQ(repr(Value(INFINITY)), "float('inf')");
  EXPECT_EQ(repr(Value(-INFINITY)), "float('-inf')");
  EXPECT_EQ(repr(Value(NAN)), "float('nan')");
}

TEST_F(Printer, Scalars) {
  EXPECT_EQ(repr(Value()), "None");
  EXPECT_EQ(repr(Value(true)), "True");
  EXPECT_EQ(repr(Value(false)), "False");
  EXPECT_EQ(repr(Value(int64_t{-7})), "-7");
  EXPECT_EQ(repr(Value(INT64_MIN)), "-9223372036854775808");
  EXPECT_EQ(repr(Value(DType::BFloat16)), "torch.bfloat16");
  EXPECT_EQ(repr(Value(EllipsisT{})), "...");
  EXPECT_EQ(repr(Value(Literal{"torch.contiguous_format"})), "torch.contiguous_format");
}

TEST_F(Printer, TupleOfOneElementHasATrailingComma) {
  Value x = input(DType::Float32, {2});
  EXPECT_EQ(repr(Value::tuple({x})), "(t0,)");
  EXPECT_EQ(repr(Value::ints({3})), "(3,)");
  EXPECT_EQ(repr(Value::tuple({})), "()");
  EXPECT_EQ(repr(Value::ints({2, 3})), "(2, 3)");
}

TEST_F(Printer, ListsAndSlices) {
  EXPECT_EQ(repr(Value::list({Value(int64_t{1})})), "[1]");
  EXPECT_EQ(repr(Value::list({})), "[]");
  EXPECT_EQ(repr(Value(Seq{Seq::Kind::Slice, {Value(), Value(int64_t{3}), Value()}})), "slice(None, 3, None)");
  EXPECT_EQ(repr(Value::tuple({Value::list({Value(1.5)}), Value::tuple({Value(true)})})), "([1.5], (True,))");
}

TEST_F(Printer, StringsAreQuoted) {
  EXPECT_EQ(repr(Value(Str{"none"})), "'none'");
  EXPECT_EQ(repr(Value(Str{""})), "''");
  EXPECT_EQ(repr(Value(Str{"it's"})), "'it\\'s'");
  EXPECT_EQ(repr(Value(Str{"a\\b"})), "'a\\\\b'");
  EXPECT_EQ(repr(Value(Str{"a\nb"})), "'a\\nb'");
}

TEST_F(Printer, StringsWithControlCharactersStayOnOneLine) {
  // A bare carriage return ends a line of Python source; a NUL byte is rejected outright.
  EXPECT_EQ(repr(Value(Str{"a\rb"})), "'a\\rb'");
  EXPECT_EQ(repr(Value(Str{std::string("a\0b", 3)})), "'a\\x00b'");
  EXPECT_EQ(repr(Value(Str{"\x1b"})), "'\\x1b'");
  EXPECT_EQ(repr(Value(Str{"caf\xc3\xa9"})), "'caf\xc3\xa9'");  // UTF-8 passes through
}

}  // namespace
}  // namespace thunder::ir
