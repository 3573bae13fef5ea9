#include "util/signal_name.h"

#include <fmt/format.h>

#include <csignal>
#include <cstring>

namespace gpureap {

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : fmt::format("signal {}", sig);
}

std::optional<int> signal_number(std::string_view name) {
  if (name.starts_with("SIG")) name.remove_prefix(3);
  for (int sig = 1; sig < NSIG; ++sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    if (abbrev && name == abbrev) return sig;
  }
  return std::nullopt;
}

}  // namespace gpureap
