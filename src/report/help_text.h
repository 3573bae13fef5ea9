#pragma once
// gpureap's help text as laid out for a screen: every help wrapped at word boundaries to
// 80 columns, a continuation lined up with the column of descriptions, and each command's
// exit statuses as one block. The order (cli/help_format): Usage, the description's
// prose, positionals and options, its sections (Examples), the exit statuses. cli/help_format gives CLI11 the layout and calls these. Pure.

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace gpureap::report {

/// The width help is wrapped to: a screen's, whatever the terminal.
inline constexpr std::size_t kHelpColumns = 80;

/// One exit status a command documents (cli/exit_codes.h has the tables).
struct ExitStatusLine {
  const char* code;     // "0", "128+N", "run"
  const char* meaning;  // one sentence, never broken by hand
};

/// `text` with its lines at the margin joined into paragraphs (prose broken by hand);
/// indented lines (examples, lists) and blank lines keep their breaks. Pure.
std::string refill_prose(std::string_view text);

/// `help` (the formatter's text, its prose refilled) wrapped at spaces to `columns`: a
/// line's continuation starts at its description column (after its first gap of two
/// spaces or more) when there is one, else two columns in. Pure.
std::string wrap_help(std::string_view help, std::size_t columns = kHelpColumns);

/// "Exit status:" and one line a status, "  CODE  meaning", the codes padded to one
/// column: a help footer that wrap_help() wraps once (each continuation under its
/// meaning) and the man page turns into tagged paragraphs. Pure.
std::string exit_status_help(std::span<const ExitStatusLine> statuses);

}  // namespace gpureap::report
