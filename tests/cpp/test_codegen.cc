// Tests of the code generator (codegen/): how a kernel plan maps slice_update, slice and a where over a
// one-element predicate onto one loop nest (each data mover's Remap), what the CPU renderer makes of the
// plan, and the rendered kernels compiled and run against references computed here.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "codegen/cpu_dialect.h"
#include "codegen/cpu_expressions.h"
#include "codegen/kernel_plan.h"
#include "codegen/philox.h"
#include "codegen/schedule.h"
#include "ops/op_table.h"
#include "runtime/compiler.h"

namespace thunder::codegen {
namespace {

using ir::DType;
using ir::TensorMeta;
using ir::Value;
using ops::Builder;

constexpr int64_t kUnbounded = IndexRange::kUnbounded;

Value Ints(const std::vector<int64_t>& v) { return Value::ints(v); }

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

// A fresh directory for a kernel cache, removed with its files at the end.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    path = std::string(base && *base ? base : "/tmp") + "/thunder-codegen-test-XXXXXX";
    if (!mkdtemp(path.data())) std::abort();
  }
  ~TempDir() {
    std::string cmd = "rm -rf '" + path + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", path.c_str());
  }
};

// A copy of a kernel input with an inaccessible page right before it (`at_end` false) or right after it:
// a kernel that reads outside its input faults instead of reading a neighbour's bytes.
class Guarded {
 public:
  Guarded(const void* data, size_t bytes, bool at_end) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_ = ((bytes + page - 1) / page + 2) * page;
    void* base = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) std::abort();
    base_ = static_cast<char*>(base);
    if (mprotect(base_, page, PROT_NONE) != 0 || mprotect(base_ + size_ - page, page, PROT_NONE) != 0) std::abort();
    data_ = at_end ? base_ + size_ - page - bytes : base_ + page;
    std::memcpy(data_, data, bytes);
  }
  ~Guarded() { munmap(base_, size_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  void* data() const { return data_; }

 private:
  char* base_ = nullptr;
  char* data_ = nullptr;
  size_t size_ = 0;
};

// slice_update's meaning over a row-major 2-d tensor of `cols` columns: `a` whose elements
// [start0 + i * step0, start1 + j * step1] are src[i, j] (src has `src_cols` columns).
template <class T>
std::vector<T> updated(std::vector<T> a, int64_t cols, const std::vector<T>& src, int64_t src_cols,
                       std::vector<int64_t> start, std::vector<int64_t> step) {
  const int64_t rows = static_cast<int64_t>(src.size()) / src_cols;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < src_cols; ++j)
      a[(start[0] + i * step[0]) * cols + start[1] + j * step[1]] = src[i * src_cols + j];
  return a;
}

// The bits of a float that bfloat16 holds exactly.
uint16_t bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

// A float rounded to the nearest bfloat16 (ties to even; no NaN here), and a bfloat16's value.
uint16_t bf16_rounded(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}
float bf16_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

class Codegen : public ::testing::Test {
 protected:
  ir::Trace trace;
  Builder b{trace};

  Value input(DType d, std::vector<int64_t> shape) {
    return Value(ir::ProxyRef{b.add_input_tensor(TensorMeta{d, ir::dims_of(shape)})});
  }
  Value prim(std::string_view name, std::vector<Value> args) { return b.prim(name, std::move(args)); }

  // Plans every symbol of the trace as one kernel whose outputs are `outs`.
  std::optional<KernelPlan> plan(const std::vector<Value>& outs, std::string* why = nullptr) {
    std::set<ProxyId> live;
    for (const Value& v : outs) live.insert(v.proxy());
    return plan_kernel(trace, trace.symbols, live, why);
  }

  HalfRounding rounding = HalfRounding::EveryOp;  // how render() renders
  std::string render(const KernelPlan& p) { return render_cpu_module(trace, {{&p, "kernel"}}, rounding); }
  // The kernel's own code, without the prelude.
  std::string kernel_code(const KernelPlan& p) {
    const std::string all = render(p);
    return all.substr(all.find("extern \"C\" int kernel"));
  }

  // Compiles the plan's kernel and runs it on one thread with the given contiguous inputs, each placed
  // against an inaccessible page, after it and then before it (every load must stay in bounds, also those
  // of a select's side not taken); returns the outputs, which must be the same both times.
  template <class T>
  std::vector<std::vector<T>> run(const KernelPlan& p, const std::map<ProxyId, std::vector<T>>& inputs) {
    TempDir dir;
    runtime::CompileOptions options;
    options.cache_dir = dir.path;
    auto module = runtime::load_module(render(p), options);
    auto kernel = reinterpret_cast<runtime::Kernel>(module->symbol("kernel"));
    std::vector<std::vector<std::vector<T>>> runs;
    for (bool at_end : {true, false}) {
      std::vector<std::unique_ptr<Guarded>> guarded;
      std::vector<std::vector<T>> outs;
      for (ProxyId o : p.outputs) outs.emplace_back(static_cast<size_t>(trace.tensor(o).numel().value("test")));
      std::vector<void*> args;
      for (ProxyId in : p.inputs) {
        const std::vector<T>& values = inputs.at(in);
        guarded.push_back(std::make_unique<Guarded>(values.data(), values.size() * sizeof(T), at_end));
        args.push_back(guarded.back()->data());
      }
      for (std::vector<T>& o : outs) args.push_back(o.data());
      args.push_back(reinterpret_cast<void*>(intptr_t{1}));
      for (const SizeArgument& a : size_arguments(trace, p)) args.push_back(reinterpret_cast<void*>(intptr_t{a.value}));
      EXPECT_EQ(kernel(args.data()), 0);
      runs.push_back(std::move(outs));
    }
    EXPECT_EQ(runs[0], runs[1]);
    return runs[0];
  }
};

std::vector<float> iota_floats(size_t n, float scale, float shift) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale + shift;
  return v;
}

// ---- slice_update ----

