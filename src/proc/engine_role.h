#pragma once
// What an inference-engine process is, from its command line alone (issue 24,
// part 1): which engine (SGLang, vLLM, Ray, torchrun, MPI), which role in it
// (scheduler, worker, launcher, ...), its ranks, and for a launcher the model and
// port. Pure: the caller reads /proc/PID/cmdline and comm; nothing here does I/O.
//
// Two tables in engine_role.cc say what is recognised (add a row to extend):
//  - process titles, set by the engines with setproctitle and visible as argv[0]:
//    `<namespace>::<name>[_<suffix>]`, e.g. `sglang::scheduler_DP1_TP3`,
//    `VLLM::Worker_TP0_EP0` (vLLM's prefix is VLLM_PROCESS_NAME_PREFIX, any
//    text, so its rows match what follows the last `::`), `ray::Class.method`;
//  - commands: a program (argv[0]'s basename, or the script a Python interpreter
//    runs: `/venv/bin/python3 /venv/bin/vllm serve ...`) or a Python module
//    (`python3.11 -u -m sglang.launch_server ...`), with an optional subcommand.
// Anything else is generic: Engine::python for a Python interpreter (detail: its
// module or script), Engine::none otherwise. Never throws; linear in the input.
//
// comm (/proc/PID/comm) is used only when argv is empty (a zombie, a kernel
// thread, an unreadable cmdline). comm is cut at 15 bytes: a comm of exactly 15
// bytes is taken as possibly truncated (EngineIdentity::truncated): its title's
// name may be a prefix of a known one when at least 3 bytes of the name survive
// (`VLLM::EngineCor` is an engine core, `sglang::schedul` a scheduler), and the
// last rank of its suffix, which may be cut (`TP12` of `TP123`), is dropped.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpureap::proc {

enum class Engine { none, sglang, vllm, ray, torchrun, mpi, python };

enum class EngineRole {
  none,           // not recognised, or a title of a known engine not (yet) in the table
  launcher,       // sglang.launch_server / `sglang serve`, `vllm serve`, mpirun: has model, port
  scheduler,      // SGLang's per-rank scheduler (holds the GPU)
  detokenizer,    // sglang::detokenizer
  dp_controller,  // sglang::data_parallel_controller, vLLM's DPCoordinator
  engine_core,    // <prefix>::EngineCore[_DP<n>]
  worker,         // <prefix>::Worker[_DP..][_PP..][_PCP..][_TP..][_DCP..][_EP..]
  api_server,     // <prefix>::APIServer_<i>
  ray_worker,     // ray::<Class>.<method>, ray::<function>
  ray_idle,       // ray::IDLE (and IDLE_SPILL_WORKER, ...)
  ray_raylet,     // raylet
  ray_gcs,        // gcs_server
  elastic_agent,  // torchrun / torch.distributed.run / .launch: restarts killed workers
  mpi_daemon,     // orted, prted, hydra_pmi_proxy: MPI jobs' per-node daemons
  mp_child,       // a Python multiprocessing spawn child or forkserver (detail says which)
};

/// The ranks a title names; unset when absent (or unparsable: a malformed or
/// out-of-range number is dropped, never guessed).
struct Ranks {
  // Initialised so that designated initialisers (Ranks{.tp = 3}) may name a few.
  std::optional<unsigned> dp{}, pp{}, tp{}, ep{}, cp{}, attn_cp{}, moe_dp{}, pcp{}, dcp{};
  bool empty() const { return !(dp || pp || tp || ep || cp || attn_cp || moe_dp || pcp || dcp); }
  bool operator==(const Ranks&) const = default;
};

struct EngineIdentity {
  Engine engine = Engine::none;
  EngineRole role = EngineRole::none;
  Ranks ranks;
  std::optional<unsigned> index;  // vLLM's APIServer_<i>
  /// The process title matched, e.g. "sglang::scheduler_TP3" or "VLLM::Worker_TP0"
  /// (trailing padding removed); empty when recognised by command instead.
  std::string title;
  /// Ray: "Class.method"; vLLM: its prefix ("VLLM"); launcher: how it was started
  /// ("sglang.launch_server", "vllm serve"); mp_child: "spawn" or "forkserver";
  /// generic Python: its module or script name.
  std::string detail;
  std::optional<std::string> model;  // launcher only: --model-path / --model / `vllm serve <model>`
  std::optional<unsigned> port;      // launcher only: --port (0..65535)
  bool truncated = false;            // recognised from a 15-byte (possibly cut) comm
  bool operator==(const EngineIdentity&) const = default;
};

/// The identity of a process from its argv as read from /proc/PID/cmdline (split at
/// NULs; trailing empty arguments, as setproctitle leaves them, are ignored), with
/// `comm` as the fallback when argv is empty. A single argument holding spaces (a
/// title padded with spaces, or a command line rewritten as one string) is split
/// at whitespace. Title and detail are capped at 256 bytes, model at 1024.
EngineIdentity recognise_engine(const std::vector<std::string>& argv, std::string_view comm = {});

/// The same from a whole cmdline: raw (NUL-separated, as /proc/PID/cmdline reads)
/// or for display (NULs as spaces, Holder::cmdline), which is split at whitespace.
EngineIdentity recognise_engine_cmdline(std::string_view cmdline, std::string_view comm = {});

std::string_view enum_name(Engine engine);    // "none", "sglang", "vllm", ...
std::string_view enum_name(EngineRole role);  // "none", "launcher", "scheduler", ...

/// A short stable label of the ranks for tables: "TP3", "DP1 TP3", "" when none.
/// Order: DP PP ATTN_CP MOE_DP CP PCP TP DCP EP (the engines' own order, merged).
std::string rank_label(const Ranks& ranks);

}  // namespace gpureap::proc
