#include "agent/control_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace gpureap::agent {
namespace {

using Clock = std::chrono::steady_clock;

// A request is one short line ("inventory"); anything longer is not a client of ours.
constexpr std::size_t kMaxRequest = 4096;

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The group must be able to reach the socket: search permission on its
// directory (the state directory is 0700), and nothing more.
Result<void> let_group_through(const std::string& dir, gid_t group) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return std::unexpected(Error::from_errno("stat " + dir));
  if (st.st_gid != group && ::chown(dir.c_str(), static_cast<uid_t>(-1), group) != 0)
    return std::unexpected(
        Error::from_errno("cannot give group " + std::to_string(group) + " " + dir));
  const mode_t mode = (st.st_mode & 07707) | S_IXGRP;
  if (mode != (st.st_mode & 07777) && ::chmod(dir.c_str(), mode) != 0)
    return std::unexpected(Error::from_errno("chmod " + dir));
  return {};
}

}  // namespace

Result<ControlServer> ControlServer::listen(const std::string& path, std::optional<gid_t> group) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return fail("control socket path too long for a Unix socket (" +
                std::to_string(sizeof addr.sun_path - 1) + " bytes at most): " + path);
  std::memcpy(addr.sun_path, path.data(), path.size());

  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return fail(path + " exists and is not a socket; remove it to start the agent");
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return std::unexpected(Error::from_errno("cannot remove the stale socket " + path));
  } else if (errno != ENOENT) {
    return std::unexpected(Error::from_errno("lstat " + path));
  }

  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return std::unexpected(Error::from_errno("socket"));
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return std::unexpected(Error::from_errno("cannot bind " + path));

  // Connecting needs write permission on the socket file, checked at connect(2);
  // until listen(2) every connect is refused, so the mode set here is the only
  // one a client can ever meet.
  auto undo = [&](Error e) -> Result<ControlServer> {
    ::unlink(path.c_str());
    return std::unexpected(std::move(e));
  };
  if (group && ::lchown(path.c_str(), static_cast<uid_t>(-1), *group) != 0)
    return undo(Error::from_errno("cannot give " + path + " group " + std::to_string(*group)));
  if (::chmod(path.c_str(), group ? 0660 : 0600) != 0)
    return undo(Error::from_errno("chmod " + path));
  if (group)
    if (auto r = let_group_through(parent_dir(path), *group); !r) return undo(r.error());
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode))
    return undo(Error{path + " vanished after bind", errno});
  if (::listen(fd.get(), SOMAXCONN) != 0) return undo(Error::from_errno("listen " + path));
  return ControlServer(std::move(fd), path, st.st_dev, st.st_ino);
}

ControlServer::ControlServer(ControlServer&& other) noexcept
    : fd_(std::move(other.fd_)),
      path_(std::exchange(other.path_, {})),
      dev_(other.dev_),
      ino_(other.ino_) {}

ControlServer& ControlServer::operator=(ControlServer&& other) noexcept {
  if (this != &other) {
    remove_socket_file();
    fd_ = std::move(other.fd_);
    path_ = std::exchange(other.path_, {});
    dev_ = other.dev_;
    ino_ = other.ino_;
  }
  return *this;
}

ControlServer::~ControlServer() {
  remove_socket_file();
}

void ControlServer::remove_socket_file() {
  if (path_.empty()) return;
  // Only our own: a later agent may already have replaced it.
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_)
    ::unlink(path_.c_str());
  path_.clear();
}

std::vector<pollfd> ControlServer::poll_fds() const {
  std::vector<pollfd> fds;
  if (clients_.size() < kControlClients) fds.push_back({fd_.get(), POLLIN, 0});
  for (const auto& c : clients_)
    if (!c.held_until)  // held: woken by next_deadline()
      fds.push_back({c.fd.get(), static_cast<short>(c.answering ? POLLOUT : POLLIN), 0});
  return fds;
}

std::optional<Clock::time_point> ControlServer::next_deadline() const {
  std::optional<Clock::time_point> first;
  for (const auto& c : clients_) {
    if (!first || c.deadline < *first) first = c.deadline;
    if (c.held_until && *c.held_until < *first) first = *c.held_until;
  }
  return first;
}

void ControlServer::accept_pending(std::chrono::milliseconds deadline) {
  while (clients_.size() < kControlClients) {
    UniqueFd client(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!client.valid()) {
      // ECONNABORTED: that client gave up in the queue; others may follow it.
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: nobody waiting (or out of descriptors: try at the next wake-up)
    }
    // The kernel's word on who connected, never the request's.
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(client.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) continue;
    const Peer peer{cred.pid, cred.uid, cred.gid};
    auto same_uid = std::count_if(clients_.begin(), clients_.end(),
                                  [&](const Client& c) { return c.peer.uid == peer.uid; });
    if (static_cast<std::size_t>(same_uid) >= kControlClientsPerUid) continue;  // closed
    clients_.push_back(Client{std::move(client), peer, Clock::now() + deadline, {}, {}, 0, false, std::nullopt});
  }
}

ControlServer::Step ControlServer::advance(Client& c, const ControlHandler& handler) {
  char buf[512];
  if (c.held_until) {  // its request is read whole: answered once its second comes
    if (Clock::now() < *c.held_until) return Step::wait;
    c.held_until.reset();
    if (!within_rate(c)) return Step::wait;
    c.answer = handler(c.peer, c.request);
    c.answering = true;
  }
  while (!c.answering) {
    ssize_t n = ::read(c.fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Step::wait;
    if (n < 0) return Step::done;
    c.request.append(buf, static_cast<std::size_t>(n));
    auto nl = c.request.find('\n');
    if (nl == std::string::npos && c.request.size() > kMaxRequest) return Step::done;
    if (nl == std::string::npos && n > 0) continue;
    // A line, or EOF: what came is the request.
    if (nl != std::string::npos) c.request.resize(nl);
    if (!c.request.empty() && c.request.back() == '\r') c.request.pop_back();
    if (c.request.empty()) return Step::done;
    if (!within_rate(c)) return Step::wait;
    c.answer = handler(c.peer, c.request);
    c.answering = true;
  }
  while (c.written < c.answer.size()) {
    // MSG_NOSIGNAL: a client that hung up must not kill the agent with SIGPIPE.
    ssize_t n =
        ::send(c.fd.get(), c.answer.data() + c.written, c.answer.size() - c.written, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Step::wait;
    if (n <= 0) return Step::done;
    c.written += static_cast<std::size_t>(n);
  }
  return Step::done;
}

bool ControlServer::within_rate(Client& c) {
  if (c.peer.uid == 0) return true;
  const auto now = Clock::now();
  Budget& b = budgets_[c.peer.uid];
  if (now - b.second >= std::chrono::seconds(1)) b = {now, 0};
  if (b.used < kControlAnswersPerUid) {
    ++b.used;
    return true;
  }
  c.held_until = b.second + std::chrono::seconds(1);
  return false;
}

void ControlServer::serve(const ControlHandler& handler, std::chrono::milliseconds deadline) {
  accept_pending(deadline);
  const auto now = Clock::now();
  std::erase_if(budgets_, [&](const auto& b) { return now - b.second.second >= std::chrono::seconds(2); });
  std::erase_if(clients_,
                [&](Client& c) { return advance(c, handler) == Step::done || now >= c.deadline; });
}

}  // namespace gpureap::agent
