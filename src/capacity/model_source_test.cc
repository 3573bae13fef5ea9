#include "capacity/model_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpureap::capacity {
namespace {

const std::string kDir = std::string(GPUREAP_FIXTURES) + "/capacity/";

TEST(ResolveModel, PresetCarriesItsWeights) {
  auto model = resolve_model("Kimi-K2.5");
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->spec.name, "Kimi-K2.5");
  EXPECT_TRUE(model->config_path.empty());
  ASSERT_TRUE(resolve_weights(*model, "Kimi-K2.5", "", true));
  ASSERT_TRUE(model->spec.weights.has_value());
  EXPECT_NE(model->spec.weights_origin.find("preset inventory"), std::string::npos);
}

TEST(ResolveModel, ConfigDirectoryTakesWeightsFromTheIndexBesideIt) {
  auto model = resolve_model(kDir + "qwen3-8b");
  ASSERT_TRUE(model) << model.error().message;
  EXPECT_EQ(model->config_path, kDir + "qwen3-8b/config.json");
  ASSERT_TRUE(resolve_weights(*model, kDir + "qwen3-8b", "", true));
  EXPECT_EQ(model->spec.weights->total(), 16'381'470'720u);  // dense: nothing replicated
  EXPECT_EQ(model->spec.weights->per_rank(2), 16'381'470'720u / 2);
  EXPECT_NE(model->spec.weights_origin.find("model.safetensors.index.json"), std::string::npos);
}

TEST(ResolveModel, WeightsFlagAsSizeOrIndex) {
  auto model = resolve_model(kDir + "llama-3.1-70b/config.json");
  ASSERT_TRUE(model) << model.error().message;
  ASSERT_TRUE(resolve_weights(*model, "m", "141.1GB", true));
  EXPECT_EQ(model->spec.weights->total(), 141'100'000'000u);
  ASSERT_TRUE(resolve_weights(*model, "m", kDir + "qwen3-8b/model.safetensors.index.json", true));
  EXPECT_EQ(model->spec.weights->total(), 16'381'470'720u);
  // --weights overrides a preset's inventory too.
  auto preset = resolve_model("Qwen3-8B");
  ASSERT_TRUE(resolve_weights(*preset, "Qwen3-8B", "20GB", true));
  EXPECT_EQ(preset->spec.weights->total(), 20'000'000'000u);
}

TEST(ResolveModelErrors, ConfigWithoutWeightsNamesTheRemedies) {
  auto model = resolve_model(kDir + "llama-3.1-70b/config.json");
  ASSERT_TRUE(model);
  auto missing = resolve_weights(*model, "llama/config.json", "", true);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message.rfind("--model llama/config.json: weight bytes unknown", 0),
            0u);
  EXPECT_NE(missing.error().message.find("--weights"), std::string::npos);
  // A log calibration measures the weights, so they are optional then.
  EXPECT_TRUE(resolve_weights(*model, "llama/config.json", "", false));
}

TEST(ResolveModelErrors, MissingFilesAndBadFlags) {
  auto nofile = resolve_model("models/none/config.json");
  ASSERT_FALSE(nofile);
  EXPECT_EQ(nofile.error().message.rfind("--model models/none/config.json: no such file", 0), 0u);
  EXPECT_NE(nofile.error().message.find("Kimi-K2.5"), std::string::npos);

  auto unknown = resolve_model("Mistral-Large");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("unknown model"), std::string::npos);

  auto bad_config = resolve_model(kDir + "bad/no_context.json");
  ASSERT_FALSE(bad_config);
  EXPECT_EQ(bad_config.error().message.rfind("--model " + kDir + "bad/no_context.json: missing", 0),
            0u);

  auto model = resolve_model("Qwen3-8B");
  auto bare = resolve_weights(*model, "Qwen3-8B", "600", true);
  ASSERT_FALSE(bare);
  EXPECT_EQ(bare.error().message.rfind("--weights 600: invalid size '600': add a unit", 0), 0u);
  auto index = resolve_weights(*model, "Qwen3-8B", kDir + "bad/index_without_total.json", true);
  ASSERT_FALSE(index);
  EXPECT_NE(index.error().message.find("missing metadata.total_size"), std::string::npos);
  auto nothing = resolve_weights(*model, "Qwen3-8B", "no/such/index.json", true);
  ASSERT_FALSE(nothing);
  EXPECT_EQ(nothing.error().message, "--weights no/such/index.json: no such file");
}

TEST(ReadTextFile, NamesTheFlag) {
  EXPECT_TRUE(read_text_file(kDir + "meminfo", "--x"));
  auto missing = read_text_file(kDir + "nope.log", "--from-log");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().message, "--from-log " + kDir + "nope.log: no such file");
}

TEST(ReadTextFile, AFileAboveTheCapIsRefusedUnread) {
  // A sparse config.json past the cap: refused from its size, naming the file.
  const std::string dir = ::testing::TempDir() + "gpureap_big_model";
  std::filesystem::create_directories(dir);
  const std::string config = dir + "/config.json";
  { std::ofstream(config) << "{}"; }
  ASSERT_EQ(truncate(config.c_str(), kMaxModelFileBytes + 1), 0);
  auto model = resolve_model(dir);
  ASSERT_FALSE(model);
  EXPECT_EQ(model.error().message, "--model " + config + ": " +
                                       std::to_string(kMaxModelFileBytes + 1) +
                                       " bytes, more than the 64.0 MiB read from a model file");
  auto qwen = resolve_model("Qwen3-8B");
  ASSERT_TRUE(qwen);
  auto index = resolve_weights(*qwen, "Qwen3-8B", config, true);
  ASSERT_FALSE(index);
  EXPECT_NE(index.error().message.find("--weights " + config + ": "), std::string::npos);
  std::filesystem::remove_all(dir);
  // The cap itself is a parameter: one byte over is refused, the cap is read.
  EXPECT_FALSE(read_text_file(kDir + "meminfo", "--x", 10));
  auto exact = read_text_file(kDir + "meminfo", "--x");
  ASSERT_TRUE(exact);
  EXPECT_TRUE(read_text_file(kDir + "meminfo", "--x", exact->size()));
  EXPECT_FALSE(read_text_file(kDir + "meminfo", "--x", exact->size() - 1));
}

}  // namespace
}  // namespace gpureap::capacity
