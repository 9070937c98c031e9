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
#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/successive_shortest_path_nonnegative_weights.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
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
  std::uint64_t bytes = 0;       // the load it saves (with a cost callback: what leaving the page out costs)
  int round = 0;                 // the iteration of the reference that ends it
  std::size_t access = 0;        // that reference: its access in `iteration`,
  std::uint32_t page = 0;        // and the page's offset from the access's first page
  bool kept = false;             // the optimum keeps the page resident over it
  // With a cost callback: the read's cost, and the write its epoch needs (0: the page holds contents
  // that were never modified, or dead ones); the epoch (0: none) and whether this is its first interval.
  std::uint64_t read = 0, write = 0;
  std::uint64_t epoch = 0;
  bool opens_epoch = false;
};

// The points, each one's own pages (g(t)) and the intervals of `repeat` replays of `iteration`; with a
// cost callback each interval also carries its read, its epoch's write and its epoch.
struct Intervals {
  std::vector<std::uint32_t> group_pages;
  std::vector<Interval> intervals;
  std::uint64_t total = 0;  // the cost of leaving every interval out (as `bytes` says)
};
Intervals collect(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                  const PageBytes& page_bytes, const IntervalCost* interval_cost);

// The min-cost flow over `in`: marks each interval kept or not and returns the bytes the kept ones save.
std::uint64_t keep_most(const std::vector<std::uint32_t>& group_pages, std::vector<Interval>& intervals,
                        std::uint32_t frames);

// Solves the flow below; fills `out` and, with `all`, hands back every interval with its verdict.
MinLoads solve(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat, const PageBytes& page_bytes,
               std::vector<Interval>* all);

// min_interval_cost: the best of a few spreads of each epoch's write over its intervals.
MinLoads solve_epochs(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                      const PageBytes& page_bytes, const IntervalCost& cost);

}  // namespace

MinLoads min_load_bytes(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                        const PageBytes& page_bytes) {
  return solve(iteration, frames, repeat, page_bytes, nullptr);
}

