#include "report/watch_events.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>

#include "util/enum_names.h"
#include "util/host_name.h"
#include "util/units.h"
#include "gpu/test_devices.h"

namespace gpureap::report {
namespace {

// The "hostname" an event carries: this host's, as JSON.
std::string event_host_json() {
  const std::string h = host_name();
  return h.empty() ? "null" : nlohmann::json(h).dump();
}

using inventory::Event;
using inventory::EventKind;
constexpr double kTime = 1712345678.25;  // 19:34:38 UTC

// Times are local: the tests fix the zone.
class WatchEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("TZ", "UTC", 1);
    ::tzset();
  }
};

inventory::EventHolder holder(pid_t pid, std::optional<std::uint64_t> bytes,
                              std::string comm = "python3") {
  return {{pid, 9000u + static_cast<unsigned>(pid)}, std::move(comm), "alice", bytes, "", ""};
}

Event orphans(std::size_t n) {
  Event e;
  e.kind = EventKind::orphaned_memory;
  e.time = kTime;
  e.gpu = gpu::dev(3);
  e.uuid = "GPU-3";
  for (std::size_t i = 0; i < n; ++i) e.holders.push_back(holder(4242 + int(i), 10 * kGiB));
  e.bytes = n * 10 * kGiB;
  e.detail = "re-parented to init (pid 1)";
  return e;
}

TEST_F(WatchEvents, OrphanedMemoryNamesHoldersParentAndTheFree) {
  Event e = orphans(8);
  e.parent =
      inventory::DeadParent{4100, "sglang.launch", "python3 -m sglang.launch_server", kTime - 0.2};
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 3: 80.0 GiB orphaned: 8 holders (python3 pid 4242, python3 pid 4243, "
            "python3 pid 4244 and 5 more) — parent sglang.launch (pid 4100) died 0.2 s ago; "
            "re-parented to init (pid 1); free them: gpureap free --orphans --gpu 3\n");
  EXPECT_EQ(
      watch_event_json(e),
      R"j({"schema_version":2,"event":"orphaned_memory","level":"warning","time":"2024-04-05T19:34:38.250000+00:00","time_unix":1712345678.25,"hostname":)j" + event_host_json() + R"j(,"gpu":3,"gpus":[3],)j"
      R"j("uuid":"GPU-3","bytes":85899345920,"holders":[)j"
      R"j({"pid":4242,"start_time":13242,"comm":"python3","user":"alice","gpu_bytes":10737418240,"container":null},)j"
      R"j({"pid":4243,"start_time":13243,"comm":"python3","user":"alice","gpu_bytes":10737418240,"container":null},)j"
      R"j({"pid":4244,"start_time":13244,"comm":"python3","user":"alice","gpu_bytes":10737418240,"container":null},)j"
      R"j({"pid":4245,"start_time":13245,"comm":"python3","user":"alice","gpu_bytes":10737418240,"container":null},)j"
      R"j({"pid":4246,"start_time":13246,"comm":"python3","user":"alice","gpu_bytes":10737418240,"container":null},)j"
      R"j({"pid":4247,"start_time":13247,"comm":"python3","user":"alice","gpu_bytes":10737418240,"container":null},)j"
      R"j({"pid":4248,"start_time":13248,"comm":"python3","user":"alice","gpu_bytes":10737418240,"container":null},)j"
      R"j({"pid":4249,"start_time":13249,"comm":"python3","user":"alice","gpu_bytes":10737418240,"container":null}],)j"
      R"j("parent":{"pid":4100,"comm":"sglang.launch","cmdline":"python3 -m sglang.launch_server",)j"
      R"j("died_at":1712345678.05},"instance":null,"class":null,"provenance":null,"detail":"re-parented to init (pid 1)"})j"
      "\n");
}

