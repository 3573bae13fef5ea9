#include "reclaim/escalation.h"

#include <fmt/format.h>

#include <algorithm>
#include <csignal>

#include "util/signal_name.h"

namespace gpureap::reclaim {

int signal_number(Signal s) {
  switch (s) {
    case Signal::sigterm:
      return SIGTERM;
    case Signal::sigkill:
      return SIGKILL;
    case Signal::none:
      break;
  }
  return 0;
}

std::string signal_word(Signal s) {
  return s == Signal::none ? "none" : signal_name(signal_number(s));
}

namespace {

// Exits are waited for in slices of at most this long, so Ctrl-C is noticed promptly.
constexpr std::chrono::milliseconds kInterruptSlice{50};
// With EscalationEnv::released, how often the targets still alive are looked at: whether
// the kernel says they are exiting, then whether what they held is back.
constexpr std::chrono::milliseconds kReleasedSlice{5};

struct Tracked {
  ProcessPtr process;
  std::string comm;
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  std::size_t action = kNone;  // index of the latest action for this target
  bool exited = false;  // exited, or exiting with what it held released: waited for no more
  bool dying = false;   // the latter (Outcome::exiting): handed to the caller
};

Outcome open_outcome(proc::OpenError e) {
  switch (e) {
    case proc::OpenError::gone:
      return Outcome::already_gone;
    case proc::OpenError::reused:
      return Outcome::pid_reused;
    case proc::OpenError::no_permission:
      return Outcome::permission_denied;
    case proc::OpenError::unsupported:
      return Outcome::no_pidfd_support;
    case proc::OpenError::other:
      break;
  }
  return Outcome::not_signalled;
}

class Escalation {
 public:
  Escalation(const EscalationOptions& options, const EscalationEnv& env)
      : options_(options), env_(env) {}

  double now() const { return std::chrono::duration<double>(env_.clock.now() - env_.t0).count(); }
  bool interrupted() const { return env_.interrupted && env_.interrupted->load(); }

  // Opens a verified handle for every target; the ones that are gone or reused
  // are recorded and never signalled.
  void open_all(std::span<const Target> targets) {
    bool first = true;
    for (const auto& t : targets) {
      auto process = env_.control.open(t, first);
      first = false;
      if (!process) {
        Action a{
            t.id,   t.comm, Signal::none, "", now(), std::nullopt, open_outcome(process.error().kind),
            "",     std::nullopt};
        if (a.outcome == Outcome::not_signalled) a.detail = process.error().message;
        result_.actions.push_back(std::move(a));
        continue;
      }
      tracked_.push_back(Tracked{std::move(*process), t.comm, Tracked::kNone, false});
    }
  }

  void send_all(int sig, Signal name) {
    for (auto& t : tracked_) {
      if (t.exited) continue;
      if (sig == SIGTERM && t.process->stopped())
        (void)t.process->signal(SIGCONT);  // a stopped process cannot act on SIGTERM
      record_signal(t, name, "pidfd", t.process->signal(sig));
    }
  }

  void kill_whole_cgroups() {
    if (!options_.use_cgroup_kill) return;
    std::vector<Tracked*> live_tracked;
    std::vector<ControlledProcess*> live, planned;
    for (auto& t : tracked_) {
      planned.push_back(t.process.get());
      if (t.exited) continue;
      live_tracked.push_back(&t);
      live.push_back(t.process.get());
    }
    CgroupKills kills = env_.control.kill_whole_cgroups(live, planned);
    for (const auto& k : kills.killed)
      for (std::size_t i : k.members)
        record_signal(*live_tracked[i], Signal::sigkill, "cgroup.kill " + k.path, k.sent);
    result_.notes.insert(result_.notes.end(), kills.notes.begin(), kills.notes.end());
  }

  void kill_rest() {
    for (auto& t : tracked_)
      if (!t.exited &&
          (t.action == Tracked::kNone || result_.actions[t.action].signal != Signal::sigkill))
        record_signal(t, Signal::sigkill, "pidfd", t.process->signal(SIGKILL));
  }

  // Waits for the exits, event-driven (ProcessControl::wait_for_exit), in slices
  // so that Ctrl-C is noticed. Returns true when all have exited.
  bool wait_exits(util::Clock::time_point deadline) {
    for (;;) {
      std::vector<Tracked*> who;
      std::vector<ControlledProcess*> live;
      for (auto& t : tracked_)
        if (!t.exited) {
          who.push_back(&t);
          live.push_back(t.process.get());
        }
      if (who.empty()) return true;
      if (interrupted()) {
        result_.interrupted = true;
        return false;
      }
      if (env_.clock.now() >= deadline) return false;
      auto slice_end = std::min(deadline, env_.clock.now() + kInterruptSlice);
      if (env_.released) slice_end = std::min(slice_end, env_.clock.now() + kReleasedSlice);
      auto alive = env_.control.wait_for_exit(live, slice_end);
      std::size_t next = 0;  // `alive` is ascending
      std::vector<Tracked*> still;
      for (std::size_t i = 0; i < who.size(); ++i) {
        if (next < alive.size() && alive[next] == i) {
          ++next;
          still.push_back(who[i]);
          continue;
        }
        mark_exited(*who[i]);
      }
      if (released_while_exiting(still)) return true;
    }
  }

