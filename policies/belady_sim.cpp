#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "policies/belady.hpp"

namespace tvmm::policies {

BeladyCost simulate_belady(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat, bool drop_clean,
                           const PageBytes& page_bytes) {
  const auto bytes_of = [&](std::uint64_t page) -> std::uint64_t {
    return page_bytes ? page_bytes(page >> 32, static_cast<std::uint32_t>(page & 0xffffffffu)) : 0;
  };
  if (repeat < 3) throw std::invalid_argument("simulate_belady: repeat must be at least 3");
  // The page reference string, access by access, over `repeat` iterations.
  struct Ref {
    std::uint64_t page;  // tensor << 32 | page index
    std::size_t group;   // which group of accesses (for "resident together")
    bool discard;
    bool writes;
    int rep;
    bool release;
  };
  std::vector<Ref> refs;
  constexpr std::size_t kNoGroup = std::numeric_limits<std::size_t>::max();  // releases join no group
  for (int r = 0; r < repeat; ++r) {
    std::size_t group = 0;
    std::uint64_t group_pages = 0;
    for (std::size_t a = 0; a < iteration.size(); ++a) {
      const auto& acc = iteration[a];
      if (acc.release) {
        for (std::uint32_t i = 0; i < acc.pages; ++i)
          refs.push_back({(acc.tensor << 32) | (acc.first + i), kNoGroup, false, false, r, true});
        continue;
      }
      if (a == 0 || !acc.with_previous) {
        group = static_cast<std::size_t>(r) * iteration.size() + a;
        group_pages = 0;
      }
      group_pages += acc.pages;
      if (group_pages > frames) {
        throw std::invalid_argument("simulate_belady: access " + std::to_string(a) +
                                    " (with those pinned with it) needs " + std::to_string(group_pages) +
                                    " pages but there are " + std::to_string(frames) + " frames");
      }
      for (std::uint32_t i = 0; i < acc.pages; ++i) {
        refs.push_back({(acc.tensor << 32) | (acc.first + i), group, acc.discard, acc.writes || acc.discard, r, false});
      }
    }
  }
  // next[p]: the position of the next reference to the same page, or "never".
  constexpr std::size_t kNever = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> next(refs.size(), kNever);
  std::map<std::uint64_t, std::size_t> seen;
  for (std::size_t p = refs.size(); p-- > 0;) {
    auto it = seen.find(refs[p].page);
    if (it != seen.end()) next[p] = it->second;
    seen[refs[p].page] = p;
  }
  std::map<std::uint64_t, std::size_t> resident;  // page -> its next use
  std::map<std::uint64_t, bool> has_data;         // pages that hold data somewhere
  std::map<std::uint64_t, bool> dirty;            // resident pages written since they were loaded
  BeladyCost cost;
  cost.iterations = repeat - 2;
  for (std::size_t p = 0; p < refs.size(); ++p) {
    const Ref& ref = refs[p];
    const bool measured = ref.rep >= 1 && ref.rep <= repeat - 2;  // the steady state, with a future
    auto it = resident.find(ref.page);
    if (ref.release) {  // dead contents: the frame is free and no tier holds data
      if (it != resident.end()) resident.erase(it);
      has_data[ref.page] = false;
      dirty[ref.page] = false;
      continue;
    }
    if (it != resident.end()) {
      it->second = next[p];
    } else {
      if (resident.size() == frames) {
        // Evict the farthest next use among pages not used by the current group of accesses.
        auto victim = resident.end();
        for (auto r = resident.begin(); r != resident.end(); ++r) {
          bool current = false;
          for (std::size_t q = p; q-- > 0 && refs[q].group == ref.group;) current = current || refs[q].page == r->first;
          if (current) continue;
          if (victim == resident.end() || r->second > victim->second) victim = r;
        }
        if (measured && (!drop_clean || dirty[victim->first])) {
          ++cost.write_backs;
          cost.write_back_bytes += bytes_of(victim->first);
        }
        resident.erase(victim);
      }
      if (has_data[ref.page] && !ref.discard && measured) {
        ++cost.loads;
        cost.load_bytes += bytes_of(ref.page);
      }
      resident.emplace(ref.page, next[p]);
      dirty[ref.page] = !has_data[ref.page];  // a first touch has no copy below yet
    }
    if (ref.writes) dirty[ref.page] = true;
    has_data[ref.page] = true;
  }
  return cost;
}

}  // namespace tvmm::policies
