#include "inventory/inventory_wire.h"
#include "inventory/release_model.h"
#include "util/units.h"
#include "gpu/test_devices.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace gpureap::inventory {
namespace {


proc::Holder rich_holder(pid_t pid, uid_t uid, std::set<unsigned> minors) {
  proc::Holder h;
  h.id = {pid, 123456789012ULL + static_cast<unsigned>(pid),
          0xABCDEF00ULL + static_cast<unsigned>(pid)};
  h.uid = uid;
  h.user = uid == 0 ? "root" : "alice";
  h.state = 'S';
  h.threads = {{pid, 'S'}, {pid + 1, 'R'}, {pid + 2, 'D'}};
  h.ppid = 1;
  h.pgid = pid - 1;
  h.sid = pid - 2;
  h.reparented = true;
  h.reparent_reason = "re-parented to init (pid 1)";
  h.group_leader_gone = true;
  h.orphaned = true;
  h.orphan_evidence = proc::OrphanEvidence::witnessed;
  h.orphan_reason = "parent python3 (pid 9), which held a GPU, died 3 s ago";
  h.detached_reason = "\"quoted\" detached text";  // travels even when unset in practice
  h.cgroup = "/system.slice/docker-3f2a.scope";
  h.container = "docker:3f2a";
  h.nspid = {pid, 7};
  h.comm = "python3";
  h.cmdline = "python3 -m sglang.launch_server --tp 8 \"quoted\" \\ back";
  h.argv = {"python3", "-m", "sglang.launch_server", "--tp", "8", "\"quoted\" \\ back", "caf\xe9"};
  h.orphaned_since = 1712345678.0512345;
  h.age_seconds = 1234.5678901234567;
  h.found_by = {proc::FoundBy::fd, proc::FoundBy::mapping};
  for (unsigned m : minors)
    h.nodes.insert({proc::NodeKind::gpu, m, "/dev/nvidia" + std::to_string(m)});
  h.nodes.insert({proc::NodeKind::ctl, std::nullopt, "/dev/nvidiactl"});
  h.nodes.insert({proc::NodeKind::uvm, std::nullopt, "/dev/nvidia-uvm"});
  h.gpu_minors = std::move(minors);
  h.wchan = "futex_wait_queue";
  h.pinned_host_bytes = 243ull << 30;
  return h;
}

gpu::GpuInfo gpu_info(unsigned index, std::uint64_t used, std::vector<gpu::GpuProcess> procs) {
  gpu::GpuInfo g;
  g.id = gpu::dev(index);
  g.name = "NVIDIA H200";
  g.uuid = "GPU-7282-" + std::to_string(index);
  g.pci_bus_id = "00000000:1" + std::to_string(index) + ":00.0";
  g.minor = index;
  g.memory = gpu::GpuMemory{141 * kGiB, used, 512 * kMiB};
  g.processes = std::move(procs);
  g.processes_known = true;
  g.persistence_mode = true;
  return g;
}

// Every field set to something other than its default, by hand (not through
// build_inventory), so a field the wire forgets shows up as a difference.
Inventory rich_inventory() {
  Inventory inv;
  inv.source_state = gpu::SourceState::partial;
  inv.source_problem = "nvmlDeviceGetMemoryInfo_v2(GPU 2): GPU is lost";
  inv.driver_version = "570.86.15";
  inv.host_pid_namespace = false;
  inv.as_root = true;
  GpuView v0;
  v0.info = gpu_info(
      0, 20 * kGiB,
      {{100, 19 * kGiB, gpu::ProcessKind::compute, 37, 12},
       {101, std::nullopt, gpu::ProcessKind::mps}});
  v0.baseline = {600 * kMiB, true};
  v0.holders = {{rich_holder(100, 0, {0, 1}), 19 * kGiB, true},
                {rich_holder(300, 1000, {0}), std::nullopt, false, /*client*/ true}};
  v0.holders[0].sm_percent = 37;  // NVML's per-process sample (a hint)
  v0.holders[0].holder.keeper = proc::KeeperClass::inheritor;
  v0.holders[0].holder.keeper_provenance = proc::Provenance::witnessed;
  v0.holders[0].holder.kept_owner = 99;
  v0.holders[0].holder.keeper_reason = "keeps 19.0 GiB of dead pid 99, whose device files it inherited";
  v0.source_unseen = {{4242, 1 * kGiB, gpu::ProcessKind::graphics}};
  v0.attributed_bytes = 19 * kGiB;
  v0.unattributed_bytes = 400 * kMiB;
  v0.unexplained = Unexplained::outside_namespace;
  v0.unexplained_detail = "NVML lists pid 4242 …";
  GpuView v2;
  v2.info.id = gpu::dev(2);
  v2.info.uuid = "GPU-lost";
  v2.info.problem = "GPU is lost";
  v2.info.hung = true;
  v2.info.persistence_mode = false;
  v2.unexplained = Unexplained::releasing;
  inv.gpus = {v0, v2};
  inv.other_holders = {rich_holder(555, 1000, {})};
  inv.other_holders[0].zombie_leader = true;
  inv.other_holders[0].run_id = "r-42";
  inv.other_holders[0].state = 'Z';
  inv.problems = {{0, "cannot list /proc"}, {77, "fd table unreadable"}};
  inv.warnings = {"/dev/nvidia9 is not the NVIDIA driver's", "baseline of GPU-x implausible"};
  inv.dead_launchers = {{4242, "python3", "python3 -m sglang.launch_server --port 30000", 1712345678.25,
                         true, false, 2}};
  inv.processes_scanned = 98765;
  inv.source = "agent";
  inv.agent_pid = 4321;
  inv.agent_degraded = {"the last look ran out of file descriptors"};
  return inv;
}

void expect_same_holder(const proc::Holder& a, const proc::Holder& b) {
  EXPECT_EQ(a.id.pid, b.id.pid);
  EXPECT_EQ(a.id.start_time, b.id.start_time);
  EXPECT_EQ(a.id.pidfs_ino, b.id.pidfs_ino);
  EXPECT_EQ(a.uid, b.uid);
  EXPECT_EQ(a.user, b.user);
  EXPECT_EQ(a.state, b.state);
  ASSERT_EQ(a.threads.size(), b.threads.size());
  for (std::size_t i = 0; i < a.threads.size(); ++i) {
    EXPECT_EQ(a.threads[i].tid, b.threads[i].tid);
    EXPECT_EQ(a.threads[i].state, b.threads[i].state);
  }
  EXPECT_EQ(a.zombie_leader, b.zombie_leader);
  EXPECT_EQ(a.ppid, b.ppid);
  EXPECT_EQ(a.pgid, b.pgid);
  EXPECT_EQ(a.sid, b.sid);
  EXPECT_EQ(a.reparented, b.reparented);
  EXPECT_EQ(a.reparent_reason, b.reparent_reason);
  EXPECT_EQ(a.group_leader_gone, b.group_leader_gone);
  EXPECT_EQ(a.run_alive, b.run_alive);
  EXPECT_EQ(a.run_gone, b.run_gone);
  EXPECT_EQ(a.orphaned, b.orphaned);
  EXPECT_EQ(a.orphan_evidence, b.orphan_evidence);
  EXPECT_EQ(a.orphan_reason, b.orphan_reason);
  EXPECT_EQ(a.detached, b.detached);
  EXPECT_EQ(a.detached_reason, b.detached_reason);
  EXPECT_EQ(a.keeper, b.keeper);
  EXPECT_EQ(a.keeper_provenance, b.keeper_provenance);
  EXPECT_EQ(a.kept_owner, b.kept_owner);
  EXPECT_EQ(a.keeper_reason, b.keeper_reason);
  EXPECT_EQ(a.cgroup, b.cgroup);
  EXPECT_EQ(a.container, b.container);
  EXPECT_EQ(a.run_id, b.run_id);
  EXPECT_EQ(a.nspid, b.nspid);
  EXPECT_EQ(a.comm, b.comm);
  EXPECT_EQ(a.cmdline, b.cmdline);
  EXPECT_EQ(a.argv, b.argv);
  EXPECT_EQ(a.orphaned_since, b.orphaned_since) << "doubles travel exactly";
  EXPECT_EQ(a.age_seconds, b.age_seconds) << "doubles travel exactly";
  EXPECT_EQ(a.found_by, b.found_by);
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (auto ia = a.nodes.begin(), ib = b.nodes.begin(); ia != a.nodes.end(); ++ia, ++ib) {
    EXPECT_EQ(ia->kind, ib->kind);
    EXPECT_EQ(ia->minor, ib->minor);
    EXPECT_EQ(ia->path, ib->path);
  }
  EXPECT_EQ(a.gpu_minors, b.gpu_minors);
  EXPECT_EQ(a.wchan, b.wchan);
  EXPECT_EQ(a.pinned_host_bytes, b.pinned_host_bytes);
}

void expect_same_info(const gpu::GpuInfo& a, const gpu::GpuInfo& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.uuid, b.uuid);
  EXPECT_EQ(a.pci_bus_id, b.pci_bus_id);
  EXPECT_EQ(a.minor, b.minor);
  ASSERT_EQ(a.memory.has_value(), b.memory.has_value());
  if (a.memory) {
    EXPECT_EQ(a.memory->total, b.memory->total);
    EXPECT_EQ(a.memory->used, b.memory->used);
    EXPECT_EQ(a.memory->reserved, b.memory->reserved);
  }
  ASSERT_EQ(a.processes.size(), b.processes.size());
  for (std::size_t i = 0; i < a.processes.size(); ++i) {
    EXPECT_EQ(a.processes[i].pid, b.processes[i].pid);
    EXPECT_EQ(a.processes[i].used_bytes, b.processes[i].used_bytes);
    EXPECT_EQ(a.processes[i].kind, b.processes[i].kind);
    EXPECT_EQ(a.processes[i].sm_percent, b.processes[i].sm_percent);
    EXPECT_EQ(a.processes[i].mem_percent, b.processes[i].mem_percent);
  }
  EXPECT_EQ(a.processes_known, b.processes_known);
  EXPECT_EQ(a.persistence_mode, b.persistence_mode);
  EXPECT_EQ(a.problem, b.problem);
  EXPECT_EQ(a.hung, b.hung);
}

