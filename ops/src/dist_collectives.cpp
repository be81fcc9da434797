// The all-gather and the reduce-scatter written in tx (tx/ops/dist.hpp).
//
// One kernel of both, in the all-reduce's manner (ops/src/dist.cpp): data
// moves in 16-byte chunks, and chunk c = ((k * unroll + u) * ctas + b) *
// threads + tid of every segment belongs to CTA b at step k on every rank,
// so CTAs synchronize with the same CTA of the peers, never across a grid.
// A segment is one rank's n elements: the all-gather stages its one segment
// (x) and reads every rank's into out[q n, (q + 1) n); the reduce-scatter
// stages its ranks segments (x holds ranks n elements) and reduces segment
// `rank` of every rank's copy, in rank order, in f32, rounded once.
// CTA b, step k: stage its chunks into this rank's symmetric copy;
// cta_sync; thread t < ranks signals rank t's flag [this rank][b] with the
// step's value (release, system scope); thread t waits for its own flag
// [t][b] (acquire); cta_sync; read the peers' copies through T::peer.
// Flags count steps (base + k + 1, base the steps of earlier calls), so they
// are never reset; the staging copies are double-buffered by the call's
// parity: a rank restages a half in call j + 2, after its call j + 1 waited
// for the peers' signals of j + 1, given after their whole call j -- the
// last reads of that half -- had finished (stream order). The call and step
// counts live on the device (dist_counters.hpp): a captured call replays.
#include <map>
#include <mutex>
#include <tuple>

#include "dist_counters.hpp"
#include "tx/builder.hpp"
#include "tx/ops/dist.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::ops {

