#pragma once
// The agent's Unix socket in the state directory (inventory/agent_client.h is the
// other end). Mode 0600, or 0660 with a configured group; the peer's uid comes
// from SO_PEERCRED, never from the request. Served from the agent's loop without
// ever waiting: poll_fds() go into its poll set, serve() accepts every pending
// client and advances each one as far as its socket allows, so clients are
// served side by side and one that connects and says nothing costs a
// descriptor until its deadline, never another client's time (W2-17).

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

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

/// How long a client may take, from accept to the last byte of its answer: one
/// that connects and says nothing (or reads nothing) is dropped then. Total, not
/// per byte, so trickling keeps no connection alive longer.
inline constexpr std::chrono::milliseconds kControlDeadline{1000};

/// Clients in progress of one uid at a time: a further connection of that uid
/// is closed at once (its client falls back to a direct scan), so one user's
/// idle connections cannot take every slot.
inline constexpr std::size_t kControlClientsPerUid = 8;

/// Clients in progress in all: past it no one more is accepted until one ends.
inline constexpr std::size_t kControlClients = 64;

/// Answers a uid other than root gets in a second: its further requests wait for
/// the next second (within their deadline), unread, so a loop of questions costs the
/// agent this many answers a second, whatever its rate (W3-11).
inline constexpr unsigned kControlAnswersPerUid = 20;

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

  /// What to poll: the listening socket (unless kControlClients are in
  /// progress) and each client, for its request (POLLIN) or to take its answer
  /// (POLLOUT).
  std::vector<pollfd> poll_fds() const;

  /// Never waits: accepts every pending client (its deadline `deadline` from
  /// now), reads what each has sent, calls `handler` once a request line is
  /// complete, writes as much of the answer as the socket takes, closes a client
  /// once answered, and drops those past their deadline or misbehaving (no
  /// answer). Call it whenever poll_fds() reported something or next_deadline()
  /// passed.
  void serve(const ControlHandler& handler, std::chrono::milliseconds deadline = kControlDeadline);

  /// The earliest deadline of a client in progress (nullopt: none), so the
  /// caller's poll wakes up to drop it.
  std::optional<std::chrono::steady_clock::time_point> next_deadline() const;

  /// Clients accepted and not yet answered or dropped.
  std::size_t clients() const { return clients_.size(); }

 private:
  /// One client in progress: its request is read until the first '\n' (or EOF),
  /// then its answer written.
  struct Client {
    UniqueFd fd;
    Peer peer;
    std::chrono::steady_clock::time_point deadline;
    std::string request;  // bytes read so far
    std::string answer;   // set once the request is complete
    std::size_t written = 0;
    bool answering = false;
    /// Over its uid's answers this second: left unread until then.
    std::optional<std::chrono::steady_clock::time_point> held_until;
  };
  /// A uid's answers in the current second.
  struct Budget {
    std::chrono::steady_clock::time_point second;
    unsigned used = 0;
  };
  enum class Step { wait, done };

  ControlServer(UniqueFd fd, std::string path, dev_t dev, ino_t ino)
      : fd_(std::move(fd)), path_(std::move(path)), dev_(dev), ino_(ino) {}
  void remove_socket_file();
  void accept_pending(std::chrono::milliseconds deadline);
  Step advance(Client& client, const ControlHandler& handler);
  /// Charges one answer to the client's uid; false (and held until its uid's next
  /// second) when that second's answers are spent. Root is never held.
  bool within_rate(Client& client);
  UniqueFd fd_;
  std::string path_;
  dev_t dev_ = 0;  // the socket file bind(2) made, so the destructor removes only it
  ino_t ino_ = 0;
  std::vector<Client> clients_;
  std::map<uid_t, Budget> budgets_;
};

}  // namespace gpureap::agent
