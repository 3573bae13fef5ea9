#include "proc/holder_scan.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/magic.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <system_error>
#include <thread>

#include "proc/lineage.h"
#include "proc/maps_query.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/process_handle.h"
#include "proc/process_table.h"
#include "proc/run_id.h"

namespace gpureap::proc {

namespace {

/// What reading one /proc source of a process gave.
enum class Outcome { entries, empty, gone, denied, failed };

Outcome outcome_of(int err) {
  if (process_gone(err)) return Outcome::gone;
  if (err == EACCES || err == EPERM) return Outcome::denied;
  return Outcome::failed;
}

struct Hits {
  bool by_fd = false;
  bool by_mapping = false;
  std::vector<const DeviceNode*> nodes;
  std::vector<DrmClient> drm_clients;  // one per client id (dup'd fds share one)
  void add(const DeviceNode* node) {
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  }
  void add(DrmClient client) {
    const bool seen = client.client_id &&
                      std::any_of(drm_clients.begin(), drm_clients.end(), [&](const DrmClient& c) {
                        return c.client_id == client.client_id && c.pdev == client.pdev;
                      });
    if (!seen) drm_clients.push_back(std::move(client));
  }
};

/// What every worker shares, read-only.
struct ScanContext {
  const ScanOptions& options;
  const DeviceSet& devices;
  int proc_fd;
  double uptime_s;  // of the machine, when the scan started
  double clk_tck;
  bool is_procfs;  // the getdents shortcut relies on procfs filling each reply
  mutable std::atomic<bool> procmap_query_works{true};
};

std::string_view format_pid(pid_t pid, char (&buf)[32]) {
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf - 1, pid);
  *end = '\0';
  return {buf, static_cast<std::size_t>(end - buf)};
}

/// Scans processes one by one; each worker thread owns one (and its buffers).
class ProcessScanner {
 public:
  explicit ProcessScanner(const ScanContext& ctx) : ctx_(ctx) {}

  void scan(pid_t pid);
  /// What `pid` holds now (its fd table; its maps too when `maps`), without
  /// describing it; nullopt when it is gone or cannot be read.
  std::optional<std::set<DeviceNode>> held(pid_t pid, bool maps);
  /// Describes a process with no device evidence (found_by stays empty).
  void describe_only(pid_t pid);
  bool has_run_reaper_ancestor(pid_t ppid);
  pid_t run_command_left_to_init(pid_t pid, const std::string& run_id);

  std::vector<Holder> holders;
  std::vector<ScanProblem> problems;
  std::size_t scanned = 0;

 private:
  Outcome scan_fds(int dirfd, const char* path, Hits& hits);
  Outcome scan_fd_table(int fd_dir, Hits& hits);
  const DeviceNode* procfs_capability(int fd_dir, const char* name, const struct stat& st);
  Outcome scan_maps(int dirfd, const char* path, Hits& hits);
  Outcome scan_live_threads(int dirfd, pid_t pid, Hits& hits);
  void describe(int dirfd, pid_t pid, std::optional<StatInfo> stat, const Hits& hits,
                bool zombie_leader);
  // describe's steps.
  bool read_status_and_command(int dirfd, const StatInfo& stat, Holder& h);
  bool group_leader_exists(pid_t pid, const Holder& h);
  void read_reparenting(pid_t pid, Holder& h);
  void read_run_membership(int dirfd, pid_t pid, Holder& h);
  void problem(pid_t pid, std::string what) { problems.push_back({pid, std::move(what)}); }
  /// outcome_of, noting a descriptor limit reached (ScanResult::out_of_descriptors).
  Outcome outcome(int err) {
    note(err);
    return outcome_of(err);
  }
  void note(int err) {
    if (err == EMFILE || err == ENFILE) out_of_descriptors = true;
  }

 public:
  bool out_of_descriptors = false;

 private:

