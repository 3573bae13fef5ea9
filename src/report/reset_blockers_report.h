#pragma once
// `gpureap status --blockers`: what blocks a GPU reset or a MIG reconfiguration of each
// physical GPU (inventory/reset_blockers.h), as a table and as JSON
// (docs/json-schema.md, "status --blockers").

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "inventory/reset_blockers.h"
#include "report/style.h"
#include "report/table_layout.h"

namespace gpureap::report {

/// Per GPU: its heading, then each blocker (class, pid, user, command, MIG device)
/// with what it holds and its next step; "Nothing blocks a reset or MIG change of GPU
/// N (BUS)." when none, unless something could not be seen (then said instead).
/// The processes the scan could not inspect follow, as a warning (as in status).
/// A terminal's `width` breaks long lines at words (continuations under their text);
/// a pipe's (fixed) layout is never broken.
std::string blockers_table(const std::vector<inventory::GpuBlockers>& gpus,
                           const inventory::Inventory& inv, const Style& style,
                           TableWidth width = {});

/// The document: schema_version, command "status --blockers", gpus[] (gpu, uuid,
/// pci_bus_id, mig_mode, mig_devices[], blocked, blockers[], unknowns[]), nvml state,
/// problems[], source and agent_pid as status's.
nlohmann::ordered_json blockers_json(const std::vector<inventory::GpuBlockers>& gpus,
                                     const inventory::Inventory& inv);

}  // namespace gpureap::report
