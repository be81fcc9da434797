// tx::ops::grouped_matmul: a mixture-of-experts layer's GEMM, every expert
// in one launch. The tokens arrive sorted by expert (rows of a), expert e
// owning rows [offsets[e - 1], offsets[e]); the counts live on the device,
// so the kernel, not the host, turns them into work:
// - the Hopper kernel is hopper_kernel of matmul.cpp (read that first: TMA
//   ring, producer / consumer warpgroups, wgmma, TMA-store epilogue) with a
//   different tile scheduler. Its work items are (row tile, column tile)
//   pairs where the row tiles are every expert's rows cut into bm-row tiles
//   (an expert of 300 rows has three 128-row tiles, the last of 44 rows);
//   persistent CTA c takes items c, c + ctas, ... (in groups of 8 row
//   tiles, column by column, as matmul's scheduler). Each thread finds its
//   item's expert by walking the E offsets (uniform scalar work, a few
//   hundred instructions per tile against the tile's tens of microseconds).
//   A row tile that ends inside its expert reads the next expert's rows
//   into the MMA; those rows' results are not stored (where=), so the last
//   tile of an expert costs a whole tile -- the waste is below one tile per
//   expert. B's tiles are boxes of the 3-d (E, K, N) tensor: the TMA fills
//   what lies past K with zeros inside the expert's slab.
// - the SIMT kernel: one thread per output element, its expert found the
//   same way, an f32 sum over K (the host, other GPUs, other shapes).
#include <cstdio>
#include <mutex>

#include "hopper_mainloop.hpp"
#include "special_ops.hpp"
#include "tx/builder.hpp"
#include "tx/fragments.hpp"
#include "tx/ops/matmul.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::ops {

