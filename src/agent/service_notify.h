#pragma once
// The agent under a `Type=notify` unit: readiness, status, reload, stop and the
// watchdog, told to systemd through libsystemd's sd_notify(3) (loaded at run
// time, util/libsystemd.h). Outside such a unit (no NOTIFY_SOCKET) there is no
// notifier and the agent runs as before; where libsystemd is missing, the
// notifier says so once and sends nothing.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace gpureap::agent {

class ServiceNotifier {
 public:
  /// The notifier the environment asks for: nullptr without NOTIFY_SOCKET. The
  /// watchdog is on when WATCHDOG_USEC is set (and WATCHDOG_PID, when set, is
  /// this process), as sd_watchdog_enabled(3) decides. `problem` is set when
  /// systemd waits for word that cannot be sent (no libsystemd).
  static std::shared_ptr<ServiceNotifier> from_environment(std::string* problem);

  /// READY=1 with the first STATUS=.
  void ready(const std::string& status);
  /// STATUS=, sent only when it differs from the last one.
  void status(const std::string& status);
  /// RELOADING=1 with MONOTONIC_USEC= (systemd >= 253 wants it); ready() ends it.
  void reloading();
  /// STOPPING=1.
  void stopping();
  /// How often to send watchdog(): half of WatchdogSec=, as sd_watchdog_enabled(3)
  /// advises; nullopt when no watchdog is asked for.
  std::optional<std::chrono::milliseconds> watchdog_interval() const { return watchdog_; }
  /// WATCHDOG=1: the main loop is alive.
  void watchdog();
  /// Messages that could not be sent (sd_notify failed), for the metrics or a test.
  std::uint64_t failures() const { return failures_; }

 private:
  using Notify = int (*)(int, const char*);
  explicit ServiceNotifier(Notify notify) : notify_(notify) {}
  void send(const std::string& state);

  Notify notify_;
  std::optional<std::chrono::milliseconds> watchdog_;
  std::string last_status_;
  std::uint64_t failures_ = 0;
};

}  // namespace gpureap::agent
