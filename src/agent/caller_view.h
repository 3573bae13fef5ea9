#pragma once
// What a control-socket caller could read of /proc itself (W2-16). The agent
// runs as root and reads every process; a caller's own scan reads only what its
// /proc shows it, and a /proc mounted with hidepid shows other users' processes
// to nobody but root and the mount's gid= group. The agent answers a caller
// with no more than that, so it must know which /proc the caller looks at.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/control_socket.h"

namespace gpureap::agent {

/// The superblock options of the procfs mounted last at `mount_point` in a
/// /proc/PID/mountinfo text ("rw,hidepid=invisible,gid=27"); nullopt when no
/// procfs is mounted there.
std::optional<std::string> proc_mount_options(std::string_view mountinfo,
                                              std::string_view mount_point);

/// Whether a procfs with these options shows other users' processes to a
/// caller in `groups`: hidepid absent or 0/off, or the caller is in its gid=.
bool proc_shows_other_users(std::string_view options, const std::vector<gid_t>& groups);

/// Whether `peer`'s own scan could read other users' processes in its /proc:
/// it shares the agent's user and PID namespaces (otherwise its /proc may be one
/// it mounted itself, or one of another PID namespace), and the procfs on its
/// /proc shows them (proc_shows_other_users, with its groups). False when any of
/// that cannot be read: an answer with too little beats one with too much.
/// `proc_root` is the agent's /proc, where the peer's files are read.
bool peer_sees_other_users(const Peer& peer, const std::string& proc_root);

}  // namespace gpureap::agent
