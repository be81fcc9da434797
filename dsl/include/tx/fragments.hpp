// Register fragment layouts of the warp tensor-core instructions, as
// ordinary TileLayouts over laneid (the reference system's way: a fragment
// is a layout, and dispatch checks a register tile against it).
//
// With g = laneid / 4, t = laneid % 4 and E elements per 32-bit register
// word (2 for f16 / bf16, 4 for fp8), the m16n8k(8E) mma.sync operands are
//   C / D (16 x 8, f32):  register i = (row g + 8 (i / 2), col 2 t + i % 2)
//                         S[(2, 8, 4, 2) : (2, 4@laneid, 1@laneid, 1)]
//   A (16 x 8E):          word j, element e = (row g + 8 (j % 2),
//                                              col E t + 4E (j / 2) + e)
//   B (8E x 8):           word j, element e = (row E t + 4E j + e, col g)
// (PTX ISA, "Matrix fragments for mma.m16n8k16 / m16n8k32"). A warp tile is
// a grid of instruction tiles; each tile's registers are consecutive, tiles
// in row-major order of the grid: frag::mma_c(64, 64) is 4 x 8 tiles of 4
// registers, 128 per lane.
//
// The same fragments are what ldmatrix gives (copy/ldstmatrix): A from a
// row-major (M, K) shared tile, B from a row-major (K, N) tile with .trans
// (16-bit types), or from a K-contiguous one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tx/dtype.hpp"
#include "tx/error.hpp"
#include "tx/layout.hpp"

namespace tx::frag {

namespace detail {
inline int per_word(DType t, const char* what) {
  if (t.bytes() == 2) return 2;
  if (t.bytes() == 1) return 4;
  fail(std::string("tx::frag::") + what, "", {},
       "dtype " + t.name() + ": tensor-core fragments hold 16-bit or 8-bit elements");
}
inline void check_multiple(std::int64_t v, std::int64_t m, const char* what, const char* dim) {
  if (v <= 0 || v % m != 0)
    fail(std::string("tx::frag::") + what, "", {},
         std::string(dim) + " = " + std::to_string(v) + " is not a positive multiple of " +
             std::to_string(m));
}
}  // namespace detail

// The f32 accumulator (C / D) of an (m, n) warp tile: m % 16 == 0, n % 8 == 0.
inline TileLayout mma_c(std::int64_t m, std::int64_t n) {
  detail::check_multiple(m, 16, "mma_c", "m");
  detail::check_multiple(n, 8, "mma_c", "n");
  return TileLayout(S({m / 16, 2, 8, n / 8, 4, 2}, {4 * (n / 8), 2, 4 * laneid, 4, 1 * laneid, 1}));
}

// A per-row vector of the accumulator frag::mma_c(m, n): an (m, 1) tile
// whose row r lives in the lanes that hold row r of the accumulator (lane
// group g = lane / 4 holds rows g and g + 8 of each 16-row tile), copied in
// the four lanes of the group. Row reductions of the accumulator land here
// (Tx::warp::max(rmax, acc): each lane folds its registers of the row, then
// two shuffles within the group) and it broadcasts back along the rows
// (Tx::warp::mul(acc, acc, rscale)). Registers: m / 8 per lane.
inline TileLayout mma_row(std::int64_t m) {
  detail::check_multiple(m, 16, "mma_row", "m");
  return TileLayout(S({m / 16, 2, 8, 1}, {2, 1, 4 * laneid, 1}), R({4}, {1 * laneid}));
}

// The A operand of an (m, k) warp tile of dtype t: m % 16, k % 8E == 0.
inline TileLayout mma_a(std::int64_t m, std::int64_t k, DType t) {
  const std::int64_t e = detail::per_word(t, "mma_a");
  detail::check_multiple(m, 16, "mma_a", "m");
  detail::check_multiple(k, 8 * e, "mma_a", "k");
  const std::int64_t kt = k / (8 * e);
  return TileLayout(
      S({m / 16, 2, 8, kt, 2, 4, e}, {4 * e * kt, e, 4 * laneid, 4 * e, 2 * e, 1 * laneid, 1}));
}

// The B operand of a (k, n) warp tile of dtype t: k % 8E, n % 8 == 0.
inline TileLayout mma_b(std::int64_t k, std::int64_t n, DType t) {
  const std::int64_t e = detail::per_word(t, "mma_b");
  detail::check_multiple(k, 8 * e, "mma_b", "k");
  detail::check_multiple(n, 8, "mma_b", "n");
  const std::int64_t kt = k / (8 * e);
  return TileLayout(S({kt, 2, 4, e, n / 8, 8}, {2 * e, e, 1 * laneid, 1, 2 * e * kt, 4 * laneid}));
}

}  // namespace tx::frag

