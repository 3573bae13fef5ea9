#pragma once
// gpureap's exit statuses (documented in --help and the README).
// `run` is the exception: it returns its command's status (tini's contract).

namespace gpureap::cli {

inline constexpr int kExitOk = 0;  // done: status shown / every selected GPU freed / GPUs free
inline constexpr int kExitStillHeld = 1;  // free: memory still held after the plan (classified);
                                          // status --check: a problem (orphaned, driver-held, ghost);
                                          // status --blockers: a reset or MIG change is blocked
inline constexpr int kExitUsage = 2;      // bad flags or input
inline constexpr int kExitSystem = 3;  // system error: NVML unusable when required, lock held, I/O
inline constexpr int kExitNothingToDo = 4;  // free: no holder matched the selection
inline constexpr int kExitTimeout = 5;      // wait: the GPUs were not free before --timeout
inline constexpr int kExitGhost = 6;  // wait: a selected GPU is a ghost (busy with no process):
                                      // no wait frees it, so it fails at once

// The help footers: the whole table for `gpureap --help`, and for each command
// only the statuses it can return. They restate README's "Exit status" table;
// keep the three in step.
inline constexpr const char* kExitCodesHelp =
    "Exit status:\n"
    "  0  success (free: every selected GPU verified back at its baseline; wait: GPUs free)\n"
    "  1  free: GPU memory still held after reclaim (each leftover is classified, also\n"
    "     memory of holders the selection left alone)\n"
    "  2  usage error (bad flag, selector, number, size or duration; or no confirmation)\n"
    "  3  system error (NVML unusable where required, or a selected GPU it cannot read;\n"
    "     another free holds the lock, I/O)\n"
    "  4  free: nothing to do (no holder on the selected GPUs, memory at baseline)\n"
    "  5  wait: timed out before the GPUs were free\n"
    "  6  wait: a selected GPU is a ghost (busy with no process); said at once\n"
    "  run: the command's own status; 128+N if it was killed by signal N; 127 not found; 126 not\n"
    "       executable; 1 if the command exited 0 but GPU memory stayed held after teardown;\n"
    "       3 if it exited 0 but the release could not be measured (NVML failed or hung)";

inline constexpr const char* kStatusExitHelp =
    "Exit status:\n"
    "  0  shown (a GPU NVML cannot read is shown, marked, with what /proc shows); --check:\n"
    "     clean (no orphaned or driver-held memory, no ghost GPU); --blockers: nothing\n"
    "     blocks a reset or MIG change of the selected GPUs\n"
    "  1  --check: a problem (orphaned or driver-held memory, a ghost GPU); --blockers:\n"
    "     something blocks one of them\n"
    "  2  usage error (bad flag or --gpu selector)\n"
    "  3  system error (the device directory cannot be read); --check: unknown (NVML\n"
    "     unusable, a GPU it cannot read, holders it cannot see, no answer within --deadline);\n"
    "     --blockers: none seen, but NVML, a GPU or a PID namespace kept something from view";

inline constexpr const char* kFreeExitHelp =
    "Exit status:\n"
    "  0  every selected GPU verified back at its baseline (a narrowed free: its targets'\n"
    "     memory gone)\n"
    "  1  GPU memory still held after reclaim (each leftover is classified, also memory of\n"
    "     holders the selection left alone); or interrupted\n"
    "  2  usage error (bad flag, selector, number or duration; or no confirmation)\n"
    "  3  system error: NVML unusable, or a selected GPU it cannot read, so the release cannot\n"
    "     be measured; another free holds the lock (past --wait-lock); I/O\n"
    "  4  nothing to do (no holder on the selected GPUs, memory at baseline); 0 instead\n"
    "     with --ok-if-nothing";

inline constexpr const char* kTopExitHelp =
    "Exit status:\n"
    "  0  quit (q)\n"
    "  2  usage error (bad flag; stdin or stdout not a terminal; --json)\n"
    "  3  system error (the device directory cannot be read, the terminal cannot be driven)";

inline constexpr const char* kWaitExitHelp =
    "Exit status:\n"
    "  0  the selected GPUs are free\n"
    "  2  usage error (bad flag, selector, size or duration)\n"
    "  3  NVML unusable, or a selected GPU it cannot read (lost, hung)\n"
    "  5  timed out before the GPUs were free\n"
    "  6  a selected GPU is a ghost (busy with no process): said at once";

inline constexpr const char* kRunExitHelp =
    "Exit status:\n"
    "  the command's own status; 128+N if it was killed by signal N; 127 not found; 126 not\n"
    "  executable; 1 if the command exited 0 but GPU memory stayed held after teardown; 3 if it\n"
    "  exited 0 but the release could not be measured (NVML failed or hung).\n"
    "  Before the command starts: 2 usage error; --free-first: free's status (1, 2, 3);\n"
    "  --wait-free: 5 timed out, 6 a ghost GPU, 3 NVML unusable.";

inline constexpr const char* kPlanExitHelp =
    "Exit status:\n"
    "  0  planned (warnings such as prefill_oom_risk are in the output)\n"
    "  2  usage error (a flag, config.json, index or log out of range or malformed), or a\n"
    "     launch that cannot start (weights do not fit, no KV budget)\n"
    "  3  the GPU must be read through NVML (no --gpu-memory or --from-log) and NVML is\n"
    "     unusable or shows no GPU";

inline constexpr const char* kSlurmExitHelp =
    "Exit status:\n"
    "  0  the GPUs are clean (epilog: the job's leftovers freed; prolog: at baseline; health:\n"
    "     healthy, or skipped while a free held the free lock), or not clean and the node\n"
    "     drained with --when-held drain\n"
    "  1  GPU memory stays held (classified in the drain reason) and --when-held drain-fail or\n"
    "     fail, or the drain failed; health: held\n"
    "  2  usage error (bad flag; SLURM_JOB_ID unset or not a number; SLURM_JOB_GPUS malformed;\n"
    "     health: a --gpu this node does not have): nothing drained or resumed\n"
    "  3  the GPUs could not be verified (NVML unusable, a job GPU not found, the free lock\n"
    "     still held at the deadline, the state directory refused), or scontrol failed (health)";
inline constexpr const char* kWatchExitHelp =
    "Exit status:\n"
    "  0  stopped by SIGTERM or SIGINT\n"
    "  2  usage error (bad flag, duration, group, regular expression or options file)\n"
    "  3  could not start: another gpureap watch holds the lock, the socket or --listen\n"
    "     address cannot be bound, the state or device directory cannot be used, the\n"
    "     --textfile directory cannot be written";

inline constexpr const char* kLogExitHelp =
    "Exit status:\n"
    "  0  shown (also when no record matches, or none was written yet)\n"
    "  2  usage error (bad flag, --gpu selector, --since duration or time)\n"
    "  3  the state directory is refused, or an audit file cannot be read";

}  // namespace gpureap::cli
