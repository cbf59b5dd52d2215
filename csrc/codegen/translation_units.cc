#include "codegen/translation_units.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include "codegen/cpu_dialect.h"
#include "codegen/cuda_dialect.h"
#include "codegen/kernel_plan.h"
#include "codegen/schedule.h"

namespace thunder::codegen {

namespace {

// The plans of the fusions of `executor` in `t`, and their signatures.
void plan_fusions(const ir::Trace& t, const std::string& executor, std::vector<KernelPlan>& plans,
                  std::vector<KernelSignature>& signatures) {
  for (const ir::BoundSymbol& b : t.symbols) {
    if (b.sym->level != ir::Level::Fusion || b.executor != executor) continue;
    std::set<ir::ProxyId> outs;
    for (ir::ProxyId id : b.output_proxies()) outs.insert(id);
    std::string why;
    auto plan = plan_kernel(t, b.subsymbols, outs, &why);
    if (!plan) throw std::logic_error("fusion " + b.callee + " no longer plans: " + why);
    signatures.push_back({b.callee, plan->inputs, plan->outputs, size_arguments(t, *plan)});
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
                                                   HalfRounding rounding) {
  std::vector<KernelPlan> plans;
  std::vector<KernelSignature> signatures;
  plan_fusions(t, executor, plans, signatures);
  size_t total = 0;
  for (const KernelPlan& p : plans) total += p.symbols.size();
  std::vector<Schedule> schedules;
  for (const KernelPlan& p : plans) schedules.push_back(schedule_kernel(t, p));

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
  return units;
}

}  // namespace thunder::codegen
