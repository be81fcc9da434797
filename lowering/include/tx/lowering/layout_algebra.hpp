// Layout algebra for the dispatch variants: small functions with stated
// post-conditions (tested in test/test_layout.cpp).
//
//  group_by_dims   split a layout's shard iters per buffer dimension
//  region_layout   the layout of a buffer region, over the region's own
//                  row-major index (with the region start as an offset)
//  broadcast_to    NumPy broadcasting of a region layout (stride-0 iters)
//  joint_refine    the common refinement of several layouts over one index
//                  space: the iters where every operand is a single stride
//  coalesce        fuse adjacent joint iters contiguous for every operand
//  thread axes     scope-relative thread index of a layout's thread iters
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tx/ir.hpp"
#include "tx/lowering/analysis.hpp"

namespace tx::lowering {

using Extents = std::vector<std::int64_t>;

// Post: result[d] multiplies to shape[d]; concatenating result equals the
// input iters with some iters split in two (outer part first). Fails when an
// iter straddles a dimension boundary without dividing it.
std::optional<std::vector<std::vector<Iter>>> group_by_dims(const std::vector<Iter>& iters,
                                                            const Extents& shape,
                                                            std::string* why = nullptr);

struct RegionLayout {
  Extents extents;                      // the region's extents, one per buffer dimension
  std::vector<std::vector<Iter>> dims;  // per dimension, iters outer -> inner (no extent-1 iters)
  std::vector<Iter> replica;            // the buffer layout's replicas
  Expr mem_offset;  // memory-axis offset of the region start (i32, may be dynamic), before the
                    // swizzle
  std::optional<Swizzle> swizzle;  // the buffer's swizzle, applied to the whole memory offset
  std::array<std::int64_t, kNumAxes> thread_offset{};  // region start on thread axes

  std::vector<Iter> flat() const;  // all iters, outer -> inner
  std::int64_t numel() const;
};

// Post: for every coordinate c of the region, the buffer layout's locations
// of (start + c) equal region_layout's locations of c: the memory offset
// added, then the swizzle applied (address(l, inner(c))).
// A swizzled buffer is refused (with a reason in *why) unless the caller says
// it forms every address through address(): a variant that adds offsets by
// hand would otherwise miss the XOR and move the wrong elements.
struct RegionOptions {
  bool allow_swizzle = false;
};
std::optional<RegionLayout> region_layout(const BufferRegion& r, const Env& env,
                                          std::string* why = nullptr, RegionOptions opt = {});

// sw(x) as an expression (BitXor / Shr / BitAnd; constants fold).
Expr swizzle_expr(const Swizzle& sw, Expr x);
// The element offset in the buffer's flat storage of the region element whose
// pre-swizzle offset relative to the region start is `inner`:
// sw(mem_offset + inner), or mem_offset + inner without a swizzle.
Expr address(const RegionLayout& l, Expr inner);
// The widest run of elements (a power of two) that stays contiguous and
// aligned through the region's swizzle: 2^base, or no limit without one.
int swizzle_vector_cap(const RegionLayout& l);

// Region extents with extent-1 dimensions dropped (copy operands must agree on these).
Extents squeeze(const Extents& e);

// Broadcast `l` (NumPy rules, right-aligned) to `target` extents: missing or
// extent-1 dimensions become one stride-0 iter of the target extent.
std::optional<RegionLayout> broadcast_to(const RegionLayout& l, const Extents& target,
                                         std::string* why = nullptr);
std::optional<Extents> broadcast_shapes(const Extents& a, const Extents& b);

struct JointIter {
  std::int64_t extent = 1;
  std::vector<Iter> parts;  // per operand: stride and axis (extent == this extent)
};

// Post: for every operand i and linear index x in [0, total), the sum over
// joint iters of ((x / inner_k) % extent_k) * parts[i].stride on parts[i].axis
// equals operand i's layout applied to x. Fails when the operands' iter
// boundaries do not form a divisibility chain.
std::optional<std::vector<JointIter>> joint_refine(const std::vector<std::vector<Iter>>& operands,
                                                   std::int64_t total, std::string* why = nullptr);

// Fuses adjacent joint iters (outer a, inner b) where, for every operand,
// a.stride == b.extent * b.stride on the same axis.
std::vector<JointIter> coalesce(const std::vector<JointIter>& iters);

// ---------------------------------------------------------------- threads

// Multiplier that turns a stride on `axis` into a stride of the
// scope-relative thread index, or nullopt when the axis is not a thread of
// that scope (e.g. warpid inside a warp).
std::optional<std::int64_t> thread_axis_multiplier(Axis axis, ExecScope scope);
// Exclusive upper bound of an axis' values in a CTA of `cta_threads`.
std::int64_t axis_limit(Axis axis, int cta_threads);

// The thread index relative to the scope's first thread (laneid for a warp,
// tid_in_wg for a warpgroup, threadIdx.x for a CTA, 0 for a thread).
Expr scope_thread_index(ExecScope scope);

// A thread iter in scope-relative units.
struct ThreadIter {
  std::int64_t extent;
  std::int64_t stride;  // on the scope-relative thread index
  bool replica;
};

// Checks that `iters` (thread shard iters plus thread replicas) map the
// scope's `threads` threads one-to-one: sorted by stride they form a
// mixed-radix number 1, e0, e0*e1, ... whose product is `threads`.
// Returns a reason when they do not.
std::optional<std::string> check_thread_cover(std::vector<ThreadIter> iters, std::int64_t threads,
                                              const std::string& axis_desc);

// Coordinate of a thread iter for the running thread: (rel / stride) % extent.
Expr thread_coord(const Expr& rel, std::int64_t stride, std::int64_t extent);

// Offset of mixed-radix loop index `f` over `atoms` (outer -> inner) with
// per-atom strides.
Expr mixed_radix_offset(const Expr& f, const std::vector<std::int64_t>& extents,
                        const std::vector<std::int64_t>& strides);

// Memory offset of a logical coordinate through per-dimension iters
// (memory-axis iters only; thread iters must have been excluded).
// In `index` arithmetic: i64 for buffers of 2^31 elements or more, whose
// offsets (and constant folds of them) must not wrap at 32 bits.
Expr offset_of_coords(const std::vector<std::vector<Iter>>& dims, const std::vector<Expr>& coords,
                      DType index = i32);

}  // namespace tx::lowering
