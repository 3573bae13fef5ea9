#include "agent/answers.h"

#include <algorithm>
#include <cstdlib>
#include <unistd.h>

#include "agent/caller_view.h"
#include "inventory/agent_client.h"
#include "inventory/history_wire.h"
#include "inventory/inventory_wire.h"
#include "report/metrics.h"

namespace gpureap::agent {

namespace {

const char* kLandingPage =
    "<html><head><title>gpureap watch</title></head><body>\n"
    "<h1>gpureap watch</h1>\n"
    "<p>GPU memory held by stray processes on this node: who holds it, why, what now.</p>\n"
    "<p><a href=\"/metrics\">Metrics</a></p>\n"
    "</body></html>\n";

}  // namespace

Result<void> Answers::open(const AgentOptions& options) {
  auto control =
      ControlServer::listen(inventory::agent_socket_path(options.state_dir), options.socket_group);
  if (!control) return std::unexpected(control.error());
  control_.emplace(std::move(*control));
  listen_ = options.listen;
  if (listen_) {
    auto http = HttpServer::start(
        *listen_, [this](std::string_view path) { return http_answer(path); }, options.web);
    if (!http) return std::unexpected(http.error());
    http_.emplace(std::move(*http));
  }
  return {};
}

std::optional<std::string> Answers::listen_address() const {
  if (!http_ || !listen_) return std::nullopt;
  std::string host = listen_->substr(0, listen_->rfind(':'));
  return host + ":" + std::to_string(http_->port());
}

std::vector<pollfd> Answers::poll_fds() const {
  std::vector<pollfd> fds{{queue_.fd(), POLLIN, 0}};
  if (control_)
    for (const pollfd& p : control_->poll_fds()) fds.push_back(p);
  return fds;
}

std::optional<std::chrono::steady_clock::time_point> Answers::next_deadline() const {
  return control_ ? control_->next_deadline() : std::nullopt;
}

void Answers::serve(bool queue_ready) {
  batch_refreshed_ = false;
  if (control_)
    control_->serve(
        [this](const Peer& peer, const std::string& req) { return control_answer(peer, req); });
  if (queue_ready) queue_.run_pending();
}

void Answers::record(const inventory::Inventory& inv, double now, double spacing) {
  history_.record(inv, now, spacing);
}

std::string Answers::control_answer(const Peer& peer, const std::string& request) {
  if (request.starts_with(inventory::kYieldSourceRequest) ||
      request.starts_with(inventory::kResumeSourceRequest))
    return source_request(peer, request);
  // What the agent kept, no look taken: the figures status gives any caller, the
  // orphaned bytes to root only (inventory/gpu_history.h).
  if (request == inventory::kHistoryRequest)
    return inventory::encode_history(inventory::history_for(peer.uid, history_.answer(wall_now())));
  if (request != inventory::kInventoryRequest)
    return inventory::encode_wire_error(
        "unknown request: this agent answers \"inventory\", \"history\", \"yield-nvml\" "
        "and \"resume-nvml\"");
  if (source_.nvml_yielded())
    return inventory::encode_wire_error(
        "the agent has let go of NVML for a GPU reset: scan directly");
  auto& rate = socket_rates_[peer.uid];
  const auto now = node_.clock().now();
  if (now - rate.second >= std::chrono::seconds(1)) rate = {now, 0};
  // As fresh as a direct scan: NVML read and new processes scanned for this answer,
  // unless questions that came together already caused one, or this uid (not root)
  // has had its looks this second (W3-11).
  if (!batch_refreshed_ && (peer.uid == 0 || rate.refreshes < kSocketRefreshesPerUid)) {
    ++rate.refreshes;
    batch_refreshed_ = true;
    source_.look_now();
  }
  // Under hidepid the caller's /proc shows no other user's process (W2-16).
  auto others = peer.uid == 0 || peer_sees_other_users(peer, node_.proc_root())
                    ? inventory::OtherUsers::visible
                    : inventory::OtherUsers::hidden;
  inventory::Inventory inv = inventory::redact_for(peer.uid, source_.inventory(), others);
  inv.source = "agent";
  inv.agent_pid = ::getpid();
  inv.agent_degraded = source_.health().degraded;
  inv.node = node_.identity();  // a client naming another node does not use this answer
  return inventory::encode_inventory(inv);
}

/// "yield-nvml MILLISECONDS" and "resume-nvml [NOTE]", root's only: anyone else could
/// blind the agent. The answer comes once NVML is let go (the worker's session closed),
/// so the asker may reset at once.
std::string Answers::source_request(const Peer& peer, const std::string& request) {
  if (source_.reaping())
    return inventory::encode_wire_error("the agent is reaping orphans: ask again in a moment");
  if (peer.uid != 0)
    return inventory::encode_wire_error("only root may make the agent let go of NVML");
  const std::string by = "pid " + std::to_string(peer.pid);
  if (request.starts_with(inventory::kResumeSourceRequest)) {
    std::string note = request.substr(inventory::kResumeSourceRequest.size());
    if (!note.empty() && note.front() == ' ') note.erase(0, 1);
    if (source_.nvml_yielded()) source_.resume_nvml(by, note);
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
  source_.yield_nvml(how_long, by);
  return inventory::encode_source_answer(
      true, wall_now() + std::chrono::duration<double>(how_long).count());
}

HttpResponse Answers::http_answer(std::string_view path) {
  if (path == "/") return {200, "text/html; charset=utf-8", kLandingPage};
  if (path == "/healthz")
    return queue_.call([this] {
      const report::AgentHealth health = source_.health();
      return HttpResponse{health.degraded.empty() ? 200 : 503, "application/json",
                          report::agent_health_json(health)};
    });
  if (path != "/metrics")
    return {404, "text/plain; charset=utf-8", "not found: try /metrics or /healthz\n"};
  return queue_.call([this] { return metrics_answer(); });
}

HttpResponse Answers::metrics_answer() {
  // Synchronous, as Prometheus wants it: the figures are read for this scrape, unless a
  // look (tick, scrape or status question) read them less than kScrapeRefreshInterval
  // ago. Any local user can scrape loopback, so the driver and /proc are read at most at
  // that rate, not at the caller's (W2-18). The text is rendered from the inventory as
  // it is now, at every scrape: a tick, a status question or a pidfd event since the
  // last look shows (W3-06). NVML let go: the figures of the last look.
  const auto now = node_.clock().now();
  const auto last = source_.last_look();
  std::optional<double> took;
  if (!source_.nvml_yielded() && (!last || now - *last >= kScrapeRefreshInterval)) {
    const auto start = std::chrono::steady_clock::now();
    source_.look_now();
    took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return HttpResponse{200, report::kMetricsContentType, source_.metrics(took)};
}

}  // namespace gpureap::agent
