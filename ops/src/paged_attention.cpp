// tx::ops::paged_attention and reshape_and_cache (ops/include/tx/ops/
// paged_attention.hpp says what they compute). Three kernels, written with
// the tile primitives of the attention forward (samples/attention_hopper.cpp
// explains the online softmax):
//
// - paged_decode: one CTA per (split, K/V head x row block, sequence). The
//   query rows of a K/V head -- q_tokens x heads / kv_heads, packed (token,
//   head) -- form one 64-row wgmma tile, so each page is read once for all of
//   them (decode is bound by the cache bytes, not by the MMAs). Warpgroup 0
//   loads Q once and then, for every key block of BN tokens, the block's pages
//   by TMA (one box per page, the ids read from the block table a block ahead)
//   into an mbarrier ring. Warpgroups 1 and 2 take alternate blocks: each
//   waits, computes S = Q K^T, masks the keys past the context and the future
//   of each new token, folds S into its running max and sum, and adds P V; at
//   the end warpgroup 1 merges warpgroup 2's state from shared memory and
//   writes the result. An fp8 cache is widened to the query's dtype in
//   shared memory first (wgmma takes no fp8 B with N-major V); its scales fold
//   into the softmax's exponent (k) and the epilogue (v).
// - paged_combine (split-KV only): each split wrote O_s / l_s and the
//   log-sum-exp of its keys; O = sum_s w_s O_s / sum_s w_s with w_s =
//   exp(lse_s - max lse).
// - cache_write: one thread per element, new K / V rows into their slots.
//
// Nothing here reads the lengths on the host: the grid comes from the block
// table's width, and CTAs whose keys lie past their sequence's end write an
// empty result (O 0, lse -inf) that the combine weighs by 0.
#include "tx/ops/paged_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <optional>
#include <thread>

#include "special_ops.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

