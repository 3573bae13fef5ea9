#include "util/line_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace gpureap {

int for_each_line(int fd, std::size_t max_line,
                  const std::function<void(std::string_view)>& on_line) {
  std::vector<char> block(kLineReaderBlock);
  std::string partial;  // the start of a line that crosses a block boundary
  bool cut = false;     // the current line already passed max_line: drop the rest
  // A hole in a sparse file reads as NUL bytes, none of them a newline: it only
  // extends the current line. So it is skipped with SEEK_DATA instead of read
  // (the kernel would zero-fill every page of it), keeping what reading it would
  // have kept. A pipe, or a filesystem without SEEK_DATA, is simply read.
  off_t pos = ::lseek(fd, 0, SEEK_CUR);
  bool seekable = pos >= 0;
  auto skip_hole = [&](off_t length) {
    if (length <= 0) return;
    if (!cut) {
      const std::size_t room = max_line - partial.size();
      const auto n = static_cast<std::size_t>(length);
      if (n > room) cut = true;
      partial.append(n > room ? room : n, '\0');
    }
    pos += length;
  };
  for (;;) {
    if (seekable) {
      const off_t data = ::lseek(fd, pos, SEEK_DATA);
      if (data >= 0) {
        skip_hole(data - pos);
      } else if (errno == ENXIO) {  // only a hole up to the end of the file is left
        struct stat st {};
        if (::fstat(fd, &st) == 0 && st.st_size > pos) skip_hole(st.st_size - pos);
        break;
      } else {
        seekable = false;
        if (::lseek(fd, pos, SEEK_SET) < 0) return errno;
      }
    }
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) break;
    pos += n;
    std::string_view data(block.data(), static_cast<std::size_t>(n));
    while (!data.empty()) {
      const auto nl = data.find('\n');
      const bool complete = nl != std::string_view::npos;
      std::string_view piece = data.substr(0, complete ? nl : data.size());
      data.remove_prefix(complete ? nl + 1 : data.size());
      // The common case: a whole line inside the block, passed without a copy.
      if (complete && partial.empty() && !cut && piece.size() <= max_line) {
        on_line(piece);
        continue;
      }
      if (!cut) {
        const std::size_t room = max_line - partial.size();
        if (piece.size() > room) cut = true;
        partial.append(piece.substr(0, piece.size() > room ? room : piece.size()));
      }
      if (complete) {
        on_line(partial);
        partial.clear();
        cut = false;
      }
    }
  }
  if (!partial.empty() || cut) on_line(partial);
  return 0;
}

}  // namespace gpureap
