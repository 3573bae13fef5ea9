#include "gpu/gpu_select.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <set>
#include <string>

#include "util/text.h"

namespace gpureap::gpu {
namespace {

constexpr std::size_t kMinUuidPrefix = 4;  // characters after "GPU-"

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<unsigned> parse_number(std::string_view s, int base = 10) {
  unsigned value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::optional<unsigned> parse_hex(std::string_view s, std::size_t min_digits,
                                  std::size_t max_digits) {
  if (s.size() < min_digits || s.size() > max_digits) return std::nullopt;
  if (!std::all_of(s.begin(), s.end(),
                   [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
    return std::nullopt;
  }
  return parse_number(s, 16);
}

struct PciAddress {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  friend bool operator==(const PciAddress&, const PciAddress&) = default;
};

// [domain:]bus:device.function, hex; a domain of 4 digits (lspci) or 8 (NVML),
// or none (domain 0).
std::optional<PciAddress> parse_pci(std::string_view s) {
  PciAddress a;
  auto colon = s.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view head = s.substr(0, colon);
  std::string_view tail = s.substr(colon + 1);
  if (auto first = head.find(':'); first != std::string_view::npos) {
    std::string_view domain = head.substr(0, first);
    if (domain.size() != 4 && domain.size() != 8) return std::nullopt;
    auto d = parse_hex(domain, 4, 8);
    if (!d) return std::nullopt;
    a.domain = *d;
    head = head.substr(first + 1);
  }
  auto bus = parse_hex(head, 1, 2);
  auto dot = tail.find('.');
  if (!bus || dot == std::string_view::npos) return std::nullopt;
  auto device = parse_hex(tail.substr(0, dot), 1, 2);
  auto function = parse_hex(tail.substr(dot + 1), 1, 1);
  if (!device || !function || *device > 0x1f || *function > 7) return std::nullopt;
  a.bus = *bus;
  a.device = *device;
  a.function = *function;
  return a;
}

std::string describe(const GpuInfo& gpu, bool full_uuid) {
  std::vector<std::string> parts;
  if (!gpu.uuid.empty()) parts.push_back(full_uuid ? gpu.uuid : gpu.uuid.substr(0, 12));
  if (!gpu.pci_bus_id.empty()) parts.push_back(gpu.pci_bus_id);
  if (gpu.minor) parts.push_back(fmt::format("/dev/nvidia{}", *gpu.minor));
  if (parts.empty()) return fmt::format("{}", gpu.index);
  return fmt::format("{} ({})", gpu.index, fmt::join(parts, ", "));
}

std::string valid_gpus(const std::vector<GpuInfo>& gpus) {
  if (gpus.empty()) return "NVML sees no GPUs";
  std::vector<std::string> items;
  for (const GpuInfo& gpu : gpus) items.push_back(describe(gpu, false));
  return fmt::format("valid GPUs: {}", fmt::join(items, "; "));
}

std::unexpected<Error> item_error(std::string_view item, std::string_view why) {
  return fail(fmt::format("GPU selector '{}': {}", item, why));
}

std::unexpected<Error> no_match(std::string_view item, std::string_view what,
                                const std::vector<GpuInfo>& gpus) {
  return item_error(item, fmt::format("no GPU has {} ({})", what, valid_gpus(gpus)));
}

Result<std::vector<unsigned>> select_by_minor(std::string_view item, std::string_view number,
                                              const std::vector<GpuInfo>& gpus) {
  auto minor = all_digits(number) ? parse_number(number) : std::nullopt;
  if (!minor) {
    return item_error(item, "expected a device minor number, as in minor:5 or /dev/nvidia5");
  }
  for (const GpuInfo& gpu : gpus) {
    if (gpu.minor == *minor) return std::vector<unsigned>{gpu.index};
  }
  return no_match(item, fmt::format("minor number {}", *minor), gpus);
}

Result<std::vector<unsigned>> select_by_uuid(std::string_view item,
                                             const std::vector<GpuInfo>& gpus) {
  for (const GpuInfo& gpu : gpus) {
    if (iequals(gpu.uuid, item)) return std::vector<unsigned>{gpu.index};
  }
  if (item.size() < 4 + kMinUuidPrefix) {
    return item_error(item, fmt::format("UUID prefix too short: give at least {} characters "
                                        "after 'GPU-'",
                                        kMinUuidPrefix));
  }
  std::vector<const GpuInfo*> candidates;
  for (const GpuInfo& gpu : gpus) {
    if (istarts_with(gpu.uuid, item)) candidates.push_back(&gpu);
  }
  if (candidates.empty()) return no_match(item, "such a UUID", gpus);
  if (candidates.size() > 1) {
    std::vector<std::string> names;
    for (const GpuInfo* gpu : candidates) names.push_back(describe(*gpu, true));
    return item_error(
        item, fmt::format("ambiguous UUID prefix: it matches GPUs {}", fmt::join(names, " and ")));
  }
  return std::vector<unsigned>{candidates.front()->index};
}

Result<std::vector<unsigned>> select_item(std::string_view item, const std::vector<GpuInfo>& gpus) {
  if (iequals(item, "all")) {
    std::vector<unsigned> all;
    for (const GpuInfo& gpu : gpus) all.push_back(gpu.index);
    return all;
  }
  if (all_digits(item)) {
    auto index = parse_number(item);
    for (const GpuInfo& gpu : gpus) {
      if (index && gpu.index == *index) return std::vector<unsigned>{gpu.index};
    }
    return item_error(item, fmt::format("GPU index out of range ({})", valid_gpus(gpus)));
  }
  if (item.front() == '-' && all_digits(item.substr(1))) {
    return item_error(item, "a GPU index cannot be negative");
  }
  if (istarts_with(item, "minor:")) return select_by_minor(item, item.substr(6), gpus);
  if (item.starts_with("/dev/nvidia")) return select_by_minor(item, item.substr(11), gpus);
  if (istarts_with(item, "GPU-")) return select_by_uuid(item, gpus);
  if (item.find(':') != std::string_view::npos) {
    auto wanted = parse_pci(item);
    if (!wanted) {
      return item_error(item,
                        "not a PCI bus id (expected 00000000:18:00.0, 0000:18:00.0 or 18:00.0)");
    }
    for (const GpuInfo& gpu : gpus) {
      if (parse_pci(gpu.pci_bus_id) == wanted) return std::vector<unsigned>{gpu.index};
    }
    return no_match(item, "this PCI bus id", gpus);
  }
  return item_error(
      item, fmt::format("not an index, UUID, PCI bus id or minor:N ({})", valid_gpus(gpus)));
}

}  // namespace

Result<std::vector<unsigned>> select_gpus(std::string_view spec, const std::vector<GpuInfo>& gpus) {
  if (trim(spec).empty()) {
    return fail(
        "empty GPU selector: give 'all', an index, a UUID (prefix), a PCI bus id or minor:N");
  }
  std::set<unsigned> selected;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = spec.find(',', start);
    const std::string_view item = trim(spec.substr(start, comma - start));
    if (item.empty()) return fail(fmt::format("GPU selector '{}' has an empty item", spec));
    auto indices = select_item(item, gpus);
    if (!indices) return std::unexpected(indices.error());
    selected.insert(indices->begin(), indices->end());
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return std::vector<unsigned>(selected.begin(), selected.end());
}

std::string index_list(const std::vector<unsigned>& indices) {
  std::string out;
  for (unsigned i : indices) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

}  // namespace gpureap::gpu
