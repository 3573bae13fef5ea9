#pragma once
// `run --replace` / `--replace-orphans` / `--free-first`: the three lines a restart reads
// (freed, verified, launched), and the reasons it refuses. Text only (stderr: stdout is
// CMD's); each line through run_line.

#include <sys/types.h>

#include <string>
#include <vector>

#include "reclaim/free_flow.h"
#include "supervise/port_check.h"
#include "supervise/replace.h"

namespace gpureap::report {

/// "freed sglang server 7969 (8 processes, 736 GiB on GPU 0,...,7) in 0.42 s", one
/// clause per instance of the plan; processes of no instance are counted apart.
std::string freed_line(const reclaim::Plan& plan, const reclaim::ReclaimReport& report);

/// "verified: GPU 0,1,2,3 back at baseline; port 30000 closed".
std::string verified_line(const reclaim::ReclaimReport& report, const std::vector<unsigned>& ports);

/// "launched python3 as pid 4242, run python3-4240".
std::string launched_line(const std::string& command, pid_t pid, const std::string& run_id);

/// "port 30000 is still listened on by pid 4242 (python3)".
std::string open_port_text(const supervise::OpenPort& port);

/// The plan as `run --replace` asks about it: each instance once (its heading, the
/// evidence of its orphaning, what else the plan stops), then the processes that are
/// no instance's. Ends with a newline.
std::string replace_plan_text(const reclaim::Plan& plan, const inventory::Inventory& inv);

/// Why a plan may not go ahead without a person's confirmation, or "" when it may: every
/// GPU holder it signals is orphaned with owned or witnessed evidence, no live launcher
/// is in it, and nothing on the selected GPUs that it was asked to free is left alone for
/// lack of evidence (--free-first: any holder; --replace-orphans: an orphan by inference).
std::string needs_confirmation(const reclaim::Plan& plan, const inventory::Inventory& inv,
                               supervise::ReplaceMode mode);

}  // namespace gpureap::report
