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

std::string_view enum_name(SourceState state) {
  switch (state) {
    case SourceState::ok: return "ok";
    case SourceState::library_missing: return "library_missing";
    case SourceState::init_failed: return "init_failed";
    case SourceState::query_failed: return "query_failed";
    case SourceState::hung: return "hung";
    case SourceState::partial: return "partial";
  }
  return {};
}

}  // namespace gpureap::gpu
