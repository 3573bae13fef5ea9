#pragma once
// `run --replace`: before the new server starts, the old one's listening ports must be
// closed, or its launch meets EADDRINUSE. A port still listened on is named with the
// process that holds the socket.

#include <sys/types.h>

#include <string>
#include <vector>

namespace gpureap::supervise {

struct OpenPort {
  unsigned port = 0;
  pid_t pid = 0;     // a process with the listening socket open; 0 when none is visible
  std::string comm;  // its name
};

/// The ports of `ports` something still listens on in this network namespace (the
/// kernel's table through sock_diag, else `proc_root`/net/tcp and tcp6), each with a
/// process that holds the socket. Empty: every one is closed.
std::vector<OpenPort> ports_still_listening(const std::vector<unsigned>& ports,
                                            const std::string& proc_root);

}  // namespace gpureap::supervise
