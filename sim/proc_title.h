#pragma once
// Process titles as setproctitle sets them (SGLang's `sglang::scheduler_TP3`, vLLM's
// `VLLM::Worker_TP0`): the argv area is overwritten in place, so /proc/PID/cmdline
// reads the title, and comm takes its first 15 bytes.

#include <string>

namespace gpureap::sim {

/// Called once by main with its own argc/argv, before anything sets a title.
void remember_argv(int argc, char** argv);

/// Overwrites the argv area with `title` (cut to fit) and NUL padding; sets comm.
void set_process_title(const std::string& title);

}  // namespace gpureap::sim
