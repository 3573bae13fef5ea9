#include "report/help_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "report/table_layout.h"

namespace gpureap::report {

std::string refill_prose(std::string_view text) {
  // Prose is broken by hand for a wider screen: its lines at the margin are joined
  // into paragraphs again (wrap_help breaks them for the screen); indented lines
  // (examples, lists) and blank lines keep their breaks.
  std::string out;
  bool joinable = false;  // the last line is prose that a next prose line continues
  for (std::size_t start = 0; start <= text.size();) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(start, nl - start);
    const bool prose = !line.empty() && line.front() != ' ';
    if (prose && joinable)
      out += ' ';
    else if (start > 0)
      out += '\n';
    out += line;
    joinable = prose;
    start = nl + 1;
  }
  return out;
}

std::string wrap_help(std::string_view help, std::size_t columns) {
  std::string text(help);
  while (text.ends_with("\n\n")) text.pop_back();  // CLI11 ends with a blank line
  return wrap_lines(text, columns, Hang::description);
}

std::string exit_status_help(std::span<const ExitStatusLine> statuses) {
  std::size_t width = 0;
  for (const auto& s : statuses) width = std::max(width, std::string_view(s.code).size());
  std::string out = "Exit status:";
  for (const auto& s : statuses) out += fmt::format("\n  {:<{}}  {}", s.code, width, s.meaning);
  return out;
}

}  // namespace gpureap::report
