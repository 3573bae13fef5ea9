#pragma once
#include <cstdint>
#include <sys/types.h>
#include <string>
#include <set>
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

/// The inodes of the sockets `pid` has open, from its fd links under `proc_root`
/// ("socket:[N]"); empty when it is gone or its fd table cannot be read.
std::set<std::uint64_t> socket_inodes(pid_t pid, const std::string& proc_root);

}  // namespace gpureap::proc
