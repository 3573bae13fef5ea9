#include "agent/agent.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "agent/answers.h"
#include "agent/descriptors.h"
#include "agent/exporter.h"
#include "agent/gate.h"
#include "agent/gate_modes.h"
#include "agent/reaper.h"
#include "agent/watcher.h"
#include "agent/witness_keeper.h"
#include "inventory/events.h"
#include "reclaim/free_lock.h"
#include "report/watch_service.h"
#include "util/pattern.h"
#include "util/poll.h"

namespace gpureap::agent {

namespace {
/// poll(2)'s timeout until `at`, wall clock seconds (the reaper's orphan clock).
int wall_timeout_ms(double at) {
  using namespace std::chrono;
  return poll_timeout_ms(steady_clock::now() +
                         duration_cast<steady_clock::duration>(duration<double>(at - wall_now())));
}

/// The reaper's policy from the options; fails when --keep does not compile.
Result<ReapPolicy> reap_policy(const AgentOptions& options) {
  ReapPolicy policy{options.reap_orphans_after, nullptr, options.reap_dry_run};
  if (options.keep_regex.empty()) return policy;
  auto pattern = Pattern::compile(options.keep_regex);
  if (!pattern) return fail("--keep: " + pattern.error().message);
  policy.keep = std::make_shared<const Pattern>(std::move(*pattern));
  return policy;
}

/// The loop: one thread owns the Watcher and everything it knows, and hands each look
/// to its owners in order (events and counters, the gate, the reaper, the witness
/// keeper, the textfile). The answers ask it for looks (AnswerSource); the gate and the
/// reaper act on their own threads and never hold it up.
class Agent final : public AnswerSource {
 public:
  Agent(inventory::Node& node, AgentOptions options, const EventSink& sink,
        const AgentHooks& hooks, ReapPolicy policy)
      : node_(node),
        options_(std::move(options)),
        hooks_(hooks),
        watcher_(node, options_.watch),
        exporter_(options_, sink),
        answers_(node, *this),
        witnesses_(options_.state_dir, options_.problems),
        reaper_(std::move(policy),
                node_reap_act(options_.reap_node, options_.audit, options_.state_dir)) {}

  Result<void> start() {
    auto lock = reclaim::FreeLock::acquire(options_.state_dir, "agent.lock", "gpureap watch",
                                           "one agent per node is enough: stop it first, or "
                                           "ask it (gpureap status answers from it)");
    if (!lock) return std::unexpected(lock.error());
    lock_.emplace(std::move(*lock));
    if (auto opened = answers_.open(options_); !opened) return opened;
    // What an earlier agent saw die, for the processes still the same (W3-07).
    watcher_.remember_dead_parents(witnesses_.load(node_.proc_root()));
    watcher_.refresh(true);  // announced by loop(), after the "started" line
    if (!options_.gate.empty()) {
      auto actions = make_node_actions(options_.gate, options_.gate_dry_run);
      if (!actions) return std::unexpected(actions.error());
      gate_ = std::make_unique<Gate>(std::move(*actions), hooks_.gate);
      exporter_.gate_modes(options_.gate);
    }
    record_history();
    if (options_.textfile_dir)
      if (auto written = exporter_.start_textfile(textfile_text()); !written) return written;
    return {};
  }

  std::optional<std::string> listen_address() const { return answers_.listen_address(); }
  std::size_t gpus() const { return watcher_.inventory().gpus.size(); }

