#include "cluster/slurm_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "gpu/vendor.h"
#include "util/text.h"

namespace gpureap::cluster {
namespace {

// A decimal number without sign or spaces; nullopt otherwise.
std::optional<unsigned> number(std::string_view s) {
  unsigned n = 0;
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return n;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

EnvLookup process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

std::string SlurmJob::gpu_spec() const {
  std::string spec;
  for (const auto& s : gpu_selectors) spec += (spec.empty() ? "" : ",") + s;
  return spec;
}

Result<std::vector<unsigned>> parse_job_gpus(std::string_view text) {
  std::vector<unsigned> out;
  auto bad = [&] {
    return fail(fmt::format("SLURM_JOB_GPUS '{}': expected GPU numbers such as 0,1 or 2-3", text));
  };
  std::string_view rest = text;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = trim(rest.substr(0, comma));
    rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
    auto dash = item.find('-');
    auto first = number(item.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : number(item.substr(dash + 1));
    if (!first || !last || *last < *first || *last > 255) return bad();
    for (unsigned m = *first; m <= *last; ++m)
      if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  return out;
}

Result<SlurmJob> read_slurm_job(const EnvLookup& env) {
  SlurmJob job;
  auto id = env("SLURM_JOB_ID");
  if (!id) id = env("SLURM_JOBID");
  if (!id)
    return fail(
        "SLURM_JOB_ID is not set: run this as Slurm's Prolog or Epilog (slurm.conf), "
        "or set it");
  if (!all_digits(*id)) return fail(fmt::format("SLURM_JOB_ID '{}' is not a job number", *id));
  job.id = *id;
  const auto job_gpus = env("SLURM_JOB_GPUS");
  std::vector<unsigned> minors;
  if (job_gpus) {
    auto parsed = parse_job_gpus(*job_gpus);
    if (!parsed) return std::unexpected(parsed.error());
    minors = std::move(*parsed);
  }
  // The visible-devices variables of every vendor (CUDA_VISIBLE_DEVICES; AMD's
  // ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES, gpu/vendor.h): GPU and MIG device UUIDs
  // name devices of this node, whichever variable holds them (NVIDIA's and ROCm's UUIDs
  // differ in form, so one never names the other's GPU).
  std::vector<std::string> uuids;
  bool mig = false;
  for (std::string_view variable : gpu::all_visible_devices_variables()) {
    auto visible = env(variable);
    if (!visible) continue;
    std::string_view rest = *visible;
    while (!rest.empty()) {
      auto comma = rest.find(',');
      std::string item(trim(rest.substr(0, comma)));
      rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
      if (item.starts_with("GPU-") || item.starts_with("MIG-")) {
        mig = mig || item.starts_with("MIG-");
        if (std::find(uuids.begin(), uuids.end(), item) == uuids.end()) uuids.push_back(item);
      } else if (!item.empty() && !job_gpus) {
        job.notes.push_back(fmt::format(
            "{} item '{}' left out: only UUIDs name a GPU of this node (a number counts "
            "the GPUs the job sees); SLURM_JOB_GPUS is not set",
            variable, item));
      }
    }
  }
  // A job on MIG devices: SLURM_JOB_GPUS counts the node's MIG GRES (gres.conf's
  // MultipleFiles lines, or AutoDetect's), not device minors; taken as minors they
  // would name whole GPUs, every MIG device of them, other jobs' included.
  if (mig && !minors.empty())
    job.notes.push_back(fmt::format(
        "SLURM_JOB_GPUS '{}' left out: the job's GPUs are MIG devices, named by "
        "CUDA_VISIBLE_DEVICES; Slurm's numbers of MIG devices are not device minors",
        *job_gpus));
  else
    for (unsigned m : minors) job.gpu_selectors.push_back(fmt::format("minor:{}", m));
  job.gpu_selectors.insert(job.gpu_selectors.end(), uuids.begin(), uuids.end());
  return job;
}

}  // namespace gpureap::cluster
