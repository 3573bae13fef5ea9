#include "agent/agent.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "agent/caller_view.h"
#include "agent/descriptors.h"
#include "agent/gate.h"
#include "agent/process_figures.h"
#include "agent/control_socket.h"
#include "agent/http_server.h"
#include "agent/reaper.h"
#include "agent/watcher.h"
#include "inventory/agent_client.h"
#include "inventory/gpu_history.h"
#include "inventory/history_wire.h"
#include "inventory/inventory_wire.h"
#include "inventory/witness_store.h"
#include "proc/lineage.h"
#include "reclaim/free_flow.h"
#include "reclaim/free_lock.h"
#include "reclaim/plan.h"
#include "reclaim/audited_control.h"
#include "reclaim/process_control.h"
#include "reclaim/reclaimer.h"
#include "inventory/events.h"
#include "report/watch_service.h"
#include "util/pattern.h"
#include "util/poll.h"
#include "util/plural.h"

namespace gpureap::agent {

namespace {

/// Questions from other threads (the HTTP server's) for the loop thread, which
/// alone touches the Watcher: each waits on its promise, the loop wakes on the
/// eventfd.
class RequestQueue {
 public:
  RequestQueue() : wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  int fd() const { return wake_.get(); }

  /// Runs `job` on the loop thread and returns its result; a stopped loop answers 503.
  HttpResponse call(std::function<HttpResponse()> job) {
    auto task = std::make_shared<std::packaged_task<HttpResponse()>>(std::move(job));
    auto result = task->get_future();
    {
      std::lock_guard lock(mutex_);
      if (closed_) return {503, "text/plain; charset=utf-8", "gpureap watch is stopping\n"};
      jobs_.push_back(task);
    }
    std::uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof one);
    if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready)
      return {503, "text/plain; charset=utf-8", "gpureap watch is busy (a free in progress)\n"};
    return result.get();
  }

  void run_pending() {
    std::uint64_t n = 0;
    (void)!::read(wake_.get(), &n, sizeof n);
    std::deque<std::shared_ptr<std::packaged_task<HttpResponse()>>> jobs;
    {
      std::lock_guard lock(mutex_);
      jobs.swap(jobs_);
    }
    for (auto& job : jobs) (*job)();
  }

  void close() {
    std::deque<std::shared_ptr<std::packaged_task<HttpResponse()>>> jobs;
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
      jobs.swap(jobs_);
    }
    for (auto& job : jobs) (*job)();  // answer whoever is still waiting
  }

 private:
  UniqueFd wake_;
  std::mutex mutex_;
  bool closed_ = false;
  std::deque<std::shared_ptr<std::packaged_task<HttpResponse()>>> jobs_;
};

/// A scrape this soon after the last refresh is answered from it (docs/metrics.md).
constexpr std::chrono::seconds kScrapeRefreshInterval{1};
/// The looks one uid other than root causes with status questions in a second; past
/// them, its questions are answered from the last look (W3-11): a loop of questions
/// costs the agent this many looks a second, whatever its rate. Questions that
/// arrive together share one look, whoever asks.
constexpr unsigned kSocketRefreshesPerUid = 4;

const char* kLandingPage =
    "<html><head><title>gpureap watch</title></head><body>\n"
    "<h1>gpureap watch</h1>\n"
    "<p>GPU memory held by stray processes on this node: who holds it, why, what now.</p>\n"
    "<p><a href=\"/metrics\">Metrics</a></p>\n"
    "</body></html>\n";

class Agent {
 public:
  Agent(inventory::Node& node, AgentOptions options, const EventSink& sink,
        const AgentHooks& hooks)
      : node_(node),
        options_(std::move(options)),
        sink_(sink),
        hooks_(hooks),
        watcher_(node, options_.watch) {}

  Result<void> apply_keep() {
    keep_.reset();
    if (options_.keep_regex.empty()) return {};
    auto pattern = Pattern::compile(options_.keep_regex);
    if (!pattern) return fail("--keep: " + pattern.error().message);
    keep_ = std::move(*pattern);
    return {};
  }

