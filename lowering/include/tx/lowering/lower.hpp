// The lowering pipeline: a straight list of passes, each a free function in
// its own file (lowering/src/passes/). With TX_DEBUG_IR=1 (or
// LowerOptions::debug) the IR is printed after every pass.
//
//   verify_kernel          structure, launch configuration, barrier placement
//                          (with infer_local_uniformity: which local buffers
//                          every thread of a warpgroup / the CTA holds alike)
//   verify_scopes          variables and buffers used inside the block that binds them
//   verify_writes          no write through an overlapping layout, no self-overlapping copy
//   check_bounds           element accesses that provably leave their buffer
//   lower_tile_ops         dispatch every tile call to a variant
//   lower_scope_ids        T.thread_id & co. become expressions of threadIdx/blockIdx
//   guard_indices          (checked mode) indices checked against their extents
//   flatten_buffers        multi-dimensional accesses become flat storage offsets
//   widen_indices          offsets into buffers of 2^31+ elements computed in 64 bits
//   legalize_low_precision f16/bf16/fp8 arithmetic computed in f32
//   simplify_stmt          constant folding, unit loops, dead branches
//   fast_divide            divisions by launch-time extents as multiply-high and shift
//   verify_lowered         what code generators may rely on
//   check_limits           shared memory per CTA, registers per thread vs the target
//
// and for the host target, the host form's passes (host_form.hpp):
//
//   instrument_checks      (checked mode) run-time checks as intrinsics
//   isolate_shuffles       warp shuffles through lane arrays and warp barriers
//   sink_local_allocations register buffers down to the statements that use them
//   split_regions          barriers split the CTA into loops over its threads
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "tx/ir.hpp"
#include "tx/ir_functor.hpp"
#include "tx/lowering/analysis.hpp"
#include "tx/lowering/dispatch.hpp"
#include "tx/lowering/target.hpp"

