#include "proc/proc_events.h"

#include <arpa/inet.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace gpureap::proc {
namespace {

// The kernel's fixed inode numbers of the initial namespaces (include/linux/proc_ns.h).
constexpr ino_t kInitPidNamespace = 0xEFFFFFFCU;
constexpr ino_t kInitUserNamespace = 0xEFFFFFFDU;

// Where each field lies in a datagram: nlmsghdr, cn_msg, proc_event.
constexpr std::size_t kCnOffset = NLMSG_HDRLEN;
constexpr std::size_t kEventOffset = kCnOffset + sizeof(cn_msg);
constexpr std::size_t kDataOffset = kEventOffset + offsetof(proc_event, event_data);
constexpr std::size_t kForkChildPid = kDataOffset + offsetof(decltype(proc_event::event_data.fork), child_pid);
constexpr std::size_t kForkChildTgid = kDataOffset + offsetof(decltype(proc_event::event_data.fork), child_tgid);
constexpr std::size_t kExitPid = kDataOffset + offsetof(decltype(proc_event::event_data.exit), process_pid);
constexpr std::size_t kExitTgid = kDataOffset + offsetof(decltype(proc_event::event_data.exit), process_tgid);

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Calls f(cn_msg, payload) for each proc connector message of a datagram.
template <typename F>
void for_each_message(std::span<const std::byte> datagram, bool& overrun, F&& f) {
  std::size_t at = 0;
  while (datagram.size() - at >= sizeof(nlmsghdr)) {
    const auto nlh = load<nlmsghdr>(datagram.data() + at);
    if (nlh.nlmsg_len < sizeof(nlmsghdr) || nlh.nlmsg_len > datagram.size() - at) return;
    if (nlh.nlmsg_type == NLMSG_OVERRUN) overrun = true;
    const std::size_t payload = nlh.nlmsg_len - NLMSG_HDRLEN;
    if ((nlh.nlmsg_type == NLMSG_DONE || nlh.nlmsg_type >= NLMSG_MIN_TYPE) &&
        nlh.nlmsg_len >= NLMSG_HDRLEN && payload >= sizeof(cn_msg)) {
      const std::byte* cn_at = datagram.data() + at + NLMSG_HDRLEN;
      const auto cn = load<cn_msg>(cn_at);
      if (cn.id.idx == CN_IDX_PROC && cn.id.val == CN_VAL_PROC &&
          cn.len <= payload - sizeof(cn_msg))
        f(cn, std::span<const std::byte>(cn_at + sizeof(cn_msg), cn.len));
    }
    const std::size_t next = NLMSG_ALIGN(nlh.nlmsg_len);
    if (next == 0 || next > datagram.size() - at) return;
    at += next;
  }
}

// A socket filter that passes process starts, execs, exits of thread-group leaders
// and acknowledgements; thread events (most of a busy node's) never wake the agent.
// Classic BPF loads words in network order: each constant is compared as htonl().
std::array<sock_filter, 16> thread_filter() {
  constexpr std::uint32_t kWhat = kEventOffset + offsetof(proc_event, what);
  return {{
      /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kWhat),
      /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl(cn_event::fork), 4, 0),   // -> 6
      /* 2 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl(cn_event::exec), 12, 0),  // -> 15
      /* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl(cn_event::exit), 6, 0),   // -> 10
      /* 4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, htonl(cn_event::none), 10, 0),  // -> 15
      /* 5 */ BPF_STMT(BPF_RET | BPF_K, 0),
      // fork: child_pid == child_tgid
      /* 6 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kForkChildTgid),
      /* 7 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
      /* 8 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kForkChildPid),
      /* 9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_X, 0, 5, 4),  // -> 15, 14
      // exit: process_pid == process_tgid
      /* 10 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kExitTgid),
      /* 11 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
      /* 12 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, kExitPid),
      /* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_X, 0, 1, 0),  // -> 15, 14
      /* 14 */ BPF_STMT(BPF_RET | BPF_K, 0),
      /* 15 */ BPF_STMT(BPF_RET | BPF_K, 0xffffffffU),
  }};
}

/// The message that (un)subscribes: nlmsghdr, cn_msg, the operation.
std::array<std::byte, NLMSG_HDRLEN + sizeof(cn_msg) + sizeof(__u32)> subscription(__u32 op) {
  std::array<std::byte, NLMSG_HDRLEN + sizeof(cn_msg) + sizeof(__u32)> out{};
  nlmsghdr nlh{};
  nlh.nlmsg_len = static_cast<__u32>(out.size());
  nlh.nlmsg_type = NLMSG_DONE;
  nlh.nlmsg_pid = static_cast<__u32>(::getpid());
  cn_msg cn{};
  cn.id = {CN_IDX_PROC, CN_VAL_PROC};
  cn.len = sizeof(__u32);
  std::memcpy(out.data(), &nlh, sizeof nlh);
  std::memcpy(out.data() + NLMSG_HDRLEN, &cn, sizeof cn);
  std::memcpy(out.data() + NLMSG_HDRLEN + sizeof cn, &op, sizeof op);
  return out;
}

}  // namespace

