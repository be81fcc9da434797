// all_gather(a) @ b across the ranks of a group (tx/ops/dist.hpp).
//
// The fused path moves A's row blocks with the copy engines and orders them
// against the GEMM with flags -- no SM is taken from the GEMM, and no kernel
// of its own is launched for the communication:
//
//   rank r, call e (the epoch, counted from 1), stream S (the caller's), copy
//   stream C (this op's):
//     C waits for S (a's rows are ready)
//     for each peer j, the one that needs r's block first first (j = r - 1,
//     r - 2, ...: rank j's GEMM walks its tile rows from its own block on):
//       C waits until done_r[j] >= e - 1   j's GEMM of call e - 1 no longer
//                                          reads the block r wrote into it
//       C copies a into j's gathered buffer at rows [r m, (r + 1) m)
//       C writes ready_j[r] = e            after a system-wide fence
//     S runs the GEMM: tiles of r's own block first (from a itself), then
//       block r + 1, r + 2, ..., each loaded once ready_r[owner] >= e
//     S writes done_j[r] = e on every peer j   (r is done reading j's block)
//     S waits for C
//   flags live where they are waited for (ready_r, done_r in r's memory) and
//   are written by the peers: a wait is a local load (stream memop or
//   ld.acquire), a signal a remote write. Counters only grow, so no flag is
//   ever reset (2^32 calls).
// Host ranks (threads) run the same protocol with host copies and atomics,
// and a SIMT kernel with the same waits.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "tx/builder.hpp"
#include "tx/ops/dist.hpp"
#include "tx/ops/matmul.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::ops {

// What both fused ops keep: the group, the symmetric buffer that peers'
// copy engines fill (`buffer`: ranks * max_rows * extent elements), the
// flags (u32: a first round [ranks] -- ready / arrived -- then done
// [ranks]), the copy stream and its completion event, the calls made.
struct FusedCommState {
  dist::Group group;
  std::int64_t max_rows = 0, extent = 0;  // extent: K (all-gather) or N (reduce-scatter)
  DType dtype = bf16;
  Tensor buffer, flags;
  Stream copy;  // GPU ranks: the copy engine's stream
  std::optional<Event> copied;
  std::uint32_t epoch = 0;

  FusedCommState(const dist::Group& g, std::int64_t rows, const char* extent_name, std::int64_t ext,
                 DType t, const char* op, SourceLoc at)
      : group(g), max_rows(rows), extent(ext), dtype(t) {
    if (!g.defined()) fail(op, "group", at, "is not a group (a default-constructed Group)");
    if (rows < 1) fail(op, "max_rows", at, "is " + std::to_string(rows) + "; at least 1");
    if (ext < 1) fail(op, extent_name, at, "is " + std::to_string(ext) + "; at least 1");
    if (!(t == f16 || t == bf16))
      fail(op, "dtype", at, "is " + t.name() + "; f16 and bf16 are multiplied");
    buffer = g.empty_symmetric({g.size() * rows * ext}, t);
    flags = g.symmetric_flags(2 * g.size());
    if (g.device().is_cuda()) {
      copy = Stream::create(g.device());
      copied.emplace(g.device(), false);
    }
  }
  // The device address of flag `index` in rank `owner`'s copy.
  runtime::DevicePtr flag(int owner, int index) const {
    return reinterpret_cast<runtime::DevicePtr>(flags.symmetric()->peers[owner]) +
           4u * static_cast<unsigned>(index);
  }
};

struct AllGatherMatmul::State : FusedCommState {
  using FusedCommState::FusedCommState;
  std::optional<Event> start;  // the caller's stream reached the call
};

