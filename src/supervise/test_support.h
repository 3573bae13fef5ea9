#pragma once
// Test-only helpers shared by the supervise tests (header-only; not in the library).

#include <cstdlib>
#include <string>
#include <vector>

#include "supervise/launcher.h"

extern char** environ;

namespace gpureap::supervise::testing {

/// This process's environment, as CMD would inherit it.
inline std::vector<std::string> current_env() {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) out.emplace_back(*e);
  return out;
}

/// The forwarded signals, blocked once for the whole test binary (they must be
/// blocked before any thread starts and stay blocked).
inline ForwardedSignals& signals() {
  static ForwardedSignals s = [] {
    auto r = ForwardedSignals::block();
    if (!r) std::abort();
    return std::move(*r);
  }();
  return s;
}

}  // namespace gpureap::supervise::testing
