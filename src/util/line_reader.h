#pragma once
// Reading a file line by line in fixed blocks, so that a file of any size (a
// multi-GB server log, a sparse file with no newline at all) costs bounded memory.

#include <cstddef>
#include <functional>
#include <string_view>

namespace gpureap {

/// The block size for_each_line reads with.
inline constexpr std::size_t kLineReaderBlock = 64 * 1024;

/// Reads `fd` to its end and calls `on_line` once per line, without its '\n'
/// (a last line without one is passed too). A line longer than `max_line`
/// bytes is passed cut to its first `max_line` bytes, once. Memory: one block
/// plus at most `max_line` bytes, whatever the file. The holes of a sparse file
/// are skipped unread (they hold NULs, no line ends). Returns 0, or the errno of
/// a failed read (lines before it have been passed). Does not close `fd`.
int for_each_line(int fd, std::size_t max_line,
                  const std::function<void(std::string_view)>& on_line);

}  // namespace gpureap
