// AmdSource::device_nodes: amdgpu's registration with the /proc sweep.
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "gpu/amd_source.h"
#include "proc/drm_fdinfo.h"
#include "proc/proc_files.h"

namespace gpureap::gpu {
namespace {

/// Decides about one node file of the device directory.
class NodeCheck {
 public:
  explicit NodeCheck(std::optional<uid_t> sim_owner) : sim_owner_(sim_owner) {}

  /// `path`: the node; `dev_file`: the sysfs `dev` file that says its device number
  /// (a character device counts only with that number; DRM nodes only on major 226).
  void check(proc::DeviceNode node, const std::string& dev_file, bool drm) {
    struct stat st {};
    if (::lstat(node.path.c_str(), &st) != 0) return;  // not given to this /dev (a container)
    proc::DeviceSet::Entry e;
    if (S_ISLNK(st.st_mode)) {
      warn(fmt::format("{} is a symbolic link; ignored: device nodes are never followed",
                       node.path));
      return;
    }
    if (S_ISCHR(st.st_mode)) {
      auto expected = parse_dev_numbers(proc::read_small_file(dev_file));
      const unsigned maj = ::major(st.st_rdev), min = ::minor(st.st_rdev);
      if (!expected || expected->first != maj || expected->second != min ||
          (drm && maj != proc::kDrmMajor)) {
        warn(fmt::format("{} is character device {}:{}, not the one {} names; ignored", node.path,
                         maj, min, dev_file));
        return;
      }
      e.is_char = true;
      e.rdev = st.st_rdev;
    } else if (S_ISREG(st.st_mode) && sim_owner_ && st.st_uid == *sim_owner_) {
      // A simulated node's plain file, beside its marker (proc/sim_node_marker.h).
    } else {
      warn(fmt::format("{} is not a character device; ignored", node.path));
      return;
    }
    e.dev = st.st_dev;
    e.ino = st.st_ino;
    e.node = std::move(node);
    entries.push_back(std::move(e));
  }

  std::vector<proc::DeviceSet::Entry> entries;
  std::vector<std::string> warnings;

 private:
  void warn(std::string text) { warnings.push_back(std::move(text)); }
  std::optional<uid_t> sim_owner_;
};

}  // namespace

proc::DeviceSet AmdSource::device_nodes(const std::string& dev_dir) const {
  std::string problem;
  const std::vector<Found> gpus = find_gpus(&problem);
  if (gpus.empty()) return {};
  std::string dir = dev_dir;
  if (!dir.ends_with('/')) dir += '/';
  NodeCheck check(proc::simulated_node_owner(dev_dir));
  // /dev/kfd: one node for every GPU (as nvidiactl is), opened by every ROCm process.
  check.check(proc::DeviceNode{proc::NodeKind::ctl, std::nullopt, dir + "kfd"},
              root_ + "/class/kfd/kfd/dev", false);
  for (const Found& f : gpus) {
    if (!f.kfd.render_minor) continue;
    const unsigned minor = *f.kfd.render_minor;
    proc::DeviceNode render{proc::NodeKind::gpu, minor, fmt::format("{}dri/renderD{}", dir, minor)};
    render.fdinfo = proc::read_amdgpu_fdinfo;
    check.check(render, fmt::format("{}/class/drm/renderD{}/dev", root_, minor), true);
    if (f.card) {
      // The card node is the same GPU's: counted under its render minor.
      proc::DeviceNode card{proc::NodeKind::gpu, minor, fmt::format("{}dri/card{}", dir, *f.card)};
      card.fdinfo = proc::read_amdgpu_fdinfo;
      check.check(card, fmt::format("{}/class/drm/card{}/dev", root_, *f.card), true);
    }
  }
  return proc::DeviceSet(std::move(check.entries), std::move(check.warnings));
}

}  // namespace gpureap::gpu
