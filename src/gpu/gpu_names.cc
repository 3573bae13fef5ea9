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

namespace {
struct ClockEvent {
  std::uint64_t bit;
  std::string_view word;
};
// nvml.h's nvmlClocksEventReason* bits (the same as the older ThrottleReason* names).
constexpr ClockEvent kClockEvents[] = {
    {0x2, "applications clocks"}, {0x4, "power cap"},          {0x8, "hardware slowdown"},
    {0x10, "sync boost"},         {0x20, "thermal (software)"}, {0x40, "thermal (hardware)"},
    {0x80, "power brake"},        {0x100, "display clocks"},
};
constexpr std::uint64_t kWorrying = 0x8 | 0x20 | 0x40 | 0x80;
}  // namespace

std::vector<std::string_view> clock_event_words(std::uint64_t reasons) {
  std::vector<std::string_view> out;
  for (const auto& e : kClockEvents)
    if (reasons & e.bit) out.push_back(e.word);
  return out;
}

bool clock_events_worrying(std::uint64_t reasons) {
  return (reasons & kWorrying) != 0;
}

}  // namespace gpureap::gpu
