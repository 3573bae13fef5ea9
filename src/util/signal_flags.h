#pragma once
// Signals caught into flags (one helper for `free`, `top` and `watch`): the handler only
// stores into an atomic, and the command's loops and waits read it. No SA_RESTART, so a
// blocking wait (a key, a poll) returns at once with EINTR and sees the flag.

#include <atomic>
#include <csignal>
#include <utility>
#include <vector>

namespace gpureap {

/// Catches signals into flags while it lives; the destructor restores the handlers it
/// replaced, newest first (`run --free-first` goes on to launch a command, whose Ctrl-C
/// must not be swallowed by free's flag). One object per signal at a time.
class SignalFlags {
 public:
  SignalFlags() = default;
  ~SignalFlags();
  SignalFlags(const SignalFlags&) = delete;
  SignalFlags& operator=(const SignalFlags&) = delete;

  /// From now on `sig` sets `flag` and, when given, stores its number in `number`.
  /// Both must outlive this object.
  SignalFlags& raise_on(int sig, std::atomic<bool>& flag, std::atomic<int>* number = nullptr);

  /// The handlers stay when this object goes (for a command whose return ends the
  /// process: a stop signal during its teardown must find them, not the default that
  /// kills). The flags must then live as long as the process (globals).
  void keep_until_exit() { replaced_.clear(); }

 private:
  std::vector<std::pair<int, struct sigaction>> replaced_;
};

}  // namespace gpureap
