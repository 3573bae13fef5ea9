#include "proc/proc_parse.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gpureap::proc {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(GPUREAP_FIXTURES) + "/proc/" + name, std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ParseStat, CommWithSpacesAndParentheses) {
  auto st = parse_stat(fixture("stat_weird_comm"));
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(st->pid, 4242);
  EXPECT_EQ(st->comm, "(my (weird) proc)");
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 4200);
  EXPECT_EQ(st->pgid, 4242);
  EXPECT_EQ(st->sid, 4100);
  EXPECT_EQ(st->tty_nr, 34817);  // pts/1
  EXPECT_EQ(st->flags, 4194560u);
  EXPECT_EQ(st->num_threads, 3);
  EXPECT_EQ(st->start_time, 8812345u);
  EXPECT_EQ(st->utime, 4711u);  // fields 14 and 15: top's CPU%
  EXPECT_EQ(st->stime, 1290u);
  EXPECT_EQ(st->rss_pages, 1893423);  // field 24: top's host memory
  EXPECT_FALSE(st->is_kernel_thread());
  EXPECT_EQ(parse_stat_state(fixture("stat_weird_comm")), 'S');
}

TEST(ParseStat, CommWithSpacesReparentedWorker) {
  auto st = parse_stat(fixture("stat_spaces_comm"));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->comm, "VLLM::Worker TP0");
  EXPECT_EQ(st->state, 'R');
  EXPECT_EQ(st->ppid, 1);
  EXPECT_EQ(st->num_threads, 57);
  EXPECT_EQ(st->start_time, 123456789u);
}

TEST(ParseStat, KernelThreadFromFlags) {
  auto st = parse_stat(fixture("stat_kthreadd"));  // saved from a 6.18 kernel
  ASSERT_TRUE(st);
  EXPECT_EQ(st->pid, 2);
  EXPECT_EQ(st->comm, "kthreadd");
  EXPECT_TRUE(st->flags & kPfKthread);
  EXPECT_TRUE(st->is_kernel_thread());
}

TEST(ParseStat, ZombieLeader) {
  auto st = parse_stat(fixture("stat_zombie_leader"));
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, 'Z');
  EXPECT_EQ(st->num_threads, 2);
  EXPECT_TRUE(st->flags & kPfExiting);
}

TEST(ParseStat, RejectsMalformed) {
  EXPECT_FALSE(parse_stat(""));
  EXPECT_FALSE(parse_stat("12 (cat) S 1 2 3"));  // truncated before field 22
  EXPECT_FALSE(parse_stat("12 cat S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20"));
  EXPECT_FALSE(
      parse_stat("x (cat) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0"));  // pid not a number
  EXPECT_EQ(parse_stat_state("garbage"), '?');
}

TEST(ParseStatus, NamespacePidsUidsAndPendingSignals) {
  StatusInfo s = parse_status(fixture("status_nspid"));
  EXPECT_EQ(s.name, "python3");
  EXPECT_EQ(s.state, 'S');
  EXPECT_EQ(s.real_uid, 1000u);
  EXPECT_EQ(s.effective_uid, 1001u);
  EXPECT_EQ(s.ppid, 4200);
  EXPECT_EQ(s.threads, 57);
  EXPECT_EQ(s.nspid, (std::vector<pid_t>{4242, 17, 1}));
  EXPECT_EQ(s.sig_pnd, 0u);
  EXPECT_EQ(s.shd_pnd, 0x100u);
  EXPECT_TRUE(s.sigkill_pending());
}

TEST(ParseStatus, ZombieLeaderWithThreads) {
  StatusInfo s = parse_status(fixture("status_zombie_leader"));
  EXPECT_EQ(s.state, 'Z');
  EXPECT_EQ(s.threads, 2);
  EXPECT_EQ(s.nspid, (std::vector<pid_t>{7001}));
  EXPECT_FALSE(s.sigkill_pending());
}

// Pinned and locked host memory (the slow phase of a release: inventory/release_model.h),
// in bytes; the kernel writes kB.
TEST(ParseStatus, PinnedAndLockedHostMemory) {
  StatusInfo s = parse_status(
      "Name:\tsglang::schedul\nVmLck:\t     64 kB\nVmPin:\t243000000 kB\nVmRSS:\t 9000 kB\n");
  EXPECT_EQ(s.vm_pin, 243000000ull * 1024);
  EXPECT_EQ(s.vm_lck, 64ull * 1024);
  EXPECT_EQ(s.vm_rss, 9000ull * 1024);
  EXPECT_EQ(s.resident_pinned_bytes(), (243000000ull + 64) * 1024);
  StatusInfo none = parse_status("Name:\tx\n");
  EXPECT_EQ(none.resident_pinned_bytes(), 0u);
}

