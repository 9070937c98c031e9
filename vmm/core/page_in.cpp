// PagerImpl, part 3: frames for pages and page-ins (load_pages, load_chunk and its steps, acquire_frames).
#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <utility>

#include "common/scope_guard.hpp"
#include "vmm/core/check.hpp"
#include "vmm/core/labels.hpp"
#include "vmm/core/pager_impl.hpp"

namespace tvmm::vmm {

std::size_t PagerImpl::load_pages(Lock& lk, std::vector<PageEntry*>& todo, Access access, Clock::time_point deadline,
                                  bool may_wait, const Protect* protect, bool reaped,
                                  std::span<const EventRef> arrivals) {
  // 1. Claim the pages: in transit, no other thread loads, evicts or frees them. A page taken back in
  //    flight is in transit already, as its eviction's: reap() now leaves it to this call.
  std::vector<PageState> before(todo.size());
  for (std::size_t i = 0; i < todo.size(); ++i) {
    before[i] = todo[i]->state();
    todo[i]->set_state(PageState::transit);
    if (before[i] == PageState::transit) todo[i]->spill = Spill::claimed;
  }
  std::size_t loaded = 0;
  common::ScopeGuard restore([&] {
    for (std::size_t i = loaded; i < todo.size(); ++i) {
      todo[i]->set_state(before[i]);
      if (before[i] == PageState::host) note_host(*todo[i]);  // a spill may have dropped it while claimed
      if (before[i] == PageState::transit) give_back_in_flight(*todo[i]);
    }
    cv_.notify_all();
  });
  // Chunk by chunk: a chunk's page-ins release host slots that the next chunk's evictions may need, so
  // swapping a tensor in never waits on its own slots.
  bool can_give_back = arrivals.empty();  // a page taken back in flight has no place on the host tier
  while (loaded < todo.size()) {
    // 2. Frames for (some of) the remaining pages; evicts least-recently-used pages when full.
    bool blocked = false;
    // Only a pin loading alone gives a page back (PagerImpl::loading_pins_).
    const bool may_give_back = can_give_back && loading_pins_.load(std::memory_order_relaxed) == 1;
    Frames got = acquire_frames(lk, std::span(todo).subspan(loaded), deadline, may_wait, protect, reaped && loaded == 0,
                                may_give_back ? &blocked : nullptr);
    if (blocked) {
      // The host tier is full and these pages' own slots are what the victims need (acquire_frames):
      // the last host page still to load goes back to the host tier, where a spill can move it to NVMe
      // and free its slot. The caller loads it later from there (make_resident stages it in).
      std::size_t i = todo.size();
      while (i > loaded && before[i - 1] != PageState::host) --i;
      if (i == loaded) {  // not expected (a slot held by a page of `todo` is a host page's): wait instead
        can_give_back = false;
        continue;
      }
      todo[i - 1]->set_state(PageState::host);
      note_host(*todo[i - 1]);
      todo.erase(todo.begin() + static_cast<std::ptrdiff_t>(i - 1));
      before.erase(before.begin() + static_cast<std::ptrdiff_t>(i - 1));
      continue;
    }
    if (got.frames.empty()) break;  // only without may_wait: nothing evictable now
    const std::size_t n = got.frames.size();
    load_chunk(std::span(todo).subspan(loaded, n), std::span(before).subspan(loaded, n), got, access,
               arrivals.empty() ? arrivals : arrivals.subspan(loaded, n));
    loaded += n;
  }
  return loaded;  // `restore` puts back any page left without a frame and wakes waiters
}

void PagerImpl::map_chunk(std::span<PageEntry* const> pages, const Frames& got) {
  std::size_t early = 0;  // pages whose remap map_early made: not kept mappings
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (pages[i]->mapped == got.frames[i] && std::exchange(pages[i]->mapped_early, false)) ++early;
  }
  const std::size_t remapped = map_pages(pages, got.frames);
  observe_.counters.kept_mappings.fetch_add(pages.size() - remapped - early, std::memory_order_relaxed);
}

