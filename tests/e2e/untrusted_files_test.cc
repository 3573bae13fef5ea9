// Files that are not what they claim, end to end: a device directory with an
// `nvidia9 -> /dev/null` symlink, and a state directory with planted content.
// gpureap must ignore them, say so, and never let them pick targets or call
// held memory free.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "harness.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace untrusted_files_test {

// A `sleep` of our own whose stdin is /dev/null: a process with /dev/null open
// and nothing to do with any GPU. SIGKILLed and reaped at the end (our child).
class DevNullSleeper {
 public:
  DevNullSleeper() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int null = ::open("/dev/null", O_RDONLY);
      ::dup2(null, 0);
      ::execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~DevNullSleeper() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);  // our own unreaped child: the pid cannot have been reused
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// True when some process listed in a status document has this pid.
bool status_lists(const nlohmann::json& status, pid_t pid) {
  for (const auto& g : status["gpus"])
    for (const auto& h : g["holders"])
      if (h["pid"] == pid) return true;
  for (const auto& h : status["other_holders"])
    if (h["pid"] == pid) return true;
  return false;
}

bool any_contains(const nlohmann::json& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

TEST(UntrustedFiles, DevNullSymlinkInTheDeviceDirectoryIsIgnoredWithAWarning) {
  SimNode node;
  auto held = node.hold({"--gpu", "3", "--bytes", "10GiB"});
  pid_t holder = held.holders.at(0).first;
  DevNullSleeper sleeper;
  ASSERT_GT(sleeper.pid(), 0);
  ASSERT_TRUE(SimNode::eventually([&] { return state_of(sleeper.pid()) == 'S'; }));
  // /dev/null is 1:3: the old discovery took it for the GPU of minor 3.
  ASSERT_EQ(::symlink("/dev/null", (node.dir() + "/dev/nvidia9").c_str()), 0);
  const std::string warning = node.dir() + "/dev/nvidia9 is a symbolic link to /dev/null";

  auto r = node.gpureap({"status", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.json();
  EXPECT_FALSE(status_lists(j, sleeper.pid())) << j.dump(2);
  EXPECT_TRUE(status_lists(j, holder));
  EXPECT_TRUE(any_contains(j["warnings"], warning)) << j["warnings"].dump();

  auto table = node.gpureap({"status"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("! " + warning), std::string::npos) << table.out;
  EXPECT_EQ(table.out.find(" " + std::to_string(sleeper.pid()) + " "), std::string::npos)
      << table.out;

  auto plan = node.gpureap({"--json", "free", "--gpu", "all", "--dry-run"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  auto p = plan.json();
  ASSERT_EQ(p["plan"]["targets"].size(), 1u) << p["plan"].dump(2);
  EXPECT_EQ(p["plan"]["targets"][0]["pid"], holder);
  EXPECT_TRUE(any_contains(p["warnings"], warning)) << p.dump(2);

  auto text = node.gpureap({"free", "--gpu", "all", "--dry-run"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.find(" " + std::to_string(sleeper.pid()) + " "), std::string::npos)
      << text.out;
  EXPECT_NE(text.err.find("gpureap free: warning: " + warning), std::string::npos) << text.err;
}

TEST(UntrustedFiles, PlantedBaselineDoesNotMakeHeldMemoryFree) {
  SimNode node;
  auto held = node.hold({"--gpu", "0", "--bytes", "80GiB"});
  const std::string uuid = node.gpureap({"status", "--json"}).json()["gpus"][0]["uuid"];
  const std::string baselines = node.env().at("GPUREAP_STATE_DIR") + "/baselines.json";
  // 90 GiB on a 96 GiB GPU: above the cap of an idle baseline (1% of total).
  // Planted before each command: a command that sees an idle GPU rewrites the file.
  auto plant = [&] {
    std::ofstream(baselines) << R"({")" << uuid << R"(": {"used_bytes": 96636764160}})";
  };
  const std::string warning = "the recorded baseline of " + uuid + " (90.0 GiB)";

  plant();
  auto wait = node.gpureap({"wait", "--gpu", "0", "--timeout", "0"});
  EXPECT_EQ(wait.exit_code, 5) << "wait called 80 GiB held free:\n" << wait.out << wait.err;
  EXPECT_NE(wait.err.find("gpureap wait: warning: "), std::string::npos) << wait.err;
  EXPECT_NE(wait.err.find(warning), std::string::npos) << wait.err;

  plant();
  auto j = node.gpureap({"--json", "wait", "--gpu", "0", "--timeout", "0"}).json();
  EXPECT_FALSE(j["free"]);
  EXPECT_TRUE(any_contains(j["warnings"], warning)) << j.dump(2);

  plant();
  auto plan = node.gpureap({"--json", "free", "--gpu", "0", "--dry-run"});
  EXPECT_EQ(plan.exit_code, 0) << "free found nothing to do:\n" << plan.out << plan.err;
  ASSERT_EQ(plan.json()["plan"]["targets"].size(), 1u);
  EXPECT_EQ(plan.json()["plan"]["targets"][0]["pid"], held.holders.at(0).first);
}

TEST(UntrustedFiles, SymlinkedStateDirectoryIsRefused) {
  SimNode node;
  const std::string real = node.dir() + "/real-state";
  const std::string link = node.dir() + "/state-link";
  std::filesystem::create_directory(real);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  std::map<std::string, std::string> env = {{"GPUREAP_STATE_DIR", link}};

  auto free = node.gpureap({"free", "--gpu", "0", "--yes"}, std::chrono::seconds(30), env);
  EXPECT_EQ(free.exit_code, 3) << free.out << free.err;
  EXPECT_NE(free.err.find("state directory " + link + " is a symbolic link; refusing to use it"),
            std::string::npos)
      << free.err;
  EXPECT_FALSE(std::filesystem::exists(real + "/free.lock"));

  // status still works, without recorded baselines, and says why.
  auto status = node.gpureap({"--json", "status"}, std::chrono::seconds(30), env);
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(any_contains(status.json()["warnings"], link + " is a symbolic link"));
  EXPECT_FALSE(std::filesystem::exists(real + "/baselines.json"));
}

}  // namespace
}  // namespace gpureap::e2e
