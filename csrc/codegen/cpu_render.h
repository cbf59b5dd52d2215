// Rendering kernel plans as C++ for the CPU.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernel_plan.h"

namespace thunder::codegen {

/// The prelude every generated translation unit starts with: includes,
/// half-precision conversions, NaN-propagating min/max.
std::string cpu_prelude();

/// One translation unit holding a kernel per (plan, name): each is
/// `extern "C" int <name>(void* const* args)`, where args holds the plan's
/// input pointers then its output pointers, all contiguous, then the number of
/// threads to use (an integer cast to a pointer; the caller passes
/// torch.get_num_threads()). It returns 0, or 1 if an index (take_along_axis)
/// was out of range. Loops run over the plan's domain, the outer ones in
/// parallel with OpenMP above a grain size;
/// float16/bfloat16 values compute in float32 and round to their dtype after
/// every op, as eager PyTorch does.
std::string render_cpu_module(const ir::Trace& trace,
                              const std::vector<std::pair<const KernelPlan*, std::string>>& kernels);

}  // namespace thunder::codegen
