// Fusion partitioning: groups the symbols a fusion executor claimed into
// regions that each become one generated kernel.
#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <stdexcept>
#include <unordered_map>

#include "codegen/kernel_plan.h"
#include "passes/passes.h"

namespace thunder::passes {
namespace {

const ir::Symbol kFusionSymbol{"fusion", ir::Level::Fusion, 0, {}};

// Whether b does work worth a kernel: not only viewing (broadcasts, reshapes, slices), concatenating or filling.
bool computes(const ir::BoundSymbol& b) {
  using P = ir::PrimId;
  for (P id : {P::broadcast_in_dim, P::reshape, P::squeeze, P::alias, P::slice, P::cat, P::full})
    if (b.is(id)) return false;
  return true;
}

struct Group {
  std::vector<size_t> members;  // indices into the trace's symbols, in order
};

// Which groups each group must run after. A group runs as one kernel, so it runs after everything any of its
// members reads: after every group those values depend on. Values record the groups they depend on when they
// are made, but a group gains members (and with them dependencies) later, so whether a value depends on a
// group is a search from the groups it recorded through the groups' dependencies, not a lookup. (A lookup
// missed `k = where(c, t95, t1)` joining group G1 after G1's `t98 = broadcast(t15)` had recorded G1 alone:
// t95 depends on G3, so t98 did too, and letting a reader of t98 join G3 made a cycle.)
class GroupDeps {
 public:
  int add_group() {
    edges_.emplace_back();
    return static_cast<int>(edges_.size()) - 1;
  }
  /// Group g (one of whose members reads values depending on `deps`) runs after them.
  void add(int g, const std::set<int>& deps) {
    for (int d : deps)
      if (d != g) edges_[static_cast<size_t>(g)].insert(d);
  }
  /// Groups a and b are one kernel now: each runs after what the other does.
  void merge(int a, int b) {
    edges_[static_cast<size_t>(a)].insert(edges_[static_cast<size_t>(b)].begin(), edges_[static_cast<size_t>(b)].end());
    edges_[static_cast<size_t>(a)].insert(b);
    edges_[static_cast<size_t>(b)].insert(a);
  }
  /// Whether something that depends on the groups `from` depends, through any chain of groups, on a group
  /// for which is_target holds.
  bool reaches(const std::set<int>& from, const std::function<bool(int)>& is_target) const {
    std::vector<char> seen(edges_.size(), 0);
    std::vector<int> stack(from.begin(), from.end());
    while (!stack.empty()) {
      const int g = stack.back();
      stack.pop_back();
      if (seen[static_cast<size_t>(g)]) continue;
      seen[static_cast<size_t>(g)] = 1;
      if (is_target(g)) return true;
      for (int d : edges_[static_cast<size_t>(g)])
        if (!seen[static_cast<size_t>(d)]) stack.push_back(d);
    }
    return false;
  }

 private:
  std::vector<std::set<int>> edges_;
};

// Drops the emptied groups and renumbers group_of (symbol index -> group, or -1) to match.
void compact(std::vector<Group>& groups, std::vector<int>& group_of) {
  std::vector<Group> kept;
  for (Group& g : groups)
    if (!g.members.empty()) kept.push_back(std::move(g));
  groups = std::move(kept);
  std::fill(group_of.begin(), group_of.end(), -1);
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i : groups[g].members) group_of[i] = static_cast<int>(g);
}

// The values of `members` read after them (by other symbols or as trace outputs).
// Who reads each value of a trace, made once per fusion pass: a group's live-out values are asked for at every
// candidate join and merge, and scanning the whole trace for each (as this once did) was most of the pass.
class Readers {
 public:
  explicit Readers(const Trace& t) {
    for (size_t i = 0; i < t.symbols.size(); ++i)
      for (ProxyId id : t.symbols[i].input_proxies()) readers_[id].push_back(i);
    ir::for_each_proxy(t.output, [&](ProxyId id) { readers_[id].push_back(kTraceOutput); });
  }
  /// The symbols reading `id` (kTraceOutput for the trace's output), in order; none for a value no one reads.
  const std::vector<size_t>& of(ProxyId id) const {
    static const std::vector<size_t> kNone;
    auto it = readers_.find(id);
    return it == readers_.end() ? kNone : it->second;
  }
  /// The values `members` (sorted symbol indices) make that a symbol outside them, or the trace's output, reads.
  std::set<ProxyId> live_out(const Trace& t, const std::vector<size_t>& members) const {
    std::set<ProxyId> out;
    for (size_t i : members)
      for (ProxyId id : t.symbols[i].output_proxies())
        for (size_t r : of(id))
          if (r == kTraceOutput || !std::binary_search(members.begin(), members.end(), r)) {
            out.insert(id);
            break;
          }
    return out;
  }
  static constexpr size_t kTraceOutput = static_cast<size_t>(-1);

