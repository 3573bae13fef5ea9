// The state directory's record of memory no process holds (sighting_store.h): written
// atomically, read back on the same boot only, a malformed record is none.

#include "inventory/sighting_store.h"
#include "inventory/state_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "util/test_temp_dir.h"

namespace gpureap::inventory {
namespace {

using namespace std::chrono_literals;

TEST(SightingStore, ARecordIsReadBackOnItsBootOnly) {
  TestTempDir dir("gpureap-sighting-store");
  const util::Clock::time_point seen{std::chrono::milliseconds(123456)};
  {
    SightingStore store = SightingStore::load(dir.dir(), "boot-a");
    store.put("GPU-1", {5 * (1ull << 30), seen});
    ASSERT_TRUE(store.save());
  }
  struct stat st {};
  ASSERT_EQ(::stat(dir.path(kSightingFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  SightingStore same = SightingStore::load(dir.dir(), "boot-a");
  ASSERT_NE(same.get("GPU-1"), nullptr);
  EXPECT_EQ(same.get("GPU-1")->bytes, 5 * (1ull << 30));
  EXPECT_EQ(same.get("GPU-1")->first_seen, seen);
  EXPECT_EQ(SightingStore::load(dir.dir(), "boot-b").get("GPU-1"), nullptr);
  EXPECT_EQ(SightingStore::load(dir.dir(), "").get("GPU-1"), nullptr) << "no boot id, no record";

  std::ofstream(dir.path(kSightingFile))
      << R"({"boot_id":"boot-a","gpus":{"GPU-1":{"bytes":-1,"first_seen_ms":1},"GPU-2":7}})";
  SightingStore bad = SightingStore::load(dir.dir(), "boot-a");
  EXPECT_EQ(bad.get("GPU-1"), nullptr);
  EXPECT_EQ(bad.get("GPU-2"), nullptr);
}

TEST(SightingStore, TheBootIdIsReadFromTheProcRoot) {
  TestTempDir root("gpureap-boot-id");
  std::filesystem::create_directories(root.path("sys/kernel/random"));
  std::ofstream(root.path("sys/kernel/random/boot_id")) << "0f1e2d3c-aaaa\n";
  EXPECT_EQ(boot_id(root.dir()), "0f1e2d3c-aaaa");
  EXPECT_EQ(boot_id(root.path("none")), "");
}

}  // namespace
}  // namespace gpureap::inventory
