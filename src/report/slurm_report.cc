#include "report/slurm_report.h"

#include <fmt/format.h>

#include "report/device_json.h"
#include "gpu/gpu_select.h"
#include "report/free_report.h"
#include "report/json.h"
#include "reclaim/leftovers.h"
#include "report/terminal_text.h"
#include "util/units.h"

namespace gpureap::report {
namespace {

constexpr std::size_t kMaxReason = 250;

std::string comma_pids(const std::vector<pid_t>& pids) {
  std::string s;
  for (pid_t p : pids) s += fmt::format("{}{}", s.empty() ? "" : ",", p);
  return s;
}

std::string classes_text(const std::vector<reclaim::LeftoverClass>& classes) {
  std::string s;
  for (auto c : classes) s += (s.empty() ? "" : "+") + std::string(enum_name(c));
  return s.empty() ? "unknown" : s;
}

// One GPU as the reason and the text show it: "GPU 1 driver_held 12.0 GiB pids 7,8".
std::string held_text(const cluster::HeldGpu& h) {
  // Memory still coming back, alone: "GPU 0 10.0 GiB still releasing".
  if (h.classes == std::vector<reclaim::LeftoverClass>{reclaim::LeftoverClass::still_releasing})
    return fmt::format("GPU {} {} still releasing", h.gpu, format_bytes(h.bytes));
  std::string s =
      fmt::format("GPU {} {} {}", h.gpu, classes_text(h.classes), format_bytes(h.bytes));
  if (!h.pids.empty())
    s += fmt::format(" pid{} {}", h.pids.size() > 1 ? "s" : "", comma_pids(h.pids));
  return s;
}

nlohmann::ordered_json held_json(const std::vector<cluster::HeldGpu>& held) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& h : held) {
    auto classes = nlohmann::ordered_json::array();
    for (auto c : h.classes) classes.push_back(std::string(enum_name(c)));
    out.push_back({{"gpu", h.gpu}, {"bytes", h.bytes}, {"classes", classes}, {"pids", h.pids}});
  }
  return out;
}

nlohmann::ordered_json node_json(const NodeOutcome& n) {
  return {{"name", n.node},
          {"action", std::string(enum_name(n.step))},
          {"reason",
           n.reason.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(n.reason)},
          {"error",
           n.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(n.error)}};
}

std::string node_text(const NodeOutcome& n, const Style& style) {
  std::string node = terminal_text(n.node);
  std::string reason = terminal_text(n.reason);
  std::string out;
  switch (n.step) {
    case NodeStep::none:
      break;
    case NodeStep::drained:
      out = style.yellow(fmt::format("Drained {}: {}\n", node, reason));
      break;
    case NodeStep::not_drained:
      out = style.red(fmt::format("Not drained {} (the reason would be: {})\n", node, reason));
      break;
    case NodeStep::resumed:
      out = style.green(fmt::format("Resumed {} (it was drained by gpureap: {})\n", node, reason));
      break;
    case NodeStep::kept_drained:
      out = fmt::format("{} stays drained: {}\n", node, reason);
      break;
    case NodeStep::left_alone:
      out = fmt::format("{} is drained or down for another reason, left alone: {}\n", node, reason);
      break;
  }
  if (!n.error.empty()) out += style.red("scontrol: " + terminal_text(n.error) + "\n");
  return out;
}

std::string held_lines(const std::vector<cluster::HeldGpu>& held, const Style& style) {
  std::string out;
  for (const auto& h : held) out += style.red("Still held: " + held_text(h) + "\n");
  return out;
}

std::string warning_lines(const std::vector<std::string>& warnings) {
  std::string out;
  for (const auto& w : warnings) out += "warning: " + terminal_text(w) + "\n";
  return out;
}

}  // namespace

namespace {

// scontrol passes the reason on as is, and sinfo prints it raw: no control bytes.
std::string slurm_reason_text(std::string text) {
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  if (text.size() > kMaxReason) text = text.substr(0, kMaxReason - 3) + "...";
  return text;
}

}  // namespace

std::string drain_reason(const std::vector<cluster::HeldGpu>& held, std::string_view error,
                         std::string_view context) {
  std::string suffix = context.empty() ? "" : fmt::format(" ({})", context);
  if (!error.empty())
    return slurm_reason_text(
        fmt::format("{} GPUs not verified{}: {}", cluster::kReasonPrefix, suffix, error));
  std::string gpus;
  for (const auto& h : held) gpus += (gpus.empty() ? "" : "; ") + held_text(h);
  return slurm_reason_text(fmt::format("{} {}{}", cluster::kReasonPrefix, gpus, suffix));
}

