#pragma once
// The first sighting of memory no process holds outlives the process that saw it (issue 50):
// `unheld.json` in the state directory keeps, per GPU (by UUID), how much memory above the
// baseline no process held and when a look first saw it so, with the boot it was seen in.
// A later one-shot look (`status`, `--check`, the Slurm hooks) starts its release watch
// from there, as the agent's ticks do, so stuck memory is driver-held once it stayed flat
// past the release budget whoever looks (release_model.h). A record goes when the memory
// does (a look sees the GPU with nothing unexplained), and with another boot id (the boot
// is /proc/sys/kernel/random/boot_id). Times are on the steady clock (CLOCK_MONOTONIC),
// the same for every process of one boot. The directory is the checked state directory
// (baseline_store.h: owned by the caller, written by no one else); the file is written
// atomically and read without following a symlink.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "util/clock.h"
#include "util/result.h"

namespace gpureap::inventory {

inline constexpr const char* kSightingFile = "unheld.json";

/// Memory above the baseline that no process held, as first seen.
struct Sighting {
  std::uint64_t bytes = 0;          // the least seen since (a release lowers it)
  util::Clock::time_point first_seen;
};


class SightingStore {
 public:
  /// Loads `<dir>/unheld.json`: the records of boot `boot_id` only (a record of another
  /// boot, or any with an empty boot id, is dropped). A missing or malformed file (or
  /// record) is no record. `dir` "" or `boot_id` "": a store that never reads or writes.
  static SightingStore load(std::string dir, std::string boot_id);

  const Sighting* get(const std::string& uuid) const;
  void put(const std::string& uuid, Sighting s);
  void erase(const std::string& uuid);
  /// Writes the file when anything changed (write_state_file: atomic, mode 0600).
  Result<void> save();

 private:
  std::string dir_;
  std::string boot_id_;
  std::map<std::string, Sighting> records_;
  bool dirty_ = false;
};

}  // namespace gpureap::inventory