void expect_same(const Inventory& a, const Inventory& b) {
  EXPECT_EQ(a.source_state, b.source_state);
  EXPECT_EQ(a.source_problem, b.source_problem);
  EXPECT_EQ(a.driver_version, b.driver_version);
  EXPECT_EQ(a.host_pid_namespace, b.host_pid_namespace);
  EXPECT_EQ(a.as_root, b.as_root);
  ASSERT_EQ(a.gpus.size(), b.gpus.size());
  for (std::size_t g = 0; g < a.gpus.size(); ++g) {
    const auto &va = a.gpus[g], &vb = b.gpus[g];
    expect_same_info(va.info, vb.info);
    EXPECT_EQ(va.baseline.bytes, vb.baseline.bytes);
    EXPECT_EQ(va.baseline.recorded, vb.baseline.recorded);
    ASSERT_EQ(va.holders.size(), vb.holders.size());
    for (std::size_t i = 0; i < va.holders.size(); ++i) {
      expect_same_holder(va.holders[i].holder, vb.holders[i].holder);
      EXPECT_EQ(va.holders[i].gpu_bytes, vb.holders[i].gpu_bytes);
      EXPECT_EQ(va.holders[i].uses_gpu, vb.holders[i].uses_gpu);
      EXPECT_EQ(va.holders[i].client, vb.holders[i].client);
      EXPECT_EQ(va.holders[i].sm_percent, vb.holders[i].sm_percent);
    }
    ASSERT_EQ(va.source_unseen.size(), vb.source_unseen.size());
    for (std::size_t i = 0; i < va.source_unseen.size(); ++i) {
      EXPECT_EQ(va.source_unseen[i].pid, vb.source_unseen[i].pid);
      EXPECT_EQ(va.source_unseen[i].used_bytes, vb.source_unseen[i].used_bytes);
      EXPECT_EQ(va.source_unseen[i].kind, vb.source_unseen[i].kind);
    }
    EXPECT_EQ(va.attributed_bytes, vb.attributed_bytes);
    EXPECT_EQ(va.unattributed_bytes, vb.unattributed_bytes);
    EXPECT_EQ(va.unexplained, vb.unexplained);
    EXPECT_EQ(va.unexplained_detail, vb.unexplained_detail);
  }
  ASSERT_EQ(a.other_holders.size(), b.other_holders.size());
  for (std::size_t i = 0; i < a.other_holders.size(); ++i)
    expect_same_holder(a.other_holders[i], b.other_holders[i]);
  ASSERT_EQ(a.problems.size(), b.problems.size());
  for (std::size_t i = 0; i < a.problems.size(); ++i) {
    EXPECT_EQ(a.problems[i].pid, b.problems[i].pid);
    EXPECT_EQ(a.problems[i].what, b.problems[i].what);
  }
  EXPECT_EQ(a.warnings, b.warnings);
  ASSERT_EQ(a.dead_launchers.size(), b.dead_launchers.size());
  for (std::size_t i = 0; i < a.dead_launchers.size(); ++i) {
    EXPECT_EQ(a.dead_launchers[i].pid, b.dead_launchers[i].pid);
    EXPECT_EQ(a.dead_launchers[i].comm, b.dead_launchers[i].comm);
    EXPECT_EQ(a.dead_launchers[i].cmdline, b.dead_launchers[i].cmdline);
    EXPECT_EQ(a.dead_launchers[i].died_at, b.dead_launchers[i].died_at);
  }
  EXPECT_EQ(a.processes_scanned, b.processes_scanned);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.agent_pid, b.agent_pid);
  EXPECT_EQ(a.agent_degraded, b.agent_degraded);
}

