#include "reclaim/gpu_reset.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <cstdlib>

#include "gpu/vendor.h"
#include "inventory/agent_client.h"
#include "inventory/reset_blockers.h"
#include "proc/spawn.h"

namespace gpureap::reclaim {

std::string nvidia_smi_path() {
  if (const char* p = std::getenv("GPUREAP_NVIDIA_SMI"); p && *p) return p;
  return "nvidia-smi";
}

namespace {

// Still there? Only to drop a blocker that a yield removed (the agent's NVML
// worker): nothing is signalled on this answer.
bool still_running(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

constexpr std::chrono::milliseconds kAgentAnswer{5000};

// One blocker as a sentence of the reset's outcome: who, what it holds, the next step.
std::string blocker_sentence(const inventory::Blocker& b) {
  if (b.cls == inventory::BlockerClass::persistence_mode)
    return fmt::format("{}; turn it off first: {} (gpureap does not change GPU settings)", b.what,
                       b.next_step);
  std::string who = b.process.comm.empty() ? std::string("not in this /proc") : b.process.comm;
  if (!b.known_as.empty() && b.known_as != b.process.comm) who += ", " + b.known_as;
  return fmt::format("pid {} ({}) {} [{}]: a reset needs no client on the GPU; next: {}",
                     b.process.id.pid, who, b.what, inventory::enum_name(b.cls), b.next_step);
}

}  // namespace

ResetOutcome reset_gpu(const inventory::GpuView& view, const inventory::Inventory& inv,
                       gpu::GpuSource& gpus, const std::optional<std::string>& agent_socket) {
  ResetOutcome out;
  out.gpu = view.info.id;
  const std::string bus = view.info.pci_bus_id;
  // Preconditions, from nvidia-smi(1) and field reports (NVSentinel#1690).
  // AMD (docs/amd.md): reported, never acted on, until amd-smi's reset and its
  // preconditions are modelled; nvidia-smi is NVIDIA's only.
  if (gpu::vendor_of(view.info.uuid) == gpu::Vendor::amd) {
    out.blockers.push_back(
        "gpureap does not reset AMD GPUs (docs/amd.md); with no process left on it, `amd-smi "
        "reset` can, under its own preconditions");
    return out;
  }
  if (::geteuid() != 0) out.blockers.push_back("a GPU reset needs root");
  if (bus.empty()) out.blockers.push_back("the GPU's PCI bus id is unknown (NVML unavailable)");
  // Every client of the physical GPU, by the one rule `status --blockers` prints
  // (inventory/reset_blockers.h): a MIG device's reset is its whole GPU's. The agent is
  // no blocker here: it is asked to let go below. Processes with only nvidiactl/uvm open
  // are judged after that, since the agent's NVML helper may be one of them.
  std::vector<const inventory::Blocker*> driver_clients;
  const auto found = inventory::reset_blockers_of(inv, view.info.id);
  if (found)
    for (const auto& b : found->blockers) {
      if (b.cls == inventory::BlockerClass::driver_client)
        driver_clients.push_back(&b);
      else
        out.blockers.push_back(blocker_sentence(b));
    }
  out.notes.push_back(
      "NVLink peers are not checked: before Ampere, and on Ampere NVSwitch systems without Fabric "
      "Manager, every NVLink peer must be reset in the same command");
  if (!out.blockers.empty()) return out;

  // A running agent keeps an NVML session open: a client, like any other. It lets
  // go when asked and answers once it has.
  bool yielded = false;
  if (agent_socket) {
    auto until = inventory::ask_agent_to_yield_nvml(*agent_socket, kResetSourceYield, kAgentAnswer);
    yielded = until.has_value();
    if (yielded) out.notes.push_back("the running agent (gpureap watch) let go of NVML for the reset");
  }
  auto resume = [&](const std::string& note) {
    if (yielded) (void)inventory::ask_agent_to_resume_nvml(*agent_socket, note, kAgentAnswer);
  };
  for (const auto* b : driver_clients) {
    if (yielded && !still_running(b->process.id.pid)) continue;  // the agent's helper, gone
    out.blockers.push_back(blocker_sentence(*b));
  }
  if (!out.blockers.empty()) {
    resume(fmt::format("gpureap free --reset of GPU {} not attempted: {}", out.gpu,
                       out.blockers.front()));
    return out;
  }

  gpus.disconnect();  // our own NVML session would make the reset fail "in use"
  std::vector<std::string> argv = {nvidia_smi_path(), "--gpu-reset", "-i", bus};
  for (const auto& a : argv) out.command += (out.command.empty() ? "" : " ") + a;
  out.attempted = true;
  // nvidia-smi's own exit status decides; one that finished in time is never
  // reported killed, even when its output ended right at the deadline (D11).
  auto run = proc::spawn_captured(argv, std::chrono::steady_clock::now() + std::chrono::minutes(2));
  if (run) {
    out.output = std::move(run->output);
    if (run->timed_out) out.output += "\n(gpureap: nvidia-smi did not finish in time and was killed)";
    out.exit_code = run->exit.exit_code();
    // spawn_captured's words when the exec itself failed: say how to name another.
    if (out.exit_code == 127 && out.output.starts_with("cannot run "))
      out.output += "(gpureap: set GPUREAP_NVIDIA_SMI to the nvidia-smi to run)";
  }
  out.succeeded = out.exit_code == 0;
  resume(fmt::format("gpureap free --reset of GPU {} ({}): {}", out.gpu, bus,
                     out.succeeded ? "reset succeeded"
                                   : fmt::format("nvidia-smi failed (exit {})", out.exit_code)));
  return out;
}

}  // namespace gpureap::reclaim
