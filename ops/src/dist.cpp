// Collectives written in tx: the all-reduce (tx/ops/dist.hpp).
//
// One kernel per (dtype, op, ranks, grid, algorithm, io). Data moves in
// 16-byte chunks; chunk (k * ctas + b) * threads + tid belongs to CTA b at
// step k on every rank, so ranks synchronize per CTA and step, never across
// a whole grid. CTA b, step k:
//   stage    its chunks of x into this rank's symmetric staging copy;
//            cta_sync (the CTA's writes, observed by threads 0..ranks-1);
//            thread t signals rank t's flag [round 0][this rank][b] with the
//            step's value (release, system scope: the staged chunks travel
//            with it)
//   wait     thread t waits for its own flag [0][t][b] to reach the value
//            (acquire); cta_sync
//   reduce   each chunk from every rank's copy (T::peer), in rank order, in
//            f32, rounded once -- one-shot: every chunk, into out; two-shot:
//            the steps this rank owns (k % ranks), into its own copy, then
//            round 1 ("reduced"), and every chunk read from its owner's copy
// Step k + 1 is staged before step k is waited for (local copies overlap
// the NVLink reads). Flags count steps: step k of a call has the value
// base + k + 1, base being the steps of every earlier call, compared modulo
// 2^32 (T::dist::wait_until), so flags are never reset. The call and step
// counts live on the device (dist_counters.hpp): a captured call replays. The staging copies
// are double-buffered by the call's parity, so a call never waits for the
// peers to finish reading: a rank restages a half in call j + 2, after its
// call j + 1 saw every peer's step-0 signal of j + 1, which each peer gave
// after its whole call j -- the last reads of that half -- had finished.
#include "tx/ops/dist.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "dist_counters.hpp"
#include "tx/builder.hpp"
#include "tx/lowering/codegen_cuda.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::ops {