TEST_F(Codegen, SliceUpdateReadsItsUpdateOverItsBoxAndTheRestFromItsInput) {
  Value x = input(DType::Float32, {4, 8});
  Value src = prim("neg", {prim("slice", {x, Ints({1, 2}), Ints({3, 5}), Value()})});
  Value base = prim("mul", {x, Value(2.0)});
  Value out = prim("slice_update", {base, src, Ints({1, 2}), Ints({3, 5}), Value()});
  Value y = prim("add", {out, Value(1.0)});
  std::string why;
  auto p = plan({y}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->domain, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(p->inputs, (std::vector<ProxyId>{x.proxy()}));
  const Remap& r = p->remaps.at(out.proxy());
  ASSERT_EQ(r.cases.size(), 2u);
  EXPECT_EQ(r.cases[0].operand, src.proxy());
  EXPECT_EQ(r.cases[0].when, (std::vector<IndexRange>{{0, 1, 3, 1}, {1, 2, 5, 1}}));
  EXPECT_EQ(r.cases[0].at, (std::vector<IndexMap>{{0, 1, -1, 1, 2}, {1, 1, -2, 1, 3}}));
  EXPECT_EQ(r.cases[1].operand, base.proxy());
  EXPECT_TRUE(r.cases[1].when.empty() && r.cases[1].at.empty());
  EXPECT_EQ(p->range_bounds(1), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(p->range_bounds(0), (std::vector<int64_t>{1, 3}));

  const std::string code = kernel_code(*p);
  // The innermost loop splits at the box's columns; inside them the update is read at a fixed offset
  // (unclamped: contiguous), its row clamped (a select computes it on every row); the row test is hoisted.
  EXPECT_EQ(count(code, "for (int64_t i1 = "), 3u) << code;
  EXPECT_NE(code.find("for (int64_t i1 = 2LL; i1 < 5LL; ++i1)"), std::string::npos) << code;
  EXPECT_NE(code.find("const bool in_range0 = (i0 >= 1LL && i0 < 3LL);"), std::string::npos) << code;
  EXPECT_NE(code.find(" = i1 - 2LL;"), std::string::npos) << code;
  EXPECT_NE(code.find("kmath::max<int64_t>(i0 - 1LL, 0LL), 1LL)"), std::string::npos) << code;

  const std::vector<float> xs = iota_floats(32, 0.5f, -3.0f);
  std::vector<float> base_ref(32), box;
  for (size_t i = 0; i < 32; ++i) base_ref[i] = xs[i] * 2;
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 2; j < 5; ++j) box.push_back(-xs[i * 8 + j]);
  std::vector<float> expected = updated(base_ref, 8, box, 3, {1, 2}, {1, 1});
  for (float& v : expected) v += 1;
  EXPECT_EQ(run<float>(*p, {{x.proxy(), xs}})[0], expected);
}

TEST_F(Codegen, SliceUpdateAloneTakesBothOperandsAsInputs) {
  Value x = input(DType::Float64, {3, 5});
  Value y = input(DType::Float64, {3, 2});
  Value out = prim("slice_update", {x, y, Ints({0, 1}), Ints({3, 3}), Value()});
  auto p = plan({out});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->inputs, (std::vector<ProxyId>{x.proxy(), y.proxy()}));
  EXPECT_EQ(p->outputs, (std::vector<ProxyId>{out.proxy()}));
  const Remap& r = p->remaps.at(out.proxy());
  ASSERT_EQ(r.cases.size(), 2u);
  // Whole along dim 0: no range there, and no index map.
  EXPECT_EQ(r.cases[0].when, (std::vector<IndexRange>{{1, 1, 3, 1}}));
  EXPECT_EQ(r.cases[0].at, (std::vector<IndexMap>{{1, 1, -1, 1, 2}}));

  std::vector<double> xs(15), ys(6);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>(i) + 0.25;
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = -static_cast<double>(i) - 0.5;
  EXPECT_EQ(run<double>(*p, {{x.proxy(), xs}, {y.proxy(), ys}})[0], updated(xs, 5, ys, 2, {0, 1}, {1, 1}));
}

// A select computes both of its sides everywhere: the update's index is clamped into its range where it is
// not selected. run() puts every input against an inaccessible page, so a load out of bounds faults.
TEST_F(Codegen, AnUpdateOfSomeRowsIsReadInBoundsOnEveryRow) {
  Value x = input(DType::Float32, {4, 6});
  Value y = input(DType::Float32, {1, 6});
  Value out = prim("slice_update", {x, prim("neg", {y}), Ints({2, 0}), Ints({3, 6}), Value()});
  auto p = plan({out});
  ASSERT_TRUE(p);
  std::vector<float> xs = iota_floats(24, 1.0f, 0.0f), ys = iota_floats(6, 1.0f, 100.0f), box(6);
  for (size_t i = 0; i < 6; ++i) box[i] = -ys[i];
  EXPECT_EQ(run<float>(*p, {{x.proxy(), xs}, {y.proxy(), ys}})[0], updated(xs, 6, box, 6, {2, 0}, {1, 1}));
}

TEST_F(Codegen, AnUpdateOfA1dTensorIsReadInBoundsEverywhere) {
  // A 1-d domain's loop is not split: the update is read on every element, clamped.
  Value x = input(DType::Float32, {10});
  Value y = input(DType::Float32, {3});
  Value out = prim("slice_update", {x, y, Ints({4}), Ints({7}), Value()});
  auto p = plan({out});
  ASSERT_TRUE(p);
  EXPECT_NE(kernel_code(*p).find("kmath::min<int64_t>(kmath::max<int64_t>(i0 - 4LL, 0LL), 2LL)"), std::string::npos);
  std::vector<float> xs = iota_floats(10, 1.0f, 0.0f), ys = iota_floats(3, 1.0f, 50.0f), expected = xs;
  for (size_t i = 0; i < 3; ++i) expected[4 + i] = ys[i];
  EXPECT_EQ(run<float>(*p, {{x.proxy(), xs}, {y.proxy(), ys}})[0], expected);
}

TEST_F(Codegen, StridedSliceUpdateOfInt64ReadsItsUpdateOnTheStepGrid) {
  Value x = input(DType::Int64, {6, 9});
  Value src = prim("add", {prim("slice", {x, Ints({0, 0}), Ints({3, 3}), Value()}), Value(int64_t{100})});
  Value out = prim("slice_update", {x, src, Ints({1, 2}), Ints({6, 9}), Ints({2, 3})});
  auto p = plan({out});
  ASSERT_TRUE(p);
  const Remap& r = p->remaps.at(out.proxy());
  ASSERT_EQ(r.cases.size(), 2u);
  // Rows 1, 3, 5 and columns 2, 5, 8: each box reaches the end of its dim (no upper test).
  EXPECT_EQ(r.cases[0].when, (std::vector<IndexRange>{{0, 1, kUnbounded, 2}, {1, 2, kUnbounded, 3}}));
  EXPECT_EQ(r.cases[0].at, (std::vector<IndexMap>{{0, 1, -1, 2, 3}, {1, 1, -2, 3, 3}}));
  const std::string code = kernel_code(*p);
  EXPECT_NE(code.find("(i1 - 2LL) % 3LL == 0"), std::string::npos) << code;
  EXPECT_NE(code.find("(i1 - 2LL) / 3LL"), std::string::npos) << code;

  std::vector<int64_t> xs(54), box;
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<int64_t>(i) * 7 - 50;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) box.push_back(xs[i * 9 + j] + 100);
  EXPECT_EQ(run<int64_t>(*p, {{x.proxy(), xs}})[0], updated(xs, 9, box, 3, {1, 2}, {2, 3}));
}

