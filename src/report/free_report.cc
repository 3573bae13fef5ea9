#include "report/free_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "gpu/source_words.h"
#include "gpu/gpu_select.h"
#include "gpu/vendor.h"
#include "inventory/node.h"
#include "inventory/release_model.h"
#include "report/device_json.h"
#include "report/instance_text.h"
#include "report/json.h"
#include "report/json_values.h"
#include "report/names.h"
#include "reclaim/leftovers.h"
#include "report/status_table.h"
#include "report/table_layout.h"
#include "report/terminal_text.h"
#include "util/text.h"
#include "util/units.h"

namespace gpureap::report {
namespace {

std::vector<proc::ProcessId> signalled_ids(const reclaim::Plan& plan) {
  std::vector<proc::ProcessId> ids;
  for (const auto& t : plan.targets) ids.push_back(t.id);
  return ids;
}

std::string gpus_text(const std::vector<gpu::DeviceId>& gpus) {
  return gpus.empty() ? "-" : gpu::device_list(gpus);
}

/// The width of the widest GPU text of `items` (targets or skipped), `least` at least.
template <typename Items>
std::size_t widest_gpus(const Items& items, std::size_t least) {
  std::size_t width = least;
  for (const auto& item : items) width = std::max(width, gpus_text(item.gpus).size());
  return width;
}

std::string seconds_text(double s) {
  return fmt::format("{:.2f} s", s);
}

// The targets' pinned host memory, when any (issue 35): the release's expected slow phase.
std::string pinned_line(const reclaim::Plan& plan) {
  std::uint64_t pinned = 0;
  std::string who;
  for (const auto& t : plan.targets) {
    if (t.pinned_host_bytes == 0) continue;
    pinned += t.pinned_host_bytes;
    who += fmt::format("{}pid {} {}", who.empty() ? "" : ", ", t.id.pid,
                       format_bytes(t.pinned_host_bytes));
  }
  if (pinned == 0) return "";
  return fmt::format(
      "  Pinned host memory: {} ({}): the kernel unpins it after they exit, the slow phase of "
      "the release (budget {:.0f} s before it could be called driver-held)\n",
      format_bytes(pinned), who,
      std::chrono::duration<double>(inventory::ReleaseBudget{}.for_pinned(pinned)).count());
}

// The slowest phase of a release that took a second or more, in one line ("" otherwise).
std::string slow_phase_line(const reclaim::GpuRelease& g) {
  const reclaim::ReleasePhases p = reclaim::release_phases(g);
  if (!g.freed_at || !g.signalled_at || *g.freed_at - *g.signalled_at < 1.0) return "";
  struct Phase {
    std::optional<double> s;
    const char* text;
  } phases[] = {
      {p.signal_to_exit, "the holders took {} to exit after the signal"},
      {p.exit_to_unlisted, "NVML listed them {} after they exited (the driver tearing down "
                           "their contexts)"},
      {p.unlisted_to_baseline, "memory came back {} after NVML stopped listing them (the "
                               "driver releasing it; pinned host memory is unpinned here)"},
  };
  const Phase* slowest = nullptr;
  for (const auto& ph : phases)
    if (ph.s && (!slowest || *ph.s > *slowest->s)) slowest = &ph;
  if (!slowest || *slowest->s < 0.5) return "";
  return "    slowest phase: " + fmt::format(fmt::runtime(slowest->text), seconds_text(*slowest->s)) +
         "\n";
}

nlohmann::ordered_json phases_json(const reclaim::GpuRelease& g) {
  const reclaim::ReleasePhases p = reclaim::release_phases(g);
  return {{"phases",
           {{"signal_to_exit", seconds_json(p.signal_to_exit)},
            {"exit_to_unlisted", seconds_json(p.exit_to_unlisted)},
            {"unlisted_to_baseline", seconds_json(p.unlisted_to_baseline)}}}};
}

template <typename T>
nlohmann::ordered_json opt(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

// The targets sized to the terminal (or whole, --wide): the command line on the
// row, cut to what is left of it, and why each is a target on the lines beneath,
// broken at words.
std::string fitted_targets(const reclaim::Plan& plan, const Style& style, TableWidth width) {
  std::vector<TableColumn> columns = {
      {"PID"}, {"USER", false, 1, 16}, {"GPU"}, {"GPU MEM", true}, {"COMMAND"}};
  std::vector<std::vector<TableCell>> rows;
  for (const auto& t : plan.targets)
    rows.push_back({{std::to_string(t.id.pid)},
                    {t.user},
                    {gpus_text(t.gpus)},
                    {t.gpu_bytes ? format_bytes(t.gpu_bytes) : "-"},
                    {t.cmdline.empty() ? "[" + t.comm + "]" : t.cmdline}});
  const std::string table = render_table(columns, rows, style, "  ", width);
  // One line of the table per target after its header: each followed by its why.
  std::string out;
  std::size_t row = 0, start = 0;
  for (std::size_t nl; (nl = table.find('\n', start)) != std::string::npos; start = nl + 1) {
    out += table.substr(start, nl + 1 - start);
    if (start == 0) continue;  // the header
    out += "      " + terminal_text(plan.targets[row++].why) + "\n";
  }
  return out;
}

// "7970, 7971, 7972, 7973 and 4 more".
std::string pid_list(const std::vector<pid_t>& pids) {
  std::string out;
  for (std::size_t i = 0; i < pids.size() && i < 4; ++i)
    out += fmt::format("{}{}", i ? ", " : "", pids[i]);
  if (pids.size() > 4) out += fmt::format(" and {} more", pids.size() - 4);
  return out;
}

// The orphaned members of a plan's instance that share one lineage (verdict, evidence,
// reason), said once (issue 37): the largest such group of two or more GPU holders of
// each instance worth a line. Every other target (a live or detached member, one whose
// evidence differs, a launcher, a descendant, a process of no instance) is an
// exception, listed with its own why.
struct TargetGroup {
  std::string instance;
  std::vector<std::size_t> targets;  // indices into plan.targets
};

std::vector<TargetGroup> target_groups(const reclaim::Plan& plan) {
  std::vector<TargetGroup> out;
  for (const auto& in : plan.instances) {
    if (!worth_showing(in)) continue;
    std::vector<std::pair<reclaim::TargetLineage, std::vector<std::size_t>>> by_lineage;
    for (std::size_t i = 0; i < plan.targets.size(); ++i) {
      const auto& t = plan.targets[i];
      // Orphans only: a live or detached member is an exception a person must see.
      if (t.instance != in.key || !t.lineage || t.gpus.empty() ||
          t.lineage->verdict != reclaim::LineageVerdict::orphaned)
        continue;
      auto it = std::find_if(by_lineage.begin(), by_lineage.end(),
                             [&](const auto& g) { return g.first == *t.lineage; });
      if (it == by_lineage.end()) it = by_lineage.insert(by_lineage.end(), {*t.lineage, {}});
      it->second.push_back(i);
    }
    auto best = std::max_element(by_lineage.begin(), by_lineage.end(), [](const auto& a,
                                                                         const auto& b) {
      return a.second.size() < b.second.size();
    });
    if (best != by_lineage.end() && best->second.size() >= 2)
      out.push_back({in.key, best->second});
  }
  return out;
}

// "8 processes (pid 7970, ... and 4 more) on GPU 0,...,7, 736 GiB: orphaned (inferred):
// re-parented to init (pid 1); ..." for one group.
std::string group_line(const reclaim::Plan& plan, const TargetGroup& g) {
  std::vector<pid_t> pids;
  std::vector<gpu::DeviceId> gpus;
  std::uint64_t bytes = 0;
  for (auto i : g.targets) {
    const auto& t = plan.targets[i];
    pids.push_back(t.id.pid);
    gpus.insert(gpus.end(), t.gpus.begin(), t.gpus.end());
    bytes += t.gpu_bytes;
  }
  gpu::normalize(gpus);
  const auto& l = *plan.targets[g.targets.front()].lineage;
  const std::string verdict = terminal_text(reclaim::verdict_words(l));
  const std::string why = verdict + (l.reason.empty() ? "" : ": " + terminal_text(l.reason));
  const auto in = std::find_if(plan.instances.begin(), plan.instances.end(),
                               [&](const inventory::Instance& i) { return i.key == g.instance; });
  // Its heading above says the GPUs and the bytes of all of them.
  if (in != plan.instances.end() && in->members.size() == pids.size())
    return fmt::format("all {} (pid {}): {}", pids.size(), pid_list(pids), why);
  return fmt::format("{} processes (pid {}) on GPU {}, {}: {}", pids.size(), pid_list(pids),
                     gpu::device_list(gpus), format_bytes(bytes), why);
}

std::string plan_lines(const reclaim::Plan& plan, const Style& style,
                       std::chrono::milliseconds grace, TableWidth width) {
  std::string out;
  if (plan.targets.empty()) {
    out += "Plan: no process to signal.\n";
  } else {
    std::uint64_t bytes = 0;
    for (const auto& t : plan.targets) bytes += t.gpu_bytes;
    out += style.bold(fmt::format(
        "Plan: signal {} process{} {} ({})\n", plan.targets.size(),
        plan.targets.size() == 1 ? "" : "es",
        bytes ? "holding " + format_bytes(bytes) : std::string("(memory unknown)"),
        grace.count() == 0 ? "SIGKILL at once: --grace 0"
                           : "SIGTERM, then SIGKILL after the grace period"));
    // Each instance once, its members that share a verdict in one line; the other
    // targets (exceptions) in the table (--json: every target).
    const std::vector<TargetGroup> groups = target_groups(plan);
    reclaim::Plan rest = plan;  // the targets not said by a group's line
    rest.targets.clear();
    for (std::size_t i = 0; i < plan.targets.size(); ++i)
      if (std::none_of(groups.begin(), groups.end(), [&](const TargetGroup& g) {
            return std::find(g.targets.begin(), g.targets.end(), i) != g.targets.end();
          }))
        rest.targets.push_back(plan.targets[i]);
    for (const auto& in : plan.instances) {
      if (!worth_showing(in)) continue;
      out += "  Instance: " + instance_heading(in) + "\n";
      for (const auto& g : groups)
        if (g.instance == in.key) out += "    " + group_line(plan, g) + "\n";
      if (auto cut = cut_instance_note(in, signalled_ids(plan)); !cut.empty())
        out += style.red("    " + cut) + "\n";
    }
    if (rest.targets.empty()) {
      // Every target said by its instance's line.
    } else if (!width.fixed()) {
      out += fitted_targets(rest, style, width);
    } else {
      // The GPU column is as wide as its widest text ("0/gi1/ci0", "0,1,2"), 7 at least:
      // a plan of whole GPUs keeps its layout byte for byte.
      const std::size_t gpu_width = widest_gpus(rest.targets, 7);
      out += style.dim(fmt::format("  {:<8} {:<10} {:<{}} {:>10}  {:<44} {}\n", "PID", "USER",
                                   "GPU", gpu_width, "GPU MEM", "WHY", "COMMAND"));
      for (const auto& t : rest.targets) {
        std::string cmd = terminal_text(t.cmdline.empty() ? "[" + t.comm + "]" : t.cmdline, 50);
        // The reason wraps in its column: cut, "orphaned: re-parent" hides the why.
        auto why = terminal_text_lines(t.why, 44);
        out += fmt::format("  {:<8} {:<10} {:<{}} {:>10}  {:<44} {}\n", t.id.pid,
                           terminal_text(t.user, 10), gpus_text(t.gpus), gpu_width,
                           t.gpu_bytes ? format_bytes(t.gpu_bytes) : "-", why[0], cmd);
        for (std::size_t i = 1; i < why.size(); ++i)
          out += fmt::format("  {:<{}}  {}\n", "", 31 + gpu_width, why[i]);
      }
    }
  }
  out += pinned_line(plan);
  if (!plan.skipped.empty()) {
    out += style.yellow(fmt::format("Left alone ({}):\n", plan.skipped.size()));
    const std::size_t gpu_width = widest_gpus(plan.skipped, 5);
    for (const auto& s : plan.skipped)
      out += fmt::format("  {:<8} {:<16} GPU {:<{}} {:>10}  {}\n", s.id.pid,
                         terminal_text(s.comm, 16), gpus_text(s.gpus), gpu_width,
                         s.gpu_bytes ? format_bytes(s.gpu_bytes) : "-",
                         terminal_text(s.reason));
  }
  return out;
}

}  // namespace

std::string plan_text(const reclaim::Plan& plan, const Style& style,
                      std::chrono::milliseconds grace, TableWidth width) {
  std::string out = plan_lines(plan, style, grace, width);
  // Rows are cut to fit; the lines of prose are broken at words.
  return width.limit() ? wrap_lines(out, *width.limit()) : out;
}

nlohmann::ordered_json plan_json(const reclaim::Plan& plan) {
  nlohmann::ordered_json targets = nlohmann::ordered_json::array(),
                         skipped = nlohmann::ordered_json::array();
  for (const auto& t : plan.targets) {
    // The lineage verdict as fields (reclaim/target_lineage.h), not only in `why`: null
    // for a target that holds no GPU (a descendant, a respawner).
    const auto& l = t.lineage;
    targets.push_back(
        {{"pid", t.id.pid},
         {"start_time", t.id.start_time},
         {"comm", t.comm},
         {"user", t.user},
         {"cmdline", t.cmdline},
         {"gpus", t.gpus},
         {"gpu_bytes", t.gpu_bytes},
         {"why", t.why},
         {"verdict", l ? text_or_null(enum_name(l->verdict)) : nlohmann::ordered_json(nullptr)},
         {"evidence", l && l->evidence != proc::OrphanEvidence::none
                          ? text_or_null(enum_name(l->evidence))
                          : nlohmann::ordered_json(nullptr)},
         {"provenance", l ? text_or_null(l->provenance) : nlohmann::ordered_json(nullptr)},
         {"instance", text_or_null(t.instance)}});
  }
  for (const auto& s : plan.skipped)
    skipped.push_back({{"pid", s.id.pid},
                       {"start_time", s.id.start_time},
                       {"comm", s.comm},
                       {"gpus", s.gpus},
                       {"gpu_bytes", s.gpu_bytes},
                       {"class", std::string(enum_name(s.kind))},
                       {"reason", s.reason}});
  nlohmann::ordered_json instances = nlohmann::ordered_json::array();
  for (const auto& in : plan.instances) instances.push_back(instance_json(in));
  return {{"targets", targets}, {"skipped", skipped}, {"instances", instances}};
}

std::string progress_line(const std::vector<reclaim::GpuRelease>& gpus) {
  std::string out;
  for (const auto& g : gpus) {
    if (!out.empty()) out += " | ";
    out += g.freed_at ? fmt::format("GPU {} freed {:.2f}s", g.gpu, *g.freed_at)
                      : fmt::format("GPU {} {}", g.gpu, format_bytes(g.after()));
  }
  return out;
}

namespace {

// A parent that restarts (or could restart) what was killed, and how to stop it.
std::string respawner_line(const reclaim::Respawner& resp, double settled_seconds) {
  if (!resp.unit.empty())
    return fmt::format(
        "{} restarts its worker when it exits (Restart={}; pid {} ({}) was its "
        "main process); {}. To stop it: {}\n",
        terminal_text(resp.unit), terminal_text(resp.restart), resp.id.pid,
        terminal_text(resp.comm),
        resp.respawns == 0
            ? fmt::format("watched {:.1f} s after the release: no restart yet", settled_seconds)
            : fmt::format("restarted GPU holders {}x", resp.respawns),
        terminal_text(resp.stop_hint));
  if (resp.respawns == 0)
    return fmt::format(
        "pid {} ({}), the parent of a killed holder, is still alive and could "
        "restart it (watched {:.1f} s after the release: no restart). To stop "
        "it: {}\n",
        resp.id.pid, terminal_text(resp.comm), settled_seconds, terminal_text(resp.stop_hint));
  if (resp.included)
    return fmt::format(
        "pid {} ({}) kept respawning GPU holders ({}x); it was included and "
        "signalled.\n",
        resp.id.pid, terminal_text(resp.comm), resp.respawns);
  return fmt::format(
      "pid {} ({}) respawns GPU holders ({}x) and was left alone (not in the "
      "plan). To stop it: {}\n",
      resp.id.pid, terminal_text(resp.comm), resp.respawns, terminal_text(resp.stop_hint));
}

// When the engine stopped waiting for a target: its exit, or its memory back while it
// was exiting (Outcome::exiting).
std::optional<double> ended_at(const reclaim::Action& a) {
  return a.exited_at ? a.exited_at : a.exiting_at;
}

// One line for the same signal to `group.size()` members of one instance.
std::string instance_action_line(const std::vector<reclaim::Action>& actions,
                                 const std::vector<std::size_t>& group,
                                 const std::string& instance) {
  const auto& a = actions[group.front()];
  std::vector<pid_t> pids;
  double sent = a.sent_at, first = 0, last = 0;
  for (auto j : group) {
    const auto& b = actions[j];
    pids.push_back(b.id.pid);
    sent = std::min(sent, b.sent_at);
    if (const auto at = ended_at(b)) {
      first = j == group.front() ? *at : std::min(first, *at);
      last = std::max(last, *at);
    }
  }
  std::string outcome = !ended_at(a) ? outcome_text(a)
                        : fmt::format("{:.3f}", first) == fmt::format("{:.3f}", last)
                            ? fmt::format("{} at +{:.3f}s", outcome_text(a), first)
                            : fmt::format("{} at +{:.3f}..{:.3f}s", outcome_text(a), first, last);
  return fmt::format("  +{:.3f}s {:<8} {} processes of instance {} (pid {}) via {} -> {}\n", sent,
                     reclaim::signal_word(a.signal), group.size(), terminal_text(instance),
                     pid_list(pids), a.via.empty() ? "-" : terminal_text(a.via),
                     terminal_text(outcome));
}

std::string action_line(const reclaim::Action& a) {
  const auto at = ended_at(a);
  std::string outcome = at ? fmt::format("{} at +{:.3f}s", outcome_text(a), *at) : outcome_text(a);
  // The start time that pinned the identity is the JSON's and the audit's (start_time):
  // clock ticks since boot mean nothing to a reader (issue 53 #11).
  return fmt::format("  +{:.3f}s {:<8} pid {} ({}) via {} -> {}\n", a.sent_at,
                     reclaim::signal_word(a.signal), a.id.pid, terminal_text(a.comm),
                     a.via.empty() ? "-" : terminal_text(a.via), terminal_text(outcome));
}

// The signals sent. The same signal to the members of one instance, sent the same way
// with the same outcome, is one line (issue 37); the exceptions keep a line each.
std::string action_lines(const std::vector<reclaim::Action>& actions, const reclaim::Plan* plan) {
  auto instance_of = [&](const reclaim::Action& a) -> std::string {
    if (!plan) return "";
    for (const auto& t : plan->targets)
      if (t.id == a.id) return t.instance;
    return "";
  };
  auto same = [&](const reclaim::Action& a, const reclaim::Action& b) {
    return a.signal == b.signal && a.via == b.via && outcome_text(a) == outcome_text(b) &&
           ended_at(a).has_value() == ended_at(b).has_value() && instance_of(a) == instance_of(b);
  };
  std::string out;
  std::vector<bool> said(actions.size(), false);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    if (said[i]) continue;
    const auto& a = actions[i];
    std::vector<std::size_t> group = {i};
    const std::string in = instance_of(a);
    if (!in.empty())
      for (std::size_t j = i + 1; j < actions.size(); ++j)
        if (!said[j] && same(a, actions[j])) group.push_back(j);
    for (auto j : group) said[j] = true;
    out += group.size() >= 2 ? instance_action_line(actions, group, in) : action_line(a);
  }
  return out;
}

// A ghost whose memory is back at the baseline holds no memory: it computes for no one.
bool ghost_only(const reclaim::GpuRelease& g, const std::vector<reclaim::Leftover>& leftovers) {
  return !g.freed && g.measured && g.after() <= g.threshold &&
         std::any_of(leftovers.begin(), leftovers.end(),
                     [&](const reclaim::Leftover& l) { return l.gpu == g.gpu; }) &&
         std::all_of(leftovers.begin(), leftovers.end(), [&](const reclaim::Leftover& l) {
           return l.gpu != g.gpu || l.cls == reclaim::LeftoverClass::ghost_gpu;
         });
}

// One GPU's result: before -> after and the verdict, then what is left on it.
std::string gpu_result_lines(const reclaim::GpuRelease& g,
                             const std::vector<reclaim::Leftover>& leftovers, bool reset,
                             const Style& style) {
  std::string out;
  // Memory a reset brought back was not released by the driver: the reset is the reason,
  // and no release phase is read into it (W4-11(c)).
  const std::string by_reset = reset ? " by the GPU reset" : "";
  std::string verdict =
      g.freed ? style.green(g.freed_at ? fmt::format("freed{} in {}", by_reset,
                                                     seconds_text(*g.freed_at))
                                       : "free" + by_reset)
      : ghost_only(g, leftovers) ? style.red("GHOST (memory at baseline, busy with no process)")
                                 : style.red("STILL HELD");
  if (!g.measured) {
    out += fmt::format("  GPU {}  memory unknown  {}\n", g.gpu,
                       style.red(fmt::format("NOT VERIFIED ({} cannot read this GPU)",
                                             gpu::driver_interface(gpu::vendor_of(g.uuid)))));
  } else {
    // What the holders left alone keep is said only of memory still above the baseline:
    // memory that came back was not kept by anyone (a dead owner's, say).
    const std::uint64_t above = g.after() > g.baseline ? g.after() - g.baseline : 0;
    const std::uint64_t kept = std::min(g.left_alone_bytes, above);
    std::string left_alone =
        kept > inventory::freed_tolerance(g.total)
            ? fmt::format(", {} kept by holders left alone", format_bytes(kept))
            : "";
    // No reading before the signals: no "before" figure, rather than a later one (W2-23).
    out += fmt::format("  GPU {}  {} -> {}  (baseline {}{})  {}\n", g.gpu,
                       g.before_read ? format_bytes(g.before) : std::string("?"),
                       format_bytes(g.after()), format_bytes(g.baseline), left_alone, verdict);
    if (!reset || !g.freed) out += slow_phase_line(g);
  }
  for (const auto& l : leftovers) {
    if (l.gpu != g.gpu) continue;
    out += style.red(fmt::format("    [{}]", enum_name(l.cls)));
    out += l.pids.empty() ? "\n" : fmt::format(" pid {}\n", fmt::join(l.pids, ","));
    for (const auto& e : l.evidence) out += fmt::format("      {}\n", terminal_text(e));
    out += fmt::format("      next: {}\n", terminal_text(l.next_step));
  }
  return out;
}

// A GPU reset: what blocked it, and what the reset command said.
std::string reset_lines(const reclaim::ResetOutcome& reset, const Style& style) {
  std::string out = style.bold(fmt::format("Reset of GPU {}:\n", reset.gpu));
  for (const auto& b : reset.blockers) out += fmt::format("  blocked: {}\n", terminal_text(b));
  for (const auto& n : reset.notes) out += fmt::format("  note: {}\n", terminal_text(n));
  if (!reset.attempted) return out;
  // nvidia-smi's own lines, each on a line of its own (W2-19: not one line
  // with "\n" shown).
  std::vector<std::string> said;
  for_each_line(reset.output, [&](std::string_view l) {
    if (!trim(l).empty()) said.push_back(terminal_text(trim(l)));
  });
  out += fmt::format("  ran: {}\n  exit {}{}", terminal_text(reset.command), reset.exit_code,
                     said.size() == 1 ? ": " + said.front() + "\n"
                     : said.empty()   ? "\n"
                                      : ":\n");
  if (said.size() > 1)
    for (const auto& l : said) out += fmt::format("    {}\n", l);
  return out;
}

// free_text before the lines of prose are fitted: respawners and notes, the signals
// sent, each GPU's result, resets, and a driver that failed while verifying.
std::string free_lines(const reclaim::ReclaimReport& r, const Style& style,
                       const reclaim::Plan* plan) {
  std::string out;
  if (r.interrupted)
    out += style.yellow("Interrupted: stopped waiting; this is what had been done.\n");
  for (const auto& resp : r.respawners)
    out += style.yellow(respawner_line(resp, r.settled_seconds));
  for (const auto& n : r.notes) out += "Note: " + terminal_text(n) + "\n";
  if (!r.actions.empty()) out += style.bold("Actions:\n") + action_lines(r.actions, plan);
  out += style.bold(fmt::format("Result after {} ({} round{}):\n", seconds_text(r.seconds),
                                r.rounds.size(), r.rounds.size() == 1 ? "" : "s"));
  for (const auto& g : r.gpus) {
    const bool reset = std::any_of(r.resets.begin(), r.resets.end(), [&](const auto& x) {
      return x.succeeded && x.gpu.index == g.gpu.index;  // a MIG device's reset is its GPU's
    });
    out += gpu_result_lines(g, r.leftovers, reset, style);
  }
  for (const auto& reset : r.resets) out += reset_lines(reset, style);
  if (!r.source_error.empty()) {
    std::string per_gpu = gpu_problems_text("NVML failed while verifying", r.gpus);
    out += style.yellow(
        (per_gpu.empty() ? "NVML failed while verifying: " + terminal_text(r.source_error) : per_gpu) +
        "\n");
  }
  return out;
}

}  // namespace

std::string free_text(const reclaim::ReclaimReport& r, const Style& style,
                      const reclaim::Plan* plan, TableWidth width) {
  const std::string out = free_lines(r, style, plan);
  return width.limit() ? wrap_lines(out, *width.limit()) : out;
}

std::string gpu_problems_text(std::string_view heading,
                              const std::vector<reclaim::GpuRelease>& gpus) {
  std::vector<const reclaim::GpuRelease*> failed;
  for (const auto& g : gpus)
    if (!g.problem.empty()) failed.push_back(&g);
  if (failed.empty()) return "";
  if (failed.size() == 1)
    return fmt::format("{} GPU {}: {}", heading, failed[0]->gpu,
                       terminal_text(failed[0]->problem));
  std::vector<gpu::DeviceId> indices;
  std::string lines;
  for (const auto* g : failed) {
    indices.push_back(g->gpu);
    lines += fmt::format("\n  GPU {}: {}", g->gpu, terminal_text(g->problem));
  }
  return fmt::format("{} GPU {}:", heading, gpu::device_list(indices)) + lines;
}

nlohmann::ordered_json release_phases_json(const reclaim::GpuRelease& g) { return phases_json(g); }

nlohmann::ordered_json leftover_json(const reclaim::Leftover& l) {
  return {{"gpu", l.gpu},
          {"class", std::string(enum_name(l.cls))},
          {"pids", l.pids},
          {"evidence", l.evidence},
          {"next_step", l.next_step}};
}

// Where the engine's time went: each step and when it ended.
nlohmann::ordered_json steps_json(const std::vector<std::pair<std::string, double>>& steps) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [name, at] : steps)
    out.push_back({{"step", name}, {"done_at_seconds", seconds_value(at)}});
  return out;
}

