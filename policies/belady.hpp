#pragma once
// Belady's optimal replacement (evict the page whose next use is farthest), simulated offline over a
// recorded access trace: the reference that benchmarks compare policies' bytes moved against. It makes
// the fewest page-ins; where clean pages leave free and dirty ones need a write-back, or pages differ
// in size, a pager can move fewer bytes (docs/benchmarks.md, the `belady` peer).

#include <cstdint>
#include <functional>
#include <vector>

namespace tvmm::policies {

//! One pin in a trace: `pages` pages of a tensor (by allocation id) from its page `first`, whether
//! their contents were discarded (Access::write), so a miss loads nothing, and whether it is pinned
//! while the previous access still is (the tensors of one kernel), so all of their pages must be
//! resident together.
struct TraceAccess {
  std::uint64_t tensor = 0;
  std::uint32_t pages = 0;
  bool discard = false;
  bool with_previous = false;
  std::uint32_t first = 0;
  bool writes = false;  //!< the access may modify the pages (Access::write or read_write): they become dirty
  //! Not a pin: the pages' contents are dead from here (Tensor::discard). Resident ones leave without a
  //! write-back, and the next access finds no data to load.
  bool release = false;
  bool operator==(const TraceAccess&) const = default;
};

//! Pages moved by the offline optimum over the measured iterations of a trace.
struct BeladyCost {
  std::uint64_t loads = 0;        //!< pages copied host -> device
  std::uint64_t write_backs = 0;  //!< pages copied device -> host (every eviction, as the pager does)
  //! Bytes of those loads and write-backs, when simulate_belady is given each page's bytes (else 0).
  std::uint64_t load_bytes = 0;
  std::uint64_t write_back_bytes = 0;
  int iterations = 0;  //!< iterations measured
  [[nodiscard]] std::uint64_t pages() const noexcept { return loads + write_backs; }
  //! Pages moved per iteration in the steady state.
  [[nodiscard]] double pages_per_iteration() const noexcept {
    return iterations == 0 ? 0.0 : static_cast<double>(pages()) / iterations;
  }
};

//! Replays `iteration` `repeat` (>= 3) times with `frames` device frames, all pages of one access (and
//! of the accesses joined to it by `with_previous`) resident together, evicting the page whose next
//! use is farthest; counts the repetitions between the first (cold) and the last (no future to plan
//! against). A page's first access loads nothing (no data yet); later misses load unless the access
//! discards. A release drops its pages without a write-back. Throws std::invalid_argument if one group
//! of accesses needs more pages than there are frames.
//! With `drop_clean`, an evicted page that was not written since it was loaded costs no write-back
//! (a tier below keeps its copy, as tvmm's NVMe tier does for pages read back from it).
//! With `page_bytes` (tensor, page index -> bytes), each load and write-back also adds that page's bytes
//! to load_bytes or write_back_bytes: a tensor's last page moves only the bytes the tensor holds in it,
//! as tvmm's copies do. Eviction still takes the farthest next use, which minimises the pages moved,
//! not the bytes, when pages differ in size.
using PageBytes = std::function<std::uint64_t(std::uint64_t tensor, std::uint32_t page)>;
BeladyCost simulate_belady(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat = 8,
                           bool drop_clean = false, const PageBytes& page_bytes = {});

//! The fewest bytes loaded host -> device over the measured iterations, by any schedule.
struct MinLoads {
  std::uint64_t load_bytes = 0;  //!< the optimum
  //! What loading at every reference that needs data would cost (a page referenced again at the next
  //! group of accesses is not counted: keeping it costs no frame).
  std::uint64_t total_bytes = 0;
  int iterations = 0;  //!< iterations measured
};

//! The least bytes any schedule with `frames` frames loads over the measured iterations of `iteration`
//! replayed `repeat` (>= 3) times (as simulate_belady counts them), with each page weighing the bytes
//! `page_bytes` gives it. Farthest-next-use eviction minimises the number of loads, which is this with
//! every page of one size; with pages of different sizes (a tensor's partial last page) it can load
//! more bytes than needed. This is the exact optimum of weighted paging: a min-cost flow over the
//! intervals between a page's references (min_load_bytes.cpp), in O(frames) shortest-path searches.
//! Same rules as simulate_belady: a group's pages are resident together, a first access or one that
//! discards loads nothing, a release leaves no data. Throws std::invalid_argument as simulate_belady.
MinLoads min_load_bytes(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                        const PageBytes& page_bytes);

//! What leaving a page out between two references costs: `bytes` (as PageBytes gives them) and whether
//! the page may have been modified since the latest reference that followed a gap of its own (or since
//! its first), up to the first of the two.
using IntervalCost = std::function<std::uint64_t(std::uint64_t bytes, bool modified)>;

//! min_load_bytes with each interval weighing what `cost` says instead of its bytes: a lower bound on
//! the total cost (MinLoads::load_bytes; total_bytes the cost of leaving every interval out with each
//! write on its epoch's first interval) any schedule with `frames` frames pays over the measured
//! iterations. Leaving a page out over an interval costs its read, cost(bytes, false). A page modified
//! since its previous interval's end holds contents that exist nowhere else: that interval opens an
//! epoch, which lasts up to the next such interval, and leaving any of the epoch's intervals out takes
//! one write of those contents (cost(bytes, true) - cost(bytes, false)), made after the modification
//! and before the first read. The bound is the best of 16 Lagrangian spreads of each epoch's write
//! over its intervals (each spread's least cost, a min-cost flow, bounds every schedule): the first
//! puts it on the epoch's first interval, the next ones move it towards the intervals left out.
//! Same rules and throws as min_load_bytes.
MinLoads min_interval_cost(const std::vector<TraceAccess>& iteration, std::uint32_t frames, int repeat,
                           const PageBytes& page_bytes, const IntervalCost& cost);

//! What the schedule of min_load_bytes does for a page at one of its references.
enum class Reload : std::uint8_t {
  none,    //!< nothing to decide: the reference needs no data (a first touch, a discard) or comes right
           //!< after the page's previous one (keeping it costs no frame)
  loaded,  //!< the page leaves the device after its previous reference and is loaded again for this one
  kept,    //!< the page stays resident from its previous reference to this one
};

//! For each access of `iteration` (outer index) and each of its pages (inner index, from the access's
//! `first`; a release has none), what the fewest-bytes schedule of min_load_bytes, over `repeat` (>= 3)
//! replays of `iteration` with `frames` frames, does at that reference in the second replay: a steady
//! state, with an iteration of past and of future around it. A page whose next reference says `loaded`
//! can be evicted at once at no cost in bytes that the optimum does not pay too. Throws as
//! min_load_bytes. The work grows with frames x (references + accesses) x log(accesses).
std::vector<std::vector<Reload>> optimal_reloads(const std::vector<TraceAccess>& iteration, std::uint32_t frames,
                                                 const PageBytes& page_bytes, int repeat = 4);

}  // namespace tvmm::policies
