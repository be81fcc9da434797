// tx::ops::attention: the forward kernel of samples/attention_hopper.cpp
// (read that first: the algorithm, the pipelines, the online softmax),
// generalized for the library:
// - shape-generic: the token counts are T::dim extents and the batch and
//   sequence lengths scalars, so one kernel serves every batch size and
//   sequence length (the tile loop's trip count is computed at launch);
// - both storage layouts of q, k, v: (tokens, heads, head_dim) -- the
//   (batch, seq, heads, dim) layout, and every variable-length batch -- or
//   (batch * heads * seq, head_dim) for (batch, heads, seq, dim) storage;
// - variable-length batches: each sequence's first token and length come
//   from cu_seqlens, its keys past its length are masked and its rows past
//   its length are not stored (where=), since the tile reaches into the
//   next sequence's tokens.
#include "tx/ops/attention.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <numbers>
#include <thread>

#include "attention_internal.hpp"
#include "special_ops.hpp"
#include "tx/lowering/codegen_cuda.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/tx.hpp"

namespace tx::ops {

namespace {

using attn::AttnConfig;

// Key blocks per head dim, from bench/attention on an H100 (docs/attention.md):
// D 128 non-causal 176 (640 TFLOP/s at S 4096 against 627 with 128), causal
// 128; D 256 80 (shared memory: Q 64 KiB, two stages of K and V 160 KiB).
std::int64_t key_block(std::int64_t D, bool causal) {
  if (D == 64) return 128;
  if (D == 128) return causal ? 128 : 176;
  return 80;
}

// D 64: three consumer warpgroups (FA3's 192-row blocks) where they measured
// faster on an H200 (the sample's kernel, docs/attention.md): 1.04-1.09x from
// 2k keys without a mask, 1.02-1.06x from 8k with one, 0.79-0.96x below (the
// last round's idle rows, the diagonal's waste in a 192-row block). Key blocks
// of 112 when causal: ptxas spills the masked consumer at 128 with the 160
// registers a thread of four warpgroups gets. Dense calls only (variable
// lengths and paged caches keep two: their lengths are not known here).
std::atomic<std::int64_t> g_forced_consumers{0};  // detail::force_attention_consumers

void choose_consumers(attn::Checked& c) {
  attn::AttnConfig& f = c.config;
  if (f.D != 64 || f.page > 0 || f.varlen) return;
  const std::int64_t forced = g_forced_consumers.load();
  if (forced == 2) return;
  if (forced != 3 && std::min(c.seq_q, c.seq_k) < (f.causal ? 8192 : 2048)) return;
  f.consumers = 3;
  if (f.causal) f.bn = 112;
}

PrimFunc attention_kernel(const AttnConfig& c) {
  const std::int64_t D = c.D, H = c.heads, HK = c.kv_heads, BN = c.bn, STAGES = c.stages;
  const std::int64_t NC = c.consumers, BM = c.rows_per_tile();
  if (NC != 2 && !(NC == 3 && D == 64 && c.page == 0))
    fail("tx.ops.attention", "consumers", {},
         std::to_string(NC) + " consumer warpgroups: 2, or 3 at head_dim 64 without a paged cache");
  const std::int64_t group = H / HK;
  const DType t = c.t;
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(D));
  const double c2 = scale * std::numbers::log2e;
  std::vector<std::string> names = {"q", "k", "v", "o", "lse"};
  const bool paged = c.page > 0;
  if (paged)
    names.insert(names.end(), {"cu_seqlens_q", "block_table", "seqused_k"});
  else if (c.varlen)
    names.insert(names.end(), {"cu_seqlens_q", "cu_seqlens_k"});
  names.insert(names.end(), {"batch", "seq_q", "seq_k"});
  const std::string name = "attention_d" + std::to_string(D) + (c.causal ? "_causal" : "") +
                           (paged      ? "_paged"
                            : c.varlen ? "_varlen"
                                       : "");
  return T::prim_func_n(name, names, [&](const std::vector<Handle>& h) {
    // Storage: (tokens, heads, D), or (batch * heads * seq, D).
    auto tokens = [&](const Handle& p, bool heads_major, std::int64_t nh, const char* dim) {
      Var n = T::dim(dim);
      return heads_major ? T::match_buffer(p, {n, D}, t) : T::match_buffer(p, {n, nh, D}, t);
    };
    auto Q = tokens(h[0], c.q_heads_major, H, "q_rows");
    // A paged cache: (pages, page, kv_heads, D), read page by page through
    // the block table.
    Var pages;
    if (paged) pages = T::dim("pages", {.max = 1 << 24});
    auto K = paged ? T::match_buffer(h[1], {pages, c.page, HK, D}, t)
                   : tokens(h[1], c.kv_heads_major, HK, "kv_rows");
    auto V = paged ? T::match_buffer(h[2], {pages, c.page, HK, D}, t)
                   : T::match_buffer(
                         h[2],
                         c.kv_heads_major ? Extents{K->dims[0], D} : Extents{K->dims[0], HK, D}, t);
    auto O = T::match_buffer(
        h[3], c.q_heads_major ? Extents{Q->dims[0], D} : Extents{Q->dims[0], H, D}, t);
    // (rows, 1) rather than flat: a flat buffer known at launch takes the
    // element-by-element masked copy, which register tiles do not have.
    auto LSE = T::match_buffer(h[4], {Q->dims[0], c.q_heads_major ? 1 : H}, f32);
    std::size_t at = 5;
    TileBuffer cu_q, cu_k, BT, SK;
    Var max_pages;
    if (paged) {
      max_pages = T::dim("max_pages", {.max = 1 << 20});
      Var nb = T::dim("batch_plus_1", {.min = 2, .max = (1 << 20) + 1});
      cu_q = T::match_buffer(h[at++], {nb}, i32);
      // (batch rows: the host checks they are cu_seqlens_q's batch; the
      // kernel reads them at min(b, rows - 1), which it can prove inside.)
      Var bt_rows = T::dim("table_rows", {.max = 1 << 20});
      BT = T::match_buffer(h[at++], {bt_rows, max_pages}, i32);
      SK = T::match_buffer(h[at++], {bt_rows}, i32);
    } else if (c.varlen) {
      Var nb = T::dim("batch_plus_1");
      cu_q = T::match_buffer(h[at++], {nb}, i32);
      cu_k = T::match_buffer(h[at++], {nb}, i32);
    }
    // Variable lengths: the batch is cu_seqlens' extent - 1 (the kernel then
    // knows b + 1 stays inside it); the scalar is passed but not read.
    Var batch_arg = T::match_scalar(h[at++], i32, "batch", DimFacts{.min = 1});
    Expr batch = c.varlen ? Expr(cu_q->dims[0] - 1) : Expr(batch_arg);
    Var seq_q = T::match_scalar(h[at++], i32, "seq_q", DimFacts{.min = 1});
    Var seq_k = T::match_scalar(h[at++], i32, "seq_k", DimFacts{.min = 1});
    // No parameter overlaps another (checked at launch): cu_seqlens, which
    // nothing writes, then read the same in every thread (uniform guards).
    T::no_alias();
    T::device_entry();
    auto cta = T::cta_id({c.ctas});
    auto wg = T::warpgroup_id({static_cast<int>(NC) + 1});
    auto tid = T::thread_id_in_wg({128});
    auto Qs = T::alloc_buffer({BM, D}, t, scope::shared, layouts::swizzled_tiles({BM, D}, t));
    auto Ks = T::alloc_buffer({STAGES, BN, D}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BN, D}, t));
    auto Vs = T::alloc_buffer({STAGES, BN, D}, t, scope::shared,
                              layouts::swizzled_tiles({STAGES, BN, D}, t));
    auto qpipe = T::pipeline({.stages = 1, .consumer_arrivals = static_cast<int>(NC)});
    auto kpipe = T::pipeline(
        {.stages = static_cast<int>(STAGES), .consumer_arrivals = static_cast<int>(NC)});
    auto vpipe = T::pipeline(
        {.stages = static_cast<int>(STAGES), .consumer_arrivals = static_cast<int>(NC)});
    // Pipeline positions, the same count on both sides: key blocks so far
    // (kv(0)) and live tiles so far (kv(1): a variable-length batch skips the
    // row blocks past a sequence's end, anywhere in the schedule).
    auto kv = T::alloc_buffer({2}, i32, scope::local);
    kv(0) = 0;
    kv(1) = 0;
    // Tiles: (row block, batch * head), counted at launch.
    auto tiles_m = T::let(ceildiv(seq_q, BM), "tiles_m");
    auto heads_total = T::let(batch * H, "heads_total");
    // Causal: mirrored pairs of row blocks, head by head; else a head's
    // blocks together (attn::tile_order).
    const attn::TileOrder order = attn::tile_order(cta, tiles_m, heads_total, c.ctas, c.causal);
    auto rounds = order.rounds;
    struct Tile {
      Var live, m0, b, h, q0, lq, k0, lk, n_end, diagonal, bt;
    };
    auto tile_of = [&](Var r) {
      Tile x;
      auto [valid, mb, bh] = order.at(r);
      // (The max(.., 0) state what holds, for the range analysis.)
      x.b = T::let(max(bh / H, 0), "b");
      x.h = T::let(max(bh % H, 0), "h");
      x.m0 = T::let(max(mb, 0) * BM, "m0");
      if (paged) {
        // The keys: the sequence's length, cut to its table's width.
        x.q0 = T::let(max(cu_q(x.b), 0), "q0");
        x.lq = T::let(max(cu_q(x.b + 1) - x.q0, 0), "lq");
        x.k0 = T::let(Expr(0), "k0");
        x.bt = T::let(min(x.b, BT->dims[0] - 1), "bt");
        x.lk = T::let(max(min(SK(x.bt), max_pages * c.page), 0), "lk");
      } else if (c.varlen) {
        x.q0 = T::let(max(cu_q(x.b), 0), "q0");
        x.lq = T::let(max(cu_q(x.b + 1) - x.q0, 0), "lq");
        x.k0 = T::let(max(cu_k(x.b), 0), "k0");
        x.lk = T::let(max(cu_k(x.b + 1) - x.k0, 0), "lk");
      } else {
        x.q0 = T::let(x.b * seq_q, "q0");
        x.lq = T::let(Expr(seq_q), "lq");
        x.k0 = T::let(x.b * seq_k, "k0");
        x.lk = T::let(Expr(seq_k), "lk");
      }
      x.live = T::let(valid && x.m0 < x.lq, "live");
      x.diagonal = T::let(c.bottom_right ? Expr(x.lk - x.lq) : Expr(0), "diagonal");
      auto nkb = T::let(ceildiv(x.lk, BN), "nkb");
      x.n_end = T::let(c.causal ? max(min(ceildiv(x.m0 + BM + x.diagonal, BN), nkb), 0) : Expr(nkb),
                       "n_end");
      return x;
    };
    // The regions of a tile: rows [s0, s0 + n) of head hd of batch b's sequence.
    auto rows = [&](const TileBuffer& X, bool heads_major, std::int64_t nh, Expr b, Expr hd,
                    Expr start, Expr s0, Expr seq, std::int64_t n) {
      if (heads_major) return X[region(span((b * nh + hd) * seq + s0, n), {0, D})];
      return X[region(span(start + s0, n), span(hd, 1), {0, D})];
    };
    T::if_(wg == 0,
           [&] {  // the producer
             T::cuda::decrease_registers(24);
             for (Var r : T::serial(rounds, "r")) {
               Tile x = tile_of(r);
               T::if_(x.live, [&] {
                 auto hk = T::let(x.h / group), qi = T::let(kv(1));
                 qpipe.producer_acquire(qi);
                 Tx::warpgroup::copy_async(
                     Qs, rows(Q, c.q_heads_major, H, x.b, x.h, x.q0, x.m0, seq_q, BM),
                     {.barrier = qpipe.full(qi), .partial = true});
                 T::if_(tid == 0, [&] { qpipe.producer_commit(qi); });
                 // A key block: BN rows of the sequence, or -- paged -- its
                 // BN / page pages, each a box into consecutive rows of the
                 // stage (pages past the keys are not loaded: their rows are
                 // masked, and V's zeroed; an id outside the cache starts
                 // past its end, which the TMA fills with zeros).
                 auto load = [&](const T::Pipeline& pipe, const TileBuffer& X,
                                 const TileBuffer& ring, Var it, Var j, Var s) {
                   if (!paged) {
                     Tx::warpgroup::copy_async(
                         ring[region(span(s, 1), {0, BN}, {0, D})],
                         rows(X, c.kv_heads_major, HK, x.b, hk, x.k0, j * BN, seq_k, BN),
                         {.barrier = pipe.full(it), .partial = true});
                     return;
                   }
                   for (std::int64_t i = 0; i < BN / c.page; ++i) {
                     auto logical = T::let(j * (BN / c.page) + i, "logical_page");
                     T::if_(logical * c.page < x.lk, [&] {
                       auto id = T::let(BT(x.bt, logical), "page_id");
                       auto page = T::let(
                           max(select(id < 0 || id >= pages, Expr(pages), Expr(id)), 0), "page");
                       Tx::warpgroup::copy_async(
                           ring[region(span(s, 1), span(i * c.page, c.page), {0, D})],
                           X[region(span(page, 1), {0, c.page}, span(hk, 1), {0, D})],
                           {.barrier = pipe.full(it), .partial = true});
                     });
                   }
                 };
                 for (Var j : T::serial(x.n_end, "j")) {
                   auto it = T::let(kv(0) + j), s = T::let(kpipe.stage(it));
                   kpipe.producer_acquire(it);
                   load(kpipe, K, Ks, it, j, s);
                   T::if_(tid == 0, [&] { kpipe.producer_commit(it); });
                   vpipe.producer_acquire(it);
                   load(vpipe, V, Vs, it, j, s);
                   T::if_(tid == 0, [&] { vpipe.producer_commit(it); });
                 }
                 kv(0) = kv(0) + x.n_end;
                 kv(1) = kv(1) + 1;
               });
             }
           })
        .else_([&] {  // the consumers: 64 query rows each
          T::cuda::increase_registers(NC == 2 ? 240 : 160);
          auto S = T::alloc_buffer({64, BN}, f32, scope::local, frag::wgmma_c(64, BN));
          auto P = T::alloc_buffer({64, BN}, t, scope::local, frag::wgmma_a(64, BN, t));
          auto Oacc = T::alloc_buffer({64, D}, f32, scope::local, frag::wgmma_c(64, D));
          auto row = [&](const char* n) {
            return T::alloc_buffer({64, 1}, f32, scope::local, frag::wgmma_row(64), n);
          };
          auto m = row("m"), l = row("l"), m_new = row("m_new"), alpha = row("alpha");
          auto row0 = T::let(max(wg - 1, 0) * 64);
          auto Qw = Qs[region(span(row0, 64), {0, D})];
          auto K_at = [&](Expr it) {
            return Ks[region(span(kpipe.stage(it), 1), {0, BN}, {0, D})];
          };
          auto V_at = [&](Expr it) {
            return Vs[region(span(vpipe.stage(it), 1), {0, BN}, {0, D})];
          };
          auto release = [&](const T::Pipeline& pipe, Expr it) {
            T::if_(tid == 0, [&] { pipe.consumer_release(it); });
          };
          auto me = T::let(max(wg - 1, 0), "me");
          auto tail = T::named_barriers({.count = 1, .threads = static_cast<int>(128 * NC)});
          for (Var r : T::serial(rounds, "r")) {
            Tile x = tile_of(r);
            T::if_(x.live, [&] {
              auto n_full = T::let(c.causal ? min(floordiv(x.m0 + x.diagonal + 1, BN), x.lk / BN)
                                            : Expr(x.lk / BN));
              auto softmax = [&](Var j) {
                T::if_(j >= n_full, [&] {
                  auto first_row = T::let(x.m0 + row0 + x.diagonal);
                  Tx::warpgroup::fill(S, -INFINITY, {.where = [&](Expr i, Expr k) -> Expr {
                                        Expr past_end = j * BN + k >= x.lk;
                                        if (!c.causal) return past_end;
                                        return past_end || j * BN + k > first_row + i;
                                      }});
                });
                Tx::warpgroup::max(m_new, S);
                Tx::warpgroup::maximum(m_new, m_new, m);
                Tx::warpgroup::sub(alpha, m, m_new);
                Tx::warpgroup::exp2(alpha, alpha, {.scale = c2});
                Tx::warpgroup::maximum(m, m, m_new);
                Tx::warpgroup::mul(m_new, m, -c2);
                Tx::warpgroup::exp2(S, S, {.scale = c2, .bias = m_new.all()});
                Tx::warpgroup::mul(l, l, alpha);
                Tx::warpgroup::sum(l, S, {.accum = true});
              };
              auto qi = T::let(kv(1));
              qpipe.consumer_wait(qi);
              Tx::warpgroup::fill(Oacc, 0.0f);
              Tx::warpgroup::fill(m, -1e30f);  // finite: rows with no key keep alpha = 1
              Tx::warpgroup::fill(l, 0.0f);
              T::if_(x.n_end > 0, [&] {
                auto it0 = T::let(kv(0));
                kpipe.consumer_wait(it0);
                Tx::warpgroup::gemm(S, Qw, K_at(it0), {.transpose_b = true});
                release(kpipe, it0);
                softmax(T::let(0, "j0"));
                Tx::warpgroup::cast(P, S);
                for (Var j : T::serial(1, x.n_end - 1, "j")) {
                  auto it = T::let(kv(0) + j);
                  kpipe.consumer_wait(it);
                  vpipe.consumer_wait(it - 1);
                  Tx::warpgroup::gemm(S, Qw, K_at(it), {.pending = 1, .transpose_b = true});
                  Tx::warpgroup::mul(Oacc, Oacc, alpha);
                  Tx::warpgroup::gemm(Oacc, P, V_at(it - 1), {.accum = true, .pending = 2});
                  T::cuda::wgmma_wait(1, S);
                  release(kpipe, it);
                  softmax(j);
                  T::cuda::wgmma_wait(0, Oacc, {.after = l});
                  release(vpipe, it - 1);
                  Tx::warpgroup::cast(P, S);
                }
                // Q is read by no more MMA: the producer may load the next tile's.
                release(qpipe, qi);
                auto last = T::let(kv(0) + x.n_end - 1);
                vpipe.consumer_wait(last);
                if (paged) {
                  // The last block's value rows past the keys hold what their
                  // page held (or an earlier block's): zeroed, as a NaN there
                  // would survive P = 0. Each consumer zeroes half the rows;
                  // both meet before either's MMA reads them.
                  auto key0 = T::let((x.n_end - 1) * BN, "key0");
                  T::if_(key0 + BN > x.lk, [&] {
                    auto half = T::let(me * (BN / 2), "half");
                    Tx::warpgroup::fill(
                        Vs[region(span(vpipe.stage(last), 1), span(half, BN / 2), {0, D})], 0.0f,
                        {.where = [&](Expr, Expr k, Expr) { return key0 + half + k >= x.lk; }});
                    T::cuda::fence_proxy_async();
                    tail.sync(0);
                  });
                }
                Tx::warpgroup::mul(Oacc, Oacc, alpha);
                Tx::warpgroup::gemm(Oacc, P, V_at(last), {.accum = true});
                release(vpipe, last);
              }).else_([&] { release(qpipe, qi); });
              kv(0) = kv(0) + x.n_end;
              kv(1) = kv(1) + 1;
              auto lse = row("lse");
              Tx::warpgroup::log2(lse, l);
              Tx::warpgroup::fma(lse, m, c2, lse);
              Tx::warpgroup::mul(lse, lse, std::numbers::ln2);
              Tx::warpgroup::maximum(l, l, 1e-30f);
              Tx::warpgroup::reciprocal(l, l);
              Tx::warpgroup::mul(Oacc, Oacc, l);
              auto Oout = T::alloc_buffer({64, D}, t, scope::local, frag::wgmma_c(64, D));
              Tx::warpgroup::cast(Oout, Oacc);
              // Rows past the sequence's end belong to the next sequence (or head).
              auto first = T::let(x.m0 + row0), rows_left = T::let(x.lq - first);
              if (c.q_heads_major) {
                auto rbase = T::let((x.b * H + x.h) * seq_q + first);
                Tx::warpgroup::copy(
                    O[region(span(rbase, 64), {0, D})], Oout,
                    {.partial = true, .where = [&](Expr i, Expr) { return i < rows_left; }});
                Tx::warpgroup::copy(
                    LSE[region(span(rbase, 64), {0, 1})], lse,
                    {.partial = true, .where = [&](Expr i, Expr) { return i < rows_left; }});
              } else {
                Tx::warpgroup::copy(
                    O[region(span(x.q0 + first, 64), span(x.h, 1), {0, D})], Oout,
                    {.partial = true, .where = [&](Expr i, Expr, Expr) { return i < rows_left; }});
                Tx::warpgroup::copy(
                    LSE[region(span(x.q0 + first, 64), span(x.h, 1))], lse,
                    {.partial = true, .where = [&](Expr i, Expr) { return i < rows_left; }});
              }
            });
          }
        });
  });
}

}  // namespace

