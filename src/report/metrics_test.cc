// render_metrics over hand-built inventories: exact lines for one GPU, escaping,
// every class and kind present, unknown figures left out, and the structure the
// exposition format demands (checked by a small parser here, and by promtool).

#include "report/metrics.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "util/test_temp_dir.h"
#include "gpu/test_devices.h"

extern char** environ;

namespace gpureap::report {
namespace {

constexpr std::uint64_t GiB = 1ull << 30;
constexpr std::uint64_t MiB = 1ull << 20;

proc::Holder holder(pid_t pid, std::string comm, bool orphaned = false, bool zombie = false) {
  proc::Holder h;
  h.id = {pid, 1000u + static_cast<std::uint64_t>(pid)};
  h.comm = std::move(comm);
  h.user = "alice";
  h.orphaned = orphaned;
  h.zombie_leader = zombie;
  return h;
}

inventory::GpuView gpu(unsigned index, std::uint64_t used) {
  inventory::GpuView g;
  g.info.id = gpu::dev(index);
  g.info.name = "NVIDIA H200";
  g.info.uuid = "GPU-0000000" + std::to_string(index);
  g.info.pci_bus_id = "00000000:1" + std::to_string(index) + ":00.0";
  g.info.minor = index;
  g.info.memory = gpu::GpuMemory{141 * GiB, used, std::nullopt};
  g.info.processes_known = true;
  g.baseline = {512 * MiB, true};
  return g;
}

void add_holder(inventory::GpuView& g, proc::Holder h, std::optional<std::uint64_t> bytes,
                bool uses_gpu = true) {
  if (uses_gpu) g.attributed_bytes += bytes.value_or(0);
  g.holders.push_back({std::move(h), bytes, uses_gpu});
}

inventory::Inventory one_gpu() {
  inventory::Inventory inv;
  inv.driver_version = "550.54.15";
  auto g = gpu(0, 30 * GiB);
  add_holder(g, holder(100, "python"), 10 * GiB);
  add_holder(g, holder(101, "worker", true), 8 * GiB);
  add_holder(g, holder(102, "worker", true), 4 * GiB);
  add_holder(g, holder(103, "zleader", true, true), 2 * GiB);
  add_holder(g, holder(104, "opener"), std::nullopt, false);  // NVML lists it on another GPU
  g.unattributed_bytes = 30 * GiB - 512 * MiB - g.attributed_bytes;
  g.unexplained = inventory::Unexplained::driver_held;
  inv.gpus.push_back(std::move(g));
  return inv;
}

// Eight GPUs of the case study: orphaned workers on 0..7 (per-holder series on),
// driver-held memory on 6, a GPU whose memory query failed (7 lost its reading).
inventory::Inventory realistic() {
  inventory::Inventory inv;
  inv.driver_version = "550.54.15";
  inv.source_state = gpu::SourceState::partial;
  for (unsigned i = 0; i < 8; ++i) {
    auto g = gpu(i, 21 * GiB);
    add_holder(g, holder(static_cast<pid_t>(2000 + i), "python3", true), 20 * GiB);
    add_holder(g, holder(static_cast<pid_t>(1999), "sglang::server"), std::nullopt, false);
    if (i == 6) {
      g.info.memory->used = 61 * GiB;
      g.unattributed_bytes = 40 * GiB;
      g.unexplained = inventory::Unexplained::driver_held;
    }
    if (i == 7) {
      g.info.memory.reset();
      g.info.problem = "nvmlDeviceGetMemoryInfo_v2(GPU 7): GPU is lost";
    }
    inv.gpus.push_back(std::move(g));
  }
  inv.gpus[3].holders[0].holder.comm = "we\"ird\\na\nme\x1b[31m";
  return inv;
}

AgentCounters counters() {
  AgentCounters c;
  c.free_duration.observe(0.3);
  c.free_duration.observe(4);
  c.gate_seconds["slurm"].observe(0.008);
  c.gate_errors["slurm"] = 0;
  c.gate_errors["kubernetes-taint"] = 2;
  c.frees["freed"] = 2;
  c.last_free_timestamp = 1754000000.5;
  c.events[inventory::EventKind::orphaned_memory] = 3;
  c.full_scans = 2;
  c.incremental_scans = 57;
  c.death_scans = 5;
  return c;
}

std::string render(const inventory::Inventory& inv, const AgentCounters* c = nullptr,
                   bool per_holder = false) {
  MetricsInput in;
  in.inventory = &inv;
  in.counters = c;
  in.version = "0.1.0";
  in.per_holder = per_holder;
  in.last_scrape_seconds = 0.25;
  return render_metrics(in);
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(prefix)) out.push_back(line);
  return out;
}

// A checker of the text format's structural rules (what promtool 2.42 does not
// check: duplicate series). Returns the problems, empty when the text is sound.
std::vector<std::string> structure_problems(const std::string& text) {
  std::vector<std::string> problems;
  if (text.empty() || text.back() != '\n') problems.push_back("does not end in a newline");
  std::map<std::string, std::string> type_of;  // family -> type
  std::set<std::string> helped, closed, series;
  std::string open;  // the family whose samples may come now
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) {
      std::istringstream words(line.substr(7));
      std::string name, rest;
      words >> name >> rest;
      if (name != open) {
        if (!open.empty()) closed.insert(open);
        if (closed.contains(name)) problems.push_back("family reopened: " + name);
        open = name;
      }
      if (line[2] == 'H' && !helped.insert(name).second) problems.push_back("two HELP: " + name);
      if (line[2] == 'T' && !type_of.emplace(name, rest).second)
        problems.push_back("two TYPE: " + name);
      continue;
    }
    // name{k="v",...} value, nothing after the value (no timestamps).
    std::size_t i = line.find_first_of("{ ");
    std::string name = line.substr(0, i);
    std::map<std::string, std::string> labels;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::size_t eq = line.find('=', i);
        std::string key = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\') ++i;
          value += line[i];
        }
        if (!labels.emplace(key, value).second) problems.push_back("label twice: " + line);
        if (value.empty()) problems.push_back("empty label value: " + line);
        i += 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ++i;
    }
    std::string value = line.substr(i + 1);
    if (value.empty() || value.find(' ') != std::string::npos)
      problems.push_back("not one value: " + line);
    std::string family = name;
    for (std::string suffix : {"_bucket", "_sum", "_count"})
      if (name.ends_with(suffix) &&
          type_of[name.substr(0, name.size() - suffix.size())] == "histogram")
        family = name.substr(0, name.size() - suffix.size());
    if (family != open || !helped.contains(family) || !type_of.contains(family))
      problems.push_back("sample outside its family's HELP/TYPE group: " + line);
    std::string key = name;
    for (const auto& [k, v] : labels) key += "|" + k + "=" + v;
    if (!series.insert(key).second) problems.push_back("duplicate series: " + line);
  }
  return problems;
}

