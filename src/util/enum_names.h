#pragma once
// One table of names per enum, in the manner of systemd's string tables
// (src/basic/string-table.h): an enum E whose values are 0..N-1 declares, in its own
// namespace,
//
//   std::string_view enum_name(E value);
//
// defined as a switch over every value with no `default:` and the empty view after it.
// -Wswitch (in -Wall, an error under -Werror) then fails the build when a value has no
// name. Every spelling of E (reports, the agent's wire, the NVML worker's wire, metrics)
// reads that one table; enum_values and enum_from_name below are derived from it.

#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gpureap {

/// Every value of E in order: 0, 1, ... up to the first that has no name.
template <typename E>
std::vector<E> enum_values() {
  static_assert(std::is_enum_v<E>);
  std::vector<E> out;
  for (std::underlying_type_t<E> i = 0;; ++i) {
    const E e = static_cast<E>(i);
    if (enum_name(e).empty()) break;
    out.push_back(e);
  }
  return out;
}

/// The value of E named `name`, or nullopt.
template <typename E>
std::optional<E> enum_from_name(std::string_view name) {
  // Walks the table without building enum_values' vector: the wires decode every
  // enumerated field through here.
  for (std::underlying_type_t<E> i = 0;; ++i) {
    const E e = static_cast<E>(i);
    const std::string_view n = enum_name(e);
    if (n.empty()) return std::nullopt;
    if (n == name) return e;
  }
}

}  // namespace gpureap
