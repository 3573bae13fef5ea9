#include "gpu/gpu_select.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>

#include "gpu/mig.h"
#include "gpu/vendor.h"
#include "util/text.h"

namespace gpureap::gpu {
namespace {

constexpr std::size_t kMinUuidPrefix = 4;  // characters after "GPU-" or "MIG-"

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
  if (gpu.minor) parts.push_back(device_node_path(gpu));
  if (parts.empty()) return device_text(gpu.id);
  return fmt::format("{} ({})", gpu.id, fmt::join(parts, ", "));
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

using Kind = SelectorItem::Kind;

// "0/gi1/ci0", "0/gi1", "0:1": nullopt when `item` is not of that shape, an error when
// it is but a number is missing or out of range.
std::optional<Result<SelectorItem>> parse_mig_item(std::string_view item) {
  SelectorItem out;
  out.text = std::string(item);
  out.kind = Kind::mig;
  const auto colon = item.find(':');
  const auto slash = item.find('/');
  // Plain numbers only: "18:00" is a PCI bus id cut short, not GPU 18's instance 0.
  auto plain = [](std::string_view s) { return all_digits(s) && (s.size() == 1 || s[0] != '0'); };
  if (colon != std::string_view::npos && plain(item.substr(0, colon)) &&
      plain(item.substr(colon + 1))) {
    auto gpu = parse_number(item.substr(0, colon));
    auto gi = parse_number(item.substr(colon + 1));
    if (!gpu || !gi) return Result<SelectorItem>(item_error(item, "number out of range"));
    out.first = *gpu;
    out.gi = gi;
    return Result<SelectorItem>(out);
  }
  if (slash == std::string_view::npos || !all_digits(item.substr(0, slash))) return std::nullopt;
  auto malformed = [&] {
    return Result<SelectorItem>(
        item_error(item, "expected a MIG device as GPU/giN/ciN (0/gi1/ci0), GPU/giN or GPU:N"));
  };
  auto gpu = parse_number(item.substr(0, slash));
  if (!gpu) return malformed();
  out.first = *gpu;
  std::string_view rest = item.substr(slash + 1);
  auto take = [&](std::string_view prefix) -> std::optional<unsigned> {
    if (!istarts_with(rest, prefix)) return std::nullopt;
    rest.remove_prefix(prefix.size());
    const auto end = rest.find('/');
    auto n = all_digits(rest.substr(0, end)) ? parse_number(rest.substr(0, end)) : std::nullopt;
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
    return n;
  };
  out.gi = take("gi");
  if (!out.gi) return malformed();
  if (!rest.empty()) {
    out.ci = take("ci");
    if (!out.ci || !rest.empty()) return malformed();
  }
  return Result<SelectorItem>(out);
}

// CUDA 11.0's "MIG-GPU-<uuid>/<gi>/<ci>" (later CUDA names MIG devices by their own
// MIG-<uuid>, and drivers from R470 list only those; older Slurm and container setups
// still write the first form): nullopt when `item` is not of that shape.
std::optional<Result<SelectorItem>> parse_legacy_mig_item(std::string_view item) {
  if (!istarts_with(item, "MIG-GPU-") || item.find('/') == std::string_view::npos)
    return std::nullopt;
  SelectorItem out;
  out.text = std::string(item);
  out.kind = Kind::mig;
  std::string_view rest = item.substr(4);
  const auto slash = rest.find('/');
  out.parent_uuid = std::string(rest.substr(0, slash));
  rest.remove_prefix(slash + 1);
  const auto second = rest.find('/');
  auto gi = all_digits(rest.substr(0, second)) ? parse_number(rest.substr(0, second)) : std::nullopt;
  auto ci = second != std::string_view::npos && all_digits(rest.substr(second + 1))
                ? parse_number(rest.substr(second + 1))
                : std::nullopt;
  if (!gi || !ci)
    return Result<SelectorItem>(
        item_error(item, "expected MIG-GPU-<GPU UUID>/<GPU instance>/<compute instance>"));
  out.gi = gi;
  out.ci = ci;
  return Result<SelectorItem>(out);
}

Result<SelectorItem> parse_item(std::string_view item) {
  SelectorItem out;
  out.text = std::string(item);
  if (iequals(item, "all")) {
    out.kind = Kind::all;
    return out;
  }
  if (all_digits(item)) {
    auto index = parse_number(item);
    if (!index) return item_error(item, "GPU index out of range");
    out.kind = Kind::index;
    out.first = *index;
    return out;
  }
  if (item.front() == '-' && all_digits(item.substr(1))) {
    return item_error(item, "a GPU index cannot be negative");
  }
  if (auto dash = item.find('-'); dash != std::string_view::npos && all_digits(item.substr(0, dash)) &&
                                  all_digits(item.substr(dash + 1))) {
    auto first = parse_number(item.substr(0, dash));
    auto last = parse_number(item.substr(dash + 1));
    if (!first || !last) return item_error(item, "GPU index out of range");
    if (*first > *last) return item_error(item, "a range goes from the lower index to the higher (0-3)");
    out.kind = Kind::range;
    out.first = *first;
    out.last = *last;
    return out;
  }
  constexpr std::string_view cap_prefix = "/dev/nvidia-caps/nvidia-cap";
  if (item.starts_with(cap_prefix)) {
    auto minor = all_digits(item.substr(cap_prefix.size()))
                     ? parse_number(item.substr(cap_prefix.size()))
                     : std::nullopt;
    if (!minor)
      return item_error(item, "expected a MIG capability node, as in /dev/nvidia-caps/nvidia-cap13");
    out.kind = Kind::mig_cap;
    out.first = *minor;
    return out;
  }
  // A device node names its vendor's GPU (gpu::device_node_path): NVIDIA's
  // /dev/nvidia<minor>, an AMD GPU's render node /dev/dri/renderD<minor>; minor:N either.
  constexpr std::string_view render_prefix = "/dev/dri/renderD";
  std::string_view minor_text;
  if (istarts_with(item, "minor:")) {
    minor_text = item.substr(6);
  } else if (item.starts_with("/dev/nvidia")) {
    minor_text = item.substr(11);
    out.vendor = Vendor::nvidia;
  } else if (item.starts_with(render_prefix)) {
    minor_text = item.substr(render_prefix.size());
    out.vendor = Vendor::amd;
  }
  if (istarts_with(item, "minor:") || item.starts_with("/dev/nvidia") ||
      item.starts_with(render_prefix)) {
    auto minor = all_digits(minor_text) ? parse_number(minor_text) : std::nullopt;
    if (!minor) {
      return item_error(item,
                        "expected a device minor number, as in minor:5, /dev/nvidia5 or "
                        "/dev/dri/renderD128");
    }
    out.kind = Kind::minor;
    out.first = *minor;
    return out;
  }
  if (auto legacy = parse_legacy_mig_item(item)) {
    if (!*legacy) return std::unexpected(legacy->error());
    return **legacy;
  }
  if (istarts_with(item, "GPU-") || istarts_with(item, "MIG-")) {
    if (item.size() < 4 + kMinUuidPrefix) {
      // A whole UUID is far longer; a prefix this short would name GPUs by chance.
      return item_error(item, fmt::format("UUID prefix too short: give at least {} characters "
                                          "after '{}'",
                                          kMinUuidPrefix, item.substr(0, 4)));
    }
    out.kind = Kind::uuid;
    return out;
  }
  if (auto mig = parse_mig_item(item)) {
    if (!*mig) return std::unexpected(mig->error());
    return **mig;
  }
  if (item.find(':') != std::string_view::npos) {
    auto pci = parse_pci(item);
    if (!pci) {
      return item_error(item,
                        "not a PCI bus id (expected 00000000:18:00.0, 0000:18:00.0 or 18:00.0)");
    }
    out.kind = Kind::pci;
    out.pci_domain = pci->domain;
    out.pci_bus = pci->bus;
    out.pci_device = pci->device;
    out.pci_function = pci->function;
    return out;
  }
  return item_error(item,
                    "not an index, range (0-3), UUID, PCI bus id, minor:N or MIG device (0/gi1/ci0) (`gpureap status` "
                    "lists the GPUs)");
}

Result<std::vector<DeviceId>> resolve_uuid(const SelectorItem& item,
                                           const std::vector<GpuInfo>& gpus) {
  for (const GpuInfo& gpu : gpus) {
    if (iequals(gpu.uuid, item.text)) return std::vector<DeviceId>{gpu.id};
  }
  std::vector<const GpuInfo*> candidates;
  for (const GpuInfo& gpu : gpus) {
    if (item.matches(gpu.id, gpu.uuid, gpu.parent_uuid)) candidates.push_back(&gpu);
  }
  if (candidates.empty()) return no_match(item.text, "such a UUID", gpus);
  if (candidates.size() > 1) {
    std::vector<std::string> names;
    for (const GpuInfo* gpu : candidates) names.push_back(describe(*gpu, true));
    return item_error(item.text, fmt::format("ambiguous UUID prefix: it matches GPUs {}",
                                             fmt::join(names, " and ")));
  }
  return std::vector<DeviceId>{candidates.front()->id};
}

Result<std::vector<DeviceId>> resolve_item(const SelectorItem& item,
                                           const std::vector<GpuInfo>& gpus,
                                           const std::map<unsigned, proc::MigAccess>& capabilities) {
  // Every device of a physical GPU: the GPU, or its MIG devices.
  auto of_index = [&](unsigned index) {
    std::vector<DeviceId> ids;
    for (const GpuInfo& gpu : gpus)
      if (gpu.id.index == index) ids.push_back(gpu.id);
    return ids;
  };
  std::vector<DeviceId> out;
  switch (item.kind) {
    case Kind::all:
      for (const GpuInfo& gpu : gpus) out.push_back(gpu.id);
      return out;
    case Kind::index:
    case Kind::range: {
      const unsigned last = item.kind == Kind::range ? item.last : item.first;
      for (unsigned i = item.first;; ++i) {
        auto ids = of_index(i);
        if (ids.empty()) {
          return item_error(item.text, fmt::format("GPU index{} out of range ({})",
                                                   item.kind == Kind::range ? fmt::format(" {}", i) : "",
                                                   valid_gpus(gpus)));
        }
        out.insert(out.end(), ids.begin(), ids.end());
        if (i == last) break;
      }
      return out;
    }
    case Kind::minor:
      for (const GpuInfo& gpu : gpus)
        if (gpu.minor == item.first && (!item.vendor || vendor_of(gpu.uuid) == *item.vendor))
          out.push_back(gpu.id);
      if (!out.empty()) return out;
      return no_match(item.text, fmt::format("minor number {}", item.first), gpus);
    case Kind::mig:
      for (const GpuInfo& gpu : gpus)
        if (item.matches(gpu.id, gpu.uuid, gpu.parent_uuid)) out.push_back(gpu.id);
      if (!out.empty()) return out;
      return no_match(item.text, "this MIG device", gpus);
    case Kind::mig_cap: {
      // The driver's table, never a formula: minors are numbered per driver and GPU.
      auto access = capabilities.find(item.first);
      if (access == capabilities.end())
        return item_error(item.text, fmt::format("capability minor {} names no MIG device in the "
                                                 "driver's mig-minors table",
                                                 item.first));
      for (const GpuInfo& gpu : gpus)
        if (gpu.minor && grants(access->second, *gpu.minor, gpu.id)) out.push_back(gpu.id);
      if (!out.empty()) return out;
      return no_match(item.text, "the MIG device this capability gives access to", gpus);
    }
    case Kind::uuid:
      return resolve_uuid(item, gpus);
    case Kind::pci: {
      const PciAddress wanted{item.pci_domain, item.pci_bus, item.pci_device, item.pci_function};
      for (const GpuInfo& gpu : gpus)
        if (parse_pci(gpu.pci_bus_id) == wanted) out.push_back(gpu.id);
      if (!out.empty()) return out;
      return no_match(item.text, "this PCI bus id", gpus);
    }
  }
  return out;
}

}  // namespace

bool SelectorItem::matches(const DeviceId& id, std::string_view uuid,
                           std::string_view parent) const {
  switch (kind) {
    case Kind::all:
      return true;
    case Kind::index:
      return id.index == first;
    case Kind::range:
      return id.index >= first && id.index <= last;
    case Kind::uuid:
      return !uuid.empty() && istarts_with(uuid, text);
    case Kind::mig: {
      // CUDA 11.0's form names the GPU by its UUID; `first` is then no index.
      const bool same_gpu = parent_uuid.empty() ? id.index == first
                                                : !parent.empty() && iequals(parent, parent_uuid);
      return same_gpu && id.gi == gi && (!ci || id.ci == ci);
    }
    case Kind::minor:
    case Kind::pci:
    case Kind::mig_cap:
      return false;
  }
  return false;
}

Result<GpuSelector> GpuSelector::parse(std::string_view spec) {
  if (trim(spec).empty()) {
    return fail(
        "empty GPU selector: give 'all', an index, a range, a UUID (prefix), a PCI bus id or "
        "minor:N");
  }
  GpuSelector out;
  out.text_ = std::string(trim(spec));
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = spec.find(',', start);
    const std::string_view item = trim(spec.substr(start, comma - start));
    if (item.empty()) return fail(fmt::format("GPU selector '{}' has an empty item", spec));
    auto parsed = parse_item(item);
    if (!parsed) return std::unexpected(parsed.error());
    out.items_.push_back(std::move(*parsed));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

GpuSelector GpuSelector::every_gpu() {
  GpuSelector out;
  out.text_ = "all";
  out.items_.push_back(SelectorItem{});
  out.items_.back().text = "all";
  return out;
}

bool GpuSelector::names_capabilities() const {
  return std::any_of(items_.begin(), items_.end(),
                     [](const SelectorItem& item) { return item.kind == SelectorItem::Kind::mig_cap; });
}

Result<std::vector<DeviceId>> GpuSelector::resolve(
    const std::vector<GpuInfo>& gpus, const std::map<unsigned, proc::MigAccess>& capabilities) const {
  if (items_.empty()) return fail("no GPU selector given");
  std::vector<DeviceId> selected;
  for (const SelectorItem& item : items_) {
    auto ids = resolve_item(item, gpus, capabilities);
    if (!ids) return std::unexpected(ids.error());
    selected.insert(selected.end(), ids->begin(), ids->end());
  }
  normalize(selected);
  return selected;
}

Result<std::vector<DeviceId>> select_gpus(std::string_view spec, const std::vector<GpuInfo>& gpus) {
  auto selector = GpuSelector::parse(spec);
  if (!selector) return std::unexpected(selector.error());
  return selector->resolve(gpus);
}

}  // namespace gpureap::gpu
