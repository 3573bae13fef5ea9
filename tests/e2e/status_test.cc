// `gpureap status` end to end: the real binary against the simulated node, one
// test per holder shape, checking the JSON a script would read.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "harness.h"
#include "util/units.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace status_test {


const nlohmann::json* find_holder(const nlohmann::json& gpu, pid_t pid) {
  for (const auto& h : gpu["holders"])
    if (h["pid"] == pid) return &h;
  return nullptr;
}

bool has(const nlohmann::json& arr, const std::string& v) {
  for (const auto& x : arr)
    if (x == v) return true;
  return false;
}

TEST(Status, IdleNodeShowsEveryGpuAtBaseline) {
  SimNode node;
  auto r = node.gpureap({"status", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.json();
  ASSERT_EQ(j["gpus"].size(), 8u);
  EXPECT_EQ(j["nvml"]["state"], "ok");
  for (const auto& g : j["gpus"]) {
    EXPECT_TRUE(g["holders"].empty());
    EXPECT_EQ(g["memory"]["total_bytes"], 96 * kGiB);
    EXPECT_EQ(g["unattributed_bytes"], 0u);
    EXPECT_TRUE(g["uuid"].get<std::string>().starts_with("GPU-"));
    EXPECT_FALSE(g["pci_bus_id"].is_null());
  }
}

// The driver and CUDA version in status's header, as nvidia-smi's and nvitop's (issue 53,
// the peers' reasons): from NVML (the simulated driver answers
// nvmlSystemGetCudaDriverVersion as 13000), in the text's first line and the JSON; and a
// CSV of --json's GPU rows.
TEST(Status, TheHeaderNamesTheDriverAndCudaVersionAndCsvHasTheJsonColumns) {
  SimNode node;
  auto j = node.gpureap({"status", "--json"}).json();
  EXPECT_EQ(j["nvml"]["driver_version"], "580.65.06") << j["nvml"].dump();
  EXPECT_EQ(j["nvml"]["cuda_version"], "13.0") << j["nvml"].dump();
  auto text = node.gpureap({"status"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(text.out.starts_with("driver 580.65.06, CUDA 13.0\n")) << text.out;
  auto csv = node.gpureap({"status", "--format", "csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_TRUE(csv.out.starts_with("index,name,vendor,uuid,pci_bus_id,state,")) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 9) << "a header and 8 GPUs";
  auto bad = node.gpureap({"--json", "status", "--format", "csv"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--format"), std::string::npos) << bad.err;
}

TEST(Status, CaseStudyOrphanedTensorParallelWorkers) {
  SimNode node;
  auto held = node.hold({"--gpu", "0", "--bytes", "20GiB", "--children", "8", "--orphan"});
  ASSERT_EQ(held.holders.size(), 8u);
  auto r = node.gpureap({"status", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.json();
  for (const auto& [pid, gpu] : held.holders) {
    const auto& g = j["gpus"][gpu];
    EXPECT_EQ(g["memory"]["used_bytes"].get<std::uint64_t>(),
              g["memory"]["baseline_bytes"].get<std::uint64_t>() + 20 * kGiB);
    const auto* h = find_holder(g, pid);
    ASSERT_NE(h, nullptr) << "worker " << pid << " not listed on GPU " << gpu;
    EXPECT_TRUE((*h)["orphaned"]) << h->dump();
    EXPECT_TRUE(has((*h)["found_by"], "nvml"));
    EXPECT_TRUE(has((*h)["found_by"], "fd"));
    EXPECT_EQ((*h)["gpu_bytes"], 20 * kGiB);
    EXPECT_EQ(g["attributed_bytes"], 20 * kGiB);
    EXPECT_EQ(g["unattributed_bytes"], 0u);
  }
  // The table says what to do next.
  auto table = node.gpureap({"status"});
  EXPECT_NE(table.out.find("ORPHAN"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("gpureap free --orphans --instance "), std::string::npos) << table.out;
}

TEST(Status, GpuSelectorsPickByIndexUuidBusAndMinor) {
  SimNode node({"--gpus", "4", "--memory", "80GiB", "--minors", "3,2,1,0"});
  auto all = node.gpureap({"status", "--json"}).json();
  ASSERT_EQ(all["gpus"].size(), 4u);
  std::string uuid = all["gpus"][2]["uuid"];
  std::string bus = all["gpus"][1]["pci_bus_id"];
  EXPECT_EQ(all["gpus"][0]["minor"], 3);

  auto by_index = node.gpureap({"status", "--json", "--gpu", "0,3"}).json();
  ASSERT_EQ(by_index["gpus"].size(), 2u);
  EXPECT_EQ(by_index["gpus"][1]["index"], 3);
  auto by_uuid = node.gpureap({"status", "--json", "--gpu", uuid.substr(0, 12)}).json();
  ASSERT_EQ(by_uuid["gpus"].size(), 1u);
  EXPECT_EQ(by_uuid["gpus"][0]["uuid"], uuid);
  auto by_bus = node.gpureap({"status", "--json", "--gpu", bus}).json();
  ASSERT_EQ(by_bus["gpus"].size(), 1u);
  EXPECT_EQ(by_bus["gpus"][0]["index"], 1);
  auto by_minor = node.gpureap({"status", "--json", "--gpu", "minor:0"}).json();
  ASSERT_EQ(by_minor["gpus"].size(), 1u);
  EXPECT_EQ(by_minor["gpus"][0]["index"], 3);

  auto bad = node.gpureap({"status", "--gpu", "9"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("9"), std::string::npos) << bad.err;
}

TEST(Status, HolderOnPermutedMinorIsFoundOnTheRightGpu) {
  SimNode node({"--gpus", "4", "--memory", "80GiB", "--minors", "3,2,1,0"});
  auto held = node.hold({"--gpu", "1", "--bytes", "4GiB"});
  auto j = node.gpureap({"status", "--json"}).json();
  const auto* h = find_holder(j["gpus"][1], held.holders[0].first);
  ASSERT_NE(h, nullptr) << j.dump(1);
  EXPECT_TRUE(has((*h)["devices"], node.dir() + "/dev/nvidia2")) << h->dump();
}

TEST(Status, DaemonizedHolderIsFound) {
  SimNode node;
  auto held = node.hold({"--gpu", "2", "--bytes", "8GiB", "--daemon"});
  ASSERT_EQ(held.holders.size(), 1u);
  auto j = node.gpureap({"status", "--json"}).json();
  const auto* h = find_holder(j["gpus"][2], held.holders[0].first);
  ASSERT_NE(h, nullptr);
  EXPECT_NE((*h)["sid"], ::getsid(0)) << "a setsid daemon has left our session";
  // Double-forked: re-parented, its group's leader gone. One look cannot tell it from
  // a killed server's lone worker: orphaned on weak evidence (docs/orphans.md), which
  // a person's free acts on and nothing unattended does.
  EXPECT_TRUE((*h)["orphaned"]) << h->dump();
  EXPECT_EQ((*h)["orphan_evidence"], "group") << h->dump();
  EXPECT_EQ((*h)["gpu_bytes"], 8 * kGiB);
}

TEST(Status, ZombieLeaderWithLiveThreadsIsAHolder) {
  SimNode node;
  auto held = node.hold({"--gpu", "1", "--bytes", "6GiB", "--zombie-leader"});
  pid_t pid = held.holders[0].first;
  ASSERT_TRUE(SimNode::eventually([&] { return state_of(pid) == 'Z'; }));
  auto j = node.gpureap({"status", "--json"}).json();
  const auto* h = find_holder(j["gpus"][1], pid);
  ASSERT_NE(h, nullptr) << j["gpus"][1].dump(1);
  EXPECT_EQ((*h)["state"], "Z");
  EXPECT_TRUE((*h)["zombie_leader"]);
  EXPECT_TRUE(has((*h)["found_by"], "fd"));
  bool live_thread = false;
  for (const auto& t : (*h)["threads"]) live_thread |= t["state"] != "Z";
  EXPECT_TRUE(live_thread) << h->dump();
}

// A one-shot status did not see the holder exit nor watch the memory for a release budget:
// it cannot tell a slow release from driver-held memory, and says so (docs/release.md).
TEST(Status, StuckMemoryRightAfterItsHolderDiedIsNotYetDriverHeld) {
  SimNode node;
  auto held = node.hold({"--gpu", "3", "--bytes", "20GiB", "--stuck"});
  for (pid_t p : held.pids) ::kill(p, SIGKILL);  // our own holder, just started
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(held.holders[0].first); }));
  auto j = node.gpureap({"status", "--json"}).json();
  const auto& g = j["gpus"][3];
  EXPECT_TRUE(g["holders"].empty());
  EXPECT_GE(g["unattributed_bytes"].get<std::uint64_t>(), 19 * kGiB);
  ASSERT_FALSE(g["unattributed"].is_null());
  EXPECT_EQ(g["unattributed"]["class"], "no_holder");
  EXPECT_EQ(g["state"], "no_holder");
  EXPECT_EQ(g["unattributed"]["detail"].get<std::string>().find("reset"), std::string::npos)
      << g["unattributed"].dump();
}

TEST(Status, NvmlMissingFallsBackToProcView) {
  SimNode node;
  auto held = node.hold({"--gpu", "2", "--bytes", "1GiB"});
  auto r = node.gpureap({"status", "--json"}, std::chrono::seconds(20),
                        {{"GPUREAP_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.json();
  EXPECT_EQ(j["nvml"]["state"], "library_missing");
  bool found = false;
  for (const auto& g : j["gpus"])
    if (find_holder(g, held.holders[0].first)) found = true;
  EXPECT_TRUE(found) << j.dump(1);
  auto table = node.gpureap({"status"}, std::chrono::seconds(20),
                            {{"GPUREAP_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"}});
  EXPECT_NE(table.out.find("NVML"), std::string::npos);
}

TEST(Status, NvmlFailingIsReportedNotFatal) {
  SimNode node;
  node.hold({"--gpu", "0", "--bytes", "1GiB"});
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "query_fail"}).exit_code, 0);
  auto r = node.gpureap({"status", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.json()["nvml"]["state"], "ok");
}

TEST(Status, NvmlHangIsBoundedAndReported) {
  SimNode node;
  ASSERT_EQ(node.sim({"mode", "--dir", node.dir(), "hang_query"}).exit_code, 0);
  auto r = node.gpureap({"status", "--json"}, std::chrono::seconds(20));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Every GPU hangs: each is listed, marked hung and still named (the worker
  // answers at its own per-GPU limit instead of being killed).
  auto j = r.json();
  EXPECT_EQ(j["nvml"]["state"], "partial");
  ASSERT_EQ(j["gpus"].size(), 8u);
  for (const auto& g : j["gpus"]) {
    EXPECT_EQ(g["nvml"]["state"], "hung") << g.dump();
    EXPECT_TRUE(g["memory"].is_null());
    EXPECT_TRUE(g["uuid"].is_string());
  }
  // Bounded: the 20 s bound of the call above fails a status that waits out the hang.
}

// defects-wave1 D4: a byte that is not UTF-8 in a holder's command line made
// `status --json` throw (type_error 316, exit 3, no JSON).
TEST(Status, NonUtf8CommandLineGivesValidJson) {
  SimNode node;
  auto held = node.hold({"--gpu", "1", "--bytes", "5GiB", "--label", "caf\xe9-\xff\xfe", "--comm",
                         "caf\xe9-\xff\xfe"});
  auto r = node.gpureap({"status", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = r.json();  // fails the test on invalid UTF-8
  const auto* h = find_holder(j["gpus"][1], held.holders.at(0).first);
  ASSERT_NE(h, nullptr) << j["gpus"][1].dump(1);
  EXPECT_NE((*h)["cmdline"].get<std::string>().find("caf\xef\xbf\xbd-\xef\xbf\xbd\xef\xbf\xbd"),
            std::string::npos)
      << (*h)["cmdline"];
  EXPECT_EQ((*h)["comm"], "caf\xef\xbf\xbd-\xef\xbf\xbd\xef\xbf\xbd");
}

// Issue 53: the card's health, as the simulated NVML answers it (nvmlDeviceGetEnforced-
// PowerLimit, nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetTotalEccErrors), in
// status -v and --json; a driver that cannot say gives no line and nulls.
TEST(Status, VerboseShowsTheCardsHealthAsNvmlAnswersIt) {
  SimNode node{{"--gpus", "2", "--memory", "96GiB"}};
  auto set = node.sim({"sensors", "--dir", node.dir(), "--gpu", "1", "--power-cap", "600",
                       "--clock-events", "0x84", "--ecc", "2"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  auto none = node.sim({"sensors", "--dir", node.dir(), "--gpu", "0", "--power-cap", "none",
                        "--clock-events", "none", "--ecc", "none"});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(node.sim({"sensors", "--dir", node.dir(), "--gpu", "0", "--ecc", "many"}).exit_code,
            2);
  auto r = node.gpureap({"--no-agent", "status", "-v"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  ! power 75 W of a 600 W cap; clocks held down by power cap, power "
                       "brake; 2 uncorrected ECC errors since the driver loaded\n"),
            std::string::npos)
      << r.out;
  // GPU 0's driver says nothing: only GPU 1 has the line.
  EXPECT_EQ(r.out.find("W cap"), r.out.rfind("W cap")) << r.out;
  EXPECT_LT(r.out.find("GPU 1  "), r.out.find("W cap")) << r.out;
  auto j = node.gpureap({"--no-agent", "--json", "status"}).json();
  ASSERT_TRUE(j.contains("gpus")) << j.dump();
  EXPECT_EQ(j["gpus"][1]["health"]["power_limit_watts"], 600.0) << j["gpus"][1].dump();
  EXPECT_EQ(j["gpus"][1]["health"]["clocks_held_down_by"],
            nlohmann::json::array({"power cap", "power brake"}));
  EXPECT_EQ(j["gpus"][1]["health"]["ecc_uncorrected"], 2);
  EXPECT_TRUE(j["gpus"][0]["health"]["power_limit_watts"].is_null()) << j["gpus"][0].dump();
  EXPECT_TRUE(j["gpus"][0]["health"]["ecc_uncorrected"].is_null());
}

// Issue 53: per-process SM utilisation, a hint where NVML gives it. The simulated NVML
// answers nvmlDeviceGetProcessUtilization with each holder's `hold --util` (and
// NOT_SUPPORTED with MIG on, as the real call): status -v names each holder's share,
// --json carries sm_percent; a MIG device's holder gets null and no line.
TEST(Status, VerboseShowsEachHoldersSmShareAsNvmlSamplesIt) {
  SimNode node{{"--gpus", "2", "--memory", "96GiB"}};
  auto busy = node.hold({"--gpu", "0", "--bytes", "2GiB", "--util", "37"});
  auto idle = node.hold({"--gpu", "1", "--bytes", "1GiB"});
  ASSERT_EQ(busy.holders.size(), 1u);
  ASSERT_EQ(idle.holders.size(), 1u);
  const pid_t busy_pid = busy.holders[0].first, idle_pid = idle.holders[0].first;
  auto r = node.gpureap({"--no-agent", "status", "-v"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("NVML's latest per-process sample (a hint): " +
                       std::to_string(busy_pid) + " SM 37 %\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("NVML's latest per-process sample (a hint): " +
                       std::to_string(idle_pid) + " SM 0 %\n"),
            std::string::npos)
      << r.out;
  auto plain = node.gpureap({"--no-agent", "status"});
  EXPECT_EQ(plain.out.find("per-process sample"), std::string::npos) << "a -v line only";
  auto j = node.gpureap({"--no-agent", "--json", "status"}).json();
  ASSERT_TRUE(j.contains("gpus")) << j.dump();
  const auto* h = find_holder(j["gpus"][0], busy_pid);
  ASSERT_NE(h, nullptr) << j["gpus"][0].dump();
  EXPECT_EQ((*h)["sm_percent"], 37);

  SimNode mig({"--gpus", "1", "--memory", "96GiB", "--mig", "0:1"});
  auto on_mig = mig.hold({"--gpu", "0", "--mig", "1", "--bytes", "1GiB", "--util", "50"});
  ASSERT_EQ(on_mig.holders.size(), 1u);
  auto mj = mig.gpureap({"--no-agent", "--json", "status"}).json();
  const auto* device = gpu_of(mj, "0/gi1/ci0");
  ASSERT_NE(device, nullptr) << mj.dump();
  const auto* mh = find_holder(*device, on_mig.holders[0].first);
  ASSERT_NE(mh, nullptr) << device->dump();
  EXPECT_TRUE((*mh)["sm_percent"].is_null()) << "NOT_SUPPORTED with MIG on: no hint, no error";
  auto mv = mig.gpureap({"--no-agent", "status", "-v"});
  ASSERT_EQ(mv.exit_code, 0) << mv.err;
  EXPECT_EQ(mv.out.find("per-process sample"), std::string::npos) << mv.out;
}

// Issue 53: the hint comes from nvmlDeviceGetProcessesUtilizationInfo (r545+; the only
// call Blackwell answers) where the driver has it, else from the older
// nvmlDeviceGetProcessUtilization; a GPU that supports neither has no hint and no error.
TEST(Status, TheSmHintComesFromWhicheverPerProcessCallTheDriverAnswers) {
  SimNode node{{"--gpus", "4", "--memory", "96GiB"}};
  const std::vector<std::string> modes = {"both", "new", "legacy", "none"};
  std::vector<pid_t> pids;
  for (std::size_t i = 0; i < modes.size(); ++i) {
    const std::string gpu = std::to_string(i);
    auto set = node.sim({"sensors", "--dir", node.dir(), "--gpu", gpu, "--process-util", modes[i]});
    ASSERT_EQ(set.exit_code, 0) << set.err;
    auto held = node.hold({"--gpu", gpu, "--bytes", "1GiB", "--util", std::to_string(40 + i)});
    ASSERT_EQ(held.holders.size(), 1u);
    pids.push_back(held.holders[0].first);
  }
  auto j = node.gpureap({"--no-agent", "--json", "status"}).json();
  ASSERT_TRUE(j.contains("gpus")) << j.dump();
  for (std::size_t i = 0; i < modes.size(); ++i) {
    const auto* h = find_holder(j["gpus"][i], pids[i]);
    ASSERT_NE(h, nullptr) << j["gpus"][i].dump();
    if (modes[i] == "none")
      EXPECT_TRUE((*h)["sm_percent"].is_null()) << "neither call supported: " << h->dump();
    else
      EXPECT_EQ((*h)["sm_percent"], 40 + i) << modes[i] << ": " << h->dump();
  }
  auto v = node.gpureap({"--no-agent", "status", "-v"});
  ASSERT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find(std::to_string(pids[1]) + " SM 41 %"), std::string::npos)
      << "Blackwell's newer call alone: " << v.out;
  EXPECT_EQ(v.out.find(std::to_string(pids[3]) + " SM"), std::string::npos) << v.out;
}

}  // namespace
}  // namespace gpureap::e2e