TEST(Metrics, ExactLinesForOneGpu) {
  auto text = render(one_gpu());
  const std::string l =
      R"(gpu="0",uuid="GPU-00000000",pci_bus_id="00000000:10:00.0",minor="0",vendor="nvidia")";
  for (const std::string& line : std::vector<std::string>{
           "# HELP gpureap_gpu_memory_orphaned_bytes Bytes held by orphaned holders (their parent "
           "or launcher died) on this GPU, as NVML reports them.",
           "# TYPE gpureap_gpu_memory_orphaned_bytes gauge",
           "gpureap_gpu_info{" + l + R"(,name="NVIDIA H200",driver_version="550.54.15"} 1)",
           "gpureap_gpu_up{" + l + "} 1",
           "gpureap_gpu_memory_total_bytes{" + l + "} 151397597184",
           "gpureap_gpu_memory_used_bytes{" + l + "} 32212254720",
           "gpureap_gpu_memory_baseline_bytes{" + l + "} 536870912",
           "gpureap_gpu_baseline_recorded{" + l + "} 1",
           "gpureap_gpu_memory_attributed_bytes{" + l + "} 25769803776",
           // the two orphaned workers and the orphaned zombie leader: 8+4+2 GiB
           "gpureap_gpu_memory_orphaned_bytes{" + l + "} 15032385536",
           "gpureap_gpu_memory_unattributed_bytes{" + l + R"(,class="driver_held"} 5905580032)",
           "gpureap_gpu_memory_unattributed_bytes{" + l + R"(,class="unknown"} 0)",
           "gpureap_gpu_holders{" + l + R"(,kind="live"} 1)",
           // the orphaned zombie leader counts as orphaned: the lineage verdict first
           "gpureap_gpu_holders{" + l + R"(,kind="orphaned"} 3)",
           "gpureap_gpu_holders{" + l + R"(,kind="zombie_leader"} 0)",
           "gpureap_nvml_up 1",
           "gpureap_scrape_duration_seconds 0.25",
           R"(gpureap_build_info{version="0.1.0"} 1)",
       })
    EXPECT_TRUE(has_line(text, line)) << line << "\nnot in:\n" << text;
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
}

