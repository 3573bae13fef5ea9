// /proc/PID/environ (any process sets its own GPUREAP_RUN_ID, SLURM_JOB_ID, ...), the
// NAME=VALUE of `free --env`, and run ids.

#include <string>

#include "fuzz/fuzz_input.h"
#include "proc/environ.h"
#include "proc/run_id.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpureap;
  const std::string_view text = fuzz::as_text(data, size);

  if (auto id = proc::run_id_from_environ(text)) (void)proc::run_owner(*id);
  (void)proc::run_owner(text);
  // An entry found by name is found whole.
  if (auto value = proc::environ_value(text, "SLURM_JOB_ID"))
    fuzz::check(proc::environ_has(text, {"SLURM_JOB_ID", std::string(*value)}));
  if (auto entry = proc::parse_env_entry(text)) fuzz::check(entry->text() == text);
  const std::string made = proc::make_run_id(text, 4242);
  // A run id we make names its owner.
  fuzz::check(proc::run_owner(made) == 4242);
  (void)proc::default_run_name(text);
  return 0;
}
