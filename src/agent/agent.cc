#include "agent/agent.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <future>
#include <mutex>

#include "agent/control_socket.h"
#include "agent/http_server.h"
#include "inventory/agent_client.h"
#include "inventory/inventory_wire.h"
#include "reclaim/free_lock.h"
#include "reclaim/plan.h"
#include "reclaim/process_control.h"
#include "reclaim/reclaimer.h"
#include "report/names.h"
#include "util/pattern.h"
#include "util/poll.h"

namespace gpureap::agent {

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

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

const char* kLandingPage =
    "<html><head><title>gpureap watch</title></head><body>\n"
    "<h1>gpureap watch</h1>\n"
    "<p>GPU memory held by stray processes on this node: who holds it, why, what now.</p>\n"
    "<p><a href=\"/metrics\">Metrics</a></p>\n"
    "</body></html>\n";

class Agent {
 public:
  Agent(inventory::Node& node, AgentOptions options, const EventSink& sink)
      : node_(node), options_(std::move(options)), sink_(sink), watcher_(node, options_.watch) {}

  Result<void> apply_keep() {
    keep_.reset();
    if (options_.keep_regex.empty()) return {};
    auto pattern = Pattern::compile(options_.keep_regex);
    if (!pattern) return fail("--keep: " + pattern.error().message);
    keep_ = std::move(*pattern);
    return {};
  }

  Result<void> start() {
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
      auto http = HttpServer::start(*options_.listen, [this](std::string_view path) {
        return serve_http(path);
      });
      if (!http) return std::unexpected(http.error());
      http_.emplace(std::move(*http));
    }
    watcher_.refresh(true);  // announced by loop(), after the "started" line
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

  void loop(const std::atomic<bool>& stop, std::atomic<bool>& reload,
            const std::function<Result<AgentOptions>()>& reload_options) {
    publish();  // what the node looks like at the start: an orphan already there is news
    auto next_tick = node_.clock().now() + options_.watch.tick;
    while (!stop.load()) {
      if (reload.exchange(false) && reload_options) apply_reload(reload_options);

      std::vector<pollfd> fds;
      fds.push_back({queue_.fd(), POLLIN, 0});
      fds.push_back({control_->fd(), POLLIN, 0});
      for (int fd : watcher_.watch_fds()) fds.push_back({fd, POLLIN, 0});
      auto now = node_.clock().now();
      int timeout = now >= next_tick ? 0 : poll_timeout_ms(next_tick);
      int n = ::poll(fds.data(), fds.size(), timeout);
      if (stop.load()) break;
      if (n > 0) {
        if (fds[0].revents) queue_.run_pending();
        if (fds[1].revents) control_->serve_one([this](const Peer& peer, const std::string& req) {
          return serve_control(peer, req);
        });
        bool died = false;
        for (std::size_t i = 2; i < fds.size(); ++i)
          if (fds[i].revents) {
            watcher_.on_ready(fds[i].fd);
            died = true;
          }
        if (died) publish();  // an orphan is announced the moment its parent dies
      }
      if (node_.clock().now() >= next_tick) {
        watcher_.refresh();
        publish();
        reap_due_orphans();
        next_tick = node_.clock().now() + options_.watch.tick;
      }
    }
    queue_.close();
  }

 private:
  /// Announces what changed, updates the counters and the textfile.
  void publish() {
    const auto& inv = watcher_.inventory();
    for (auto& event : detector_.observe(inv, wall_now(), watcher_.dead_parents())) emit(event);
    track_orphans(inv);
    if (options_.textfile_dir) update_textfile();
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
    ++counters_.events[report::to_string(event.kind)];
    if (sink_) sink_(event);
  }

  std::string metrics_text() {
    report::MetricsInput input;
    input.inventory = &watcher_.inventory();
    input.counters = &counters_;
    counters_.full_scans = watcher_.full_scans();
    counters_.incremental_scans = watcher_.incremental_scans();
    input.version = options_.version;
    input.per_holder = options_.per_holder;
    input.last_scrape_seconds = last_scrape_seconds_;
    return report::render_metrics(input);
  }

  HttpResponse serve_http(std::string_view path) {
    if (path == "/") return {200, "text/html; charset=utf-8", kLandingPage};
    if (path != "/metrics") return {404, "text/plain; charset=utf-8", "not found: try /metrics\n"};
    return queue_.call([this] {
      auto start = std::chrono::steady_clock::now();
      // Synchronous, as Prometheus wants it: the figures are read for this scrape.
      watcher_.refresh();
      publish();
      HttpResponse response{200, report::kMetricsContentType, metrics_text()};
      last_scrape_seconds_ =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return response;
    });
  }

