#pragma once
// `gpureap status --format csv` (issue 53, the peers' reasons: nvidia-smi's
// --query-gpu=... --format=csv for quick scripts). The columns are --json's: the GPU rows'
// and the holder rows' own keys (docs/json-schema.md), nested ones by a dotted path
// ("memory.used_bytes"), read from status_json's document, so the two never disagree.

#include <nlohmann/json.hpp>
#include <string>

namespace gpureap::report {

/// One header line and one row per GPU of `status_doc` (status_json's document): index,
/// name, vendor, uuid, pci_bus_id, state, memory.*_bytes, attributed/orphaned/unattributed
/// bytes, unattributed.class, utilization, sensors. RFC 4180: a field with a comma, quote
/// or line break is quoted; null is empty; a list of scalars is joined by ';'.
std::string status_gpus_csv(const nlohmann::ordered_json& status_doc);

/// One header line and one row per holder of each GPU (a holder of two GPUs is a row on
/// each): gpu (its GPU's index), then the holder's keys: pid, start_time, user, state,
/// ppid, pgid, orphaned, provenance, detached, instance, container, gpu_bytes, comm,
/// cmdline, ...
std::string status_holders_csv(const nlohmann::ordered_json& status_doc);

}  // namespace gpureap::report
