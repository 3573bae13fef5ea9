// NvmlLibrary over an in-process fake driver: plain functions standing in for
// NVML's entry points, so the calling conventions and fallbacks are tested
// without a GPU (the simulated driver covers the dlopen path: nvml_source_test).
#include "gpu/nvml_library.h"
#include "gpu/test_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <iterator>
#include <map>

namespace gpureap::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Procs = std::vector<std::pair<unsigned, unsigned long long>>;

struct FakeGpu {
  std::string uuid;
  std::string bus;
  unsigned minor = 0;
  unsigned long long total = 96ULL << 30, used = 0, reserved = 512ULL << 20;
  std::array<Procs, 3> procs;  // compute, graphics, MPS
  nvmlReturn_t handle_rc = NVML_SUCCESS;
  nvmlReturn_t memory_rc = NVML_SUCCESS;
  nvmlReturn_t process_rc = NVML_SUCCESS;
};

struct FakeDriver {
  std::vector<FakeGpu> gpus;
  nvmlReturn_t init_rc = NVML_SUCCESS;
  bool memory_v2_understood = true;
  bool detail_list_understood = true;
  std::size_t legacy_stride = 24;       // what the "driver" really writes
  unsigned grow_after_count_query = 0;  // processes that appear between the two calls
  std::vector<unsigned> memory_versions_seen;
  int memory_v2_calls = 0;
  int memory_v1_calls = 0;
  // nvmlDeviceGetProcessesUtilizationInfo on GPU 0: its samples, NOT_SUPPORTED or
  // NOT_FOUND; the versions it was handed; how often the older call was asked.
  nvmlReturn_t info_rc = NVML_SUCCESS;
  std::vector<unsigned> info_versions_seen;
  int legacy_util_calls = 0;
};

FakeDriver* driver = nullptr;

FakeGpu* gpu_of(nvmlDevice_t dev) {
  auto i = reinterpret_cast<std::uintptr_t>(dev) - 1;
  return i < driver->gpus.size() ? &driver->gpus[i] : nullptr;
}