namespace attn {

bool tokens_major(const Tensor& x) {  // (B, H, S, D) seen on (B, S, H, D) storage
  return x.transpose(1, 2).is_contiguous();
}

void check_device(Checked& c, const Device& d, const std::string& op, SourceLoc loc) {
  if (d.is_cuda()) {
    const runtime::DeviceInfo& info = runtime::device_info(d.index);
    if (info.cc_major != 9)
      fail(op, "q", loc,
           "the attention kernel is for sm_90 (H100 / H200: TMA, wgmma); this GPU is " + info.name +
               " (" + info.arch() + "); run it on the host (Device::host()) instead");
    c.config.ctas = info.sm_count;
  } else {
    c.config.ctas = std::max(4u, 2 * std::thread::hardware_concurrency());
  }
}

// Prefill over a paged KV cache: q packed (total_q, heads, D) with
// cu_seqlens_q; k and v caches (num_pages, page, kv_heads, D) read through
// block_table; seqused_k each sequence's key count.
Checked check_paged(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt,
                    SourceLoc loc, const std::string& op) {
  Checked c;
  for (auto [x, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    if (!x->defined()) fail(op, n, loc, "an undefined tensor");
    if (x->dtype() != bf16 && x->dtype() != f16)
      fail(op, n, loc, "dtype " + x->dtype().name() + ": attention takes bfloat16 or float16");
    if (x->dtype() != q.dtype())
      fail(op, n, loc, "dtype " + x->dtype().name() + " differs from q's " + q.dtype().name());
    if (!(x->device() == q.device()))
      fail(op, n, loc, "on " + x->device().str() + ", q on " + q.device().str());
  }
  if (q.shape().size() != 3)
    fail(op, "q", loc,
         "rank " + std::to_string(q.shape().size()) +
             ": with a block table q is (tokens, heads, head_dim), cu_seqlens_q");
  for (auto [x, n] : {std::pair{&k, "k"}, {&v, "v"}})
    if (x->shape().size() != 4 || !x->is_contiguous())
      fail(op, n, loc,
           "with a block table k and v are contiguous paged caches (num_pages, page_size, "
           "kv_heads, head_dim)");
  if (v.shape() != k.shape()) fail(op, "v", loc, "shape differs from k's");
  const std::int64_t H = q.shape()[1], D = q.shape()[2], P = k.shape()[1], HK = k.shape()[2];
  if (D != 64 && D != 128 && D != 256)
    fail(op, "q", loc, "head_dim " + std::to_string(D) + ": the kernel takes 64, 128 or 256");
  if (k.shape()[3] != D)
    fail(op, "k", loc,
         "head_dim " + std::to_string(k.shape()[3]) + " differs from q's " + std::to_string(D));
  if (P != 16 && P != 32 && P != 64)
    fail(op, "k", loc, "page_size " + std::to_string(P) + ": the kernel takes 16, 32 or 64");
  if (HK < 1 || H % HK != 0)
    fail(op, "k", loc,
         std::to_string(HK) + " K/V heads do not divide q's " + std::to_string(H) +
             " heads (grouped-query attention needs heads % kv_heads == 0)");
  if (k.shape()[0] > (1 << 24)) fail(op, "k", loc, "more than 2^24 pages");
  if (!opt.cu_seqlens_q || opt.cu_seqlens_k)
    fail(op, opt.cu_seqlens_k ? "cu_seqlens_k" : "cu_seqlens_q", loc,
         "a paged cache takes cu_seqlens_q (the packed queries) and seqused_k (each sequence's "
         "keys), not cu_seqlens_k");
  const Tensor& cq = *opt.cu_seqlens_q;
  if (!cq.defined() || cq.shape().size() != 1 || cq.dtype() != i32 || cq.shape()[0] < 2 ||
      !cq.is_contiguous() || !(cq.device() == q.device()))
    fail(op, "cu_seqlens_q", loc,
         "an int32 (batch + 1) tensor of cumulative offsets, on q's device");
  const std::int64_t B = cq.shape()[0] - 1;
  const Tensor& bt = *opt.block_table;
  if (!bt.defined() || bt.shape().size() != 2 || bt.dtype() != i32 || !bt.is_contiguous() ||
      bt.shape()[0] != B || bt.shape()[1] < 1 || bt.shape()[1] > (1 << 20) ||
      !(bt.device() == q.device()))
    fail(op, "block_table", loc,
         "a contiguous int32 (batch, max_pages) tensor on q's device (batch " + std::to_string(B) +
             " from cu_seqlens_q)");
  if (!opt.seqused_k || !opt.seqused_k->defined() || opt.seqused_k->shape() != std::vector{B} ||
      opt.seqused_k->dtype() != i32 || !opt.seqused_k->is_contiguous() ||
      !(opt.seqused_k->device() == q.device()))
    fail(op, "seqused_k", loc,
         "a paged cache needs seqused_k: int32 (batch), each sequence's key count");
  if (opt.max_seqlen_q < 1)
    fail(op, "max_seqlen_q", loc, "variable-length batches need max_seqlen_q (it sizes the grid)");
  if (opt.bottom_right && !opt.causal)
    fail(op, "bottom_right", loc, "applies to causal masking (.causal = true)");
  if (!(opt.scale >= 0) || std::isinf(opt.scale))
    fail(op, "scale", loc, "must be finite and positive (0: 1 / sqrt(head_dim))");
  c.config.D = D;
  c.config.heads = H;
  c.config.kv_heads = HK;
  c.config.t = q.dtype();
  c.config.causal = opt.causal;
  c.config.bottom_right = opt.bottom_right;
  c.config.scale = opt.scale;
  c.config.varlen = true;
  c.config.page = P;
  c.batch = B;
  c.seq_q = opt.max_seqlen_q;
  c.seq_k = 1;  // not read: the keys are seqused_k's
  c.q = q.is_contiguous() ? q : q.contiguous();
  if (!q.is_contiguous()) c.copies = ", q copied to contiguous first";
  c.k = k;
  c.v = v;
  check_device(c, q.device(), op, loc);
  // Key blocks of whole pages: 128 keys (64 at head_dim 256, for shared memory).
  c.config.bn = D == 256 ? 64 : 128;
  return c;
}

Checked check(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt,
              SourceLoc loc, const std::string& op) {
  if (opt.block_table) return check_paged(q, k, v, opt, loc, op);
  if (opt.seqused_k) fail(op, "seqused_k", loc, "applies to a paged cache (with .block_table)");
  Checked c;
  c.config.varlen = opt.cu_seqlens_q || opt.cu_seqlens_k;
  const std::size_t rank = c.config.varlen ? 3 : 4;
  const char* shape_words =
      c.config.varlen ? "(tokens, heads, head_dim)" : "(batch, heads, seq, head_dim)";
  for (auto [x, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    if (!x->defined()) fail(op, n, loc, "an undefined tensor");
    if (x->shape().size() != rank)
      fail(op, n, loc,
           "rank " + std::to_string(x->shape().size()) + ": attention takes " + shape_words +
               (c.config.varlen ? " with cu_seqlens" : ""));
    if (x->dtype() != bf16 && x->dtype() != f16)
      fail(op, n, loc, "dtype " + x->dtype().name() + ": attention takes bfloat16 or float16");
    if (x->dtype() != q.dtype())
      fail(op, n, loc, "dtype " + x->dtype().name() + " differs from q's " + q.dtype().name());
    if (!(x->device() == q.device()))
      fail(op, n, loc, "on " + x->device().str() + ", q on " + q.device().str());
  }
  const auto& qs = q.shape();
  const auto& ks = k.shape();
  const std::size_t hd = 1, dd = rank - 1;  // heads are dimension 1 in both forms
  const std::int64_t D = qs[dd], H = qs[hd], HK = ks[hd];
  if (D != 64 && D != 128 && D != 256)
    fail(op, "q", loc,
         "head_dim " + std::to_string(D) +
             ": the kernel takes 64, 128 or 256 (pad q, k and v "
             "with zeros to the next one, scale unchanged)");
  if (ks[dd] != D || v.shape()[dd] != D)
    fail(op, ks[dd] != D ? "k" : "v", loc,
         "head_dim " + std::to_string(ks[dd] != D ? ks[dd] : v.shape()[dd]) + " differs from q's " +
             std::to_string(D));
  if (H < 1 || HK < 1 || H % HK != 0)
    fail(op, "k", loc,
         std::to_string(HK) + " K/V heads do not divide q's " + std::to_string(H) +
             " heads (grouped-query attention needs heads % kv_heads == 0)");
  if (v.shape() != ks) fail(op, "v", loc, "shape differs from k's");
  c.config.D = D;
  c.config.heads = H;
  c.config.kv_heads = HK;
  c.config.t = q.dtype();
  c.config.causal = opt.causal;
  c.config.bottom_right = opt.bottom_right;
  if (opt.bottom_right && !opt.causal)
    fail(op, "bottom_right", loc, "applies to causal masking (.causal = true)");
  if (!(opt.scale >= 0) || std::isinf(opt.scale))
    fail(op, "scale", loc, "must be finite and positive (0: 1 / sqrt(head_dim))");
  c.config.scale = opt.scale;
  if (c.config.varlen) {
    if (!opt.cu_seqlens_q || !opt.cu_seqlens_k)
      fail(op, opt.cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q", loc,
           "variable-length batches take both cu_seqlens_q and cu_seqlens_k");
    for (auto [x, n] :
         {std::pair{opt.cu_seqlens_q, "cu_seqlens_q"}, {opt.cu_seqlens_k, "cu_seqlens_k"}}) {
      if (!x->defined() || x->shape().size() != 1 || x->dtype() != i32 || x->shape()[0] < 2)
        fail(op, n, loc, "an int32 (batch + 1) tensor of cumulative offsets");
      if (!(x->device() == q.device()))
        fail(op, n, loc, "on " + x->device().str() + ", q on " + q.device().str());
    }
    if (opt.cu_seqlens_q->shape() != opt.cu_seqlens_k->shape())
      fail(op, "cu_seqlens_k", loc, "a different batch than cu_seqlens_q");
    if (opt.max_seqlen_q < 1 || opt.max_seqlen_k < 1)
      fail(op, "max_seqlen_q", loc,
           "variable-length batches need max_seqlen_q and max_seqlen_k (the longest sequences; "
           "they size the grid)");
    c.batch = opt.cu_seqlens_q->shape()[0] - 1;
    c.seq_q = opt.max_seqlen_q;
    c.seq_k = opt.max_seqlen_k;
    c.q = q.is_contiguous() ? q : q.contiguous();
    c.k = k.is_contiguous() ? k : k.contiguous();
    c.v = v.is_contiguous() ? v : v.contiguous();
    if (!q.is_contiguous() || !k.is_contiguous() || !v.is_contiguous())
      c.copies = ", strided inputs copied to contiguous first";
  } else {
    if (ks[0] != qs[0])
      fail(op, "k", loc,
           "batch " + std::to_string(ks[0]) + " differs from q's " + std::to_string(qs[0]));
    c.batch = qs[0];
    c.seq_q = qs[2];
    c.seq_k = ks[2];
    // q: heads-major or tokens-major storage, else a tokens-major copy.
    c.config.q_heads_major = q.is_contiguous();
    c.q = q;
    if (!q.is_contiguous() && !tokens_major(q)) {
      c.q = q.transpose(1, 2).contiguous().transpose(1, 2);
      c.copies += ", q copied to (batch, seq, heads, dim)";
    }
    const bool kv_hm = k.is_contiguous() && v.is_contiguous();
    const bool kv_tm = tokens_major(k) && tokens_major(v);
    c.config.kv_heads_major = kv_hm;
    c.k = k;
    c.v = v;
    if (!kv_hm && !kv_tm) {
      c.k = k.transpose(1, 2).contiguous().transpose(1, 2);
      c.v = v.transpose(1, 2).contiguous().transpose(1, 2);
      c.copies += ", k and v copied to (batch, seq, heads, dim)";
    }
  }
  check_device(c, q.device(), op, loc);
  c.config.bn = key_block(D, opt.causal);
  return c;
}

}  // namespace attn

namespace {

using attn::AttnConfig;
using attn::check;
using attn::Checked;

std::atomic<std::uint64_t> g_built{0};

Kernel kernel_for(const AttnConfig& config, const Device& d) {
  return detail::special_cached(config.key(d), [&] {
    ++g_built;
    return compile(attention_kernel(config), {.device = d, .approx_math = true});
  });
}

std::string layout_words(bool heads_major) {
  return heads_major ? "(batch, heads, seq, dim)" : "(batch, seq, heads, dim)";
}

}  // namespace

std::uint64_t detail::attention_kernels_built() { return g_built.load(); }

void detail::force_attention_consumers(std::int64_t consumers) {
  if (consumers != 0 && consumers != 2 && consumers != 3)
    fail("tx.ops.detail.force_attention_consumers", "consumers", {},
         std::to_string(consumers) + ": 0 (the measured rule), 2 or 3");
  g_forced_consumers.store(consumers);
}

std::string detail::attention_cuda(std::int64_t head_dim, std::int64_t heads, std::int64_t kv_heads,
                                   DType t, bool causal, bool varlen, std::int64_t consumers) {
  AttnConfig c{.D = head_dim,
               .heads = heads,
               .kv_heads = kv_heads,
               .t = t,
               .causal = causal,
               .varlen = varlen};
  c.bn = key_block(head_dim, causal);
  c.consumers = consumers;
  if (consumers == 3 && causal) c.bn = 112;  // as choose_consumers
  return lowering::codegen_cuda(lowering::lower(attention_kernel(c), {.arch = "sm_90a"}));
}

std::string attention_plan(const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionOptions& opt) {
  Checked c = check(q, k, v, opt, std::source_location::current());
  choose_consumers(c);
  std::string where = q.device().is_cuda() ? "wgmma" : "host";
  std::string s = where + ", key blocks of " + std::to_string(c.config.bn) + ", " +
                  std::to_string(c.config.consumers) + " consumer warpgroups (" +
                  std::to_string(c.config.rows_per_tile()) + " query rows a tile), " +
                  std::to_string(c.config.ctas) + " persistent CTAs" +
                  (c.config.causal ? ", causal row blocks in mirrored pairs head by head" : "");
  if (c.config.page > 0)
    s += ", variable lengths (packed tokens), K/V from a paged cache (pages of " +
         std::to_string(c.config.page) + ")";
  else if (c.config.varlen)
    s += ", variable lengths (packed tokens)";
  else
    s += ", q " + layout_words(c.config.q_heads_major) + ", k/v " +
         layout_words(c.config.kv_heads_major);
  return s + c.copies;
}

AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v,
                          const AttentionOptions& opt, std::source_location loc) {
  Checked c = check(q, k, v, opt, loc);
  choose_consumers(c);
  const Device d = q.device();
  const std::int64_t D = c.config.D, H = c.config.heads, HK = c.config.kv_heads;
  const std::int64_t BM = c.config.rows_per_tile();
  AttentionResult r;
  if (c.config.page > 0) {
    const std::int64_t tq = q.shape()[0];
    r.out = Tensor::empty({tq, H, D}, q.dtype(), d);
    Tensor lse = Tensor::empty({std::max<std::int64_t>(tq, 1), H}, f32, d);
    if (tq > 0)
      kernel_for(c.config, d)
          .launch({c.q, c.k, c.v, r.out, lse, *opt.cu_seqlens_q, *opt.block_table, *opt.seqused_k,
                   c.batch, c.seq_q, c.seq_k},
                  loc);
    r.lse = tq > 0 ? lse.transpose(0, 1) : lse.slice(0, 0, 0).transpose(0, 1);
    return r;
  }
  if (c.config.varlen) {
    const std::int64_t tq = q.shape()[0], tk = k.shape()[0];
    r.out = Tensor::empty({tq, H, D}, q.dtype(), d);
    Tensor lse = Tensor::empty({std::max<std::int64_t>(tq, 1), H}, f32, d);
    if (tq == 0) {
      r.lse = lse.slice(0, 0, 0).transpose(0, 1);
      return r;
    }
    if (tk == 0) {  // no keys: every row sees none
      r.out.fill_bits(0);
      lse.fill_bits(0xff800000u);
      r.lse = lse.transpose(0, 1);
      return r;
    }
    Kernel kern = kernel_for(c.config, d);
    kern.launch({c.q, c.k, c.v, r.out, lse, *opt.cu_seqlens_q, *opt.cu_seqlens_k, c.batch, c.seq_q,
                 c.seq_k},
                loc);
    r.lse = lse.transpose(0, 1);
    return r;
  }
  const std::int64_t B = c.batch, Sq = c.seq_q, Sk = c.seq_k;
  // O and lse in q's layout; the kernel sees them flat.
  Tensor o = c.config.q_heads_major ? Tensor::empty({B, H, Sq, D}, q.dtype(), d)
                                    : Tensor::empty({B, Sq, H, D}, q.dtype(), d);
  Tensor lse = c.config.q_heads_major ? Tensor::empty({B, H, Sq}, f32, d)
                                      : Tensor::empty({B, Sq, H}, f32, d);
  r.out = c.config.q_heads_major ? o : o.transpose(1, 2);
  r.lse = c.config.q_heads_major ? lse : lse.permute({0, 2, 1});
  if (B == 0 || Sq == 0) return r;
  if (Sk == 0) {  // PyTorch: an empty softmax times an empty V is 0
    o.fill_bits(0);
    lse.fill_bits(0xff800000u);
    return r;
  }
  auto flat = [&](const Tensor& x, bool heads_major, std::int64_t nh, std::int64_t s) {
    return heads_major ? x.reshape({B * nh * s, D}) : x.transpose(1, 2).reshape({B * s, nh, D});
  };
  Tensor qk = flat(c.q, c.config.q_heads_major, H, Sq);
  Tensor kk = flat(c.k, c.config.kv_heads_major, HK, Sk);
  Tensor vk = flat(c.v, c.config.kv_heads_major, HK, Sk);
  Tensor ok = c.config.q_heads_major ? o.reshape({B * H * Sq, D}) : o.reshape({B * Sq, H, D});
  Tensor lk = c.config.q_heads_major ? lse.reshape({B * H * Sq, 1}) : lse.reshape({B * Sq, H});
  if (B > 2147483647 / std::max<std::int64_t>(Sq, Sk) || B * H * ((Sq + BM - 1) / BM) > 2147483647)
    fail("tx.ops.attention", "q", loc, "more than 2^31 tiles or tokens in one call");
  Kernel kern = kernel_for(c.config, d);
  kern.launch({qk, kk, vk, ok, lk, B, Sq, Sk}, loc);
  return r;
}

}  // namespace tx::ops
