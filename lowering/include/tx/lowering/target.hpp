// What a kernel is lowered for: a CUDA GPU of some SM version, or the host
// (the LLVM JIT). Dispatch picks variants by it (a variant names the target
// kinds it emits code for), lower() runs the passes its target needs (the
// host form's passes only for the host), and the runtime builds the
// Executable of that kind.
//
// A new target (a later GPU generation with its own instructions, another
// CPU back end) is a new Kind here, the variants that emit its code, its
// passes in lower(), and an Executable in the runtime: siblings of the
// existing ones, not branches inside them.
#pragma once

#include <string>

namespace tx::lowering {

enum class TargetKind { cuda, host };

struct Target {
  TargetKind kind = TargetKind::cuda;
  // CUDA: the SM version the kernel may use instructions of (sm_90a: 90).
  // 80 when no arch is named; 0 on the host.
  int sm = 80;
  // CUDA: the arch as named ("sm_90a"); empty: none named.
  std::string arch{};
  // Host only: the checked mode's model of sm_90's asynchronous machinery.
  // TMA copies and warpgroup MMA lower as on an sm_90a GPU (the TMA and
  // wgmma variants), and the host runs them through the checker, which
  // follows their completion on mbarriers and wgmma groups (docs/reliability.md).
  bool async_model = false;

  static Target cuda(const std::string& arch = {});
  static Target host() { return {TargetKind::host, 0, {}}; }
  static Target host_async_model() { return {TargetKind::host, 0, {}, true}; }
  bool is_cuda() const { return kind == TargetKind::cuda; }
  bool is_host() const { return kind == TargetKind::host; }
  // A CUDA target of at least sm_<version> (false on the host).
  bool has_sm(int version) const { return is_cuda() && sm >= version; }
  // A CUDA target below sm_<version>: an instruction of that version is
  // missing (false on the host, whose variants are chosen by kind).
  bool below_sm(int version) const { return is_cuda() && sm < version; }
  // Code for sm_90's asynchronous proxy is emitted (fence.proxy.async before
  // a TMA or wgmma reads what threads wrote): an sm_90 GPU, or the host's model.
  bool models_sm90() const { return has_sm(90) || async_model; }
  std::string str() const;  // "cuda sm_90a", "cuda sm_80", "host"
  bool operator==(const Target&) const = default;
};

const char* target_kind_name(TargetKind k);  // "cuda", "host"

}  // namespace tx::lowering