  Result<void> start() {
    // Reaping can be switched on by a reload: the sink is there from the start.
    if (!options_.audit) return fail("no audit sink: the reaper's signals could not be recorded");
    if (auto kept = apply_keep(); !kept) return std::unexpected(kept.error());
    auto lock = reclaim::FreeLock::acquire(options_.state_dir, "agent.lock", "gpureap watch",
                                           "one agent per node is enough: stop it first, or "
                                           "ask it (gpureap status answers from it)");
    if (!lock) return std::unexpected(lock.error());
    lock_.emplace(std::move(*lock));
    auto control = ControlServer::listen(inventory::agent_socket_path(options_.state_dir),
                                         options_.socket_group);
    if (!control) return std::unexpected(control.error());
    control_.emplace(std::move(*control));
    if (options_.listen) {
      auto http = HttpServer::start(*options_.listen,
                                    [this](std::string_view path) { return serve_http(path); },
                                    options_.web);
      if (!http) return std::unexpected(http.error());
      http_.emplace(std::move(*http));
    }
    // What an earlier agent saw die, for the processes still the same (W3-07).
    watcher_.remember_dead_parents(inventory::load_witnesses(options_.state_dir, node_.proc_root()));
    watcher_.refresh(true);  // announced by loop(), after the "started" line
    if (!options_.gate.empty()) {
      auto actions = make_node_actions(options_.gate, options_.gate_dry_run);
      if (!actions) return std::unexpected(actions.error());
      gate_ = std::make_unique<Gate>(std::move(*actions), hooks_.gate);
      for (const auto& mode : options_.gate) {
        counters_.gate_seconds[mode];
        counters_.gate_errors[mode];
      }
    }
    record_history();
    if (options_.textfile_dir) {
      // A directory that cannot be written at start is a mistake to say now, not
      // an export that silently never happens (W2-07).
      std::string text = metrics_text();
      if (auto written = write_textfile(*options_.textfile_dir, text); !written)
        return std::unexpected(written.error());
      last_textfile_ = std::move(text);
    }
    return {};
  }

  /// The address the HTTP server really listens on (port 0 picks one).
  std::optional<std::string> listen_address() const {
    if (!http_ || !options_.listen) return std::nullopt;
    std::string host = *options_.listen;
    host = host.substr(0, host.rfind(':'));
    return host + ":" + std::to_string(http_->port());
  }
  std::size_t gpus() const { return watcher_.inventory().gpus.size(); }

  void loop(const AgentSignals& signals) {
    publish();  // what the node looks like at the start: an orphan already there is news
    if (options_.notifier) options_.notifier->ready(service_status());
    auto next_tick = node_.clock().now() + options_.watch.tick;
    auto next_watchdog = node_.clock().now();
    while (!signals.stop.load()) {
      if (signals.reload.exchange(false)) apply_reload();
      if (signals.yield_source.exchange(false)) yield_source(kDefaultSourceYield, "SIGUSR1");
      if (signals.resume_source.exchange(false) && yielded_until_) resume_source("SIGUSR2", "");
      if (yielded_until_ && node_.clock().now() >= *yielded_until_)
        resume_source("the yield's deadline", "");
      // The watchdog is fed from the loop itself: a loop that stops turning (a wait
      // that never ends) is what systemd should restart.
      if (auto every = watchdog_interval(); every && node_.clock().now() >= next_watchdog) {
        options_.notifier->watchdog();
        next_watchdog = node_.clock().now() + *every;
      }

      std::vector<pollfd> fds;
      fds.push_back({queue_.fd(), POLLIN, 0});
      for (const pollfd& p : control_->poll_fds()) fds.push_back(p);
      const std::size_t first_watched = fds.size();
      // While NVML is let go, a death is read when it is taken up again: rebuilding
      // the inventory would ask NVML for its figures.
      if (!yielded_until_)
        for (int fd : watcher_.watch_fds()) fds.push_back({fd, POLLIN, 0});
      auto now = node_.clock().now();
      int timeout = now >= next_tick ? 0 : poll_timeout_ms(next_tick);
      // A control client past its deadline is dropped on time, not at the next tick.
      if (auto due = control_->next_deadline()) timeout = std::min(timeout, poll_timeout_ms(*due));
      if (watchdog_interval()) timeout = std::min(timeout, poll_timeout_ms(next_watchdog));
      if (yielded_until_) timeout = std::min(timeout, poll_timeout_ms(*yielded_until_));
      int n = ::poll(fds.data(), fds.size(), timeout);
      if (signals.stop.load()) break;
      // Every client side by side, none waited for (W2-17); also drops the late ones.
      batch_refreshed_ = false;
      control_->serve(
          [this](const Peer& peer, const std::string& req) { return serve_control(peer, req); });
      if (n > 0) {
        if (fds[0].revents) queue_.run_pending();
        bool died = false;
        for (std::size_t i = first_watched; i < fds.size(); ++i)
          if (fds[i].revents) {
            watcher_.on_ready(fds[i].fd);
            died = true;
          }
        if (died) publish();  // an orphan is announced the moment its parent dies
      }
      if (node_.clock().now() >= next_tick && !yielded_until_) {
        refresh();
        publish();
        reap_due_orphans();
        next_tick = node_.clock().now() + options_.watch.tick;
      }
    }
    if (options_.notifier) options_.notifier->stopping();
    if (hooks_.stopping) hooks_.stopping();
    queue_.close();
  }

