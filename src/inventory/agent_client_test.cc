#include "inventory/agent_client.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <thread>

#include "gpu/fake_gpu_source.h"
#include "inventory/inventory_wire.h"
#include "inventory/node.h"
#include "util/fd.h"
#include "util/test_temp_dir.h"
#include "util/units.h"
#include "gpu/test_devices.h"

namespace gpureap::inventory {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

UniqueFd listening_socket(const std::string& path, bool listen = true) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) return {};
  if (listen && ::listen(fd.get(), 8) != 0) return {};
  return fd;
}

// A stand-in agent on a real socket: answers each client's request line with
// `answer` (or nothing, when `silent`), on its own thread.
class FakeAgent {
 public:
  FakeAgent(std::string path, std::string answer, bool silent = false)
      : path_(std::move(path)), answer_(std::move(answer)), silent_(silent) {
    listener_ = listening_socket(path_);
    if (!listener_.valid()) throw std::runtime_error("cannot listen at " + path_);
    if (::pipe2(stop_, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeAgent() {
    stop();
    ::close(stop_[0]);
    ::close(stop_[1]);
  }
  /// Stops serving; returns the request lines it received.
  std::vector<std::string> stop() {
    if (thread_.joinable()) {
      (void)!::write(stop_[1], "x", 1);
      thread_.join();
    }
    return requests_;
  }

 private:
  void serve() {
    for (;;) {
      pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_[0], POLLIN, 0}};
      ::poll(fds, 2, -1);
      if (fds[1].revents) return;
      UniqueFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!client.valid()) continue;
      std::string line;
      char c;
      while (::read(client.get(), &c, 1) == 1 && c != '\n') line += c;
      requests_.push_back(line);
      if (silent_) {
        // Keeps the connection open and says nothing until told to stop.
        pollfd wait{stop_[0], POLLIN, 0};
        ::poll(&wait, 1, -1);
        return;
      }
      std::string_view rest = answer_;
      while (!rest.empty()) {
        ssize_t n = ::send(client.get(), rest.data(), rest.size(), MSG_NOSIGNAL);
        if (n <= 0) break;
        rest.remove_prefix(static_cast<std::size_t>(n));
      }
    }
  }

  std::string path_;
  std::string answer_;
  bool silent_;
  std::vector<std::string> requests_;
  UniqueFd listener_;
  int stop_[2] = {-1, -1};
  std::thread thread_;
};

Inventory agents_inventory() {
  gpu::GpuSnapshot snap;
  snap.driver_version = "570.1";
  gpu::GpuInfo g;
  g.id = gpu::dev(0);
  g.minor = 0;
  g.uuid = "GPU-agent-0";
  g.memory = gpu::GpuMemory{96 * kGiB, 41 * kGiB, std::nullopt};
  g.processes = {{100, 20 * kGiB, gpu::ProcessKind::compute},
                 {101, 20 * kGiB, gpu::ProcessKind::compute}};
  g.processes_known = true;
  snap.gpus = {g};
  proc::ScanResult scan;
  for (pid_t pid : {100, 101}) {
    proc::Holder h;
    h.id = {pid, 5000u + static_cast<unsigned>(pid), 77};
    h.comm = "python3";
    h.orphaned = true;
    h.orphan_reason = "re-parented to init (pid 1)";
    h.gpu_minors = {0};
    h.found_by = {proc::FoundBy::fd};
    scan.holders.push_back(h);
  }
  scan.processes_scanned = 4321;
  auto store = BaselineStore::in_memory();
  return build_inventory(snap, scan, store, true);
}

