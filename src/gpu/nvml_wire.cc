#include "gpu/nvml_wire.h"
#include "util/enum_names.h"
#include "util/wire_text.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <span>

namespace gpureap::gpu {
namespace {

using nlohmann::json;

ProcessKind kind_from_name(const std::string& name) {
  if (auto kind = enum_from_name<ProcessKind>(name)) return *kind;
  throw WireError("unknown process kind '" + name + "'");
}

template <typename T>
json optional_to_wire(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

template <typename T>
std::optional<T> optional_from_wire(const json& wire, const char* key) {
  const json& value = wire.at(key);
  if (value.is_null()) return std::nullopt;
  return value.get<T>();
}

// Decoders use nlohmann's checked accessors, which throw on a missing key or a
// wrong type; this turns that into an error value at the one boundary.
template <typename T, typename F>
Result<T> decode(const char* what, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return fail(fmt::format("malformed {} from the NVML worker: {}", what, e.what()));
  }
}

// Milliseconds left until the deadline for poll(): -1 waits forever, and the
// value is rounded up so that poll does not return just before the deadline.
int poll_timeout(const FrameDeadline& deadline) {
  if (!deadline) return -1;
  auto left = *deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<long long>(ms, 1 << 30));
}

// Waits until fd is ready for `events`; false on timeout.
FrameResult<bool> wait_ready(int fd, short events, const FrameDeadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, poll_timeout(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) {
      return std::unexpected(FrameFailure{FrameFailure::Kind::io,
                                          Error::from_errno("poll on the NVML worker").message});
    }
  }
}

FrameFailure timeout_failure() {
  return {FrameFailure::Kind::timeout, "no answer in time"};
}

FrameResult<void> send_all(int fd, std::span<const char> data, const FrameDeadline& deadline) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n >= 0) {
      data = data.subspan(static_cast<std::size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto ready = wait_ready(fd, POLLOUT, deadline);
      if (!ready) return std::unexpected(ready.error());
      if (!*ready) return std::unexpected(timeout_failure());
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET) {
      return std::unexpected(FrameFailure{FrameFailure::Kind::closed, "the connection closed"});
    }
    return std::unexpected(
        FrameFailure{FrameFailure::Kind::io, Error::from_errno("send to the NVML worker").message});
  }
  return {};
}

FrameResult<void> recv_all(int fd, std::span<char> data, const FrameDeadline& deadline) {
  while (!data.empty()) {
    if (deadline) {
      // Wait first: the socket is non-blocking on the side that has a deadline.
      auto ready = wait_ready(fd, POLLIN, deadline);
      if (!ready) return std::unexpected(ready.error());
      if (!*ready) return std::unexpected(timeout_failure());
    }
    ssize_t n = recv(fd, data.data(), data.size(), 0);
    if (n > 0) {
      data = data.subspan(static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) {
      return std::unexpected(FrameFailure{FrameFailure::Kind::closed, "the connection closed"});
    }
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    if (errno == ECONNRESET) {
      return std::unexpected(FrameFailure{FrameFailure::Kind::closed, "the connection closed"});
    }
    return std::unexpected(FrameFailure{FrameFailure::Kind::io,
                                        Error::from_errno("receive from the NVML worker").message});
  }
  return {};
}

}  // namespace

json process_to_wire(const GpuProcess& p) {
  return {{"pid", p.pid},
          {"used_bytes", optional_to_wire(p.used_bytes)},
          {"kind", std::string(enum_name(p.kind))},
          {"sm_percent", optional_to_wire(p.sm_percent)},
          {"mem_percent", optional_to_wire(p.mem_percent)}};
}

GpuProcess process_from_wire(const json& p) {
  GpuProcess process{wire_integer<std::uint32_t>(p, "pid"),
                     wire_optional_integer<std::uint64_t>(p, "used_bytes"),
                     kind_from_name(text_from_wire(wire_field(p, "kind")))};
  if (p.contains("sm_percent")) process.sm_percent = wire_optional_integer<unsigned>(p, "sm_percent");
  if (p.contains("mem_percent"))
    process.mem_percent = wire_optional_integer<unsigned>(p, "mem_percent");
  return process;
}

