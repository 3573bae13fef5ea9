#pragma once
// A count and its noun, agreeing: "1 process", "3 processes", "0 GPUs". One helper for
// every line that counts something (issue 53 #12: "8 process(es)", "GPU 5 hold"). In
// util/ rather than report/ so that the run's own log lines (supervise/, below report/)
// use it too; it knows nothing of GPUs.

#include <cstddef>
#include <string>
#include <string_view>

namespace gpureap {

/// "1 process" / "2 processes": `n`, a space, then `one` when n == 1 and `many`
/// otherwise (0 takes the plural, as English does).
std::string count_of(std::size_t n, std::string_view one, std::string_view many);

/// The same with the regular plural, `one` + "s": "1 GPU", "2 GPUs".
std::string count_of(std::size_t n, std::string_view one);

/// The verb agreeing with `n` of something: "holds" / "hold", from the two forms.
std::string_view agreeing(std::size_t n, std::string_view singular, std::string_view plural);

}  // namespace gpureap
