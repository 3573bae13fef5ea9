#pragma once
// The words gpureap's outputs use for the GPU source: NVIDIA's library's name ("nvml"),
// kept in JSON keys, event, class and metric names since before there was a second
// vendor. Spelled here once, beside the source, so that the files above src/gpu/ name
// "the source" and never the vendor (docs/json-schema.md lists them).

namespace gpureap::gpu::source_words {

// JSON keys
inline constexpr const char* kState = "nvml_state";      // the source's state (status)
inline constexpr const char* kProblem = "nvml_problem";  // why it cannot read (status, run)
inline constexpr const char* kError = "nvml_error";      // the error a free ended on
inline constexpr const char* kUnseen = "nvml_unseen";    // pids it lists that /proc lacks
// Enum words (each enum's enum_name returns them)
inline constexpr const char* kDown = "nvml_down";        // EventKind::source_down
inline constexpr const char* kUp = "nvml_up";            // EventKind::source_up
inline constexpr const char* kFailed = "nvml_failed";    // LeftoverClass::source_failed
inline constexpr const char* kClient = "nvml_client";    // BlockerClass::source_client
// The agent's events when the source lets go of the GPUs for a reset, and takes them back
inline constexpr const char* kYielded = "nvml_yielded";
inline constexpr const char* kResumed = "nvml_resumed";
// The metric: 1 when the source answers for at least one GPU
inline constexpr const char* kUpMetric = "gpureap_nvml_up";

}  // namespace gpureap::gpu::source_words
