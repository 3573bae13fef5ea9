#include "report/help_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "report/table_layout.h"

namespace gpureap::report {

std::string wrap_help(std::string_view help, std::size_t columns) {
  // The description, before "Usage:", is prose broken by hand for a wider screen:
  // its lines at the margin are joined into paragraphs again, then wrapped; indented
  // lines (examples, lists) keep their breaks.
  std::size_t usage = help.starts_with("Usage:") ? 0 : help.find("\nUsage:");
  usage = usage == std::string_view::npos ? 0 : usage;
  std::string text;
  bool joinable = false;  // the last line is prose that a next prose line continues
  for (std::size_t start = 0; start < usage;) {
    const std::size_t nl = std::min(help.find('\n', start), usage);
    const std::string_view line = help.substr(start, nl - start);
    const bool prose = !line.empty() && line.front() != ' ';
    if (prose && joinable)
      text += ' ';
    else if (start > 0)
      text += '\n';
    text += line;
    joinable = prose;
    start = nl + 1;
  }
  if (usage > 0) text += '\n';
  text += help.substr(usage > 0 ? usage + 1 : 0);
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
