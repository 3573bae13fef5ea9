#pragma once
// Fakes for the reclaim engine's unit tests (header only, like
// gpu/fake_gpu_source.h): a clock whose time moves only when someone waits on it
// and that runs scheduled events as it passes them (EventClock), and scripted
// processes behind the ProcessControl seam (FakeProcessControl): one that exits
// some time after SIGTERM, one that ignores SIGTERM, one that survives SIGKILL,
// one already gone, one whose pid was reused, one we may not signal. Never blocks.

#include <algorithm>
#include <csignal>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "reclaim/process_control.h"
#include "util/clock.h"

namespace gpureap::reclaim {

/// A fake monotonic clock with a timeline: sleep_until(t) moves time to t,
/// running every event scheduled at or before t, in time order, at its time.
/// Everything the engine observes changes only at these points, so a test is
/// deterministic and takes no real time.
class EventClock final : public util::Clock {
 public:
  explicit EventClock(time_point start = time_point{} + std::chrono::hours(1)) : now_(start) {}
  time_point now() const override { return now_; }
  void sleep_until(time_point t) override {
    ++sleeps;
    while (!events_.empty() && events_.begin()->first.first <= t) {
      auto node = events_.extract(events_.begin());
      if (node.key().first > now_) now_ = node.key().first;
      node.mapped()();
    }
    if (t > now_) now_ = t;
  }
  /// Runs `fn` when time reaches `t` (at once on the next wait when `t` has passed).
  void at(time_point t, std::function<void()> fn) {
    events_.emplace(std::pair{t, seq_++}, std::move(fn));
  }
  void after(duration d, std::function<void()> fn) { at(now_ + d, std::move(fn)); }
  /// The time of the next event, if any.
  std::optional<time_point> next_event() const {
    if (events_.empty()) return std::nullopt;
    return events_.begin()->first.first;
  }
  int sleeps = 0;

 private:
  time_point now_;
  std::uint64_t seq_ = 0;  // events at the same time run in the order scheduled
  std::map<std::pair<time_point, std::uint64_t>, std::function<void()>> events_;
};

/// How a scripted process behaves.
struct FakeProcessScript {
  /// Exits this long after SIGTERM; nullopt: ignores SIGTERM.
  std::optional<std::chrono::milliseconds> exits_after_term = std::chrono::milliseconds(100);
  /// Exits this long after SIGKILL; nullopt: never (stuck in the driver, state D).
  std::optional<std::chrono::milliseconds> exits_after_kill = std::chrono::milliseconds(10);
  /// Opening it fails so: gone (exited before), reused (another process has the pid),
  /// no_permission.
  std::optional<proc::OpenError> open_error;
  /// Called once, when it exits (the test's world drops its /proc entry and memory).
  std::function<void()> on_exit;
  /// Inside its exit (the kernel's PF_EXITING) this long before it is gone: from then on
  /// `exiting()` is true, as for a process whose exit tears down a large address space
  /// after its GPU memory is released. nullopt: exiting only once gone.
  std::optional<std::chrono::milliseconds> exiting_for;
};

class FakeProcessControl final : public ProcessControl {
 public:
  explicit FakeProcessControl(EventClock& clock) : clock_(clock) {}

  /// Adds (or replaces) the script of process `id`. An unknown process opens as gone.
  void script(const proc::ProcessId& id, FakeProcessScript s) {
    auto& p = processes_[id];
    p = std::make_shared<State>();
    p->script = std::move(s);
  }

  /// The signals process `id` received, in order.
  std::vector<int> signals_of(const proc::ProcessId& id) const {
    auto it = processes_.find(id);
    return it == processes_.end() ? std::vector<int>{} : it->second->signals;
  }
  bool exited(const proc::ProcessId& id) const {
    auto it = processes_.find(id);
    return it == processes_.end() || it->second->exited;
  }
  /// Ends process `id` now (as if it exited by itself).
  void exit_now(const proc::ProcessId& id) {
    if (auto it = processes_.find(id); it != processes_.end()) finish(*it->second);
  }
  int opens = 0;

