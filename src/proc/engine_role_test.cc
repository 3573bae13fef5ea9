// Engine roles and ranks from command lines: recorded real titles (SGLang, vLLM with
// its default and a custom prefix, Ray), launchers, daemons, the comm fallback, and
// malformed or hostile input.

#include "proc/engine_role.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "util/enum_names.h"

namespace gpureap::proc {
// Named after this file: the tests batch together in unity builds.
namespace engine_role_test {

using namespace std::string_literals;

/// argv from a command written with single spaces between arguments.
std::vector<std::string> words(std::string_view command) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= command.size()) {
    const auto space = command.find(' ', start);
    const auto end = space == std::string_view::npos ? command.size() : space;
    out.emplace_back(command.substr(start, end - start));
    if (space == std::string_view::npos) break;
    start = space + 1;
  }
  return out;
}

EngineIdentity of(std::string_view command) {
  return recognise_engine(words(command));
}
EngineIdentity title(std::string_view t) {
  return recognise_engine({std::string(t)});
}
EngineIdentity comm_only(std::string_view comm) {
  return recognise_engine({}, comm);
}

// --- SGLang -----------------------------------------------------------------

TEST(EngineTitle, SglangSchedulerRanks) {
  auto id = title("sglang::scheduler_TP3");
  EXPECT_EQ(id.engine, Engine::sglang);
  EXPECT_EQ(id.role, EngineRole::scheduler);
  EXPECT_EQ(id.ranks, (Ranks{.tp = 3}));
  EXPECT_EQ(id.title, "sglang::scheduler_TP3");
  EXPECT_EQ(id.detail, "");
  EXPECT_FALSE(id.truncated);
  EXPECT_FALSE(id.model.has_value());
  EXPECT_FALSE(id.port.has_value());

  EXPECT_EQ(title("sglang::scheduler_DP1_TP3").ranks, (Ranks{.dp = 1, .tp = 3}));
  EXPECT_EQ(title("sglang::scheduler_DP0_PP1_TP2_EP2").ranks,
            (Ranks{.dp = 0, .pp = 1, .tp = 2, .ep = 2}));
  EXPECT_EQ(title("sglang::scheduler_ATTN_CP1_MOE_DP2_TP3").ranks,
            (Ranks{.tp = 3, .attn_cp = 1, .moe_dp = 2}));
  EXPECT_EQ(title("sglang::scheduler_DP0_TP0_EP0").ranks, (Ranks{.dp = 0, .tp = 0, .ep = 0}));
  // TP 1: no suffix at all.
  id = title("sglang::scheduler");
  EXPECT_EQ(id.role, EngineRole::scheduler);
  EXPECT_TRUE(id.ranks.empty());
}

TEST(EngineTitle, SglangDetokenizerAndDpController) {
  auto id = title("sglang::detokenizer");
  EXPECT_EQ(id.engine, Engine::sglang);
  EXPECT_EQ(id.role, EngineRole::detokenizer);
  EXPECT_EQ(id.title, "sglang::detokenizer");
  id = title("sglang::data_parallel_controller");
  EXPECT_EQ(id.engine, Engine::sglang);
  EXPECT_EQ(id.role, EngineRole::dp_controller);
}

TEST(EngineTitle, UnknownSglangTitleKeepsTheEngine) {
  // A title in SGLang's namespace that the table does not know (yet).
  auto id = title("sglang::tokenizer_worker");
  EXPECT_EQ(id.engine, Engine::sglang);
  EXPECT_EQ(id.role, EngineRole::none);
  EXPECT_EQ(id.detail, "tokenizer_worker");
  // A known name must end at '_': not a scheduler.
  id = title("sglang::schedulerX_TP1");
  EXPECT_EQ(id.role, EngineRole::none);
  EXPECT_TRUE(id.ranks.empty());
}

TEST(EngineTitle, SetproctitlePaddingAndEmptyArguments) {
  // setproctitle leaves the title in argv[0], padded, and the rest empty.
  const EngineIdentity want = title("sglang::scheduler_DP1_TP3");
  EXPECT_EQ(title("sglang::scheduler_DP1_TP3                                "), want);
  EXPECT_EQ(recognise_engine({"sglang::scheduler_DP1_TP3", "", "", "", ""}), want);
  EXPECT_EQ(recognise_engine({"sglang::scheduler_DP1_TP3   ", "  ", ""}), want);
  EXPECT_EQ(recognise_engine({"sglang::scheduler_DP1_TP3\t\n"}), want);
  EXPECT_EQ(want.title, "sglang::scheduler_DP1_TP3");
  // The same read as a whole /proc/PID/cmdline, raw and for display.
  EXPECT_EQ(recognise_engine_cmdline("sglang::scheduler_DP1_TP3\0\0\0\0"s), want);
  EXPECT_EQ(recognise_engine_cmdline("sglang::scheduler_DP1_TP3      \0"s), want);
  EXPECT_EQ(recognise_engine_cmdline("sglang::scheduler_DP1_TP3    "), want);
  // Arguments after a title change nothing, and give a worker no model or port.
  auto id = recognise_engine({"sglang::scheduler_TP0", "--port", "30000", "--model", "m"});
  EXPECT_EQ(id.role, EngineRole::scheduler);
  EXPECT_FALSE(id.port.has_value());
  EXPECT_FALSE(id.model.has_value());
}

