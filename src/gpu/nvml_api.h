#pragma once
// Our own declarations of the NVML subset gpureap uses. No nvml.h at build time:
// layouts follow NVIDIA's header (NVML_API_VERSION 13, as mirrored in
// NVIDIA/go-nvml gen/nvml/nvml.h); see shared/reference/anchors.md section (b).
// Both the real loader (src/gpu) and the simulated driver (sim/) use this file,
// so the simulated library is held to the same ABI as the real one.

#include <cstddef>

extern "C" {

using nvmlReturn_t = int;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlEnableState_t = int;

enum : int {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_UNKNOWN = 999,
};

constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE_ULL = ~0ULL;
constexpr unsigned NVML_FEATURE_DISABLED = 0;
constexpr unsigned NVML_FEATURE_ENABLED = 1;
constexpr unsigned NVML_DEVICE_MIG_ENABLE = 1;

/// NVML_STRUCT_VERSION(data, ver) = sizeof(struct) | ver << 24.
constexpr unsigned nvml_struct_version(std::size_t size, unsigned version) {
  return static_cast<unsigned>(size) | (version << 24U);
}

struct nvmlProcessInfo_v1_t {  // 16 bytes: unsuffixed *RunningProcesses
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2_t {  // 24 bytes: _v2 and (current) _v3
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;      // 0xFFFFFFFF when not MIG
  unsigned int computeInstanceId;  // 0xFFFFFFFF when not MIG
};
struct nvmlProcessDetail_v1_t {  // 32 bytes
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};
struct nvmlProcessDetailList_v1_t {  // 24 bytes on LP64
  unsigned int version;              // nvmlProcessDetailList_v1
  unsigned int mode;                 // 0 compute, 1 graphics, 2 MPS
  unsigned int numProcArrayEntries;
  nvmlProcessDetail_v1_t* procArray;
};
constexpr unsigned nvmlProcessDetailList_v1 =
    nvml_struct_version(sizeof(nvmlProcessDetailList_v1_t), 1);  // 0x01000018

struct nvmlMemory_t {  // v1: used includes driver-reserved memory
  unsigned long long total, free, used;
};
struct nvmlMemory_v2_t {
  unsigned int version;  // must be nvmlMemory_v2, NOT 2 (see anchors b.5)
  unsigned long long total, reserved, free, used;
};
constexpr unsigned nvmlMemory_v2 = nvml_struct_version(sizeof(nvmlMemory_v2_t), 2);  // 0x02000028

struct nvmlPciInfo_t {  // 68 bytes
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];  // "dddddddd:bb:dd.f"
};

struct nvmlUtilization_t {  // percent of the last sample period (1/6 s to 1 s, per product)
  unsigned int gpu;         // time one or more kernels ran
  unsigned int memory;      // time device memory was read or written
};

static_assert(sizeof(nvmlUtilization_t) == 8);
static_assert(sizeof(nvmlProcessInfo_v1_t) == 16);
static_assert(sizeof(nvmlProcessInfo_v2_t) == 24);
static_assert(sizeof(nvmlProcessDetail_v1_t) == 32);
static_assert(sizeof(nvmlProcessDetailList_v1_t) == 24);
static_assert(sizeof(nvmlMemory_v2_t) == 40);
static_assert(sizeof(nvmlPciInfo_t) == 68);
static_assert(nvmlMemory_v2 == 0x02000028);
static_assert(nvmlProcessDetailList_v1 == 0x01000018);

// Function-pointer types of the symbols we resolve (exact exported names in comments).
using nvmlInit_fn = nvmlReturn_t (*)();                                  // nvmlInit_v2, nvmlInit
using nvmlShutdown_fn = nvmlReturn_t (*)();                              // nvmlShutdown
using nvmlErrorString_fn = const char* (*)(nvmlReturn_t);                // nvmlErrorString
using nvmlSystemGetDriverVersion_fn = nvmlReturn_t (*)(char*, unsigned);  // nvmlSystemGetDriverVersion
using nvmlSystemGetCudaDriverVersion_fn = nvmlReturn_t (*)(int*);  // _v2, plain: 12040 is 12.4
using nvmlDeviceGetCount_fn = nvmlReturn_t (*)(unsigned*);               // _v2, plain
using nvmlDeviceGetHandleByIndex_fn = nvmlReturn_t (*)(unsigned, nvmlDevice_t*);  // _v2, plain
using nvmlDeviceGetString_fn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);  // GetUUID, GetName
using nvmlDeviceGetUint_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*);  // GetMinorNumber, GetIndex
using nvmlDeviceGetPciInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);  // _v3, _v2, plain
using nvmlDeviceGetMemoryInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using nvmlDeviceGetMemoryInfo_v2_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_v2_t*);
using nvmlDeviceGetRunningProcessDetailList_fn =
    nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessDetailList_v1_t*);
// nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses{_v3,_v2,}: the struct
// stride depends on the suffix (v3/v2: 24 bytes, plain: 16 bytes).
using nvmlDeviceGetRunningProcesses_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, void*);
using nvmlDeviceGetPersistenceMode_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlEnableState_t*);
using nvmlDeviceGetUtilizationRates_fn =
    nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);  // nvmlDeviceGetUtilizationRates
// Sensors, optional: nvmlDeviceGetTemperature(device, NVML_TEMPERATURE_GPU, &celsius),
// nvmlDeviceGetPowerUsage(device, &milliwatts) (board power, nvmlDeviceGetUint_fn).
constexpr unsigned NVML_TEMPERATURE_GPU = 0;  // nvmlTemperatureSensors_t
using nvmlDeviceGetTemperature_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned, unsigned*);
// Card health, optional: nvmlDeviceGetEnforcedPowerLimit(device, &milliwatts)
// (nvmlDeviceGetUint_fn); nvmlDeviceGetCurrentClocksEventReasons (r545+; before it
// nvmlDeviceGetCurrentClocksThrottleReasons, the same bits) into a bitmask;
// nvmlDeviceGetTotalEccErrors(device, errorType, counterType, &count).
using nvmlDeviceGetUlonglong_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;  // nvmlMemoryErrorType_t
constexpr int NVML_VOLATILE_ECC = 0;                   // nvmlEccCounterType_t: since the driver loaded
using nvmlDeviceGetTotalEccErrors_fn = nvmlReturn_t (*)(nvmlDevice_t, int, int,
                                                        unsigned long long*);
// Per-process utilization, optional: nvmlDeviceGetProcessUtilization(device, samples,
// &count, lastSeenTimeStamp); samples == nullptr asks for the count (INSUFFICIENT_SIZE).
// NOT_SUPPORTED with MIG on and on some cards; NOT_FOUND when there is no sample.
struct nvmlProcessUtilizationSample_t {
  unsigned pid;
  unsigned long long timeStamp;  // CPU timestamp in microseconds
  unsigned smUtil;
  unsigned memUtil;
  unsigned encUtil;
  unsigned decUtil;
};
static_assert(sizeof(nvmlProcessUtilizationSample_t) == 32);
using nvmlDeviceGetProcessUtilization_fn =
    nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned*, unsigned long long);
// Its successor (r545+, NVML 12.x; the only one Blackwell answers):
// nvmlDeviceGetProcessesUtilizationInfo(device, &info), a versioned struct. With
// procUtilArray == nullptr (or processSamplesCount too small) it answers
// INSUFFICIENT_SIZE with the count; NOT_FOUND when there is no sample.
struct nvmlProcessUtilizationInfo_v1_t {
  unsigned long long timeStamp;  // CPU timestamp in microseconds
  unsigned pid;
  unsigned smUtil;
  unsigned memUtil;
  unsigned encUtil;
  unsigned decUtil;
  unsigned jpgUtil;
  unsigned ofaUtil;
};
static_assert(sizeof(nvmlProcessUtilizationInfo_v1_t) == 40);  // 36 padded to 8
struct nvmlProcessesUtilizationInfo_v1_t {
  unsigned version;              // nvmlProcessesUtilizationInfo_v1
  unsigned processSamplesCount;  // in: the array's capacity; out: the samples written/needed
  unsigned long long lastSeenTimeStamp;
  nvmlProcessUtilizationInfo_v1_t* procUtilArray;
};
static_assert(sizeof(nvmlProcessesUtilizationInfo_v1_t) == 24);
// NVML_STRUCT_VERSION(ProcessesUtilizationInfo, 1): the size | version << 24.
constexpr unsigned nvmlProcessesUtilizationInfo_v1 =
    static_cast<unsigned>(sizeof(nvmlProcessesUtilizationInfo_v1_t)) | (1U << 24);
static_assert(nvmlProcessesUtilizationInfo_v1 == 0x01000018U);
using nvmlDeviceGetProcessesUtilizationInfo_fn =
    nvmlReturn_t (*)(nvmlDevice_t, nvmlProcessesUtilizationInfo_v1_t*);
// MIG (issue 25). nvmlDeviceGetMigMode(device, &current, &pending);
// nvmlDeviceGetMaxMigDeviceCount and nvmlDeviceGet{Gpu,Compute}InstanceId take
// nvmlDeviceGetUint_fn; nvmlDeviceGetMigDeviceHandleByIndex(device, i, &mig_device).
using nvmlDeviceGetMigMode_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned*, unsigned*);
using nvmlDeviceGetMigDeviceHandleByIndex_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned,
                                                                nvmlDevice_t*);

}  // extern "C"
