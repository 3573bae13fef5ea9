#include "capacity/host_memory.h"

#include <charconv>

namespace gpureap::capacity {

std::optional<std::uint64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  std::size_t at = 0;
  // The key must start a line, so "XMemAvailable:" cannot match.
  while ((at = meminfo.find(kKey, at)) != std::string_view::npos) {
    if (at == 0 || meminfo[at - 1] == '\n') break;
    at += kKey.size();
  }
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = meminfo.substr(at + kKey.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  std::uint64_t kib = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kib);
  if (ec != std::errc{} || end == rest.data()) return std::nullopt;
  rest = rest.substr(static_cast<std::size_t>(end - rest.data()));
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (!rest.starts_with("kB")) return std::nullopt;
  return kib * 1024;
}

}  // namespace gpureap::capacity
