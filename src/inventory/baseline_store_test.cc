#include "inventory/baseline_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "util/test_temp_dir.h"
#include "util/units.h"

namespace gpureap::inventory {
namespace {


// A private temporary directory for one test.
class TempDir : public TestTempDir {
 public:
  TempDir() : TestTempDir("gpureap-state-test") {}
};

// Sets GPUREAP_STATE_DIR for one test and restores it.
class StateDirEnv {
 public:
  explicit StateDirEnv(const std::string& value) {
    if (const char* old = std::getenv("GPUREAP_STATE_DIR")) old_ = old;
    ::setenv("GPUREAP_STATE_DIR", value.c_str(), 1);
  }
  ~StateDirEnv() {
    if (old_)
      ::setenv("GPUREAP_STATE_DIR", old_->c_str(), 1);
    else
      ::unsetenv("GPUREAP_STATE_DIR");
  }

 private:
  std::optional<std::string> old_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool any_contains(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

TEST(StateDir, CreatesAPrivateDirectory) {
  TempDir t;
  StateDirEnv env(t.path("state"));
  auto dir = state_dir();
  ASSERT_TRUE(dir) << dir.error().message;
  EXPECT_EQ(*dir, t.path("state"));
  struct stat st {};
  ASSERT_EQ(::lstat(dir->c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  // An existing one of ours is fine too (0755 as mkdir -p makes it).
  ASSERT_EQ(::chmod(dir->c_str(), 0755), 0);
  EXPECT_TRUE(state_dir());
}

TEST(StateDir, RelativePathIsRejected) {
  StateDirEnv env("relative/state");
  auto dir = state_dir();
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.error().message.find("must be an absolute path"), std::string::npos);
}

TEST(StateDir, SymlinkedDirectoryIsRefused) {
  TempDir t;
  ASSERT_EQ(::mkdir(t.path("real").c_str(), 0700), 0);
  ASSERT_EQ(::symlink(t.path("real").c_str(), t.path("link").c_str()), 0);
  for (const std::string& value : {t.path("link"), t.path("link") + "/"}) {
    StateDirEnv env(value);
    auto dir = state_dir();
    ASSERT_FALSE(dir) << value;
    EXPECT_NE(dir.error().message.find(t.path("link") + " is a symbolic link"), std::string::npos)
        << dir.error().message;
  }
}

TEST(StateDir, GroupOrWorldWritableDirectoryIsRefused) {
  TempDir t;
  ASSERT_EQ(::mkdir(t.path("open").c_str(), 0700), 0);
  ASSERT_EQ(::chmod(t.path("open").c_str(), 0777), 0);
  StateDirEnv env(t.path("open"));
  auto dir = state_dir();
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.error().message.find("writable by everyone (mode 0777)"), std::string::npos)
      << dir.error().message;
  ASSERT_EQ(::chmod(t.path("open").c_str(), 0770), 0);
  dir = state_dir();
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.error().message.find("writable by its group"), std::string::npos);
}

TEST(StateDir, DirectoryOfAnotherUserIsRefused) {
  TempDir t;
  ASSERT_EQ(::mkdir(t.path("theirs").c_str(), 0700), 0);
  // Without root: the same check, asked for a uid that is not the owner.
  auto other = check_state_dir(t.path("theirs"), ::geteuid() + 1);
  ASSERT_FALSE(other);
  EXPECT_NE(other.error().message.find("is owned by uid"), std::string::npos);

  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown a directory to another user";
  // What a local attacker does to /tmp/gpureap-<uid> (or root finds in /run/gpureap).
  ASSERT_EQ(::chown(t.path("theirs").c_str(), 65534, 65534), 0);
  StateDirEnv env(t.path("theirs"));
  auto dir = state_dir();
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.error().message.find(t.path("theirs") + " is owned by uid 65534, not by you"),
            std::string::npos)
      << dir.error().message;
  // status and wait go on without recorded baselines, and say why.
  auto store = BaselineStore::load_default();
  EXPECT_TRUE(any_contains(store.warnings(), "is owned by uid 65534"));
}

TEST(BaselineStore, ImplausibleRecordedValuesAreIgnoredWithAWarning) {
  TempDir t;
  // The wave-1 plant: a 90 GiB "baseline" on a 96 GiB GPU that holds 80 GiB.
  std::ofstream(t.path("baselines.json"))
      << R"({"GPU-a": {"used_bytes": 96636764160}, "GPU-b": {"used_bytes": 629145600},
             "GPU-c": {"used_bytes": -5}, "GPU-d": {"used_bytes": "lots"},
             "GPU-e": {"used_bytes": 1.5e9}})";
  auto store = BaselineStore::load(t.dir());
  EXPECT_EQ(store.warnings().size(), 3u);
  EXPECT_TRUE(any_contains(store.warnings(), "GPU-c is not a byte count (used_bytes -5)"));
  EXPECT_TRUE(any_contains(store.warnings(), "GPU-d is not a byte count"));
  EXPECT_TRUE(any_contains(store.warnings(), "GPU-e is not a byte count"));