std::size_t PagerImpl::map_pages(std::span<PageEntry* const> pages, std::span<const std::uint32_t> frames) {
  // A frame stays mapped at the addresses of the pages that left it (PageEntry::mapped): one physical
  // allocation may be mapped at several addresses (CUDA Programming Guide, Virtual Memory Management,
  // "Virtual Aliasing Support": several cuMemMap calls of one allocation at different addresses;
  // cuda.h, cuMemRelease: memory is freed when "all outstanding mappings to the memory are
  // unmapped"), and nothing uses an evicted page's address (the pin contract), so a mapping only has
  // to go when its page returns to another frame. cuMemMap "can only create mappings on VA range
  // reservations that are not currently mapped" (cuda.h): hence the unmap first. Every use at the new
  // address is ordered after the frame's page-in.
  std::vector<MapRequest> reqs;
  std::vector<std::size_t> remapped;  // reqs[r] maps pages[remapped[r]]
  reqs.reserve(pages.size());
  remapped.reserve(pages.size());
  const auto started = dev_->host_clock();
  for (std::size_t i = 0; i < pages.size(); ++i) {
    PageEntry* p = pages[i];
    if (p->mapped == frames[i]) continue;  // kept: no driver call
    p->mapped_early = false;
    // A failed unmap leaves the address mapped, and the map below then fails and says so.
    if (p->mapped != kNoFrame && xfer_->try_unmap(va_of(*p))) p->mapped = kNoFrame;
    reqs.push_back({va_of(*p), device_->chunk(frames[i])});
    remapped.push_back(i);
  }
  if (!reqs.empty()) {
    common::ScopeGuard timed([&] {  // failed calls took host time too
      const auto took = std::chrono::duration_cast<std::chrono::nanoseconds>(dev_->host_clock() - started);
      observe_.counters.remap_ns.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(took.count(), 0)),
                                           std::memory_order_relaxed);
    });
    std::vector<std::uint8_t> left_mapped(reqs.size(), 0);
    try {
      xfer_->map(reqs, left_mapped);
    } catch (...) {
      // An address whose rollback unmap failed is still mapped, perhaps without access: unmapped
      // before its next map, never kept.
      for (std::size_t r = 0; r < remapped.size(); ++r) {
        if (left_mapped[r] != 0) pages[remapped[r]]->mapped = kUnknownMapping;
      }
      throw;
    }
    const auto per_page = (dev_->host_clock() - started) / static_cast<std::int64_t>(reqs.size());
    remap_cost_ = remap_cost_.count() == 0 ? per_page : (7 * remap_cost_ + per_page) / 8;
  }
  for (const std::size_t i : remapped) pages[i]->mapped = frames[i];
  return remapped.size();
}