TEST(AskAgent, TheAgentsInventoryMarkedAsItsAnswer) {
  TestTempDir dir;
  Inventory sent = agents_inventory();
  sent.node = {"/sim/dev", "/proc", "/opt/sim/libnvidia-ml.so.1", "/sim"};
  FakeAgent agent(agent_socket_path(dir.dir()), encode_inventory(sent));
  auto got = ask_agent(agent_socket_path(dir.dir()), 5s);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->source, "agent");
  EXPECT_EQ(got->agent_pid, ::getpid()) << "SO_PEERCRED: the process serving the socket";
  ASSERT_EQ(got->gpus.size(), 1u);
  ASSERT_EQ(got->gpus[0].holders.size(), 2u);
  EXPECT_EQ(got->gpus[0].holders[0].holder.id.pidfs_ino, 77u);
  EXPECT_EQ(got->processes_scanned, 4321u);
  EXPECT_EQ(got->node, sent.node) << "the node it watches travels with the answer (W2-02)";
  EXPECT_EQ(agent.stop(), std::vector<std::string>{"inventory"});
}

TEST(AskAgent, EveryFailureIsAReason) {
  TestTempDir dir;
  const std::string path = agent_socket_path(dir.dir());
  auto none = ask_agent(path, 1s);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no socket"), std::string::npos) << none.error().message;
  {
    UniqueFd bound_only = listening_socket(path, /*listen=*/false);  // a dead agent's file
    auto refused = ask_agent(path, 1s);
    ASSERT_FALSE(refused);
    EXPECT_NE(refused.error().message.find("no agent listening"), std::string::npos);
    ::unlink(path.c_str());
  }
  {
    FakeAgent agent(path, R"({"error":"refreshing failed"})");
    auto err = ask_agent(path, 5s);
    ASSERT_FALSE(err);
    EXPECT_NE(err.error().message.find("refreshing failed"), std::string::npos);
  }
  ::unlink(path.c_str());
  {
    FakeAgent agent(path, "{\"wire_version\":1,\"gpus\":");
    EXPECT_FALSE(ask_agent(path, 5s));
  }
  ::unlink(path.c_str());
  {
    FakeAgent agent(path, "");
    auto empty = ask_agent(path, 5s);
    ASSERT_FALSE(empty);
    EXPECT_NE(empty.error().message.find("without an answer"), std::string::npos);
  }
}

TEST(AskAgent, ASilentAgentCostsTheDeadline) {
  TestTempDir dir;
  const std::string path = agent_socket_path(dir.dir());
  FakeAgent agent(path, "", /*silent=*/true);
  const auto t0 = SteadyClock::now();
  auto got = ask_agent(path, 300ms);
  ASSERT_FALSE(got);
  EXPECT_GE(SteadyClock::now() - t0, 300ms);
  EXPECT_NE(got.error().message.find("in time"), std::string::npos) << got.error().message;
}

// Root (or the caller itself) may answer; another user's socket is not asked.
TEST(AskAgent, ASocketServedByAnotherUserIsNotTrusted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to serve a socket as another user";
  TestTempDir dir;
  ASSERT_EQ(::chmod(dir.dir().c_str(), 0777), 0);
  const std::string path = agent_socket_path(dir.dir());
  const std::string answer = encode_inventory(agents_inventory());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::close(ready[0]);
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(1);
    ::umask(0);
    UniqueFd fd = listening_socket(path);
    (void)!::write(ready[1], fd.valid() ? "y" : "n", 1);
    UniqueFd client(::accept(fd.get(), nullptr, nullptr));
    (void)!::write(client.get(), answer.data(), answer.size());
    _exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, 'y');
  auto got = ask_agent(path, 5s);
  int status = 0;
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  ASSERT_FALSE(got);
  EXPECT_NE(got.error().message.find("uid 65534"), std::string::npos) << got.error().message;
}

// ---- Node: the first look asks the agent ------------------------------------------

gpu::GpuSnapshot idle_snapshot() {
  gpu::GpuSnapshot snap;
  gpu::GpuInfo g;
  g.id = gpu::dev(0);
  g.minor = 0;
  g.uuid = "GPU-local-0";
  g.memory = gpu::GpuMemory{96 * kGiB, 300u << 20, std::nullopt};
  g.processes_known = true;
  snap.gpus = {g};
  return snap;
}

struct TestNode {
  TestTempDir dir;
  gpu::FakeGpuSource* gpus = nullptr;
  Node node;
  explicit TestNode(bool with_agent) : node(make(with_agent)) {}

