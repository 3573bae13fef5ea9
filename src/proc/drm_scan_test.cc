// The /proc sweep with a vendor's DRM nodes registered (nvtop's
// processinfo_sweep_fdinfos): each fd on such a node has its fdinfo read by the
// node's reader, and one client is kept once per process. Over a saved /proc tree,
// since no process here can show amdgpu's fdinfo.

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "proc/holder_scan.h"
#include "proc/test_children.h"

namespace gpureap::proc {
namespace {

namespace fs = std::filesystem;

std::string drm_scan_fixture(const std::string& name) {
  std::ifstream in(std::string(GPUREAP_FIXTURES) + "/drm/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, std::string_view text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

DeviceSet::Entry plain_entry(const std::string& path, NodeKind kind, std::optional<unsigned> minor,
                             FdinfoReader reader) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  DeviceSet::Entry e;
  e.node = DeviceNode{kind, minor, path};
  e.node.fdinfo = reader;
  e.dev = st.st_dev;
  e.ino = st.st_ino;
  return e;
}

// A process of the saved tree: stat, status, and fds linked to `nodes` with fdinfo texts.
void add_process(const fs::path& root, pid_t pid,
                 const std::vector<std::tuple<int, std::string, std::string>>& fds) {
  const fs::path d = root / std::to_string(pid);
  write_text(d / "stat", fmt::format("{} (python3) S 1 {} {} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 "
                                     "0 90000 0 0\n",
                                     pid, pid, pid));
  write_text(d / "status", fmt::format("Name:\tpython3\nUid:\t0\t0\t0\t0\nNSpid:\t{}\n", pid));
  write_text(d / "cmdline", std::string("python3\0", 8));
  write_text(d / "maps", "");
  fs::create_directories(d / "fd");
  for (const auto& [fd, target, fdinfo] : fds) {
    fs::create_symlink(target, d / "fd" / std::to_string(fd));
    write_text(d / "fdinfo" / std::to_string(fd), fdinfo);
  }
}

TEST(DrmScan, FdinfoOfARegisteredDrmNodeIsReadOncePerClient) {
  testing::SimulatedDevDir dev({"kfd", "renderD128", "card0", "renderD129"});
  std::vector<DeviceSet::Entry> entries = {
      plain_entry(dev.path("kfd"), NodeKind::ctl, std::nullopt, nullptr),
      plain_entry(dev.path("renderD128"), NodeKind::gpu, 128, read_amdgpu_fdinfo),
      plain_entry(dev.path("card0"), NodeKind::gpu, 128, read_amdgpu_fdinfo),
      plain_entry(dev.path("renderD129"), NodeKind::gpu, 129, read_amdgpu_fdinfo)};
  DeviceSet devices(std::move(entries));
  const fs::path root = dev.path("proc");
  write_text(root / "uptime", "1000.50 1900.00\n");
  const std::string big = drm_scan_fixture("fdinfo_amdgpu_6x");  // client 12, 112 GiB
  // 200: the render node twice (a dup: one client), /dev/kfd, and a fd on GPU 129
  //      whose fdinfo is not amdgpu's.
  add_process(root, 200,
              {{3, dev.path("kfd"), drm_scan_fixture("fdinfo_regular_file")},
               {4, dev.path("renderD128"), big},
               {5, dev.path("renderD128"), big},
               {6, dev.path("renderD129"), drm_scan_fixture("fdinfo_regular_file")}});
  // 201: the card node of the same GPU, another client (7, 16 MiB).
  add_process(root, 201, {{3, dev.path("card0"), drm_scan_fixture("fdinfo_amdgpu_5_19")}});
  // 202: /dev/kfd only.
  add_process(root, 202, {{3, dev.path("kfd"), ""}});

  ScanOptions opts;
  opts.proc_root = root.string();
  opts.devices = &devices;
  ScanResult r = scan_holders(opts);
  ASSERT_EQ(r.holders.size(), 3U);

  const Holder& a = r.holders[0];
  EXPECT_EQ(a.gpu_minors, (std::set<unsigned>{128, 129}));
  ASSERT_EQ(a.drm_clients.size(), 1U);  // fd 4 and its dup fd 5: client 12 once
  EXPECT_EQ(a.drm_clients[0].client_id, 12U);
  EXPECT_EQ(a.drm_clients[0].pdev, "0000:03:00.0");
  EXPECT_EQ(a.drm_clients[0].device_bytes, 112ULL << 30);

  const Holder& b = r.holders[1];
  EXPECT_EQ(b.gpu_minors, std::set<unsigned>{128});  // card0 counts as its render minor
  ASSERT_EQ(b.drm_clients.size(), 1U);
  EXPECT_EQ(b.drm_clients[0].client_id, 7U);
  EXPECT_EQ(b.drm_clients[0].device_bytes, 16ULL << 20);

  const Holder& c = r.holders[2];
  EXPECT_TRUE(c.gpu_minors.empty());
  EXPECT_TRUE(c.drm_clients.empty());
  ASSERT_EQ(c.nodes.size(), 1U);
  EXPECT_EQ(c.nodes.begin()->kind, NodeKind::ctl);
}

}  // namespace
}  // namespace gpureap::proc
