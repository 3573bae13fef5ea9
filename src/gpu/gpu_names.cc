#include "gpu/gpu_info.h"
#include "gpu/gpu_source.h"

namespace gpureap::gpu {

std::string_view enum_name(ProcessKind kind) {
  switch (kind) {
    case ProcessKind::compute: return "compute";
    case ProcessKind::graphics: return "graphics";
    case ProcessKind::mps: return "mps";
  }
  return {};
}

std::string_view enum_name(NvmlState state) {
  switch (state) {
    case NvmlState::ok: return "ok";
    case NvmlState::library_missing: return "library_missing";
    case NvmlState::init_failed: return "init_failed";
    case NvmlState::query_failed: return "query_failed";
    case NvmlState::hung: return "hung";
    case NvmlState::partial: return "partial";
  }
  return {};
}

}  // namespace gpureap::gpu
