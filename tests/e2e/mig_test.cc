// MIG (issue 25), on the simulated node: every MIG device is a GPU to gpureap. GPU 0
// is in MIG mode with two MIG devices (0/gi1/ci0, 0/gi2/ci0); its own handle answers
// memory and process queries with "Insufficient Permissions", as inside a container.

#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <set>

#include "harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace mig_test {

using json = nlohmann::json;
using namespace std::chrono_literals;


// `free --gpu SELECTOR --yes` frees MIG device 0/gi1/ci0 (held by `one`) alone, verified
// on its own memory; `two`, on 0/gi2/ci0 of the same GPU, lives on.
void free_only_mig_device_one(SimNode& node, const std::string& selector, pid_t one, pid_t two) {
  auto r = node.gpureap({"--json", "free", "--gpu", selector, "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const json result = r.json();
  ASSERT_EQ(result["gpus"].size(), 1u) << result.dump();
  EXPECT_EQ(result["gpus"][0]["index"], "0/gi1/ci0");
  EXPECT_EQ(result["gpus"][0]["freed"], true) << result["gpus"].dump();
  EXPECT_FALSE(alive(one));
  EXPECT_TRUE(alive(two)) << "the other MIG device of the same GPU";
}

TEST(Mig, EachMigDeviceIsAGpuAndFreeTouchesOnlyTheOneSelected) {
  SimNode node({"--gpus", "2", "--memory", "96GiB", "--mig", "0:2"});
  auto one = node.hold({"--gpu", "0", "--mig", "1", "--bytes", "6GiB"});
  auto two = node.hold({"--gpu", "0", "--mig", "2", "--bytes", "4GiB"});
  auto whole = node.hold({"--gpu", "1", "--bytes", "2GiB"});
  // A process with GPU 0's node open and no capability: no MIG device's holder.
  auto client = node.hold({"--gpu", "0", "--client-only"});

  auto s = node.gpureap({"--json", "status"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const json status = s.json();
  ASSERT_EQ(status["gpus"].size(), 3u) << status["gpus"].dump();
  const json* a = gpu_of(status, "0/gi1/ci0");
  const json* b = gpu_of(status, "0/gi2/ci0");
  const json* c = gpu_of(status, "1");
  ASSERT_NE(a, nullptr) << s.out;
  ASSERT_NE(b, nullptr) << s.out;
  ASSERT_NE(c, nullptr) << s.out;
  EXPECT_TRUE((*a)["uuid"].get<std::string>().starts_with("MIG-")) << a->dump();
  ASSERT_EQ((*a)["holders"].size(), 1u) << a->dump();
  EXPECT_EQ((*a)["holders"][0]["pid"], one.holders[0].first);
  EXPECT_EQ((*a)["memory"]["used_bytes"], 6ULL << 30);
  ASSERT_EQ((*b)["holders"].size(), 1u) << b->dump();
  EXPECT_EQ((*b)["holders"][0]["pid"], two.holders[0].first);
  // The capability-less client is nobody's holder, and is named for what it blocks.
  bool listed = false;
  for (const auto& h : status["other_holders"]) listed = listed || h["pid"] == client.leader;
  EXPECT_TRUE(listed) << status["other_holders"].dump();
  auto text = node.gpureap({"status"});
  EXPECT_NE(text.out.find("pid " + std::to_string(client.leader) +
                          " (gpureap-sim) holds GPU 0's own device node but no MIG device of it"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("GPU 0/gi1/ci0  NVIDIA H200 MIG"), std::string::npos) << text.out;

  // Freed by its MIG UUID (a prefix): that MIG device only, verified on its own memory.
  const std::string uuid = (*a)["uuid"];
  auto r = node.gpureap({"--json", "free", "--gpu", uuid.substr(0, 12), "--yes"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const json result = r.json();
  ASSERT_EQ(result["gpus"].size(), 1u) << result.dump();
  EXPECT_EQ(result["gpus"][0]["index"], "0/gi1/ci0") << result["gpus"].dump();
  EXPECT_EQ(result["gpus"][0]["freed"], true) << result["gpus"].dump();
  EXPECT_FALSE(alive(one.holders[0].first));
  EXPECT_TRUE(alive(two.holders[0].first)) << "the other MIG device of the same GPU";
  EXPECT_TRUE(alive(whole.holders[0].first));
  EXPECT_TRUE(alive(client.leader)) << "no MIG device's holder: not in the plan";

  // nvidia-smi's GPU:GPU-instance form; the GPU index is all its MIG devices.
  auto dry = node.gpureap({"--json", "free", "--gpu", "0", "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.out << dry.err;
  const json plan = dry.json()["plan"];
  ASSERT_EQ(plan["targets"].size(), 1u) << plan.dump();
  EXPECT_EQ(plan["targets"][0]["pid"], two.holders[0].first);
  auto by_gi = node.gpureap({"free", "--gpu", "0:2", "--yes"});
  EXPECT_EQ(by_gi.exit_code, 0) << by_gi.out << by_gi.err;
  EXPECT_FALSE(alive(two.holders[0].first));
  EXPECT_TRUE(alive(whole.holders[0].first));
}

// A driver loaded without nv_cap_enable_devfs=1: a process on a MIG device holds the
// capability files /proc/driver/nvidia/capabilities/gpu0/mig/gi<G>[/ci<C>]/access (in
// the simulated node, its nvidia-capabilities/), not capability nodes. The files alone
// say which MIG device a process NVML does not list (the client) uses.
TEST(Mig, CapabilityFilesWithoutDevfsNameTheMigDeviceAProcessHolds) {
  SimNode node({"--gpus", "1", "--memory", "96GiB", "--mig", "0:2", "--no-cap-devfs"});
  ASSERT_FALSE(std::filesystem::exists(node.dir() + "/dev/nvidia-caps/nvidia-cap12"));
  auto one = node.hold({"--gpu", "0", "--mig", "1", "--bytes", "6GiB"});
  auto two = node.hold({"--gpu", "0", "--mig", "2", "--bytes", "4GiB"});
  auto client = node.hold({"--gpu", "0", "--mig", "2", "--client-only"});

  auto s = node.gpureap({"--json", "status"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const json status = s.json();
  const json* a = gpu_of(status, "0/gi1/ci0");
  const json* b = gpu_of(status, "0/gi2/ci0");
  ASSERT_NE(a, nullptr) << s.out;
  ASSERT_NE(b, nullptr) << s.out;
  ASSERT_EQ((*a)["holders"].size(), 1u) << a->dump();
  EXPECT_EQ((*a)["holders"][0]["pid"], one.holders[0].first);
  const std::string ci_file = "/dev/nvidia-capabilities/gpu0/mig/gi1/ci0/access";
  bool holds_file = false;
  for (const auto& d : (*a)["holders"][0]["devices"])
    holds_file = holds_file || d.get<std::string>().ends_with(ci_file);
  EXPECT_TRUE(holds_file) << (*a)["holders"][0].dump();
  std::set<long> on_b;
  for (const auto& h : (*b)["holders"]) on_b.insert(h["pid"].get<long>());
  EXPECT_EQ(on_b, (std::set<long>{two.holders[0].first, client.leader})) << b->dump();
  for (const auto& h : status["other_holders"])
    EXPECT_NE(h["pid"], client.leader) << "its capability files name MIG device 0/gi2/ci0";

  free_only_mig_device_one(node, "0/gi1/ci0", one.holders[0].first, two.holders[0].first);
  EXPECT_TRUE(alive(client.leader));
}

// `gpureap run` on a MIG device: the worker is started as a launcher starts it, with
// CUDA_VISIBLE_DEVICES=MIG-<uuid>, and outlives the command (a daemon). The run tears it
// down and verifies the release on that MIG device alone; the holder of the other MIG
// device of the same GPU, outside the run, is untouched and still holds its memory.
TEST(Mig, RunVerifiesTheReleaseOnTheMigDeviceItsWorkerHeld) {
  SimNode node({"--gpus", "1", "--memory", "96GiB", "--mig", "0:2"});
  auto other = node.hold({"--gpu", "0", "--mig", "2", "--bytes", "4GiB"});
  auto before = node.gpureap({"--json", "status"});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  const json before_status = before.json();
  const json* a = gpu_of(before_status, "0/gi1/ci0");
  ASSERT_NE(a, nullptr) << before.out;
  const std::string uuid = (*a)["uuid"];

  const std::string script = "CUDA_VISIBLE_DEVICES=" + uuid + " '" + GPUREAP_SIM_BIN +
                             "' hold --dir '" + node.dir() +
                             "' --gpu 0 --mig 1 --bytes 6GiB --daemon --release-delay 200ms"
                             " && exit 7";
  auto r = node.gpureap({"--json", "run", "--", "/bin/sh", "-c", script});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  auto j = json::parse(r.err, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "stderr is not one JSON document: " << r.err;
  EXPECT_GE(j.at("teardown").at("processes").get<int>(), 1) << "the daemon was torn down";
  ASSERT_EQ(j.at("gpus").size(), 1u) << r.err;
  EXPECT_EQ(j.at("gpus")[0].at("index"), "0/gi1/ci0") << r.err;
  EXPECT_EQ(j.at("gpus")[0].at("freed"), true) << r.err;
  EXPECT_EQ(j.at("memory_released"), true) << r.err;

  EXPECT_TRUE(alive(other.holders[0].first)) << "outside the run, on the other MIG device";
  auto after = node.gpureap({"--json", "status"});
  const json status = after.json();
  const json* a_after = gpu_of(status, "0/gi1/ci0");
  const json* b_after = gpu_of(status, "0/gi2/ci0");
  ASSERT_NE(a_after, nullptr) << after.out;
  ASSERT_NE(b_after, nullptr) << after.out;
  EXPECT_TRUE((*a_after)["holders"].empty()) << a_after->dump();
  EXPECT_EQ((*a_after)["memory"]["used_bytes"], (*a_after)["memory"]["baseline_bytes"])
      << a_after->dump();
  ASSERT_EQ((*b_after)["holders"].size(), 1u) << b_after->dump();
  EXPECT_EQ((*b_after)["holders"][0]["pid"], other.holders[0].first);
  EXPECT_EQ((*b_after)["memory"]["used_bytes"], 4ULL << 30) << b_after->dump();
}

// Slurm's MIG GRES names a MIG device by its capability node
// (MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap<N>,...): --gpu takes that path
// and resolves it through the driver's mig-minors (the simulated node's table maps
// 12/13 to 0/gi1 and 0/gi1/ci0, 21/22 to 0/gi2 and 0/gi2/ci0).
TEST(Mig, ACapabilityNodeSelectsTheMigDeviceItGivesAccessTo) {
  SimNode node({"--gpus", "1", "--memory", "96GiB", "--mig", "0:2"});
  auto one = node.hold({"--gpu", "0", "--mig", "1", "--bytes", "6GiB"});
  auto two = node.hold({"--gpu", "0", "--mig", "2", "--bytes", "4GiB"});

  auto bad = node.gpureap({"free", "--gpu", "/dev/nvidia-caps/nvidia-cap99", "--yes"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("--gpu"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("names no MIG device"), std::string::npos) << bad.err;
  EXPECT_TRUE(alive(one.holders[0].first));

  free_only_mig_device_one(node, "/dev/nvidia-caps/nvidia-cap13", one.holders[0].first, two.holders[0].first);
}

TEST(Mig, AMigDeviceThatIsNotThereIsAUsageErrorListingTheDevices) {
  SimNode node({"--gpus", "1", "--memory", "96GiB", "--mig", "0:2"});
  auto r = node.gpureap({"free", "--gpu", "0/gi5/ci0", "--yes"});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("0/gi1/ci0"), std::string::npos) << r.err;
}

// status --blockers (docs/mig.md, "What blocks a MIG change or a reset").

const json* blocker_of(const json& gpu, pid_t pid) {
  for (const auto& b : gpu.at("blockers"))
    if (b.at("pid") == pid) return &b;
  return nullptr;
}

// A client's next step: its unit's or container's stop command when the test runs in
// one (the holders inherit the test's cgroup), else `kill PID`.
void expect_stop_step(const json& b, pid_t pid) {
  const std::string step = b.at("next_step");
  if (b.at("container").is_null())
    EXPECT_EQ(step, "kill " + std::to_string(pid)) << b.dump();
  else
    EXPECT_EQ(step.find("gpureap free"), std::string::npos) << b.dump();
}

TEST(Mig, StatusBlockersNamesEveryClientOfTheGpuWithItsNextStep) {
  SimNode node({"--gpus", "2", "--memory", "96GiB", "--mig", "0:2"});
  auto one = node.hold({"--gpu", "0", "--mig", "1", "--bytes", "6GiB"});
  // A monitoring agent with GPU 0's own node open and no MIG capability.
  auto client = node.hold({"--gpu", "0", "--client-only", "--comm", "nv-hostengine"});
  WatchChild agent = WatchChild::gpureap(node, {"--json", "watch", "--no-listen", "--tick", "200ms"});
  ASSERT_TRUE(agent.wait_for_json([](const json& j) { return j.value("event", "") == "started"; },
                                  30s))
      << agent.transcript();

  // A MIG device selects its physical GPU: every MIG device's clients count.
  auto r = node.gpureap({"--json", "status", "--blockers", "--gpu", "0:2"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json doc = r.json();
  EXPECT_EQ(doc["command"], "status --blockers");
  ASSERT_EQ(doc["source"], "agent") << "the agent answered the look";
  ASSERT_EQ(doc["gpus"].size(), 1u) << doc.dump(1);
  const json& g = doc["gpus"][0];
  EXPECT_EQ(g["gpu"], 0);
  EXPECT_EQ(g["mig_mode"], true);
  EXPECT_EQ(g["mig_devices"], json::array({"0/gi1/ci0", "0/gi2/ci0"}));
  EXPECT_EQ(g["blocked"], true);
  ASSERT_EQ(g["blockers"].size(), 3u) << g.dump(1);

  const json* compute = blocker_of(g, one.holders[0].first);
  ASSERT_NE(compute, nullptr) << g.dump(1);
  EXPECT_EQ((*compute)["class"], "compute");
  EXPECT_EQ((*compute)["devices"], json::array({"0/gi1/ci0"}));
  EXPECT_EQ((*compute)["gpu_bytes"], 6ULL << 30);
  EXPECT_EQ((*compute)["next_step"], "gpureap free --gpu 0/gi1/ci0");

  const json* dcgm = blocker_of(g, client.leader);
  ASSERT_NE(dcgm, nullptr) << g.dump(1);
  EXPECT_EQ((*dcgm)["class"], "nvml_client");
  EXPECT_EQ((*dcgm)["known_as"], "DCGM host engine");
  EXPECT_EQ((*dcgm)["what"], "has GPU 0's own node open and no MIG device of it");
  expect_stop_step(*dcgm, client.leader);

  const json* watch = blocker_of(g, agent.pid());
  ASSERT_NE(watch, nullptr) << g.dump(1);
  EXPECT_EQ((*watch)["class"], "gpureap_agent");
  EXPECT_NE((*watch)["next_step"].get<std::string>().find(
                "kill -USR1 " + std::to_string(agent.pid())),
            std::string::npos)
      << watch->dump();

  // The table: class, pid, the MIG device, the next step.
  auto text = node.gpureap({"status", "--blockers", "--gpu", "0"});
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_NE(text.out.find("GPU 0 (00000000:"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("3 blockers of a reset or MIG change"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("pid " + std::to_string(one.holders[0].first)), std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("on 0/gi1/ci0, 6.00 GiB"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("next: gpureap free --gpu 0/gi1/ci0"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("(DCGM host engine)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("gpureap_agent"), std::string::npos) << text.out;

  // Nothing left: the agent stopped, our holders gone.
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
  for (pid_t p : one.pids) ::kill(p, SIGKILL);  // our own holders, just started
  for (pid_t p : client.pids) ::kill(p, SIGKILL);
  ASSERT_TRUE(SimNode::eventually(
      [&] { return !alive(one.holders[0].first) && !alive(client.leader); }));
  auto none = node.gpureap({"--json", "status", "--blockers", "--gpu", "0/gi1/ci0"});
  const json after = none.json();
  ASSERT_EQ(after["gpus"].size(), 1u) << none.out;
  EXPECT_EQ(after["gpus"][0]["blockers"], json::array()) << none.out;
  // As root every process is inspected; otherwise what could not be is said (exit 3).
  if (::geteuid() == 0) {
    EXPECT_EQ(after["gpus"][0]["unknowns"], json::array()) << none.out;
  }
  EXPECT_EQ(none.exit_code, after["gpus"][0]["unknowns"].empty() ? 0 : 3) << none.out << none.err;
  if (::geteuid() == 0) {
    auto line = node.gpureap({"status", "--blockers", "--gpu", "0"});
    EXPECT_EQ(line.exit_code, 0) << line.out << line.err;
    EXPECT_NE(line.out.find("Nothing blocks a reset or MIG change of GPU 0 (00000000:"),
              std::string::npos)
        << line.out;
  }
}

TEST(Mig, StatusBlockersOnWholeGpusTellsComputeFromClientsAndNamesPersistence) {
  SimNode node({"--gpus", "2", "--memory", "96GiB"});
  auto server = node.hold({"--gpu", "0", "--bytes", "2GiB"});
  auto exporter = node.hold({"--gpu", "0", "--client-only", "--comm", "dcgm-exporter"});
  ASSERT_EQ(node.sim({"persistence", "--dir", node.dir(), "--gpu", "1", "on"}).exit_code, 0);

  auto r = node.gpureap({"--json", "--no-agent", "status", "--blockers"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json doc = r.json();
  ASSERT_EQ(doc["gpus"].size(), 2u) << doc.dump(1);
  const json& g0 = doc["gpus"][0];
  EXPECT_EQ(g0["mig_mode"], false);
  ASSERT_EQ(g0["blockers"].size(), 2u) << g0.dump(1);
  const json* compute = blocker_of(g0, server.holders[0].first);
  ASSERT_NE(compute, nullptr) << g0.dump(1);
  EXPECT_EQ((*compute)["class"], "compute");
  EXPECT_EQ((*compute)["devices"], json::array({0}));
  EXPECT_EQ((*compute)["next_step"], "gpureap free --gpu 0");
  const json* client = blocker_of(g0, exporter.holders[0].first);
  ASSERT_NE(client, nullptr) << g0.dump(1);
  EXPECT_EQ((*client)["class"], "nvml_client");
  EXPECT_EQ((*client)["known_as"], "DCGM exporter");
  expect_stop_step(*client, exporter.holders[0].first);

  const json& g1 = doc["gpus"][1];
  ASSERT_EQ(g1["blockers"].size(), 1u) << g1.dump(1);
  EXPECT_EQ(g1["blockers"][0]["class"], "persistence_mode");
  EXPECT_EQ(g1["blockers"][0]["pid"], nullptr);
  EXPECT_EQ(g1["blockers"][0]["next_step"], "nvidia-smi -pm 0 -i " + g1["pci_bus_id"].get<std::string>());

  // GPU 1 with persistence off: nothing blocks it, whatever GPU 0 holds.
  ASSERT_EQ(node.sim({"persistence", "--dir", node.dir(), "--gpu", "1", "off"}).exit_code, 0);
  auto none = node.gpureap({"--json", "--no-agent", "status", "--blockers", "--gpu", "1"});
  const json after = none.json();
  ASSERT_EQ(after["gpus"].size(), 1u) << none.out;
  EXPECT_EQ(after["gpus"][0]["gpu"], 1);
  EXPECT_EQ(after["gpus"][0]["blockers"], json::array()) << none.out;
  EXPECT_EQ(none.exit_code, after["gpus"][0]["unknowns"].empty() ? 0 : 3) << none.out;

  // Not with --check: one question at a time.
  auto both = node.gpureap({"status", "--blockers", "--check"});
  EXPECT_EQ(both.exit_code, 2) << both.out << both.err;
  EXPECT_NE(both.err.find("--blockers"), std::string::npos) << both.err;
}

// free --reset checks the same list: a reset of a MIG device's memory is its whole GPU's, so
// a client of the GPU's own node blocks it, named by its class.
TEST(Mig, FreeResetOfAMigDeviceIsBlockedByAClientOfItsGpu) {
  if (::geteuid() != 0) GTEST_SKIP() << "the reset path needs root";
  SimNode node({"--gpus", "1", "--memory", "96GiB", "--mig", "0:2"});
  auto client = node.hold({"--gpu", "0", "--client-only"});
  auto stuck = node.hold({"--gpu", "0", "--mig", "1", "--bytes", "4GiB", "--stuck"});
  ASSERT_EQ(::kill(stuck.holders[0].first, SIGKILL), 0);  // our own holder
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(stuck.holders[0].first); }));

  auto r = node.gpureap(
      {"--json", "--no-agent", "--release-budget", "100ms", "free", "--gpu", "0/gi1/ci0", "--reset",
       "--yes", "--timeout", "5s"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const json doc = r.json();
  ASSERT_EQ(doc["resets"].size(), 1u) << doc.dump(1);
  EXPECT_FALSE(doc["resets"][0]["attempted"]) << doc.dump(1);
  const std::string blockers = doc["resets"][0]["blockers"].dump();
  EXPECT_NE(blockers.find("pid " + std::to_string(client.leader) + " (gpureap-sim)"),
            std::string::npos)
      << blockers;
  EXPECT_NE(blockers.find("[nvml_client]"), std::string::npos) << blockers;
}

}  // namespace mig_test
}  // namespace gpureap::e2e
