#pragma once
// Rendering of `plan`: the KV-capacity plan of one launch (or a sweep of
// fractions) as a table and as JSON (docs/plan.md documents the schema). The
// arithmetic lives in src/capacity; this file only lays it out.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "capacity/kv_planner.h"
#include "capacity/sglang_log.h"
#include "report/style.h"

namespace gpureap::report {

/// Everything `plan` shows: the planner's input, one point per fraction, and
/// where each measured or assumed figure came from (one line each).
struct PlanReport {
  capacity::PlanInput input;
  std::string engine_flag;  // --mem-fraction-static or --gpu-memory-utilization
  std::string weights_origin;
  std::string m0_origin;
  std::string reserve_origin;
  std::optional<std::uint64_t> card_total;
  std::optional<capacity::Calibration> calibration;
  std::string log_path;      // --from-log, when calibrated
  std::string hicache_text;  // the flag as typed, for the heading
  std::vector<std::string> notes;
  std::vector<capacity::Warning> warnings;  // not tied to a fraction
  std::vector<capacity::PlanPoint> points;  // at least one
  bool sweep = false;                       // several fractions: a table, one row each
};

/// Bytes in decimal GB with one decimal ("48.0 GB"), the unit of SGLang's
/// --hicache-size and of host RAM.
std::string decimal_gb(std::uint64_t bytes);

/// The table: heading, the per-GPU figures, then one fraction in detail or the
/// sweep as rows, then notes and warnings (red where the launch fails or OOMs).
std::string plan_report_text(const PlanReport& report, const Style& style);

/// The JSON document; a single fraction's fields sit at the top level, a
/// sweep's under points[]. Print it through json_text.
nlohmann::ordered_json plan_report_json(const PlanReport& report);

}  // namespace gpureap::report
