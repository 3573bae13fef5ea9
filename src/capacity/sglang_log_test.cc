#include "capacity/sglang_log.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "capacity/model_preset.h"
#include "util/test_temp_dir.h"

namespace gpureap::capacity {
namespace {

std::string log_fixture(const std::string& name) {
  std::ifstream in(std::string(GPUREAP_FIXTURES) + "/capacity/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

double gib(std::uint64_t bytes) {
  return static_cast<double>(bytes) / kGiB;
}

const ModelSpec& kimi() {
  static const ModelSpec spec = spec_of(**find_preset("Kimi-K2.5"));
  return spec;
}

// The planner fed from a calibration, as `gpureap plan --from-log` does.
PlanInput calibrated_input(const Calibration& c, KvDtype dtype) {
  PlanInput in;
  in.model_name = "Kimi-K2.5";
  in.kv = kimi().kv;
  in.context_len = c.context_len.value_or(kimi().context_len);
  in.tp = c.tp.value_or(1);
  in.dtype = dtype;
  in.gpu.free_before_load = c.free_before_load;
  in.gpu.weights_per_rank = c.weights_per_rank;
  in.gpu.runtime_reserve = c.runtime_reserve.value_or(kDefaultRuntimeReserve);
  in.gpu.source = "log";
  return in;
}

TEST(SglangLog, ReadsTheLastStartUpOfEveryRank) {
  auto log = parse_sglang_log(log_fixture("sglang_kimi_k25_tp8.log"), "sglang.log");
  ASSERT_TRUE(log) << log.error().message;
  EXPECT_EQ(log->mem_fraction, 0.88);  // the relaunch, not the 0.93 crash
  EXPECT_EQ(log->tp_size, 8);
  EXPECT_EQ(log->kv_cache_dtype, "auto");
  EXPECT_EQ(log->model_path, "moonshotai/Kimi-K2.5");
  ASSERT_EQ(log->ranks.size(), 8u);
  const SglangRankStartup& tp3 = log->ranks[3];
  EXPECT_EQ(tp3.rank, 3);
  EXPECT_NEAR(gib(*tp3.free_before_load), 93.00, 1e-6);
  EXPECT_NEAR(gib(*tp3.free_after_load), 21.55, 1e-6);
  EXPECT_NEAR(gib(*tp3.weight_load_usage), 71.45, 1e-6);
  EXPECT_EQ(tp3.kv_tokens, 159'026u);
  EXPECT_NEAR(gib(*tp3.kv_bytes), 10.41, 1e-6);
  EXPECT_NEAR(gib(*tp3.free_after_graphs), 5.45, 1e-6);
  const SglangRankStartup& tp0 = log->ranks[0];
  EXPECT_NEAR(gib(*tp0.free_when_ready), 5.47, 1e-6);
  EXPECT_EQ(tp0.max_running_requests, 2048u);
  EXPECT_EQ(tp0.context_len, 262'144);
}

TEST(SglangLog, CalibratesTheMachineAndPredictsTheOtherLaunches) {
  auto log = parse_sglang_log(log_fixture("sglang_kimi_k25_tp8.log"), "sglang.log");
  ASSERT_TRUE(log);
  auto c = calibrate(*log, kimi().kv, kimi().context_len, "sglang.log");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_NEAR(gib(c->free_before_load), 93.00, 1e-6);  // the tightest rank
  EXPECT_NEAR(gib(c->weights_per_rank), 71.45, 1e-6);
  ASSERT_TRUE(c->runtime_reserve.has_value());
  EXPECT_NEAR(gib(*c->runtime_reserve), 3.69, 0.01);
  EXPECT_DOUBLE_EQ(c->mem_fraction, 0.88);
  EXPECT_EQ(c->kv_tokens, 159'026u);
  EXPECT_NEAR(static_cast<double>(c->predicted_kv_tokens) / 159'026.0, 1.0, 0.01);
  EXPECT_TRUE(c->warnings.empty());

  // The same launch, replayed: 159K tokens and the logged 5.47 GB headroom.
  const PlanInput in = calibrated_input(*c, KvDtype::bf16);
  const PlanPoint at088 = plan_point(in, 0.88);
  EXPECT_NEAR(static_cast<double>(at088.kv_tokens) / 159'026.0, 1.0, 0.01);
  EXPECT_NEAR(gib(static_cast<std::uint64_t>(at088.headroom_bytes)), 5.45, 0.05);
  // The 0.93 launch that crashed: ~230K tokens and under 1 GiB of headroom.
  const PlanPoint at093 = plan_point(in, 0.93);
  EXPECT_NEAR(static_cast<double>(at093.kv_tokens) / 230'092.0, 1.0, 0.01);
  EXPECT_LT(at093.headroom_bytes, static_cast<std::int64_t>(kGiB));
  EXPECT_TRUE(std::ranges::any_of(at093.warnings,
                                  [](const Warning& w) { return w.code == "prefill_oom_risk"; }));
  // FP8 KV at 0.88: twice the tokens.
  const PlanPoint fp8 = plan_point(calibrated_input(*c, KvDtype::fp8_e4m3), 0.88);
  EXPECT_NEAR(static_cast<double>(fp8.kv_tokens) / (2.0 * at088.kv_tokens), 1.0, 1e-4);
}

TEST(SglangLog, AWrongModelIsFlagged) {
  auto log = parse_sglang_log(log_fixture("sglang_kimi_k25_tp8.log"), "sglang.log");
  ASSERT_TRUE(log);
  const ModelSpec llama = spec_of(**find_preset("Llama-3.1-70B"));
  auto c = calibrate(*log, llama.kv, llama.context_len, "sglang.log");
  ASSERT_TRUE(c);
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_EQ(c->warnings[0].code, "calibration_mismatch");
  EXPECT_NE(c->warnings[0].message.find("--model"), std::string::npos);
}

TEST(SglangLog, OlderFormatDerivesM0FromTheFraction) {
  auto log = parse_sglang_log(log_fixture("sglang_qwen3_8b_old_format.log"), "old.log");
  ASSERT_TRUE(log) << log.error().message;
  ASSERT_EQ(log->ranks.size(), 1u);
  EXPECT_FALSE(log->ranks[0].free_before_load.has_value());
  EXPECT_NEAR(gib(*log->ranks[0].kv_bytes), 2 * 26.36, 0.011);  // K size + V size
  const ModelSpec qwen = spec_of(**find_preset("Qwen3-8B"));
  auto c = calibrate(*log, qwen.kv, qwen.context_len, "old.log");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->kv_dtype, KvDtype::fp8_e4m3);
  EXPECT_EQ(c->tp, 1);
  EXPECT_NEAR(gib(c->free_before_load), 78.20, 0.1);
  EXPECT_NEAR(gib(c->weights_per_rank), 16.10, 0.1);
  EXPECT_FALSE(c->runtime_reserve.has_value());  // no available_gpu_mem line
  EXPECT_TRUE(c->warnings.empty()) << c->warnings[0].message;
  EXPECT_EQ(c->context_len, 40'960);
}

TEST(SglangLog, RankTags) {
  auto log = parse_sglang_log(
      "[2025-11-04 05:27:13 DP1 TP5 EP5] Load weight end. type=X, dtype=torch.bfloat16, "
      "avail mem=75.11 GB, mem usage=107.07 GB.\n"
      "[2025-11-04 05:27:13 DP1 TP5 EP5] KV Cache is allocated. #tokens: 524288, KV size: 17.16 "
      "GB\n",
      "dp.log");
  ASSERT_TRUE(log);
  ASSERT_EQ(log->ranks.size(), 1u);
  EXPECT_EQ(log->ranks[0].rank, 5);
  EXPECT_EQ(log->ranks[0].kv_tokens, 524'288u);
}

TEST(SglangLog, NoStartUpIsAnErrorNamingTheFile) {
  auto log = parse_sglang_log(log_fixture("sglang_no_startup.log"), "sglang.log");
  ASSERT_FALSE(log);
  EXPECT_EQ(log.error().message.rfind("sglang.log: no SGLang start-up found", 0), 0u);
  EXPECT_FALSE(parse_sglang_log("", "empty.log"));
}

TEST(SglangLog, CalibrationNeedsTheKvPool) {
  auto log = parse_sglang_log(
      "[t TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=21.00 GB, mem usage=70.00 "
      "GB.\n",
      "short.log");
  ASSERT_TRUE(log);
  auto c = calibrate(*log, kimi().kv, kimi().context_len, "short.log");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("short.log: no 'KV Cache is allocated"), std::string::npos);
}

TEST(SglangLog, OutOfRangeValuesNameTheLogNotAFlag) {
  const std::string startup =
      "[t TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=21.00 GB, mem usage=70.00 "
      "GB.\n"
      "[t TP0] KV Cache is allocated. #tokens: 524288, KV size: 17.16 GB\n";
  // tp_size=1e30 used to become "--tp -2147483648: must be at least 1" and context_len=1e30
  // "--context-len 0", blaming flags that were not given.
  struct Case {
    std::string text;
    std::string field;
  };
  for (const Case& c : {
           Case{"server_args=ServerArgs(tp_size=1e30, mem_fraction_static=0.9)\n" + startup,
                "tp_size=1e+30"},
           Case{"server_args=ServerArgs(tp_size=0, mem_fraction_static=0.9)\n" + startup,
                "tp_size=0"},
           Case{"server_args=ServerArgs(tp_size=8, mem_fraction_static=1.5)\n" + startup,
                "mem_fraction_static=1.5"},
           Case{"server_args=ServerArgs(tp_size=8, mem_fraction_static=0)\n" + startup,
                "mem_fraction_static=0"},
           Case{startup + "[t TP0] max_total_num_tokens=1, max_running_requests=8, "
                          "context_len=1e30, available_gpu_mem=5.48 GB\n",
                "context_len"},
           Case{startup + "[t TP0] Memory pool end. avail mem=1e30 GB\n", "Memory pool end"},
           Case{"[t TP0] Load weight end. type=X, avail mem=21.00 GB, mem usage=70.00 GB.\n"
                "[t TP0] KV Cache is allocated. #tokens: 1e300, KV size: 17.16 GB\n",
                "#tokens"},
       }) {
    auto log = parse_sglang_log(c.text, "bad.log");
    ASSERT_FALSE(log) << c.text;
    EXPECT_EQ(log.error().message.rfind("bad.log: ", 0), 0u) << log.error().message;
    EXPECT_NE(log.error().message.find(c.field), std::string::npos) << log.error().message;
    EXPECT_EQ(log.error().message.find("--"), std::string::npos) << log.error().message;
  }
}

// Peak resident memory of this process so far, in bytes.
std::uint64_t peak_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::uint64_t>(u.ru_maxrss) * 1024;
}

TEST(ReadSglangLog, ALongLogIsStreamedAndItsLastStartUpRead) {
  // An earlier start-up, 16 MiB of decode lines, 512 MiB without a newline
  // (sparse), then the start-up that counts, at the very end.
  const std::string path = ::testing::TempDir() + "gpureap_long_sglang.log";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << log_fixture("sglang_kimi_k25_tp8.log");
    const std::string filler =
        "[2025-01-20 09:13:00 TP0] Decode batch. #running-req: 12, #token: 3456, token usage: "
        "0.01, gen throughput (token/s): 1234.56, #queue-req: 0\n";
    for (std::size_t n = 0; n < (16u << 20) / filler.size(); ++n) out << filler;
  }
  ASSERT_EQ(truncate(path.c_str(), (16 << 20) + (512 << 20)), 0);
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << "\n" << log_fixture("sglang_qwen3_8b_old_format.log");
  }
  const std::uint64_t before = peak_rss();
  auto log = read_sglang_log(path, "--from-log");
  const std::uint64_t growth = peak_rss() - before;
  std::remove(path.c_str());
  ASSERT_TRUE(log) << log.error().message;
  EXPECT_EQ(log->mem_fraction, 0.88);
  EXPECT_EQ(log->kv_cache_dtype, "fp8_e4m3");
  EXPECT_EQ(log->model_path, "Qwen/Qwen3-8B");
  ASSERT_EQ(log->ranks.size(), 1u);  // the Kimi start-up's 8 ranks were discarded
  EXPECT_NEAR(gib(*log->ranks[0].free_after_load), 62.10, 0.01);
  // Reading the whole file would have cost 528 MiB.
  EXPECT_LT(growth, 16u << 20) << "peak RSS grew by " << growth << " bytes";
}

TEST(ReadSglangLog, FailuresNameTheFlagAndThePath) {
  auto missing = read_sglang_log("/no/such.log", "--from-log");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "--from-log /no/such.log: no such file");
  auto dir = read_sglang_log("/", "--from-log");
  ASSERT_FALSE(dir);
  EXPECT_EQ(dir.error().message, "--from-log /: not a regular file");
  // A FIFO with no writer: refused at once, never a read that waits for a writer.
  TestTempDir tmp;
  const std::string fifo = tmp.path("log.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pipe = read_sglang_log(fifo, "--from-log");
  ASSERT_FALSE(pipe);
  EXPECT_EQ(pipe.error().message, "--from-log " + fifo + ": not a regular file");
  const std::string empty = std::string(GPUREAP_FIXTURES) + "/capacity/sglang_no_startup.log";
  auto none = read_sglang_log(empty, "--from-log");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message.rfind("--from-log " + empty + ": no SGLang start-up found", 0),
            0u);
}

TEST(SglangLog, RanksAreBounded) {
  SglangLogParser parser;
  for (int rank = 0; rank < 10000; ++rank)
    parser.add_line(fmt::format("[x TP{}] Load weight end. avail mem=1.0 GB", rank));
  auto log = parser.finish("many.log");
  ASSERT_TRUE(log);
  EXPECT_EQ(log->ranks.size(), SglangLogParser::kMaxRanks);
}

// Found by fuzz/sglang_log_fuzz.cc: absurd numbers were converted with undefined
// behaviour. They are never converted: the start-up is refused, naming the field.
TEST(SglangLog, AbsurdNumbersAreRefusedNotConverted) {
  auto log = parse_sglang_log(
      "server_args=ServerArgs(tp_size=1e30, mem_fraction_static=1.5)\n"
      "[x TP0] Load weight end. avail mem=1e300 GB\n"
      "[x TP0] Load weight end. avail mem=2.0 GB\n"
      "[x TP0] KV Cache is allocated. #tokens: 1e30, KV size: 1.0 GB\n",
      "absurd.log");
  ASSERT_FALSE(log);
  EXPECT_NE(log.error().message.find("absurd.log: server_args mem_fraction_static=1.5"),
            std::string::npos)
      << log.error().message;
  auto sizes = parse_sglang_log(
      "[x TP0] Load weight end. avail mem=1e300 GB\n"
      "[x TP0] KV Cache is allocated. #tokens: 1e30, KV size: 1.0 GB\n",
      "absurd.log");
  ASSERT_FALSE(sizes);
  EXPECT_NE(sizes.error().message.find("out of range"), std::string::npos)
      << sizes.error().message;
}

}  // namespace
}  // namespace gpureap::capacity
