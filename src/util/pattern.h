#pragma once
// Regular expressions from users (`free --match`), run in RE2: time linear in the
// subject, memory bounded, no recursion, so an untrusted command line of any size
// or a hostile pattern cannot crash or stall gpureap. RE2's header stays in
// pattern.cc: this header is included wherever a Selection is.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "util/result.h"

namespace re2 {
class RE2;
}

namespace gpureap {

/// A compiled regular expression (RE2 syntax: POSIX extended plus Perl classes such
/// as \d \s \w; no backreferences or lookaround). Cheap to copy (shared, immutable).
class Pattern {
 public:
  /// Memory RE2 may use for one pattern (program and DFA cache, grown on demand);
  /// a pattern whose program needs more is rejected. With 8 MiB the DFA for 996
  /// 'a's gave up on a command line crafted for it and RE2 fell back to its NFA
  /// (0.9 s on 200 KB); with 32 MiB the DFA holds (0.02 s on 2 MB).
  static constexpr std::int64_t kMaxMemory = 32 << 20;
  /// Most instructions a compiled pattern may have. Where the DFA still gives up
  /// (`x.{990}y` has too many states), the NFA's time is the subject's length times
  /// this size: 1 s for 2 MB of hostile command line at the limit. Ordinary
  /// patterns ("python.*sglang") compile to a few dozen.
  static constexpr int kMaxProgramSize = 1000;

  /// Compiles `text`. Fails (the message says why, in RE2's words) when the
  /// pattern is invalid, unsupported (backreferences, lookaround), too big for
  /// kMaxMemory or more complex than kMaxProgramSize.
  static Result<Pattern> compile(std::string_view text);

  /// True when the pattern matches somewhere in `subject` (unanchored). Any bytes
  /// are accepted: the pattern is compiled in Latin-1 mode, so a non-UTF-8 byte in a
  /// command line is a character like any other.
  bool search(std::string_view subject) const;

  /// The pattern as given.
  const std::string& text() const { return text_; }

 private:
  Pattern(std::shared_ptr<const re2::RE2> re, std::string text)
      : re_(std::move(re)), text_(std::move(text)) {}
  std::shared_ptr<const re2::RE2> re_;
  std::string text_;
};

}  // namespace gpureap