TEST(InventoryWire, EveryFieldSurvivesTheRoundTrip) {
  const Inventory inv = rich_inventory();
  const std::string wire = encode_inventory(inv);
  auto back = decode_inventory(wire);
  ASSERT_TRUE(back) << back.error().message;
  expect_same(inv, *back);
  EXPECT_EQ(encode_inventory(*back), wire);
}

TEST(InventoryWire, BuiltInventoryRoundTrips) {
  // As the agent keeps it: through build_inventory, with a baseline learnt.
  gpu::GpuSnapshot snap;
  snap.driver_version = "570.1";
  snap.gpus = {gpu_info(0, 20 * kGiB, {{100, 19 * kGiB, gpu::ProcessKind::compute}}),
               gpu_info(1, 300 * kMiB, {})};
  proc::ScanResult scan;
  scan.holders = {rich_holder(100, 0, {0, 1}), rich_holder(200, 1000, {0})};
  scan.problems = {{9, "memory maps unreadable"}};
  auto store = BaselineStore::in_memory();
  Inventory inv = build_inventory(snap, scan, store, /*host_ns*/ true);
  auto back = decode_inventory(encode_inventory(inv));
  ASSERT_TRUE(back) << back.error().message;
  expect_same(inv, *back);
}

TEST(InventoryWire, BytesThatAreNotUtf8TravelExactly) {
  Inventory inv = rich_inventory();
  std::string raw = "py\xff\xfe\x80thon \xc3\xa9 \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82";
  inv.gpus[0].holders[0].holder.cmdline = raw;
  inv.gpus[0].holders[0].holder.comm = std::string("a\0b", 3);
  inv.warnings.push_back("\xc0\xaf");  // an overlong '/'
  const std::string wire = encode_inventory(inv);
  auto back = decode_inventory(wire);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->gpus[0].holders[0].holder.cmdline, raw);
  EXPECT_EQ(back->gpus[0].holders[0].holder.comm, std::string("a\0b", 3));
  EXPECT_EQ(back->warnings.back(), "\xc0\xaf");
  // Valid UTF-8 stays readable text on the wire.
  EXPECT_NE(wire.find("\"NVML lists pid 4242 \xe2\x80\xa6\""), std::string::npos);
}

