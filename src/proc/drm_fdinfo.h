#pragma once
// DRM client usage stats: the text of /proc/PID/fdinfo/N for an fd open on a DRM
// node (char major 226: /dev/dri/card*, /dev/dri/renderD*), as the kernel's
// Documentation/gpu/drm-usage-stats.rst specifies it. Pure parsers over
// std::string_view, tested on fixture files written from the kernel's
// documentation and the drivers' fdinfo code (tests/fixtures/drm/); none was
// captured on hardware. A vendor registers one reader (FdinfoReader) with the
// device nodes it owns (DeviceNode::fdinfo), and the one /proc sweep
// (proc/holder_scan.h) hands it the fdinfo of every fd on such a node: nvtop's
// processinfo_sweep_fdinfos and its parse_drm_fdinfo_* callbacks.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gpureap::proc {

/// DRM's major number: /dev/dri/card<N> is 226:N, renderD<M> 226:M (M >= 128).
inline constexpr unsigned kDrmMajor = 226;

/// The keys of one fdinfo that gpureap reads.
struct DrmFdinfo {
  std::string driver;  // drm-driver (mandatory in the spec); empty when absent
  std::string pdev;    // drm-pdev, "0000:03:00.0" (amdgpu before 5.19: "pdev")
  /// drm-client-id: one struct drm_file, shared by dup'd and inherited fds.
  std::optional<std::uint64_t> client_id;
  /// Memory keys in bytes, by their name without "drm-": "total-vram", "resident-vram0",
  /// "memory-vram" (the legacy key), ... Units KiB and MiB (and amdgpu's old "kB")
  /// are applied; a value that does not parse is left out.
  std::map<std::string, std::uint64_t, std::less<>> memory;
  /// amdgpu before 5.19 (no drm- prefix): "vram mem", "gtt mem", "cpu mem".
  std::map<std::string, std::uint64_t, std::less<>> amdgpu_legacy;
};

/// Every `key: value` line of an fdinfo text; lines that are not one are skipped.
/// Never fails: a text with no DRM key gives an empty DrmFdinfo.
DrmFdinfo parse_drm_fdinfo(std::string_view text);

/// "<uint>", "<uint> KiB", "<uint> MiB" (the spec's units), "<uint> kB" (amdgpu
/// before 5.19): bytes; nullopt for anything else or on overflow.
std::optional<std::uint64_t> parse_drm_size(std::string_view value);

/// What gpureap keeps of one DRM client (one drm_file) a process holds.
struct DrmClient {
  std::string driver;
  std::string pdev;
  std::optional<std::uint64_t> client_id;
  /// Device-local memory (VRAM) the client's buffers take; nullopt when the text
  /// does not say.
  std::optional<std::uint64_t> device_bytes;
  friend bool operator==(const DrmClient&, const DrmClient&) = default;
};

/// A vendor's reader of one fdinfo text: nullopt when the text is not its driver's.
using FdinfoReader = std::optional<DrmClient> (*)(std::string_view fdinfo_text);

/// amdgpu (drivers/gpu/drm/amd/amdgpu/amdgpu_fdinfo.c): VRAM from drm-total-vram
/// (the standard key, 6.x), else drm-memory-vram (5.19 on, kept for back-compat),
/// else "vram mem" (5.14-5.18, whose text has no drm-driver line). nvtop's
/// parse_drm_fdinfo_amd reads the last two.
std::optional<DrmClient> read_amdgpu_fdinfo(std::string_view text);

/// Intel, read-only (docs/amd.md): xe's drm-total-vram<N> (xe-drm-usage-stats.rst) and
/// i915's drm-total-local<N>, summed over the regions; an integrated GPU has none
/// (device_bytes 0: its memory is system memory).
std::optional<DrmClient> read_intel_fdinfo(std::string_view text);

/// PCI addresses compared as numbers: "0000:03:00.0" (sysfs, drm-pdev) and
/// "00000000:03:00.0" (NVML) are one device. False when either does not parse.
bool same_pci_address(std::string_view a, std::string_view b);

}  // namespace gpureap::proc
