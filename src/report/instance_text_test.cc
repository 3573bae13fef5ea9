#include "report/instance_text.h"

#include <gtest/gtest.h>

#include "gpu/test_devices.h"
#include "report/replace_report.h"
#include "util/units.h"

namespace gpureap::report {
namespace {

// A vLLM TP-2 server on GPU 6,7 whose launcher 18396 serves on port 8001.
inventory::Instance live_tp2() {
  inventory::Instance in;
  in.key = "18396";
  in.engine = proc::Engine::vllm;
  in.launcher_pid = 18396;
  in.launcher_alive = true;
  in.port = 8001;
  in.members = {{{18397, 1}, proc::EngineRole::worker, "TP0"},
                {{18398, 2}, proc::EngineRole::worker, "TP1"}};
  return in;
}

// Issue 53 #4: stopping a live server is said as such, in the plan and in the question.
TEST(InstanceText, ALiveInstanceSaysThatStoppingItStopsTheServer) {
  EXPECT_EQ(live_instance_note(live_tp2()),
            "LIVE: serving on port 8001 (launcher pid 18396 alive); stopping it stops the "
            "server");
  auto orphaned = live_tp2();
  orphaned.launcher_alive = false;
  orphaned.orphaned = 2;
  EXPECT_EQ(live_instance_note(orphaned), "");
}

// `free --gpu 6` cuts a live TP-2 in half: the plan names what keeps running.
TEST(InstanceText, APlanThatCutsALiveInstanceNamesWhatKeepsRunning) {
  const auto in = live_tp2();
  EXPECT_EQ(cut_instance_note(in, {{18397, 1}}),
            "cuts instance 18396 in part: worker TP1 (pid 18398) and its launcher (pid 18396) "
            "keep running");
  EXPECT_EQ(cut_instance_note(in, {{18396, 0}, {18397, 1}, {18398, 2}}), "") << "taken whole";
  auto orphaned = in;
  orphaned.orphaned = 2;
  EXPECT_EQ(cut_instance_note(orphaned, {{18397, 1}}), "") << "not live";
}

proc::Holder orphan(pid_t pid, proc::Provenance p, std::string reason) {
  proc::Holder h;
  h.id = {pid, 1};
  h.orphaned = true;
  h.provenance = p;
  h.orphan_reason = std::move(reason);
  return h;
}

// Issue 53 #5: one spelling of a verdict and its evidence word in every view, and what
// each provenance permits said where people look.
TEST(InstanceText, AVerdictIsOneSpellingWithWhatItsProvenancePermits) {
  std::vector<proc::Holder> hs;
  for (pid_t p = 442; p >= 435; --p)
    hs.push_back(orphan(p, proc::Provenance::inferred, "re-parented to init (pid 1)"));
  hs.push_back(orphan(500, proc::Provenance::owned, "its gpureap run r-1 is gone"));
  proc::Holder d;
  d.id = {600, 1};
  d.detached = true;
  d.detached_reason = "it leads its own session (setsid)";
  hs.push_back(d);
  std::vector<const proc::Holder*> ptrs;
  for (const auto& h : hs) ptrs.push_back(&h);
  ptrs.push_back(&hs[0]);  // a holder of two GPUs is named once
  const auto lines = verdict_lines(ptrs);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0],
            "orphaned (inferred), pid 435, 436, 437, 438 and 4 more: re-parented to init (pid 1)");
  EXPECT_EQ(lines[1], "orphaned (owned), pid 500: its gpureap run r-1 is gone");
  EXPECT_EQ(lines[2], "detached, pid 600: it leads its own session (setsid)");
  EXPECT_EQ(lines[3], "inferred (one look): a person may free it; nothing unattended will");
  EXPECT_EQ(lines[4], "owned (its gpureap run's cgroup): a person or the reaper may free it");
  EXPECT_EQ(proc::orphan_verdict(proc::Provenance::witnessed), "orphaned (witnessed)");
  EXPECT_EQ(proc::orphan_verdict(""), "orphaned") << "a record from before provenance";
}