TEST(InventoryWire, MalformedAnswersAreErrors) {
  const std::string good = encode_inventory(rich_inventory());
  for (std::string bad : {std::string(), std::string("not json"), std::string("[1,2]"),
                          good.substr(0, good.size() / 2), std::string("{\"wire_version\":1}")}) {
    auto r = decode_inventory(bad);
    EXPECT_FALSE(r) << bad;
  }
  auto mutate = [&](auto&& change) {
    auto doc = nlohmann::json::parse(good);
    change(doc);
    return decode_inventory(doc.dump());
  };
  auto r = mutate([](auto& d) { d["gpus"][0]["holders"][0]["holder"].erase("pidfs_ino"); });
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("pidfs_ino"), std::string::npos) << r.error().message;
  EXPECT_FALSE(mutate([](auto& d) { d["gpus"][0]["info"]["index"] = -1; }));
  EXPECT_FALSE(mutate([](auto& d) { d["gpus"][0]["info"]["index"] = "0"; }));
  EXPECT_FALSE(mutate([](auto& d) { d["nvml_state"] = "exploded"; }));
  EXPECT_FALSE(mutate([](auto& d) { d["gpus"][0]["holders"][0]["holder"]["pid"] = 1ULL << 40; }));
  EXPECT_FALSE(mutate([](auto& d) { d["gpus"][0]["holders"][0]["holder"]["threads"][0] = 5; }));
  EXPECT_FALSE(mutate([](auto& d) { d["warnings"][0] = nlohmann::json{{"hex", "zz"}}; }));
  EXPECT_FALSE(mutate([](auto& d) { d["as_root"] = 1; }));
}

