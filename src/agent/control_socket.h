#pragma once
// The agent's Unix socket in the state directory (inventory/agent_client.h is the
// other end). Mode 0600, or 0660 with a configured group; the peer's uid comes
// from SO_PEERCRED, never from the request. Served from the agent's loop: fd()
// goes into its poll set, serve_one() answers one client with a bounded wait, so
// a client that connects and says nothing cannot stall the agent.

#include <sys/types.h>

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

class ControlServer {
 public:
  /// Binds `path` (removing a stale socket file first: the caller holds the agent
  /// lock, so no live agent owns it), mode 0600, or 0660 and group `group`.
  static Result<ControlServer> listen(const std::string& path, std::optional<gid_t> group);
  ControlServer(ControlServer&&) noexcept = default;
  ControlServer& operator=(ControlServer&&) noexcept = default;
  ~ControlServer();  // unlinks the socket file

  int fd() const { return fd_.get(); }
  /// Accepts one pending client, reads its request line (bounded), answers with
  /// handler's text, closes. Returns false when no client was pending.
  bool serve_one(const ControlHandler& handler);

 private:
  ControlServer(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  UniqueFd fd_;
  std::string path_;
};

}  // namespace gpureap::agent