 private:
  std::unordered_map<ProxyId, std::vector<size_t>> readers_;
};

// The plan of one kernel computing `members` (sorted symbol indices), or none if they do not make one -- also
// where planning them needs an integer the trace leaves symbolic (a size with no hint).
std::optional<codegen::KernelPlan> plan_for(const Trace& t, const Readers& readers, const std::vector<size_t>& members) {
  std::vector<ir::BoundSymbol> syms;
  for (size_t i : members) syms.push_back(t.symbols[i]);
  try {
    return codegen::plan_kernel(t, syms, readers.live_out(t, members));
  } catch (const ir::SymbolicShapeError&) {
    return std::nullopt;
  }
}

// Gives a symbol the fusion executor could not fuse to the next executor that claims it.
ir::BoundSymbol reclaim(const ir::BoundSymbol& b, const PassContext& ctx, const std::string& skip) {
  std::string key = std::string(b.sym->module()) + "." + b.sym->name;
  for (const ExecutorTable& ex : ctx.executors) {
    if (ex.name == skip || ex.fusion) continue;
    auto it = ex.callees.find(key);
    if (it == ex.callees.end()) continue;
    ir::BoundSymbol out = b;
    out.executor = ex.name;
    out.callee = it->second;
    return out;
  }
  throw std::runtime_error("no executor can run " + key + " outside a fusion");
}

// Merges pairs of related groups (one feeds the other, or both read a common
// value other than a trace input) when the union still plans as one kernel and no path leaves one
// group and re-enters the other through symbols outside both.
// A group runs as one kernel where its first member was: a symbol (or group) joining it from far below would
// be computed that much earlier, and its results kept alive the whole way down to their readers. (In a
// backward, each layer's recomputed norm read the residual stream recomputed for the last layer, first: joined
// to it, every layer's norm ran at the start of the backward, holding an activation per layer throughout.)
constexpr size_t kMaxHoist = 48;
bool hoists_far(const Group& g, size_t i) { return i > g.members.back() + kMaxHoist; }

void merge_groups(const Trace& t, const Readers& readers, std::vector<Group>& groups, std::vector<int>& group_of,
                  const std::unordered_map<ProxyId, size_t>& producer,
                  const std::unordered_map<ProxyId, std::set<int>>& depends, GroupDeps& group_deps,
                  const std::vector<int>& segment) {
  std::vector<int> parent(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) parent[g] = static_cast<int>(g);
  // A trace input both read does not relate two groups: it is in memory from the start, so merging them would
  // hoist the later group's work -- and its outputs' lifetimes -- up to the earlier one's. (A backward's
  // recomputations all read only saved values: merged by them, every layer's recomputation ran in one kernel
  // at the start of the backward, alive until the end.)
  const std::set<ProxyId> inputs(t.inputs.begin(), t.inputs.end());
  std::function<int(int)> find = [&](int g) { return parent[g] == g ? g : parent[g] = find(parent[g]); };
  std::vector<std::set<ProxyId>> reads(groups.size());  // the values each group reads, kept up to date on merges
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i : groups[g].members)
      for (ProxyId id : t.symbols[i].input_proxies()) reads[g].insert(id);
  // A member of `g` reading a value made outside a and b that depends on `other` closes a cycle.
  auto path_through_outside = [&](int g, int a, int b, int other) {
    for (size_t i : groups[g].members)
      for (ProxyId id : t.symbols[i].input_proxies()) {
        auto p = producer.find(id);
        if (p != producer.end() && group_of[p->second] >= 0) {
          int pg = find(group_of[p->second]);
          if (pg == a || pg == b) continue;
        }
        auto d = depends.find(id);
        if (d != depends.end() && group_deps.reaches(d->second, [&](int dep) { return find(dep) == other; }))
          return true;
      }
    return false;
  };
  // Until nothing merges: a merge can relate groups that were unrelated before.
  for (bool changed = true; changed;) {
  changed = false;
  for (size_t a = 0; a < groups.size(); ++a) {
    if (find(static_cast<int>(a)) != static_cast<int>(a)) continue;
    for (size_t b = a + 1; b < groups.size(); ++b) {
      if (find(static_cast<int>(b)) != static_cast<int>(b)) continue;
      const std::set<ProxyId>&ra = reads[a], &rb = reads[b];
      bool related = false;
      for (ProxyId id : rb) {
        auto p = producer.find(id);
        related |= (ra.count(id) > 0 && !inputs.count(id)) ||
                   (p != producer.end() && group_of[p->second] >= 0 && find(group_of[p->second]) == static_cast<int>(a));
      }
      for (ProxyId id : ra) {
        auto p = producer.find(id);
        related |= p != producer.end() && group_of[p->second] >= 0 && find(group_of[p->second]) == static_cast<int>(b);
      }
      int ia = static_cast<int>(a), ib = static_cast<int>(b);
      if (segment[groups[a].members.front()] != segment[groups[b].members.front()]) continue;
      if (!related || hoists_far(groups[a], groups[b].members.front()) || path_through_outside(ib, ia, ib, ia) ||
          path_through_outside(ia, ia, ib, ib))
        continue;
      std::vector<size_t> merged = groups[a].members;
      merged.insert(merged.end(), groups[b].members.begin(), groups[b].members.end());
      std::sort(merged.begin(), merged.end());
      if (!plan_for(t, readers, merged)) continue;
      groups[a].members = merged;
      groups[b].members.clear();
      reads[a].insert(reads[b].begin(), reads[b].end());
      parent[ib] = ia;
      group_deps.merge(ia, ib);
      for (size_t i : merged) group_of[i] = ia;
      changed = true;
    }
  }
  }
  compact(groups, group_of);
}