namespace {

// The grid (every rank's the same): few CTAs for small messages (fewer
// flags to exchange), many for large ones (loads over NVLink in flight from
// every SM). Flags are allocated for the largest.
constexpr int kMaxCtas = 128;
constexpr int kThreads = 512;  // threads per CTA
constexpr int kUnroll = 8;     // chunks per thread and step
int ctas_for(std::int64_t bytes) { return bytes <= (256 << 10) ? 16 : kMaxCtas; }

// What one kernel is specialized for.
struct Config {
  DType dtype;
  dist::ReduceOp op;
  int ranks;
  int ctas;
  bool two_shot;
  // n is a multiple of the vector width: x and out are read and written as
  // 16-byte vectors too (else element by element, guarded).
  bool vector_io;
};

// Elements per 16-byte vector.
int vector_width(DType t) { return 16 / t.bytes(); }

// The kernel of both algorithms. Data moves in chunks of V elements (16
// bytes); chunk c = (k * ctas + b) * threads + tid belongs to CTA b at step k.
// The staging copies are double-buffered by the epoch's parity, which is
// why no last round of flags is needed: a rank restages a half only in call
// k + 2, which starts after its call k + 1 waited for every peer's "staged"
// signal of k + 1, which each peer gave after its whole call k -- the last
// read of that half -- had finished (stream order).
//   one-shot: round 0 (staged); every chunk reduced from every rank's copy.
//   two-shot: round 0; chunks of steps k with k % ranks == rank reduced into
//             this rank's copy; round 1 (reduced); every chunk read from its
//             owner's copy.
PrimFunc all_reduce_ir(const Config& cfg) {
  const DType dtype = cfg.dtype;
  const int V = vector_width(dtype), ranks = cfg.ranks, ctas = cfg.ctas;
  return T::prim_func(
      cfg.two_shot ? "all_reduce_two_shot" : "all_reduce_one_shot",
      [&](Handle x_ptr, Handle out_ptr, Handle staging_ptr, Handle flags_ptr, Handle rank_ptr,
          Handle counters_ptr) {
        Var m;  // chunks: an extent of x (vector io), else computed from n
        Var n;  // elements (element io)
        TileBuffer X, Out;
        if (cfg.vector_io) {
          m = T::dim("m");
          X = T::match_buffer(x_ptr, {m, V}, dtype, std::nullopt, "X");
          Out = T::match_buffer(out_ptr, {m, V}, dtype, std::nullopt, "Out");
        } else {
          n = T::dim("n");
          X = T::match_buffer(x_ptr, {n}, dtype, std::nullopt, "X");
          Out = T::match_buffer(out_ptr, {n}, dtype, std::nullopt, "Out");
        }
        // Rows of V: two halves of the AllReduce's capacity. A half never
        // moves when n changes between calls, so the halves never overlap.
        Var rows = T::dim("rows");
        auto Staging = T::match_symmetric(staging_ptr, {rows, V}, dtype, "Staging");
        Var nflags = T::dim("nflags", {.min = 2 * ranks * ctas});
        auto Flags = T::match_symmetric(flags_ptr, {nflags}, u32, "Flags");
        Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
        auto Counters =
            T::match_buffer(counters_ptr, {2 * kMaxCtas}, u32, std::nullopt, "Counters");
        T::device_entry();
        if (!cfg.vector_io) m = T::let(ceildiv(n, V), "m");
        auto b = T::cta_id({ctas}, "b");
        auto tid = T::thread_id({kThreads}, "tid");
        const auto calls = dist_detail::read_call_counters(Counters, kMaxCtas, b);
        Var base = calls.base;
        Var half = T::let(cast(calls.epoch % 2u, i32), "half");
        Expr steps = ceildiv(m, ctas * kThreads * kUnroll);
        // Chunk u (< kUnroll) of this thread at step k: a step covers
        // ctas * threads * kUnroll chunks, so a call of 256 MiB makes tens of
        // steps, not hundreds (each step costs two CTA barriers and a round
        // trip of flags).
        auto chunk_of = [&](const Expr& k, const Expr& u) {
          return T::let(((k * kUnroll + u) * ctas + b) * kThreads + tid, "c");
        };
        auto staged = [&](const TileBuffer& buf, const Expr& c) {
          return buf[region(span(half * (rows / 2) + c, 1), span(0, V))];
        };
        // Flags count steps: step k of this call is `base + k + 1` (base: the
        // steps of every earlier call, the same on every rank). signal(w, k):
        // this CTA's step k is done for round w (0: staged, 1: reduced).
        auto value = [&](const Expr& k) { return base + cast(k, u32) + 1u; };
        auto signal = [&](int which, const Expr& k) {
          T::cuda::cta_sync();  // the CTA's writes, observed by the signalling threads
          T::if_(tid < ranks, [&] {
            auto peer_flags = T::peer(Flags, tid, "peer_flags");
            T::dist::signal(peer_flags((which * ranks + rank) * ctas + b), value(k));
          });
        };
        // Waits until every rank's CTA b (`from` < 0), or rank `from`'s, is
        // done with step k of round w.
        auto wait = [&](int which, const Expr& k, const Expr& from) {
          if (from.defined()) {
            T::if_(tid == 0, [&] {
              T::dist::wait_until(Flags((which * ranks + from) * ctas + b), value(k));
            });
          } else {
            T::if_(tid < ranks,
                   [&] { T::dist::wait_until(Flags((which * ranks + tid) * ctas + b), value(k)); });
          }
          T::cuda::cta_sync();
        };
        // Chunk c of x into registers (zeros past n).
        auto load_x = [&](const TileBuffer& r, const Expr& c) {
          if (cfg.vector_io) {
            Tx::thread::copy(r, X[region(span(c, 1), span(0, V))], {.partial = true});
            return;
          }
          for (Var j : T::unroll(V, "j")) {
            r(0, j) = cast(0.0f, dtype);
            T::if_(c * V + j < n, [&] { r(0, j) = X(c * V + j); });
          }
        };
        auto store_out = [&](const TileBuffer& r, const Expr& c) {
          if (cfg.vector_io) {
            Tx::thread::copy(Out[region(span(c, 1), span(0, V))], r, {.partial = true});
            return;
          }
          for (Var j : T::unroll(V, "j")) T::if_(c * V + j < n, [&] { Out(c * V + j) = r(0, j); });
        };
        // The reduction of chunk c over every rank's copy, in rank order, in f32.
        auto reduce = [&](const Expr& c, const TileBuffer& result) {
          auto acc = T::alloc_buffer({V}, f32, scope::local, std::nullopt, "acc");
          auto in = T::alloc_buffer({1, V}, dtype, scope::local, std::nullopt, "in");
          for (Var r : T::unroll(ranks, "r")) {
            auto copy = T::peer(Staging, r, "copy");
            Tx::thread::copy(in, staged(copy, c), {.partial = true});
            for (Var j : T::unroll(V, "j")) {
              Expr v = cast(in(0, j), f32);
              acc(j) =
                  select(r == 0, v,
                         cfg.op == dist::ReduceOp::sum ? Expr(acc(j) + v) : Expr(max(acc(j), v)));
            }
          }
          for (Var j : T::unroll(V, "j")) result(0, j) = cast(acc(j), dtype);
        };

        auto stage = [&](const Expr& k) {
          for (Var u : T::unroll(kUnroll, "u")) {
            Var c = chunk_of(k, u);
            T::if_(c < m, [&] {
              auto r = T::alloc_buffer({1, V}, dtype, scope::local, std::nullopt, "r");
              load_x(r, c);
              Tx::thread::copy(staged(Staging, c), r, {.partial = true});
            });
          }
          signal(0, k);
        };
        // Software-pipelined: step k + 1 is staged (local memory) while the
        // peers' step k is on its way; then step k is reduced (NVLink).
        stage(Expr(0));
        for (Var k : T::serial(steps, "k")) {
          T::if_(k + 1 < steps, [&] { stage(k + 1); });
          wait(0, k, Expr());
          if (!cfg.two_shot) {
            for (Var u : T::unroll(kUnroll, "u")) {
              Var c = chunk_of(k, u);
              T::if_(c < m, [&] {
                auto r = T::alloc_buffer({1, V}, dtype, scope::local, std::nullopt, "sum");
                reduce(c, r);
                store_out(r, c);
              });
            }
            continue;
          }
          for (Var u : T::unroll(kUnroll, "u")) {
            Var c = chunk_of(k, u);
            T::if_(c < m && k % ranks == rank, [&] {
              auto r = T::alloc_buffer({1, V}, dtype, scope::local, std::nullopt, "sum");
              reduce(c, r);
              Tx::thread::copy(staged(Staging, c), r, {.partial = true});
            });
          }
          signal(1, k);
        }
        if (cfg.two_shot) {
          for (Var k : T::serial(steps, "k")) {
            wait(1, k, k % ranks);
            auto owner = T::peer(Staging, k % ranks, "owner");
            for (Var u : T::unroll(kUnroll, "u")) {
              Var c = chunk_of(k, u);
              T::if_(c < m, [&] {
                auto r = T::alloc_buffer({1, V}, dtype, scope::local, std::nullopt, "r");
                Tx::thread::copy(r, staged(owner, c), {.partial = true});
                store_out(r, c);
              });
            }
          }
        }
        dist_detail::advance_call_counters(calls, b, tid, ctas, steps);
      });
}

const char* op_name(dist::ReduceOp op) { return op == dist::ReduceOp::sum ? "sum" : "max"; }

// Compiled kernels by configuration and device kind: ranks of one process
// share them.
const Kernel& all_reduce_kernel(const Config& c, Device device) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, int, int, bool, bool, bool>, Kernel> kernels;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(c.dtype.name(), static_cast<int>(c.op), c.ranks, c.ctas, c.two_shot,
                             c.vector_io, device.is_cuda());
  auto it = kernels.find(key);
  if (it == kernels.end())
    it = kernels.emplace(key, compile(all_reduce_ir(c), {.device = device})).first;
  return it->second;
}

