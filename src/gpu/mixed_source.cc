#include "gpu/mixed_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "gpu/amd_source.h"
#include "gpu/nvml_source.h"

namespace gpureap::gpu {
namespace {

// The number of physical GPUs a listing has: one past its highest index (a GPU in MIG
// mode is listed as its MIG devices, all with its index).
unsigned physical_count(const std::vector<GpuInfo>& gpus) {
  unsigned n = 0;
  for (const GpuInfo& g : gpus) n = std::max(n, g.id.index + 1);
  return n;
}

// A GPU its side could not read this time: its identity, no reading, the side's problem.
GpuInfo unread(GpuInfo g, const std::string& problem, bool hung) {
  g.memory.reset();
  g.processes.clear();
  g.processes_known = false;
  g.persistence_mode.reset();
  g.utilization_gpu.reset();
  g.utilization_memory.reset();
  g.temperature_c.reset();
  g.power_mw.reset();
  g.power_limit_mw.reset();
  g.clock_event_reasons.reset();
  g.ecc_uncorrected.reset();
  g.problem = problem;
  g.hung = hung;
  return g;
}

void append_problem(std::string& to, const std::string& problem) {
  if (problem.empty()) return;
  if (!to.empty()) to += "; ";
  to += problem;
}

// One side's GPUs for the combined listing: as read, or its last listing marked unread
// when it failed as a whole. Remembers a listing that answered in `known`.
std::vector<GpuInfo> side_gpus(const GpuSnapshot& snap, std::vector<GpuInfo>& known) {
  if (lists_gpus(snap.state)) {
    known = snap.gpus;
    return snap.gpus;
  }
  std::vector<GpuInfo> out;
  for (const GpuInfo& g : known)
    out.push_back(unread(g, snap.problem, snap.state == SourceState::hung));
  return out;
}

}  // namespace

MixedSource::MixedSource(std::unique_ptr<GpuSource> nvidia, std::unique_ptr<GpuSource> amd)
    : nvidia_(std::move(nvidia)), amd_(std::move(amd)) {}

GpuSnapshot MixedSource::snapshot(std::chrono::milliseconds deadline) {
  GpuSnapshot nv = nvidia_->snapshot(deadline);
  GpuSnapshot am = amd_->snapshot(deadline);
  if (!lists_gpus(nv.state) && nvidia_known_.empty() && !offset_) {
    // N unknown: no AMD GPU can be given its index (docs/amd.md, "A mixed node").
    GpuSnapshot out;
    out.state = nv.state;
    out.problem = nv.problem +
                  " (the AMD GPUs are numbered after NVIDIA's, so they are not listed either)";
    out.driver_version = nv.driver_version;
    out.cuda_version = nv.cuda_version;
    return out;
  }
  GpuSnapshot out;
  out.driver_version = nv.driver_version;
  out.cuda_version = nv.cuda_version;
  out.gpus = side_gpus(nv, nvidia_known_);
  if (lists_gpus(nv.state)) offset_ = physical_count(nv.gpus);
  const unsigned offset = offset_.value_or(physical_count(nvidia_known_));
  for (GpuInfo g : side_gpus(am, amd_known_)) {
    g.id.index += offset;
    out.gpus.push_back(std::move(g));
  }
  append_problem(out.problem, nv.problem);
  append_problem(out.problem, am.problem);
  out.state = nv.state == SourceState::ok && am.state == SourceState::ok ? SourceState::ok
                                                                         : SourceState::partial;
  return out;
}

Result<std::vector<MemoryReading>> MixedSource::memory(const std::vector<DeviceId>& ids,
                                                       std::chrono::milliseconds deadline) {
  if (!offset_) (void)snapshot(deadline);  // N is learnt from NVML's listing
  if (!offset_)
    return std::unexpected(
        Error{"NVML has not listed its GPUs, so the AMD GPUs' indices are unknown"});
  const unsigned offset = *offset_;
  std::vector<DeviceId> nv_ids, am_ids;
  for (const DeviceId& id : ids) {
    if (id.index < offset) {
      nv_ids.push_back(id);
    } else {
      DeviceId local = id;
      local.index -= offset;
      am_ids.push_back(local);
    }
  }
  // One side's readings, or that side's failure as a reading per GPU when the other side
  // was asked too (its GPUs are still verified).
  auto read_side = [&](GpuSource& side, const std::vector<DeviceId>& asked,
                       const std::vector<DeviceId>& other) -> Result<std::vector<MemoryReading>> {
    if (asked.empty()) return std::vector<MemoryReading>{};
    auto r = side.memory(asked, deadline);
    if (r || other.empty()) return r;
    std::vector<MemoryReading> marked;
    for (const DeviceId& id : asked) {
      MemoryReading m;
      m.id = id;
      m.problem = r.error().message;
      marked.push_back(std::move(m));
    }
    return marked;
  };
  auto nv = read_side(*nvidia_, nv_ids, am_ids);
  if (!nv) return nv;
  auto am = read_side(*amd_, am_ids, nv_ids);
  if (!am) return am;
  for (MemoryReading& r : *am) r.id.index += offset;
  // In the order asked: each side answers its ids in order.
  std::vector<MemoryReading> out;
  std::size_t i = 0, k = 0;
  for (const DeviceId& id : ids) {
    if (id.index < offset) {
      if (i < nv->size()) out.push_back(std::move((*nv)[i++]));
    } else if (k < am->size()) {
      out.push_back(std::move((*am)[k++]));
    }
  }
  return out;
}

void MixedSource::disconnect() {
  nvidia_->disconnect();
  amd_->disconnect();
}

proc::DeviceSet MixedSource::device_nodes(const std::string& dev_dir) const {
  proc::DeviceSet nv = nvidia_->device_nodes(dev_dir);
  proc::DeviceSet am = amd_->device_nodes(dev_dir);
  std::vector<proc::DeviceSet::Entry> entries = nv.entries();
  entries.insert(entries.end(), am.entries().begin(), am.entries().end());
  std::vector<std::string> warnings = nv.warnings();
  warnings.insert(warnings.end(), am.warnings().begin(), am.warnings().end());
  return proc::DeviceSet(std::move(entries), std::move(warnings));
}

std::unique_ptr<GpuSource> make_mixed_source(std::unique_ptr<GpuSource> nvidia,
                                             std::unique_ptr<GpuSource> amd) {
  return std::make_unique<MixedSource>(std::move(nvidia), std::move(amd));
}

std::unique_ptr<GpuSource> make_node_source(const std::string& dev_dir,
                                            std::string_view nvml_library) {
  const char* sysfs = std::getenv("GPUREAP_SYSFS_ROOT");
  const std::string root = sysfs && *sysfs ? sysfs : "/sys";
  struct stat st {};
  const bool nvidia = ::stat((dev_dir + "/nvidiactl").c_str(), &st) == 0;
  auto nvml = [&] { return make_nvml_source(resolve_nvml_library(nvml_library)); };
  if (has_amd_gpus(root))
    return nvidia ? make_mixed_source(nvml(), make_amd_source(root)) : make_amd_source(root);
  // A named sysfs tree is AMD's even while it lists no GPU (its driver then says why).
  if (sysfs && *sysfs && !nvidia) return make_amd_source(root);
  return nvml();
}

}  // namespace gpureap::gpu