namespace {

using SourceLoc = std::source_location;
constexpr const char* kOp = "tx.ops.grouped_matmul";

// Where an expert's rows are: a running scan over the offsets, clamped so
// that ends never decrease and never pass the token count (memory stays in
// range whatever the offsets hold).
struct ExpertRows {
  Var expert, row0, rows;  // rows: how many of the tile's rows are the expert's (may be <= 0)
};

// The expert of row tile `mt` (in the order experts, then their bm-row
// tiles) and the tile's first row. `found` false when mt is past the last
// tile. Uses `scan` (5 local i32): end so far, tiles so far, and the result.
ExpertRows find_row_tile(const TileBuffer& offs, const TileBuffer& scan, std::int64_t E,
                         std::int64_t bm, const Expr& tokens, const Expr& mt) {
  scan(0) = 0;  // the previous expert's (clamped) end
  scan(1) = 0;  // row tiles of the experts before e
  scan(2) = 0;
  scan(3) = 0;
  scan(4) = 0;
  for (Var e : T::serial(E, "e")) {
    auto end = T::let(min(max(offs(e), scan(0)), tokens), "end");
    auto n = T::let(ceildiv(end - scan(0), bm), "n_tiles");
    T::if_(mt >= scan(1) && mt < scan(1) + n, [&] {
      scan(2) = e;
      scan(3) = scan(0) + (mt - scan(1)) * bm;
      scan(4) = end - scan(3);
    });
    scan(1) = scan(1) + n;
    scan(0) = end;
  }
  // (min / max state what holds, for the range analysis.)
  return {T::let(min(max(scan(2), 0), E - 1), "expert"), T::let(max(scan(3), 0), "row0"),
          T::let(Expr(scan(4)), "rows")};
}

// Row tiles over all experts: sum of ceil(rows_e / bm).
Var count_row_tiles(const TileBuffer& offs, const TileBuffer& scan, std::int64_t E, std::int64_t bm,
                    const Expr& tokens) {
  scan(0) = 0;
  scan(1) = 0;
  for (Var e : T::serial(E, "e")) {
    auto end = T::let(min(max(offs(e), scan(0)), tokens), "end");
    scan(1) = scan(1) + ceildiv(end - scan(0), bm);
    scan(0) = end;
  }
  return T::let(Expr(scan(1)), "row_tiles");
}

constexpr std::int64_t kGroup = 8;  // row tiles per group of the item order

PrimFunc hopper_grouped_kernel(std::int64_t E, std::int64_t N, std::int64_t K, DType t,
                               const MatmulTiling& c, std::int64_t ctas, bool b_nk) {
  const std::int64_t BM = c.bm, BN = c.bn, BK = c.bk, STAGES = c.stages;
  const std::int64_t consumers = BM / 64, KT = (K + BK - 1) / BK, TN = (N + BN - 1) / BN;
  const DType out_t = t.is_fp8() ? f32 : t;
  const bool promote = t.is_fp8();
  const bool tma_store = c.tma_store && out_t == t;
  const std::string name =
      "grouped_matmul_wgmma_" + t.short_name() + (b_nk ? "_nt" : "") + "_bm" + std::to_string(BM);
  return T::prim_func_n(name, {"a", "b", "c", "offsets"}, [&](const std::vector<Handle>& h) {
    Var tokens = T::dim("tokens", {.min = 1});
    auto A = T::match_buffer(h[0], {tokens, K}, t, std::nullopt, "A");
    auto B = b_nk ? T::match_buffer(h[1], {E, N, K}, t, std::nullopt, "B")
                  : T::match_buffer(h[1], {E, K, N}, t, std::nullopt, "B");
    auto C = T::match_buffer(h[2], {tokens, N}, out_t, std::nullopt, "C");
    auto Offs = T::match_buffer(h[3], {E}, i32, std::nullopt, "offsets");
    T::no_alias();
    T::device_entry();
    auto cta = T::cta_id({ctas});
    auto wg = T::warpgroup_id({1 + consumers});
    auto tid = T::thread_id_in_wg({128});
    auto As = T::alloc_buffer({STAGES, BM, BK}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BM, BK}, t));
    const std::int64_t b_rows = b_nk ? BN : BK, b_cols = b_nk ? BK : BN;
    auto Bs = T::alloc_buffer({STAGES, b_rows, b_cols}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, b_rows, b_cols}, t));
    auto b_stage = [&](const Expr& s) { return Bs[region(span(s, 1), {0, b_rows}, {0, b_cols})]; };
    TileBuffer Cs;
    if (tma_store)
      Cs = T::alloc_buffer({BM, BN}, t, scope::shared, layouts::swizzled_tiles({BM, BN}, t));
    auto pipe = T::pipeline(
        {.stages = static_cast<int>(STAGES), .consumer_arrivals = static_cast<int>(consumers)});
    // Both sides count the work the same way, each in its own registers.
    auto scan = T::alloc_buffer({5}, i32, scope::local, std::nullopt, "scan");
    auto row_tiles = count_row_tiles(Offs, scan, E, BM, tokens);
    auto rounds = T::let(ceildiv(row_tiles * TN, ctas), "rounds");
    struct Item {
      Var valid, n0;
      ExpertRows x;
    };
    // Items in groups of kGroup row tiles (as matmul's tile scheduler): a
    // group's items go down its row tiles first, then across the columns, so
    // the CTAs of one round share a few A and B tiles in L2 rather than one
    // A row tile and every column tile of B (an expert's whole matrix).
    auto item_of = [&](const Var& r) {
      auto i = T::let(max(cta + r * ctas, 0), "item");  // (max: for the range analysis)
      auto valid = T::let(i < row_tiles * TN, "valid");
      auto first = T::let(i / (kGroup * TN) * kGroup, "group_row");
      auto group_rows = T::let(max(min(row_tiles - first, kGroup), 1), "group_rows");
      auto local = T::let(i % (kGroup * TN), "local");
      auto n0 = T::let(min(local / group_rows, TN - 1) * BN, "n0");
      return Item{valid, n0, find_row_tile(Offs, scan, E, BM, tokens, first + local % group_rows)};
    };
    T::if_(wg == 0, [&] {
      T::cuda::decrease_registers(40);
      for (Var r : T::serial(rounds, "r")) {
        Item w = item_of(r);
        T::if_(w.valid, [&] {
          detail::hopper_tile_producer(
              pipe, r, KT, tid, [&](const Var& kt, const Expr& s, const BufferElem& full) {
                Tx::warpgroup::copy_async(As[region(span(s, 1), {0, BM}, {0, BK})],
                                          A[region(span(w.x.row0, BM), span(kt * BK, BK))],
                                          {.barrier = full, .partial = true});
                Tx::warpgroup::copy_async(
                    b_stage(s),
                    b_nk ? B[region(span(w.x.expert, 1), span(w.n0, BN), span(kt * BK, BK))]
                         : B[region(span(w.x.expert, 1), span(kt * BK, BK), span(w.n0, BN))],
                    {.barrier = full, .partial = true});
              });
        });
      }
    }).else_([&] {
      T::cuda::increase_registers(232);
      auto acc = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN));
      TileBuffer total;  // fp8: the sum of the K steps' partial tiles (matmul.cpp says why)
      if (promote)
        total = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN), "total");
      TileBuffer out;
      if (out_t != f32)
        out = T::alloc_buffer({64, BN}, t, scope::local, frag::wgmma_c(64, BN), "out");
      auto row0 = T::let(max(wg - 1, 0) * 64);
      for (Var r : T::serial(rounds, "r")) {
        Item w = item_of(r);
        T::if_(w.valid, [&] {
          detail::hopper_tile_mainloop(
              {.pipe = pipe, .As = As, .b_stage = b_stage, .bk = BK, .k_steps = KT, .b_nk = b_nk},
              r, row0, tid, acc, total);
          // This warpgroup's 64 rows: those past the expert's end are the
          // next expert's (or past T) and are not written.
          auto first = T::let(w.x.row0 + row0, "first"), left = T::let(w.x.rows - row0, "left");
          auto c_rows = C[region(span(first, 64), span(w.n0, BN))];
          auto mine_only = [&](Expr i, Expr) { return i < left; };
          if (promote) {
            Tx::warpgroup::copy(c_rows, total, {.partial = true, .where = mine_only});
          } else if (tma_store) {
            // Through shared memory either way: a warpgroup whose 64 rows all
            // belong to the expert hands them to a TMA store that drains under
            // the next tile's MMAs (as matmul's epilogue); the last rows of an
            // expert are copied out of shared memory, masked. (Choosing between
            // a TMA store and masked stores from registers keeps the
            // accumulator live into both and ptxas spills.)
            auto staged = Cs[region(span(row0, 64), {0, BN})];
            Tx::warpgroup::cast(out, acc);
            T::cuda::tma_store_wait(0);
            T::cuda::warpgroup_sync();
            Tx::warpgroup::copy(staged, out);
            T::if_(left >= 64, [&] {
              Tx::warpgroup::copy_async(c_rows, staged, {.partial = true});
            }).else_([&] {
              // Element by element, consecutive threads on consecutive columns.
              T::cuda::warpgroup_sync();
              for (Var e : T::serial(64 * BN / 128, "e")) {
                auto i = T::let((tid + e * 128) / BN, "i"), j = T::let((tid + e * 128) % BN, "j");
                T::if_(i < left && first + i < tokens && w.n0 + j < N,
                       [&] { C(first + i, w.n0 + j) = Cs(row0 + i, j); });
              }
            });
          } else {
            Tx::warpgroup::cast(out, acc);
            Tx::warpgroup::copy(c_rows, out, {.partial = true, .where = mine_only});
          }
        });
      }
    });
  });
}

