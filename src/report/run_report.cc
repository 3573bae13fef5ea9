#include "report/run_report.h"

#include <fmt/format.h>

#include <sys/wait.h>

#include <algorithm>

#include "gpu/source_words.h"
#include "report/device_json.h"
#include "reclaim/leftovers.h"
#include "report/free_report.h"
#include "report/json.h"
#include "report/table_layout.h"
#include "report/terminal_text.h"
#include "util/units.h"
#include "util/plural.h"

namespace gpureap::report {

std::string run_line(const std::string& text) {
  // Every line goes through terminal_text: they carry cgroup paths, evidence about
  // processes and messages that quote them.
  return "gpureap run: " + terminal_text(text) + "\n";
}

std::string run_line(const std::string& text, std::optional<std::size_t> columns) {
  return columns ? wrap_lines(run_line(text), *columns) : run_line(text);
}

std::string run_problems_text(const supervise::RunOutcome& out) {
  std::string text;
  for (const auto& w : out.warnings) text += run_line("warning: " + w);
  if (out.reaper_lost)
    text += run_line(
        "the reaper process was killed: the command's exit status is unknown and orphans "
        "may have escaped; see `gpureap status`");
  if (!out.teardown.survivors.empty()) {
    std::string pids;
    for (const auto& id : out.teardown.survivors)
      pids += (pids.empty() ? "" : ", ") + std::to_string(id.pid);
    text += run_line(fmt::format("{} of the run still alive after SIGKILL: {}",
                                 count_of(out.teardown.survivors.size(), "process", "processes"),
                                 pids));
  }
  for (const auto& l : out.leftovers) {
    const reclaim::GpuRelease* g = nullptr;
    if (out.release)
      for (const auto& x : out.release->gpus)
        if (x.gpu == l.gpu) g = &x;
    text += run_line(fmt::format(
        "GPU {} memory still held after the teardown: {} used, free means at most {} [{}]", l.gpu,
        g && g->used ? format_bytes(*g->used) : "?", g ? format_bytes(g->threshold) : "?",
        enum_name(l.cls)));
    for (const auto& e : l.evidence) text += "    " + terminal_text(e) + "\n";
    if (!l.next_step.empty()) text += "    next: " + terminal_text(l.next_step) + "\n";
  }
  if (out.memory_unverified()) {
    // One line per GPU NVML cannot read (a lost GPU alone gives two reasons).
    std::string per_gpu =
        out.release ? gpu_problems_text("NVML cannot read", out.release->gpus) : "";
    const std::string head = "GPU memory not verified (the run's GPUs may still hold memory: see "
                             "`gpureap status`): ";
    text += per_gpu.empty() ? run_line(head + out.unverified)
                            : "gpureap run: " + terminal_text(head) + per_gpu + "\n";
  } else if (out.release && !out.release->all_freed && out.leftovers.empty()) {
    text += run_line("GPU memory the run held is not back at baseline" +
                     (out.release->source_error.empty()
                          ? std::string()
                          : " (NVML: " + out.release->source_error + ")"));
  }
  return text;
}

nlohmann::ordered_json run_not_started_json(const std::vector<std::string>& argv,
                                            const ReplaceRecord& replace, int exit_code) {
  return {{"schema_version", kSchemaVersion},
          {"command", "run"},
          {"exit_code", exit_code},
          {"started", false},
          {"cmd", {{"argv", argv}, {"pid", nullptr}}},
          {"replace", replace_json(replace)}};
}

nlohmann::ordered_json run_json(const std::vector<std::string>& argv,
                                const supervise::RunOutcome& out, int exit_code,
                                const ReplaceRecord* replace) {
  using J = nlohmann::ordered_json;
  auto opt = [](const auto& v) { return v ? J(*v) : J(nullptr); };
  J command = {{"argv", argv}, {"pid", out.cmd_pid ? J(out.cmd_pid) : J(nullptr)}};
  std::optional<int> status, signal;
  if (out.cmd_wait_status && WIFEXITED(*out.cmd_wait_status))
    status = WEXITSTATUS(*out.cmd_wait_status);
  if (out.cmd_wait_status && WIFSIGNALED(*out.cmd_wait_status))
    signal = WTERMSIG(*out.cmd_wait_status);
  command["exit_status"] = opt(status);
  command["signal"] = opt(signal);
  command["launch_failure"] = out.launch_failure ? J(out.launch_failure->message) : J(nullptr);

  J survivors = J::array();
  for (const auto& id : out.teardown.survivors) survivors.push_back(id.pid);
  J teardown = {{"processes", out.teardown.processes},
                {"rounds", out.teardown.rounds},
                {"survivors", survivors},
                {"cgroup_killed", out.teardown.cgroup_killed},
                {"empty", out.teardown.empty},
                {"seconds", seconds_value(out.teardown.seconds)}};

  J gpus = J::array();
  std::string unverified = out.unverified;
  for (const auto& g : out.release ? out.release->gpus : std::vector<reclaim::GpuRelease>{}) {
    gpus.push_back({{"index", g.gpu},
                    {"used_at_teardown_bytes", g.measured ? J(g.before) : J(nullptr)},
                    {"baseline_bytes", g.baseline},
                    {"threshold_bytes", g.measured ? J(g.threshold) : J(nullptr)},
                    {"run_bytes", g.own_bytes},
                    {"other_bytes", g.left_alone_bytes},
                    {"used_after_bytes", opt(g.used)},
                    {"freed", g.freed_at.has_value() && g.problem.empty()},
                    {"seconds_to_free", seconds_json(g.freed_at)},
                    {"release", release_phases_json(g)},
                    {"problem", g.problem.empty() ? J(nullptr) : J(g.problem)}});
    if (!g.problem.empty()) unverified += (unverified.empty() ? "" : "; ") + g.problem;
  }
  J leftovers = J::array();
  for (const auto& l : out.leftovers) leftovers.push_back(leftover_json(l));

  return {{"schema_version", kSchemaVersion},
          {"command", "run"},
          {"exit_code", exit_code},
          {"started", true},
          {"run_id", out.run_id},
          {"containment", out.mode == supervise::Containment::cgroup ? "cgroup" : "subreaper"},
          {"cgroup", out.cgroup_path.empty() ? J(nullptr) : J(out.cgroup_path)},
          {"no_cgroup_reason", out.no_cgroup_reason.empty() ? J(nullptr) : J(out.no_cgroup_reason)},
          {"cmd", command},
          {"replace", replace ? replace_json(*replace) : J(nullptr)},
          {"stop_signal", opt(out.stop_signal)},
          {"reaper_lost", out.reaper_lost},
          {"teardown", teardown},
          {"gpus", gpus},
          {"leftovers", leftovers},
          {"memory_verified", !out.memory_unverified()},
          {"memory_released", out.memory_released()},
          {"unverified", out.memory_unverified() ? J(unverified) : J(nullptr)},
          {gpu::source_words::kProblem, out.source_problem.empty() ? J(nullptr) : J(out.source_problem)},
          {"warnings", out.warnings},
          {"seconds", seconds_value(out.seconds)}};
}

}  // namespace gpureap::report
