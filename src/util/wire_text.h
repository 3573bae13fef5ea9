#pragma once
// Text on a JSON wire (the agent's answer, the NVML worker's): strings from /proc, /dev
// and the driver are bytes, not necessarily UTF-8. JSON text cannot carry those bytes,
// and replacing them would make an answer differ from a direct scan, so such a string
// travels as {"hex": "..."}; valid UTF-8 travels as a plain string. The user-facing
// JSON (report/json.cc) is a different contract and replaces invalid bytes instead.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace gpureap {

/// RFC 3629 (no overlongs, no surrogates, nothing above U+10FFFF): the rule nlohmann's
/// dump applies, so whatever passes here it writes unchanged.
bool valid_utf8(std::string_view s);

/// `s` as a wire value: the string itself, or {"hex": "..."} when it is not UTF-8.
nlohmann::json wire_text(const std::string& s);

/// A malformed wire value: what is wrong, naming the field where there is one.
struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The bytes of a wire value written by wire_text. Throws WireError for anything else.
std::string text_from_wire(const nlohmann::json& j);

/// Why an agent's answer `doc` cannot be read as a document of wire version `version`:
/// not an object, the agent's own {"error": ...}, or another wire version; nullopt when
/// it can. A malformed error text or version field throws WireError. The one envelope
/// check of every answer (inventory_wire, history_wire).
std::optional<std::string> wire_envelope_problem(const nlohmann::json& doc, int version);

// Strict typed reads, shared by both wires: a missing field, a wrong type or an integer
// out of T's range is a WireError naming the field (nlohmann's get<unsigned>() would
// wrap -1 silently).
const nlohmann::json& wire_field(const nlohmann::json& j, const char* key);

template <typename T>
T wire_integer_value(const nlohmann::json& v, const char* key) {
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    auto s = v.get<std::int64_t>();
    if (std::in_range<T>(s)) return static_cast<T>(s);
  }
  throw WireError(std::string("'") + key + "': not an integer in range");
}

template <typename T>
T wire_integer(const nlohmann::json& j, const char* key) {
  return wire_integer_value<T>(wire_field(j, key), key);
}

template <typename T>
std::optional<T> wire_optional_integer(const nlohmann::json& j, const char* key) {
  if (wire_field(j, key).is_null()) return std::nullopt;
  return wire_integer<T>(j, key);
}

bool wire_boolean(const nlohmann::json& j, const char* key);

}  // namespace gpureap