MinLoads min_interval_cost(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                           const PageBytes& page_bytes, const IntervalCost& cost) {
  return solve_epochs(iteration, frames, repeat, page_bytes, cost);
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

Intervals collect(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                  const PageBytes& page_bytes, const IntervalCost* interval_cost) {
  if (repeat < 3) throw std::invalid_argument("min_load_bytes: repeat must be at least 3");
  Intervals in;
  std::vector<std::uint32_t>& group_pages = in.group_pages;  // g(t)
  std::vector<Interval>& intervals = in.intervals;
  std::map<std::uint64_t, std::size_t> last;      // page -> the point of its latest reference, while it holds data
  std::map<std::uint64_t, std::size_t> in_point;  // page -> the point it was last counted in
  // page -> some access may have modified it since the latest reference that followed a gap (or since
  // its first): an interval ending next needs a write of those contents, and no other interval's write
  // can serve, since that one ends before they were made (min_interval_cost)
  std::map<std::uint64_t, bool> modified;
  // page -> the epoch its contents belong to: the intervals from one that follows a modification up to
  // the next such one share a single write (0: contents never modified, or dead)
  std::map<std::uint64_t, std::uint64_t> epoch_of;
  std::uint64_t epochs = 0;
  for (int r = 0; r < repeat; ++r) {
    const bool measured = r >= 1 && r <= repeat - 2;
    for (std::size_t a = 0; a < iteration.size(); ++a) {
      const auto& acc = iteration[a];
      if (acc.release) {  // dead contents: the next reference loads nothing
        for (std::uint32_t i = 0; i < acc.pages; ++i) {
          last.erase((acc.tensor << 32) | (acc.first + i));
          modified.erase((acc.tensor << 32) | (acc.first + i));
          epoch_of.erase((acc.tensor << 32) | (acc.first + i));
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
        const bool gap = prev == last.end() || t > prev->second + 1;
        bool opens = false;
        if (interval_cost != nullptr && gap) {
          std::uint64_t& e = epoch_of[page];
          opens = prev != last.end() && !acc.discard && modified[page];
          e = opens ? ++epochs : prev == last.end() || acc.discard ? 0 : e;
        }
        if (prev != last.end() && !acc.discard && measured && t > prev->second + 1) {
          const std::uint64_t bytes = page_bytes(acc.tensor, acc.first + i);
          Interval iv{prev->second, t, bytes, r, a, i, false};
          if (interval_cost != nullptr) {
            iv.read = (*interval_cost)(bytes, false);
            iv.epoch = epoch_of[page];
            iv.opens_epoch = opens;
            const std::uint64_t with_write = iv.epoch == 0 ? iv.read : (*interval_cost)(bytes, true);
            iv.write = with_write > iv.read ? with_write - iv.read : 0;
            iv.bytes = iv.read + (opens ? iv.write : 0);  // the first spread's: the write on the first
          }
          in.total += iv.bytes;  // what loading at every such reference would cost
          intervals.push_back(iv);
        }
        if (interval_cost != nullptr) modified[page] = (!gap && modified[page]) || acc.writes;
        last[page] = t;
      }
    }
  }
  return in;
}

std::uint64_t keep_most(const std::vector<std::uint32_t>& group_pages, std::vector<Interval>& intervals,
                        std::uint32_t frames) {
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
  return saved;
}

MinLoads solve(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat, const PageBytes& page_bytes,
               std::vector<Interval>* all) {
  Intervals in = collect(iteration, frames, repeat, page_bytes, nullptr);
  MinLoads out;
  out.iterations = repeat - 2;
  out.total_bytes = in.total;
  out.load_bytes = in.total - keep_most(in.group_pages, in.intervals, frames);
  if (all != nullptr) *all = std::move(in.intervals);
  return out;
}

// Projects `v` onto the probability simplex (non-negative, summing to 1): the nearest such point.
void onto_simplex(std::vector<double>& v) {
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  double sum = 0, theta = 0;
  for (std::size_t j = 0; j < sorted.size(); ++j) {
    sum += sorted[j];
    const double t = (sum - 1) / static_cast<double>(j + 1);
    if (sorted[j] - t > 0) theta = t;
  }
  for (double& x : v) x = std::max(0.0, x - theta);
}

MinLoads solve_epochs(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                      const PageBytes& page_bytes, const IntervalCost& cost) {
  Intervals in = collect(iteration, frames, repeat, page_bytes, &cost);
  MinLoads out;
  out.iterations = repeat - 2;
  out.total_bytes = in.total;
  // An epoch's intervals need one write between them, made before the first read of any left out
  // (their contents exist nowhere else until then), so leaving out any set S of them costs at least
  // sum over S of (read + share x write) for shares that are >= 0 and sum to at most 1 over the epoch:
  // a Lagrangian relaxation of "the epoch pays its write if any of its intervals is left out". Every
  // spread of shares bounds every pager from below, and the flow gives each spread's least cost.
  //
  // The iteration repeats, so an epoch's intervals sit at the same places in every replay: the place
  // (access, page) of an epoch's first interval names its kind, each place's share is kept per kind,
  // and a kind's shares sum to 1, so that an epoch cut by the measured replays' ends holds no more.
  // The first spread puts each write on its epoch's first interval; each later one moves shares
  // towards the intervals the previous flow left out (a projected subgradient step), and the bound is
  // the highest of them.
  auto place = [](const Interval& i) { return (std::uint64_t{i.access} << 32) | i.page; };
  std::unordered_map<std::uint64_t, std::uint64_t> opener;  // epoch -> the place of its first interval
  for (const Interval& i : in.intervals) {
    if (i.opens_epoch) opener.emplace(i.epoch, place(i));
  }
  constexpr std::uint64_t kNoKind = ~std::uint64_t{0};
  std::unordered_map<std::uint64_t, std::uint64_t> kind_of;  // place -> its kind (kNoKind: keeps no share)
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;    // (epoch, place)
  for (const Interval& i : in.intervals) {
    const auto e = opener.find(i.epoch);
    if (i.epoch == 0 || e == opener.end()) continue;
    const auto [it, added] = kind_of.emplace(place(i), e->second);
    // Not one kind, or twice in one epoch (an epoch longer than an iteration, which a repeating trace
    // does not make): its share could count twice against one write, so it keeps none.
    if ((!added && it->second != e->second) || !seen.emplace(i.epoch, place(i)).second) it->second = kNoKind;
  }
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> places_of;  // kind -> its places
  std::unordered_map<std::uint64_t, double> share;                          // place -> its share
  for (const auto& [p, k] : kind_of) {
    if (k == kNoKind) continue;
    places_of[k].push_back(p);
    share[p] = p == k ? 1.0 : 0.0;
  }
  std::uint64_t best = 0;
  double step = 1.0;
  // 16 spreads, each step 0.85 of the one before: within 0.3% of 40 such spreads on the quick suite's
  // traces (ResNet-18 at 2x: 15.04 against 15.09 ms; GPT-2 at 3x: 95.30 against 95.43), at 16 flows' cost.
  constexpr int kSpreads = 16;
  constexpr double kDecay = 0.85;
  for (int spread = 0; spread < kSpreads; ++spread) {
    std::uint64_t total = 0;
    for (Interval& i : in.intervals) {
      double s = 0;
      if (i.write != 0) {
        if (auto it = share.find(place(i)); it != share.end()) s = it->second;
      }
      // Rounded down: a kind's charges never sum to more than its write.
      i.bytes = i.read + static_cast<std::uint64_t>(std::floor(s * static_cast<double>(i.write)));
      total += i.bytes;
    }
    const std::uint64_t least = total - keep_most(in.group_pages, in.intervals, frames);
    best = std::max(best, least);
    if (spread + 1 == kSpreads || places_of.empty()) break;
    // How often each place was left out, over the measured replays.
    std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::uint32_t>> left_out;  // place -> (out, all)
    for (const Interval& i : in.intervals) {
      if (i.write == 0) continue;
      auto& [o, n] = left_out[place(i)];
      o += i.kept ? 0 : 1;
      ++n;
    }
    bool moved = false;
    for (auto& [k, places] : places_of) {
      std::vector<double> v(places.size());
      for (std::size_t j = 0; j < places.size(); ++j) {
        const auto& [o, n] = left_out[places[j]];
        v[j] = share[places[j]] + step * (n == 0 ? 0.0 : static_cast<double>(o) / n);
      }
      onto_simplex(v);
      for (std::size_t j = 0; j < places.size(); ++j) {
        moved = moved || std::abs(v[j] - share[places[j]]) > 1e-9;
        share[places[j]] = v[j];
      }
    }
    if (!moved) break;
    step *= kDecay;
  }
  out.load_bytes = best;
  return out;
}

}  // namespace

}  // namespace tvmm::policies
