#include "util/pattern.h"

#include <re2/re2.h>

namespace gpureap {

Result<Pattern> Pattern::compile(std::string_view text) {
  RE2::Options options;
  // Bytes, not UTF-8: a command line may hold any bytes, and std::regex (which
  // this replaced) also saw one character per byte.
  options.set_encoding(RE2::Options::EncodingLatin1);
  // POSIX '.' matches a newline too (`python -c` scripts hold newlines).
  options.set_dot_nl(true);
  options.set_max_mem(kMaxMemory);
  // RE2 would otherwise print its errors; library code never prints.
  options.set_log_errors(false);
  auto re = std::make_shared<const RE2>(re2::StringPiece(text.data(), text.size()), options);
  if (!re->ok()) {
    if (re->error_code() == RE2::ErrorPatternTooLarge)
      return fail("pattern too large (it would need more than 32 MiB to run)");
    // RE2's message quotes the offending part, which can be most of a 128 KiB
    // pattern: keep its start.
    std::string why = re->error();
    if (why.size() > 100) why = why.substr(0, 97) + "...";
    return fail(why);
  }
  if (int size = re->ProgramSize(); size > kMaxProgramSize)
    return fail("pattern too complex: it compiles to " + std::to_string(size) +
                " instructions, at most " + std::to_string(kMaxProgramSize) +
                " are accepted (the time to search a command line grows with this size)");
  return Pattern(std::move(re), std::string(text));
}

bool Pattern::search(std::string_view subject) const {
  return RE2::PartialMatch(re2::StringPiece(subject.data(), subject.size()), *re_);
}

}  // namespace gpureap
