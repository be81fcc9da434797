#include "tx/lowering/target.hpp"

#include <cctype>

namespace tx::lowering {

// "sm_90a" and "compute_90" give 90; anything else the default 80, which
// every GPU tx runs on has.
Target Target::cuda(const std::string& arch) {
  Target t{TargetKind::cuda, 80, arch};
  if (arch.rfind("sm_", 0) != 0 && arch.rfind("compute_", 0) != 0) return t;
  std::size_t i = arch.find('_') + 1, j = i;
  while (j < arch.size() && std::isdigit(static_cast<unsigned char>(arch[j]))) ++j;
  if (j > i) t.sm = std::stoi(arch.substr(i, j - i));
  return t;
}

std::string Target::str() const {
  if (is_host()) return async_model ? "host (checked, sm_90 asynchronous model)" : "host";
  return "cuda " + (arch.empty() ? "sm_" + std::to_string(sm) : arch);
}

const char* target_kind_name(TargetKind k) { return k == TargetKind::host ? "host" : "cuda"; }

}  // namespace tx::lowering
