#include "proc/device_nodes.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/sim_node_marker.h"

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
    if (ec == std::errc::result_out_of_range) minor = ~0U;  // nvidia99999999999: still "ours"
    else if (ec != std::errc() || ptr != digits.data() + digits.size()) return std::nullopt;
    node.kind = NodeKind::gpu;
    node.minor = minor;
  } else {
    return std::nullopt;
  }
  return node;
}

// A file name for a message: bytes that are not printable ASCII become '?', so
// a planted name can neither break UTF-8 output nor reach a terminal raw.
std::string shown(std::string_view name) {
  std::string out(name);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return out;
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a regular file";
  return "not a device node";
}

/// The owner of the simulator's marker in `dirfd`, when the marker is there
/// with its exact content; nullopt otherwise (`*problem` says why, when a
/// marker exists but does not count).
std::optional<uid_t> sim_marker_owner(int dirfd, std::string* problem) {
  const std::string name(kSimNodeMarkerName);
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno != ENOENT) *problem = fmt::format("cannot read {}: {}", name, std::strerror(errno));
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    *problem = name + " is not a regular file";
    return std::nullopt;
  }
  char buf[512];
  ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n < 0 || std::string_view(buf, static_cast<std::size_t>(n)) != kSimNodeMarkerContent) {
    *problem = name + " does not hold the content `gpureap-sim node` writes";
    return std::nullopt;
  }
  return st.st_uid;
}

/// Where mig-minors is: the driver's /proc file, or in a simulated node's directory
/// (marked as such), the one `gpureap-sim node --mig` writes beside its capabilities.
std::string mig_minors_path_for(std::string dev_dir, const std::string& proc_root, bool simulated) {
  if (!dev_dir.ends_with('/')) dev_dir += '/';
  if (simulated) return dev_dir + "nvidia-caps/mig-minors";
  return proc_root + "/driver/nvidia-caps/mig-minors";
}

/// Decides about one directory entry; the context is per directory.
class NodeChecker {
 public:
  NodeChecker(int dirfd, std::string dev_dir, std::string proc_root)
      : dirfd_(dirfd), dev_dir_(std::move(dev_dir)), proc_root_(std::move(proc_root)) {
    if (!dev_dir_.ends_with('/')) dev_dir_ += '/';
    sim_owner_ = sim_marker_owner(dirfd_, &marker_problem_);
  }

  void check(std::string_view name) { check_node(classify_name(name), name); }

