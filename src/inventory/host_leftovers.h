#pragma once
// Host leftovers of the same orphans (issue 24, item 6): shared-memory segments in
// /dev/shm that an inference server's processes created and, torn down by SIGKILL,
// never unlinked, so the tmpfs fills until the next start dies with SIGBUS (SGLang's
// stale_shm_cleanup.py names them). Reported only: gpureap removes nothing here.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gpureap::inventory {

struct ShmLeftover {
  std::string path;        // /dev/shm/sgl_shm_<kind>_<pid>_<rand>
  pid_t creator = 0;       // the pid its name carries
  std::uint64_t bytes = 0; // its size
};

/// The creator pid a segment's name carries: SGLang's `sgl_shm_<kind>_<pid>_<rand>` and
/// `multi_tokenizer_args_<pid>`; 0 for any other name.
pid_t shm_creator(const std::string& name);

/// The segments in `shm_dir` whose creator is gone: no such process under `proc_root`, or
/// one that started after the segment was last written (the pid was reused).
std::vector<ShmLeftover> find_shm_leftovers(const std::string& shm_dir,
                                            const std::string& proc_root);

}  // namespace gpureap::inventory