// One thread per element of C (T x N): its row's expert from the offsets
// (rows past the last expert's end are not written), then a sum over K in
// increasing k -- in f32 for 16-bit and fp8 inputs, in the dtype's own
// precision for f32 / f64 -- rounded once to C's dtype.
PrimFunc simt_grouped_kernel(std::int64_t E, std::int64_t N, std::int64_t K, DType t) {
  const DType out_t = t.is_fp8() ? f32 : t;
  const DType sum_t = t == f64 ? f64 : f32;
  return T::prim_func_n("grouped_matmul_simt_" + t.short_name(), {"a", "b", "c", "offsets"},
                        [&](const std::vector<Handle>& h) {
                          Var tokens = T::dim("tokens", {.min = 1});
                          auto A = T::match_buffer(h[0], {tokens, K}, t, std::nullopt, "A");
                          auto B = T::match_buffer(h[1], {E, K, N}, t, std::nullopt, "B");
                          auto C = T::match_buffer(h[2], {tokens, N}, out_t, std::nullopt, "C");
                          auto Offs = T::match_buffer(h[3], {E}, i32, std::nullopt, "offsets");
                          T::device_entry();
                          auto cta = T::cta_id({ceildiv(tokens * N, 256)});
                          auto tid = T::thread_id({256});
                          auto flat = T::let(cta * 256 + tid, "flat");
                          auto i = T::let(flat / N, "i"), j = T::let(flat % N, "j");
                          auto scan = T::alloc_buffer({3}, i32, scope::local, std::nullopt, "scan");
                          scan(0) = 0;   // the previous expert's (clamped) end
                          scan(1) = -1;  // row i's expert
                          for (Var e : T::serial(E, "e")) {
                            auto end = T::let(min(max(Offs(e), scan(0)), tokens), "end");
                            T::if_(scan(1) < 0 && i < end, [&] { scan(1) = e; });
                            scan(0) = end;
                          }
                          auto sum = T::alloc_buffer({1}, sum_t, scope::local);
                          T::if_(i < tokens && scan(1) >= 0, [&] {
                            auto e = T::let(min(max(scan(1), 0), E - 1), "expert");
                            sum(0) = make_float(0.0, sum_t);
                            for (Var k : T::serial(K, "k"))
                              sum(0) = sum(0) + cast(A(i, k), sum_t) * cast(B(e, k, j), sum_t);
                            C(i, j) = cast(sum(0), out_t);
                          });
                        });
}