// Issue 39: each GPU's series say its vendor, from the UUID's form (ROCm's is 16 hex
// digits), so a mixed fleet's NVIDIA and AMD series are told apart.
TEST(Metrics, EachGpuSaysItsVendor) {
  auto inv = one_gpu();
  auto amd = gpu(1, 4 * GiB);
  amd.info.uuid = "GPU-0000000000001001";
  amd.info.pci_bus_id = "0000:0c:00.0";
  amd.info.minor = 128;
  inv.gpus.push_back(amd);
  auto text = render(inv);
  EXPECT_TRUE(has_line(text, R"(gpureap_gpu_memory_used_bytes{gpu="1",uuid="GPU-0000000000001001",)"
                             R"(pci_bus_id="0000:0c:00.0",minor="128",vendor="amd"} 4294967296)"))
      << text;
  EXPECT_FALSE(lines_starting(text, R"(gpureap_gpu_up{gpu="0",uuid="GPU-00000000",)").empty());
  for (const auto& line : lines_starting(text, "gpureap_gpu_up{"))
    EXPECT_NE(line.find(line.find("uuid=\"GPU-00000000\"") != std::string::npos
                            ? "vendor=\"nvidia\""
                            : "vendor=\"amd\""),
              std::string::npos)
        << line;
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
}

// A MIG device (issue 25) is labelled as dcgm-exporter labels it: `gpu` the physical
// GPU's index, GPU_I_ID and GPU_I_PROFILE; its uuid is the MIG UUID. The whole GPU
// beside it has no GPU_I_* label at all (not even an empty one).
TEST(Metrics, AMigDeviceCarriesDcgmExportersLabels) {
  auto inv = one_gpu();
  auto mig = gpu(1, 4 * GiB);
  mig.info.id = gpu::DeviceId{1, 2u, 0u};
  mig.info.name = "NVIDIA H200 MIG 3g.71gb";
  mig.info.uuid = "MIG-5a3f0000-0000";
  mig.info.minor = 1;
  inv.gpus.push_back(mig);
  auto text = render(inv);
  EXPECT_TRUE(has_line(text, R"(gpureap_gpu_memory_used_bytes{gpu="1",uuid="MIG-5a3f0000-0000",)"
                             R"(pci_bus_id="00000000:11:00.0",minor="1",vendor="nvidia",GPU_I_ID="2",)"
                             R"(GPU_I_PROFILE="3g.71gb"} 4294967296)"))
      << text;
  EXPECT_TRUE(has_line(text, R"(gpureap_gpu_memory_used_bytes{gpu="0",uuid="GPU-00000000",)"
                             R"(pci_bus_id="00000000:10:00.0",minor="0",vendor="nvidia"} 32212254720)"))
      << text;
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
}