// Moves a data mover (a broadcast, reshape, ... of no arithmetic) from the kernel that computes its input
// into the one kernel that reads its result, when no one else reads that result: there it costs nothing
// (it is index arithmetic), where as an output of the first kernel it would be written out in full. (A
// Llama's RoPE cos/sin, broadcast per layer, otherwise left the first layer's kernel as eight copies.)
void sink_data_movers(const Trace& t, const Readers& readers, std::vector<Group>& groups, std::vector<int>& group_of,
                      const std::vector<int>& segment) {
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t k = groups[g].members.size(); k-- > 0;) {
      const size_t i = groups[g].members[k];
      const ir::BoundSymbol& b = t.symbols[i];
      if (computes(b) || b.output_proxies().size() != 1) continue;
      const ProxyId out = b.output_proxies()[0];
      const std::vector<size_t>& read_by = readers.of(out);
      if (read_by.empty() || std::count(read_by.begin(), read_by.end(), Readers::kTraceOutput)) continue;
      int target = -1;
      for (size_t r : read_by) {
        const int h = group_of[r];
        if (h < 0 || h == static_cast<int>(g) || (target >= 0 && h != target)) target = -2;
        if (target == -2) break;
        target = h;
      }
      if (target < 0 || segment[groups[target].members.front()] != segment[i]) continue;
      std::vector<size_t> grown = groups[target].members, shrunk = groups[g].members;
      grown.insert(std::upper_bound(grown.begin(), grown.end(), i), i);
      shrunk.erase(shrunk.begin() + static_cast<std::ptrdiff_t>(k));
      if (!plan_for(t, readers, grown) || (!shrunk.empty() && !plan_for(t, readers, shrunk))) continue;
      groups[target].members = std::move(grown);
      groups[g].members = std::move(shrunk);
      group_of[i] = target;
    }
  }
  compact(groups, group_of);
}

}  // namespace

