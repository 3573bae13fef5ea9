// A Hugging Face config.json and a model.safetensors.index.json (downloaded
// files), then what the planner computes from the geometry they give.

#include "capacity/hf_config.h"
#include "capacity/model_spec.h"
#include "capacity/weight_estimate.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpureap;
  using namespace gpureap::capacity;
  const std::string_view text = fuzz::as_text(data, size);

  if (auto model = parse_hf_config(text, "config.json")) {
    for (int tp : {1, 2, 8}) {
      (void)kv_heads_per_rank(model->spec.kv, tp);
      (void)kv_bytes_per_token(model->spec.kv, tp, KvDtype::bf16);
      (void)check_tensor_parallel(model->spec, tp);
    }
    const auto items = weight_inventory(model->shape, model->bytes);
    (void)checkpoint_bytes(items);
    (void)split_total(16ULL << 30, model->shape, model->bytes);
  }
  (void)parse_safetensors_index(text, "model.safetensors.index.json");
  return 0;
}