std::string gate_reason(const std::vector<GateFinding>& findings) {
  std::string gpus;
  for (const auto& f : findings) {
    gpus += fmt::format("{}GPU {} {} {}", gpus.empty() ? "" : "; ", f.gpu, f.what,
                        format_bytes(f.bytes));
    if (!f.pids.empty())
      gpus += fmt::format(" pid{} {}", f.pids.size() > 1 ? "s" : "", comma_pids(f.pids));
  }
  return slurm_reason_text(fmt::format("{} {} (gpureap watch)", cluster::kReasonPrefix, gpus));
}

std::string slurm_job_text(std::string_view mode, const cluster::SlurmJob& job,
                           const cluster::JobCheck& check, const NodeOutcome& node,
                           const Style& style) {
  std::string out = style.bold(fmt::format(
      "gpureap slurm {}: job {} on {}; the job's GPUs: {}; checked: {}\n", mode, job.id,
      terminal_text(node.node), check.job_gpus.empty() ? "none" : gpu::device_list(check.job_gpus),
      check.checked.empty() ? "none" : gpu::device_list(check.checked)));
  out += warning_lines(check.warnings);
  if (!check.error.empty()) out += style.red("Not verified: " + terminal_text(check.error) + "\n");
  if (check.freed) {
    out += plan_text(check.plan, style);
    out += free_text(*check.freed, style);
  } else if (check.error.empty() && check.held.empty()) {
    out += mode == "epilog" ? fmt::format(
                                  "Nothing to do: no leftover of job {}, and the GPUs are "
                                  "at baseline.\n",
                                  job.id)
                            : "The job's GPUs are at baseline.\n";
  }
  out += held_lines(check.held, style);
  return out + node_text(node, style);
}

nlohmann::ordered_json slurm_job_json(std::string_view mode, const cluster::SlurmJob& job,
                                      const cluster::JobCheck& check, const NodeOutcome& node) {
  nlohmann::ordered_json doc;
  doc["schema_version"] = kSchemaVersion;
  doc["command"] = fmt::format("slurm {}", mode);
  doc["job_id"] = job.id;
  doc["job_gpus"] = check.job_gpus;
  doc["checked_gpus"] = check.checked;
  doc["free"] =
      check.freed ? free_json(check.plan, *check.freed, false) : nlohmann::ordered_json(nullptr);
  doc["held"] = held_json(check.held);
  doc["error"] =
      check.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(check.error);
  doc["node"] = node_json(node);
  doc["warnings"] = check.warnings;
  return doc;
}

std::string slurm_health_text(const cluster::HealthCheck& check,
                              const std::optional<cluster::NodeState>& state,
                              const NodeOutcome& node, const Style& style) {
  std::string out = style.bold(
      fmt::format("gpureap slurm health: {}; GPUs checked: {}{}\n", terminal_text(node.node),
                  check.checked.empty() ? "none" : gpu::device_list(check.checked),
                  state ? fmt::format("; node state {}", terminal_text(state->state)) : ""));
  out += warning_lines(check.warnings);
  if (!check.error.empty()) out += style.red("Not verified: " + terminal_text(check.error) + "\n");
  if (!check.skipped.empty())
    out += style.yellow("Skipped: an epilog, a prolog or a gpureap free is freeing GPU memory (" +
                        terminal_text(check.skipped) +
                        "); nothing is drained or resumed: checked next time.\n");
  if (check.healthy()) out += style.green("Healthy: no GPU memory held outside running jobs.\n");
  out += held_lines(check.held, style);
  return out + node_text(node, style);
}

nlohmann::ordered_json slurm_health_json(const cluster::HealthCheck& check,
                                         const std::optional<cluster::NodeState>& state,
                                         const NodeOutcome& node) {
  nlohmann::ordered_json doc;
  doc["schema_version"] = kSchemaVersion;
  doc["command"] = "slurm health";
  doc["checked_gpus"] = check.checked;
  doc["healthy"] = check.healthy();
  doc["held"] = held_json(check.held);
  doc["error"] =
      check.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(check.error);
  doc["skipped"] = check.skipped.empty() ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(check.skipped);
  doc["node_state"] =
      state ? nlohmann::ordered_json{{"state", state->state}, {"reason", state->reason}}
            : nlohmann::ordered_json(nullptr);
  doc["node"] = node_json(node);
  doc["warnings"] = check.warnings;
  return doc;
}

}  // namespace gpureap::report
