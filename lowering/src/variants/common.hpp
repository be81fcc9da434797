// Helpers shared by the dispatch variants: operand access, the predicates
// every variant applies (target, scope, active threads), the elementwise
// call parser and value builder, and small IR constructors.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "tx/lowering/analysis.hpp"
#include "tx/lowering/dispatch.hpp"
#include "tx/lowering/layout_algebra.hpp"
#include "tx/lowering/tile_ops.hpp"

namespace tx::lowering::variants {

const BufferRegion* region_arg(const TileCallNode* call, std::size_t i);
std::vector<const BufferRegion*> region_args(const TileCallNode* call);

// "operand A_smem: <what>"
std::string operand_reason(const BufferRegion& r, const std::string& what);

// The scope's threads exist in the CTA (warp needs a multiple of 32, ...).
Check scope_fits_cta(const DispatchContext& ctx);
// No enclosing guard splits the scope's group of threads.
Check all_threads_active(const DispatchContext& ctx);
// No enclosing guard splits a warp: for variants whose operands are all
// registers and whose threads exchange data only within a warp (shuffles),
// so a guard that varies per warp runs the op on the active warps' elements
// and leaves the others' registers as they were.
Check whole_warps_active(const DispatchContext& ctx);
// The predicates of `p` with all_threads_active relaxed to whole_warps_active.
std::vector<std::pair<std::string, Predicate>> per_warp_predicates(
    std::vector<std::pair<std::string, Predicate>> p);
// Every region operand lives in `scope`.
Check operands_in(const DispatchContext& ctx, MemScope scope);
// Every region operand's start is inside its buffer (static or by range analysis).
Check regions_in_bounds(const DispatchContext& ctx);
// The same, except that a global operand of a partial= copy may reach past
// its extent: for variants that mask such tiles.
Check regions_in_bounds_or_masked(const DispatchContext& ctx);

// The predicates all variants start with, in order.
std::vector<std::pair<std::string, Predicate>> common_predicates();
// A partial= copy: whether element `idx` (row-major in the region) of a
// global operand lies inside its tensor, as a condition over the dimensions
// where the region may reach past the extent; undefined when the region
// stays inside (or the call is not partial=, or r is not global).
Expr partial_inside(const DispatchContext& ctx, const BufferRegion& r, const Expr& idx);
// A partial= region larger than its tensor in some dimension (a 128-row
// tile of a 72-row matrix) has no layout over the tensor's shape. The view
// widens those dimensions and keeps the tensor's row-major strides, so
// every element inside the tensor has its own offset (the masked ones are
// never accessed). Other regions come back unchanged.
BufferRegion partial_view(const DispatchContext& ctx, const BufferRegion& r);
// common_predicates() with regions_in_bounds_or_masked: variants that mask partial tiles.
std::vector<std::pair<std::string, Predicate>> common_predicates_masking();

// ------------------------------------------------------------ where=
// Variants that write only where a where= condition holds take
// common_predicates_where() (the same list without the check that refuses
// where=); every other variant refuses it, so a condition is never dropped.
Check no_where(const DispatchContext& ctx);
std::vector<std::pair<std::string, Predicate>> common_predicates_where();

// The coordinate space of a region as an operand of joint_refine: one
// memory iter per dimension of extent > 1, row-major strides. Every joint
// iter then lies inside one dimension, and its part of this operand says
// which (region_coordinates).
std::vector<Iter> coordinate_iters(const BufferRegion& r);
// The coordinates of elements of `r` accumulated from joint iters: add(k,
// digit) for an iter whose coordinate part has stride `stride` adds digit *
// step along the dimension that stride falls in.
class RegionCoordinates {
 public:
  explicit RegionCoordinates(const BufferRegion& r);
  void add(std::int64_t stride, const Expr& digit);
  const std::vector<Expr>& coords() const { return coords_; }

