// Sizes, durations and the plan's numeric flags, as users type them.

#include "capacity/plan_args.h"
#include "fuzz/fuzz_input.h"
#include "util/units.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpureap;
  const std::string_view text = fuzz::as_text(data, size);

  if (auto bytes = parse_size(text, true)) (void)format_bytes(*bytes);
  if (auto bytes = parse_size(text, false)) (void)format_bytes(*bytes);
  if (auto d = parse_duration(text)) {
    fuzz::check(d->count() >= 0);
    (void)format_duration(*d);
  }
  (void)capacity::parse_size_flag("--gpu-memory", text);
  if (auto fractions = capacity::parse_mem_fraction(text))
    for (double f : *fractions) fuzz::check(f > 0 && f <= 1);
  (void)capacity::parse_kv_dtype(text);
  (void)capacity::parse_hicache_size(text);
  return 0;
}
