#include "report/table_layout.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "report/terminal_text.h"

namespace gpureap::report {
namespace {

// A UTF-8 continuation byte takes no column of its own.
bool starts_character(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
}

// The length of the SGR escape ("\033[...m") at the start of `s`, 0 when none.
std::size_t sgr_length(std::string_view s) {
  if (s.size() < 3 || s[0] != '\033' || s[1] != '[') return 0;
  const auto end = s.find('m', 2);
  return end == std::string_view::npos ? 0 : end + 1;
}

std::string pad(std::string text, std::size_t width, bool right) {
  if (text.size() >= width) return text;
  std::string fill(width - text.size(), ' ');
  return right ? fill + text : text + fill;
}

// One line of `text` (no newline) broken to `columns`.
// Where a line's continuation starts: its description column (the text after its
// first gap of two spaces or more) for Hang::description, else two past its indent.
// `indent_end`: the byte where the line's first visible non-space is.
std::size_t hang_column(std::string_view line, std::size_t indent, std::size_t indent_end,
                        Hang hang) {
  if (hang == Hang::description && indent == 0) return 0;  // prose
  if (hang == Hang::description)
    if (auto gap = line.find("  ", indent_end); gap != std::string_view::npos)
      if (auto text = line.find_first_not_of(' ', gap); text != std::string_view::npos)
        return visible_width(line.substr(0, text));
  return indent + 2;
}

// The spaces a line starts with as a terminal shows them (a colour may open before them:
// "\033[31m  sglang server", issue 53 #7), and the byte after them.
std::pair<std::size_t, std::size_t> leading_spaces(std::string_view line) {
  std::size_t spaces = 0, i = 0;
  while (i < line.size()) {
    if (const std::size_t esc = sgr_length(line.substr(i))) {
      i += esc;
      continue;
    }
    if (line[i] != ' ') break;
    ++spaces;
    ++i;
  }
  return {spaces, i};
}

void wrap_line(std::string_view line, std::size_t columns, Hang hang, std::string& out) {
  const auto [indent, indent_end] = leading_spaces(line);
  const std::size_t hang_at = hang_column(line, indent, indent_end, hang);
  std::string prefix;  // what each continuation line starts with
  std::string active;  // the colour open at this point ("" after a reset)
  bool first = true;
  while (true) {
    // Find the end of the longest piece that fits, preferring the last space.
    std::size_t width = first ? 0 : prefix.size();
    std::size_t i = 0, space = std::string_view::npos, fit_end = 0;
    std::string active_at_space, active_at_fit;
    std::string running = active;
    bool overflow = false;
    while (i < line.size()) {
      if (const std::size_t esc = sgr_length(line.substr(i))) {
        std::string_view code = line.substr(i, esc);
        running = code == "\033[0m" || code == "\033[m" ? std::string() : std::string(code);
        i += esc;
        continue;
      }
      if (starts_character(line[i])) {
        if (width + 1 > columns) {
          if (line[i] == ' ') {  // the space that does not fit is a break all the same
            space = i;
            active_at_space = running;
          }
          overflow = true;
          break;
        }
        ++width;
        if (line[i] == ' ' && width - 1 > (first ? indent : prefix.size())) {
          space = i;
          active_at_space = running;
        }
      }
      ++i;
      // A whole character (its continuation bytes included) fits up to here.
      if (i == line.size() || starts_character(line[i])) {
        fit_end = i;
        active_at_fit = running;
      }
    }
    std::string_view piece = line;
    std::string_view rest;
    std::string next_active = running;
    if (overflow) {
      if (space != std::string_view::npos) {
        piece = line.substr(0, space);
        rest = line.substr(space + 1);
        // A break inside a run of spaces ("/dev/nvidia0  MIG-...") ends no line with
        // a space and starts none with one.
        while (piece.size() > 1 && piece.back() == ' ') piece.remove_suffix(1);
        while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
        next_active = active_at_space;
      } else {
        piece = line.substr(0, std::max<std::size_t>(fit_end, 1));
        rest = line.substr(piece.size());
        next_active = active_at_fit;
      }
    }
    if (!first) out += prefix + active;
    out += piece;
    if (rest.empty() || !overflow) return;
    if (!next_active.empty()) out += "\033[0m";
    out += "\n";
    if (first)
      prefix =
          std::string(hang_at <= columns / 2 ? hang_at : std::min(indent + 2, columns / 2), ' ');
    first = false;
    active = next_active;
    line = rest;
  }
}

}  // namespace

std::size_t visible_width(std::string_view line) {
  std::size_t width = 0;
  for (std::size_t i = 0; i < line.size();) {
    if (const std::size_t esc = sgr_length(line.substr(i))) {
      i += esc;
      continue;
    }
    if (starts_character(line[i])) ++width;
    ++i;
  }
  return width;
}

std::string wrap_lines(std::string_view text, std::size_t columns, Hang hang) {
  if (columns == 0) return std::string(text);
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    if (visible_width(line) <= columns)
      out += line;
    else
      wrap_line(line, columns, hang, out);
    if (nl == std::string_view::npos) break;
    out += '\n';
    text.remove_prefix(nl + 1);
  }
  return out;
}

std::string render_table(const std::vector<TableColumn>& columns,
                         const std::vector<std::vector<TableCell>>& rows, const Style& style,
                         std::string_view indent, TableWidth width, std::size_t min_last) {
  const std::size_t n = columns.size();
  if (n == 0) return {};
  const auto limit = width.limit();
  std::vector<std::size_t> w(n);
  for (std::size_t i = 0; i < n; ++i) {
    w[i] = columns[i].header.size();
    for (const auto& row : rows)
      if (i < row.size()) w[i] = std::max(w[i], terminal_text(row[i].text).size());
    if (limit && columns[i].cap > 0 && i + 1 < n)
      w[i] = std::min(w[i], std::max(columns[i].cap, columns[i].header.size()));
  }
  std::vector<bool> shown(n, true);
  auto used = [&] {
    std::size_t u = indent.size();
    for (std::size_t i = 0; i + 1 < n; ++i)
      if (shown[i]) u += w[i] + 1;
    return u;
  };
  if (limit) {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i + 1 < n; ++i)
      if (columns[i].drop > 0) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return columns[a].drop < columns[b].drop;
    });
    for (std::size_t i : order) {
      if (used() + min_last <= *limit) break;
      shown[i] = false;
    }
  }
  const std::size_t last_room = !limit            ? std::numeric_limits<std::size_t>::max()
                                : *limit > used() ? *limit - used()
                                                  : 0;

  std::string header(indent);
  for (std::size_t i = 0; i < n; ++i) {
    if (!shown[i]) continue;
    header += i + 1 < n
                  ? pad(columns[i].header, w[i], columns[i].right) + " "
                  : columns[i].header.substr(0, std::min(columns[i].header.size(), last_room));
  }
  std::string out = style.dim(header) + "\n";
  for (const auto& row : rows) {
    std::string line(indent);
    for (std::size_t i = 0; i < n && i < row.size(); ++i) {
      if (!shown[i]) continue;
      const bool last = i + 1 == n;
      std::string text = last && !limit ? terminal_text(row[i].text)
                                        : terminal_text(row[i].text, last ? last_room : w[i]);
      // Pad on the visible text so colour codes don't break the columns.
      std::string fill(last || text.size() >= w[i] ? 0 : w[i] - text.size(), ' ');
      std::string shown_text = row[i].sgr.empty() ? text : style.paint(row[i].sgr, text);
      line += columns[i].right ? fill + shown_text : shown_text + fill;
      if (!last) line += " ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace gpureap::report
