#pragma once
// Released, releasing, driver-held: measured over time (DESIGN.md; issue 35).
//
// After the last holder of some memory is gone, the driver gives the memory back on its
// own: device memory alone in under a second (0.4-0.8 s, sglang#32829; 0.2-0.4 s measured
// on an H200), but pinned host memory (cudaHostRegister: SGLang's hierarchical cache) is
// unpinned by the kernel after the process is gone, which took 16 s for 243 GB
// (sglang#32829: 25.9 s from the kill) and more than 30 s elsewhere (sglang#31871,
// sglang#31281). Memory above the baseline that no process holds is therefore
//   - *releasing* while it falls, or while less than the release budget has passed since a
//     holder of the GPU was last seen exiting;
//   - *driver-held* only once it stayed flat past the budget (a reset or reboot frees it);
//   - *no_holder* when neither can be told: the exit was not seen and it has not been
//     watched for a budget yet (a one-shot `status` without the agent). Never "reset".
// One rule (judge_release) on an injected clock; ReleaseTracker keeps, per GPU, what a
// sequence of looks saw (the agent's ticks, free's and run's re-scans) and sets each view's
// Unexplained class from it, so gpu_state and every consumer read the one verdict.
//
// One release clock (issue 50): "falling" is decided here alone, with one step (fell(),
// fall_step) and one window (kFallingWindow), over every reading the looker saw on its
// node's clock: a look's own re-reading, its earlier looks (the agent's ticks, free's
// re-scans) and the readings it is handed (read(): the release waits' polls). The one-shot
// look, free's engine (its stall rule), run, wait, the Slurm hooks and the agent's events
// read the answer (GpuView::falling, ReleaseTracker::falling/settled) instead of comparing
// readings of their own.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gpu/device_id.h"
#include "inventory/sighting_store.h"
#include "util/clock.h"

namespace gpureap::inventory {

struct Inventory;
struct GpuView;

/// How long memory of a gone holder may stay above the baseline without falling before it
/// is driver-held: kBudgetBase + kBudgetPerGiB per GiB of the host memory the gone holders
/// NVML listed had resident and pinned (proc::Holder::pinned_host_bytes), never less than
/// kBudgetFloor nor more than kBudgetCeiling: no process stretches it (W4-08: a locked
/// 16 TiB reservation made it 1,968 s). `fixed` (the option --release-budget, the
/// operator's) replaces the rule.
inline constexpr std::chrono::milliseconds kBudgetBase{2000};
inline constexpr double kBudgetSecondsPerGiB = 0.12;  // 243 GB in 25.9 s, with a margin
inline constexpr std::chrono::milliseconds kBudgetFloor{30000};
/// 4x the slowest release measured (243 GB unpinned in 25.9 s, sglang#32829); 1 TiB pinned.
inline constexpr std::chrono::milliseconds kBudgetCeiling{120000};
/// Memory that reached a new low (by fall_step) this recently is falling: a release in
/// progress, whatever the budget says. Memory watched this long without one has settled.
inline constexpr std::chrono::milliseconds kFallingWindow{2000};

/// The one step of a fall: a quarter of the freed tolerance of a GPU of `total` bytes (at
/// least 16 MiB; 102 MiB on 80 GiB, 123 MiB on 96 GiB). Smaller moves are noise.
std::uint64_t fall_step(std::uint64_t total);
/// Whether a reading `to` after a reading `from` is a fall (lower by more than fall_step).
inline bool fell(std::uint64_t from, std::uint64_t to, std::uint64_t total) {
  return to + fall_step(total) < from;
}
/// Whether the last fall at `last_fall` still makes memory falling at `now`.
bool falling_at(std::optional<util::Clock::time_point> last_fall, util::Clock::time_point now);

struct ReleaseBudget {
  std::optional<std::chrono::milliseconds> fixed;  // --release-budget
  /// The budget for memory whose gone holders had `pinned_bytes` of host memory pinned
  /// (nullopt: not known, the floor).
  std::chrono::milliseconds for_pinned(std::optional<std::uint64_t> pinned_bytes) const;
};

/// What the looks of one GPU saw of a release (times on the tracker's clock).
struct ReleaseFacts {
  /// When a holder of the GPU was last seen gone (the first look without it): the exit,
  /// at most one look late. nullopt: no exit was seen.
  std::optional<util::Clock::time_point> last_exit;
  /// The first look of this stretch of unexplained memory: the exit was no later.
  std::optional<util::Clock::time_point> watched_since;
  /// The last look that read a new low.
  std::optional<util::Clock::time_point> last_fall;
  /// The stretch was first seen by an earlier process (its record in the state directory,
  /// sighting_store.h): watched_since is that sighting, and the exit was no later.
  bool sighted_earlier = false;
  /// Resident pinned host memory of the NVML-listed holders seen exiting (nullopt when no
  /// exit was seen).
  std::optional<std::uint64_t> pinned_bytes;
};

enum class ReleaseVerdict {
  releasing,    // falling, or within the budget since the exit (or an earlier sighting)
  driver_held,  // flat past the budget
  no_holder,    // exit not seen, first seen by this process: cannot tell yet
};

struct ReleaseJudgement {
  ReleaseVerdict verdict = ReleaseVerdict::no_holder;
  bool falling = false;  // falling_at(facts.last_fall, now)
  double elapsed_s = 0;  // since the exit (or since watched, when the exit was not seen)
  double budget_s = 0;
};

/// The one rule (see the file comment).
ReleaseJudgement judge_release(const ReleaseFacts& facts, util::Clock::time_point now,
                               const ReleaseBudget& budget);

/// The key a tracker knows a GPU by: its UUID, else its device text.
std::string release_key(const std::string& uuid, gpu::DeviceId id);
std::string release_key(const GpuView& view);

/// What a sequence of looks saw of each GPU's holders and memory. Not thread-safe: one per
/// looker (the Node of a command, the agent's).
class ReleaseTracker {
 public:
  explicit ReleaseTracker(ReleaseBudget budget = {}) : budget_(budget) {}
  void set_budget(ReleaseBudget budget) { budget_ = budget; }
  /// Keeps the first sightings of memory no process holds in `store` (its state directory),
  /// and starts each stretch from a sighting an earlier process recorded there: saved by
  /// each observe that changes one.
  void keep_sightings(SightingStore store) { sightings_ = std::move(store); }
  const ReleaseBudget& budget() const { return budget_; }

