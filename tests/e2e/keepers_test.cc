// Keepers and clients end to end (issue 52): memory a dead process leaves is held by
// whoever keeps it, and a monitor with the device open is never a whole-GPU free's target.
// Real processes on the simulated node: `hold --inheritor` (a child forked after the
// allocation keeps the device files), `--ipc-importer` (a process of its own session
// imported the memory), `--client-only` (a monitor).

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace keepers_test {

using json = nlohmann::json;
using namespace std::chrono_literals;

constexpr std::uint64_t kGiB = 1ULL << 30;

// The holders of `gpu` in a status document whose pid is `pid`, or null.
const json* holder_of(const json& status, const std::string& gpu, pid_t pid) {
  const json* g = gpu_of(status, gpu);
  if (!g) return nullptr;
  for (const auto& h : (*g)["holders"])
    if (h["pid"] == pid) return &h;
  return nullptr;
}

// The H100 shape: the owner is dead and reaped, NVML still lists its pid with the bytes,
// and the child that inherited its device files keeps them. status credits the child,
// says how it keeps them, and no longer shows the dead pid as holding them (nor as a
// process of another namespace); `free --orphans` frees it: exit 0, the result the memory.
TEST(Keepers, AnInheritorHoldsItsDeadOwnersMemoryAndFreeOrphansFreesIt) {
  SimNode node({"--gpus", "2", "--memory", "80GiB"});
  auto held = node.hold({"--gpu", "0", "--bytes", "8GiB", "--inheritor"});
  ASSERT_NE(held.keeper, 0);
  const pid_t owner = held.holders.at(0).first;
  ASSERT_FALSE(alive(owner));

  auto status = node.gpureap({"status", "--json", "--no-agent"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  const json doc = status.json();
  const json* keeper = holder_of(doc, "0", held.keeper);
  ASSERT_NE(keeper, nullptr) << doc.dump(1);
  EXPECT_EQ((*keeper)["gpu_bytes"], 8 * kGiB);
  EXPECT_TRUE((*keeper)["uses_gpu"]);
  EXPECT_EQ((*keeper)["keeper"]["class"], "inheritor");
  EXPECT_EQ((*keeper)["keeper"]["owner_pid"], owner);
  EXPECT_EQ(holder_of(doc, "0", owner), nullptr) << "the dead owner holds nothing";
  EXPECT_EQ((*gpu_of(doc, "0"))["state"], "held");
  EXPECT_TRUE((*gpu_of(doc, "0"))["unattributed"].is_null()) << doc.dump(1);

  auto text = node.gpureap({"status", "--no-agent"});
  EXPECT_NE(text.out.find("keeps 8.00 GiB of dead pid " + std::to_string(owner) +
                          ", whose device files it inherited"),
            std::string::npos)
      << text.out;

  auto freed = node.gpureap({"free", "--orphans", "--gpu", "0", "--yes"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(held.keeper));
  EXPECT_EQ(freed.out.find("kept by holders left alone"), std::string::npos) << freed.out;
  EXPECT_EQ(freed.out.find("Left alone"), std::string::npos) << freed.out;
  EXPECT_NE(freed.out.find("8.00 GiB -> "), std::string::npos) << freed.out;
  auto after = node.gpureap({"status", "--json", "--no-agent", "--gpu", "0"}).json();
  EXPECT_EQ((*gpu_of(after, "0"))["state"], "free") << after.dump(1);
}

// The owner a zombie, as on the H100 (its parent, here this test, has not reaped it): NVML
// lists the zombie; the keeper is credited, the zombie shown holding nothing.
TEST(Keepers, AZombieOwnersMemoryIsItsInheritorsToo) {
  SimNode node({"--gpus", "1", "--memory", "80GiB"});
  auto held = node.hold({"--gpu", "0", "--bytes", "8GiB", "--inheritor"}, /*foreground*/ true);
  ASSERT_NE(held.keeper, 0);
  ASSERT_TRUE(SimNode::eventually([&] { return state_of(held.leader) == 'Z'; }));
  const json doc = node.gpureap({"status", "--json", "--no-agent"}).json();
  const json* keeper = holder_of(doc, "0", held.keeper);
  ASSERT_NE(keeper, nullptr) << doc.dump(1);
  EXPECT_EQ((*keeper)["gpu_bytes"], 8 * kGiB);
  EXPECT_NE((*keeper)["keeper"]["reason"].get<std::string>().find("a zombie"), std::string::npos);
  EXPECT_EQ(holder_of(doc, "0", held.leader), nullptr) << doc.dump(1);
  auto freed = node.gpureap({"free", "--orphans", "--gpu", "0", "--yes"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(held.keeper));
}

// An importer of a dead exporter's memory is listed by NVML with the bytes it keeps (as
// on an H100): status credits it, and the exporter is gone from every list. Nothing a
// look can read says "imported" (docs/orphans.md), and a process of its own session is no
// orphan: `free --orphans` leaves it alone; `free --pid` frees the memory.
TEST(Keepers, AnImporterIsCreditedWithTheMemoryItKeepsAndFreedByPid) {
  SimNode node({"--gpus", "2", "--memory", "80GiB"});
  auto held = node.hold({"--gpu", "1", "--bytes", "4GiB", "--ipc-importer"});
  ASSERT_NE(held.keeper, 0);
  const pid_t exporter = held.holders.at(0).first;
  const json doc = node.gpureap({"status", "--json", "--no-agent"}).json();
  const json* importer = holder_of(doc, "1", held.keeper);
  ASSERT_NE(importer, nullptr) << doc.dump(1);
  EXPECT_EQ((*importer)["gpu_bytes"], 4 * kGiB + 512 * (1ULL << 20));
  EXPECT_TRUE((*importer)["keeper"].is_null()) << "no witness, no claim: " << doc.dump(1);
  EXPECT_EQ(holder_of(doc, "1", exporter), nullptr);
  EXPECT_EQ((*gpu_of(doc, "1"))["state"], "held");

  auto orphans = node.gpureap({"free", "--orphans", "--gpu", "1", "--yes"});
  EXPECT_TRUE(alive(held.keeper)) << orphans.out;
  auto freed = node.gpureap({"free", "--pid", std::to_string(held.keeper), "--yes"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(held.keeper));
  auto after = node.gpureap({"status", "--json", "--no-agent", "--gpu", "1"}).json();
  EXPECT_EQ((*gpu_of(after, "1"))["state"], "free") << after.dump(1);
}

// The agent's audit records of signals to `pid`.
std::vector<json> audit_signals_to(const SimNode& node, pid_t pid) {
  std::vector<json> out;
  std::ifstream in(node.env().at("GPUREAP_STATE_DIR") + "/audit.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j["record"] == "signal" && j["target"]["pid"] == pid)
      out.push_back(std::move(j));
  }
  return out;
}

// An importer the agent saw import (issue 52): it saw the exporter listed, then dead, at
// the look its importer's NVML figure grew by the exporter's bytes (as on an H100). It is
// named `importer` with the bytes it keeps, by the agent's answer, its event and a direct
// look alike (the record in the state directory); `free --orphans` takes it, exit 0, the
// result the memory. (Without the witness, a look names no importer: the test above.)
TEST(Keepers, AnImporterTheAgentSawImportIsNamedEverywhereAndFreeOrphansFreesIt) {
  SimNode node({"--gpus", "2", "--memory", "80GiB"});
  WatchChild agent = start_json_agent(node);
  auto held = node.hold({"--gpu", "1", "--bytes", "4GiB", "--ipc-importer", "--holder-lives"});
  ASSERT_NE(held.keeper, 0);
  const pid_t exporter = held.holders.at(0).first;
  ASSERT_TRUE(alive(exporter));
  ASSERT_TRUE(node.agent_sees({exporter, held.keeper})) << agent.transcript();
  ASSERT_EQ(::kill(exporter, SIGKILL), 0);  // ours: started by this test's hold

  const std::string says = "keeps 4.00 GiB of dead pid " + std::to_string(exporter);
  auto event = agent.wait_for_json(
      [&](const json& j) {
        return j.value("event", "") == "orphaned_memory" &&
               j.value("detail", "").find("importer: it " + says) != std::string::npos;
      },
      30s);
  ASSERT_TRUE(event) << agent.transcript();
  EXPECT_EQ((*event)["holders"][0]["pid"], held.keeper);

  for (const bool direct : {false, true}) {
    std::vector<std::string> args = {"status", "--json"};
    if (direct) args.push_back("--no-agent");
    const json doc = node.gpureap(args).json();
    EXPECT_EQ(doc["source"], direct ? "scan" : "agent");
    const json* importer = holder_of(doc, "1", held.keeper);
    ASSERT_NE(importer, nullptr) << doc.dump(1);
    EXPECT_EQ((*importer)["gpu_bytes"], 4 * kGiB + 512 * (1ULL << 20));
    EXPECT_EQ((*importer)["keeper"]["class"], "importer") << doc.dump(1);
    EXPECT_EQ((*importer)["keeper"]["owner_pid"], exporter);
    EXPECT_EQ((*importer)["keeper"]["provenance"], "inferred");
    EXPECT_NE((*importer)["keeper"]["reason"].get<std::string>().find(
                  says + " (gpureap-sim), whose memory it imported (CUDA IPC)"),
              std::string::npos)
        << doc.dump(1);
  }
  auto text = node.gpureap({"status", "--no-agent"});
  EXPECT_NE(text.out.find("keeper, importer (pid " + std::to_string(held.keeper) + "): " + says),
            std::string::npos)
      << text.out;
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();

  auto freed = node.gpureap({"free", "--orphans", "--gpu", "1", "--yes"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(held.keeper));
  EXPECT_EQ(freed.out.find("kept by holders left alone"), std::string::npos) << freed.out;
  EXPECT_EQ(freed.out.find("Left alone"), std::string::npos) << freed.out;
  auto after = node.gpureap({"status", "--json", "--no-agent", "--gpu", "1"}).json();
  EXPECT_EQ((*gpu_of(after, "1"))["state"], "free") << after.dump(1);
}

// The reaper (issue 52, item 2) takes a keeper of a dead owner's memory as that memory's
// holder when the agent saw the owner die: an inheritor (it saw the owner, its parent, die)
// and an importer (it saw the import). Both freed, the reap event says freed, the audit
// trail records each signal with the keeper it hit, and both GPUs are free afterwards.
TEST(Keepers, TheReaperFreesAWitnessedInheritorAndLeavesAnImporterToAPerson) {
  SimNode node({"--gpus", "2", "--memory", "80GiB"});
  WatchChild agent = start_json_agent(node, {"--reap-orphans-after", "500ms"});
  auto inherited = node.hold({"--gpu", "0", "--bytes", "8GiB", "--inheritor", "--holder-lives"});
  auto imported = node.hold({"--gpu", "1", "--bytes", "4GiB", "--ipc-importer", "--holder-lives"});
  ASSERT_NE(inherited.keeper, 0);
  ASSERT_NE(imported.keeper, 0);
  const pid_t owner = inherited.holders.at(0).first, exporter = imported.holders.at(0).first;
  ASSERT_TRUE(node.agent_sees({owner, inherited.keeper, exporter, imported.keeper}))
      << agent.transcript();
  ASSERT_EQ(::kill(exporter, SIGKILL), 0);  // ours, by pid
  // The import is announced first, so that when the inheritor's reap is seen, the
  // importer had been a named keeper for longer than --reap-orphans-after.
  ASSERT_TRUE(agent.wait_for_json(
      [&](const json& j) {
        return j.value("event", "") == "orphaned_memory" &&
               j.value("detail", "").find("importer: it keeps") != std::string::npos;
      },
      60s))
      << agent.transcript();
  ASSERT_EQ(::kill(owner, SIGKILL), 0);

  std::set<pid_t> reaped;
  ASSERT_TRUE(agent.wait_for_json(
      [&](const json& j) {
        EXPECT_NE(j.value("event", ""), "reap_failed") << j.dump();
        if (j.value("event", "") == "reaped")
          for (const auto& h : j["holders"]) reaped.insert(h["pid"].get<pid_t>());
        return reaped.contains(inherited.keeper);
      },
      60s))
      << agent.transcript();
  EXPECT_FALSE(alive(inherited.keeper));
  // The importer's link to the dead exporter is an inference (bytes that grew at the
  // exporter's death): the reaper leaves it, though it was due before the inheritor.
  EXPECT_FALSE(reaped.contains(imported.keeper)) << agent.transcript();
  EXPECT_TRUE(alive(imported.keeper));
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();

  auto sig = audit_signals_to(node, inherited.keeper);
  ASSERT_FALSE(sig.empty());
  EXPECT_EQ(sig[0]["actor"], "watch-reaper");
  EXPECT_EQ(sig[0]["target"]["keeper"]["class"], "inheritor") << sig[0].dump();
  EXPECT_EQ(sig[0]["target"]["keeper"]["owner_pid"], owner) << sig[0].dump();
  EXPECT_EQ(sig[0]["target"]["keeper"]["provenance"], "witnessed") << sig[0].dump();
  EXPECT_TRUE(audit_signals_to(node, imported.keeper).empty());

  // A person frees it: free --orphans takes an inferred keeper.
  auto freed = node.gpureap({"free", "--orphans", "--gpu", "1", "--yes"}, 60s);
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(imported.keeper)) << freed.out;
  auto after = node.gpureap({"status", "--json", "--no-agent"}).json();
  EXPECT_EQ((*gpu_of(after, "0"))["state"], "free") << after.dump(1);
  EXPECT_EQ((*gpu_of(after, "1"))["state"], "free") << after.dump(1);
}

// ux-wave5-review #10: a whole-GPU free planned SIGTERM for the user's own nvitop (a 0-byte
// process with the node open). It is a client: not planned, not signalled, listed by
// status only with -v; --pid still names it.
// The same client on a GPU whose memory nobody listed holds (a stuck release): still a
// client, one verdict with the release model's (W4-04), so a whole-GPU free leaves the
// monitor alone and calls the memory driver-held, not the monitor's.
TEST(Keepers, AClientBesideStuckMemorySurvivesAWholeGpuFree) {
  SimNode node({"--gpus", "2", "--memory", "80GiB"});
  auto monitor = node.hold({"--gpu", "1", "--client-only", "--comm", "nv-hostengine"});
  node.hold({"--gpu", "1", "--bytes", "4GiB", "--stuck"});
  const pid_t client = monitor.leader;
  wait_until_older_than(client, 5.0);  // older than any NVML list (kClientMinAgeSeconds)
  auto freed = node.gpureap(
      {"--json", "free", "--gpu", "1", "--yes", "--timeout", "5s", "--release-budget", "1s"});
  EXPECT_EQ(freed.exit_code, 1) << freed.out << freed.err;
  EXPECT_TRUE(alive(client)) << freed.out;
  EXPECT_NE(freed.out.find("driver_held"), std::string::npos) << freed.out;
}

TEST(Keepers, AClientSurvivesAWholeGpuFree) {
  SimNode node({"--gpus", "2", "--memory", "80GiB"});
  auto monitor = node.hold({"--gpu", "1", "--client-only", "--comm", "nvitop"});
  auto worker = node.hold({"--gpu", "1", "--bytes", "2GiB"});
  const pid_t client = monitor.leader;
  ASSERT_TRUE(alive(client));
  wait_until_older_than(client, 5.0);  // older than any NVML list (kClientMinAgeSeconds)

  auto plan = node.gpureap({"free", "--gpu", "1", "--dry-run"});
  EXPECT_EQ(plan.out.find(std::to_string(client)), std::string::npos) << plan.out;
  auto freed = node.gpureap({"free", "--gpu", "1", "--yes"});
  EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  EXPECT_FALSE(alive(worker.holders.at(0).first));
  EXPECT_TRUE(alive(client)) << freed.out;

  const std::string pid = std::to_string(client);
  EXPECT_EQ(node.gpureap({"status", "--no-agent"}).out.find(pid), std::string::npos);
  auto verbose = node.gpureap({"status", "--no-agent", "-v"});
  EXPECT_NE(verbose.out.find("clients (the device open, no memory"), std::string::npos)
      << verbose.out;
  EXPECT_NE(verbose.out.find(pid + " (nvitop)"), std::string::npos) << verbose.out;
  auto doc = node.gpureap({"status", "--json", "--no-agent"}).json();
  ASSERT_NE(holder_of(doc, "1", client), nullptr);
  EXPECT_TRUE((*holder_of(doc, "1", client))["client"]);

  auto named = node.gpureap({"free", "--pid", pid, "--yes"});
  EXPECT_EQ(named.exit_code, 0) << named.out << named.err;
  EXPECT_FALSE(alive(client));
}

}  // namespace keepers_test
}  // namespace gpureap::e2e