namespace tx::lowering {

struct HostForm;  // host_form.hpp

struct LaunchConfig {
  // The grid; for a grid known only at launch (T::cta_id of T::dim
  // expressions), its largest value under the dims' facts.
  std::array<std::int64_t, 3> grid{1, 1, 1};
  int block = 1;  // threads per CTA (tx blocks are one-dimensional)
  // The grid as expressions: IntImms, or expressions of T::dim variables and
  // scalar parameters that the launch evaluates.
  std::array<Expr, 3> grid_exprs{};
  bool symbolic_grid = false;
  // What every pass may assume of the kernel's T::dim variables (their
  // facts) and scalar parameters (their type's range): bound at the top.
  std::vector<std::pair<Var, VarFact>> param_facts;
};

struct KernelParamInfo {
  std::string name;  // the buffer's (or scalar's) name
  DType dtype;
  std::vector<std::int64_t> shape;  // static extents (a symbolic one: its bound)
  std::int64_t elems = 0;           // storage elements (the layout's cosize)
  int align_bytes = 1;              // widest vector access the kernel makes on it
  bool is_scalar = false;           // a T::match_scalar parameter (no buffer)
  bool written = false;             // a buffer the kernel stores to (or a symmetric one)
  // T::match_symmetric: the launch also passes the table of every rank's
  // copy (after the T::dim extents and derived values, in parameter order).
  bool symmetric = false;
  // An integer scalar's facts, checked at launch.
  std::int64_t min = INT64_MIN, max = INT64_MAX, multiple_of = 1;
  std::vector<Expr> dims;  // the extents as written (T::dim vars where symbolic)
  bool symbolic = false;
};

struct SharedAllocation {
  Buffer buffer;
  std::int64_t offset = 0;  // bytes into the dynamic shared memory
  std::int64_t bytes = 0;
};

// A TMA tensor map the launch encodes and passes after the T::dim extents:
// for the buffer of kernel parameter `param`, with the map's box and swizzle.
struct TensorMapParam {
  TensorMapDesc map;
  int param = -1;
};

struct TileCallRecord {
  std::string call;     // the call as printed
  std::string variant;  // e.g. "copy/reg"
  SourceLoc loc;
};

struct LoweredKernel {
  PrimFunc source;   // as the user wrote it
  PrimFunc lowered;  // flat, ready for a code generator (GPU form: threads as in CUDA)
  Target target;     // what it was lowered for
  // For the host target: the host form (one CTA as a sequential program),
  // what the host JIT compiles. Null for other targets.
  std::shared_ptr<const HostForm> host;
  LaunchConfig launch;
  std::vector<KernelParamInfo> params;
  std::vector<SharedAllocation> shared;
  std::int64_t shared_bytes = 0;
  std::vector<TileCallRecord> dispatched;
  // T::profile regions recorded by this kernel (profiling on), by index;
  // the GPU kernel then takes the record buffer as its last parameter:
  // kProfileCapacity records per warp.
  std::vector<std::string> profile_regions;
  // Profiled GPU kernels: the byte offset in shared memory of the per-warp
  // record counts (one u32 per warp, after the kernel's own buffers); -1: none.
  std::int64_t profile_counts_offset = -1;
  // The T::dim variables: passed after the parameters, as ints, bound at launch.
  std::vector<DimParam> dims;
  // Values the launch computes (fast_divide's magic numbers), passed after
  // the dims, as ints; lowered->dims is dims followed by these.
  std::vector<DimParam> derived;
  // TMA tensor maps, passed after the dims in this order.
  std::vector<TensorMapParam> tensor_maps;
  // Some extent or the grid is known only at launch.
  bool shape_generic() const;
};

// Records per warp in a profiled GPU kernel's buffer (runtime/src/profile.cpp):
// a warp's area is a 2-word header (word 0: its mark count, written only when
// the marks overflow the area) and kProfileCapacity (timestamp, meta) pairs.
inline constexpr std::int64_t kProfileCapacity = 1024;
inline constexpr std::int64_t kProfileWarpWords = 2 + 2 * kProfileCapacity;

struct LowerOptions {
  bool debug = false;           // print the IR after every pass (also TX_DEBUG_IR=1)
  std::ostream* log = nullptr;  // where debug output goes (default std::cerr)
  // The GPU architecture the kernel is for ("sm_90a"), whose limits the
  // kernel is checked against; empty: the largest limits of any GPU.
  std::string arch{};
  // The kernel runs on the host (the LLVM JIT): only portable variants lower
  // its calls (those that emit PTX -- ldmatrix, mma, cp.async -- are CUDA's),
  // and the host form's passes run after the others.
  bool host = false;
  // The checked host mode: each index of a multi-dimensional access is
  // checked against its extent at run time (guard_indices), and on the host
  // every access, barrier and division (instrument_checks).
  bool check_indices = false;
  // T::profile regions record timestamps (lower_profile); off, they vanish.
  bool profile = false;
  // The target these options name: the host (checked: with the model of
  // sm_90's asynchronous instructions), or CUDA of `arch`.
  Target target() const {
    return host ? (check_indices ? Target::host_async_model() : Target::host())
                : Target::cuda(arch);
  }
};

// Hardware limits a kernel is checked against when it is compiled.
struct TargetLimits {
  std::string arch;                       // the row of the table used
  std::int64_t shared_bytes_per_cta = 0;  // opt-in maximum
  std::int64_t local_bytes_per_thread = 0;
};
TargetLimits target_limits(const std::string& arch);

LoweredKernel lower(const PrimFunc& f, const LowerOptions& opt = {});

// ------------------------------------------------------------------ passes

LaunchConfig verify_kernel(const PrimFunc& f);
// Adds to launch.param_facts, for each local buffer written only with values
// uniform over a group of threads, how uniform its contents are.
void infer_local_uniformity(const PrimFunc& f, LaunchConfig& launch);
void verify_scopes(const PrimFunc& f);
void verify_writes(const PrimFunc& f);
void check_bounds(const PrimFunc& f, const LaunchConfig& launch);
Stmt lower_profile(const Stmt& s, bool enabled, std::vector<std::string>* regions);
Stmt lower_tile_ops(const Stmt& s, const LaunchConfig& launch, std::vector<TileCallRecord>* log,
                    const Target& target = Target{});
Stmt lower_scope_ids(const Stmt& s);
Stmt guard_indices(const Stmt& s, const LaunchConfig& launch);
Stmt flatten_buffers(const Stmt& s);
Stmt widen_indices(const Stmt& s);
Stmt legalize_low_precision(const Stmt& s);
Stmt simplify_stmt(const Stmt& s, const LaunchConfig& launch);
// Divisions by launch-time extents as multiply-high and shift; appends the
// launch values it needs (two per divisor) to `derived`.
Stmt fast_divide(const Stmt& s, const LaunchConfig& launch, std::vector<DimParam>* derived);
// The magic multiplier and shift fast_divide's code uses for divisor d in
// [1, 2^31 - 1] (both 0 outside it).
struct FastDivisor {
  std::uint32_t magic = 0;
  int shift = 0;
};
FastDivisor fast_divisor_magic(std::int64_t d);
void verify_lowered(const PrimFunc& f, const LaunchConfig& launch);
void check_limits(const LoweredKernel& k, const std::string& arch, bool host = false);
// Where a shared buffer may start: its swizzle's period (the pattern is a
// function of the address), at least 128 bytes (TMA boxes, wgmma
// descriptors), 16 for small buffers.
std::int64_t shared_alignment(const Buffer& b);

// A mutator that keeps an Env of the variables in scope (ids, loops, lets)
// and the enclosing guards, for passes that need ranges or uniformity.
class ScopedMutator : public IRMutator {
 public:
  explicit ScopedMutator(const LaunchConfig& launch);
  using IRMutator::mutate_node;
  Stmt mutate_node(const Stmt& self, const ForNode* n) override;
  Stmt mutate_node(const Stmt& self, const LetStmtNode* n) override;
  Stmt mutate_node(const Stmt& self, const ScopeIdBindNode* n) override;
  Stmt mutate_node(const Stmt& self, const IfThenElseNode* n) override;

 protected:
  // A branch the ranges prove never runs is dropped, not mutated (its code
  // would be lowered under impossible facts); a pass that must still judge
  // what it holds (lower_tile_ops: a tile call breaking an op's rules is an
  // error wherever it sits) looks at it here first.
  virtual void dead_branch(const Stmt&) {}
  Env env_;
  std::vector<Guard> guards_;
  LaunchConfig launch_;
  int loops_ = 0;  // loops (of more than one trip) around the statement being mutated
};

// The builder call a statement of the user's kernel came from ("T.store",
// "Tx.warp.copy", ...): the op of an error found in it.
std::string statement_op(const Stmt& s);

// Facts bound by a scope id (range and uniformity of each of its vars).
std::vector<std::pair<Var, VarFact>> scope_id_facts(const ScopeIdBindNode* n,
                                                    const LaunchConfig& launch);
// The hardware-index expression of each var of a scope id.
std::vector<Expr> scope_id_values(const ScopeIdBindNode* n);

}  // namespace tx::lowering