namespace tx::ops {

namespace {

constexpr std::int64_t kRows = 64;  // query rows per tile: one wgmma M
const std::string kOp = "tx.ops.paged_attention";

struct PagedConfig {
  std::int64_t D = 128, group = 1, q_tokens = 1, page = 16, kv_heads = 1;
  DType t = bf16, cache_t = bf16;
  bool split = false;
  std::int64_t bn = 64, stages = 4;
  // Consumer warpgroups per CTA, and the CTAs an SM holds: two consumers
  // (alternate key blocks, merged at the end) in a CTA that fills the SM,
  // or one consumer in a CTA of half the SM, two resident (one CTA's
  // start and end overlap the other's stream).
  std::int64_t consumers = 2, ctas_per_sm = 1;
  double scale = 0;
  std::int64_t rows() const { return q_tokens * group; }
  std::int64_t row_blocks() const { return (rows() + kRows - 1) / kRows; }
  bool fp8() const { return cache_t == f8e4m3; }
  std::string key(const Device& d) const {
    char s[256];
    std::uint64_t bits = 0;
    std::memcpy(&bits, &scale, sizeof bits);
    std::snprintf(
        s, sizeof s,
        "paged_decode|d%lld|g%lld|hk%lld|tq%lld|p%lld|%s|%s|s%d|bn%lld|st%lld|c%lld|r%lld|%llx|%s",
        static_cast<long long>(D), static_cast<long long>(group), static_cast<long long>(kv_heads),
        static_cast<long long>(q_tokens), static_cast<long long>(page), t.name().c_str(),
        cache_t.name().c_str(), split, static_cast<long long>(bn), static_cast<long long>(stages),
        static_cast<long long>(consumers), static_cast<long long>(ctas_per_sm),
        static_cast<unsigned long long>(bits), d.str().c_str());
    return s;
  }
};

// The decode kernel. Parameters: q (rows_total, D) with rows_total = batch x
// kv_heads x rows, packed (b, hk, token, head in group); the caches (pages,
// page, kv_heads, D); block_table (batch, max_pages) and context_lens
// (batch), int32; out (rows_total, D) in q's dtype, or -- split -- o_part
// (splits x rows_total, D) and lse_part (splits x rows_total, 1), f32; then
// the scalars splits, split_blocks (key blocks per split), c2 (the softmax
// scale x k_scale x log2 e) and v_scale.
PrimFunc paged_decode_kernel(const PagedConfig& c) {
  const std::int64_t D = c.D, P = c.page, BN = c.bn, PB = BN / P, STAGES = c.stages;
  const std::int64_t G = c.group, TQ = c.q_tokens, R = c.rows(), RB = c.row_blocks();
  const std::int64_t C = c.consumers;
  const DType t = c.t, ct = c.cache_t;
  std::vector<std::string> names = {"q", "k_cache", "v_cache", "block_table", "context_lens"};
  if (c.split)
    names.insert(names.end(), {"o_part", "lse_part"});
  else
    names.push_back("o");
  names.insert(names.end(), {"splits", "split_blocks", "c2", "v_scale"});
  const std::string name = "paged_decode_d" + std::to_string(D) + "_p" + std::to_string(P) +
                           (c.fp8() ? "_fp8" : "") + (c.split ? "_split" : "");
  return T::prim_func_n(name, names, [&](const std::vector<Handle>& h) {
    // Maxima: 2^24 query rows and pages, 256 K/V heads, 2^20 sequences and
    // table columns (the extents' product must stay below 2^62).
    Var q_rows = T::dim("q_rows", {.max = 1 << 24});
    auto Q = T::match_buffer(h[0], {q_rows, D}, t);
    // Only the first extent of a tile operand may be known at launch: the
    // K/V heads are the kernel's.
    Var pages = T::dim("pages", {.max = 1 << 24});
    const std::int64_t kv_heads = c.kv_heads;
    auto K = T::match_buffer(h[1], {pages, P, kv_heads, D}, ct);
    auto V = T::match_buffer(h[2], {pages, P, kv_heads, D}, ct);
    Var batch = T::dim("batch", {.max = 1 << 20}),
        max_pages = T::dim("max_pages", {.max = 1 << 20});
    auto BT = T::match_buffer(h[3], {batch, max_pages}, i32);
    auto CL = T::match_buffer(h[4], {batch}, i32);
    TileBuffer O, OP, LP;
    std::size_t at = 5;
    if (c.split) {
      Var part_rows = T::dim("part_rows", {.max = 1 << 30});
      OP = T::match_buffer(h[at++], {part_rows, D}, f32);
      LP = T::match_buffer(h[at++], {part_rows, 1}, f32);
    } else {
      O = T::match_buffer(h[at++], {q_rows, D}, t);
    }
    Var splits = T::match_scalar(h[at++], i32, "splits", DimFacts{.min = 1});
    Var split_blocks = T::match_scalar(h[at++], i32, "split_blocks", DimFacts{.min = 1});
    Var c2 = T::match_scalar(h[at++], f32, "c2");
    Var v_scale = T::match_scalar(h[at++], f32, "v_scale");
    T::no_alias();
    T::device_entry();
    auto cta = T::cta_id({splits, kv_heads * RB, batch});
    auto wg = T::warpgroup_id({1 + C});
    auto tid = T::thread_id_in_wg({128});
    auto warp = T::warp_id_in_wg({4});
    auto Qs = T::alloc_buffer({kRows, D}, t, scope::shared, layouts::swizzled_tiles({kRows, D}, t));
    auto Ks = T::alloc_buffer({STAGES, BN, D}, ct, scope::shared,
                              layouts::swizzled_tiles({STAGES, BN, D}, ct));
    auto Vs = T::alloc_buffer({STAGES, BN, D}, ct, scope::shared,
                              layouts::swizzled_tiles({STAGES, BN, D}, ct));
    auto qpipe = T::pipeline({.stages = 1, .consumer_arrivals = 1});
    auto kpipe = T::pipeline({.stages = static_cast<int>(STAGES), .consumer_arrivals = 1});
    auto vpipe = T::pipeline({.stages = static_cast<int>(STAGES), .consumer_arrivals = 1});

    // The tile: split `sp` of sequence b, K/V head hk, query rows [r0, r0 + 64)
    // of the head's R (row r is token r / G of head hk * G + r % G).
    auto sp = T::let(Expr(cta), "split");
    auto hk = T::let(cta[1] / RB, "hk");
    auto rb = T::let(cta[1] % RB, "rb");
    auto b = T::let(Expr(cta[2]), "b");
    // Keys: the context, cut to the table's width (lengths are not checked on
    // the host; a negative one sees nothing).
    auto ctx = T::let(max(min(CL(b), max_pages * P), 0), "ctx");
    auto blocks = T::let(ceildiv(ctx, BN), "blocks");
    auto j0 = T::let(sp * split_blocks, "j0");
    auto nblk = T::let(max(min(j0 + split_blocks, blocks) - j0, 0), "nblk");
    auto row0 = T::let((b * kv_heads + hk) * R + rb * kRows, "row0");
    auto rows_here = T::let(min(R - rb * kRows, kRows), "rows_here");

    T::if_(wg == 0,
           [&] {  // the producer: Q once, then each key block's pages
             T::cuda::decrease_registers(24);
             T::if_(nblk > 0, [&] {
               qpipe.producer_acquire(0);
               // 64 rows from row0: past this head's R they are the next
               // head's (finite, never stored), past the tensor zeros.
               Tx::warpgroup::copy_async(Qs, Q[region(span(row0, kRows), {0, D})],
                                         {.barrier = qpipe.full(0), .partial = true});
               T::if_(tid == 0, [&] { qpipe.producer_commit(0); });
               // A block's page ids are read once, for K and V, one block
               // ahead: block j + 1's loads are in flight while block j's
               // copies are issued. (One read per page and tensor, waited on
               // before each copy, bound the kernel at ~70% of the copy rate.)
               // (Raw ids are kept; each is checked where it is used, so
               // nothing waits on a load before its block.)
               auto table_id = [&](Expr j, std::int64_t i) -> Expr {
                 // A column past the table is clamped: its page is never loaded.
                 return BT(b, min((j0 + j) * PB + i, max_pages - 1));
               };
               auto ids = T::alloc_buffer({PB}, i32, scope::local, std::nullopt, "page_ids");
               for (std::int64_t i = 0; i < PB; ++i) ids(i) = table_id(0, i);
               auto load = [&](const T::Pipeline& pipe, const TileBuffer& cache,
                               const TileBuffer& ring, Var j, const std::vector<Var>& page) {
                 auto s = T::let(pipe.stage(j), "s");
                 pipe.producer_acquire(j);
                 for (std::int64_t i = 0; i < PB; ++i) {
                   // Pages past the context are not loaded (their rows are masked).
                   T::if_(((j0 + j) * PB + i) * P < ctx, [&] {
                     Tx::warpgroup::copy_async(
                         ring[region(span(s, 1), span(i * P, P), {0, D})],
                         cache[region(span(page[i], 1), {0, P}, span(hk, 1), {0, D})],
                         {.barrier = pipe.full(j), .partial = true});
                   });
                 }
                 T::if_(tid == 0, [&] { pipe.producer_commit(j); });
               };
               for (Var j : T::serial(nblk, "j")) {
                 std::vector<Var> page, next;
                 for (std::int64_t i = 0; i < PB; ++i)
                   next.push_back(T::let(table_id(j + 1, i), "next_id"));
                 for (std::int64_t i = 0; i < PB; ++i) {
                   // An id outside the cache reads as zeros (a start at
                   // `pages` is wholly past the end: the TMA fills zeros).
                   // The max(.., 0) states what holds, for the range analysis.
                   auto id = T::let(ids(i), "page_id");
                   page.push_back(T::let(
                       max(select(id < 0 || id >= pages, Expr(pages), Expr(id)), 0), "page"));
                 }
                 load(kpipe, K, Ks, j, page);
                 load(vpipe, V, Vs, j, page);
                 for (std::int64_t i = 0; i < PB; ++i) ids(i) = next[i];
               }
             });
           })
        .else_([&] {
          // Each consumer runs the 64 rows' online softmax over its key
          // blocks. Two in a CTA take alternate blocks (warpgroup 1 the even
          // ones, 2 the odd) and merge at the end: one consumer alone left
          // the copies waiting (its softmax and two MMAs per block are
          // serial). With two CTAs on an SM, each has one consumer.
          // Registers: (24 + C x 240) x 128 fill an SM's 64 Ki with one CTA;
          // two CTAs of 256 threads have 32 Ki each: 24 + 232.
          T::cuda::increase_registers(c.ctas_per_sm == 2 ? 232 : 240);
          // warpgroup 1 -> 0, 2 -> 1
          auto half = T::let(C == 2 ? Expr(wg / 2) : Expr(0), "half");
          // The warps whose 16 rows hold a query row (GQA packs only
          // tokens x group rows into the 64: 4 with one token of a group of
          // 4): the others skip the softmax (their P stays 0, their rows are
          // never stored), which frees issue slots on the SM.
          auto live = T::let(warp * 16 < rows_here, "live_rows");
          auto S = T::alloc_buffer({kRows, BN}, f32, scope::local, frag::wgmma_c(kRows, BN));
          auto Pr = T::alloc_buffer({kRows, BN}, t, scope::local, frag::wgmma_a(kRows, BN, t));
          auto Oacc = T::alloc_buffer({kRows, D}, f32, scope::local, frag::wgmma_c(kRows, D));
          auto row = [&](const char* n) {
            return T::alloc_buffer({kRows, 1}, f32, scope::local, frag::wgmma_row(kRows), n);
          };
          auto m = row("m"), l = row("l"), m_new = row("m_new"), alpha = row("alpha");
          auto lse = row("lse");
          auto release = [&](const T::Pipeline& pipe, Expr it) {
            T::if_(tid == 0, [&] { pipe.consumer_release(it); });
          };
          // Consumer 2's state for the merge, and the barrier of the two.
          TileBuffer Om, Mm, Lm;
          if (C == 2) {
            Om = T::alloc_buffer({kRows, D}, f32, scope::shared, std::nullopt, "O_merge");
            Mm = T::alloc_buffer({kRows, 1}, f32, scope::shared, std::nullopt, "m_merge");
            Lm = T::alloc_buffer({kRows, 1}, f32, scope::shared, std::nullopt, "l_merge");
          }
          std::optional<T::NamedBarriers> merge;
          if (C == 2) merge = T::named_barriers({.count = 1, .threads = 256});
          // An fp8 block is widened into a tile of q's dtype for wgmma (one
          // per consumer).
          TileBuffer K16, V16;
          if (c.fp8()) {
            K16 = T::alloc_buffer({C, BN, D}, t, scope::shared,
                                  layouts::swizzled_tiles({C, BN, D}, t));
            V16 = T::alloc_buffer({C, BN, D}, t, scope::shared,
                                  layouts::swizzled_tiles({C, BN, D}, t));
          }
          auto mine = [&](const TileBuffer& wide) {
            return wide[region(span(half, 1), {0, BN}, {0, D})];
          };
          auto stage_of = [&](const TileBuffer& ring, const T::Pipeline& pipe, Expr j) {
            return ring[region(span(pipe.stage(j), 1), {0, BN}, {0, D})];
          };
          Tx::warpgroup::fill(Oacc, 0.0f);
          Tx::warpgroup::fill(Pr, 0.0f);  // what the skipping warps multiply
          // Finite: a row with no key keeps alpha = exp2(0), O = 0, l = 0.
          Tx::warpgroup::fill(m, -1e30f);
          Tx::warpgroup::fill(l, 0.0f);
          T::if_(nblk > half, [&] {
            qpipe.consumer_wait(0);
            for (Var jj : T::serial(ceildiv(nblk - half, C), "jj")) {
              auto j = T::let(C * jj + half, "j");
              auto key0 = T::let((j0 + j) * BN, "key0");
              kpipe.consumer_wait(j);
              if (c.fp8()) {
                Tx::warpgroup::cast(mine(K16), stage_of(Ks, kpipe, j));
                T::cuda::fence_proxy_async();
                T::cuda::warpgroup_sync();
                release(kpipe, j);
                Tx::warpgroup::gemm(S, Qs, mine(K16), {.transpose_b = true});
              } else {
                Tx::warpgroup::gemm(S, Qs, stage_of(Ks, kpipe, j), {.transpose_b = true});
                release(kpipe, j);
              }
              T::if_(live, [&] {
                // Keys past the context, and each new token's future: token
                // tq sits at ctx - TQ + tq and sees the keys up to it.
                T::if_(key0 + BN > ctx - TQ + 1, [&] {
                  Tx::warpgroup::fill(S, -INFINITY, {.where = [&](Expr i, Expr k) -> Expr {
                                        Expr token = (rb * kRows + i) / G;
                                        return key0 + k >= ctx || key0 + k > ctx - TQ + token;
                                      }});
                });
                Tx::warpgroup::max(m_new, S);
                Tx::warpgroup::maximum(m_new, m_new, m);
                Tx::warpgroup::sub(alpha, m, m_new);
                Tx::warpgroup::exp2(alpha, alpha, {.scale = c2});
                Tx::warpgroup::maximum(m, m, m_new);
                Tx::warpgroup::mul(m_new, m, -1.0f);
                Tx::warpgroup::mul(m_new, m_new, c2);
                Tx::warpgroup::exp2(S, S, {.scale = c2, .bias = m_new.all()});
                Tx::warpgroup::mul(l, l, alpha);
                Tx::warpgroup::sum(l, S, {.accum = true});
                Tx::warpgroup::cast(Pr, S);
                Tx::warpgroup::mul(Oacc, Oacc, alpha);
              });
              vpipe.consumer_wait(j);
              // The value rows past the context hold whatever the page held
              // (or, for pages not loaded, an earlier block): zero them, as a
              // NaN there would survive P = 0.
              auto vtile = c.fp8() ? mine(V16) : stage_of(Vs, vpipe, j);
              if (c.fp8()) Tx::warpgroup::cast(vtile, stage_of(Vs, vpipe, j));
              T::if_(key0 + BN > ctx, [&] {
                Tx::warpgroup::fill(vtile, 0.0f,
                                    {.where = [&](Expr, Expr k, Expr) { return key0 + k >= ctx; }});
              });
              if (c.fp8()) {
                T::cuda::fence_proxy_async();
                T::cuda::warpgroup_sync();
                release(vpipe, j);
              } else {
                T::if_(key0 + BN > ctx, [&] {
                  T::cuda::fence_proxy_async();
                  T::cuda::warpgroup_sync();
                });
              }
              Tx::warpgroup::gemm(Oacc, Pr, vtile, {.accum = true});
              if (!c.fp8()) release(vpipe, j);
            }
          });
          // The merge: consumer 2 leaves (m, l, O) in shared memory, consumer
          // 1 rescales both to the larger maximum and adds them up.
          if (C == 2) {
            T::if_(half == 1, [&] {
              Tx::warpgroup::copy(Om, Oacc);
              Tx::warpgroup::copy(Mm, m);
              Tx::warpgroup::copy(Lm, l);
            });
            merge->sync(0);
          }
          T::if_(half == 0, [&] {
            if (C == 2) {
              auto O2 = T::alloc_buffer({kRows, D}, f32, scope::local, frag::wgmma_c(kRows, D));
              auto m2 = row("m2"), l2 = row("l2");
              Tx::warpgroup::copy(O2, Om);
              Tx::warpgroup::copy(m2, Mm);
              Tx::warpgroup::copy(l2, Lm);
              Tx::warpgroup::maximum(m_new, m, m2);
              Tx::warpgroup::sub(alpha, m, m_new);
              Tx::warpgroup::exp2(alpha, alpha, {.scale = c2});
              Tx::warpgroup::sub(m2, m2, m_new);
              Tx::warpgroup::exp2(m2, m2, {.scale = c2});
              Tx::warpgroup::maximum(m, m, m_new);  // = m_new
              Tx::warpgroup::mul(l, l, alpha);
              Tx::warpgroup::fma(l, l2, m2, l);
              Tx::warpgroup::mul(Oacc, Oacc, alpha);
              Tx::warpgroup::mul(O2, O2, m2);
              Tx::warpgroup::add(Oacc, Oacc, O2);
            }
            // Epilogue: O / l (x v_scale), lse = (m c2 + log2 l) ln 2 (-inf, O 0
            // for a row that saw no key).
            Tx::warpgroup::log2(lse, l);
            Tx::warpgroup::fma(lse, m, c2, lse);
            Tx::warpgroup::mul(lse, lse, std::numbers::ln2);
            Tx::warpgroup::maximum(l, l, 1e-30f);
            Tx::warpgroup::reciprocal(l, l);
            Tx::warpgroup::mul(l, l, v_scale);
            Tx::warpgroup::mul(Oacc, Oacc, l);
            auto here = [&](Expr i, Expr) { return i < rows_here; };
            if (c.split) {
              auto base = T::let(sp * q_rows + row0, "base");
              Tx::warpgroup::copy(OP[region(span(base, kRows), {0, D})], Oacc,
                                  {.partial = true, .where = here});
              Tx::warpgroup::copy(LP[region(span(base, kRows), {0, 1})], lse,
                                  {.partial = true, .where = here});
            } else {
              auto Oout = T::alloc_buffer({kRows, D}, t, scope::local, frag::wgmma_c(kRows, D));
              Tx::warpgroup::cast(Oout, Oacc);
              Tx::warpgroup::copy(O[region(span(row0, kRows), {0, D})], Oout,
                                  {.partial = true, .where = here});
            }
          });
        });
  });
}

// The combine of split-KV (and of several query tokens, whose rows it also
// moves back from the kernel's packing): packed row r of (sequence, K/V
// head, token, head in group) from the splits' rows r, into its row of O
// (batch, q_tokens, heads, D).
PrimFunc paged_combine_kernel(std::int64_t D, DType t, std::int64_t G, std::int64_t TQ) {
  const std::int64_t R = G * TQ;
  return T::prim_func_n(
      "paged_combine_d" + std::to_string(D), {"o_part", "lse_part", "o", "splits", "kv_heads"},
      [&](const std::vector<Handle>& h) {
        Var part_rows = T::dim("part_rows", {.max = 1 << 30}),
            rows = T::dim("rows", {.max = 1 << 24});
        auto OP = T::match_buffer(h[0], {part_rows, D}, f32);
        auto LP = T::match_buffer(h[1], {part_rows, 1}, f32);
        auto O = T::match_buffer(h[2], {rows, D}, t);
        Var splits = T::match_scalar(h[3], i32, "splits", DimFacts{.min = 1});
        Var kv_heads = T::match_scalar(h[4], i32, "kv_heads", DimFacts{.min = 1});
        T::no_alias();
        T::device_entry();
        auto r = T::cta_id({rows});
        auto d = T::thread_id({D});
        auto bh = T::let(r / R, "bh"), w = T::let(r % R, "w");
        auto out_row = T::let(
            (((bh / kv_heads) * TQ + w / G) * kv_heads + bh % kv_heads) * G + w % G, "out_row");
        auto acc = T::alloc_buffer({3}, f32, scope::local);  // max, sum of weights, sum
        // Split s's row r is part row s * rows + r (the guard holds whenever
        // the caller passed splits x rows part rows; it keeps a wrong count
        // from reading past them).
        acc(0) = -INFINITY;
        for (Var s : T::serial(splits, "s")) {
          auto pr = T::let(s * rows + r, "pr");
          T::if_(pr < part_rows, [&] { acc(0) = max(Expr(acc(0)), LP(pr, 0)); });
        }
        acc(1) = 0.0f;
        acc(2) = 0.0f;
        T::if_(acc(0) > -INFINITY, [&] {
          for (Var s : T::serial(splits, "s")) {
            auto pr = T::let(s * rows + r, "pr");
            T::if_(pr < part_rows, [&] {
              auto wt = T::let(exp(LP(pr, 0) - acc(0)), "wt");
              acc(1) = acc(1) + wt;
              acc(2) = acc(2) + wt * OP(pr, d);
            });
          }
        });
        T::if_(out_row < rows, [&] {
          O(out_row, d) = cast(select(acc(1) > 0.0f, acc(2) / max(Expr(acc(1)), 1e-30f), 0.0f), t);
        });
      });
}

// The cache write: k, v (tokens, kv_heads, D) into their slots.
PrimFunc cache_write_kernel(std::int64_t D, std::int64_t P, std::int64_t kv_heads, DType t,
                            DType ct, DType slot_t) {
  return T::prim_func_n("cache_write_d" + std::to_string(D) + "_p" + std::to_string(P),
                        {"k", "v", "k_cache", "v_cache", "slots", "inv_k", "inv_v"},
                        [&](const std::vector<Handle>& h) {
                          Var tokens = T::dim("tokens", {.max = 1 << 24}),
                              pages = T::dim("pages", {.max = 1 << 24});
                          auto Kn = T::match_buffer(h[0], {tokens, kv_heads, D}, t);
                          auto Vn = T::match_buffer(h[1], {tokens, kv_heads, D}, t);
                          auto KC = T::match_buffer(h[2], {pages, P, kv_heads, D}, ct);
                          auto VC = T::match_buffer(h[3], {pages, P, kv_heads, D}, ct);
                          auto SL = T::match_buffer(h[4], {tokens}, slot_t);
                          Var inv_k = T::match_scalar(h[5], f32, "inv_k");
                          Var inv_v = T::match_scalar(h[6], f32, "inv_v");
                          T::no_alias();
                          T::device_entry();
                          auto cta = T::cta_id({tokens, kv_heads});
                          auto d = T::thread_id({D});
                          auto tok = T::let(Expr(cta), "token");
                          auto hk = T::let(Expr(cta[1]), "hk");
                          auto slot = T::let(cast(SL(tok), i64), "slot");
                          T::if_(slot >= 0 && slot < cast(pages, i64) * P, [&] {
                            auto page = T::let(slot / P, "page");
                            auto at_row = T::let(slot % P, "row");
                            if (ct == t) {
                              KC(page, at_row, hk, d) = Kn(tok, hk, d);
                              VC(page, at_row, hk, d) = Vn(tok, hk, d);
                            } else {
                              KC(page, at_row, hk, d) = cast(cast(Kn(tok, hk, d), f32) * inv_k, ct);
                              VC(page, at_row, hk, d) = cast(cast(Vn(tok, hk, d), f32) * inv_v, ct);
                            }
                          });
                        });
}

struct Call {
  PagedConfig config;
  std::int64_t batch = 0, heads = 0, kv_heads = 0, max_pages = 0, sms = 0;
  std::int64_t splits = 1, split_blocks = 1;
  double c2 = 0;
};

void check_positive(double x, const char* name, SourceLoc loc) {
  if (!(x > 0) || std::isinf(x)) fail(kOp, name, loc, "must be finite and positive");
}

Call check(const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& bt, const Tensor& cl,
           const PagedAttentionOptions& opt, SourceLoc loc) {
  Call c;
  for (auto [x, n] : {std::pair{&q, "q"},
                      {&kc, "k_cache"},
                      {&vc, "v_cache"},
                      {&bt, "block_table"},
                      {&cl, "context_lens"}}) {
    if (!x->defined()) fail(kOp, n, loc, "an undefined tensor");
    if (!(x->device() == q.device()))
      fail(kOp, n, loc, "on " + x->device().str() + ", q on " + q.device().str());
  }
  if (q.shape().size() != 4)
    fail(kOp, "q", loc,
         "rank " + std::to_string(q.shape().size()) +
             ": paged_attention takes q as (batch, q_tokens, heads, head_dim)");
  if (q.dtype() != bf16 && q.dtype() != f16)
    fail(kOp, "q", loc, "dtype " + q.dtype().name() + ": q is bfloat16 or float16");
  const std::int64_t B = q.shape()[0], TQ = q.shape()[1], H = q.shape()[2], D = q.shape()[3];
  if (TQ < 1 || TQ > 8)
    fail(kOp, "q", loc,
         std::to_string(TQ) + " query tokens per sequence: the decode kernel takes 1 to 8");
  if (D != 64 && D != 128 && D != 256)
    fail(kOp, "q", loc, "head_dim " + std::to_string(D) + ": the kernel takes 64, 128 or 256");
  for (auto [x, n] : {std::pair{&kc, "k_cache"}, {&vc, "v_cache"}}) {
    if (x->shape().size() != 4)
      fail(kOp, n, loc,
           "rank " + std::to_string(x->shape().size()) +
               ": the cache is (num_pages, page_size, kv_heads, head_dim)");
    if (x->dtype() != q.dtype() && x->dtype() != f8e4m3)
      fail(kOp, n, loc,
           "dtype " + x->dtype().name() + ": the cache is q's dtype (" + q.dtype().name() +
               ") or float8_e4m3fn");
    if (!x->is_contiguous()) fail(kOp, n, loc, "not contiguous (the cache is never copied)");
  }
  if (vc.shape() != kc.shape()) fail(kOp, "v_cache", loc, "shape differs from k_cache's");
  if (vc.dtype() != kc.dtype()) fail(kOp, "v_cache", loc, "dtype differs from k_cache's");
  const std::int64_t P = kc.shape()[1], HK = kc.shape()[2];
  if (P != 16 && P != 32 && P != 64)
    fail(kOp, "k_cache", loc, "page_size " + std::to_string(P) + ": the kernel takes 16, 32 or 64");
  if (kc.shape()[3] != D)
    fail(kOp, "k_cache", loc,
         "head_dim " + std::to_string(kc.shape()[3]) + " differs from q's " + std::to_string(D));
  if (HK < 1 || H % HK != 0)
    fail(kOp, "k_cache", loc,
         std::to_string(HK) + " K/V heads do not divide q's " + std::to_string(H) +
             " heads (grouped-query attention needs heads % kv_heads == 0)");
  if (bt.shape().size() != 2 || bt.dtype() != i32 || !bt.is_contiguous())
    fail(kOp, "block_table", loc, "a contiguous int32 (batch, max_pages) tensor");
  if (bt.shape()[0] != B)
    fail(kOp, "block_table", loc,
         std::to_string(bt.shape()[0]) + " rows for a batch of " + std::to_string(B));
  if (bt.shape()[1] < 1) fail(kOp, "block_table", loc, "no page columns (max_pages is 0)");
  if (cl.shape().size() != 1 || cl.dtype() != i32 || !cl.is_contiguous() || cl.shape()[0] != B)
    fail(kOp, "context_lens", loc,
         "an int32 tensor of the batch's " + std::to_string(B) + " lengths");
  if (!(opt.scale >= 0) || std::isinf(opt.scale))
    fail(kOp, "scale", loc, "must be finite and positive (0: 1 / sqrt(head_dim))");
  check_positive(opt.k_scale, "k_scale", loc);
  check_positive(opt.v_scale, "v_scale", loc);
  if (kc.dtype() != f8e4m3 && (opt.k_scale != 1 || opt.v_scale != 1))
    fail(kOp, "k_scale", loc, "scales apply to an fp8 cache; this one is " + kc.dtype().name());
  if (opt.splits < 0) fail(kOp, "splits", loc, "0 (choose), 1 (no split) or more");
  if (opt.ctas_per_sm < 0 || opt.ctas_per_sm > 2)
    fail(kOp, "ctas_per_sm", loc,
         std::to_string(opt.ctas_per_sm) + ": 0 (choose), 1 or 2 decode CTAs per SM");
  if (opt.ctas_per_sm == 2 && D == 256)
    fail(kOp, "ctas_per_sm", loc,
         "2 at head_dim 256: two stages of K and V (128 KiB) do not fit in half an SM");
  // The kernel's extents (their maxima keep its index arithmetic 32-bit).
  if (kc.shape()[0] > (1 << 24)) fail(kOp, "k_cache", loc, "more than 2^24 pages");
  if (HK > 256) fail(kOp, "k_cache", loc, "more than 256 K/V heads");
  if (B > (1 << 20) || bt.shape()[1] > (1 << 20))
    fail(kOp, "block_table", loc, "more than 2^20 sequences or page columns");
  if (B * H * TQ > (1 << 24)) fail(kOp, "q", loc, "more than 2^24 query rows");

  PagedConfig& k = c.config;
  k.D = D;
  k.group = H / HK;
  k.q_tokens = TQ;
  k.page = P;
  k.kv_heads = HK;
  k.t = q.dtype();
  k.cache_t = kc.dtype();
  k.scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(D));
  // Key blocks of 64 keys: 16 KiB of K and of V per stage at head_dim 128.
  k.bn = 64;
  // Two CTAs per SM (one consumer each) where their rings fit in half an
  // SM's shared memory (~113 KiB each): at head_dim 128, Q's 16 KiB and
  // three stages of bf16 K and V, or four of fp8 (plus their widened tiles).
  k.ctas_per_sm = opt.ctas_per_sm ? opt.ctas_per_sm : (D <= 128 ? 2 : 1);
  k.consumers = k.ctas_per_sm == 2 ? 1 : 2;
  k.stages = D == 256 ? 2 : (k.ctas_per_sm == 2 && D == 128 && !k.fp8() ? 3 : 4);
  c.batch = B;
  c.heads = H;
  c.kv_heads = HK;
  c.max_pages = bt.shape()[1];
  c.c2 = k.scale * opt.k_scale * std::numbers::log2e;

