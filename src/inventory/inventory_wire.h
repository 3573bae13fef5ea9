#pragma once
// The agent's wire format for an Inventory (`gpureap watch` answers `status`,
// `free` and `wait` over its Unix socket): JSON that carries every field of
// Inventory, so decode(encode(x)) == x. Internal between two gpureap binaries of
// the same version (`wire_version`); users see report/'s formats, not this.

#include <set>
#include <string>
#include <string_view>

#include "inventory/inventory.h"
#include "util/result.h"

namespace gpureap::inventory {

inline constexpr int kWireVersion = 1;
/// The one request line a client sends (agent_client.h); any other is answered
/// with encode_wire_error.
inline constexpr std::string_view kInventoryRequest = "inventory";
/// Root's requests that make the agent let go of NVML (a GPU reset needs no client)
/// and take it up again: "yield-nvml MILLISECONDS", "resume-nvml [NOTE]" (the note,
/// e.g. what a reset did, goes into the agent's log line).
inline constexpr std::string_view kYieldSourceRequest = "yield-nvml";
inline constexpr std::string_view kResumeSourceRequest = "resume-nvml";
/// The agent's answer to them: {"nvml":"yielded","until":T} (wall clock seconds) or
/// {"nvml":"resumed"}.
std::string encode_source_answer(bool yielded, double until);
/// The `until` of a yielded answer, 0 for resumed; an encode_wire_error answer, or
/// anything else, fails with its message.
Result<double> decode_source_answer(std::string_view json);

std::string encode_inventory(const Inventory& inv);
/// Fails (with a message) on malformed JSON, a missing field or another wire_version;
/// an encode_wire_error answer fails with its message.
Result<Inventory> decode_inventory(std::string_view json);
/// The agent's answer when it cannot give an inventory: {"error": message}.
std::string encode_wire_error(std::string_view message);

/// What a caller of uid `uid` may see of `inv`: what a direct scan run by that
/// user would show it, never more. Root sees all. For another user: holders of
/// other users keep only what /proc shows any user (stat, status, cmdline,
/// cgroup) and only where NVML lists them (a direct scan cannot read their fds),
/// their fd/mapping evidence and device nodes are dropped, fd-only holders of
/// other users disappear; problems become what the scan reports
/// ("fd table unreadable …"); as_root is false.
/// Differences from that scan (inventory_redact.cc says why): one problem (pid 0)
/// says other users' processes were not inspected, instead of one per process;
/// the baselines are the agent's.
/// `others` hidden: the caller's /proc does not show other users' processes
/// (hidepid, agent/caller_view.h), so its scan finds none of them, not even
/// where NVML lists them: they are left out whole, their memory unattributed as
/// that scan would leave it (W2-16).
enum class OtherUsers { visible, hidden };
Inventory redact_for(uid_t uid, const Inventory& inv, OtherUsers others);

/// `inv` as a scan that skipped `pids` (CollectOptions::exclude) would have built
/// it: they are no holders, NVML's mentions of them are unseen pids, their
/// problems are gone, attribution is recomputed.
Inventory without_pids(const Inventory& inv, const std::set<pid_t>& pids);

}  // namespace gpureap::inventory