struct Operands {
  std::int64_t T, E, N, K;
  DType t, out_t;
  bool b_nk;  // b is the transpose of a row-major (E, N, K) tensor
};

// b given as the transpose of a row-major (E, N, K) tensor: strides (N K, 1, K).
bool transposed_experts(const Tensor& b) {
  if (b.is_contiguous() || b.shape().size() != 3) return false;
  const auto& s = b.shape();
  const auto& st = b.strides();
  return st[0] == s[1] * s[2] && st[1] == 1 && st[2] == s[1];
}

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

Operands check(const Tensor& a, const Tensor& b, const Tensor& offsets, SourceLoc loc) {
  for (auto [x, name] : {std::pair{&a, "a"}, std::pair{&b, "b"}, std::pair{&offsets, "offsets"}})
    if (!x->defined()) fail(kOp, name, loc, "an undefined tensor");
  if (a.shape().size() != 2)
    fail(kOp, "a", loc, "shape " + shape_str(a.shape()) + ": the tokens are a (T, K) matrix");
  if (b.shape().size() != 3)
    fail(kOp, "b", loc,
         "shape " + shape_str(b.shape()) + ": the experts' matrices are an (E, K, N) tensor");
  if (!a.is_contiguous())
    fail(kOp, "a", loc, "a strided view: pass .contiguous() (the kernel reads row-major tokens)");
  if (!b.is_contiguous() && !transposed_experts(b))
    fail(kOp, "b", loc,
         "a strided view: pass .contiguous() (b is read row-major (E, K, N), or as the "
         "transpose of a row-major (E, N, K) tensor: w.transpose(1, 2))");
  if (a.shape()[1] != b.shape()[1])
    fail(kOp, "b", loc,
         "inner extents differ: a is " + shape_str(a.shape()) + " and b is " +
             shape_str(b.shape()) + " (b is (E, K, N))");
  if (a.dtype() != b.dtype())
    fail(kOp, "b", loc, "dtype " + b.dtype().name() + " differs from a's " + a.dtype().name());
  const DType t = a.dtype();
  if (t != f16 && t != bf16 && t != f8e4m3 && t != f8e5m2 && t != f32 && t != f64)
    fail(kOp, "a", loc,
         "dtype " + t.name() +
             ": grouped_matmul takes float32, float64, f16, bf16, float8_e4m3fn or float8_e5m2");
  if (offsets.dtype() != i32)
    fail(kOp, "offsets", loc,
         "dtype " + offsets.dtype().name() + ": the cumulative row ends are int32");
  if (offsets.shape().size() != 1 || offsets.shape()[0] != b.shape()[0])
    fail(kOp, "offsets", loc,
         "shape " + shape_str(offsets.shape()) + ": one end per expert, (" +
             std::to_string(b.shape()[0]) + ",) for b's " + std::to_string(b.shape()[0]) +
             " experts");
  if (!offsets.is_contiguous()) fail(kOp, "offsets", loc, "a strided view: pass .contiguous()");
  for (auto [x, name] : {std::pair{&b, "b"}, std::pair{&offsets, "offsets"}})
    if (!(x->device() == a.device()))
      fail(kOp, name, loc, "on " + x->device().str() + ", a on " + a.device().str());
  if (b.shape()[0] < 1) fail(kOp, "b", loc, "no experts (E = 0)");
  const std::int64_t T = a.shape()[0], E = b.shape()[0];
  // On the host the offsets are at hand: check them (the GPU kernel clamps).
  if (!offsets.device().is_cuda()) {
    const auto* o = static_cast<const std::int32_t*>(offsets.data_ptr());
    std::int64_t prev = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      if (o[e] < prev || o[e] > T)
        fail(kOp, "offsets", loc,
             "offsets[" + std::to_string(e) + "] = " + std::to_string(o[e]) +
                 (o[e] < prev ? " is below the previous end " + std::to_string(prev)
                              : " passes the " + std::to_string(T) + " rows of a") +
                 " (the cumulative row ends never decrease and stay within T)");
      prev = o[e];
    }
  }
  return {T, E, b.shape()[2], a.shape()[1], t, t.is_fp8() ? f32 : t, transposed_experts(b)};
}

