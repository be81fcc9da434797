// Collectives written in tx: the one-shot all-reduce (tx/ops/dist.hpp).
//
// One kernel per (dtype, op, ranks, device kind). CTA b of every rank owns
// the same elements (a grid-stride loop over the same grid), so the ranks
// synchronize per CTA, never across a whole grid:
//   1. stage: the CTA copies its elements of x into this rank's symmetric
//      copy, then cta_sync (the CTA's writes are now observed by thread 0..)
//   2. thread t < ranks tells rank t that this CTA's elements are staged
//      (signal on rank t's flag [round 0][this rank][b], release at system
//      scope: the staged writes travel with it) and waits for rank t's
//      signal on its own flag [0][t][b] (acquire); cta_sync
//   3. reduce: each element is the sum (max) over the ranks' copies, read
//      through T::peer, in rank order, in f32
//   4. done: a second round of flags ([1][..][b]) says this CTA has read
//      the peers' copies; a rank's next call restages only after every peer
//      has read its copy.
// Flags only grow: call k waits for the value k + 1 (the epoch), so no flag
// is ever reset.
#include "tx/ops/dist.hpp"

#include <cstdlib>
#include <map>
#include <mutex>

#include "tx/builder.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::ops {

namespace {

// The grid (every rank's the same): few CTAs for small messages (fewer
// flags to exchange), many for large ones (loads over NVLink in flight from
// every SM). Flags are allocated for the largest.
constexpr int kMaxCtas = 128;
constexpr int kThreads = 512;  // threads per CTA
int ctas_for(std::int64_t bytes) { return bytes <= (256 << 10) ? 16 : kMaxCtas; }

PrimFunc one_shot(DType dtype, dist::ReduceOp op, int ranks, int kCtas) {
  return T::prim_func(
      "all_reduce_one_shot", [&](Handle x_ptr, Handle out_ptr, Handle staging_ptr, Handle flags_ptr,
                                 Handle rank_ptr, Handle epoch_ptr) {
        Var n = T::dim("n");
        Var nflags = T::dim("nflags", {.min = 2 * ranks * kCtas});
        auto X = T::match_buffer(x_ptr, {n}, dtype);
        auto Out = T::match_buffer(out_ptr, {n}, dtype);
        auto Staging = T::match_symmetric(staging_ptr, {n}, dtype);
        auto Flags = T::match_symmetric(flags_ptr, {nflags}, u32);
        Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
        Var epoch = T::match_scalar(epoch_ptr, u32, "epoch");
        T::device_entry();
        auto b = T::cta_id({kCtas}, "b");
        auto tid = T::thread_id({kThreads}, "tid");
        Expr steps = ceildiv(n, kCtas * kThreads);
        // 1. stage this CTA's elements
        for (Var k : T::serial(steps, "k")) {
          Var i = T::let((k * kCtas + b) * kThreads + tid, "i");
          T::if_(i < n, [&] { Staging(i) = X(i); });
        }
        T::cuda::cta_sync();
        // 2. staged here: tell each rank, and wait for each rank's word
        T::if_(tid < ranks, [&] {
          auto peer_flags = T::peer(Flags, tid, "peer_flags");
          T::dist::signal(peer_flags(rank * kCtas + b), epoch);
          T::dist::wait_until(Flags(tid * kCtas + b), epoch);
        });
        T::cuda::cta_sync();
        // 3. reduce every rank's copy, in rank order
        for (Var k : T::serial(steps, "k")) {
          Var i = T::let((k * kCtas + b) * kThreads + tid, "i");
          T::if_(i < n, [&] {
            auto acc = T::alloc_buffer({1}, f32, scope::local, std::nullopt, "acc");
            for (Var r : T::serial(ranks, "r")) {
              auto copy = T::peer(Staging, r, "copy");
              Expr v = cast(copy(i), f32);
              if (op == dist::ReduceOp::sum)
                acc(0) = select(r == 0, v, acc(0) + v);
              else
                acc(0) = select(r == 0, v, max(acc(0), v));
            }
            Out(i) = cast(acc(0), dtype);
          });
        }
        T::cuda::cta_sync();
        // 4. done reading the peers' copies
        T::if_(tid < ranks, [&] {
          auto peer_flags = T::peer(Flags, tid, "peer_flags");
          T::dist::signal(peer_flags((ranks + rank) * kCtas + b), epoch);
          T::dist::wait_until(Flags((ranks + tid) * kCtas + b), epoch);
        });
      });
}

// Two-shot (reduce-scatter, then all-gather): step k of CTA b (elements
// (k * ctas + b) * threads + tid) is owned by rank k % ranks, which reduces
// it from every rank's copy into its own copy; every rank then reads each
// element from its owner. Each rank reads 2 (ranks - 1) / ranks of the data
// from its peers instead of the one-shot's (ranks - 1): for large messages.
//   round 0: staged   round 1: my steps reduced   round 2: done reading
PrimFunc two_shot(DType dtype, dist::ReduceOp op, int ranks, int kCtas) {
  return T::prim_func(
      "all_reduce_two_shot", [&](Handle x_ptr, Handle out_ptr, Handle staging_ptr, Handle flags_ptr,
                                 Handle rank_ptr, Handle epoch_ptr) {
        Var n = T::dim("n");
        Var nflags = T::dim("nflags", {.min = 3 * ranks * kCtas});
        auto X = T::match_buffer(x_ptr, {n}, dtype);
        auto Out = T::match_buffer(out_ptr, {n}, dtype);
        auto Staging = T::match_symmetric(staging_ptr, {n}, dtype);
        auto Flags = T::match_symmetric(flags_ptr, {nflags}, u32);
        Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
        Var epoch = T::match_scalar(epoch_ptr, u32, "epoch");
        T::device_entry();
        auto b = T::cta_id({kCtas}, "b");
        auto tid = T::thread_id({kThreads}, "tid");
        Expr steps = ceildiv(n, kCtas * kThreads);
        auto round = [&](int which) {
          T::cuda::cta_sync();
          T::if_(tid < ranks, [&] {
            auto peer_flags = T::peer(Flags, tid, "peer_flags");
            T::dist::signal(peer_flags((which * ranks + rank) * kCtas + b), epoch);
            T::dist::wait_until(Flags((which * ranks + tid) * kCtas + b), epoch);
          });
          T::cuda::cta_sync();
        };
        for (Var k : T::serial(steps, "k")) {
          Var i = T::let((k * kCtas + b) * kThreads + tid, "i");
          T::if_(i < n, [&] { Staging(i) = X(i); });
        }
        round(0);
        // Reduce the steps this rank owns into its own copy.
        for (Var k : T::serial(ceildiv(steps - rank, ranks), "k")) {
          Var i = T::let(((k * ranks + rank) * kCtas + b) * kThreads + tid, "i");
          T::if_(i < n, [&] {
            auto acc = T::alloc_buffer({1}, f32, scope::local, std::nullopt, "acc");
            for (Var r : T::serial(ranks, "r")) {
              auto copy = T::peer(Staging, r, "copy");
              Expr v = cast(copy(i), f32);
              if (op == dist::ReduceOp::sum)
                acc(0) = select(r == 0, v, acc(0) + v);
              else
                acc(0) = select(r == 0, v, max(acc(0), v));
            }
            Staging(i) = cast(acc(0), dtype);
          });
        }
        round(1);
        // Every element from its owner's copy.
        for (Var k : T::serial(steps, "k")) {
          Var i = T::let((k * kCtas + b) * kThreads + tid, "i");
          T::if_(i < n, [&] {
            auto owner = T::peer(Staging, k % ranks, "owner");
            Out(i) = owner(i);
          });
        }
        round(2);
      });
}

const char* op_name(dist::ReduceOp op) { return op == dist::ReduceOp::sum ? "sum" : "max"; }

// Compiled kernels by (algorithm, dtype, op, ranks, device kind): ranks of
// one process share them.
const Kernel& all_reduce_kernel(bool two, DType dtype, dist::ReduceOp op, int ranks, int ctas,
                                Device device) {
  static std::mutex mu;
  static std::map<std::tuple<bool, std::string, int, int, int, bool>, Kernel> kernels;
  std::lock_guard<std::mutex> lock(mu);
  auto key =
      std::make_tuple(two, dtype.name(), static_cast<int>(op), ranks, ctas, device.is_cuda());
  auto it = kernels.find(key);
  if (it == kernels.end())
    it = kernels
             .emplace(key, compile(two ? two_shot(dtype, op, ranks, ctas)
                                       : one_shot(dtype, op, ranks, ctas),
                                   {.device = device}))
             .first;
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

AllReduce::AllReduce(const dist::Group& group, std::int64_t max_elems, DType dtype,
                     std::source_location loc)
    : group_(group), max_elems_(max_elems), dtype_(dtype) {
  const SourceLoc at(loc);
  if (max_elems < 1)
    fail("tx.ops.AllReduce", "max_elems", at,
         "is " + std::to_string(max_elems) + "; a staging buffer holds at least one element");
  if (!(dtype == f32 || dtype == f16 || dtype == bf16))
    fail("tx.ops.AllReduce", "dtype", at, "is " + dtype.name() + "; f32, f16 and bf16 are reduced");
  staging_ = group_.empty_symmetric({max_elems}, dtype);
  flags_ = group_.symmetric_flags(3 * group_.size() * kMaxCtas);
}

namespace {
bool use_two_shot(AllReduceAlgorithm a, std::int64_t bytes, int ranks) {
  if (a != AllReduceAlgorithm::automatic) return a == AllReduceAlgorithm::two_shot;
  // Two ranks read the same bytes either way: one-shot saves a round.
  return ranks > 2 && bytes >= two_shot_from_bytes();
}
}  // namespace

std::string AllReduce::plan(std::int64_t n, AllReduceOptions opt) const {
  const bool two = use_two_shot(opt.algorithm, n * dtype_.bytes(), group_.size());
  return std::string(two ? "two_shot " : "one_shot ") + std::to_string(group_.size()) + " ranks " +
         std::to_string(ctas_for(n * dtype_.bytes())) + "x" + std::to_string(kThreads) + " " +
         dtype_.name() + " " + op_name(opt.op) + " n " + std::to_string(n);
}

std::string AllReduce::cuda_source(std::int64_t n, AllReduceOptions opt) const {
  const bool two = use_two_shot(opt.algorithm, n * dtype_.bytes(), group_.size());
  return all_reduce_kernel(two, dtype_, opt.op, group_.size(), ctas_for(n * dtype_.bytes()),
                           group_.device())
      .cuda_source();
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
  const bool two = use_two_shot(opt.algorithm, x.numel() * dtype_.bytes(), group_.size());
  const Kernel& k = all_reduce_kernel(two, dtype_, opt.op, group_.size(),
                                      ctas_for(x.numel() * dtype_.bytes()), group_.device());
  ++epoch_;
  Tensor flat_x = x.reshape({x.numel()});
  Tensor flat_out = out.reshape({out.numel()});
  // The staging copies' first n elements (a view that starts where the
  // allocation does, as a symmetric argument must).
  Tensor staging = staging_.slice(0, 0, x.numel());
  // On this rank's device (the kernel was compiled once, for the first
  // rank's), on its current stream.
  k.launch({flat_x, flat_out, staging, flags_, group_.rank(), static_cast<std::int64_t>(epoch_)},
           {.device = group_.device()});
}

}  // namespace tx::ops