// A tensor-parallel server's crash: one line naming the server, its ranks and GPUs, and
// the command that frees exactly it.
TEST_F(WatchEvents, AnInstancesOrphansAreOneLineNamingTheServer) {
  Event e = orphans(2);
  e.gpu.reset();
  e.gpus = gpu::devs({0, 1});
  inventory::Instance in;
  in.key = "4721";
  in.kind = inventory::InstanceKind::process_group;
  in.pgid = 4721;
  in.engine = proc::Engine::sglang;
  in.launcher_pid = 4721;
  in.gpus = gpu::devs({0, 1});
  in.bytes = 20 * kGiB;
  in.orphaned = 2;
  in.members = {{{4242, 1}, proc::EngineRole::scheduler, "TP0"},
                {{4243, 1}, proc::EngineRole::scheduler, "TP1"}};
  e.instance = in;
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 0,1: 20.0 GiB orphaned: sglang server, process group 4721, launcher "
            "gone: 2 processes (scheduler TP0, TP1) on GPU 0,1, 20.0 GiB, ORPHANED — re-parented "
            "to init (pid 1); free it: gpureap free --orphans --instance 4721\n");
  const std::string json = watch_event_json(e);
  EXPECT_NE(json.find(R"j("gpu":null,"gpus":[0,1],)j"), std::string::npos) << json;
  EXPECT_NE(json.find(R"j("instance":{"key":"4721","kind":"process_group","pgid":4721,)j"),
            std::string::npos)
      << json;
}

TEST_F(WatchEvents, OneOrphanWithoutAParent) {
  Event e = orphans(1);
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 3: 10.0 GiB orphaned: 1 holder (python3 pid 4242) — re-parented to "
            "init (pid 1); free it: gpureap free --orphans --gpu 3\n");
  auto j = nlohmann::json::parse(watch_event_json(e));
  EXPECT_FALSE(j.contains("parent")) << "absent when the agent did not see the parent die";
}

// W3-12(b): a witnessed orphan's reason names its dead parent; the line says it once.
TEST_F(WatchEvents, TheDeadParentIsSaidOnceW3_12) {
  Event e = orphans(1);
  e.parent = inventory::DeadParent{4100, "python3", "python3 -m sglang.launch_server", kTime - 0.2};
  e.detail = "its parent python3 (pid 4100), a server, was seen to die 200 ms ago; re-parented "
             "to init (pid 1)";
  const std::string line = watch_event_line(e, Style{});
  EXPECT_EQ(line.find("parent python3 (pid 4100) died"), std::string::npos) << line;
  EXPECT_NE(line.find("its parent python3 (pid 4100), a server, was seen to die"), std::string::npos)
      << line;
}

// W3-12(b), the remainder: the instance's heading names its dead launcher, so the line
// does not add "parent ... died" before the reason.
TEST_F(WatchEvents, TheDeadLauncherNamedByTheInstanceIsNotSaidAgainW3_12) {
  Event e = orphans(2);
  e.parent = inventory::DeadParent{4100, "gpureap-sim", "gpureap-sim hold", kTime - 0.2};
  inventory::Instance in;
  in.key = "4100";
  in.kind = inventory::InstanceKind::parent;
  in.launcher_pid = 4100;
  in.launcher_comm = "gpureap-sim";
  in.members = {{e.holders[0].id, proc::EngineRole::none, ""},
                {e.holders[1].id, proc::EngineRole::none, ""}};
  in.orphaned = 2;
  in.gpus = {gpu::dev(3)};
  e.instance = in;
  std::string line = watch_event_line(e, Style{});
  EXPECT_NE(line.find("children of gpureap-sim (pid 4100, seen to die)"), std::string::npos)
      << line;
  EXPECT_EQ(line.find("died"), std::string::npos) << line;
  // A process group whose launcher is named gone: likewise.
  e.instance->kind = inventory::InstanceKind::process_group;
  e.instance->pgid = 4100;
  line = watch_event_line(e, Style{});
  EXPECT_NE(line.find("launcher gpureap-sim (pid 4100) gone"), std::string::npos) << line;
  EXPECT_EQ(line.find("died"), std::string::npos) << line;
  // A parent that is not the instance's launcher is still named.
  e.parent->pid = 4099;
  EXPECT_NE(watch_event_line(e, Style{}).find("parent gpureap-sim (pid 4099) died"),
            std::string::npos);
}