// --- vLLM -------------------------------------------------------------------

TEST(EngineTitle, VllmDefaultPrefix) {
  auto id = title("VLLM::EngineCore");
  EXPECT_EQ(id.engine, Engine::vllm);
  EXPECT_EQ(id.role, EngineRole::engine_core);
  EXPECT_EQ(id.detail, "VLLM");
  EXPECT_TRUE(id.ranks.empty());
  id = title("VLLM::EngineCore_DP1");
  EXPECT_EQ(id.role, EngineRole::engine_core);
  EXPECT_EQ(id.ranks, (Ranks{.dp = 1}));
  EXPECT_EQ(id.title, "VLLM::EngineCore_DP1");

  id = title("VLLM::Worker_TP0");
  EXPECT_EQ(id.role, EngineRole::worker);
  EXPECT_EQ(id.ranks, (Ranks{.tp = 0}));
  EXPECT_EQ(title("VLLM::Worker_TP0_EP0").ranks, (Ranks{.tp = 0, .ep = 0}));
  EXPECT_EQ(title("VLLM::Worker_DP1_PP0_TP3_EP3").ranks,
            (Ranks{.dp = 1, .pp = 0, .tp = 3, .ep = 3}));
  EXPECT_EQ(title("VLLM::Worker_DP1_PP2_PCP1_TP3_DCP1_EP7").ranks,
            (Ranks{.dp = 1, .pp = 2, .tp = 3, .ep = 7, .pcp = 1, .dcp = 1}));
  EXPECT_EQ(title("VLLM::Worker").role, EngineRole::worker);  // before the groups exist

  id = title("VLLM::APIServer_0");
  EXPECT_EQ(id.engine, Engine::vllm);
  EXPECT_EQ(id.role, EngineRole::api_server);
  EXPECT_EQ(id.index, 0u);
  EXPECT_EQ(title("VLLM::APIServer_12").index, 12u);
  EXPECT_TRUE(title("VLLM::APIServer_0").ranks.empty());

  id = title("VLLM::DPCoordinator");
  EXPECT_EQ(id.engine, Engine::vllm);
  EXPECT_EQ(id.role, EngineRole::dp_controller);
}

TEST(EngineTitle, VllmCustomPrefix) {
  auto id = title("MYAPP::Worker_TP1");
  EXPECT_EQ(id.engine, Engine::vllm);
  EXPECT_EQ(id.role, EngineRole::worker);
  EXPECT_EQ(id.ranks, (Ranks{.tp = 1}));
  EXPECT_EQ(id.detail, "MYAPP");
  EXPECT_EQ(id.title, "MYAPP::Worker_TP1");
  // As published run scripts set it (VLLM_PROCESS_NAME_PREFIX=PD-L1_binder).
  id = title("PD-L1_binder::EngineCore_DP2");
  EXPECT_EQ(id.role, EngineRole::engine_core);
  EXPECT_EQ(id.ranks, (Ranks{.dp = 2}));
  EXPECT_EQ(id.detail, "PD-L1_binder");
  // An empty prefix, and one holding "::" itself: the name follows the last "::".
  id = title("::Worker_TP1");
  EXPECT_EQ(id.role, EngineRole::worker);
  EXPECT_EQ(id.detail, "");
  id = title("team::serving::APIServer_3");
  EXPECT_EQ(id.role, EngineRole::api_server);
  EXPECT_EQ(id.index, 3u);
  EXPECT_EQ(id.detail, "team::serving");
  // Any other name after a prefix is not vLLM's.
  id = title("MYAPP::Something_TP1");
  EXPECT_EQ(id.engine, Engine::none);
  EXPECT_EQ(id.role, EngineRole::none);
  EXPECT_EQ(title("MYAPP::Workers").role, EngineRole::none);
}

// --- Ray --------------------------------------------------------------------