  Baseline a = store.get("GPU-a", 96 * kGiB, 80 * kGiB, 80 * kGiB);
  EXPECT_FALSE(a.recorded);
  EXPECT_EQ(a.bytes, 0u);  // estimated: nothing unexplained
  ASSERT_EQ(store.warnings().size(), 4u);
  EXPECT_NE(store.warnings().back().find("GPU-a (90.0 GiB) is more than an idle GPU of 96.0 GiB"),
            std::string::npos)
      << store.warnings().back();
  store.get("GPU-a", 96 * kGiB, 80 * kGiB, 80 * kGiB);
  EXPECT_EQ(store.warnings().size(), 4u) << "warned once";

  Baseline b = store.get("GPU-b", 96 * kGiB, 10 * kGiB, 9 * kGiB);
  EXPECT_TRUE(b.recorded);
  EXPECT_EQ(b.bytes, 600 * kMiB);
}

TEST(BaselineStore, UnusableFilesAreIgnoredWithAWarning) {
  TempDir t;
  std::ofstream(t.path("elsewhere.json")) << R"({"GPU-a": {"used_bytes": 1}})";
  ASSERT_EQ(::symlink(t.path("elsewhere.json").c_str(), t.path("baselines.json").c_str()), 0);
  auto linked = BaselineStore::load(t.dir());
  EXPECT_TRUE(any_contains(linked.warnings(), "is a symbolic link"));
  EXPECT_FALSE(linked.get("GPU-a", 96 * kGiB, 0, 0).recorded);

  TempDir u;
  std::ofstream(u.path("baselines.json")) << "not json";
  EXPECT_TRUE(any_contains(BaselineStore::load(u.dir()).warnings(), "is not a JSON object"));

  TempDir missing;
  EXPECT_TRUE(BaselineStore::load(missing.dir()).warnings().empty());
}

TEST(BaselineStore, SavedValuesLoadBack) {
  TempDir t;
  auto store = BaselineStore::load(t.dir());
  store.observe_idle("GPU-a", 96 * kGiB, 600 * kMiB);
  ASSERT_TRUE(store.save());
  auto again = BaselineStore::load(t.dir());
  EXPECT_TRUE(again.warnings().empty());
  EXPECT_EQ(again.get("GPU-a", 96 * kGiB, 0, 0).bytes, 600 * kMiB);
  struct stat st {};
  ASSERT_EQ(::stat(t.path("baselines.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(BaselineStore, FailedSaveKeepsTheOldFile) {
  // A write that fails part-way (as on a full filesystem): RLIMIT_FSIZE makes
  // write(2) fail with EFBIG after a few bytes, in a child so the limit stays there.
  TempDir t;
  const std::string good = R"({"GPU-a": {"used_bytes": 629145600}})";
  std::ofstream(t.path("baselines.json")) << good;
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = {16, 16};
    ::setrlimit(RLIMIT_FSIZE, &small);
    auto store = BaselineStore::load(t.dir());
    store.observe_idle("GPU-b", 96 * kGiB, 700 * kMiB);
    auto saved = store.save();
    ::_exit(saved ? 1 : 0);  // 0: the failure was reported
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "save() reported success although the write failed";
  EXPECT_EQ(read_all(t.path("baselines.json")), good);
  // No temp file is left behind.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(t.dir())) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(BaselineStore, UnwritableTempPathKeepsTheOldFile) {
  TempDir t;
  const std::string good = R"({"GPU-a": {"used_bytes": 629145600}})";
  std::ofstream(t.path("baselines.json")) << good;
  // Something that is not a file where the temp file would go.
  const std::string tmp = t.path("baselines.json." + std::to_string(::getpid()) + ".tmp");
  ASSERT_EQ(::mkdir(tmp.c_str(), 0700), 0);
  auto store = BaselineStore::load(t.dir());
  store.observe_idle("GPU-b", 96 * kGiB, 700 * kMiB);
  EXPECT_FALSE(store.save());
  EXPECT_EQ(read_all(t.path("baselines.json")), good);
}

}  // namespace
}  // namespace gpureap::inventory