TEST(InventoryWire, AnotherWireVersionIsRefused) {
  auto doc = nlohmann::json::parse(encode_inventory(rich_inventory()));
  doc["wire_version"] = kWireVersion + 1;
  auto r = decode_inventory(doc.dump());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("wire version"), std::string::npos) << r.error().message;
}

TEST(InventoryWire, TheAgentsErrorIsPassedOn) {
  auto r = decode_inventory(encode_wire_error("unknown request 'hello\xff'"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "the agent answered: unknown request 'hello\xff'");
  EXPECT_FALSE(decode_inventory(R"({"error":42})"));
}

// ---- redact_for --------------------------------------------------------------------

constexpr uid_t kAlice = 1000;
constexpr uid_t kBob = 1001;

proc::Holder plain_holder(pid_t pid, uid_t uid, std::set<unsigned> minors) {
  proc::Holder h = rich_holder(pid, uid, std::move(minors));
  h.orphaned = false;
  h.orphan_reason.clear();
  h.wchan.clear();
  return h;
}

// Root's view of a node: GPU 0 used by bob's 100 (NVML lists it) and alice's 200
// (NVML lists it), bob's 300 holds GPU 1 by an inherited fd only (NVML lists
// nobody there), bob's 400 has nvidiactl only, alice's 500 too.
struct Node {
  gpu::GpuSnapshot snap;
  proc::ScanResult root_scan;
};

Node sample_node() {
  Node n;
  n.snap.driver_version = "570.1";
  n.snap.gpus = {gpu_info(0, 30 * kGiB + 500 * kMiB,
                          {{100, 20 * kGiB, gpu::ProcessKind::compute},
                           {200, 10 * kGiB, gpu::ProcessKind::compute}}),
                 gpu_info(1, 8 * kGiB, {})};
  proc::Holder bob_nvml = plain_holder(100, kBob, {0, 1});
  bob_nvml.zombie_leader = true;
  bob_nvml.state = 'Z';
  bob_nvml.run_id = "r-1";  // from its environ: bob's secret
  bob_nvml.run_gone = true;
  bob_nvml.orphaned = true;
  bob_nvml.orphan_evidence = proc::OrphanEvidence::run_gone;
  bob_nvml.orphan_reason = "its gpureap run r-1 is gone";
  proc::Holder alice_nvml = plain_holder(200, kAlice, {0, 1});
  alice_nvml.wchan = "futex";
  proc::Holder bob_fd_only = plain_holder(300, kBob, {1});
  proc::Holder bob_ctl = plain_holder(400, kBob, {});
  proc::Holder alice_ctl = plain_holder(500, kAlice, {});
  n.root_scan.holders = {bob_nvml, alice_nvml, bob_fd_only, bob_ctl, alice_ctl};
  n.root_scan.problems = {{66, "fd table unreadable"}};
  n.root_scan.processes_scanned = 321;
  return n;
}

TEST(RedactFor, RootSeesEverything) {
  Node n = sample_node();
  auto store = BaselineStore::in_memory();
  Inventory inv = build_inventory(n.snap, n.root_scan, store, /*host_ns*/ true);
  expect_same(redact_for(0, inv, OtherUsers::visible), inv);
}

TEST(RedactFor, AUserSeesWhatItsOwnScanWouldShow) {
  Node n = sample_node();
  auto store = BaselineStore::in_memory();
  store.observe_idle("GPU-7282-0", 141 * kGiB, 500 * kMiB);
  Inventory inv = build_inventory(n.snap, n.root_scan, store, /*host_ns*/ true);
  inv.warnings = {"a warning"};
  inv.source = "scan";
  ASSERT_EQ(inv.gpus[1].unexplained, Unexplained::no_holder)
      << "root sees bob's fd-only opener on GPU 1: a client, NVML lists no holder (W4-04)";

  // Alice's direct scan: her own processes whole; bob's fds unreadable, so his
  // 100 only as describe_processes() gives it (NVML names it), and neither his
  // 300 nor his 400.
  proc::ScanResult alice_scan;
  proc::Holder bob_described = n.root_scan.holders[0];
  bob_described.found_by.clear();
  bob_described.nodes.clear();
  bob_described.gpu_minors.clear();
  bob_described.zombie_leader = false;
  bob_described.run_id.clear();
  bob_described.run_gone = false;
  bob_described.orphaned = false;
  bob_described.orphan_evidence = proc::OrphanEvidence::none;
  bob_described.orphan_reason.clear();
  alice_scan.holders = {bob_described, n.root_scan.holders[1], n.root_scan.holders[4]};
  auto alice_store = BaselineStore::in_memory();
  alice_store.observe_idle("GPU-7282-0", 141 * kGiB, 500 * kMiB);
  Inventory expected = build_inventory(n.snap, alice_scan, alice_store, /*host_ns*/ true);

  Inventory got = redact_for(kAlice, inv, OtherUsers::visible);
  EXPECT_FALSE(got.as_root);
  ASSERT_EQ(got.gpus.size(), 2u);
  for (std::size_t g = 0; g < 2; ++g) {
    SCOPED_TRACE("GPU " + std::to_string(g));
    const auto &vg = got.gpus[g], &ve = expected.gpus[g];
    ASSERT_EQ(vg.holders.size(), ve.holders.size());
    for (std::size_t i = 0; i < vg.holders.size(); ++i) {
      expect_same_holder(vg.holders[i].holder, ve.holders[i].holder);
      EXPECT_EQ(vg.holders[i].gpu_bytes, ve.holders[i].gpu_bytes);
      EXPECT_EQ(vg.holders[i].uses_gpu, ve.holders[i].uses_gpu);
    }
    EXPECT_EQ(vg.baseline.bytes, ve.baseline.bytes);
    EXPECT_EQ(vg.baseline.recorded, ve.baseline.recorded);
    EXPECT_EQ(vg.attributed_bytes, ve.attributed_bytes);
    EXPECT_EQ(vg.unattributed_bytes, ve.unattributed_bytes);
    EXPECT_EQ(vg.unexplained, ve.unexplained);
    EXPECT_EQ(vg.unexplained_detail, ve.unexplained_detail);
  }
  // Spot checks of what that means.
  ASSERT_EQ(got.gpus[0].holders.size(), 2u);
  const auto& bob = got.gpus[0].holders[0];
  EXPECT_EQ(bob.holder.id.pid, 100);
  EXPECT_EQ(bob.gpu_bytes, 20 * kGiB);
  EXPECT_EQ(bob.holder.found_by, std::set<proc::FoundBy>{proc::FoundBy::source});
  EXPECT_TRUE(bob.holder.nodes.empty());
  EXPECT_TRUE(bob.holder.run_id.empty());
  EXPECT_EQ(bob.holder.cmdline, n.root_scan.holders[0].cmdline) << "cmdline is world-readable";
  EXPECT_EQ(bob.holder.id.pidfs_ino, n.root_scan.holders[0].id.pidfs_ino);
  const auto& alice = got.gpus[0].holders[1];
  EXPECT_EQ(alice.holder.wchan, "futex") << "her own process: kept whole";
  EXPECT_TRUE(alice.holder.found_by.contains(proc::FoundBy::fd));
  ASSERT_EQ(got.gpus[1].holders.size(), 1u) << "only alice's 200 has node 1 open, as she sees";
  // The launchers the agent saw die: alice hears only of the one that led her workers.
  {
    Inventory with_launchers = inv;
    for (auto& view : with_launchers.gpus)
      for (auto& gh : view.holders) gh.holder.pgid = gh.holder.uid == kAlice ? 190 : 90;
    with_launchers.dead_launchers = {{90, "python3", "bob's server --secret", 1.0, true, false, 1},
                                     {190, "python3", "alice's server", 2.0, true, false, 1}};
    Inventory redacted = redact_for(kAlice, with_launchers, OtherUsers::visible);
    ASSERT_EQ(redacted.dead_launchers.size(), 1u);
    EXPECT_EQ(redacted.dead_launchers[0].pid, 190);
    EXPECT_EQ(redact_for(0, with_launchers, OtherUsers::visible).dead_launchers.size(), 2u);
  }
  EXPECT_EQ(got.gpus[1].holders[0].holder.id.pid, 200);
  EXPECT_FALSE(got.gpus[1].holders[0].uses_gpu);
  EXPECT_EQ(got.gpus[1].unexplained, Unexplained::no_holder)
      << "her scan cannot see bob's 300, so nothing explains GPU 1's memory";
  ASSERT_EQ(got.other_holders.size(), 1u);
  EXPECT_EQ(got.other_holders[0].id.pid, 500);
  // Problems: the agent's own, and one saying other users' processes were not read.
  ASSERT_EQ(got.problems.size(), 2u);
  EXPECT_EQ(got.problems[0].pid, 0);
  EXPECT_NE(got.problems[0].what.find("other users"), std::string::npos);
  EXPECT_EQ(got.problems[1].pid, 66);
  EXPECT_EQ(got.warnings, inv.warnings);
  EXPECT_EQ(got.processes_scanned, 321u);
  EXPECT_EQ(got.driver_version, "570.1");

  // Bob sees his own 300 and 400 whole and alice's 200 as NVML names it.
  Inventory as_bob = redact_for(kBob, inv, OtherUsers::visible);
  ASSERT_EQ(as_bob.gpus[1].holders.size(), 2u);
  EXPECT_EQ(as_bob.gpus[1].holders[0].holder.id.pid, 300);
  EXPECT_FALSE(as_bob.gpus[1].holders[0].uses_gpu) << "an fd-only opener NVML lists nowhere: a client";
  EXPECT_TRUE(as_bob.gpus[1].holders[0].client);
  EXPECT_EQ(as_bob.gpus[1].holders[1].holder.id.pid, 100) << "his own 100 has node 1 open";
  EXPECT_EQ(as_bob.gpus[1].unexplained, Unexplained::no_holder);
  EXPECT_EQ(as_bob.gpus[0].holders[0].holder.run_id, "r-1");
  ASSERT_EQ(as_bob.other_holders.size(), 1u);
  EXPECT_EQ(as_bob.other_holders[0].id.pid, 400);
}

TEST(RedactFor, WithoutNvmlAnotherUsersHoldersAreInvisible) {
  Node n = sample_node();
  n.snap.state = gpu::SourceState::hung;
  n.snap.problem = "NVML did not answer";
  n.snap.gpus.clear();
  auto store = BaselineStore::in_memory();
  Inventory inv = build_inventory(n.snap, n.root_scan, store, /*host_ns*/ true);
  ASSERT_EQ(inv.gpus.size(), 2u);
  Inventory got = redact_for(kAlice, inv, OtherUsers::visible);
  EXPECT_EQ(got.source_state, gpu::SourceState::hung);
  EXPECT_EQ(got.source_problem, "NVML did not answer");
  ASSERT_EQ(got.gpus.size(), 2u) << "alice's 200 holds nodes 0 and 1";
  for (const auto& v : got.gpus) {
    ASSERT_EQ(v.holders.size(), 1u);
    EXPECT_EQ(v.holders[0].holder.id.pid, 200);
  }
  Inventory nobody = redact_for(4242, inv, OtherUsers::visible);
  EXPECT_TRUE(nobody.gpus.empty());
  EXPECT_TRUE(nobody.other_holders.empty());
}

TEST(RedactFor, ReleasingStaysReleasing) {
  gpu::GpuSnapshot snap;
  snap.gpus = {gpu_info(0, 60 * kGiB, {})};
  auto store = BaselineStore::in_memory();
  Inventory inv = build_inventory(snap, {}, store, /*host_ns*/ true, {{gpu::dev(0), 20 * kGiB, {}, {}, false, std::nullopt}});
  ReleaseTracker().observe(inv, util::system_clock().now());  // the model: it fell
  ASSERT_EQ(inv.gpus[0].unexplained, Unexplained::releasing);
  Inventory got = redact_for(kAlice, inv, OtherUsers::visible);
  EXPECT_EQ(got.gpus[0].unexplained, Unexplained::releasing);
  EXPECT_EQ(got.gpus[0].unexplained_detail, inv.gpus[0].unexplained_detail);
}

TEST(WithoutPids, AsAScanThatSkippedThem) {
  Node n = sample_node();
  auto store = BaselineStore::in_memory();
  Inventory inv = build_inventory(n.snap, n.root_scan, store, /*host_ns*/ true);
  // A scan told to skip 100 and 300 (and problem pid 66) never saw them.
  proc::ScanResult skipping;
  skipping.holders = {n.root_scan.holders[1], n.root_scan.holders[3], n.root_scan.holders[4]};
  skipping.processes_scanned = n.root_scan.processes_scanned;
  auto store2 = BaselineStore::in_memory();
  Inventory expected = build_inventory(n.snap, skipping, store2, /*host_ns*/ true);

  Inventory got = without_pids(inv, {100, 300, 66});
  ASSERT_EQ(got.gpus.size(), 2u);
  expect_same(got, expected);
  ASSERT_EQ(got.gpus[0].source_unseen.size(), 1u) << "NVML still lists 100";
  EXPECT_EQ(got.gpus[0].source_unseen[0].pid, 100u);
  EXPECT_TRUE(got.problems.empty());
  expect_same(without_pids(inv, {}), inv);
}

}  // namespace
}  // namespace gpureap::inventory
