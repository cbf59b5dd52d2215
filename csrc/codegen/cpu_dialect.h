// The C++ dialect: kernel plans, as their schedules say, written as C++ for the CPU.
//
// plan (kernel_plan.h: what one loop nest computes) -> schedule (schedule.h: how its loops run) -> dialect
// (this: the text). Each value's expression comes from the op-expression table (cpu_expressions.h); the
// runtime helpers the kernels call are the prelude (cpu_prelude.cc) every translation unit starts with.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "codegen/expressions.h"
#include "codegen/kernel_plan.h"
#include "codegen/schedule.h"

namespace thunder::codegen {

/// The prelude every generated translation unit starts with: includes, math on GCC's builtins,
/// half-precision conversions, NaN-propagating min/max, thunder's erf, streaming stores.
std::string cpu_prelude();

/// One kernel of a translation unit: its plan, its schedule and its exported name.
struct CpuKernel {
  const KernelPlan* plan = nullptr;
  const Schedule* schedule = nullptr;
  std::string name;
};

/// One translation unit holding the given kernels: each is `extern "C" int <name>(void* const* args)`,
/// where args holds the plan's input pointers then its output pointers, all contiguous (except trace
/// inputs with recorded strides, read in place), then the number of threads to use (an integer cast to a
/// pointer; the caller passes torch.get_num_threads()). It returns 0, or 1 if an index (take_along_axis)
/// was out of range. float16/bfloat16 values compute in float32 and round to their dtype after every op, as
/// eager PyTorch does (HalfRounding::EveryOp), or only where they are stored or converted (AtStores).
std::string render_cpu_module(const ir::Trace& trace, const std::vector<CpuKernel>& kernels,
                              HalfRounding rounding = HalfRounding::EveryOp);

/// What a kernel's text is apart from its name: kernels with equal keys compute alike, and one compiled function
/// serves them all (render_cpu_module writes a repeat as an alias of the first; a process reuses a kernel it
/// loaded for another trace: thunder/executors/cpuex.py).
std::string cpu_kernel_key(const ir::Trace& trace, const CpuKernel& kernel, HalfRounding rounding = HalfRounding::EveryOp);

/// The same, each plan with its CPU schedule (schedule_kernel).
std::string render_cpu_module(const ir::Trace& trace,
                              const std::vector<std::pair<const KernelPlan*, std::string>>& kernels,
                              HalfRounding rounding = HalfRounding::EveryOp);

}  // namespace thunder::codegen