  const Device d = q.device();
  if (d.is_cuda()) {
    const runtime::DeviceInfo& info = runtime::device_info(d.index);
    if (info.cc_major != 9)
      fail(kOp, "q", loc,
           "the paged decode kernel is for sm_90 (H100 / H200: TMA, wgmma); this GPU is " +
               info.name + " (" + info.arch() + "); run it on the host (Device::host()) instead");
    c.sms = info.sm_count;
  } else {
    c.sms = std::max(4u, 2 * std::thread::hardware_concurrency());
  }
  // Split-KV when the tiles leave SMs idle. The unit is an SM's share of
  // the bandwidth: one CTA alone on an SM streams about as fast as two
  // sharing it, so the grid costs ceil(CTAs / sms) rounds whatever the
  // residency; a range of n key blocks costs about n + 4 blocks' time (Q,
  // the pipeline's fill, the epilogue), and a split adds the combine (about
  // 2). The count is the cheapest of 1..32, each range at least two blocks
  // of the table's width (the lengths are on the device; the width bounds
  // them). On an H200: batch 8 at 16384 keys takes 2 ranges (128 CTAs)
  // where 5 (320 CTAs) ran at 0.69 of copy, and counting two CTAs per SM as
  // two slots (4 ranges) at 0.89 against 0.92.
  const std::int64_t tiles = B * HK * k.row_blocks();
  const std::int64_t max_blocks = (c.max_pages * P + k.bn - 1) / k.bn;
  std::int64_t splits = opt.splits;
  if (splits == 0) {
    auto cost = [&](std::int64_t s) {
      const std::int64_t rounds = (tiles * s + c.sms - 1) / c.sms;
      return rounds * ((max_blocks + s - 1) / s + 4 + (s > 1 ? 2 : 0));
    };
    splits = 1;
    const std::int64_t most = std::min<std::int64_t>(32, std::max<std::int64_t>(max_blocks / 2, 1));
    for (std::int64_t s = 2; s <= most; ++s)
      if (cost(s) < cost(splits)) splits = s;
  }
  splits = std::min(splits, max_blocks);
  c.split_blocks = (max_blocks + splits - 1) / splits;
  c.splits = (max_blocks + c.split_blocks - 1) / c.split_blocks;
  // Several query tokens go through the combine too, which moves their rows
  // back from the kernel's packing (with one range it only converts).
  k.split = c.splits > 1 || TQ > 1;
  if (opt.out) {
    const Tensor& o = *opt.out;
    if (!o.defined() || o.shape() != q.shape() || o.dtype() != q.dtype() || !o.is_contiguous() ||
        !(o.device() == d))
      fail(kOp, "out", loc,
           "must be a contiguous tensor of q's shape, dtype and device (batch, q_tokens, heads, "
           "head_dim)");
  }
  return c;
}

Kernel decode_kernel(const PagedConfig& config, const Device& d) {
  return detail::special_cached(config.key(d), [&] {
    return compile(paged_decode_kernel(config),
                   {.device = d,
                    .approx_math = true,
                    .min_ctas_per_sm = static_cast<int>(config.ctas_per_sm)});
  });
}

Kernel combine_kernel(const PagedConfig& k, const Device& d) {
  return detail::special_cached(
      "paged_combine|d" + std::to_string(k.D) + "|" + k.t.name() + "|g" + std::to_string(k.group) +
          "|tq" + std::to_string(k.q_tokens) + "|" + d.str(),
      [&] { return compile(paged_combine_kernel(k.D, k.t, k.group, k.q_tokens), {.device = d}); });
}

}  // namespace

