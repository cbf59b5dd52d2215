// Kernel plans: how a fusion region's prims map onto one loop nest.
//
// A region computes over one iteration domain D (a shape). Every tensor value
// of the region is *aligned* to D: each of its dims is either a domain dim or
// a broadcast (size-1) dim. If the region reduces, all its reductions reduce
// the same set R of domain dims; values aligned to an R dim are computed per
// element inside loops over R ("element level"), the others once per point of
// the outer dims ("row level"). Softmax, for example, is three loops over R
// inside one parallel loop over the rows.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/trace.h"

namespace thunder::codegen {

using ir::ProxyId;

struct KernelPlan {
  std::vector<int64_t> domain;             // D
  std::vector<bool> reduced;               // per domain dim: is it in R
  std::vector<ir::BoundSymbol> symbols;    // the region's prims, in order
  std::vector<ProxyId> inputs;             // tensors read from outside the region
  std::vector<ProxyId> outputs;            // tensors used after the region
  std::map<ProxyId, std::vector<int>> align;  // value dim -> domain dim, or -1 (broadcast)

  bool has_reduction() const;
  /// True if the value varies along some reduced dim (computed inside the R loops).
  bool element_level(ProxyId v) const;
};

/// Plans one kernel for `symbols` (prims of `trace`, in order). `live_out` holds
/// the values used outside the region (they become outputs). Returns nullopt,
/// with the reason in *why, if the region cannot be one kernel: an op or dtype
/// the generator lacks, reductions over different dims, shapes that do not
/// align to one domain.
std::optional<KernelPlan> plan_kernel(const ir::Trace& trace, const std::vector<ir::BoundSymbol>& symbols,
                                      const std::set<ProxyId>& live_out, std::string* why = nullptr);

/// True if the generator has code for this prim at all (dtype checks come in plan_kernel).
bool is_fusible_prim(const std::string& name);
/// The prims the generator has code for, sorted (what a CPU fusion executor claims).
std::vector<std::string> fusible_prims();

}  // namespace thunder::codegen