  const ScanContext& ctx_;
  ReadBuffer file_;
  ReadBuffer dents_;
  std::vector<MapsFileId> mapped_;
};

Outcome ProcessScanner::scan_fds(int dirfd, const char* path, Hits& hits) {
  UniqueFd fd_dir(open_dir_at(dirfd, path));
  if (!fd_dir.valid()) return outcome(errno);
  return scan_fd_table(fd_dir.get(), hits);
}

Outcome ProcessScanner::scan_fd_table(int fd_dir, Hits& hits) {
  std::size_t count = 0;
  int err = for_each_dirent(
      fd_dir, dents_,
      [&](std::string_view name) {
        ++count;
        // d_name is NUL-terminated in the getdents buffer. Following the magic
        // link stats the open file itself; AT_STATX_DONT_SYNC answers from the
        // cached inode, so an fd on a dead NFS server cannot hang the scan.
        struct statx stx {};
        if (::statx(fd_dir, name.data(), AT_STATX_DONT_SYNC, STATX_TYPE | STATX_INO, &stx) != 0)
          return;  // closed meanwhile
        struct stat st {};
        st.st_mode = stx.stx_mode;
        st.st_ino = stx.stx_ino;
        st.st_dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
        st.st_rdev = makedev(stx.stx_rdev_major, stx.stx_rdev_minor);
        const DeviceNode* node = ctx_.devices.match_fd(st);
        if (!node) node = procfs_capability(fd_dir, name.data(), st);
        if (node) {
          hits.by_fd = true;
          hits.add(node);
          // A vendor's DRM node: its fdinfo says which client and how much memory
          // (nvtop's processinfo_sweep_fdinfos). ../fdinfo is this fd table's sibling.
          if (node->fdinfo) {
            const std::string path = std::string("../fdinfo/") + name.data();
            if (read_file_at(fd_dir, path.c_str(), file_) == 0)
              if (auto client = node->fdinfo(file_.view())) hits.add(std::move(*client));
          }
        }
      },
      /*short_read_is_end=*/ctx_.is_procfs);
  if (err != 0) return outcome(err);
  return count > 0 ? Outcome::entries : Outcome::empty;
}

const DeviceNode* ProcessScanner::procfs_capability(int fd_dir, const char* name,
                                                    const struct stat& st) {
  // A MIG capability file opened through another mount of procfs (a container's own
  // /proc): the same inode number on another device. Its link names the file as the
  // process sees it; the link is read only for such a candidate, never per fd.
  const DeviceNode* candidate = ctx_.devices.procfs_capability_candidate(st);
  if (!candidate) return nullptr;
  char target[512];
  const ssize_t n = ::readlinkat(fd_dir, name, target, sizeof target);
  if (n <= 0 || static_cast<std::size_t>(n) == sizeof target) return nullptr;
  const auto access =
      mig_access_of_capability_path(std::string_view(target, static_cast<std::size_t>(n)));
  return access && access == candidate->mig ? candidate : nullptr;
}

Outcome ProcessScanner::scan_maps(int dirfd, const char* path, Hits& hits) {
  UniqueFd maps(::openat(dirfd, path, O_RDONLY | O_CLOEXEC));
  if (!maps.valid()) return outcome(errno);
  mapped_.clear();
  if (int err = read_mapped_files(maps.get(), file_, ctx_.procmap_query_works, mapped_); err != 0)
    return outcome(err);
  for (const MapsFileId& id : mapped_) {
    if (const DeviceNode* node = ctx_.devices.match_mapping(id.dev_major, id.dev_minor, id.inode)) {
      hits.by_mapping = true;
      hits.add(node);
    }
  }
  return mapped_.empty() ? Outcome::empty : Outcome::entries;
}

// A zombie leader's own fd table and mm are gone, but its live threads still
// share (or own) theirs: read them under task/<tid>/. Threads normally share
// one fd table and always one mm, so this runs only for zombie leaders.
Outcome ProcessScanner::scan_live_threads(int dirfd, pid_t pid, Hits& hits) {
  UniqueFd task(open_dir_at(dirfd, "task"));
  if (!task.valid()) return outcome(errno);
  std::vector<pid_t> tids;
  if (int err = list_pids(task.get(), dents_, tids); err != 0) return outcome(err);
  bool denied = false, read_any = false, maps_read = !ctx_.options.read_maps;
  for (pid_t tid : tids) {
    if (tid == pid) continue;
    std::string fd_path = fmt::format("{}/fd", tid);
    Outcome fds = scan_fds(task.get(), fd_path.c_str(), hits);
    if (fds == Outcome::denied) denied = true;
    if (fds == Outcome::entries || fds == Outcome::empty) read_any = true;
    if (!maps_read) {
      std::string maps_path = fmt::format("{}/maps", tid);
      Outcome maps = scan_maps(task.get(), maps_path.c_str(), hits);
      if (maps == Outcome::denied) denied = true;
      maps_read = maps == Outcome::entries;
    }
  }
  if (read_any) return Outcome::entries;
  return denied ? Outcome::denied : Outcome::gone;
}

void ProcessScanner::scan(pid_t pid) {
  // One path walk reaches the fd table: "PID/fd". The rest is reached from it
  // through "..", the /proc/PID dentry of this very process (not a new lookup by
  // number), so a pid reused meanwhile is never mixed in: under an exited
  // process's directory every lookup fails with ENOENT. A process without a hit
  // costs: open fd/, getdents, a statx per fd, open ../maps, the maps query.
  char name[32], fd_path[32];
  std::string_view digits = format_pid(pid, name);
  std::memcpy(fd_path, digits.data(), digits.size());
  std::memcpy(fd_path + digits.size(), "/fd", 4);
  UniqueFd fd_dir(open_dir_at(ctx_.proc_fd, fd_path));
  if (!fd_dir.valid()) {
    const int err = errno;
    note(err);
    if (process_gone(err)) return;
    if (err != EACCES && err != EPERM)
      return problem(pid, Error::from_errno("cannot open its fd table", err).message);
  }
  ++scanned;
  UniqueFd dir;  // /proc/PID, opened when needed
  auto open_pid_dir = [&]() {
    dir.reset(fd_dir.valid() ? open_dir_at(fd_dir.get(), "..") : open_dir_at(ctx_.proc_fd, name));
    if (!dir.valid()) note(errno);
    if (!dir.valid() && !process_gone(errno))
      problem(pid, Error::from_errno("cannot open its /proc directory").message);
    return dir.valid();
  };

  Hits hits;
  std::optional<StatInfo> stat;
  bool zombie_leader = false;
  const Outcome fds = fd_dir.valid() ? scan_fd_table(fd_dir.get(), hits) : Outcome::denied;
  if (fds == Outcome::gone) return;
  if (fds != Outcome::entries) {
    // Kernel threads and zombies have no fd table (and no mm). The stat read is
    // needed only now, to tell them from a live process that closed its fds;
    // with EACCES it keeps kernel threads and zombies out of the problems.
    if (!open_pid_dir()) return;
    if (int err = read_file_at(dir.get(), "stat", file_); err != 0) {
      note(err);
      if (!process_gone(err)) problem(pid, Error::from_errno("cannot read stat", err).message);
      return;
    }
    auto parsed = parse_stat(file_.view());
    if (!parsed) return problem(pid, parsed.error().message);
    stat = std::move(*parsed);
    if (stat->is_kernel_thread()) return;
    if (stat->state == 'Z') {
      if (stat->num_threads <= 1) return;  // every thread exited: fds and mappings are closed
      zombie_leader = true;
      const Outcome threads = scan_live_threads(dir.get(), pid, hits);
      if (threads == Outcome::gone) return;
      if (threads == Outcome::denied && hits.nodes.empty())
        return problem(pid,
                       "zombie leader: its threads' fd tables are unreadable (permission denied)");
    }
  }
  if (fds == Outcome::denied && !zombie_leader)
    return problem(pid, "fd table and memory maps unreadable (permission denied)");
  if (fds == Outcome::failed) problem(pid, "fd table unreadable");

  if (ctx_.options.read_maps && !zombie_leader) {
    const Outcome maps = fd_dir.valid() ? scan_maps(fd_dir.get(), "../maps", hits)
                                        : scan_maps(dir.get(), "maps", hits);
    if (maps == Outcome::gone) return;
    if (maps == Outcome::denied) problem(pid, "memory maps unreadable (permission denied)");
    if (maps == Outcome::failed) problem(pid, "memory maps unreadable");
  }
  if (hits.nodes.empty()) return;
  if (!dir.valid() && !open_pid_dir()) return;
  describe(dir.get(), pid, std::move(stat), hits, zombie_leader);
}

// The topmost process of `pid`'s ancestry (itself included) whose environment carries
// `run_id`, when its parent is init: the command of a run whose gpureap and reaper are
// gone; 0 when the chain of that id ends under a live parent without it.
pid_t ProcessScanner::run_command_left_to_init(pid_t pid, const std::string& run_id) {
  pid_t top = 0, top_parent = 0;
  for (int step = 0; pid > 1 && step < 64; ++step) {
    if (read_file_at(ctx_.proc_fd, fmt::format("{}/environ", pid).c_str(), file_) != 0) break;
    if (run_id_from_environ(file_.view()).value_or("") != run_id) break;
    if (read_file_at(ctx_.proc_fd, fmt::format("{}/stat", pid).c_str(), file_) != 0) break;
    auto st = parse_stat(file_.view());
    if (!st || st->ppid == pid) break;
    top = pid;
    top_parent = st->ppid;
    pid = st->ppid;
  }
  return top_parent == 1 ? top : 0;
}

// True when a live run's supervisor (its gpureap or reaper, by the pid and start time the
// run recorded: ScanOptions::run_supervisors) is among `ppid` and its ancestors (at most
// 64 steps: a loop in a racing process tree ends there). A process's name says nothing:
// anyone may call a process gpureap-reaper (W4-06).
bool ProcessScanner::has_run_reaper_ancestor(pid_t ppid) {
  const auto& live = ctx_.options.run_supervisors;
  if (live.empty()) return false;
  for (int step = 0; ppid > 1 && step < 64; ++step) {
    std::string path = fmt::format("{}/stat", ppid);
    if (read_file_at(ctx_.proc_fd, path.c_str(), file_) != 0) return false;
    auto st = parse_stat(file_.view());
    if (!st) return false;
    if (st->state != 'Z' && std::ranges::any_of(live, [&](const ProcessId& id) {
          return id.pid == ppid && id.start_time == st->start_time;
        }))
      return true;
    if (st->ppid == ppid) return false;
    ppid = st->ppid;
  }
  return false;
}

std::optional<std::set<DeviceNode>> ProcessScanner::held(pid_t pid, bool maps) {
  char name[32], fd_path[32];
  std::string_view digits = format_pid(pid, name);
  std::memcpy(fd_path, digits.data(), digits.size());
  std::memcpy(fd_path + digits.size(), "/fd", 4);
  UniqueFd fd_dir(open_dir_at(ctx_.proc_fd, fd_path));
  if (!fd_dir.valid()) return std::nullopt;
  Hits hits;
  const Outcome fds = scan_fd_table(fd_dir.get(), hits);
  if (fds != Outcome::entries && fds != Outcome::empty) return std::nullopt;
  if (maps) {
    const Outcome m = scan_maps(fd_dir.get(), "../maps", hits);
    if (m != Outcome::entries && m != Outcome::empty) return std::nullopt;
  }
  std::set<DeviceNode> nodes;
  for (const DeviceNode* node : hits.nodes) nodes.insert(*node);
  return nodes;
}

void ProcessScanner::describe_only(pid_t pid) {
  char name[32];
  format_pid(pid, name);
  UniqueFd dir(open_dir_at(ctx_.proc_fd, name));
  if (!dir.valid()) return;  // gone (or invisible): nothing to describe
  describe(dir.get(), pid, std::nullopt, Hits{}, false);
}

// The owner, signal dispositions, cgroup, command line, age and threads; false when
// the process exited meanwhile.
bool ProcessScanner::read_status_and_command(int dirfd, const StatInfo& stat, Holder& h) {
  if (read_file_at(dirfd, "status", file_) != 0) return false;
  StatusInfo status = parse_status(file_.view());
  if (status.real_uid) {
    h.uid = *status.real_uid;
  } else if (struct stat st{}; ::fstat(dirfd, &st) == 0) {
    h.uid = st.st_uid;
  }
  h.nspid = std::move(status.nspid);
  h.pinned_host_bytes = status.resident_pinned_bytes();
  h.ignores_sighup = status.ignores_sighup();

  if (read_file_at(dirfd, "cgroup", file_) == 0) {
    h.cgroup = pick_cgroup_path(parse_cgroup(file_.view()));
    h.container = container_hint(h.cgroup);
  }
  if (read_file_at(dirfd, "cmdline", file_) == 0) {
    h.cmdline = format_cmdline(file_.view());
    h.argv = split_cmdline(file_.view());
    h.engine = recognise_engine_cmdline(file_.view(), h.comm);
  } else {
    h.engine = recognise_engine({}, h.comm);
  }
  if (h.cmdline.empty()) h.cmdline = "[" + h.comm + "]";
  if (ctx_.uptime_s > 0)
    h.age_seconds =
        std::max(0.0, ctx_.uptime_s - static_cast<double>(stat.start_time) / ctx_.clk_tck);
  h.threads = read_thread_states_at(dirfd);
  return true;
}

// Whether the leader of the process group of `h` (not `h` itself) is still there.
bool ProcessScanner::group_leader_exists(pid_t pid, const Holder& h) {
  if (h.pgid <= 0 || h.pgid == pid) return true;
  // A dead leader its parent has not reaped yet (a zombie: init in a container may
  // be slow) is gone all the same; only a zombie with live threads still runs.
  char name[32];
  std::string path = fmt::format("{}/stat", format_pid(h.pgid, name));
  if (read_file_at(ctx_.proc_fd, path.c_str(), file_) == 0)
    if (auto leader = parse_stat(file_.view()))
      return leader->state != 'Z' || leader->num_threads > 1;
  return false;
}

// Whether `h` was re-parented (proc/lineage.h, reparent_reason), read from its group
// leader and its parent.
void ProcessScanner::read_reparenting(pid_t pid, Holder& h) {
  const bool leader_exists = group_leader_exists(pid, h);
  std::optional<pid_t> parent_pgid, parent_sid;
  std::string parent_comm;
  bool parent_is_subreaper = false;
  if (h.ppid > 0) {
    std::string path = fmt::format("{}/stat", h.ppid);
    if (read_file_at(ctx_.proc_fd, path.c_str(), file_) == 0)
      if (auto parent = parse_stat(file_.view())) {
        parent_pgid = parent->pgid;
        parent_sid = parent->sid;
        parent_comm = std::move(parent->comm);
      }
    // Only a group whose leader is gone can make the parent an adopter; then one
    // more read: is the parent the init of a PID namespace (a container's)?
    if (!leader_exists && parent_pgid && *parent_pgid != h.pgid) {
      parent_is_subreaper = is_subreaper_name(parent_comm);
      path = fmt::format("{}/status", h.ppid);
      // A PID namespace's init adopts orphans, unless it is a shell of the holder's own
      // session: `docker run -it IMAGE bash` makes the shell PID 1, and its pipelines
      // are its own jobs, not adoptees (W3-03). Only the agent's witness of a dead
      // original parent can say otherwise (proc/lineage.h).
      if (!parent_is_subreaper && read_file_at(ctx_.proc_fd, path.c_str(), file_) == 0) {
        auto parent_status = parse_status(file_.view());
        parent_is_subreaper = parent_status.nspid.size() > 1 && parent_status.nspid.back() == 1 &&
                              !(is_session_tool(parent_comm) && parent_sid == h.sid);
      }
    }
  }
  h.group_leader_gone = h.pgid > 0 && h.pgid != pid && !leader_exists;
  h.reparent_reason = reparent_reason(pid, h.ppid, h.pgid, h.sid, leader_exists, parent_pgid,
                                      parent_sid, parent_comm, parent_is_subreaper);
  h.reparented = !h.reparent_reason.empty();
}

// A process of a `gpureap run`. Alive: the run's gpureap-reaper (its child
// subreaper, PR_SET_PDEATHSIG'd to its gpureap) is an ancestor, so the run tears it
// down; read from the process tree, valid across PID namespaces, and not claimed by
// an environment variable. Gone: it names a run and no live run is above it; the
// run's own cgroup makes that owned evidence, GPUREAP_RUN_ID in its environment
// (inherited by every descendant, writable by anyone) only a hint (proc/lineage.h).
void ProcessScanner::read_run_membership(int dirfd, pid_t pid, Holder& h) {
  if (h.container.starts_with("gpureap-run:")) {
    h.run_id = h.container.substr(12);
    h.run_in_cgroup = true;
  }
  if (h.run_id.empty() && read_file_at(dirfd, "environ", file_) == 0)
    h.run_id = run_id_from_environ(file_.view()).value_or("");
  h.run_alive = has_run_reaper_ancestor(h.ppid);
  h.run_gone = !h.run_id.empty() && !h.run_alive;
  if (h.run_gone && !h.run_in_cgroup) h.run_left_to_init = run_command_left_to_init(pid, h.run_id);
}

// Fills a Holder for a process that holds a node. Every read goes through the
// process's own /proc directory fd: if the process exits, the reads fail rather
// than describe a newcomer that reused the pid.
void ProcessScanner::describe(int dirfd, pid_t pid, std::optional<StatInfo> stat, const Hits& hits,
                              bool zombie_leader) {
  if (!stat) {
    if (read_file_at(dirfd, "stat", file_) != 0) return;  // exited
    auto parsed = parse_stat(file_.view());
    if (!parsed) return problem(pid, parsed.error().message);
    stat = std::move(*parsed);
  }
  Holder h;
  h.id = ProcessId{pid, stat->start_time};
  h.state = stat->state;
  h.zombie_leader = zombie_leader;
  h.ppid = stat->ppid;
  h.pgid = stat->pgid;
  h.sid = stat->sid;
  h.comm = stat->comm;
  if (!read_status_and_command(dirfd, *stat, h)) return;
  read_reparenting(pid, h);
  read_run_membership(dirfd, pid, h);

  // Pin the identity exactly where the kernel allows it (pidfs inode). The
  // pidfd is opened while our /proc/PID directory fd still reads: the process
  // lived throughout, so the inode is its own, not a successor's.
  std::uint64_t ino = pidfs_inode(pid);
  if (ino != 0 && read_file_at(dirfd, "stat", file_) == 0) h.id.pidfs_ino = ino;

  if (hits.by_fd) h.found_by.insert(FoundBy::fd);
  if (hits.by_mapping) h.found_by.insert(FoundBy::mapping);
  h.drm_clients = hits.drm_clients;
  for (const DeviceNode* node : hits.nodes) {
    h.nodes.insert(*node);
    if (node->kind == NodeKind::gpu && node->minor) h.gpu_minors.insert(*node->minor);
    if (node->kind == NodeKind::mig_cap && node->mig) h.mig_access.insert(*node->mig);
  }
  holders.push_back(std::move(h));
}

bool is_procfs(int fd) {
  struct statfs fs {};
  return ::fstatfs(fd, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
}

double read_uptime(int proc_fd) {
  ReadBuffer buf;
  if (read_file_at(proc_fd, "uptime", buf) != 0) return 0;
  std::string text(buf.view());
  return std::strtod(text.c_str(), nullptr);
}

/// User names by uid, looked up once per uid and scan.
class UserNames {
 public:
  const std::string& name(uid_t uid) {
    auto it = cache_.find(uid);
    if (it != cache_.end()) return it->second;
    return cache_.emplace(uid, user_name(uid)).first->second;
  }

 private:
  std::map<uid_t, std::string> cache_;
};

}  // namespace

std::vector<Holder> describe_processes(const std::vector<pid_t>& pids,
                                       const std::string& proc_root) {
  std::vector<Holder> out;
  if (pids.empty()) return out;  // the usual case: nothing to open /proc for
  UniqueFd proc_fd(open_dir_at(AT_FDCWD, proc_root.c_str()));
  if (!proc_fd.valid()) return out;
  static const DeviceSet kNoDevices;
  ScanOptions options;
  options.proc_root = proc_root;
  options.devices = &kNoDevices;
  const ScanContext ctx{options,
                        kNoDevices,
                        proc_fd.get(),
                        read_uptime(proc_fd.get()),
                        static_cast<double>(::sysconf(_SC_CLK_TCK)),
                        is_procfs(proc_fd.get()),
                        {true}};
  ProcessScanner scanner(ctx);
  for (pid_t p : pids) scanner.describe_only(p);
  UserNames users;
  for (auto& h : scanner.holders) {
    h.user = users.name(h.uid);
    out.push_back(std::move(h));
  }
  return out;
}

std::set<pid_t> changed_holders(const ScanOptions& options,
                                const std::vector<const Holder*>& holders) {
  std::set<pid_t> changed;
  if (holders.empty()) return changed;
  UniqueFd proc_fd(open_dir_at(AT_FDCWD, options.proc_root.c_str()));
  if (!proc_fd.valid() || options.devices == nullptr) {
    for (const Holder* h : holders) changed.insert(h->id.pid);
    return changed;
  }
  const ScanContext ctx{options,
                        *options.devices,
                        proc_fd.get(),
                        0,
                        static_cast<double>(::sysconf(_SC_CLK_TCK)),
                        is_procfs(proc_fd.get()),
                        {true}};
  ProcessScanner scanner(ctx);
  for (const Holder* h : holders) {
    const bool maps = options.read_maps && h->found_by.contains(FoundBy::mapping);
    auto now = scanner.held(h->id.pid, maps);
    // Found by its fds alone: a mapping it may have made since is the full scan's.
    if (!now || *now != h->nodes) changed.insert(h->id.pid);
  }
  return changed;
}

ScanResult scan_holders(const ScanOptions& options) {
  ScanResult result;
  if (options.devices == nullptr || options.devices->empty()) return result;

  UniqueFd proc_fd(open_dir_at(AT_FDCWD, options.proc_root.c_str()));
  if (!proc_fd.valid()) {
    result.out_of_descriptors = errno == EMFILE || errno == ENFILE;
    result.problems.push_back({0, Error::from_errno("cannot open " + options.proc_root).message});
    return result;
  }
  std::vector<pid_t> pids;
  if (options.only_pids) {
    pids = *options.only_pids;
  } else {
    ReadBuffer scratch;
    if (int err = list_pids(proc_fd.get(), scratch, pids); err != 0) {
      result.problems.push_back(
          {0, Error::from_errno("cannot list " + options.proc_root, err).message});
      return result;
    }
  }
  // The process table from this same listing (ScanOptions::with_table), every process's
  // stat read after the scan: a caller that needs both lists /proc once.
  std::vector<pid_t> listed;
  if (options.with_table && !options.only_pids) listed = pids;
  std::erase_if(pids, [&](pid_t p) { return options.exclude.contains(p); });

  const ScanContext ctx{options,
                        *options.devices,
                        proc_fd.get(),
                        read_uptime(proc_fd.get()),
                        static_cast<double>(::sysconf(_SC_CLK_TCK)),
                        is_procfs(proc_fd.get()),
                        {true}};

  // Two workers halve the wall time of a large scan on an idle machine (the work
  // is syscalls, per process independent); a small scan is not worth a thread.
  unsigned workers = options.workers;
  if (workers == 0)
    workers = pids.size() >= 2000 && std::thread::hardware_concurrency() >= 2 ? 2 : 1;
  std::vector<ProcessScanner> scanners;
  scanners.reserve(workers);
  for (unsigned w = 0; w < workers; ++w) scanners.emplace_back(ctx);
  constexpr std::size_t kChunk = 64;
  std::atomic<std::size_t> next{0};
  auto work = [&](ProcessScanner& scanner) {
    for (;;) {
      std::size_t begin = next.fetch_add(kChunk);
      if (begin >= pids.size()) return;
      for (std::size_t i = begin; i < std::min(begin + kChunk, pids.size()); ++i)
        scanner.scan(pids[i]);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned w = 1; w < workers; ++w) {
    try {
      threads.emplace_back(work, std::ref(scanners[w]));
    } catch (const std::system_error&) {
      break;  // no thread: the calling thread scans what is left
    }
  }
  work(scanners[0]);
  for (auto& t : threads) t.join();

  UserNames users;
  for (auto& s : scanners) {
    result.processes_scanned += s.scanned;
    result.out_of_descriptors = result.out_of_descriptors || s.out_of_descriptors;
    for (auto& h : s.holders) {
      h.user = users.name(h.uid);
      result.holders.push_back(std::move(h));
    }
    std::move(s.problems.begin(), s.problems.end(), std::back_inserter(result.problems));
  }
  std::sort(result.holders.begin(), result.holders.end(),
            [](const Holder& a, const Holder& b) { return a.id < b.id; });
  std::sort(result.problems.begin(), result.problems.end(),
            [](const ScanProblem& a, const ScanProblem& b) { return a.pid < b.pid; });
  if (options.with_table && !options.only_pids)
    result.table = read_process_table_at(proc_fd.get(), std::move(listed));
  // No verdict here: inventory::join_look decides once, over the whole set (NVML-only
  // holders, the agent's dead parents), and every consumer reads that one verdict.
  return result;
}

}  // namespace gpureap::proc