TEST_F(Codegen, SliceUpdateOfBFloat16RoundsLikeEveryOtherOp) {
  Value x = input(DType::BFloat16, {4, 16});
  Value src = prim("neg", {prim("slice", {x, Ints({0, 0}), Ints({2, 16}), Value()})});
  Value out = prim("slice_update", {x, src, Ints({2, 0}), Ints({4, 16}), Value()});
  auto p = plan({out});
  ASSERT_TRUE(p);
  const std::string code = kernel_code(*p);
  EXPECT_NE(code.find("const uint16_t* __restrict in0"), std::string::npos) << code;
  EXPECT_NE(code.find("bf16_round((float)(-"), std::string::npos) << code;
  std::vector<uint16_t> xs(64), box;
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = bf16(static_cast<float>(i) * 0.75f - 20.0f);
  for (size_t i = 0; i < 32; ++i) box.push_back(static_cast<uint16_t>(xs[i] ^ 0x8000));  // negated: the sign bit
  EXPECT_EQ(run<uint16_t>(*p, {{x.proxy(), xs}})[0], updated(xs, 16, box, 16, {2, 0}, {1, 1}));
}

TEST_F(Codegen, HalfRoundingAtStoresKeepsFloat32BetweenOps) {
  // x * x + x in bfloat16: rounded after the product as eager does (EveryOp), or only where stored (AtStores,
  // a backward's kernels); a conversion to bfloat16 rounds in both.
  Value x = input(DType::BFloat16, {2, 8});
  Value sum = prim("add", {prim("mul", {x, x}), x});
  Value back = prim("convert_element_type", {prim("convert_element_type", {sum, Value(DType::Float32)}),
                                             Value(DType::BFloat16)});
  auto p = plan({sum, back});
  ASSERT_TRUE(p);
  std::vector<uint16_t> xs(16);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = bf16(1.0f + static_cast<float>(i) / 128.0f);  // x * x needs 16 bits
  std::vector<uint16_t> every_op(16), at_stores(16);
  for (size_t i = 0; i < xs.size(); ++i) {
    const float v = bf16_float(xs[i]);
    every_op[i] = bf16_rounded(bf16_float(bf16_rounded(v * v)) + v);
    at_stores[i] = bf16_rounded(v * v + v);
  }
  ASSERT_NE(every_op, at_stores);  // the inputs tell the two apart
  const std::string rounded = kernel_code(*p);
  EXPECT_NE(rounded.find("bf16_round((float)(v0 * v0))"), std::string::npos) << rounded;
  EXPECT_EQ(run<uint16_t>(*p, {{x.proxy(), xs}})[0], every_op);
  rounding = HalfRounding::AtStores;
  const std::string code = kernel_code(*p);
  EXPECT_EQ(code.find("bf16_round((float)(v0 * v0))"), std::string::npos) << code;
  EXPECT_NE(code.find("bf16_round((float)("), std::string::npos) << code;  // the conversion
  const auto outs = run<uint16_t>(*p, {{x.proxy(), xs}});
  EXPECT_EQ(outs[0], at_stores);
  EXPECT_EQ(outs[1], at_stores);
}

TEST_F(Codegen, ABoolBecomesANumberByASelect) {
  // GCC 12 does not vectorize a loop converting a bool to float with a cast; it does with a select.
  Value x = input(DType::Float32, {4, 8});
  Value out = prim("convert_element_type", {prim("gt", {x, Value(0.0)}), Value(DType::Float32)});
  auto p = plan({out});
  ASSERT_TRUE(p);
  const std::string code = kernel_code(*p);
  EXPECT_NE(code.find("? (float)1 : (float)0)"), std::string::npos) << code;
  std::vector<float> xs(32), expected(32);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i) - 15.5f, expected[i] = xs[i] > 0 ? 1.0f : 0.0f;
  EXPECT_EQ(run<float>(*p, {{x.proxy(), xs}})[0], expected);
}

TEST_F(Codegen, NarrowDtypesKeepASliceUpdateStridedAlongTheInnermostDimOutside) {
  // Its update would be read by a gather, which the CPU lacks for 2-byte elements.
  Value x = input(DType::BFloat16, {4, 16});
  Value src = prim("neg", {prim("slice", {x, Ints({0, 0}), Ints({4, 8}), Value()})});
  Value out = prim("slice_update", {x, src, Ints({0, 0}), Ints({4, 16}), Ints({1, 2})});
  std::string why;
  EXPECT_FALSE(plan({out}, &why));
  EXPECT_EQ(why, "gathers along the innermost dim of narrow dtypes");
}

TEST_F(Codegen, AnUpdateThatIsAlsoAnOutputIsNotPlannedWithTheUpdate) {
  // The loops store outputs over the whole domain; an update is computed over its box only.
  Value x = input(DType::Float32, {4, 8});
  Value src = prim("neg", {prim("slice", {x, Ints({1, 2}), Ints({3, 5}), Value()})});
  Value out = prim("slice_update", {x, src, Ints({1, 2}), Ints({3, 5}), Value()});
  std::string why;
  EXPECT_FALSE(plan({out, src}, &why));
  EXPECT_EQ(why, "an output also read over other indices");
  EXPECT_TRUE(plan({out}));
}

TEST_F(Codegen, SliceUpdateStaysOutOfKernelsWithReductions) {
  Value x = input(DType::Float32, {4, 8});
  Value y = input(DType::Float32, {4, 1});
  Value out = prim("slice_update", {x, prim("exp", {y}), Ints({0, 3}), Ints({4, 4}), Value()});
  Value total = prim("sum", {out, Ints({1})});
  std::string why;
  EXPECT_FALSE(plan({total}, &why));
  EXPECT_EQ(why, "prims.slice_update in a kernel with reductions");
}

TEST_F(Codegen, AnEmptyUpdateLeavesOnlyItsInput) {
  Value x = input(DType::Float32, {4, 8});
  Value empty = prim("slice", {x, Ints({0, 0}), Ints({0, 8}), Value()});
  Value out = prim("slice_update", {prim("neg", {x}), empty, Ints({2, 0}), Ints({2, 8}), Value()});
  auto p = plan({out});
  ASSERT_TRUE(p);
  ASSERT_EQ(p->remaps.at(out.proxy()).cases.size(), 1u);
  std::vector<float> xs = iota_floats(32, 1.0f, -7.0f), expected(32);
  for (size_t i = 0; i < 32; ++i) expected[i] = -xs[i];
  EXPECT_EQ(run<float>(*p, {{x.proxy(), xs}})[0], expected);
}

