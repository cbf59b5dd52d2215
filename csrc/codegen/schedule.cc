#include "codegen/schedule.h"

#include <algorithm>
#include <functional>
#include <map>

namespace thunder::codegen {
namespace {

// Whether the outputs `which` may be written by streaming stores along domain dim `d`, the innermost loop:
// each is written contiguously along it, and one of them is large.
bool streams(const ir::Trace& t, const KernelPlan& p, const std::vector<ProxyId>& which, int d, int64_t bytes_from) {
  bool large = false;
  for (ProxyId v : which) {
    const auto& shape = shape_of(t, v);
    const auto& al = p.align.at(v);
    if (shape.empty() || al.back() != d || shape.back() != p.domain[d]) return false;
    int64_t bytes = static_cast<int64_t>(ir::item_size(t.tensor(v).dtype));
    for (int64_t n : shape) bytes *= n;
    large = large || bytes >= bytes_from;
  }
  return large;
}

// Groups of the plan's reductions that read the same earlier reductions (the nearest ones on every path back from
// their inputs) and accumulate alike: none reads another, and each reads only values a row has before the group's
// pass (layer_norm's corrected moments: the sums of x - mean and of its square; a norm's backward: its two sums).
std::vector<std::vector<ProxyId>> sibling_reductions(const KernelPlan& p, const std::set<ProxyId>& lanes) {
  std::map<ProxyId, const ir::BoundSymbol*> producer;
  for (const ir::BoundSymbol& b : p.symbols) producer[b.output.proxy()] = &b;
  std::map<ProxyId, std::set<ProxyId>> nearest;  // per value: the nearest reductions it reads (plan order)
  for (const ir::BoundSymbol& b : p.symbols) {
    std::set<ProxyId> read;
    for (ProxyId a : b.input_proxies()) {
      auto from = producer.find(a);
      if (from == producer.end()) continue;  // a kernel input
      if (from->second->sym->has(ir::kReduction)) {
        read.insert(a);
      } else {
        const std::set<ProxyId>& earlier = nearest.at(a);
        read.insert(earlier.begin(), earlier.end());
      }
    }
    nearest[b.output.proxy()] = std::move(read);
  }
  std::map<std::pair<std::set<ProxyId>, bool>, std::vector<ProxyId>> by_key;
  std::vector<std::pair<std::set<ProxyId>, bool>> order;
  for (const ir::BoundSymbol& b : p.symbols) {
    if (!b.sym->has(ir::kReduction)) continue;
    const ProxyId v = b.output.proxy();
    auto key = std::make_pair(nearest.at(v), lanes.count(v) > 0);
    if (!by_key.count(key)) order.push_back(key);
    by_key[key].push_back(v);
  }
  std::vector<std::vector<ProxyId>> groups;
  for (const auto& key : order)
    if (by_key.at(key).size() > 1) groups.push_back(by_key.at(key));
  return groups;
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
  bool sized_at_run_time = false;  // the element count is a product of size arguments
  for (size_t d = 0; d < p.domain.size(); ++d)
    sized_at_run_time = sized_at_run_time || p.generic_dim(static_cast<int>(d));
  const bool large = total >= limits.grain;
  if (!p.has_reduction()) {
    s.parallel = large || sized_at_run_time;
    s.parallel_by_size = sized_at_run_time;
    if (s.outer.size() > 1) s.cuts = p.range_bounds(s.outer.back());
    if (s.cuts.size() >= kMaxLoopPieces) s.cuts.clear();  // selects instead: the code would grow with every piece
    s.stream = s.cuts.empty() && !s.outer.empty() && streams(t, p, p.outputs, s.outer.back(), limits.stream_bytes);
    return s;
  }
  // One row stays a class of its own: above the grain its reductions split across threads, below it they
  // run in lanes and keep row buffers -- another loop nest, not a test.
  s.parallel = rows > 1 && (large || sized_at_run_time);
  s.parallel_by_size = s.parallel && sized_at_run_time;
  s.parallel_inner = large && rows == 1;
  std::vector<ProxyId> element_outputs;
  for (ProxyId v : p.outputs)
    if (p.element_level(v)) element_outputs.push_back(v);
  s.stream = !element_outputs.empty() && !s.parallel_inner &&
             streams(t, p, element_outputs, s.inner.back(), limits.stream_bytes);
  if (!s.parallel_inner && length <= limits.row_cache) s.row_cache = limits.row_cache;
  s.float_accumulation = length <= limits.float_accumulation;
  const bool long_rows = p.domain[s.inner.back()] >= limits.lane_minimum;
  for (const ir::BoundSymbol& b : p.symbols)
    if (b.sym->has(ir::kReduction) && !s.parallel_inner && long_rows && ir::is_floating(t.tensor(b.args[0].proxy()).dtype))
      s.lane_reductions.insert(b.output.proxy());
  s.sibling_reductions = sibling_reductions(p, s.lane_reductions);
  return s;
}

// ---- GPU ----

bool host_scalar(const ir::Trace& t, ProxyId v) {
  if (!t.proxy(v).is_tensor) return false;
  const ir::TensorMeta& m = t.tensor(v);
  return m.shape.empty() && m.device == "cpu";
}

bool dense_value(const ir::Trace& t, const KernelPlan& p, ProxyId v) {
  if (p.remaps.count(v) || host_scalar(t, v)) return false;
  const ir::TensorMeta& m = t.tensor(v);
  const auto& al = p.align.at(v);
  if (m.shape.size() != p.domain.size()) return false;
  for (size_t i = 0; i < al.size(); ++i)
    if (al[i] != static_cast<int>(i) || m.shape[i] != p.domain[i]) return false;
  const std::vector<int64_t>& strides = t.proxy(v).strides;  // a trace input read in place
  if (strides.empty()) return true;
  int64_t expect = 1;
  for (size_t i = m.shape.size(); i-- > 0;) {
    if (m.shape[i] != 1 && strides[i] != expect) return false;
    expect *= m.shape[i].value("code generation");
  }
  return true;
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether every reduction of the plan reads only kernel inputs (no other reduction's result, no pick): then
// the blocks of a two-stage reduction need nothing from each other before the second stage.
bool reductions_read_only_inputs(const KernelPlan& p) {
  std::map<ProxyId, const ir::BoundSymbol*> producer;
  for (const ir::BoundSymbol& b : p.symbols) producer[b.output.proxy()] = &b;
  std::set<ProxyId> seen;
  std::function<bool(ProxyId, bool)> pure = [&](ProxyId v, bool top) {
    auto it = producer.find(v);
    if (it == producer.end()) return true;
    const ir::BoundSymbol& b = *it->second;
    if (!top && (b.sym->has(ir::kReduction) || b.is(ir::PrimId::take_along_axis))) return false;
    if (!seen.insert(v).second) return true;
    for (ProxyId u : b.input_proxies())
      if (!pure(u, false)) return false;
    return true;
  };
  for (const ir::BoundSymbol& b : p.symbols)
    if (b.sym->has(ir::kReduction) && !pure(b.output.proxy(), true)) return false;
  return true;
}

}  // namespace

GpuSchedule schedule_gpu_kernel(const ir::Trace& t, const KernelPlan& p, const GpuLimits& limits) {
  GpuSchedule s;
  s.limits = limits;
  s.block = limits.block;
  int64_t rows = 1, total = 1, length = 1;
  for (size_t d = 0; d < p.domain.size(); ++d) {
    (p.reduced[d] ? s.inner : s.outer).push_back(static_cast<int>(d));
    (p.reduced[d] ? length : rows) *= p.domain[d];
    total *= p.domain[d];
  }
  if (!p.has_reduction()) {
    s.strategy = GpuStrategy::Elementwise;
    int widest = 0;
    bool any_dense = false;
    if (p.remaps.empty()) {
      for (const auto* list : {&p.inputs, &p.outputs})
        for (ProxyId v : *list)
          if (dense_value(t, p, v)) {
            any_dense = true;
            widest = std::max(widest, ir::item_size(t.tensor(v).dtype));
          }
    }
    s.vector = any_dense && widest > 0 && !p.domain.empty() ? limits.vector_bytes / widest : 1;
    // An IEEE division (or a function built on one) has a slow path that is a call; more than two of them
    // unrolled in one thread's body made ptxas spill around the calls (silu at 4 elements: 4 bytes).
    for (const ir::BoundSymbol& b : p.symbols)
      for (ir::PrimId id : {ir::PrimId::div, ir::PrimId::reciprocal, ir::PrimId::sigmoid, ir::PrimId::rsqrt,
                            ir::PrimId::remainder, ir::PrimId::fmod})
        if (b.is(id)) s.vector = std::min(s.vector, limits.divisions_vector);
    s.grid = std::clamp<int64_t>(ceil_div(total, int64_t{s.block} * s.vector), 1, limits.max_blocks);
    return s;
  }
  bool element_outputs = false;
  for (ProxyId v : p.outputs) element_outputs = element_outputs || p.element_level(v);
  // A few long rows: one block per row would leave most of the GPU idle (4 rows of 100K elements: 4 blocks), so
  // each row is split across blocks (at most max_partials blocks in all).
  if (rows >= 1 && rows <= limits.split_rows && length >= limits.two_stage && !element_outputs &&
      reductions_read_only_inputs(p)) {
    s.strategy = GpuStrategy::TwoStage;
    const int64_t parts = std::clamp<int64_t>(ceil_div(length, int64_t{s.block} * limits.items_per_thread), 1,
                                              limits.max_partials / rows);
    s.grid = rows * parts;
    return s;
  }
  if (length <= limits.warp_row) {
    s.strategy = GpuStrategy::WarpPerRow;
    s.grid = std::clamp<int64_t>(ceil_div(rows, s.block / 32), 1, limits.max_blocks);
    return s;
  }
  s.strategy = GpuStrategy::BlockPerRow;
  s.block = length <= limits.block_row ? limits.block : limits.long_row_block;
  s.grid = std::clamp<int64_t>(rows, 1, limits.max_blocks);
  return s;
}

}  // namespace thunder::codegen