// One-shot below this many bytes per rank, two-shot from it (what the
// one-shot's (ranks - 1) reads of every byte start to cost; bench/dist).
std::int64_t two_shot_from_bytes() {
  static const std::int64_t v = [] {
    const char* e = std::getenv("TX_ALL_REDUCE_TWO_SHOT_BYTES");
    return e && *e ? std::atoll(e) : std::int64_t{1} << 20;
  }();
  return v;
}

}  // namespace

std::string detail::all_reduce_cuda(int ranks, DType dtype, bool two_shot, int ctas) {
  const Config c{.dtype = dtype,
                 .op = dist::ReduceOp::sum,
                 .ranks = ranks,
                 .ctas = ctas,
                 .two_shot = two_shot,
                 .vector_io = true};
  return lowering::codegen_cuda(lowering::lower(all_reduce_ir(c), {.arch = "sm_90a"}));
}

AllReduce::AllReduce(const dist::Group& group, std::int64_t max_elems, DType dtype,
                     std::source_location loc)
    : group_(group), max_elems_(max_elems), dtype_(dtype) {
  const SourceLoc at(loc);
  if (max_elems < 1)
    fail("tx.ops.AllReduce", "max_elems", at,
         "is " + std::to_string(max_elems) + "; a staging buffer holds at least one element");
  if (!(dtype == f32 || dtype == f16 || dtype == bf16))
    fail("tx.ops.AllReduce", "dtype", at, "is " + dtype.name() + "; f32, f16 and bf16 are reduced");
  // Two halves (double-buffered by the call's parity) of whole chunks.
  const std::int64_t chunks = (max_elems + vector_width(dtype) - 1) / vector_width(dtype);
  staging_ = group_.empty_symmetric({2 * chunks * vector_width(dtype)}, dtype);
  flags_ = group_.symmetric_flags(2 * group_.size() * kMaxCtas);
  // Calls and steps made, per CTA slot (dist_counters.hpp): zero, as the flags.
  counters_ = Tensor::empty({2 * kMaxCtas}, u32, group_.device());
  counters_.fill_bits(0);
}

