#pragma once
// Server instances (inventory/instances.h) as text: one heading line that names the
// server (engine, launcher alive or gone, model, port) and what it holds, shared by
// `status`, `free`'s plan and the agent's events.

#include <map>
#include <string>
#include <vector>

#include "inventory/instances.h"
#include "inventory/inventory.h"
#include "report/style.h"

namespace gpureap::report {

/// "sglang server, process group 4721, launcher gone: 8 processes (scheduler TP0..TP7)
/// on GPU 0,1,2,3,4,5,6,7, 736.0 GiB" (escaped; no newline). Model and port follow the
/// launcher when its command line names them.
std::string instance_heading(const inventory::Instance& in);

/// Its launcher by its command line (the program and its words before the first `--` option
/// when the model or port is known, as the heading says those), cut to 40 columns; its
/// comm when the command line is unknown. Escaped.
std::string launcher_name(const inventory::Instance& in);

/// The ranks of its members, compactly: "TP0..TP7", "DP0 TP0, DP0 TP1, ...", "" when none.
std::string member_ranks(const inventory::Instance& in);

/// A live instance (its launcher alive, none of its members orphaned or detached): what
/// stopping it means, "LIVE: serving on port 8001 (launcher pid 18396 alive); stopping it
/// stops the server" (issue 53 #4). "" for any other instance. Escaped; no newline.
std::string live_instance_note(const inventory::Instance& in);

/// A live instance that a plan signals only in part (`free --gpu 6` of a TP-2 server):
/// "cuts instance 18396 in part: worker TP1 (pid 18398) and its launcher (pid 18396) keep
/// running" (at most 4 named). "" when the plan takes it whole, or it is not live.
std::string cut_instance_note(const inventory::Instance& in,
                              const std::vector<proc::ProcessId>& signalled);

/// True when the instance is worth a line of its own: several processes, or a
/// recognised engine (a lone generic process is just its holder row).
bool worth_showing(const inventory::Instance& in);

/// plan's note for an instance that holds the GPUs a launch is planned on: "GPU 0,...,7
/// hold 736 GiB of sglang server 7969 (orphaned); the plan assumes it is freed before the
/// launch: gpureap free --orphans --instance 7969, or gpureap run --replace 7969 -- CMD"
/// (a live one: replaced, `run --replace` alone). Escaped; no newline.
std::string in_use_before_launch(const inventory::Instance& in);

/// The "Instances:" section of `status` ("" when none is worth showing): each
/// heading, and for an instance whose members are all orphaned the command that
/// frees it (`gpureap free --orphans --instance KEY`) and the one that replaces it
/// (`gpureap run --replace KEY -- CMD`).
/// `evidence`: per instance key, the lines that say why its members are orphaned or
/// detached (instance_evidence), printed under its heading.
using InstanceEvidence = std::map<std::string, std::vector<std::string>>;
std::string instances_section(const std::vector<inventory::Instance>& instances,
                              const Style& style, const InstanceEvidence& evidence = {});

/// Why the members of each instance worth a line are orphaned or detached (verdict_lines),
/// escaped; instances with none are absent.
InstanceEvidence instance_evidence(const inventory::Inventory& inv);

/// One verdict and the pids it covers, the one form every view prints (issue 53 #5):
/// "orphaned (inferred), pid 7411, 7412, 7413, 7414 and 4 more: re-parented to init
/// (pid 1); ..." (pids sorted, at most 4 named; escaped; no newline).
std::string verdict_line(std::string_view verdict, std::vector<pid_t> pids,
                         std::string_view reason);

/// The verdict lines of `holders` (orphaned or detached; one per distinct verdict and
/// reason), then one line per orphan provenance among them saying what it permits
/// (proc::provenance_allows: "inferred: ...: a person may free it; nothing unattended will").
std::vector<std::string> verdict_lines(const std::vector<const proc::Holder*>& holders);

}  // namespace gpureap::report
