// systemd_restart_policy against stand-ins for systemctl (scripts in a temporary
// directory): what it passes, what it accepts, and that a hung one is killed.

#include "reclaim/systemd_unit.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "util/test_temp_dir.h"

namespace gpureap::reclaim {
namespace {

using namespace std::chrono_literals;

class FakeSystemctl : public ::testing::Test {
 protected:
  // A systemctl that runs `body` (sh); its arguments are logged to args.log.
  std::string systemctl(const std::string& body) {
    const std::string path = dir_.path("systemctl");
    std::ofstream(path) << "#!/bin/sh\necho \"$@\" > " << dir_.path("args.log") << "\n" << body;
    ::chmod(path.c_str(), 0755);
    return path;
  }
  std::string args() {
    std::ifstream in(dir_.path("args.log"));
    std::string line;
    std::getline(in, line);
    return line;
  }
  TestTempDir dir_{"gpureap-systemctl"};
};

TEST_F(FakeSystemctl, AsksForTheRestartSettingOfTheUnit) {
  EXPECT_EQ(systemd_restart_policy("llm.service", systemctl("echo always\n")), "always");
  EXPECT_EQ(args(), "show -p Restart --value -- llm.service");
  EXPECT_EQ(systemd_restart_policy("llm.service", systemctl("echo no\n")), "no");
  EXPECT_EQ(systemd_restart_policy("a@b.service", systemctl("echo on-failure\n")), "on-failure");
}

TEST_F(FakeSystemctl, NoAnswerIsNoClaim) {
  EXPECT_EQ(systemd_restart_policy("llm.service", dir_.path("missing")), std::nullopt);
  EXPECT_EQ(systemd_restart_policy(
                "llm.service",
                systemctl("echo 'System has not been booted with systemd' >&2; exit 1\n")),
            std::nullopt);
  EXPECT_EQ(systemd_restart_policy("llm.service", systemctl("echo sometimes\n")), std::nullopt);
  EXPECT_EQ(systemd_restart_policy("llm.service", systemctl("echo always; exit 3\n")),
            std::nullopt);
}

TEST_F(FakeSystemctl, AHungSystemctlIsKilledAtTheDeadline) {
  // exec: the shell becomes the sleep, so the SIGKILL at the deadline ends it.
  EXPECT_EQ(systemd_restart_policy("llm.service", systemctl("exec sleep 600\n"), 100ms),
            std::nullopt);
}

TEST_F(FakeSystemctl, ANameThatIsNotAPlainServiceIsNotAsked) {
  const std::string path = systemctl("echo always\n");
  for (const char* unit : {"--help.service", "x.scope", ".service", "a b.service", "a;b.service"})
    EXPECT_EQ(systemd_restart_policy(unit, path), std::nullopt) << unit;
  EXPECT_EQ(args(), "") << "systemctl was run";
}

TEST(SystemServiceOf, OnlySystemServicesNotScopesOrUserManagers) {
  EXPECT_EQ(system_service_of("/system.slice/llm.service"), "llm.service");
  EXPECT_EQ(system_service_of("/system.slice/system-llm.slice/llm@0.service"), "llm@0.service");
  EXPECT_EQ(system_service_of("/user.slice/user-1000.slice/session-3.scope"), "");
  EXPECT_EQ(system_service_of("/user.slice/user-1000.slice/user@1000.service/app.slice/x.service"),
            "");
  EXPECT_EQ(system_service_of("/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope"),
            "");
  EXPECT_EQ(system_service_of("/"), "");
}

}  // namespace
}  // namespace gpureap::reclaim
