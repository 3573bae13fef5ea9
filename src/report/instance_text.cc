#include "report/instance_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::report {
namespace {

bool recognised(proc::Engine e) {
  return e != proc::Engine::none && e != proc::Engine::python;
}

std::string what_it_is(const inventory::Instance& in) {
  std::string engine = recognised(in.engine) ? std::string(proc::enum_name(in.engine)) + " server"
                                             : std::string("processes");
  // A key two containers share is qualified by the container (inventory/instances.h):
  // the heading says which container's, as the key does (W4-11(e)).
  const std::string in_container =
      !in.container.empty() && in.key.ends_with("@" + in.container)
          ? " in " + terminal_text(in.container)
          : "";
  switch (in.kind) {
    case inventory::InstanceKind::run:
      // Gone is known of a run's own cgroup; a run id only an environment names may never
      // have been a gpureap run's (W4-11(e)): say what is known, no more.
      return fmt::format("{}, gpureap run {}{}{}", engine, terminal_text(in.run_id), in_container,
                         !in.run_gone       ? ""
                         : in.run_in_cgroup ? " (its gpureap run is gone)"
                                            : " (named by GPUREAP_RUN_ID; no gpureap run above it)");
    case inventory::InstanceKind::process_group:
      return fmt::format("{}, process group {}{}", engine, in.pgid, in_container);
    case inventory::InstanceKind::parent:
      return fmt::format("{}, children of {} (pid {}, seen to die)", engine,
                         in.launcher_comm.empty() ? std::string("?") : terminal_text(in.launcher_comm, 32),
                         in.launcher_pid);
    case inventory::InstanceKind::process:
      break;
  }
  return fmt::format("{}, pid {}", engine, in.key);
}

// The common prefix of rank labels that differ only in their last number:
// TP0..TP7 for {"TP0", ..., "TP7"}.
std::string rank_range(const std::vector<std::string>& labels) {
  auto split = [](const std::string& l) {
    auto digits = l.find_last_not_of("0123456789");
    return std::make_pair(l.substr(0, digits + 1), l.substr(digits + 1));
  };
  if (labels.size() < 3) return "";
  const auto [head, first] = split(labels.front());
  if (first.empty()) return "";
  for (std::size_t i = 0; i < labels.size(); ++i) {
    auto [h, n] = split(labels[i]);
    if (h != head || n != std::to_string(std::stoul(first) + i)) return "";
  }
  return fmt::format("{}{}..{}{}", head, first, head, split(labels.back()).second);
}

}  // namespace

std::string launcher_name(const inventory::Instance& in) {
  constexpr std::size_t kWidth = 40;
  if (in.launcher_cmdline.empty()) return terminal_text(in.launcher_comm, 20);
  std::string_view cmd = in.launcher_cmdline;
  // The model and port follow on the line: the program and its words before the first
  // option say which server it is ("python3 -m sglang.launch_server").
  if (in.model || in.port)
    if (auto opt = cmd.find(" --"); opt != std::string_view::npos) cmd = cmd.substr(0, opt);
  return terminal_text(cmd, kWidth);
}

std::string in_use_before_launch(const inventory::Instance& in) {
  const bool orphaned = in.orphaned > 0 && in.orphaned == in.members.size();
  const std::string key = terminal_text(in.key);
  const std::string what =
      recognised(in.engine) ? std::string(proc::enum_name(in.engine)) + " server" : "instance";
  const std::string head =
      fmt::format("GPU {} {} {} of {} {} ({})", gpu::device_list(in.gpus),
                  in.gpus.size() == 1 ? "holds" : "hold",
                  in.bytes_known ? format_bytes(in.bytes) : "memory", what, key,
                  orphaned ? "orphaned" : in.launcher_alive ? "live" : "not orphaned");
  if (orphaned)
    return head + fmt::format(
                      "; the plan assumes it is freed before the launch: gpureap free --orphans "
                      "--instance {}, or gpureap run --replace {} -- CMD",
                      key, key);
  return head + fmt::format("; the plan assumes it is replaced: gpureap run --replace {} -- CMD",
                            key);
}

