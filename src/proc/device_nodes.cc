#include "proc/device_nodes.h"

#include <dirent.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <string_view>

namespace gpureap::proc {
namespace {

/// The kind (and for nvidia<N>, N) a node name stands for; nullopt if not ours.
std::optional<DeviceNode> classify_name(std::string_view name) {
  DeviceNode node;
  if (name == "nvidiactl") {
    node.kind = NodeKind::ctl;
  } else if (name == "nvidia-uvm") {
    node.kind = NodeKind::uvm;
  } else if (name == "nvidia-uvm-tools") {
    node.kind = NodeKind::uvm_tools;
  } else if (name == "nvidia-modeset") {
    node.kind = NodeKind::modeset;
  } else if (name.starts_with("nvidia") && name.size() > 6) {
    std::string_view digits = name.substr(6);
    unsigned minor = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), minor);
    if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
    node.kind = NodeKind::gpu;
    node.minor = minor;
  } else {
    return std::nullopt;
  }
  return node;
}

}  // namespace

DeviceSet::DeviceSet(std::vector<Entry> entries) : entries_(std::move(entries)) {
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.node.path < b.node.path; });
}

const DeviceNode* DeviceSet::match_fd(const struct stat& st) const {
  const bool is_char = S_ISCHR(st.st_mode);
  if (!is_char && !S_ISREG(st.st_mode)) return nullptr;
  for (const Entry& e : entries_) {
    if (e.is_char != is_char) continue;
    if (is_char ? e.rdev == st.st_rdev : (e.dev == st.st_dev && e.ino == st.st_ino)) return &e.node;
  }
  return nullptr;
}

const DeviceNode* DeviceSet::match_mapping(unsigned dev_major, unsigned dev_minor,
                                           std::uint64_t inode) const {
  if (inode == 0) return nullptr;
  for (const Entry& e : entries_)
    if (e.ino == inode && major(e.dev) == dev_major && minor(e.dev) == dev_minor) return &e.node;
  return nullptr;
}

Result<DeviceSet> discover_devices(const std::string& dev_dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(dev_dir.c_str()), ::closedir);
  if (!dir) {
    if (errno == ENOENT) return DeviceSet{};
    return std::unexpected(Error::from_errno("cannot read device directory " + dev_dir));
  }
  std::vector<DeviceSet::Entry> entries;
  for (;;) {
    errno = 0;
    const dirent* d = ::readdir(dir.get());
    if (d == nullptr) {
      if (errno != 0)
        return std::unexpected(Error::from_errno("cannot read device directory " + dev_dir));
      break;
    }
    std::optional<DeviceNode> node = classify_name(d->d_name);
    if (!node) continue;
    node->path = dev_dir + (dev_dir.ends_with('/') ? "" : "/") + d->d_name;
    struct stat st {};
    if (::stat(node->path.c_str(), &st) != 0) continue;  // dangling link, or removed meanwhile
    DeviceSet::Entry e;
    if (S_ISCHR(st.st_mode)) {
      e.is_char = true;
      e.rdev = st.st_rdev;
      if (node->kind == NodeKind::gpu) node->minor = ::minor(st.st_rdev);
    } else if (!S_ISREG(st.st_mode)) {
      continue;
    }
    e.dev = st.st_dev;
    e.ino = st.st_ino;
    e.node = std::move(*node);
    entries.push_back(std::move(e));
  }
  return DeviceSet(std::move(entries));
}

}  // namespace gpureap::proc
