#pragma once
// The agent's answer to "history" (inventory/gpu_history.h) on its Unix socket, as
// inventory_wire.h carries "inventory": internal JSON between two gpureap binaries of the
// same version, decode(encode(x)) == x. A GPU's readings travel as rows
// [time, used, total, sm|null, orphaned|null] to keep 1,200 readings per GPU short.

#include <string>
#include <string_view>

#include "inventory/gpu_history.h"
#include "util/result.h"

namespace gpureap::inventory {

/// The request line that asks a running agent for its GPUs' history. The agent answers
/// from what it kept (no look is taken for it), or encode_wire_error.
inline constexpr std::string_view kHistoryRequest = "history";

std::string encode_history(const GpuHistoryAnswer& answer);
/// Fails (with a message) on malformed JSON, a missing field or another wire_version;
/// an encode_wire_error answer (an older agent's "unknown request") fails with its message.
Result<GpuHistoryAnswer> decode_history(std::string_view json);

}  // namespace gpureap::inventory
