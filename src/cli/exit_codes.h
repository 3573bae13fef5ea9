#pragma once
// gpureap's exit statuses (documented in --help and the README).
// `run` is the exception: it returns its command's status (tini's contract).

#include <array>
#include <cstddef>

#include "report/help_text.h"

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
// run --replace/--replace-orphans/--free-first: refused for now, nothing signalled: what
// holds CMD's GPUs cannot be freed without a person, or changed since the plan. sysexits'
// EX_TEMPFAIL ("try again later"), so that a unit's Restart= retries it while
// RestartPreventExitStatus=2 keeps naming only the final usage error (W4-03).
inline constexpr int kExitTryLater = 75;

// The exit statuses each command documents: one entry a status, its meaning one
// unbroken sentence. report/help_text's exit_status_help() lays them out for --help (wrapped
// once, at the help's width, each continuation under its meaning) and the man pages
// read the same entries as tagged paragraphs (man fills them to the reader's width).
// `gpureap --help` says them in brief; gpureap(1) has kExitStatuses whole. They restate
// README's "Exit status" table; keep the two in step.
using report::ExitStatusLine;
template <std::size_t N>
using ExitStatuses = std::array<ExitStatusLine, N>;

inline constexpr ExitStatuses<9> kExitStatuses = {{
    {"0", "success (free: every selected GPU verified back at its baseline; wait: GPUs free)"},
    {"1",
     "free: GPU memory still held after reclaim (each leftover is classified, also memory of "
     "holders the selection left alone); status --check: a problem; status --blockers: "
     "something blocks a reset or MIG change"},
    {"2", "usage error (bad flag, selector, number, size or duration; or no confirmation)"},
    {"3",
     "system error (NVML unusable where required, or a selected GPU it cannot read; another "
     "free holds the lock, I/O)"},
    {"4", "free: nothing to do (no holder on the selected GPUs, memory at baseline)"},
    {"5", "wait: timed out before the GPUs were free"},
    {"6", "wait, run --wait-free: a selected GPU is a ghost (busy with no process); said at once"},
    {"75",
     "run --replace, --replace-orphans, --free-first: refused for now, try again later (what "
     "holds the GPUs may not be freed without a person, or changed since the plan); nothing "
     "was signalled or started"},
    {"run",
     "the command's own status; 128+N if it was killed by signal N; 127 not found; 126 not "
     "executable; 1 if the command exited 0 but GPU memory stayed held after teardown; 3 if it "
     "exited 0 but the release could not be measured (NVML failed or hung)"},
}};

inline constexpr ExitStatuses<4> kStatusExits = {{
    {"0",
     "shown (a GPU NVML cannot read is shown, marked, with what /proc shows); --check: clean "
     "(no orphaned or driver-held memory, no ghost GPU); --blockers: nothing blocks a reset or "
     "MIG change of the selected GPUs"},
    {"1",
     "--check: a problem (orphaned or driver-held memory, a ghost GPU); --blockers: something "
     "blocks one of them"},
    {"2", "usage error (bad flag or --gpu selector)"},
    {"3",
     "system error (the device directory cannot be read); --check: unknown (NVML unusable, a "
     "GPU it cannot read, holders it cannot see, no answer within --deadline); --blockers: none "
     "seen, but NVML, a GPU or a PID namespace kept something from view"},
}};

inline constexpr ExitStatuses<5> kFreeExits = {{
    {"0",
     "every selected GPU verified back at its baseline (a narrowed free: its targets' memory "
     "gone)"},
    {"1",
     "GPU memory still held after reclaim (each leftover is classified, also memory of holders "
     "the selection left alone); or interrupted"},
    {"2", "usage error (bad flag, selector, number or duration; or no confirmation)"},
    {"3",
     "system error: NVML unusable, or a selected GPU it cannot read, so the release cannot be "
     "measured; an input/output error; another free holds the lock (past --wait-lock)"},
    {"4",
     "nothing to do (no holder on the selected GPUs, memory at baseline); 0 instead with "
     "--ok-if-nothing"},
}};

