#pragma once
// Tables that fit the terminal (issue 26 part 3): columns as wide as their widest
// cell, the last one (a command line) given the room that is left and cut with an
// ellipsis, so a row never wraps; columns of lesser importance dropped first when
// the terminal is narrow. Not on a terminal, the callers keep their fixed layout,
// byte for byte, for the scripts that read it.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "report/style.h"

namespace gpureap::report {

/// How wide a table may be.
struct TableWidth {
  /// The terminal's width; nullopt when stdout is not a terminal (and $COLUMNS is unset).
  std::optional<std::size_t> columns = std::nullopt;
  /// --wide: whole command lines, however long the row.
  bool wide = false;

  /// Neither a width nor --wide: the fixed layout of a pipe.
  bool fixed() const { return !columns && !wide; }
  /// The width rows are cut to; nullopt: none (--wide).
  std::optional<std::size_t> limit() const { return wide ? std::nullopt : columns; }
};

struct TableColumn {
  std::string header;
  bool right = false;   // right-aligned (numbers)
  int drop = 0;         // 0: always shown; else dropped in this order (1 first) for room
  std::size_t cap = 0;  // cells cut to this width within a limit (0: no cap); none with --wide
};

struct TableCell {
  std::string text;           // the text, raw: escaped (terminal_text) when rendered
  std::string_view sgr = {};  // colour of the text (Style::paint's code), "" for none
};

/// `rows` under a dimmed header, one line each, `indent` first and one space
/// between columns. The last column takes what is left of `width.limit()` (at
/// least `min_last`, dropping columns by their `drop` order until it has it) and is
/// cut with "..."; without a limit nothing is cut. No line is longer than the limit
/// unless the columns that cannot be dropped are wider than it. Pure.
std::string render_table(const std::vector<TableColumn>& columns,
                         const std::vector<std::vector<TableCell>>& rows, const Style& style,
                         std::string_view indent, TableWidth width, std::size_t min_last = 24);

/// Where a broken line continues: two columns past its indent, or (help texts) at its
/// description column, the text after its first gap of two spaces or more (at the
/// margin for a line that starts there: prose).
enum class Hang { two_more, description };

/// `text` with each line longer than `columns` broken at spaces (a word longer than
/// the room is broken where it must), continuation lines indented as `hang` says. Colour escapes
/// take no room, and a colour open at a break is closed and reopened on the next line. Characters
/// are counted as code points. Pure.
std::string wrap_lines(std::string_view text, std::size_t columns, Hang hang = Hang::two_more);

/// The number of code points of `line` that a terminal shows (SGR escapes excluded).
std::size_t visible_width(std::string_view line);

}  // namespace gpureap::report
