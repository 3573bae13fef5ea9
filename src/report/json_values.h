#pragma once
// Small values of the JSON documents, spelled once for every report: an empty text or an
// absent number is null ("no container", "no limit"), never "" or 0.
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

namespace gpureap::report {

/// `s`, or null when it is empty.
template <typename Json = nlohmann::ordered_json>
Json text_or_null(std::string_view s) {
  return s.empty() ? Json(nullptr) : Json(std::string(s));
}

/// `*v`, or null when there is none.
template <typename Json = nlohmann::ordered_json, typename T>
Json or_null(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

}  // namespace gpureap::report
