#pragma once
// The agent's reaper policy (--reap-orphans-after), apart from the agent's loop so
// that it runs on a FakeProcessControl in unit tests: which holders it may act on,
// the exact set a reap fixes from a fresh look, and the one free flow that acts.
//
// What acts unattended acts only on owned or witnessed evidence (DESIGN, "Evidence
// has a provenance"): an inferred orphan is announced and offered to a person's
// `free --orphans`, never reaped (proc::unattended_may_act).

#include <functional>
#include <set>

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

}  // namespace gpureap::agent
