#pragma once
// What a reload (SIGHUP, `systemctl reload`) changes in the agent's options, and
// which of the changes apply to the running agent: the policy, the metrics'
// detail and the tick do; what the agent bound or opened at start (the listen
// address, the textfile directory, the socket's group, the full-scan interval)
// waits for the next start. One table decides both, so the reload line cannot
// claim a change that was not applied.

#include <string>
#include <vector>

#include "report/watch_service.h"

namespace gpureap::agent {

struct AgentOptions;  // agent/options.h

/// One change: its key, the values before and after, whether it applies now.
using OptionChange = report::OptionChange;

/// The options that differ between `before` (in force) and `after` (re-read), in
/// the options file's key order.
std::vector<OptionChange> option_changes(const AgentOptions& before, const AgentOptions& after);

/// Copies into `in_force` the options of `fresh` that a running agent applies.
void apply_reloadable(AgentOptions& in_force, const AgentOptions& fresh);

}  // namespace gpureap::agent
