// Translation units: a trace's fusions rendered as sources to compile, one or several (compiled in parallel:
// C++ by compiler processes, CUDA by NVRTC in threads).
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "codegen/expressions.h"
#include "codegen/kernel_plan.h"
#include "ir/trace.h"

namespace thunder::codegen {

/// A kernel as its launcher calls it: its name, the proxies its pointer arguments hold, and the sizes that
/// follow the thread count (a shape-generic kernel's extents and strides).
struct KernelSignature {
  std::string name;
  std::vector<ir::ProxyId> inputs, outputs;  // inputs: the tensors, then the numbers (KernelPlan::scalars)
  std::vector<SizeArgument> sizes;
  // CPU kernels: per output, the input whose buffer it is written into, which the launcher passes as that
  // output (KernelPlan::written_over); empty: every output is a new tensor.
  std::vector<int> written_over;
  // Its text apart from its name (text_apart_from_name): kernels with equal keys compile alike.
  std::string key;
  // GPU kernels: the kernel of its unit whose code it runs, when its text repeats that one's (rendered and
  // compiled once); empty: its own name.
  std::string symbol;
  // GPU kernels (cuda_translation_units): threads per block, blocks for the trace's shapes, and workspace bytes
  // (cuda_workspace_bytes); 0 for CPU kernels.
  int block = 0;
  int64_t grid = 0, workspace = 0;
  // GPU kernels: per input, whether the kernel takes it by value (host_scalar: a 0-dim CPU tensor, read on the
  // host by the launcher) rather than as a pointer where the kernel runs.
  std::vector<bool> by_value;
};

struct TranslationUnit {
  std::string source;
  std::vector<KernelSignature> kernels;
};

/// The fusions of `executor` in `trace`, each planned, scheduled and rendered in the C++ dialect, as at most
/// `parts` translation units of consecutive kernels, balanced by their prim counts; empty if the trace has
/// no fusions. std::logic_error if a fusion no longer plans as one kernel. `rounding`: where half-precision
/// values are rounded (expressions.h; a backward trace's kernels are rendered with AtStores). A kernel writes
/// an output into the buffer of an input that dies there where it can (KernelSignature::written_over): an
/// input read by that fusion alone, not an output of the trace, not requiring grad, and made by a fusion of
/// `executor`, by a symbol tagged ir::kFreshOutput or by a view of such a tensor that dies at the view.
/// Kernels whose key is in `loaded` (a process has them compiled already) go into no unit: they come last, in
/// a unit with an empty source.
std::vector<TranslationUnit> cpu_translation_units(const ir::Trace& trace, const std::string& executor, size_t parts,
                                                   HalfRounding rounding = HalfRounding::EveryOp,
                                                   const std::set<std::string>& loaded = {});

/// The fusions of `executor` in `trace`, each planned (the same plans as on the CPU), scheduled for a GPU and
/// rendered in the CUDA dialect, as at most `parts` translation units of consecutive kernels balanced by their
/// prim counts (NVRTC compiles them in parallel threads); empty if the trace has no fusions. A kernel whose
/// text repeats an earlier one's apart from its name (a model's layers) is rendered once: it is listed in
/// that kernel's unit with KernelSignature::symbol naming it. Kernels whose key is in `loaded` (compiled for
/// another trace) go into no unit: they come last, in a unit with an empty source. std::logic_error if a
/// fusion no longer plans as one kernel, or if the CUDA dialect has no row for one of its prims.
std::vector<TranslationUnit> cuda_translation_units(const ir::Trace& trace, const std::string& executor, size_t parts,
                                                    const std::set<std::string>& loaded = {});

}  // namespace thunder::codegen
