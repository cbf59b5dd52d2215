// The CUDA dialect: its op-expression table, the GPU schedules chosen by size class, and golden fragments of
// the CUDA C++ rendered from the same plans as the C++ dialect's. (Compiling it needs NVRTC: the Python
// compile check, tests/test_cuda_compile.py, does that for every fused pattern.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/cuda_dialect.h"
#include "codegen/cuda_expressions.h"
#include "codegen/kernel_plan.h"
#include "codegen/schedule.h"
#include "ops/op_table.h"

namespace thunder::codegen {
namespace {

using ir::DType;
using ir::TensorMeta;
using ir::Value;

bool has(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

class Cuda : public ::testing::Test {
 protected:
  ir::Trace trace;
  ops::Builder b{trace};
  Value input(DType d, std::vector<int64_t> shape) {
    return Value(ir::ProxyRef{b.add_input_tensor(TensorMeta{d, ir::dims_of(shape)})});
  }
  Value prim(std::string_view name, std::vector<Value> args) { return b.prim(name, std::move(args)); }
  KernelPlan plan(const std::vector<Value>& outs) {
    std::set<ProxyId> live;
    for (const Value& v : outs) live.insert(v.proxy());
    std::string why;
    auto p = plan_kernel(trace, trace.symbols, live, &why);
    EXPECT_TRUE(p) << why;
    return p ? *p : KernelPlan{};
  }
  std::string render(const KernelPlan& p) { return render_cuda_module(trace, {{&p, "kernel"}}); }
  // exp(x - max) / sum over the last dim of an [rows, n] tensor.
  Value softmax(Value x, int64_t rows, int64_t n) {
    Value m = prim("amax", {x, Value::ints({1})});
    Value e = prim("exp", {prim("sub", {x, prim("broadcast_in_dim", {m, Value::ints({rows, n}), Value::ints({0})})})});
    Value s = prim("sum", {e, Value::ints({1})});
    return prim("div", {e, prim("broadcast_in_dim", {s, Value::ints({rows, n}), Value::ints({0})})});
  }
};

TEST(CudaExpressions, EveryPrimAKernelComputesHasARowInTheCudaDialect) {
  for (size_t i = 1; i <= ir::kNumPrims; ++i) {
    const auto id = static_cast<ir::PrimId>(i);
    const PrimKind* kind = plan_table().find(id);
    if (kind == nullptr) continue;
    const cuda::CudaOp* row = cuda::cuda_expressions().find(id);
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
      default:
        EXPECT_EQ(row, nullptr) << ir::prim_name(id);
    }
  }
}

TEST(CudaExpressions, AMissingRowNamesThePrimAndTheTransform) {
  try {
    cuda::cuda_expressions().at(ir::PrimId::matmul);
    FAIL() << "matmul has no CUDA expression";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "no cuda expression rule for prims.matmul");
  }
}

TEST(CudaExpressions, RowsWriteTheirExpressions) {
  const std::vector<std::string> x = {"a", "b", "c"};
  auto write = [&](ir::PrimId id, DType out, DType in) {
    const std::string T = cuda::compute_type(out);
    return cuda::cuda_expressions().at(id).expr(cuda::ExprArgs{out, in, x, T, ir::is_floating(in), T == "float" ? "f" : ""});
  };
  EXPECT_EQ(write(ir::PrimId::exp, DType::Float32, DType::Float32), "expf(a)");
  EXPECT_EQ(write(ir::PrimId::exp, DType::Float64, DType::Float64), "exp(a)");
  EXPECT_EQ(write(ir::PrimId::maximum, DType::Float32, DType::Float32), "nan_max(a, b)");
  EXPECT_EQ(write(ir::PrimId::add, DType::Int8, DType::Int8), "(int8_t)(a + b)");
  EXPECT_EQ(cuda::cuda_expressions().at(ir::PrimId::sum).reduce(DType::BFloat16).acc_type, "float");
  EXPECT_EQ(cuda::cuda_expressions().at(ir::PrimId::amax).reduce(DType::Int8).combine, "int_max(acc, (int64_t)x)");
  EXPECT_EQ(cuda::storage_type(DType::BFloat16), "uint16_t");
  EXPECT_EQ(cuda::load(DType::Float16, "p[i]"), "f16_to_float(p[i])");
}

TEST_F(Cuda, ElementwiseKernelsRunAGridStrideLoopWithSixteenByteVectors) {
  Value x = input(DType::Float32, {64, 96}), w = input(DType::Float32, {96});
  Value y = prim("mul", {x, prim("broadcast_in_dim", {w, Value::ints({64, 96}), Value::ints({1})})});
  const KernelPlan p = plan({y});
  const GpuSchedule s = schedule_gpu_kernel(trace, p);
  EXPECT_EQ(s.strategy, GpuStrategy::Elementwise);
  EXPECT_EQ(s.vector, 4);
  EXPECT_EQ(s.grid, 6);  // 6144 elements / (256 threads x 4)
  const std::string code = render(p);
  EXPECT_TRUE(has(code, "extern \"C\" __global__ void __launch_bounds__(256) kernel(const float* __restrict__ in0"));
  // in0 is w (the broadcast, read per element), in1 is x (dense: one 16-byte load per 4 elements)
  EXPECT_TRUE(has(code, "if (n1 % 4 == 0 && (unsigned long long)in1 % (sizeof(float) * 4) == 0"));
  EXPECT_TRUE(has(code, "const Vec<float, 4> vin1 = *(const Vec<float, 4>*)(in1 + L0);"));
  EXPECT_TRUE(has(code, "in0[i1]"));
  EXPECT_TRUE(has(code, "*(Vec<float, 4>*)(out0 + L0) = vout0;"));
  EXPECT_TRUE(has(code, "for (int64_t L = first; L < total; L += step) {"));  // where not aligned
}

TEST_F(Cuda, HalfPrecisionComputesInFloatAndRoundsAfterEveryOp) {
  Value x = input(DType::BFloat16, {16, 32});
  Value y = prim("add", {prim("mul", {x, x}), Value(1.0)});
  const KernelPlan p = plan({y});
  EXPECT_EQ(schedule_gpu_kernel(trace, p).vector, 8);
  const std::string code = render(p);
  EXPECT_TRUE(has(code, "const float v0 = bf16_to_float(vin0.v[j]);"));
  EXPECT_TRUE(has(code, "bf16_round((float)(v0 * v0))"));
  EXPECT_TRUE(has(code, "float_to_bf16("));
}

TEST_F(Cuda, RunTimeNumbersAreParametersAfterTheSizes) {
  Value x = input(DType::BFloat16, {16, 32});
  Value f(ir::ProxyRef{b.add_input_number(ir::NumberType::Float)});
  Value k(ir::ProxyRef{b.add_input_number(ir::NumberType::Int)});
  Value y = prim("add", {prim("mul", {x, f}), k});
  const std::string code = render(plan({y}));
  EXPECT_TRUE(has(code, "const int64_t n1,\n    const double x0,\n    const int64_t x1)")) << code;
  EXPECT_TRUE(has(code, "(float)(v0 * (float)x0)")) << code;  // mul reads the number unrounded, as ATen's
}

TEST_F(Cuda, ShortRowsReduceInOneWarpEach) {
  const KernelPlan p = plan({softmax(input(DType::Float32, {64, 96}), 64, 96)});
  const GpuSchedule s = schedule_gpu_kernel(trace, p);
  EXPECT_EQ(s.strategy, GpuStrategy::WarpPerRow);
  EXPECT_EQ(s.grid, 8);  // 8 rows per block of 256
  const std::string code = render(p);
  EXPECT_TRUE(has(code, " = nan_max(acc") && has(code, "__shfl_xor_sync(0xffffffffu, acc"));
  EXPECT_TRUE(has(code, "const int64_t tid = lane, threads = 32;"));
  EXPECT_FALSE(has(code, "__syncthreads"));
}

TEST_F(Cuda, LongRowsReduceInOneBlockEachThroughSharedMemory) {
  const KernelPlan p = plan({softmax(input(DType::Float32, {8, 4096}), 8, 4096)});
  const GpuSchedule s = schedule_gpu_kernel(trace, p);
  EXPECT_EQ(s.strategy, GpuStrategy::BlockPerRow);
  EXPECT_EQ(s.block, 256);
  EXPECT_EQ(s.grid, 8);
  const std::string code = render(p);
  EXPECT_TRUE(has(code, "if (lane == 0) ((float*)thunder_shared)[warp] = acc"));
  EXPECT_TRUE(has(code, "for (int w = 1; w < (int)(blockDim.x >> 5); ++w)"));
}

TEST_F(Cuda, AFullReductionRunsInTwoStagesWithAWorkspace) {
  Value x = input(DType::Float32, {1 << 17});
  Value y = prim("sum", {prim("mul", {x, x}), Value::ints({0})});
  const KernelPlan p = plan({y});
  const GpuSchedule s = schedule_gpu_kernel(trace, p);
  EXPECT_EQ(s.strategy, GpuStrategy::TwoStage);
  EXPECT_EQ(s.grid, 64);  // 128K elements / (256 threads x 8)
  EXPECT_EQ(cuda_workspace_bytes(p, s), 1024 * 8 + 4 * 64);
  const std::string code = render(p);
  EXPECT_TRUE(has(code, "unsigned char* __restrict__ workspace"));
  EXPECT_TRUE(has(code, "thunder_last = atomicAdd(counter, 1u) == parts - 1;"));
  EXPECT_TRUE(has(code, "for (int64_t b = threadIdx.x; b < parts; b += blockDim.x)"));
  EXPECT_TRUE(has(code, "[row * parts + b]"));
  EXPECT_TRUE(has(code, "if (threadIdx.x == 0) *counter = 0;"));
}

TEST_F(Cuda, DenseKernelsTakeTheVectorPathAtAnyExtentAndFinishPerElement) {
  // 7 is not a multiple of the 4-float vector: a kernel of dense values only reads the flat index, so its
  // vector loop runs to the last whole vector and the per-element loop takes the tail.
  Value x = input(DType::Float32, {4, 7});
  const std::string code = render(plan({prim("exp", {x})}));
  EXPECT_TRUE(has(code, "for (int64_t L0 = first * 4; L0 + 4 <= total; L0 += step * 4)"));
  EXPECT_TRUE(has(code, "tail = total - total % 4;"));
  EXPECT_TRUE(has(code, "for (int64_t L = tail + first; L < total; L += step)"));
  EXPECT_FALSE(has(code, "n1 % 4 == 0"));
}

TEST_F(Cuda, IndexDivisionsAre32BitUnder2To31Elements) {
  // A broadcast read decomposes the flat index; a GPU's 64-bit division is a call of ~70 instructions.
  Value x = input(DType::Float32, {64, 96}), b = input(DType::Float32, {96});
  const std::string code = render(plan({prim("add", {x, prim("broadcast_in_dim", {b, Value::ints({64, 96}),
                                                                                   Value::ints({1})})})}));
  EXPECT_TRUE(has(code, "uint32_t rest_L = (uint32_t)L;"));
  EXPECT_TRUE(has(code, "rest_L % (uint32_t)n1;"));
}

TEST_F(Cuda, IndexDivisionsStay64BitFrom2To31Elements) {
  Value x = input(DType::Float32, {1 << 16, 1 << 16}), b = input(DType::Float32, {1 << 16});
  const std::string code = render(plan({prim("add", {x, prim("broadcast_in_dim", {b, Value::ints({1 << 16, 1 << 16}),
                                                                                   Value::ints({1})})})}));
  EXPECT_TRUE(has(code, "int64_t rest_L = L;"));
  EXPECT_FALSE(has(code, "uint32_t rest"));
}

TEST_F(Cuda, AFewLongRowsAreEachSplitAcrossBlocks) {
  // 4 rows of 128K: one block a row left a GPU's other multiprocessors idle; each row takes 64 blocks now.
  Value x = input(DType::Float32, {4, 1 << 17});
  const KernelPlan p = plan({prim("sum", {prim("exp", {x}), Value::ints({1})})});
  const GpuSchedule s = schedule_gpu_kernel(trace, p);
  EXPECT_EQ(s.strategy, GpuStrategy::TwoStage);
  EXPECT_EQ(s.grid, 4 * 64);
  const std::string code = render(p);
  EXPECT_TRUE(has(code, "const int64_t row = (int64_t)blockIdx.x / parts, part = (int64_t)blockIdx.x % parts;"));
  EXPECT_TRUE(has(code, "+ row;"));  // the row's counter
}

TEST_F(Cuda, SixtyFourLongRowsShareTheBlocksOfATwoStageReduction) {
  Value x = input(DType::Float32, {64, 1 << 17});
  const GpuSchedule s = schedule_gpu_kernel(trace, plan({prim("sum", {x, Value::ints({1})})}));
  EXPECT_EQ(s.strategy, GpuStrategy::TwoStage);
  EXPECT_EQ(s.grid, 64 * 16);  // at most 1024 blocks in all
}

TEST_F(Cuda, MoreLongRowsTakeABlockARow) {
  Value x = input(DType::Float32, {65, 1 << 17});
  EXPECT_EQ(schedule_gpu_kernel(trace, plan({prim("sum", {x, Value::ints({1})})})).strategy, GpuStrategy::BlockPerRow);
}

TEST_F(Cuda, ACatSelectsItsInputByABranchWithoutClamps) {
  Value x = input(DType::Float32, {4, 8});
  Value lo = prim("slice", {x, Value::ints({0, 0}), Value::ints({4, 4}), Value::ints({1, 1})});
  Value hi = prim("slice", {x, Value::ints({0, 4}), Value::ints({4, 8}), Value::ints({1, 1})});
  Value y = prim("mul", {prim("cat", {Value::list({prim("neg", {hi}), lo}), Value(int64_t{1})}), Value(2.0)});
  const KernelPlan p = plan({y});
  const std::string code = render(p);
  EXPECT_TRUE(has(code, "if (i1 < 4LL) {"));
  EXPECT_TRUE(has(code, "} else {"));
  EXPECT_FALSE(has(code, "min<int64_t>"));
  EXPECT_FALSE(has(code, "Vec<"));  // remapped kernels read per element
}

TEST(CudaShapeGeneric, OneSizeClassRendersOneSource) {
  auto source = [](int64_t rows, int64_t n) {
    ir::Trace t;
    ops::Builder b{t};
    Value x(ir::ProxyRef{b.add_input_tensor(TensorMeta{DType::Float32, {rows, n}})});
    Value y = b.prim("sum", {b.prim("sin", {x}), Value::ints({1})});
    auto p = plan_kernel(t, t.symbols, {y.proxy()});
    return render_cuda_module(t, {{&*p, "kernel"}});
  };
  EXPECT_EQ(source(4, 8), source(7, 200));
  EXPECT_NE(source(4, 8), source(4, 2048));  // another size class: a block per row
}

}  // namespace
}  // namespace thunder::codegen
