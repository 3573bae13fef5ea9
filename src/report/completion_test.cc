// Shell completion from an outline: every option of every command, values completed by
// kind, the commands listed; the GPU selectors `completion gpus` prints.

#include "report/completion.h"

#include <gtest/gtest.h>

namespace gpureap::report {
namespace {

CommandOutline completion_top() {
  CommandOutline top;
  top.name = "gpureap";
  top.options.push_back({{"--dev-dir"}, "DIR", "Device directory", "", ValueKind::directory, {}});
  return top;
}

std::vector<CommandOutline> completion_commands() {
  CommandOutline free;
  free.name = "free";
  free.description = "Free the GPUs. More words.";
  free.options.push_back({{"-y", "--yes"}, "", "Don't ask [ever]", "", ValueKind::none, {}});
  free.options.push_back({{"--gpu"}, "GPU", "GPUs", "", ValueKind::gpu, {}});
  free.options.push_back({{"--grace"}, "DURATION", "Grace", "5s", ValueKind::duration, {}});
  CommandOutline slurm;
  slurm.name = "slurm";
  slurm.description = "Slurm's hooks";
  slurm.options.push_back(
      {{"--when-held"}, "TEXT", "What then", "", ValueKind::choice, {"drain", "fail"}});
  slurm.positionals.push_back({{"mode"}, "", "", "", ValueKind::choice, {"prolog", "epilog"}});
  return {free, slurm};
}

TEST(BashCompletion, ValuesByKindOptionsByCommandAndTheCommands) {
  const std::string s = bash_completion(completion_top(), completion_commands());
  EXPECT_TRUE(s.starts_with("# bash completion for gpureap.")) << s;
  EXPECT_NE(s.find("      --dev-dir|--gpu|--grace|--when-held) ((i++)) ;;\n"), std::string::npos) << s;
  EXPECT_NE(s.find("    --gpu) _gpureap_gpus; return ;;\n"), std::string::npos) << s;
  EXPECT_NE(s.find("    --grace) _gpureap_duration; return ;;\n"), std::string::npos) << s;
  EXPECT_NE(s.find("    --when-held) COMPREPLY=($(compgen -W \"drain fail\" -- \"$cur\")); return ;;\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("    free) opts=\"-y --yes --gpu --grace $global\" ;;\n"), std::string::npos) << s;
  EXPECT_NE(s.find("    slurm) opts=\"--when-held $global\"; words=\"prolog epilog\" ;;\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("compgen -W \"free slurm\""), std::string::npos) << s;
  EXPECT_NE(s.find("local global=\"--dev-dir\""), std::string::npos) << s;
  EXPECT_TRUE(s.ends_with("complete -F _gpureap gpureap\n")) << s;
}

TEST(ZshCompletion, SpecsPerOptionWithTheDescriptionQuoted) {
  const std::string s = zsh_completion(completion_top(), completion_commands());
  EXPECT_TRUE(s.starts_with("#compdef gpureap\n")) << s;
  EXPECT_NE(s.find("    '--dev-dir[Device directory]:directory:_files -/'\n"), std::string::npos) << s;
  EXPECT_NE(s.find("    'free:Free the GPUs'\n"), std::string::npos) << s;
  // Brackets in a description would end _arguments' [description]; a quote ends the word.
  EXPECT_NE(s.find("'(-y --yes)'{-y,--yes}'[Don'\\''t ask (ever)]' \\\n"), std::string::npos) << s;
  EXPECT_NE(s.find("'--gpu[GPUs]:GPU:_gpureap_gpus' \\\n"), std::string::npos) << s;
  EXPECT_NE(s.find("'1:mode:(prolog epilog)' \\\n"), std::string::npos) << s;
}

TEST(GpuSelectorWords, AllThenIdsThenUuids) {
  gpu::GpuSnapshot snap;
  snap.gpus.resize(2);
  snap.gpus[0].id = {0, std::nullopt, std::nullopt};
  snap.gpus[0].uuid = "GPU-aaaa";
  snap.gpus[1].id = {1, 2u, 0u};
  EXPECT_EQ(gpu_selector_words(snap), "all\n0\n1/gi2/ci0\nGPU-aaaa\n");
  EXPECT_EQ(gpu_selector_words({}), "all\n");
}

}  // namespace
}  // namespace gpureap::report
