#include "passes/min_cut.h"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>

namespace thunder::passes {

void FlowGraph::add_edge(size_t from, size_t to, int64_t capacity) {
  if (from >= adjacent_.size() || to >= adjacent_.size())
    throw std::out_of_range("FlowGraph::add_edge: node " + std::to_string(std::max(from, to)) + " of a graph of " +
                            std::to_string(adjacent_.size()));
  adjacent_[from].push_back(edges_.size());
  edges_.push_back({to, capacity});
  adjacent_[to].push_back(edges_.size());
  edges_.push_back({from, 0});
}

bool FlowGraph::levels(size_t source, size_t sink) {
  std::fill(level_.begin(), level_.end(), -1);
  level_[source] = 0;
  std::deque<size_t> queue{source};
  while (!queue.empty()) {
    const size_t u = queue.front();
    queue.pop_front();
    for (size_t e : adjacent_[u])
      if (edges_[e].residual > 0 && level_[edges_[e].to] < 0) {
        level_[edges_[e].to] = level_[u] + 1;
        queue.push_back(edges_[e].to);
      }
  }
  return level_[sink] >= 0;
}

// Recursive: a path climbs one level a call, and there are at most as many levels as nodes (twice the longest
// chain of recomputable values on the graphs autodiff.cc builds); each frame is a few words.
int64_t FlowGraph::push(size_t node, size_t sink, int64_t limit) {
  if (node == sink) return limit;
  for (size_t& i = next_[node]; i < adjacent_[node].size(); ++i) {
    Edge& e = edges_[adjacent_[node][i]];
    if (e.residual <= 0 || level_[e.to] != level_[node] + 1) continue;
    const int64_t pushed = push(e.to, sink, std::min(limit, e.residual));
    if (pushed > 0) {
      e.residual -= pushed;
      edges_[adjacent_[node][i] ^ 1].residual += pushed;
      return pushed;
    }
  }
  return 0;
}

int64_t FlowGraph::max_flow(size_t source, size_t sink) {
  int64_t flow = 0;
  while (levels(source, sink)) {
    std::fill(next_.begin(), next_.end(), 0);
    while (int64_t pushed = push(source, sink, kInfinite)) flow += pushed;
  }
  return flow;
}

std::vector<bool> FlowGraph::sink_side(size_t sink) const {
  std::vector<bool> side(adjacent_.size(), false);
  side[sink] = true;
  std::deque<size_t> queue{sink};
  while (!queue.empty()) {
    const size_t v = queue.front();
    queue.pop_front();
    // u reaches v if the edge u -> v (the reverse of an edge v -> u stored at v) has residual capacity.
    for (size_t e : adjacent_[v]) {
      const size_t u = edges_[e].to;
      if (!side[u] && edges_[e ^ 1].residual > 0) {
        side[u] = true;
        queue.push_back(u);
      }
    }
  }
  return side;
}

}  // namespace thunder::passes
