#pragma once
// An answer printed once within a deadline (`status --summary/--check`, issue 27): by the
// command when it has it in time, else by a watchdog thread at the deadline, which then
// ends the process. A thread, not SIGALRM: a /proc read that blocks in the kernel (a
// process stuck in the driver with its mmap lock held makes /proc/PID/cmdline wait)
// sleeps killably, so no signal handler runs until it returns, while _exit's kill of the
// other threads ends it.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace gpureap {

class AnswerWithin {
 public:
  /// Past `deadline` with no answer: `print(late_line + "\n")`, then _exit(`late_exit`).
  AnswerWithin(std::chrono::steady_clock::time_point deadline, std::string late_line,
               std::function<void(std::string_view)> print, int late_exit);
  ~AnswerWithin();
  AnswerWithin(const AnswerWithin&) = delete;
  AnswerWithin& operator=(const AnswerWithin&) = delete;

  /// Prints `line` and a newline, unless the watchdog has printed its own: then this
  /// waits for the watchdog to end the process.
  void answer(const std::string& line);

 private:
  void watch(std::chrono::steady_clock::time_point deadline);
  void stop();

  std::string late_line_;
  std::function<void(std::string_view)> print_;
  int late_exit_;
  std::atomic<bool> claimed_{false};
  std::mutex mutex_;
  std::condition_variable stopped_cv_;
  bool stopped_ = false;
  std::thread watchdog_;  // last: started once the members above exist
};

}  // namespace gpureap
