// Names the code generators and the runtime give a kernel: every back end
// (CUDA source, the host's LLVM functions, the GPU module cache) names it by
// the same C identifier, so it lives apart from any one of them.
#pragma once

#include <string>

namespace tx::lowering {

// A valid C identifier from any name ("my-kernel" -> "my_kernel").
std::string sanitize_identifier(const std::string& name);

}  // namespace tx::lowering
