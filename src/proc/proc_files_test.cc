#include "proc/proc_files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>

namespace gpureap::proc {
namespace {

TEST(ReadFileAt, ReadsAWholeFileAcrossManyReads) {
  char path[] = "/tmp/gpureap-read-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string content;
  for (int i = 0; i < 20000; ++i) content += std::to_string(i) + "\n";  // > 100 KiB
  ASSERT_EQ(::write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ::close(fd);
  ReadBuffer buf;
  EXPECT_EQ(read_file_at(AT_FDCWD, path, buf), 0);
  EXPECT_EQ(buf.view(), content);
  ::unlink(path);
  EXPECT_EQ(read_file_at(AT_FDCWD, path, buf), ENOENT);
  EXPECT_TRUE(process_gone(ENOENT));
  EXPECT_TRUE(process_gone(ESRCH));
  EXPECT_FALSE(process_gone(EACCES));
}

TEST(ReadFileAt, ReadsSeqFileLargerThanAPage) {
  // /proc/self/maps is seq_file: at most one page per read().
  ReadBuffer buf;
  ASSERT_EQ(read_file_at(AT_FDCWD, "/proc/self/maps", buf), 0);
  EXPECT_TRUE(buf.view().ends_with("\n"));
  EXPECT_NE(buf.view().find("[stack]"), std::string_view::npos);
}

TEST(ListPids, FindsSelf) {
  UniqueFd proc(open_dir_at(AT_FDCWD, "/proc"));
  ASSERT_TRUE(proc.valid());
  ReadBuffer scratch;
  std::vector<pid_t> pids;
  ASSERT_EQ(list_pids(proc.get(), scratch, pids), 0);
  EXPECT_NE(std::find(pids.begin(), pids.end(), ::getpid()), pids.end());
  EXPECT_EQ(std::count(pids.begin(), pids.end(), ::getpid()), 1);
}

TEST(ForEachDirent, ShortReadShortcutSeesEveryFdOfALargeTable) {
  // 3000 fds need several getdents64 calls with a 32 KiB buffer: the shortcut
  // must only stop after a reply that was not full.
  std::vector<UniqueFd> fds;
  for (int i = 0; i < 3000; ++i) {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) GTEST_SKIP() << "fd limit too low";
    fds.emplace_back(fd);
  }
  auto count_fds = [](bool shortcut) {
    UniqueFd dir(open_dir_at(AT_FDCWD, "/proc/self/fd"));
    ReadBuffer scratch;
    std::size_t n = 0;
    EXPECT_EQ(for_each_dirent(
                  dir.get(), scratch, [&](std::string_view) { ++n; }, shortcut),
              0);
    return n;
  };
  std::size_t full = count_fds(false);
  EXPECT_GE(full, 3000u);
  EXPECT_EQ(count_fds(true), full);
}

TEST(ParsePid, OnlyPositiveDecimals) {
  EXPECT_EQ(parse_pid("4242"), 4242);
  EXPECT_EQ(parse_pid("self"), 0);
  EXPECT_EQ(parse_pid("0"), 0);
  EXPECT_EQ(parse_pid("12a"), 0);
  EXPECT_EQ(parse_pid(""), 0);
}

}  // namespace
}  // namespace gpureap::proc
