#pragma once
// The gate's latency bench (bench/gate_latency.sh): samples in seconds summarised as
// min, p50, p99 and max (nearest rank: with 20 samples p99 is the largest) and written
// as JSON to $GPUREAP_BENCH_OUT. The bench cases (GateBench*) assert nothing about time
// and ctest leaves them out: a bench records, a test decides.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "watch_child.h"

namespace gpureap::e2e {

inline double bench_wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// {"n", "min", "p50", "p99", "max", "samples"}: nearest-rank percentiles.
inline nlohmann::json latency_summary(std::vector<double> samples) {
  nlohmann::json out = {{"n", samples.size()}, {"samples", samples}};
  if (samples.empty()) return out;
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double p) {
    const auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(samples.size())));
    return samples[std::clamp<std::size_t>(k, 1, samples.size()) - 1];
  };
  out["min"] = samples.front();
  out["p50"] = rank(0.50);
  out["p99"] = rank(0.99);
  out["max"] = samples.back();
  return out;
}

/// The number of crashes ($GPUREAP_BENCH_CRASHES, default 20).
inline int bench_crashes() {
  const char* n = std::getenv("GPUREAP_BENCH_CRASHES");
  return n ? std::max(1, std::atoi(n)) : 20;
}

/// When the agent announced the crash (its first orphaned_memory event stamped at or after
/// `since`, by its own clock), among the lines read so far: the detection part of a round.
inline std::optional<double> announced_after(const WatchChild& agent, double since) {
  for (const auto& line : agent.lines()) {
    auto j = nlohmann::json::parse(line.text, nullptr, false);
    if (j.is_discarded() || j.value("event", "") != "orphaned_memory") continue;
    if (const double t = j.value("time_unix", 0.0); t >= since) return t;
  }
  return std::nullopt;
}

/// Writes `result` to $GPUREAP_BENCH_OUT when set.
inline void write_bench_result(const nlohmann::json& result) {
  if (const char* path = std::getenv("GPUREAP_BENCH_OUT")) std::ofstream(path) << result.dump(2) << "\n";
}

}  // namespace gpureap::e2e
