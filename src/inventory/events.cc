// EventDetector: the announced state of each GPU, and the rules that turn a new
// inventory into events (the contract is in events.h). Everything here is a pure
// function of the inventories it has seen and the times it was given.

#include "inventory/events.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "gpu/source_words.h"
#include "gpu/vendor.h"
#include "inventory/baseline_store.h"
#include "util/enum_names.h"
#include "util/units.h"

namespace gpureap::inventory {

std::string_view enum_name(EventKind k) {
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
      return gpu::source_words::kDown;
    case EventKind::source_up:
      return gpu::source_words::kUp;
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
  return {};
}

struct EventDetector::GpuState {
  // Announced holders still present, with their last known bytes on this GPU.
  std::map<proc::ProcessId, std::optional<std::uint64_t>> orphans;
  // Of those, the ones announced as keepers of a dead owner's memory (issue 52).
  std::set<proc::ProcessId> keepers_said;
  std::map<proc::ProcessId, std::optional<std::uint64_t>> zombies;
  // Unattributed memory as announced, and a candidate waiting out the settle time.
  Unexplained announced_class = Unexplained::none;
  std::uint64_t announced_unattributed = 0;
  Unexplained pending_class = Unexplained::none;
  double pending_since = 0;
  // Announced memory that went away (holders gone, class cleared) and is not yet
  // confirmed freed: memory_freed reports it once nothing is pending.
  bool gone = false;
  std::uint64_t gone_bytes = 0;
  std::size_t gone_orphans = 0;
  std::size_t gone_zombies = 0;
  std::set<proc::ProcessId> gone_ids;  // counted once when orphaned and a zombie leader
  std::map<proc::ProcessId, std::string> instance_of;  // announced holders' instance keys
  bool gone_unattributed = false;
  bool down = false;   // a per-GPU source_down was announced
  bool ghost = false;  // a ghost_gpu was announced
  // Orphans and zombie leaders found before the driver listed their memory, since when
  // (kUnmeasuredWait).
  std::map<proc::ProcessId, double> unmeasured_orphans;
  std::map<proc::ProcessId, double> unmeasured_zombies;