// W4-08: VmLck counts locked address space: a 16 TiB PROT_NONE reservation under
// mlockall(MCL_FUTURE) reads so with 13 MiB resident. Only what is resident is pinned.
TEST(ParseStatus, W4_08_LockedAddressSpaceCountsOnlyWhatIsResident) {
  StatusInfo s = parse_status(
      "Name:\tpython3\nVmLck:\t17179869184 kB\nVmPin:\t       0 kB\nVmRSS:\t   13880 kB\n");
  EXPECT_EQ(s.vm_lck, 17179869184ull * 1024);
  EXPECT_EQ(s.resident_pinned_bytes(), 13880ull * 1024);
}

TEST(ParseStatus, MissingLinesKeepDefaults) {
  StatusInfo s = parse_status("Name:\tx\nbogus line\n");
  EXPECT_EQ(s.name, "x");
  EXPECT_FALSE(s.real_uid);
  EXPECT_TRUE(s.nspid.empty());
}

TEST(ParseCgroup, V1Docker) {
  auto entries = parse_cgroup(fixture("cgroup_v1"));
  ASSERT_EQ(entries.size(), 12u);
  EXPECT_EQ(
      entries[0],
      (CgroupEntry{12, "pids",
                   "/docker/3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a"}));
  EXPECT_EQ(entries[9].controllers, "cpu,cpuacct");
  EXPECT_EQ(entries[10].path, "/");
  std::string path = pick_cgroup_path(entries);
  EXPECT_EQ(path, "/docker/3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a");
  EXPECT_EQ(container_hint(path), "docker:3f2a1b9c8d7e");
}

TEST(ParseCgroup, V2Unit) {
  auto entries = parse_cgroup(fixture("cgroup_v2"));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0], (CgroupEntry{0, "", "/system.slice/sglang.service"}));
  EXPECT_EQ(pick_cgroup_path(entries), "/system.slice/sglang.service");
  EXPECT_EQ(container_hint(pick_cgroup_path(entries)), "systemd:sglang.service");
}

TEST(ParseCgroup, HybridPrefersSystemdWhenV2IsRoot) {
  auto entries = parse_cgroup(fixture("cgroup_hybrid"));
  ASSERT_EQ(entries.size(), 13u);
  EXPECT_EQ(entries.back(), (CgroupEntry{0, "", "/"}));
  EXPECT_EQ(pick_cgroup_path(entries), "/user.slice/user-1000.slice/session-3.scope");
  EXPECT_EQ(container_hint(pick_cgroup_path(entries)), "systemd:session-3.scope");
}

TEST(ParseCgroup, HybridFallsBackToFirstNonRootV1) {
  // Saved from the development sandbox: only the memory controller is placed.
  auto entries = parse_cgroup(fixture("cgroup_hybrid_memory_only"));
  EXPECT_EQ(pick_cgroup_path(entries), "/process_api/6cbdd5391ceb27188ba86355945e199e");
  EXPECT_EQ(container_hint(pick_cgroup_path(entries)), "");
}

TEST(ParseCgroup, EdgeCases) {
  EXPECT_EQ(pick_cgroup_path({}), "");
  EXPECT_EQ(pick_cgroup_path(parse_cgroup("0::/\n")), "/");
  auto e = parse_cgroup("garbage\n0::/a:b/c\n");  // a path may contain ':'
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].path, "/a:b/c");
}

TEST(ContainerHint, EachKind) {
  const std::string id = "3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a";
  EXPECT_EQ(container_hint("/docker/" + id), "docker:3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/system.slice/docker-" + id + ".scope"), "docker:3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/kubepods.slice/kubepods-burstable.slice/"
                           "kubepods-burstable-pod6b9a8f0e_1c2d_4e5f_8a9b_0c1d2e3f4a5b.slice/"
                           "cri-containerd-" +
                           id + ".scope"),
            "k8s-pod:6b9a8f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b/3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/kubepods.slice/kubepods-pod0a1b2c3d_0000_1111_2222_333344445555.slice/"
                           "cri-containerd-" +
                           id + ".scope"),
            "k8s-pod:0a1b2c3d-0000-1111-2222-333344445555/3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/kubepods/burstable/pod6b9a8f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b/" + id),
            "k8s-pod:6b9a8f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b/3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/kubepods/podabc-123/" + id), "k8s-pod:abc-123/3f2a1b9c8d7e");
  // The pod's own cgroup (its pause process, or a v1 hierarchy cut there): no container.
  EXPECT_EQ(container_hint("/kubepods/burstable/podabc-123"), "k8s-pod:abc-123");
  EXPECT_EQ(container_hint("/kubepods.slice/kubepods-pod0a1b_2c3d.slice/crio-" + id + ".scope"),
            "k8s-pod:0a1b-2c3d/3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/system.slice/cri-containerd-" + id + ".scope"),
            "containerd:3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/lxc/129/ns/system.slice/sglang.service"), "lxc:129");
  EXPECT_EQ(container_hint("/lxc.payload.129/system.slice/sglang.service"), "lxc:129");
  EXPECT_EQ(container_hint("/lxc.monitor.129"), "lxc:129");
  EXPECT_EQ(container_hint("/machine.slice/libpod-" + id + ".scope/container"),
            "podman:3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/machine.slice/libpod-conmon-" + id + ".scope"), "podman:3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/system.slice/sglang.service"), "systemd:sglang.service");
  EXPECT_EQ(container_hint("/user.slice/user-1000.slice/session-3.scope"),
            "systemd:session-3.scope");
  EXPECT_EQ(container_hint("/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service"),
            "systemd:vllm.service");
  EXPECT_EQ(container_hint("/gpureap.slice/gpureap-run-sglang.scope"), "gpureap-run:sglang");
  EXPECT_EQ(container_hint("/gpureap-run-trial7"), "gpureap-run:trial7");
  EXPECT_EQ(container_hint("/"), "");
  EXPECT_EQ(container_hint(""), "");
  EXPECT_EQ(container_hint("/docker/not-an-id"), "");
  EXPECT_EQ(container_hint("/user.slice"), "");
}

