#include "proc/maps_query.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>

#include "proc/test_children.h"

namespace gpureap::proc {
namespace {

std::vector<MapsFileId> mapped_files(bool allow_query) {
  UniqueFd maps(::open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(maps.valid());
  ReadBuffer buf;
  std::atomic<bool> query_works{allow_query};
  std::vector<MapsFileId> out;
  EXPECT_EQ(read_mapped_files(maps.get(), buf, query_works, out), 0);
  return out;
}

bool contains(const std::vector<MapsFileId>& v, const struct stat& st) {
  return std::any_of(v.begin(), v.end(), [&](const MapsFileId& id) {
    return id.inode == st.st_ino && id.dev_major == major(st.st_dev) &&
           id.dev_minor == minor(st.st_dev);
  });
}

TEST(ReadMappedFiles, QueryAndTextAgreeAndSeeAPrivateAndASharedMapping) {
  testing::SimulatedDevDir dev({"nvidia0", "nvidia1"});
  int a = ::open(dev.path("nvidia0").c_str(), O_RDWR | O_CLOEXEC);
  int b = ::open(dev.path("nvidia1").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  void* shared = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, a, 0);
  void* priv = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, b, 0);
  ASSERT_NE(shared, MAP_FAILED);
  ASSERT_NE(priv, MAP_FAILED);
  struct stat sa {
  }, sb{};
  ::fstat(a, &sa);
  ::fstat(b, &sb);
  ::close(a);
  ::close(b);

  auto query = mapped_files(true);  // PROCMAP_QUERY where the kernel has it
  auto text = mapped_files(false);  // the parsed text
  ::munmap(shared, 4096);
  ::munmap(priv, 4096);

  EXPECT_TRUE(contains(query, sa));
  EXPECT_TRUE(contains(query, sb));
  EXPECT_TRUE(contains(text, sa));
  EXPECT_TRUE(contains(text, sb));
  ASSERT_EQ(query.size(), text.size());
  for (std::size_t i = 0; i < query.size(); ++i) {
    EXPECT_EQ(query[i].inode, text[i].inode);
    EXPECT_EQ(query[i].dev_major, text[i].dev_major);
    EXPECT_EQ(query[i].dev_minor, text[i].dev_minor);
  }
  for (const auto& id : text) EXPECT_NE(id.inode, 0u);  // anonymous memory left out
}

TEST(ReadMappedFiles, ExitedProcessIsReportedAsGone) {
  testing::Children children;
  pid_t pid = testing::spawn_parked(children);
  UniqueFd maps(::open(("/proc/" + std::to_string(pid) + "/maps").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(maps.valid());
  ::kill(pid, SIGKILL);
  children.reap(pid);
  ReadBuffer buf;
  std::atomic<bool> query_works{true};
  std::vector<MapsFileId> out;
  int err = read_mapped_files(maps.get(), buf, query_works, out);
  // The mm is gone: either an error meaning "exited" or nothing mapped.
  EXPECT_TRUE(err == 0 ? out.empty() : process_gone(err)) << err;
}

}  // namespace
}  // namespace gpureap::proc