  void loop(const AgentSignals& signals) {
    publish();  // what the node looks like at the start: an orphan already there is news
    if (options_.notifier) options_.notifier->ready(service_status());
    auto next_tick = node_.clock().now() + options_.watch.tick;
    auto next_watchdog = node_.clock().now();
    while (!signals.stop.load()) {
      if (signals.reload.exchange(false)) apply_reload();
      if (signals.yield_source.exchange(false)) yield_nvml(kDefaultSourceYield, "SIGUSR1");
      if (signals.resume_source.exchange(false) && yielded_until_) resume_nvml("SIGUSR2", "");
      if (yielded_until_ && node_.clock().now() >= *yielded_until_)
        resume_nvml("the yield's deadline", "");
      // The watchdog is fed from the loop itself: a loop that stops turning (a wait
      // that never ends) is what systemd should restart.
      if (auto every = watchdog_interval(); every && node_.clock().now() >= next_watchdog) {
        options_.notifier->watchdog();
        next_watchdog = node_.clock().now() + *every;
      }

      std::vector<pollfd> fds{{reaper_.ready_fd(), POLLIN, 0}};
      const std::size_t first_answer = fds.size();
      for (const pollfd& p : answers_.poll_fds()) fds.push_back(p);
      const std::size_t first_watched = fds.size();
      // While NVML is let go, a death is read when it is taken up again: rebuilding
      // the inventory would ask NVML for its figures.
      if (!yielded_until_)
        for (int fd : watcher_.watch_fds()) fds.push_back({fd, POLLIN, 0});
      int timeout = node_.clock().now() >= next_tick ? 0 : poll_timeout_ms(next_tick);
      // A control client past its deadline is dropped on time, not at the next tick.
      if (auto due = answers_.next_deadline()) timeout = std::min(timeout, poll_timeout_ms(*due));
      if (watchdog_interval()) timeout = std::min(timeout, poll_timeout_ms(next_watchdog));
      if (yielded_until_) timeout = std::min(timeout, poll_timeout_ms(*yielded_until_));
      // An orphan announced between ticks (a death the kernel's events showed) is reaped
      // when it falls due, not at the next tick.
      const std::optional<double> reap_at = reaper_.next_due(watcher_.inventory());
      if (reap_at) timeout = std::min(timeout, wall_timeout_ms(*reap_at));
      int n = ::poll(fds.data(), fds.size(), timeout);
      if (signals.stop.load()) break;
      answers_.serve(n > 0 && fds[first_answer].revents);
      if (n > 0) {
        if (fds[0].revents) take_reaps();
        bool died = false;
        for (std::size_t i = first_watched; i < fds.size(); ++i)
          if (fds[i].revents) {
            watcher_.on_ready(fds[i].fd);
            died = true;
          }
        if (died) publish();  // an orphan is announced the moment its parent dies
      }
      if (node_.clock().now() >= next_tick && !yielded_until_) {
        look_now();
        next_tick = node_.clock().now() + options_.watch.tick;
      } else if (reap_at && wall_now() >= *reap_at && !yielded_until_) {
        reaper_.after_look(watcher_.inventory(), wall_now(), watcher_.dead_parents());
      }
    }
    if (options_.notifier) options_.notifier->stopping();
    if (hooks_.stopping) hooks_.stopping();
    answers_.close();
  }

  // AnswerSource: what the answers ask of the loop.
  void look_now() override {
    watcher_.refresh();
    last_look_ = node_.clock().now();
    record_history();
    publish();
  }
  std::optional<util::Clock::time_point> last_look() const override { return last_look_; }
  const inventory::Inventory& inventory() const override { return watcher_.inventory(); }
  bool nvml_yielded() const override { return yielded_until_.has_value(); }
  bool reaping() const override { return reaper_.busy(); }
  std::string metrics(std::optional<double> scrape_seconds) override {
    if (scrape_seconds) exporter_.scrape_took(*scrape_seconds);
    return exporter_.metrics_text(watcher_, reaper_.busy(), true);
  }

  /// /healthz: degraded while the agent's last look failed or NVML is down; a note
  /// (not degraded) while NVML is let go, or processes are watched by the tick.
  report::AgentHealth health() const override {
    report::AgentHealth health;
    health.pid = ::getpid();
    const auto& limits = watcher_.limits();
    if (limits.look_failed) health.degraded.push_back(*limits.look_failed);
    if (yielded_until_)
      health.notes.push_back("NVML let go for a GPU reset: answers are the last look's");
    else if (inventory::source_down(watcher_.inventory()))
      health.degraded.push_back(inventory::source_down_text(watcher_.inventory()));
    if (limits.unwatched > 0)
      health.notes.push_back(std::to_string(limits.unwatched) +
                             " processes watched at each tick, not by pidfd (the agent's "
                             "file descriptor limit)");
    return health;
  }

  /// Lets go of NVML (the worker's session closed: nvmlShutdown, the worker gone)
  /// for `how_long`, so that a GPU reset or a MIG change finds no client; a second
  /// request moves the deadline. /proc stays watched.
  void yield_nvml(std::chrono::milliseconds how_long, const std::string& by) override {
    node_.gpus().disconnect();
    yielded_until_ = node_.clock().now() + how_long;
    const double until = wall_now() + std::chrono::duration<double>(how_long).count();
    if (hooks_.nvml) hooks_.nvml(SourceYield{true, by, until, {}});
    if (options_.notifier) options_.notifier->status(service_status());
  }

  /// Takes NVML up again: a full look at once, announced like any tick (memory a
  /// reset freed shows as freed), after the line that says why.
  void resume_nvml(const std::string& by, const std::string& note) override {
    yielded_until_.reset();
    if (hooks_.nvml) hooks_.nvml(SourceYield{false, by, 0, note});
    full_look();
  }

 private:
  std::optional<std::chrono::milliseconds> watchdog_interval() const {
    return options_.notifier ? options_.notifier->watchdog_interval() : std::nullopt;
  }

  std::string service_status() const {
    return report::watch_service_status(watcher_.inventory(), exporter_.last_event(),
                                        yielded_until_.has_value());
  }

