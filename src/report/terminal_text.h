#pragma once
// Text that came from processes (comm, command lines, cgroup paths, user names,
// environment values, paths) is untrusted: any local user chooses it. Before it
// reaches a terminal it goes through terminal_text, so an escape sequence in a
// process name is shown, never executed by the operator's terminal.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gpureap::report {

/// `text` with every byte a terminal could act on made visible, C-style:
///  - newline, tab, carriage return as \n \t \r; the other C0 controls and DEL as \xNN
///    (ESC is \x1b, BEL is \x07);
///  - bytes that are not valid UTF-8 as \xNN;
///  - C1 controls (U+0080..U+009F, which some terminals obey as CSI and the like) and
///    bidirectional overrides and isolates (U+202A..U+202E, U+2066..U+2069, which
///    reorder what is displayed) as \uNNNN.
/// Everything else, printable UTF-8 included, is unchanged; a backslash is not
/// doubled, so the form is for reading, not for parsing back. Pure.
std::string terminal_text(std::string_view text);

/// terminal_text(text) cut to at most `width` bytes, ending in "..." when cut, and
/// never in the middle of a UTF-8 character or of an escape.
std::string terminal_text(std::string_view text, std::size_t width);

/// terminal_text(text) broken at spaces into lines of at most `width` bytes, for a
/// table cell that wraps rather than cuts a reason mid-word; a single word wider
/// than `width` is cut as above. Always at least one line (empty for an empty text).
std::vector<std::string> terminal_text_lines(std::string_view text, std::size_t width);

}  // namespace gpureap::report
