// Shared between ops.cpp and autotune.cpp.
#pragma once

#include <vector>

#include "tx/ops/ops.hpp"
#include "tx/ops/registry.hpp"

namespace tx::ops::detail {

// Defaults filled in and checked.
Config resolved(const Config& c, DType t, const OpInfo& op);
// The autotuned config (timed on the GPU once, then remembered on disk).
Config tuned_config(const OpInfo& op, DType dtype,
                    const std::vector<std::vector<std::int64_t>>& shapes, const Params& params,
                    Device device, const Config& requested);

}  // namespace tx::ops::detail