// W4-11(a): a crashed SGLang server's event named the launcher in its heading and again in
// the witnessed reason ("its parent python3 -m sgla (pid 13656), a server, was seen to
// die"). The reason keeps how and when it died; the heading says who.
TEST_F(WatchEvents, W4_11_AWitnessedLaunchersDeathIsSaidOnceUnderItsHeading) {
  Event e = orphans(2);
  e.gpu.reset();
  e.gpus = gpu::devs({0, 1});
  e.parent = inventory::DeadParent{13656, "python3 -m sgla", "python3 -m sglang.launch_server",
                                   kTime - 0.002};
  e.detail = "its parent python3 -m sgla (pid 13656), a server, was seen to die 2 ms ago (killed "
             "by SIGKILL); re-parented to init (pid 1)";
  inventory::Instance in;
  in.key = "13656";
  in.kind = inventory::InstanceKind::process_group;
  in.pgid = 13656;
  in.engine = proc::Engine::sglang;
  in.launcher_pid = 13656;
  in.launcher_comm = "python3 -m sgla";
  in.launcher_cmdline = "python3 -m sglang.launch_server --model-path M --tp 2";
  in.gpus = gpu::devs({0, 1});
  in.orphaned = 2;
  in.members = {{e.holders[0].id, proc::EngineRole::scheduler, "TP0"},
                {e.holders[1].id, proc::EngineRole::scheduler, "TP1"}};
  e.instance = in;
  const std::string line = watch_event_line(e, Style{});
  EXPECT_NE(line.find("(pid 13656) gone"), std::string::npos) << line;
  EXPECT_NE(line.find("ORPHANED — the launcher was seen to die 2 ms ago (killed by SIGKILL); "
                      "re-parented to init (pid 1); free it: gpureap free --orphans --instance "
                      "13656"),
            std::string::npos)
      << line;
  std::size_t named = 0;
  for (std::size_t at = 0; (at = line.find("13656", at)) != std::string::npos; ++at) ++named;
  EXPECT_EQ(named, 3u) << "heading, launcher pid, the free: " << line;
  // A parent that held a GPU keeps what it was.
  e.detail = "its parent python3 -m sgla (pid 13656), which held a GPU, was seen to die 2 ms ago";
  EXPECT_NE(watch_event_line(e, Style{}).find("— the launcher, which held a GPU, was seen to die"),
            std::string::npos)
      << watch_event_line(e, Style{});
}

// Provenance in a word: an orphan known only by one look is offered to a person.
TEST_F(WatchEvents, AnInferredOrphanSaysTheReaperLeavesItToAPerson) {
  Event e = orphans(1);
  e.holders[0].orphaned = true;
  e.holders[0].provenance = proc::Provenance::inferred;
  EXPECT_NE(watch_event_line(e, Style{}).find(
                "free it: gpureap free --orphans --gpu 3 (inferred (one look): a person may "
                "free it; nothing unattended will)"),
            std::string::npos)
      << watch_event_line(e, Style{});
  e.holders[0].provenance = proc::Provenance::witnessed;
  EXPECT_EQ(watch_event_line(e, Style{}).find("inferred"), std::string::npos);
}

// Issue 53 #12: "alert on witnessed orphans" reads a field, not `detail`: the event's
// provenance, the weakest of its orphaned holders' (one line per event stays small: a
// 16-worker crash is one line that must fit a pipe).
TEST_F(WatchEvents, TheJsonCarriesTheWeakestProvenanceOfItsOrphans) {
  Event e = orphans(2);
  for (auto& h : e.holders) h.orphaned = true;
  e.holders[0].provenance = proc::Provenance::witnessed;
  e.holders[1].provenance = proc::Provenance::owned;
  auto doc = nlohmann::json::parse(watch_event_json(e));
  EXPECT_EQ(doc["provenance"], "witnessed") << doc.dump();
  e.holders[1].provenance = proc::Provenance::inferred;
  EXPECT_EQ(nlohmann::json::parse(watch_event_json(e))["provenance"], "inferred");
  Event z = orphans(1);  // not orphaned: no provenance to carry
  doc = nlohmann::json::parse(watch_event_json(z));
  EXPECT_TRUE(doc["provenance"].is_null()) << doc.dump();
}

