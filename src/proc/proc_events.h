#pragma once
// The kernel's process events (the netlink proc connector, linux/cn_proc.h): which
// processes started (fork, exec) and exited since the last drain, without listing
// /proc. The agent's tick uses it, when it can, to find new processes at 10,000
// processes for the cost of the events instead of a listing (issue 38).
//
// Only root in the initial pid namespace gets events (CAP_NET_ADMIN; the kernel
// sends nothing to a listener in another pid namespace, silently): open() checks
// both and waits for the kernel's acknowledgement, so a ProcEvents that opened
// does receive. Thread events are dropped by a socket filter (and by the parser,
// should the filter not attach): a process starts at its fork and ends at its
// leader's exit.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/fd.h"
#include "util/result.h"

namespace gpureap::proc {

/// The kernel's event codes (proc_event::what; include/uapi/linux/cn_proc.h, an ABI).
/// Spelled here: Linux 6.6 moved them from proc_event's nested enum to the top-level
/// enum proc_cn_event, so no one spelling of the header's names compiles against both
/// (Debian 12's linux-libc-dev 6.1; Ubuntu 24.04's 6.8, the GPU machine's).
namespace cn_event {
inline constexpr std::uint32_t none = 0x00000000;  // an acknowledgement
inline constexpr std::uint32_t fork = 0x00000001;
inline constexpr std::uint32_t exec = 0x00000002;
inline constexpr std::uint32_t uid = 0x00000004;
inline constexpr std::uint32_t exit = 0x80000000;
}  // namespace cn_event

/// What one drain saw, in the kernel's order.
struct ProcEvent {
  enum class Kind { started, exec, exited };
  Kind kind;
  pid_t pid;  // the process (thread-group id), in the initial pid namespace
  /// exited: how, in waitpid(2)'s form (the kernel's exit_code: the exit status << 8,
  /// or the signal that ended it); 0 for the other kinds.
  int wait_status = 0;
  /// started: the process that forked it (its thread-group id); 0 for the other kinds.
  pid_t parent = 0;
  /// When the kernel sent it: CLOCK_MONOTONIC nanoseconds (proc_event::timestamp_ns).
  std::uint64_t at_ns = 0;
};

struct ProcEventBatch {
  std::vector<ProcEvent> events;
  /// Events were lost (the socket's buffer overran, ENOBUFS, or NLMSG_OVERRUN): the
  /// caller must look at /proc itself to know what it missed.
  bool lost = false;
};

/// Parses one netlink datagram of the proc connector into `out`: process starts
/// (a fork whose child is a thread-group leader), execs and exits (a leader's).
/// Thread events, other event kinds, acknowledgements and messages of other
/// connectors are skipped; a truncated message ends the datagram. Never fails.
void parse_proc_events(std::span<const std::byte> datagram, ProcEventBatch& out);

/// The acknowledgement of a subscription in `datagram` (PROC_EVENT_NONE): -1 when
/// there is none, else its error (0: subscribed).
int parse_proc_ack(std::span<const std::byte> datagram);

/// Whether proc_root is the procfs of this process's pid namespace and that
/// namespace is the initial one: the pids the connector reports are then the
/// pids proc_root lists.
bool proc_events_apply(const std::string& proc_root);

class ProcEvents {
 public:
  /// Subscribes (root only). Fails, with why, when the kernel refuses or does not
  /// acknowledge; the caller then lists /proc instead.
  static Result<ProcEvents> open();

  ProcEvents(ProcEvents&&) noexcept = default;
  ProcEvents& operator=(ProcEvents&&) noexcept = default;
  ~ProcEvents();

  /// Everything queued since the last drain, without blocking. A receive error
  /// other than an overrun is returned (the caller stops using the connector).
  Result<ProcEventBatch> drain();

  int fd() const { return fd_.get(); }
  /// Whether the kernel drops thread events (the socket filter attached).
  bool filtered() const { return filtered_; }

 private:
  ProcEvents(UniqueFd fd, bool filtered) : fd_(std::move(fd)), filtered_(filtered) {}
  UniqueFd fd_;
  bool filtered_ = false;
};

}  // namespace gpureap::proc
