#pragma once
// How a gpu::DeviceId is spelled in gpureap's JSON (the user-facing contract,
// docs/json-schema.md): a whole GPU is its NVML index, a number, as it has always
// been; a MIG device is the text --gpu takes for it, "0/gi1/ci0". Included by the
// report files that put ids into JSON.

#include <nlohmann/json.hpp>

#include "gpu/device_id.h"

template <>
struct nlohmann::adl_serializer<gpureap::gpu::DeviceId> {
  template <typename Json>
  static void to_json(Json& j, const gpureap::gpu::DeviceId& id) {
    if (id.mig())
      j = gpureap::gpu::device_text(id);
    else
      j = id.index;
  }
};
