#include "report/watch_events.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <optional>

#include "reclaim/plan.h"
#include "report/device_json.h"
#include "report/instance_text.h"
#include "report/json.h"
#include "report/json_values.h"
#include "inventory/events.h"
#include "report/terminal_text.h"
#include "report/watch_service.h"
#include "util/clock.h"
#include "util/units.h"
#include "util/plural.h"

namespace gpureap::report {
namespace {

using inventory::Event;
using inventory::EventKind;

// How many holders a line names before "and N more": enough to recognise the
// job, short enough for one terminal line.
constexpr std::size_t kNamedHolders = 3;



// "8.00 GiB", "at least 8.00 GiB" when some holders' figures are unknown, and
// "memory unknown" when all are.
std::string held_bytes(const Event& e) {
  const std::size_t unknown =
      std::count_if(e.holders.begin(), e.holders.end(),
                    [](const inventory::EventHolder& h) { return !h.gpu_bytes; });
  if (!e.holders.empty() && unknown == e.holders.size()) return "memory unknown";
  return (unknown > 0 ? "at least " : "") + format_bytes(e.bytes);
}

// "2 holders (python3 pid 4242, python3 pid 4243)", at most kNamedHolders named.
std::string holder_list(const Event& e) {
  std::string names;
  for (std::size_t i = 0; i < e.holders.size() && i < kNamedHolders; ++i)
    names += fmt::format("{}{} pid {}", i ? ", " : "", terminal_text(e.holders[i].comm, 32),
                         e.holders[i].id.pid);
  if (e.holders.size() > kNamedHolders)
    names += fmt::format(" and {} more", e.holders.size() - kNamedHolders);
  return fmt::format("{} ({})", count_of(e.holders.size(), "holder"), names);
}

std::string parent_text(const Event& e) {
  const auto& p = *e.parent;
  const double ago = std::max(0.0, e.time - p.died_at);
  return fmt::format("parent {} (pid {}) died {:.1f} s ago", terminal_text(p.comm, 32), p.pid, ago);
}

// A witnessed reason under a heading that names the dead launcher already ("launcher
// python3 (pid 4100) gone"): "its parent python3 (pid 4100), a server, was seen to die
// 7 ms ago" becomes "the launcher was seen to die 7 ms ago", the death said once
// (W4-11(a)). How it died stays; who it was is the heading's.
std::string launcher_named(const std::string& detail, pid_t pid) {
  const std::string pid_text = fmt::format(" (pid {})", pid);
  const std::size_t at = detail.find(pid_text);
  if (at == std::string::npos) return detail;
  const std::size_t from = detail.rfind("its parent ", at);
  if (from == std::string::npos) return detail;
  std::string rest = detail.substr(at + pid_text.size());
  if (constexpr std::string_view server = ", a server,"; rest.starts_with(server))
    rest.erase(0, server.size());
  return detail.substr(0, from) + "the launcher" + rest;
}

// A sentence and the next step: "a; b", or "a. B" after a sentence that ends in a
// full stop (the inventory's details do).
std::string then(const std::string& text, std::string next) {
  if (text.empty()) return next;
  if (text.back() != '.') return text + "; " + next;
  if (!next.empty() && next[0] >= 'a' && next[0] <= 'z') next[0] = static_cast<char>(next[0] - 32);
  return text + " " + next;
}

// Why `free --orphans` would signal none of the event's holders (each protected:
// GPU infrastructure, a supervisor), or nullopt when it would act on one: no line
// advises a free that plans nothing (W2-19). The rule is free's own, by name (the
// caller-dependent part, the free's own ancestors, cannot apply to an orphan).
std::optional<std::string> protected_reason(const Event& e) {
  std::optional<std::string> first;
  const reclaim::CallerContext nobody;
  for (const auto& h : e.holders) {
    auto why = reclaim::protection_reason(h.id.pid, h.comm, false, nobody, false);
    if (!why) return std::nullopt;
    if (!first) first = fmt::format("{} pid {} is {}", terminal_text(h.comm, 32), h.id.pid, *why);
  }
  return first;
}

std::string describe(const Event& e, const Style& style) {
  const std::string detail = terminal_text(e.detail);
  const std::string gpu = e.gpu ? gpu::device_text(*e.gpu) : "?";
  switch (e.kind) {
    case EventKind::orphaned_memory: {
      // The parent's death once (W3-12(b)): a witnessed orphan's reason names it already,
      // and so does the instance's heading when the parent was its launcher ("launcher
      // python3 (pid 4100) gone", "children of python3 (pid 4100, seen to die)").
      const bool reason_names_parent =
          e.parent && detail.find(fmt::format("(pid {})", e.parent->pid)) != std::string::npos;
      const bool heading_names_parent =
          e.parent && e.instance && e.instance->launcher_pid == e.parent->pid &&
          (e.instance->kind == inventory::InstanceKind::parent ||
           !e.instance->launcher_comm.empty());
      std::string why = e.parent && !reason_names_parent && !heading_names_parent
                            ? parent_text(e) + (detail.empty() ? "" : "; " + detail)
                        : heading_names_parent ? launcher_named(detail, e.parent->pid)
                                               : detail;
      std::string next = fmt::format("free {}: gpureap free --orphans --gpu {}",
                                     e.holders.size() == 1 ? "it" : "them",
                                     e.gpus.empty() ? gpu : gpu::device_list(e.gpus));
      if (e.instance && e.instance->orphaned == e.instance->members.size())
        next = fmt::format("free it: gpureap free --orphans --instance {}",
                           terminal_text(e.instance->key));
      if (auto kept = protected_reason(e)) next = "gpureap free leaves it alone: " + *kept;
      // How it is known, in a word: an inference is offered to a person, never reaped.
      const bool inferred =
          !e.holders.empty() && std::all_of(e.holders.begin(), e.holders.end(), [](const auto& h) {
            return h.provenance == proc::Provenance::inferred;
          });
      if (inferred) next += " (" + std::string(proc::provenance_allows(proc::Provenance::inferred)) + ")";
      // A server's crash is one line that names the server, its ranks and its GPUs.
      const std::string who = e.instance ? instance_heading(*e.instance) : holder_list(e);
      return fmt::format("{} {}: {} — {}; {}", held_bytes(e), style.red("orphaned"), who, why,
                         next);
    }
    case EventKind::zombie_leader: {
      const auto* h = e.holders.empty() ? nullptr : &e.holders.front();
      std::string who = h ? fmt::format("{} pid {} (user {})", terminal_text(h->comm, 32),
                                        h->id.pid, terminal_text(h->user, 32))
                          : "?";
      // "free it" only for an orphan: a zombie leader whose parent lives is that
      // parent's to end (the same verdict status and --check give).
      if (!h || !h->orphaned)
        return fmt::format("{} held by a {}, {} — {}", held_bytes(e), style.yellow("zombie leader"),
                           who, detail);
      return fmt::format("{} held by a {}, {} — {}", held_bytes(e), style.red("zombie leader"), who,
                         then(detail, fmt::format("free it: gpureap free --gpu {} --pid {}", gpu,
                                                  h->id.pid)));
    }
    case EventKind::unattributed_memory: {
      // The inventory's detail ends in the next step for every class but unknown.
      std::string text = e.unexplained == inventory::Unexplained::unknown
                             ? then(detail, fmt::format("inspect: gpureap status --gpu {}", gpu))
                             : detail;
      return fmt::format("{} {} [{}] — {}", format_bytes(e.bytes),
                         style.red("not explained by any visible process"),
                         enum_name(e.unexplained), text);
    }
    case EventKind::memory_freed:
      return fmt::format("{} {} — {}", format_bytes(e.bytes), style.green("freed"), detail);
    case EventKind::source_down:
      return fmt::format("{} — {}", style.yellow(e.gpu ? "NVML not answering" : "NVML down"),
                         then(detail, e.gpu ? "its holders are still watched through /proc, "
                                              "without memory figures; the other GPUs as before"
                                            : "holders are still watched through /proc, without "
                                              "memory figures, until NVML answers (check dmesg "
                                              "for Xid errors)"));
    case EventKind::source_up:
      return fmt::format("{} — {}", style.green("NVML up"), detail);
    case EventKind::reap_planned:
      return fmt::format("would reap {} holding {} (--reap-dry-run) — {}", holder_list(e),
                         held_bytes(e), detail);
    case EventKind::reaped:
      return fmt::format("{} {} holding {} — {}", style.green("reaped"), holder_list(e),
                         held_bytes(e), detail);
    case EventKind::reap_failed:
      return fmt::format("{} {} holding {} — {}", style.red("reaping failed for"), holder_list(e),
                         held_bytes(e),
                         then(detail, fmt::format("see: gpureap status --gpu {}",
                                                  e.gpus.empty() ? gpu
                                                                 : gpu::device_list(e.gpus))));
    case EventKind::ghost_gpu:
      // The inventory's detail carries the samples and the next step.
      return fmt::format("{} — {}", style.red("ghost GPU: busy with no process"), detail);
    case EventKind::ghost_gpu_gone:
      return fmt::format("{} — {}", style.green("ghost GPU gone"), detail);
  }
  return detail;
}

bool has_bytes(const Event& e) {
  if (e.kind == EventKind::source_down || e.kind == EventKind::source_up) return false;
  // Holders whose figures are all unknown: the total is unknown, not 0.
  return e.holders.empty() ||
         std::any_of(e.holders.begin(), e.holders.end(),
                     [](const inventory::EventHolder& h) { return h.gpu_bytes.has_value(); });
}

}  // namespace

std::string watch_event_line(const Event& e, const Style& style) {
  std::string gpu = e.gpu             ? style.bold(fmt::format("GPU {}", *e.gpu)) + ": "
                    : !e.gpus.empty() ? style.bold("GPU " + gpu::device_list(e.gpus)) + ": "
                                      : "";
  return fmt::format("{} {}{}\n", style.dim(stamp(e.time)), gpu, describe(e, style));
}

std::string watch_event_brief(const Event& e) {
  const auto t = static_cast<std::time_t>(e.time);
  std::tm local{};
  ::localtime_r(&t, &local);
  std::string line = watch_event_line(e, Style{});
  line = line.substr(line.find(' ') + 1);  // past the RFC 3339 stamp
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return fmt::format("{:02}:{:02}:{:02} {}", local.tm_hour, local.tm_min, local.tm_sec, line);
}

namespace {

// The event's provenance: the weakest of its orphaned holders' (inferred < witnessed <
// owned), so "alert on witnessed orphans" is a field, not a parse of `detail` (issue 53
// #12); null when none of them is orphaned.
nlohmann::ordered_json event_provenance(const inventory::Event& e) {
  std::optional<proc::Provenance> weakest;
  for (const auto& h : e.holders)
    if (h.orphaned && h.provenance != proc::Provenance::none)
      weakest = weakest ? std::min(*weakest, h.provenance) : h.provenance;
  if (!weakest) return nullptr;
  return std::string(proc::enum_name(*weakest));
}

}  // namespace

std::string watch_event_json(const Event& e) {
  nlohmann::ordered_json holders = nlohmann::ordered_json::array();
  for (const auto& h : e.holders)
    holders.push_back({{"pid", h.id.pid},
                       {"start_time", h.id.start_time},
                       {"comm", h.comm},
                       {"user", h.user},
                       {"gpu_bytes", or_null(h.gpu_bytes)},
                       {"container", h.container.empty() ? nlohmann::ordered_json(nullptr)
                                                         : nlohmann::ordered_json(h.container)}});
  nlohmann::ordered_json doc = event_head(enum_name(e.kind), level_name(event_level(e.kind)), e.time);
  const nlohmann::ordered_json fields = {
      {"gpu", or_null(e.gpu)},
      {"gpus", e.gpus.empty() && e.gpu ? std::vector<gpu::DeviceId>{*e.gpu} : e.gpus},
      {"uuid", e.uuid.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.uuid)},
      {"bytes", has_bytes(e) ? nlohmann::ordered_json(e.bytes) : nlohmann::ordered_json(nullptr)},
      {"holders", std::move(holders)},
  };
  for (const auto& [key, value] : fields.items()) doc[key] = value;
  if (e.parent)
    doc["parent"] = {{"pid", e.parent->pid},
                     {"comm", e.parent->comm},
                     {"cmdline", e.parent->cmdline},
                     {"died_at", seconds_value(e.parent->died_at)}};  // as instances' died_at
  doc["instance"] = e.instance ? instance_json(*e.instance) : nlohmann::ordered_json(nullptr);
  doc["class"] = e.kind == EventKind::unattributed_memory
                     ? nlohmann::ordered_json(enum_name(e.unexplained))
                     : nlohmann::ordered_json(nullptr);
  doc["provenance"] = event_provenance(e);
  doc["detail"] = e.detail;
  return json_line(doc);
}

std::string watch_dropped_line(std::uint64_t dropped, const Style& style) {
  return fmt::format("{} {} while stdout was blocked\n", style.dim(stamp(util::wall_now())),
                     style.bold(count_of(dropped, "event") + " dropped"));
}

std::string watch_dropped_json(std::uint64_t dropped) {
  nlohmann::ordered_json doc = event_head("events_dropped", level_name(Level::warning), util::wall_now());
  doc["dropped"] = dropped;
  return json_line(doc);
}

}  // namespace gpureap::report
