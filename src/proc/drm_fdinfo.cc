#include "proc/drm_fdinfo.h"

#include <array>
#include <charconv>
#include <limits>

#include "util/text.h"

namespace gpureap::proc {
namespace {

std::optional<std::uint64_t> parse_fdinfo_uint(std::string_view s) {
  std::uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// The memory kinds of the spec: drm-<kind>-<region>.
constexpr std::string_view kMemoryKinds[] = {"total-",     "shared-", "resident-",
                                             "purgeable-", "active-", "memory-"};

bool is_memory_key(std::string_view key) {
  for (std::string_view kind : kMemoryKinds)
    if (key.starts_with(kind) && key.size() > kind.size()) return true;
  return false;
}

// The sum of memory[<prefix><N>] over the regions N (xe's vram0, vram1; i915's local0).
std::optional<std::uint64_t> sum_fdinfo_regions(const DrmFdinfo& info, std::string_view prefix) {
  std::optional<std::uint64_t> sum;
  for (auto it = info.memory.lower_bound(prefix);
       it != info.memory.end() && std::string_view(it->first).starts_with(prefix); ++it) {
    std::string_view rest = std::string_view(it->first).substr(prefix.size());
    if (!parse_fdinfo_uint(rest)) continue;  // "total-vram" is not "total-vram0"
    sum = sum.value_or(0) + it->second;
  }
  return sum;
}

DrmClient drm_client_of(const DrmFdinfo& info) {
  return DrmClient{info.driver, info.pdev, info.client_id, std::nullopt};
}

}  // namespace

std::optional<std::uint64_t> parse_drm_size(std::string_view value) {
  value = trim(value);
  std::uint64_t unit = 1;
  if (auto space = value.find(' '); space != std::string_view::npos) {
    std::string_view suffix = trim(value.substr(space + 1));
    if (suffix == "KiB" || suffix == "kB")
      unit = 1024;
    else if (suffix == "MiB")
      unit = 1024 * 1024;
    else
      return std::nullopt;
    value = value.substr(0, space);
  }
  auto n = parse_fdinfo_uint(value);
  if (!n || *n > std::numeric_limits<std::uint64_t>::max() / unit) return std::nullopt;
  return *n * unit;
}

DrmFdinfo parse_drm_fdinfo(std::string_view text) {
  DrmFdinfo info;
  for_each_line(text, [&](std::string_view line) {
    auto colon = line.find(':');
    if (colon == std::string_view::npos) return;
    std::string_view key = line.substr(0, colon);
    std::string_view value = trim(line.substr(colon + 1));
    if (key == "drm-driver") {
      info.driver = value;
    } else if (key == "drm-pdev" || key == "pdev") {
      info.pdev = value;
    } else if (key == "drm-client-id") {
      info.client_id = parse_fdinfo_uint(value);
    } else if (key.starts_with("drm-") && is_memory_key(key.substr(4))) {
      if (auto bytes = parse_drm_size(value)) info.memory[std::string(key.substr(4))] = *bytes;
    } else if (key == "vram mem" || key == "gtt mem" || key == "cpu mem") {
      if (auto bytes = parse_drm_size(value)) info.amdgpu_legacy[std::string(key)] = *bytes;
    }
  });
  return info;
}

std::optional<DrmClient> read_amdgpu_fdinfo(std::string_view text) {
  DrmFdinfo info = parse_drm_fdinfo(text);
  const bool legacy = info.driver.empty() && info.amdgpu_legacy.contains("vram mem");
  if (info.driver != "amdgpu" && !legacy) return std::nullopt;
  DrmClient client = drm_client_of(info);
  if (legacy) client.driver = "amdgpu";
  for (std::string_view key : {"total-vram", "memory-vram"}) {
    if (auto it = info.memory.find(key); it != info.memory.end()) {
      client.device_bytes = it->second;
      return client;
    }
  }
  if (auto it = info.amdgpu_legacy.find("vram mem"); it != info.amdgpu_legacy.end())
    client.device_bytes = it->second;
  return client;
}

std::optional<DrmClient> read_intel_fdinfo(std::string_view text) {
  DrmFdinfo info = parse_drm_fdinfo(text);
  DrmClient client = drm_client_of(info);
  if (info.driver == "xe")
    client.device_bytes = sum_fdinfo_regions(info, "total-vram").value_or(0);
  else if (info.driver == "i915")
    client.device_bytes = sum_fdinfo_regions(info, "total-local").value_or(0);
  else
    return std::nullopt;
  return client;
}

bool same_pci_address(std::string_view a, std::string_view b) {
  // domain:bus:device.function, hexadecimal; the domain's width differs by source.
  auto parse = [](std::string_view s) -> std::optional<std::array<std::uint64_t, 4>> {
    std::array<std::uint64_t, 4> parts{};
    const char seps[3] = {':', ':', '.'};
    for (int i = 0; i < 4; ++i) {
      std::size_t end = i < 3 ? s.find(seps[i]) : s.size();
      if (end == std::string_view::npos || end == 0) return std::nullopt;
      std::string_view field = s.substr(0, end);
      auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), parts[i], 16);
      if (ec != std::errc() || ptr != field.data() + field.size() || parts[i] > 0xffffffff)
        return std::nullopt;
      s = i < 3 ? s.substr(end + 1) : std::string_view{};
    }
    return parts;
  };
  auto x = parse(trim(a)), y = parse(trim(b));
  return x && y && *x == *y;
}

}  // namespace gpureap::proc