namespace {

constexpr int kThreads = 512, kUnroll = 4, kMaxCtas = 128;
int ctas_for(std::int64_t bytes) { return bytes <= (256 << 10) ? 16 : kMaxCtas; }

enum class Kind { all_gather, reduce_scatter };

struct Config {
  Kind kind;
  DType dtype;
  dist::ReduceOp op;
  int ranks, ctas;
};

PrimFunc collective_ir(const Config& cfg) {
  const DType dtype = cfg.dtype;
  const int V = 16 / dtype.bytes(), ranks = cfg.ranks, ctas = cfg.ctas;
  const bool gather = cfg.kind == Kind::all_gather;
  return T::prim_func(
      gather ? "all_gather" : "reduce_scatter",
      [&](Handle x_ptr, Handle out_ptr, Handle staging_ptr, Handle flags_ptr, Handle rank_ptr,
          Handle counters_ptr) {
        // m: chunks of one segment -- x's rows for the all-gather (its out
        // holds every rank's), out's for the reduce-scatter (its x holds
        // every rank's). Rows of V elements.
        Var m = T::dim("m"), all_rows = T::dim("all_rows");
        auto X = T::match_buffer(x_ptr, {gather ? m : all_rows, V}, dtype, std::nullopt, "X");
        auto Out = T::match_buffer(out_ptr, {gather ? all_rows : m, V}, dtype, std::nullopt, "Out");
        Var rows = T::dim("rows");  // two halves of the staging capacity
        auto Staging = T::match_symmetric(staging_ptr, {rows, V}, dtype, "Staging");
        Var nflags = T::dim("nflags", {.min = ranks * ctas});
        auto Flags = T::match_symmetric(flags_ptr, {nflags}, u32, "Flags");
        Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
        auto Counters =
            T::match_buffer(counters_ptr, {2 * kMaxCtas}, u32, std::nullopt, "Counters");
        T::device_entry();
        auto b = T::cta_id({ctas}, "b");
        auto tid = T::thread_id({kThreads}, "tid");
        const auto calls = dist_detail::read_call_counters(Counters, kMaxCtas, b);
        Var base = calls.base;
        Var half = T::let(cast(calls.epoch % 2u, i32), "half");
        Expr steps = ceildiv(m, ctas * kThreads * kUnroll);
        auto chunk_of = [&](const Expr& k, const Expr& u) {
          return T::let(((k * kUnroll + u) * ctas + b) * kThreads + tid, "c");
        };
        // Segment s's chunk c in a staging copy.
        auto staged = [&](const TileBuffer& buf, const Expr& s, const Expr& c) {
          return buf[region(span(half * (rows / 2) + s * m + c, 1), span(0, V))];
        };
        auto row = [&](const TileBuffer& buf, const Expr& r) {
          return buf[region(span(r, 1), span(0, V))];
        };
        auto value = [&](const Expr& k) { return base + cast(k, u32) + 1u; };
        for (Var k : T::serial(steps, "k")) {
          // Stage: this rank's segment (all-gather) or all of them.
          for (Var u : T::unroll(kUnroll, "u")) {
            Var c = chunk_of(k, u);
            T::if_(c < m, [&] {
              auto r = T::alloc_buffer({1, V}, dtype, scope::local, std::nullopt, "r");
              if (gather) {
                Tx::thread::copy(r, row(X, c), {.partial = true});
                Tx::thread::copy(staged(Staging, 0, c), r, {.partial = true});
              } else {
                for (Var s : T::unroll(ranks, "s")) {
                  Tx::thread::copy(r, row(X, s * m + c), {.partial = true});
                  Tx::thread::copy(staged(Staging, s, c), r, {.partial = true});
                }
              }
            });
          }
          T::cuda::cta_sync();  // the CTA's writes, observed by the signalling threads
          T::if_(tid < ranks, [&] {
            auto peer_flags = T::peer(Flags, tid, "peer_flags");
            T::dist::signal(peer_flags(rank * ctas + b), value(k));
            T::dist::wait_until(Flags(tid * ctas + b), value(k));
          });
          T::cuda::cta_sync();
          for (Var u : T::unroll(kUnroll, "u")) {
            Var c = chunk_of(k, u);
            T::if_(c < m, [&] {
              auto r = T::alloc_buffer({1, V}, dtype, scope::local, std::nullopt, "r");
              if (gather) {
                for (Var q : T::unroll(ranks, "q")) {
                  auto from = T::peer(Staging, q, "from");
                  Tx::thread::copy(r, staged(from, 0, c), {.partial = true});
                  Tx::thread::copy(row(Out, q * m + c), r, {.partial = true});
                }
                return;
              }
              auto acc = T::alloc_buffer({V}, f32, scope::local, std::nullopt, "acc");
              for (Var q : T::unroll(ranks, "q")) {
                auto from = T::peer(Staging, q, "from");
                Tx::thread::copy(r, staged(from, rank, c), {.partial = true});
                for (Var j : T::unroll(V, "j")) {
                  Expr v = cast(r(0, j), f32);
                  acc(j) = select(
                      q == 0, v,
                      cfg.op == dist::ReduceOp::sum ? Expr(acc(j) + v) : Expr(max(acc(j), v)));
                }
              }
              for (Var j : T::unroll(V, "j")) r(0, j) = cast(acc(j), dtype);
              Tx::thread::copy(row(Out, c), r, {.partial = true});
            });
          }
        }
        dist_detail::advance_call_counters(calls, b, tid, ctas, steps);
      });
}

const Kernel& collective_kernel(const Config& c, Device device) {
  static std::mutex mu;
  static std::map<std::tuple<int, std::string, int, int, int, std::string>, Kernel> kernels;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(static_cast<int>(c.kind), c.dtype.name(), static_cast<int>(c.op),
                             c.ranks, c.ctas, device.str());
  auto it = kernels.find(key);
  if (it == kernels.end())
    it = kernels.emplace(key, compile(collective_ir(c), {.device = device})).first;
  return it->second;
}

bool aligned16(const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0; }

// What a call of n elements per segment runs: the tx kernel when segments
// are whole 16-byte chunks and the tensors 16-byte aligned, else NCCL's
// collective (host ranks: the host's).
std::string collective_plan(const char* name, const dist::Group& g, DType t, std::int64_t n,
                            bool kernel) {
  if (!kernel)
    return std::string("nccl ") + name + " (n * element bytes % 16 != 0 or unaligned tensors), " +
           std::to_string(g.size()) + " ranks";
  const std::int64_t bytes = n * t.bytes() * (name[0] == 'r' ? g.size() : 1);
  return std::string(name) + " " + std::to_string(g.size()) + " ranks " +
         std::to_string(ctas_for(bytes)) + "x" + std::to_string(kThreads) + " " + t.name() + " n " +
         std::to_string(n);
}

void check_common(const char* op, const dist::Group& g, DType dtype, const Tensor& x,
                  const Tensor& out, SourceLoc at) {
  if (!x.defined()) fail(op, "x", at, "is an undefined tensor");
  if (!out.defined()) fail(op, "out", at, "is an undefined tensor");
  if (x.dtype() != dtype || out.dtype() != dtype)
    fail(op, x.dtype() != dtype ? "x" : "out", at,
         "holds " + (x.dtype() != dtype ? x.dtype() : out.dtype()).name() +
             " but this op was built for " + dtype.name());
  if (!x.is_contiguous()) fail(op, "x", at, "is a strided view; pass x.contiguous()");
  if (!out.is_contiguous()) fail(op, "out", at, "is a strided view; pass a contiguous tensor");
  if (!(x.device() == g.device()) || !(out.device() == g.device()))
    fail(op, x.device() == g.device() ? "out" : "x", at,
         "is on " + (x.device() == g.device() ? out.device() : x.device()).str() +
             " but this rank's device is " + g.device().str());
}

}  // namespace

struct CollectiveState {
  dist::Group group;
  std::int64_t max_elems = 0;  // per segment
  DType dtype = f32;
  Tensor staging, flags;
  Tensor counters;  // calls and steps made, on the device (dist_counters.hpp)

