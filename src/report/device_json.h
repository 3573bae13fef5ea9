#pragma once
// How a gpu::DeviceId is spelled in gpureap's JSON (the user-facing contract,
// docs/json-schema.md): a whole GPU is its NVML index, a number, as it has always
// been. Included by the report files that put ids into JSON.

#include <nlohmann/json.hpp>

#include "gpu/device_id.h"

template <>
struct nlohmann::adl_serializer<gpureap::gpu::DeviceId> {
  template <typename Json>
  static void to_json(Json& j, const gpureap::gpu::DeviceId& id) {
    j = id.index;
  }
};
