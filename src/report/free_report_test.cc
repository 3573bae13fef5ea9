#include "report/free_report.h"
#include "gpu/test_devices.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace gpureap::report {
namespace {

// defects-wave1 D14: a process named so that it colours the terminal and rings
// the bell.
const std::string kComm = "\x1b[31mRED\x1b[0m\x07";
const std::string kShown = "\\x1b[31mRED\\x1b[0m\\x07";

bool has_control_char(const std::string& s) {
  for (unsigned char c : s)
    if ((c < 0x20 && c != '\n') || c == 0x7f) return true;
  return false;
}

reclaim::Action action(const std::string& comm) {
  reclaim::Action a;
  a.id = {4242, 1234};
  a.comm = comm;
  a.signal = reclaim::Signal::sigterm;
  a.via = "pidfd";
  a.outcome = reclaim::Outcome::exited;
  return a;
}

TEST(FreeText, ProcessTextIsEscapedInEveryLine) {
  reclaim::ReclaimReport r;
  r.actions.push_back(action(kComm));
  r.respawners.push_back({{4000, 1}, kComm, 3, true, "", "", ""});
  r.respawners.push_back({{4001, 1}, kComm, 2, false, "kill 4001 \x1b[2J", "", ""});
  r.notes.push_back("cgroup.kill not used for /x: pid 7 (" + kComm + ") is not in the plan");
  reclaim::GpuRelease g;
  g.uuid = "GPU-x";
  g.before = 1;
  r.gpus.push_back(g);
  r.leftovers.push_back({gpu::dev(0),
                         reclaim::LeftoverClass::live_holder,
                         {4242},
                         {"pid 4242 (" + kComm + ") cmd: a\nb"},
                         "widen it \x1b]0;title\x07"});
  std::string out = free_text(r, Style{});
  EXPECT_FALSE(has_control_char(out)) << out;
  EXPECT_NE(out.find("pid 4242 (" + kShown + ") via pidfd"), std::string::npos) << out;
  EXPECT_EQ(out.find("start 1234"), std::string::npos) << "no raw clock ticks: " << out;
  EXPECT_NE(out.find("pid 4000 (" + kShown + ") kept respawning"), std::string::npos) << out;
  EXPECT_NE(out.find("pid 4001 (" + kShown + ") respawns GPU holders (2x) and was left alone"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("To stop it: kill 4001 \\x1b[2J"), std::string::npos) << out;
  EXPECT_NE(out.find("Note: cgroup.kill not used for /x: pid 7 (" + kShown + ")"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("cmd: a\\nb"), std::string::npos) << out;
}

// Issue 52 (seen on an H100): memory a holder left alone was said to be "kept by holders
// left alone" although it had come back. Only memory still above the baseline is.
TEST(FreeText, MemoryThatCameBackIsNotKeptByHoldersLeftAlone) {
  constexpr std::uint64_t kMiB = 1ULL << 20, kGiB = 1ULL << 30;
  reclaim::ReclaimReport r;
  reclaim::GpuRelease g;
  g.uuid = "GPU-x";
  g.total = 80 * kGiB;
  g.baseline = 8 * kMiB;
  g.before = 8 * kGiB;
  g.used = 8 * kMiB;
  g.left_alone_bytes = 8 * kGiB;
  g.freed = true;
  r.gpus.push_back(g);
  EXPECT_EQ(free_text(r, Style{}).find("kept by holders left alone"), std::string::npos)
      << free_text(r, Style{});
  r.gpus[0].used = 3 * kGiB + 8 * kMiB;  // a holder left alone keeps 3 GiB of it
  EXPECT_NE(free_text(r, Style{}).find("3.00 GiB kept by holders left alone"), std::string::npos)
      << free_text(r, Style{});
}

// Issue 54: a holder free stopped waiting for once its memory was back while the kernel
// finished its exit is said so, with the time, in the text and in the JSON; never "exited".
TEST(FreeText, AHolderExitingWithItsMemoryBackIsSaidSo) {
  reclaim::ReclaimReport r;
  reclaim::Action a = action("python3");
  a.outcome = reclaim::Outcome::exiting;
  a.exiting_at = 0.253;
  r.actions.push_back(a);
  const std::string out = free_text(r, Style{});
  EXPECT_NE(out.find("pid 4242 (python3) via pidfd -> exiting, its GPU memory back at +0.253s"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("exited"), std::string::npos) << out;
  const std::string json = free_json(reclaim::Plan{}, r, false, {}).dump(2);
  EXPECT_NE(json.find("\"exiting_at_seconds\": 0.253"), std::string::npos) << json;
  EXPECT_NE(json.find("\"exited_at_seconds\": null"), std::string::npos) << json;
}

TEST(FreeText, ASystemdUnitThatRestartsTheWorkerIsNamedWithItsStopCommand) {
  reclaim::ReclaimReport r;
  r.settled_seconds = 5;
  r.respawners.push_back(
      {{4100, 7}, "python3", 0, false, "systemctl stop llm.service", "llm.service", "always"});
  r.respawners.push_back(
      {{4101, 8}, "launcher", 2, false, "systemctl stop job.service", "job.service", "on-failure"});
  std::string out = free_text(r, Style{});
  EXPECT_NE(out.find("llm.service restarts its worker when it exits (Restart=always; pid 4100 "
                     "(python3) was its main process); watched 5.0 s after the release: no restart "
                     "yet. To stop it: systemctl stop llm.service\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("job.service restarts its worker when it exits (Restart=on-failure; pid 4101 "
                     "(launcher) was its main process); restarted GPU holders 2x. To stop it: "
                     "systemctl stop job.service\n"),
            std::string::npos)
      << out;
  auto j = free_json(reclaim::Plan{}, r, false);
  EXPECT_EQ(j["respawners"][0]["unit"], "llm.service");
  EXPECT_EQ(j["respawners"][0]["restart"], "always");
}

TEST(PlanText, ProcessTextIsEscaped) {
  reclaim::Plan plan;
  plan.targets.push_back({{4242, 1234},
                          kComm,
                          "",
                          "us\x1b"
                          "er",
                          gpu::devs({0}),
                          1,
                          "orphaned"});
  plan.skipped.push_back(
      {{4243, 1}, kComm, gpu::devs({0}), 1, reclaim::SkipKind::not_permitted, "owned by \x1b[2J"});
  std::string out = plan_text(plan, Style{});
  EXPECT_FALSE(has_control_char(out)) << out;
  EXPECT_NE(out.find("[" + kShown + "]"), std::string::npos) << out;
  EXPECT_NE(out.find("owned by \\x1b[2J"), std::string::npos) << out;
}

TEST(PlanText, GraceZeroSaysSigkillAtOnce) {
  reclaim::Plan plan;
  plan.targets.push_back({{4242, 1234}, "python3", "python3 serve.py", "me", gpu::devs({0}), 1, "orphaned"});
  EXPECT_NE(plan_text(plan, Style{}).find("SIGTERM, then SIGKILL"), std::string::npos);
  std::string zero = plan_text(plan, Style{}, std::chrono::milliseconds(0));
  EXPECT_NE(zero.find("SIGKILL at once: --grace 0"), std::string::npos) << zero;
  EXPECT_EQ(zero.find("SIGTERM"), std::string::npos) << zero;
}

TEST(PlanText, LongReasonsWrapInTheirColumn) {
  reclaim::Plan plan;
  plan.targets.push_back({{4242, 1234},
                          "python3",
                          "python3 serve.py",
                          "me",
                          gpu::devs({0}),
                          90ULL << 30,
                          "holds 90.0 GiB on GPU 0; orphaned: re-parented to 1 (systemd)"});
  std::string out = plan_text(plan, Style{});
  // The first line has every column; the rest of the reason follows in the WHY column.
  const std::string first = "holds 90.0 GiB on GPU 0; orphaned:";
  const auto row = out.find("  4242 ");
  ASSERT_NE(row, std::string::npos) << out;
  const auto why_column = out.find(first, row) - out.rfind('\n', row) - 1;
  EXPECT_NE(out.find(first + "           python3 serve.py\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\n" + std::string(why_column, ' ') + "re-parented to 1 (systemd)\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("re-parent "), std::string::npos) << out;
}

// Issue 25: a MIG device's name ("0/gi1/ci0") is wider than the pipe layout's 7-wide GPU
// column; the column is as wide as the widest, so every row's columns line up with the
// header's (and the why's continuation stays under WHY). Whole GPUs keep 7.
TEST(PlanText, TheGpuColumnIsAsWideAsAMigDevicesName) {
  reclaim::Plan plan;
  const gpu::DeviceId mig{0, 1u, 0u};
  plan.targets.push_back({{4242, 1234}, "python3", "python3 a.py", "me", {mig}, 6ULL << 30,
                          "holds 6.0 GiB on GPU 0/gi1/ci0; orphaned: re-parented to 1 (systemd)"});
  plan.targets.push_back({{4243, 1234}, "python3", "python3 b.py", "me", gpu::devs({1}), 1ULL << 30,
                          "orphaned"});
  plan.skipped.push_back({{4244, 1}, "python3", {gpu::DeviceId{0, 2u, 0u}}, 1ULL << 30,
                          reclaim::SkipKind::not_matched, "not orphaned"});
  const std::string out = plan_text(plan, Style{});
  auto line_of = [&](const std::string& text) {
    const auto at = out.find(text);
    EXPECT_NE(at, std::string::npos) << text << "\n" << out;
    if (at == std::string::npos) return std::string();
    const auto start = out.rfind('\n', at) + 1;
    return out.substr(start, out.find('\n', at) - start);
  };
  const std::string header = line_of("PID ");
  const std::string a = line_of("4242 ");
  const std::string b = line_of("4243 ");
  // GPU MEM is right-aligned: its values end where the header does.
  const auto mem_end = header.find("GPU MEM") + 6;
  EXPECT_TRUE(a[mem_end] != ' ' && a[mem_end + 1] == ' ') << out;
  EXPECT_TRUE(b[mem_end] != ' ' && b[mem_end + 1] == ' ') << out;
  for (const char* column : {"WHY", "COMMAND"}) {
    const auto at = header.find(column);
    ASSERT_NE(at, std::string::npos) << header;
    ASSERT_GT(a.size(), at) << out;
    EXPECT_NE(a[at], ' ') << column << "\n" << out;
    EXPECT_EQ(a[at - 1], ' ') << column << "\n" << out;
    EXPECT_NE(b[at], ' ') << column << "\n" << out;
    EXPECT_EQ(b[at - 1], ' ') << column << "\n" << out;
  }
  EXPECT_EQ(a.find("0/gi1/ci0"), header.find("GPU")) << out;
  // The why's second line starts under WHY.
  const std::string rest = line_of("re-parented to 1 (systemd)");
  EXPECT_EQ(rest.find_first_not_of(' '), header.find("WHY")) << out;
  EXPECT_NE(out.find("GPU 0/gi2/ci0 "), std::string::npos) << out;

  reclaim::Plan whole;
  whole.targets.push_back({{4243, 1234}, "python3", "python3 b.py", "me", gpu::devs({1}), 1, "x"});
  EXPECT_NE(plan_text(whole, Style{}).find("  PID      USER       GPU        GPU MEM  WHY"),
            std::string::npos)
      << plan_text(whole, Style{});
}

// Issue 26 part 3: the plan one confirms from fits the terminal: each target's row
// cut at the edge, its why whole on the lines beneath, broken at words.
TEST(PlanText, AtTheTerminalsWidthRowsFitAndTheWhyIsWhole) {
  reclaim::Plan plan;
  const std::string cmd =
      "gpureap-sim hold --dir /tmp/node --gpu 0 --children 8 --bytes 20GiB --orphan --detach";
  const std::string why = "holds 20.0 GiB on GPU 0; orphaned: re-parented to init (pid 1)";
  plan.targets.push_back({{28836, 1234}, "python3", cmd, "root", gpu::devs({0}), 20ULL << 30, why});
  plan.skipped.push_back({{28824, 1},
                          "sglang::schedul",
                          gpu::devs({0}),
                          60ULL << 30,
                          reclaim::SkipKind::not_matched,
                          "not orphaned (its parent is alive); --orphans given, and more words"});
  for (std::size_t width : {80u, 160u}) {
    std::string out =
        plan_text(plan, Style{}, reclaim::kDefaultGrace, TableWidth{.columns = width});
    std::string joined;
    std::size_t start = 0;
    for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string line = out.substr(start, nl - start);
      EXPECT_LE(line.size(), width) << out;
      const auto text = line.find_first_not_of(' ');
      joined += (joined.empty() ? "" : " ") + line.substr(text == std::string::npos ? 0 : text);
    }
    EXPECT_NE(joined.find(why), std::string::npos) << out;
    EXPECT_NE(joined.find("--orphans given, and more words"), std::string::npos) << out;
    const auto row = out.find("  28836 ");
    ASSERT_NE(row, std::string::npos) << out;
    const std::string row_line = out.substr(row, out.find('\n', row) - row);
    if (cmd.size() + 40 > width)
      EXPECT_TRUE(row_line.size() == width && row_line.ends_with("...")) << out;
    else
      EXPECT_TRUE(row_line.ends_with(cmd)) << out;
  }
  std::string wide = plan_text(plan, Style{}, reclaim::kDefaultGrace, TableWidth{.wide = true});
  EXPECT_NE(wide.find(cmd + "\n"), std::string::npos) << wide;
}

// W2-19(d): nvidia-smi's output, one line each, never "\n" shown literally.
// Issue 37: a plan of one instance's 4 orphaned workers and one exception (its member
// with another verdict) says the instance once, the 4 in one line, the exception in a row;
// the Actions likewise.
TEST(PlanText, AnInstancesMembersWithOneVerdictAreOneLineAndTheExceptionsRows) {
  reclaim::Plan plan;
  inventory::Instance in;
  in.key = "7969";
  in.kind = inventory::InstanceKind::process_group;
  in.pgid = 7969;
  in.engine = proc::Engine::sglang;
  in.orphaned = 4;
  const reclaim::TargetLineage orphaned{reclaim::LineageVerdict::orphaned,
                                        proc::OrphanEvidence::title, "inferred",
                                        "re-parented to init (pid 1)"};
  for (unsigned g = 0; g < 5; ++g) {
    reclaim::Target t;
    t.id = {7970 + static_cast<pid_t>(g), 100};
    t.comm = "sglang::schedul";
    t.cmdline = "sglang::scheduler_TP" + std::to_string(g);
    t.user = "root";
    t.gpus = gpu::devs({g});
    t.gpu_bytes = 92ull << 30;
    t.why = "orphaned: re-parented to init (pid 1)";
    t.instance = "7969";
    t.lineage = orphaned;
    if (g == 4) {
      t.lineage->verdict = reclaim::LineageVerdict::live;
      t.lineage->reason.clear();
      t.why = "live: its server pid 7969 is alive";
    }
    plan.targets.push_back(t);
    in.members.push_back({t.id, proc::EngineRole::scheduler, ""});
    in.gpus.push_back(gpu::dev(g));
  }
  plan.instances = {in};
  for (TableWidth width : {TableWidth{}, TableWidth{.columns = 80}}) {
    // Read with the prose's line breaks undone.
    const std::string shown = plan_text(plan, Style{}, reclaim::kDefaultGrace, width);
    std::string out;
    for (std::size_t i = 0; i < shown.size(); ++i) {
      if (shown[i] != '\n') {
        out += shown[i];
        continue;
      }
      out += ' ';
      while (i + 1 < shown.size() && shown[i + 1] == ' ') ++i;
    }
    EXPECT_NE(out.find("Instance: sglang server, process group 7969"), std::string::npos) << out;
    EXPECT_NE(out.find("4 processes (pid 7970, 7971, 7972, 7973) on GPU 0,1,2,3, 368 GiB: "
                       "orphaned (inferred): re-parented to init (pid 1)"),
              std::string::npos)
        << out;
    EXPECT_EQ(out.find("sglang::scheduler_TP0"), std::string::npos) << out;
    EXPECT_NE(out.find("7974"), std::string::npos) << "the exception: " << out;
    EXPECT_NE(out.find("live: its server pid 7969 is alive"), std::string::npos) << out;
  }
  // The Actions: the 4 alike in one line, the fifth (another outcome) alone.
  reclaim::ReclaimReport r;
  for (const auto& t : plan.targets) {
    reclaim::Action a = action("sglang::schedul");
    a.id = t.id;
    a.sent_at = 0.001;
    a.exited_at = 0.01 + 0.001 * (t.id.pid - 7970);
    if (t.id.pid == 7974) a.outcome = reclaim::Outcome::still_running_after_grace;
    r.actions.push_back(a);
  }
  const std::string text = free_text(r, Style{}, &plan);
  EXPECT_NE(text.find("SIGTERM  4 processes of instance 7969 (pid 7970, 7971, 7972, 7973) via "
                      "pidfd -> exited at +0.010..0.013s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("pid 7974 (sglang::schedul) via pidfd"), std::string::npos) << text;
  // Without the plan, a line per action as before.
  EXPECT_NE(free_text(r, Style{}).find("pid 7970 (sglang::schedul"), std::string::npos);
}

TEST(FreeText, ResetOutputKeepsItsLinesW2_19) {
  reclaim::ReclaimReport r;
  reclaim::ResetOutcome reset;
  reset.gpu = gpu::dev(3);
  reset.attempted = true;
  reset.command = "nvidia-smi --gpu-reset -i 00000000:13:00.0";
  reset.output = "GPU 00000000:13:00.0 was successfully reset.\nAll done.\n";
  reset.exit_code = 0;
  reset.succeeded = true;
  r.resets.push_back(reset);
  std::string out = free_text(r, Style{});
  EXPECT_EQ(out.find("\\n"), std::string::npos) << out;
  EXPECT_NE(
      out.find("  exit 0:\n    GPU 00000000:13:00.0 was successfully reset.\n    All done.\n"),
      std::string::npos)
      << out;
  r.resets[0].output = "cannot run nvidia-smi: No such file or directory\n";
  r.resets[0].exit_code = 127;
  out = free_text(r, Style{});
  EXPECT_NE(out.find("  exit 127: cannot run nvidia-smi: No such file or directory\n"),
            std::string::npos)
      << out;
}

// W4-11(c): memory back after a GPU reset was said to come back "the driver releasing it;
// pinned host memory is unpinned here". The reset brought it back, and the line says so.
TEST(FreeText, W4_11_MemoryBackAfterAResetIsCreditedToTheReset) {
  constexpr std::uint64_t kMiB = 1ULL << 20, kGiB = 1ULL << 30;
  reclaim::ReclaimReport r;
  reclaim::GpuRelease g;
  g.gpu = gpu::dev(2);
  g.uuid = "GPU-x";
  g.total = 80 * kGiB;
  g.baseline = 2 * kMiB;
  g.before = 2 * kGiB;
  g.used = 2 * kMiB;
  g.freed = true;
  g.signalled_at = 0.0;
  g.exited_at = 0.01;
  g.unlisted_at = 0.02;
  g.freed_at = 30.71;
  r.gpus.push_back(g);
  const std::string released = free_text(r, Style{});  // no reset: the driver released it
  EXPECT_NE(released.find("freed in 30.71 s"), std::string::npos) << released;
  EXPECT_NE(released.find("the driver releasing it"), std::string::npos) << released;
  reclaim::ResetOutcome reset;
  reset.gpu = gpu::dev(2);
  reset.attempted = true;
  reset.exit_code = 0;
  reset.succeeded = true;
  r.resets.push_back(reset);
  const std::string out = free_text(r, Style{});
  EXPECT_NE(out.find("GPU 2  2.00 GiB -> 2.00 MiB  (baseline 2.00 MiB)  freed by the GPU reset in "
                     "30.71 s\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("releasing"), std::string::npos) << out;
  EXPECT_EQ(out.find("slowest phase"), std::string::npos) << out;
  r.resets[0].succeeded = false;  // a failed reset brought nothing back
  EXPECT_NE(free_text(r, Style{}).find("the driver releasing it"), std::string::npos);
}

TEST(FreeText, EachGpuTheSourceLostWhileVerifyingHasItsOwnLine) {
  reclaim::ReclaimReport r;
  for (unsigned i = 0; i < 3; ++i) {
    reclaim::GpuRelease g;
    g.gpu = gpu::dev(i);
    g.before = 1;
    if (i != 1) g.problem = fmt::format("nvmlDeviceGetMemoryInfo_v2(GPU {}): GPU is lost", i);
    r.gpus.push_back(g);
  }
  r.source_error = r.gpus[0].problem + "; " + r.gpus[2].problem;
  std::string out = free_text(r, Style{});
  EXPECT_NE(out.find("NVML failed while verifying GPU 0,2:\n"
                     "  GPU 0: nvmlDeviceGetMemoryInfo_v2(GPU 0): GPU is lost\n"
                     "  GPU 2: nvmlDeviceGetMemoryInfo_v2(GPU 2): GPU is lost\n"),
            std::string::npos)
      << out;

  r.gpus[2].problem.clear();  // one GPU: one line
  EXPECT_NE(free_text(r, Style{}).find(
                "NVML failed while verifying GPU 0: nvmlDeviceGetMemoryInfo_v2(GPU 0): GPU is "
                "lost\n"),
            std::string::npos);
  r.gpus[0].problem.clear();  // the whole query failed: NVML's own words
  r.source_error = "the NVML helper did not answer within 2 s";
  EXPECT_NE(free_text(r, Style{}).find(
                "NVML failed while verifying: the NVML helper did not answer within 2 s\n"),
            std::string::npos);
}

TEST(GpuProblemsText, EscapesAndIsEmptyWithoutProblems) {
  std::vector<reclaim::GpuRelease> gpus(2);
  gpus[1].gpu = gpu::dev(1);
  EXPECT_EQ(gpu_problems_text("NVML cannot read", gpus), "");
  gpus[1].problem = "lost \x1b[2J";
  EXPECT_EQ(gpu_problems_text("NVML cannot read", gpus), "NVML cannot read GPU 1: lost \\x1b[2J");
}

TEST(FreeRecord, NamesEveryActionWithoutProcessText) {
  reclaim::ReclaimReport r;
  r.actions.push_back(action(kComm));
  reclaim::GpuRelease g;
  g.uuid = "GPU-x";
  g.before = 10;
  g.used = 1;
  g.freed = true;
  g.freed_at = 0.5;
  r.gpus.push_back(g);
  std::string record = free_record(r);
  EXPECT_NE(record.find("SIGTERM pid 4242 start 1234 -> exited"), std::string::npos) << record;
  EXPECT_NE(record.find("GPU 0 10 -> 1 bytes: freed"), std::string::npos) << record;
  EXPECT_FALSE(has_control_char(record));
}

}  // namespace
}  // namespace gpureap::report