// Why the Hopper kernel cannot run these operands, or "" when it can.
std::string wgmma_refusal(const Operands& o, const Device& d) {
  if (!d.is_cuda()) return "the host has no tensor cores";
  if (o.t == f32 || o.t == f64) return o.t.name() + ": no TF32 or FP64 tensor-core path";
  const runtime::DeviceInfo& dev = runtime::current_device();
  if (dev.cc_major != 9) return dev.arch() + ": the grouped kernel is Hopper's (sm_90)";
  if ((o.K * o.t.bytes()) % 16 != 0)
    return "K = " + std::to_string(o.K) + ": the TMA needs rows of whole 16 bytes";
  if (o.N % 8 != 0) return "N = " + std::to_string(o.N) + ": the TMA needs N % 8 == 0";
  if (o.t.is_fp8() && o.N % 64 != 0)
    return "N = " + std::to_string(o.N) +
           ": the fp8 kernel writes whole 64-column f32 tiles from registers (N % 64 == 0)";
  return "";
}

// The tiling for the experts' average row count.
bool small_experts(const Operands& o) { return o.T <= 64 * o.E; }

struct GroupedCall {
  Kernel kernel;
  bool wgmma = false, b_nk = false;
};

GroupedCall resolve(const Operands& o, const Device& d, SourceLoc loc) {
  GroupedCall call;
  const std::string no = wgmma_refusal(o, d);
  char key[200];
  if (no.empty()) {
    const MatmulTiling& c = detail::grouped_matmul_tiling(o.t, small_experts(o), o.N);
    call.wgmma = true;
    call.b_nk = o.b_nk || o.t.is_fp8();  // wgmma reads 8-bit B K-major only
    const std::int64_t sms = runtime::current_device().sm_count;
    std::snprintf(key, sizeof key, "grouped_matmul|%s|e%lld_n%lld_k%lld|%s|%s|ctas%lld%s",
                  o.t.name().c_str(), static_cast<long long>(o.E), static_cast<long long>(o.N),
                  static_cast<long long>(o.K), c.str().c_str(), d.str().c_str(),
                  static_cast<long long>(sms), call.b_nk ? "|nt" : "");
    call.kernel = detail::special_cached(key, [&] {
      return compile(hopper_grouped_kernel(o.E, o.N, o.K, o.t, c, sms, call.b_nk), {.device = d});
    });
    return call;
  }
  if (d.is_cuda() && o.t != f32 && o.t != f64)
    warn(std::string(kOp) + " at " + loc.file_name() + ":" + std::to_string(loc.line()) +
         ": no tensor-core kernel (" + no + "); using the SIMT kernel");
  std::snprintf(key, sizeof key, "grouped_matmul_simt|%s|e%lld_n%lld_k%lld|%s", o.t.name().c_str(),
                static_cast<long long>(o.E), static_cast<long long>(o.N),
                static_cast<long long>(o.K), d.str().c_str());
  call.kernel = detail::special_cached(
      key, [&] { return compile(simt_grouped_kernel(o.E, o.N, o.K, o.t), {.device = d}); });
  return call;
}

}  // namespace

