#pragma once
// The idle baseline of each GPU: what "used" reads when no process holds it.
// "Freed" means back at this baseline, not at 0 (an idle GPU's used memory is
// not 0, and differs between cards and drivers). Recorded whenever a scan sees a
// GPU idle, keyed by UUID, in a small JSON file in the state directory.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "util/result.h"

namespace gpureap::inventory {

/// The directory for gpureap's state (baselines, the free lock):
/// $GPUREAP_STATE_DIR, else /run/gpureap when root, else $XDG_RUNTIME_DIR/gpureap,
/// else /tmp/gpureap-<uid>. Created on demand with mode 0700.
Result<std::string> state_dir();

/// The largest "used" value that can still be an idle baseline for a GPU of
/// this size: max(256 MiB, 1% of total). Memory beyond it with no holder is not idle.
std::uint64_t baseline_cap(std::uint64_t total_bytes);

/// How far above the baseline "used" may read and still count as freed:
/// max(64 MiB, 0.5% of total).
std::uint64_t freed_tolerance(std::uint64_t total_bytes);

struct Baseline {
  std::uint64_t bytes = 0;
  bool recorded = false;  // false: estimated (never seen idle here)
};

class BaselineStore {
 public:
  /// Loads `<dir>/baselines.json`; a missing or unreadable file is an empty store.
  static BaselineStore load(std::string dir);
  /// An empty store that never writes (for tests and read-only use).
  static BaselineStore in_memory() { return BaselineStore{}; }

  /// The recorded baseline, or an estimate: the memory no holder accounts for
  /// (used - attributed), capped at baseline_cap. An idle GPU's estimate is
  /// therefore its used memory; memory beyond the cap stays unexplained.
  Baseline get(const std::string& uuid, std::uint64_t total, std::uint64_t used,
               std::uint64_t attributed) const;

  /// Records `used` for an idle GPU when it is plausible as a baseline (at most
  /// baseline_cap): stuck driver-held memory is never learnt as "idle".
  void observe_idle(const std::string& uuid, std::uint64_t total, std::uint64_t used);

  /// Writes the file if anything changed (atomically: temp file + rename). Errors
  /// are returned, never fatal to a status run.
  Result<void> save();

 private:
  std::string dir_;
  std::map<std::string, std::uint64_t> bytes_;
  bool dirty_ = false;
};

}  // namespace gpureap::inventory