 private:
  std::optional<std::chrono::milliseconds> watchdog_interval() const {
    return options_.notifier ? options_.notifier->watchdog_interval() : std::nullopt;
  }

  std::string service_status() const {
    return report::watch_service_status(watcher_.inventory(),
                                        last_event_ ? &*last_event_ : nullptr,
                                        yielded_until_.has_value());
  }

  /// Lets go of NVML (the worker's session closed: nvmlShutdown, the worker gone)
  /// for `how_long`, so that a GPU reset or a MIG change finds no client; a second
  /// request moves the deadline. /proc stays watched.
  void yield_source(std::chrono::milliseconds how_long, const std::string& by) {
    node_.gpus().disconnect();
    yielded_until_ = node_.clock().now() + how_long;
    const double until = wall_now() + std::chrono::duration<double>(how_long).count();
    if (hooks_.nvml) hooks_.nvml(SourceYield{true, by, until, {}});
    if (options_.notifier) options_.notifier->status(service_status());
  }

  /// Takes NVML up again: a full look at once, announced like any tick (memory a
  /// reset freed shows as freed), after the line that says why.
  void resume_source(const std::string& by, const std::string& note) {
    yielded_until_.reset();
    if (hooks_.nvml) hooks_.nvml(SourceYield{false, by, 0, note});
    watcher_.refresh(true);
    last_refresh_ = node_.clock().now();
    record_history();
    publish();
  }
  /// A tick's look (Watcher::refresh), remembered for the scrape rate limit.
  void refresh() {
    watcher_.refresh();
    last_refresh_ = node_.clock().now();
    record_history();
  }

  /// Each look's figures into the history `top` seeds its sparklines from. At most one
  /// reading per 0.9 tick: a look a question caused between two ticks refreshes the
  /// newest reading (0.9, not 1: two ticks may land a hair less than a tick apart).
  void record_history() {
    history_.record(watcher_.inventory(), wall_now(),
                    0.9 * std::chrono::duration<double>(options_.watch.tick).count());
  }

  /// Announces what changed, updates the counters and the textfile.
  void publish() {
    const auto& inv = watcher_.inventory();
    for (auto& event : detector_.observe(inv, wall_now(), watcher_.dead_parents())) emit(event);
    // The releases the looks saw end (inventory/release_model.h), by phase.
    for (const auto& r : node_.releases().take_completed()) {
      counters_.release_seconds["exit_to_unlisted"].observe(r.exit_to_unlisted);
      counters_.release_seconds["unlisted_to_baseline"].observe(r.unlisted_to_baseline);
    }
    if (gate_) {
      gate_->after_look(inv);
      for (const auto& [mode, s] : gate_->take_done()) counters_.gate_seconds[mode].observe(s);
      for (const auto& [mode, n] : gate_->take_errors()) counters_.gate_errors[mode] += n;
    }
    track_orphans(inv);
    save_witnesses();
    if (options_.textfile_dir) update_textfile();
    if (options_.notifier) options_.notifier->status(service_status());
  }