TEST(EngineTitle, Ray) {
  auto id = title("ray::RayWorkerWrapper.execute_method");
  EXPECT_EQ(id.engine, Engine::ray);
  EXPECT_EQ(id.role, EngineRole::ray_worker);
  EXPECT_EQ(id.detail, "RayWorkerWrapper.execute_method");
  EXPECT_EQ(id.title, "ray::RayWorkerWrapper.execute_method");
  id = title("ray::IDLE");
  EXPECT_EQ(id.engine, Engine::ray);
  EXPECT_EQ(id.role, EngineRole::ray_idle);
  EXPECT_EQ(id.detail, "IDLE");
  EXPECT_EQ(title("ray::IDLE_SPILL_WORKER").role, EngineRole::ray_idle);
  EXPECT_EQ(title("ray::ImplicitFunc.train").detail, "ImplicitFunc.train");
  EXPECT_EQ(title("ray::ImplicitFunc.train()").detail, "ImplicitFunc.train");  // older Ray
  // An actor named like a vLLM role is still Ray's: the namespace decides.
  EXPECT_EQ(title("ray::Worker").role, EngineRole::ray_worker);
  EXPECT_EQ(title("ray::IDLEWorker.run").role, EngineRole::ray_worker);
}

TEST(EngineCommand, RayDaemons) {
  auto id =
      of("/opt/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet "
         "--raylet_socket_name=/tmp/ray/session_x/sockets/raylet --node_manager_port=0");
  EXPECT_EQ(id.engine, Engine::ray);
  EXPECT_EQ(id.role, EngineRole::ray_raylet);
  EXPECT_EQ(of("raylet").role, EngineRole::ray_raylet);
  id =
      of("/opt/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server "
         "--gcs_server_port=6379");
  EXPECT_EQ(id.engine, Engine::ray);
  EXPECT_EQ(id.role, EngineRole::ray_gcs);
  EXPECT_EQ(of("/usr/bin/raylet-helper").role, EngineRole::none);
}

// --- Launchers --------------------------------------------------------------

TEST(EngineLauncher, SglangLaunchServer) {
  auto id =
      of("python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --port "
         "30000");
  EXPECT_EQ(id.engine, Engine::sglang);
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.model, "moonshotai/Kimi-K2.5");
  EXPECT_EQ(id.port, 30000u);
  EXPECT_EQ(id.detail, "sglang.launch_server");
  EXPECT_EQ(id.title, "");
  EXPECT_TRUE(id.ranks.empty());

  id = of("python3 -m sglang.launch_server --model-path=/models/Llama-3-8B --port=30001");
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.model, "/models/Llama-3-8B");
  EXPECT_EQ(id.port, 30001u);

  id = of("/usr/bin/python3.11 -u -m sglang.launch_server --model Qwen/Qwen3-8B");
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.model, "Qwen/Qwen3-8B");
  EXPECT_FALSE(id.port.has_value());

  id = of("sglang serve --model-path deepseek-ai/DeepSeek-V3 --port 30000 --tp 8");
  EXPECT_EQ(id.engine, Engine::sglang);
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.detail, "sglang serve");
  EXPECT_EQ(id.model, "deepseek-ai/DeepSeek-V3");
  EXPECT_EQ(id.port, 30000u);
  // As the kernel runs the entry-point script: interpreter, script, arguments
  // (sglang#31281: process.cmdline()=['...sglang', 'serve', ...]).
  id = of("/home/u/.venv/bin/python3 /home/u/.venv/bin/sglang serve --model=m --port=8080");
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.model, "m");
  EXPECT_EQ(id.port, 8080u);
  id = of("/home/u/.venv/bin/sglang serve --model-path m");
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.model, "m");
  // `sglang` without `serve` is not the server.
  EXPECT_EQ(of("sglang version").role, EngineRole::none);
}

TEST(EngineLauncher, Vllm) {
  auto id = of("vllm serve Qwen/Qwen3-8B --port 8000 --tensor-parallel-size 4");
  EXPECT_EQ(id.engine, Engine::vllm);
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.detail, "vllm serve");
  EXPECT_EQ(id.model, "Qwen/Qwen3-8B");
  EXPECT_EQ(id.port, 8000u);

  id = of("/venv/bin/python3 /venv/bin/vllm serve /home/mw/input/model --port=8200");
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.model, "/home/mw/input/model");
  EXPECT_EQ(id.port, 8200u);

  id = of("vllm serve --model meta-llama/Llama-3.1-8B --port 8001");
  EXPECT_EQ(id.model, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(id.port, 8001u);
  // The positional model wins over --model.
  EXPECT_EQ(of("vllm serve a --model b").model, "a");

  id =
      of("python3 -m vllm.entrypoints.openai.api_server --model /home/h/llama/Meta-Llama-3.1-70B "
         "--tensor-parallel-size 2 --port 5999");
  EXPECT_EQ(id.engine, Engine::vllm);
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.detail, "vllm.entrypoints.openai.api_server");
  EXPECT_EQ(id.model, "/home/h/llama/Meta-Llama-3.1-70B");
  EXPECT_EQ(id.port, 5999u);
  id = of("python -m vllm.entrypoints.openai.api_server --model=facebook/opt-125m --port=8000");
  EXPECT_EQ(id.model, "facebook/opt-125m");
  EXPECT_EQ(id.port, 8000u);

  id = of("python -m vllm.entrypoints.cli.main serve facebook/opt-125m");
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.model, "facebook/opt-125m");
  EXPECT_EQ(id.detail, "vllm.entrypoints.cli.main serve");

  // Other vllm subcommands are not the server.
  EXPECT_EQ(of("vllm bench serve --model m").role, EngineRole::none);
  id = of("/venv/bin/python3 /venv/bin/vllm bench latency");
  EXPECT_EQ(id.engine, Engine::python);
  EXPECT_EQ(id.role, EngineRole::none);
  EXPECT_EQ(id.detail, "vllm");
}

