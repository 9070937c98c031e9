// The fewest bytes any pager must load, when pages hold different numbers of bytes: offline paging with
// a cost per page (weighted paging, uniform page sizes in frames) solved exactly as a min-cost flow.
//
// The reference string is cut into points, one per group of accesses pinned together (a kernel's
// tensors), over `repeat` iterations. For each page, two consecutive references at points a < b with
// a load at b (the page holds data, b does not discard it, b is measured) form an interval. A schedule
// that keeps the page resident over the points strictly between a and b saves the load at b;
// otherwise the page is loaded at or before b, paying its bytes. At a point t the group's own g(t)
// pages are resident, so at most C - g(t) kept intervals may span t. Maximising the bytes saved under
// those capacities is a linear program whose constraint matrix has consecutive ones in every column
// (each interval covers a run of points), so it is totally unimodular and its optimum is integral;
// and every pager's schedule is a feasible point of it (a page loaded early, or a frame held by a copy
// in flight, only uses more of the capacities). So the optimum bounds every pager from below.
//
// The flow (after Carlisle and Lloyd's interval scheduling): C units, one per frame, go from the first
// point to the last along a line of nodes v_0 .. v_N. Between v_t and v_{t+1} a frame is idle (a line
// edge) or holds a page of group t (a "group" edge of capacity g(t) whose cost, -M, makes every
// optimum fill it, as the schedule must); a kept interval is an edge v_{a+1} -> v_b of capacity 1 and
// cost minus its bytes. The edges all go forward, so potentials from the shortest paths of the DAG make
// every cost non-negative, and Boost's successive shortest paths solve it in at most C augmentations.
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/successive_shortest_path_nonnegative_weights.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "policies/belady.hpp"

