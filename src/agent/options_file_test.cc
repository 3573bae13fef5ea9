// The checks before the agent takes options from a file: every line a known key (a
// misspelt `keep` must not be dropped), and no one but root or the agent's user able to
// have written it.

#include "agent/options_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "util/test_temp_dir.h"

namespace gpureap::agent {
namespace {

const std::vector<std::string_view> kKeys = {"keep", "tick", "no-listen"};

std::string written(const TestTempDir& dir, const std::string& text) {
  const std::string path = dir.path("watch.conf");
  std::ofstream(path) << text;
  return path;
}

TEST(OptionsFile, TheKeysItSetsCommentsAndBlankLinesAside) {
  TestTempDir dir;
  auto keys = check_options_file(
      written(dir, "# a comment\n; another\n\nkeep = \"jupyter\" # why\n\"tick\" = 2s\n"), kKeys);
  ASSERT_TRUE(keys) << keys.error().message;
  EXPECT_EQ(*keys, (std::set<std::string>{"keep", "tick"}));
  auto none = check_options_file(dir.path("absent.conf"), kKeys);
  ASSERT_TRUE(none) << none.error().message;
  EXPECT_TRUE(none->empty());  // CLI11's reader says why it cannot be read
}

TEST(OptionsFile, AnUnknownKeyASectionOrALineWithoutEqualsNamesTheLine) {
  TestTempDir dir;
  auto misspelt = check_options_file(written(dir, "tick = 1s\nkeeep = x\n"), kKeys);
  ASSERT_FALSE(misspelt);
  EXPECT_NE(misspelt.error().message.find("line 2: unknown key 'keeep' (the file takes keep, tick, "
                                          "no-listen)"),
            std::string::npos)
      << misspelt.error().message;
  auto section = check_options_file(written(dir, "[watch]\nkeep = x\n"), kKeys);
  ASSERT_FALSE(section);
  EXPECT_NE(section.error().message.find("line 1: sections are not read ([watch])"),
            std::string::npos)
      << section.error().message;
  auto bare = check_options_file(written(dir, "keep\n"), kKeys);
  ASSERT_FALSE(bare);
  EXPECT_NE(bare.error().message.find("expected `key = value`, got 'keep'"), std::string::npos);
}

TEST(OptionsFile, OnlyAHashCommentMayFollowAQuotedValue) {
  TestTempDir dir;
  auto semicolon = check_options_file(written(dir, "keep = \"jupyter\" ; note\n"), kKeys);
  ASSERT_FALSE(semicolon);
  EXPECT_NE(semicolon.error().message.find("'; note' after the value of 'keep'"), std::string::npos)
      << semicolon.error().message;
}

TEST(FileOwner, AFileOthersCanWriteIsRefusedNamingTheOptionAndWhy) {
  TestTempDir dir;
  ASSERT_EQ(::chmod(dir.dir().c_str(), 0700), 0);
  const std::string path = written(dir, "keep = x\n");
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  // /tmp is sticky and root's; the test directory and the file are ours.
  EXPECT_TRUE(check_file_owner("--config", path, "steers the agent"));
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);
  auto everyone = check_file_owner("--config", path, "steers the agent");
  ASSERT_FALSE(everyone);
  EXPECT_NE(everyone.error().message.find("--config " + path + ": the file is writable by everyone "
                                          "(mode 0666): whoever can write it steers the agent"),
            std::string::npos)
      << everyone.error().message;
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  ASSERT_EQ(::chmod(dir.dir().c_str(), 0770), 0);
  auto group = check_file_owner("--web-config", path, "decides who may read the metrics");
  ASSERT_FALSE(group);
  EXPECT_NE(group.error().message.find("its directory " + dir.dir() + " is writable by its group"),
            std::string::npos)
      << group.error().message;
  EXPECT_TRUE(check_file_owner("--config", dir.path("absent"), "x"));  // left to the reader
}

// W4-10: a private key readable (or writable) by others is refused as the web
// configuration itself is.
TEST(FileOwner, APrivateKeyOthersCanReadIsRefused) {
  TestTempDir dir;
  ASSERT_EQ(::chmod(dir.dir().c_str(), 0700), 0);
  const std::string key = written(dir, "-----BEGIN PRIVATE KEY-----\n");
  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);
  const std::string option = "--web-config /etc/w.yml: key_file";
  EXPECT_TRUE(check_private_file(option, key, "can pose as this agent"));
  for (auto [mode, says] : {std::pair{0644, "readable by everyone (mode 0644)"},
                            std::pair{0640, "readable by its group (mode 0640)"},
                            std::pair{0666, "writable by everyone (mode 0666)"}}) {
    ASSERT_EQ(::chmod(key.c_str(), static_cast<mode_t>(mode)), 0);
    auto refused = check_private_file(option, key, "can pose as this agent");
    ASSERT_FALSE(refused) << mode;
    EXPECT_NE(refused.error().message.find(option + " " + key + ": the file is " + says),
              std::string::npos)
        << refused.error().message;
  }
}

}  // namespace
}  // namespace gpureap::agent