TEST(Metrics, EveryClassAndKindAlwaysPresent) {
  inventory::Inventory inv;
  inv.gpus.push_back(gpu(0, 512 * MiB));  // idle: nothing held, nothing unattributed
  auto text = render(inv);
  for (const char* c : {"outside_namespace", "releasing", "driver_held", "unknown", "no_holder"})
    EXPECT_TRUE(text.find(fmt::format("class=\"{}\"}} 0\n", c)) != std::string::npos) << c;
  for (const char* k : {"live", "orphaned", "keeper", "zombie_leader"})
    EXPECT_TRUE(text.find(fmt::format("kind=\"{}\"}} 0\n", k)) != std::string::npos) << k;
  for (const char* c : {"inheritor", "importer"})
    EXPECT_TRUE(text.find(fmt::format("class=\"{}\"}} 0\n", c)) != std::string::npos) << c;
  EXPECT_EQ(lines_starting(text, "gpureap_gpu_memory_unattributed_bytes{").size(), 5u);
  EXPECT_EQ(lines_starting(text, "gpureap_gpu_holders{").size(), 4u);
  EXPECT_EQ(lines_starting(text, "gpureap_gpu_memory_kept_bytes{").size(), 2u);
}

// Keepers of dead owners' memory (issue 52): counted as their own kind (an orphaned keeper
// stays orphaned: the lineage verdict first), their bytes by class.
TEST(Metrics, KeepersAreAKindAndTheirBytesGoByClass) {
  inventory::Inventory inv;
  auto g = gpu(0, 14 * GiB);
  proc::Holder importer = holder(200, "kvserver");
  importer.keeper = proc::KeeperClass::importer;
  proc::Holder inheritor = holder(201, "loader", /*orphaned*/ true);
  inheritor.keeper = proc::KeeperClass::inheritor;
  add_holder(g, importer, 8 * GiB + 512 * MiB);
  add_holder(g, inheritor, 4 * GiB);
  add_holder(g, holder(202, "python"), GiB);
  inv.gpus.push_back(std::move(g));
  const auto text = render(inv);
  const std::string l =
      R"(gpu="0",uuid="GPU-00000000",pci_bus_id="00000000:10:00.0",minor="0",vendor="nvidia")";
  for (const std::string& line : {
           "gpureap_gpu_holders{" + l + R"(,kind="keeper"} 1)",
           "gpureap_gpu_holders{" + l + R"(,kind="orphaned"} 1)",
           "gpureap_gpu_holders{" + l + R"(,kind="live"} 1)",
           "gpureap_gpu_memory_kept_bytes{" + l + R"(,class="importer"} 9126805504)",
           "gpureap_gpu_memory_kept_bytes{" + l + R"(,class="inheritor"} 4294967296)",
       })
    EXPECT_TRUE(has_line(text, line)) << line << "\nnot in:\n" << text;
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
}

TEST(Metrics, UnattributedGoesUnderItsOwnClassOnly) {
  auto inv = one_gpu();
  inv.gpus[0].unexplained = inventory::Unexplained::releasing;
  auto text = render(inv);
  auto lines = lines_starting(text, "gpureap_gpu_memory_unattributed_bytes{");
  ASSERT_EQ(lines.size(), 5u);
  for (const auto& line : lines)
    EXPECT_EQ(line.ends_with(" 0"), line.find("class=\"releasing\"") == std::string::npos) << line;
}

