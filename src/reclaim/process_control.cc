#include "reclaim/process_control.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <map>

#include "proc/cgroup_fs.h"
#include "proc/exiting.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"

namespace gpureap::reclaim {
namespace {

class SystemProcess final : public ControlledProcess {
 public:
  SystemProcess(proc::ProcessHandle handle, std::string proc_root)
      : id_(handle.id()), handle_(std::move(handle)), proc_root_(std::move(proc_root)) {}
  const proc::ProcessId& id() const override { return id_; }
  Result<void> signal(int sig) override { return handle_.signal(sig); }
  bool has_exited() const override { return handle_.has_exited(); }
  bool stopped() const override {
    return proc::parse_stat_state(proc::read_small_file(
               fmt::format("{}/{}/stat", proc_root_, handle_.id().pid))) == 'T';
  }
  bool exiting() const override { return proc::exiting(handle_.id().pid, proc_root_); }
  proc::ProcessHandle* handle() { return &handle_; }

 private:
  proc::ProcessId id_;
  proc::ProcessHandle handle_;
  std::string proc_root_;
};

// Every ControlledProcess a SystemProcessControl sees is one it opened.
proc::ProcessHandle* handle_of(ControlledProcess* p) {
  return static_cast<SystemProcess*>(p)->handle();
}

// Test hook: $GPUREAP_TEST_HOOK_BEFORE_SIGNAL names a FIFO; gpureap waits (at
// most 30 s) for one byte on it after planning and before opening any pidfd, so
// a test can make a target's pid be reused exactly in that window.
void wait_at_test_hook() {
  const char* path = std::getenv("GPUREAP_TEST_HOOK_BEFORE_SIGNAL");
  if (!path || !*path) return;
  int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, 30000) > 0) {
    char c;
    (void)!::read(fd, &c, 1);
  }
  ::close(fd);
}

std::string cgroup_path(const proc::Cgroup2Mount& mount, const std::string& dir) {
  if (!dir.starts_with(mount.mount_point)) return dir;
  std::string rel = dir.substr(mount.mount_point.size());
  std::string root = mount.root == "/" ? "" : mount.root;
  return root + (rel.empty() ? "/" : rel);
}

// Why the subtree at `dir` holds something other than live targets, or "" when
// every member is one. A member is a target when its pid is a live target's and
// that target's pidfd says it is alive (so its pid cannot have been reused), and,
// where the kernel has pidfs, the member's pidfs inode is the target's.
std::string foreign_member(const proc::Cgroup2Mount& mount, const std::string& dir,
                           std::span<ControlledProcess* const> live,
                           std::span<ControlledProcess* const> planned,
                           const std::string& proc_root) {
  auto members = proc::cgroup_subtree_members(dir);
  if (!members) return members.error().message;
  if (members->empty()) return "it has no members left";
  auto find = [](std::span<ControlledProcess* const> in, pid_t pid) {
    return std::find_if(in.begin(), in.end(),
                        [&](const ControlledProcess* x) { return x->id().pid == pid; });
  };
  for (const auto& m : *members) {
    std::string where = m.dir == dir ? "" : " (in " + cgroup_path(mount, m.dir) + ")";
    auto t = find(live, m.pid);
    if (t == live.end() && find(planned, m.pid) == planned.end())
      return fmt::format("pid {} ({}){} is not in the plan", m.pid, read_comm(m.pid, proc_root),
                         where);
    if (t == live.end() || (*t)->has_exited())
      return fmt::format(
          "pid {}{} is no longer the target that had it (it exited; the pid "
          "may have been reused)",
          m.pid, where);
    const std::uint64_t want = (*t)->id().pidfs_ino;
    if (want != 0 && proc::pidfs_inode(m.pid) != want)
      return fmt::format("pid {}{} is not the process that was planned", m.pid, where);
  }
  return "";
}

}  // namespace

std::string read_comm(pid_t pid, const std::string& proc_root) {
  std::string comm = proc::read_small_file(fmt::format("{}/{}/comm", proc_root, pid));
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

std::expected<ProcessPtr, proc::OpenFailure> SystemProcessControl::open(const Target& target,
                                                                        bool first) {
  if (first) wait_at_test_hook();
  auto handle = proc::ProcessHandle::open(target.id, proc_root_);
  if (!handle) return std::unexpected(handle.error());
  return std::make_unique<SystemProcess>(std::move(*handle), proc_root_);
}

std::vector<std::size_t> SystemProcessControl::wait_for_exit(
    std::span<ControlledProcess* const> live, util::Clock::time_point deadline) {
  std::vector<proc::ProcessHandle*> handles;
  handles.reserve(live.size());
  for (ControlledProcess* p : live) handles.push_back(handle_of(p));
  return proc::wait_for_exit(handles, deadline);
}

// cgroup.kill and cgroup.freeze act on a cgroup and every cgroup below it, and a
// pid in cgroup.procs is a bare number: a cgroup is killed whole only when its
// whole subtree holds nothing but live targets, checked once, then again while
// frozen (nothing forks in a frozen cgroup; a process moved or cloned into it
// still shows in cgroup.procs). Any other member leaves the targets to their
// pidfds, and the reason is noted.
CgroupKills SystemProcessControl::kill_whole_cgroups(std::span<ControlledProcess* const> live,
                                                     std::span<ControlledProcess* const> planned) {
  CgroupKills out;
  auto mount = proc::cgroup2_mount(proc_root_);
  if (!mount) return out;
  std::map<std::string, std::vector<std::size_t>> by_cgroup;
  for (std::size_t i = 0; i < live.size(); ++i) {
    std::string path = proc::cgroup2_path_of(live[i]->id().pid, proc_root_);
    if (!path.empty() && path != "/") by_cgroup[path].push_back(i);
  }
  for (auto& [path, members] : by_cgroup) {
    std::string dir = mount->dir_of(path);
    if (dir.empty() || !proc::cgroup_kill_available(dir)) continue;
    auto not_ours = foreign_member(*mount, dir, live, planned, proc_root_);
    if (not_ours.empty()) {
      const bool already_frozen = proc::cgroup_freeze_requested(dir);
      const bool froze = !already_frozen && proc::cgroup_freeze(dir, true).has_value();
      if (froze || already_frozen) proc::cgroup_wait_frozen(dir, std::chrono::milliseconds(100));
      if (!froze && !already_frozen)
        not_ours = "it could not be frozen for the check";
      else
        not_ours = foreign_member(*mount, dir, live, planned, proc_root_);
      if (not_ours.empty()) {
        auto killed = proc::cgroup_kill(dir);
        if (froze) (void)proc::cgroup_freeze(dir, false);
        out.killed.push_back(CgroupKill{path, members, killed});
        continue;
      }
      if (froze) (void)proc::cgroup_freeze(dir, false);
    }
    out.notes.push_back(fmt::format(
        "cgroup.kill not used for {}: {}; its targets were signalled one by one through pidfds",
        path, not_ours));
  }
  return out;
}

CgroupSweep SystemProcessControl::sweep_cgroup(const std::string& dir,
                                               std::chrono::steady_clock::time_point deadline) {
  CgroupSweep out;
  out.through_cgroup_kill = proc::cgroup_kill_available(dir);
  out.sent = proc::cgroup_kill_all(dir, deadline, proc_root_);
  return out;
}

}  // namespace gpureap::reclaim