std::string member_ranks(const inventory::Instance& in) {
  std::vector<std::string> labels;
  for (const auto& m : in.members)
    if (!m.ranks.empty()) labels.push_back(m.ranks);
  if (labels.empty()) return "";
  std::sort(labels.begin(), labels.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  if (auto range = rank_range(labels); !range.empty()) return range;
  std::string out;
  for (std::size_t i = 0; i < labels.size() && i < 8; ++i) out += (i ? ", " : "") + labels[i];
  if (labels.size() > 8) out += fmt::format(" and {} more", labels.size() - 8);
  return terminal_text(out);
}

std::string instance_heading(const inventory::Instance& in) {
  std::string out = what_it_is(in);
  if (in.launcher_pid <= 0 && in.orphaned > 0 && in.orphaned == in.members.size())
    out += ", launcher gone";
  else if (in.launcher_pid > 0)
    out += in.launcher_alive ? fmt::format(", launcher {} (pid {})", launcher_name(in),
                                           in.launcher_pid)
           : in.launcher_comm.empty()
               ? ", launcher gone"
               : fmt::format(", launcher {} (pid {}) gone", launcher_name(in), in.launcher_pid);
  if (in.model) out += ", model " + terminal_text(*in.model, 60);
  if (in.port) out += fmt::format(", port {}", *in.port);
  if (!in.ports.empty()) {
    std::string ports;
    for (unsigned p : in.ports) ports += (ports.empty() ? "" : ",") + std::to_string(p);
    out += fmt::format(", still listening on port {}", ports);
  }
  // The roles of the members: "scheduler" for SGLang's ranks, "worker" for vLLM's.
  std::string role;
  for (const auto& m : in.members) {
    if (m.role == proc::EngineRole::none) continue;
    std::string r(proc::enum_name(m.role));
    if (role.empty()) role = r;
    if (role != r) role = "mixed";
  }
  const std::string ranks = member_ranks(in);
  std::string who =
      fmt::format("{} process{}", in.members.size(), in.members.size() == 1 ? "" : "es");
  if (!role.empty() && role != "mixed")
    who += " (" + role + (ranks.empty() ? "" : " " + ranks) + ")";
  else if (!ranks.empty())
    who += " (" + ranks + ")";
  out += fmt::format(": {} on GPU {}, {}", who, gpu::device_list(in.gpus),
                     in.bytes_known ? format_bytes(in.bytes)
                     : in.bytes > 0 ? "at least " + format_bytes(in.bytes)
                                    : std::string("memory unknown"));
  if (in.orphaned > 0)
    out +=
        in.orphaned == in.members.size() ? ", ORPHANED" : fmt::format(", {} orphaned", in.orphaned);
  else if (in.detached > 0)
    out +=
        in.detached == in.members.size() ? ", detached" : fmt::format(", {} detached", in.detached);
  return out;
}

namespace {

bool live(const inventory::Instance& in) {
  return in.launcher_alive && in.orphaned == 0 && in.detached == 0;
}

}  // namespace

std::string live_instance_note(const inventory::Instance& in) {
  if (!live(in)) return {};
  return fmt::format("LIVE: serving{} (launcher pid {} alive); stopping it stops the server",
                     in.port ? fmt::format(" on port {}", *in.port) : std::string(),
                     in.launcher_pid);
}

std::string cut_instance_note(const inventory::Instance& in,
                              const std::vector<proc::ProcessId>& signalled) {
  if (!live(in)) return {};
  auto is_signalled = [&](const proc::ProcessId& id) {
    return std::find(signalled.begin(), signalled.end(), id) != signalled.end();
  };
  std::vector<std::string> staying;
  for (const auto& m : in.members)
    if (!is_signalled(m.id)) {
      std::string who = m.role == proc::EngineRole::none ? std::string("process")
                                                          : std::string(proc::enum_name(m.role));
      if (!m.ranks.empty()) who += " " + m.ranks;
      staying.push_back(fmt::format("{} (pid {})", terminal_text(who), m.id.pid));
    }
  const bool launcher_stays =
      in.launcher_pid > 0 &&
      std::none_of(signalled.begin(), signalled.end(),
                   [&](const proc::ProcessId& id) { return id.pid == in.launcher_pid; });
  if (staying.empty()) return {};  // every GPU holder goes: the instance is stopped
  std::string who;
  for (std::size_t i = 0; i < staying.size() && i < 4; ++i) who += (i ? ", " : "") + staying[i];
  if (staying.size() > 4) who += fmt::format(" and {} more", staying.size() - 4);
  if (launcher_stays) who += fmt::format(" and its launcher (pid {})", in.launcher_pid);
  return fmt::format("cuts instance {} in part: {} keep running", terminal_text(in.key), who);
}

bool worth_showing(const inventory::Instance& in) {
  return in.members.size() > 1 || recognised(in.engine);
}

std::string verdict_line(std::string_view verdict, std::vector<pid_t> pids,
                         std::string_view reason) {
  std::sort(pids.begin(), pids.end());
  std::string who;
  for (std::size_t i = 0; i < pids.size() && i < 4; ++i)
    who += fmt::format("{}{}", i ? ", " : "", pids[i]);
  if (pids.size() > 4) who += fmt::format(" and {} more", pids.size() - 4);
  return fmt::format("{}, pid {}: {}", verdict, who, terminal_text(reason));
}

std::vector<std::string> verdict_lines(const std::vector<const proc::Holder*>& holders) {
  // Reason -> pids, in the order first seen (the 8 workers of one dead server share one).
  std::vector<std::pair<std::pair<std::string, std::string>, std::vector<pid_t>>> reasons;
  std::set<proc::Provenance> provenances;
  for (const auto* h : holders) {
    if (!h->orphaned && !h->detached) continue;
    if (h->orphaned) provenances.insert(h->provenance);
    std::pair<std::string, std::string> why{proc::verdict_words(*h),
                                            h->orphaned ? h->orphan_reason : h->detached_reason};
    auto it = std::find_if(reasons.begin(), reasons.end(),
                           [&](const auto& r) { return r.first == why; });
    if (it == reasons.end()) it = reasons.insert(reasons.end(), {why, {}});
    if (std::find(it->second.begin(), it->second.end(), h->id.pid) == it->second.end())
      it->second.push_back(h->id.pid);
  }
  std::vector<std::string> out;
  for (const auto& [why, pids] : reasons) out.push_back(verdict_line(why.first, pids, why.second));
  // What each provenance permits, once (issue 53 #5: "inferred" read as guessing).
  for (auto p : provenances)
    if (auto allows = proc::provenance_allows(p); !allows.empty()) out.emplace_back(allows);
  return out;
}

InstanceEvidence instance_evidence(const inventory::Inventory& inv) {
  std::map<std::string, std::vector<const proc::Holder*>> by_key;
  std::set<std::pair<std::string, pid_t>> seen;  // a holder of several GPUs counts once
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders) {
      const proc::Holder& h = gh.holder;
      if (!gh.uses_gpu || (!h.orphaned && !h.detached) || h.instance.empty()) continue;
      const auto* in = inventory::find_instance(inv.instances, h.instance);
      if (!in || !worth_showing(*in) || !seen.insert({h.instance, h.id.pid}).second) continue;
      by_key[h.instance].push_back(&h);
    }
  InstanceEvidence out;
  for (auto& [key, holders] : by_key) out[key] = verdict_lines(holders);
  return out;
}

std::string instances_section(const std::vector<inventory::Instance>& instances,
                              const Style& style, const InstanceEvidence& evidence) {
  std::string out;
  for (const auto& in : instances) {
    if (!worth_showing(in)) continue;
    const bool all_orphaned = in.orphaned > 0 && in.orphaned == in.members.size();
    const std::string line = "  " + instance_heading(in);
    out += (all_orphaned ? style.red(line) : line) + "\n";
    if (auto e = evidence.find(in.key); e != evidence.end())
      for (const auto& why : e->second) out += style.dim("    " + why) + "\n";
    if (all_orphaned)
      out += fmt::format(
          "    free it: gpureap free --orphans --instance {} (to relaunch in one command: "
          "gpureap run --replace {} -- CMD)\n",
          terminal_text(in.key), terminal_text(in.key));
  }
  return out.empty() ? out : "\n" + style.bold("Instances:") + "\n" + out;
}

}  // namespace gpureap::report