namespace tx::layouts {

// A swizzled shared layout for a stack of (rows x cols) tiles of `t`:
// shape {..., rows, cols}, the leading dimensions stacked one tile after
// another. Rows are cut into 128-byte panels (a (32, 128) bf16 tile is two
// (32, 64) panels side by side) and each panel is swizzled in 16-byte chunks
// by its 128-byte line index: Sw<bits, log2(16 / size), 3> with 2^bits
// chunks per row (at most 8). Then the 8 rows an ldmatrix reads and the
// chunks a quarter-warp's cp.async writes land in 8 different 16-byte bank
// groups, with no padding. Needs cols * size a power of two >= 32 bytes (or a
// multiple of 128), and rows a multiple of 8 when rows are cut into panels.
inline TileLayout swizzled_tiles(const std::vector<std::int64_t>& shape, DType t) {
  const char* what = "tx::layouts::swizzled_tiles";
  if (shape.size() < 2) fail(what, "", {}, "needs at least (rows, cols)");
  const std::int64_t rows = shape[shape.size() - 2], cols = shape.back();
  const int size = t.bytes();
  if (size > 16 || 16 % size != 0)
    fail(what, "", {}, "dtype " + t.name() + " does not divide a 16-byte chunk");
  const std::int64_t row_bytes = cols * size;
  auto log2 = [](std::int64_t v) {
    int b = 0;
    while ((std::int64_t{1} << b) < v) ++b;
    return (std::int64_t{1} << b) == v ? b : -1;
  };
  const int base = log2(16 / size);
  const std::int64_t panel = 128 / size;  // elements in a 128-byte line
  std::vector<std::int64_t> ext;
  std::vector<AxisStride> str;
  std::int64_t tile = rows * cols;
  int bits = 0;
  if (row_bytes <= 128) {
    if (row_bytes < 32 || log2(row_bytes) < 0)
      fail(what, "", {},
           "rows of " + std::to_string(row_bytes) + " bytes: a swizzle needs 32, 64 or 128");
    bits = log2(row_bytes / 16);
    ext = {rows, cols};
    str = {cols, 1};
  } else {
    if (row_bytes % 128 != 0 || rows % 8 != 0)
      fail(what, "", {},
           "rows of " + std::to_string(row_bytes) + " bytes over " + std::to_string(rows) +
               " rows: 128-byte panels need a multiple of 128 bytes and of 8 rows");
    bits = 3;
    ext = {rows, cols / panel, panel};
    str = {panel, rows * panel, 1};
  }
  for (std::size_t d = shape.size() - 2; d-- > 0;) {
    ext.insert(ext.begin(), shape[d]);
    str.insert(str.begin(), AxisStride(tile));
    tile *= shape[d];
  }
  return TileLayout(S(ext, str)).swizzled(make_swizzle(bits, base, 3));
}

}  // namespace tx::layouts