  // The holders still alive are dying (the kernel's word: every thread in its exit) and
  // what they held is back (the caller's reading): their exit is waited for no more. A
  // torch worker's GPU memory is back some 30 ms before its exit ends (H100; the
  // address space is torn down after), which free would otherwise wait out.
  bool released_while_exiting(std::vector<Tracked*> still) {
    if (!env_.released) return false;
    // One that has exited since the wait's answer is an exit, never "exiting".
    std::erase_if(still, [&](Tracked* t) {
      if (!t->process->has_exited()) return false;
      mark_exited(*t);
      return true;
    });
    if (still.empty()) return false;
    if (!std::all_of(still.begin(), still.end(),
                     [](const Tracked* t) { return t->process->exiting(); }))
      return false;
    if (!env_.released()) return false;
    for (Tracked* t : still) mark_exiting(*t);
    return true;
  }

  EscalationResult finish() {
    for (auto& t : tracked_) {
      if (t.dying) result_.exiting.push_back(std::move(t.process));
      if (t.exited) continue;
      result_.survivors.push_back(t.process->id());
      if (t.action == Tracked::kNone) continue;
      auto& a = result_.actions[t.action];
      if (a.outcome == Outcome::pending) a.outcome = Outcome::still_running;
    }
    return std::move(result_);
  }

  bool any_alive() const {
    return std::any_of(tracked_.begin(), tracked_.end(),
                       [](const Tracked& t) { return !t.exited; });
  }
  void mark_already_exited() {
    for (auto& t : tracked_)
      if (!t.exited && t.process->has_exited()) mark_exited(t);
  }

 private:
  void record_signal(Tracked& t, Signal name, const std::string& via, const Result<void>& sent) {
    if (t.action < result_.actions.size() &&
        result_.actions[t.action].outcome == Outcome::pending &&
        result_.actions[t.action].id == t.process->id())
      result_.actions[t.action].outcome = Outcome::still_running_after_grace;
    Action a{t.process->id(), t.comm, name, via, now(), std::nullopt, Outcome::pending, "",
             std::nullopt};
    if (!sent) {
      if (t.process->has_exited()) {
        a.outcome = Outcome::already_exited;
        t.exited = true;
        a.exited_at = now();
      } else {
        a.outcome = Outcome::signal_failed;
        a.detail = sent.error().message;
      }
    }
    result_.actions.push_back(std::move(a));
    t.action = result_.actions.size() - 1;
  }

  void mark_exited(Tracked& t) {
    t.exited = true;
    if (t.action < result_.actions.size() && result_.actions[t.action].id == t.process->id()) {
      auto& a = result_.actions[t.action];
      if (!a.exited_at) a.exited_at = now();
      a.outcome = Outcome::exited;
      a.detail.clear();
    }
  }

  void mark_exiting(Tracked& t) {
    t.exited = true;
    t.dying = true;
    if (t.action < result_.actions.size() && result_.actions[t.action].id == t.process->id()) {
      auto& a = result_.actions[t.action];
      a.exiting_at = now();
      a.outcome = Outcome::exiting;
      a.detail.clear();
    }
  }

  const EscalationOptions& options_;
  const EscalationEnv& env_;
  std::vector<Tracked> tracked_;
  EscalationResult result_;
};

}  // namespace

EscalationResult terminate(std::span<const Target> targets, const EscalationOptions& options,
                           const EscalationEnv& env) {
  Escalation engine(options, env);
  engine.open_all(targets);

  // 1. SIGTERM (with SIGCONT for stopped processes) to all at once, then wait
  //    for the exits until they happen or the grace period ends.
  if (options.grace.count() > 0) {
    engine.send_all(SIGTERM, Signal::sigterm);
    if (engine.wait_exits(env.clock.now() + options.grace)) return engine.finish();
    if (engine.interrupted()) return engine.finish();
  }
  // 2. SIGKILL the rest: whole cgroups atomically where possible, then one by one.
  engine.mark_already_exited();
  if (engine.any_alive()) {
    engine.kill_whole_cgroups();
    engine.kill_rest();
    engine.wait_exits(env.clock.now() + options.kill_wait);
  }
  return engine.finish();
}

EscalationResult terminate(std::vector<Target> targets, const EscalationOptions& options,
                           std::chrono::steady_clock::time_point t0, ProcessControl& control,
                           const std::string& proc_root) {
  for (auto& t : targets)
    if (t.comm.empty()) t.comm = read_comm(t.id.pid, proc_root);
  return terminate(targets, options, EscalationEnv{control, util::system_clock(), nullptr, t0});
}

}  // namespace gpureap::reclaim
