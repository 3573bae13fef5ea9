#pragma once
// The agent's Unix socket in the state directory (inventory/agent_client.h is the
// other end). Mode 0600, or 0660 with a configured group; the peer's uid comes
// from SO_PEERCRED, never from the request. Served from the agent's loop: fd()
// goes into its poll set, serve_one() answers one client with a bounded wait, so
// a client that connects and says nothing cannot stall the agent.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "util/fd.h"
#include "util/result.h"

namespace gpureap::agent {

struct Peer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

/// The request line a client sent ("inventory"), and who sent it.
using ControlHandler = std::function<std::string(const Peer& peer, const std::string& request)>;

/// How long serve_one waits for a client's request line, and again for the
/// client to take the answer: a client that connects and says nothing (or reads
/// nothing) holds the agent's loop this long at most.
inline constexpr std::chrono::milliseconds kControlDeadline{1000};

class ControlServer {
 public:
  /// Binds `path` (removing a stale socket file first: the caller holds the agent
  /// lock, so no live agent owns it; anything there that is not a socket is an
  /// error), mode 0600, or 0660 and group `group`, set before listen(2), so no
  /// client can connect while the mode is wider. With a group, the socket's
  /// directory also gets that group and search permission (0710 at most for
  /// the group: never read or write), without which the mode alone lets nobody in.
  static Result<ControlServer> listen(const std::string& path, std::optional<gid_t> group);
  ControlServer(ControlServer&& other) noexcept;
  ControlServer& operator=(ControlServer&& other) noexcept;
  ~ControlServer();  // unlinks the socket file, if it is still this server's

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  /// Accepts one pending client, reads its request line (bounded by `deadline`),
  /// answers with handler's text (bounded by `deadline` again), closes. Returns
  /// false when no client was pending. A client that misbehaves is dropped.
  bool serve_one(const ControlHandler& handler,
                 std::chrono::milliseconds deadline = kControlDeadline);

 private:
  ControlServer(UniqueFd fd, std::string path, dev_t dev, ino_t ino)
      : fd_(std::move(fd)), path_(std::move(path)), dev_(dev), ino_(ino) {}
  void remove_socket_file();
  UniqueFd fd_;
  std::string path_;
  dev_t dev_ = 0;  // the socket file bind(2) made, so the destructor removes only it
  ino_t ino_ = 0;
};

}  // namespace gpureap::agent