 private:
  Node make(bool with_agent) {
    ::mkdir(dir.path("dev").c_str(), 0755);
    ::mkdir(dir.path("state").c_str(), 0700);
    NodeConfig config;
    config.dev_dir = dir.path("dev");  // no device nodes: the direct scan finds no holder
    config.state_dir = dir.path("state");
    if (with_agent) config.agent_socket = agent_socket_path(dir.path("state"));
    auto source = std::make_unique<gpu::FakeGpuSource>(idle_snapshot());
    gpus = source.get();
    return Node(config, std::move(source));
  }
};

// The agent's answer, describing the node `t` looks at.
std::string agents_answer_for(const TestNode& t) {
  Inventory inv = agents_inventory();
  inv.node = t.node.identity();
  return encode_inventory(inv);
}

TEST(NodeLook, TheFirstLookIsTheAgentsTheNextOnesAreDirect) {
  TestNode t(true);
  FakeAgent agent(agent_socket_path(t.dir.path("state")), agents_answer_for(t));
  Inventory first = t.node.look();
  EXPECT_EQ(first.source, "agent");
  ASSERT_EQ(first.gpus.size(), 1u);
  EXPECT_EQ(first.gpus[0].info.uuid, "GPU-agent-0");
  EXPECT_EQ(first.gpus[0].holders.size(), 2u);
  EXPECT_EQ(t.gpus->snapshot_calls, 0) << "no NVML of our own for the agent's answer";
  // The agent records baselines into the same store: this node must not.
  ASSERT_TRUE(t.node.save_baselines());
  struct stat st {};
  EXPECT_NE(::stat(t.dir.path("state/baselines.json").c_str(), &st), 0);

  Inventory second = t.node.look();
  EXPECT_EQ(second.source, "scan");
  EXPECT_EQ(second.gpus[0].info.uuid, "GPU-local-0");
  EXPECT_EQ(t.gpus->snapshot_calls, 1);
}

TEST(NodeLook, ExcludedPidsAreDroppedFromTheAgentsAnswer) {
  TestNode t(true);
  FakeAgent agent(agent_socket_path(t.dir.path("state")), agents_answer_for(t));
  CollectOptions options;
  options.exclude = {100};
  Inventory inv = t.node.look(options);
  ASSERT_EQ(inv.source, "agent");
  ASSERT_EQ(inv.gpus[0].holders.size(), 1u);
  EXPECT_EQ(inv.gpus[0].holders[0].holder.id.pid, 101);
  EXPECT_EQ(inv.gpus[0].attributed_bytes, 20 * kGiB);
}

// W2-02: an agent watching another node (another device directory, NVML library or
// simulator directory) is not used: the look is this node's own scan.
TEST(NodeLook, W2_02_AnAgentOfAnotherNodeIsNotUsed) {
  TestNode t(true);
  Inventory other = agents_inventory();
  other.node = t.node.identity();
  other.node.dev_dir = "/dev";
  other.node.sim_dir = "";
  FakeAgent agent(agent_socket_path(t.dir.path("state")), encode_inventory(other));
  Inventory inv = t.node.look();
  EXPECT_EQ(inv.source, "scan");
  EXPECT_EQ(inv.gpus[0].info.uuid, "GPU-local-0");
  EXPECT_EQ(inv.node, t.node.identity());
}

TEST(NodeLook, NoAgentMeansADirectScan) {
  TestNode t(true);  // a socket path, but nobody listens there
  Inventory inv = t.node.look();
  EXPECT_EQ(inv.source, "scan");
  EXPECT_EQ(inv.gpus[0].info.uuid, "GPU-local-0");
  EXPECT_EQ(t.gpus->snapshot_calls, 1);

  TestNode without(false);
  FakeAgent agent(agent_socket_path(without.dir.path("state")),
                  encode_inventory(agents_inventory()));
  EXPECT_EQ(without.node.look().source, "scan") << "no agent_socket configured: never asked";
}

}  // namespace
}  // namespace gpureap::inventory
