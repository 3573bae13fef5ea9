#include "agent/reaper.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "proc/lineage.h"
#include "reclaim/audited_control.h"
#include "reclaim/free_lock.h"
#include "reclaim/process_control.h"
#include "util/fd.h"
#include "util/signal_mask.h"

namespace gpureap::agent {

bool reapable(const proc::Holder& h, const Pattern* keep) {
  if (!proc::unattended_may_act(h) || h.run_alive) return false;
  return !(keep && keep->search(h.cmdline));
}

reclaim::Selection reap_selection(const inventory::Inventory& fresh,
                                  const std::set<proc::ProcessId>& due, const Pattern* keep) {
  reclaim::Selection selection;
  selection.orphans_only = true;
  selection.unattended = true;
  for (const auto& view : fresh.gpus)
    for (const auto& gh : view.holders) {
      if (!gh.uses_gpu || !due.contains(gh.holder.id) || !reapable(gh.holder, keep)) continue;
      if (std::find(selection.ids.begin(), selection.ids.end(), gh.holder.id) ==
          selection.ids.end())
        selection.ids.push_back(gh.holder.id);
      if (!inventory::is_selected(selection.gpus, view.info.id))
        selection.gpus.push_back(view.info.id);
    }
  return selection;
}

reclaim::FreeOutcome reap(reclaim::Freer& freer, const inventory::Inventory& fresh,
                          const reclaim::Selection& selection,
                          std::function<bool(const reclaim::Plan&)> go_ahead) {
  // The engine's own looks (the confirm before each signal, the re-scans) cannot see
  // what the agent saw die: they keep `fresh`'s witnessed verdicts for the same processes.
  freer.node.remember_witnessed(fresh);
  reclaim::FreeRequest request;
  request.taken = fresh;  // taken under the free lock, with what the agent saw die
  request.steps.go_ahead = std::move(go_ahead);
  request.options.selection = selection;
  // An orphan's parent is gone: nothing restarts it, so no settle wait for a live
  // parent, and no systemctl question, stalls the agent's loop.
  request.options.settle = std::chrono::milliseconds(0);
  request.options.restart_policy = nullptr;
  return reclaim::free_session(freer, std::move(request)).outcome;
}

inventory::Event reap_event(inventory::EventKind kind, const inventory::Inventory& inv,
                            const std::set<proc::ProcessId>& ids, std::string detail) {
  inventory::Event event;
  event.kind = kind;
  event.time = wall_now();
  event.detail = std::move(detail);
  std::set<gpu::DeviceId> gpus;
  for (const auto& id : ids) {
    inventory::EventHolder* holder = nullptr;
    for (const auto& view : inv.gpus)
      for (const auto& gh : view.holders) {
        if (gh.holder.id != id || !gh.uses_gpu) continue;
        if (!holder) {
          event.holders.push_back({id, gh.holder.comm, gh.holder.user, std::nullopt,
                                   gh.holder.container, gh.holder.instance, gh.holder.orphaned,
                                   gh.holder.provenance});
          holder = &event.holders.back();
        }
        if (gh.gpu_bytes) holder->gpu_bytes = holder->gpu_bytes.value_or(0) + *gh.gpu_bytes;
        event.bytes += gh.gpu_bytes.value_or(0);
        gpus.insert(view.info.id);
      }
  }
  event.gpus.assign(gpus.begin(), gpus.end());
  if (gpus.size() == 1) {
    event.gpu = *gpus.begin();
    for (const auto& view : inv.gpus)
      if (view.info.id == *event.gpu) event.uuid = view.info.uuid;
  }
  return event;
}

ReapAct node_reap_act(ReapNodeFn open_node, std::shared_ptr<reclaim::AuditSink> audit,
                      std::string state_dir) {
  return [open_node = std::move(open_node), audit = std::move(audit),
          state_dir = std::move(state_dir)](const ReapJob& job) {
    ReapDone done;
    done.due = job.due;
    // A unique_ptr, not an optional: g++ 13 takes the optional's FreeLock for
    // maybe-uninitialized under -Werror (as in slurm_command).
    std::unique_ptr<reclaim::FreeLock> lock;
    if (!job.dry_run) {
      auto taken = reclaim::FreeLock::acquire(state_dir);
      if (!taken) {
        // Not tried: another free (a person's, an epilog) is at work; a later look asks again.
        done.lock_busy = true;
        done.events.push_back(reap_event(inventory::EventKind::reap_failed, job.seen, job.due,
                                         taken.error().message +
                                             "; the reap is retried at a later tick"));
        return done;
      }
      lock = std::make_unique<reclaim::FreeLock>(std::move(*taken));
    }
    if (!open_node || !audit) {
      done.events.push_back(reap_event(inventory::EventKind::reap_failed, job.seen, job.due,
                                       "the reaper has no node or audit trail of its own"));
      return done;
    }
    std::unique_ptr<inventory::Node> node = open_node();
    // The fresh look: the agent's view may keep a holder that let go (W2-20). What the
    // agent saw die goes into it; reap() keeps its verdicts for the engine's looks.
    inventory::CollectOptions look;
    look.dead_parents = job.dead_parents;
    look.process_table = true;  // the plan's table from this look's own listing of /proc
    inventory::Inventory inv = node->look(look);
    reclaim::Selection selection = reap_selection(inv, job.due, job.keep.get());
    if (selection.ids.empty()) return done;
    // The one free flow (reclaim/free_flow.h). Its go-ahead fixes the announced set: a
    // dry run announces it and signals nothing; a plan with no target signals nothing.
    std::set<proc::ProcessId> targets;
    auto go_ahead = [&](const reclaim::Plan& plan) {
      for (const auto& t : plan.targets) targets.insert(t.id);
      if (targets.empty()) return false;
      if (job.dry_run) {
        done.events.push_back(reap_event(inventory::EventKind::reap_planned, inv, targets,
                                         "--reap-dry-run: would free these orphans (orphaned "
                                         "longer than --reap-orphans-after)"));
        return false;
      }
      return true;
    };
    reclaim::AuditTrail trail(*audit, reclaim::AuditActor::watch_reaper,
                              reclaim::AuditCaller::current(node->proc_root()));
    reclaim::SystemProcessControl system_control(node->proc_root());
    reclaim::AuditedControl control(system_control, trail, node->proc_root());
    reclaim::Freer freer{*node, control};
    const auto start = std::chrono::steady_clock::now();
    reclaim::FreeOutcome outcome = reap(freer, inv, selection, go_ahead);
    if (!outcome.report) return done;
    const reclaim::ReclaimReport& report = *outcome.report;
    done.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // What was signalled, every round (Filters::ids keeps later rounds to the same set).
    for (const auto& round : report.rounds)
      for (const auto& t : round.targets) targets.insert(t.id);
    const bool freed = report.all_freed();
    // A reap that sent no signal (each target had let go, or was refused at the read
    // before its signal) says so, not "memory still held after the reclaim".
    const bool signalled = std::any_of(report.actions.begin(), report.actions.end(),
                                       [](const reclaim::Action& a) { return !a.via.empty(); });
    done.freed = freed;
    done.events.push_back(reap_event(
        freed ? inventory::EventKind::reaped : inventory::EventKind::reap_failed, inv, targets,
        freed        ? "freed and verified back at the baseline"
        : !signalled ? "nothing was signalled (each was refused at the read before its "
                       "signal): `gpureap status` says why the memory is held"
                     : "memory still held after the reclaim: `gpureap status` says why"));
    return done;
  };
}

/// The reaper's thread: one job at a time, its outcome posted back with a wake-up.
class ReapWorker {
 public:
  explicit ReapWorker(ReapAct act)
      : act_(std::move(act)), ready_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    StopSignalsBlocked quiet;  // the loop's thread takes the stop signals
    thread_ = std::thread([this] { run(); });
  }
  ~ReapWorker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  int fd() const { return ready_.get(); }
  /// A job waits, runs, or its outcome is not taken yet (its holders are not marked
  /// tried until then: handing them again would reap them twice).
  bool busy() {
    std::lock_guard lock(mutex_);
    return job_.has_value() || running_ || !done_.empty();
  }
  void hand(ReapJob job) {
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(job);
    }
    wake_.notify_all();
  }
  std::vector<ReapDone> take() {
    std::uint64_t n = 0;
    (void)!::read(ready_.get(), &n, sizeof n);
    std::lock_guard lock(mutex_);
    return std::exchange(done_, {});
  }
  void wait_idle() {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || (!job_ && !running_); });
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || job_.has_value(); });
      if (stopping_) return;
      ReapJob job = std::move(*job_);
      job_.reset();
      running_ = true;
      lock.unlock();
      ReapDone done = act_(job);
      lock.lock();
      running_ = false;
      done_.push_back(std::move(done));
      std::uint64_t one = 1;
      (void)!::write(ready_.get(), &one, sizeof one);
      wake_.notify_all();
    }
  }

  ReapAct act_;
  UniqueFd ready_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<ReapJob> job_;
  std::vector<ReapDone> done_;
  bool running_ = false, stopping_ = false;
  std::thread thread_;
};