namespace {

constexpr const char* kOp = "tx.ops.all_gather_matmul";

// The fused paths count calls on the host (the epoch their flags and copy
// engines' memops carry): a CUDA graph would freeze one call's values, and
// every replay would find its flags already reached and read blocks still
// in flight. Refused while the caller's stream is being captured.
void refuse_capture(const char* op, const Device& d, SourceLoc at) {
  if (d.is_cuda() && runtime::stream_capturing(d.index, current_stream(d).handle()))
    fail(op, "a", at,
         "its fused path cannot be captured into a CUDA graph: the call count its flags carry "
         "is kept on the host, so a replay would not advance it. Call it outside the capture "
         "(the all-reduce, all-gather and reduce-scatter ops can be captured), or take "
         "FusionPath::sequential inside it");
}

// Compiled kernels by shape and configuration; the ranks of one process
// share them.
const Kernel& fused_kernel(std::int64_t M, std::int64_t N, std::int64_t K, DType t,
                           const MatmulTiling* tiling, bool b_nk, int ranks, Device device) {
  static std::mutex mu;
  static std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::string, std::string,
                             bool, int, std::string>,
                  Kernel>
      kernels;
  const std::int64_t sms = device.is_cuda() ? runtime::current_device().sm_count : 1;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(M, N, K, t.name(), tiling ? tiling->str() : std::string("simt"), b_nk,
                             ranks, device.str() + "|" + std::to_string(sms));
  auto it = kernels.find(key);
  if (it == kernels.end()) {
    PrimFunc f = tiling ? detail::all_gather_matmul_kernel(M, N, K, t, *tiling, sms, b_nk, ranks)
                        : detail::all_gather_matmul_simt(M, N, K, t, ranks);
    it = kernels.emplace(key, compile(f, {.device = device})).first;
  }
  return it->second;
}

bool is_transposed(const Tensor& b) {
  return b.shape().size() == 2 && b.strides()[0] == 1 && b.strides()[1] == b.shape()[0];
}

// Spins (yielding) until the host flag reaches `value` modulo 2^32.
void host_wait(const std::uint32_t* flag, std::uint32_t value) {
  std::atomic_ref<const std::uint32_t> f(*flag);
  while (static_cast<std::int32_t>(f.load(std::memory_order_acquire) - value) < 0)
    std::this_thread::yield();
}
void host_signal(std::uint32_t* flag, std::uint32_t value) {
  std::atomic_ref<std::uint32_t>(*flag).store(value, std::memory_order_release);
}

// The fused paths win once the GEMM is long enough to hide the copies and
// the flags behind it. 2 H200 (bench_dist, 2026-11-28): a 8.6 GFLOP GEMM
// per rank (M 512, K 4096, N 2048 / 4096) ran 0.99x (all-gather) and 0.77x
// (reduce-scatter) the sequential time; 481 GFLOP (M 2048) 1.15x / 1.12x.
// Automatic fuses from 2^36 FLOPs per rank (69 GFLOP, ~90 us of GEMM);
// TX_DIST_FUSE_FLOPS sets another threshold. Host ranks always fuse (their
// runs are tests of the protocol).
double fuse_from_flops() {
  static const double v = [] {
    const char* e = std::getenv("TX_DIST_FUSE_FLOPS");
    return e && *e ? std::atof(e) : std::ldexp(1.0, 36);
  }();
  return v;
}
struct PathChoice {
  bool fused;
  std::string why;  // for a plan: why this path
};
std::string gflop(double flops) {
  char b[64];
  std::snprintf(b, sizeof b, "%.1f GFLOP", flops / 1e9);
  return b;
}
PathChoice choose_path(FusionPath asked, bool fusable, const std::string& unfusable_why,
                       double flops, const Device& d) {
  if (asked == FusionPath::sequential) return {false, "asked"};
  if (asked == FusionPath::fused) return {true, "asked"};
  if (!fusable) return {false, unfusable_why};
  if (d.is_cuda() && flops < fuse_from_flops())
    return {false, "a GEMM of " + gflop(flops) + " per rank, below the " +
                       gflop(fuse_from_flops()) + " from which fusing pays"};
  return {true, d.is_cuda() ? "a GEMM of " + gflop(flops) + " per rank" : "host ranks"};
}

}  // namespace

