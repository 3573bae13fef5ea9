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

TEST(LineReader, ReportsAFailedRead) {
  EXPECT_EQ(for_each_line(-1, 10, [](std::string_view) {}), EBADF);
}

}  // namespace
}  // namespace gpureap
