#pragma once
// The TCP sockets listening in this network namespace, asked of the kernel through
// NETLINK_SOCK_DIAG (inet_diag, as ss(8) does): it walks only the listening hash, where
// reading /proc/net/tcp walks the whole established table (milliseconds on a large host).

#include <vector>

#include "proc/proc_parse.h"
#include "util/result.h"

namespace gpureap::proc {

/// Every listening TCP socket (IPv4 and IPv6): inode and local port. Fails when the
/// netlink socket cannot be used (a seccomp filter, no CONFIG_INET_DIAG).
Result<std::vector<ListeningSocket>> listening_tcp_sockets();

}  // namespace gpureap::proc
