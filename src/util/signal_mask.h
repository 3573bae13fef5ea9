#pragma once
// Threads that must not take the signals the main thread waits on.

#include <pthread.h>
#include <signal.h>

namespace gpureap {

/// For its scope, blocks SIGTERM, SIGINT and SIGHUP in the calling thread, so a
/// thread started meanwhile (ours or a library's) inherits the mask and never
/// takes them: the kernel then delivers them to a thread that does not block
/// them, the main one, whose poll(2) they interrupt. A helper thread that took
/// SIGTERM would leave the main loop asleep until its timeout.
class StopSignalsBlocked {
 public:
  StopSignalsBlocked() {
    sigset_t block;
    sigemptyset(&block);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, &old_);
  }
  ~StopSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  StopSignalsBlocked(const StopSignalsBlocked&) = delete;
  StopSignalsBlocked& operator=(const StopSignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

}  // namespace gpureap