  std::string serve_control(const Peer& peer, const std::string& request) {
    if (request != inventory::kInventoryRequest)
      return inventory::encode_wire_error("unknown request: this agent answers \"inventory\"");
    // As fresh as a direct scan: NVML read and new processes scanned for this answer.
    watcher_.refresh();
    publish();
    inventory::Inventory inv = inventory::redact_for(peer.uid, watcher_.inventory());
    inv.source = "agent";
    inv.agent_pid = ::getpid();
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

  /// --reap-orphans-after: frees holders orphaned for longer than that, through
  /// free's engine and protections; --keep's pattern and a live run are never touched.
  void reap_due_orphans() {
    if (!options_.reap_orphans_after) return;
    const auto& inv = watcher_.inventory();
    auto now = node_.clock().now();
    std::set<proc::ProcessId> due;
    std::vector<unsigned> gpus;
    for (const auto& view : inv.gpus)
      for (const auto& gh : view.holders) {
        auto it = orphan_since_.find(gh.holder.id);
        if (it == orphan_since_.end() || now - it->second < *options_.reap_orphans_after) continue;
        if (keep_ && keep_->search(gh.holder.cmdline)) continue;
        if (reaped_.contains(gh.holder.id)) continue;  // tried once: an event said how it went
        due.insert(gh.holder.id);
        if (std::find(gpus.begin(), gpus.end(), view.info.index) == gpus.end())
          gpus.push_back(view.info.index);
      }
    if (due.empty()) return;

    reclaim::Selection selection;
    selection.gpus = gpus;
    selection.orphans_only = true;
    auto caller = reclaim::CallerContext::current(node_.proc_root());
    reclaim::Plan plan = reclaim::make_plan(inv, selection, caller);
    // Only the holders that are due; everything the plan protects stays out.
    std::erase_if(plan.targets, [&](const reclaim::Target& t) { return !due.contains(t.id); });
    for (const auto& t : plan.targets) reaped_.insert(t.id);
    if (plan.targets.empty()) return;

    inventory::Event event;
    event.time = wall_now();
    for (const auto& t : plan.targets) {
      std::string container;
      for (const auto& view : inv.gpus)
        for (const auto& gh : view.holders)
          if (gh.holder.id == t.id) container = gh.holder.container;
      event.holders.push_back({t.id, t.comm, t.user, t.gpu_bytes, container});
    }
    for (const auto& t : plan.targets) event.bytes += t.gpu_bytes;
    if (gpus.size() == 1) {
      event.gpu = gpus.front();
      for (const auto& view : inv.gpus)
        if (view.info.index == gpus.front()) event.uuid = view.info.uuid;
    }
    if (options_.reap_dry_run) {
      event.kind = inventory::EventKind::reap_planned;
      event.detail = "--reap-dry-run: would free these orphans (orphaned longer than "
                     "--reap-orphans-after)";
      emit(event);
      return;
    }

    auto lock = reclaim::FreeLock::acquire(options_.state_dir);
    if (!lock) {
      event.kind = inventory::EventKind::reap_failed;
      event.detail = lock.error().message;
      emit(event);
      return;
    }
    reclaim::ReclaimOptions reclaim_options;
    reclaim_options.selection = selection;
    reclaim::SystemProcessControl control(node_.proc_root());
    auto start = std::chrono::steady_clock::now();
    reclaim::ReclaimReport report =
        reclaim::reclaim(node_, control, inv, plan, reclaim_options, nullptr);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bool freed = report.all_freed();
    ++counters_.frees[freed ? "freed" : "held"];
    counters_.free_duration.observe(seconds);
    counters_.last_free_timestamp = wall_now();
    event.kind = freed ? inventory::EventKind::reaped : inventory::EventKind::reap_failed;
    event.time = wall_now();
    event.detail = freed ? "freed and verified back at the baseline"
                         : "memory still held after the reclaim: `gpureap status` says why";
    emit(event);
    watcher_.refresh(true);
    publish();
  }

  void apply_reload(const std::function<Result<AgentOptions>()>& reload_options) {
    auto fresh = reload_options();
    if (!fresh) return;  // the CLI reported why; the old options stay
    // What can change while running: the policy, the metrics' detail, the tick.
    options_.reap_orphans_after = fresh->reap_orphans_after;
    options_.keep_regex = fresh->keep_regex;
    options_.reap_dry_run = fresh->reap_dry_run;
    options_.per_holder = fresh->per_holder;
    options_.watch.tick = fresh->watch.tick;
    (void)apply_keep();
  }

  inventory::Node& node_;
  AgentOptions options_;
  const EventSink& sink_;
  Watcher watcher_;
  inventory::EventDetector detector_;
  report::AgentCounters counters_;
  RequestQueue queue_;
  std::optional<reclaim::FreeLock> lock_;
  std::optional<ControlServer> control_;
  std::optional<HttpServer> http_;
  std::optional<Pattern> keep_;
  std::map<proc::ProcessId, util::Clock::time_point> orphan_since_;
  std::set<proc::ProcessId> reaped_;
  std::string last_textfile_;
  bool textfile_failing_ = false;  // the last write failed (said once)
  double last_scrape_seconds_ = 0;
};

}  // namespace

Result<void> run_agent(inventory::Node& node, AgentOptions options, const EventSink& sink,
                       const std::atomic<bool>& stop, std::atomic<bool>& reload,
                       const std::function<Result<AgentOptions>()>& reload_options,
                       const StartedFn& started) {
  Agent agent(node, std::move(options), sink);
  if (auto ok = agent.start(); !ok) return ok;
  if (started) started(agent.listen_address(), agent.gpus());
  agent.loop(stop, reload, reload_options);
  return {};
}

}  // namespace gpureap::agent