// W2-19(b): no advice to free what free protects (it would plan nothing).
TEST_F(WatchEvents, AProtectedOrphanGetsNoFreeAdviceW2_19) {
  Event e = orphans(1);
  e.holders[0].comm = "nv-hostengine";
  const std::string line = watch_event_line(e, Style{});
  EXPECT_EQ(line.find("gpureap free --orphans"), std::string::npos) << line;
  EXPECT_NE(line.find("gpureap free leaves it alone: nv-hostengine pid 4242 is GPU infrastructure"),
            std::string::npos)
      << line;
  // One holder free would act on: the advice stays (free signals that one).
  e.holders.push_back(holder(4300, 10 * kGiB));
  EXPECT_NE(watch_event_line(e, Style{}).find("free them: gpureap free --orphans --gpu 3"),
            std::string::npos);
}

TEST_F(WatchEvents, UnknownFiguresAreNotZero) {
  Event e = orphans(2);
  e.holders[0].gpu_bytes.reset();
  e.bytes = 10 * kGiB;
  EXPECT_NE(watch_event_line(e, Style{}).find("GPU 3: at least 10.0 GiB orphaned"),
            std::string::npos);
  e.holders[1].gpu_bytes.reset();
  e.bytes = 0;
  EXPECT_NE(watch_event_line(e, Style{}).find("GPU 3: memory unknown orphaned"), std::string::npos);
  auto j = nlohmann::json::parse(watch_event_json(e));
  EXPECT_TRUE(j["bytes"].is_null());
  EXPECT_TRUE(j["holders"][0]["gpu_bytes"].is_null());
}

TEST_F(WatchEvents, ZombieLeader) {
  Event e;
  e.kind = EventKind::zombie_leader;
  e.time = kTime;
  e.gpu = gpu::dev(0);
  e.uuid = "GPU-0";
  e.holders = {holder(4242, 6 * kGiB)};
  e.bytes = 6 * kGiB;
  e.detail = "its main thread exited; 1 live thread still holds the GPU; not a leak: its parent pid 7 is alive";
  // A mark, not a verdict: no free advised for a zombie leader whose parent lives.
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 0: 6.00 GiB held by a zombie leader, python3 pid 4242 (user alice) — "
            "its main thread exited; 1 live thread still holds the GPU; not a leak: its parent pid 7 is alive\n");
  // Orphaned (the lineage verdict, as status and --check say it): freed as one.
  e.holders[0].orphaned = true;
  e.holders[0].provenance = proc::Provenance::inferred;
  e.detail = "its main thread exited; 1 live thread still holds the GPU";
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 0: 6.00 GiB held by a zombie leader, python3 pid 4242 (user alice) — "
            "its main thread exited; 1 live thread still holds the GPU; free it: gpureap free "
            "--gpu 0 --pid 4242\n");
  auto j = nlohmann::json::parse(watch_event_json(e));
  EXPECT_EQ(j["event"], "zombie_leader");
  EXPECT_EQ(j["bytes"], 6 * kGiB);
  EXPECT_TRUE(j["class"].is_null());
}

