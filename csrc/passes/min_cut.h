// Minimum s-t cuts of a capacitated directed graph, by maximum flow (Dinic's algorithm: breadth-first levels,
// then blocking flows along depth-first paths that climb one level at a time; O(V^2 E) at worst, near linear
// on the layered graphs rematerialization builds). Rematerialization (autodiff.cc) uses it to choose which
// forward values the backward saves: see docs/autodiff.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace thunder::passes {

class FlowGraph {
 public:
  /// A capacity no cut may cross; the sum of all finite capacities must stay below it.
  static constexpr int64_t kInfinite = int64_t{1} << 60;

  explicit FlowGraph(size_t nodes) : adjacent_(nodes), level_(nodes), next_(nodes) {}

  /// Adds the edge from -> to of `capacity` (>= 0). Raises std::out_of_range for a node outside the graph.
  void add_edge(size_t from, size_t to, int64_t capacity);

  /// Pushes the maximum flow from source to sink and returns its value (the capacity of a minimum cut).
  int64_t max_flow(size_t source, size_t sink);

  /// After max_flow: true for the nodes that can still reach the sink in the residual graph. These form the
  /// sink's side of the minimum cut closest to the sink (the smallest such side): where several cuts cost the
  /// same, the one that leaves the fewest nodes on the sink's side.
  std::vector<bool> sink_side(size_t sink) const;

 private:
  struct Edge {
    size_t to;
    int64_t residual;
  };
  bool levels(size_t source, size_t sink);
  int64_t push(size_t node, size_t sink, int64_t limit);

  std::vector<Edge> edges_;  // edge 2k is an edge added, 2k + 1 its reverse
  std::vector<std::vector<size_t>> adjacent_;
  std::vector<int> level_;
  std::vector<size_t> next_;
};

}  // namespace thunder::passes
