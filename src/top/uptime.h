#pragma once
// The machine's uptime, from which `top` computes every holder's age at each frame
// (proc's scan reads it the same way), so that ages tick between looks and through an
// agent's answer alike.

#include <optional>
#include <string>
#include <string_view>

namespace gpureap::top {

/// The first number of `<proc_root>/uptime` (seconds since boot), or nullopt.
std::optional<double> read_uptime(const std::string& proc_root);

/// The same, parsed from the file's text ("5000.25 9000.00\n"); pure.
std::optional<double> parse_uptime(std::string_view text);

}  // namespace gpureap::top