void parse_proc_events(std::span<const std::byte> datagram, ProcEventBatch& out) {
  for_each_message(datagram, out.lost, [&](const cn_msg&, std::span<const std::byte> payload) {
    if (payload.size() < sizeof(proc_event)) return;
    const auto ev = load<proc_event>(payload.data());
    switch (static_cast<std::uint32_t>(ev.what)) {
      case cn_event::fork:
        if (ev.event_data.fork.child_pid == ev.event_data.fork.child_tgid)
          out.events.push_back({ProcEvent::Kind::started, ev.event_data.fork.child_tgid, 0,
                                ev.event_data.fork.parent_tgid, ev.timestamp_ns});
        break;
      case cn_event::exec:
        out.events.push_back(
            {ProcEvent::Kind::exec, ev.event_data.exec.process_tgid, 0, 0, ev.timestamp_ns});
        break;
      case cn_event::exit:
        if (ev.event_data.exit.process_pid == ev.event_data.exit.process_tgid)
          out.events.push_back({ProcEvent::Kind::exited, ev.event_data.exit.process_tgid,
                                static_cast<int>(ev.event_data.exit.exit_code), 0,
                                ev.timestamp_ns});
        break;
      default:
        break;
    }
  });
}

int parse_proc_ack(std::span<const std::byte> datagram) {
  int ack = -1;
  bool overrun = false;
  for_each_message(datagram, overrun, [&](const cn_msg&, std::span<const std::byte> payload) {
    if (payload.size() < offsetof(proc_event, event_data) + sizeof(__u32)) return;
    const auto what = load<__u32>(payload.data() + offsetof(proc_event, what));
    if (what == cn_event::none)
      ack = static_cast<int>(load<__u32>(payload.data() + offsetof(proc_event, event_data)));
  });
  return ack;
}

bool proc_events_apply(const std::string& proc_root) {
  char self[32];
  const ssize_t n = ::readlink((proc_root + "/self").c_str(), self, sizeof self - 1);
  if (n <= 0) return false;
  self[n] = '\0';
  if (std::to_string(::getpid()) != self) return false;
  struct stat pid_ns {}, user_ns {};
  return ::stat((proc_root + "/self/ns/pid").c_str(), &pid_ns) == 0 &&
         pid_ns.st_ino == kInitPidNamespace &&
         ::stat((proc_root + "/self/ns/user").c_str(), &user_ns) == 0 &&
         user_ns.st_ino == kInitUserNamespace;
}

Result<ProcEvents> ProcEvents::open() {
  UniqueFd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_CONNECTOR));
  if (!fd.valid()) return std::unexpected(Error::from_errno("the proc connector's socket"));
  // Events come in bursts (a job's start forks hundreds): a roomy buffer, forced
  // past rmem_max as root; an overrun costs a look at /proc, never a miss.
  const int bytes = 4 << 20;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  auto filter = thread_filter();
  sock_fprog prog{static_cast<unsigned short>(filter.size()), filter.data()};
  // An optimisation: without it the parser drops thread events.
  const bool filtered =
      ::setsockopt(fd.get(), SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) == 0;

  sockaddr_nl addr{};
  addr.nl_family = AF_NETLINK;
  addr.nl_groups = CN_IDX_PROC;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return std::unexpected(Error::from_errno("the proc connector (needs root)"));

  const auto request = subscription(PROC_CN_MCAST_LISTEN);
  if (::send(fd.get(), request.data(), request.size(), 0) < 0)
    return std::unexpected(Error::from_errno("subscribing to the proc connector"));

  // The kernel acknowledges in send()'s own call; a listener it ignores (another
  // namespace) gets nothing. Other events may come first.
  std::array<std::byte, 4096> buf;
  for (int waited_ms = 0; waited_ms < 500;) {
    const ssize_t n = ::recv(fd.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      const int ack = parse_proc_ack(std::span(buf.data(), static_cast<std::size_t>(n)));
      if (ack == 0) return ProcEvents(std::move(fd), filtered);
      if (ack > 0)
        return std::unexpected(Error::from_errno("the proc connector refused the subscription", ack));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS)
      return std::unexpected(Error::from_errno("the proc connector"));
    if (n < 0 && errno == ENOBUFS) continue;
    pollfd p{fd.get(), POLLIN, 0};
    (void)::poll(&p, 1, 50);
    waited_ms += 50;
  }
  return std::unexpected(Error{"the proc connector did not acknowledge (another namespace?)", 0});
}

ProcEvents::~ProcEvents() {
  if (!fd_.valid()) return;
  const auto request = subscription(PROC_CN_MCAST_IGNORE);
  (void)::send(fd_.get(), request.data(), request.size(), MSG_DONTWAIT);
}

Result<ProcEventBatch> ProcEvents::drain() {
  ProcEventBatch batch;
  std::array<std::byte, 8192> buf;
  for (;;) {
    const ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    if (n > 0) {
      parse_proc_events(std::span(buf.data(), static_cast<std::size_t>(n)), batch);
      continue;
    }
    if (n == 0) return batch;
    if (errno == EINTR) continue;
    if (errno == ENOBUFS) {  // the kernel dropped events: the caller lists /proc
      batch.lost = true;
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return batch;
    return std::unexpected(Error::from_errno("reading the proc connector"));
  }
}

}  // namespace gpureap::proc