namespace detail {
PrimFunc grouped_matmul_kernel(std::int64_t E, std::int64_t N, std::int64_t K, DType t,
                               const MatmulTiling& tiling, std::int64_t ctas, bool b_nk) {
  if (!tiling.wgmma)
    fail("tx.ops.detail.grouped_matmul_kernel", "tiling", {},
         tiling.str() + ": the grouped kernel takes wgmma tilings");
  if (t.is_fp8() && !b_nk)
    fail("tx.ops.detail.grouped_matmul_kernel", "b", {},
         "fp8: wgmma reads 8-bit B K-major only (b as (E, N K))");
  return hopper_grouped_kernel(E, N, K, t, tiling, ctas, b_nk);
}
PrimFunc grouped_matmul_simt(std::int64_t E, std::int64_t N, std::int64_t K, DType t) {
  return simt_grouped_kernel(E, N, K, t);
}
// 16-bit: 128 x 256 x 64 with 3 stages and the TMA-store epilogue (matmul's
// first tiling), or 64 x 256 x 64 with 4 (an expert of 16 rows wastes 48 of
// 64 rows, not 112 of 128); 128 columns when N is at most that (half of a
// 256-column tile would be zeros). fp8: bk 128 and bn 128 (two accumulators,
// matmul.cpp says why), f32 out through registers -- a register copy cannot
// clip a tile at N, so N not a multiple of 128 takes 64-column tiles (and
// wgmma_refusal sends N % 64 != 0 to the SIMT kernel).
const MatmulTiling& grouped_matmul_tiling(DType t, bool small, std::int64_t N) {
  static const MatmulTiling half_large{128, 256, 64, 0, 0, 3, true, true, true};
  static const MatmulTiling half_small{64, 256, 64, 0, 0, 4, true, true, true};
  static const MatmulTiling half_large_narrow{128, 128, 64, 0, 0, 5, true, true, true};
  static const MatmulTiling half_small_narrow{64, 128, 64, 0, 0, 6, true, true, true};
  static const MatmulTiling fp8_large{128, 128, 128, 0, 0, 6, true, true};
  static const MatmulTiling fp8_small{64, 128, 128, 0, 0, 8, true, true};
  static const MatmulTiling fp8_large_narrow{128, 64, 128, 0, 0, 8, true, true};
  static const MatmulTiling fp8_small_narrow{64, 64, 128, 0, 0, 8, true, true};
  if (t.is_fp8() && N % 128 != 0) return small ? fp8_small_narrow : fp8_large_narrow;
  if (t.is_fp8()) return small ? fp8_small : fp8_large;
  if (N <= 128) return small ? half_small_narrow : half_large_narrow;
  return small ? half_small : half_large;
}
}  // namespace detail

std::string grouped_matmul_plan(const Tensor& a, const Tensor& b, const Tensor& offsets) {
  const Operands o = check(a, b, offsets, SourceLoc::current());
  const std::string no = wgmma_refusal(o, a.device());
  if (!no.empty())
    return "SIMT (" + no + ")" + (o.b_nk ? ", B copied to row-major (E, K, N) first" : "");
  const bool b_nk = o.b_nk || o.t.is_fp8();
  return "tensor cores grouped " + detail::grouped_matmul_tiling(o.t, small_experts(o), o.N).str() +
         (b_nk && !o.b_nk ? ", B transposed to (E, N, K) first" : "");
}

void grouped_matmul_out(const Tensor& a, const Tensor& b, const Tensor& offsets, const Tensor& c,
                        SourceLoc loc) {
  const Operands o = check(a, b, offsets, loc);
  const Device d = a.device();
  if (!c.defined() || c.dtype() != o.out_t || c.shape() != std::vector<std::int64_t>{o.T, o.N} ||
      !c.is_contiguous() || !(c.device() == d))
    fail(kOp, "out", loc,
         "must be a contiguous " + o.out_t.name() + " tensor of shape (" + std::to_string(o.T) +
             ", " + std::to_string(o.N) + ") on " + d.str() +
             (c.defined() ? ", got " + c.dtype().name() + " " + shape_str(c.shape()) + " on " +
                                c.device().str() + (c.is_contiguous() ? "" : ", strided")
                          : ", got an undefined tensor"));
  if (o.T == 0 || o.N == 0) return;
  if (o.K == 0) {  // every sum is empty
    Tensor(c).fill_bits(0);  // (a handle: the caller's memory)
    return;
  }
  const GroupedCall call = resolve(o, d, loc);
  // b as the kernel reads it: (E, N, K) storage -- as given or a transposed
  // copy (fp8 from a row-major b) -- or row-major (E, K, N).
  const Tensor bk = call.b_nk ? (o.b_nk ? b.transpose(1, 2) : b.transpose(1, 2).contiguous())
                              : (o.b_nk ? b.contiguous() : b);
  call.kernel.launch({a, bk, c, offsets}, loc);
}

Tensor grouped_matmul(const Tensor& a, const Tensor& b, const Tensor& offsets, SourceLoc loc) {
  const Operands o = check(a, b, offsets, loc);
  Tensor c = Tensor::empty({o.T, o.N}, o.out_t, a.device());
  grouped_matmul_out(a, b, offsets, c, loc);
  return c;
}

}  // namespace tx::ops
