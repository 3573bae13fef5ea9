#include "reclaim/escalation.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <map>
#include <set>

#include "proc/cgroup_fs.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/process_handle.h"

namespace gpureap::reclaim {
namespace {

struct Tracked {
  proc::ProcessHandle handle;
  std::string comm;
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::size_t action = kNone;  // index of the latest action for this target
  bool exited = false;
};

std::string read_comm(pid_t pid, const std::string& proc_root) {
  std::string comm = proc::read_small_file(fmt::format("{}/{}/comm", proc_root, pid));
  if (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

char read_state(pid_t pid, const std::string& proc_root) {
  return proc::parse_stat_state(proc::read_small_file(fmt::format("{}/{}/stat", proc_root, pid)));
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

class Engine {
 public:
  Engine(const EscalationOptions& options, Clock::time_point t0) : options_(options), t0_(t0) {}

  double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  bool interrupted() const { return options_.interrupted && options_.interrupted->load(); }

  // Opens a verified pidfd for every target; the ones that are gone or reused
  // are recorded and never signalled.
  void open_all(const std::vector<proc::ProcessId>& targets) {
    wait_at_test_hook();
    for (const auto& id : targets) {
      std::string comm = read_comm(id.pid, options_.proc_root);
      auto handle = proc::ProcessHandle::open(id, options_.proc_root);
      if (!handle) {
        result_.actions.push_back(Action{id, comm, "none", "", now(), std::nullopt,
                                         describe_open_failure(handle.error())});
        continue;
      }
      tracked_.push_back(Tracked{std::move(*handle), comm, Tracked::kNone, false});
    }
  }

  void send_all(int sig, const std::string& name) {
    for (auto& t : tracked_) {
      if (t.exited) continue;
      if (sig == SIGTERM && read_state(t.handle.id().pid, options_.proc_root) == 'T')
        (void)t.handle.signal(SIGCONT);  // a stopped process cannot act on SIGTERM
      record_signal(t, name, "pidfd", t.handle.signal(sig));
    }
  }

  // SIGKILL through cgroup.kill for a cgroup only when its whole subtree (cgroup.kill
  // and cgroup.freeze act on every cgroup below too) holds nothing but live targets,
  // checked once, then again while the subtree is frozen (nothing forks in a frozen
  // cgroup; a process moved or cloned into it still shows in cgroup.procs). Any other
  // member leaves the targets to their pidfds, and the reason is noted.
  void kill_whole_cgroups() {
    if (!options_.use_cgroup_kill) return;
    auto mount = proc::cgroup2_mount(options_.proc_root);
    if (!mount) return;
    std::map<std::string, std::vector<Tracked*>> by_cgroup;
    for (auto& t : tracked_) {
      if (t.exited) continue;
      std::string path = proc::cgroup2_path_of(t.handle.id().pid, options_.proc_root);
      if (!path.empty() && path != "/") by_cgroup[path].push_back(&t);
    }
    for (auto& [path, members] : by_cgroup) {
      std::string dir = mount->dir_of(path);
      if (dir.empty() || !proc::cgroup_kill_available(dir)) continue;
      auto not_ours = foreign_member(*mount, dir);
      if (not_ours.empty()) {
        const bool already_frozen = proc::cgroup_freeze_requested(dir);
        const bool froze = !already_frozen && proc::cgroup_freeze(dir, true).has_value();
        if (froze || already_frozen) proc::cgroup_wait_frozen(dir, std::chrono::milliseconds(100));
        if (!froze && !already_frozen)
          not_ours = "it could not be frozen for the check";
        else
          not_ours = foreign_member(*mount, dir);
        if (not_ours.empty()) {
          auto killed = proc::cgroup_kill(dir);
          if (froze) (void)proc::cgroup_freeze(dir, false);
          for (Tracked* t : members) record_signal(*t, "SIGKILL", "cgroup.kill " + path, killed);
          continue;
        }
        if (froze) (void)proc::cgroup_freeze(dir, false);
      }
      result_.notes.push_back(fmt::format(
          "cgroup.kill not used for {}: {}; its targets were signalled one by one through pidfds",
          path, not_ours));
    }
  }

  // Why the subtree at `dir` holds something other than live targets, or "" when
  // every member is one. A member is a target when its pid is a target's and that
  // target's pidfd says it is alive (so its pid cannot have been reused), and, where
  // the kernel has pidfs, the member's pidfs inode is the target's.
  std::string foreign_member(const proc::Cgroup2Mount& mount, const std::string& dir) const {
    auto members = proc::cgroup_subtree_members(dir);
    if (!members) return members.error().message;
    if (members->empty()) return "it has no members left";
    for (const auto& m : *members) {
      auto t = std::find_if(tracked_.begin(), tracked_.end(), [&](const Tracked& x) {
        return x.handle.id().pid == m.pid;
      });
      std::string where = m.dir == dir ? "" : " (in " + cgroup_path(mount, m.dir) + ")";
      if (t == tracked_.end())
        return fmt::format("pid {} ({}){} is not in the plan", m.pid,
                           read_comm(m.pid, options_.proc_root), where);
      if (t->exited || t->handle.has_exited())
        return fmt::format("pid {}{} is no longer the target that had it (it exited; the pid "
                           "may have been reused)",
                           m.pid, where);
      const std::uint64_t want = t->handle.id().pidfs_ino;
      if (want != 0 && proc::pidfs_inode(m.pid) != want)
        return fmt::format("pid {}{} is not the process that was planned", m.pid, where);
    }
    return "";
  }

  static std::string cgroup_path(const proc::Cgroup2Mount& mount, const std::string& dir) {
    if (!dir.starts_with(mount.mount_point)) return dir;
    std::string rel = dir.substr(mount.mount_point.size());
    std::string root = mount.root == "/" ? "" : mount.root;
    return root + (rel.empty() ? "/" : rel);
  }

  void kill_rest() {
    for (auto& t : tracked_)
      if (!t.exited &&
          (t.action == Tracked::kNone || result_.actions[t.action].signal != "SIGKILL"))
        record_signal(t, "SIGKILL", "pidfd", t.handle.signal(SIGKILL));
  }

  // Event-driven wait on every live pidfd; slices of at most 50 ms so Ctrl-C is
  // noticed promptly. Returns true when all have exited.
  bool wait_exits(Clock::time_point deadline) {
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<Tracked*> who;
      for (auto& t : tracked_)
        if (!t.exited) {
          fds.push_back({t.handle.fd(), POLLIN, 0});
          who.push_back(&t);
        }
      if (fds.empty()) return true;
      if (interrupted()) {
        result_.interrupted = true;
        return false;
      }
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      int r = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<long>(left, 50)));
      if (r <= 0) continue;
      for (std::size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents & (POLLIN | POLLHUP)) mark_exited(*who[i]);
    }
  }

  EscalationResult finish() {
    for (auto& t : tracked_) {
      if (t.exited) continue;
      result_.survivors.push_back(t.handle.id());
      if (t.action == Tracked::kNone) continue;
      auto& a = result_.actions[t.action];
      if (a.result.empty()) a.result = "still running";
    }
    return std::move(result_);
  }

  bool any_alive() const {
    return std::any_of(tracked_.begin(), tracked_.end(),
                       [](const Tracked& t) { return !t.exited; });
  }
  void mark_already_exited() {
    for (auto& t : tracked_)
      if (!t.exited && t.handle.has_exited()) mark_exited(t);
  }

 private:
  void record_signal(Tracked& t, const std::string& name, const std::string& via,
                     const Result<void>& sent) {
    if (t.action < result_.actions.size() && result_.actions[t.action].result.empty() &&
        result_.actions[t.action].id == t.handle.id())
      result_.actions[t.action].result = "still running after grace";
    Action a{t.handle.id(), t.comm, name, via, now(), std::nullopt, ""};
    if (!sent) {
      if (t.handle.has_exited()) {
        a.result = "already exited";
        t.exited = true;
        a.exited_at = now();
      } else {
        a.result = "signal failed: " + sent.error().message;
      }
    }
    result_.actions.push_back(std::move(a));
    t.action = result_.actions.size() - 1;
  }

  void mark_exited(Tracked& t) {
    t.exited = true;
    if (t.action < result_.actions.size() && result_.actions[t.action].id == t.handle.id()) {
      auto& a = result_.actions[t.action];
      if (!a.exited_at) a.exited_at = now();
      a.result = "exited";
    }
  }

  static std::string describe_open_failure(const proc::OpenFailure& e) {
    switch (e.kind) {
      case proc::OpenError::gone:
        return "already gone";
      case proc::OpenError::reused:
        return "pid reused by another process: not signalled";
      case proc::OpenError::no_permission:
        return "permission denied: not signalled";
      case proc::OpenError::unsupported:
        return "no pidfd support in this kernel: not signalled";
      case proc::OpenError::other:
        break;
    }
    return "not signalled: " + e.message;
  }

  const EscalationOptions& options_;
  Clock::time_point t0_;
  std::vector<Tracked> tracked_;
  EscalationResult result_;
};

}  // namespace

EscalationResult terminate(const std::vector<proc::ProcessId>& targets,
                           const EscalationOptions& options, Clock::time_point t0) {
  Engine engine(options, t0);
  engine.open_all(targets);

  // 1. SIGTERM (with SIGCONT for stopped processes) to all at once, then wait
  //    on the pidfds until they exit or the grace period ends.
  if (options.grace.count() > 0) {
    engine.send_all(SIGTERM, "SIGTERM");
    if (engine.wait_exits(Clock::now() + options.grace)) return engine.finish();
    if (engine.interrupted()) return engine.finish();
  }
  // 2. SIGKILL the rest: whole cgroups atomically where possible, then pidfds.
  engine.mark_already_exited();
  if (engine.any_alive()) {
    engine.kill_whole_cgroups();
    engine.kill_rest();
    engine.wait_exits(Clock::now() + options.kill_wait);
  }
  return engine.finish();
}

}  // namespace gpureap::reclaim
