#include "report/status_csv.h"

#include <string_view>
#include <vector>

namespace gpureap::report {
namespace {

constexpr std::string_view kGpuColumns[] = {
    "index",         "name",           "vendor",
    "uuid",          "pci_bus_id",     "state",
    "memory.total_bytes", "memory.used_bytes", "memory.baseline_bytes",
    "attributed_bytes", "orphaned_bytes", "unattributed_bytes",
    "unattributed.class", "utilization.gpu_percent", "utilization.memory_percent",
    "sensors.temperature_celsius", "sensors.power_watts", "nvml.state"};

constexpr std::string_view kHolderColumns[] = {
    "pid",        "start_time", "user",          "uid",       "state",      "ppid",
    "pgid",       "sid",        "orphaned",      "provenance", "orphan_evidence",
    "detached",   "zombie_leader", "instance",   "container", "run_id",     "gpu_bytes",
    "pinned_host_bytes", "age_seconds", "found_by", "engine.engine", "engine.role",
    "uses_gpu",   "comm",       "cmdline"};

// The value at a dotted path, or null when a step is missing or null.
const nlohmann::ordered_json* at_path(const nlohmann::ordered_json& row, std::string_view path) {
  const nlohmann::ordered_json* at = &row;
  while (!path.empty()) {
    const auto dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
    path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
  }
  return at;
}

std::string field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string scalar(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string out;
    for (const auto& e : v) {
      if (e.is_object() || e.is_array()) continue;
      out += (out.empty() ? "" : ";") + scalar(e);
    }
    return out;
  }
  if (v.is_object()) return "";
  return v.dump();
}

template <std::size_t N>
std::string header(const std::string_view (&columns)[N], std::string_view first = {}) {
  std::string out(first);
  for (auto c : columns) out += (out.empty() ? "" : ",") + std::string(c);
  return out + "\n";
}

template <std::size_t N>
std::string row(const nlohmann::ordered_json& obj, const std::string_view (&columns)[N],
                std::string first = {}) {
  std::string out = std::move(first);
  bool any = !out.empty();
  for (auto c : columns) {
    const auto* v = at_path(obj, c);
    out += (any ? "," : "") + field(v ? scalar(*v) : "");
    any = true;
  }
  return out + "\n";
}

}  // namespace

std::string status_gpus_csv(const nlohmann::ordered_json& status_doc) {
  std::string out = header(kGpuColumns);
  for (const auto& g : status_doc.value("gpus", nlohmann::ordered_json::array()))
    out += row(g, kGpuColumns);
  return out;
}

std::string status_holders_csv(const nlohmann::ordered_json& status_doc) {
  std::string out = header(kHolderColumns, "gpu");
  for (const auto& g : status_doc.value("gpus", nlohmann::ordered_json::array()))
    for (const auto& h : g.value("holders", nlohmann::ordered_json::array()))
      out += row(h, kHolderColumns, field(scalar(g.value("index", nlohmann::ordered_json()))));
  return out;
}

}  // namespace gpureap::report