namespace {
bool use_two_shot(AllReduceAlgorithm a, std::int64_t bytes, int ranks) {
  if (a != AllReduceAlgorithm::automatic) return a == AllReduceAlgorithm::two_shot;
  // Two ranks read the same bytes either way: one-shot saves a round.
  return ranks > 2 && bytes >= two_shot_from_bytes();
}
// Where automatic hands the call to NCCL: the sizes it would run two-shot
// on, on GPUs with a communicator. Measured on 4 H200 (bench_dist,
// 2026-11-28): two-shot 43.7 / 201 / 607 / 2230 us against NCCL's 28.1 /
// 94.4 / 324 / 1190 us at 2 / 16 / 64 / 256 MiB.
bool use_nccl(const dist::Group& g, AllReduceAlgorithm a, std::int64_t bytes) {
  if (a == AllReduceAlgorithm::nccl) return true;
  return a == AllReduceAlgorithm::automatic && g.device().is_cuda() &&
         use_two_shot(a, bytes, g.size()) && g.nccl_comm() != nullptr;
}
}  // namespace

namespace {
Config config_for(const dist::Group& g, DType dtype, std::int64_t n, AllReduceOptions opt,
                  bool aligned) {
  const std::int64_t bytes = n * dtype.bytes();
  return {.dtype = dtype,
          .op = opt.op,
          .ranks = g.size(),
          .ctas = ctas_for(bytes),
          .two_shot = use_two_shot(opt.algorithm, bytes, g.size()),
          .vector_io = aligned && n % vector_width(dtype) == 0};
}
}  // namespace

