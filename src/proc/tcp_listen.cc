#include "proc/tcp_listen.h"
#include "proc/proc_parse.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dirent.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace gpureap::proc {
namespace {

constexpr unsigned kListenState = 10;  // TCP_LISTEN in the kernel's enumeration

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// One dump request for `family`; appends what it answers to `out`.
Result<void> dump(int fd, unsigned char family, std::vector<ListeningSocket>& out) {
  struct {
    nlmsghdr header;
    inet_diag_req_v2 request;
  } message{};
  message.header.nlmsg_len = sizeof message;
  message.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  message.header.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  message.request.sdiag_family = family;
  message.request.sdiag_protocol = IPPROTO_TCP;
  message.request.idiag_states = 1U << kListenState;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, &message, sizeof message, 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0)
    return std::unexpected(Error::from_errno("sock_diag request"));
  alignas(nlmsghdr) char buffer[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(Error::from_errno("sock_diag answer"));
    }
    if (n == 0) return {};
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buffer); NLMSG_OK(h, left);
         h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type == NLMSG_DONE) return {};
      if (h->nlmsg_type == NLMSG_ERROR) return fail("sock_diag: the kernel refused the dump");
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) continue;
      const auto* msg = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
      if (msg->idiag_state != kListenState || msg->idiag_inode == 0) continue;
      out.push_back({msg->idiag_inode, ntohs(msg->id.idiag_sport)});
    }
  }
}

}  // namespace

Result<std::vector<ListeningSocket>> listening_tcp_sockets() {
  Fd fd(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (fd.get() < 0) return std::unexpected(Error::from_errno("sock_diag socket"));
  std::vector<ListeningSocket> out;
  for (unsigned char family :
       {static_cast<unsigned char>(AF_INET), static_cast<unsigned char>(AF_INET6)}) {
    auto ok = dump(fd.get(), family, out);
    if (!ok) return std::unexpected(ok.error());
  }
  return out;
}

std::set<std::uint64_t> socket_inodes(pid_t pid, const std::string& proc_root) {
  std::set<std::uint64_t> inodes;
  const std::string fd_dir = fmt::format("{}/{}/fd", proc_root, pid);
  DIR* dir = ::opendir(fd_dir.c_str());
  if (!dir) return inodes;
  char target[64];
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const ssize_t n = ::readlinkat(::dirfd(dir), entry->d_name, target, sizeof target);
    if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target) continue;
    if (auto inode = parse_socket_link(std::string_view(target, static_cast<std::size_t>(n))))
      inodes.insert(*inode);
  }
  ::closedir(dir);
  return inodes;
}

}  // namespace gpureap::proc
