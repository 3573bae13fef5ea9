#include "report/names.h"

namespace gpureap::report {

std::string_view to_string(reclaim::Signal s) {
  switch (s) {
    case reclaim::Signal::sigterm:
      return "SIGTERM";
    case reclaim::Signal::sigkill:
      return "SIGKILL";
    case reclaim::Signal::none:
      break;
  }
  return "none";
}

std::string_view to_string(reclaim::Outcome o) {
  using reclaim::Outcome;
  switch (o) {
    case Outcome::pending:
      return "";
    case Outcome::exited:
      return "exited";
    case Outcome::still_running:
      return "still running";
    case Outcome::still_running_after_grace:
      return "still running after grace";
    case Outcome::already_exited:
      return "already exited";
    case Outcome::signal_failed:
      return "signal failed: ";
    case Outcome::already_gone:
      return "already gone";
    case Outcome::pid_reused:
      return "pid reused by another process: not signalled";
    case Outcome::permission_denied:
      return "permission denied: not signalled";
    case Outcome::no_pidfd_support:
      return "no pidfd support in this kernel: not signalled";
    case Outcome::not_signalled:
      return "not signalled: ";
  }
  return "";
}

std::string outcome_text(const reclaim::Action& a) {
  return std::string(to_string(a.outcome)) + a.detail;
}

std::string_view to_string(reclaim::LeftoverClass c) {
  using reclaim::LeftoverClass;
  switch (c) {
    case LeftoverClass::not_selected:
      return "not_selected";
    case LeftoverClass::not_permitted:
      return "not_permitted";
    case LeftoverClass::protected_process:
      return "protected";
    case LeftoverClass::zombie_leader:
      return "zombie_leader";
    case LeftoverClass::exiting_in_driver:
      return "exiting_in_driver";
    case LeftoverClass::live_holder:
      return "live_holder";
    case LeftoverClass::outside_namespace:
      return "outside_namespace";
    case LeftoverClass::still_releasing:
      return "still_releasing";
    case LeftoverClass::driver_held:
      return "driver_held";
    case LeftoverClass::ghost_gpu:
      return "ghost_gpu";
    case LeftoverClass::source_failed:
      return "nvml_failed";
    case LeftoverClass::unknown:
      break;
  }
  return "unknown";
}

std::string_view to_string(reclaim::SkipKind k) {
  switch (k) {
    case reclaim::SkipKind::protected_process:
      return "protected";
    case reclaim::SkipKind::not_permitted:
      return "not_permitted";
    case reclaim::SkipKind::not_matched:
      break;
  }
  return "not_selected";
}

const char* to_string(inventory::EventKind k) {
  using inventory::EventKind;
  switch (k) {
    case EventKind::orphaned_memory:
      return "orphaned_memory";
    case EventKind::zombie_leader:
      return "zombie_leader";
    case EventKind::unattributed_memory:
      return "unattributed_memory";
    case EventKind::memory_freed:
      return "memory_freed";
    case EventKind::source_down:
      return "nvml_down";
    case EventKind::source_up:
      return "nvml_up";
    case EventKind::reap_planned:
      return "reap_planned";
    case EventKind::reaped:
      return "reaped";
    case EventKind::reap_failed:
      return "reap_failed";
    case EventKind::ghost_gpu:
      return "ghost_gpu";
    case EventKind::ghost_gpu_gone:
      return "ghost_gpu_gone";
  }
  return "unknown";
}

std::vector<inventory::EventKind> event_kinds() {
  std::vector<inventory::EventKind> out;
  for (int i = 0;; ++i) {
    const auto kind = static_cast<inventory::EventKind>(i);
    if (std::string_view(to_string(kind)) == "unknown") return out;
    out.push_back(kind);
  }
}

}  // namespace gpureap::report