  CollectiveState(const dist::Group& g, std::int64_t max, DType t, int segments, const char* op,
                  SourceLoc at)
      : group(g), max_elems(max), dtype(t) {
    if (!g.defined()) fail(op, "group", at, "is not a group (a default-constructed Group)");
    if (max < 1) fail(op, "max_elems", at, "is " + std::to_string(max) + "; at least 1");
    if (!(t == f32 || t == f16 || t == bf16))
      fail(op, "dtype", at, "is " + t.name() + "; f32, f16 and bf16 are supported");
    const std::int64_t V = 16 / t.bytes(), chunks = (max + V - 1) / V;
    staging = g.empty_symmetric({2 * segments * chunks * V}, t);
    flags = g.symmetric_flags(g.size() * kMaxCtas);
    counters = Tensor::empty({2 * kMaxCtas}, u32, g.device());
    counters.fill_bits(0);
  }

  // Launches the kernel (segments of whole 16-byte chunks: the callers check).
  void launch(Kind kind, dist::ReduceOp op, const Tensor& x, const Tensor& out) {
    const std::int64_t V = 16 / dtype.bytes();
    const std::int64_t bytes = x.numel() * dtype.bytes();
    const Config c{
        .kind = kind, .dtype = dtype, .op = op, .ranks = group.size(), .ctas = ctas_for(bytes)};
    const Kernel& k = collective_kernel(c, group.device());
    k.launch({x.reshape({x.numel() / V, V}), out.reshape({out.numel() / V, V}),
              staging.reshape({staging.numel() / V, V}), flags, group.rank(), counters},
             {.device = group.device()});
    // Every rank's kernel enqueued before this thread may block in the driver.
    group.enqueue_barrier();
  }
};

AllGather::AllGather(const dist::Group& group, std::int64_t max_elems, DType dtype,
                     std::source_location loc)
    : state_(std::make_shared<CollectiveState>(group, max_elems, dtype, 1, "tx.ops.all_gather",
                                               SourceLoc(loc))) {}

std::string AllGather::plan(std::int64_t n) const {
  const CollectiveState& s = *state_;
  return collective_plan("all_gather", s.group, s.dtype, n, n * s.dtype.bytes() % 16 == 0);
}

Tensor AllGather::operator()(const Tensor& x, std::source_location loc) {
  Tensor out;
  if (x.defined()) out = Tensor::empty({state_->group.size() * x.numel()}, x.dtype(), x.device());
  (*this)(x, out, loc);
  return out;
}

void AllGather::operator()(const Tensor& x, Tensor& out, std::source_location loc) {
  CollectiveState& s = *state_;
  const SourceLoc at(loc);
  const char* op = "tx.ops.all_gather";
  check_common(op, s.group, s.dtype, x, out, at);
  const std::int64_t n = x.numel();
  if (n > s.max_elems)
    fail(op, "x", at,
         "has " + std::to_string(n) + " elements, more than the " + std::to_string(s.max_elems) +
             " this AllGather was built for");
  if (out.numel() != s.group.size() * n)
    fail(op, "out", at,
         "has " + std::to_string(out.numel()) + " elements; it must hold " +
             std::to_string(s.group.size()) + " x " + std::to_string(n));
  if (n == 0) return;
  if (n * s.dtype.bytes() % 16 != 0 || !aligned16(x) || !aligned16(out)) {
    s.group.nccl_all_gather(x, out);
    return;
  }
  s.launch(Kind::all_gather, dist::ReduceOp::sum, x, out);
}

ReduceScatter::ReduceScatter(const dist::Group& group, std::int64_t max_elems, DType dtype,
                             std::source_location loc)
    : state_(std::make_shared<CollectiveState>(group, max_elems, dtype, group.size(),
                                               "tx.ops.reduce_scatter", SourceLoc(loc))) {}

std::string ReduceScatter::plan(std::int64_t n) const {
  const CollectiveState& s = *state_;
  return collective_plan("reduce_scatter", s.group, s.dtype, n, n * s.dtype.bytes() % 16 == 0);
}

void ReduceScatter::operator()(const Tensor& x, Tensor& out, dist::ReduceOp reduce,
                               std::source_location loc) {
  CollectiveState& s = *state_;
  const SourceLoc at(loc);
  const char* op = "tx.ops.reduce_scatter";
  check_common(op, s.group, s.dtype, x, out, at);
  const std::int64_t n = out.numel();
  if (n > s.max_elems)
    fail(op, "out", at,
         "has " + std::to_string(n) + " elements, more than the " + std::to_string(s.max_elems) +
             " this ReduceScatter was built for");
  if (x.numel() != s.group.size() * n)
    fail(op, "x", at,
         "has " + std::to_string(x.numel()) + " elements; it must hold " +
             std::to_string(s.group.size()) + " x out's " + std::to_string(n));
  if (n == 0) return;
  if (n * s.dtype.bytes() % 16 != 0 || !aligned16(x) || !aligned16(out)) {
    s.group.nccl_reduce_scatter(x, out, reduce);
    return;
  }
  s.launch(Kind::reduce_scatter, reduce, x, out);
}

}  // namespace tx::ops