Reaper::Reaper(ReapPolicy policy, ReapAct act)
    : policy_(std::move(policy)), worker_(std::make_unique<ReapWorker>(std::move(act))) {}

Reaper::~Reaper() = default;

std::optional<double> Reaper::orphaned_since(const proc::Holder& h) const {
  if (!proc::stray(h)) return std::nullopt;
  if (h.orphaned_since) return h.orphaned_since;
  auto it = first_seen_.find(h.id);
  if (it == first_seen_.end()) return std::nullopt;
  return it->second;
}

void Reaper::after_look(const inventory::Inventory& inv, double now,
                        const std::map<pid_t, proc::DeadParent>& dead_parents) {
  std::map<proc::ProcessId, double> next;
  std::set<proc::ProcessId> orphans;
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders) {
      if (!proc::stray(gh.holder)) continue;  // an orphan, or a keeper of a dead owner's memory
      orphans.insert(gh.holder.id);
      if (gh.holder.orphaned_since) continue;  // the kernel's clock, not ours
      auto it = first_seen_.find(gh.holder.id);
      next[gh.holder.id] = it != first_seen_.end() ? it->second : now;
    }
  first_seen_ = std::move(next);
  // A reap is tried once per process; forget the ones no longer orphaned holders.
  std::erase_if(tried_, [&](const proc::ProcessId& id) { return !orphans.contains(id); });
  if (!policy_.after || worker_->busy()) return;
  std::set<proc::ProcessId> due_now = due(inv, now);
  if (due_now.empty()) return;
  worker_->hand(ReapJob{std::move(due_now), inv, dead_parents, policy_.keep, policy_.dry_run});
}

