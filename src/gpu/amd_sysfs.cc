#include "gpu/amd_sysfs.h"

#include <fmt/format.h>

#include <charconv>

#include "util/text.h"

namespace gpureap::gpu {
namespace {

template <typename T>
std::optional<T> parse_amd_number(std::string_view s, int base = 10) {
  T v{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::uint64_t> parse_sysfs_uint(std::string_view text) {
  text = trim(text);
  if (text.starts_with("0x") || text.starts_with("0X"))
    return parse_amd_number<std::uint64_t>(text.substr(2), 16);
  return parse_amd_number<std::uint64_t>(text);
}

std::map<std::string, std::uint64_t, std::less<>> parse_kfd_properties(std::string_view text) {
  std::map<std::string, std::uint64_t, std::less<>> out;
  for_each_line(text, [&](std::string_view line) {
    line = trim(line);
    auto space = line.find(' ');
    if (space == std::string_view::npos) return;
    if (auto v = parse_amd_number<std::uint64_t>(trim(line.substr(space + 1))))
      out[std::string(line.substr(0, space))] = *v;
  });
  return out;
}

std::string pci_address(std::uint64_t domain, std::uint64_t location_id) {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, (location_id >> 8) & 0xff,
                     (location_id >> 3) & 0x1f, location_id & 0x7);
}

std::optional<KfdGpu> parse_kfd_node(unsigned node, std::string_view gpu_id_text,
                                     std::string_view name_text, std::string_view properties) {
  auto id = parse_sysfs_uint(gpu_id_text);
  if (!id || *id == 0 || *id > 0xffffffffULL) return std::nullopt;
  KfdGpu gpu;
  gpu.node = node;
  gpu.gpu_id = static_cast<std::uint32_t>(*id);
  gpu.name = trim(name_text);
  auto props = parse_kfd_properties(properties);
  if (auto it = props.find("drm_render_minor"); it != props.end() && it->second <= 0xffff)
    gpu.render_minor = static_cast<unsigned>(it->second);
  auto location = props.find("location_id");
  if (location != props.end()) {
    auto domain = props.find("domain");
    gpu.pci_address = pci_address(domain == props.end() ? 0 : domain->second, location->second);
  }
  if (auto it = props.find("unique_id"); it != props.end() && it->second != 0)
    gpu.unique_id = it->second;
  return gpu;
}

std::string amd_uuid(std::optional<std::uint64_t> unique_id) {
  if (!unique_id) return "";
  return fmt::format("GPU-{:016x}", *unique_id);
}

std::optional<std::uint32_t> vram_file_gpu_id(std::string_view file_name) {
  constexpr std::string_view prefix = "vram_";
  if (!file_name.starts_with(prefix)) return std::nullopt;
  auto id = parse_amd_number<std::uint32_t>(file_name.substr(prefix.size()));
  if (!id || *id == 0) return std::nullopt;
  return id;
}

std::optional<unsigned> drm_node_number(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  return parse_amd_number<unsigned>(name.substr(prefix.size()));
}

std::optional<std::pair<unsigned, unsigned>> parse_dev_numbers(std::string_view text) {
  text = trim(text);
  auto colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  auto major = parse_amd_number<unsigned>(text.substr(0, colon));
  auto minor = parse_amd_number<unsigned>(text.substr(colon + 1));
  if (!major || !minor) return std::nullopt;
  return std::pair{*major, *minor};
}

}  // namespace gpureap::gpu
