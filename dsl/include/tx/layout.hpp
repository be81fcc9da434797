// Tile layouts: where each logical element of a buffer lives.
//
// A TileLayout is a list of shard iters (extent, stride, axis), a list of
// replica iters, and an offset per axis. A logical coordinate is flattened
// row-major over the buffer shape and split across the shard extents
// (innermost last); part k times stride k lands on axis k. Replica iters add
// every combination of their values, so one element may live in several
// places (e.g. in every lane). Axis `m` is memory; the others are thread axes.
//
//   TileLayout(S({32, 8}, {1 * laneid, 1}))   // lane i owns row i (8 registers)
//   TileLayout(S({4}), R({32}, {laneid}))     // 4 values held by every lane
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace tx {

enum class Axis : std::uint8_t { m, laneid, warpid, tx, wgid, tid_in_wg, wid_in_wg };
inline constexpr int kNumAxes = 7;

const char* axis_name(Axis a);
inline bool is_thread_axis(Axis a) { return a != Axis::m; }

// A stride on a named axis: `2 * laneid`, `laneid`, or a plain integer (memory).
struct AxisStride {
  std::int64_t stride = 1;
  Axis axis = Axis::m;
  constexpr AxisStride(std::int64_t s) : stride(s) {}  // NOLINT: implicit by design
  constexpr AxisStride(int s) : stride(s) {}           // NOLINT: implicit by design
  constexpr AxisStride(std::int64_t s, Axis a) : stride(s), axis(a) {}
};

struct AxisTag {
  Axis axis;
  constexpr operator AxisStride() const { return {1, axis}; }  // NOLINT
};
constexpr AxisStride operator*(std::int64_t k, AxisTag t) { return {k, t.axis}; }
constexpr AxisStride operator*(AxisTag t, std::int64_t k) { return {k, t.axis}; }

namespace axes {
inline constexpr AxisTag m{Axis::m};
inline constexpr AxisTag laneid{Axis::laneid};
inline constexpr AxisTag warpid{Axis::warpid};
inline constexpr AxisTag tx{Axis::tx};
inline constexpr AxisTag wgid{Axis::wgid};
inline constexpr AxisTag tid_in_wg{Axis::tid_in_wg};
inline constexpr AxisTag wid_in_wg{Axis::wid_in_wg};
}  // namespace axes
using axes::laneid;
using axes::tid_in_wg;
using axes::wgid;
using axes::wid_in_wg;
using axes::warpid;

struct Iter {
  std::int64_t extent = 1;
  std::int64_t stride = 1;
  Axis axis = Axis::m;
  bool operator==(const Iter&) const = default;
};

// One place an element lives: a coordinate on every axis.
using Location = std::array<std::int64_t, kNumAxes>;

struct ShardSpec {
  std::vector<Iter> iters;
};
struct ReplicaSpec {
  std::vector<Iter> iters;
};

// S({32, 8}, {1 * laneid, 1}); S({32, 8}) is row-major on memory.
ShardSpec S(std::vector<std::int64_t> extents, std::vector<AxisStride> strides = {});
// R({32}, {laneid}): every value of the replica iters holds a copy.
ReplicaSpec R(std::vector<std::int64_t> extents, std::vector<AxisStride> strides);

// An XOR swizzle of memory offsets, in elements (CuTe's Swizzle<B, M, S>):
//   sw(x) = x ^ ((x >> shift) & (((1 << bits) - 1) << base))
// flips bits [base, base + bits) of x by bits [base + shift, base + shift +
// bits). Chunks of 2^base elements stay contiguous and aligned; rows of
// 2^(base + shift) elements are permuted chunk-wise by the row index mod
// 2^bits, so a column of chunks falls in distinct bank groups. The shared
// tiles of tensor-core kernels use it instead of padding: for 16-bit data
// (16-byte chunks, base = 3) Sw<1,3,3> for 32-byte rows, Sw<2,3,3> for 64-byte
// rows and Sw<3,3,3> for 128-byte rows (layouts::swizzled_tiles picks one).
// Laws (test/test_layout.cpp): sw is an involution, a bijection on each
// aligned block of period() elements, keeps bits below base and above base +
// bits, and commutes with adding a multiple of period().
struct Swizzle {
  int bits = 0, base = 0, shift = 0;

  std::int64_t apply(std::int64_t x) const {
    return x ^ ((x >> shift) & (((std::int64_t{1} << bits) - 1) << base));
  }
  // The block sw maps onto itself: 2^(base + shift + bits) elements.
  std::int64_t period() const { return std::int64_t{1} << (base + shift + bits); }
  // sw(x) stays in x's aligned block of 2^(base + bits) elements.
  std::int64_t span() const { return std::int64_t{1} << (base + bits); }
  std::string str() const;  // Sw<3,3,3>
  bool operator==(const Swizzle&) const = default;
};
// Validated: 0 <= bits, 0 <= base, bits <= shift, base + shift + bits <= 30.
Swizzle make_swizzle(int bits, int base, int shift);

class TileLayout {
 public:
  TileLayout() = default;
  TileLayout(ShardSpec shard);  // NOLINT: implicit so S(...) reads as a layout
  TileLayout(ShardSpec shard, ReplicaSpec replica);
  TileLayout(std::vector<Iter> shard, std::vector<Iter> replica = {},
             std::array<std::int64_t, kNumAxes> offset = {});

  // Row-major layout of a shape on memory.
  static TileLayout row_major(const std::vector<std::int64_t>& shape);

  const std::vector<Iter>& shard() const { return shard_; }
  const std::vector<Iter>& replica() const { return replica_; }
  const std::array<std::int64_t, kNumAxes>& offsets() const { return offset_; }
  std::int64_t offset(Axis a) const { return offset_[static_cast<int>(a)]; }
  TileLayout with_offset(Axis a, std::int64_t off) const;

  // The same layout with its memory coordinate swizzled (applied last, after
  // shards, replicas and offsets; thread axes are untouched). Only shared
  // buffers may carry one. A swizzle of 0 bits is the identity and is dropped.
  TileLayout swizzled(Swizzle sw) const;
  const std::optional<Swizzle>& swizzle() const { return swizzle_; }
  // The layout before its swizzle.
  TileLayout unswizzled() const;

  // Number of logical elements the shard iters cover.
  std::int64_t size() const;
  bool has_thread_axes() const;
  bool uses_axis(Axis a) const;

  // Drop extent-1 iters; fuse adjacent iters on one axis where
  // e[k+1] * s[k+1] == s[k]; keep the swizzle. apply() is unchanged by
  // canonicalization.
  TileLayout canonical() const;

  // Every location of the element at this flattened logical index.
  std::vector<Location> apply_linear(std::int64_t index) const;
  // Every location of the element at this logical coordinate of `shape`.
  std::vector<Location> apply(const std::vector<std::int64_t>& coord,
                              const std::vector<std::int64_t>& shape) const;

  // The per-thread (storage) view: thread iters, replicas and offsets
  // dropped (the swizzle kept). Its cosize is the number of registers (or
  // elements) one thread keeps.
  TileLayout storage() const;
  // 1 + the largest memory-axis coordinate over all elements (with a
  // swizzle: rounded up to the swizzle's span(), which sw never leaves).
  std::int64_t cosize() const;

  // Why this layout cannot describe a buffer of `shape`, or nullopt when it can.
  std::optional<std::string> mismatch(const std::vector<std::int64_t>& shape) const;

  // Seed spelling: S[(32, 8) : (1@laneid, 1)] + R[...] + offset; a swizzled
  // layout prints as Sw<3,3,3>(S[...] + ...).
  std::string str() const;
  bool operator==(const TileLayout&) const = default;

 private:
  std::vector<Iter> shard_;
  std::vector<Iter> replica_;
  std::array<std::int64_t, kNumAxes> offset_{};
  std::optional<Swizzle> swizzle_;
};

}  // namespace tx