// Groups the symbols one fusion executor claimed into its kernels (the others' symbols, fusions of another
// fusion executor included, stay as they are, in order).
static Trace fuse_for(const Trace& t, const PassContext& ctx, const ExecutorTable* fuser) {
  Trace out = t.empty_copy("Fusion");
  out.output = t.output;
  // Greedy grouping in program order: a symbol joins the group of one of its
  // producers if the grown group still plans as one kernel and no value it
  // reads depends on that group through a symbol outside it (which would make a cycle).
  const size_t n = t.symbols.size();
  // Effects (in-place ops, random numbers) are barriers: a kernel runs entirely between two of them, so nothing
  // moves across a mutation. A view-like prim whose result an effect mutates (directly or through more views)
  // stays unfused, so the mutation reaches the tensor it views rather than a kernel's copy.
  std::vector<int> segment(n, 0);
  for (size_t i = 1; i < n; ++i)
    segment[i] = segment[i - 1] + (t.symbols[i - 1].sym->has(ir::kEffect) || t.symbols[i].sym->has(ir::kEffect));
  std::set<ProxyId> mutated;
  std::vector<bool> keep_unfused(n, false);
  for (size_t k = n; k-- > 0;) {
    const ir::BoundSymbol& b = t.symbols[k];
    if (b.sym->has(ir::kEffect)) {
      for (ProxyId id : b.input_proxies()) mutated.insert(id);
      continue;
    }
    if (b.sym->level != ir::Level::Prim || !b.sym->has(ir::kView)) continue;
    bool feeds_mutation = false;
    for (ProxyId id : b.output_proxies()) feeds_mutation |= mutated.count(id) > 0;
    if (!feeds_mutation) continue;
    keep_unfused[k] = true;
    for (ProxyId id : b.input_proxies()) mutated.insert(id);
  }
  const Readers readers(t);
  std::vector<int> group_of(n, -1);
  std::vector<Group> groups;
  std::unordered_map<ProxyId, size_t> producer;
  std::unordered_map<ProxyId, std::set<int>> depends;  // value -> groups it depends on (when it was made)
  GroupDeps group_deps;
  for (size_t i = 0; i < n; ++i) {
    const ir::BoundSymbol& b = t.symbols[i];
    std::vector<ProxyId> ins = b.input_proxies();
    std::set<int> deps;
    for (ProxyId id : ins) deps.insert(depends[id].begin(), depends[id].end());
    if (b.executor == fuser->name && !keep_unfused[i]) {
      std::vector<int> candidates;
      for (ProxyId id : ins) {
        auto it = producer.find(id);
        if (it != producer.end() && group_of[it->second] >= 0) candidates.push_back(group_of[it->second]);
      }
      std::sort(candidates.rbegin(), candidates.rend());
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
      for (int g : candidates) {
        if (segment[groups[g].members.front()] != segment[i] || hoists_far(groups[g], i)) continue;
        bool cycle = false;
        for (ProxyId id : ins) {
          auto it = producer.find(id);
          bool inside = it != producer.end() && group_of[it->second] == g;
          if (!inside && group_deps.reaches(depends[id], [g](int dep) { return dep == g; })) cycle = true;
        }
        if (cycle) continue;
        std::vector<size_t> grown = groups[g].members;
        grown.push_back(i);
        if (!plan_for(t, readers, grown)) continue;
        groups[g].members = grown;
        group_of[i] = g;
        break;
      }
      if (group_of[i] < 0) {
        group_of[i] = group_deps.add_group();
        groups.push_back(Group{{i}});
      }
      group_deps.add(group_of[i], deps);
      deps.insert(group_of[i]);
    }
    for (ProxyId id : b.output_proxies()) {
      producer[id] = i;
      depends[id] = deps;
    }
  }
  merge_groups(t, readers, groups, group_of, producer, depends, group_deps, segment);
  sink_data_movers(t, readers, groups, group_of, segment);
  // Build the fused symbols; a group without arithmetic, or that does not
  // plan, goes back to the other executors symbol by symbol.
  std::vector<ir::BoundSymbol> nodes;  // one per group or unfused symbol
  std::vector<size_t> node_first;      // original index of the node's first symbol
  std::vector<int> node_of(n, -1);
  int kernels = 0;
  for (const Group& g : groups) {
    bool any_compute = false;
    for (size_t i : g.members) any_compute |= computes(t.symbols[i]);
    auto plan = any_compute ? plan_for(t, readers, g.members) : std::nullopt;
    if (!plan) {
      for (size_t i : g.members) group_of[i] = -1;
      continue;
    }
    ir::BoundSymbol f;
    f.sym = &kFusionSymbol;
    f.executor = fuser->name;
    f.callee = fuser->name + "_fusion" + std::to_string(kernels++);
    for (const auto* list : {&plan->inputs, &plan->scalars})
      for (ProxyId id : *list) f.args.push_back(ir::Value(ir::ProxyRef{id}));
    std::vector<ir::Value> outs;
    for (ProxyId id : plan->outputs) outs.push_back(ir::Value(ir::ProxyRef{id}));
    f.output = outs.size() == 1 ? outs[0] : ir::Value::tuple(outs);
    for (size_t i : g.members) {
      f.subsymbols.push_back(t.symbols[i]);
      node_of[i] = static_cast<int>(nodes.size());
    }
    f.source = t.symbols[g.members.front()].source;
    node_first.push_back(g.members.front());
    nodes.push_back(std::move(f));
  }
  for (size_t i = 0; i < n; ++i) {
    if (node_of[i] >= 0) continue;
    const ir::BoundSymbol& b = t.symbols[i];
    node_of[i] = static_cast<int>(nodes.size());
    node_first.push_back(i);
    nodes.push_back(b.executor == fuser->name ? reclaim(b, ctx, fuser->name) : b);
  }
  // Order the nodes topologically, preferring original program order.
  std::unordered_map<ProxyId, int> defined_by;
  for (size_t k = 0; k < nodes.size(); ++k)
    for (ProxyId id : nodes[k].output_proxies()) defined_by[id] = static_cast<int>(k);
  std::vector<std::vector<int>> users(nodes.size());
  std::vector<int> pending(nodes.size(), 0);
  for (size_t k = 0; k < nodes.size(); ++k) {
    std::set<int> preds;
    for (ProxyId id : nodes[k].input_proxies()) {
      auto it = defined_by.find(id);
      if (it != defined_by.end() && it->second != static_cast<int>(k)) preds.insert(it->second);
    }
    // Effects keep their relative order.
    pending[k] = static_cast<int>(preds.size());
    for (int p : preds) users[p].push_back(static_cast<int>(k));
  }
  int last_effect = -1;
  std::vector<size_t> by_first(nodes.size());
  for (size_t k = 0; k < nodes.size(); ++k) by_first[k] = k;
  std::sort(by_first.begin(), by_first.end(), [&](size_t a, size_t b) { return node_first[a] < node_first[b]; });
  std::vector<int> since_effect;  // nodes after the last effect, before the next one
  for (size_t k : by_first) {
    if (!nodes[k].sym->has(ir::kEffect)) {
      if (last_effect >= 0) {
        users[last_effect].push_back(static_cast<int>(k));
        ++pending[k];
      }
      since_effect.push_back(static_cast<int>(k));
      continue;
    }
    if (last_effect >= 0) {
      users[last_effect].push_back(static_cast<int>(k));
      ++pending[k];
    }
    for (int p : since_effect) {
      users[p].push_back(static_cast<int>(k));
      ++pending[k];
    }
    since_effect.clear();
    last_effect = static_cast<int>(k);
  }
  auto later = [&](int a, int b) { return node_first[a] > node_first[b]; };
  std::priority_queue<int, std::vector<int>, decltype(later)> ready(later);
  for (size_t k = 0; k < nodes.size(); ++k)
    if (pending[k] == 0) ready.push(static_cast<int>(k));
  while (!ready.empty()) {
    int k = ready.top();
    ready.pop();
    out.symbols.push_back(nodes[k]);
    for (int u : users[k])
      if (--pending[u] == 0) ready.push(u);
  }
  if (out.symbols.size() != nodes.size()) throw std::logic_error("fusion created a cycle");
  return out;
}

Trace fuse(const Trace& t, const PassContext& ctx) {
  // Each fusion executor in priority order (they claim disjoint symbols: the CPU's on CPU tensors, the GPU's
  // on CUDA tensors); a pass over a trace with none of an executor's symbols keeps the trace as it is.
  Trace out = t.empty_copy("Fusion");
  out.output = t.output;
  out.symbols = t.symbols;
  for (const ExecutorTable& ex : ctx.executors)
    if (ex.fusion) out = fuse_for(out, ctx, &ex);
  return out;
}

}  // namespace thunder::passes