nlohmann::ordered_json free_json(const reclaim::Plan& plan, const reclaim::ReclaimReport& r,
                                 bool dry_run, const std::vector<std::string>& warnings) {
  nlohmann::ordered_json actions = nlohmann::ordered_json::array(),
                         gpus = nlohmann::ordered_json::array(),
                         leftovers = nlohmann::ordered_json::array(),
                         respawners = nlohmann::ordered_json::array(),
                         resets = nlohmann::ordered_json::array();
  for (const auto& a : r.actions)
    actions.push_back({{"pid", a.id.pid},
                       {"start_time", a.id.start_time},
                       {"comm", a.comm},
                       {"signal", reclaim::signal_word(a.signal)},
                       {"via", a.via},
                       {"sent_at_seconds", seconds_value(a.sent_at)},
                       {"exited_at_seconds", seconds_json(a.exited_at)},
                       {"exiting_at_seconds", seconds_json(a.exiting_at)},
                       {"result", outcome_text(a)}});
  for (const auto& g : r.gpus)
    gpus.push_back({{"index", g.gpu},
                    {"uuid", g.uuid},
                    {"measured", g.measured},
                    {"memory_before_bytes", g.measured && g.before_read ? nlohmann::ordered_json(g.before) : nullptr},
                    {"memory_after_bytes", g.measured ? nlohmann::ordered_json(g.after()) : nullptr},
                    {"baseline_bytes", g.measured ? nlohmann::ordered_json(g.baseline) : nullptr},
                    {"threshold_bytes", g.measured ? nlohmann::ordered_json(g.threshold) : nullptr},
                    {"left_alone_bytes", g.left_alone_bytes},
                    {"freed", g.freed},
                    {"seconds_to_free", seconds_json(g.freed_at)},
                    {"release", phases_json(g)}});
  for (const auto& l : r.leftovers) leftovers.push_back(leftover_json(l));
  for (const auto& x : r.respawners)
    respawners.push_back({{"pid", x.id.pid},
                          {"start_time", x.id.start_time},
                          {"comm", x.comm},
                          {"respawns", x.respawns},
                          {"included", x.included},
                          {"stop_hint", x.stop_hint},
                          {"unit", x.unit.empty() ? nlohmann::ordered_json(nullptr)
                                                  : nlohmann::ordered_json(x.unit)},
                          {"restart", x.restart.empty() ? nlohmann::ordered_json(nullptr)
                                                        : nlohmann::ordered_json(x.restart)}});
  for (const auto& x : r.resets)
    resets.push_back({{"gpu", x.gpu},
                      {"blockers", x.blockers},
                      {"notes", x.notes},
                      {"attempted", x.attempted},
                      {"command", x.command},
                      {"output", x.output},
                      {"exit_code", x.exit_code},
                      {"succeeded", x.succeeded}});
  return {{"schema_version", kSchemaVersion},
          {"command", "free"},
          {"dry_run", dry_run},
          {"plan", plan_json(plan)},
          {"rounds", r.rounds.size()},
          {"actions", actions},
          {"gpus", gpus},
          {"leftovers", leftovers},
          {"respawners", respawners},
          {"resets", resets},
          {"notes", r.notes},
          {"settled_seconds", seconds_value(r.settled_seconds)},
          {"interrupted", r.interrupted},
          {gpu::source_words::kError, r.source_error.empty() ? nlohmann::ordered_json(nullptr)
                                              : nlohmann::ordered_json(r.source_error)},
          {"warnings", warnings},
          {"seconds", seconds_value(r.seconds)},
          {"steps", steps_json(r.steps)}};
}

