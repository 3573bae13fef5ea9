#include "proc/lineage.h"

#include <gtest/gtest.h>

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
    EXPECT_TRUE(unattended_may_act(h));
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
  std::map<pid_t, DeadParent> dead{
      {401, {500, "python3", "python3 srv.py", 95, true, true, 1}},         // held a GPU
      {402, {501, "bash", "bash", 99, true, false, 1}},                     // a shell
      {403, {400, "gpureap-sim", "gpureap-sim hold", 99, true, false, 1}},  // led the group
      {404, {502, "python3", "python3 wrap.py", 99, true, false, 1}},       // no evidence
  };
  classify_lineage(hs, dead, 100);
  EXPECT_TRUE(by_pid(hs, 401).orphaned);
  EXPECT_EQ(by_pid(hs, 401).orphan_evidence, OrphanEvidence::witnessed);
  EXPECT_NE(by_pid(hs, 401).orphan_reason.find("parent python3 (pid 500), which held a GPU, "
                                               "died 5 s ago"),
            std::string::npos)
      << by_pid(hs, 401).orphan_reason;
  EXPECT_TRUE(by_pid(hs, 402).detached);
  EXPECT_FALSE(by_pid(hs, 402).orphaned);
  EXPECT_TRUE(by_pid(hs, 403).orphaned);
  EXPECT_EQ(by_pid(hs, 403).orphan_evidence, OrphanEvidence::witnessed);
  // A wrapper that held no GPU: no evidence either way beyond its group.
  EXPECT_EQ(by_pid(hs, 404).orphan_evidence, OrphanEvidence::group);
}

TEST(Lineage, AWitnessedOrphanIsOrphanedSinceItsParentDied) {
  std::vector<Holder> hs{holder(401, 1, 401, 20), holder(403, 1, 400, 20), holder(405, 1, 405, 20)};
  hs[2].comm = hs[2].cmdline = "VLLM::Worker_TP0";  // orphaned by its title alone
  std::map<pid_t, DeadParent> dead{
      {401, {500, "python3", "python3 srv.py", 95.25, true, true, 1}},
      {403, {400, "gpureap-sim", "gpureap-sim hold", 97.5, true, false, 1}},
  };
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
}

TEST(Lineage, AWitnessedVerdictOutlivesTheAgentsAnswerOnlyForTheSameAdoptedProcess) {
  // The agent called 800 orphaned (it saw the parent die); a direct look of the same
  // command cannot see that. Same identity, same adopter: kept. Another pid: not.
  std::vector<Holder> earlier{holder(800, 1, 800, 20)};
  earlier[0].orphaned = true;
  earlier[0].orphan_evidence = OrphanEvidence::witnessed;
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
