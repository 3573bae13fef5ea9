#pragma once
// JSON rendering of gpureap's views. One place owns the schema
// (docs/json-schema.md documents it); the CLI only prints the result.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "inventory/inventory.h"
#include "proc/holder.h"

namespace gpureap::report {

/// 2 (issue 40): a `gpureap watch` event's "time" is RFC 3339 as every document's (its
/// epoch moved to "time_unix"), events carry "hostname", `started` says "gpu_count" (its
/// "gpus" was a number), and free's plan targets have "verdict", "evidence",
/// "provenance" and "instance" (docs/json-schema.md).
inline constexpr int kSchemaVersion = 2;

/// The text of a JSON document (indented by 2, ending in a newline), valid UTF-8
/// whatever bytes its strings hold: a byte that is not UTF-8 (a command line, a
/// path) becomes U+FFFD. Every `--json` output goes through these; nothing throws
/// on untrusted text (docs/json-schema.md, "Text").
std::string json_text(const nlohmann::ordered_json& doc);
/// The same compact, on one line ending in a newline: a JSON-lines record (watch).
std::string json_line(const nlohmann::ordered_json& doc);

/// When and where a document was made: "time" (RFC 3339 with the date, util/time_text.h)
/// and "hostname" (util/host_name.h).
struct DocumentStamp {
  std::string time;
  std::string hostname;
  /// The wall clock and this host's name, now.
  static DocumentStamp now();
};

/// `doc` (a command's document, "schema_version" and "command" first) with "time" and
/// "hostname" after those two, so that every document starts the same way
/// (docs/json-schema.md). The other keys keep their order.
nlohmann::ordered_json stamped(const nlohmann::ordered_json& doc,
                               const DocumentStamp& stamp = DocumentStamp::now());

/// The head of a `gpureap watch` event: schema_version, event, level, then when and where
/// as a document says it ("time" RFC 3339, "hostname"), and "time_unix": the same
/// instant in seconds since the epoch (to the microsecond), for arithmetic.
nlohmann::ordered_json event_head(std::string_view event, std::string_view level, double time);

/// The text of a command's document, stamped: what `--json` prints.
std::string document_text(const nlohmann::ordered_json& doc);

/// A duration (or a time since the epoch) in seconds, rounded to the millisecond so
/// that it prints without float noise (0.02, not 0.01999999999998181): the one rule
/// for every seconds field of a document (docs/json-schema.md).
double seconds_value(double seconds);
/// The same for an optional one: null when unknown.
nlohmann::ordered_json seconds_json(const std::optional<double>& seconds);

/// A holder object: pid, start_time, user, uid, state, threads[], zombie_leader,
/// ppid, pgid, sid, orphaned, orphan_reason, orphan_evidence, orphaned_since,
/// detached, detached_reason, cgroup, container, run_id, nspid[], comm, cmdline, argv[],
/// age_seconds, found_by[], devices[], gpu_bytes (null when unknown).
nlohmann::ordered_json holder_json(const proc::Holder& h, std::optional<std::uint64_t> gpu_bytes);

/// One server instance (inventory/instances.h): key, kind, engine, launcher, model,
/// port, GPUs, bytes and members with their roles and ranks.
nlohmann::ordered_json instance_json(const inventory::Instance& in);

/// One GPU: index, name, uuid, pci_bus_id, minor, memory{total_bytes, used_bytes,
/// reserved_bytes, baseline_bytes, baseline_recorded}, attributed_bytes,
/// orphaned_bytes, unattributed_bytes, unattributed{class, detail} (null when none), holders[]
/// (each with uses_gpu), source_unseen_pids[].
nlohmann::ordered_json gpu_json(const inventory::GpuView& view);

/// The whole `status` document (unstamped: see stamped()): schema_version, nvml{state, problem,
/// driver_version}, host_pid_namespace, gpus[], other_holders[], problems[], scan{processes}.
nlohmann::ordered_json status_json(const inventory::Inventory& inv);

}  // namespace gpureap::report
