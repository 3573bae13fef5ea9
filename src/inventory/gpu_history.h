#pragma once
// Each GPU's recent past, as the agent saw it: at each of its looks, used memory (with
// the total), SM utilization when NVML gives it and the orphaned holders' bytes, kept in
// a ring per GPU (a MIG device is a GPU of its own, keyed by its own UUID). Bounded: at
// most `capacity` readings per GPU and none older than `window`; at most one reading per
// `spacing` (a look sooner than that, e.g. one a `status` question caused, updates the
// newest reading instead of adding one), so the ring covers the window at the agent's
// tick whoever asks it. `gpureap top` seeds its sparklines from it (docs/top.md).

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "inventory/inventory.h"

namespace gpureap::inventory {

/// One reading of one GPU.
struct GpuSample {
  double time = 0;                        // wall clock seconds when the look was taken
  std::uint64_t used = 0;                 // bytes NVML reads as used
  std::uint64_t total = 0;                // the GPU's memory
  std::optional<unsigned> sm_percent;     // nullopt: NVML gives no utilization
  std::optional<std::uint64_t> orphaned;  // the orphaned holders' bytes; nullopt: not told
  bool operator==(const GpuSample&) const = default;
};

/// One GPU's readings, oldest first.
struct GpuTrace {
  std::string key;  // gpu_history_key()
  std::vector<GpuSample> samples;
  bool operator==(const GpuTrace&) const = default;
};

/// What the agent answers to "history": every GPU's readings within the window.
struct GpuHistoryAnswer {
  double now = 0;              // wall clock seconds of the answer
  double spacing_seconds = 0;  // the least time between two readings (the agent's tick)
  std::vector<GpuTrace> gpus;  // by key
  bool operator==(const GpuHistoryAnswer&) const = default;
};

/// The key a GPU's readings are filed under: its UUID (a MIG device's own "MIG-..."),
/// or "#" and its device text when NVML gave no UUID. The agent and `top` both use it.
std::string gpu_history_key(const GpuView& view);

/// The agent's defaults: ten minutes, at most 1,200 readings per GPU.
inline constexpr double kGpuHistoryWindowSeconds = 600;
inline constexpr std::size_t kGpuHistoryCapacity = 1200;

class GpuHistory {
 public:
  explicit GpuHistory(std::size_t capacity = kGpuHistoryCapacity,
                      double window_seconds = kGpuHistoryWindowSeconds);

  /// One reading per GPU of `inv` whose memory NVML read (a GPU it could not read adds
  /// nothing: a gap is not a zero), taken at `now`. Within `spacing_seconds` of the
  /// newest reading's own time the newest is replaced (keeping its time), else one is
  /// added; the oldest goes when the ring is full. GPUs with no reading within the window
  /// (a MIG device removed) are forgotten.
  void record(const Inventory& inv, double now, double spacing_seconds);

  /// Every GPU's readings newer than `now` - window, oldest first, GPUs by key.
  GpuHistoryAnswer answer(double now) const;

  std::size_t capacity() const { return capacity_; }

 private:
  /// A fixed ring of readings: slots_ grows to capacity once, then wraps.
  struct Ring {
    std::vector<GpuSample> slots;
    std::size_t first = 0;  // the oldest reading's slot
    std::size_t count = 0;
    GpuSample& newest() { return slots[(first + count - 1) % slots.size()]; }
    const GpuSample& at(std::size_t i) const { return slots[(first + i) % slots.size()]; }
  };
  void push(Ring& ring, const GpuSample& sample) const;

  std::size_t capacity_;
  double window_;
  double last_spacing_ = 0;
  std::map<std::string, Ring> rings_;
};

/// What a caller of uid `uid` may be told: the figures every `status` answer gives any
/// caller (used, total, utilization: inventory_wire.h's redact_for keeps each GPU's
/// NVML figures), and the orphaned bytes only to root, since a caller that is not root
/// sees other users' orphans only where its own scan could (redact_for).
GpuHistoryAnswer history_for(uid_t uid, GpuHistoryAnswer answer);

}  // namespace gpureap::inventory
