#pragma once
// Waiting on one descriptor until a deadline: the building block of every
// event-driven wait (pidfds, cgroup.events, pipes).

#include <chrono>

namespace gpureap {

/// The timeout for poll(2) from now until `deadline`, in milliseconds: rounded
/// up (a wait never ends a hair early and spins), 0 once the deadline has
/// passed, at most a day (so time_point::max() means "a long time", not overflow).
int poll_timeout_ms(std::chrono::steady_clock::time_point deadline);

/// poll(2) on `fd` for `events` until one fires or `deadline` passes, resuming
/// after EINTR with the time left. Returns the revents (POLLERR, POLLHUP and
/// POLLNVAL included), 0 at the deadline or when poll() fails.
short poll_until(int fd, short events, std::chrono::steady_clock::time_point deadline);

}  // namespace gpureap