// ---- one-element values: a vector's elements read one by one, a scalar next to a tensor ----

TEST_F(Codegen, ElementsOfAVectorReadOneByOnePlanOnADomainOfOneElement) {
  // y + x[0] * x[0] + x[3]: each element a slice reshaped to 0-d, read at a constant index; the 0-d result
  // needs a domain dim to read them along.
  Value x = input(DType::Float32, {5});
  Value y = input(DType::Float32, {});
  auto element = [&](int64_t i) { return prim("reshape", {prim("slice", {x, Ints({i}), Ints({i + 1}), Value()}), Ints({})}); };
  Value x0 = element(0);
  Value out = prim("add", {prim("add", {y, prim("mul", {x0, x0})}), element(3)});
  std::string why;
  auto p = plan({out}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->domain, (std::vector<int64_t>{1}));
  EXPECT_EQ(p->inputs, (std::vector<ProxyId>{x.proxy(), y.proxy()}));
  const std::vector<float> xs = iota_floats(5, 1.5f, -2.0f);
  EXPECT_EQ(run<float>(*p, {{x.proxy(), xs}, {y.proxy(), {0.25f}}})[0], (std::vector<float>{0.25f + xs[0] * xs[0] + xs[3]}));
}

TEST_F(Codegen, AOneElementOutputOfALargerDomainIsStoredOnce) {
  // The gradient of x[2] ** 2 (an update of zeros: full fused as a constant) next to the 0-d value itself.
  Value x = input(DType::Float32, {6});
  Value s = prim("reshape", {prim("slice", {x, Ints({2}), Ints({3}), Value()}), Ints({})});
  Value g = prim("mul", {s, Value(2.0)});
  Value zeros = prim("full", {Ints({6}), Value(0.0), Value(DType::Float32), Value(ir::Str{"cpu"})});
  Value grad = prim("slice_update", {zeros, prim("reshape", {g, Ints({1})}), Ints({2}), Ints({3}), Value()});
  std::string why;
  auto p = plan({grad, g}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->domain, (std::vector<int64_t>{6}));
  EXPECT_EQ(p->inputs, (std::vector<ProxyId>{x.proxy()}));
  const std::string code = kernel_code(*p);
  EXPECT_NE(code.find("if (i0 == 0) out"), std::string::npos) << code;
  EXPECT_NE(code.find(" = (float)0;"), std::string::npos) << code;
  const std::vector<float> xs = iota_floats(6, 1.0f, 0.5f);
  auto outs = run<float>(*p, {{x.proxy(), xs}});
  const size_t gi = p->outputs[0] == g.proxy() ? 0 : 1;
  EXPECT_EQ(outs[gi], (std::vector<float>{xs[2] * 2}));
  EXPECT_EQ(outs[1 - gi], (std::vector<float>{0, 0, xs[2] * 2, 0, 0, 0}));
}

// ---- a where over a one-element predicate, and a chain of updates built from it ----

TEST_F(Codegen, WhereWithAZeroDimPredicateBroadcastsIt) {
  Value x = input(DType::Float32, {3, 4});
  Value one = prim("slice", {x, Ints({1, 2}), Ints({2, 3}), Value()});
  Value c = prim("gt", {prim("reshape", {one, Ints({})}), Value(0.0)});
  Value y = prim("where", {c, prim("neg", {x}), x});
  auto p = plan({y});
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->align.at(c.proxy()).empty());
  // The one element is read at the constant index [1, 2] everywhere: the slice's result is broadcast along
  // both dims, so its source's dims are pinned (scale 0).
  EXPECT_EQ(p->remaps.at(one.proxy()).cases[0].at, (std::vector<IndexMap>{{0, 0, 1, 1, 3}, {1, 0, 2, 1, 4}}));
  for (float sign : {1.0f, -1.0f}) {
    std::vector<float> xs = iota_floats(12, sign, sign * -5.5f), expected = xs;  // x[1, 2] = sign * 0.5
    if (sign > 0)
      for (float& v : expected) v = -v;
    EXPECT_EQ(run<float>(*p, {{x.proxy(), xs}})[0], expected);
  }
}

TEST_F(Codegen, WherePrimTakesAOneElementPredicateOfNoHigherRank) {
  Value x = input(DType::Float32, {2, 3});
  Value c0 = input(DType::Bool, {});
  Value c1 = input(DType::Bool, {1});
  Value c3 = input(DType::Bool, {1, 1, 1});
  EXPECT_EQ(b.meta(prim("where", {c0, x, x})).shape, ir::dims_of({2, 3}));
  EXPECT_EQ(b.meta(prim("where", {c1, x, Value(1.5)})).shape, ir::dims_of({2, 3}));
  // torch.where would broadcast to [1, 2, 3]: not the branches' shape.
  EXPECT_THROW(prim("where", {c3, x, x}), ops::OpError);
  EXPECT_THROW(prim("where", {input(DType::Bool, {2}), x, x}), ops::OpError);
}

// The brief's chain: element i of a 1x20 row replaced, in turn, by sin or cos of itself, as the 0-d
// predicate x[0, i] > 0.5 chooses; `pred_column(i)` picks the column the predicate reads.
class Chain : public Codegen {
 protected:
  Value build(Value x, int64_t (*pred_column)(int64_t)) {
    Value v = x;
    for (int64_t i = 0; i < 20; ++i) {
      Value s = prim("slice", {x, Ints({0, i}), Ints({1, i + 1}), Value()});
      const int64_t k = pred_column(i);
      Value ps = k == i ? s : prim("slice", {x, Ints({0, k}), Ints({1, k + 1}), Value()});
      Value c = prim("gt", {prim("reshape", {ps, Ints({})}), Value(0.5)});
      Value w = prim("where", {c, prim("sin", {s}), prim("cos", {s})});
      v = prim("slice_update", {v, w, Ints({0, i}), Ints({1, i + 1}), Value()});
    }
    return v;
  }

  void expect_runs(const KernelPlan& p, Value x, int64_t (*pred_column)(int64_t)) {
    std::vector<float> xs(20);
    for (int64_t i = 0; i < 20; ++i) xs[i] = static_cast<float>((i * 7) % 20) / 19.0f;
    const std::vector<float> out = run<float>(p, {{x.proxy(), xs}})[0];
    for (int64_t i = 0; i < 20; ++i)
      EXPECT_FLOAT_EQ(out[i], xs[pred_column(i)] > 0.5f ? std::sin(xs[i]) : std::cos(xs[i])) << "element " << i;
  }
};