TEST(EngineLauncher, MissingOrBadValuesAreLeftUnset) {
  auto id = of("vllm serve m --port 70000");
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_FALSE(id.port.has_value());
  EXPECT_FALSE(of("vllm serve m --port abc").port.has_value());
  EXPECT_FALSE(of("vllm serve m --port -1").port.has_value());
  EXPECT_FALSE(of("vllm serve m --port=").port.has_value());
  EXPECT_FALSE(of("vllm serve m --port").port.has_value());
  EXPECT_FALSE(of("vllm serve m --port 99999999999999999999").port.has_value());
  EXPECT_EQ(of("vllm serve m --port 0").port, 0u);
  EXPECT_EQ(of("vllm serve m --port 65535").port, 65535u);
  // No model given, or an empty one.
  EXPECT_FALSE(of("vllm serve").model.has_value());
  EXPECT_FALSE(of("python -m sglang.launch_server --model-path").model.has_value());
  EXPECT_FALSE(of("python -m sglang.launch_server --model-path=").model.has_value());
  // --model-path's value is not read as an option; a look-alike flag is not --port.
  id = of("python -m sglang.launch_server --model-path --port --portal 1");
  EXPECT_EQ(id.model, "--port");
  EXPECT_FALSE(id.port.has_value());
  // argparse: the last one given wins; nothing after "--" is read.
  id = of("python -m sglang.launch_server --model a --model-path b --port 1 --port 2 -- --port 3");
  EXPECT_EQ(id.model, "b");
  EXPECT_EQ(id.port, 2u);
}

// --- torchrun, MPI, Python --------------------------------------------------

TEST(EngineCommand, Torchrun) {
  for (const char* command :
       {"torchrun --nproc-per-node 8 train.py --lr 1e-4",
        "/opt/venv/bin/torchrun --standalone x.py",
        "/opt/venv/bin/python3 /opt/venv/bin/torchrun --nnodes 2 train.py",
        "python -m torch.distributed.run --nproc_per_node=4 train.py",
        "python3 -u -m torch.distributed.run train.py",
        "/usr/bin/python3.10 -m torch.distributed.launch --use-env train.py"}) {
    SCOPED_TRACE(command);
    const auto id = of(command);
    EXPECT_EQ(id.engine, Engine::torchrun);
    EXPECT_EQ(id.role, EngineRole::elastic_agent);
    EXPECT_FALSE(id.model.has_value());
  }
  EXPECT_EQ(of("torchrun x.py").detail, "torchrun");
  EXPECT_EQ(of("python -m torch.distributed.run x.py").detail, "torch.distributed.run");
  // A worker torchrun started is a plain Python program.
  EXPECT_EQ(of("/usr/bin/python3 -u train.py --local-rank=0").engine, Engine::python);
}

TEST(EngineCommand, MpiDaemons) {
  for (const char* command :
       {"orted --hnp-topo-sig 2N:2S:2L3:64L2:64L1:64C:128H:x86_64 -mca ess env",
        "/usr/local/openmpi/bin/orted -mca orte_ess_jobid 1", "/usr/bin/prted --prtemca ess env",
        "hydra_pmi_proxy --control-port x:1"}) {
    SCOPED_TRACE(command);
    const auto id = of(command);
    EXPECT_EQ(id.engine, Engine::mpi);
    EXPECT_EQ(id.role, EngineRole::mpi_daemon);
  }
  auto id = of("mpirun -np 8 python3 -m tensorrt_llm.commands.serve");
  EXPECT_EQ(id.engine, Engine::mpi);
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_FALSE(id.model.has_value());
}

