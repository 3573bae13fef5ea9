#pragma once
// gpureap's exit statuses (documented in --help and the README).
// `run` is the exception: it returns its command's status (tini's contract).

namespace gpureap::cli {

inline constexpr int kExitOk = 0;  // done: status shown / every selected GPU freed / GPUs free
inline constexpr int kExitStillHeld = 1;  // free: memory still held after the plan (classified)
inline constexpr int kExitUsage = 2;      // bad flags or input
inline constexpr int kExitSystem = 3;  // system error: NVML unusable when required, lock held, I/O
inline constexpr int kExitNothingToDo = 4;  // free: no holder matched the selection
inline constexpr int kExitTimeout = 5;      // wait: the GPUs were not free before --timeout

inline constexpr const char* kExitCodesHelp =
    "Exit status:\n"
    "  0  success (free: every selected GPU verified back at its baseline; wait: GPUs free)\n"
    "  1  free: GPU memory still held after reclaim (each leftover is classified)\n"
    "  2  usage error (bad flag, selector, size or duration)\n"
    "  3  system error (NVML unusable where required, or a selected GPU it cannot read;\n"
    "     another free holds the lock, I/O)\n"
    "  4  free: nothing to do (no holder matched the selection)\n"
    "  5  wait: timed out before the GPUs were free\n"
    "  run: the command's own status; 128+N if it was killed by signal N; 127 not found; 126 not\n"
    "       executable; 1 if the command exited 0 but GPU memory stayed held after teardown;\n"
    "       3 if it exited 0 but the release could not be measured (NVML failed or hung)";

}  // namespace gpureap::cli
