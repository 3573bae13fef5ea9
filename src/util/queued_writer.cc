#include "util/queued_writer.h"

#include <limits.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>

#include "util/signal_mask.h"

namespace gpureap {

struct QueuedWriter::State {
  struct Line {
    std::string text;
    std::uint64_t dropped_after = 0;  // lines dropped right after this one
  };

  int fd = -1;
  std::size_t capacity = 1;
  DroppedLine dropped_line;

  std::mutex mutex;
  std::condition_variable wake;  // a line queued, or stop
  std::condition_variable idle;  // nothing queued or in flight, or the thread ended
  std::deque<Line> lines;
  bool writing = false;
  bool stop = false;     // write what is queued, then end
  bool abandon = false;  // end now, even mid-line
  bool ended = false;
  std::uint64_t dropped = 0;
  bool nowait = true;  // the writer thread's: RWF_NOWAIT not refused yet

  bool abandoned() {
    std::lock_guard lock(mutex);
    return abandon;
  }

  // Never blocks for long: each piece is first offered with RWF_NOWAIT (the
  // kernel takes what fits, or says EAGAIN, without waiting); where the file
  // does not support that (a terminal), or after EAGAIN, it waits for room
  // (POLLOUT, rechecking `abandon`) and then writes at most PIPE_BUF: a pipe
  // that polls writable has a free page, so that write does not block either.
  // False once the descriptor fails (EPIPE: the reader is gone).
  bool write_out(std::string_view text) {
    while (!text.empty()) {
      const std::size_t piece = std::min<std::size_t>(text.size(), PIPE_BUF);
      ssize_t n = -1;
      if (nowait) {
        iovec v{const_cast<char*>(text.data()), text.size()};
        n = ::pwritev2(fd, &v, 1, -1, RWF_NOWAIT);
        if (n < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) nowait = false;
        if (n < 0 && nowait && errno != EAGAIN && errno != EINTR) return false;
      }
      if (n < 0) {
        pollfd p{fd, POLLOUT, 0};
        int ready = ::poll(&p, 1, 200);
        if (abandoned()) return false;
        if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
        if (ready < 0 || (p.revents & (POLLERR | POLLNVAL))) return false;
        n = ::write(fd, text.data(), piece);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      }
      if (n <= 0) return false;
      text.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  void run() {
    std::unique_lock lock(mutex);
    bool broken = false;
    for (;;) {
      wake.wait(lock, [&] { return stop || abandon || !lines.empty(); });
      if (abandon || lines.empty()) break;
      Line line = std::move(lines.front());
      lines.pop_front();
      writing = true;
      lock.unlock();
      if (!broken) broken = !write_out(line.text);
      if (!broken && line.dropped_after) broken = !write_out(dropped_line(line.dropped_after));
      lock.lock();
      writing = false;
      idle.notify_all();
    }
    ended = true;
    idle.notify_all();
  }
};

QueuedWriter::QueuedWriter(int fd, std::size_t capacity, DroppedLine dropped_line)
    : state_(std::make_shared<State>()) {
  state_->fd = fd;
  state_->capacity = capacity ? capacity : 1;
  state_->dropped_line = std::move(dropped_line);
  StopSignalsBlocked quiet;
  std::thread([state = state_] { state->run(); }).detach();
}

QueuedWriter::~QueuedWriter() {
  std::unique_lock lock(state_->mutex);
  state_->stop = true;
  state_->wake.notify_all();
  if (!state_->idle.wait_for(lock, std::chrono::seconds(1), [&] { return state_->ended; })) {
    // The reader stopped: what is left is lost, and the detached thread, which
    // owns its share of the state, ends at its next poll(2) timeout.
    state_->abandon = true;
    state_->wake.notify_all();
  }
}

bool QueuedWriter::push(std::string text) {
  std::lock_guard lock(state_->mutex);
  if (state_->lines.size() >= state_->capacity) {
    ++state_->lines.back().dropped_after;
    ++state_->dropped;
    return false;
  }
  state_->lines.push_back({std::move(text), 0});
  state_->wake.notify_one();
  return true;
}

std::uint64_t QueuedWriter::dropped() const {
  std::lock_guard lock(state_->mutex);
  return state_->dropped;
}

bool QueuedWriter::drain(double seconds) {
  std::unique_lock lock(state_->mutex);
  return state_->idle.wait_for(lock, std::chrono::duration<double>(seconds), [&] {
    return state_->ended || (state_->lines.empty() && !state_->writing);
  });
}

}  // namespace gpureap