void PagerImpl::map_early(std::span<PageEntry* const> pages, const Frames& got,
                          std::span<PageEntry* const> victims) noexcept {
  // The frames the pages will have once the victims' frames join `got`: pair_frames gives each page
  // the frame its address is still mapped to where it can, the others the rest. Only those others need
  // mapping calls; making them now, before evict() queues the victims' write-backs, keeps their access
  // grants from waiting for those copies (cuMemSetAccess waits for the device-to-host copies in flight
  // on an H200: docs/gpu.md, "Access grants wait for device-to-host copies"). Each such page is mapped
  // at a frame no page of the chunk is mapped to, so that pair_frames then gives it that frame.
  try {
    const std::size_t n = std::min(pages.size(), got.frames.size() + victims.size());
    std::vector<std::uint32_t> coming(got.frames);  // every frame the chunk will have, sorted below
    for (const PageEntry* v : victims) coming.push_back(v->frame);
    std::sort(coming.begin(), coming.end());
    // The frames no write-back of this batch will copy from: those held already, and those of victims
    // that will be dropped. A page-in into any other frame follows that frame's write-back anyway, and
    // its mapping calls, made after the copies are queued, overlap them (load_chunk).
    std::vector<std::uint32_t> quiet(got.frames);
    for (const PageEntry* v : victims) {
      if (v->droppable(v->word.load(std::memory_order_acquire))) quiet.push_back(v->frame);
    }
    std::vector<std::uint32_t> wanted;  // the frames the chunk's addresses are mapped to, sorted
    wanted.reserve(n);
    for (std::size_t i = 0; i < n; ++i) wanted.push_back(pages[i]->mapped);
    std::sort(wanted.begin(), wanted.end());
    auto in = [](const std::vector<std::uint32_t>& v, std::uint32_t f) {
      return std::binary_search(v.begin(), v.end(), f);
    };
    std::vector<PageEntry*> remap;
    std::vector<std::uint32_t> frames;
    std::size_t next = 0;  // the next frame of `quiet` to consider
    for (std::size_t i = 0; i < n; ++i) {
      PageEntry* p = pages[i];
      if (in(coming, p->mapped)) continue;  // keeps its mapping
      while (next < quiet.size() && in(wanted, quiet[next])) ++next;
      if (next == quiet.size()) break;
      remap.push_back(p);
      frames.push_back(quiet[next++]);
    }
    if (remap.empty()) return;
    map_pages(remap, frames);
    for (PageEntry* p : remap) p->mapped_early = true;
  } catch (...) {
    // Only earlier than they would be otherwise: map_chunk makes the calls again and reports a failure.
  }
}

void PagerImpl::abort_chunk(Frames& got) noexcept {
  // Copies already queued may still run: drain them before the frames are reused. The pages keep their
  // new mappings, as evicted pages do.
  if (!xfer_->drain()) {
    // The device cannot tell when its copies end: keep the frames mapped and out of the pool rather
    // than let a copy land in reused memory.
    std::fprintf(stderr, "tvmm: copy streams cannot be drained; retiring %zu device frames\n", got.frames.size());
    got.frames.clear();
  }
}

void PagerImpl::publish_chunk(std::span<PageEntry* const> pages, std::span<const PageState> before, Frames& got,
                              const EventRef& done, common::FunctionRef<bool(std::size_t)> copied) {
  const std::size_t count = pages.size();
  // The batch reap() retires first: allocating it is all that may fail here, and it changes nothing
  // else (its pages are not yet the batch's until the loop below, all under mu_).
  if (done) {
    std::vector<std::uint32_t> idx(count);
    for (std::size_t i = 0; i < count; ++i) idx[i] = table_.index_of(*pages[i]);
    loads_.push_back(LoadBatch{done, std::move(idx)});
  }
  for (std::size_t i = 0; i < count; ++i) {
    PageEntry& p = *pages[i];
    p.frame = got.frames[i];
    frame_page_[p.frame] = table_.index_of(p);
    if (!copied(i) && p.host_slot != kNoSlot) {
      host_->release(p.host_slot);  // contents discarded (Access::write): the host copy is dead
      p.host_slot = kNoSlot;
    }
    // A page from NVMe keeps its slot: a clean copy (read back), or the next write-back's target
    // (overwritten, Access::write).
    if (before[i] == PageState::nvme) note_slot_kept(p);
    if (before[i] == PageState::transit) left_in_flight(p);  // taken back in flight: its eviction is over
    if (done) p.ready = EventRef(done).detach();
    if (copied(i) && p.host_slot != kNoSlot) p.set_host_copy();
    policy_->insert(table_.index_of(p));
    p.set_state(PageState::device, static_cast<bool>(done));
  }
  got.clear();
}