TEST_F(WatchEvents, UnattributedMemoryHasItsClass) {
  Event e;
  e.kind = EventKind::unattributed_memory;
  e.time = kTime;
  e.gpu = gpu::dev(2);
  e.uuid = "GPU-2";
  e.bytes = 8 * kGiB;
  e.unexplained = inventory::Unexplained::driver_held;
  e.detail =
      "8.00 GiB above the idle baseline with no process holding the GPU anywhere: the driver "
      "still holds it. Only a GPU reset (`gpureap free --reset --gpu 2`) or a reboot frees it.";
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 2: 8.00 GiB not explained by any visible process [driver_held] — 8.00 "
            "GiB above the idle baseline with no process holding the GPU anywhere: the driver "
            "still holds it. Only a GPU reset (`gpureap free --reset --gpu 2`) or a reboot frees "
            "it.\n");
  EXPECT_EQ(watch_event_json(e),
            R"j({"schema_version":2,"event":"unattributed_memory","level":"warning","time":"2024-04-05T19:34:38.250000+00:00","time_unix":1712345678.25,"hostname":)j" + event_host_json() + R"j(,"gpu":2,"gpus":[2],)j"
            R"j("uuid":"GPU-2","bytes":8589934592,"holders":[],"instance":null,"class":"driver_held","provenance":null,"detail":)j"
            R"j("8.00 GiB above the idle baseline with no process holding the GPU anywhere: the )j"
            R"j(driver still holds it. Only a GPU reset (`gpureap free --reset --gpu 2`) or a )j"
            R"j(reboot frees it."})j"
            "\n");
  e.unexplained = inventory::Unexplained::unknown;
  e.detail = "8.00 GiB not attributed: NVML gave no process list for this GPU.";
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 2: 8.00 GiB not explained by any visible process [unknown] — 8.00 GiB "
            "not attributed: NVML gave no process list for this GPU. Inspect: gpureap status "
            "--gpu 2\n");
}

TEST_F(WatchEvents, MemoryFreed) {
  Event e;
  e.kind = EventKind::memory_freed;
  e.time = kTime;
  e.gpu = gpu::dev(0);
  e.uuid = "GPU-0";
  e.bytes = 16 * kGiB;
  e.detail = "2 orphaned holders are gone; GPU 0 is back at its baseline (512 MiB used)";
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 0: 16.0 GiB freed — 2 orphaned holders are gone; GPU 0 is back at its "
            "baseline (512 MiB used)\n");
  EXPECT_EQ(nlohmann::json::parse(watch_event_json(e))["bytes"], 16 * kGiB);
}

TEST_F(WatchEvents, NvmlDownAndUp) {
  Event down;
  down.kind = EventKind::source_down;
  down.time = kTime;
  down.detail = "NVML did not answer within 2000 ms";
  EXPECT_EQ(watch_event_line(down, Style{}),
            "2024-04-05T19:34:38.250000+00:00 NVML down — NVML did not answer within 2000 ms; holders are still watched "
            "through /proc, without memory figures, until NVML answers (check dmesg for Xid "
            "errors)\n");
  EXPECT_EQ(watch_event_json(down),
            R"j({"schema_version":2,"event":"nvml_down","level":"error","time":"2024-04-05T19:34:38.250000+00:00","time_unix":1712345678.25,"hostname":)j" + event_host_json() + R"j(,"gpu":null,"gpus":[],)j"
            R"j("uuid":null,"bytes":null,"holders":[],"instance":null,"class":null,"provenance":null,)j"
            R"j("detail":"NVML did not answer within 2000 ms"})j"
            "\n");
  Event up = down;
  up.kind = EventKind::source_up;
  up.gpu = gpu::dev(1);
  up.uuid = "GPU-1";
  up.detail = "NVML answers for GPU 1 again: its memory figures are live again";
  EXPECT_EQ(watch_event_line(up, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 1: NVML up — NVML answers for GPU 1 again: its memory figures are "
            "live again\n");
  EXPECT_EQ(nlohmann::json::parse(watch_event_json(up))["gpu"], 1);
}

TEST_F(WatchEvents, Reaping) {
  Event e = orphans(2);
  e.kind = EventKind::reap_planned;
  e.detail = "orphaned for 10.0 s (--reap-orphans-after 10s)";
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 3: would reap 2 holders (python3 pid 4242, python3 pid 4243) holding "
            "20.0 GiB (--reap-dry-run) — orphaned for 10.0 s (--reap-orphans-after 10s)\n");
  e.kind = EventKind::reaped;
  e.detail = "freed in 0.31 s";
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 3: reaped 2 holders (python3 pid 4242, python3 pid 4243) holding 20.0 "
            "GiB — freed in 0.31 s\n");
  e.kind = EventKind::reap_failed;
  e.detail = "memory still held after 60 s";
  EXPECT_EQ(watch_event_line(e, Style{}),
            "2024-04-05T19:34:38.250000+00:00 GPU 3: reaping failed for 2 holders (python3 pid 4242, python3 pid 4243) "
            "holding 20.0 GiB — memory still held after 60 s; see: gpureap status --gpu 3\n");
  EXPECT_EQ(nlohmann::json::parse(watch_event_json(e))["event"], "reap_failed");
  // Over two GPUs: both named, not "--gpu ?" (W3-12).
  e.gpu.reset();
  e.gpus = {gpu::dev(2), gpu::dev(3)};
  const std::string two = watch_event_line(e, Style{});
  EXPECT_NE(two.find("see: gpureap status --gpu " + gpu::device_list(e.gpus) + "\n"),
            std::string::npos)
      << two;
  EXPECT_EQ(two.find("--gpu ?"), std::string::npos) << two;
}