TEST(Metrics, LabelValuesAreEscapedAndBounded) {
  auto inv = one_gpu();
  auto& h = inv.gpus[0].holders[0].holder;
  h.comm = "a\"b\\c\nd";
  h.user = std::string("\xff\x1b[2J") + std::string(500, 'u');
  auto text = render(inv, nullptr, true);
  auto lines = lines_starting(text, "gpureap_holder_memory_bytes{");
  ASSERT_FALSE(lines.empty());
  // \n shown as the two characters \n (terminal_text), then each backslash doubled;
  // the quote escaped. Invalid UTF-8 and ESC are made visible, the value cut.
  EXPECT_NE(lines[0].find(R"(comm="a\"b\\c\\nd")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(R"(user="\\xff\\x1b[2Juuu)"), std::string::npos) << lines[0];
  EXPECT_LT(lines[0].size(), 400u);
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
}

TEST(Metrics, UnknownMemoryIsNotExportedAsZero) {
  auto inv = one_gpu();
  inv.source_state = gpu::SourceState::partial;
  inv.gpus.push_back(gpu(1, 0));
  inv.gpus[1].info.memory.reset();
  inv.gpus[1].info.hung = true;
  inv.gpus[1].info.problem = "nvmlDeviceGetMemoryInfo_v2(GPU 1) did not answer";
  auto text = render(inv);
  for (const char* m : {"gpureap_gpu_memory_total_bytes", "gpureap_gpu_memory_used_bytes",
                        "gpureap_gpu_memory_baseline_bytes", "gpureap_gpu_baseline_recorded",
                        "gpureap_gpu_memory_attributed_bytes", "gpureap_gpu_memory_orphaned_bytes",
                        "gpureap_gpu_memory_unattributed_bytes"}) {
    for (const auto& line : lines_starting(text, std::string(m) + "{"))
      EXPECT_EQ(line.find("gpu=\"1\""), std::string::npos) << line;
    EXPECT_FALSE(lines_starting(text, std::string(m) + "{gpu=\"0\"").empty()) << m;
  }
  EXPECT_NE(text.find("gpureap_gpu_up{gpu=\"1\""), std::string::npos);
  EXPECT_TRUE(has_line(text, R"(gpureap_gpu_up{gpu="1",uuid="GPU-00000001",)"
                             R"(pci_bus_id="00000000:11:00.0",minor="1",vendor="nvidia"} 0)"));
  EXPECT_TRUE(has_line(text, "gpureap_nvml_up 1"));  // NVML answers for the other GPU
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
}

// W2-19(a): NVML hung on every GPU is NVML down, in the metric as in the events.
TEST(Metrics, NvmlHungOnEveryGpuIsNvmlDownW2_19) {
  auto inv = one_gpu();
  inv.source_state = gpu::SourceState::partial;
  inv.gpus.push_back(gpu(1, 0));
  for (auto& g : inv.gpus) {
    g.info.memory.reset();
    g.info.hung = true;
    g.info.problem = fmt::format("GPU {}: NVML did not answer within 1500 ms", g.info.id);
  }
  auto text = render(inv);
  EXPECT_TRUE(has_line(text, "gpureap_nvml_up 0")) << text;
  EXPECT_TRUE(lines_starting(text, "gpureap_gpu_memory_used_bytes{").empty()) << text;
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
}

TEST(Metrics, WithoutNvmlGpusAreNamedByMinorOnly) {
  // Views built from device nodes: their index is the minor, not NVML's index.
  inventory::Inventory inv;
  inv.source_state = gpu::SourceState::library_missing;
  inventory::GpuView g;
  g.info.id = gpu::dev(3);
  g.info.minor = 3;
  add_holder(g, holder(300, "python", true), std::nullopt);
  inv.gpus.push_back(g);
  auto text = render(inv);
  EXPECT_TRUE(has_line(text, "gpureap_nvml_up 0"));
  EXPECT_TRUE(has_line(text, R"(gpureap_gpu_info{minor="3"} 1)")) << text;
  EXPECT_TRUE(has_line(text, R"(gpureap_gpu_up{minor="3"} 0)"));
  EXPECT_TRUE(has_line(text, R"(gpureap_gpu_holders{minor="3",kind="orphaned"} 1)"));
  EXPECT_TRUE(lines_starting(text, "gpureap_gpu_memory_").empty()) << text;
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
}

TEST(Metrics, OneShotExportHasNoAgentMetrics) {
  auto text = render(one_gpu());
  for (const char* m :
       {"gpureap_free_duration_seconds", "gpureap_frees_total",
        "gpureap_last_free_timestamp_seconds", "gpureap_events_total", "gpureap_scans_total"})
    EXPECT_EQ(text.find(m), std::string::npos) << m;
}

TEST(Metrics, AgentCountersEveryKindAndResultAlwaysPresent) {
  auto c = counters();
  auto text = render(one_gpu(), &c);
  for (const char* line : {
           R"(gpureap_free_duration_seconds_bucket{le="0.1"} 0)",
           R"(gpureap_free_duration_seconds_bucket{le="0.5"} 1)",
           R"(gpureap_free_duration_seconds_bucket{le="2.5"} 1)",
           R"(gpureap_free_duration_seconds_bucket{le="5"} 2)",
           R"(gpureap_free_duration_seconds_bucket{le="120"} 2)",
           R"(gpureap_free_duration_seconds_bucket{le="+Inf"} 2)",
           "gpureap_free_duration_seconds_sum 4.3",
           "gpureap_free_duration_seconds_count 2",
           R"(gpureap_frees_total{result="freed"} 2)",
           R"(gpureap_frees_total{result="held"} 0)",
           R"(gpureap_frees_total{result="nothing"} 0)",
           "gpureap_last_free_timestamp_seconds 1754000000.5",
           R"(gpureap_events_total{kind="orphaned_memory"} 3)",
           R"(gpureap_events_total{kind="nvml_down"} 0)",
           R"(gpureap_events_total{kind="reap_failed"} 0)",
           R"(gpureap_scans_total{kind="full"} 2)",
           R"(gpureap_scans_total{kind="incremental"} 57)",
           R"(gpureap_scans_total{kind="death"} 5)",
           R"(gpureap_gate_errors_total{mode="kubernetes-taint"} 2)",
           R"(gpureap_gate_errors_total{mode="slurm"} 0)",
       })
    EXPECT_TRUE(has_line(text, line)) << line << "\nnot in:\n" << text;
  EXPECT_EQ(lines_starting(text, "gpureap_events_total{").size(), 11u);
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});

  AgentCounters fresh;  // before any free: no timestamp rather than 1970
  EXPECT_EQ(render(one_gpu(), &fresh).find("gpureap_last_free_timestamp_seconds"),
            std::string::npos);
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram h;
  for (double s : {0.05, 0.1, 0.2, 7.0, 500.0}) h.observe(s);
  EXPECT_EQ(h.buckets[0], 2u);  // <= 0.1, the bound included
  EXPECT_EQ(h.buckets[2], 3u);  // <= 0.5
  EXPECT_EQ(h.buckets[6], 4u);  // <= 10
  EXPECT_EQ(h.buckets.back(), 4u);
  EXPECT_EQ(h.count, 5u);  // +Inf
  EXPECT_DOUBLE_EQ(h.sum, 507.35);
}