namespace tvmm::policies {

namespace {

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using Graph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<boost::edge_capacity_t, std::int64_t,
                    boost::property<boost::edge_residual_capacity_t, std::int64_t,
                                    boost::property<boost::edge_reverse_t, Traits::edge_descriptor,
                                                    boost::property<boost::edge_weight_t, std::int64_t>>>>>;
using Edge = Traits::edge_descriptor;

struct Interval {
  std::size_t from = 0, to = 0;  // the points of the two references (to > from + 1)
  std::uint64_t bytes = 0;       // the load it saves
  int round = 0;                 // the iteration of the reference that ends it
  std::size_t access = 0;        // that reference: its access in `iteration`,
  std::uint32_t page = 0;        // and the page's offset from the access's first page
  bool kept = false;             // the optimum keeps the page resident over it
};

// Solves the flow below; fills `out` and, with `all`, hands back every interval with its verdict.
MinLoads solve(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat, const PageBytes& page_bytes,
               std::vector<Interval>* all, const IntervalCost* interval_cost = nullptr);

}  // namespace

MinLoads min_load_bytes(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                        const PageBytes& page_bytes) {
  return solve(iteration, frames, repeat, page_bytes, nullptr);
}

MinLoads min_interval_cost(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                           const PageBytes& page_bytes, const IntervalCost& cost) {
  return solve(iteration, frames, repeat, page_bytes, nullptr, &cost);
}

std::vector<std::vector<Reload>> optimal_reloads(const std::vector<TraceAccess>& iteration, std::uint32_t frames,
                                                 const PageBytes& page_bytes, int repeat) {
  std::vector<Interval> intervals;
  solve(iteration, frames, repeat, page_bytes, &intervals);
  std::vector<std::vector<Reload>> out(iteration.size());
  for (std::size_t a = 0; a < iteration.size(); ++a)
    out[a].assign(iteration[a].release ? 0 : iteration[a].pages, Reload::none);
  for (const auto& i : intervals) {
    if (i.round == 1) out[i.access][i.page] = i.kept ? Reload::kept : Reload::loaded;
  }
  return out;
}

namespace {

MinLoads solve(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat, const PageBytes& page_bytes,
               std::vector<Interval>* all, const IntervalCost* interval_cost) {
  if (repeat < 3) throw std::invalid_argument("min_load_bytes: repeat must be at least 3");
  // 1. The points, each group's page count, and the intervals.
  std::vector<std::uint32_t> group_pages;  // g(t)
  std::vector<Interval> intervals;
  std::map<std::uint64_t, std::size_t> last;      // page -> the point of its latest reference, while it holds data
  std::map<std::uint64_t, std::size_t> in_point;  // page -> the point it was last counted in
  // page -> some access may have modified it since the latest reference that followed a gap (or since
  // its first): an interval ending next needs a write of those contents, and no other interval's write
  // can serve, since that one ends before they were made (min_interval_cost)
  std::map<std::uint64_t, bool> modified;
  MinLoads out;
  out.iterations = repeat - 2;
  for (int r = 0; r < repeat; ++r) {
    const bool measured = r >= 1 && r <= repeat - 2;
    for (std::size_t a = 0; a < iteration.size(); ++a) {
      const auto& acc = iteration[a];
      if (acc.release) {  // dead contents: the next reference loads nothing
        for (std::uint32_t i = 0; i < acc.pages; ++i) {
          last.erase((acc.tensor << 32) | (acc.first + i));
          modified.erase((acc.tensor << 32) | (acc.first + i));
        }
        continue;
      }
      if (group_pages.empty() || a == 0 || !acc.with_previous) group_pages.push_back(0);
      const std::size_t t = group_pages.size() - 1;
      for (std::uint32_t i = 0; i < acc.pages; ++i) {
        const std::uint64_t page = (acc.tensor << 32) | (acc.first + i);
        if (auto c = in_point.find(page); c != in_point.end() && c->second == t) {  // counted in t
          if (interval_cost != nullptr) modified[page] = modified[page] || acc.writes;
          continue;
        }
        in_point[page] = t;
        ++group_pages[t];
        if (group_pages[t] > frames) {
          throw std::invalid_argument("min_load_bytes: access " + std::to_string(a) +
                                      " (with those pinned with it) needs more pages than the " +
                                      std::to_string(frames) + " frames");
        }
        const auto prev = last.find(page);
        // (At the next point, t == prev + 1, nothing lies between the two references: keeping the page
        // costs no frame and the reference loads nothing.)
        if (prev != last.end() && !acc.discard && measured && t > prev->second + 1) {
          std::uint64_t bytes = page_bytes(acc.tensor, acc.first + i);
          if (interval_cost != nullptr) bytes = (*interval_cost)(bytes, modified[page]);
          out.total_bytes += bytes;  // what loading at every such reference would cost
          intervals.push_back({prev->second, t, bytes, r, a, i, false});
        }
        if (interval_cost != nullptr) {
          const bool gap = prev == last.end() || t > prev->second + 1;
          modified[page] = (!gap && modified[page]) || acc.writes;
        }
        last[page] = t;
      }
    }
  }
  const std::size_t points = group_pages.size();
  // 2. The network: S = 0, v_t = 1 + t (t = 0 .. points).
  std::int64_t heaviest = 0;
  for (const auto& i : intervals) heaviest = std::max(heaviest, static_cast<std::int64_t>(i.bytes));
  // Leaving a frame of group t idle to carry a kept interval over t instead gains that interval's bytes
  // at most: a cost below minus the heaviest interval keeps every optimum filling the groups.
  const std::int64_t must = heaviest + 1;
  Graph g(points + 2);
  auto cap = boost::get(boost::edge_capacity, g);
  auto rev = boost::get(boost::edge_reverse, g);
  auto weight = boost::get(boost::edge_weight, g);
  std::vector<Edge> forward;
  std::vector<std::int64_t> cost;  // each forward edge's own cost, before the potentials
  auto add = [&](std::size_t u, std::size_t v, std::int64_t capacity, std::int64_t c) {
    const Edge e = boost::add_edge(u, v, g).first;
    const Edge back = boost::add_edge(v, u, g).first;
    cap[e] = capacity;
    cap[back] = 0;
    rev[e] = back;
    rev[back] = e;
    forward.push_back(e);
    cost.push_back(c);
    return forward.size() - 1;
  };
  const auto frames_flow = static_cast<std::int64_t>(frames);
  add(0, 1, frames_flow, 0);
  std::vector<std::size_t> group_edge(points);
  for (std::size_t t = 0; t < points; ++t) {
    // Line edges one unit wider than the flow are never full, so every node stays reachable (Boost adds
    // an unreachable node's infinite distance to its potential).
    add(1 + t, 2 + t, frames_flow + 1, 0);
    group_edge[t] = add(1 + t, 2 + t, group_pages[t], -must);
  }
  std::vector<std::size_t> interval_edge;
  interval_edge.reserve(intervals.size());
  for (const auto& i : intervals)
    interval_edge.push_back(add(2 + i.from, 1 + i.to, 1, -static_cast<std::int64_t>(i.bytes)));
  // 3. Potentials: shortest distances from S in the DAG (node order is a topological order).
  std::vector<std::int64_t> pi(points + 2, std::numeric_limits<std::int64_t>::max());
  pi.at(0) = 0;
  std::vector<std::vector<std::size_t>> out_edges(points + 2);
  for (std::size_t k = 0; k < forward.size(); ++k) out_edges[boost::source(forward[k], g)].push_back(k);
  for (std::size_t u = 0; u < points + 2; ++u) {
    for (const std::size_t k : out_edges[u]) {
      const std::size_t v = boost::target(forward[k], g);
      pi[v] = std::min(pi[v], pi[u] + cost[k]);
    }
  }
  for (std::size_t k = 0; k < forward.size(); ++k) {
    const std::size_t u = boost::source(forward[k], g), v = boost::target(forward[k], g);
    weight[forward[k]] = cost[k] + pi[u] - pi[v];  // >= 0
    weight[rev[forward[k]]] = -weight[forward[k]];
  }
  boost::successive_shortest_path_nonnegative_weights(g, 0, points + 1);
  // 4. Read the flow back.
  auto residual = boost::get(boost::edge_residual_capacity, g);
  auto flow = [&](std::size_t k) { return cap[forward[k]] - residual[forward[k]]; };
  if (flow(0) != frames_flow) throw std::logic_error("min_load_bytes: the flow did not carry every frame");
  for (std::size_t t = 0; t < points; ++t) {
    if (flow(group_edge[t]) != group_pages[t]) throw std::logic_error("min_load_bytes: a group was left unfilled");
  }
  std::uint64_t saved = 0;
  for (std::size_t k = 0; k < intervals.size(); ++k) {
    intervals[k].kept = flow(interval_edge[k]) == 1;
    if (intervals[k].kept) saved += intervals[k].bytes;
  }
  out.load_bytes = out.total_bytes - saved;
  if (all != nullptr) *all = std::move(intervals);
  return out;
}

}  // namespace

}  // namespace tvmm::policies