int64_t same_column(int64_t i) { return i; }
int64_t next_column(int64_t i) { return (i + 1) % 20; }

TEST_F(Chain, TwentyUpdatesChosenByZeroDimPredicatesAreOneKernelOverTheRow) {
  Value x = input(DType::Float32, {1, 20});
  Value v = build(x, same_column);
  std::string why;
  auto p = plan({v}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->domain, (std::vector<int64_t>{1, 20}));
  EXPECT_EQ(p->inputs, (std::vector<ProxyId>{x.proxy()}));
  EXPECT_EQ(p->outputs, (std::vector<ProxyId>{v.proxy()}));
  std::vector<int64_t> bounds;
  for (int64_t i = 1; i < 20; ++i) bounds.push_back(i);
  EXPECT_EQ(p->range_bounds(1), bounds);
  // One piece per element: each computes only the update selected there.
  const std::string code = kernel_code(*p);
  EXPECT_EQ(count(code, "for (int64_t i1 = "), 20u) << code;
  EXPECT_EQ(count(code, " = thunder_sinf("), 20u) << code;
  EXPECT_EQ(count(code, " ? "), 20u) << code;  // the wheres; the updates are decided per piece
  expect_runs(*p, x, same_column);
}

TEST_F(Chain, PredicatesReadFromOtherColumnsStillPlanAsOneKernel) {
  Value x = input(DType::Float32, {1, 20});
  Value v = build(x, next_column);
  std::string why;
  auto p = plan({v}, &why);
  ASSERT_TRUE(p) << why;
  expect_runs(*p, x, next_column);
}

// ---- the op-expression table and schedules ----

TEST(CpuExpressions, EveryPrimAKernelComputesHasARowInTheCppDialect) {
  for (size_t i = 1; i <= ir::kNumPrims; ++i) {
    const auto id = static_cast<ir::PrimId>(i);
    const PrimKind* kind = plan_table().find(id);
    if (kind == nullptr) continue;
    const cpu::CppOp* row = cpu::cpu_expressions().find(id);
    switch (kind->role) {
      case PrimRole::Elementwise:
      case PrimRole::IndexOnly:
        ASSERT_NE(row, nullptr) << ir::prim_name(id);
        EXPECT_TRUE(row->expr) << ir::prim_name(id);
        break;
      case PrimRole::Reduction:
        ASSERT_NE(row, nullptr) << ir::prim_name(id);
        EXPECT_TRUE(row->reduce) << ir::prim_name(id);
        break;
      default:  // index arithmetic and constants: the dialect writes them itself
        EXPECT_EQ(row, nullptr) << ir::prim_name(id);
    }
  }
}

TEST(CpuExpressions, AMissingRowNamesThePrimAndTheTransform) {
  try {
    cpu::cpu_expressions().at(ir::PrimId::matmul);
    FAIL() << "matmul has no C++ expression";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "no cpu expression rule for prims.matmul");
  }
  EXPECT_FALSE(is_fusible_prim("matmul"));
  EXPECT_TRUE(is_fusible_prim("sin"));
  EXPECT_FALSE(is_fusible_prim("no_such_prim"));
}

TEST(CpuExpressions, RowsWriteTheirExpressions) {
  const std::vector<std::string> x = {"a", "b", "c"};
  auto write = [&](ir::PrimId id, DType out, DType in) {
    const std::string T = cpu::compute_type(out);
    return cpu::cpu_expressions().at(id).expr(
        cpu::ExprArgs{out, in, x, T, ir::is_floating(in), T == "float" ? "f" : ""});
  };
  EXPECT_EQ(write(ir::PrimId::add, DType::Int8, DType::Int8), "(int8_t)(a + b)");
  EXPECT_EQ(write(ir::PrimId::erf, DType::Float32, DType::Float32), "thunder_erff(a)");
  EXPECT_EQ(write(ir::PrimId::erf, DType::Float64, DType::Float64), "erf(a)");
  EXPECT_EQ(write(ir::PrimId::exp, DType::Float32, DType::Float32), "expf(a)");
  EXPECT_EQ(write(ir::PrimId::maximum, DType::Int32, DType::Int32), "kmath::max<int32_t>(a, b)");
  EXPECT_EQ(write(ir::PrimId::where, DType::Float32, DType::Float32), "(a ? b : c)");
  EXPECT_TRUE(cpu::cpu_expressions().at(ir::PrimId::tanh).vector_math);
  EXPECT_FALSE(cpu::cpu_expressions().at(ir::PrimId::add).vector_math);
  const cpu::Reduction sum = cpu::cpu_expressions().at(ir::PrimId::sum).reduce(DType::Float32, false);
  EXPECT_EQ(sum.acc_type, "double");
  EXPECT_EQ(cpu::cpu_expressions().at(ir::PrimId::amax).reduce(DType::Float32, true).nan_flag, true);
}

class Schedules : public Codegen {
 protected:
  // exp(x - max) / sum over the last dim of an [rows, n] float tensor, planned and scheduled.
  Schedule softmax(int64_t rows, int64_t n, DType d = DType::Float32) {
    Value x = input(d, {rows, n});
    Value m = prim("amax", {x, Ints({1})});
    Value e = prim("exp", {prim("sub", {x, prim("broadcast_in_dim", {m, Ints({rows, n}), Ints({0})})})});
    Value s = prim("sum", {e, Ints({1})});
    Value y = prim("div", {e, prim("broadcast_in_dim", {s, Ints({rows, n}), Ints({0})})});
    std::string why;
    auto p = plan({y}, &why);
    EXPECT_TRUE(p) << why;
    plan_ = *p;
    reductions_ = {m.proxy(), s.proxy()};
    return schedule_kernel(trace, plan_);
  }
  KernelPlan plan_;
  std::set<ProxyId> reductions_;
};

TEST_F(Schedules, ShortRowsKeepTheirExpInARowBufferAndTestTheGrainAtRunTime) {
  const Schedule s = softmax(4, 64);
  EXPECT_EQ(s.outer, (std::vector<int>{0}));
  EXPECT_EQ(s.inner, (std::vector<int>{1}));
  EXPECT_TRUE(s.parallel && s.parallel_by_size);  // on one thread at these sizes, decided by the kernel
  EXPECT_FALSE(s.parallel_inner);
  EXPECT_FALSE(s.stream);
  EXPECT_TRUE(s.lane_reductions.empty());  // rows under 256 elements: OpenMP's reduction clauses
  EXPECT_GT(s.row_cache, 0);
  EXPECT_TRUE(s.float_accumulation);
}

