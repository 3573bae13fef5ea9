#include "inventory/gpu_history.h"

#include <algorithm>

namespace gpureap::inventory {

std::string gpu_history_key(const GpuView& view) {
  return view.info.uuid.empty() ? "#" + gpu::device_text(view.info.id) : view.info.uuid;
}

GpuHistory::GpuHistory(std::size_t capacity, double window_seconds)
    : capacity_(std::max<std::size_t>(capacity, 1)), window_(window_seconds) {}

void GpuHistory::push(Ring& ring, const GpuSample& sample) const {
  if (ring.slots.size() < capacity_) {  // still growing: the ring has not wrapped yet
    ring.slots.push_back(sample);
    ++ring.count;
    return;
  }
  if (ring.count < capacity_) {  // wrapped before, emptied since by the window
    ring.slots[(ring.first + ring.count) % capacity_] = sample;
    ++ring.count;
    return;
  }
  ring.slots[ring.first] = sample;  // full: the oldest makes room
  ring.first = (ring.first + 1) % capacity_;
}

void GpuHistory::record(const Inventory& inv, double now, double spacing_seconds) {
  for (const auto& view : inv.gpus) {
    if (!view.info.memory) continue;
    GpuSample sample;
    sample.time = now;
    sample.used = view.info.memory->used;
    sample.total = view.info.memory->total;
    sample.sm_percent = view.info.utilization_gpu;
    sample.orphaned = view.orphaned_bytes();
    Ring& ring = rings_[gpu_history_key(view)];
    // A look sooner than the spacing after the newest reading refreshes it: the ring
    // keeps the agent's own pace, however often it is asked.
    if (ring.count > 0 && now >= ring.newest().time && now - ring.newest().time < spacing_seconds) {
      sample.time = ring.newest().time;
      ring.newest() = sample;
    } else {
      push(ring, sample);
    }
  }
  // The window: readings older than it go, and so do GPUs left with none.
  for (auto it = rings_.begin(); it != rings_.end();) {
    Ring& ring = it->second;
    while (ring.count > 0 && ring.at(0).time < now - window_) {
      ring.first = (ring.first + 1) % ring.slots.size();
      --ring.count;
    }
    it = ring.count == 0 ? rings_.erase(it) : std::next(it);
  }
  last_spacing_ = spacing_seconds;
}

GpuHistoryAnswer GpuHistory::answer(double now) const {
  GpuHistoryAnswer out;
  out.now = now;
  out.spacing_seconds = last_spacing_;
  for (const auto& [key, ring] : rings_) {
    GpuTrace trace{key, {}};
    for (std::size_t i = 0; i < ring.count; ++i)
      if (ring.at(i).time >= now - window_) trace.samples.push_back(ring.at(i));
    if (!trace.samples.empty()) out.gpus.push_back(std::move(trace));
  }
  return out;
}

GpuHistoryAnswer history_for(uid_t uid, GpuHistoryAnswer answer) {
  if (uid == 0) return answer;
  for (auto& trace : answer.gpus)
    for (auto& s : trace.samples) s.orphaned.reset();
  return answer;
}

}  // namespace gpureap::inventory