AllGatherMatmul::AllGatherMatmul(const dist::Group& group, std::int64_t max_rows, std::int64_t K,
                                 DType dtype, std::source_location loc)
    : state_(std::make_shared<State>(group, max_rows, "K", K, dtype, kOp, SourceLoc(loc))) {
  if (group.device().is_cuda()) state_->start.emplace(group.device(), false);
}

std::string AllGatherMatmul::plan(std::int64_t m, std::int64_t N,
                                  AllGatherMatmulOptions opt) const {
  const State& s = *state_;
  const Device d = s.group.device();
  const std::string ranks = std::to_string(s.group.size()) + " ranks";
  const MatmulTiling* tiling = detail::all_gather_matmul_tiling(m, N, s.extent, s.dtype, d);
  const double flops = 2.0 * static_cast<double>(s.group.size() * m) * N * s.extent;
  const PathChoice c = choose_path(opt.path, tiling != nullptr || !d.is_cuda(),
                                   "no wgmma tiling divides the rows", flops, d);
  if (!c.fused)
    return "sequential (" + c.why + "): " + (d.is_cuda() ? "NCCL all-gather" : "host all-gather") +
           ", then matmul, " + ranks;
  return "fused " + (tiling ? tiling->str() : std::string("SIMT")) + ", " + ranks +
         (d.is_cuda() ? ", copy engine pushes, flags" : ", host copies, flags") + " (" + c.why +
         ")";
}

