#pragma once
// Signals named once: every word for a signal number (reports, the audit log, the
// run's messages) and every signal name read back (the audit log) goes through here,
// over libc's own table (sigabbrev_np).

#include <optional>
#include <string>
#include <string_view>

namespace gpureap {

/// "SIGTERM", "SIGKILL", "SIGCONT", ...; "signal N" for a number with no name.
std::string signal_name(int sig);
/// The number of "SIGTERM" (or "TERM"); nullopt for a name there is no signal for.
std::optional<int> signal_number(std::string_view name);

}  // namespace gpureap