json gpu_info_to_wire(const GpuInfo& gpu) {
  json processes = json::array();
  for (const GpuProcess& p : gpu.processes) {
    processes.push_back(process_to_wire(p));
  }
  json memory = nullptr;
  if (gpu.memory) {
    memory = {{"total", gpu.memory->total},
              {"used", gpu.memory->used},
              {"reserved", optional_to_wire(gpu.memory->reserved)}};
  }
  json mig = json::array();
  for (const GpuInfo& d : gpu.mig_devices) mig.push_back(gpu_info_to_wire(d));
  return {{"index", gpu.id.index},
          {"gi", optional_to_wire(gpu.id.gi)},
          {"ci", optional_to_wire(gpu.id.ci)},
          {"mig_mode", gpu.mig_mode},
          {"parent_uuid", wire_text(gpu.parent_uuid)},
          {"mig_devices", mig},
          {"name", wire_text(gpu.name)},
          {"uuid", wire_text(gpu.uuid)},
          {"pci_bus_id", wire_text(gpu.pci_bus_id)},
          {"minor", optional_to_wire(gpu.minor)},
          {"memory", memory},
          {"processes", processes},
          {"processes_known", gpu.processes_known},
          {"persistence_mode", optional_to_wire(gpu.persistence_mode)},
          {"utilization_gpu", optional_to_wire(gpu.utilization_gpu)},
          {"utilization_memory", optional_to_wire(gpu.utilization_memory)},
          {"temperature_c", optional_to_wire(gpu.temperature_c)},
          {"power_mw", optional_to_wire(gpu.power_mw)},
          {"power_limit_mw", optional_to_wire(gpu.power_limit_mw)},
          {"clock_event_reasons", optional_to_wire(gpu.clock_event_reasons)},
          {"ecc_uncorrected", optional_to_wire(gpu.ecc_uncorrected)},
          {"problem", wire_text(gpu.problem)},
          {"hung", gpu.hung}};
}

Result<GpuInfo> gpu_info_from_wire(const json& wire) {
  return decode<GpuInfo>("GPU description", [&] {
    GpuInfo gpu;
    gpu.id.index = wire_integer<unsigned>(wire, "index");
    // Absent from an older peer's message: a whole GPU, MIG mode unknown (off).
    if (wire.contains("gi")) {
      gpu.id.gi = wire_optional_integer<unsigned>(wire, "gi");
      gpu.id.ci = wire_optional_integer<unsigned>(wire, "ci");
      gpu.mig_mode = wire_boolean(wire, "mig_mode");
      gpu.parent_uuid = text_from_wire(wire.at("parent_uuid"));
      for (const json& d : wire_field(wire, "mig_devices")) {
        auto device = gpu_info_from_wire(d);
        if (!device) throw std::runtime_error(device.error().message);
        gpu.mig_devices.push_back(std::move(*device));
      }
    }
    gpu.name = text_from_wire(wire.at("name"));
    gpu.uuid = text_from_wire(wire.at("uuid"));
    gpu.pci_bus_id = text_from_wire(wire.at("pci_bus_id"));
    gpu.minor = wire_optional_integer<unsigned>(wire, "minor");
    if (const json& memory = wire.at("memory"); !memory.is_null()) {
      gpu.memory =
          GpuMemory{wire_integer<std::uint64_t>(memory, "total"), wire_integer<std::uint64_t>(memory, "used"),
                    wire_optional_integer<std::uint64_t>(memory, "reserved")};
    }
    for (const json& p : wire_field(wire, "processes")) {
      gpu.processes.push_back(process_from_wire(p));
    }
    gpu.processes_known = wire_boolean(wire, "processes_known");
    gpu.persistence_mode = optional_from_wire<bool>(wire, "persistence_mode");
    // Absent from an older worker's answer: unknown, like an unsupported query.
    if (wire.contains("utilization_gpu"))
      gpu.utilization_gpu = wire_optional_integer<unsigned>(wire, "utilization_gpu");
    if (wire.contains("utilization_memory"))
      gpu.utilization_memory = wire_optional_integer<unsigned>(wire, "utilization_memory");
    if (wire.contains("temperature_c"))
      gpu.temperature_c = wire_optional_integer<unsigned>(wire, "temperature_c");
    if (wire.contains("power_mw")) gpu.power_mw = wire_optional_integer<unsigned>(wire, "power_mw");
    if (wire.contains("power_limit_mw"))
      gpu.power_limit_mw = wire_optional_integer<unsigned>(wire, "power_limit_mw");
    if (wire.contains("clock_event_reasons"))
      gpu.clock_event_reasons = wire_optional_integer<std::uint64_t>(wire, "clock_event_reasons");
    if (wire.contains("ecc_uncorrected"))
      gpu.ecc_uncorrected = wire_optional_integer<std::uint64_t>(wire, "ecc_uncorrected");
    if (wire.contains("problem")) gpu.problem = text_from_wire(wire.at("problem"));
    gpu.hung = wire.value("hung", false);
    return gpu;
  });
}

