#include "report/run_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "report/names.h"
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

}  // namespace gpureap::report