TEST(ContainerHint, ContainerWinsOverUnit) {
  // Docker with the systemd driver nests the container scope inside a slice;
  // Kubernetes with the docker runtime names a docker scope inside the pod.
  EXPECT_EQ(container_hint("/kubepods/besteffort/pod1234/"
                           "3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a"),
            "k8s-pod:1234/3f2a1b9c8d7e");
  EXPECT_EQ(container_hint("/lxc.payload.129/gpureap-run-x.scope"), "lxc:129");
}

TEST(ParseMaps, CudaWorkerFixture) {
  std::istringstream in(fixture("maps_cuda_worker"));
  std::vector<MapsEntry> entries;
  for (std::string line; std::getline(in, line);) {
    auto e = parse_maps_line(line);
    ASSERT_TRUE(e) << line;
    entries.push_back(*e);
  }
  ASSERT_EQ(entries.size(), 14u);

  const MapsEntry& exe = entries[1];
  EXPECT_EQ(exe.start, 0x55d0c8a3e000u);
  EXPECT_EQ(exe.end, 0x55d0c8d5c000u);
  EXPECT_EQ(exe.perms, "r-xp");
  EXPECT_EQ(exe.offset, 0x2000u);
  EXPECT_EQ(exe.dev_major, 0xfeu);
  EXPECT_EQ(exe.dev_minor, 1u);
  EXPECT_EQ(exe.inode, 1835041u);
  EXPECT_EQ(exe.path, "/usr/bin/python3.11");

  EXPECT_EQ(entries[2].path, "[heap]");
  EXPECT_EQ(entries[3].path, "");  // anonymous, no name
  EXPECT_EQ(entries[3].inode, 0u);

  const MapsEntry& gpu = entries[5];
  EXPECT_EQ(gpu.path, "/dev/nvidia0");
  EXPECT_EQ(gpu.perms, "rw-s");
  EXPECT_EQ(gpu.dev_major, 0u);
  EXPECT_EQ(gpu.dev_minor, 5u);
  EXPECT_EQ(gpu.inode, 1035u);
  EXPECT_EQ(entries[6].offset, 0x7f3a60000000u);  // UVM maps with offset = address

  EXPECT_EQ(entries[7].path, "/memfd:cuda-ipc");
  EXPECT_TRUE(entries[7].deleted);

  const MapsEntry& spaces = entries[8];
  EXPECT_EQ(spaces.path, "/home/ann/My Models/llama 3/tokenizer.bin");
  EXPECT_FALSE(spaces.deleted);
  EXPECT_EQ(spaces.dev_major, 0x103u);
  EXPECT_EQ(spaces.dev_minor, 2u);

  EXPECT_EQ(entries[9].path, "/home/ann/.cache/torch kernels/k.bin");
  EXPECT_TRUE(entries[9].deleted);
  EXPECT_EQ(entries[13].end, 0xffffffffff601000u);
}

TEST(ParseMaps, FileIdFastPathAgreesWithFullParse) {
  std::istringstream in(fixture("maps_cuda_worker"));
  for (std::string line; std::getline(in, line);) {
    auto full = parse_maps_line(line);
    auto id = parse_maps_file_id(line);
    ASSERT_TRUE(full && id) << line;
    EXPECT_EQ(id->dev_major, full->dev_major);
    EXPECT_EQ(id->dev_minor, full->dev_minor);
    EXPECT_EQ(id->inode, full->inode);
  }
}

