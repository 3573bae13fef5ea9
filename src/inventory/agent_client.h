#pragma once
// Asking a running `gpureap watch` for the inventory (instant status). With no
// agent (no socket, refused, timed out, another version) the caller scans as
// before: every failure is a reason, never fatal.

#include <chrono>
#include <optional>
#include <string>

#include "inventory/gpu_history.h"
#include "inventory/inventory.h"
#include "util/result.h"

namespace gpureap::inventory {

/// The agent's socket in a state directory.
std::string agent_socket_path(const std::string& state_dir);

/// The socket of the `gpureap watch` to ask for the first look, or nullopt: none with
/// `no_agent` (--no-agent) or GPUREAP_NO_AGENT=1. Its answer is used only when the agent
/// watches the node this command resolved (Node::look compares the device directory, NVML
/// library, proc root and $GPUREAP_SIM_DIR). Else `<state dir>/agent.sock` of the caller's
/// state directory (`caller_dir`, or state_dir()); for a caller that is not root, when no
/// socket is there, root's agent's: $GPUREAP_STATE_DIR, else /run/gpureap.
std::optional<std::string> agent_socket_for(bool no_agent,
                                            const std::optional<std::string>& caller_dir);

/// Connects to `socket_path`, asks for a fresh inventory (the agent re-reads NVML
/// and new processes before answering) and decodes it; Inventory::source is then
/// "agent". Bounded by `deadline` as a whole.
Result<Inventory> ask_agent(const std::string& socket_path, std::chrono::milliseconds deadline);

/// Asks the agent at `socket_path` (root's requests) to let go of NVML for at
/// most `how_long` and answers once it has (its NVML session closed): a GPU reset
/// may start then. Returns when the agent takes NVML up again by itself (wall
/// clock seconds). Bounded by `deadline`.
Result<double> ask_agent_to_yield_nvml(const std::string& socket_path,
                                       std::chrono::milliseconds how_long,
                                       std::chrono::milliseconds deadline);

/// Asks the agent to take NVML up again now; `note` (one line: what was done,
/// "reset GPU 0: succeeded") goes into its log line. Bounded by `deadline`.
Result<void> ask_agent_to_resume_nvml(const std::string& socket_path, const std::string& note,
                                      std::chrono::milliseconds deadline);

/// Asks the agent at `socket_path` for its GPUs' history (inventory/gpu_history.h): what
/// it kept, no look taken for it; the orphaned bytes only when the caller is root.
/// Bounded by `deadline`.
Result<GpuHistoryAnswer> ask_agent_history(const std::string& socket_path,
                                           std::chrono::milliseconds deadline);

}  // namespace gpureap::inventory
