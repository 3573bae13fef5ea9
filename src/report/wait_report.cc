#include "report/wait_report.h"

#include <fmt/format.h>

#include "report/device_json.h"
#include "gpu/gpu_select.h"
#include "report/free_report.h"
#include "report/json.h"
#include "report/status_table.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::report {

std::string gpu_not_free_text(gpu::DeviceId id, std::optional<std::uint64_t> used,
                              std::uint64_t threshold, std::uint64_t siblings) {
  return fmt::format("GPU {} {} used (free means at most {}{})", id,
                     used ? format_bytes(*used) : "?", format_bytes(threshold),
                     siblings == 0 ? std::string()
                                   : fmt::format(", {} of it what the other compute instances' "
                                                 "holders use",
                                                 format_bytes(siblings)));
}

std::string gpus_not_free_text(const supervise::FreeWaitResult& r) {
  std::string still;
  for (const auto& g : r.gpus) {
    if (g.freed_at) continue;
    auto ghost = r.ghosts.find(g.gpu);
    still += (still.empty() ? "" : "; ") +
             (ghost != r.ghosts.end()
                  ? fmt::format("GPU {} is a ghost GPU, busy with no process: {}", g.gpu,
                                terminal_text(ghost->second))
                  : gpu_not_free_text(g.gpu, g.used, g.threshold, g.left_alone_bytes));
  }
  return still;
}

std::string wait_free_text(const supervise::FreeWaitResult& r) {
  std::vector<gpu::DeviceId> indices;
  std::uint64_t siblings = 0;
  for (const auto& g : r.gpus) {
    indices.push_back(g.gpu);
    siblings += g.left_alone_bytes;
  }
  return fmt::format(
      "GPU {} free after {}{}", gpu::device_list(indices),
      format_duration(std::chrono::nanoseconds(static_cast<long long>(r.seconds * 1e9))),
      siblings == 0 ? std::string()
                    : fmt::format(" ({} in use by the other compute instances' holders is "
                                  "theirs: the compute instances share their GPU instance's "
                                  "memory)",
                                  format_bytes(siblings)));
}

std::string wait_failure_text(const supervise::FreeWaitResult& r) {
  std::string per_gpu = gpu_problems_text("NVML cannot read", r.gpus);
  return per_gpu.empty() ? terminal_text(r.message) : per_gpu;
}

std::string wait_timeout_text(std::chrono::milliseconds timeout) {
  return timeout.count() == 0 ? std::string("not free at the one check (--timeout 0)")
                              : "timed out after " + format_duration(timeout);
}

nlohmann::ordered_json wait_json(const supervise::FreeWaitResult& r) {
  using J = nlohmann::ordered_json;
  J gpus = J::array();
  for (const auto& g : r.gpus) {
    gpus.push_back({{"index", g.gpu},
                    {"uuid", g.uuid},
                    {"used_bytes", g.used ? J(*g.used) : J(nullptr)},
                    {"baseline_bytes", g.baseline},
                    {"baseline_recorded", g.baseline_recorded},
                    {"threshold_bytes", g.threshold},
                    {"siblings_bytes", g.left_alone_bytes},
                    {"free", g.freed_at.has_value()},
                    {"freed_after_seconds", seconds_json(g.freed_at)},
                    {"ghost", r.ghosts.contains(g.gpu)}});
  }
  using Status = supervise::FreeWaitResult::Status;
  // In the order of docs/run-and-wait.md; "status" and "error" only when they apply.
  J j = {{"schema_version", kSchemaVersion},
         {"command", "wait"},
         {"free", r.status == Status::free},
         {"timed_out", r.status == Status::timed_out},
         {"seconds", seconds_value(r.seconds)},
         {"gpus", gpus},
         {"warnings", r.warnings}};
  if (r.holders) j["status"] = status_json(*r.holders);
  if (!r.message.empty()) j["error"] = r.message;
  return j;
}

}  // namespace gpureap::report
