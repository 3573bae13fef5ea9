#include "agent/new_process_finder.h"

#include <time.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "proc/proc_files.h"
#include "util/clock.h"

namespace gpureap::agent {

NewProcessFinder::NewProcessFinder(const std::string& proc_root)
    : lineage_(proc::proc_identity_reader(proc_root)) {}

void NewProcessFinder::start(bool asked, const std::string& proc_root) {
  if (tried_) return;
  tried_ = true;
  if (!asked) {
    unavailable_ = "not asked for";
  } else if (!proc::proc_events_apply(proc_root)) {
    unavailable_ = "not root in the initial namespaces, or another /proc";
  } else if (auto events = proc::ProcEvents::open(); events) {
    events_ = std::move(*events);
  } else {
    unavailable_ = events.error().message;
  }
}

bool NewProcessFinder::candidates(int proc_fd, bool death_look, std::set<pid_t>& out) {
  std::set<pid_t> found;
  if (!(events_ ? by_events(proc_fd, found) : by_listing(proc_fd, found))) return false;
  // A new process is looked at again at the next tick: seen between its fork (or exec)
  // and the open of its device node (a shell's `exec 3</dev/nvidia1` a few ms after its
  // start, longer on a loaded machine), its first look finds nothing, and no later event
  // or listing names it again before the full scan (W3-14 failed so in CI).
  // A death's look between two ticks (or after a tick's) keeps them for the next tick.
  out.insert(found.begin(), found.end());
  out.insert(young_.begin(), young_.end());
  // The living children of a process the events show crashed (proc/event_lineage.h).
  out.merge(crash_looks_);
  crash_looks_.clear();
  if (death_look)
    young_.merge(found);
  else
    young_ = std::move(found);
  return true;
}

bool NewProcessFinder::by_events(int proc_fd, std::set<pid_t>& out) {
  pump();
  if (!events_) return by_listing(proc_fd, out);
  proc::ProcEventBatch batch = std::exchange(pending_, {});
  // The kernel dropped events (a burst past the socket's buffer): the listing tells
  // which processes are new; the events keep coming.
  if (batch.lost) return by_listing(proc_fd, out);
  // Each process's last event says whether it is there now: started (or exec'd: its
  // fd table is another program's) means a scan; one that started and exited
  // within the tick needs none, and a pid reused within it is seen by its new fork.
  std::map<pid_t, bool> alive;
  for (const proc::ProcEvent& e : batch.events) alive[e.pid] = e.kind != proc::ProcEvent::Kind::exited;
  if (alive.empty()) return true;
  std::vector<pid_t> born, gone;
  for (const auto& [pid, is_alive] : alive) (is_alive ? born : gone).push_back(pid);
  out.insert(born.begin(), born.end());
  // seen_ (the process count, and the listing to compare with after a loss)
  // = (seen ∪ born) \ gone, by merges of sorted lists.
  std::vector<pid_t> merged, next;
  merged.reserve(seen_.size() + born.size());
  std::set_union(seen_.begin(), seen_.end(), born.begin(), born.end(), std::back_inserter(merged));
  next.reserve(merged.size());
  std::set_difference(merged.begin(), merged.end(), gone.begin(), gone.end(),
                      std::back_inserter(next));
  seen_ = std::move(next);
  return true;
}

bool NewProcessFinder::by_listing(int proc_fd, std::set<pid_t>& out) {
  proc::ReadBuffer buf;
  std::vector<pid_t> pids;
  if (proc::list_pids(proc_fd, buf, pids) != 0) return false;
  // New since the last tick: a merge of two sorted lists (10,000 processes: no tree).
  std::sort(pids.begin(), pids.end());
  std::set_difference(pids.begin(), pids.end(), seen_.begin(), seen_.end(),
                      std::inserter(out, out.end()));
  seen_ = std::move(pids);
  return true;
}

void NewProcessFinder::pump() {
  if (!events_) return;
  auto batch = events_->drain();
  if (!batch) {
    // The connector failed: listing from now on (seen_ is as of the last tick).
    unavailable_ = batch.error().message;
    events_.reset();
    pending_ = {};
    return;
  }
  // CLOCK_MONOTONIC (the events' clock) to the wall clock, to date an exit.
  timespec mono{};
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  const double wall_offset =
      util::wall_now() - (static_cast<double>(mono.tv_sec) + static_cast<double>(mono.tv_nsec) / 1e9);
  crash_looks_.merge(lineage_.apply(*batch, wall_offset));
  pending_.lost = pending_.lost || batch->lost;
  pending_.events.insert(pending_.events.end(), batch->events.begin(), batch->events.end());
  // Drained at once now, kept for the tick: past kMaxPending (a long --tick on a busy
  // node) they are dropped as the kernel drops an overrun, and the tick lists /proc.
  if (pending_.events.size() > kMaxPending) {
    pending_.events.clear();
    pending_.events.shrink_to_fit();
    pending_.lost = true;
  }
}

std::optional<int> NewProcessFinder::exit_status(pid_t pid) {
  // The kernel's exit event is sent before the pidfd fires, so it is queued by now.
  pump();
  for (auto e = pending_.events.rbegin(); e != pending_.events.rend(); ++e)
    if (e->kind == proc::ProcEvent::Kind::exited && e->pid == pid) return e->wait_status;
  return std::nullopt;
}

std::optional<int> NewProcessFinder::fd() const {
  if (!events_) return std::nullopt;
  return events_->fd();
}

}  // namespace gpureap::agent