std::set<proc::ProcessId> Reaper::due(const inventory::Inventory& inv, double now) const {
  std::set<proc::ProcessId> out;
  if (!policy_.after) return out;
  const double after = std::chrono::duration<double>(*policy_.after).count();
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders) {
      if (!gh.uses_gpu || tried_.contains(gh.holder.id)) continue;
      const auto since = orphaned_since(gh.holder);
      if (!since || now - *since < after) continue;
      if (!reapable(gh.holder, policy_.keep.get())) continue;
      out.insert(gh.holder.id);
    }
  return out;
}

std::optional<double> Reaper::next_due(const inventory::Inventory& inv) const {
  std::optional<double> next;
  if (!policy_.after) return next;
  const double after = std::chrono::duration<double>(*policy_.after).count();
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders) {
      if (!gh.uses_gpu || tried_.contains(gh.holder.id)) continue;
      const auto since = orphaned_since(gh.holder);
      if (!since || !reapable(gh.holder, policy_.keep.get())) continue;
      if (!next || *since + after < *next) next = *since + after;
    }
  return next;
}

int Reaper::ready_fd() const { return worker_->fd(); }

bool Reaper::busy() const { return worker_->busy(); }

void Reaper::wait_idle() { worker_->wait_idle(); }

std::vector<ReapDone> Reaper::take_done() {
  std::vector<ReapDone> done = worker_->take();
  for (auto& d : done) {
    if (!d.lock_busy) {
      busy_said_.clear();
      tried_.insert(d.due.begin(), d.due.end());
      continue;
    }
    // Said once per set of holders, not at every look.
    if (std::includes(busy_said_.begin(), busy_said_.end(), d.due.begin(), d.due.end()))
      d.events.clear();
    busy_said_ = d.due;
  }
  return done;
}

}  // namespace gpureap::agent
