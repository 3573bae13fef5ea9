#include "reclaim/gpu_reset.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace gpureap::reclaim {
namespace {

// Runs argv with stdout+stderr captured, bounded by `timeout_ms`.
int run_captured(const std::vector<std::string>& argv, std::string& output, int timeout_ms) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return -1;
  pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    ::dup2(pipefd[1], 1);
    ::dup2(pipefd[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  ::close(pipefd[1]);
  // One deadline for reading and for the exit: EOF on the pipe comes before the child
  // is waitable, so wait on its pidfd for the time left rather than asking once (D11).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto left_ms = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    return static_cast<int>(std::max<long long>(left, 0));
  };
  char buf[4096];
  pollfd pfd{pipefd[0], POLLIN, 0};
  while (left_ms() > 0) {
    int r = ::poll(&pfd, 1, std::min(left_ms(), 100));
    if (r <= 0) continue;
    ssize_t n = ::read(pipefd[0], buf, sizeof buf);
    if (n <= 0) break;
    output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipefd[0]);
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd >= 0) {
    pollfd exit_pfd{pidfd, POLLIN, 0};
    while (left_ms() > 0 && ::poll(&exit_pfd, 1, left_ms()) == 0) {
    }
    ::close(pidfd);
  }
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) == 0) {
    ::kill(pid, SIGKILL);  // our own unreaped child
    ::waitpid(pid, &status, 0);
    output += "\n(gpureap: nvidia-smi did not finish in time and was killed)";
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

std::string nvidia_smi_path() {
  if (const char* p = std::getenv("GPUREAP_NVIDIA_SMI"); p && *p) return p;
  return "nvidia-smi";
}

ResetOutcome reset_gpu(const inventory::GpuView& view, const inventory::Inventory& inv,
                       gpu::GpuSource& gpus) {
  ResetOutcome out;
  out.gpu = view.info.index;
  const std::string bus = view.info.pci_bus_id;
  // Preconditions, from nvidia-smi(1) and field reports (NVSentinel#1690).
  if (::geteuid() != 0) out.blockers.push_back("a GPU reset needs root");
  if (bus.empty()) out.blockers.push_back("the GPU's PCI bus id is unknown (NVML unavailable)");
  for (const auto& gh : view.holders)
    out.blockers.push_back(
        fmt::format("pid {} ({}) has /dev/nvidia{} open: a reset needs no client on the GPU",
                    gh.holder.id.pid, gh.holder.comm, view.info.minor.value_or(view.info.index)));
  if (view.info.persistence_mode.value_or(false))
    out.blockers.push_back(fmt::format(
        "persistence mode is on and counts as a client; turn it off first: nvidia-smi -pm 0 -i {} "
        "(gpureap does not change GPU settings)",
        bus));
  for (const auto& h : inv.other_holders)
    out.blockers.push_back(
        fmt::format("pid {} ({}) holds nvidiactl/nvidia-uvm (a monitoring agent or other client)",
                    h.id.pid, h.comm));
  out.notes.push_back(
      "NVLink peers are not checked: before Ampere, and on Ampere NVSwitch systems without Fabric "
      "Manager, every NVLink peer must be reset in the same command");
  if (!out.blockers.empty()) return out;

  gpus.disconnect();  // our own NVML session would make the reset fail "in use"
  std::vector<std::string> argv = {nvidia_smi_path(), "--gpu-reset", "-i", bus};
  for (const auto& a : argv) out.command += (out.command.empty() ? "" : " ") + a;
  out.attempted = true;
  out.exit_code = run_captured(argv, out.output, 120000);
  out.succeeded = out.exit_code == 0;
  return out;
}

}  // namespace gpureap::reclaim
