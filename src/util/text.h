#pragma once
// Small text helpers every parser needs: trimming and walking lines of a text
// already in memory (util/line_reader.h reads a file line by line).

#include <string>
#include <string_view>

namespace gpureap {

/// `s` without leading and trailing ASCII whitespace (space, \t, \n, \r, \v, \f).
std::string_view trim(std::string_view s);

/// `s` with ASCII letters in lower case (names, UUIDs; no locale).
std::string ascii_lower(std::string_view s);

/// Calls `fn(line)` for each line of `text`, without its '\n'; a last line
/// without one is passed too, an empty text has no lines.
template <typename Fn>
void for_each_line(std::string_view text, Fn&& fn) {
  while (!text.empty()) {
    const auto nl = text.find('\n');
    fn(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
}

}  // namespace gpureap
