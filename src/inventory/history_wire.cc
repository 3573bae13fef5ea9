#include "inventory/history_wire.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "inventory/inventory_wire.h"
#include "util/wire_text.h"

namespace gpureap::inventory {
namespace {

using nlohmann::json;

json optional_number(const auto& v) {
  return v ? json(*v) : json(nullptr);
}

double number(const json& v, const char* key) {
  if (!v.is_number()) throw WireError(fmt::format("'{}': not a number", key));
  return v.get<double>();
}

GpuSample decode_sample(const json& row) {
  if (!row.is_array() || row.size() != 5) throw WireError("'samples': a row is not 5 values");
  GpuSample s;
  s.time = number(row[0], "time");
  s.used = wire_integer_value<std::uint64_t>(row[1], "used");
  s.total = wire_integer_value<std::uint64_t>(row[2], "total");
  if (!row[3].is_null()) s.sm_percent = wire_integer_value<unsigned>(row[3], "sm");
  if (!row[4].is_null()) s.orphaned = wire_integer_value<std::uint64_t>(row[4], "orphaned");
  return s;
}

}  // namespace

std::string encode_history(const GpuHistoryAnswer& answer) {
  json gpus = json::array();
  for (const auto& trace : answer.gpus) {
    json rows = json::array();
    for (const auto& s : trace.samples)
      rows.push_back(
          {s.time, s.used, s.total, optional_number(s.sm_percent), optional_number(s.orphaned)});
    gpus.push_back({{"key", wire_text(trace.key)}, {"samples", std::move(rows)}});
  }
  return json{{"wire_version", kWireVersion},
              {"history",
               {{"now", answer.now},
                {"spacing_seconds", answer.spacing_seconds},
                {"gpus", std::move(gpus)}}}}
      .dump();
}

Result<GpuHistoryAnswer> decode_history(std::string_view text) {
  try {
    json doc = json::parse(text.begin(), text.end());
    if (auto problem = wire_envelope_problem(doc, kWireVersion)) return fail(*problem);
    const json& h = wire_field(doc, "history");
    GpuHistoryAnswer out;
    out.now = number(wire_field(h, "now"), "now");
    out.spacing_seconds = number(wire_field(h, "spacing_seconds"), "spacing_seconds");
    const json& gpus = wire_field(h, "gpus");
    if (!gpus.is_array()) throw WireError("'gpus': not an array");
    for (const auto& g : gpus) {
      GpuTrace trace;
      trace.key = text_from_wire(wire_field(g, "key"));
      const json& rows = wire_field(g, "samples");
      if (!rows.is_array()) throw WireError("'samples': not an array");
      for (const auto& row : rows) trace.samples.push_back(decode_sample(row));
      out.gpus.push_back(std::move(trace));
    }
    return out;
  } catch (const WireError& e) {
    return fail(std::string("agent history: ") + e.what());
  } catch (const json::exception& e) {
    return fail(std::string("agent history: ") + e.what());
  }
}

}  // namespace gpureap::inventory
