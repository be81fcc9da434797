// Compiling in a child process (tx-nvrtc-worker): see tx/runtime/nvrtc.hpp.
#pragma once

#include <string>
#include <vector>

#include "nvrtc_raw.hpp"

namespace tx::runtime::detail {

// One compile in a worker, which is started (posix_spawn) when none is idle
// and kept for the next compile. `nvrtc_library`: the NVRTC file this
// process uses (the worker loads the same one). Throws tx::Error ("tx.nvrtc",
// operand `name`) when the worker crashes or exits, outlives the timeout
// (then it is killed), or cannot be started; this process is unharmed and
// the next compile starts a fresh worker.
nvrtc_raw::Result compile_in_child(const std::string& nvrtc_library, const std::string& source,
                                   const std::string& name, const std::vector<std::string>& options,
                                   nvrtc_raw::Target target, const std::string& arch);

}  // namespace tx::runtime::detail
