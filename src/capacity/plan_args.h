#pragma once
// The values `gpureap plan` takes on its command line, parsed and checked.
// Every error names the flag and the text the user typed.

#include <cstdint>
#include <string_view>
#include <vector>

#include "capacity/model_spec.h"
#include "util/result.h"

namespace gpureap::capacity {

/// A size flag such as --gpu-memory or --host-memory: a number with a unit
/// ("97887MiB", "96GiB", "408GB"). A bare number is an error, so "96" cannot
/// silently mean 96 bytes; so is zero.
Result<std::uint64_t> parse_size_flag(std::string_view flag, std::string_view text);

/// --mem-fraction: one fraction ("0.88") or a sweep "FROM:TO:STEP"
/// ("0.80:0.95:0.01", TO included). Every value must lie in (0, 1]; a sweep
/// needs FROM <= TO, STEP > 0 and at most 1000 points. Values are rounded to
/// six decimals so 0.80 + 15 * 0.01 is exactly 0.95.
Result<std::vector<double>> parse_mem_fraction(std::string_view text);

/// --kv-dtype: bf16 (also "auto", "bfloat16", "fp16", "float16": 2 bytes) or
/// fp8_e4m3 (also "fp8", "fp8_e5m2": 1 byte).
Result<KvDtype> parse_kv_dtype(std::string_view text);

/// --hicache-size: SGLang's flag is a number of GB (1e9 bytes) per rank, so a
/// bare number means GB here too ("48" = 48e9 bytes); a number with a unit is
/// also accepted ("44.7GiB"). Must be positive.
Result<std::uint64_t> parse_hicache_size(std::string_view text);

/// --tp: a whole number from 1 to kMaxTensorParallel.
Result<int> parse_tensor_parallel(std::string_view text);

/// A token count flag (--context-len: at least 1; --avg-prompt, --avg-output:
/// at least 0): a whole number up to kMaxContextLen. Errors name `flag`.
Result<std::int64_t> parse_token_count(std::string_view flag, std::string_view text,
                                       std::int64_t min);

/// --hicache-ratio: a finite multiple of the GPU pool, above 0 and at most 1000.
Result<double> parse_hicache_ratio(std::string_view text);

}  // namespace gpureap::capacity
