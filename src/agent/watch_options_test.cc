// `gpureap watch`'s options: the options file's every line a known key (W2-05), the
// file trusted only when no one else can write it (W3-09), and the checks that turn
// the strings into AgentOptions.

#include "agent/watch_options.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "util/test_temp_dir.h"

namespace gpureap::agent {
namespace {

std::string write(const TestTempDir& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir.path(name)) << text;
  return dir.path(name);
}

TEST(WatchOptions, TheFileTakesOnlyKnownKeys) {
  TestTempDir dir("gpureap-watch-options");
  auto keys = check_options_file(write(dir, "ok.conf", "# c\n; c\n\nkeep = \"jupyter\" # c\ntick=2s\n"));
  ASSERT_TRUE(keys) << keys.error().message;
  EXPECT_EQ(*keys, (std::set<std::string>{"keep", "tick"}));

  auto misspelt = check_options_file(write(dir, "bad.conf", "tick = 1s\nkeeep = x\n"));
  ASSERT_FALSE(misspelt);
  EXPECT_NE(misspelt.error().message.find("line 2: unknown key 'keeep'"), std::string::npos)
      << misspelt.error().message;
  auto section = check_options_file(write(dir, "section.conf", "[watch]\nkeep = x\n"));
  ASSERT_FALSE(section);
  EXPECT_NE(section.error().message.find("sections are not read"), std::string::npos);
  auto note = check_options_file(write(dir, "note.conf", "keep = \"x\" ; note\n"));
  ASSERT_FALSE(note);
  EXPECT_NE(note.error().message.find("a comment after a value starts with #"), std::string::npos);
  auto bare = check_options_file(write(dir, "bare.conf", "keep\n"));
  EXPECT_FALSE(bare);
}

TEST(WatchOptions, AFileOthersCanWriteIsRefused) {
  TestTempDir dir("gpureap-watch-options");
  const std::string path = write(dir, "watch.conf", "tick = 1s\n");
  ::chmod(path.c_str(), 0644);
  EXPECT_TRUE(check_file_owner("--config", path, "steers the agent"));
  ::chmod(path.c_str(), 0664);
  auto refused = check_file_owner("--config", path, "steers the agent");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("is writable by its group"), std::string::npos)
      << refused.error().message;
}

TEST(WatchOptions, TheStringsAreCheckedIntoAgentOptions) {
  WatchFlags f;
  auto o = to_agent_options(f, "/state", "v1");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->watch.tick, kDefaultTick);
  EXPECT_EQ(o->watch.full_scan, kDefaultFullScan);
  EXPECT_EQ(o->version, "v1");
  EXPECT_FALSE(o->reap_orphans_after);

  f.reap_after = "10m";
  f.keep = "jupyter";
  o = to_agent_options(f, "/state", "v1");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->reap_orphans_after, std::chrono::milliseconds(600000));

  WatchFlags zero;
  zero.tick = "0s";
  auto bad = to_agent_options(zero, "/state", "v1");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("--tick: must be more than 0"), std::string::npos);
  WatchFlags dry;
  dry.reap_dry_run = true;
  EXPECT_FALSE(to_agent_options(dry, "/state", "v1"));
  WatchFlags regex;
  regex.keep = "(";
  EXPECT_FALSE(to_agent_options(regex, "/state", "v1"));
}

}  // namespace
}  // namespace gpureap::agent
