#pragma once
// The NVIDIA device nodes of a /dev directory, identified by device, never by
// path: a process in a container opens the same node under another path.

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "proc/holder.h"
#include "util/result.h"

namespace gpureap::proc {

/// The device nodes to look for, with the identity each is matched by:
///  - a character device (the real /dev/nvidia*) by its device number st_rdev;
///  - a regular file (the simulated node of tests and the sim driver) by (st_dev, st_ino).
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
  };

  DeviceSet() = default;
  explicit DeviceSet(std::vector<Entry> entries);

  /// The node an open fd refers to, given stat() of /proc/PID/fd/N (link
  /// followed); nullptr if it is none of ours.
  const DeviceNode* match_fd(const struct stat& st) const;

  /// The node a maps line refers to, given its device (major, minor) and inode;
  /// nullptr if none. Inode 0 (anonymous memory) never matches.
  const DeviceNode* match_mapping(unsigned dev_major, unsigned dev_minor,
                                  std::uint64_t inode) const;

  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;  // sorted by path
};

/// Finds nvidia<N> (a GPU, minor N), nvidiactl, nvidia-uvm, nvidia-uvm-tools and
/// nvidia-modeset in `dev_dir` (symlinks followed). Character devices and
/// regular files count; anything else is ignored. A GPU node's minor is
/// minor(st_rdev) for a character device, N from the name for a regular file.
/// A missing or empty directory gives an empty set (the caller reports it);
/// any other failure to read the directory is an error.
Result<DeviceSet> discover_devices(const std::string& dev_dir);

}  // namespace gpureap::proc
