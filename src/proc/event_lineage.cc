#include "proc/event_lineage.h"

#include <fcntl.h>
#include <sys/wait.h>

#include <utility>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/process_table.h"
#include "util/fd.h"

namespace gpureap::proc {
namespace {
constexpr pid_t kKernelThreadParent = 2;
}  // namespace

IdentityReader proc_identity_reader(std::string proc_root) {
  return [root = std::move(proc_root)](pid_t pid) -> std::optional<LineageIdentity> {
    ReadBuffer buf;
    const std::string dir = root + "/" + std::to_string(pid);
    if (read_file_at(AT_FDCWD, (dir + "/stat").c_str(), buf) != 0) return std::nullopt;
    auto stat = parse_stat(buf.view());
    if (!stat) return std::nullopt;
    LineageIdentity id;
    id.comm = std::move(stat->comm);
    id.start_time = stat->start_time;
    id.pgid = stat->pgid;
    id.sid = stat->sid;
    id.cmdline = read_cmdline(pid, root);
    if (id.cmdline.size() > EventLineage::kMaxCmdline) id.cmdline.resize(EventLineage::kMaxCmdline);
    id.cmdline.shrink_to_fit();
    return id;
  };
}

EventLineage::EventLineage(IdentityReader read, std::size_t max_entries)
    : read_(std::move(read)), max_entries_(max_entries) {}

EventLineage::Entry* EventLineage::find_parent(const Entry& child) {
  if (child.parent == 0) return nullptr;
  if (auto it = live_.find(child.parent);
      it != live_.end() && it->second.serial == child.parent_serial)
    return &it->second;
  if (auto it = dead_.find(child.parent_serial); it != dead_.end()) return &it->second;
  return nullptr;
}

const EventLineage::Entry* EventLineage::find_parent(const Entry& child) const {
  return const_cast<EventLineage*>(this)->find_parent(child);
}

std::set<pid_t> EventLineage::apply(const ProcEventBatch& batch, double wall_offset) {
  std::set<pid_t> crashed_children;
  if (batch.lost) {
    // Events were dropped: an exit and a pid's reuse may be among them, so no recorded
    // tie is sure any more. The table starts afresh (a lineage unknown, not invented).
    live_.clear();
    dead_.clear();
    to_read_.clear();
    return crashed_children;
  }
  for (const ProcEvent& e : batch.events) {
    switch (e.kind) {
      case ProcEvent::Kind::started: started(e); break;
      case ProcEvent::Kind::exec: execed(e); break;
      case ProcEvent::Kind::exited: exited(e, wall_offset, crashed_children); break;
    }
  }
  read_pending();
  // A child that exited later in the batch is no one to look at.
  std::erase_if(crashed_children, [&](pid_t pid) { return !live_.contains(pid); });
  return crashed_children;
}

void EventLineage::started(const ProcEvent& e) {
  // kthreadd's (pid 2 of the initial namespace, the only one with events): kernel
  // threads, nobody's GPU work.
  if (e.parent == kKernelThreadParent) return;
  // A pid the table still knows as live was reused: its exit was lost before the
  // listener started or by a filter. The old entry names nobody now.
  if (auto old = live_.find(e.pid); old != live_.end()) {
    child_gone(old->second);
    live_.erase(old);
  }
  auto parent = live_.find(e.parent);
  if (size() + (parent == live_.end() ? 2 : 1) > max_entries_) {
    ++untracked_;
    return;
  }
  if (parent == live_.end()) {
    // A process that started before the agent listened: known from its first fork on.
    Entry p;
    p.pid = e.parent;
    p.serial = next_serial_++;
    parent = live_.emplace(e.parent, std::move(p)).first;
  }
  Entry child;
  child.pid = e.pid;
  child.parent = e.parent;
  child.parent_serial = parent->second.serial;
  child.serial = next_serial_++;
  live_.emplace(e.pid, std::move(child));
  if (parent->second.live_children++ == 0 && !parent->second.identity_read)
    to_read_.emplace_back(parent->second.pid, parent->second.serial);
}

void EventLineage::execed(const ProcEvent& e) {
  // Another program now: a parent's names are read again (the command line then).
  auto it = live_.find(e.pid);
  if (it == live_.end()) return;
  it->second.identity.reset();
  it->second.identity_read = false;
  if (it->second.live_children > 0) to_read_.emplace_back(it->second.pid, it->second.serial);
}

void EventLineage::exited(const ProcEvent& e, double wall_offset,
                          std::set<pid_t>& crashed_children) {
  auto it = live_.find(e.pid);
  if (it == live_.end()) return;
  Entry entry = std::move(it->second);
  live_.erase(it);
  child_gone(entry);
  if (entry.live_children == 0) return;  // nobody it leaves behind: forgotten
  // Its names are read now if they were not yet (a zombie still has them): a read
  // after the batch could find the pid reaped.
  if (!entry.identity_read) {
    if (auto id = read_(entry.pid)) entry.identity = std::make_unique<LineageIdentity>(std::move(*id));
    entry.identity_read = true;
  }
  entry.manner = WIFSIGNALED(e.wait_status) ? ExitManner::signaled : ExitManner::exited;
  entry.exit_value = WIFSIGNALED(e.wait_status) ? WTERMSIG(e.wait_status) : WEXITSTATUS(e.wait_status);
  entry.died_at = static_cast<double>(e.at_ns) / 1e9 + wall_offset;
  DeadParent as_dead;
  as_dead.manner = entry.manner;
  as_dead.exit_value = entry.exit_value;
  if (crashed(as_dead))
    for (const auto& [pid, child] : live_)
      if (child.parent == entry.pid && child.parent_serial == entry.serial)
        crashed_children.insert(pid);
  dead_.emplace(entry.serial, std::move(entry));
}

void EventLineage::child_gone(const Entry& child) {
  Entry* parent = find_parent(child);
  if (!parent || parent->live_children == 0) return;
  if (--parent->live_children > 0) return;
  // Its last child is gone: a dead parent is forgotten; a live one keeps its entry
  // only as someone's child, without names (read again at its next fork).
  if (parent->manner != ExitManner::unknown) {
    dead_.erase(parent->serial);
    return;
  }
  parent->identity.reset();
  parent->identity_read = false;
  if (parent->parent == 0) live_.erase(parent->pid);
}

void EventLineage::read_pending() {
  // After the batch, not at each fork: a burst of short-lived children (a build) costs
  // no read for a parent whose children are all gone by its end.
  for (const auto& [pid, serial] : to_read_) {
    auto it = live_.find(pid);
    if (it == live_.end() || it->second.serial != serial) continue;
    Entry& entry = it->second;
    if (entry.identity_read || entry.live_children == 0) continue;
    if (auto id = read_(pid)) entry.identity = std::make_unique<LineageIdentity>(std::move(*id));
    entry.identity_read = true;
  }
  to_read_.clear();
}

std::optional<LineageDeath> EventLineage::dead_parent_of(pid_t pid) const {
  auto it = live_.find(pid);
  if (it == live_.end()) return std::nullopt;
  const Entry* parent = find_parent(it->second);
  if (!parent || parent->manner == ExitManner::unknown) return std::nullopt;
  LineageDeath out;
  DeadParent& dp = out.dead;
  dp.pid = parent->pid;
  dp.died_at = parent->died_at;
  dp.was_parent = true;
  dp.manner = parent->manner;
  dp.exit_value = parent->exit_value;
  if (parent->identity) {
    dp.comm = parent->identity->comm;
    dp.cmdline = parent->identity->cmdline;
    dp.pgid = parent->identity->pgid;
    dp.sid = parent->identity->sid;
    out.start_time = parent->identity->start_time;
  }
  return out;  // the caller adds what it knows of the holders (gpu_children, holder_start)
}

std::size_t EventLineage::bytes() const {
  // A node of an unordered_map: the next pointer and the value (libstdc++ caches no hash
  // for integer keys); a bucket is one pointer. Strings count their heap capacity.
  constexpr std::size_t kLiveNode = sizeof(void*) + sizeof(std::pair<const pid_t, Entry>);
  constexpr std::size_t kDeadNode = sizeof(void*) + sizeof(std::pair<const std::uint32_t, Entry>);
  std::size_t total = live_.size() * kLiveNode + dead_.size() * kDeadNode +
                      (live_.bucket_count() + dead_.bucket_count()) * sizeof(void*);
  auto strings = [](const Entry& e) -> std::size_t {
    if (!e.identity) return 0;
    auto heap = [](const std::string& s) {
      return s.capacity() > 15 ? s.capacity() + 1 : std::size_t{0};  // past the SSO buffer
    };
    return sizeof(LineageIdentity) + heap(e.identity->comm) + heap(e.identity->cmdline);
  };
  for (const auto& [pid, e] : live_) total += strings(e);
  for (const auto& [serial, e] : dead_) total += strings(e);
  return total;
}

}  // namespace gpureap::proc