  /// A full look (every process scanned), published: after NVML is taken up again and
  /// after a reap acted.
  void full_look() {
    watcher_.refresh(true);
    last_look_ = node_.clock().now();
    record_history();
    publish();
  }

  /// Each look's figures into the history `top` seeds its sparklines from. At most one
  /// reading per 0.9 tick: a look a question caused between two ticks refreshes the
  /// newest reading (0.9, not 1: two ticks may land a hair less than a tick apart).
  void record_history() {
    answers_.record(watcher_.inventory(), wall_now(),
                    0.9 * std::chrono::duration<double>(options_.watch.tick).count());
  }

  std::string textfile_text() { return exporter_.metrics_text(watcher_, reaper_.busy()); }

  /// Hands the look to each owner in order: what changed is announced and counted, the
  /// gate judges it, the reaper's clock runs (and a due reap starts on its thread), what
  /// the agent saw die is kept, the textfile and systemd's STATUS= follow.
  void publish() {
    const auto& inv = watcher_.inventory();
    for (auto& event : detector_.observe(inv, wall_now(), watcher_.dead_parents()))
      exporter_.emit(event);
    exporter_.observe_releases(node_.releases().take_completed());
    if (gate_) {
      gate_->after_look(inv);
      exporter_.observe_gate(gate_->take_done(), gate_->take_errors());
    }
    reaper_.after_look(inv, wall_now(), watcher_.dead_parents());
    witnesses_.keep(watcher_.dead_parents());
    if (options_.textfile_dir) exporter_.update_textfile(textfile_text());
    if (options_.notifier) options_.notifier->status(service_status());
  }

  /// The reaps the reaper's thread finished: their events said, their figures counted;
  /// after one that acted, a full look (what it freed shows as freed).
  void take_reaps() {
    bool acted = false;
    for (const ReapDone& done : reaper_.take_done()) {
      for (const auto& event : done.events) exporter_.emit(event);
      if (!done.freed) continue;
      exporter_.observe_reap(*done.freed, done.seconds, wall_now());
      acted = true;
    }
    if (acted) full_look();
  }

  void apply_reload() {
    if (!hooks_.reload_options) return;
    if (options_.notifier) options_.notifier->reloading();
    auto fresh = hooks_.reload_options();
    if (fresh) {  // else the CLI said why; the old options stay
      auto changes = option_changes(options_, *fresh);
      apply_reloadable(options_, *fresh);
      if (auto policy = reap_policy(options_)) reaper_.set_policy(std::move(*policy));
      if (hooks_.reloaded) hooks_.reloaded(changes);
    }
    if (options_.notifier) options_.notifier->ready(service_status());
  }

  inventory::Node& node_;
  AgentOptions options_;
  const AgentHooks& hooks_;
  // agent.lock, one agent per node: declared first of what the agent owns, so it is let
  // go last (after the reaper's thread has finished its reap).
  std::optional<reclaim::FreeLock> lock_;
  Watcher watcher_;
  inventory::EventDetector detector_;
  Exporter exporter_;        // events, counters, the textfile
  Answers answers_;          // the control socket and HTTP
  WitnessKeeper witnesses_;  // what the agent saw die, on disk
  Reaper reaper_;            // --reap-orphans-after, on its own thread
  std::unique_ptr<Gate> gate_;  // --gate: closes the node on a leak, on its own thread
  std::optional<util::Clock::time_point> yielded_until_;  // NVML let go until then
  std::optional<util::Clock::time_point> last_look_;      // for the scrape rate
};

}  // namespace

Result<void> run_agent(inventory::Node& node, AgentOptions options, const EventSink& sink,
                       const AgentSignals& signals, const AgentHooks& hooks) {
  // Reaping can be switched on by a reload: the audit sink is there from the start.
  if (!options.audit) return fail("no audit sink: the reaper's signals could not be recorded");
  auto policy = reap_policy(options);
  if (!policy) return std::unexpected(policy.error());
  // Every local user can start processes that hold a GPU's node, each one a pidfd of
  // the agent's: its soft limit goes up to the hard one, and the pidfds stay within
  // a budget under it (W3-04).
  const DescriptorLimit limit = raise_descriptor_limit();
  if (limit.soft > 0) options.watch.max_pidfds = pidfd_budget(limit.soft);
  if (limit.soft > 0 && limit.soft < 4096 && options.problems)
    options.problems("the file descriptor limit is " + std::to_string(limit.soft) +
                     " (hard): at most " + std::to_string(options.watch.max_pidfds) +
                     " processes are watched by pidfd, the others at each tick; raise it "
                     "(LimitNOFILE= in the unit)");
  Agent agent(node, std::move(options), sink, hooks, std::move(*policy));
  if (auto ok = agent.start(); !ok) return ok;
  if (hooks.started) hooks.started(agent.listen_address(), agent.gpus());
  agent.loop(signals);
  return {};
}

}  // namespace gpureap::agent