TEST_F(Schedules, ManyLongRowsRunInParallelAndReduceInLanes) {
  const Schedule s = softmax(64, 1024);
  EXPECT_TRUE(s.parallel && s.parallel_by_size);
  EXPECT_FALSE(s.parallel_inner);
  EXPECT_EQ(s.lane_reductions, reductions_);
  EXPECT_GE(s.row_cache, 1024);
}

TEST_F(Schedules, OneLongRowRunsItsReductionsInParallel) {
  const Schedule s = softmax(1, 1 << 17);
  EXPECT_FALSE(s.parallel);
  EXPECT_TRUE(s.parallel_inner);
  EXPECT_TRUE(s.lane_reductions.empty());
  EXPECT_EQ(s.row_cache, 0);
  EXPECT_FALSE(s.float_accumulation);  // 128K elements: float sums accumulate in double
}

TEST_F(Schedules, OutputsOf16MiBAreStreamed) { EXPECT_TRUE(softmax(4096, 1024).stream); }

TEST_F(Schedules, SmallerOutputsStayInCache) { EXPECT_FALSE(softmax(2048, 1024).stream); }

TEST_F(Schedules, LargeElementwiseOutputsAreStreamedInParallel) {
  Value x = input(DType::Float32, {4096, 1024});
  Value y = prim("mul", {x, Value(2.0)});
  auto p = plan({y});
  ASSERT_TRUE(p);
  const Schedule s = schedule_kernel(trace, *p);
  EXPECT_TRUE(s.stream && s.parallel);
  EXPECT_TRUE(s.cuts.empty());
}

// ---- outputs written over inputs that die in the kernel ----

TEST_F(Codegen, AnElementwiseOutputIsWrittenOverADyingInputOfItsDtypeAndShape) {
  Value x = input(DType::Float32, {4, 8}), bias = input(DType::Float32, {8}), y = input(DType::Float32, {4, 8});
  Value z = prim("add", {prim("tanh", {x}), prim("broadcast_in_dim", {bias, Value::ints({4, 8}), Value::ints({1})})});
  auto p = plan({z});
  ASSERT_TRUE(p);
  // Only a dying input of the domain's shape and the output's dtype: never the broadcast bias.
  EXPECT_EQ(written_over(trace, *p, {bias.proxy()}), std::vector<int>{});
  EXPECT_EQ(written_over(trace, *p, {y.proxy()}), std::vector<int>{});  // not an input of this kernel
  const std::vector<int> over = written_over(trace, *p, {x.proxy(), bias.proxy()});
  ASSERT_EQ(over, std::vector<int>{0});
  p->written_over = over;
  const std::string code = kernel_code(*p);
  EXPECT_NE(code.find("const float* in0 = out0;  // written over in place"), std::string::npos) << code;
  EXPECT_EQ(code.find("__restrict in0"), std::string::npos) << code;
  // The kernel computes in place: the input's buffer is the output's.
  std::vector<float> data = iota_floats(32, 0.1f, -1.0f), b8 = iota_floats(8, 1.0f, 0.0f), expected(32);
  for (size_t i = 0; i < 32; ++i) expected[i] = std::tanh(data[i]) + b8[i % 8];
  std::vector<void*> args = {data.data(), b8.data(), data.data(), reinterpret_cast<void*>(intptr_t{1})};
  for (const SizeArgument& a : size_arguments(trace, *p)) args.push_back(reinterpret_cast<void*>(intptr_t{a.value}));
  TempDir dir;
  runtime::CompileOptions options;
  options.cache_dir = dir.path;
  auto module = runtime::load_module(render(*p), options);
  ASSERT_EQ(reinterpret_cast<runtime::Kernel>(module->symbol("kernel"))(args.data()), 0);
  for (size_t i = 0; i < 32; ++i) EXPECT_NEAR(data[i], expected[i], 1e-6f) << i;
}

TEST_F(Codegen, NoOutputIsWrittenOverAnInputOfAKernelThatReduces) {
  Value x = input(DType::Float32, {4, 8});
  Value e = prim("exp", {x});
  Value s = prim("sum", {e, Value::ints({1})});
  Value z = prim("div", {e, prim("broadcast_in_dim", {s, Value::ints({4, 8}), Value::ints({0})})});
  auto p = plan({z});
  ASSERT_TRUE(p);
  EXPECT_EQ(written_over(trace, *p, {x.proxy()}), std::vector<int>{});
}

TEST_F(Codegen, AnOutputOfAnotherDtypeIsANewTensor) {
  Value x = input(DType::Float32, {4, 8});
  Value z = prim("convert_element_type", {prim("exp", {x}), Value(DType::Float64)});
  auto p = plan({z});
  ASSERT_TRUE(p);
  EXPECT_EQ(written_over(trace, *p, {x.proxy()}), std::vector<int>{});
}

TEST_F(Codegen, NoOutputIsWrittenOverAnInputOnAnotherDevice) {
  // cuda_x * torch.tensor(2.0), both 0-dim: the CPU scalar is of the domain's shape and dtype, not its device.
  Value x = Value(ir::ProxyRef{b.add_input_tensor(TensorMeta{DType::Float32, {}, "cuda:0"})});
  Value s = input(DType::Float32, {});
  Value z = prim("mul", {x, s});
  auto p = plan({z});
  ASSERT_TRUE(p);
  ASSERT_EQ(trace.tensor(z.proxy()).device, "cuda:0");
  EXPECT_EQ(written_over(trace, *p, {s.proxy()}), std::vector<int>{});
  EXPECT_EQ(written_over(trace, *p, {x.proxy(), s.proxy()}), std::vector<int>{0});
}

// ---- shape-generic kernels ----

// The kernel of (sin(x) * 2).sum(-1) over an [rows, n] float tensor, rendered alone.
std::string sin_sum_kernel(int64_t rows, int64_t n, std::vector<SizeArgument>* sizes = nullptr) {
  ir::Trace t;
  Builder b{t};
  Value x(ir::ProxyRef{b.add_input_tensor(TensorMeta{DType::Float32, {rows, n}})});
  Value y = b.prim("sum", {b.prim("mul", {b.prim("sin", {x}), Value(2.0)}), Value::ints({1})});
  auto p = plan_kernel(t, t.symbols, {y.proxy()});
  EXPECT_TRUE(p);
  if (sizes) *sizes = size_arguments(t, *p);
  return render_cpu_module(t, {{&*p, "kernel"}});
}

