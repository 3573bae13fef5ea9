#pragma once
// Running a short-lived helper program (nvidia-smi) with its output captured
// and a deadline on the whole of it: fork, exec, read stdout+stderr from one
// pipe, wait for the exit on a pidfd, SIGKILL what is still running at the
// deadline.

#include <chrono>
#include <string>
#include <vector>

#include "proc/process_handle.h"
#include "util/result.h"

namespace gpureap::proc {

/// What a captured run produced.
struct CapturedRun {
  std::string output;      // stdout and stderr, interleaved as written
  ChildExit exit;          // how it ended (SIGKILL when timed_out)
  bool timed_out = false;  // still running at the deadline: it was killed
};

/// Runs `argv` (argv[0] looked up in PATH), its stdin the caller's, its stdout
/// and stderr one pipe we read until EOF or `deadline`. Then waits on its pidfd
/// for the exit, at most until `deadline`: a child that finished in time is
/// reaped with its own status, even when its output ended right at the
/// deadline; one still running is SIGKILLed and reaped (timed_out). When exec
/// fails the output is "cannot run ARGV0: REASON\n" and the exit status 127.
/// Fails (nothing ran) when argv is empty or the pipe or fork fails.
Result<CapturedRun> spawn_captured(const std::vector<std::string>& argv,
                                   std::chrono::steady_clock::time_point deadline);

}  // namespace gpureap::proc
