// Kernel plans: how a fusion region's prims map onto one loop nest.
//
// A region computes over one iteration domain D (a shape). Every tensor value
// of the region is *aligned* to D: each of its dims is either a domain dim or
// a broadcast (size-1) dim. If the region reduces, all its reductions reduce
// the same set R of domain dims; values aligned to an R dim are computed per
// element inside loops over R ("element level"), the others once per point of
// the outer dims ("row level"). Softmax, for example, is three loops over R
// inside one parallel loop over the rows.
//
// Data-moving prims (slice, cat, slice_update) are index arithmetic: the plan
// says, per remapped value, which operand it reads where, and at which
// indices (a Remap). Every renderer turns the same Remap into its dialect's
// selects and index expressions; none looks at the prims' arguments.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/prim_id.h"
#include "ir/trace.h"

namespace thunder::codegen {

using ir::ProxyId;

/// The shape of tensor `v` as integers: code generation plans from one concrete shape (its kernels take sizes as
/// arguments). A symbolic size is evaluated at the trace's size hints (Trace::size_hints), if it has them;
/// ir::SymbolicShapeError if it has none.
std::vector<int64_t> shape_of(const ir::Trace& t, ProxyId v);
/// The element count of tensor `v`, an integer (as shape_of).
int64_t numel_of(const ir::Trace& t, ProxyId v);

/// Inside an operand's evaluation, the index of domain dim `dim` becomes
/// (i * scale + offset) / divisor, i being the index it had outside (scale 0:
/// the constant `offset`). The division is exact wherever the operand is
/// selected. `extent` is the operand's index range along `dim`: a renderer that
/// evaluates the operand also where it is not selected (a select computes both
/// sides) clamps the index into [0, extent) so that every load stays in bounds.
struct IndexMap {
  int dim = 0;
  int64_t scale = 1, offset = 0, divisor = 1;
  int64_t extent = 0;

  bool identity() const { return scale == 1 && offset == 0 && divisor == 1; }
  bool operator==(const IndexMap&) const = default;
};

/// Indices i of domain dim `dim` with lo <= i < hi and (i - lo) % step == 0.
/// lo = 0 and hi = kUnbounded need no test (every index a value is read at
/// lies in [0, its extent)).
struct IndexRange {
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
  int dim = 0;
  int64_t lo = 0, hi = kUnbounded, step = 1;
  bool operator==(const IndexRange&) const = default;
};

/// One operand of a remapped value: selected where every range of `when`
/// holds, and evaluated with the domain indices remapped by `at`.
struct RemapCase {
  ProxyId operand = 0;
  std::vector<IndexRange> when;  // empty: everywhere no earlier case is selected
  std::vector<IndexMap> at;      // empty: at the same indices
};

/// A data-moving prim as index arithmetic: its value at an index is that of the
/// first case whose ranges hold there; the last case holds wherever no earlier
/// one does. A slice is one case read at shifted (strided) indices; a cat one
/// case per non-empty input, each over its part of the dim; slice_update the
/// update over its box and grid, then the tensor updated.
///
///   t1 = slice_update(t0, t2, [0, 2], [4, 8], [1, 3])   (t0: 4x8, t2: 4x2)
///   cases: t2 when {dim 1: 2 <= i < 6, (i - 2) % 3 == 0} at {dim 1: (i - 2) / 3}
///          t0
struct Remap {
  std::vector<RemapCase> cases;
};

/// A loop is split into at most this many pieces at range bounds (each piece holds its own copy of the
/// kernel's body); with more bounds a renderer selects per element instead.
constexpr size_t kMaxLoopPieces = 64;

struct KernelPlan {
  std::vector<int64_t> domain;             // D
  std::vector<bool> reduced;               // per domain dim: is it in R
  std::vector<ir::BoundSymbol> symbols;    // the region's prims, in order
  std::vector<ProxyId> inputs;             // tensors read from outside the region
  std::vector<ProxyId> scalars;            // numbers read from outside the region, known only at run time (a
                                           // `.item()`, a float attribute Dynamo passes as a tensor): operands of
                                           // elementwise prims, passed to the kernel after its sizes (`x<k>`)
  std::vector<ProxyId> outputs;            // tensors used after the region (a one-element output of a
                                           // kernel without reductions may be aligned to no domain dim:
                                           // it is stored once, at index 0 of the dims it lacks)
  std::map<ProxyId, std::vector<int>> align;  // value dim -> domain dim, or -1 (broadcast)
  std::map<ProxyId, Remap> remaps;            // the output of each slice, cat and slice_update
  std::vector<bool> generic;                  // per domain dim: see generic_dim
  std::vector<int> written_over;              // per output: the input whose buffer it is written into in place
                                              // (an index into inputs), or -1: a new tensor (see written_over)

