#include "util/queued_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "util/fd.h"

namespace gpureap {
namespace {

struct Pipe {
  UniqueFd read, write;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    read.reset(fds[0]);
    write.reset(fds[1]);
    ::fcntl(write.get(), F_SETPIPE_SZ, 4096);  // one page: a reader that stopped fills it fast
  }
};

std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  return out;
}

std::string dropped_line(std::uint64_t n) {
  return "dropped " + std::to_string(n) + "\n";
}

TEST(QueuedWriter, WritesLinesInOrder) {
  Pipe pipe;
  {
    QueuedWriter out(pipe.write.get(), 128, dropped_line);
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(out.push("line " + std::to_string(i) + "\n"));
    std::string got;
    std::thread reader([&] { got = read_all(pipe.read.get()); });
    EXPECT_TRUE(out.drain(10));
    pipe.write.reset();  // EOF for the reader
    reader.join();
    std::string want;
    for (int i = 0; i < 100; ++i) want += "line " + std::to_string(i) + "\n";
    EXPECT_EQ(got, want);
    EXPECT_EQ(out.dropped(), 0u);
  }
}

// W2-06: a reader that stops reading made the agent's loop wait in write(2).
TEST(QueuedWriter, W2_06_AStalledReaderCostsDroppedLinesNeverAWait) {
  Pipe pipe;
  const std::string filler(100, 'x');
  const int total = 2000;  // ~200 KiB against a 4 KiB pipe and 8 queued lines
  QueuedWriter out(pipe.write.get(), 8, dropped_line);
  std::uint64_t refused = 0;
  for (int i = 0; i < total; ++i)
    if (!out.push(std::to_string(i) + " " + filler + "\n")) ++refused;
  EXPECT_GT(refused, 0u) << "the push returns at once and says so";
  EXPECT_EQ(out.dropped(), refused);

  // The reader comes back: every line written is whole and in order, and each
  // gap is owned up to in place, with how many lines it lost.
  std::string got;
  std::thread reader([&] { got = read_all(pipe.read.get()); });
  ASSERT_TRUE(out.drain(30));
  ::close(pipe.write.release());
  reader.join();
  int expected = 0;
  std::uint64_t owned = 0;
  std::size_t pos = 0;
  while (pos < got.size()) {
    auto nl = got.find('\n', pos);
    ASSERT_NE(nl, std::string::npos);
    std::string line = got.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.starts_with("dropped ")) {
      auto n = std::stoull(line.substr(8));
      owned += n;
      expected += static_cast<int>(n);
      continue;
    }
    ASSERT_EQ(line, std::to_string(expected) + " " + filler);
    ++expected;
  }
  EXPECT_EQ(expected, total);
  EXPECT_EQ(owned, refused);
}

TEST(QueuedWriter, W2_06_TheDestructorDoesNotWaitForAReaderThatNeverReads) {
  Pipe pipe;
  {
    QueuedWriter out(pipe.write.get(), 8, dropped_line);
    for (int i = 0; i < 200; ++i) out.push(std::string(100, 'y') + "\n");
  }  // returns (after its grace) with the pipe still full: the test would hang otherwise
  SUCCEED();
}

}  // namespace
}  // namespace gpureap
