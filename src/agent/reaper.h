#pragma once
// The agent's reaper (--reap-orphans-after), the whole policy in one place: which holders
// it may act on, the one orphan clock (when each became an orphan), which are due, the
// exact set a reap fixes from a fresh look, the free lock's retry, and the events. The reap
// itself runs on the reaper's own thread with its own node (ReapAct): the agent's loop
// keeps looking and announcing while a reap waits for a grace period or a release, and
// collects the outcome through ready_fd(), as systemd-oomd judges after it acts.
//
// What acts unattended acts only on owned or witnessed evidence (DESIGN, "Evidence
// has a provenance"): an inferred orphan is announced and offered to a person's
// `free --orphans`, never reaped (proc::unattended_may_act).

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "agent/options.h"
#include "inventory/events.h"
#include "inventory/inventory.h"
#include "inventory/node.h"
#include "proc/holder.h"
#include "reclaim/free_flow.h"
#include "reclaim/free_session.h"
#include "reclaim/audited_control.h"
#include "util/pattern.h"

namespace gpureap::agent {

/// True when the reaper may act on `h`, whatever its age: orphaned by owned or
/// witnessed evidence, not a member of a live `gpureap run` (belt and braces: the
/// run owns it, W2-10), and not matching `keep` (--keep; null: none).
bool reapable(const proc::Holder& h, const Pattern* keep);

/// The selection a reap acts on: of `due`, the holders `fresh` (a look taken under
/// the free lock) still shows using a GPU and still reapable, by identity
/// (Filters::ids: no later round adds another holder, W2-01), with their GPUs.
reclaim::Selection reap_selection(const inventory::Inventory& fresh,
                                  const std::set<proc::ProcessId>& due, const Pattern* keep);

/// Frees `selection` through the one free session (reclaim/free_session.h) from `fresh`,
/// with the reaper's settings (no settle wait, no systemd question: an orphan's parent is
/// gone); the engine's later looks keep `fresh`'s witnessed verdicts
/// (Node::remember_witnessed). `go_ahead` sees the final plan before any signal (false:
/// nothing is signalled, as --reap-dry-run does).
reclaim::FreeOutcome reap(reclaim::Freer& freer, const inventory::Inventory& fresh,
                          const reclaim::Selection& selection,
                          std::function<bool(const reclaim::Plan&)> go_ahead);

/// What the loop hands the reaper's thread: the holders due, the look that found them
/// due (it names their bytes when the free lock is busy), what the agent saw die (for
/// the fresh look), and the policy in force.
struct ReapJob {
  std::set<proc::ProcessId> due;
  inventory::Inventory seen;
  std::map<pid_t, proc::DeadParent> dead_parents;
  std::shared_ptr<const Pattern> keep;  // --keep; null: none
  bool dry_run = false;
};

/// What a reap came to, back on the loop.
struct ReapDone {
  std::set<proc::ProcessId> due;  // the job's
  bool lock_busy = false;         // not tried: another free holds the lock; retried later
  std::vector<inventory::Event> events;  // to say, in order
  std::optional<bool> freed;      // a reclaim ran: verified back at baseline, or still held
  double seconds = 0;             // the reclaim's duration
};

/// Does one reap (on the reaper's thread): free lock, fresh look, reap_selection, reap().
using ReapAct = std::function<ReapDone(const ReapJob&)>;

/// The act of `gpureap watch`: each reap on a node of its own (`open_node`), signals
/// through the system's process control, recorded in `audit` (actor watch-reaper), under
/// the free lock of `state_dir` (not taken for a dry run).
ReapAct node_reap_act(ReapNodeFn open_node, std::shared_ptr<reclaim::AuditSink> audit,
                      std::string state_dir);

/// A reap event naming `ids` as `inv` shows them: each with its bytes over every GPU,
/// the total, and the GPU when they use one only.
inventory::Event reap_event(inventory::EventKind kind, const inventory::Inventory& inv,
                            const std::set<proc::ProcessId>& ids, std::string detail);

/// --reap-orphans-after, --keep, --reap-dry-run.
struct ReapPolicy {
  std::optional<std::chrono::milliseconds> after;  // nullopt: never reap
  std::shared_ptr<const Pattern> keep;
  bool dry_run = false;
};

class ReapWorker;

class Reaper {
 public:
  using Clock = std::chrono::system_clock;
  Reaper(ReapPolicy policy, ReapAct act);
  ~Reaper();  // waits for the reap in progress
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  /// A reload's policy (the loop thread).
  void set_policy(ReapPolicy policy) { policy_ = std::move(policy); }

  /// After each look (the loop thread; `now` wall clock seconds): the orphan clock, and
  /// a reap of the holders due handed to the reaper's thread when none runs. Never waits.
  void after_look(const inventory::Inventory& inv, double now,
                  const std::map<pid_t, proc::DeadParent>& dead_parents);

  /// The one orphan clock: when `h` became an orphan, wall clock seconds. A witnessed
  /// orphan's is its parent's death (Holder::orphaned_since); another's, the look that
  /// first showed it orphaned. nullopt: not orphaned, or not seen yet.
  std::optional<double> orphaned_since(const proc::Holder& h) const;
  /// The holders of `inv` whose reap is due at `now`: reapable, orphaned for longer
  /// than the policy's `after`, not tried yet (a reap is tried once per process).
  std::set<proc::ProcessId> due(const inventory::Inventory& inv, double now) const;
  /// When the next holder of `inv` falls due (wall clock seconds): the earliest orphan
  /// not due yet, so the loop wakes for it between ticks. nullopt: none waiting.
  std::optional<double> next_due(const inventory::Inventory& inv) const;

  /// Readable when a reap has finished: the loop polls it, then calls take_done().
  int ready_fd() const;
  /// The reaps finished since the last call. A busy free lock's event is kept only the
  /// first time for a set of holders (not at every look), and those holders stay untried.
  std::vector<ReapDone> take_done();
  /// A reap is under way (gpureap_reaping).
  bool busy() const;
  /// For tests: waits until the reap handed over has finished.
  void wait_idle();

 private:
  ReapPolicy policy_;
  std::map<proc::ProcessId, double> first_seen_;  // orphans without Holder::orphaned_since
  std::set<proc::ProcessId> tried_;               // due holders a reap was tried for
  std::set<proc::ProcessId> busy_said_;  // due when the free lock was last found busy
  std::unique_ptr<ReapWorker> worker_;
};

}  // namespace gpureap::agent