  /// Keeps what the agent saw die in the state directory when it changed, so that a
  /// direct look and a restarted agent reach the same verdicts (W3-07). A failure is a
  /// warning once: the agent's own answers do not depend on it.
  void save_witnesses() {
    if (options_.state_dir.empty() || watcher_.dead_parents() == saved_witnesses_) return;
    auto saved = inventory::save_witnesses(options_.state_dir, watcher_.dead_parents());
    if (!saved && !witness_save_failed_ && options_.problems)
      options_.problems(saved.error().message +
                        "; a direct look cannot see what the agent saw die until it can be written");
    witness_save_failed_ = !saved;
    saved_witnesses_ = watcher_.dead_parents();
  }

  /// Rewrites the textfile when its text changed. A failure is said once, and so
  /// is the recovery: not a line per tick (W2-07).
  void update_textfile() {
    std::string text = metrics_text();
    if (text == last_textfile_) return;
    auto written = write_textfile(*options_.textfile_dir, text);
    if (written) {
      last_textfile_ = std::move(text);
      if (textfile_failing_ && options_.problems)
        options_.problems("--textfile " + *options_.textfile_dir + ": written again");
    } else if (!textfile_failing_ && options_.problems) {
      options_.problems(written.error().message +
                        "; the metrics there are stale until it can be written again");
    }
    textfile_failing_ = !written;
  }

  void emit(const inventory::Event& event) {
    last_event_ = event;
    ++counters_.events[event.kind];
    if (sink_ && !sink_(event)) ++counters_.events_dropped;
  }

