#include "top/history.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>
#include <vector>

#include "top/screen_model.h"

namespace gpureap::top {

std::string MemoryHistory::key_of(const inventory::GpuView& view) {
  return inventory::gpu_history_key(view);  // the agent files its readings the same way
}

void MemoryHistory::seed(const inventory::GpuHistoryAnswer& past) {
  readings_.clear();
  double oldest = past.now;
  for (const auto& trace : past.gpus) {
    // The last `capacity_` readings with a total: the span said is the one kept.
    std::vector<const inventory::GpuSample*> kept;
    for (const auto& s : trace.samples)
      if (s.total != 0) kept.push_back(&s);
    if (kept.size() > capacity_) kept.erase(kept.begin(), kept.end() - capacity_);
    auto& ring = readings_[trace.key];
    for (const auto* s : kept)
      ring.push_back(std::clamp(static_cast<double>(s->used) / static_cast<double>(s->total), 0.0,
                                1.0));
    if (!kept.empty()) oldest = std::min(oldest, kept.front()->time);
  }
  seeded_span_ = std::max(0.0, past.now - oldest);
}

std::string MemoryHistory::origin() const {
  if (!seeded_span_) return "history: since top started";
  return "history: agent " + short_age(*seeded_span_);
}

void MemoryHistory::record(const inventory::Inventory& inv) {
  for (const auto& v : inv.gpus) {
    if (!v.info.memory || v.info.memory->total == 0) continue;
    auto& ring = readings_[key_of(v)];
    ring.push_back(std::clamp(static_cast<double>(v.info.memory->used) /
                                  static_cast<double>(v.info.memory->total),
                              0.0, 1.0));
    while (ring.size() > capacity_) ring.pop_front();
  }
}

std::string MemoryHistory::sparkline(const std::string& gpu_key, std::size_t width,
                                     bool unicode) const {
  static constexpr std::array<std::string_view, 8> kBlocks = {"▁", "▂", "▃", "▄",
                                                              "▅", "▆", "▇", "█"};
  static constexpr std::string_view kAscii = "_.-=#";
  std::string out;
  auto it = readings_.find(gpu_key);
  const std::size_t have = it == readings_.end() ? 0 : it->second.size();
  const std::size_t shown = std::min(have, width);
  out.append(width - shown, ' ');
  for (std::size_t i = have - shown; i < have; ++i) {
    const double f = it->second[i];
    if (unicode) {
      out += kBlocks[std::min<std::size_t>(7, static_cast<std::size_t>(std::lround(f * 7)))];
    } else {
      out += kAscii[std::min<std::size_t>(kAscii.size() - 1,
                                          static_cast<std::size_t>(std::lround(f * 4)))];
    }
  }
  return out;
}

}  // namespace gpureap::top
