#pragma once
// GPU selectors, as users type them after --gpu: parsed once, when the flag is read
// (a malformed selector is a usage error before anything is scanned), and resolved
// against the GPUs NVML sees when the node has been looked at.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <map>

#include "gpu/device_id.h"
#include "gpu/gpu_info.h"
#include "gpu/vendor.h"
#include "proc/mig_caps.h"
#include "util/result.h"

namespace gpureap::gpu {

/// One item of a selector, checked for syntax only.
struct SelectorItem {
  enum class Kind { all, index, range, uuid, pci, minor, mig, mig_cap };
  Kind kind = Kind::all;
  std::string text;          // as typed, trimmed: quoted in every message
  unsigned first = 0;        // index, minor, capability minor, or the range's first index
  unsigned last = 0;         // the range's last index
  unsigned pci_domain = 0, pci_bus = 0, pci_device = 0, pci_function = 0;
  std::optional<unsigned> gi, ci;  // mig: GPU `first`'s GPU instance (and compute instance)
  std::string parent_uuid;         // mig, CUDA 11.0's MIG-GPU-<uuid>/<gi>/<ci>: the GPU's UUID
  /// minor: the vendor its device node names (/dev/nvidia<N>: NVIDIA's GPU,
  /// /dev/dri/renderD<N>: an AMD GPU's); minor:N names either.
  std::optional<Vendor> vendor;

  /// The one matcher, which `--gpu` (GpuSelector::resolve) and `gpureap log --gpu` both
  /// ask: does this item name the device `id` whose UUID is `uuid`, a MIG device of the
  /// GPU whose UUID is `parent_uuid` ("" when unknown)? A UUID is matched by prefix, any
  /// case (resolve then refuses an ambiguous one). A minor, PCI bus id or capability node
  /// needs more than these facts: false.
  bool matches(const DeviceId& id, std::string_view uuid, std::string_view parent_uuid) const;
};

/// A comma-separated list of items (surrounding spaces ignored), each one of:
///   all                                 every GPU
///   3                                   an NVML index
///   0-3                                 a range of NVML indices, both ends included
///   GPU-7282...                         a UUID, or a unique prefix with at least
///                                       4 characters after "GPU-" (any case)
///   00000000:18:00.0, 0000:18:00.0,     a PCI bus id with an 8- or 4-digit
///   18:00.0                             domain or none (domain 0), any case
///   minor:5, /dev/nvidia5,              a device minor number: an NVIDIA GPU's node,
///   /dev/dri/renderD128                 or an AMD GPU's render node
///   0/gi1/ci0, 0/gi1, 0:1               MIG devices of GPU 0: GPU instance 1 (and
///                                       compute instance 0); 0:1 is nvidia-smi's
///                                       GPU:GPU-instance form
///   MIG-5a3f...                         a MIG device's UUID, or a unique prefix
///   MIG-GPU-8f1c.../1/0                 a MIG device as CUDA 11.0 named it in
///                                       CUDA_VISIBLE_DEVICES: its GPU's whole UUID,
///                                       GPU instance, compute instance
///   /dev/nvidia-caps/nvidia-cap13       the MIG device a capability node gives access
///                                       to, by the driver's mig-minors table (as Slurm's
///                                       MIG GRES MultipleFiles names a MIG device)
/// An index, range, PCI bus id or minor of a GPU in MIG mode selects all its MIG
/// devices.
class GpuSelector {
 public:
  /// Fails, quoting the item, on an empty or malformed item.
  static Result<GpuSelector> parse(std::string_view spec);
  /// Every GPU ("all").
  static GpuSelector every_gpu();

  /// The selector as typed ("" for one never set).
  const std::string& text() const { return text_; }
  bool empty() const { return items_.empty(); }
  const std::vector<SelectorItem>& items() const { return items_; }

  /// The devices selected among `gpus`, sorted and without duplicates. Fails, quoting
  /// the item, on an index out of range, an ambiguous UUID prefix (naming the
  /// candidates) or an item that matches no GPU (listing the GPUs there are).
  /// `capabilities`: the driver's mig-minors table (capability minor -> MIG device), for
  /// /dev/nvidia-caps items; a minor it lacks is an error.
  Result<std::vector<DeviceId>> resolve(
      const std::vector<GpuInfo>& gpus,
      const std::map<unsigned, proc::MigAccess>& capabilities = {}) const;
  /// True when an item is a capability node: resolve needs the mig-minors table.
  bool names_capabilities() const;

 private:
  std::string text_;
  std::vector<SelectorItem> items_;
};

/// parse, then resolve: for selectors that come from elsewhere than a flag (Slurm's
/// environment, the agent's socket).
Result<std::vector<DeviceId>> select_gpus(std::string_view spec, const std::vector<GpuInfo>& gpus);

}  // namespace gpureap::gpu