// Issue 53 #8: the launcher by its command line, not its 15-character comm; a killed run
// said while its server lives; #12: "GPU 5 holds".
TEST(InstanceText, TheHeadingNamesTheLauncherByItsCommandLineAndAGoneRun) {
  inventory::Instance in;
  in.key = "serve-595";
  in.kind = inventory::InstanceKind::run;
  in.run_id = "serve-595";
  in.run_gone = true;
  in.run_in_cgroup = true;
  in.engine = proc::Engine::sglang;
  in.launcher_pid = 600;
  in.launcher_alive = true;
  in.launcher_comm = "python3 -m sgla";
  in.launcher_cmdline =
      "python3 -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --port 30000";
  in.model = "moonshotai/Kimi-K2.5";
  in.port = 30000;
  in.gpus = {gpu::dev(5)};
  in.members = {{{601, 1}, proc::EngineRole::scheduler, "TP0"}};
  in.bytes = 30 * kGiB;
  EXPECT_EQ(instance_heading(in),
            "sglang server, gpureap run serve-595 (its gpureap run is gone), launcher python3 -m "
            "sglang.launch_server (pid 600), model moonshotai/Kimi-K2.5, port 30000: 1 process "
            "(scheduler TP0) on GPU 5, 30.0 GiB");
  EXPECT_EQ(in_use_before_launch(in).rfind("GPU 5 holds 30.0 GiB of sglang server serve-595", 0),
            0u)
      << in_use_before_launch(in);
  // W4-11(e): a run id only GPUREAP_RUN_ID names (no run cgroup) may never have been a
  // gpureap run's: not "gone", only that no gpureap run is above it.
  inventory::Instance named = in;
  named.run_in_cgroup = false;
  EXPECT_EQ(instance_heading(named).rfind(
                "sglang server, gpureap run serve-595 (named by GPUREAP_RUN_ID; no gpureap run "
                "above it), launcher",
                0),
            0u)
      << instance_heading(named);
  // Without a model or port to follow, the command line itself, cut to fit.
  in.model.reset();
  in.port.reset();
  in.launcher_cmdline = "/opt/venv/bin/python3 /srv/app/serve_my_model_with_a_long_name.py --x 1";
  EXPECT_EQ(launcher_name(in), "/opt/venv/bin/python3 /srv/app/serve_...");
  in.launcher_cmdline.clear();
  EXPECT_EQ(launcher_name(in), "python3 -m sgla");
}

// W4-11(e): two containers' runs both sglang-1; each heading says whose.
TEST(InstanceText, W4_11_AKeyTwoContainersShareIsHeadedWithItsContainer) {
  inventory::Instance in;
  in.kind = inventory::InstanceKind::run;
  in.run_id = "sglang-1";
  in.key = "sglang-1@docker:aaaaaaaaaaaa";
  in.container = "docker:aaaaaaaaaaaa";
  in.engine = proc::Engine::sglang;
  in.gpus = {gpu::dev(0)};
  in.members = {{{601, 1}, proc::EngineRole::scheduler, "TP0"}};
  in.bytes = 4 * kGiB;
  EXPECT_EQ(instance_heading(in).rfind(
                "sglang server, gpureap run sglang-1 in docker:aaaaaaaaaaaa: 1 process", 0),
            0u)
      << instance_heading(in);
  in.key = "sglang-1";  // one container has it: the key alone
  EXPECT_EQ(instance_heading(in).find("in docker"), std::string::npos) << instance_heading(in);
}

// Issue 53 #8/#12: run's "launched" line said `launched ./serve.sh` or `launched python3`
// (argv[0]); it names an engine's server, model and port, else the command line.
TEST(InstanceText, TheLaunchedLineNamesWhatTheCommandLineStarts) {
  EXPECT_EQ(launched_line({"python3", "-m", "sglang.launch_server", "--model-path",
                           "moonshotai/Kimi-K2.5", "--tp", "8", "--port", "30000"},
                          784, "python3-595"),
            "launched sglang server, model moonshotai/Kimi-K2.5, port 30000, as pid 784, run "
            "python3-595");
  EXPECT_EQ(launched_line({"./serve.sh", "--port", "8000"}, 784, "serve.sh-595"),
            "launched ./serve.sh --port 8000 as pid 784, run serve.sh-595");
  EXPECT_EQ(launched_line({"/bin/touch", "/tmp/x"}, 5, "touch-4"),
            "launched /bin/touch /tmp/x as pid 5, run touch-4");
}

// Issue 53 #12: "8 process(es)"; every count agrees with its noun.
TEST(InstanceText, TheReplaceQuestionsCountsAgreeWithTheirNouns) {
  reclaim::Plan plan;
  plan.instances = {live_tp2()};
  plan.targets.resize(1);
  EXPECT_EQ(replace_question(plan, "x"), "Stop vllm server 18396 (1 process) and launch x?");
  plan.instances.push_back(live_tp2());
  plan.instances[1].launcher_alive = false;
  plan.instances[1].orphaned = 2;
  plan.targets.resize(5);
  EXPECT_EQ(replace_question(plan, "x"),
            "Stop 1 live server and free 1 orphaned one (5 processes), then launch x?");
}

TEST(InstanceText, TheReplaceQuestionSaysStopForALiveServerAndFreeForAnOrphan) {
  reclaim::Plan plan;
  plan.instances = {live_tp2()};
  plan.targets.resize(3);
  EXPECT_EQ(replace_question(plan, "vllm serve Qwen"),
            "Stop vllm server 18396 (3 processes) and launch vllm serve Qwen?");
  plan.instances[0].launcher_alive = false;
  plan.instances[0].orphaned = 2;
  EXPECT_EQ(replace_question(plan, "vllm serve Qwen"),
            "Free vllm server 18396 (orphaned, 3 processes) and launch vllm serve Qwen?");
  plan.instances.push_back(live_tp2());
  plan.targets.resize(7);
  EXPECT_EQ(replace_question(plan, "x"),
            "Stop 1 live server and free 1 orphaned one (7 processes), then launch x?");
}

}  // namespace
}  // namespace gpureap::report
