#pragma once
// `run --replace` / `--replace-orphans` / `--free-first`: the three lines a restart reads
// (freed, verified, launched), and the reasons it refuses. Text only (stderr: stdout is
// CMD's); each line through run_line.

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reclaim/free_flow.h"
#include "supervise/port_check.h"
#include "supervise/replace.h"

namespace gpureap::report {

/// "freed sglang server 7969 (8 processes, 736 GiB on GPU 0,...,7) in 0.42 s", one
/// clause per instance of the plan; processes of no instance are counted apart.
std::string freed_line(const reclaim::Plan& plan, const reclaim::ReclaimReport& report);

/// The GPUs the free verified back at baseline that held a target of `plan`: what it
/// freed, never a GPU whose holders it left alone.
std::vector<gpu::DeviceId> freed_gpus(const reclaim::Plan& plan,
                                      const reclaim::ReclaimReport& report);

/// "verified: GPU 0,1,2,3 back at baseline; port 30000 closed": freed_gpus only.
std::string verified_line(const reclaim::Plan& plan, const reclaim::ReclaimReport& report,
                          const std::vector<unsigned>& ports);

/// What the plan left alone that keeps GPU memory: one entry per instance (its members
/// joined) or per process of no instance, with why (the plan's reason).
struct LeftAlone {
  std::string instance;  // its key, or "" for a process of no instance
  std::vector<pid_t> pids;
  std::string comm;  // the first process's
  std::string user;
  std::vector<gpu::DeviceId> gpus;
  std::uint64_t bytes = 0;
  std::string reason;
};
std::vector<LeftAlone> left_alone(const reclaim::Plan& plan, const inventory::Inventory& inv);

/// "left alone: vllm server 4242 (2 processes) of alice, 16.0 GiB on GPU 6,7: not
/// orphaned (its parent is alive); --orphans given".
std::string left_alone_line(const LeftAlone& a, const inventory::Inventory& inv);

/// "launched ./serve.sh --port 8000 as pid 4242, run serve.sh-4240": the command line cut
/// to 40 columns; for an engine's launcher, what it serves: "launched sglang server, model
/// moonshotai/Kimi-K2.5, port 30000, as pid 4242, run python3-4240".
std::string launched_line(const std::vector<std::string>& argv, pid_t pid,
                          const std::string& run_id);

/// "port 30000 is still listened on by pid 4242 (python3)".
std::string open_port_text(const supervise::OpenPort& port);

/// The question before a confirmed replace: "Stop vllm server 18396 (3 processes) and
/// launch CMD?" for a live instance, "Free sglang server 434 (orphaned, 9 processes) and
/// launch CMD?" for an orphaned one; several instances are counted ("Stop 1 live server
/// and free 1 orphaned one (7 processes), then launch CMD?"). Escaped.
std::string replace_question(const reclaim::Plan& plan, std::string_view command);

/// The plan as `run --replace` asks about it: each instance once (its heading, the
/// evidence of its orphaning, what else the plan stops), then the processes that are
/// no instance's. Ends with a newline.
std::string replace_plan_text(const reclaim::Plan& plan, const inventory::Inventory& inv);

/// What `run --replace`/`--replace-orphans`/`--free-first` did before CMD, for `run
/// --json`'s document (its "replace" object): the lines it would have said, what it freed
/// (the plan carried out and its report), the GPUs verified, what it left alone.
struct ReplaceRecord {
  std::string flag;                 // "--replace-orphans", "--replace 7969", "--free-first"
  std::vector<std::string> said;    // the text lines, in order (not printed with --json)
  std::optional<reclaim::Plan> plan;             // carried out (absent: nothing signalled)
  std::optional<reclaim::ReclaimReport> report;  // its verdict, per GPU
  std::vector<LeftAlone> left_alone;
  std::vector<unsigned> ports;  // the old instance's ports, checked closed
};
/// The "replace" object of run's document (docs/json-schema.md): "freed" is free's own
/// document of the free (null when nothing was signalled).
nlohmann::ordered_json replace_json(const ReplaceRecord& r);

/// Why a plan may not go ahead without a person's confirmation, or "" when it may: every
/// GPU holder it signals is orphaned with owned or witnessed evidence, no live launcher
/// is in it, and nothing on the selected GPUs that it was asked to free is left alone for
/// lack of evidence (--free-first: any holder; --replace KEY: its members). For
/// --replace-orphans what it leaves alone is never a reason: it is said (left_alone_line).
std::string needs_confirmation(const reclaim::Plan& plan, const inventory::Inventory& inv,
                               supervise::ReplaceMode mode);

/// The free that shows the plan a confirmed replacement carries out, as a whole command
/// to paste (run's refusal names it): `gpureap free --instance KEY --dry-run` (--replace
/// KEY), `gpureap free --orphans --gpu 0,1 --dry-run` (--replace-orphans), `gpureap free
/// --gpu 0,1 --dry-run` (--free-first). Escaped.
std::string plan_command(supervise::ReplaceMode mode, std::string_view instance,
                         const std::vector<gpu::DeviceId>& gpus);

}  // namespace gpureap::report