std::string free_record(const reclaim::ReclaimReport& r) {
  // Plain concatenation: whatever made the full report fail must not fail here.
  std::string out = "gpureap free record:\n";
  for (const auto& a : r.actions)
    out += "  " + reclaim::signal_word(a.signal) + " pid " + std::to_string(a.id.pid) + " start " +
           std::to_string(a.id.start_time) +  " -> " + terminal_text(outcome_text(a)) + "\n";
  for (const auto& g : r.gpus)
    out += "  GPU " + gpu::device_text(g.gpu) + " " +
           (g.measured ? (g.before_read ? std::to_string(g.before) : "?") + " -> " + std::to_string(g.after()) + " bytes: " +
                             (g.freed ? "freed" : "STILL HELD")
                       : std::string("memory unknown: NOT VERIFIED")) +
           "\n";
  if (r.interrupted) out += "  interrupted\n";
  return out;
}

std::vector<std::string> free_warnings(const inventory::Inventory& inv,
                                       const std::vector<gpu::DeviceId>& gpus) {
  std::vector<std::string> out;
  if (inv.source_state == gpu::SourceState::partial) {
    // Only a selected GPU that NVML cannot read matters here; the others are verified.
    for (const auto& v : inv.gpus) {
      if (v.info.problem.empty() || !inventory::is_selected(gpus, v.info.id)) continue;
      out.push_back(fmt::format(
          "gpureap free: warning: {}; GPU {}'s holders come from /proc only and its release "
          "cannot be verified\n",
          terminal_text(v.info.problem), v.info.id));
    }
  } else if (inv.source_state != gpu::SourceState::ok) {
    out.push_back(fmt::format(
        "gpureap free: warning: {}; holders come from /proc only and release cannot be verified\n",
        terminal_text(inv.source_problem)));
  }
  for (const auto& w : inv.warnings)
    out.push_back(fmt::format("gpureap free: warning: {}\n", terminal_text(w)));
  return out;
}

}  // namespace gpureap::report
