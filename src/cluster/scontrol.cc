#include "cluster/scontrol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "proc/spawn.h"
#include "util/host_name.h"
#include "util/text.h"

namespace gpureap::cluster {

bool NodeState::drained() const {
  // The base state comes first, then "+FLAG"s: DRAIN appears as a flag
  // ("IDLE+DRAIN") or, in older spellings, as DRAINED/DRAINING.
  std::string_view rest = state;
  while (!rest.empty()) {
    auto plus = rest.find('+');
    std::string_view word = rest.substr(0, plus);
    if (word == "DRAIN" || word == "DRAINED" || word == "DRAINING") return true;
    rest.remove_prefix(plus == std::string_view::npos ? rest.size() : plus + 1);
  }
  return false;
}

Result<NodeState> parse_node_state(std::string_view text) {
  NodeState out;
  auto field = [&](std::string_view key) -> std::optional<std::size_t> {
    // A key starts the text or follows a space ("State=" also ends "CurrentState=" in
    // no version, but "Reason=" must not match inside another value).
    for (std::size_t at = text.find(key); at != std::string_view::npos; at = text.find(key, at + 1))
      if (at == 0 || text[at - 1] == ' ' || text[at - 1] == '\n') return at + key.size();
    return std::nullopt;
  };
  auto state = field("State=");
  if (!state) return fail("scontrol's node record has no State= field");
  auto end = text.find_first_of(" \n", *state);
  out.state = std::string(text.substr(*state, end == std::string_view::npos ? end : end - *state));
  if (auto reason = field("Reason=")) {
    std::string_view r = text.substr(*reason);
    r = r.substr(0, r.find('\n'));
    r = trim(r);
    // Slurm appends who set it and when: " [root@2026-12-03T13:29:11]".
    if (r.ends_with(']'))
      if (auto open = r.rfind(" ["); open != std::string_view::npos) r = r.substr(0, open);
    if (r != "(null)") out.reason = std::string(r);
  }
  return out;
}

std::vector<std::string> drain_argv(const std::string& scontrol, const std::string& node,
                                    const std::string& reason) {
  // One argument per key=value: scontrol gets the reason whole, no shell between.
  return {scontrol, "update", "nodename=" + node, "state=drain", "reason=" + reason};
}

std::vector<std::string> resume_argv(const std::string& scontrol, const std::string& node) {
  return {scontrol, "update", "nodename=" + node, "state=resume"};
}

Result<std::string> Scontrol::run(const std::vector<std::string>& argv,
                                  std::chrono::steady_clock::time_point deadline) const {
  deadline = std::min(deadline, std::chrono::steady_clock::now() + timeout_);
  auto r = proc::spawn_captured(argv, deadline);
  if (!r) return std::unexpected(r.error());
  std::string said(trim(r->output));
  if (r->timed_out)
    return fail(fmt::format("{} did not answer in time and was killed{}", path_,
                            said.empty() ? "" : ": " + said));
  if (r->exit.how != proc::ChildExit::How::exited || r->exit.status != 0)
    return fail(fmt::format("{} {} failed (exit status {}){}", path_,
                            argv.size() > 1 ? argv[1] : "", r->exit.exit_code(),
                            said.empty() ? "" : ": " + said));
  return r->output;
}

Result<NodeState> Scontrol::show_node(const std::string& node,
                                      std::chrono::steady_clock::time_point deadline) const {
  auto out = run({path_, "-o", "show", "node", node}, deadline);
  if (!out) return std::unexpected(out.error());
  return parse_node_state(*out);
}

Result<void> Scontrol::drain(const std::string& node, const std::string& reason,
                             std::chrono::steady_clock::time_point deadline) const {
  auto out = run(drain_argv(path_, node, reason), deadline);
  if (!out) return std::unexpected(out.error());
  return {};
}

Result<void> Scontrol::resume(const std::string& node,
                              std::chrono::steady_clock::time_point deadline) const {
  auto out = run(resume_argv(path_, node), deadline);
  if (!out) return std::unexpected(out.error());
  return {};
}

std::string scontrol_from_environment() {
  const char* env = std::getenv("GPUREAP_SCONTROL");
  return env && *env ? env : std::string(kDefaultScontrol);
}

std::string node_name_from_environment() {
  const char* env = std::getenv("SLURMD_NODENAME");
  if (env && *env) return env;
  std::string name = host_name();
  return name.substr(0, name.find('.'));
}

}  // namespace gpureap::cluster
