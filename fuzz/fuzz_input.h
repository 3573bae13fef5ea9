#pragma once
// Shared by the fuzz targets: the input as text, and a check that aborts (so
// both libFuzzer and the replay tests see a crash) when an invariant breaks.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace gpureap::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// An invariant of a parser's result; a violation is a finding like a crash.
inline void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace gpureap::fuzz
