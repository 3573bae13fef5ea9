#pragma once
// Lines for a descriptor that may stop taking them (a paused pipe, a journald
// stream under pressure): a bounded queue the caller's thread only appends to,
// drained by a writer thread of its own. A reader that stalls costs dropped
// lines, counted and owned up to where the gap is, never the caller's time.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace gpureap {

class QueuedWriter {
 public:
  /// The line written in place of `dropped` lines that did not fit in the queue,
  /// where they would have been. Called on the writer thread: it must not touch
  /// the caller's state.
  using DroppedLine = std::function<std::string(std::uint64_t dropped)>;

  /// Writes to `fd` (not owned, left as it is: no O_NONBLOCK on a description
  /// that other processes may share) from a thread started here, which never
  /// takes SIGTERM, SIGINT or SIGHUP (util/signal_mask.h).
  /// At most `capacity` lines wait at a time.
  QueuedWriter(int fd, std::size_t capacity, DroppedLine dropped_line);
  QueuedWriter(const QueuedWriter&) = delete;
  QueuedWriter& operator=(const QueuedWriter&) = delete;
  /// Gives the writer up to a second to write what is queued, then leaves it:
  /// a reader that never reads again does not keep the process from exiting.
  ~QueuedWriter();

  /// Queues `text` (one or more whole lines); never waits. False when the queue
  /// is full: the text is dropped and counted.
  bool push(std::string text);

  /// Lines dropped so far.
  std::uint64_t dropped() const;

  /// Waits until everything queued was written (or `seconds` passed); true when
  /// it was. For tests and an orderly exit.
  bool drain(double seconds);

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the thread, which may outlive *this
};

}  // namespace gpureap
