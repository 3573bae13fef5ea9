#pragma once
// Rendering of `gpureap wait` and of `run --wait-free`: the JSON document, the
// "free after" line and the one phrasing of a GPU that is not free yet.

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "supervise/free_wait.h"

namespace gpureap::report {

/// "GPU 3 92.0 GiB used (free means at most 494 MiB)"; "?" when not measured. A MIG
/// compute instance adds what its siblings' holders use (`siblings`, in the threshold).
std::string gpu_not_free_text(gpu::DeviceId id, std::optional<std::uint64_t> used,
                              std::uint64_t threshold, std::uint64_t siblings = 0);

/// The GPUs of `r` not seen free, each as gpu_not_free_text, joined by "; ".
std::string gpus_not_free_text(const supervise::FreeWaitResult& r);

/// "GPU 0,1 free after 12 ms" (without a newline).
std::string wait_free_text(const supervise::FreeWaitResult& r);

/// Why the wait could not measure (status LeftoverClass::source_failed), escaped: the GPUs NVML cannot
/// read, one line each when several (report::gpu_problems_text), else the message.
std::string wait_failure_text(const supervise::FreeWaitResult& r);

/// Why the wait ended without the GPUs free: "timed out after 5 s" or, with
/// `timeout` 0, "not free at the one check (--timeout 0)".
std::string wait_timeout_text(std::chrono::milliseconds timeout);

/// The `wait --json` document (docs/run-and-wait.md), its keys in that order.
nlohmann::ordered_json wait_json(const supervise::FreeWaitResult& r);

}  // namespace gpureap::report
