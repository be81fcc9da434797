// Scope-aware dispatch of tile primitives.
//
// Variants register per op with a name, the target kinds they emit code for
// (CUDA, the host, or both), a priority, named predicates that answer ok or
// a reason, and a planner that either fails with a reason or returns the
// lowered code. Variants are tried by descending priority (ties by name); one
// for another target kind is turned down after its predicates (its reason
// is then its `off_target`). TileAttrs::variant forces one by name.
// When every variant fails, the error lists each variant with its reason and
// prints the call:
//
//   tx error: Tx.warp.sqrt: no variant accepts this call
//     at samples/warp_sqrt_reg.cpp:31
//     call: Tx.warp.sqrt(A_smem[0:32, 0:8], R[0:32, 0:8])
//     elementwise/reg [10]: operand A_smem: scope shared != local
//     elementwise/smem [10]: operand R: scope local != shared
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "tx/ir.hpp"
#include "tx/lowering/analysis.hpp"
#include "tx/lowering/target.hpp"

namespace tx::lowering {

// An enclosing `if` of a tile call, with the uniformity of its condition.
struct Guard {
  Expr cond;
  SourceLoc loc;
  Uniformity level;
  std::string text;  // the condition, printed
};

struct DispatchContext {
  const TileCallNode* call = nullptr;
  // What the kernel is lowered for: the host runs only portable variants;
  // CUDA variants check the SM version they need (target.has_sm(90)).
  Target target{};
  ExecScope scope = ExecScope::thread;
  int scope_threads = 1;
  int cta_threads = 1;
  const Env* env = nullptr;
  std::vector<Guard> guards;
  // Regions on extents known at launch (T::dim) may reach past them: the
  // variant must copy only the elements inside (copy/fallback does, element
  // by element). lower_tile_ops sets it on the partial-tile branch.
  bool mask_symbolic = false;
  // The call is inside a loop: it runs again, so shared scratch it reads
  // after a barrier may be overwritten by a faster warp's next trip unless
  // the op ends with a barrier as well.
  bool in_loop = false;
};

// ok, or the reason a variant does not apply.
using Check = std::optional<std::string>;
inline Check ok() { return std::nullopt; }

using Predicate = std::function<Check(const DispatchContext&)>;
// A plan is the lowered statement, or the reason the variant cannot lower the call.
using Plan = std::variant<Stmt, std::string>;
using Planner = std::function<Plan(const DispatchContext&)>;

struct Variant {
  std::string family;  // "copy", "elementwise", "reduction"
  std::string name;    // "reg", "smem", "gmem_smem", "fallback", "local", "shared"
  // The target kinds it emits code for; portable variants (plain loads,
  // stores and arithmetic) run on both.
  std::vector<TargetKind> targets{TargetKind::cuda, TargetKind::host};
  // Why it is not on the other kinds, with what lowers the call there
  // instead: its reason on such a target, once its predicates hold.
  std::string off_target{};
  // Also lowers for the host's checked mode (Target::async_model), whose
  // checker runs the instructions it emits through a model.
  bool async_model = false;
  int priority = 10;
  std::vector<std::pair<std::string, Predicate>> when;
  Planner plan;
  std::string qualified() const { return family + "/" + name; }
  bool runs_on(TargetKind k) const;
  bool runs_on(const Target& t) const { return runs_on(t.kind) || (async_model && t.async_model); }
};

class Registry {
 public:
  // The process-wide registry, with tx's built-in variants (registered on first use).
  static Registry& global();
  // For every op of v.family (the FAMILY column of tile_op_table.hpp).
  void add(Variant v);
  // For one op (or family) by name.
  void add(std::string op, Variant v);
  // Variants for op on a target kind, by descending priority then name.
  std::vector<const Variant*> variants(const std::string& op, TargetKind target) const;
  // Every variant of op, whatever its target.
  std::vector<const Variant*> variants(const std::string& op) const;
  // The tile ops (in table order) that have a variant.
  std::vector<std::string> ops() const;

 private:
  std::vector<std::pair<std::string, Variant>> entries_;
};

struct DispatchResult {
  const Variant* variant = nullptr;
  Stmt lowered;
  std::vector<std::pair<const Variant*, std::string>> rejected;  // tried before the winner
};

// Chooses a variant and lowers the call; throws tx::Error when none applies.
DispatchResult dispatch(const DispatchContext& ctx);

// What every variant of the call's family checks before anything else --
// the op's rules on dtypes, operand kinds, broadcasting extents, reduction
// axes, copy extents -- as a reason, or ok. Independent of where the call
// runs: lower_tile_ops applies it to the calls of a branch it drops.
Check family_rules(const DispatchContext& ctx);

// Registration entry points of the built-in variants (one file each).
void register_copy_gmem_smem(Registry& r);
void register_copy_reg(Registry& r);
void register_atomic_reg(Registry& r);
void register_atomic_tma_reduce(Registry& r);
void register_atomic_fallback(Registry& r);
void register_copy_fallback(Registry& r);
void register_elementwise_reg(Registry& r);
void register_elementwise_smem(Registry& r);
void register_reduction_local(Registry& r);
void register_reduction_shared(Registry& r);
void register_reduction_cross_warp(Registry& r);
void register_copy_ldstmatrix(Registry& r);
void register_copy_async_ldgsts(Registry& r);
void register_copy_async_tma(Registry& r);
void register_copy_async_tma_store(Registry& r);
void register_gemm_wgmma(Registry& r);
void register_copy_async_sync(Registry& r);
void register_gemm_mma_sync(Registry& r);
void register_gemm_fallback(Registry& r);

}  // namespace tx::lowering