 private:
  std::vector<std::int64_t> extents_, weights_;
  std::vector<Expr> coords_;
};
// The call's where= condition at the given coordinates (T.tile_coord(d)
// replaced by coords[d]); undefined when the call has none.
Expr where_condition(const TileCallNode* call, const std::vector<Expr>& coords);

// A per-thread (local) scratch buffer of n elements and its Allocate.
Buffer scratch(const std::string& name, DType dtype, std::int64_t n);

// The barrier that ends a shared-memory tile op at this scope (none for a thread).
Stmt scope_barrier(ExecScope s, SourceLoc loc);

// ------------------------------------------------------------ elementwise

struct ElementwisePlan {
  const ElementwiseSpec* spec = nullptr;
  BufferRegion dst;
  std::vector<TileArg> inputs;  // regions or scalars, after commutative swaps
  DType compute = f32;
  Expr scale, bias;           // scalar scale= / bias=
  std::size_t op_inputs = 0;  // inputs[0, op_inputs) are the op's; then
  int scale_input = -1;       // a tile scale= and bias=, by index in inputs
  int bias_input = -1;
};

// Validates operand count, dtypes, scalar placement and attrs.
std::variant<ElementwisePlan, std::string> parse_elementwise(const DispatchContext& ctx);

// The destination value from the inputs' loaded values (storage dtypes):
// converts to the compute dtype, applies scale/bias, the op, then rounds to
// the destination dtype.
Expr elementwise_value(const ElementwisePlan& plan, const std::vector<Expr>& loaded);

// The text of an Origin comment: the call and the variant chosen.
std::string origin_text(const DispatchContext& ctx, const std::string& variant);

}  // namespace tx::lowering::variants

namespace tx::lowering::variants {

// Copy operands: destination and source regions with equal dtypes and equal
// extents once extent-1 dimensions are dropped.
Check copy_operands_match(const DispatchContext& ctx);
// atomic_add's destination: a float32 region of global or shared memory
// (the atomic family's variants).
Check atomic_destination(const DispatchContext& ctx);

// Where every element of a region lives, by its row-major index in the
// region: the memory offset relative to `base` (the region start's offset,
// possibly dynamic) on axis m, and the thread coordinates on the others.
// The tensor-core variants read fragment layouts off this table. Fails on a
// layout with replicas (an element in several places) and on regions of more
// than 2^16 elements (tables are for register and shared tiles).
// `at` holds pre-swizzle places relative to `base`; a swizzled buffer's
// element x lives at sw(base + at[x]) (only with allow_swizzle).
struct ElementPlaces {
  Expr base;
  std::vector<Location> at;
  std::optional<Swizzle> swizzle;
};
std::variant<ElementPlaces, std::string> element_places(const BufferRegion& r, const Env& env,
                                                        RegionOptions opt = {});

// The last two extents of a matrix operand (rows, cols), when every other
// extent is 1: gemm operands are 2-D regions of buffers of any rank.
std::optional<std::pair<std::int64_t, std::int64_t>> matrix_extents(const BufferRegion& r);

// A gemm call's operands: D (M, N), A (M, K), B (K, N) matrix regions, no
// scale / bias / axes.
Check gemm_operands(const DispatchContext& ctx);

// The constant part of an offset whose other terms are all multiples of
// `period` (a shared tile's start: stage * tile + row0 * cols), in [0,
// period) plus whole periods folded in; nullopt when a term is not provably
// such a multiple. Swizzles and TMA boxes depend on the offset modulo their
// period only.
std::optional<std::int64_t> aligned_constant_part(const Expr& offset, const Env& env,
                                                  std::int64_t period);

// Offset of element `idx` (of the joint index space) for operand i.
Expr joint_offset(const std::vector<JointIter>& iters, std::size_t operand, const Expr& idx);

// Widest vector (in elements) such that every operand in `vectorized` is
// contiguous and aligned in chunks of that many elements, given each
// operand's base offset. Candidates are 16, 8, 4, 2, 1 bytes of `esize`.
// `extra(v)` may veto a width (e.g. divisibility by the thread count).
int widest_vector(const std::vector<JointIter>& iters, const std::vector<std::size_t>& vectorized,
                  const std::vector<Expr>& bases, int esize, const Env& env,
                  const std::function<bool(int)>& extra);

}  // namespace tx::lowering::variants