TEST(EngineCommand, PythonInterpretersAndTheirOptions) {
  for (const char* interpreter :
       {"python", "python3", "python3.11", "/usr/bin/python3.11", "/home/u/.venv/bin/python",
        "/opt/conda/envs/x/bin/python3.12", "python3.13t", "python3.8m", "python2"}) {
    SCOPED_TRACE(interpreter);
    const auto id = of(std::string(interpreter) + " -m sglang.launch_server --port 1");
    EXPECT_EQ(id.role, EngineRole::launcher);
    EXPECT_EQ(id.port, 1u);
  }
  for (const char* options :
       {"-u", "-O", "-OO", "-u -O -B", "-W ignore", "-Wignore", "-X importtime", "-X dev -W error",
        "-uB", "-I -s -S -E", "--check-hash-based-pycs never"}) {
    SCOPED_TRACE(options);
    EXPECT_EQ(of("python3 "s + options + " -m sglang.launch_server").role, EngineRole::launcher);
    EXPECT_EQ(of("python3 "s + options + " /venv/bin/vllm serve m").model, "m");
  }
  // -m in a cluster and glued to its value.
  EXPECT_EQ(of("python3 -um sglang.launch_server").role, EngineRole::launcher);
  EXPECT_EQ(of("python3 -msglang.launch_server").role, EngineRole::launcher);
  EXPECT_EQ(of("python3 -- /venv/bin/torchrun x.py").role, EngineRole::elastic_agent);

  // Not interpreters: nothing is unwrapped.
  for (const char* name :
       {"pythonista", "python3.", "python3.x", "mypython3", "python3.11-config"}) {
    SCOPED_TRACE(name);
    const auto id = of(std::string(name) + " -m sglang.launch_server");
    EXPECT_EQ(id.engine, Engine::none);
    EXPECT_EQ(id.role, EngineRole::none);
  }
}

TEST(EngineCommand, GenericPythonIsNamedByWhatItRuns) {
  auto id = of("python3 train.py --epochs 3");
  EXPECT_EQ(id.engine, Engine::python);
  EXPECT_EQ(id.role, EngineRole::none);
  EXPECT_EQ(id.detail, "train.py");
  EXPECT_EQ(of("/usr/bin/python3 -u /srv/app/infer.py").detail, "infer.py");
  EXPECT_EQ(of("python -m mypkg.serve --port 1").detail, "mypkg.serve");
  EXPECT_FALSE(of("python -m mypkg.serve --port 1").port.has_value());  // not a launcher
  EXPECT_EQ(recognise_engine({"python3", "-c", "print(1)"}).detail, "-c");
  id = of("python3");
  EXPECT_EQ(id.engine, Engine::python);
  EXPECT_EQ(id.detail, "");
  EXPECT_EQ(of("python3 -").detail, "");
  // A command from no table at all.
  id = of("/usr/bin/nvidia-smi -q");
  EXPECT_EQ(id, EngineIdentity{});
}

TEST(EngineCommand, MultiprocessingChildren) {
  auto id = recognise_engine(
      {"/usr/bin/python3", "-c",
       "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
       "--multiprocessing-fork"});
  EXPECT_EQ(id.engine, Engine::python);
  EXPECT_EQ(id.role, EngineRole::mp_child);
  EXPECT_EQ(id.detail, "spawn");
  // The display form (NULs as spaces) splits the code into words.
  EXPECT_EQ(recognise_engine_cmdline("/usr/bin/python3 -c from multiprocessing.spawn import "
                                     "spawn_main; spawn_main(tracker_fd=5, pipe_handle=7) "
                                     "--multiprocessing-fork"),
            id);
  id = recognise_engine(
      {"python3", "-c", "from multiprocessing.forkserver import main; main(9, 10, ['__main__'])"});
  EXPECT_EQ(id.role, EngineRole::mp_child);
  EXPECT_EQ(id.detail, "forkserver");
  EXPECT_EQ(recognise_engine({"python3", "-c", "from os import path"}).role, EngineRole::none);
}

TEST(EngineCommand, WholeCmdlineRawAndForDisplay) {
  const auto raw = recognise_engine_cmdline(
      "/venv/bin/python3\0-m\0sglang.launch_server\0--model-path\0/models/my model\0--port\0"
      "30000\0"s);
  EXPECT_EQ(raw.role, EngineRole::launcher);
  EXPECT_EQ(raw.model, "/models/my model");  // NULs keep a space inside an argument
  EXPECT_EQ(raw.port, 30000u);
  const auto shown =
      recognise_engine_cmdline("/venv/bin/python3 -m sglang.launch_server --model-path m --port 1");
  EXPECT_EQ(shown.model, "m");
  EXPECT_EQ(shown.port, 1u);
  // A single argv holding a whole command line (rewritten as one string).
  EXPECT_EQ(recognise_engine({"vllm serve m --port 2"}).port, 2u);
  EXPECT_EQ(recognise_engine_cmdline(""), EngineIdentity{});
  EXPECT_EQ(recognise_engine_cmdline("\0\0"s), EngineIdentity{});
}

