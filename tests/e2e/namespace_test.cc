// gpureap inside a child PID namespace (a container) while the GPU's holder runs on
// the host: the simulated driver, like the real one since 535.113, names no process
// the caller cannot see but still counts its memory. gpureap must call that memory
// `outside_namespace`, never "idle", and must signal nothing.
// Needs `unshare --pid --fork --mount-proc` (root, or user namespaces): skips without.

#include <gtest/gtest.h>
#include <signal.h>

#include "harness.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace namespace_test {

using namespace std::chrono_literals;

std::vector<std::string> in_child_namespace(std::vector<std::string> argv) {
  std::vector<std::string> out = {"/usr/bin/unshare", "--pid", "--fork", "--mount-proc"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

bool can_unshare(const SimNode& node) {
  auto probe = run_command(in_child_namespace({"/bin/true"}), node.env(), 10s);
  return probe.exit_code == 0;
}

const nlohmann::json* gpu_of(const nlohmann::json& status, unsigned index) {
  for (const auto& g : status.at("gpus"))
    if (g.at("index") == index) return &g;
  return nullptr;
}

TEST(Namespace, HostHolderIsOutsideTheNamespaceNotIdle) {
  SimNode node({"--gpus", "4", "--memory", "96GiB"});
  if (!can_unshare(node)) GTEST_SKIP() << "unshare --pid --fork --mount-proc is not permitted here";
  auto held = node.hold({"--gpu", "2", "--bytes", "4GiB"});
  const pid_t holder = held.holders.at(0).first;

  auto r = run_command(in_child_namespace({GPUREAP_BIN, "--json", "status", "--gpu", "2"}),
                       node.env(), 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto status = r.json();
  EXPECT_EQ(status.at("host_pid_namespace"), false);
  const auto* gpu = gpu_of(status, 2);
  ASSERT_NE(gpu, nullptr) << r.out;
  EXPECT_GE(gpu->at("memory").at("used_bytes").get<std::uint64_t>(), 4ULL << 30)
      << "the memory of a holder in another namespace still counts";
  EXPECT_TRUE(gpu->at("holders").empty()) << "the driver names no process the caller cannot see";
  EXPECT_EQ(gpu->at("unattributed").at("class"), "outside_namespace") << r.out;

  // free from inside signals nothing and says where the memory is.
  auto f = run_command(
      in_child_namespace({GPUREAP_BIN, "--json", "free", "--gpu", "2", "--yes", "--timeout", "2s"}),
      node.env(), 60s);
  EXPECT_EQ(f.exit_code, 1) << f.err;
  auto report = f.json();
  EXPECT_TRUE(report.at("actions").empty());
  ASSERT_EQ(report.at("leftovers").size(), 1u) << f.out;
  EXPECT_EQ(report.at("leftovers")[0].at("class"), "outside_namespace");
  EXPECT_TRUE(alive(holder));

  // The holder exits on the host: the memory is released for the namespaced caller too.
  ASSERT_EQ(::kill(holder, SIGKILL), 0);
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(holder); }));
  auto after = run_command(in_child_namespace({GPUREAP_BIN, "--json", "status", "--gpu", "2"}),
                           node.env(), 60s);
  ASSERT_EQ(after.exit_code, 0) << after.err;
  auto after_status = after.json();
  const auto* idle = gpu_of(after_status, 2);
  ASSERT_NE(idle, nullptr);
  EXPECT_LT(idle->at("memory").at("used_bytes").get<std::uint64_t>(), 1ULL << 30) << after.out;
  EXPECT_TRUE(idle->at("unattributed").is_null()) << after.out;
}

}  // namespace
}  // namespace gpureap::e2e
