#include "gpu/nvml_source.h"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "gpu/mig.h"
#include "gpu/nvml_wire.h"
#include "util/poll.h"
#include "util/enum_names.h"

namespace gpureap::gpu {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// How long an exiting worker gets before it is killed, and how long a killed
// one gets before we stop waiting for it (a worker stuck in the driver in D
// state cannot die until the driver returns; we never block on it).
constexpr milliseconds kExitWait{150};
constexpr milliseconds kKillWait{50};
// disconnect(): time for nvmlShutdown to return, then for the worker to exit.
constexpr milliseconds kShutdownBudget{1000};
constexpr milliseconds kShutdownExitWait{500};
// A prefetched snapshot older than this is dropped and taken again.
constexpr milliseconds kPrefetchMaxAge{1000};
// The worker's own per-GPU limit for a prefetched snapshot (the snapshot() that
// collects it usually has 2 s), and the share of a call's deadline it gets
// otherwise: it must answer, hung GPUs marked, before gpureap gives up on it.
constexpr milliseconds kPrefetchQueryLimit{1500};
constexpr int kQueryLimitPercent = 75;
// snapshot_in_flight(): reading a ready message that has begun to arrive.
constexpr milliseconds kReadyReadLimit{100};

// The request with the worker's per-GPU limit: what is left of the deadline, less a margin.
json with_limit(json request, std::chrono::steady_clock::time_point end) {
  auto left = std::chrono::duration_cast<milliseconds>(end - std::chrono::steady_clock::now());
  request["deadline_ms"] = std::max<std::int64_t>(1, left.count() * kQueryLimitPercent / 100);
  return request;
}

std::string string_field(const json& message, const char* key) {
  if (!message.is_object()) return {};
  auto it = message.find(key);
  return it != message.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The worker reports only a start-up failure; anything else it could say is a query failure.
SourceState state_from_wire(const std::string& state) {
  auto named = enum_from_name<SourceState>(state);
  if (named == SourceState::library_missing || named == SourceState::init_failed) return *named;
  return SourceState::query_failed;
}

}  // namespace

std::string resolve_nvml_library(std::string_view flag) {
  if (!flag.empty()) return std::string(flag);
  if (const char* env = std::getenv("GPUREAP_NVML_LIBRARY"); env != nullptr && *env != '\0') {
    return env;
  }
  return "libnvidia-ml.so.1";
}

std::unique_ptr<GpuSource> make_nvml_source(std::string library_path) {
  return std::make_unique<NvmlSource>(std::move(library_path));
}

NvmlSource::NvmlSource(std::string library_path) : library_path_(std::move(library_path)) {}

NvmlSource::~NvmlSource() {
  if (worker_) {
    // An idle worker exits on EOF; a busy one is killed.
    worker_->close_channel();
    if (!worker_->wait_exit(kExitWait)) {
      worker_->kill();
      worker_->wait_exit(kKillWait);
    }
  }
  reap_stuck();
}

std::optional<pid_t> NvmlSource::worker_pid() const {
  if (worker_) return worker_->pid();
  if (!stuck_.empty()) return stuck_.front().pid();
  return std::nullopt;
}

void NvmlSource::reap_stuck() {
  std::erase_if(stuck_, [](NvmlWorker& w) { return w.try_reap().has_value(); });
}

void NvmlSource::forget_worker() {
  worker_.reset();
  worker_ready_ = false;
  prefetched_.reset();
}

void NvmlSource::bury_worker() {
  if (!worker_) return;
  if (!worker_->wait_exit(kExitWait)) {
    worker_->kill();
    if (!worker_->wait_exit(kKillWait)) stuck_.push_back(std::move(*worker_));
  }
  forget_worker();
}

NvmlSource::Failure NvmlSource::worker_failed(const FrameFailure& failure, milliseconds deadline,
                                              bool starting) {
  const pid_t pid = worker_->pid();
  if (failure.kind == FrameFailure::Kind::timeout) {
    worker_->close_channel();
    worker_->kill();
    if (!worker_->wait_exit(kKillWait)) stuck_.push_back(std::move(*worker_));
    forget_worker();
    const char* what = starting ? "finish initializing" : "answer";
    remembered_ = Failure{SourceState::hung,
                          fmt::format("NVML did not {} within {} ms (the driver may be stuck; see "
                                      "dmesg): showing the /proc view only",
                                      what, deadline.count())};
    return *remembered_;
  }
  const char* when = starting ? "while loading NVML" : "while answering";
  std::string problem;
  if (failure.kind == FrameFailure::Kind::closed) {
    auto ending = worker_->wait_exit(kExitWait);
    problem = fmt::format("the NVML worker (pid {}) {} {}", pid,
                          ending.value_or("closed its connection"), when);
  } else {
    worker_->kill();
    problem = fmt::format("lost the NVML worker (pid {}) {}: {}", pid, when, failure.message);
  }
  bury_worker();
  return Failure{SourceState::query_failed, std::move(problem)};
}

std::expected<void, NvmlSource::Failure> NvmlSource::spawn_worker() {
  auto worker = NvmlWorker::spawn(library_path_);
  if (!worker) {
    return std::unexpected(Failure{SourceState::query_failed,
                                   "cannot start the NVML worker: " + worker.error().message});
  }
  worker_ = std::move(*worker);
  worker_ready_ = false;
  return {};
}

std::expected<void, NvmlSource::Failure> NvmlSource::await_ready(Clock::time_point end,
                                                                 milliseconds deadline) {
  // The worker speaks first: NVML loaded and initialized, or why not.
  auto ready = read_frame(worker_->fd(), end);
  if (!ready) return std::unexpected(worker_failed(ready.error(), deadline, true));
  auto flag = ready->is_object() ? ready->find("ready") : ready->end();
  if (!ready->is_object() || flag == ready->end() || !flag->is_boolean()) {
    return std::unexpected(worker_failed(
        {FrameFailure::Kind::malformed, "no ready message: " + ready->dump()}, deadline, true));
  }
  if (!flag->get<bool>()) {
    // Missing library or failed nvmlInit: remembered, as retrying would fail alike.
    remembered_ =
        Failure{state_from_wire(string_field(*ready, "state")), string_field(*ready, "problem")};
    bury_worker();
    return std::unexpected(*remembered_);
  }
  driver_version_ = string_field(*ready, "driver_version");
  cuda_version_ = string_field(*ready, "cuda_version");
  worker_ready_ = true;
  return {};
}

std::expected<json, NvmlSource::Failure> NvmlSource::round_trip(const json& request,
                                                                milliseconds deadline) {
  reap_stuck();
  if (remembered_) return std::unexpected(*remembered_);
  const auto start = Clock::now();
  const auto end = start + deadline;
  // How long the answer was awaited, for the message of a hang: a prefetched
  // question has been waiting since it was sent.
  if (prefetched_) deadline += std::chrono::duration_cast<milliseconds>(start - *prefetched_);
  if (!worker_) {
    if (auto spawned = spawn_worker(); !spawned) return std::unexpected(spawned.error());
  }
  if (!worker_ready_) {
    if (auto ready = await_ready(end, deadline); !ready) return std::unexpected(ready.error());
  }
  if (prefetched_) {
    // The answer to a prefetched snapshot comes first: use it, or drop it.
    const bool fresh = Clock::now() - *prefetched_ <= kPrefetchMaxAge;
    prefetched_.reset();
    auto reply = read_frame(worker_->fd(), end);
    if (!reply) return std::unexpected(worker_failed(reply.error(), deadline, false));
    if (fresh && request.value("op", "") == "snapshot" && reply->is_object()) {
      return std::move(*reply);
    }
  }
  if (auto sent = write_frame(worker_->fd(), with_limit(request, end), end); !sent) {
    return std::unexpected(worker_failed(sent.error(), deadline, false));
  }
  auto reply = read_frame(worker_->fd(), end);
  if (!reply) return std::unexpected(worker_failed(reply.error(), deadline, false));
  if (!reply->is_object()) {
    return std::unexpected(worker_failed(
        {FrameFailure::Kind::malformed, "an answer that is not an object"}, deadline, false));
  }
  return std::move(*reply);
}

void NvmlSource::prefetch_snapshot() {
  reap_stuck();
  if (remembered_ || prefetched_) return;
  if (!worker_ && !spawn_worker()) return;  // snapshot() will start it again and report
  // The request waits in the socket until the worker has initialized NVML. A
  // failure to send is left for snapshot() to find and report.
  const auto now = Clock::now();
  json request = {{"op", "snapshot"}, {"deadline_ms", kPrefetchQueryLimit.count()}};
  if (write_frame(worker_->fd(), request, now)) prefetched_ = now;
}

GpuSnapshot NvmlSource::snapshot(milliseconds deadline) {
  GpuSnapshot snapshot;
  auto reply = round_trip({{"op", "snapshot"}}, deadline);
  snapshot.driver_version = driver_version_;
  snapshot.cuda_version = cuda_version_;
  if (!reply) {
    snapshot.state = reply.error().state;
    snapshot.problem = reply.error().problem;
    return snapshot;
  }
  if (std::string error = string_field(*reply, "error"); !error.empty()) {
    snapshot.state = SourceState::query_failed;
    snapshot.problem = std::move(error);
    return snapshot;
  }
  auto gpus = reply->find("gpus");
  if (gpus == reply->end() || !gpus->is_array()) {
    snapshot.state = SourceState::query_failed;
    snapshot.problem = "malformed answer from the NVML worker: no GPU list";
    return snapshot;
  }
  for (const json& wire : *gpus) {
    auto gpu = gpu_info_from_wire(wire);
    if (!gpu) {
      snapshot.state = SourceState::query_failed;
      snapshot.problem = gpu.error().message;
      snapshot.gpus.clear();
      return snapshot;
    }
    snapshot.gpus.push_back(std::move(*gpu));
  }
  flatten_mig(snapshot.gpus);  // every MIG device is a GPU of its own from here on
  // Per-GPU failures: each GPU carries its own; the other GPUs are complete,
  // and the state says that some are not.
  for (const GpuInfo& gpu : snapshot.gpus) {
    if (gpu.problem.empty()) continue;
    if (!snapshot.problem.empty()) snapshot.problem += "; ";
    snapshot.problem += gpu.problem;
  }
  if (!snapshot.problem.empty()) snapshot.state = SourceState::partial;
  return snapshot;
}

Result<std::vector<MemoryReading>> NvmlSource::memory(const std::vector<DeviceId>& ids,
                                                      milliseconds deadline) {
  // The worker speaks NVML: its requests name NVML indices, of physical GPUs; a
  // GPU in MIG mode answers for each of its MIG devices.
  std::vector<unsigned> indices;
  for (DeviceId id : ids)
    if (std::find(indices.begin(), indices.end(), id.index) == indices.end())
      indices.push_back(id.index);
  auto reply = round_trip({{"op", "memory"}, {"indices", indices}}, deadline);
  if (!reply) return fail(reply.error().problem);
  if (std::string error = string_field(*reply, "error"); !error.empty()) return fail(error);
  auto wire = reply->find("readings");
  if (wire == reply->end() || !wire->is_array()) {
    return fail("malformed answer from the NVML worker: no memory readings");
  }
  std::vector<MemoryReading> readings;
  for (const json& r : *wire) {
    auto reading = memory_reading_from_wire(r);
    if (!reading) return std::unexpected(reading.error());
    readings.push_back(std::move(*reading));
  }
  flatten_mig(readings);
  // One reading per id asked for, in that order.
  std::vector<MemoryReading> out;
  for (DeviceId id : ids) {
    auto it = std::find_if(readings.begin(), readings.end(),
                           [&](const MemoryReading& r) { return r.id == id; });
    if (it != readings.end()) {
      out.push_back(*it);
      continue;
    }
    MemoryReading missing;
    missing.id = id;
    missing.problem = id.mig() ? fmt::format("MIG device {} is gone (MIG was reconfigured)", id)
                               : fmt::format("GPU {} is in MIG mode now: read its MIG devices", id);
    out.push_back(std::move(missing));
  }
  return out;
}

void NvmlSource::disconnect() {
  if (worker_ && (!worker_ready_ || prefetched_)) {
    // Mid start-up, or an answer in flight: no clean exchange is possible, and
    // an idle worker exits on EOF anyway.
    worker_->close_channel();
    bury_worker();
  }
  if (worker_) {
    const auto end = Clock::now() + kShutdownBudget;
    auto sent = write_frame(worker_->fd(), {{"op", "shutdown"}}, end);
    auto reply =
        sent ? read_frame(worker_->fd(), end) : FrameResult<json>(std::unexpected(sent.error()));
    if (!reply && reply.error().kind == FrameFailure::Kind::timeout) {
      worker_failed(reply.error(), kShutdownBudget, false);  // nvmlShutdown hung: a hang
    } else {
      worker_->close_channel();
      if (!worker_->wait_exit(kShutdownExitWait)) {
        worker_->kill();
        if (!worker_->wait_exit(kKillWait)) stuck_.push_back(std::move(*worker_));
      }
      forget_worker();
    }
  }
  if (remembered_ && remembered_->state != SourceState::hung) remembered_.reset();
  reap_stuck();
}

bool NvmlSource::retry_after_failure() {
  reap_stuck();
  if (!stuck_.empty()) return false;
  if (remembered_) {
    // A hang, a missing library or a failed nvmlInit: the next call starts a
    // helper, which loads and initializes NVML afresh.
    remembered_.reset();
    return true;
  }
  if (!worker_) return false;
  // A helper with a GPU's query stuck in it: replaced (a helper that cannot be
  // killed stays in stuck_, and the next retry waits for it).
  disconnect();
  return stuck_.empty();
}

bool NvmlSource::snapshot_in_flight() {
  reap_stuck();
  if (!worker_ || !prefetched_) return false;
  if (!worker_ready_) {
    if (poll_until(worker_->fd(), POLLIN, Clock::now()) == 0) return true;
    // The helper's first message is in: take it now (a small frame, already
    // written), so that what is awaited is the snapshot's answer. A failure is
    // remembered and snapshot() reports it at once.
    if (!await_ready(Clock::now() + kReadyReadLimit, kReadyReadLimit)) return false;
  }
  return poll_until(worker_->fd(), POLLIN, Clock::now()) == 0;
}

}  // namespace gpureap::gpu
