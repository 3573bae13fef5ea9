#include "agent/option_table.h"

#include <optional>

#include "agent/http_server.h"
#include "util/units.h"

namespace gpureap::agent {
namespace {

std::string text(std::chrono::milliseconds d) { return duration_as_option(d); }
std::string text(const std::optional<std::chrono::milliseconds>& d) { return d ? text(*d) : ""; }
std::string text(const std::optional<std::string>& v) { return v.value_or(""); }
std::string text(const std::string& v) { return v; }
std::string text(bool v) { return v ? "true" : "false"; }
std::string text(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& item : v) out += (out.empty() ? "" : ",") + item;
  return out;
}
std::string text(const std::optional<gid_t>& g) { return g ? std::to_string(*g) : ""; }

std::vector<WatchOptionRow> make_table() {
  using O = AgentOptions;
  using T = OptionTexts;
  return {
      {"listen", "ADDR:PORT", kDefaultListen,
       "Serve /metrics on ADDR:PORT (loopback by default; port 0 picks a free port)", &T::listen,
       nullptr, nullptr, [](const O& o) { return text(o.listen); }, nullptr},
      {"no-listen", "", "", "Serve no HTTP at all", nullptr, &T::no_listen},
      {"web-config", "FILE", "",
       "TLS and basic authentication for remote scrapes: a YAML file in the Prometheus "
       "exporter-toolkit's format (tls_server_config: cert_file, key_file; "
       "basic_auth_users: name -> bcrypt hash). Read at start",
       &T::web_config, nullptr, nullptr, [](const O& o) { return text(o.web.path); }, nullptr},
      {"textfile", "DIR", "",
       "Also write the metrics to DIR/gpureap.prom at every change (node_exporter's "
       "textfile collector; atomic rename)",
       &T::textfile, nullptr, nullptr, [](const O& o) { return text(o.textfile_dir); }, nullptr},
      {"full-scan-interval", "DURATION|auto", "auto",
       "How often all of /proc is scanned, as a safety net; auto: every " +
           duration_as_option(kDefaultFullScan) +
           ", or less often where a scan would take more than 0.5% of a core",
       &T::full_scan, nullptr, nullptr,
       [](const O& o) {
         return o.watch.full_scan_auto ? std::string("auto") : text(o.watch.full_scan);
       },
       nullptr},
      {"socket-group", "GROUP", "",
       "Let this group's members ask the agent (socket mode 0660); they see what their "
       "own scan would show them, never more. Default: root only (0600)",
       &T::socket_group, nullptr, nullptr, [](const O& o) { return text(o.socket_group); },
       nullptr},
      {"tick", "DURATION", duration_as_option(kDefaultTick),
       "How often NVML and new processes are read (a parent's death is seen at once, "
       "whatever the tick)",
       &T::tick, nullptr, nullptr, [](const O& o) { return text(o.watch.tick); },
       [](O& to, const O& from) { to.watch.tick = from.watch.tick; }},
      {"per-holder-metrics", "", "",
       "Also export one series per holder (pid, command, user): opt-in, since pids churn "
       "and name users",
       nullptr, &T::per_holder, nullptr, [](const O& o) { return text(o.per_holder); },
       [](O& to, const O& from) { to.per_holder = from.per_holder; }, "per-holder metrics"},
      {"reap-orphans-after", "DURATION", "",
       "Free holders that have been orphaned for longer than this (e.g. 10m), through "
       "free's engine and protections; off by default",
       &T::reap_after, nullptr, nullptr, [](const O& o) { return text(o.reap_orphans_after); },
       [](O& to, const O& from) { to.reap_orphans_after = from.reap_orphans_after; },
       "reaping orphans"},
      {"keep", "REGEX", "",
       "Never reap a holder whose command line matches this regular expression (RE2)", &T::keep,
       nullptr, nullptr, [](const O& o) { return text(o.keep_regex); },
       [](O& to, const O& from) { to.keep_regex = from.keep_regex; },
       "never reaping holders matching"},
      {"reap-dry-run", "", "", "Announce what --reap-orphans-after would free, and free nothing",
       nullptr, &T::reap_dry_run, nullptr, [](const O& o) { return text(o.reap_dry_run); },
       [](O& to, const O& from) { to.reap_dry_run = from.reap_dry_run; }, "reap dry run"},
      {"gate", "MODE", "",
       "Close this node to new work while a GPU has an owned or witnessed orphan's "
       "memory, driver-held memory or is a ghost, and open it again once a look "
       "verifies it back at baseline. slurm: drain with a reason starting "
       "'gpureap:', resume only such a drain. kubernetes-condition: the node condition "
       "GpuMemoryLeak (nodes/status). kubernetes-taint: the taint "
       "gpureap.io/gpu-memory-leak:NoSchedule, removed only when gpureap added it. "
       "kubernetes-device-taint: a DRA DeviceTaintRule for each GPU with a leak, deleted "
       "once that GPU is verified (GPUREAP_DRA_*). "
       "Kubernetes: NODE_NAME and the pod's service account (docs/kubernetes.md). "
       "Repeatable",
       nullptr, nullptr, &T::gate, [](const O& o) { return text(o.gate); }, nullptr},
      {"gate-dry-run", "", "", "Say what --gate would close and open, and change nothing",
       nullptr, &T::gate_dry_run, nullptr, [](const O& o) { return text(o.gate_dry_run); },
       nullptr},
  };
}

}  // namespace

const std::vector<WatchOptionRow>& watch_option_table() {
  static const std::vector<WatchOptionRow> table = make_table();
  return table;
}

std::vector<std::string> watch_option_keys() {
  std::vector<std::string> keys;
  for (const auto& row : watch_option_table()) keys.push_back(row.key);
  return keys;
}

}  // namespace gpureap::agent