TEST(Metrics, PerHolderSeriesAreOptInAndBounded) {
  auto inv = one_gpu();
  EXPECT_EQ(render(inv).find("gpureap_holder_memory_bytes"), std::string::npos);
  auto text = render(inv, nullptr, true);
  EXPECT_TRUE(has_line(
      text, R"(gpureap_holder_memory_bytes{gpu="0",uuid="GPU-00000000",)"
            R"(pci_bus_id="00000000:10:00.0",minor="0",vendor="nvidia",pid="101",comm="worker",user="alice",)"
            R"(kind="orphaned"} 8589934592)"))
      << text;
  // The opener (no figure, uses another GPU) has no series.
  EXPECT_EQ(text.find("pid=\"104\""), std::string::npos);

  // A rank of a server instance carries its instance, engine, role and rank.
  auto ranked = holder(4242, "sglang::schedul");
  ranked.instance = "4200";
  ranked.engine = proc::recognise_engine_cmdline("sglang::scheduler_DP1_TP3", "sglang::schedul");
  add_holder(inv.gpus[0], ranked, 2 * MiB);
  EXPECT_NE(render(inv, nullptr, true)
                .find(R"(kind="live",instance="4200",engine="sglang",role="scheduler",)"
                      R"(rank="DP1 TP3"} 2097152)"),
            std::string::npos)
      << render(inv, nullptr, true);

  for (pid_t p = 0; p < 200; ++p) add_holder(inv.gpus[0], holder(5000 + p, "w"), MiB);
  EXPECT_EQ(lines_starting(render(inv, nullptr, true), "gpureap_holder_memory_bytes{").size(), 64u);
}

