#pragma once
// Two `free` runs at once would fight over the same processes and misread each
// other's memory drops: one holds an exclusive flock on <state dir>/free.lock.
// The kernel drops the lock when the holder dies, so a crashed run never wedges it.
// Concurrent Slurm epilogs (they run in parallel unless PrologFlags=Serial) wait for
// it instead of failing: acquire(..., wait_until).

#include <chrono>
#include <string>
#include <string_view>
#include <utility>

#include "util/fd.h"
#include "util/result.h"

namespace gpureap::reclaim {

class FreeLock {
 public:
  /// Takes the lock without waiting. Fails with "another gpureap free (pid N) is
  /// running" (sys_errno EWOULDBLOCK, as after any wait) when it is held. <state_dir>/free.lock is
  /// opened without following a symlink and used only when it is a regular file owned by the
  /// caller; otherwise the error names it and nothing is written.
  static Result<FreeLock> acquire(const std::string& state_dir) {
    return acquire(state_dir, "free.lock", "gpureap free", "wait for it to finish");
  }
  /// The same lock under another name: `gpureap watch` holds agent.lock ("another
  /// gpureap watch (pid N) is running; <advice> (lock: …)").
  static Result<FreeLock> acquire(const std::string& state_dir, std::string_view file,
                                  std::string_view who, std::string_view advice) {
    return acquire(state_dir, file, who, advice, std::chrono::steady_clock::time_point{});
  }
  /// Waits until `wait_until` for the holder to let go (`free --wait-lock`, `--deadline`):
  /// woken by the holder closing the file (inotify IN_CLOSE: its exit closes it too), and
  /// retried every 250 ms besides, so no missed wake-up can outlast a released lock by
  /// more. A time already past means no wait. The failure after waiting says so.
  static Result<FreeLock> acquire(const std::string& state_dir, std::string_view file,
                                  std::string_view who, std::string_view advice,
                                  std::chrono::steady_clock::time_point wait_until);
  static Result<FreeLock> acquire(const std::string& state_dir,
                                  std::chrono::steady_clock::time_point wait_until) {
    return acquire(state_dir, "free.lock", "gpureap free", "wait for it to finish", wait_until);
  }

  FreeLock(FreeLock&& o) noexcept = default;
  FreeLock& operator=(FreeLock&&) = delete;
  FreeLock(const FreeLock&) = delete;
  /// Closing the descriptor drops the flock.
  ~FreeLock() = default;

 private:
  explicit FreeLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace gpureap::reclaim