nvmlReturn_t fake_init() {
  return driver->init_rc;
}
nvmlReturn_t fake_shutdown() {
  return NVML_SUCCESS;
}
const char* fake_error_string(nvmlReturn_t rc) {
  switch (rc) {
    case NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    default:
      return "Unknown Error";
  }
}
nvmlReturn_t fake_count(unsigned* n) {
  *n = static_cast<unsigned>(driver->gpus.size());
  return NVML_SUCCESS;
}
nvmlReturn_t fake_handle(unsigned i, nvmlDevice_t* dev) {
  if (i >= driver->gpus.size()) return NVML_ERROR_INVALID_ARGUMENT;
  if (driver->gpus[i].handle_rc != NVML_SUCCESS) return driver->gpus[i].handle_rc;
  *dev = reinterpret_cast<nvmlDevice_t>(std::uintptr_t{i} + 1);
  return NVML_SUCCESS;
}
nvmlReturn_t fake_uuid(nvmlDevice_t dev, char* buf, unsigned len) {
  std::snprintf(buf, len, "%s", gpu_of(dev)->uuid.c_str());
  return NVML_SUCCESS;
}
nvmlReturn_t fake_name(nvmlDevice_t, char* buf, unsigned len) {
  std::snprintf(buf, len, "NVIDIA H200");
  return NVML_SUCCESS;
}
nvmlReturn_t fake_pci(nvmlDevice_t dev, nvmlPciInfo_t* pci) {
  std::snprintf(pci->busId, sizeof pci->busId, "%s", gpu_of(dev)->bus.c_str());
  return NVML_SUCCESS;
}
nvmlReturn_t fake_minor(nvmlDevice_t dev, unsigned* minor) {
  *minor = gpu_of(dev)->minor;
  return NVML_SUCCESS;
}
nvmlReturn_t fake_persistence(nvmlDevice_t, nvmlEnableState_t* mode) {
  *mode = NVML_FEATURE_ENABLED;
  return NVML_SUCCESS;
}
// GPU 0 is busy; GPU 1 does not support the query (an older board, a vGPU).
nvmlReturn_t fake_utilization(nvmlDevice_t dev, nvmlUtilization_t* rates) {
  if (gpu_of(dev) != &driver->gpus[0]) return NVML_ERROR_NOT_SUPPORTED;
  *rates = nvmlUtilization_t{97, 12};
  return NVML_SUCCESS;
}
// Sensors: GPU 0 reads 41 C and 312.5 W; GPU 1 supports neither (a vGPU).
nvmlReturn_t fake_temperature(nvmlDevice_t dev, unsigned sensor, unsigned* celsius) {
  if (gpu_of(dev) != &driver->gpus[0] || sensor != NVML_TEMPERATURE_GPU)
    return NVML_ERROR_NOT_SUPPORTED;
  *celsius = 41;
  return NVML_SUCCESS;
}
nvmlReturn_t fake_power(nvmlDevice_t dev, unsigned* milliwatts) {
  if (gpu_of(dev) != &driver->gpus[0]) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = 312'500;
  return NVML_SUCCESS;
}
// Card health: GPU 0 capped at 700 W, its clocks held down by the power brake and heat,
// 3 uncorrected ECC errors; GPU 1 supports none of it (no ECC, a vGPU).
nvmlReturn_t fake_power_limit(nvmlDevice_t dev, unsigned* milliwatts) {
  if (gpu_of(dev) != &driver->gpus[0]) return NVML_ERROR_NOT_SUPPORTED;
  *milliwatts = 700'000;
  return NVML_SUCCESS;
}
nvmlReturn_t fake_clock_events(nvmlDevice_t dev, unsigned long long* reasons) {
  if (gpu_of(dev) != &driver->gpus[0]) return NVML_ERROR_NOT_SUPPORTED;
  *reasons = 0x80 | 0x40 | 0x1;
  return NVML_SUCCESS;
}
nvmlReturn_t fake_ecc(nvmlDevice_t dev, int type, int counter, unsigned long long* count) {
  if (gpu_of(dev) != &driver->gpus[0]) return NVML_ERROR_NOT_SUPPORTED;
  if (type != NVML_MEMORY_ERROR_TYPE_UNCORRECTED || counter != NVML_VOLATILE_ECC)
    return NVML_ERROR_INVALID_ARGUMENT;
  *count = 3;
  return NVML_SUCCESS;
}
// Per-process utilization (a hint): GPU 0 sampled pid 100 twice (the later sample, 37 %
// SM and 12 % memory, is the one that counts) and pid 999, which no list names; it has no
// sample of pid 101. GPU 1 does not support the call (MIG, Blackwell's legacy call).
nvmlReturn_t fake_process_utilization(nvmlDevice_t dev, nvmlProcessUtilizationSample_t* samples,
                                      unsigned* count, unsigned long long last_seen) {
  if (gpu_of(dev) != &driver->gpus[0]) return NVML_ERROR_NOT_SUPPORTED;
  ++driver->legacy_util_calls;
  if (last_seen != 0) return NVML_ERROR_INVALID_ARGUMENT;  // gpureap asks for every sample
  const nvmlProcessUtilizationSample_t all[] = {
      {100, 2'000, 37, 12, 0, 0}, {999, 1'500, 80, 40, 0, 0}, {100, 1'000, 90, 50, 0, 0}};
  const unsigned n = std::size(all);
  if (samples == nullptr || *count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(std::begin(all), std::end(all), samples);
  *count = n;
  return NVML_SUCCESS;
}
// The newer call: on GPU 0 pid 100 sampled twice (55 % SM, 20 % memory the later) and pid
// 101 once (the older call has no sample of it), unless info_rc says otherwise; GPU 1
// NOT_SUPPORTED, as the older call there.
nvmlReturn_t fake_processes_info(nvmlDevice_t dev, nvmlProcessesUtilizationInfo_v1_t* info) {
  driver->info_versions_seen.push_back(info->version);
  if (info->version != nvmlProcessesUtilizationInfo_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (gpu_of(dev) != &driver->gpus[0]) return NVML_ERROR_NOT_SUPPORTED;
  if (driver->info_rc != NVML_SUCCESS) return driver->info_rc;
  if (info->lastSeenTimeStamp != 0) return NVML_ERROR_INVALID_ARGUMENT;
  const nvmlProcessUtilizationInfo_v1_t all[] = {{2'500, 100, 99, 60, 0, 0, 0, 0},
                                                 {3'000, 100, 55, 20, 1, 2, 3, 4},
                                                 {2'000, 101, 7, 3, 0, 0, 0, 0}};
  const unsigned n = std::size(all);
  if (info->procUtilArray == nullptr || info->processSamplesCount < n) {
    info->processSamplesCount = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(std::begin(all), std::end(all), info->procUtilArray);
  info->processSamplesCount = n;
  return NVML_SUCCESS;
}
nvmlReturn_t fake_driver_version(char* buf, unsigned len) {
  std::snprintf(buf, len, "580.65.06");
  return NVML_SUCCESS;
}
nvmlReturn_t fake_memory_v2(nvmlDevice_t dev, nvmlMemory_v2_t* m) {
  ++driver->memory_v2_calls;
  driver->memory_versions_seen.push_back(m->version);
  // Real drivers reject a wrong version (also the "2" the header comment suggests).
  if (!driver->memory_v2_understood || m->version != nvmlMemory_v2) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  FakeGpu* g = gpu_of(dev);
  if (g->memory_rc != NVML_SUCCESS) return g->memory_rc;
  m->total = g->total;
  m->used = g->used;
  m->reserved = g->reserved;
  m->free = g->total - g->used - g->reserved;
  return NVML_SUCCESS;
}
nvmlReturn_t fake_memory_v1(nvmlDevice_t dev, nvmlMemory_t* m) {
  ++driver->memory_v1_calls;
  FakeGpu* g = gpu_of(dev);
  if (g->memory_rc != NVML_SUCCESS) return g->memory_rc;
  m->total = g->total;
  m->used = g->used + g->reserved;  // v1 counts reserved memory as used
  m->free = g->total - m->used;
  return NVML_SUCCESS;
}
nvmlReturn_t fake_detail_list(nvmlDevice_t dev, nvmlProcessDetailList_v1_t* list) {
  if (!driver->detail_list_understood || list->version != nvmlProcessDetailList_v1) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  FakeGpu* g = gpu_of(dev);
  if (g->process_rc != NVML_SUCCESS) return g->process_rc;
  const Procs& procs = g->procs.at(list->mode);
  if (list->numProcArrayEntries < procs.size()) {
    list->numProcArrayEntries = static_cast<unsigned>(procs.size());
    return procs.empty() ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (std::size_t i = 0; i < procs.size(); ++i) {
    list->procArray[i] = nvmlProcessDetail_v1_t{procs[i].first, procs[i].second, ~0U, ~0U, 0};
  }
  list->numProcArrayEntries = static_cast<unsigned>(procs.size());
  return NVML_SUCCESS;
}
template <int Kind>
nvmlReturn_t fake_legacy(nvmlDevice_t dev, unsigned* count, void* buffer) {
  FakeGpu* g = gpu_of(dev);
  if (g->process_rc != NVML_SUCCESS) return g->process_rc;
  Procs& procs = g->procs[Kind];
  if (*count < procs.size()) {
    *count = static_cast<unsigned>(procs.size());
    // The list grows between the size query and the real call.
    for (unsigned i = 0; i < driver->grow_after_count_query; ++i) procs.push_back({9000 + i, 1});
    driver->grow_after_count_query = 0;
    return procs.empty() ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  auto* out = static_cast<std::byte*>(buffer);
  for (std::size_t i = 0; i < procs.size(); ++i) {
    nvmlProcessDetail_v1_t e{procs[i].first, procs[i].second, ~0U, ~0U, 0};
    std::memcpy(out + i * driver->legacy_stride, &e, driver->legacy_stride);
  }
  *count = static_cast<unsigned>(procs.size());
  return NVML_SUCCESS;
}

NvmlSymbols base_symbols() {
  NvmlSymbols s;
  s.init = {fake_init, "nvmlInit_v2"};
  s.shutdown = {fake_shutdown, "nvmlShutdown"};
  s.error_string = {fake_error_string, "nvmlErrorString"};
  s.device_count = {fake_count, "nvmlDeviceGetCount_v2"};
  s.handle_by_index = {fake_handle, "nvmlDeviceGetHandleByIndex_v2"};
  s.uuid = {fake_uuid, "nvmlDeviceGetUUID"};
  s.pci_info = {fake_pci, "nvmlDeviceGetPciInfo_v3"};
  s.memory_v2 = {fake_memory_v2, "nvmlDeviceGetMemoryInfo_v2"};
  s.memory_v1 = {fake_memory_v1, "nvmlDeviceGetMemoryInfo"};
  s.name = {fake_name, "nvmlDeviceGetName"};
  s.minor_number = {fake_minor, "nvmlDeviceGetMinorNumber"};
  s.persistence_mode = {fake_persistence, "nvmlDeviceGetPersistenceMode"};
  s.utilization = {fake_utilization, "nvmlDeviceGetUtilizationRates"};
  s.temperature = {fake_temperature, "nvmlDeviceGetTemperature"};
  s.power_usage = {fake_power, "nvmlDeviceGetPowerUsage"};
  s.power_limit = {fake_power_limit, "nvmlDeviceGetEnforcedPowerLimit"};
  s.clock_event_reasons = {fake_clock_events, "nvmlDeviceGetCurrentClocksEventReasons"};
  s.ecc_errors = {fake_ecc, "nvmlDeviceGetTotalEccErrors"};
  s.process_utilization = {fake_process_utilization, "nvmlDeviceGetProcessUtilization"};
  s.driver_version = {fake_driver_version, "nvmlSystemGetDriverVersion"};
  return s;
}

NvmlSymbols modern_symbols() {
  NvmlSymbols s = base_symbols();
  s.process_detail_list = {fake_detail_list, "nvmlDeviceGetRunningProcessDetailList"};
  s.process_lists[0] = {{fake_legacy<0>, "nvmlDeviceGetComputeRunningProcesses_v3"}, 24};
  s.process_lists[1] = {{fake_legacy<1>, "nvmlDeviceGetGraphicsRunningProcesses_v3"}, 24};
  return s;
}

NvmlSymbols legacy_symbols() {
  NvmlSymbols s = modern_symbols();
  s.process_detail_list = {};
  return s;
}

class NvmlLibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver = &fake_;
    FakeGpu a;
    a.uuid = "GPU-aaaa1111";
    a.bus = "00000000:18:00.0";
    a.minor = 2;
    a.used = 20ULL << 30;
    a.procs[0] = {{100, 10ULL << 30}, {101, ~0ULL}};
    a.procs[1] = {{100, 1}};
    FakeGpu b;
    b.uuid = "GPU-bbbb2222";
    b.bus = "00000000:2A:00.0";
    b.procs[2] = {{300, 3}};
    fake_.gpus = {a, b};
  }
  void TearDown() override { driver = nullptr; }

  NvmlLibrary library(NvmlSymbols symbols) {
    NvmlLibrary lib = NvmlLibrary::from_symbols(symbols);
    EXPECT_TRUE(lib.init().has_value());
    return lib;
  }

  FakeDriver fake_;
};

TEST_F(NvmlLibraryTest, QueryAllReadsIdentityMemoryAndMergedProcesses) {
  NvmlLibrary lib = library(modern_symbols());
  std::vector<std::string> problems;
  auto gpus = lib.query_all(&problems);
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  EXPECT_TRUE(problems.empty());
  ASSERT_EQ(gpus->size(), 2U);
  const GpuInfo& g = (*gpus)[0];
  EXPECT_EQ(g.id, gpu::dev(0));
  EXPECT_EQ(g.uuid, "GPU-aaaa1111");
  EXPECT_EQ(g.pci_bus_id, "00000000:18:00.0");
  EXPECT_EQ(g.name, "NVIDIA H200");
  EXPECT_EQ(g.minor, 2U);
  EXPECT_EQ(g.persistence_mode, true);
  EXPECT_EQ(g.utilization_gpu, 97U);
  EXPECT_EQ(g.utilization_memory, 12U);
  EXPECT_FALSE((*gpus)[1].utilization_gpu.has_value()) << "NOT_SUPPORTED is unknown";
  EXPECT_EQ(g.temperature_c, 41U);
  EXPECT_EQ(g.power_mw, 312'500U);
  EXPECT_FALSE((*gpus)[1].temperature_c.has_value()) << "NOT_SUPPORTED is unknown, not 0";
  EXPECT_FALSE((*gpus)[1].power_mw.has_value());
  // Card health (issue 53): the cap, why the clocks are held down, uncorrected ECC errors.
  EXPECT_EQ(g.power_limit_mw, 700'000U);
  ASSERT_TRUE(g.clock_event_reasons.has_value());
  EXPECT_EQ(gpu::clock_event_words(*g.clock_event_reasons),
            (std::vector<std::string_view>{"thermal (hardware)", "power brake"}));
  EXPECT_TRUE(gpu::clock_events_worrying(*g.clock_event_reasons));
  EXPECT_FALSE(gpu::clock_events_worrying(0x4 | 0x1)) << "a power cap is the card at work";
  EXPECT_EQ(g.ecc_uncorrected, 3U);
  EXPECT_FALSE((*gpus)[1].power_limit_mw.has_value());
  EXPECT_FALSE((*gpus)[1].clock_event_reasons.has_value());
  EXPECT_FALSE((*gpus)[1].ecc_uncorrected.has_value()) << "no ECC is unknown, not 0";
  EXPECT_TRUE((*gpus)[1].problem.empty()) << "NOT_SUPPORTED is no error";
  ASSERT_TRUE(g.memory.has_value());
  EXPECT_EQ(g.memory->used, 20ULL << 30) << "v2 used excludes reserved memory";
  EXPECT_EQ(g.memory->reserved, 512ULL << 20);
  EXPECT_TRUE(g.processes_known);
  ASSERT_EQ(g.processes.size(), 2U) << "pid 100 is compute and graphics: listed once";
  EXPECT_EQ(g.processes[0].pid, 100U);
  EXPECT_EQ(g.processes[0].kind, ProcessKind::compute);
  EXPECT_EQ(g.processes[1].pid, 101U);
  EXPECT_FALSE(g.processes[1].used_bytes.has_value());
  // The MPS list comes from the detail list (no legacy MPS symbol is given).
  ASSERT_EQ((*gpus)[1].processes.size(), 1U);
  EXPECT_EQ((*gpus)[1].processes[0].kind, ProcessKind::mps);
  EXPECT_EQ(lib.driver_version(), "580.65.06");
}

TEST_F(NvmlLibraryTest, ProcessUtilizationIsTheLatestSampleOfEachListedPidAndOnlyAHint) {
  NvmlLibrary lib = library(modern_symbols());
  std::vector<std::string> problems;
  auto gpus = lib.query_all(&problems);
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  EXPECT_TRUE(problems.empty()) << "NOT_SUPPORTED on GPU 1 is no problem";
  const GpuInfo& g = (*gpus)[0];
  ASSERT_EQ(g.processes.size(), 2U) << "a sampled pid no list names adds no process";
  EXPECT_EQ(g.processes[0].sm_percent, 37U) << "the latest sample, not the first";
  EXPECT_EQ(g.processes[0].mem_percent, 12U);
  EXPECT_FALSE(g.processes[1].sm_percent.has_value()) << "no sample of pid 101: unknown, not 0";
  EXPECT_FALSE(g.processes[1].mem_percent.has_value());
  ASSERT_EQ((*gpus)[1].processes.size(), 1U);
  EXPECT_FALSE((*gpus)[1].processes[0].sm_percent.has_value()) << "NOT_SUPPORTED is unknown";
  EXPECT_TRUE((*gpus)[1].problem.empty());
  // A driver without the symbol: the same processes, no hint.
  NvmlSymbols without = modern_symbols();
  without.process_utilization = {};
  auto plain = library(without).query_all(&problems);
  ASSERT_TRUE(plain.has_value());
  EXPECT_FALSE((*plain)[0].processes[0].sm_percent.has_value());
}

// Issue 53: nvmlDeviceGetProcessesUtilizationInfo (r545+; the only per-process call
// Blackwell answers) is preferred when the driver has it; the older call is asked when it
// is absent or gives no answer; NOT_FOUND is an answer (no sample); a GPU neither call
// supports has no hint.
TEST_F(NvmlLibraryTest, ProcessUtilizationPrefersTheNewerCallAndFallsBackToTheOlder) {
  NvmlSymbols both = modern_symbols();
  both.processes_utilization_info = {fake_processes_info, "nvmlDeviceGetProcessesUtilizationInfo"};
  auto gpus = library(both).query_all();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  const GpuInfo& g = (*gpus)[0];
  ASSERT_EQ(g.processes.size(), 2U);
  EXPECT_EQ(g.processes[0].sm_percent, 55U) << "the newer call's latest sample of pid 100";
  EXPECT_EQ(g.processes[0].mem_percent, 20U);
  EXPECT_EQ(g.processes[1].sm_percent, 7U) << "pid 101: only the newer call sampled it";
  EXPECT_EQ(fake_.legacy_util_calls, 0) << "the older call is not asked beside it";
  EXPECT_FALSE((*gpus)[1].processes[0].sm_percent.has_value()) << "neither call supported";
  EXPECT_THAT(fake_.info_versions_seen, ::testing::Each(0x01000018U));

  // Not supported on GPU 0 (or a version refused): the older call answers.
  fake_.info_rc = NVML_ERROR_NOT_SUPPORTED;
  gpus = library(both).query_all();
  ASSERT_TRUE(gpus.has_value());
  EXPECT_EQ((*gpus)[0].processes[0].sm_percent, 37U) << "the older call's latest sample";
  EXPECT_FALSE((*gpus)[0].processes[1].sm_percent.has_value());
  EXPECT_GT(fake_.legacy_util_calls, 0);

  // NOT_FOUND: the newer call answered that there is no sample; nothing else is asked.
  fake_.info_rc = NVML_ERROR_NOT_FOUND;
  fake_.legacy_util_calls = 0;
  gpus = library(both).query_all();
  ASSERT_TRUE(gpus.has_value());
  EXPECT_FALSE((*gpus)[0].processes[0].sm_percent.has_value());
  EXPECT_EQ(fake_.legacy_util_calls, 0);

  // A driver with only the newer call (the older one gone): still a hint.
  fake_.info_rc = NVML_SUCCESS;
  NvmlSymbols only_new = both;
  only_new.process_utilization = {};
  gpus = library(only_new).query_all();
  ASSERT_TRUE(gpus.has_value());
  EXPECT_EQ((*gpus)[0].processes[0].sm_percent, 55U);
}

TEST_F(NvmlLibraryTest, MemoryV2IsCalledWithTheStructVersionNotTwo) {
  NvmlLibrary lib = library(modern_symbols());
  ASSERT_TRUE(lib.query_memory({0}).has_value());
  EXPECT_THAT(fake_.memory_versions_seen, ElementsAre(0x02000028U));
  EXPECT_EQ(fake_.memory_v1_calls, 0);
}

TEST_F(NvmlLibraryTest, MemoryFallsBackToV1WhenV2IsRejected) {
  fake_.memory_v2_understood = false;
  NvmlLibrary lib = library(modern_symbols());
  auto readings = lib.query_memory({0, 1});
  ASSERT_TRUE(readings.has_value()) << readings.error().message;
  EXPECT_EQ((*readings)[0].used, (20ULL << 30) + (512ULL << 20)) << "v1 used includes reserved";
  auto gpus = lib.query_all();
  ASSERT_TRUE(gpus.has_value());
  EXPECT_FALSE((*gpus)[0].memory->reserved.has_value());
  EXPECT_EQ(fake_.memory_v2_calls, 1) << "a rejected version is learned once";
}

TEST_F(NvmlLibraryTest, LegacyProcessListsWith24ByteEntries) {
  NvmlLibrary lib = library(legacy_symbols());
  auto gpus = lib.query_all();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  ASSERT_EQ((*gpus)[0].processes.size(), 2U);
  EXPECT_EQ((*gpus)[0].processes[0].used_bytes, 10ULL << 30);
  // No MPS symbol and no detail list: GPU 1's MPS process is not visible.
  EXPECT_TRUE((*gpus)[1].processes.empty());
  EXPECT_TRUE((*gpus)[1].processes_known);
}

TEST_F(NvmlLibraryTest, LegacyV3WritingSixteenByteEntriesIsDecoded) {
  fake_.legacy_stride = 16;
  NvmlLibrary lib = library(legacy_symbols());
  auto gpus = lib.query_all();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  ASSERT_EQ((*gpus)[0].processes.size(), 2U);
  EXPECT_EQ((*gpus)[0].processes[1].pid, 101U);
}

TEST_F(NvmlLibraryTest, DetailListVersionMismatchFallsBackToLegacyCalls) {
  fake_.detail_list_understood = false;
  NvmlLibrary lib = library(modern_symbols());
  auto gpus = lib.query_all();
  ASSERT_TRUE(gpus.has_value()) << gpus.error().message;
  EXPECT_EQ((*gpus)[0].processes.size(), 2U);
}

TEST_F(NvmlLibraryTest, ProcessListThatGrowsBetweenCallsIsRetried) {
  fake_.grow_after_count_query = 20;  // 2 reported, 22 by the time we ask: 2*2+5 is too small
  NvmlLibrary lib = library(legacy_symbols());
  auto readings = lib.query_memory({0});
  ASSERT_TRUE(readings.has_value()) << readings.error().message;
  EXPECT_EQ((*readings)[0].pids.size(), 22U);
}

TEST_F(NvmlLibraryTest, PerGpuFailureNamesCallAndGpuAndKeepsTheOthers) {
  fake_.gpus[1].memory_rc = NVML_ERROR_GPU_IS_LOST;
  NvmlLibrary lib = library(modern_symbols());
  std::vector<std::string> problems;
  auto gpus = lib.query_all(&problems);
  ASSERT_TRUE(gpus.has_value());
  EXPECT_THAT(problems, ElementsAre("nvmlDeviceGetMemoryInfo_v2(GPU 1): GPU is lost"));
  EXPECT_TRUE((*gpus)[0].memory.has_value());
  EXPECT_FALSE((*gpus)[1].memory.has_value());
  EXPECT_EQ((*gpus)[1].uuid, "GPU-bbbb2222");

  auto strict = lib.query_all();
  ASSERT_FALSE(strict.has_value());
  EXPECT_EQ(strict.error().message, "nvmlDeviceGetMemoryInfo_v2(GPU 1): GPU is lost");

  auto readings = lib.query_memory({0, 1});
  ASSERT_FALSE(readings.has_value());
  EXPECT_EQ(readings.error().message, "nvmlDeviceGetMemoryInfo_v2(GPU 1): GPU is lost");
}

TEST_F(NvmlLibraryTest, LostHandleKeepsTheGpuWithItsIndexOnly) {
  fake_.gpus[0].handle_rc = NVML_ERROR_GPU_IS_LOST;
  NvmlLibrary lib = library(modern_symbols());
  std::vector<std::string> problems;
  auto gpus = lib.query_all(&problems);
  ASSERT_TRUE(gpus.has_value());
  ASSERT_EQ(gpus->size(), 2U);
  EXPECT_EQ((*gpus)[0].uuid, "");
  EXPECT_FALSE((*gpus)[0].processes_known);
  EXPECT_EQ((*gpus)[1].uuid, "GPU-bbbb2222");
  EXPECT_THAT(problems, ElementsAre("nvmlDeviceGetHandleByIndex_v2(GPU 0): GPU is lost"));
}

TEST_F(NvmlLibraryTest, ProcessQueryWithoutPermissionIsAProblemNotSupportedIsUnknown) {
  fake_.gpus[0].process_rc = NVML_ERROR_NO_PERMISSION;
  fake_.gpus[1].process_rc = NVML_ERROR_NOT_SUPPORTED;
  NvmlLibrary lib = library(legacy_symbols());
  std::vector<std::string> problems;
  auto gpus = lib.query_all(&problems);
  ASSERT_TRUE(gpus.has_value());
  EXPECT_THAT(problems, ElementsAre("nvmlDeviceGetComputeRunningProcesses_v3(GPU 0): "
                                    "Insufficient Permissions"));
  EXPECT_FALSE((*gpus)[0].processes_known);
  EXPECT_FALSE((*gpus)[1].processes_known);
}

TEST_F(NvmlLibraryTest, QueryMemoryKeepsTheOrderAskedAndRejectsUnknownIndices) {
  NvmlLibrary lib = library(modern_symbols());
  auto readings = lib.query_memory({1, 0});
  ASSERT_TRUE(readings.has_value());
  EXPECT_EQ((*readings)[0].id, gpu::dev(1));
  EXPECT_THAT((*readings)[0].pids, ElementsAre(300U));
  EXPECT_THAT((*readings)[1].pids, ElementsAre(100U, 101U));
  auto bad = lib.query_memory({0, 5});
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().message, "no GPU with index 5: NVML sees 2 GPUs");
}

TEST_F(NvmlLibraryTest, InitFailureCarriesNvmlsText) {
  fake_.init_rc = NVML_ERROR_DRIVER_NOT_LOADED;
  NvmlLibrary lib = NvmlLibrary::from_symbols(modern_symbols());
  auto r = lib.init();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "nvmlInit_v2: Driver Not Loaded");
}

TEST(NvmlLibraryLoad, MissingLibraryNamesThePath) {
  auto lib = NvmlLibrary::load("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(lib.has_value());
  EXPECT_THAT(lib.error().message, HasSubstr("'/nonexistent/libnvidia-ml.so.1'"));
  EXPECT_THAT(lib.error().message, HasSubstr("no NVIDIA driver seems to be installed"));
}

TEST(NvmlLibraryLoad, ALibraryWithoutNvmlSymbolsIsRejected) {
  auto lib = NvmlLibrary::load("libc.so.6");
  ASSERT_FALSE(lib.has_value());
  EXPECT_THAT(lib.error().message, HasSubstr("is not a usable NVML library"));
  EXPECT_THAT(lib.error().message, HasSubstr("nvmlInit_v2"));
}

}  // namespace
}  // namespace gpureap::gpu
