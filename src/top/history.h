#pragma once
// Each GPU's memory use over time: a ring of readings per GPU (used / total), drawn as a
// sparkline beside the GPU's bar. Seeded from a running agent's history when it has one
// (inventory/gpu_history.h: the last minutes at the agent's tick), then one reading per
// look of `top`'s own; without an agent, since `top` started.

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "inventory/gpu_history.h"
#include "inventory/inventory.h"

namespace gpureap::top {

class MemoryHistory {
 public:
  /// Keeps at most `capacity` readings per GPU (the widest sparkline drawn).
  explicit MemoryHistory(std::size_t capacity = 240) : capacity_(capacity) {}

  /// One reading per GPU of `inv` whose memory NVML read (a GPU it could not read adds
  /// nothing: a gap is not a zero).
  void record(const inventory::Inventory& inv);

  /// Replaces every reading with the agent's (`past`: its GPUs' readings, oldest first;
  /// the last `capacity` kept per GPU), to which record() then appends. The agent's
  /// newest reading is of the look that answered `top`, so that look is not recorded again.
  void seed(const inventory::GpuHistoryAnswer& past);

  /// Where the readings come from, for the legend: "history: agent 4m10s" (the span the
  /// agent's readings covered when seeded) or "history: since top started".
  std::string origin() const;

  /// The last `width` readings of the GPU `uuid` (its index when NVML gave no UUID) as a
  /// sparkline, oldest first, right-aligned (padded with spaces on the left): eight
  /// levels of "▁▂▃▄▅▆▇█" when `unicode`, else "_.-=#"; "" for width 0.
  std::string sparkline(const std::string& gpu_key, std::size_t width, bool unicode) const;

  /// The key record() files a GPU's readings under.
  static std::string key_of(const inventory::GpuView& view);

 private:
  std::size_t capacity_;
  std::optional<double> seeded_span_;  // seconds the agent's readings covered
  std::map<std::string, std::deque<double>> readings_;  // fraction of total, 0..1
};

}  // namespace gpureap::top
