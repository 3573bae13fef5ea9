#include "agent/watcher.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <iterator>

#include "inventory/collect.h"
#include "inventory/run_records.h"
#include "proc/holder_scan.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/process_table.h"

namespace gpureap::agent {

namespace {

/// The stat line of one process, parsed; nullopt when it is gone or unreadable.
std::optional<proc::StatInfo> read_stat(int proc_fd, pid_t pid, proc::ReadBuffer& buf) {
  std::string path = std::to_string(pid) + "/stat";
  if (proc::read_file_at(proc_fd, path.c_str(), buf) != 0) return std::nullopt;
  auto stat = proc::parse_stat(buf.view());
  if (!stat) return std::nullopt;
  return std::move(*stat);
}

/// Seconds since boot (/proc/uptime, the clock of a process's start time); 0
/// when unreadable.
double read_uptime(const std::string& proc_root) {
  UniqueFd proc_fd(proc::open_dir_at(AT_FDCWD, proc_root.c_str()));
  proc::ReadBuffer buf;
  if (!proc_fd.valid() || proc::read_file_at(proc_fd.get(), "uptime", buf) != 0) return 0;
  std::string_view text = buf.view();
  double seconds = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
  return ec == std::errc() ? seconds : 0;
}

/// The CPU time of this process, all its threads (a full scan's workers too).
std::chrono::nanoseconds process_cpu() {
  timespec ts{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return std::chrono::nanoseconds{0};
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

}  // namespace

/// A pidfd on a process whose death matters: a holder (it is gone: drop it), or
/// a holder's parent or process-group leader (its holders may be orphans now).
struct Watcher::Watched {
  proc::ProcessHandle handle;
  pid_t pid = 0;
  std::string comm;
  std::string cmdline;
  std::uint64_t start_time = 0;
  pid_t pgid = 0, sid = 0;     // as when it was first watched
  std::set<pid_t> dependents;  // holders whose parent or group leader this is
  std::set<pid_t> children;    // those of them whose parent it was when last watched
  bool is_holder = false;
};

Watcher::Watcher(inventory::Node& node, WatchOptions options)
    : node_(node),
      options_(options),
      new_(node.proc_root()),
      pace_(options.full_scan, options.full_scan_auto, kFullScanShare, kFullScanMax) {}

std::set<pid_t> Watcher::own_pids() const {
  std::set<pid_t> own{::getpid()};
  if (auto worker = node_.gpus().worker_pid()) own.insert(*worker);
  return own;
}

void Watcher::refresh(bool full) {
  new_.start(options_.proc_events, node_.proc_root());
  note_deaths();
  auto now = node_.clock().now();
  const bool failed_before = limits_.look_failed.has_value();
  limits_.look_failed.reset();
  // After a look that ran out of descriptors, the whole of /proc is read again at the
  // next tick: what it could not read is known again as soon as it can be.
  if (full || pace_.full_due(now) || failed_before) {
    full_scan();
    pace_.schedule(now);
  } else {
    incremental_scan();
  }
  // A death during the look (its pidfd fired after note_deaths above) is recorded now,
  // before rewatch would find the process a zombie and drop it unrecorded: the witness
  // was lost so in CI (GrafanaDashboard, a leader SIGKILLed while the agent scanned). Its
  // dependents are read again so that this tick's verdicts already have the witness.
  // The look's NVML list is as old as the look: a worker that took its GPU since, the
  // moment before the server died, is found only by a fresh one (CI: the announcement
  // named 1 of 2 workers when the server died during a tick's look).
  if (std::set<pid_t> affected = note_deaths(); !affected.empty()) look_after_deaths(affected);
  look_at_crashes();
  rewatch();
}

void Watcher::look_at_crashes() {
  // A drain during a look (its rebuild, an exit's manner) may have queued some: each look
  // drains again, so a few rounds at most (a crash per round is a burst of crashes).
  for (int round = 0; round < 3 && new_.crash_looks_pending(); ++round)
    look_after_deaths(new_.take_crash_looks());
}

void Watcher::look_after_deaths(std::set<pid_t> affected) {
  for (pid_t own : own_pids()) affected.erase(own);
  // Dependents were re-parented before the pidfd fired (exit_notify): their fresh stat
  // already says who adopted them.
  if (affected.empty())
    rebuild();
  else
    incremental_scan(Look::death, affected);
}

void Watcher::full_scan() {
  const auto cpu_before = process_cpu();
  node_.gpus().prefetch_snapshot();
  // Every process listed now is known: the next tick scans only newer ones. Listed
  // before the scan, so that one started during it is new at the next tick.
  std::vector<pid_t> listed;
  bool listed_ok = false;
  {
    UniqueFd proc_fd(proc::open_dir_at(AT_FDCWD, node_.proc_root().c_str()));
    proc::ReadBuffer scratch;
    listed_ok = proc_fd.valid() && proc::list_pids(proc_fd.get(), scratch, listed) == 0;
    std::sort(listed.begin(), listed.end());
  }
  proc::ScanOptions scan;
  scan.proc_root = node_.proc_root();
  scan.devices = &node_.devices();
  scan.exclude = own_pids();
  scan.run_supervisors = inventory::run_supervisors(node_.baselines().dir(), node_.proc_root(), true);
  proc::ScanResult result = proc::scan_holders(scan);
  pace_.full_ran(process_cpu() - cpu_before);
  take_snapshot();

  if (result.out_of_descriptors) {
    holders_.update_read(result);  // a failed look (W3-04)
    look_failed(result);
    return rebuild();
  }
  holders_.replace(std::move(result));
  new_.listed(listed_ok ? std::move(listed) : std::vector<pid_t>{});
  // What was seen die for a process that holds nothing now (gone, or let go) names
  // nobody: dropped at every full look, so the state directory's record stays current.
  std::erase_if(dead_parents_,
                [&](const auto& entry) { return !holders_.holders().contains(entry.first); });
  rebuild();
}

void Watcher::take_snapshot() {
  source_.take(node_.gpus(), node_.clock().now(), options_.source_deadline);
}

void Watcher::incremental_scan(Look look, const std::set<pid_t>& also) {
  pace_.incremental_ran(look == Look::death);
  node_.gpus().prefetch_snapshot();
  UniqueFd proc_fd(proc::open_dir_at(AT_FDCWD, node_.proc_root().c_str()));
  if (!proc_fd.valid()) return full_scan();  // reports the failure as a scan problem
  proc::ReadBuffer buf;
  std::set<pid_t> candidates;
  // New processes, those new at the last tick, the children of crashes.
  if (!new_.candidates(proc_fd.get(), look == Look::death, candidates)) return full_scan();
  candidates.insert(also.begin(), also.end());
  auto& holders = holders_.holders();

  // Known holders: gone ones are dropped; a changed state letter, parent or group
  // (a zombie leader, an orphan) means a fresh look at that one process.
  for (auto it = holders.begin(); it != holders.end();) {
    auto stat = read_stat(proc_fd.get(), it->first, buf);
    if (!stat || stat->start_time != it->second.id.start_time) {
      it = holders.erase(it);
      continue;
    }
    if (stat->state != it->second.state || stat->ppid != it->second.ppid ||
        stat->pgid != it->second.pgid)
      candidates.insert(it->first);
    ++it;
  }

  take_snapshot();
  // Processes NVML lists that we do not know as holders yet (a context created
  // by a process that was already running).
  const std::set<pid_t> listed = source_.listed_pids();
  for (pid_t pid : listed)
    if (!holders.contains(pid)) candidates.insert(pid);
  // Holders NVML does not list (a device node open, a mapping: no memory figure
  // tells that they let go) have their fd tables read again, and are scanned again
  // when they hold something else now: one that closed its node is no holder from
  // this tick on (W3-14).
  std::vector<const proc::Holder*> unlisted;
  for (const auto& [pid, h] : holders)
    if (!listed.contains(pid) && !candidates.contains(pid)) unlisted.push_back(&h);
  proc::ScanOptions check;
  check.proc_root = node_.proc_root();
  check.devices = &node_.devices();
  for (pid_t pid : proc::changed_holders(check, unlisted)) candidates.insert(pid);
  for (pid_t own : own_pids()) candidates.erase(own);
  if (!candidates.empty()) rescan(candidates);
  rebuild();
}

void Watcher::read_exit(const Watched& w, inventory::DeadParent& dead) {
  // The kernel's exit event (sent before the pidfd fires, so it is queued by now), else
  // the pidfd's exit information or the zombie's stat line; else unknown.
  if (auto status = new_.exit_status(w.pid)) {
    dead.manner = WIFSIGNALED(*status) ? proc::ExitManner::signaled : proc::ExitManner::exited;
    dead.exit_value = WIFSIGNALED(*status) ? WTERMSIG(*status) : WEXITSTATUS(*status);
    return;
  }
  if (auto how = w.handle.exit_manner(node_.proc_root())) {
    dead.manner = how->how == proc::ChildExit::How::killed ? proc::ExitManner::signaled
                                                          : proc::ExitManner::exited;
    dead.exit_value = how->status;
  }
}

void Watcher::rescan(const std::set<pid_t>& pids) {
  proc::ScanOptions scan;
  scan.proc_root = node_.proc_root();
  scan.devices = &node_.devices();
  scan.exclude = own_pids();
  scan.run_supervisors = inventory::run_supervisors(node_.baselines().dir(), node_.proc_root(), true);
  scan.only_pids = std::vector<pid_t>(pids.begin(), pids.end());
  proc::ScanResult result = proc::scan_holders(scan);
  if (result.out_of_descriptors) {
    holders_.update_read(result);  // those it could not read stay as they were (W3-04)
    return look_failed(result);
  }
  holders_.rescanned(pids, std::move(result));
}

void Watcher::look_failed(const proc::ScanResult& result) {
  std::string why = "Too many open files";
  for (const auto& p : result.problems)
    if (p.what.find("open files") != std::string::npos) {
      why = p.what.substr(p.what.rfind(": ") == std::string::npos ? 0 : p.what.rfind(": ") + 2);
      break;
    }
  limits_.look_failed =
      "the agent's last look at /proc ran out of file descriptors (" + why +
      "): holders it could not read are shown as its previous look saw them, and it looks "
      "again at the next tick";
}

void Watcher::rebuild() {
  proc::ScanResult scan = holders_.as_scan(
      pace_.full() > 0 ? std::optional<std::size_t>(new_.processes()) : std::nullopt);
  // Ages as of now, not as of the scan that found each holder (held between full
  // scans, it keeps growing): the same rule as the scan's, at answer time (W2-21).
  static const double clk_tck = static_cast<double>(::sysconf(_SC_CLK_TCK));
  if (const double uptime = read_uptime(node_.proc_root()); uptime > 0 && clk_tck > 0)
    for (auto& h : scan.holders)
      h.age_seconds = std::max(0.0, uptime - static_cast<double>(h.id.start_time) / clk_tck);
  if (limits_.look_failed) scan.problems.insert(scan.problems.begin(), {0, *limits_.look_failed});

  witness_from_lineage();
  inventory::CollectOptions options;
  options.proc_root = node_.proc_root();
  options.source_deadline = options_.source_deadline;
  options.exclude = own_pids();
  options.clock = &node_.clock();
  options.reread_unexplained = false;  // the release model sees every tick: it tells a fall
  options.sample_busy = false;  // the ticks are the samples
  options.busy_history = source_.busy_history();
  options.dead_parents = dead_parents_;
  options.releases = &node_.releases();  // the release model over the ticks (issue 35)
  if (!imports_) imports_.emplace(node_.baselines().dir(), node_.proc_root());
  imports_->observe(source_.snapshot(), holders_.holders(), wall_now());
  options.imports = imports_->records();
  gpu::GpuSnapshot snapshot = source_.snapshot();
  inv_ = inventory::join_look(node_.gpus(), std::move(snapshot), std::move(scan), node_.devices(),
                              node_.baselines(), options);
}

void Watcher::rewatch() {
  // Which processes matter now: every holder, and each one's parent and group
  // leader; those of holders with memory (NVML lists them, or a CUDA mapping) first,
  // then the other holders, then their parents and leaders. Past max_pidfds the
  // rest are watched at each tick through their stat lines (W3-04).
  // One that died since the last note is recorded first, never re-watched as a zombie
  // and so forgotten (the dependents' next look has the witness).
  note_deaths();
  const std::set<pid_t> listed = source_.listed_pids();
  const auto& holders = holders_.holders();
  std::map<pid_t, std::set<pid_t>> wanted;  // pid -> dependents
  std::vector<pid_t> order;
  auto want = [&](pid_t pid, std::optional<pid_t> dependent) {
    auto [it, added] = wanted.try_emplace(pid);
    if (added) order.push_back(pid);
    if (dependent) it->second.insert(*dependent);
  };
  auto with_memory = [&](const proc::Holder& h) {
    return listed.contains(h.id.pid) || h.found_by.contains(proc::FoundBy::mapping);
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [pid, h] : holders) {
      if (with_memory(h) != (pass == 0)) continue;
      want(pid, std::nullopt);
      if (pass == 0) {
        if (h.ppid > 1) want(h.ppid, pid);
        if (h.pgid > 1 && h.pgid != pid) want(h.pgid, pid);
      }
    }
  }
  for (const auto& [pid, h] : holders) {
    if (with_memory(h)) continue;
    if (h.ppid > 1) want(h.ppid, pid);
    if (h.pgid > 1 && h.pgid != pid) want(h.pgid, pid);
  }
  std::map<pid_t, std::shared_ptr<Watched>> by_pid;
  for (auto& [fd, w] : watched_) by_pid[w->pid] = w;

  std::map<int, std::shared_ptr<Watched>> next;
  UniqueFd proc_fd(proc::open_dir_at(AT_FDCWD, node_.proc_root().c_str()));
  proc::ReadBuffer buf;
  bool out_of_descriptors = !proc_fd.valid() && (errno == EMFILE || errno == ENFILE);
  limits_.unwatched = 0;
  for (pid_t pid : order) {
    if (next.size() >= options_.max_pidfds || out_of_descriptors) {
      ++limits_.unwatched;
      continue;
    }
    std::shared_ptr<Watched> w;
    if (auto it = by_pid.find(pid); it != by_pid.end() && !it->second->handle.has_exited()) {
      w = it->second;
    } else {
      if (!proc_fd.valid()) continue;
      auto stat = read_stat(proc_fd.get(), pid, buf);
      if (!stat) continue;
      // A zombie is dead already (its parent has not reaped it yet): its pidfd is
      // readable at once and its cmdline empty, so watching it again would record its
      // death anew, nameless, at every look. Its death was noted, or happened unseen.
      if (stat->state == 'Z' && stat->num_threads <= 1) continue;
      auto handle = proc::ProcessHandle::open({pid, stat->start_time, 0}, node_.proc_root());
      if (!handle) {
        // Gone already, or not ours to watch: the tick will see it. Out of
        // descriptors: this one and the rest are watched by the tick.
        if (handle.error().sys_errno == EMFILE || handle.error().sys_errno == ENFILE) {
          out_of_descriptors = true;
          ++limits_.unwatched;
        }
        continue;
      }
      w = std::make_shared<Watched>();
      w->handle = std::move(*handle);
      w->pid = pid;
      w->start_time = stat->start_time;
      w->pgid = stat->pgid;
      w->sid = stat->sid;
      w->comm = stat->comm;
      w->cmdline = proc::read_cmdline(pid, node_.proc_root());
    }
    w->dependents = std::move(wanted[pid]);
    w->children.clear();
    for (pid_t dep : w->dependents)
      if (auto h = holders.find(dep); h != holders.end() && h->second.ppid == pid)
        w->children.insert(dep);
    w->is_holder = holders.contains(pid);
    next[w->handle.fd()] = w;
  }
  watched_ = std::move(next);
  limits_.watched = watched_.size();
}

void Watcher::witness_from_lineage() {
  if (!new_.from_events()) return;
  new_.pump();  // the table as of now: a pid reused since the last drain is seen
  const auto& holders = holders_.holders();
  const proc::EventLineage& lineage = new_.lineage();
  std::optional<std::vector<proc::ProcessId>> supervisors;  // read once, when needed
  for (const auto& [pid, h] : holders) {
    if (dead_parents_.contains(pid)) continue;  // the pidfd's record is the first seen
    auto death = lineage.dead_parent_of(pid);
    if (!death || h.ppid == death->dead.pid) continue;
    inventory::DeadParent dead = std::move(death->dead);
    dead.holder_start = h.id.start_time;
    dead.adopter = h.ppid;  // where the death left it (W4-05)
    for (const auto& [other, oh] : holders)
      if (auto d = lineage.dead_parent_of(other); d && d->dead.pid == dead.pid) ++dead.gpu_children;
    if (!supervisors)
      supervisors = inventory::run_supervisors(node_.baselines().dir(), node_.proc_root(), false);
    dead.run_supervisor = death->start_time != 0 &&
                          std::ranges::any_of(*supervisors, [&](const proc::ProcessId& id) {
                            return id.pid == dead.pid && id.start_time == death->start_time;
                          });
    dead_parents_.emplace(pid, std::move(dead));
  }
}

std::vector<int> Watcher::watch_fds() const {
  std::vector<int> fds;
  fds.reserve(watched_.size() + 1);
  for (const auto& [fd, w] : watched_) fds.push_back(fd);
  if (auto events = new_.fd()) fds.push_back(*events);
  return fds;
}

void Watcher::on_ready(int fd) {
  if (fd == new_.fd()) {
    // Drained now, while a parent that just forked can still be read; a crash with
    // living children is a look at them, between ticks.
    new_.pump();
    if (!new_.crash_looks_pending()) return;
    look_at_crashes();
    rewatch();
    return;
  }
  auto it = watched_.find(fd);
  if (it == watched_.end()) return;
  if (!it->second->handle.has_exited()) return;  // a spurious wake-up
  // The look finds a sibling the last tick did not know as a holder (it took the GPU
  // since): the server died the moment its last worker held, and the announcement named
  // only the first (in CI, under load).
  look_after_deaths(note_death(fd));
  look_at_crashes();
  // Forget parents of processes that are no holders any more (the inventory reads
  // only holders' entries: nothing to rebuild).
  std::erase_if(dead_parents_,
                [&](const auto& entry) { return !holders_.holders().contains(entry.first); });
  rewatch();
}

std::set<pid_t> Watcher::note_deaths() {
  // A death whose pidfd fired while the loop did something else (a tick, a question):
  // recorded before a scan reads the dependents' new parents, which would drop the dead
  // process from the watched set and lose what the agent saw (the witness).
  std::vector<int> fds;
  for (const auto& [fd, w] : watched_)
    if (w->handle.has_exited()) fds.push_back(fd);
  std::set<pid_t> affected;
  for (int fd : fds) affected.merge(note_death(fd));
  return affected;
}

std::set<pid_t> Watcher::note_death(int fd) {
  auto it = watched_.find(fd);
  if (it == watched_.end()) return {};
  std::shared_ptr<Watched> w = it->second;
  watched_.erase(it);

  double now = wall_now();
  auto& holders = holders_.holders();
  if (w->is_holder) holders.erase(w->pid);
  // What died, for the orphan rule (proc/lineage.h): was it the dependent's parent
  // (or only its group leader), did it hold a GPU, how many GPU workers had it. Its
  // children as of the last watch count too: a look since may have read them adopted.
  std::set<pid_t> children = w->children;
  for (const auto& [pid, h] : holders)
    if (h.ppid == w->pid) children.insert(pid);
  const std::size_t gpu_children = children.size();
  // A run's supervisor by the identity its run recorded (inventory/run_records.h), never
  // by a name anyone can give a process (W4-06).
  const bool run_supervisor = std::ranges::any_of(
      inventory::run_supervisors(node_.baselines().dir(), node_.proc_root(), false),
      [&](const proc::ProcessId& id) { return id.pid == w->pid && id.start_time == w->start_time; });
  inventory::DeadParent how;
  read_exit(*w, how);
  UniqueFd proc_fd(proc::open_dir_at(AT_FDCWD, node_.proc_root().c_str()));
  proc::ReadBuffer buf;
  for (pid_t dep : w->dependents) {
    auto h = holders.find(dep);
    bool was_parent = children.contains(dep);
    auto known = dead_parents_.find(dep);
    if (known != dead_parents_.end() && known->second.was_parent && !was_parent) continue;
    inventory::DeadParent dead{w->pid,     w->comm,      w->cmdline,  now,
                               was_parent, w->is_holder, gpu_children};
    dead.run_supervisor = run_supervisor;
    dead.manner = how.manner;
    dead.exit_value = how.exit_value;
    dead.pgid = w->pgid;
    dead.sid = w->sid;
    if (h != holders.end()) dead.holder_start = h->second.id.start_time;
    // Who the kernel gave it to (exit_notify re-parented it before the pidfd fired).
    if (proc_fd.valid())
      if (auto now_stat = read_stat(proc_fd.get(), dep, buf);
          now_stat && (h == holders.end() || now_stat->start_time == h->second.id.start_time))
        dead.adopter = now_stat->ppid;
    dead_parents_[dep] = std::move(dead);
  }
  return w->dependents;
}

}  // namespace gpureap::agent
