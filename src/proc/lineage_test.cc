#include "proc/lineage.h"

#include <gtest/gtest.h>

#include <csignal>

namespace gpureap::proc {
namespace {

/// A GPU holder as a scan would describe it.
Holder holder(pid_t pid, pid_t ppid, pid_t pgid, pid_t sid, std::string comm = "python3") {
  Holder h;
  h.id = {pid, static_cast<std::uint64_t>(pid) * 10};
  h.ppid = ppid;
  h.pgid = pgid;
  h.sid = sid;
  h.comm = comm;
  h.cmdline = comm;
  h.gpu_minors = {0};
  h.reparent_reason = reparent_reason(pid, ppid, pgid, sid, /*leader exists*/ pgid == pid,
                                      std::nullopt, std::nullopt, "", false);
  h.reparented = !h.reparent_reason.empty();
  h.group_leader_gone = pgid != pid;
  return h;
}

/// What the agent saw die, as the kernel reported it: killed by SIGKILL.
std::map<pid_t, DeadParent> killed(std::map<pid_t, DeadParent> dead) {
  for (auto& [pid, d] : dead) {
    d.manner = ExitManner::signaled;
    d.exit_value = SIGKILL;
  }
  return dead;
}

const Holder& by_pid(const std::vector<Holder>& hs, pid_t pid) {
  for (const auto& h : hs)
    if (h.id.pid == pid) return h;
  throw std::runtime_error("no such holder");
}

TEST(ReparentReason, Rules) {
  EXPECT_EQ(reparent_reason(50, 1, 50, 40, true, 1, 1, "init", false),
            "re-parented to init (pid 1)");
  EXPECT_EQ(reparent_reason(50, 1, 50, 50, true, 1, 1, "init", false), "");  // a service
  // A parent in another session did not start it: adopted.
  EXPECT_EQ(reparent_reason(50, 7, 40, 30, false, 7, 7, "gpureap-reaper", false),
            "adopted by gpureap-reaper (pid 7), outside its session 30");
  // The parent's session lies outside our PID namespace (sid 0: a container entered
  // from a host session, as CI's is) and the child's inside: not the same session.
  EXPECT_EQ(reparent_reason(50, 7, 40, 30, false, 7, 0, "gpureap_proc_te", false),
            "adopted by gpureap_proc_te (pid 7), outside its session 30");
  // Both outside: nothing to conclude from sessions.
  EXPECT_EQ(reparent_reason(50, 7, 40, 0, true, 7, 0, "bash", false), "");
  // Same session, group leader gone, parent a subreaper (a container's init).
  EXPECT_EQ(reparent_reason(50, 7, 40, 30, false, 7, 30, "tini", true),
            "process group leader 40 is gone; adopted by tini (pid 7)");
  // W2-08: a pipeline: the live shell is its starter (same session, no subreaper).
  EXPECT_EQ(reparent_reason(50, 30, 40, 30, false, 30, 30, "bash", false), "");
  EXPECT_EQ(reparent_reason(50, 7, 40, 30, true, 7, 30, "tini", true), "");    // leader alive
  EXPECT_EQ(reparent_reason(50, 7, 40, 30, false, 40, 30, "tini", true), "");  // parent in group
  EXPECT_EQ(reparent_reason(50, 7, 50, 30, false, 7, 30, "tini", true), "");   // its own leader
  EXPECT_EQ(reparent_reason(50, 7, 0, 30, false, 7, 30, "tini", true), "");    // other namespace
  EXPECT_EQ(reparent_reason(50, 7, 40, 30, false, std::nullopt, std::nullopt, "", false), "");
}

TEST(Lineage, CaseStudyWorkersOfAKilledServerAreOrphaned) {
  // The server (pid 100) led its group and was SIGKILLed: 8 workers under init.
  std::vector<Holder> hs;
  for (pid_t p = 101; p <= 108; ++p) hs.push_back(holder(p, 1, 100, 20));
  classify_lineage(hs, {}, 0);
  for (const auto& h : hs) {
    EXPECT_TRUE(h.orphaned) << h.id.pid;
    EXPECT_EQ(h.orphan_evidence, OrphanEvidence::siblings);
    // One look's reading: reported and offered to a person, never acted on unattended.
    EXPECT_EQ(h.provenance, Provenance::inferred);
    EXPECT_FALSE(unattended_may_act(h));
    EXPECT_FALSE(h.detached);
  }
}

TEST(Lineage, CaseStudyInsideALiveLauncherScriptsGroupIsOrphaned) {
  // launch.sh (pid 90, alive) leads the group; its child, the server, died.
  std::vector<Holder> hs;
  for (pid_t p = 101; p <= 102; ++p) {
    hs.push_back(holder(p, 1, 90, 20));
    hs.back().group_leader_gone = false;
  }
  classify_lineage(hs, {}, 0);
  EXPECT_TRUE(by_pid(hs, 101).orphaned);
  EXPECT_TRUE(by_pid(hs, 102).orphaned);
}

TEST(Lineage, NohupServerWithLiveWorkersIsDetached) {
  // `bash -c 'nohup server &'`: the server (pid 200) under init, in the dead
  // shell's group 199; its two workers are its children, alive.
  std::vector<Holder> hs{holder(200, 1, 199, 20), holder(201, 200, 199, 20),
                         holder(202, 200, 199, 20)};
  hs[2].gpu_minors = {1};
  classify_lineage(hs, {}, 0);
  EXPECT_FALSE(by_pid(hs, 200).orphaned);
  EXPECT_TRUE(by_pid(hs, 200).detached);
  EXPECT_NE(by_pid(hs, 200).detached_reason.find("leads 2 live GPU workers"), std::string::npos)
      << by_pid(hs, 200).detached_reason;
  for (pid_t p : {201, 202}) {
    EXPECT_FALSE(by_pid(hs, p).orphaned);
    EXPECT_FALSE(by_pid(hs, p).detached);
  }
}

TEST(Lineage, SingleReparentedProcessWhoseGroupLeaderDiedIsAWeakOrphan) {
  // Its group's leader (299) is gone, its session (20) lives on: a killed server's
  // lone worker, or `bash -c 'srv &'`'s server; one look cannot tell.
  std::vector<Holder> hs{holder(300, 1, 299, 20)};
  classify_lineage(hs, {}, 0);
  EXPECT_TRUE(hs[0].orphaned);
  EXPECT_EQ(hs[0].orphan_evidence, OrphanEvidence::group);
  EXPECT_FALSE(unattended_may_act(hs[0]));
  EXPECT_NE(hs[0].orphan_reason.find("launcher unknown"), std::string::npos);
}

TEST(Lineage, ALoneProcessLeadingItsOwnGroupUnderInitIsDetached) {
  // `nohup srv &` from a terminal (job control: its own group), the shell gone since.
  std::vector<Holder> hs{holder(300, 1, 300, 20)};
  classify_lineage(hs, {}, 0);
  EXPECT_FALSE(hs[0].orphaned);
  EXPECT_TRUE(hs[0].detached);
  EXPECT_NE(hs[0].detached_reason.find("leads its own process group"), std::string::npos);
  // ux-wave5-review #12: a whole command, not "free it by --pid 300".
  EXPECT_TRUE(hs[0].detached_reason.ends_with("free it by name: gpureap free --pid 300"))
      << hs[0].detached_reason;
}

TEST(Lineage, AWorkerOfAKilledSessionLeaderIsAWeakOrphanAlone) {
  // A server that led its group and session (systemd, setsid) killed: its lone worker.
  // A daemon's double fork leaves the same shape, so: orphaned, on weak evidence.
  std::vector<Holder> hs{holder(300, 1, 290, 290)};
  classify_lineage(hs, {}, 0);
  EXPECT_TRUE(hs[0].orphaned);
  EXPECT_EQ(hs[0].orphan_evidence, OrphanEvidence::group);
}

TEST(Lineage, EngineWorkerTitleIsOrphaned) {
  std::vector<Holder> hs{holder(310, 1, 300, 20, "sglang::schedul")};
  hs[0].cmdline = "sglang::scheduler_TP3";
  classify_lineage(hs, {}, 0);
  EXPECT_TRUE(hs[0].orphaned);
  EXPECT_EQ(hs[0].orphan_evidence, OrphanEvidence::title);
}

TEST(Lineage, WorkerTitles) {
  EXPECT_TRUE(is_worker_title("VLLM::EngineCor", "VLLM::EngineCore_DP0"));
  EXPECT_TRUE(is_worker_title("x", "PD-L1_binder::Worker_TP0_EP0"));
  EXPECT_TRUE(is_worker_title("ray::IDLE", ""));
  EXPECT_TRUE(is_worker_title(
      "python3",
      "python3 -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"));
  EXPECT_FALSE(is_worker_title("python3", "python3 train.py --opt a::b"));
  EXPECT_FALSE(is_worker_title("bash", "bash"));
}

TEST(Lineage, WitnessedDeadParentDecides) {
  // The agent saw each one's parent die.
  std::vector<Holder> hs{holder(401, 1, 401, 20), holder(402, 1, 402, 20), holder(403, 1, 400, 20),
                         holder(404, 1, 399, 20)};
  std::map<pid_t, DeadParent> dead = killed({
      {401, {500, "python3", "python3 srv.py", 95, true, true, 1}},         // held a GPU
      {402, {501, "bash", "bash", 99, true, false, 1}},                     // a shell
      {403, {400, "gpureap-sim", "gpureap-sim hold", 99, true, false, 1}},  // led the group
      {404, {502, "python3", "python3 wrap.py", 99, true, false, 1}},       // no evidence
  });
  classify_lineage(hs, dead, 100);
  EXPECT_TRUE(by_pid(hs, 401).orphaned);
  EXPECT_EQ(by_pid(hs, 401).orphan_evidence, OrphanEvidence::witnessed);
  EXPECT_EQ(by_pid(hs, 401).provenance, Provenance::witnessed);
  EXPECT_EQ(by_pid(hs, 401).dead_parent, 500);
  EXPECT_NE(by_pid(hs, 401).orphan_reason.find("its parent python3 (pid 500), which held a GPU, "
                                               "was seen to die 5 s ago"),
            std::string::npos)
      << by_pid(hs, 401).orphan_reason;
  EXPECT_TRUE(by_pid(hs, 402).detached);
  EXPECT_FALSE(by_pid(hs, 402).orphaned);
  // A group leader that held no GPU and is no known server: its death was seen, but
  // that it was these workers' server is one look's reading (W3-02).
  EXPECT_TRUE(by_pid(hs, 403).orphaned);
  EXPECT_EQ(by_pid(hs, 403).provenance, Provenance::inferred);
  EXPECT_NE(by_pid(hs, 403).orphan_reason.find(
                "was seen to die 1 s ago: it was killed by SIGKILL, but it was not known as a server"),
            std::string::npos)
      << by_pid(hs, 403).orphan_reason;
  // A wrapper that held no GPU: no evidence either way beyond its group.
  EXPECT_EQ(by_pid(hs, 404).orphan_evidence, OrphanEvidence::group);
  EXPECT_EQ(by_pid(hs, 404).provenance, Provenance::inferred);
}

TEST(Lineage, AWitnessedOrphanIsOrphanedSinceItsParentDied) {
  std::vector<Holder> hs{holder(401, 1, 401, 20), holder(403, 1, 400, 20), holder(405, 1, 405, 20)};
  hs[2].comm = hs[2].cmdline = "VLLM::Worker_TP0";  // orphaned by its title alone
  std::map<pid_t, DeadParent> dead = killed({
      {401, {500, "python3", "python3 srv.py", 95.25, true, true, 1}},
      {403, {400, "python3", "python3 -m sglang.launch_server", 97.5, true, false, 1}},
  });
  classify_lineage(hs, dead, 100);
  ASSERT_TRUE(by_pid(hs, 401).orphaned);
  EXPECT_EQ(by_pid(hs, 401).orphaned_since, 95.25);
  ASSERT_TRUE(by_pid(hs, 403).orphaned);
  EXPECT_EQ(by_pid(hs, 403).orphaned_since, 97.5);
  // No witness, no time: one scan cannot tell when the parent died.
  ASSERT_TRUE(by_pid(hs, 405).orphaned);
  EXPECT_EQ(by_pid(hs, 405).orphan_evidence, OrphanEvidence::title);
  EXPECT_FALSE(by_pid(hs, 405).orphaned_since.has_value());

  // A later look of the same command keeps the agent's verdict, and when.
  std::vector<Holder> earlier = hs;
  std::vector<Holder> again{holder(401, 1, 401, 20)};
  classify_lineage(again, {}, 200, earlier);
  ASSERT_TRUE(again[0].orphaned);
  EXPECT_EQ(again[0].orphaned_since, 95.25);
}

TEST(Lineage, LiveGpureapRunMemberIsDetachedAndAGoneRunsIsOrphaned) {
  // W2-10: adopted by a live run's gpureap-reaper: the run tears it down.
  std::vector<Holder> hs{holder(600, 1, 599, 20), holder(601, 1, 599, 20)};
  hs[0].run_id = hs[1].run_id = "r-1";
  hs[0].run_alive = hs[1].run_alive = true;
  classify_lineage(hs, {}, 0);
  EXPECT_FALSE(hs[0].orphaned);
  EXPECT_FALSE(hs[1].orphaned);
  EXPECT_TRUE(hs[0].detached);
  hs[0].run_alive = false;
  hs[0].run_gone = true;
  classify_lineage(hs, {}, 0);
  EXPECT_TRUE(hs[0].orphaned);
  EXPECT_EQ(hs[0].orphan_evidence, OrphanEvidence::run_gone);
  // Named only by its environment (inherited, copied, forgeable): a hint.
  EXPECT_EQ(hs[0].provenance, Provenance::inferred);
  EXPECT_FALSE(unattended_may_act(hs[0]));
  // In the run's own cgroup with no run above it: owned.
  hs[0].run_in_cgroup = true;
  classify_lineage(hs, {}, 0);
  EXPECT_EQ(hs[0].provenance, Provenance::owned);
  EXPECT_TRUE(unattended_may_act(hs[0]));
}

TEST(Lineage, AWitnessedVerdictOutlivesTheAgentsAnswerOnlyForTheSameAdoptedProcess) {
  // The agent called 800 orphaned (it saw the parent die); a direct look of the same
  // command cannot see that. Same identity, same adopter: kept. Another pid: not.
  std::vector<Holder> earlier{holder(800, 1, 800, 20)};
  earlier[0].orphaned = true;
  earlier[0].orphan_evidence = OrphanEvidence::witnessed;
  earlier[0].provenance = Provenance::witnessed;
  earlier[0].orphan_reason = "parent python3 (pid 799), which held a GPU, died 1 s ago";
  std::vector<Holder> hs{holder(800, 1, 800, 20), holder(801, 1, 801, 20)};
  classify_lineage(hs, {}, 0, earlier);
  EXPECT_TRUE(hs[0].orphaned);
  EXPECT_EQ(hs[0].orphan_reason, earlier[0].orphan_reason);
  EXPECT_FALSE(hs[1].orphaned);
  hs[0].id.start_time += 1;  // the pid reused
  classify_lineage(hs, {}, 0, earlier);
  EXPECT_FALSE(hs[0].orphaned);
}

// The shapes of defects-wave2/3 and DESIGN's detached examples: each shape's verdict,
// its provenance, and whether an unattended path (the reaper, the Slurm hooks) may act.
// Nothing unattended acts on an inference (DESIGN, "Evidence has a provenance").
struct Shape {
  const char* name;
  std::vector<Holder> holders;
  std::map<pid_t, DeadParent> dead;
  pid_t subject;
  bool orphaned;
  bool detached;
  Provenance provenance;
  bool unattended;
};

DeadParent died(pid_t pid, std::string comm, std::string cmdline, bool held_gpu = false,
                std::size_t gpu_children = 1) {
  DeadParent d{pid, std::move(comm), std::move(cmdline), 90, true, held_gpu, gpu_children};
  d.manner = ExitManner::signaled;  // the kernel said: killed by SIGKILL
  d.exit_value = SIGKILL;
  return d;
}

DeadParent ended(DeadParent d, ExitManner manner, int value) {
  d.manner = manner;
  d.exit_value = value;
  return d;
}

Holder titled(Holder h, std::string title) {
  h.comm = title.substr(0, 15);
  h.cmdline = std::move(title);
  return h;
}

Holder nohup(Holder h) {
  h.ignores_sighup = true;
  return h;
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  // The seed: SGLang's server SIGKILLed while the agent watched it; workers titled.
  out.push_back({"seed, witnessed",
                 {titled(holder(101, 1, 100, 20), "sglang::scheduler_TP0"),
                  titled(holder(102, 1, 100, 20), "sglang::scheduler_TP1")},
                 {{101, died(100, "python3", "python3 -m sglang.launch_server --tp 2")},
                  {102, died(100, "python3", "python3 -m sglang.launch_server --tp 2")}},
                 101, true, false, Provenance::witnessed, true});
  // The same, seen by one look only (no agent, or the agent started after the crash).
  out.push_back({"seed, one look",
                 {titled(holder(101, 1, 100, 20), "sglang::scheduler_TP0"),
                  titled(holder(102, 1, 100, 20), "sglang::scheduler_TP1")},
                 {}, 101, true, false, Provenance::inferred, false});
  // A nohup'd server's workers carry SIGHUP ignored too: their titles decide.
  out.push_back({"seed under nohup, witnessed",
                 {nohup(titled(holder(101, 1, 100, 20), "sglang::scheduler_TP0"))},
                 {{101, died(100, "python3", "python3 -m sglang.launch_server", true)}},
                 101, true, false, Provenance::witnessed, true});
  // W3-02(a): launch.sh ran `nohup python3 serve.py 0 &` twice and ended; one look.
  out.push_back({"W3-02 launcher script's nohup servers, one look",
                 {nohup(holder(201, 1, 200, 20)), nohup(holder(202, 1, 200, 20))},
                 {}, 201, false, true, Provenance::none, false});
  // W3-02(b): the agent saw launch-b.sh (a script, 2 GPU children) end.
  out.push_back({"W3-02 launcher script seen to end",
                 {holder(211, 1, 210, 20), holder(212, 1, 210, 20)},
                 {{211, died(210, "launch-b.sh", "/bin/bash ./launch-b.sh", false, 2)},
                  {212, died(210, "launch-b.sh", "/bin/bash ./launch-b.sh", false, 2)}},
                 211, false, true, Provenance::none, false});
  // A script's interpreter named in argv[0] (`sh -c '...'`).
  out.push_back({"sh -c launcher seen to end",
                 {holder(221, 1, 220, 20)},
                 {{221, died(220, "sh", "sh -c python3 serve.py &")}},
                 221, false, true, Provenance::none, false});
  // W3-07: a login shell's background job; the agent saw the shell exit.
  out.push_back({"W3-07 login shell's job, witnessed",
                 {holder(231, 1, 230, 230)},
                 {{231, died(230, "bash", "bash -c python3 serve.py & sleep 1.5")}},
                 231, false, true, Provenance::none, false});
  // The same, one look: its group leader is gone, launcher unknown.
  out.push_back({"W3-07 login shell's job, one look",
                 {holder(231, 1, 230, 230)}, {}, 231, true, false, Provenance::inferred, false});
  // W3-01(b): a job of a live shell that inherited a run's GPUREAP_RUN_ID.
  out.push_back({"W3-01 inherited run id, live parent", {}, {}, 241, false, false,
                 Provenance::none, false});
  {
    Holder h = holder(241, 240, 241, 240);
    h.reparent_reason.clear();
    h.reparented = false;
    h.run_id = "train-4242";
    h.run_gone = true;
    out.back().holders = {h};
  }
  // W3-01(a): a run inside a container: its reaper is an ancestor (run_alive).
  {
    Holder h = holder(251, 250, 251, 250);
    h.reparent_reason.clear();
    h.reparented = false;
    h.run_id = "gpureap_sim-2";
    h.run_alive = true;
    out.push_back({"W3-01 run in a container", {h}, {}, 251, false, false, Provenance::none,
                   false});
  }
  // W3-10: an orphaned SGLang worker whose environment names a run: not hidden.
  {
    Holder h = titled(holder(261, 1, 260, 20), "sglang::scheduler_TP0");
    h.run_id = "x-4000";
    h.run_gone = true;
    out.push_back({"W3-10 forged run id", {h}, {}, 261, true, false, Provenance::inferred,
                   false});
  }
  // A gpureap run SIGKILLed (cgroup mode): its server is still in the run's cgroup.
  {
    Holder h = holder(271, 1, 271, 271);
    h.reparent_reason.clear();
    h.reparented = false;
    h.run_id = "serve-270";
    h.run_gone = true;
    h.run_in_cgroup = true;
    out.push_back({"killed run, its cgroup remains", {h}, {}, 271, true, false,
                   Provenance::owned, true});
  }
  // A run SIGKILLed in subreaper mode: its command (pid 275) was left to init, and this
  // worker's parent (that command) lives. The environment is a hint: inferred.
  {
    Holder h = holder(276, 275, 275, 275);
    h.reparent_reason.clear();
    h.reparented = false;
    h.run_id = "serve-274";
    h.run_gone = true;
    h.run_left_to_init = 275;
    out.push_back({"killed run in subreaper mode", {h}, {}, 276, true, false,
                   Provenance::inferred, false});
  }
  // The agent saw the run's supervisor die (subreaper mode).
  out.push_back({"run supervisor seen to die",
                 {holder(281, 1, 281, 20)},
                 {{281, [] {
                     DeadParent d = died(280, "gpureap-reaper", "gpureap run -- python3 serve.py");
                     d.run_supervisor = true;
                     return d;
                   }()}},
                 281, true, false, Provenance::witnessed, true});
  // A wrapper seen to die that held no GPU and names no server.
  out.push_back({"unknown wrapper seen to die",
                 {holder(291, 1, 290, 20)},
                 {{291, died(290, "python3", "python3 wrap.py")}},
                 291, true, false, Provenance::inferred, false});
  // A server seen to die, but the holder was started with nohup and has no title.
  out.push_back({"nohup'd child of a server seen to die",
                 {nohup(holder(301, 1, 300, 20))},
                 {{301, died(300, "python3", "python3 -m vllm.entrypoints.openai.api_server", true)}},
                 301, false, true, Provenance::none, false});
  // DESIGN: `nohup python serve.py &` from a terminal, the shell gone: its own group.
  out.push_back({"DESIGN nohup server alone", {nohup(holder(311, 1, 311, 20))}, {}, 311, false,
                 true, Provenance::none, false});
  // DESIGN: a detached server with live workers.
  out.push_back({"DESIGN detached server with live workers",
                 {holder(321, 1, 320, 20), holder(322, 321, 320, 20)},
                 {}, 321, false, true, Provenance::none, false});
  // W4-01: a GPU-using starter (exit 0) of a server started with start_new_session: the
  // server leads its own session: detached on purpose, whatever the starter held.
  out.push_back({"W4-01 setsid server of a GPU starter that exited 0",
                 {holder(501, 1, 501, 501)},
                 {{501, ended(died(500, "python3", "python3 starter.py", true), ExitManner::exited, 0)}},
                 501, false, true, Provenance::none, false});
  // Its starter killed: still a process started to outlive it (a person may free it).
  out.push_back({"W4-01 setsid server of a GPU starter that was killed",
                 {holder(503, 1, 503, 503)},
                 {{503, died(502, "python3", "python3 starter.py", true)}},
                 503, false, true, Provenance::none, false});
  // A server that exited 0 while its titled workers stayed in its group: a server that
  // finished, not a crash; the titles say orphaned, one look's reading.
  out.push_back({"W4-01 server exited 0, workers in its group",
                 {titled(holder(505, 1, 504, 20), "sglang::scheduler_TP0")},
                 {{505, ended(died(504, "python3", "python3 -m sglang.launch_server"),
                              ExitManner::exited, 0)}},
                 505, true, false, Provenance::inferred, false});
  // A server that exited non-zero (an exception) while its workers held: a crash.
  out.push_back({"W4-01 server exited 1, workers in its group",
                 {titled(holder(507, 1, 506, 20), "sglang::scheduler_TP0")},
                 {{507, ended(died(506, "python3", "python3 -m sglang.launch_server"),
                              ExitManner::exited, 1)}},
                 507, true, false, Provenance::witnessed, true});
  // The kernel did not say how it ended: no witness of a crash.
  out.push_back({"W4-01 server seen to die, manner unknown",
                 {titled(holder(509, 1, 508, 20), "sglang::scheduler_TP0")},
                 {{509, ended(died(508, "python3", "python3 -m sglang.launch_server"),
                              ExitManner::unknown, 0)}},
                 509, true, false, Provenance::inferred, false});
  // A launcher script SIGKILLed while it `wait`ed on its GPU workers (its group).
  {
    DeadParent d = died(510, "launch.sh", "/bin/bash ./launch.sh", false, 2);
    d.pgid = 510;
    out.push_back({"launcher script killed while waiting on its group's workers",
                   {holder(511, 1, 510, 20), holder(512, 1, 510, 20)},
                   {{511, d}, {512, d}}, 511, true, false, Provenance::witnessed, true});
    // The same script exiting 0 after `nohup ... &`: detached.
    out.push_back({"launcher script exited 0 after nohup",
                   {nohup(holder(513, 1, 510, 20))},
                   {{513, ended(d, ExitManner::exited, 0)}}, 513, false, true, Provenance::none,
                   false});
    // Killed, but the job ran in a group of its own (an interactive shell's job): its
    // jobs were started to outlive it (disown).
    out.push_back({"shell killed, its job in a group of its own",
                   {holder(515, 1, 515, 20)},
                   {{515, d}}, 515, false, true, Provenance::none, false});
    // Killed by SIGHUP (a terminal hung up): a job that survived was meant to.
    out.push_back({"script killed by SIGHUP",
                   {holder(517, 1, 510, 20)},
                   {{517, ended(d, ExitManner::signaled, SIGHUP)}}, 517, false, true,
                   Provenance::none, false});
  }
  // W4-05: a record (another boot's, or stale) for a process whose present parent lives
  // and is not the adopter the record names: it never re-parents it.
  {
    Holder h = holder(521, 5989, 521, 5989);
    h.reparent_reason.clear();
    h.reparented = false;
    DeadParent d = died(3121, "python3", "python3 -m sglang.launch_server --tp 2");
    out.push_back({"W4-05 stale record, live parent, no adopter", {h}, {{521, d}}, 521, false,
                   false, Provenance::none, false});
    d.adopter = 1;
    out.push_back({"W4-05 stale record, live parent, another adopter", {h}, {{521, d}}, 521,
                   false, false, Provenance::none, false});
  }
  // W4-06: a crashed server's workers adopted by a process that calls itself
  // gpureap-reaper (no run recorded it: run_alive false): the witness decides.
  {
    DeadParent d = died(530, "python3", "python3 -m sglang.launch_server --tp 2");
    d.adopter = 529;
    Holder h = titled(holder(531, 529, 530, 20), "sglang::scheduler_TP0");
    h.reparent_reason = "process group leader 530 is gone; adopted by gpureap-reaper (pid 529)";
    h.reparented = true;
    out.push_back({"W4-06 adopted by a process named gpureap-reaper", {h}, {{531, d}}, 531, true,
                   false, Provenance::witnessed, true});
  }
  // W3-10: the same crash, the workers' environment naming a made-up run whose
  // "command" was left to init: the label ranks below the witness.
  {
    Holder h = titled(holder(541, 1, 540, 20), "sglang::scheduler_TP0");
    h.run_id = "x-4000";
    h.run_gone = true;
    h.run_left_to_init = 541;
    out.push_back({"W3-10 made-up run id under a witnessed crash", {h},
                   {{541, died(540, "python3", "python3 -m sglang.launch_server")}}, 541, true,
                   false, Provenance::witnessed, true});
  }
  // A zombie leader whose parent lives: a mark, not a leak.
  {
    Holder h = holder(331, 330, 331, 330);
    h.reparent_reason.clear();
    h.reparented = false;
    h.zombie_leader = true;
    h.state = 'Z';
    out.push_back({"zombie leader, live parent", {h}, {}, 331, false, false, Provenance::none,
                   false});
  }
  // A zombie leader re-parented with a worker title: an inferred orphan like any other.
  {
    Holder h = titled(holder(341, 1, 340, 20), "VLLM::Worker_TP0");
    h.zombie_leader = true;
    out.push_back({"zombie leader, titled, re-parented", {h}, {}, 341, true, false,
                   Provenance::inferred, false});
  }
  return out;
}

TEST(Lineage, ProvenanceTableEveryShapeAndWhetherUnattendedPathsMayAct) {
  for (auto& shape : shapes()) {
    SCOPED_TRACE(shape.name);
    classify_lineage(shape.holders, shape.dead, 100);
    const Holder& h = by_pid(shape.holders, shape.subject);
    EXPECT_EQ(h.orphaned, shape.orphaned) << h.orphan_reason << h.detached_reason;
    EXPECT_EQ(h.detached, shape.detached) << h.orphan_reason << h.detached_reason;
    EXPECT_EQ(enum_name(h.provenance), enum_name(shape.provenance)) << h.orphan_reason;
    EXPECT_EQ(unattended_may_act(h), shape.unattended);
  }
}

TEST(Lineage, AWitnessRecordAppliesOnlyToTheSameProcess) {
  // What the agent saw die is kept by the holder's identity: a reused pid is not it.
  std::vector<Holder> hs{titled(holder(351, 1, 350, 20), "sglang::scheduler_TP0")};
  DeadParent d = died(350, "python3", "python3 -m sglang.launch_server", true);
  d.holder_start = hs[0].id.start_time;
  classify_lineage(hs, {{351, d}}, 100);
  EXPECT_EQ(hs[0].provenance, Provenance::witnessed);
  d.holder_start += 1;
  classify_lineage(hs, {{351, d}}, 100);
  EXPECT_EQ(hs[0].provenance, Provenance::inferred);
}

TEST(Lineage, ShellsAndScripts) {
  EXPECT_TRUE(is_shell_or_script("bash", "bash"));
  EXPECT_TRUE(is_shell_or_script("launch.sh", "/bin/bash ./launch.sh"));
  EXPECT_TRUE(is_shell_or_script("start", "/usr/bin/env bash start"));
  EXPECT_TRUE(is_shell_or_script("sh", "sh -c python3 serve.py"));
  EXPECT_FALSE(is_shell_or_script("python3", "python3 -m sglang.launch_server"));
}

TEST(Lineage, ClassifyIsIdempotent) {
  std::vector<Holder> hs{holder(700, 1, 700, 20)};
  hs[0].orphaned = true;  // a stale verdict from an earlier look
  hs[0].orphan_reason = "stale";
  hs[0].orphaned_since = 12.0;
  classify_lineage(hs, {}, 0);
  EXPECT_FALSE(hs[0].orphaned);
  EXPECT_EQ(hs[0].orphan_reason, "");
  EXPECT_FALSE(hs[0].orphaned_since.has_value());
}

}  // namespace
}  // namespace gpureap::proc