TEST(ShapeGeneric, OneSizeClassRendersOneSourceWithItsSizesAsArguments) {
  std::vector<SizeArgument> sizes;
  const std::string small = sin_sum_kernel(4, 8, &sizes);
  EXPECT_EQ(sin_sum_kernel(4, 64), small);
  EXPECT_EQ(sin_sum_kernel(7, 200), small);
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0].name, "n0");
  EXPECT_EQ(sizes[0].input, 0);
  EXPECT_EQ(sizes[0].input_dim, 0);
  EXPECT_EQ(sizes[1].value, 8);
  EXPECT_NE(small.find("const int64_t n1 = (int64_t)(intptr_t)args[4];"), std::string::npos) << small;
  EXPECT_NE(small.find("in0[i0 * n1 + i1]"), std::string::npos) << small;
  EXPECT_EQ(small.find(" 8LL"), std::string::npos) << small;  // (the grain, 32768LL, ends in 8LL)
  // Whether the rows run in parallel is the kernel's own test of its element count, not a size class: below
  // the grain the rows' function is called directly, no OpenMP team is started.
  EXPECT_NE(small.find("if (nthreads > 1 && (n0 * n1) >= 32768LL) {"), std::string::npos) << small;
  EXPECT_NE(small.find("part(0, n0);"), std::string::npos) << small;
  EXPECT_EQ(small.find("if(parallel:"), std::string::npos) << small;
  // Another size class: rows reduced in lanes; above the grain, the same source.
  const std::string lanes = sin_sum_kernel(4, 256);
  EXPECT_NE(lanes, small);
  EXPECT_EQ(sin_sum_kernel(4, 1000), lanes);
  EXPECT_EQ(sin_sum_kernel(256, 256), lanes);
}

TEST(ShapeGeneric, OneCompiledKernelRunsEveryLengthOfItsClass) {
  TempDir dir;
  runtime::CompileOptions options;
  options.cache_dir = dir.path;
  auto module = runtime::load_module(sin_sum_kernel(4, 8), options);
  auto kernel = reinterpret_cast<runtime::Kernel>(module->symbol("kernel"));
  for (int64_t n : {2, 8, 63, 64, 65, 200}) {  // (a row of 1 is another layout: its dim is not indexed)
    std::vector<SizeArgument> sizes;
    EXPECT_EQ(sin_sum_kernel(3, n, &sizes), sin_sum_kernel(4, 8)) << n;
    std::vector<float> x = iota_floats(static_cast<size_t>(3 * n), 0.25f, -1.0f), out(3);
    std::vector<void*> args = {x.data(), out.data(), reinterpret_cast<void*>(intptr_t{1})};
    for (const SizeArgument& a : sizes) args.push_back(reinterpret_cast<void*>(intptr_t{a.value}));
    ASSERT_EQ(kernel(args.data()), 0);
    for (int64_t r = 0; r < 3; ++r) {
      double expected = 0;
      for (int64_t i = 0; i < n; ++i) expected += std::sin(x[r * n + i]) * 2.0;
      EXPECT_NEAR(out[r], expected, 1e-4 * (1 + std::abs(expected))) << n;
    }
  }
}

TEST(ShapeGeneric, RepeatedKernelsAreWrittenOnceAndAliased) {
  // A model's layers repeat their fusions: the second is an alias of the first, and runs as it does.
  ir::Trace t;
  Builder b{t};
  Value x(ir::ProxyRef{b.add_input_tensor(TensorMeta{DType::Float32, {3, 5}})});
  Value y = b.prim("sum", {b.prim("mul", {b.prim("sin", {x}), Value(2.0)}), Value::ints({1})});
  auto p = plan_kernel(t, t.symbols, {y.proxy()});
  ASSERT_TRUE(p);
  const std::string source = render_cpu_module(t, {{&*p, "layer0"}, {&*p, "layer1"}});
  EXPECT_NE(source.find("extern \"C\" int layer1(void* const* args) __attribute__((alias(\"layer0\")));"),
            std::string::npos) << source;
  TempDir dir;
  runtime::CompileOptions options;
  options.cache_dir = dir.path;
  auto module = runtime::load_module(source, options);
  std::vector<float> in = iota_floats(15, 0.25f, -1.0f), out0(3), out1(3);
  for (auto [name, out] : {std::pair{"layer0", &out0}, std::pair{"layer1", &out1}}) {
    std::vector<void*> args = {in.data(), out->data(), reinterpret_cast<void*>(intptr_t{1})};
    for (const SizeArgument& a : size_arguments(t, *p)) args.push_back(reinterpret_cast<void*>(intptr_t{a.value}));
    ASSERT_EQ(reinterpret_cast<runtime::Kernel>(module->symbol(name))(args.data()), 0);
  }
  EXPECT_EQ(out0, out1);
  EXPECT_NEAR(out0[1], 2.0 * (std::sin(0.25) + std::sin(0.5) + std::sin(0.75) + std::sin(1.0) + std::sin(1.25)), 1e-4);
}

// ---- numbers computed at run time ----

TEST(RunTimeNumbers, AreKernelArgumentsAfterTheSizes) {
  // x * f + k, f a float and k an int known only at run time (an `.item()`): one kernel, whose arguments end
  // with f's bits and k, after its sizes.
  ir::Trace t;
  Builder b{t};
  Value x(ir::ProxyRef{b.add_input_tensor(TensorMeta{DType::Float32, {3, 5}})});
  Value f(ir::ProxyRef{b.add_input_number(ir::NumberType::Float)});
  Value k(ir::ProxyRef{b.add_input_number(ir::NumberType::Int)});
  Value y = b.prim("add", {b.prim("mul", {x, f}), k});
  std::string why;
  auto p = plan_kernel(t, t.symbols, {y.proxy()}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->inputs, std::vector<ProxyId>{x.proxy()});
  EXPECT_EQ(p->scalars, (std::vector<ProxyId>{f.proxy(), k.proxy()}));
  const std::string source = render_cpu_module(t, {{&*p, "kernel"}});
  EXPECT_NE(source.find("std::memcpy(&x0, &args[5], sizeof x0);"), std::string::npos) << source;
  EXPECT_NE(source.find("const int64_t x1 = (int64_t)(intptr_t)args[6];"), std::string::npos) << source;
  TempDir dir;
  runtime::CompileOptions options;
  options.cache_dir = dir.path;
  auto module = runtime::load_module(source, options);
  std::vector<float> in = iota_floats(15, 0.25f, -1.0f), out(15);
  const double scale = -1.75;
  std::vector<void*> args = {in.data(), out.data(), reinterpret_cast<void*>(intptr_t{1})};
  for (const SizeArgument& a : size_arguments(t, *p)) args.push_back(reinterpret_cast<void*>(intptr_t{a.value}));
  args.push_back(nullptr);
  std::memcpy(&args.back(), &scale, sizeof scale);
  args.push_back(reinterpret_cast<void*>(intptr_t{-3}));
  ASSERT_EQ(reinterpret_cast<runtime::Kernel>(module->symbol("kernel"))(args.data()), 0);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_FLOAT_EQ(out[i], in[i] * static_cast<float>(scale) - 3.0f) << i;
}