// --- comm, when argv is empty -----------------------------------------------

TEST(EngineComm, UsedOnlyWhenArgvIsEmpty) {
  auto id = comm_only("sglang::scheduler_TP3"s.substr(0, 15));  // "sglang::schedul"
  EXPECT_EQ(id.engine, Engine::sglang);
  EXPECT_EQ(id.role, EngineRole::scheduler);
  EXPECT_TRUE(id.ranks.empty());
  EXPECT_TRUE(id.truncated);
  EXPECT_EQ(id.title, "sglang::schedul");
  // argv wins over comm; argv of empty strings counts as empty.
  EXPECT_EQ(recognise_engine({"python3", "train.py"}, "VLLM::EngineCor").engine, Engine::python);
  EXPECT_EQ(recognise_engine({"", " ", ""}, "VLLM::EngineCor").role, EngineRole::engine_core);
  EXPECT_EQ(recognise_engine_cmdline("", "orted").role, EngineRole::mpi_daemon);
}

TEST(EngineComm, TruncatedTitlesMatchByPrefixWithoutTheirLastRank) {
  auto id = comm_only("VLLM::EngineCor");
  EXPECT_EQ(id.engine, Engine::vllm);
  EXPECT_EQ(id.role, EngineRole::engine_core);
  EXPECT_EQ(id.detail, "VLLM");
  EXPECT_TRUE(id.truncated);
  EXPECT_EQ(comm_only("VLLM::EngineCor\n").role, EngineRole::engine_core);  // as read from comm
  EXPECT_EQ(comm_only("sglang::detoken").role, EngineRole::detokenizer);
  EXPECT_EQ(comm_only("sglang::data_pa").role, EngineRole::dp_controller);
  EXPECT_EQ(comm_only("ray::RayWorkerW").role, EngineRole::ray_worker);
  EXPECT_EQ(comm_only("ray::RayWorkerW").detail, "RayWorkerW");
  // The last rank may be cut (TP12 of TP123): dropped; earlier ones are whole.
  id = comm_only("VLLM::Worker_TP");
  EXPECT_EQ(id.role, EngineRole::worker);
  EXPECT_TRUE(id.ranks.empty());
  EXPECT_TRUE(comm_only("VL::Worker_TP12").ranks.empty());
  EXPECT_EQ(comm_only("V::Worker_TP1_E").ranks, (Ranks{.tp = 1}));
  EXPECT_FALSE(comm_only("V::APIServer_12").index.has_value());
  // Shorter than 15 bytes: not cut, read whole.
  id = comm_only("V::Worker_TP12");
  EXPECT_EQ(id.ranks, (Ranks{.tp = 12}));
  EXPECT_FALSE(id.truncated);
  EXPECT_EQ(comm_only("ray::IDLE").role, EngineRole::ray_idle);
  EXPECT_EQ(comm_only("X::Wor").role, EngineRole::none);  // a short comm is whole: no prefix match
  // Too little of the name left to tell (fewer than 3 bytes).
  EXPECT_EQ(comm_only("PD-L1_binder::E").role, EngineRole::none);
  EXPECT_EQ(comm_only("PD-L1_binde::En").role, EngineRole::none);
  EXPECT_EQ(comm_only("PD-L1_bind::Eng").role, EngineRole::engine_core);
}

TEST(EngineComm, ProgramsByComm) {
  EXPECT_EQ(comm_only("python3").engine, Engine::python);
  EXPECT_EQ(comm_only("raylet").role, EngineRole::ray_raylet);
  EXPECT_EQ(comm_only("gcs_server").role, EngineRole::ray_gcs);
  EXPECT_EQ(comm_only("hydra_pmi_proxy").role, EngineRole::mpi_daemon);  // 15 bytes, whole
  EXPECT_EQ(comm_only("torchrun").role, EngineRole::elastic_agent);
  EXPECT_EQ(comm_only("kworker/0:1H"), EngineIdentity{});
  EXPECT_EQ(comm_only(""), EngineIdentity{});
  EXPECT_EQ(recognise_engine({}), EngineIdentity{});
}

// --- Malformed and hostile input ----------------------------------------------

