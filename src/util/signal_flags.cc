#include "util/signal_flags.h"

namespace gpureap {
namespace {

// Per signal number: the flag and number its handler stores into (lock-free atomics of
// pointers are async-signal-safe to read).
std::atomic<std::atomic<bool>*> g_flag[NSIG];
std::atomic<std::atomic<int>*> g_number[NSIG];

extern "C" void on_caught(int sig) {
  if (sig <= 0 || sig >= NSIG) return;
  if (std::atomic<int>* number = g_number[sig].load()) number->store(sig);
  if (std::atomic<bool>* flag = g_flag[sig].load()) flag->store(true);
}

}  // namespace

SignalFlags& SignalFlags::raise_on(int sig, std::atomic<bool>& flag, std::atomic<int>* number) {
  g_flag[sig].store(&flag);
  g_number[sig].store(number);
  struct sigaction action {};
  action.sa_handler = on_caught;
  struct sigaction old {};
  ::sigaction(sig, &action, &old);
  replaced_.emplace_back(sig, old);
  return *this;
}

SignalFlags::~SignalFlags() {
  for (auto it = replaced_.rbegin(); it != replaced_.rend(); ++it) {
    ::sigaction(it->first, &it->second, nullptr);
    g_flag[it->first].store(nullptr);
    g_number[it->first].store(nullptr);
  }
}

}  // namespace gpureap
