#pragma once
// Rendering of `plan`: the KV-capacity plan of one launch (or a sweep of
// fractions; capacity::resolve_plan makes it) as a table and as JSON (docs/plan.md
// documents the schema). The arithmetic lives in src/capacity; this file only lays it out.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "capacity/resolve_plan.h"
#include "report/style.h"

namespace gpureap::report {

/// Bytes in decimal GB with one decimal ("48.0 GB"), the unit of SGLang's
/// --hicache-size and of host RAM.
std::string decimal_gb(std::uint64_t bytes);

/// The table: heading, the per-GPU figures, then one fraction in detail or the
/// sweep as rows, then notes and warnings (red where the launch fails or OOMs).
std::string plan_report_text(const capacity::LaunchPlan& report, const Style& style);

/// The JSON document; a single fraction's fields sit at the top level, a
/// sweep's under points[]. Print it through json_text.
nlohmann::ordered_json plan_report_json(const capacity::LaunchPlan& report);

}  // namespace gpureap::report