TEST(RunTimeNumbers, AreOperandsOfArithmeticAndFillValues) {
  // full's fill value known only at run time (`full_like(x, x.shape[-1])` once sizes are bound) is a kernel
  // argument as an operand of arithmetic is; random numbers take none.
  ir::Trace t;
  Builder b{t};
  Value x(ir::ProxyRef{b.add_input_tensor(TensorMeta{DType::Float32, {4}})});
  Value f(ir::ProxyRef{b.add_input_number(ir::NumberType::Float)});
  Value y = b.prim("add", {x, b.prim("full", {Ints({4}), f, Value(DType::Float32), Value(ir::Str{"cpu"})})});
  std::string why;
  auto p = plan_kernel(t, t.symbols, {y.proxy()}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->scalars, std::vector<ProxyId>{f.proxy()});
  EXPECT_NE(render_cpu_module(t, {{&*p, "kernel"}}).find("= (float)x0;"), std::string::npos);
  Value seed(ir::ProxyRef{b.add_input_tensor(TensorMeta{DType::Int64, {}})});
  Value k(ir::ProxyRef{b.add_input_number(ir::NumberType::Int)});
  Value r = b.prim("uniform_philox", {Ints({4}), seed, k, Value(DType::Float32), Value(ir::Str{"cpu"})});
  EXPECT_FALSE(plan_kernel(t, {t.symbols.back()}, {r.proxy()}, &why));
  EXPECT_EQ(why, "a number computed at run time as an argument of prims.uniform_philox");
}

// ---- counter-based random numbers (prims.uniform_philox) ----

// Known-answer vectors of Philox4x32-10 (Salmon et al., SC '11, as published with Random123): counter, key,
// and the four words out.
TEST(Philox, MatchesThePublishedKnownAnswers) {
  struct Kat {
    uint32_t counter[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t c[4] = {k.counter[0], k.counter[1], k.counter[2], k.counter[3]};
    philox::philox4x32_10(c, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(c[i], k.out[i]) << std::hex << k.counter[0] << " word " << i;
  }
}

TEST(Philox, UniformsAreTheFirstWordsScaledIntoTheUnitInterval) {
  // Counter (n, 0, 0, 0) under key (lo, hi) of the seed: the first KAT for n = 0, seed = 0.
  EXPECT_EQ(philox::uniform_float(0, 0, 24), static_cast<float>(0x6627e8d5u >> 8) / 16777216.0f);
  EXPECT_EQ(philox::uniform_float(0, 0, 8), static_cast<float>(0x66) / 256.0f);
  EXPECT_EQ(philox::uniform_double(0, 0),
            static_cast<double>((uint64_t{0x6627e8d5u} << 21) | (0xe169c58du >> 11)) / 9007199254740992.0);
  // A negative seed is its 64-bit pattern (key 0xffffffff, 0xffffffff); the counter's high word is n >> 32.
  uint32_t c[4] = {0xffffffff, 0x7fffffff, 0, 0};
  philox::philox4x32_10(c, 0xffffffff, 0xffffffff);
  EXPECT_EQ(philox::uniform_float(-1, INT64_MAX, 24), static_cast<float>(c[0] >> 8) / 16777216.0f);
  double mean = 0;
  for (int64_t n = 0; n < 100000; ++n) {
    const float u = philox::uniform_float(1234, n, 24);
    ASSERT_TRUE(u >= 0.0f && u < 1.0f) << n;
    mean += u;
  }
  EXPECT_NEAR(mean / 100000, 0.5, 0.005);  // sigma 0.0009
}

TEST_F(Codegen, AKernelDrawsEachElementFromItsFlatIndexAsTheReferenceDoes) {
  Value seed = input(DType::Int64, {});
  Value u32 = prim("uniform_philox", {Ints({3, 5}), seed, Value(int64_t{7}), Value(DType::Float32), Value(ir::Str{"cpu"})});
  Value y32 = prim("convert_element_type", {u32, Value(DType::Float64)});
  Value u64 = prim("uniform_philox", {Ints({3, 5}), seed, Value(int64_t{7}), Value(DType::Float64), Value(ir::Str{"cpu"})});
  Value y64 = prim("add", {u64, Value(0.0)});
  std::string why;
  auto p = plan({y32, y64}, &why);
  ASSERT_TRUE(p) << why;
  EXPECT_EQ(p->inputs, (std::vector<ProxyId>{seed.proxy()}));
  const std::string all = render(*p);
  EXPECT_NE(all.find("thunder_philox4x32_10"), std::string::npos);
  EXPECT_NE(kernel_code(*p).find("thunder_uniform_float(v" + std::to_string(seed.proxy()) + ", (int64_t)7LL + "),
            std::string::npos)
      << kernel_code(*p);
  const int64_t s = -0x123456789abcdefLL;
  auto outs = run<int64_t>(*p, {{seed.proxy(), {s}}});
  ASSERT_EQ(outs.size(), 2u);
  for (int64_t i = 0; i < 15; ++i) {
    double got32, got64;
    std::memcpy(&got32, &outs[0][i], 8);
    std::memcpy(&got64, &outs[1][i], 8);
    EXPECT_EQ(got32, static_cast<double>(philox::uniform_float(s, 7 + i, 24))) << i;
    EXPECT_EQ(got64, philox::uniform_double(s, 7 + i)) << i;
  }
  // Kernels that draw nothing do not carry the code (their source, and so their cache key, is unchanged).
  ir::Trace t;
  Builder b2(t);
  Value x = Value(ir::ProxyRef{b2.add_input_tensor(TensorMeta{DType::Float32, {4}})});
  Value z = b2.prim("neg", {x});
  auto q = plan_kernel(t, t.symbols, {z.proxy()});
  ASSERT_TRUE(q);
  EXPECT_EQ(render_cpu_module(t, {{&*q, "kernel"}}).find("philox"), std::string::npos);
}

}  // namespace
}  // namespace thunder::codegen