  /// Records `inv` (a look taken at `now`) and sets the Unexplained class and detail of
  /// each of its views whose memory no process holds (releasing, driver_held, no_holder)
  /// from judge_release. Other classes (outside_namespace, unknown) are left as they are.
  /// `judge` false: record only (a look another looker judged: the agent's answer).
  void observe(Inventory& inv, util::Clock::time_point now, bool judge = true);

  /// The facts of one GPU (by UUID, else its index) as of the last observe; for free's
  /// release phases and tests.
  const ReleaseFacts* facts(const std::string& key) const;

  /// A reading of one GPU's used memory taken outside a look (the release waits' polls),
  /// at `now`: the model sees it as it sees a look's.
  void read(const std::string& key, std::uint64_t used, std::uint64_t total,
            util::Clock::time_point now);
  /// The one answer to "is this GPU's memory falling?" at `now` (kFallingWindow since a
  /// fall), over every reading this tracker saw of it.
  bool falling(const std::string& key, util::Clock::time_point now) const;
  /// Watched for kFallingWindow without a fall: waiting longer would see none (the
  /// engine's stall rule). False for a GPU never read.
  bool settled(const std::string& key, util::Clock::time_point now) const;

  /// A release seen to its end (memory back at the baseline after a holder exited), in
  /// seconds: from the exit until NVML listed none of the gone holders, and from then until
  /// the baseline. For the agent's gpureap_release_seconds{phase}.
  struct Completed {
    double exit_to_unlisted = 0;
    double unlisted_to_baseline = 0;
  };
  /// The releases completed since the last call, oldest first.
  std::vector<Completed> take_completed() { return std::exchange(completed_, {}); }

 private:
  // The fall rule's memory of one GPU's readings, whatever its class.
  struct Readings {
    std::optional<util::Clock::time_point> moved;  // the first reading, or the last fall or rise
    std::optional<util::Clock::time_point> last_fall;  // the last reading that fell
    std::uint64_t lowest = 0;  // the reference: lowest since the last rise past a step
    std::uint64_t fell_from = 0, fell_to = 0;  // the last fall's two readings
    void add(std::uint64_t used, std::uint64_t total, util::Clock::time_point now);
  };
  struct Gpu {
    std::map<int, std::uint64_t> users;  // pid -> pinned host bytes, as last seen
    std::set<int> gone;                  // the pids seen exiting in this release
    std::optional<util::Clock::time_point> unlisted_at;  // NVML listed none of `gone`
    ReleaseFacts facts;
    Readings readings;
  };
  // The record of `view`'s stretch in the state directory: read when the stretch starts
  // (watched_since from it when its memory has not grown since), kept, dropped with it.
  void remember_sighting(const GpuView& view, Gpu& g, util::Clock::time_point now, bool fresh);

  ReleaseBudget budget_;
  std::optional<SightingStore> sightings_;
  std::map<std::string, Gpu> gpus_;
  std::vector<Completed> completed_;
};

}  // namespace gpureap::inventory
