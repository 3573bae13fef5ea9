#include "inventory/release_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "gpu/device_id.h"
#include "inventory/inventory.h"
#include "util/units.h"

namespace gpureap::inventory {
namespace {

using std::chrono::milliseconds;

double seconds(util::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The classes a look gives memory that no process holds anywhere this look can see.
bool no_process_class(Unexplained u) {
  return u == Unexplained::releasing || u == Unexplained::driver_held ||
         u == Unexplained::no_holder;
}

std::string pinned_text(const ReleaseFacts& f) {
  if (!f.pinned_bytes || *f.pinned_bytes == 0) return "";
  return fmt::format("; its holders had {} of host memory pinned, which the kernel unpins after "
                     "they are gone",
                     format_bytes(*f.pinned_bytes));
}

// Whole seconds as the rule's budgets are; a budget under a second (--release-budget
// 1ms) in milliseconds, not "0 s".
std::string budget_text(double seconds) {
  if (seconds < 1.0)
    return format_duration(std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(seconds)));
  return fmt::format("{:.0f} s", seconds);
}

// The clients with the node open (client_list), which hold none of the memory but must
// close the node before a reset.
std::string clients_text(const GpuView& view) {
  const std::string clients = client_list(view);
  if (clients.empty()) return clients;
  return fmt::format(" Clients with the device open and no memory (monitoring agents, most "
                     "likely), which must close it before a reset: {}.",
                     clients);
}

// `fall`: the last fall's two readings (used memory), when it is falling.
std::string detail_of(const GpuView& view, const ReleaseFacts& f, const ReleaseJudgement& j,
                      std::optional<std::pair<std::uint64_t, std::uint64_t>> fall) {
  const std::string amount = format_bytes(view.unattributed_bytes);
  const std::string gpu = gpu::device_text(view.info.id);
  switch (j.verdict) {
    case ReleaseVerdict::releasing:
      return fmt::format(
          "{} above the idle baseline with no process holding it, {}: the driver is still "
          "releasing it{} (release budget {}). `gpureap wait --gpu {}` returns when it is "
          "done.",
          amount,
          fall        ? fmt::format("falling ({} -> {} used)", format_bytes(fall->first),
                                         format_bytes(fall->second))
          : j.falling ? std::string("falling")
          : f.last_exit
              ? fmt::format("{:.1f} s after its last holder exited", j.elapsed_s)
              : fmt::format("first seen so {:.1f} s ago", j.elapsed_s),
          pinned_text(f), budget_text(j.budget_s), gpu);
    case ReleaseVerdict::driver_held:
      return fmt::format(
          "{} above the idle baseline, flat past the release budget of {} {}{}, with "
          "no process holding the GPU anywhere: the driver still holds it (a killed process's "
          "context was not torn down). Only a GPU reset (`gpureap free --reset --gpu {}`) or a "
          "reboot frees it.",
          amount, budget_text(j.budget_s),
          f.last_exit ? "since its last holder exited" : "of watching it",
          pinned_text(f), gpu) +
          clients_text(view);
    case ReleaseVerdict::no_holder:
      break;
  }
  return fmt::format(
      "{} above the idle baseline with no process holding it{}; when its last holder exited is "
      "not known, so it may still be releasing (pinned host memory takes tens of seconds to "
      "come back): `gpureap wait --gpu {}` tells. Only memory that stays flat past the release "
      "budget ({:.0f} s) is driver-held.",
      amount,
      f.sighted_earlier ? fmt::format(", first seen {:.1f} s ago", j.elapsed_s) : std::string(),
      gpu, j.budget_s);
}

}  // namespace

std::string release_key(const std::string& uuid, gpu::DeviceId id) {
  return uuid.empty() ? gpu::device_text(id) : uuid;
}

std::string release_key(const GpuView& view) { return release_key(view.info.uuid, view.info.id); }

std::uint64_t fall_step(std::uint64_t total) { return freed_tolerance(total) / 4; }

bool falling_at(std::optional<util::Clock::time_point> last_fall, util::Clock::time_point now) {
  return last_fall && now - *last_fall < kFallingWindow;
}

void ReleaseTracker::Readings::add(std::uint64_t used, std::uint64_t total,
                                   util::Clock::time_point now) {
  if (!moved) {
    moved = now;
    lowest = used;
  } else if (fell(lowest, used, total)) {
    fell_from = lowest;
    fell_to = used;
    lowest = used;
    last_fall = moved = now;
  } else if (used > lowest + fall_step(total)) {
    lowest = used;  // memory rose (a new allocation): not falling; a fall is measured from here
    last_fall.reset();
    moved = now;
  }
}

void ReleaseTracker::read(const std::string& key, std::uint64_t used, std::uint64_t total,
                          util::Clock::time_point now) {
  gpus_[key].readings.add(used, total, now);
}

bool ReleaseTracker::falling(const std::string& key, util::Clock::time_point now) const {
  auto it = gpus_.find(key);
  return it != gpus_.end() && falling_at(it->second.readings.last_fall, now);
}

bool ReleaseTracker::settled(const std::string& key, util::Clock::time_point now) const {
  auto it = gpus_.find(key);
  if (it == gpus_.end() || !it->second.readings.moved) return false;
  return now - *it->second.readings.moved >= kFallingWindow;
}

milliseconds ReleaseBudget::for_pinned(std::optional<std::uint64_t> pinned_bytes) const {
  if (fixed) return *fixed;
  if (!pinned_bytes) return kBudgetFloor;
  const double gib = static_cast<double>(*pinned_bytes) / static_cast<double>(1ull << 30);
  const auto rule =
      kBudgetBase + milliseconds(static_cast<long long>(std::ceil(gib * kBudgetSecondsPerGiB * 1000)));
  return std::clamp(rule, kBudgetFloor, kBudgetCeiling);
}

ReleaseJudgement judge_release(const ReleaseFacts& f, util::Clock::time_point now,
                               const ReleaseBudget& budget) {
  ReleaseJudgement j;
  j.falling = falling_at(f.last_fall, now);
  const auto b = budget.for_pinned(f.last_exit ? f.pinned_bytes : std::nullopt);
  j.budget_s = seconds(b);
  if (f.last_exit) {
    // The exit was seen: releasing until the budget has passed since, driver-held after
    // it unless it still falls.
    j.elapsed_s = seconds(now - *f.last_exit);
    j.verdict = j.falling || now - *f.last_exit < b ? ReleaseVerdict::releasing
                                                    : ReleaseVerdict::driver_held;
    return j;
  }
  // The exit was not seen: it was no later than the first look of the stretch, so memory
  // watched flat for a budget is driver-held; before that, nothing can be told.
  j.elapsed_s = f.watched_since ? seconds(now - *f.watched_since) : 0;
  // A sighting an earlier process recorded bounds the exit as the agent's ticks do: the
  // same verdicts as the agent's own flat stretch (one release clock): no holder until a
  // budget has passed since it, driver-held after. Not "releasing": no exit and no fall
  // was seen, and `status --check` calls a release in progress clean.
  if (j.falling)
    j.verdict = ReleaseVerdict::releasing;
  else if (f.watched_since && now - *f.watched_since >= b)
    j.verdict = ReleaseVerdict::driver_held;
  else
    j.verdict = ReleaseVerdict::no_holder;
  return j;
}

void ReleaseTracker::observe(Inventory& inv, util::Clock::time_point now, bool judge) {
  for (GpuView& view : inv.gpus) {
    if (!view.info.memory) continue;  // not measured: nothing learnt, users kept
    Gpu& g = gpus_[release_key(view)];
    // The one fall rule, over this look's readings after the earlier ones. Another
    // looker's verdict that its memory is releasing (the agent's answer) counts as a fall.
    const std::uint64_t total = view.info.memory->total;
    g.readings.add(view.used(), total, now);
    if (view.reread_used) g.readings.add(*view.reread_used, total, now);
    if (!judge && view.unexplained == Unexplained::releasing) g.readings.last_fall = now;
    view.falling = falling_at(g.readings.last_fall, now);
    // Holders the driver lists here (computes_here): only their exits start a release.
    // A client with the node open and no entry (persistenced, DCGM, nvidia-smi, a
    // monitor) holds no memory: its comings and goings restart nothing (W4-04).
    std::map<int, std::uint64_t> users;
    for (const auto& gh : view.holders)
      if (computes_here(gh)) users[gh.holder.id.pid] = gh.holder.pinned_host_bytes;
    std::uint64_t gone_pinned = 0;
    bool gone = false;
    for (const auto& [pid, pinned] : g.users)
      if (!users.contains(pid)) {
        gone = true;
        gone_pinned += pinned;
        g.gone.insert(pid);
      }
    g.users = std::move(users);
    if (gone) {
      g.facts.last_exit = now;
      g.facts.pinned_bytes = g.facts.pinned_bytes.value_or(0) + gone_pinned;
      g.unlisted_at.reset();
    }
    if (g.facts.last_exit && !g.unlisted_at &&
        std::none_of(view.info.processes.begin(), view.info.processes.end(),
                     [&](const gpu::GpuProcess& p) { return g.gone.contains(static_cast<int>(p.pid)); }))
      g.unlisted_at = now;
    // Memory NVML gives no process list for is judged while it falls: a release.
    const bool judged_unknown = judge && view.unexplained == Unexplained::unknown && view.falling;
    if (!no_process_class(view.unexplained) && !judged_unknown) {
      // Nothing unexplained (or held by what this look cannot see): any release is over.
      if (view.unexplained == Unexplained::none) {
        if (judge && sightings_) sightings_->erase(view.info.uuid);
        if (g.facts.last_exit && g.unlisted_at)
          completed_.push_back({seconds(*g.unlisted_at - *g.facts.last_exit),
                                seconds(now - *g.unlisted_at)});
        g.facts = {};
        g.gone.clear();
        g.unlisted_at.reset();
      }
      continue;
    }
    const bool fresh = !g.facts.watched_since;
    if (fresh) {
      g.facts.watched_since = now;
      // Another looker (the agent) watched it flat past a budget: its watch counts, so
      // the looks that follow this one do not start the budget over.
      if (!judge && view.unexplained == Unexplained::driver_held)
        g.facts.watched_since = now - budget_.for_pinned(std::nullopt);
    }
    g.facts.last_fall = g.readings.last_fall;
    if (!judge) continue;
    if (sightings_) remember_sighting(view, g, now, fresh);
    const ReleaseJudgement j = judge_release(g.facts, now, budget_);
    std::optional<std::pair<std::uint64_t, std::uint64_t>> fall;
    if (j.falling && g.readings.fell_from > 0)  // 0: the fall was another looker's word
      fall = std::pair{g.readings.fell_from, g.readings.fell_to};
    view.unexplained_detail = detail_of(view, g.facts, j, fall);
    view.unexplained = j.verdict == ReleaseVerdict::releasing     ? Unexplained::releasing
                       : j.verdict == ReleaseVerdict::driver_held ? Unexplained::driver_held
                                                                  : Unexplained::no_holder;
  }
  if (sightings_) (void)sightings_->save();  // a read-only state directory only costs the records
}

void ReleaseTracker::remember_sighting(const GpuView& view, Gpu& g, util::Clock::time_point now,
                                       bool fresh) {
  const std::string& uuid = view.info.uuid;
  const Sighting* earlier = sightings_->get(uuid);
  const std::uint64_t bytes = view.unattributed_bytes;
  // Memory that grew past the record is not the memory it saw: a new stretch.
  const bool same = earlier && bytes <= earlier->bytes + freed_tolerance(view.info.memory->total);
  if (fresh && same && earlier->first_seen < now) {
    g.facts.watched_since = earlier->first_seen;
    g.facts.sighted_earlier = true;
  }
  Sighting s{bytes, *g.facts.watched_since};
  if (same) s.bytes = std::min(bytes, earlier->bytes);
  sightings_->put(uuid, s);
}

const ReleaseFacts* ReleaseTracker::facts(const std::string& key) const {
  auto it = gpus_.find(key);
  return it == gpus_.end() ? nullptr : &it->second.facts;
}

}  // namespace gpureap::inventory