  /// /dev/nvidia-caps/nvidia-cap<N> (issue 25): a MIG capability that mig-minors names.
  void check_capability(int caps_dirfd, std::string_view name,
                        const std::map<unsigned, MigAccess>& mig_minors) {
    constexpr std::string_view prefix = "nvidia-cap";
    if (!name.starts_with(prefix)) return;
    unsigned minor = 0;
    std::string_view digits = name.substr(prefix.size());
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), minor);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || digits.empty()) return;
    auto access = mig_minors.find(minor);
    if (access == mig_minors.end()) return;  // config, monitor: no MIG device's
    DeviceNode node;
    node.kind = NodeKind::mig_cap;
    node.minor = minor;
    node.mig = access->second;
    const int saved = dirfd_;
    dirfd_ = caps_dirfd;
    check_node(node, name, "nvidia-caps/");
    dirfd_ = saved;
  }

  void check_node(std::optional<DeviceNode> node, std::string_view name,
                  std::string_view subdir = {}) {
    if (!node) return;
    node->path = dev_dir_ + std::string(subdir) + std::string(name);
    struct stat st {};
    // lstat: a symlink is judged as itself, never by what it points to.
    if (::fstatat(dirfd_, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return;  // removed meanwhile
    if (S_ISLNK(st.st_mode)) {
      char target[256] = {};
      ssize_t n = ::readlinkat(dirfd_, std::string(name).c_str(), target, sizeof target - 1);
      std::string to =
          n > 0 ? " to " + shown(std::string_view(target, static_cast<std::size_t>(n))) : "";
      warn(fmt::format("{} is a symbolic link{}; ignored: device nodes are never followed out of "
                       "the device directory",
                       node->path, to));
      return;
    }
    if (node->kind == NodeKind::gpu && *node->minor > kMaxGpuMinor) {
      warn(fmt::format("{}: GPU nodes are nvidia0 to nvidia{}; ignored", node->path, kMaxGpuMinor));
      return;
    }
    DeviceSet::Entry e;
    if (S_ISCHR(st.st_mode)) {
      if (!check_char(*node, st.st_rdev)) return;
      e.is_char = true;
      e.rdev = st.st_rdev;
    } else if (S_ISREG(st.st_mode)) {
      if (!check_simulated(*node, st)) return;
    } else {
      warn(fmt::format("{} is {}, not a character device; ignored", node->path,
                       file_kind(st.st_mode)));
      return;
    }
    e.dev = st.st_dev;
    e.ino = st.st_ino;
    e.node = std::move(*node);
    entries.push_back(std::move(e));
  }

  std::string mig_minors_path() const {
    return mig_minors_path_for(dev_dir_, proc_root_, sim_owner_.has_value());
  }

  /// Where the MIG capability files are: the driver's /proc directory, or in a
  /// simulated node's directory, the one `gpureap-sim node --mig --no-cap-devfs` writes.
  std::string capabilities_path() const {
    if (sim_owner_) return dev_dir_ + "nvidia-capabilities";
    return proc_root_ + "/driver/nvidia/capabilities";
  }
  bool simulated() const { return sim_owner_.has_value(); }

  /// `name` in `dirfd`, the capability file at `relative` (`gpu0/mig/gi1/ci0/access`)
  /// below capabilities_path(): a regular file (in a simulated node, of the marker's owner).
  void check_capability_file(int dirfd, const char* name, const std::string& relative) {
    auto access = mig_access_of_capability(relative);
    if (!access) return;
    const std::string path = capabilities_path() + "/" + relative;
    struct stat st {};
    if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;  // removed meanwhile
    if (!S_ISREG(st.st_mode)) {
      warn(fmt::format("{} is {}, not a regular file; ignored", shown(path),
                       file_kind(st.st_mode)));
      return;
    }
    DeviceNode node;
    node.kind = NodeKind::mig_cap;
    node.path = path;
    node.mig = access;
    if (sim_owner_ && !check_simulated(node, st)) return;
    DeviceSet::Entry e;
    e.dev = st.st_dev;
    e.ino = st.st_ino;
    e.procfs_capability = !sim_owner_;
    e.node = std::move(node);
    entries.push_back(std::move(e));
  }

  std::vector<DeviceSet::Entry> entries;
  std::vector<std::string> warnings;

 private:
  void warn(std::string text) { warnings.push_back(std::move(text)); }

  bool check_char(DeviceNode& node, dev_t rdev) {
    const unsigned maj = ::major(rdev), min = ::minor(rdev);
    std::string expected;
    bool ok = false;
    switch (node.kind) {
      case NodeKind::gpu:
        ok = maj == kNvidiaMajor && min <= kMaxGpuMinor;
        expected = fmt::format("{}:0-{}", kNvidiaMajor, kMaxGpuMinor);
        if (ok && min != *node.minor) {
          warn(fmt::format("{} is the NVIDIA device {}:{}, which is GPU minor {} whatever its name "
                           "says; its holders are shown under minor {}",
                           node.path, maj, min, min, min));
          node.minor = min;
        }
        break;
      case NodeKind::ctl:
        ok = maj == kNvidiaMajor && min == kCtlMinor;
        expected = fmt::format("{}:{}", kNvidiaMajor, kCtlMinor);
        break;
      case NodeKind::modeset:
        ok = maj == kNvidiaMajor && min == kModesetMinor;
        expected = fmt::format("{}:{}", kNvidiaMajor, kModesetMinor);
        break;
      case NodeKind::uvm:
      case NodeKind::uvm_tools: {
        auto uvm = uvm_major();
        if (!uvm) {
          warn(fmt::format("{} is character device {}:{}, but {}/devices lists no nvidia-uvm "
                           "driver; ignored",
                           node.path, maj, min, proc_root_));
          return false;
        }
        ok = maj == *uvm;
        expected = fmt::format("major {}, nvidia-uvm's in {}/devices", *uvm, proc_root_);
        break;
      }
      case NodeKind::mig_cap: {
        auto caps = caps_major();
        ok = caps && maj == *caps && min == *node.minor;
        expected = caps ? fmt::format("{}:{}, nvidia-caps' in {}/devices", *caps, *node.minor,
                                      proc_root_)
                        : fmt::format("a major that {}/devices lists for nvidia-caps", proc_root_);
        break;
      }
      case NodeKind::other:
        break;
    }
    if (!ok)
      warn(fmt::format("{} is character device {}:{}, not the NVIDIA driver's ({}); ignored",
                       node.path, maj, min, expected));
    return ok;
  }

  bool check_simulated(const DeviceNode& node, const struct stat& st) {
    if (!sim_owner_) {
      warn(fmt::format("{} is a regular file, not a character device; ignored (regular files "
                       "count only in a simulated node's directory, marked by {}{})",
                       node.path, kSimNodeMarkerName,
                       marker_problem_.empty() ? "" : "; " + marker_problem_));
      return false;
    }
    // A hard link to someone else's file (e.g. a library every process maps)
    // keeps its owner: it is no node of this simulator.
    if (st.st_uid != *sim_owner_) {
      warn(fmt::format("{} is owned by uid {}, not by the owner of {} (uid {}); ignored",
                       node.path, st.st_uid, kSimNodeMarkerName, *sim_owner_));
      return false;
    }
    return true;
  }

  std::optional<unsigned> caps_major() {
    if (!caps_read_) {
      caps_read_ = true;
      caps_major_ =
          parse_char_device_major(read_small_file(proc_root_ + "/devices"), "nvidia-caps");
    }
    return caps_major_;
  }

  std::optional<unsigned> uvm_major() {
    if (!uvm_read_) {
      uvm_read_ = true;
      uvm_major_ = parse_char_device_major(read_small_file(proc_root_ + "/devices"), "nvidia-uvm");
    }
    return uvm_major_;
  }

  int dirfd_;
  std::string dev_dir_;
  std::string proc_root_;
  std::optional<uid_t> sim_owner_;
  std::string marker_problem_;
  bool uvm_read_ = false;
  std::optional<unsigned> uvm_major_;
  bool caps_read_ = false;
  std::optional<unsigned> caps_major_;
};

// The names in `dirfd` that start with `prefix`.
std::vector<std::string> names_starting(int dirfd, ReadBuffer& scratch, std::string_view prefix) {
  std::vector<std::string> out;
  for_each_dirent(dirfd, scratch, [&](std::string_view name) {
    if (name.starts_with(prefix)) out.emplace_back(name);
  });
  return out;
}

int open_subdir(int dirfd, const std::string& name) {
  return ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/// MIG capabilities as files (a driver loaded without nv_cap_enable_devfs=1): a process
/// on a MIG device holds gpu<M>/mig/gi<G>/access and .../gi<G>/ci<C>/access open instead
/// of capability nodes. With MIG off (or no GPU instance) this costs one directory
/// listing plus one open per GPU: each GPU's mig directory lists no gi<G>, and the walk
/// stops there.
void add_capability_files(NodeChecker& checker, ReadBuffer& scratch) {
  const std::string root_path = checker.capabilities_path();
  UniqueFd root(::open(root_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return;
  // Outside a simulated node, only the driver's files count: they are on procfs.
  struct statfs fs {};
  if (!checker.simulated() && (::fstatfs(root.get(), &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC))
    return;
  for (const std::string& gpu : names_starting(root.get(), scratch, "gpu")) {
    UniqueFd gpu_dir(open_subdir(root.get(), gpu));
    if (!gpu_dir.valid()) continue;
    UniqueFd mig(open_subdir(gpu_dir.get(), "mig"));
    if (!mig.valid()) continue;
    for (const std::string& gi : names_starting(mig.get(), scratch, "gi")) {
      UniqueFd gi_dir(open_subdir(mig.get(), gi));
      if (!gi_dir.valid()) continue;
      const std::string gi_path = gpu + "/mig/" + gi + "/";
      checker.check_capability_file(gi_dir.get(), "access", gi_path + "access");
      for (const std::string& ci : names_starting(gi_dir.get(), scratch, "ci")) {
        UniqueFd ci_dir(open_subdir(gi_dir.get(), ci));
        if (ci_dir.valid())
          checker.check_capability_file(ci_dir.get(), "access", gi_path + ci + "/access");
      }
    }
  }
}

}  // namespace

DeviceSet::DeviceSet(std::vector<Entry> entries, std::vector<std::string> warnings)
    : entries_(std::move(entries)), warnings_(std::move(warnings)) {
  std::sort(entries_.begin(), entries_.end(),
            [](const Entry& a, const Entry& b) { return a.node.path < b.node.path; });
  has_procfs_capabilities_ = std::any_of(entries_.begin(), entries_.end(),
                                         [](const Entry& e) { return e.procfs_capability; });
}

const DeviceNode* DeviceSet::procfs_capability_candidate(const struct stat& st) const {
  if (!has_procfs_capabilities_ || !S_ISREG(st.st_mode)) return nullptr;
  for (const Entry& e : entries_)
    if (e.procfs_capability && e.ino == st.st_ino && e.dev != st.st_dev) return &e.node;
  return nullptr;
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

Result<DeviceSet> discover_devices(const std::string& dev_dir, const std::string& proc_root) {
  UniqueFd dir(::open(dev_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    if (errno == ENOENT) return DeviceSet{};
    return std::unexpected(Error::from_errno("cannot read device directory " + dev_dir));
  }
  NodeChecker checker(dir.get(), dev_dir, proc_root);
  ReadBuffer scratch;
  int err =
      for_each_dirent(dir.get(), scratch, [&](std::string_view name) { checker.check(name); });
  if (err != 0) {
    errno = err;
    return std::unexpected(Error::from_errno("cannot read device directory " + dev_dir));
  }
  // MIG capabilities (issue 25): only on a node where the driver lists MIG devices.
  bool capability_nodes = false;
  UniqueFd caps(::openat(dir.get(), "nvidia-caps", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (caps.valid()) {
    // The driver's table is read only when some capability node could be a MIG device's:
    // nvidia-cap1 and nvidia-cap2 (config, monitor) are there on every MIG-capable GPU,
    // MIG on or off, and the table is thousands of lines the driver writes at each read.
    std::vector<std::string> names;
    for_each_dirent(caps.get(), scratch, [&](std::string_view name) {
      if (!name.starts_with("nvidia-cap")) return;
      capability_nodes = true;
      if (name != "nvidia-cap1" && name != "nvidia-cap2") names.emplace_back(name);
    });
    if (!names.empty()) {
      const auto mig_minors = parse_mig_minors(read_small_file(checker.mig_minors_path()));
      if (!mig_minors.empty())
        for (const auto& name : names) checker.check_capability(caps.get(), name, mig_minors);
    }
  }
  // Capability nodes mean a driver loaded with nv_cap_enable_devfs=1: it takes no
  // capability file as a capability (the files only tell the nodes' minors), so the files
  // are walked only on a node without any capability node. On a MIG-capable node with
  // devfs (nvidia-cap1, nvidia-cap2 are there, MIG on or off) this costs nothing.
  if (!capability_nodes) add_capability_files(checker, scratch);
  std::sort(checker.warnings.begin(), checker.warnings.end());
  return DeviceSet(std::move(checker.entries), std::move(checker.warnings));
}

std::optional<uid_t> simulated_node_owner(const std::string& dev_dir) {
  UniqueFd dir(::open(dev_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return std::nullopt;
  std::string problem;
  return sim_marker_owner(dir.get(), &problem);
}

std::map<unsigned, MigAccess> read_mig_minors(const std::string& dev_dir,
                                              const std::string& proc_root) {
  UniqueFd dir(::open(dev_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string problem;
  const bool simulated = dir.valid() && sim_marker_owner(dir.get(), &problem).has_value();
  return parse_mig_minors(read_small_file(mig_minors_path_for(dev_dir, proc_root, simulated)));
}

}  // namespace gpureap::proc
