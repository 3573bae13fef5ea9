#pragma once
// The wire between gpureap and its NVML worker process: GPU values as JSON,
// sent as length-prefixed frames over a stream socket. Internal to src/gpu
// (the user-facing --json schema belongs to src/report).

#include <chrono>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "gpu/gpu_info.h"
#include "util/result.h"

namespace gpureap::gpu {

/// One encoding per type, shared by the NVML worker's wire and the agent's
/// (inventory/inventory_wire.cc); text goes through util/wire_text.h.
nlohmann::json process_to_wire(const GpuProcess& process);
/// Throws (std::exception) on a malformed value.
GpuProcess process_from_wire(const nlohmann::json& wire);
nlohmann::json gpu_info_to_wire(const GpuInfo& gpu);
/// Fails, naming the field, on a malformed value.
Result<GpuInfo> gpu_info_from_wire(const nlohmann::json& wire);

nlohmann::json memory_reading_to_wire(const MemoryReading& reading);
/// Fails, naming the field, on a malformed value.
Result<MemoryReading> memory_reading_from_wire(const nlohmann::json& wire);

/// Why a frame could not be sent or received.
struct FrameFailure {
  enum class Kind { timeout, closed, io, malformed };
  Kind kind = Kind::io;
  std::string message;
};

template <typename T>
using FrameResult = std::expected<T, FrameFailure>;

/// When to give up; nullopt waits for as long as it takes (the worker side).
using FrameDeadline = std::optional<std::chrono::steady_clock::time_point>;

/// The largest frame either side accepts.
inline constexpr std::size_t kMaxFrameBytes = 64U << 20U;

/// Sends one frame (4-byte little-endian length, then the JSON text) on a
/// stream socket, without raising SIGPIPE. With a deadline the socket must be
/// non-blocking; the call then waits with poll() until the deadline at most.
FrameResult<void> write_frame(int fd, const nlohmann::json& message, FrameDeadline deadline);

/// Receives one frame. Kind::closed when the peer closed the connection
/// (also mid-frame), Kind::malformed when the frame is not JSON or too large.
FrameResult<nlohmann::json> read_frame(int fd, FrameDeadline deadline);

}  // namespace gpureap::gpu