std::string AllReduce::plan(std::int64_t n, AllReduceOptions opt) const {
  if (use_nccl(group_, opt.algorithm, n * dtype_.bytes()))
    return "nccl " + std::to_string(group_.size()) + " ranks " + dtype_.name() + " " +
           op_name(opt.op) + " n " + std::to_string(n) +
           (opt.algorithm == AllReduceAlgorithm::nccl
                ? std::string(" (asked)")
                : std::string(" (3 ranks or more from the two-shot size: tx's two-shot measured "
                              "0.47-0.64x NCCL on 4 H200)"));
  const Config c = config_for(group_, dtype_, n, opt, true);
  return std::string(c.two_shot ? "two_shot " : "one_shot ") + std::to_string(c.ranks) + " ranks " +
         std::to_string(c.ctas) + "x" + std::to_string(kThreads) + " " + dtype_.name() + " " +
         op_name(opt.op) + " n " + std::to_string(n) + (c.vector_io ? " vector io" : " element io");
}

std::string AllReduce::cuda_source(std::int64_t n, AllReduceOptions opt) const {
  return all_reduce_kernel(config_for(group_, dtype_, n, opt, true), group_.device()).cuda_source();
}

void AllReduce::operator()(Tensor& x, AllReduceOptions opt, std::source_location loc) {
  (*this)(x, x, opt, loc);
}

void AllReduce::operator()(const Tensor& x, Tensor& out, AllReduceOptions opt,
                           std::source_location loc) {
  const SourceLoc at(loc);
  const char* op = "tx.ops.all_reduce";
  if (!x.defined()) fail(op, "x", at, "is an undefined tensor");
  if (x.dtype() != dtype_)
    fail(op, "x", at,
         "holds " + x.dtype().name() + " but this AllReduce was built for " + dtype_.name());
  if (x.numel() > max_elems_)
    fail(op, "x", at,
         "has " + std::to_string(x.numel()) + " elements, more than the " +
             std::to_string(max_elems_) + " this AllReduce was built for");
  if (!x.is_contiguous()) fail(op, "x", at, "is a strided view; pass x.contiguous()");
  if (!out.defined() || out.dtype() != x.dtype() || out.shape() != x.shape() ||
      !out.is_contiguous())
    fail(op, "out", at, "must be a contiguous tensor of x's shape and dtype");
  if (!(x.device() == group_.device()) || !(out.device() == group_.device()))
    fail(op, "x", at,
         "is on " + x.device().str() + " but this rank's device is " + group_.device().str());
  const std::int64_t n = x.numel(), V = vector_width(dtype_), m = (n + V - 1) / V;
  if (use_nccl(group_, opt.algorithm, n * dtype_.bytes())) {
    if (out.data_ptr() != x.data_ptr()) {
      const auto bytes = static_cast<std::size_t>(n * dtype_.bytes());
      if (group_.device().is_cuda())
        runtime::copy_device_to_device(reinterpret_cast<runtime::DevicePtr>(out.data_ptr()),
                                       reinterpret_cast<runtime::DevicePtr>(x.data_ptr()), bytes,
                                       current_stream(group_.device()).handle());
      else
        std::memcpy(out.data_ptr(), x.data_ptr(), bytes);
    }
    group_.nccl_all_reduce(out, opt.op);
    return;
  }
  auto aligned = [](const Tensor& t) {
    return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
  };
  const Config c = config_for(group_, dtype_, n, opt, aligned(x) && aligned(out));
  const Kernel& k = all_reduce_kernel(c, group_.device());
  Tensor io_x = c.vector_io ? x.reshape({m, V}) : x.reshape({n});
  Tensor io_out = c.vector_io ? out.reshape({m, V}) : out.reshape({n});
  // The staging copies as two halves of whole chunks (m <= the capacity).
  Tensor staging = staging_.reshape({staging_.numel() / V, V});
  // On this rank's device (the kernel was compiled once, for the first
  // rank's), on its current stream.
  k.launch({io_x, io_out, staging, flags_, group_.rank(), counters_}, {.device = group_.device()});
  // Every rank's kernel enqueued before this thread may block in the driver.
  group_.enqueue_barrier();
}

}  // namespace tx::ops
