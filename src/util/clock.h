#pragma once
// The monotonic clock as a seam (ninja's DiskInterface pattern: one real, one
// fake). The reclaim engine reads the time and waits through it, so a test can
// run rounds that take seconds on a real node in microseconds (FakeClock).

#include <chrono>

namespace gpureap::util {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;
  virtual ~Clock() = default;
  virtual time_point now() const = 0;
  /// Blocks until `t` (returns at once when `t` has passed).
  virtual void sleep_until(time_point t) = 0;
  void sleep_for(duration d) { sleep_until(now() + d); }
};

/// std::chrono::steady_clock and std::this_thread::sleep_until.
Clock& system_clock();

/// Seconds from `t` until now on the steady clock (the unit of every report).
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Seconds since the epoch, now (the wall clock: the time of an event, of a death).
inline double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// A clock that moves only when told to, or when someone sleeps on it (the
/// sleeper wakes at once, at the time it asked for).
class FakeClock final : public Clock {
 public:
  explicit FakeClock(time_point start = time_point{} + std::chrono::hours(1)) : now_(start) {}
  time_point now() const override { return now_; }
  void sleep_until(time_point t) override {
    ++sleeps;
    if (t > now_) now_ = t;
  }
  void advance(duration d) { now_ += d; }
  int sleeps = 0;

 private:
  time_point now_;
};

}  // namespace gpureap::util