TEST(EngineMalformed, BadRanksAreDroppedNotGuessed) {
  auto id = title("sglang::scheduler_TPx");
  EXPECT_EQ(id.engine, Engine::sglang);
  EXPECT_EQ(id.role, EngineRole::scheduler);
  EXPECT_TRUE(id.ranks.empty());
  id = title("sglang::scheduler_TP99999999999999");
  EXPECT_EQ(id.role, EngineRole::scheduler);
  EXPECT_FALSE(id.ranks.tp.has_value());
  EXPECT_EQ(title("sglang::scheduler_TP4294967295").ranks.tp, 4294967295u);
  EXPECT_FALSE(title("sglang::scheduler_TP4294967296").ranks.tp.has_value());
  EXPECT_TRUE(title("sglang::scheduler_TP-1").ranks.empty());
  EXPECT_TRUE(title("sglang::scheduler_TP+1").ranks.empty());
  EXPECT_TRUE(title("sglang::scheduler_TP").ranks.empty());
  EXPECT_TRUE(title("sglang::scheduler_").ranks.empty());
  // A bad token does not spoil the others.
  EXPECT_EQ(title("sglang::scheduler_TP3abc_EP2").ranks, (Ranks{.ep = 2}));
  EXPECT_EQ(title("sglang::scheduler_FOO_DP1__TP3").ranks, (Ranks{.dp = 1, .tp = 3}));
  EXPECT_EQ(title("sglang::scheduler_TP3_TP4").ranks, (Ranks{.tp = 3}));  // first wins
  EXPECT_EQ(title("sglang::scheduler_TP007").ranks, (Ranks{.tp = 7}));
  // Not a prefix of another key: PCP is not CP, MOE_DP is not DP.
  EXPECT_EQ(title("VLLM::Worker_PCP1_CP2_MOE_DP3").ranks, (Ranks{.cp = 2, .moe_dp = 3, .pcp = 1}));

  id = title("VLLM::APIServer_x");
  EXPECT_EQ(id.role, EngineRole::api_server);
  EXPECT_FALSE(id.index.has_value());
  EXPECT_FALSE(title("VLLM::APIServer").index.has_value());
  EXPECT_FALSE(title("VLLM::APIServer_99999999999").index.has_value());
}

TEST(EngineMalformed, EmptyAndDegenerateInput) {
  EXPECT_EQ(recognise_engine({}), EngineIdentity{});
  EXPECT_EQ(recognise_engine({""}), EngineIdentity{});
  EXPECT_EQ(recognise_engine({"", "", ""}), EngineIdentity{});
  EXPECT_EQ(recognise_engine({"   "}), EngineIdentity{});
  EXPECT_EQ(title("::"), EngineIdentity{});
  EXPECT_EQ(title("sglang::"), EngineIdentity{});
  EXPECT_EQ(title("ray::"), EngineIdentity{});
  EXPECT_EQ(title(":::"), EngineIdentity{});
  EXPECT_EQ(title("/"), EngineIdentity{});
  EXPECT_EQ(recognise_engine({"", "-m", "sglang.launch_server"}), EngineIdentity{});
  EXPECT_EQ(of("python3 -m").engine, Engine::python);
  EXPECT_EQ(of("python3 -c").engine, Engine::python);
  EXPECT_EQ(of("python3 -W").engine, Engine::python);
  EXPECT_EQ(of("python3 --check-hash-based-pycs").engine, Engine::python);
}

TEST(EngineMalformed, HugeAndNonUtf8InputIsLinearAndCapped) {
  // Sizes that a quadratic pass would not finish (the test's own limit is 120 s).
  // 256 KiB of rank tokens: parsed in one pass, the stored title capped.
  std::string huge = "sglang::scheduler";
  while (huge.size() < (1u << 18)) huge += "_TP1";
  auto id = title(huge);
  EXPECT_EQ(id.role, EngineRole::scheduler);
  EXPECT_EQ(id.ranks, (Ranks{.tp = 1}));
  EXPECT_LE(id.title.size(), 256u);
  EXPECT_TRUE(huge.starts_with(id.title));
  // One 1 MiB number; 1 MiB of underscores; a huge vLLM prefix; a huge Ray detail.
  EXPECT_FALSE(title("sglang::scheduler_TP" + std::string(1u << 20, '9')).ranks.tp.has_value());
  EXPECT_TRUE(title("sglang::scheduler" + std::string(1u << 20, '_')).ranks.empty());
  id = title(std::string(1u << 20, 'P') + "::Worker_TP2");
  EXPECT_EQ(id.ranks, (Ranks{.tp = 2}));
  EXPECT_LE(id.detail.size(), 256u);
  EXPECT_LE(title("ray::" + std::string(1u << 20, 'a')).detail.size(), 256u);
  // Many "::" (rfind and find, once each), many arguments, a huge model.
  EXPECT_EQ(title(std::string(1u << 20, ':')).role, EngineRole::none);
  std::vector<std::string> many{"vllm", "serve", std::string(1u << 20, 'm')};
  for (int i = 0; i < 25000; ++i) many.insert(many.end(), {"--port", "1", "--model", "x"});
  id = recognise_engine(many);
  EXPECT_EQ(id.role, EngineRole::launcher);
  EXPECT_EQ(id.port, 1u);
  EXPECT_LE(id.model->size(), 1024u);
  std::vector<std::string> flags{"python3"};
  flags.insert(flags.end(), 200000, "-u");
  flags.insert(flags.end(), {"-m", "torch.distributed.run"});
  EXPECT_EQ(recognise_engine(flags).role, EngineRole::elastic_agent);
  EXPECT_EQ(recognise_engine({"python3", "-" + std::string(1u << 20, 'u')}).engine, Engine::python);
  // Bytes that are not UTF-8 are only bytes.
  id = title("\xff\xfe\x80::Worker_TP1");
  EXPECT_EQ(id.role, EngineRole::worker);
  EXPECT_EQ(id.detail, "\xff\xfe\x80");
  id = title("ray::Caf\xe9\xff.run");
  EXPECT_EQ(id.detail, "Caf\xe9\xff.run");
  EXPECT_EQ(recognise_engine({"\xc0\xc1\xf5", "\xff"}), EngineIdentity{});
  EXPECT_EQ(title("sglang::scheduler_TP\xff").ranks, Ranks{});
  EXPECT_EQ(recognise_engine_cmdline(std::string("\0\xff\0", 3)), EngineIdentity{});
}

