#pragma once
// One free session (issue 36): what `free`, `top`'s F key and the agent's reaper each
// wrote around the one free flow (free_flow.h), written once. From a FreeRequest:
//
//   the free lock (optional, waited for until a time, never past the deadline)
//     -> a fresh look within the deadline, reading the process table from its own
//        listing of /proc (or the look the caller took under the lock)
//     -> the GPUs from the selected processes (Filters::ids) when asked, or the
//        caller's choice from the look (free's --gpu, --pid, --instance)
//     -> the caller context from that look (CallerContext::of: no second listing)
//     -> free_selection through the Freer's control (the audit trail)
//     -> a typed end: done (with the FreeOutcome), lock_failed, or no_gpus.
//
// The process control is the Freer's, built once per command (cli/environment.h's
// open_audit + SystemProcessControl; the agent's from its options; a unit test's
// FakeProcessControl). What each caller does with the outcome (exit status, box,
// event) stays its own; the words come from report/.

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "inventory/collect.h"
#include "inventory/node.h"
#include "reclaim/audited_control.h"
#include "reclaim/free_flow.h"
#include "reclaim/reclaimer.h"

namespace gpureap::reclaim {

/// What a command frees through: its node, and its process control with the audit trail.
struct Freer {
  inventory::Node& node;
  AuditedControl& control;
};

struct FreeRequest {
  ReclaimOptions options;  // the selection, the timings, the deadline
  /// The selected GPUs are those the processes of options.selection.ids use in the
  /// session's look (top's tagged set, a reap's); otherwise selection.gpus as given.
  bool gpus_from_ids = false;
  /// Take the free lock in this state directory first, waiting until `lock_until` (a
  /// time already past: no wait; never past options.deadline). Empty: not taken here
  /// (the caller holds it, or nothing will be signalled).
  std::string lock_dir;
  std::chrono::steady_clock::time_point lock_until{};
  /// The session's look (the agent's dead parents, ...); cut to options.deadline.
  inventory::CollectOptions look;
  /// A look the caller took already (under the lock): used instead of a new one.
  std::optional<inventory::Inventory> taken;
  /// With the session's look, before the plan: the caller chooses the selected GPUs
  /// from it (free's --gpu, --pid, --instance) into the selection. False ends the
  /// session (SessionEnd::not_chosen) with nothing planned.
  std::function<bool(const inventory::Inventory&, Selection&)> choose;
  FreeSteps steps;
};

enum class SessionEnd {
  done,         // free_selection ran: FreeSession::outcome says how it went
  lock_failed,  // the free lock was not had (FreeSession::problem says why)
  no_gpus,      // gpus_from_ids: none of the selected processes uses a GPU any more
  not_chosen,   // the caller's choose said no (it said why)
};

struct FreeSession {
  SessionEnd end = SessionEnd::done;
  std::string problem;        // lock_failed: the lock's error
  inventory::Inventory look;  // the look the plan was made from
  FreeOutcome outcome;        // end == done
};

/// One free session: see the top of this file. Never blocks past the request's
/// deadline (the lock's wait, the look, the reclaim), nor past lock_until for the lock.
FreeSession free_session(Freer& freer, FreeRequest request);

}  // namespace gpureap::reclaim