  // What went away is accounted for (freed, or now announced as unexplained).
  void forget_gone() {
    gone = false;
    gone_bytes = 0;
    gone_orphans = gone_zombies = 0;
    gone_ids.clear();
    gone_unattributed = false;
  }
};

namespace {

bool gpu_failing(const GpuView& view) {
  return view.info.hung || !view.info.problem.empty();
}

std::string gpu_key(const GpuView& view) {
  return view.info.uuid.empty() ? fmt::format("#{}", view.info.id) : view.info.uuid;
}

Event gpu_event(EventKind kind, const GpuView& view, double now) {
  Event e;
  e.kind = kind;
  e.time = now;
  e.gpu = view.info.id;
  e.gpus = {view.info.id};
  e.uuid = view.info.uuid;
  return e;
}

EventHolder event_holder(const GpuHolder& gh) {
  return {gh.holder.id,        gh.holder.comm,     gh.holder.user,    gh.gpu_bytes,
          gh.holder.container, gh.holder.instance, gh.holder.orphaned, gh.holder.provenance};
}

std::uint64_t known_bytes(const std::vector<EventHolder>& holders) {
  std::uint64_t sum = 0;
  for (const auto& h : holders) sum += h.gpu_bytes.value_or(0);
  return sum;
}

// The instance every holder of `e` belongs to, or nullptr (none, or several).
const Instance* common_instance(const Event& e, const Inventory& inv) {
  if (e.holders.empty() || e.holders.front().instance.empty()) return nullptr;
  for (const auto& h : e.holders)
    if (h.instance != e.holders.front().instance || h.container != e.holders.front().container)
      return nullptr;
  for (const auto& in : inv.instances)
    if (in.key == e.holders.front().instance && in.container == e.holders.front().container)
      return &in;
  return nullptr;
}

// One orphaned_memory event per server instance: a tensor-parallel server whose launcher
// died orphans a worker on each of its GPUs in the same look, and that is one event that
// names the server, not one per GPU. Each event names its instance when its holders
// share one of several processes or of a known engine.
std::vector<Event> by_instance(std::vector<Event> events, const Inventory& inv) {
  std::vector<Event> out;
  for (auto& e : events) {
    const Instance* in = e.kind == EventKind::orphaned_memory ? common_instance(e, inv) : nullptr;
    const bool named = in && (in->members.size() > 1 || (in->engine != proc::Engine::none &&
                                                         in->engine != proc::Engine::python));
    if (!named) {
      out.push_back(std::move(e));
      continue;
    }
    auto same = std::find_if(out.begin(), out.end(), [&](const Event& o) {
      return o.kind == EventKind::orphaned_memory && o.instance && o.instance->key == in->key &&
             o.instance->container == in->container;
    });
    if (same == out.end()) {
      e.instance = *in;
      // The agent saw the launcher alive: its command line still names the model and port.
      if (!in->launcher_alive && e.parent && e.parent->pid == in->launcher_pid)
        remember_dead_launcher(*e.instance, *e.parent);
      out.push_back(std::move(e));
      continue;
    }
    same->gpu.reset();
    same->uuid.clear();
    same->gpus.insert(same->gpus.end(), e.gpus.begin(), e.gpus.end());
    gpu::normalize(same->gpus);
    same->holders.insert(same->holders.end(), e.holders.begin(), e.holders.end());
    same->bytes += e.bytes;
    if (!same->parent) same->parent = e.parent;
    if (same->parent && !same->instance->launcher_alive &&
        same->parent->pid == same->instance->launcher_pid && !same->instance->model)
      remember_dead_launcher(*same->instance, *same->parent);
  }
  return out;
}

std::string count_text(std::size_t n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
}

// Holders of `view` that use it and satisfy `pred`, with the ones not yet in
// `announced` appended to `fresh`. Announced holders no longer present go to
// the state's "gone" account; present ones get their latest figure.
template <typename Pred>
void track_holders(const GpuView& view, Pred pred,
                   std::map<proc::ProcessId, std::optional<std::uint64_t>>& announced,
                   std::size_t& gone_count, std::vector<const GpuHolder*>& fresh, bool& gone,
                   std::uint64_t& gone_bytes, std::set<proc::ProcessId>& gone_ids) {
  std::map<proc::ProcessId, const GpuHolder*> current;
  for (const auto& gh : view.holders)
    if (gh.uses_gpu && pred(gh.holder)) current.emplace(gh.holder.id, &gh);
  for (auto it = announced.begin(); it != announced.end();) {
    auto cur = current.find(it->first);
    if (cur == current.end()) {
      gone = true;
      if (gone_ids.insert(it->first).second) gone_bytes += it->second.value_or(0);
      ++gone_count;
      it = announced.erase(it);
    } else {
      if (cur->second->gpu_bytes) it->second = cur->second->gpu_bytes;
      ++it;
    }
  }
  for (const auto& gh : view.holders)
    if (gh.uses_gpu && pred(gh.holder) && !announced.contains(gh.holder.id)) fresh.push_back(&gh);
}

}  // namespace

std::vector<gpu::Vendor> sides_down(const Inventory& inv) {
  std::vector<gpu::Vendor> down;
  if (inv.source_state != gpu::SourceState::partial) return down;
  for (gpu::Vendor side : enum_values<gpu::Vendor>()) {
    bool listed = false, read = false;
    for (const auto& view : inv.gpus) {
      if (gpu::vendor_of(view.info.uuid) != side) continue;
      listed = true;
      read = read || !gpu_failing(view);
    }
    if (listed && !read) down.push_back(side);
  }
  return down;
}

bool source_down(const Inventory& inv) {
  return !gpu::lists_gpus(inv.source_state) || !sides_down(inv).empty();
}

namespace {

// "NVML cannot read any of its GPUs (GPU 0, 1)" for each side down on a node whose other
// side still reads; "" when no side reads (the whole source is down).
std::string sides_down_words(const Inventory& inv, const std::vector<gpu::Vendor>& down) {
  bool other_reads = false;
  for (const auto& view : inv.gpus)
    other_reads = other_reads || std::ranges::find(down, gpu::vendor_of(view.info.uuid)) == down.end();
  if (!gpu::lists_gpus(inv.source_state) || !other_reads) return {};
  std::vector<std::string> sides;
  for (gpu::Vendor side : down) {
    std::vector<unsigned> ids;
    for (const auto& view : inv.gpus)
      if (gpu::vendor_of(view.info.uuid) == side) ids.push_back(view.info.id.index);
    sides.push_back(fmt::format("{} cannot read any of its GPUs (GPU {})",
                                gpu::driver_interface(side), fmt::join(ids, ", ")));
  }
  return fmt::format("{}", fmt::join(sides, "; "));
}

}  // namespace

std::string source_down_text(const Inventory& inv) {
  const auto down = sides_down(inv);
  if (auto words = sides_down_words(inv, down); !words.empty())
    return words + ": only the other GPUs and the /proc view are live";
  return fmt::format("{} cannot read any GPU: only the /proc view is live",
                     down.size() == 1 ? gpu::driver_interface(down[0]) : "NVML");
}

EventDetector::EventDetector(std::chrono::milliseconds unattributed_settle)
    : settle_seconds_(std::chrono::duration<double>(unattributed_settle).count()) {}
EventDetector::~EventDetector() = default;
EventDetector::EventDetector(EventDetector&&) noexcept = default;
EventDetector& EventDetector::operator=(EventDetector&&) noexcept = default;

std::vector<Event> EventDetector::observe(const Inventory& inv, double now,
                                          const std::map<pid_t, DeadParent>& dead_parents) {
  std::vector<Event> out;
  const auto sides = sides_down(inv);
  const bool whole = !gpu::lists_gpus(inv.source_state);
  const bool down = whole || !sides.empty();
  // A GPU of a side that reads none of its GPUs: said by the node-wide line.
  auto side_down = [&](std::string_view uuid) {
    return whole || std::ranges::find(sides, gpu::vendor_of(uuid)) != sides.end();
  };
  if (down && !source_down_) {
    Event e;
    e.kind = EventKind::source_down;
    e.time = now;
    e.detail = inv.source_problem.empty() ? "NVML does not answer" : inv.source_problem;
    if (auto words = sides_down_words(inv, sides); !words.empty()) e.detail = words + ": " + e.detail;
    out.push_back(std::move(e));
    // The node-wide line covers every GPU of the sides down: each one's own down/up
    // starts afresh.
    for (auto& [key, st] : gpus_)
      if (side_down(key)) st->down = false;
  } else if (!down && source_down_) {
    Event e;
    e.kind = EventKind::source_up;
    e.time = now;
    e.detail = "NVML answers again: memory figures are live again";
    out.push_back(std::move(e));
  }
  source_down_ = down;
  // Without NVML the views are built from device nodes (no uuid, no memory, every
  // opener counted as a user): nothing to compare with what was announced.
  if (!gpu::lists_gpus(inv.source_state)) return out;

  for (const auto& view : inv.gpus) {
    auto& st = gpus_[gpu_key(view)];
    if (!st) st = std::make_unique<GpuState>();
    if (!side_down(view.info.uuid)) {
      const bool failing = gpu_failing(view);
      if (failing && !st->down) {
        Event e = gpu_event(EventKind::source_down, view, now);
        e.detail = view.info.problem.empty()
                       ? fmt::format("GPU {} did not answer in time", view.info.id)
                       : view.info.problem;
        out.push_back(std::move(e));
      } else if (!failing && st->down) {
        Event e = gpu_event(EventKind::source_up, view, now);
        e.detail = fmt::format("NVML answers for GPU {} again: its memory figures are live again",
                               view.info.id);
        out.push_back(std::move(e));
      }
      st->down = failing;
    }
    // Memory unknown: who uses the GPU and how much is unknown too; keep what was
    // announced until NVML answers for it (never a memory_freed from a blind GPU).
    // (A GPU whose driver cannot list processes at all still counts: its holders
    // come from /proc and its memory is known.)
    if (gpu_failing(view) || !view.info.memory) continue;
    observe_gpu(view, *st, now, dead_parents, out);
  }
  out = by_instance(std::move(out), inv);
  for (const auto& e : out)
    if (e.kind == EventKind::orphaned_memory && e.instance)
      announced_instances_[e.instance->key] = *e.instance;
  return freed_by_instance(std::move(out), now);
}

// One memory_freed per instance (issue 37): its GPUs' events of this look and of looks
// before, said once none of its GPUs has holders of it gone and still releasing (a
// release settles or is announced unattributed: either ends the wait).
std::vector<Event> EventDetector::freed_by_instance(std::vector<Event> events, double now) {
  std::vector<Event> out;
  for (auto& e : events) {
    if (e.kind != EventKind::memory_freed || !e.instance) {
      out.push_back(std::move(e));
      continue;
    }
    auto& sum = instance_freed_[e.instance->key];
    if (sum.event.gpus.empty()) {
      sum.first = now;
      sum.event = std::move(e);
      continue;
    }
    sum.event.time = e.time;
    sum.event.gpu.reset();
    sum.event.uuid.clear();
    sum.event.gpus.insert(sum.event.gpus.end(), e.gpus.begin(), e.gpus.end());
    gpu::normalize(sum.event.gpus);
    sum.event.bytes += e.bytes;
  }
  // A GPU with members of `key` gone and still releasing; one with members still there.
  auto releasing = [&](const std::string& key) {
    for (const auto& [uuid, st] : gpus_)
      if (st->gone)
        for (const auto& id : st->gone_ids)
          if (auto it = st->instance_of.find(id); it != st->instance_of.end() && it->second == key)
            return true;
    return false;
  };
  auto members_left = [&](const std::string& key) {
    for (const auto& [uuid, st] : gpus_)
      for (const auto* announced : {&st->orphans, &st->zombies})
        for (const auto& [id, bytes] : *announced)
          if (auto it = st->instance_of.find(id); it != st->instance_of.end() && it->second == key)
            return true;
    return false;
  };
  for (auto it = instance_freed_.begin(); it != instance_freed_.end();) {
    auto& [key, sum] = *it;
    const bool left = members_left(key);
    if (sum.event.gpus.empty() || releasing(key) ||
        (left && now - sum.first < kInstanceFreedWait)) {
      ++it;
      continue;
    }
    if (sum.event.gpus.size() > 1)
      sum.event.detail = fmt::format(
          "{} of instance {} {} gone; {}", count_text(sum.holders, sum.label.c_str()), key,
          sum.holders == 1 ? "is" : "are",
          sum.rest.empty() ? "its GPUs are back at their baseline"
                           : fmt::format("{} of its GPUs {} not at their baseline: {}",
                                         sum.rest.size(), sum.rest.size() == 1 ? "is" : "are",
                                         fmt::join(sum.rest, "; ")));
    out.push_back(std::move(sum.event));
    if (!left) announced_instances_.erase(key);  // its members still there keep its name
    it = instance_freed_.erase(it);
  }
  return out;
}

void EventDetector::observe_gpu(const GpuView& view, GpuState& st, double now,
                                const std::map<pid_t, DeadParent>& dead_parents,
                                std::vector<Event>& out) {
  observe_orphans(view, st, now, dead_parents, out);
  observe_zombies(view, st, now, out);
  observe_unexplained(view, st, now, out);
  observe_ghost(view, st, now, out);
  observe_freed(view, st, now, out);
}

// A holder found by its device node before the driver's list has it (the kernel's process
// event or /proc came first, or the driver is answering again after a hang) is announced
// once the driver gives its bytes, or after kUnmeasuredWait if it never does (a process
// the driver does not list): "orphaned" with no size would be the only line said of it.
// Where the driver gives no memory or cannot list processes (the /proc view), nothing waits.
void EventDetector::wait_for_measure(const GpuView& view,
                                     std::map<proc::ProcessId, double>& unmeasured_since,
                                     double now, std::vector<const GpuHolder*>& fresh) {
  std::map<proc::ProcessId, double> waiting;
  if (view.info.memory && view.info.processes_known) {
    std::erase_if(fresh, [&](const GpuHolder* gh) {
      if (gh->gpu_bytes) return false;
      auto it = unmeasured_since.find(gh->holder.id);
      const double since = it == unmeasured_since.end() ? now : it->second;
      if (now - since >= kUnmeasuredWait) return false;
      waiting.emplace(gh->holder.id, since);
      return true;
    });
  }
  unmeasured_since = std::move(waiting);
}

// 1. Orphaned holders.
void EventDetector::observe_orphans(const GpuView& view, GpuState& st, double now,
                                    const std::map<pid_t, DeadParent>& dead_parents,
                                    std::vector<Event>& out) {
  std::vector<const GpuHolder*> fresh;
  track_holders(
      view, [](const proc::Holder& h) { return proc::stray(h); }, st.orphans, st.gone_orphans, fresh,
      st.gone, st.gone_bytes, st.gone_ids);
  // An orphan announced before its keeping was known (the agent saw the import at the look
  // after the death that orphaned it) is announced again, as the keeper it is.
  std::erase_if(st.keepers_said, [&](const proc::ProcessId& id) { return !st.orphans.contains(id); });
  for (const auto& gh : view.holders)
    if (gh.uses_gpu && gh.holder.keeper != proc::KeeperClass::none &&
        st.orphans.contains(gh.holder.id) && !st.keepers_said.contains(gh.holder.id))
      fresh.push_back(&gh);
  wait_for_measure(view, st.unmeasured_orphans, now, fresh);
  if (fresh.empty()) return;
  Event e = gpu_event(EventKind::orphaned_memory, view, now);
  for (const auto* gh : fresh) {
    e.holders.push_back(event_holder(*gh));
    if (gh->holder.keeper != proc::KeeperClass::none) st.keepers_said.insert(gh->holder.id);
    st.orphans.emplace(gh->holder.id, gh->gpu_bytes);
    st.instance_of[gh->holder.id] = gh->holder.instance;
    if (!e.parent) {
      auto it = dead_parents.find(gh->holder.id.pid);
      if (it != dead_parents.end()) e.parent = it->second;
    }
  }
  e.bytes = known_bytes(e.holders);
  const proc::Holder& first = fresh.front()->holder;
  if (first.orphaned) e.detail = first.orphan_reason.empty() ? "parent gone" : first.orphan_reason;
  // A keeper of a dead owner's memory says whose, and how (docs/orphans.md, "Keepers").
  if (first.keeper != proc::KeeperClass::none)
    e.detail += fmt::format("{}{}: it {}", e.detail.empty() ? "" : "; ", proc::enum_name(first.keeper),
                            first.keeper_reason);
  if (st.orphans.size() > fresh.size())  // others were announced before
    e.detail +=
        fmt::format("; {} on this GPU in all", count_text(st.orphans.size(), "orphaned holder"));
  out.push_back(std::move(e));
}

// 2. Zombie leaders.
void EventDetector::observe_zombies(const GpuView& view, GpuState& st, double now,
                                    std::vector<Event>& out) {
  std::vector<const GpuHolder*> fresh;
  track_holders(
      view, [](const proc::Holder& h) { return h.zombie_leader; }, st.zombies, st.gone_zombies,
      fresh, st.gone, st.gone_bytes, st.gone_ids);
  // CI (ctest -j12): the look's NVML list was older than the leader's exit, and the event
  // said the zombie held nothing.
  wait_for_measure(view, st.unmeasured_zombies, now, fresh);
  for (const auto* gh : fresh) {
    Event e = gpu_event(EventKind::zombie_leader, view, now);
    e.holders.push_back(event_holder(*gh));
    e.bytes = gh->gpu_bytes.value_or(0);
    std::size_t live =
        std::count_if(gh->holder.threads.begin(), gh->holder.threads.end(),
                      [](const proc::ThreadState& t) { return t.state != 'Z' && t.state != 'X'; });
    e.detail = live > 0 ? fmt::format("its main thread exited; {} still hold{} the GPU",
                                      count_text(live, "live thread"), live == 1 ? "s" : "")
                        : "its main thread exited; its other threads still hold the GPU";
    // Whether it is a leak is the lineage verdict's to say, as in status and --check:
    // a zombie leader is a mark, not a verdict (docs/orphans.md, "Zombie leaders").
    const auto& zh = gh->holder;
    e.detail += zh.orphaned   ? fmt::format("; {}: {}", proc::orphan_verdict(zh.provenance),
                                            zh.orphan_reason)
                : zh.detached ? "; detached, not a leak: " + zh.detached_reason
                : zh.ppid > 1 ? fmt::format("; not a leak: its parent pid {} is alive", zh.ppid)
                              : std::string("; not a leak by the evidence (not orphaned)");
    st.zombies.emplace(gh->holder.id, gh->gpu_bytes);
    st.instance_of[gh->holder.id] = gh->holder.instance;
    out.push_back(std::move(e));
  }
}

// 3. Memory no process explains. `releasing` and falling memory are a release
//    in progress: they restart the settle time and announce nothing; so is `no_holder`
//    (not yet told: within a release budget the model says releasing or driver_held).
//    Falling is the release model's word (GpuView::falling, release_model.h), never a
//    comparison of this detector's own.
void EventDetector::observe_unexplained(const GpuView& view, GpuState& st, double now,
                                        std::vector<Event>& out) const {
  const std::uint64_t tolerance = freed_tolerance(view.info.memory->total);
  const Unexplained cls = view.unexplained;
  const std::uint64_t bytes = view.unattributed_bytes;
  const bool falling = view.falling;
  if (cls == Unexplained::none) {
    st.pending_class = Unexplained::none;
    if (st.announced_class != Unexplained::none) {
      st.gone = true;
      st.gone_unattributed = true;
      st.gone_bytes += st.announced_unattributed;
      st.announced_class = Unexplained::none;
      st.announced_unattributed = 0;
    }
  } else if (cls == Unexplained::releasing || cls == Unexplained::no_holder) {
    st.pending_class = Unexplained::none;
  } else if (falling) {
    st.pending_class = cls;  // the settle time counts from the last fall
    st.pending_since = now;
  } else if (cls == st.announced_class && bytes <= st.announced_unattributed + tolerance) {
    st.pending_class = Unexplained::none;  // as announced
  } else {
    if (st.pending_class != cls) {
      st.pending_class = cls;
      st.pending_since = now;
    }
    if (now - st.pending_since >= settle_seconds_) {
      Event e = gpu_event(EventKind::unattributed_memory, view, now);
      e.bytes = bytes;
      e.unexplained = cls;
      e.detail = view.unexplained_detail;
      out.push_back(std::move(e));
      st.announced_class = cls;
      st.announced_unattributed = bytes;
      st.pending_class = Unexplained::none;
      // Memory of holders that went away and is now unexplained was not freed:
      // it is this announcement's, and a later memory_freed counts it from here.
      st.forget_gone();
    }
  }
}

// 3b. A ghost GPU: busy with no process for the inventory's window.
void EventDetector::observe_ghost(const GpuView& view, GpuState& st, double now,
                                  std::vector<Event>& out) {
  const bool ghost = gpu_state(view) == inventory::GpuState::ghost;
  if (ghost == st.ghost) return;
  Event e = gpu_event(ghost ? EventKind::ghost_gpu : EventKind::ghost_gpu_gone, view, now);
  e.bytes = view.used();
  e.detail =
      ghost ? view.busy.detail
      : view.info.utilization_gpu
          ? fmt::format(
                "GPU {} is no longer busy without a process (SM utilization "
                "{}%{})",
                view.info.id, *view.info.utilization_gpu,
                view.busy.kind == Busy::none ? ""
                                             : std::string(", ").append(enum_name(view.busy.kind)))
          : fmt::format("GPU {} no longer reports its utilization", view.info.id);
  out.push_back(std::move(e));
  st.ghost = ghost;
}

// 4. Freed: what was announced went away, and nothing is pending (a release in
//    progress or unexplained memory still settling keeps it waiting).
void EventDetector::observe_freed(const GpuView& view, GpuState& st, double now,
                                  std::vector<Event>& out) {
  const std::uint64_t tolerance = freed_tolerance(view.info.memory->total);
  const Unexplained cls = view.unexplained;
  const std::uint64_t bytes = view.unattributed_bytes;
  const bool settled = cls == Unexplained::none || (cls == st.announced_class &&
                                                    bytes <= st.announced_unattributed + tolerance);
  if (!st.gone || !settled || !st.orphans.empty() || !st.zombies.empty()) return;
  Event e = gpu_event(EventKind::memory_freed, view, now);
  e.bytes = st.gone_bytes;
  // Holders counted once each, even one both orphaned and a zombie leader.
  std::vector<std::string> what;
  const char* label = !st.gone_zombies   ? "orphaned holder"
                      : !st.gone_orphans ? "zombie leader"
                                         : "orphaned or zombie-leader holder";
  if (!st.gone_ids.empty()) what.push_back(count_text(st.gone_ids.size(), label));
  if (st.gone_unattributed) what.push_back("the unattributed memory");
  std::string gone;
  for (std::size_t i = 0; i < what.size(); ++i) gone += (i == 0 ? "" : " and ") + what[i];
  const bool one = what.size() == 1 && (st.gone_unattributed || st.gone_ids.size() == 1);
  gone += one ? " is gone" : " are gone";
  if (cls != Unexplained::none)
    e.detail =
        fmt::format("{}; {} still unattributed ({})", gone, format_bytes(bytes), enum_name(cls));
  else if (gpu_state(view) == inventory::GpuState::free)
    e.detail = fmt::format("{}; GPU {} is back at its baseline ({} used)", gone, view.info.id,
                           format_bytes(view.used()));
  else
    e.detail = fmt::format("{}; GPU {} has {} used by live holders", gone, view.info.id,
                           format_bytes(view.attributed_bytes));
  // The holders that went, all of one announced instance: summed with its other GPUs.
  std::string key;
  bool one_instance = !st.gone_unattributed && !st.gone_ids.empty();
  for (const auto& id : st.gone_ids) {
    auto it = st.instance_of.find(id);
    const std::string k = it == st.instance_of.end() ? "" : it->second;
    if (k.empty() || (!key.empty() && k != key)) one_instance = false;
    key = k;
    if (it != st.instance_of.end()) st.instance_of.erase(it);
  }
  if (auto in = announced_instances_.find(key); one_instance && in != announced_instances_.end()) {
    e.instance = in->second;
    auto& sum = instance_freed_[key];
    sum.holders += st.gone_ids.size();
    sum.label = label;
    if (cls != Unexplained::none || gpu_state(view) != inventory::GpuState::free)
      sum.rest.push_back(e.detail.substr(e.detail.find("; ") + 2));
  }
  out.push_back(std::move(e));
  st.forget_gone();
}

}  // namespace gpureap::inventory
