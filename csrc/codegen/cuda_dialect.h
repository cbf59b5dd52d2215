// The CUDA dialect: kernel plans, as their GPU schedules say, written as CUDA C++ for NVRTC.
//
// The same plans (kernel_plan.h) as the C++ dialect's, so the same fusions on both devices; the schedule
// (schedule.h: GpuSchedule) says how the plan's elements map onto threads, and this writes it. Each value's
// expression comes from the CUDA op-expression table (cuda_expressions.h). The source includes no header
// (NVRTC would parse cuda_fp16.h/cuda_bf16.h, ~50 ms a compile): float16/bfloat16 are stored as their 16
// bits and converted by PTX `cvt` instructions (sm_80 and later), computing in float32.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_plan.h"
#include "codegen/schedule.h"

namespace thunder::codegen {

/// The prelude every CUDA translation unit starts with: integer types, NaN/infinity, half conversions,
/// NaN-propagating min/max, Python's remainder, vectors of 16 bytes.
std::string cuda_prelude();

/// One kernel of a CUDA translation unit.
struct CudaKernel {
  const KernelPlan* plan = nullptr;
  const GpuSchedule* schedule = nullptr;
  std::string name;
};

/// Bytes of device memory a kernel needs beside its tensors: a two-stage reduction's partial results and its
/// block counter, which must be zero before the first launch (the last block resets it); 0 for others.
int64_t cuda_workspace_bytes(const KernelPlan& plan, const GpuSchedule& schedule);

/// One kernel's text, `extern "C" __global__ void __launch_bounds__(<block>) <name>(...) {...}` (below).
std::string render_cuda_kernel(const ir::Trace& trace, const CudaKernel& kernel);

/// Whether the plan draws random numbers (its kernel calls the Philox device functions).
bool cuda_kernel_draws(const KernelPlan& plan);

/// A translation unit of kernel texts (render_cuda_kernel): the prelude, the Philox device functions if
/// `draws` (a kernel calls them), then the texts.
std::string cuda_module_source(const std::vector<std::string>& kernel_texts, bool draws);

/// One translation unit holding the given kernels: each is `extern "C" __global__ void <name>(...)` taking the
/// plan's input pointers (a host_scalar by value: a double, or an int64 for an integer or bool), then its
/// output pointers (contiguous, except trace inputs with recorded strides, read in place), then the size
/// arguments of a shape-generic kernel (size_arguments, as int64), then, if cuda_workspace_bytes is not 0, the
/// workspace pointer. Launch it with the schedule's grid and block. An index
/// out of range (take_along_axis) traps (the launch fails, as a device-side assert does in torch). Each plan is
/// scheduled by schedule_gpu_kernel (cuda_translation_units renders a trace's fusions; this, kernels by hand).
std::string render_cuda_module(const ir::Trace& trace,
                               const std::vector<std::pair<const KernelPlan*, std::string>>& kernels);

}  // namespace thunder::codegen