Tensor AllGatherMatmul::operator()(const Tensor& a, const Tensor& b, AllGatherMatmulOptions opt,
                                   std::source_location loc) {
  State& s = *state_;
  const SourceLoc at(loc);
  const dist::Group& g = s.group;
  const Device d = g.device();
  const int W = g.size(), r = g.rank();
  if (!a.defined() || a.shape().size() != 2)
    fail(kOp, "a", at, "must be a 2-D tensor (this rank's rows, K)");
  if (!b.defined() || b.shape().size() != 2) fail(kOp, "b", at, "must be a 2-D tensor (K, N)");
  if (a.dtype() != s.dtype || b.dtype() != s.dtype)
    fail(kOp, a.dtype() != s.dtype ? "a" : "b", at,
         "holds " + (a.dtype() != s.dtype ? a.dtype() : b.dtype()).name() +
             " but this AllGatherMatmul was built for " + s.dtype.name());
  const std::int64_t m = a.shape()[0], N = b.shape()[1];
  if (a.shape()[1] != s.extent || b.shape()[0] != s.extent)
    fail(kOp, a.shape()[1] != s.extent ? "a" : "b", at,
         "has an inner extent of " +
             std::to_string(a.shape()[1] != s.extent ? a.shape()[1] : b.shape()[0]) +
             "; this AllGatherMatmul was built for K = " + std::to_string(s.extent));
  if (m > s.max_rows)
    fail(kOp, "a", at,
         "has " + std::to_string(m) + " rows, more than the " + std::to_string(s.max_rows) +
             " this AllGatherMatmul was built for");
  if (!a.is_contiguous()) fail(kOp, "a", at, "is a strided view; pass a.contiguous()");
  const bool b_nk = !b.is_contiguous() && is_transposed(b);
  if (!b.is_contiguous() && !b_nk)
    fail(kOp, "b", at,
         "is a strided view other than a transposed (N, K) tensor; pass .contiguous()");
  if (!(a.device() == d) || !(b.device() == d))
    fail(kOp, a.device() == d ? "b" : "a", at,
         "is on " + (a.device() == d ? b.device() : a.device()).str() +
             " but this rank's device is " + d.str());
  const std::int64_t M = W * m;
  const MatmulTiling* tiling = detail::all_gather_matmul_tiling(m, N, s.extent, s.dtype, d);
  const bool fused =
      choose_path(opt.path, tiling != nullptr || !d.is_cuda(), "", 2.0 * M * N * s.extent, d).fused;
  if (fused && m > 0 && N > 0) refuse_capture(kOp, d, at);  // before anything is recorded
  Tensor c = Tensor::empty({M, N}, s.dtype, d);
  if (m == 0 || N == 0) return c;
  if (!fused) {
    Tensor gathered = Tensor::empty({M, s.extent}, s.dtype, d);
    g.nccl_all_gather(a, gathered);
    return matmul(gathered, b, {}, loc);
  }

  const std::uint32_t e = ++s.epoch;
  const std::int64_t block = m * s.extent;  // elements of one rank's rows
  const std::size_t block_bytes = static_cast<std::size_t>(block) * s.dtype.bytes();
  const auto& sym = *s.buffer.symmetric();
  const auto& fl = *s.flags.symmetric();
  Tensor gathered = s.buffer.slice(0, 0, M * s.extent).reshape({M, s.extent});
  Tensor ready = s.flags.slice(0, 0, W);
  // The SIMT kernel reads B as (K, N).
  const Tensor bk = tiling ? (b_nk ? b.transpose(0, 1) : b) : (b_nk ? b.contiguous() : b);
  const Kernel& k = fused_kernel(M, N, s.extent, s.dtype, tiling, tiling && b_nk, W, d);
  auto peer_at = [](void* base, std::size_t offset) { return static_cast<char*>(base) + offset; };
  const std::size_t rows_at = static_cast<std::size_t>(r) * block_bytes;

  if (!d.is_cuda()) {
    for (int step = 1; step < W; ++step) {
      const int j = (r - step + W) % W;
      host_wait(static_cast<const std::uint32_t*>(fl.peers[r]) + W + j, e - 1);
      std::memcpy(peer_at(sym.peers[j], rows_at), a.data_ptr(), block_bytes);
      host_signal(static_cast<std::uint32_t*>(fl.peers[j]) + r, e);
    }
    k.launch({a, gathered, bk, c, ready, r, static_cast<std::int64_t>(e)}, {.device = d});
    for (int step = 1; step < W; ++step) {
      const int j = (r + step) % W;
      host_signal(static_cast<std::uint32_t*>(fl.peers[j]) + W + r, e);
    }
    return c;
  }

  const int ordinal = d.index;
  const Stream S = current_stream(d);
  auto flag = [&](int owner, int index) { return s.flag(owner, index); };
  // Loaded before anything on this GPU waits for a peer: a module load may
  // wait for the device to go idle (the driver's lazy loading).
  k.prepare_gpu();
  s.start->record(S);
  s.start->wait(s.copy);
  for (int step = 1; step < W; ++step) {
    const int j = (r - step + W) % W;
    runtime::stream_wait_value32(ordinal, s.copy.handle(), flag(r, W + j), e - 1);
    runtime::copy_peer_async(
        ordinal, reinterpret_cast<runtime::DevicePtr>(peer_at(sym.peers[j], rows_at)),
        reinterpret_cast<runtime::DevicePtr>(a.data_ptr()), block_bytes, s.copy.handle());
    runtime::stream_write_value32(ordinal, s.copy.handle(), flag(j, r), e);
  }
  s.copied->record(s.copy);
  k.launch({a, gathered, bk, c, ready, r, static_cast<std::int64_t>(e)},
           {.device = d, .stream = S});
  for (int step = 1; step < W; ++step) {
    const int j = (r + step) % W;
    runtime::stream_write_value32(ordinal, S.handle(), flag(j, W + r), e);
  }
  s.copied->wait(S);
  // Every rank's pushes enqueued before this thread may block in the driver.
  g.enqueue_barrier();
  return c;
}

// --------------------------------------------------- matmul_reduce_scatter
//
//   rank r, call e, stream S, copy stream C, m rows per rank:
//     for each peer j, the one after r first (j = r + 1, r + 2, ...):
//       S: P_j = a[rows of j] @ b              (a partial, kept until the call ends)
//       S: records ev_j; C waits for it
//       C waits until done_r[j] >= e - 1        j has summed r's slot of call e - 1
//       C copies P_j into j's receive buffer, slot r
//       C writes arrived_j[r] = e
//     S: own = a[rows of r] @ b                 (while the pushes travel)
//     S waits until arrived_r[i] >= e for every peer i
//     S: c = sum over ranks i in order of (i == r ? own : received_r[i]), f32, rounded once
//     S writes done_i[r] = e on every peer i; S waits for C
// The partials stay alive until C has copied them (S waits for C before the
// call's tensors are freed in S's order).