std::string paged_attention_plan(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& block_table, const Tensor& context_lens,
                                 const PagedAttentionOptions& opt, std::source_location loc) {
  Call c = check(q, k_cache, v_cache, block_table, context_lens, opt, loc);
  const PagedConfig& k = c.config;
  std::string s = q.device().is_cuda() ? "wgmma" : "host";
  s += ", " + std::to_string(k.row_blocks()) + " tile(s) of 64 query rows per K/V head (" +
       std::to_string(k.rows()) + " used: " + std::to_string(k.q_tokens) + " token(s) x " +
       std::to_string(k.group) + " head(s))";
  s += ", key blocks of " + std::to_string(k.bn) + " (" + std::to_string(k.bn / k.page) +
       " page(s) of " + std::to_string(k.page) + ")";
  s += k.ctas_per_sm == 2 ? ", two CTAs per SM (one consumer warpgroup each)"
                          : ", one CTA per SM (two consumer warpgroups)";
  if (k.fp8()) s += ", fp8 cache widened in shared memory";
  if (c.splits > 1)
    s += ", split-KV: " + std::to_string(c.splits) + " ranges of " +
         std::to_string(c.split_blocks * k.bn) + " keys + combine";
  else if (k.split)
    s += ", no split (f32 out + combine, which unpacks the query tokens)";
  else
    s += ", no split";
  return s;
}

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_table, const Tensor& context_lens,
                       const PagedAttentionOptions& opt, std::source_location loc) {
  Call c = check(q, k_cache, v_cache, block_table, context_lens, opt, loc);
  const PagedConfig& k = c.config;
  const Device d = q.device();
  const std::int64_t B = c.batch, TQ = k.q_tokens, H = c.heads, HK = c.kv_heads, G = k.group,
                     D = k.D;
  const std::int64_t rows_total = B * HK * k.rows();
  Tensor out = opt.out ? *opt.out : Tensor::empty({B, TQ, H, D}, q.dtype(), d);
  if (B == 0) return out;
  // Rows packed (b, hk, token, head in group): for one token per sequence
  // that is q's own order; several are moved there (a small copy).
  Tensor qp = TQ == 1 ? q.contiguous().reshape({rows_total, D})
                      : q.reshape({B, TQ, HK, G, D})
                            .permute({0, 2, 1, 3, 4})
                            .contiguous()
                            .reshape({rows_total, D});
  Tensor o = out.reshape({rows_total, D});
  Kernel decode = decode_kernel(k, d);
  const float c2 = static_cast<float>(c.c2), vs = static_cast<float>(opt.v_scale);
  if (k.split) {
    Tensor op = Tensor::empty({c.splits * rows_total, D}, f32, d);
    Tensor lp = Tensor::empty({c.splits * rows_total, 1}, f32, d);
    decode.launch(
        {qp, k_cache, v_cache, block_table, context_lens, op, lp, c.splits, c.split_blocks, c2, vs},
        loc);
    combine_kernel(k, d).launch({op, lp, o, c.splits, HK}, loc);
  } else {
    decode.launch(
        {qp, k_cache, v_cache, block_table, context_lens, o, c.splits, c.split_blocks, c2, vs},
        loc);
  }
  return out;
}

