#include "util/answer_within.h"

#include <unistd.h>

namespace gpureap {

AnswerWithin::AnswerWithin(std::chrono::steady_clock::time_point deadline, std::string late_line,
                           std::function<void(std::string_view)> print, int late_exit)
    : late_line_(std::move(late_line) + "\n"),
      print_(std::move(print)),
      late_exit_(late_exit),
      watchdog_([this, deadline] { watch(deadline); }) {}

AnswerWithin::~AnswerWithin() {
  stop();
}

void AnswerWithin::answer(const std::string& line) {
  if (claimed_.exchange(true)) {
    for (;;) ::pause();
  }
  print_(line + "\n");
  stop();
}

void AnswerWithin::watch(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (stopped_cv_.wait_until(lock, deadline, [this] { return stopped_; })) return;
  if (claimed_.exchange(true)) return;  // the command is printing its answer
  lock.unlock();
  print_(late_line_);
  ::_exit(late_exit_);
}

void AnswerWithin::stop() {
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }
  stopped_cv_.notify_one();
  if (watchdog_.joinable()) watchdog_.join();
}

}  // namespace gpureap