struct MatmulReduceScatter::State : FusedCommState {
  using FusedCommState::FusedCommState;
  std::vector<Event> block_done;  // per peer: its partial is complete on S
};

namespace {

constexpr const char* kRsOp = "tx.ops.matmul_reduce_scatter";

// c (chunks, V) = sum over ranks i, in order, of own (i == rank) or
// received[i]: 16-byte chunks, an f32 sum rounded once.
PrimFunc rank_sum_kernel(DType t, int ranks) {
  const std::int64_t V = 16 / t.bytes();
  return T::prim_func("reduce_scatter_sum_" + t.short_name(), [&](Handle own_h, Handle recv_h,
                                                                  Handle out_h, Handle rank_h) {
    Var chunks = T::dim("chunks");
    auto Own = T::match_buffer(own_h, {chunks, V}, t, std::nullopt, "Own");
    // Slot i (rank i's partial) at rows [i chunks, (i + 1) chunks).
    Var slots = T::dim("slot_rows");
    auto Recv = T::match_buffer(recv_h, {slots, V}, t, std::nullopt, "Received");
    auto Out = T::match_buffer(out_h, {chunks, V}, t, std::nullopt, "Out");
    Var rank = T::match_scalar(rank_h, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
    T::device_entry();
    auto cta = T::cta_id({ceildiv(chunks, 256)}, "cta");
    auto tid = T::thread_id({256}, "tid");
    auto c = T::let(cta * 256 + tid, "c");
    T::if_(c < chunks, [&] {
      auto acc = T::alloc_buffer({V}, f32, scope::local, std::nullopt, "acc");
      auto in = T::alloc_buffer({1, V}, t, scope::local, std::nullopt, "in");
      for (Var j : T::unroll(V, "j")) acc(j) = 0.0f;
      for (Var i : T::unroll(ranks, "i")) {
        T::if_(i == rank, [&] {
          Tx::thread::copy(in, Own[region(span(c, 1), span(0, V))], {.partial = true});
        }).else_([&] {
          Tx::thread::copy(in, Recv[region(span(i * chunks + c, 1), span(0, V))],
                           {.partial = true});
        });
        for (Var j : T::unroll(V, "j")) acc(j) = acc(j) + cast(in(0, j), f32);
      }
      for (Var j : T::unroll(V, "j")) in(0, j) = cast(acc(j), t);
      Tx::thread::copy(Out[region(span(c, 1), span(0, V))], in, {.partial = true});
    });
  });
}

const Kernel& rank_sum(DType t, int ranks, Device device) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, std::string>, Kernel> kernels;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(t.name(), ranks, device.str());
  auto it = kernels.find(key);
  if (it == kernels.end())
    it = kernels.emplace(key, compile(rank_sum_kernel(t, ranks), {.device = device})).first;
  return it->second;
}

}  // namespace

MatmulReduceScatter::MatmulReduceScatter(const dist::Group& group, std::int64_t max_rows,
                                         std::int64_t N, DType dtype, std::source_location loc)
    : state_(std::make_shared<State>(group, max_rows, "N", N, dtype, kRsOp, SourceLoc(loc))) {
  if (group.device().is_cuda())
    for (int i = 0; i < group.size(); ++i) state_->block_done.emplace_back(group.device(), false);
}

namespace {
PathChoice rs_path(const MatmulReduceScatterOptions& opt, std::int64_t M, std::int64_t K,
                   std::int64_t N, DType t, const Device& d) {
  return choose_path(opt.path, N * t.bytes() % 16 == 0,
                     "N * element bytes is not a multiple of 16, the sum's chunk", 2.0 * M * K * N,
                     d);
}
}  // namespace

