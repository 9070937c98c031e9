#include "vmm/core/write_behind.hpp"

#include <algorithm>

namespace tvmm::vmm {

bool WriteBehind::on_write(std::uint64_t tensor, const policies::AccessTrace::Position& at) {
  if (at.index == policies::AccessTrace::kNever || at.index >= at.length) return false;
  if (at.length != length_ || at.drops != drops_) {  // a new trace: positions mean other pins now
    score_.assign(at.length, 0);
    length_ = at.length;
    drops_ = at.drops;
    last_.clear();
  }
  auto [it, fresh] = last_.try_emplace(tensor, LastWrite{at.index});
  if (!fresh) {
    const LastWrite& w = it->second;
    std::int8_t& s = score_[w.index];
    if (w.lost) {
      s = kBackOff;
    } else if (w.evicted) {
      s = static_cast<std::int8_t>(std::min<int>(s + 1, kMax));
    } else if (w.copied) {
      s = static_cast<std::int8_t>(std::max<int>(s - 2, kBackOff));
    } else {
      s = static_cast<std::int8_t>(s > 0 ? s - 1 : s < 0 ? s + 1 : 0);
    }
    it->second = LastWrite{at.index};
  }
  return score_[at.index] > 0;
}

void WriteBehind::copied(std::uint64_t tensor) {
  if (auto it = last_.find(tensor); it != last_.end()) it->second.copied = true;
}

void WriteBehind::evicted(std::uint64_t tensor, bool had_copy) {
  auto it = last_.find(tensor);
  if (it == last_.end()) return;
  if (it->second.copied && !had_copy) {
    it->second.lost = true;
  } else {
    it->second.evicted = true;
  }
}

}  // namespace tvmm::vmm
