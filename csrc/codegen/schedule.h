// Schedules: how a kernel plan's loop nest runs, decided apart from any dialect.
//
// A plan (kernel_plan.h) says what one kernel computes over which domain; its schedule says how the loops
// run: their order, which run in parallel and from what size on, whether the innermost loop is split into
// pieces, whether large outputs are written with streaming stores, whether long reductions accumulate in
// several partial results, whether a row's costly values are kept in a buffer for a later pass over the
// row, and how float sums accumulate. Every choice is made by size class (which side of each threshold
// below the kernel's sizes lie), never by exact size, so a shape-generic kernel (its sizes arguments, see
// KernelPlan::generic_dim) renders the same for every shape of its class. Choices that cost nothing to make
// in the kernel are not classes: whether the outer loops run in parallel is tested at run time against the
// element count (`parallel_by_size`), so a model's kernels do not compile again when a sequence grows past
// the grain, and a row buffer always has room for the longest row kept. A dialect renderer (cpu_dialect.h)
// writes the plan as its schedule says and makes no such decision itself; another target gets its own
// schedule from the same plan.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "codegen/kernel_plan.h"

namespace thunder::codegen {

/// The thresholds the schedule decides by (measured on the CPU; see docs/cpu_executor.md).
struct ScheduleLimits {
  /// Elements below which a kernel runs on one thread.
  int64_t grain = 32768;
  /// Longest row whose libmvec values are kept in a row buffer for a later pass over the row; every buffer
  /// has room for that many elements, whatever the row's length, so that its length is no size class (the
  /// unused part of a stack array costs nothing measurable).
  int64_t row_cache = 8192;
  /// A floating-point reduction whose innermost reduced dim has at least `lane_minimum` elements
  /// accumulates in `lanes` partial results (several SIMD registers): one accumulator register would make
  /// each vector add wait for the previous one, and the pass would be latency-bound.
  int64_t lanes = 64, lane_minimum = 256;
  /// An output of at least this many bytes, written along the innermost loop, is computed in chunks of
  /// `stream_chunk_bytes` into a buffer and copied out with non-temporal stores (ordinary stores to memory
  /// not in cache first read each line in). Smaller outputs stay in cache for the op that reads them.
  int64_t stream_bytes = 16 << 20, stream_chunk_bytes = 4096;
  /// Float sums of up to this many elements accumulate in float (in SIMD lanes, which already sum
  /// pairwise-ish); longer ones in double, to stay within float32 tolerance of an exact sum.
  int64_t float_accumulation = 1 << 16;
};

struct Schedule {
  /// Loop order: the domain dims outside R (outermost first), then those in R (the row's loops).
  std::vector<int> outer, inner;
  /// The loops over the outer dims are parallel loops (the kernel has more than one row and is above the
  /// grain, or its element count is not known until run time: see parallel_by_size).
  bool parallel = false;
  /// The element count is a product of size arguments: the parallel loops run in parallel only where it
  /// reaches the grain, tested at run time (OpenMP's `if` clause; below it they run on the calling thread,
  /// for about 0.3 us more than plain loops), so one source serves sizes on both sides of the grain.
  bool parallel_by_size = false;
  /// One row above the grain: the loops over R run in parallel instead, with OpenMP's reductions.
  bool parallel_inner = false;
  /// Kernels without reductions: where the innermost loop is split into pieces (the remaps' range bounds
  /// along it, if fewer than kMaxLoopPieces), each reading the one operand selected there contiguously.
  std::vector<int64_t> cuts;
  /// The outputs written along the innermost loop (all of them without reductions, the element-level ones
  /// with) are computed in chunks and written with streaming stores.
  bool stream = false;
  /// The reductions (their outputs) that accumulate in `limits.lanes` partial results.
  std::set<ProxyId> lane_reductions;
  /// Reductions computed in one pass over the row, each group in plan order: they read the same earlier
  /// reductions and not each other, and accumulate alike (all in lanes, or none). A reduction in no group has
  /// a pass of its own.
  std::vector<std::vector<ProxyId>> sibling_reductions;
  /// Length of the row buffers keeping libmvec values for a later pass over the row (the longest row kept:
  /// `limits.row_cache`); 0: none.
  int64_t row_cache = 0;
  /// Float sums accumulate in float (else double).
  bool float_accumulation = true;
  ScheduleLimits limits;
};

/// The schedule of a plan's kernel on a CPU.
Schedule schedule_kernel(const ir::Trace& trace, const KernelPlan& plan, const ScheduleLimits& limits = {});

// ---- GPU schedules (the CUDA dialect, cuda_dialect.h) ----

/// How a kernel's work maps onto a GPU's threads.
enum class GpuStrategy {
  Elementwise,  // no reductions: a grid-stride loop over the domain's elements (vectors of 16 bytes where it can)
  WarpPerRow,   // rows up to `warp_row` elements: one warp per row, reductions by warp shuffles
  BlockPerRow,  // longer rows, or one long row that cannot split: one block per row, warp shuffles then shared memory
  TwoStage,     // a few long rows whose reductions read only inputs (a full reduction, a sum over a long last dim):
                // each row is split across blocks, every block reduces its slice of its row, and the row's last
                // block to finish combines the row's partial results in block order (deterministic)
};

/// The thresholds a GPU schedule decides by (size classes, as on the CPU: never an exact size).
struct GpuLimits {
  int block = 256;                   // threads per block of elementwise and warp-per-row kernels, and of short rows
  int long_row_block = 1024;         // threads per block for rows longer than `block_row`
  int64_t warp_row = 1024;           // longest row reduced by one warp
  int64_t block_row = 8192;          // longest row reduced by a block of `block` threads
  int64_t two_stage = 1 << 16;       // rows at least this long, at most `split_rows` of them, reduce in two stages
  int64_t split_rows = 64;           // the most rows a two-stage reduction splits across blocks
  int64_t max_partials = 1024;       // a two-stage reduction's blocks, over all its rows (each block writes one
                                     // partial result per reduction)
  int64_t items_per_thread = 8;      // elements per thread a two-stage reduction aims for
  int64_t max_blocks = 1 << 16;      // grid-stride loops cap their grid here
  int vector_bytes = 16;             // the width of a vectorized load or store
  int divisions_vector = 2;          // at most this many elements per thread where the kernel divides
};

struct GpuSchedule {
  GpuStrategy strategy = GpuStrategy::Elementwise;
  int block = 256;  // threads per block
  /// Elementwise: elements per vectorized load/store of the dense values (16 bytes of the widest; 1: none). The
  /// kernel takes the vector path at run time only where the pointers are aligned and the innermost extent is a
  /// multiple of it; otherwise it runs the same loop one element at a time.
  int vector = 1;
  int64_t grid = 1;  // blocks, for this plan's sizes (the launch computes the same for each call's sizes)
  /// Loop order as on the CPU: the dims outside R, then those in R.
  std::vector<int> outer, inner;
  GpuLimits limits;
};

/// Whether `v` is a 0-dim tensor on the CPU, which a GPU kernel takes by value (a kernel argument, as torch
/// passes `torch.tensor(2.0)` to the kernel of `cuda_x * torch.tensor(2.0)`): no copy to the device, no
/// synchronization, and a launch a CUDA graph can capture (the value read when it is captured, as torch's).
bool host_scalar(const ir::Trace& trace, ProxyId v);

/// Whether value `v` of the plan is dense: laid out exactly as the domain, contiguous, so its offset is the
/// element's linear index (never a host_scalar).
bool dense_value(const ir::Trace& trace, const KernelPlan& plan, ProxyId v);

/// The schedule of a plan's kernel on a GPU.
GpuSchedule schedule_gpu_kernel(const ir::Trace& trace, const KernelPlan& plan, const GpuLimits& limits = {});

}  // namespace thunder::codegen
