#pragma once
// Each GPU's memory use over time, since `top` started: a ring of readings per GPU
// (used / total), drawn as a sparkline beside the GPU's bar.

#include <cstddef>
#include <deque>
#include <map>
#include <string>

#include "inventory/inventory.h"

namespace gpureap::top {

class MemoryHistory {
 public:
  /// Keeps at most `capacity` readings per GPU (the widest sparkline drawn).
  explicit MemoryHistory(std::size_t capacity = 240) : capacity_(capacity) {}

  /// One reading per GPU of `inv` whose memory NVML read (a GPU it could not read adds
  /// nothing: a gap is not a zero).
  void record(const inventory::Inventory& inv);

  /// The last `width` readings of the GPU `uuid` (its index when NVML gave no UUID) as a
  /// sparkline, oldest first, right-aligned (padded with spaces on the left): eight
  /// levels of "▁▂▃▄▅▆▇█" when `unicode`, else "_.-=#"; "" for width 0.
  std::string sparkline(const std::string& gpu_key, std::size_t width, bool unicode) const;

  /// The key record() files a GPU's readings under.
  static std::string key_of(const inventory::GpuView& view);

 private:
  std::size_t capacity_;
  std::map<std::string, std::deque<double>> readings_;  // fraction of total, 0..1
};

}  // namespace gpureap::top
