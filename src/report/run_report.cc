#include "report/run_report.h"

#include <fmt/format.h>

#include <sys/wait.h>

#include <algorithm>

#include "report/names.h"
#include "report/free_report.h"
#include "report/json.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::report {

std::string run_line(const std::string& text) {
  // Every line goes through terminal_text: they carry cgroup paths, evidence about
  // processes and messages that quote them.
  return "gpureap run: " + terminal_text(text) + "\n";
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
    text += run_line(fmt::format("{} process(es) of the run still alive after SIGKILL: {}",
                                 out.teardown.survivors.size(), pids));
  }
  for (const auto& l : out.leftovers) {
    auto held = std::find_if(out.held.begin(), out.held.end(),
                             [&](const auto& h) { return h.index == l.gpu; });
    std::string used;
    if (out.release)
      for (const auto& g : out.release->gpus)
        if (g.index == l.gpu && g.used) used = format_bytes(*g.used);
    text += run_line(fmt::format(
        "GPU {} memory still held after the teardown: {} used, free means at most {} [{}]", l.gpu,
        used.empty() ? "?" : used, held != out.held.end() ? format_bytes(held->threshold) : "?",
        to_string(l.cls)));
    for (const auto& e : l.evidence) text += "    " + terminal_text(e) + "\n";
    if (!l.next_step.empty()) text += "    next: " + terminal_text(l.next_step) + "\n";
  }
  if (out.memory_unverified()) {
    std::string why = out.unverified;
    if (out.release)
      for (const auto& g : out.release->gpus)
        if (!g.problem.empty()) why += (why.empty() ? "" : "; ") + g.problem;
    text += run_line("GPU memory not verified: " + why +
                     "; the run's GPUs may still hold memory (see `gpureap status`)");
  } else if (out.release && !out.release->all_freed && out.leftovers.empty()) {
    text += run_line("GPU memory the run held is not back at baseline" +
                     (out.release->nvml_error.empty()
                          ? std::string()
                          : " (NVML: " + out.release->nvml_error + ")"));
  }
  return text;
}

nlohmann::ordered_json run_json(const std::vector<std::string>& argv,
                                const supervise::RunOutcome& out, int exit_code) {
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
                {"seconds", out.teardown.seconds}};

  J gpus = J::array();
  for (const auto& h : out.held) {
    const reclaim::GpuRelease* r = nullptr;
    if (out.release)
      for (const auto& g : out.release->gpus)
        if (g.index == h.index) r = &g;
    gpus.push_back({{"index", h.index},
                    {"used_at_teardown_bytes", h.used},
                    {"baseline_bytes", h.baseline},
                    {"threshold_bytes", h.threshold},
                    {"run_bytes", h.run_bytes},
                    {"other_bytes", h.other_bytes},
                    {"used_after_bytes", r && r->used ? J(*r->used) : J(nullptr)},
                    {"freed", r != nullptr && r->freed_at.has_value() && r->problem.empty()},
                    {"seconds_to_free", r ? opt(r->freed_at) : J(nullptr)},
                    {"problem", r && !r->problem.empty() ? J(r->problem) : J(nullptr)}});
  }
  J leftovers = J::array();
  for (const auto& l : out.leftovers) leftovers.push_back(leftover_json(l));

  return {{"schema_version", kSchemaVersion},
          {"command", "run"},
          {"exit_code", exit_code},
          {"run_id", out.run_id},
          {"containment", out.mode == supervise::Containment::cgroup ? "cgroup" : "subreaper"},
          {"cgroup", out.cgroup_path.empty() ? J(nullptr) : J(out.cgroup_path)},
          {"no_cgroup_reason", out.no_cgroup_reason.empty() ? J(nullptr) : J(out.no_cgroup_reason)},
          {"cmd", command},
          {"stop_signal", opt(out.stop_signal)},
          {"reaper_lost", out.reaper_lost},
          {"teardown", teardown},
          {"gpus", gpus},
          {"leftovers", leftovers},
          {"memory_verified", !out.memory_unverified()},
          {"memory_released", out.memory_released()},
          {"unverified", out.memory_unverified() ? J(out.unverified) : J(nullptr)},
          {"nvml_problem", out.nvml_problem.empty() ? J(nullptr) : J(out.nvml_problem)},
          {"warnings", out.warnings},
          {"seconds", out.seconds}};
}

}  // namespace gpureap::report