// --- Labels and names -----------------------------------------------------------

TEST(EngineRankLabel, ShortAndStable) {
  EXPECT_EQ(rank_label({}), "");
  EXPECT_EQ(rank_label({.tp = 3}), "TP3");
  EXPECT_EQ(rank_label({.dp = 1, .tp = 3}), "DP1 TP3");
  EXPECT_EQ(rank_label({.dp = 0, .pp = 0, .tp = 0, .ep = 0}), "DP0 PP0 TP0 EP0");
  EXPECT_EQ(rank_label({.dp = 1,
                        .pp = 2,
                        .tp = 7,
                        .ep = 9,
                        .cp = 5,
                        .attn_cp = 3,
                        .moe_dp = 4,
                        .pcp = 6,
                        .dcp = 8}),
            "DP1 PP2 ATTN_CP3 MOE_DP4 CP5 PCP6 TP7 DCP8 EP9");
  // From recorded titles, in the engines' own order.
  EXPECT_EQ(rank_label(title("sglang::scheduler_DP0_PP1_TP2_EP2").ranks), "DP0 PP1 TP2 EP2");
  EXPECT_EQ(rank_label(title("sglang::scheduler_ATTN_CP1_MOE_DP2_TP3").ranks),
            "ATTN_CP1 MOE_DP2 TP3");
  EXPECT_EQ(rank_label(title("VLLM::Worker_DP1_PP0_TP3_EP3").ranks), "DP1 PP0 TP3 EP3");
  EXPECT_EQ(rank_label(title("VLLM::Worker_PCP1_TP2_DCP1").ranks), "PCP1 TP2 DCP1");
  EXPECT_EQ(rank_label({.tp = 4294967295u}), "TP4294967295");
}

TEST(EngineNames, EveryValueHasAUniqueName) {
  const auto engines = enum_values<Engine>();
  EXPECT_EQ(engines.size(), static_cast<std::size_t>(Engine::python) + 1);
  std::set<std::string_view> seen;
  for (Engine e : engines) {
    EXPECT_FALSE(enum_name(e).empty());
    EXPECT_TRUE(seen.insert(enum_name(e)).second) << enum_name(e);
    EXPECT_EQ(enum_from_name<Engine>(enum_name(e)), e);
  }
  EXPECT_EQ(enum_name(Engine::sglang), "sglang");
  EXPECT_EQ(enum_name(Engine::vllm), "vllm");

  const auto roles = enum_values<EngineRole>();
  EXPECT_EQ(roles.size(), static_cast<std::size_t>(EngineRole::mp_child) + 1);
  seen.clear();
  for (EngineRole r : roles) {
    EXPECT_FALSE(enum_name(r).empty());
    EXPECT_TRUE(seen.insert(enum_name(r)).second) << enum_name(r);
    EXPECT_EQ(enum_from_name<EngineRole>(enum_name(r)), r);
  }
  EXPECT_EQ(enum_name(EngineRole::scheduler), "scheduler");
  EXPECT_EQ(enum_name(EngineRole::worker), "worker");
  // Past the last value: no name (enum_values stops there).
  EXPECT_EQ(enum_name(static_cast<Engine>(engines.size())), "");
  EXPECT_EQ(enum_name(static_cast<EngineRole>(roles.size())), "");
}

}  // namespace engine_role_test
}  // namespace gpureap::proc