  /// /healthz: degraded while the agent's last look failed or NVML is down; a note
  /// (not degraded) while NVML is let go, or processes are watched by the tick.
  report::AgentHealth agent_health() const {
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

  /// The exposition. `process_figures`: with the agent's own process_* series, for
  /// its HTTP endpoint only: in a textfile they would clash with node_exporter's own
  /// (and change at every tick, rewriting the file each time).
  std::string metrics_text(bool process_figures = false) {
    report::MetricsInput input;
    input.inventory = &watcher_.inventory();
    input.counters = &counters_;
    counters_.full_scans = watcher_.full_scans();
    counters_.incremental_scans = watcher_.incremental_scans();
    counters_.look_failed = watcher_.limits().look_failed.has_value();
    counters_.watched_by_pidfd = watcher_.limits().watched;
    counters_.watched_by_tick = watcher_.limits().unwatched;
    counters_.reaping = reaping_;
    counters_.process = process_figures ? own_process_figures() : std::nullopt;
    input.version = options_.version;
    input.per_holder = options_.per_holder;
    input.last_scrape_seconds = last_scrape_seconds_;
    return report::render_metrics(input);
  }

  HttpResponse serve_http(std::string_view path) {
    if (path == "/") return {200, "text/html; charset=utf-8", kLandingPage};
    if (path == "/healthz")
      return queue_.call([this] {
        const report::AgentHealth health = reaping_ ? reap_health_ : agent_health();
        return HttpResponse{health.degraded.empty() ? 200 : 503, "application/json",
                            report::agent_health_json(health)};
      });
    if (path != "/metrics")
      return {404, "text/plain; charset=utf-8", "not found: try /metrics or /healthz\n"};
    return queue_.call([this] {
      // During a reap (another thread answers): the text rendered as it began.
      if (reaping_) return HttpResponse{200, report::kMetricsContentType, reap_metrics_};
      // Synchronous, as Prometheus wants it: the figures are read for this scrape,
      // unless a refresh (tick, scrape or status question) read them less than
      // kScrapeRefreshInterval ago. Any local user can scrape loopback, so the
      // driver and /proc are read at most at that rate, not at the caller's (W2-18).
      // The text is rendered from the inventory as it is now, at every scrape: a
      // tick, a status question or a pidfd event since the last refresh shows (W3-06).
      auto now = node_.clock().now();
      // NVML let go: the figures of the last look, not a look that would take it up.
      if (!yielded_until_ && (!last_refresh_ || now - *last_refresh_ >= kScrapeRefreshInterval)) {
        auto start = std::chrono::steady_clock::now();
        refresh();
        publish();
        last_scrape_seconds_ =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      return HttpResponse{200, report::kMetricsContentType, metrics_text(true)};
    });
  }

  std::string serve_control(const Peer& peer, const std::string& request) {
    if (reaping_ && (request.starts_with(inventory::kYieldSourceRequest) ||
                     request.starts_with(inventory::kResumeSourceRequest)))
      return inventory::encode_wire_error("the agent is reaping orphans: ask again in a moment");
    if (request.starts_with(inventory::kYieldSourceRequest) ||
        request.starts_with(inventory::kResumeSourceRequest))
      return serve_source_request(peer, request);
    // What the agent kept, no look taken: the figures status gives any caller, the
    // orphaned bytes to root only (inventory/gpu_history.h).
    if (request == inventory::kHistoryRequest && reaping_)
      return inventory::encode_history(inventory::history_for(peer.uid, reap_history_));
    if (request == inventory::kHistoryRequest)
      return inventory::encode_history(
          inventory::history_for(peer.uid, history_.answer(wall_now())));
    if (request != inventory::kInventoryRequest)
      return inventory::encode_wire_error(
          "unknown request: this agent answers \"inventory\", \"history\", \"yield-nvml\" "
          "and \"resume-nvml\"");
    if (yielded_until_)
      return inventory::encode_wire_error(
          "the agent has let go of NVML for a GPU reset: scan directly");
    auto& rate = socket_rates_[peer.uid];
    const auto now = node_.clock().now();
    if (now - rate.second >= std::chrono::seconds(1)) rate = {now, 0};
    // As fresh as a direct scan: NVML read and new processes scanned for this answer,
    // unless questions that came together already caused one, or this uid (not root)
    // has had its looks this second (W3-11). During a reap (another thread answers):
    // the look from before it, never a wait.
    if (!reaping_ && !batch_refreshed_ &&
        (peer.uid == 0 || rate.refreshes < kSocketRefreshesPerUid)) {
      ++rate.refreshes;
      batch_refreshed_ = true;
      refresh();
      publish();
    }
    const inventory::Inventory& current = reaping_ ? reap_inventory_ : watcher_.inventory();
    // Under hidepid the caller's /proc shows no other user's process (W2-16).
    auto others = peer.uid == 0 || peer_sees_other_users(peer, node_.proc_root())
                      ? inventory::OtherUsers::visible
                      : inventory::OtherUsers::hidden;
    inventory::Inventory inv = inventory::redact_for(peer.uid, current, others);
    inv.source = "agent";
    inv.agent_pid = ::getpid();
    inv.agent_degraded = (reaping_ ? reap_health_ : agent_health()).degraded;
    inv.node = node_.identity();  // a client naming another node does not use this answer
    return inventory::encode_inventory(inv);
  }

  /// When each holder was first seen orphaned (the reaping policy's clock).
  void track_orphans(const inventory::Inventory& inv) {
    std::map<proc::ProcessId, util::Clock::time_point> next;
    auto now = node_.clock().now();
    for (const auto& view : inv.gpus)
      for (const auto& gh : view.holders) {
        if (!gh.holder.orphaned) continue;
        auto it = orphan_since_.find(gh.holder.id);
        next[gh.holder.id] = it != orphan_since_.end() ? it->second : now;
      }
    orphan_since_ = std::move(next);
    // A reap is tried once per process; forget the ones that are gone.
    std::erase_if(reaped_, [&](const proc::ProcessId& id) { return !orphan_since_.contains(id); });
  }

  /// A holder the reaper may act on, whatever its age: orphaned by owned or witnessed
  /// evidence (never an inference), not matching --keep, and not a member of a live
  /// `gpureap run` (belt and braces: the run owns it, W2-10).
  bool reapable(const proc::Holder& h) const {
    return agent::reapable(h, keep_ ? &*keep_ : nullptr);
  }

  /// The holders of `inv` whose reap is due: reapable, orphaned for longer than
  /// --reap-orphans-after by the agent's clock, not tried yet.
  std::set<proc::ProcessId> due_orphans(const inventory::Inventory& inv) const {
    std::set<proc::ProcessId> due;
    const auto now = node_.clock().now();
    for (const auto& view : inv.gpus)
      for (const auto& gh : view.holders) {
        auto it = orphan_since_.find(gh.holder.id);
        if (!gh.uses_gpu || it == orphan_since_.end() ||
            now - it->second < *options_.reap_orphans_after)
          continue;
        if (reaped_.contains(gh.holder.id) || !reapable(gh.holder)) continue;
        due.insert(gh.holder.id);
      }
    return due;
  }

  /// A reap event naming `ids` as `inv` shows them: each with its bytes over every
  /// GPU, the total, and the GPU when they use one only.
  static inventory::Event reap_event(inventory::EventKind kind, const inventory::Inventory& inv,
                                     const std::set<proc::ProcessId>& ids, std::string detail) {
    inventory::Event event;
    event.kind = kind;
    event.time = wall_now();
    event.detail = std::move(detail);
    std::set<gpu::DeviceId> gpus;
    for (const auto& id : ids) {
      inventory::EventHolder* holder = nullptr;
      for (const auto& view : inv.gpus)
        for (const auto& gh : view.holders) {
          if (gh.holder.id != id || !gh.uses_gpu) continue;
          if (!holder) {
            event.holders.push_back({id, gh.holder.comm, gh.holder.user, std::nullopt,
                                     gh.holder.container, gh.holder.instance, gh.holder.orphaned,
                                     gh.holder.provenance});
            holder = &event.holders.back();
          }
          if (gh.gpu_bytes) holder->gpu_bytes = holder->gpu_bytes.value_or(0) + *gh.gpu_bytes;
          event.bytes += gh.gpu_bytes.value_or(0);
          gpus.insert(view.info.id);
        }
    }
    event.gpus.assign(gpus.begin(), gpus.end());
    if (gpus.size() == 1) {
      event.gpu = *gpus.begin();
      for (const auto& view : inv.gpus)
        if (view.info.id == *event.gpu) event.uuid = view.info.uuid;
    }
    return event;
  }

  /// --reap-orphans-after: frees holders orphaned for longer than that, through free's
  /// engine and protections, and only those. The set is fixed from a fresh look taken
  /// under the free lock (each still a holder, still orphaned, the same process) and
  /// travels with the selection (Filters::ids): no later round of the reclaim can add
  /// another holder (W2-01), and --reap-dry-run announces exactly what a reap would
  /// signal. A busy free lock is said once and retried at a later tick (W2-09).
  void reap_due_orphans() {
    if (!options_.reap_orphans_after) return;
    std::set<proc::ProcessId> due = due_orphans(watcher_.inventory());
    if (due.empty()) return;

    // A unique_ptr, not an optional: g++ 13 takes the optional's FreeLock for
    // maybe-uninitialized under -Werror (as in slurm_command).
    std::unique_ptr<reclaim::FreeLock> lock;
    if (!options_.reap_dry_run) {
      auto taken = reclaim::FreeLock::acquire(options_.state_dir);
      if (!taken) {
        // Not tried: another free (a person's, an epilog) is at work; the next tick asks
        // again. Said once per set of holders, not at every tick.
        if (!std::includes(lock_busy_said_.begin(), lock_busy_said_.end(), due.begin(), due.end()))
          emit(reap_event(inventory::EventKind::reap_failed, watcher_.inventory(), due,
                          taken.error().message + "; the reap is retried at a later tick"));
        lock_busy_said_ = due;
        return;
      }
      lock = std::make_unique<reclaim::FreeLock>(std::move(*taken));
    }
    lock_busy_said_.clear();

    // The fresh look: the agent's view may keep a holder that let go (W2-20). What
    // the agent saw die goes into it; reap() keeps its verdicts for the engine's looks.
    inventory::CollectOptions look;
    look.dead_parents = watcher_.dead_parents();
    look.process_table = true;  // the plan's table from this look's own listing of /proc
    inventory::Inventory inv = node_.look(look);
    reclaim::Selection selection = reap_selection(inv, due, keep_ ? &*keep_ : nullptr);
    // Tried once, whatever the plan says of each (an event says how it went, or it was
    // gone, or protected): a due holder costs one look, not one per tick.
    reaped_.insert(due.begin(), due.end());
    if (selection.ids.empty()) return;
    // The one free flow (reclaim/free_flow.h). Its go-ahead fixes the announced set: a
    // dry run announces it and signals nothing; a plan with no target signals nothing.
    std::set<proc::ProcessId> targets;
    auto go_ahead = [&](const reclaim::Plan& plan) {
      for (const auto& t : plan.targets) targets.insert(t.id);
      if (targets.empty()) return false;
      if (options_.reap_dry_run) {
        emit(reap_event(inventory::EventKind::reap_planned, inv, targets,
                        "--reap-dry-run: would free these orphans (orphaned longer than "
                        "--reap-orphans-after)"));
        return false;
      }
      return true;
    };
    reclaim::AuditTrail trail(*options_.audit, reclaim::AuditActor::watch_reaper,
                              reclaim::AuditCaller::current(node_.proc_root()));
    reclaim::SystemProcessControl system_control(node_.proc_root());
    reclaim::AuditedControl control(system_control, trail, node_.proc_root());
    reclaim::Freer freer{node_, control};
    auto start = std::chrono::steady_clock::now();
    // The reap waits (a grace period, the release): meanwhile another thread answers
    // scrapes and status questions from the look before it (never a wait for it).
    std::optional<reclaim::FreeOutcome> freed_outcome;
    {
      ReapWindow window(*this, selection.ids.size());
      freed_outcome = reap(freer, inv, selection, go_ahead);
    }
    reclaim::FreeOutcome& outcome = *freed_outcome;
    if (!outcome.report) return;
    const reclaim::ReclaimReport& report = *outcome.report;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // What was signalled, every round (Filters::ids keeps later rounds to the same set).
    for (const auto& round : report.rounds)
      for (const auto& t : round.targets) targets.insert(t.id);
    bool freed = report.all_freed();
    // A reap that sent no signal (each target had let go, or was refused at the
    // read before its signal) says so, not "memory still held after the reclaim".
    const bool signalled = std::any_of(report.actions.begin(), report.actions.end(),
                                       [](const reclaim::Action& a) { return !a.via.empty(); });
    ++counters_.frees[freed ? "freed" : "held"];
    counters_.free_duration.observe(seconds);
    counters_.last_free_timestamp = wall_now();
    emit(reap_event(freed ? inventory::EventKind::reaped : inventory::EventKind::reap_failed, inv,
                    targets,
                    freed        ? "freed and verified back at the baseline"
                    : !signalled ? "nothing was signalled (each was refused at the read before "
                                   "its signal): `gpureap status` says why the memory is held"
                                 : "memory still held after the reclaim: `gpureap status` says why"));
    lock.reset();
    watcher_.refresh(true);
    publish();
  }

  /// "yield-nvml MILLISECONDS" and "resume-nvml [NOTE]", root's only: anyone else
  /// could blind the agent. The answer comes once NVML is let go (the worker's
  /// session closed), so the asker may reset at once.
  std::string serve_source_request(const Peer& peer, const std::string& request) {
    if (peer.uid != 0)
      return inventory::encode_wire_error("only root may make the agent let go of NVML");
    const std::string by = "pid " + std::to_string(peer.pid);
    if (request.starts_with(inventory::kResumeSourceRequest)) {
      std::string note = request.substr(inventory::kResumeSourceRequest.size());
      if (!note.empty() && note.front() == ' ') note.erase(0, 1);
      if (yielded_until_) resume_source(by, note);
      return inventory::encode_source_answer(false, 0);
    }
    std::string rest = request.substr(inventory::kYieldSourceRequest.size());
    std::chrono::milliseconds how_long = kDefaultSourceYield;
    if (!rest.empty()) {
      char* end = nullptr;
      const long long ms = std::strtoll(rest.c_str(), &end, 10);
      if (rest.front() != ' ' || *end != '\0' || ms <= 0)
        return inventory::encode_wire_error("yield-nvml takes a number of milliseconds");
      how_long = std::min(std::chrono::milliseconds(ms), kMaxSourceYield);
    }
    yield_source(how_long, by);
    return inventory::encode_source_answer(
        true, wall_now() + std::chrono::duration<double>(how_long).count());
  }

  void apply_reload() {
    if (!hooks_.reload_options) return;
    if (options_.notifier) options_.notifier->reloading();
    auto fresh = hooks_.reload_options();
    if (fresh) {  // else the CLI said why; the old options stay
      auto changes = option_changes(options_, *fresh);
      apply_reloadable(options_, *fresh);
      (void)apply_keep();  // checked by the CLI: it compiles
      if (hooks_.reloaded) hooks_.reloaded(changes);
    }
    if (options_.notifier) options_.notifier->ready(service_status());
  }

  inventory::Node& node_;
  AgentOptions options_;
  const EventSink& sink_;
  const AgentHooks& hooks_;
  Watcher watcher_;
  inventory::EventDetector detector_;
  inventory::GpuHistory history_;  // each GPU's readings, the last ten minutes
  report::AgentCounters counters_;
  RequestQueue queue_;
  std::optional<reclaim::FreeLock> lock_;
  std::optional<ControlServer> control_;
  std::optional<HttpServer> http_;
  std::unique_ptr<Gate> gate_;  // --gate: closes the node on a leak, on its own thread
  std::optional<Pattern> keep_;
  std::map<pid_t, inventory::DeadParent> saved_witnesses_;  // as last written (save_witnesses)
  bool witness_save_failed_ = false;
  std::map<proc::ProcessId, util::Clock::time_point> orphan_since_;
  std::set<proc::ProcessId> reaped_;          // due holders a reap was tried for
  std::set<proc::ProcessId> lock_busy_said_;  // due when the free lock was last found busy
  std::string last_textfile_;
  bool textfile_failing_ = false;  // the last write failed (said once)
  double last_scrape_seconds_ = 0;
  std::optional<util::Clock::time_point> last_refresh_;
  std::optional<util::Clock::time_point> yielded_until_;  // NVML let go until then
  std::optional<inventory::Event> last_event_;           // for systemd's STATUS=
  struct SocketRate {
    util::Clock::time_point second{};
    unsigned refreshes = 0;
  };
  std::map<uid_t, SocketRate> socket_rates_;  // this second's questions, by uid
  bool batch_refreshed_ = false;  // a question of this batch of clients caused a look
  // While a reap runs, what the answering thread serves: set by the loop thread
  // before that thread starts, read by it only, cleared after it is joined.
  bool reaping_ = false;
  inventory::Inventory reap_inventory_;
  std::string reap_metrics_;
  report::AgentHealth reap_health_;
  inventory::GpuHistoryAnswer reap_history_;

  /// Answers scrapes and status questions on a thread of its own from the look
  /// before the reap, for as long as it lives (the reap's waits): the loop thread
  /// is in the reap meanwhile and touches none of what this thread does.
  class ReapWindow {
   public:
    ReapWindow(Agent& agent, std::size_t holders)
        : agent_(agent), stop_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
      agent_.reaping_ = true;
      agent_.reap_inventory_ = agent_.watcher_.inventory();
      agent_.reap_inventory_.warnings.push_back(
          "the agent is reaping " + count_of(holders, "orphaned holder") +
          ": this answer is its look from before the reap");
      agent_.reap_metrics_ = agent_.metrics_text(true);
      agent_.reap_health_ = agent_.agent_health();
      agent_.reap_history_ = agent_.history_.answer(wall_now());
      thread_ = std::thread([this] { serve(); });
    }
    ~ReapWindow() {
      std::uint64_t one = 1;
      (void)!::write(stop_.get(), &one, sizeof one);
      thread_.join();
      agent_.reaping_ = false;
      agent_.reap_inventory_ = {};
      agent_.reap_metrics_.clear();
    }
    ReapWindow(const ReapWindow&) = delete;
    ReapWindow& operator=(const ReapWindow&) = delete;

   private:
    void serve() {
      ControlServer& control = *agent_.control_;
      for (;;) {
        std::vector<pollfd> fds{{stop_.get(), POLLIN, 0}, {agent_.queue_.fd(), POLLIN, 0}};
        for (const pollfd& p : control.poll_fds()) fds.push_back(p);
        int timeout = 1000;
        if (auto due = control.next_deadline())
          timeout = std::min(timeout, poll_timeout_ms(*due));
        int n = ::poll(fds.data(), fds.size(), timeout);
        if (n > 0 && fds[0].revents) return;
        control.serve([this](const Peer& peer, const std::string& req) {
          return agent_.serve_control(peer, req);
        });
        if (n > 0 && fds[1].revents) agent_.queue_.run_pending();
      }
    }
    Agent& agent_;
    UniqueFd stop_;
    std::thread thread_;
  };
};

}  // namespace

Result<void> run_agent(inventory::Node& node, AgentOptions options, const EventSink& sink,
                       const AgentSignals& signals, const AgentHooks& hooks) {
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
  Agent agent(node, std::move(options), sink, hooks);
  if (auto ok = agent.start(); !ok) return ok;
  if (hooks.started) hooks.started(agent.listen_address(), agent.gpus());
  agent.loop(signals);
  return {};
}

}  // namespace gpureap::agent
