#include "util/wire_text.h"

#include <stdexcept>

namespace gpureap {

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      const unsigned min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
      if (b < min || b > max) return false;
    }
    i += n + 1;
  }
  return true;
}

nlohmann::json wire_text(const std::string& s) {
  if (valid_utf8(s)) return s;
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(s.size() * 2);
  for (unsigned char c : s) {
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return nlohmann::json{{"hex", hex}};
}

std::string text_from_wire(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (!j.is_object() || !j.contains("hex") || !j["hex"].is_string())
    throw WireError("not a string");
  const auto& hex = j["hex"].get_ref<const std::string&>();
  if (hex.size() % 2 != 0) throw WireError("odd hex length");
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw WireError("bad hex digit");
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2)
    out += static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1]));
  return out;
}

const nlohmann::json& wire_field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) throw WireError(std::string("expected an object holding '") + key + "'");
  auto it = j.find(key);
  if (it == j.end()) throw WireError(std::string("missing field '") + key + "'");
  return *it;
}

bool wire_boolean(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = wire_field(j, key);
  if (!v.is_boolean()) throw WireError(std::string("'") + key + "': not a boolean");
  return v.get<bool>();
}

std::optional<std::string> wire_envelope_problem(const nlohmann::json& doc, int version) {
  if (!doc.is_object()) return "agent answer: not a JSON object";
  if (auto it = doc.find("error"); it != doc.end() && !doc.contains("wire_version")) {
    try {
      return "the agent answered: " + text_from_wire(*it);
    } catch (const WireError& e) {
      throw WireError(std::string("error: ") + e.what());
    }
  }
  const int got = wire_integer<int>(doc, "wire_version");
  if (got != version)
    return "the agent speaks wire version " + std::to_string(got) + ", this gpureap " +
           std::to_string(version);
  return std::nullopt;
}

}  // namespace gpureap