namespace tx::frag {

// The f32 accumulator of warpgroup MMA (wgmma.m64nNk16 / k32) for an (m, n)
// tile held by a warpgroup: m % 64 == 0 (m / 64 instructions stacked),
// n % 8 == 0, n <= 256. With w = the warp in the warpgroup, g = lane / 4,
// t = lane % 4, register i of each 64-row block holds
//   (row 16 w + g + 8 ((i / 2) % 2), col 8 (i / 4) + 2 t + i % 2)
// (PTX ISA, "Matrix fragments for wgmma.m64nNk16"): the m16n8 accumulator
// of mma.sync, one 16-row band per warp. Registers: n / 2 per 64 rows.
inline TileLayout wgmma_c(std::int64_t m, std::int64_t n) {
  detail::check_multiple(m, 64, "wgmma_c", "m");
  detail::check_multiple(n, 8, "wgmma_c", "n");
  if (n > 256)
    fail("tx::frag::wgmma_c", "", {}, "n = " + std::to_string(n) + " exceeds wgmma's 256");
  return TileLayout(
      S({m / 64, 4, 2, 8, n / 8, 4, 2}, {n / 2, 1 * wid_in_wg, 2, 4 * laneid, 4, 1 * laneid, 1}));
}

// A per-row vector of the warpgroup accumulator frag::wgmma_c(m, n): an
// (m, 1) tile whose row r lives in the threads that hold row r of the
// accumulator, copied in the four lanes of a quad (the mma_row of each
// warp's 16-row band). The softmax statistics of attention live here: a row
// reduction of the accumulator (Tx::warpgroup::max(m_i, S)) folds each
// thread's registers of the row and then shuffles across the quad; an
// elementwise op broadcasts it back along the rows (Tx::warpgroup::mul(O, O,
// alpha), Tx::warpgroup::exp2(S, S, {.bias = neg_m})). Registers: m / 32
// per thread.
inline TileLayout wgmma_row(std::int64_t m) {
  detail::check_multiple(m, 64, "wgmma_row", "m");
  return TileLayout(S({m / 64, 4, 2, 8, 1}, {2, 1 * wid_in_wg, 1, 4 * laneid, 1}),
                    R({4}, {1 * laneid}));
}

// A per-column vector of the warpgroup accumulator frag::wgmma_c(m, n): a
// (1, n) tile whose column c lives in the threads that hold column c of the
// accumulator (lane % 4 picks the column pair of each 8-column block),
// copied in every warp and every quad row. Per-column factors of an
// epilogue (a scale per output column: torch._scaled_mm's row-wise recipe,
// a bias) are loaded here and broadcast down the rows by an elementwise op
// (Tx::warpgroup::mul(C, C, col_scale)). Registers: n / 4 per thread.
inline TileLayout wgmma_col(std::int64_t n) {
  detail::check_multiple(n, 8, "wgmma_col", "n");
  if (n > 256)
    fail("tx::frag::wgmma_col", "", {}, "n = " + std::to_string(n) + " exceeds wgmma's 256");
  return TileLayout(S({1, n / 8, 4, 2}, {1, 2, 1 * laneid, 1}),
                    R({4, 8}, {1 * wid_in_wg, 4 * laneid}));
}

// The A operand of warpgroup MMA from registers (wgmma's register-A form)
// for an (m, k) tile of dtype t held by a warpgroup: m % 64 == 0, k a
// multiple of the instruction's K (16 for f16 / bf16, 32 for fp8). Warp w
// holds rows 16 w .. 16 w + 15 of each 64-row block in mma.sync's A layout
// (mma_a above): word j, element e of a K step = (row 16 w + g + 8 (j % 2),
// col E t + 4E (j / 2) + e) (PTX ISA, "Register fragment for matrix A" of
// wgmma). Per 64 rows: k / (8E) K steps of 4 words, in K order.
inline TileLayout wgmma_a(std::int64_t m, std::int64_t k, DType t) {
  const std::int64_t e = detail::per_word(t, "wgmma_a");
  detail::check_multiple(m, 64, "wgmma_a", "m");
  detail::check_multiple(k, 8 * e, "wgmma_a", "k");
  const std::int64_t kt = k / (8 * e);
  return TileLayout(S({m / 64, 4, 2, 8, kt, 2, 4, e},
                      {4 * e * kt, 1 * wid_in_wg, e, 4 * laneid, 4 * e, 2 * e, 1 * laneid, 1}));
}

}  // namespace tx::frag
