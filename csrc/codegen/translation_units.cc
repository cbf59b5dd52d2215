#include "codegen/translation_units.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include "codegen/cpu_dialect.h"
#include "codegen/cuda_dialect.h"
#include "codegen/kernel_plan.h"
#include "codegen/schedule.h"

namespace thunder::codegen {

namespace {

// The tensors each symbol of `t` reads that die there and that no one else holds: read by that symbol alone
// (a `del` is not a reader), not outputs of the trace, not requiring grad (so that no autograd node saved
// them), and owned: made by a fusion of `executor` (its launcher allocated them, or wrote them over such a
// tensor), by a symbol whose output is always new (ir::kFreshOutput), or by a view (ir::kView) of an owned
// tensor that dies there. Indexed like t.symbols.
std::vector<std::set<ir::ProxyId>> dying_owned_values(const ir::Trace& t, const std::string& executor) {
  std::map<ir::ProxyId, size_t> readers, reader;
  for (size_t i = 0; i < t.symbols.size(); ++i) {
    if (t.symbols[i].sym->has(ir::kRelease)) continue;
    for (ir::ProxyId id : t.symbols[i].input_proxies()) ++readers[id], reader[id] = i;
  }
  std::set<ir::ProxyId> returned;
  ir::for_each_proxy(t.output, [&](ir::ProxyId id) { returned.insert(id); });
  auto dies_at = [&](ir::ProxyId id, size_t i) {
    return readers[id] == 1 && reader[id] == i && !returned.count(id) && t.proxy(id).is_tensor &&
           !t.tensor(id).requires_grad;
  };
  std::set<ir::ProxyId> owned;
  std::vector<std::set<ir::ProxyId>> dying(t.symbols.size());
  for (size_t i = 0; i < t.symbols.size(); ++i) {
    const ir::BoundSymbol& b = t.symbols[i];
    const std::vector<ir::ProxyId> ins = b.input_proxies();
    const bool owns = b.sym->has(ir::kFreshOutput) || (b.sym->level == ir::Level::Fusion && b.executor == executor) ||
                      (b.sym->has(ir::kView) && !ins.empty() && owned.count(ins[0]) && dies_at(ins[0], i));
    if (owns)
      for (ir::ProxyId id : b.output_proxies()) owned.insert(id);
    for (ir::ProxyId id : ins)
      if (owned.count(id) && dies_at(id, i)) dying[i].insert(id);
  }
  return dying;
}

// The plans of the fusions of `executor` in `t`, and their signatures; with `reuse`, outputs written over
// inputs that die in their kernel (KernelPlan::written_over).
void plan_fusions(const ir::Trace& t, const std::string& executor, std::vector<KernelPlan>& plans,
                  std::vector<KernelSignature>& signatures, bool reuse = false) {
  const std::vector<std::set<ir::ProxyId>> dying = reuse ? dying_owned_values(t, executor)
                                                         : std::vector<std::set<ir::ProxyId>>(t.symbols.size());
  for (size_t i = 0; i < t.symbols.size(); ++i) {
    const ir::BoundSymbol& b = t.symbols[i];
    if (b.sym->level != ir::Level::Fusion || b.executor != executor) continue;
    std::set<ir::ProxyId> outs;
    for (ir::ProxyId id : b.output_proxies()) outs.insert(id);
    std::string why;
    auto plan = plan_kernel(t, b.subsymbols, outs, &why);
    if (!plan) throw std::logic_error("fusion " + b.callee + " no longer plans: " + why);
    plan->written_over = written_over(t, *plan, dying[i]);
    std::vector<ir::ProxyId> ins = plan->inputs;  // the launcher's arguments: the tensors, then the numbers
    ins.insert(ins.end(), plan->scalars.begin(), plan->scalars.end());
    signatures.push_back({b.callee, std::move(ins), plan->outputs, size_arguments(t, *plan), plan->written_over, "", "", 0, 0, 0, {}});
    plans.push_back(std::move(*plan));
  }
}

// Consecutive ranges [begin, end) of items with the given sizes, min(parts, items) of them, balanced: each range
// takes at least one item, then the next while that brings it nearer its share of the size not yet placed and
// leaves an item for each range after it; the last takes the rest. (Sizes 2 and 12 in two parts: one each.)
std::vector<std::pair<size_t, size_t>> balanced_ranges(const std::vector<size_t>& sizes, size_t parts) {
  size_t total = 0;
  for (size_t z : sizes) total += z;
  std::vector<std::pair<size_t, size_t>> ranges;
  parts = std::max<size_t>(1, std::min(parts, sizes.size()));
  size_t begin = 0, done = 0;
  for (size_t part = 0; part < parts && begin < sizes.size(); ++part) {
    const size_t share = (total - done + (parts - part) - 1) / (parts - part);
    size_t size = 0, end = begin;
    while (end < sizes.size()) {
      if (end != begin && part + 1 != parts) {
        const size_t with = size + sizes[end];
        if (sizes.size() - end < parts - part || (with > share && (size >= share || with - share >= share - size)))
          break;
      }
      size += sizes[end++];
    }
    ranges.emplace_back(begin, end);
    begin = end;
    done += size;
  }
  return ranges;
}

// Where a trace's kernels go, from their keys and prim counts: those whose key is `loaded` (compiled for another
// trace) into no unit; the others into at most `parts` units of consecutive distinct kernels balanced by prim
// count, a kernel repeating an earlier one's key joining that one's unit (compiled once: an alias on the CPU, the
// same symbol on a GPU).
struct Placement {
  std::vector<size_t> reused;
  std::vector<std::vector<size_t>> units;  // kernel indices, in trace order
  std::vector<size_t> runs;                // per kernel, the kernel whose code it runs (itself if not a repeat)
};

Placement place_kernels(const std::vector<std::string>& keys, const std::vector<size_t>& prims, size_t parts,
                        const std::set<std::string>& loaded) {
  Placement out;
  out.runs.resize(keys.size());
  std::map<std::string, size_t> first_with;  // key -> the first kernel with it, an index into `distinct`
  std::vector<size_t> distinct, sizes;
  std::vector<std::vector<size_t>> repeats;  // per distinct kernel, the kernels repeating it
  for (size_t i = 0; i < keys.size(); ++i) {
    out.runs[i] = i;
    if (loaded.count(keys[i])) {
      out.reused.push_back(i);
      continue;
    }
    const auto [first, added] = first_with.emplace(keys[i], distinct.size());
    if (!added) {
      out.runs[i] = distinct[first->second];
      repeats[first->second].push_back(i);
      continue;
    }
    distinct.push_back(i);
    sizes.push_back(prims[i]);
    repeats.emplace_back();
  }
  for (const auto& [begin, end] : balanced_ranges(sizes, parts)) {
    std::vector<size_t> unit;
    for (size_t d = begin; d < end; ++d) {
      unit.push_back(distinct[d]);
      unit.insert(unit.end(), repeats[d].begin(), repeats[d].end());
    }
    std::sort(unit.begin(), unit.end());
    out.units.push_back(std::move(unit));
  }
  return out;
}

std::vector<size_t> prim_counts(const std::vector<KernelPlan>& plans) {
  std::vector<size_t> out;
  for (const KernelPlan& p : plans) out.push_back(p.symbols.size());
  return out;
}

}  // namespace

std::vector<TranslationUnit> cuda_translation_units(const ir::Trace& t, const std::string& executor, size_t parts,
                                                    const std::set<std::string>& loaded) {
  std::vector<KernelPlan> plans;
  std::vector<KernelSignature> signatures;
  plan_fusions(t, executor, plans, signatures);
  std::vector<std::string> texts, keys;
  for (size_t i = 0; i < plans.size(); ++i) {
    const GpuSchedule schedule = schedule_gpu_kernel(t, plans[i]);
    KernelSignature& sig = signatures[i];
    sig.block = schedule.block;
    sig.grid = schedule.grid;
    sig.workspace = cuda_workspace_bytes(plans[i], schedule);
    for (ir::ProxyId v : sig.inputs) sig.by_value.push_back(host_scalar(t, v));
    texts.push_back(render_cuda_kernel(t, {&plans[i], &schedule, sig.name}));
    sig.key = text_apart_from_name(texts[i], sig.name);
    keys.push_back(sig.key);
  }
  const Placement place = place_kernels(keys, prim_counts(plans), parts, loaded);
  std::vector<TranslationUnit> units;
  for (const std::vector<size_t>& members : place.units) {
    TranslationUnit unit;
    std::vector<std::string> unit_texts;
    bool draws = false;
    for (size_t i : members) {
      if (place.runs[i] != i) {  // a repeat runs its first's code
        signatures[i].symbol = signatures[place.runs[i]].name;
      } else {
        unit_texts.push_back(texts[i]);
        draws = draws || cuda_kernel_draws(plans[i]);
      }
      unit.kernels.push_back(signatures[i]);
    }
    unit.source = cuda_module_source(unit_texts, draws);
    units.push_back(std::move(unit));
  }
  TranslationUnit reused;  // the kernels already compiled: no source
  for (size_t i : place.reused) reused.kernels.push_back(signatures[i]);
  if (!reused.kernels.empty()) units.push_back(std::move(reused));
  return units;
}

std::vector<TranslationUnit> cpu_translation_units(const ir::Trace& t, const std::string& executor, size_t parts,
                                                   HalfRounding rounding, const std::set<std::string>& loaded) {
  std::vector<KernelPlan> plans;
  std::vector<KernelSignature> signatures;
  plan_fusions(t, executor, plans, signatures, /*reuse=*/true);
  std::vector<Schedule> schedules;
  std::vector<std::string> keys;
  for (size_t i = 0; i < plans.size(); ++i) {
    schedules.push_back(schedule_kernel(t, plans[i]));
    signatures[i].key = cpu_kernel_key(t, {&plans[i], &schedules[i], signatures[i].name}, rounding);
    keys.push_back(signatures[i].key);
  }
  const Placement place = place_kernels(keys, prim_counts(plans), parts, loaded);
  std::vector<TranslationUnit> units;
  for (const std::vector<size_t>& members : place.units) {
    std::vector<CpuKernel> kernels;
    TranslationUnit unit;
    for (size_t i : members) {  // render_cpu_module writes a repeat as an alias of its first
      kernels.push_back({&plans[i], &schedules[i], signatures[i].name});
      unit.kernels.push_back(signatures[i]);
    }
    unit.source = render_cpu_module(t, kernels, rounding);
    units.push_back(std::move(unit));
  }
  TranslationUnit reused;  // the kernels already compiled: no source
  for (size_t i : place.reused) reused.kernels.push_back(signatures[i]);
  if (!reused.kernels.empty()) units.push_back(std::move(reused));
  return units;
}

}  // namespace thunder::codegen
