#include "top/uptime.h"

#include <charconv>
#include <fstream>
#include <iterator>

namespace gpureap::top {

std::optional<double> parse_uptime(std::string_view text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() || value < 0) return std::nullopt;
  return value;
}

std::optional<double> read_uptime(const std::string& proc_root) {
  std::ifstream in(proc_root + "/uptime");
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_uptime(text);
}

}  // namespace gpureap::top