void reshape_and_cache(const Tensor& k, const Tensor& v, const Tensor& k_cache,
                       const Tensor& v_cache, const Tensor& slot_mapping,
                       const CacheWriteOptions& opt, std::source_location loc) {
  const std::string op = "tx.ops.reshape_and_cache";
  for (auto [x, n] : {std::pair{&k, "k"},
                      {&v, "v"},
                      {&k_cache, "k_cache"},
                      {&v_cache, "v_cache"},
                      {&slot_mapping, "slot_mapping"}}) {
    if (!x->defined()) fail(op, n, loc, "an undefined tensor");
    if (!(x->device() == k.device()))
      fail(op, n, loc, "on " + x->device().str() + ", k on " + k.device().str());
  }
  if (k.shape().size() != 3)
    fail(
        op, "k", loc,
        "rank " + std::to_string(k.shape().size()) + ": new keys are (tokens, kv_heads, head_dim)");
  if (v.shape() != k.shape()) fail(op, "v", loc, "shape differs from k's");
  if (k.dtype() != bf16 && k.dtype() != f16)
    fail(op, "k", loc, "dtype " + k.dtype().name() + ": bfloat16 or float16");
  if (v.dtype() != k.dtype()) fail(op, "v", loc, "dtype differs from k's");
  for (auto [x, n] : {std::pair{&k_cache, "k_cache"}, {&v_cache, "v_cache"}}) {
    if (x->shape().size() != 4)
      fail(op, n, loc, "the cache is (num_pages, page_size, kv_heads, head_dim)");
    if (x->dtype() != k.dtype() && x->dtype() != f8e4m3)
      fail(op, n, loc, "dtype " + x->dtype().name() + ": the cache is k's dtype or float8_e4m3fn");
    if (!x->is_contiguous()) fail(op, n, loc, "not contiguous");
  }
  if (v_cache.shape() != k_cache.shape() || v_cache.dtype() != k_cache.dtype())
    fail(op, "v_cache", loc, "differs from k_cache (shape or dtype)");
  const std::int64_t T = k.shape()[0], HK = k.shape()[1], D = k.shape()[2], P = k_cache.shape()[1];
  if (k_cache.shape()[2] != HK || k_cache.shape()[3] != D)
    fail(op, "k_cache", loc, "kv_heads and head_dim differ from k's");
  if (D < 1 || D > 1024) fail(op, "k", loc, "head_dim " + std::to_string(D) + ": 1 to 1024");
  if (T > (1 << 24) || HK > 256 || k_cache.shape()[0] > (1 << 24))
    fail(op, "k", loc, "more than 2^24 tokens or pages, or 256 K/V heads");
  if (slot_mapping.shape().size() != 1 || slot_mapping.shape()[0] != T ||
      (slot_mapping.dtype() != i32 && slot_mapping.dtype() != i64))
    fail(op, "slot_mapping", loc, "an int32 or int64 tensor of one slot per token");
  const bool fp8 = k_cache.dtype() == f8e4m3;
  check_positive(opt.k_scale, "k_scale", loc);
  check_positive(opt.v_scale, "v_scale", loc);
  if (!fp8 && (opt.k_scale != 1 || opt.v_scale != 1))
    fail(op, "k_scale", loc, "scales apply to an fp8 cache");
  if (T == 0 || HK == 0) return;
  const Device d = k.device();
  Kernel w = detail::special_cached(
      "cache_write|d" + std::to_string(D) + "|p" + std::to_string(P) + "|hk" + std::to_string(HK) +
          "|" + k.dtype().name() + "|" + k_cache.dtype().name() + "|" +
          slot_mapping.dtype().name() + "|" + d.str(),
      [&] {
        return compile(
            cache_write_kernel(D, P, HK, k.dtype(), k_cache.dtype(), slot_mapping.dtype()),
            {.device = d});
      });
  w.launch({k.contiguous(), v.contiguous(), k_cache, v_cache, slot_mapping.contiguous(),
            static_cast<float>(1.0 / opt.k_scale), static_cast<float>(1.0 / opt.v_scale)},
           loc);
}

namespace detail {
std::vector<PrimFunc> paged_attention_kernels(const Tensor& q, const Tensor& k_cache,
                                              const Tensor& v_cache, const Tensor& block_table,
                                              const Tensor& context_lens,
                                              const PagedAttentionOptions& opt) {
  Call c =
      check(q, k_cache, v_cache, block_table, context_lens, opt, std::source_location::current());
  std::vector<PrimFunc> v = {paged_decode_kernel(c.config)};
  if (c.config.split)
    v.push_back(paged_combine_kernel(c.config.D, c.config.t, c.config.group, c.config.q_tokens));
  return v;
}
}  // namespace detail

}  // namespace tx::ops
