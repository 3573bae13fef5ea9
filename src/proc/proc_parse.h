#pragma once
// Pure parsers of /proc text: no I/O, every input a std::string_view, every
// function tested on saved fixture files (tests/fixtures/proc/).

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gpureap::proc {

/// PF_KTHREAD in include/linux/sched.h: the task is a kernel thread.
inline constexpr unsigned kPfKthread = 0x00200000;
/// PF_EXITING: the task is inside do_exit().
inline constexpr unsigned kPfExiting = 0x00000004;

/// The fields of /proc/PID/stat that gpureap uses (proc_pid_stat(5) numbering).
struct StatInfo {
  pid_t pid = 0;                 // field 1
  std::string comm;              // field 2, without the parentheses
  char state = '?';              // field 3
  pid_t ppid = 0;                // field 4
  pid_t pgid = 0;                // field 5
  pid_t sid = 0;                 // field 6
  int tty_nr = 0;                // field 7: controlling terminal, 0 when none
  unsigned flags = 0;            // field 9
  std::uint64_t utime = 0;       // field 14, clock ticks in user mode
  std::uint64_t stime = 0;       // field 15, clock ticks in kernel mode
  long num_threads = 0;          // field 20
  std::uint64_t start_time = 0;  // field 22, clock ticks since boot
  std::optional<long> rss_pages;  // field 24, resident pages (nullopt: a line cut before it)
  bool is_kernel_thread() const { return (flags & kPfKthread) != 0; }
};

/// Parses /proc/PID/stat (or task/TID/stat). The comm may contain spaces and
/// parentheses, so the fields after it are read after the LAST ')'.
/// Fails when the text is truncated or a needed field is not a number.
Result<StatInfo> parse_stat(std::string_view text);

/// The state letter of a stat line alone ('?' when malformed); cheaper than parse_stat.
char parse_stat_state(std::string_view text);

/// The fields of /proc/PID/status that gpureap uses. Missing lines keep defaults.
struct StatusInfo {
  std::string name;                    // Name:
  char state = '?';                    // State: first letter
  std::optional<uid_t> real_uid;       // Uid: first column
  std::optional<uid_t> effective_uid;  // Uid: second column
  pid_t ppid = 0;                      // PPid:
  long threads = 0;                    // Threads:
  std::vector<pid_t> nspid;            // NSpid: outermost (our namespace) first, innermost last
  std::uint64_t sig_pnd = 0;           // SigPnd: thread-directed pending signals (bitmask)
  std::uint64_t shd_pnd = 0;           // ShdPnd: process-directed pending signals (bitmask)
  std::uint64_t vm_pin = 0;            // VmPin: pinned memory (pin_user_pages: cudaHostRegister)
  std::uint64_t vm_lck = 0;            // VmLck: mlock()ed address space; bytes (kB in the file)
  std::uint64_t vm_rss = 0;            // VmRSS: resident memory, bytes
  std::uint64_t sig_ign = 0;           // SigIgn: ignored signals (bitmask; bit N-1 is signal N)
  /// Host memory really pinned: VmPin, and VmLck no larger than VmRSS. VmLck counts locked
  /// address space, resident or not: under mlockall(MCL_FUTURE) a PROT_NONE reservation
  /// of terabytes is "locked" with nothing behind it (W4-08).
  std::uint64_t resident_pinned_bytes() const { return vm_pin + std::min(vm_lck, vm_rss); }
  /// True when SIGHUP is ignored, as `nohup` leaves it (and every child inherits it).
  bool ignores_sighup() const { return (sig_ign & 1ull) != 0; }
  /// True when SIGKILL is pending (bit 8 of the mask, signal 9).
  bool sigkill_pending() const { return ((sig_pnd | shd_pnd) & (1ull << 8)) != 0; }
};

/// Parses /proc/PID/status; unknown lines are ignored, malformed values left at defaults.
StatusInfo parse_status(std::string_view text);

/// One line of /proc/PID/cgroup: "hierarchy-ID:controller-list:cgroup-path".
/// cgroup v2 is hierarchy 0 with an empty controller list.
struct CgroupEntry {
  int hierarchy = 0;
  std::string controllers;  // "memory", "cpu,cpuacct", "name=systemd", "" for v2
  std::string path;
  friend bool operator==(const CgroupEntry&, const CgroupEntry&) = default;
};

/// Parses /proc/PID/cgroup (v1, v2 or hybrid); malformed lines are skipped.
std::vector<CgroupEntry> parse_cgroup(std::string_view text);

/// The most telling cgroup path: the v2 path unless it is "/", else the
/// name=systemd path unless it is "/", else the first non-root v1 path;
/// "/" when every path is the root, "" when there are no entries.
std::string pick_cgroup_path(const std::vector<CgroupEntry>& entries);

/// What a cgroup path says about where the process lives, "" if nothing:
///   "docker:<12 hex>"   /docker/<id>, docker-<id>.scope
///   "k8s-pod:<uid>[/<12 hex>]"  /kubepods/[qos/]pod<uid>/<container id>,
///   kubepods-[qos-]pod<uid_with_underscores>.slice/<runtime>-<id>.scope; the
///   container id when the path reaches the container "containerd:<12>"   cri-containerd-<id>.scope
///   outside a pod slice ("crio:<12>" likewise) "lxc:<name>"        /lxc/<name>/...,
///   /lxc.payload.<name>/..., /lxc.monitor.<name> "podman:<12 hex>"   libpod-<id>.scope,
///   libpod-conmon-<id>.scope "gpureap-run:<name>" gpureap's own run cgroups
///   gpureap-run-<name>[.scope] "systemd:<unit>"    innermost *.service or *.scope segment
/// Containers win over gpureap-run, which wins over a systemd unit.
std::string container_hint(std::string_view cgroup_path);

/// What stops the service unit or container a container_hint names, for a next step:
/// "systemctl stop NAME.service", "docker stop ID", "podman stop ID", "delete its pod
/// (pod uid UID)"; nullopt for none of these (no hint, a login session's scope, LXC, a
/// `gpureap run`). The one spelling of those commands (free's respawners, status
/// --blockers).
std::optional<std::string> container_stop_command(std::string_view hint);

/// One line of /proc/PID/maps.
struct MapsEntry {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::string perms;  // "r-xp"
  std::uint64_t offset = 0;
  unsigned dev_major = 0;  // st_dev of the mapped file (hex in the text)
  unsigned dev_minor = 0;
  std::uint64_t inode = 0;  // 0 for anonymous mappings
  std::string path;         // may be empty, contain spaces, or be "[heap]"; no " (deleted)"
  bool deleted = false;     // the path ended with " (deleted)"
};

/// Parses one maps line (with or without its trailing newline); nullopt if malformed.
std::optional<MapsEntry> parse_maps_line(std::string_view line);

/// The file identity of a maps line: what a holder scan matches on.
struct MapsFileId {
  unsigned dev_major = 0;
  unsigned dev_minor = 0;
  std::uint64_t inode = 0;
};

/// The (dev, inode) of one maps line without building a MapsEntry (no allocation);
/// nullopt if malformed. Used by the scan on every line of every process.
std::optional<MapsFileId> parse_maps_file_id(std::string_view line);

/// A /proc/PID/cmdline for display: NULs become spaces, trailing NULs are dropped.
std::string format_cmdline(std::string_view raw);
/// A /proc/PID/cmdline as its arguments: split at NULs, the trailing NUL(s) dropped;
/// empty for an empty file (a zombie, a kernel thread). A process that rewrote its
/// command line with spaces (setproctitle) is one argument.
std::vector<std::string> split_cmdline(std::string_view raw);

/// A listening TCP socket of /proc/net/tcp or tcp6: its inode and local port.
struct ListeningSocket {
  std::uint64_t inode = 0;
  unsigned port = 0;
};

/// The sockets in state LISTEN (0A) of a /proc/PID/net/tcp or tcp6 table; malformed
/// lines (and the header) are skipped.
std::vector<ListeningSocket> parse_listening_tcp(std::string_view table);

/// The inode of a "socket:[12345]" fd link target, or nullopt for any other target.
std::optional<std::uint64_t> parse_socket_link(std::string_view target);

/// The major number /proc/devices lists for the character-device driver named
/// `driver` (e.g. "nvidia-uvm", whose major is dynamic), nullopt when the
/// "Character devices:" section does not list it (module not loaded) or the
/// text is malformed. Block devices are never considered.
std::optional<unsigned> parse_char_device_major(std::string_view proc_devices,
                                                std::string_view driver);

}  // namespace gpureap::proc