TEST(ParseMaps, RejectsMalformed) {
  EXPECT_FALSE(parse_maps_line(""));
  EXPECT_FALSE(parse_maps_line("7f00-7f10 r-xp 00000000 fe01 12 /x"));  // no ':' in dev
  EXPECT_FALSE(parse_maps_line("7f00-7f10 r-xp 00000000 fe:01"));       // no inode
  EXPECT_FALSE(parse_maps_line("zz-7f10 r-xp 00000000 fe:01 12 /x"));   // bad address
  EXPECT_FALSE(parse_maps_file_id("7f00-7f10 r-xp 00000000 xx:01 12 /x"));
}

TEST(FormatCmdline, NulsBecomeSpaces) {
  EXPECT_EQ(format_cmdline(fixture("cmdline_sglang")),
            "python3 -m sglang.launch_server --model-path /models/Qwen 72B --tp 8");
  EXPECT_EQ(format_cmdline(std::string_view("a\0\0b\0", 5)), "a  b");
  EXPECT_EQ(format_cmdline(""), "");
  EXPECT_EQ(format_cmdline(std::string_view("\0\0", 2)), "");
}

TEST(SplitCmdline, NulsSeparateArgumentsThatMayHoldSpaces) {
  EXPECT_EQ(split_cmdline(fixture("cmdline_sglang")),
            (std::vector<std::string>{"python3", "-m", "sglang.launch_server", "--model-path",
                                      "/models/Qwen 72B", "--tp", "8"}));
  // An empty argument stays one; trailing NULs end the last.
  EXPECT_EQ(split_cmdline(std::string_view("a\0\0b\0", 5)),
            (std::vector<std::string>{"a", "", "b"}));
  // A title set with setproctitle: one argument, spaces and all.
  EXPECT_EQ(split_cmdline("sglang::scheduler_TP3 x"),
            (std::vector<std::string>{"sglang::scheduler_TP3 x"}));
  EXPECT_TRUE(split_cmdline("").empty());
  EXPECT_TRUE(split_cmdline(std::string_view("\0\0", 2)).empty());
}

TEST(ParseCharDeviceMajor, FindsTheDynamicUvmMajor) {
  const std::string text = fixture("devices_nvidia");
  EXPECT_EQ(parse_char_device_major(text, "nvidia-uvm"), 511u);
  EXPECT_EQ(parse_char_device_major(text, "nvidia"), 195u);
  EXPECT_EQ(parse_char_device_major(text, "mem"), 1u);
  // A longer name that starts with the one asked for is another driver.
  EXPECT_EQ(parse_char_device_major(text, "nvidia-uvm-tools"), std::nullopt);
  EXPECT_EQ(parse_char_device_major(text, "nvidia-caps"), 237u);
  EXPECT_EQ(parse_char_device_major(text, "sd"), std::nullopt);  // a block device
}

TEST(ParseCharDeviceMajor, OnlyTheCharacterSectionCounts) {
  EXPECT_EQ(parse_char_device_major("Character devices:\n  1 mem\n\nBlock devices:\n508 "
                                    "nvidia-uvm\n",
                                    "nvidia-uvm"),
            std::nullopt);
  EXPECT_EQ(parse_char_device_major("", "nvidia-uvm"), std::nullopt);
  EXPECT_EQ(parse_char_device_major("Character devices:\nxyz nvidia-uvm\n", "nvidia-uvm"),
            std::nullopt);
  EXPECT_EQ(parse_char_device_major("Character devices:\n 42 nvidia-uvm", "nvidia-uvm"), 42u);
}

TEST(ParseListeningTcp, OnlyListeningSocketsWithTheirPorts) {
  const std::string table =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
      "inode\n"
      "   0: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 "
      "4242 1 0000000000000000 100 0 0 10 0\n"
      "   1: 0100007F:1F40 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 "
      "4343 1 0000000000000000 20 4 30 10 -1\n"
      "   2: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A "
      "00000000:00000000 00:00000000 00000000  1000        0 5151 1 0 100 0 0 10 0\n"
      "garbage line\n";
  auto sockets = parse_listening_tcp(table);
  ASSERT_EQ(sockets.size(), 2u);
  EXPECT_EQ(sockets[0].inode, 4242u);
  EXPECT_EQ(sockets[0].port, 30000u);
  EXPECT_EQ(sockets[1].inode, 5151u);
  EXPECT_EQ(sockets[1].port, 8080u);
  EXPECT_TRUE(parse_listening_tcp("").empty());
}

TEST(ParseSocketLink, InodeOfASocketOnly) {
  EXPECT_EQ(parse_socket_link("socket:[12345]"), 12345u);
  EXPECT_FALSE(parse_socket_link("pipe:[12345]"));
  EXPECT_FALSE(parse_socket_link("socket:[]"));
  EXPECT_FALSE(parse_socket_link("socket:[12a]"));
  EXPECT_FALSE(parse_socket_link("/dev/nvidia0"));
}

}  // namespace
}  // namespace gpureap::proc
