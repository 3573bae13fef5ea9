#include "proc/mig_caps.h"

#include <charconv>

namespace gpureap::proc {
namespace {

// "<prefix><number>" at the front of `s`: the number, with `s` advanced past it.
std::optional<unsigned> take_number(std::string_view& s, std::string_view prefix) {
  if (!s.starts_with(prefix)) return std::nullopt;
  s.remove_prefix(prefix.size());
  unsigned value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  s.remove_prefix(static_cast<std::size_t>(end - s.data()));
  return value;
}

// "gpu<M>/gi<G>[/ci<C>]/access", after whatever `mig_dir` says stands between the
// GPU and its instances ("/" in mig-minors, "/mig/" under capabilities).
std::optional<MigAccess> parse_access(std::string_view s, std::string_view mig_dir) {
  auto gpu = take_number(s, "gpu");
  if (!gpu || !s.starts_with(mig_dir)) return std::nullopt;
  s.remove_prefix(mig_dir.size());
  auto gi = take_number(s, "gi");
  if (!gi) return std::nullopt;
  MigAccess out{*gpu, *gi, std::nullopt};
  if (s.starts_with("/ci")) {
    s.remove_prefix(1);
    out.ci = take_number(s, "ci");
    if (!out.ci) return std::nullopt;
  }
  if (s != "/access") return std::nullopt;
  return out;
}

}  // namespace

std::map<unsigned, MigAccess> parse_mig_minors(std::string_view text) {
  std::map<unsigned, MigAccess> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const auto space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    auto access = parse_access(line.substr(0, space), "/");
    std::string_view number = line.substr(space + 1);
    unsigned minor = 0;
    auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), minor);
    if (!access || ec != std::errc() || end != number.data() + number.size() || number.empty())
      continue;
    out[minor] = *access;
  }
  return out;
}

std::optional<MigAccess> mig_access_of_capability_path(std::string_view path) {
  constexpr std::string_view root = "/proc/driver/nvidia/capabilities/";
  if (!path.starts_with(root)) return std::nullopt;
  return mig_access_of_capability(path.substr(root.size()));
}

std::optional<MigAccess> mig_access_of_capability(std::string_view relative) {
  return parse_access(relative, "/mig/");
}

}  // namespace gpureap::proc
