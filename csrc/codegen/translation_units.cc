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
    signatures.push_back({b.callee, std::move(ins), plan->outputs, size_arguments(t, *plan), plan->written_over, ""});
    plans.push_back(std::move(*plan));
  }
}

}  // namespace

TranslationUnit cuda_translation_unit(const ir::Trace& t, const std::string& executor) {
  std::vector<KernelPlan> plans;
  TranslationUnit unit;
  plan_fusions(t, executor, plans, unit.kernels);
  if (plans.empty()) return unit;
  std::vector<GpuSchedule> schedules;
  schedules.reserve(plans.size());
  std::vector<CudaKernel> kernels;
  for (size_t i = 0; i < plans.size(); ++i) {
    schedules.push_back(schedule_gpu_kernel(t, plans[i]));
    KernelSignature& sig = unit.kernels[i];
    sig.block = schedules.back().block;
    sig.grid = schedules.back().grid;
    sig.workspace = cuda_workspace_bytes(plans[i], schedules.back());
    kernels.push_back({&plans[i], &schedules.back(), sig.name});
  }
  unit.source = render_cuda_module(t, kernels);
  return unit;
}

std::vector<TranslationUnit> cpu_translation_units(const ir::Trace& t, const std::string& executor, size_t parts,
                                                   HalfRounding rounding, const std::set<std::string>& loaded) {
  std::vector<KernelPlan> all_plans;
  std::vector<KernelSignature> all_signatures;
  plan_fusions(t, executor, all_plans, all_signatures, /*reuse=*/true);
  std::vector<KernelPlan> plans;
  std::vector<KernelSignature> signatures;
  std::vector<Schedule> schedules;
  TranslationUnit reused;  // the kernels already compiled: no source
  for (size_t i = 0; i < all_plans.size(); ++i) {
    Schedule schedule = schedule_kernel(t, all_plans[i]);
    all_signatures[i].key = cpu_kernel_key(t, {&all_plans[i], &schedule, all_signatures[i].name}, rounding);
    if (loaded.count(all_signatures[i].key)) {
      reused.kernels.push_back(std::move(all_signatures[i]));
      continue;
    }
    plans.push_back(std::move(all_plans[i]));
    signatures.push_back(std::move(all_signatures[i]));
    schedules.push_back(std::move(schedule));
  }
  size_t total = 0;
  for (const KernelPlan& p : plans) total += p.symbols.size();

  std::vector<TranslationUnit> units;
  parts = std::max<size_t>(1, std::min(parts, plans.size()));
  size_t begin = 0, done = 0;
  for (size_t part = 0; part < parts && begin < plans.size(); ++part) {
    // This unit takes kernels until it holds its share of the prims not yet placed.
    const size_t share = (total - done + (parts - part) - 1) / (parts - part);
    std::vector<CpuKernel> kernels;
    TranslationUnit unit;
    size_t size = 0, end = begin;
    while (end < plans.size() && (end == begin || size < share || part + 1 == parts)) {
      kernels.push_back({&plans[end], &schedules[end], signatures[end].name});
      unit.kernels.push_back(signatures[end]);
      size += plans[end].symbols.size();
      ++end;
    }
    unit.source = render_cpu_module(t, kernels, rounding);
    units.push_back(std::move(unit));
    begin = end;
    done += size;
  }
  if (!reused.kernels.empty()) units.push_back(std::move(reused));
  return units;
}

}  // namespace thunder::codegen