TEST_F(WatchEvents, ProcessTextIsEscapedAndJsonStaysValid) {
  Event e = orphans(1);
  e.holders[0].comm = "\x1b[31mRED\xe9";
  e.parent = inventory::DeadParent{4100, "\x07x", "a\nb", kTime};
  std::string line = watch_event_line(e, Style{});
  EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
  EXPECT_EQ(line.find('\x07'), std::string::npos) << line;
  EXPECT_NE(line.find("\\x1b[31mRED\\xe9 pid 4242"), std::string::npos) << line;
  EXPECT_NE(line.find("parent \\x07x (pid 4100) died 0.0 s ago"), std::string::npos) << line;
  std::string json = watch_event_json(e);
  EXPECT_EQ(json.find('\n'), json.size() - 1) << "one line";
  auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["holders"][0]["comm"], "\x1b[31mRED\xef\xbf\xbd");
  EXPECT_EQ(j["parent"]["cmdline"], "a\nb");
}

TEST_F(WatchEvents, ColourOnlyWhenAsked) {
  Event e = orphans(1);
  EXPECT_NE(watch_event_line(e, Style{true}).find("\033[31morphaned\033[0m"), std::string::npos);
  EXPECT_EQ(watch_event_line(e, Style{false}).find('\033'), std::string::npos);
}

TEST(EventKindNames, EveryKindHasAWord) {
  using K = EventKind;
  for (auto [k, word] :
       std::vector<std::pair<K, std::string_view>>{{K::orphaned_memory, "orphaned_memory"},
                                                   {K::zombie_leader, "zombie_leader"},
                                                   {K::unattributed_memory, "unattributed_memory"},
                                                   {K::memory_freed, "memory_freed"},
                                                   {K::source_down, "nvml_down"},
                                                   {K::source_up, "nvml_up"},
                                                   {K::reap_planned, "reap_planned"},
                                                   {K::reaped, "reaped"},
                                                   {K::reap_failed, "reap_failed"},
                                                   {K::ghost_gpu, "ghost_gpu"},
                                                   {K::ghost_gpu_gone, "ghost_gpu_gone"}})
    EXPECT_EQ(enum_name(k), word);
  EXPECT_EQ(enum_values<EventKind>().size(), 11u) << "every kind, the metrics' series among them";
}

}  // namespace
}  // namespace gpureap::report

namespace gpureap::report {
namespace {

TEST(WatchEventJson, AHolderInAPodIsNamedByPodAndContainer) {
  inventory::Event e;
  e.kind = inventory::EventKind::orphaned_memory;
  e.time = 1712345678.25;
  e.gpu = gpu::dev(0);
  e.uuid = "GPU-0";
  e.holders.push_back({{4242, 13242}, "python3", "alice", 1024, "k8s-pod:6b9a8f0e/3f2a1b9c8d7e", "", false, proc::Provenance::none});
  e.bytes = 1024;
  EXPECT_NE(watch_event_json(e).find(R"("container":"k8s-pod:6b9a8f0e/3f2a1b9c8d7e")"),
            std::string::npos)
      << watch_event_json(e);
}

}  // namespace
}  // namespace gpureap::report
