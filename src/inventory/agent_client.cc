#include "inventory/agent_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "inventory/baseline_store.h"
#include "inventory/history_wire.h"
#include "inventory/inventory_wire.h"
#include "util/fd.h"
#include "util/poll.h"

namespace gpureap::inventory {
namespace {

using Clock = std::chrono::steady_clock;

// An inventory of 10,000 holders encodes to a few MB; this only stops a runaway.
constexpr std::size_t kMaxAnswer = 256u << 20;

Error connect_error(const std::string& path, int err) {
  switch (err) {
    case ENOENT:
      return Error{"no agent: no socket at " + path, err};
    case ECONNREFUSED:
      return Error{"no agent listening at " + path, err};
    case EACCES:
    case EPERM:
      return Error{
          path + " is not open to this user (the agent serves root, or its --socket-group)", err};
    case EAGAIN:
      return Error{"the agent at " + path + " has too many clients waiting", err};
    default:
      return Error::from_errno("cannot connect to " + path, err);
  }
}

Result<void> send_all(int fd, std::string_view text, Clock::time_point deadline) {
  while (!text.empty()) {
    ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    if (n > 0) {
      text.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return std::unexpected(Error::from_errno("sending the request to the agent"));
    if ((poll_until(fd, POLLOUT, deadline) & POLLOUT) == 0)
      return fail("the agent took no request before the deadline");
  }
  return {};
}

Result<std::string> read_to_eof(int fd, Clock::time_point deadline) {
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
      if (out.size() > kMaxAnswer) return fail("the agent's answer is implausibly large");
      continue;
    }
    if (n == 0) return out;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return std::unexpected(Error::from_errno("reading the agent's answer"));
    if ((poll_until(fd, POLLIN, deadline) & (POLLIN | POLLHUP | POLLERR)) == 0)
      return fail("the agent did not answer in time");
  }
}

// One request line, one answer read to EOF, from root's agent or one of our own.
struct Exchange {
  std::string answer;
  pid_t server_pid = 0;
};

Result<Exchange> exchange(const std::string& socket_path, std::string_view request,
                          Clock::time_point end) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof addr.sun_path)
    return fail("agent socket path too long: " + socket_path);
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());

  // Non-blocking: a Unix socket connect either completes at once or fails
  // (EAGAIN when the agent's backlog is full), it never waits.
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return std::unexpected(Error::from_errno("socket"));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0)
    return std::unexpected(connect_error(socket_path, errno));

  // Only root's agent, or one of our own, may tell us what holds the GPUs: a
  // socket another user planted could otherwise steer `free`.
  ucred server{};
  socklen_t len = sizeof server;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &server, &len) != 0)
    return std::unexpected(Error::from_errno("SO_PEERCRED"));
  if (server.uid != 0 && server.uid != ::geteuid())
    return fail(socket_path + " is served by uid " + std::to_string(server.uid) +
                ", neither root nor this user: not asked");

  if (auto sent = send_all(fd.get(), std::string(request) + "\n", end); !sent)
    return std::unexpected(sent.error());
  auto answer = read_to_eof(fd.get(), end);
  if (!answer) return std::unexpected(answer.error());
  if (answer->empty()) return fail("the agent closed the connection without an answer");
  return Exchange{std::move(*answer), server.pid};
}

}  // namespace

std::string agent_socket_path(const std::string& state_dir) {
  return state_dir + "/agent.sock";
}

std::optional<std::string> agent_socket_for(bool no_agent,
                                            const std::optional<std::string>& caller_dir) {
  if (no_agent) return std::nullopt;
  if (const char* off = std::getenv("GPUREAP_NO_AGENT");
      off && *off && std::string_view(off) != "0")
    return std::nullopt;
  // Whether the agent watches the node this command names (its device directory, NVML
  // library, proc root and simulator directory) is decided on its answer, from the
  // resolved values (inventory::Node::look), not from which flag or variable set them.
  std::optional<std::string> own = caller_dir;
  if (!own)
    if (auto dir = state_dir()) own = *dir;
  if (::geteuid() == 0) {
    if (!own) return std::nullopt;
    return agent_socket_path(*own);
  }
  // Agents run as root (only root reads every process's fds): a user's own
  // state directory holds a socket only when the user runs an agent.
  if (own) {
    std::string path = agent_socket_path(*own);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) return path;
  }
  const char* dir = std::getenv("GPUREAP_STATE_DIR");
  return agent_socket_path(dir && *dir == '/' ? dir : "/run/gpureap");
}

Result<Inventory> ask_agent(const std::string& socket_path, std::chrono::milliseconds deadline) {
  auto got = exchange(socket_path, kInventoryRequest, Clock::now() + deadline);
  if (!got) return std::unexpected(got.error());
  auto inv = decode_inventory(got->answer);
  if (!inv) return inv;
  inv->source = "agent";
  inv->agent_pid = got->server_pid;
  return inv;
}

Result<double> ask_agent_to_yield_nvml(const std::string& socket_path,
                                       std::chrono::milliseconds how_long,
                                       std::chrono::milliseconds deadline) {
  auto got = exchange(socket_path,
                      std::string(kYieldSourceRequest) + " " + std::to_string(how_long.count()),
                      Clock::now() + deadline);
  if (!got) return std::unexpected(got.error());
  return decode_source_answer(got->answer);
}

Result<void> ask_agent_to_resume_nvml(const std::string& socket_path, const std::string& note,
                                      std::chrono::milliseconds deadline) {
  std::string line(kResumeSourceRequest);
  // One line on the wire: a newline in the note would end the request early.
  for (char c : note) line += (c == '\n' || c == '\r') ? ' ' : c;
  if (!note.empty()) line.insert(kResumeSourceRequest.size(), " ");
  auto got = exchange(socket_path, line, Clock::now() + deadline);
  if (!got) return std::unexpected(got.error());
  auto answer = decode_source_answer(got->answer);
  if (!answer) return std::unexpected(answer.error());
  return {};
}

Result<GpuHistoryAnswer> ask_agent_history(const std::string& socket_path,
                                           std::chrono::milliseconds deadline) {
  auto got = exchange(socket_path, kHistoryRequest, Clock::now() + deadline);
  if (!got) return std::unexpected(got.error());
  return decode_history(got->answer);
}

}  // namespace gpureap::inventory
