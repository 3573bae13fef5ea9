#pragma once
// The one table of spellings for the reclaim engine's enums, in text and JSON
// alike (docs/json-schema.md lists them). The engine branches on the enums; only
// renderers turn them into words, through these functions.

#include <string>
#include <string_view>
#include <vector>

#include "inventory/events.h"
#include "reclaim/escalation.h"
#include "reclaim/leftovers.h"
#include "reclaim/plan.h"

namespace gpureap::report {

/// "SIGTERM", "SIGKILL", "none".
std::string_view to_string(reclaim::Signal s);
/// The fixed part of an action's outcome ("exited", "already gone", ...).
std::string_view to_string(reclaim::Outcome o);
/// An action's outcome as shown and in JSON: the fixed part plus its detail
/// ("signal failed: <why>").
std::string outcome_text(const reclaim::Action& a);
/// "driver_held", "live_holder", ...
std::string_view to_string(reclaim::LeftoverClass c);
/// A skipped holder's class: "protected", "not_permitted", "not_selected".
std::string_view to_string(reclaim::SkipKind k);
/// An agent event's kind: "orphaned_memory", "zombie_leader", "unattributed_memory",
/// "memory_freed", "nvml_down", "nvml_up", "reap_planned", "reaped", "reap_failed",
/// "ghost_gpu", "ghost_gpu_gone"
/// (the `event` of `gpureap --json watch`; the metrics count events by these words).
/// A C string, so that it keys a std::map<std::string, …> directly.
const char* to_string(inventory::EventKind k);
/// Every event kind, in order: those the switch of to_string names (so a new kind, which
/// the compiler makes it name, is listed here and has its metric series from the start).
std::vector<inventory::EventKind> event_kinds();

}  // namespace gpureap::report