TEST(Metrics, RealisticNodeIsStructurallySound) {
  auto c = counters();
  auto text = render(realistic(), &c, true);
  EXPECT_EQ(structure_problems(text), std::vector<std::string>{});
  EXPECT_EQ(lines_starting(text, "gpureap_gpu_memory_orphaned_bytes{").size(), 7u);  // 7 lost
  EXPECT_EQ(lines_starting(text, "gpureap_gpu_info{").size(), 8u);
}

// The checker itself must catch what it is there to catch.
TEST(Metrics, StructureCheckerCatchesBrokenTexts) {
  EXPECT_FALSE(structure_problems("# HELP a x\n# TYPE a gauge\na 1\na 2\n").empty());
  EXPECT_FALSE(structure_problems("a 1\n").empty());
  EXPECT_FALSE(structure_problems("# HELP a x\n# TYPE a gauge\na 1").empty());
  EXPECT_FALSE(structure_problems("# HELP a x\n# TYPE a gauge\na 1 1700000000\n").empty());
  EXPECT_FALSE(structure_problems("# HELP a x\n# TYPE a gauge\na{l=\"1\"} 1\n"
                                  "# HELP b x\n# TYPE b gauge\nb 1\na{l=\"2\"} 1\n")
                   .empty());
  EXPECT_EQ(structure_problems("# HELP a x\n# TYPE a gauge\na{l=\"1\"} 1\na{l=\"2\"} 1\n"),
            std::vector<std::string>{});
}

// docs/metrics.md lists every metric, and nothing that is not rendered.
TEST(Metrics, DocsListEveryMetric) {
  std::ifstream in(std::string(GPUREAP_FIXTURES) + "/../../docs/metrics.md");
  ASSERT_TRUE(in.good());
  std::string doc((std::istreambuf_iterator<char>(in)), {});
  auto c = counters();
  std::set<std::string> rendered, documented;
  for (const auto& line : lines_starting(render(realistic(), &c, true), "# TYPE "))
    rendered.insert(line.substr(7, line.find(' ', 7) - 7));
  for (const auto& line : lines_starting(doc, "| `gpureap_"))
    documented.insert(line.substr(3, line.find('`', 3) - 3));
  EXPECT_EQ(documented, rendered);
}

// promtool (Debian's prometheus package, scripts/install-deps.sh) lints the
// exposition: names, units, counters' _total, HELP, the text format itself. Missing
// promtool fails the test: install-deps puts it on every machine that runs tests.
struct Promtool {
  int exit_code = -1;
  std::string output;
};

Promtool promtool_check_metrics(const std::string& text) {
  TestTempDir dir("gpureap-promtool");
  std::string in_path = dir.path("metrics.prom"), out_path = dir.path("out");
  std::ofstream(in_path) << text;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  char arg0[] = "promtool", arg1[] = "check", arg2[] = "metrics";
  char* argv[] = {arg0, arg1, arg2, nullptr};
  pid_t pid = 0;
  Promtool result;
  if (posix_spawnp(&pid, "promtool", &fa, nullptr, argv, environ) == 0) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ifstream out(out_path);
    result.output.assign(std::istreambuf_iterator<char>(out), {});
  } else {
    result.output = "promtool not found: run scripts/install-deps.sh (Debian's prometheus package)";
  }
  posix_spawn_file_actions_destroy(&fa);
  return result;
}

TEST(MetricsPromtool, RealisticNodePassesPromtool) {
  auto c = counters();
  auto r = promtool_check_metrics(render(realistic(), &c, true));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "");
}

TEST(MetricsPromtool, PromtoolRejectsWhatItShould) {
  // Without this the test above could pass on a promtool that checks nothing.
  auto r = promtool_check_metrics(
      "# HELP gpureap_frees x\n# TYPE gpureap_frees counter\n"
      "gpureap_frees 1\n");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("_total"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gpureap::report