  bool has_reduction() const;
  /// Whether the kernel is written for every shape of its size class, every extent an argument: any plan
  /// without remaps.
  bool shape_generic() const { return remaps.empty(); }
  /// Whether domain dim `d`'s extent is a kernel argument (`n<d>`): unless a remap (slice, cat, slice_update)
  /// indexes along it or reads an operand of another extent along it (a slice's source), whose offsets,
  /// ranges and extents are sizes of the program, written in as literals with that dim's extent. A cat along
  /// a head dim thus serves every sequence length.
  bool generic_dim(int d) const { return generic.empty() || generic[static_cast<size_t>(d)]; }
  /// True if the value varies along some reduced dim (computed inside the R loops).
  bool element_level(ProxyId v) const;
  /// Where the remaps' ranges along domain dim `dim` begin or end strictly inside it, sorted and
  /// distinct: a loop over `dim` split there decides every such range once per piece.
  std::vector<int64_t> range_bounds(int dim) const;
};

/// A size a shape-generic kernel takes as an argument (after its pointers and the thread count), so that
/// one compiled kernel serves every shape of its size class: each domain dim's extent (`n<d>` in the
/// kernel), then the strides of trace inputs read in place that are neither 0 nor 1 (`s<k>_<i>`: input k's
/// dim i; strides 0 and 1 are part of the layout, written into the kernel). The launcher reads each from
/// input `input`'s shape (or stride) along `input_dim`, or passes `value` where no input has the dim.
struct SizeArgument {
  std::string name;
  bool stride = false;
  int input = -1, input_dim = -1;
  int64_t value = 0;
};

/// Plans one kernel for `symbols` (prims of `trace`, in order). `live_out` holds
/// the values used outside the region (they become outputs). Returns nullopt,
/// with the reason in *why, if the region cannot be one kernel: an op or dtype
/// the generator lacks, reductions over different dims, shapes that do not
/// align to one domain.
std::optional<KernelPlan> plan_kernel(const ir::Trace& trace, const std::vector<ir::BoundSymbol>& symbols,
                                      const std::set<ProxyId>& live_out, std::string* why = nullptr);

/// What a kernel does with a prim it fuses: computes it per element (Elementwise), reads its operand at
/// other indices (IndexOnly: broadcast_in_dim, reshape, squeeze, alias), reduces over R (Reduction), picks
/// one element per row (Pick: take_along_axis), remaps indices (Remap: slice, cat, slice_update) or
/// evaluates a constant where it is read (Constant: full).
enum class PrimRole { Elementwise, IndexOnly, Reduction, Pick, Remap, Constant };
/// Which operand dtypes an elementwise prim fuses over (kernels compute in C-like types, whose math
/// functions take floats and whose bitwise operators take integers).
enum class Operands { Any, FloatOnly, IntegerOnly };
struct PrimKind {
  PrimRole role = PrimRole::Elementwise;
  Operands operands = Operands::Any;
};
/// The plan table ("kernel plan"): one row per fusible prim, target-neutral; every dialect has a row for
/// each (for the C++ dialect, cpu_expressions()).
const ir::PrimTable<PrimKind>& plan_table();

/// Whether `b`'s number arguments are operands a kernel reads at run time (a fusion's, an elementwise prim's
/// but uniform_philox's and pow's, full's fill value), so that a size symbol among them (not in a shape) stays a
/// symbol when the trace's sizes are bound (ir::bind_sizes) and becomes a kernel argument (KernelPlan::scalars)
/// instead of a literal.
bool reads_numbers_at_run_time(const ir::BoundSymbol& b);

/// Per output of `plan`: the input (an index into plan.inputs) whose buffer the kernel may write that output
/// into, or -1. `dying` are the inputs the caller may give up (read by nothing after the kernel, owned by no
/// one else; translation_units.cc decides). An output takes one only where that is the same as writing a new
/// tensor: a kernel without reductions or remaps, whose every prim computes per element or moves no data
/// across elements, and an input and output of one dtype and device with the domain's shape, each read and
/// written at the same index -- each element of the input is read, at its own index, before the output's
/// element there is stored. Empty if no output takes one.
std::vector<int> written_over(const ir::Trace& trace, const KernelPlan& plan, const std::set<ProxyId>& dying);

/// The size arguments of the plan's kernel, in order (none for a kernel that is not shape-generic).
std::vector<SizeArgument> size_arguments(const ir::Trace& trace, const KernelPlan& plan);

/// The domain dims whose loop index each value of a kernel without reductions reads, for a renderer to compute
/// a value that reads none once and share it with the code evaluating it at other indices: an input's, or a
/// per-element draw's (uniform_philox), aligned dims of more than one element; a remapped value's operands'
/// dims, less those its case reads at a constant index, plus those its case tests; another value's operands'.
/// An input `flat` accepts (one a dialect reads at the domain's flat index) reads dim -1. Memoized per value.
class IndexRefs {
 public:
  IndexRefs(const ir::Trace& trace, const KernelPlan& plan, std::function<bool(ProxyId)> flat = {});
  const std::set<int>& operator()(ProxyId v);

 private:
  const ir::Trace& t_;
  const KernelPlan& p_;
  std::function<bool(ProxyId)> flat_;
  std::map<ProxyId, const ir::BoundSymbol*> producer_;
  std::map<ProxyId, std::set<int>> refs_;
};

/// True if the generator has code for this prim at all (dtype checks come in plan_kernel).
bool is_fusible_prim(const std::string& name);
/// The prims the generator has code for, sorted (what a CPU fusion executor claims).
std::vector<std::string> fusible_prims();

}  // namespace thunder::codegen
