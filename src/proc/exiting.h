#pragma once
// Whether the kernel attests that a process is dying: inside its exit, where it can run
// no more of its own code and holds nothing it will not let go of (free ends its wait for
// a holder whose memory is back on this, reclaim/escalation.h).

#include <sys/types.h>

#include <string>

namespace gpureap::proc {

/// True when every thread of process `pid` under `proc_root` is inside do_exit()
/// (PF_EXITING in PROC_ROOT/PID/task/TID/stat's flags, include/linux/sched.h) or already
/// a zombie. A fatal signal puts every thread there, and none comes back; a process that
/// caught SIGTERM, or whose leader alone has exited (the others still run), is not
/// exiting. False when it cannot be told (the process gone, a thread's stat unreadable):
/// only the kernel's word counts. The leader is read first: a process not exiting costs
/// one read. The caller holds the process's pidfd (the pid is still that process's).
bool exiting(pid_t pid, const std::string& proc_root);

}  // namespace gpureap::proc
