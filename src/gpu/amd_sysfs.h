#pragma once
// What amdgpu and its compute driver (KFD) tell in sysfs, as pure parsers over
// text (no ROCm library): the KFD topology (/sys/class/kfd/kfd/topology/nodes/<n>/:
// gpu_id, name, properties), a card's memory (/sys/class/drm/card<N>/device/
// mem_info_vram_{total,used}) and KFD's per-process files
// (/sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>). Sources: amdkfd's kfd_topology.c
// and kfd_process.c, rocm_smi's rocm_smi_device.cc; docs/amd.md.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gpureap::gpu {

/// A sysfs number: decimal, optionally "0x" hex, one value, a trailing newline allowed.
std::optional<std::uint64_t> parse_sysfs_uint(std::string_view text);

/// A topology node's `properties`: one "name value" per line (decimal values), e.g.
/// "drm_render_minor 128", "location_id 768", "domain 0", "unique_id 1234...".
/// Lines that are not one are skipped.
std::map<std::string, std::uint64_t, std::less<>> parse_kfd_properties(std::string_view text);

/// One KFD topology node that is a GPU (gpu_id != 0; CPU nodes have 0).
struct KfdGpu {
  unsigned node = 0;           // <n> of nodes/<n>
  std::uint32_t gpu_id = 0;    // the number in vram_<gpu_id>
  std::string name;            // the node's `name` file ("gfx942"), trimmed
  std::optional<unsigned> render_minor;  // drm_render_minor: /dev/dri/renderD<minor>
  std::string pci_address;     // "0000:03:00.0" from domain and location_id; "" unknown
  std::optional<std::uint64_t> unique_id;  // absent or 0 on GPUs without one
};

/// The GPU a node's `gpu_id` and `properties` describe; nullopt for a CPU node (gpu_id
/// 0) or an unreadable gpu_id.
std::optional<KfdGpu> parse_kfd_node(unsigned node, std::string_view gpu_id_text,
                                     std::string_view name_text, std::string_view properties);

/// "dddd:bb:dd.f" from KFD's `domain` and `location_id` (bus << 8 | device << 3 | function,
/// kfd_topology.c's pci_dev_id(): PCI_DEVID).
std::string pci_address(std::uint64_t domain, std::uint64_t location_id);

/// ROCm's UUID of a GPU: "GPU-" and unique_id as 16 hex digits (what ROCR_VISIBLE_DEVICES
/// and HIP_VISIBLE_DEVICES accept, and rocminfo prints); "" without a unique id.
std::string amd_uuid(std::optional<std::uint64_t> unique_id);

/// The gpu_id of a KFD per-process file name: "vram_49389" -> 49389; nullopt for the
/// others (pasid, sdma_<id>, stats_<id>, queues, ...).
std::optional<std::uint32_t> vram_file_gpu_id(std::string_view file_name);

/// "renderD128" -> 128, "card0" -> 0 (with its prefix); nullopt for "card0-DP-1" and others.
std::optional<unsigned> drm_node_number(std::string_view name, std::string_view prefix);

/// A sysfs `dev` file, "226:128\n" -> (226, 128).
std::optional<std::pair<unsigned, unsigned>> parse_dev_numbers(std::string_view text);

}  // namespace gpureap::gpu