inline constexpr ExitStatuses<3> kTopExits = {{
    {"0", "quit (q)"},
    {"2", "usage error (bad flag; stdin or stdout not a terminal; --json)"},
    {"3", "system error (the device directory cannot be read, the terminal cannot be driven)"},
}};

inline constexpr ExitStatuses<5> kWaitExits = {{
    {"0", "the selected GPUs are free"},
    {"2", "usage error (bad flag, selector, size or duration)"},
    {"3", "NVML unusable, or a selected GPU it cannot read (lost, hung)"},
    {"5", "timed out before the GPUs were free"},
    {"6", "a selected GPU is a ghost (busy with no process): said at once"},
}};

inline constexpr ExitStatuses<9> kRunExits = {{
    {"N", "the command's own exit status"},
    {"128+N", "the command was killed by signal N"},
    {"127", "the command was not found"},
    {"126", "the command is not executable"},
    {"1",
     "the command exited 0, but GPU memory stayed held after teardown (explained on stderr; "
     "a failing command keeps its own status)"},
    {"3", "the command exited 0, but the release could not be measured (NVML failed or hung)"},
    {"2", "usage error, or a plan not confirmed at the prompt; nothing was started"},
    {"75",
     "--replace, --replace-orphans, --free-first: refused for now, try again later (no "
     "terminal and no --yes for what holds the GPUs, an instance it would free in part, or "
     "the GPUs changed since the plan); nothing was signalled or started"},
    {"1-6",
     "before the command starts, which it then does not: --replace, --replace-orphans, "
     "--free-first exit as free does (1 memory or a port still held, 3 not measured, 4 no such "
     "instance); --wait-free: 5 timed out, 6 a ghost GPU, 3 NVML unusable"},
}};

inline constexpr ExitStatuses<3> kPlanExits = {{
    {"0", "planned (warnings such as prefill_oom_risk are in the output)"},
    {"2",
     "usage error (a flag, config.json, index or log out of range or malformed), or a launch "
     "that cannot start (weights do not fit, no KV budget)"},
    {"3",
     "the GPU must be read through NVML (no --gpu-memory or --from-log) and NVML is unusable "
     "or shows no GPU"},
}};

inline constexpr ExitStatuses<4> kSlurmExits = {{
    {"0",
     "the GPUs are clean (epilog: the job's leftovers freed; prolog: at baseline; health: "
     "healthy, or skipped while a free held the free lock), or not clean and the node drained "
     "with --when-held drain"},
    {"1",
     "GPU memory stays held (classified in the drain reason) and --when-held drain-fail or "
     "fail, or the drain failed; health: held"},
    {"2",
     "usage error (bad flag; SLURM_JOB_ID unset or not a number; SLURM_JOB_GPUS malformed; "
     "health: a --gpu this node does not have): nothing drained or resumed"},
    {"3",
     "the GPUs could not be verified (NVML unusable, a job GPU not found, the free lock still "
     "held at the deadline, the state directory refused), or scontrol failed (health)"},
}};

inline constexpr ExitStatuses<3> kWatchExits = {{
    {"0", "stopped by SIGTERM or SIGINT"},
    {"2", "usage error (bad flag, duration, group, regular expression or options file)"},
    {"3",
     "could not start: another gpureap watch holds the lock, the socket or --listen address "
     "cannot be bound, the state or device directory cannot be used, the --textfile directory "
     "cannot be written"},
}};

inline constexpr ExitStatuses<3> kLogExits = {{
    {"0", "shown (also when no record matches, or none was written yet)"},
    {"2", "usage error (bad flag, --gpu selector, --since duration or time)"},
    {"3", "the state directory is refused, or an audit file cannot be read"},
}};

}  // namespace gpureap::cli
