#pragma once
// The NVIDIA device nodes of a /dev directory, identified by device, never by
// path: a process in a container opens the same node under another path.

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proc/holder.h"
#include "util/result.h"

namespace gpureap::proc {

/// The device nodes to look for, with the identity each is matched by:
///  - a character device (the real /dev/nvidia*) by its device number st_rdev;
///  - a regular file (the simulated node of tests and the sim driver, and a MIG capability
///    file of the driver's /proc) by (st_dev, st_ino).
/// A mapping is matched by the mapped file's (st_dev, st_ino), which maps
/// lines print for character nodes too.
class DeviceSet {
 public:
  struct Entry {
    DeviceNode node;
    bool is_char = false;
    dev_t rdev = 0;  // character devices: the device number
    dev_t dev = 0;   // the node's own file identity
    std::uint64_t ino = 0;
    /// A MIG capability file under the driver's /proc/driver/nvidia/capabilities.
    bool procfs_capability = false;
  };

  DeviceSet() = default;
  explicit DeviceSet(std::vector<Entry> entries, std::vector<std::string> warnings = {});

  /// The node an open fd refers to, given stat() of /proc/PID/fd/N (link
  /// followed); nullptr if it is none of ours.
  const DeviceNode* match_fd(const struct stat& st) const;

  /// A MIG capability file of the driver's /proc whose inode number `st` (a regular
  /// file on another device) has: procfs numbers the driver's files once for all its
  /// mounts, but each mount of it (a container's own /proc) is a device of its own, so
  /// match_fd misses a capability opened there. Only a candidate: the caller confirms it
  /// by the fd's path (mig_access_of_capability_path of its link). nullptr if none.
  const DeviceNode* procfs_capability_candidate(const struct stat& st) const;
  /// True when the set holds MIG capability files of /proc (a driver loaded without
  /// nv_cap_enable_devfs=1, with MIG devices); the scan looks for candidates only then.
  bool has_procfs_capabilities() const { return has_procfs_capabilities_; }

  /// The node a maps line refers to, given its device (major, minor) and inode;
  /// nullptr if none. Inode 0 (anonymous memory) never matches.
  const DeviceNode* match_mapping(unsigned dev_major, unsigned dev_minor,
                                  std::uint64_t inode) const;

  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }
  /// What was found in the directory and ignored, one sentence each (for the
  /// user: the caller carries them into its output).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  std::vector<Entry> entries_;  // sorted by path
  std::vector<std::string> warnings_;
  bool has_procfs_capabilities_ = false;
};

/// The NVIDIA driver's fixed character-device numbers
/// (kernel-open/common/inc/nv-chardev-numbers.h): /dev/nvidia<N> is 195:N for
/// N <= 247, nvidia-modeset 195:254, nvidiactl 195:255. nvidia-uvm and
/// nvidia-uvm-tools have a dynamic major, the one /proc/devices lists for "nvidia-uvm".
inline constexpr unsigned kNvidiaMajor = 195;
inline constexpr unsigned kMaxGpuMinor = 247;
inline constexpr unsigned kModesetMinor = 254;
inline constexpr unsigned kCtlMinor = 255;

/// Finds nvidia<N> (a GPU), nvidiactl, nvidia-uvm, nvidia-uvm-tools and
/// nvidia-modeset in `dev_dir`. An entry counts only when it is, itself (never
/// through a symlink: nothing is followed out of the directory):
///  - a character device with the NVIDIA driver's numbers (above); nvidia-uvm*
///    by the major `<proc_root>/devices` lists for nvidia-uvm. A GPU node's minor
///    is the device's minor; when its name says another number (nvidia3 that is
///    195:5, as `docker --device /dev/nvidia5:/dev/nvidia3` makes), the device
///    number wins, since that is what the driver, NVML and every holder's fd
///    refer to, and a warning names the mismatch;
///  - or, only in a simulated node's directory (one holding the marker of
///    sim_node_marker.h with its exact content), a regular file owned by the
///    marker's owner; a GPU node's minor is then N from its name (N <= 247).
/// MIG capabilities (issue 25): /dev/nvidia-caps/nvidia-cap<N> that
/// `<proc_root>/driver/nvidia-caps/mig-minors` names (only when a node beyond nvidia-cap1
/// and nvidia-cap2, config and monitor, is there: the table is thousands of lines); on a
/// node with no capability node at all (a driver loaded without nv_cap_enable_devfs=1),
/// the capability files
/// `<proc_root>/driver/nvidia/capabilities/gpu<M>/mig/gi<G>[/ci<C>]/access` (only on
/// procfs; the walk stops at each GPU's mig directory when it lists no GPU instance).
/// In a simulated node's directory both live inside it: nvidia-caps/mig-minors and
/// nvidia-capabilities/, regular files of the marker's owner.
/// Every other entry with one of these names (a symlink, a character device
/// with other numbers such as /dev/null's 1:3, a FIFO, a directory, a regular
/// file without the marker) is ignored with a warning in the set's warnings().
/// A missing directory gives an empty set (the caller reports it); any other
/// failure to read the directory is an error.
Result<DeviceSet> discover_devices(const std::string& dev_dir,
                                   const std::string& proc_root);

/// The owner of a simulated node's device directory: the owner of its marker
/// (sim_node_marker.h) when the marker is there with its exact content; nullopt
/// otherwise. Another vendor's node discovery (gpu::AmdSource) accepts a regular
/// file as its node by the same rule as discover_devices.
std::optional<uid_t> simulated_node_owner(const std::string& dev_dir);

/// The driver's MIG capability table (capability minor -> MIG device):
/// `<proc_root>/driver/nvidia-caps/mig-minors`, or in a simulated node's directory (the
/// marker, as above) its nvidia-caps/mig-minors. Empty when unreadable. Thousands of
/// lines on a MIG-capable driver: read it only when a capability must be named.
std::map<unsigned, MigAccess> read_mig_minors(const std::string& dev_dir,
                                              const std::string& proc_root);

}  // namespace gpureap::proc
