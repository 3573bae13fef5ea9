#include "agent/service_notify.h"

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "util/libsystemd.h"

namespace gpureap::agent {
namespace {

// sd_watchdog_enabled(3)'s signature, declared here so that no header of
// libsystemd-dev is needed at build time (the functions' ABI is stable).
using WatchdogEnabled = int (*)(int, std::uint64_t*);

}  // namespace

std::shared_ptr<ServiceNotifier> ServiceNotifier::from_environment(std::string* problem) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (!socket || !*socket) return nullptr;
  std::string why;
  auto notify = reinterpret_cast<Notify>(libsystemd_symbol("sd_notify", &why));
  if (!notify) {
    if (problem)
      *problem = why + ": systemd is not told that the agent is ready (NOTIFY_SOCKET is set: "
                       "a Type=notify unit times out)";
    return nullptr;
  }
  std::shared_ptr<ServiceNotifier> notifier(new ServiceNotifier(notify));
  auto enabled = reinterpret_cast<WatchdogEnabled>(libsystemd_symbol("sd_watchdog_enabled"));
  std::uint64_t usec = 0;
  // 0: do not unset the variables (the NVML worker is our child, not systemd's
  // main pid, and NotifyAccess=main ignores it anyway).
  if (enabled && enabled(0, &usec) > 0 && usec > 0)
    notifier->watchdog_ = std::chrono::milliseconds(std::max<std::uint64_t>(1, usec / 2000));
  return notifier;
}

void ServiceNotifier::send(const std::string& state) {
  if (notify_(0, state.c_str()) <= 0) ++failures_;
}

void ServiceNotifier::ready(const std::string& status) {
  last_status_ = status;
  send("READY=1\nSTATUS=" + status);
}

void ServiceNotifier::status(const std::string& status) {
  if (status == last_status_) return;
  last_status_ = status;
  send("STATUS=" + status);
}

void ServiceNotifier::reloading() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const std::uint64_t usec =
      static_cast<std::uint64_t>(now.tv_sec) * 1000000u + static_cast<std::uint64_t>(now.tv_nsec) / 1000u;
  send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(usec));
}

void ServiceNotifier::stopping() { send("STOPPING=1"); }

void ServiceNotifier::watchdog() { send("WATCHDOG=1"); }

}  // namespace gpureap::agent