  std::expected<ProcessPtr, proc::OpenFailure> open(const Target& target, bool) override {
    const proc::ProcessId& id = target.id;
    ++opens;
    auto it = processes_.find(id);
    if (it == processes_.end() || it->second->exited)
      return std::unexpected(proc::OpenFailure{proc::OpenError::gone, "no such process", ESRCH});
    if (auto e = it->second->script.open_error) {
      std::string what = *e == proc::OpenError::no_permission ? "not permitted"
                         : *e == proc::OpenError::reused      ? "pid reused"
                                                              : "no such process";
      return std::unexpected(proc::OpenFailure{*e, what, 0});
    }
    return std::make_unique<Process>(*this, id, it->second);
  }

  std::vector<std::size_t> wait_for_exit(std::span<ControlledProcess* const> live,
                                         util::Clock::time_point deadline) override {
    // Time passes up to the deadline; exits (and anything else scheduled) happen on the way.
    while (clock_.now() < deadline && any_alive(live)) {
      auto next = clock_.next_event();
      clock_.sleep_until(next && *next < deadline ? *next : deadline);
    }
    std::vector<std::size_t> alive;
    for (std::size_t i = 0; i < live.size(); ++i)
      if (!live[i]->has_exited()) alive.push_back(i);
    return alive;
  }

  /// The fake has no cgroups: every target is left to its handle.
  CgroupKills kill_whole_cgroups(std::span<ControlledProcess* const>,
                                 std::span<ControlledProcess* const>) override {
    return {};
  }
  /// Nor a run cgroup: the sweep succeeds and ends nothing.
  CgroupSweep sweep_cgroup(const std::string&, std::chrono::steady_clock::time_point) override {
    return {};
  }

 private:
  struct State {
    FakeProcessScript script;
    std::vector<int> signals;
    bool exited = false;
    bool exit_scheduled = false;
    util::Clock::time_point exit_at{};
  };

  class Process final : public ControlledProcess {
   public:
    Process(FakeProcessControl& owner, proc::ProcessId id, std::shared_ptr<State> state)
        : owner_(owner), id_(id), state_(std::move(state)) {}
    const proc::ProcessId& id() const override { return id_; }
    Result<void> signal(int sig) override {
      if (state_->exited) return fail("process exited", ESRCH);
      state_->signals.push_back(sig);
      if (sig == SIGTERM && state_->script.exits_after_term)
        owner_.schedule_exit(state_, *state_->script.exits_after_term);
      if (sig == SIGKILL && state_->script.exits_after_kill)
        owner_.schedule_exit(state_, *state_->script.exits_after_kill);
      return {};
    }
    bool has_exited() const override { return state_->exited; }
    bool stopped() const override { return false; }
    bool exiting() const override {
      return state_->exited || (state_->exit_scheduled && state_->script.exiting_for &&
                                owner_.clock_.now() >= state_->exit_at - *state_->script.exiting_for);
    }

   private:
    FakeProcessControl& owner_;
    proc::ProcessId id_;
    std::shared_ptr<State> state_;
  };

  static bool any_alive(std::span<ControlledProcess* const> live) {
    return std::any_of(live.begin(), live.end(),
                       [](const ControlledProcess* p) { return !p->has_exited(); });
  }

  void schedule_exit(const std::shared_ptr<State>& s, std::chrono::milliseconds after) {
    auto when = clock_.now() + after;
    if (s->exit_scheduled && s->exit_at <= when) return;
    s->exit_scheduled = true;
    s->exit_at = when;
    clock_.at(when, [this, s, when] {
      if (!s->exited && s->exit_at == when) finish(*s);
    });
  }

  void finish(State& s) {
    if (s.exited) return;
    s.exited = true;
    if (s.script.on_exit) s.script.on_exit();
  }

  EventClock& clock_;
  std::map<proc::ProcessId, std::shared_ptr<State>> processes_;
  friend class Process;
};

}  // namespace gpureap::reclaim
