#pragma once
// The idle baseline of each GPU: what "used" reads when no process holds it.
// "Freed" means back at this baseline, not at 0 (an idle GPU's used memory is
// not 0, and differs between cards and drivers). Recorded whenever a scan sees a
// GPU idle, keyed by UUID, in a small JSON file in the state directory.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <sys/types.h>

#include "inventory/state_file.h"  // write_state_file, read_state_file
#include "util/result.h"

namespace gpureap::inventory {

/// The directory for gpureap's state (baselines, the free lock):
/// $GPUREAP_STATE_DIR (an absolute path; a relative one is an error), else
/// /run/gpureap when root, else $XDG_RUNTIME_DIR/gpureap (when that variable is
/// an absolute path), else /tmp/gpureap-<uid>. Created on demand (one level,
/// mode 0700). Whichever it is, it is used only when it is a directory itself
/// (not a symlink), owned by the caller (effective uid) and not writable by
/// group or others; otherwise the error names the directory and what is wrong
/// (check_state_dir). Anyone who could write there could plant baselines that
/// hide held memory, or a lock that points elsewhere.
Result<std::string> state_dir();

/// The checks of state_dir() on an existing path: not a symlink, a directory,
/// owned by `uid`, no group/other write permission. Returns `dir` or the refusal.
Result<std::string> check_state_dir(const std::string& dir, uid_t uid);

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
  /// Loads `<dir>/baselines.json` (opened without following a symlink). A
  /// missing file is an empty store. An unusable file (symlink, not a regular
  /// file, too large, not JSON) or entry (used_bytes not a non-negative integer)
  /// is ignored with a warning.
  static BaselineStore load(std::string dir);
  /// The store of state_dir(); when the directory is refused or cannot be
  /// created, an in-memory store whose warnings() say why.
  static BaselineStore load_default();
  /// An empty store that never writes (for tests and read-only use).
  static BaselineStore in_memory() { return BaselineStore{}; }

  /// The recorded baseline, or an estimate: the memory no holder accounts for
  /// (used - attributed), capped at baseline_cap. An idle GPU's estimate is
  /// therefore its used memory; memory beyond the cap stays unexplained.
  /// A recorded value above baseline_cap(total) cannot be an idle baseline (the
  /// store never learns one): it is dropped with a warning and estimated instead.
  Baseline get(const std::string& uuid, std::uint64_t total, std::uint64_t used,
               std::uint64_t attributed);

  /// Until forget_kept_estimates (the end of one free), the estimate for `uuid` is
  /// `bytes`: a free estimates a GPU's baseline once, in its look before any signal,
  /// and every later look of it reads the same figure, so one report never gives two
  /// baselines (W4-11(b): 2.00 MiB before the kill, then the cap, 819 MiB, while the
  /// killed holder's memory stayed). Never saved; a recorded baseline still wins.
  void keep_estimate(const std::string& uuid, std::uint64_t bytes) { kept_[uuid] = bytes; }
  /// Ends keep_estimate's figures (at the end of a free: the agent's node outlives it).
  void forget_kept_estimates() { kept_.clear(); }

  /// Records `used` for an idle GPU when it is plausible as a baseline (at most
  /// baseline_cap): stuck driver-held memory is never learnt as "idle".
  void observe_idle(const std::string& uuid, std::uint64_t total, std::uint64_t used);

  /// Writes the file if anything changed: a temp file written with write(2),
  /// fsync'ed and closed (each checked), then renamed over the old one; on any
  /// failure the temp file is removed and the old file stays as it was. Errors
  /// are returned, never fatal to a status run.
  Result<void> save();

  /// What was ignored or refused, one sentence each (for the user).
  const std::vector<std::string>& warnings() const { return warnings_; }
  /// The (checked) state directory it reads and writes; "" for an in-memory store.
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::map<std::string, std::uint64_t> bytes_;
  std::map<std::string, std::uint64_t> kept_;  // keep_estimate
  std::vector<std::string> warnings_;
  bool dirty_ = false;
};

}  // namespace gpureap::inventory
