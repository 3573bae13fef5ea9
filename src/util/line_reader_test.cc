#include "util/line_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace gpureap {
namespace {

// The lines for_each_line passes for `content`, written to a temporary file.
std::vector<std::string> lines_of(const std::string& content, std::size_t max_line) {
  FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(std::fwrite(content.data(), 1, content.size(), f), content.size());
  std::fflush(f);
  std::rewind(f);
  std::vector<std::string> out;
  EXPECT_EQ(for_each_line(fileno(f), max_line,
                          [&](std::string_view line) { out.emplace_back(line); }),
            0);
  std::fclose(f);
  return out;
}

TEST(LineReader, SplitsLinesAndKeepsALastLineWithoutNewline) {
  EXPECT_EQ(lines_of("a\n\nbc\nd", 100), (std::vector<std::string>{"a", "", "bc", "d"}));
  EXPECT_EQ(lines_of("a\n", 100), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(lines_of("", 100).empty());
}

TEST(LineReader, LinesAcrossBlockBoundariesAreWhole) {
  // Lines of 1000 bytes do not divide the 64 KiB block: many cross a boundary.
  std::string content;
  for (int i = 0; i < 300; ++i) content += std::string(999, static_cast<char>('a' + i % 26)) + "\n";
  auto lines = lines_of(content, 4096);
  ASSERT_EQ(lines.size(), 300u);
  for (int i = 0; i < 300; ++i)
    EXPECT_EQ(lines[static_cast<std::size_t>(i)], std::string(999, static_cast<char>('a' + i % 26)));
}

TEST(LineReader, AnOverlongLineIsCutAndTheNextLineIsIntact) {
  // 200 KiB without a newline (more than three blocks), then a normal line.
  std::string content = std::string(200 * 1024, 'x') + "\nafter\n";
  auto lines = lines_of(content, 1000);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], std::string(1000, 'x'));
  EXPECT_EQ(lines[1], "after");
  // No newline at all: one cut line.
  auto one = lines_of(std::string(100 * 1024, 'y'), 10);
  EXPECT_EQ(one, (std::vector<std::string>{std::string(10, 'y')}));
}

TEST(LineReader, HolesReadAsTheNulsTheyHold) {
  // "a", a hole, "b\nc": the hole joins the first line as NULs, as read() would
  // give it, whether it fits the cap or is cut by it.
  for (const std::size_t hole : {std::size_t{10}, std::size_t{3} << 20}) {
    FILE* f = std::tmpfile();
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite("a", 1, 1, f), 1u);
    ASSERT_EQ(std::fseek(f, static_cast<long>(1 + hole), SEEK_SET), 0);
    ASSERT_EQ(std::fwrite("b\nc", 1, 3, f), 3u);
    std::fflush(f);
    std::rewind(f);
    std::vector<std::string> lines;
    ASSERT_EQ(for_each_line(fileno(f), 100, [&](std::string_view l) { lines.emplace_back(l); }), 0);
    std::fclose(f);
    const std::string first = hole < 99 ? "a" + std::string(hole, '\0') + "b"
                                        : "a" + std::string(99, '\0');
    EXPECT_EQ(lines, (std::vector<std::string>{first, "c"})) << "hole of " << hole;
  }
  // A hole up to the end of the file.
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite("x\ny", 1, 3, f), 3u);
  std::fflush(f);
  ASSERT_EQ(ftruncate(fileno(f), 8 << 20), 0);
  std::rewind(f);
  std::vector<std::string> lines;
  ASSERT_EQ(for_each_line(fileno(f), 5, [&](std::string_view l) { lines.emplace_back(l); }), 0);
  std::fclose(f);
  EXPECT_EQ(lines, (std::vector<std::string>{"x", "y" + std::string(4, '\0')}));
}

TEST(LineReader, ReadsAPipe) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "p\nq\n", 4), 4);
  close(fds[1]);
  std::vector<std::string> lines;
  EXPECT_EQ(for_each_line(fds[0], 10, [&](std::string_view l) { lines.emplace_back(l); }), 0);
  close(fds[0]);
  EXPECT_EQ(lines, (std::vector<std::string>{"p", "q"}));
}

TEST(LineReader, ReportsAFailedRead) {
  EXPECT_EQ(for_each_line(-1, 10, [](std::string_view) {}), EBADF);
}

}  // namespace
}  // namespace gpureap
