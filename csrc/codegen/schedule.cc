#include "codegen/schedule.h"

namespace thunder::codegen {
namespace {

// Whether the outputs `which` may be written by streaming stores along domain dim `d`, the innermost loop:
// each is written contiguously along it, and one of them is large.
bool streams(const ir::Trace& t, const KernelPlan& p, const std::vector<ProxyId>& which, int d, int64_t bytes_from) {
  bool large = false;
  for (ProxyId v : which) {
    const auto& shape = t.tensor(v).shape;
    const auto& al = p.align.at(v);
    if (shape.empty() || al.back() != d || shape.back() != p.domain[d]) return false;
    int64_t bytes = static_cast<int64_t>(ir::item_size(t.tensor(v).dtype));
    for (int64_t n : shape) bytes *= n;
    large = large || bytes >= bytes_from;
  }
  return large;
}

}  // namespace

Schedule schedule_kernel(const ir::Trace& t, const KernelPlan& p, const ScheduleLimits& limits) {
  Schedule s;
  s.limits = limits;
  int64_t rows = 1, total = 1, length = 1;
  for (size_t d = 0; d < p.domain.size(); ++d) {
    (p.reduced[d] ? s.inner : s.outer).push_back(static_cast<int>(d));
    (p.reduced[d] ? length : rows) *= p.domain[d];
    total *= p.domain[d];
  }
  const bool large = total >= limits.grain;
  if (!p.has_reduction()) {
    s.parallel = large;
    if (s.outer.size() > 1) s.cuts = p.range_bounds(s.outer.back());
    if (s.cuts.size() >= kMaxLoopPieces) s.cuts.clear();  // selects instead: the code would grow with every piece
    s.stream = s.cuts.empty() && !s.outer.empty() && streams(t, p, p.outputs, s.outer.back(), limits.stream_bytes);
    return s;
  }
  s.parallel = large && rows > 1;
  s.parallel_inner = large && rows == 1;
  std::vector<ProxyId> element_outputs;
  for (ProxyId v : p.outputs)
    if (p.element_level(v)) element_outputs.push_back(v);
  s.stream = !element_outputs.empty() && !s.parallel_inner &&
             streams(t, p, element_outputs, s.inner.back(), limits.stream_bytes);
  if (!s.parallel_inner && length <= limits.row_cache)
    s.row_cache = length < limits.row_cache_short ? limits.row_cache_short : limits.row_cache;
  s.float_accumulation = length <= limits.float_accumulation;
  const bool long_rows = p.domain[s.inner.back()] >= limits.lane_minimum;
  for (const ir::BoundSymbol& b : p.symbols)
    if (b.sym->has(ir::kReduction) && !s.parallel_inner && long_rows && ir::is_floating(t.tensor(b.args[0].proxy()).dtype))
      s.lane_reductions.insert(b.output.proxy());
  return s;
}

}  // namespace thunder::codegen
