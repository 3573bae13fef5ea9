#include "reclaim/leftovers.h"

#include <fmt/format.h>

#include <algorithm>

#include "gpu/source_words.h"
#include "inventory/events.h"
#include "proc/process_table.h"
#include "util/units.h"

namespace gpureap::reclaim {
namespace {

bool is_survivor(const LeftoverInput& in, const proc::ProcessId& id) {
  return std::find(in.survivors.begin(), in.survivors.end(), id) != in.survivors.end();
}

const Skipped* skipped_entry(const LeftoverInput& in, const proc::ProcessId& id) {
  if (!in.last_plan) return nullptr;
  for (const auto& s : in.last_plan->skipped)
    if (s.id == id) return &s;
  return nullptr;
}

}  // namespace

// A class that is an Unexplained class or an event has that value's word: one spelling
// per value.
std::string_view enum_name(LeftoverClass c) {
  switch (c) {
    case LeftoverClass::not_selected:
      return "not_selected";
    case LeftoverClass::not_permitted:
      return "not_permitted";
    case LeftoverClass::protected_process:
      return "protected";
    case LeftoverClass::zombie_leader:
      return enum_name(inventory::EventKind::zombie_leader);
    case LeftoverClass::exiting_in_driver:
      return "exiting_in_driver";
    case LeftoverClass::live_holder:
      return "live_holder";
    case LeftoverClass::outside_namespace:
      return enum_name(inventory::Unexplained::outside_namespace);
    case LeftoverClass::still_releasing:
      return "still_releasing";
    case LeftoverClass::driver_held:
      return enum_name(inventory::Unexplained::driver_held);
    case LeftoverClass::ghost_gpu:
      return enum_name(inventory::EventKind::ghost_gpu);
    case LeftoverClass::unknown:
      return enum_name(inventory::Unexplained::unknown);
    case LeftoverClass::source_failed:
      return gpu::source_words::kFailed;
  }
  return {};
}

std::string_view enum_name(SkipKind k) { return enum_name(class_of(k)); }

LeftoverClass class_of(SkipKind k) {
  switch (k) {
    case SkipKind::protected_process:
      return LeftoverClass::protected_process;
    case SkipKind::not_permitted:
      return LeftoverClass::not_permitted;
    case SkipKind::not_matched:
      break;
  }
  return LeftoverClass::not_selected;
}

namespace {

// A holder the selection left alone: why, and how to include it.
void classify_skipped(Leftover& l, const Skipped& s, pid_t pid) {
  l.cls = class_of(s.kind);
  l.evidence.push_back("not signalled: " + s.reason);
  l.next_step =
      s.kind == SkipKind::not_permitted
          ? "run as root: sudo gpureap free --gpu " + gpu::device_text(l.gpu)
      : s.kind == SkipKind::protected_process
          ? fmt::format("it is protected; if you are sure, name it: gpureap free --gpu {} --pid {}",
                        gpu::device_text(l.gpu), pid)
          // A whole command, as every other next step (ux-wave5-review #12: not "--pid N").
          : fmt::format("it is outside your selection; to free it too: gpureap free --gpu {} --pid {}",
                        gpu::device_text(l.gpu), pid);
}

// A target alive after SIGKILL and the wait: a zombie leader, stuck in the driver (D),
// or just slow; with its threads, wchan and kernel stack as evidence.
void classify_survivor(Leftover& l, const proc::Holder& h, const std::string& proc_root) {
  auto threads = proc::read_thread_states(h.id.pid, proc_root);
  std::string wchan = proc::read_wchan(h.id.pid, proc_root);
  std::string stack = proc::read_stack(h.id.pid, proc_root);
  if (h.zombie_leader) {
    l.cls = LeftoverClass::zombie_leader;
    l.evidence.push_back("leader is a zombie while other threads live (the fds live in task/*/)");
  } else {
    bool in_d =
        h.state == 'D' || std::any_of(threads.begin(), threads.end(),
                                      [](const proc::ThreadState& t) { return t.state == 'D'; });
    l.cls = in_d ? LeftoverClass::exiting_in_driver : LeftoverClass::live_holder;
    if (in_d)
      l.evidence.push_back("in uninterruptible sleep (D) after SIGKILL: blocked inside the kernel");
  }
  for (const auto& t : threads)
    l.evidence.push_back(fmt::format("thread {} state {}", t.tid, t.state));
  if (!wchan.empty() && wchan != "0") l.evidence.push_back("wchan: " + wchan);
  if (!stack.empty()) l.evidence.push_back("kernel stack: " + stack.substr(0, 400));
  l.next_step =
      l.cls == LeftoverClass::exiting_in_driver
          ? "it is exiting inside the driver; wait (`gpureap wait --gpu " + gpu::device_text(l.gpu) +
                "`); if it never finishes, check dmesg for Xid errors: a GPU reset or reboot "
                "is needed"
          : "SIGKILL was sent but it did not exit in time; re-run free, and check dmesg";
}

// Memory no visible process holds, by inventory's classification of it.
Leftover classify_unexplained(const LeftoverInput& in) {
  const auto& view = *in.view;
  const gpu::DeviceId gpu = view.info.id;
  Leftover l{gpu, LeftoverClass::unknown, {}, {}, ""};
  l.evidence.push_back(fmt::format("used {} with threshold {} (baseline {} + tolerance)",
                                   format_bytes(view.used()), format_bytes(in.threshold),
                                   format_bytes(view.baseline.bytes)));
  switch (view.unexplained) {
    case inventory::Unexplained::outside_namespace:
      l.cls = LeftoverClass::outside_namespace;
      for (const auto& p : view.source_unseen) l.pids.push_back(static_cast<pid_t>(p.pid));
      l.next_step =
          "run gpureap on the host (e.g. outside `pct exec`/the container), where those processes "
          "are visible";
      break;
    case inventory::Unexplained::releasing:
    case inventory::Unexplained::no_holder:  // not watched for a budget yet: never "reset"
      l.cls = LeftoverClass::still_releasing;
      l.next_step =
          "the driver is still freeing it: `gpureap wait --gpu " + gpu::device_text(gpu) + "`";
      break;
    case inventory::Unexplained::driver_held:
      l.cls = LeftoverClass::driver_held;
      l.next_step = "no process holds it: only a GPU reset (`gpureap free --reset --gpu " +
                    gpu::device_text(gpu) +
                    " --yes`, checks preconditions first) or a reboot frees it";
      break;
    case inventory::Unexplained::none:  // memory above the threshold, yet nothing unexplained
    case inventory::Unexplained::unknown:
      l.cls = LeftoverClass::unknown;
      l.next_step = "inspect with `gpureap status --gpu " + gpu::device_text(gpu) + "`";
  }
  if (!view.unexplained_detail.empty()) l.evidence.push_back(view.unexplained_detail);
  return l;
}

// A GPU still computing for a process that is gone (inventory::Busy::ghost).
Leftover classify_ghost(const LeftoverInput& in) {
  const auto& view = *in.view;
  const gpu::DeviceId gpu = view.info.id;
  Leftover l{gpu, LeftoverClass::ghost_gpu, {}, {}, ""};
  std::string samples;
  for (unsigned s : view.busy.samples) samples += fmt::format("{}{}%", samples.empty() ? "" : " ", s);
  l.evidence.push_back(fmt::format("SM utilization samples {} (busy means >= {}%), used {}, "
                                   "no process using the GPU",
                                   samples, inventory::kBusyThreshold, format_bytes(view.used())));
  if (view.info.persistence_mode)
    l.evidence.push_back(fmt::format("persistence mode {}", *view.info.persistence_mode ? "on" : "off"));
  l.next_step = "a ghost GPU: only a GPU reset (`gpureap free --reset --gpu " +
                gpu::device_text(gpu) +
                " --yes`: root, no process with the device open, persistence mode off) or a "
                "reboot ends it; keep new jobs off it until then";
  return l;
}

}  // namespace

std::vector<Leftover> classify_leftovers(const LeftoverInput& in, const std::string& proc_root) {
  std::vector<Leftover> out;
  const gpu::DeviceId gpu = in.view->info.id;
  for (const auto& gh : in.view->holders) {
    if (!gh.uses_gpu) continue;
    const auto& h = gh.holder;
    Leftover l{gpu, LeftoverClass::unknown, {h.id.pid}, {}, ""};
    l.evidence.push_back(
        fmt::format("pid {} ({}) state {}, {} on this GPU, cmd: {}", h.id.pid, h.comm, h.state,
                    gh.gpu_bytes ? format_bytes(*gh.gpu_bytes) : "unknown", h.cmdline));
    if (const Skipped* s = skipped_entry(in, h.id)) {
      classify_skipped(l, *s, h.id.pid);
    } else if (is_survivor(in, h.id)) {
      classify_survivor(l, h, proc_root);
    } else {
      l.cls = LeftoverClass::live_holder;
      if (auto r = in.respawner_stop.find(h.ppid); r != in.respawner_stop.end()) {
        l.evidence.push_back(fmt::format(
            "appeared after the last round: its parent pid {} ({}) restarts killed holders",
            h.ppid, r->second.first));
        l.next_step = r->second.second;
      } else {
        l.evidence.push_back("appeared after the last round (a supervisor may keep restarting it)");
        l.next_step =
            "stop whatever restarts it (systemd unit, container restart policy), then re-run free";
      }
    }
    out.push_back(std::move(l));
  }
  if (out.empty() && in.view->unexplained != inventory::Unexplained::none)
    out.push_back(classify_unexplained(in));
  if (in.view->busy.kind == inventory::Busy::ghost) out.push_back(classify_ghost(in));
  if (out.empty()) out.push_back(classify_unexplained(in));
  return out;
}

}  // namespace gpureap::reclaim
