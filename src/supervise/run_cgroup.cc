#include "supervise/run_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <utility>

#include "proc/run_id.h"

namespace gpureap::supervise {
namespace {

using proc::Cgroup2Mount;

// Where a run cgroup may go: beneath our own cgroup first (delegation under
// systemd or a container gives us exactly that subtree), then the mount root.
struct Placement {
  Cgroup2Mount mount;
  std::vector<std::string> parents;
};

Result<Placement> placement(std::string_view proc_root) {
  auto mount = proc::cgroup2_mount(proc_root);
  if (!mount) return fail("cgroup v2 is not mounted");
  Placement out{*mount, {}};
  const std::string own = proc::own_cgroup2_path(proc_root);
  if (!own.empty() && own != "/" && own != mount->root) {
    if (std::string dir = mount->dir_of(own); !dir.empty()) out.parents.push_back(dir);
  }
  out.parents.push_back(mount->mount_point);
  return out;
}

bool pid_alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

std::optional<pid_t> run_cgroup_owner(std::string_view name) {
  if (!name.starts_with(kRunCgroupPrefix)) return std::nullopt;
  return proc::run_owner(name.substr(kRunCgroupPrefix.size()));
}

Result<RunCgroup> RunCgroup::create(const std::string& dir_name, std::string_view proc_root) {
  auto where = placement(proc_root);
  if (!where) return std::unexpected(where.error());
  const Cgroup2Mount& mount = where->mount;
  std::string why;
  for (const auto& parent : where->parents) {
    std::string dir = parent + "/" + dir_name;
    if (::mkdir(dir.c_str(), 0755) != 0) {
      why = Error::from_errno("cannot create " + dir).message;
      continue;
    }
    UniqueFd procs(::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (!procs.valid()) {
      why = Error::from_errno("cannot open " + dir + "/cgroup.procs").message;
      ::rmdir(dir.c_str());
      continue;
    }
    std::string rel = dir.substr(mount.mount_point.size());
    std::string cg = mount.root == "/" ? rel : mount.root + rel;
    return RunCgroup(dir, cg, std::move(procs));
  }
  return fail(why);
}

std::vector<pid_t> RunCgroup::members() const {
  std::vector<pid_t> out;
  if (auto members = proc::cgroup_subtree_members(dir_))
    for (const auto& m : *members) out.push_back(m.pid);
  return out;
}

Result<void> RunCgroup::remove() {
  auto tree = proc::cgroup_subtree_dirs(dir_);
  if (!tree) return std::unexpected(tree.error());
  for (auto it = tree->rbegin(); it != tree->rend(); ++it) {
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT)
      return fail(Error::from_errno("cannot remove " + *it).message, errno);
  }
  return {};
}

std::vector<std::string> sweep_stale_run_cgroups(std::string_view proc_root) {
  std::vector<std::string> removed;
  auto where = placement(proc_root);
  if (!where) return removed;
  for (const auto& parent : where->parents) {
    DIR* d = ::opendir(parent.c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      auto owner = run_cgroup_owner(e->d_name);
      if (!owner || pid_alive(*owner)) continue;
      std::string path = parent + "/" + e->d_name;
      if (::rmdir(path.c_str()) == 0) removed.push_back(path);
    }
    ::closedir(d);
  }
  return removed;
}

}  // namespace gpureap::supervise
