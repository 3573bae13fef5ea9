// An SGLang start-up log, and the calibration derived from it.

#include "capacity/model_preset.h"
#include "capacity/sglang_log.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpureap;
  using namespace gpureap::capacity;
  static const ModelSpec kimi = spec_of(**find_preset("Kimi-K2.5"));
  static const ModelSpec qwen = spec_of(**find_preset("Qwen3-8B"));

  auto log = parse_sglang_log(fuzz::as_text(data, size), "sglang.log");
  if (!log) return 0;
  fuzz::check(log->ranks.size() <= SglangLogParser::kMaxRanks);
  for (const ModelSpec* m : {&kimi, &qwen}) (void)calibrate(*log, m->kv, m->context_len, "sglang.log");
  return 0;
}
