#include "agent/option_changes.h"

#include <array>
#include <optional>

#include "agent/options.h"
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

// One row per key: its value as text, and how a reload applies it (nullptr: it
// was bound or opened at start, and waits for the next one).
struct Row {
  const char* key;
  std::string (*value)(const AgentOptions&);
  void (*apply)(AgentOptions& in_force, const AgentOptions& fresh);
};

// The options file's order (docs/watch.md): what is set at start, then the reloadable.
const std::array<Row, 12> kRows{{
    {"listen", [](const AgentOptions& o) { return text(o.listen); }, nullptr},
    {"web-config", [](const AgentOptions& o) { return text(o.web.path); }, nullptr},
    {"textfile", [](const AgentOptions& o) { return text(o.textfile_dir); }, nullptr},
    {"socket-group", [](const AgentOptions& o) { return text(o.socket_group); }, nullptr},
    {"full-scan-interval",
     [](const AgentOptions& o) {
       return o.watch.full_scan_auto ? std::string("auto") : text(o.watch.full_scan);
     },
     nullptr},
    {"gate", [](const AgentOptions& o) { return text(o.gate); }, nullptr},
    {"gate-dry-run", [](const AgentOptions& o) { return text(o.gate_dry_run); }, nullptr},
    {"tick", [](const AgentOptions& o) { return text(o.watch.tick); },
     [](AgentOptions& to, const AgentOptions& from) { to.watch.tick = from.watch.tick; }},
    {"per-holder-metrics", [](const AgentOptions& o) { return text(o.per_holder); },
     [](AgentOptions& to, const AgentOptions& from) { to.per_holder = from.per_holder; }},
    {"reap-orphans-after", [](const AgentOptions& o) { return text(o.reap_orphans_after); },
     [](AgentOptions& to, const AgentOptions& from) {
       to.reap_orphans_after = from.reap_orphans_after;
     }},
    {"keep", [](const AgentOptions& o) { return text(o.keep_regex); },
     [](AgentOptions& to, const AgentOptions& from) { to.keep_regex = from.keep_regex; }},
    {"reap-dry-run", [](const AgentOptions& o) { return text(o.reap_dry_run); },
     [](AgentOptions& to, const AgentOptions& from) { to.reap_dry_run = from.reap_dry_run; }},
}};

}  // namespace

std::vector<OptionChange> option_changes(const AgentOptions& before, const AgentOptions& after) {
  std::vector<OptionChange> out;
  for (const Row& row : kRows) {
    std::string was = row.value(before), now = row.value(after);
    if (was != now) out.push_back({row.key, std::move(was), std::move(now), row.apply != nullptr});
  }
  return out;
}

void apply_reloadable(AgentOptions& in_force, const AgentOptions& fresh) {
  for (const Row& row : kRows)
    if (row.apply) row.apply(in_force, fresh);
}

}  // namespace gpureap::agent