json memory_reading_to_wire(const MemoryReading& reading) {
  json mig = json::array();
  for (const MemoryReading& r : reading.mig) mig.push_back(memory_reading_to_wire(r));
  return {{"index", reading.id.index},
          {"gi", optional_to_wire(reading.id.gi)},
          {"ci", optional_to_wire(reading.id.ci)},
          {"mig", mig},
          {"used", optional_to_wire(reading.used)},
          {"pids", reading.pids},
          {"utilization_gpu", optional_to_wire(reading.utilization_gpu)},
          {"problem", reading.problem},
          {"hung", reading.hung}};
}

Result<MemoryReading> memory_reading_from_wire(const json& wire) {
  return decode<MemoryReading>("memory reading", [&] {
    MemoryReading reading;
    reading.id.index = wire.at("index").get<unsigned>();
    if (wire.contains("gi")) {
      reading.id.gi = wire_optional_integer<unsigned>(wire, "gi");
      reading.id.ci = wire_optional_integer<unsigned>(wire, "ci");
      for (const json& r : wire_field(wire, "mig")) {
        auto one = memory_reading_from_wire(r);
        if (!one) throw std::runtime_error(one.error().message);
        reading.mig.push_back(std::move(*one));
      }
    }
    reading.used = optional_from_wire<std::uint64_t>(wire, "used");
    reading.pids = wire.at("pids").get<std::vector<std::uint32_t>>();
    if (wire.contains("utilization_gpu"))
      reading.utilization_gpu = optional_from_wire<unsigned>(wire, "utilization_gpu");
    reading.problem = wire.value("problem", std::string());
    reading.hung = wire.value("hung", false);
    return reading;
  });
}

FrameResult<void> write_frame(int fd, const json& message, FrameDeadline deadline) {
  // Replace invalid UTF-8 (a driver string) rather than throw.
  const std::string text = message.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > kMaxFrameBytes) {
    return std::unexpected(FrameFailure{
        FrameFailure::Kind::malformed, fmt::format("frame of {} bytes is too large", text.size())});
  }
  const auto size = static_cast<std::uint32_t>(text.size());
  std::string frame(4, '\0');
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((size >> (8 * i)) & 0xFFU);
  frame += text;
  return send_all(fd, frame, deadline);
}

FrameResult<json> read_frame(int fd, FrameDeadline deadline) {
  std::array<char, 4> header{};
  if (auto r = recv_all(fd, header, deadline); !r) return std::unexpected(r.error());
  std::uint32_t size = 0;
  for (int i = 0; i < 4; ++i)
    size |= std::uint32_t{static_cast<unsigned char>(header[i])} << (8 * i);
  if (size > kMaxFrameBytes) {
    return std::unexpected(FrameFailure{FrameFailure::Kind::malformed,
                                        fmt::format("frame of {} bytes is too large", size)});
  }
  std::string text(size, '\0');
  if (auto r = recv_all(fd, text, deadline); !r) return std::unexpected(r.error());
  json message = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded()) {
    return std::unexpected(FrameFailure{FrameFailure::Kind::malformed, "a frame that is not JSON"});
  }
  return message;
}

}  // namespace gpureap::gpu