std::string MatmulReduceScatter::plan(std::int64_t m, std::int64_t K,
                                      MatmulReduceScatterOptions opt) const {
  const State& s = *state_;
  const Device d = s.group.device();
  const std::string ranks = std::to_string(s.group.size()) + " ranks";
  if (opt.path == FusionPath::fused && s.extent * s.dtype.bytes() % 16 != 0)
    return "fused: not possible (N * element bytes is not a multiple of 16)";
  const PathChoice c = rs_path(opt, s.group.size() * m, K, s.extent, s.dtype, d);
  if (!c.fused)
    return "sequential (" + c.why + "): matmul, then " + (d.is_cuda() ? "NCCL" : "host") +
           " reduce-scatter, " + ranks;
  return "fused: matmul per row block of " + std::to_string(m) + " rows, peers' blocks first, " +
         (d.is_cuda() ? "copy engine pushes" : "host copies") +
         ", flags, then the rank-order sum, " + ranks + " (" + c.why + ")";
}

Tensor MatmulReduceScatter::operator()(const Tensor& a, const Tensor& b,
                                       MatmulReduceScatterOptions opt, std::source_location loc) {
  State& s = *state_;
  const SourceLoc at(loc);
  const dist::Group& g = s.group;
  const Device d = g.device();
  const int W = g.size(), r = g.rank();
  if (!a.defined() || a.shape().size() != 2)
    fail(kRsOp, "a", at, "must be a 2-D tensor (ranks * m, this rank's K)");
  if (!b.defined() || b.shape().size() != 2)
    fail(kRsOp, "b", at, "must be a 2-D tensor (this rank's K, N)");
  if (a.dtype() != s.dtype || b.dtype() != s.dtype)
    fail(kRsOp, a.dtype() != s.dtype ? "a" : "b", at,
         "holds " + (a.dtype() != s.dtype ? a.dtype() : b.dtype()).name() +
             " but this MatmulReduceScatter was built for " + s.dtype.name());
  if (b.shape()[1] != s.extent)
    fail(kRsOp, "b", at,
         "has " + std::to_string(b.shape()[1]) +
             " columns; this MatmulReduceScatter was built for N = " + std::to_string(s.extent));
  if (a.shape()[1] != b.shape()[0])
    fail(kRsOp, "b", at,
         "has " + std::to_string(b.shape()[0]) + " rows but a has " + std::to_string(a.shape()[1]) +
             " columns");
  if (a.shape()[0] % W != 0)
    fail(kRsOp, "a", at,
         "has " + std::to_string(a.shape()[0]) + " rows, not a multiple of the " +
             std::to_string(W) + " ranks");
  const std::int64_t m = a.shape()[0] / W;
  if (m > s.max_rows)
    fail(kRsOp, "a", at,
         "has " + std::to_string(m) + " rows per rank, more than the " +
             std::to_string(s.max_rows) + " this MatmulReduceScatter was built for");
  if (!a.is_contiguous()) fail(kRsOp, "a", at, "is a strided view; pass a.contiguous()");
  if (!(a.device() == d) || !(b.device() == d))
    fail(kRsOp, a.device() == d ? "b" : "a", at,
         "is on " + (a.device() == d ? b.device() : a.device()).str() +
             " but this rank's device is " + d.str());
  if (opt.path == FusionPath::fused && s.extent * s.dtype.bytes() % 16 != 0)
    fail(kRsOp, "b", at,
         "has N = " + std::to_string(s.extent) +
             ": the fused path sums 16-byte chunks (N * element bytes % 16 == 0); use "
             "FusionPath::automatic or sequential");
  const bool fused = m > 0 && rs_path(opt, W * m, a.shape()[1], s.extent, s.dtype, d).fused;
  if (fused) refuse_capture(kRsOp, d, at);  // before anything is recorded
  Tensor c = Tensor::empty({m, s.extent}, s.dtype, d);
  if (m == 0) return c;
  if (!fused) {
    Tensor full = matmul(a, b, {}, loc);
    g.nccl_reduce_scatter(full, c);
    return c;
  }

  const std::uint32_t e = ++s.epoch;
  const std::int64_t V = 16 / s.dtype.bytes(), chunks = m * s.extent / V;
  const std::size_t slot_bytes = static_cast<std::size_t>(m * s.extent) * s.dtype.bytes();
  const auto& sym = *s.buffer.symmetric();
  const auto& fl = *s.flags.symmetric();
  // Slot i of every rank's receive buffer: what rank i sent (calls of m rows
  // use the first ranks * m * N elements).
  auto slot_at = [&](int owner, int slot) {
    return static_cast<char*>(sym.peers[owner]) + static_cast<std::size_t>(slot) * slot_bytes;
  };
  auto rows_of = [&](int j) { return a.slice(0, j * m, (j + 1) * m); };
  const Kernel& sum = rank_sum(s.dtype, W, d);
  Tensor received = s.buffer.slice(0, 0, W * m * s.extent).reshape({W * chunks, V});
  std::vector<Tensor> partials(static_cast<std::size_t>(W));

  if (!d.is_cuda()) {
    for (int step = 1; step < W; ++step) {
      const int j = (r + step) % W;
      Tensor p = matmul(rows_of(j), b, {}, loc);
      host_wait(static_cast<const std::uint32_t*>(fl.peers[r]) + W + j, e - 1);
      std::memcpy(slot_at(j, r), p.data_ptr(), slot_bytes);
      host_signal(static_cast<std::uint32_t*>(fl.peers[j]) + r, e);
    }
    Tensor own = matmul(rows_of(r), b, {}, loc);
    for (int step = 1; step < W; ++step)
      host_wait(static_cast<const std::uint32_t*>(fl.peers[r]) + (r + step) % W, e);
    sum.launch({own.reshape({chunks, V}), received, c.reshape({chunks, V}), r}, {.device = d});
    for (int step = 1; step < W; ++step)
      host_signal(static_cast<std::uint32_t*>(fl.peers[(r + step) % W]) + W + r, e);
    return c;
  }

  const int ordinal = d.index;
  const Stream S = current_stream(d);
  auto flag = [&](int owner, int index) { return s.flag(owner, index); };
  // Loaded before this GPU's streams wait for a peer (see AllGatherMatmul).
  sum.prepare_gpu();
  for (int step = 1; step < W; ++step) {
    const int j = (r + step) % W;
    partials[static_cast<std::size_t>(j)] = matmul(rows_of(j), b, {}, loc);
    Event& done = s.block_done[static_cast<std::size_t>(j)];
    done.record(S);
    done.wait(s.copy);
    runtime::stream_wait_value32(ordinal, s.copy.handle(), flag(r, W + j), e - 1);
    runtime::copy_peer_async(
        ordinal, reinterpret_cast<runtime::DevicePtr>(slot_at(j, r)),
        reinterpret_cast<runtime::DevicePtr>(partials[static_cast<std::size_t>(j)].data_ptr()),
        slot_bytes, s.copy.handle());
    runtime::stream_write_value32(ordinal, s.copy.handle(), flag(j, r), e);
  }
  s.copied->record(s.copy);
  Tensor own = matmul(rows_of(r), b, {}, loc);
  for (int step = 1; step < W; ++step)
    runtime::stream_wait_value32(ordinal, S.handle(), flag(r, (r + step) % W), e);
  sum.launch({own.reshape({chunks, V}), received, c.reshape({chunks, V}), r},
             {.device = d, .stream = S});
  for (int step = 1; step < W; ++step)
    runtime::stream_write_value32(ordinal, S.handle(), flag((r + step) % W, W + r), e);
  // The partials are freed in S's order after this: once C has copied them.
  s.copied->wait(S);
  // Every rank's pushes enqueued before this thread may block in the driver.
  g.enqueue_barrier();
  return c;
}

}  // namespace tx::ops
