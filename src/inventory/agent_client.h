#pragma once
// Asking a running `gpureap watch` for the inventory (instant status). With no
// agent (no socket, refused, timed out, another version) the caller scans as
// before: every failure is a reason, never fatal.

#include <chrono>
#include <string>

#include "inventory/inventory.h"
#include "util/result.h"

namespace gpureap::inventory {

/// The agent's socket in a state directory.
std::string agent_socket_path(const std::string& state_dir);

/// Connects to `socket_path`, asks for a fresh inventory (the agent re-reads NVML
/// and new processes before answering) and decodes it; Inventory::source is then
/// "agent". Bounded by `deadline` as a whole.
Result<Inventory> ask_agent(const std::string& socket_path, std::chrono::milliseconds deadline);

}  // namespace gpureap::inventory