void PagerImpl::load_chunk(std::span<PageEntry* const> pages, std::span<const PageState> before, Frames& got,
                           Access access, std::span<const EventRef> arrivals) {
  common::ScopeGuard give_back([&] { release_frames(got); });
  // 3. Queue the page-ins of pages that hold data (unless the caller overwrites them, Access::write),
  //    each after the write-back of its own frame's previous page, so that a chunk's page-ins overlap
  //    the write-backs of the frames after theirs. They go to the frames' own addresses, so they are
  //    queued before the mapping calls of step 4 and run while the host makes them. NVMe pages arrive
  //    here only with Access::write (others are read and paged in by stage_in).
  //    A page taken back while its write-back runs (before: transit) is read from that copy's slot,
  //    after the copy.
  auto needs_copy = [&](std::size_t i) {
    return (before[i] == PageState::host || before[i] == PageState::transit) && access != Access::write;
  };
  bool any = false;
  EventRef done;
  try {
    std::vector<Event*> ordered;  // what the page-in stream waits for already
    auto follow = [&](Event* e) {
      if (e == nullptr || std::find(ordered.begin(), ordered.end(), e) != ordered.end()) return;
      ordered.push_back(e);
      xfer_->order_copy_in_after(e);
    };
    for (const std::size_t i : got.in_recording_order()) {
      if (!needs_copy(i)) continue;
      follow(got.after[i].get());
      if (!arrivals.empty()) follow(arrivals[i].get());
      xfer_->copy_in(frame_addr(got.frames[i]), host_->ptr(pages[i]->host_slot), used_bytes(*pages[i]));
      any = true;
    }
    // One event for the chunk, after the latest write-back (which implies the others) and whatever
    // else a frame follows, so pages that were not copied (fresh, or Access::write) are usable once it
    // completes. A chunk with no copy whose frames follow one event only uses that event: making the
    // page-in stream wait for it would hold back every later page-in, into free frames too, behind a
    // write-back (or a kernel) they do not need.
    const EventRef* only = any ? nullptr : got.only_after();
    if (only != nullptr) {
      done = *only;
    } else if (any || got.latest_after() != nullptr || !got.others.empty()) {
      got.follow_all(follow);
      done = xfer_->record_in();
    }
    // 4. Map the pages at their addresses (grouping access grants per contiguous run): a pin returns
    //    only once its pages' addresses reach their frames.
    map_chunk(pages, got);
    // 5. Publish: resident, known to the policy, pending until `done` completes.
    publish_chunk(pages, before, got, done, needs_copy);
  } catch (...) {
    abort_chunk(got);  // the host copies were not touched: the pages stay readable where they were
    throw;
  }
  give_back.dismiss();
}

void PagerImpl::release_frames(Frames& got) noexcept {
  // Frames from victims may still be written back: the pool must not hand them out before that, so
  // wait here (only failure paths get here with pending write-backs).
  for (auto& e : got.after) {
    if (!e) continue;
    try {
      events_.wait(e.get());
    } catch (...) {
      got.frames.clear();  // the device cannot say when the copies end: retire the frames
    }
  }
  for (auto f : got.frames) device_->release(f);
  got.clear();
}

std::vector<std::size_t> PagerImpl::Frames::in_recording_order() const {
  std::vector<std::size_t> order(frames.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[recorded.empty() ? i : recorded[i]] = i;
  return order;
}

void PagerImpl::pair_frames(std::span<PageEntry* const> pages, Frames& got) const {
  const std::size_t n = got.frames.size();
  bool any = false;
  for (std::size_t i = 0; i < n && !any; ++i) any = pages[i]->mapped != kNoFrame && pages[i]->mapped != got.frames[i];
  if (!any) return;
  std::unordered_map<std::uint32_t, std::size_t> at;  // frame -> its position in got
  for (std::size_t i = 0; i < n; ++i) at.emplace(got.frames[i], i);
  bool moved = false;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t want = pages[i]->mapped;
    if (want == kNoFrame || got.frames[i] == want) continue;
    const auto it = at.find(want);
    if (it == at.end()) continue;
    const std::size_t j = it->second;
    if (pages[j]->mapped == got.frames[j]) continue;  // page j keeps that frame itself
    if (!moved) {
      got.recorded.resize(n);
      for (std::size_t k = 0; k < n; ++k) got.recorded[k] = static_cast<std::uint32_t>(k);
      moved = true;
    }
    std::swap(got.frames[i], got.frames[j]);
    std::swap(got.after[i], got.after[j]);
    std::swap(got.recorded[i], got.recorded[j]);
    at[got.frames[i]] = i;
    at[got.frames[j]] = j;
  }
}

