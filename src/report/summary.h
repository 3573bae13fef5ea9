#pragma once
// `gpureap status --summary` and `--check`: one line per node for fleet checks
// (clush -b folds identical lines, node-problem-detector reads at most 80 bytes of it,
// NHC puts it in the drain reason). The grammar is stable and documented in
// docs/fleet-checks.md:
//
//   clean: 8 GPUs, no leak
//   problem: orphaned memory on GPU 3,5; driver-held memory on GPU 2
//   problem: ghost GPU 1; unknown: NVML cannot read GPU 4
//   unknown: NVML unusable (hung)
//
// A line holds no pid, time, byte figure or anything else that differs between two
// healthy nodes of one kind, so every clean node of a fleet prints the same bytes.

#include <string>
#include <string_view>

#include "inventory/node_check.h"

namespace gpureap::report {

/// The line for a node's check (no newline): its verdict word, then each finding's
/// phrase with its GPUs, problems before what could not be told.
std::string summary_line(const inventory::NodeCheck& check);

/// The line when the device directory cannot be read (nothing was looked at).
std::string summary_devices_unreadable();

/// The line when no answer came within the deadline (`deadline` as the flag takes it).
std::string summary_unanswered(std::string_view deadline);

}  // namespace gpureap::report