// Returns between 1 and `count` frames (0 only without may_wait): rather than block while holding
// frames, it hands back what it has so the caller can start those page-ins.
PagerImpl::Frames PagerImpl::acquire_frames(Lock& lk, std::span<PageEntry* const> pages, Clock::time_point deadline,
                                            bool may_wait, const Protect* protect, bool reaped, bool* blocked) {
  const std::size_t count = pages.size();
  Frames got;
  // Room for every frame first: a frame taken from the pool must land in `got` to be given back.
  got.reserve_more(count);
  common::ScopeGuard give_back([&] { release_frames(got); });
  // Idle frames the pages' addresses are still mapped to: using them costs no driver call.
  for (PageEntry* p : pages) {
    if (p->mapped != kNoFrame && device_->take(p->mapped)) got.add(p->mapped, EventRef());
  }
  while (got.frames.size() < count) {
    while (got.frames.size() < count) {
      auto f = device_->try_acquire();
      if (!f) break;
      got.add(*f, EventRef());  // a free frame follows no write-back
    }
    if (got.frames.size() == count) break;
    if (!std::exchange(reaped, false)) reap(lk);
    std::vector<PageEntry*> victims = select_victims(count - got.frames.size(), protect, pages);
    if (!victims.empty()) {
      if (remaps_costly()) map_early(pages, got, victims);
      evict(victims, got);  // leaves out (and restores) a victim it finds no host slot for
      if (!victims.empty()) continue;
    }
    if (!got.frames.empty() || !may_wait) break;
    // The host tier is full: move its oldest pages to NVMe (this unlocks for the writes).
    if (host_->free_count() == 0 && spill(lk, count - got.frames.size()) > 0) continue;
    // The host tier full, partly of the pages being loaded (claimed: no spill takes them), with no
    // page-in left to free a slot: the victims' write-backs wait for those pages' slots, and those
    // pages for the victims' frames. Waiting would time out; the caller gives a page back instead.
    if (blocked != nullptr && nvme_ && host_->free_count() == 0 && loads_.empty() &&
        std::any_of(pages.begin(), pages.end(), [](const PageEntry* p) { return p->host_slot != kNoSlot; })) {
      *blocked = true;
      return got;  // empty
    }
    // No frame exists and the device has no memory for one: nothing can ever be evicted to make room.
    if (device_->created() == 0 && device_->short_of_memory()) {
      throw out_of_memory("tvmm: the device has no memory for a frame (" + format_bytes(page_size_) +
                          "): other allocations hold all of it; free device memory or lower their use");
    }
    // Nothing evictable now: the device is full of pinned or in-transit pages, or the host tier has no
    // slot for a victim until a page-in completes. Wait for a transfer, an unpin or the deadline.
    if (!wait_progress(lk, deadline)) {
      std::uint64_t pinned = 0;
      const std::string device = describe_device(&pinned);
      // Say which of the two it was: pins that hold the frames, or victims with nowhere to go.
      std::string why;
      if (pinned + count > device_->budget()) {
        why = "The pinned working set exceeds the device budget: release pins sooner or raise device.budget" +
              life_pins_note();
      } else if (host_->free_count() == 0) {
        why = "The pages that could be evicted had no host slot for their write-backs: the host tier's " +
              std::to_string(host_->budget()) + " pages were all held" +
              (nvme_ ? " and none could be spilled to NVMe (other pins' page-ins held them)" : "") +
              "; raise host.budget";
      } else {
        why = "Nothing could be evicted in that time (transfers did not finish)";
      }
      throw out_of_memory("tvmm: no device frame can be freed: " + device + "; waited " +
                          std::to_string(cfg_.wait_timeout.count()) + " ms for pins to be released. " + why);
    }
  }
  pair_frames(pages, got);
  give_back.dismiss();
  return got;
}

}  // namespace tvmm::vmm
