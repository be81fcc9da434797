// Collectives written in tx (ops/src/dist.cpp): kernels that read the peers'
// copies of symmetric buffers (T::peer) and order themselves against the
// peers with flags (T::dist::signal / wait_until), on every rank of a
// tx::dist::Group -- host ranks (threads, the host JIT) or GPUs.
//
//   tx::ops::AllReduce ar(group, /*max_elems=*/1 << 20, bf16);  // collective: every rank
//   ar(x);                                                      // x = sum over the ranks
//   ar(x, out, {.op = tx::dist::ReduceOp::max});
//
// Building an AllReduce is collective (it allocates its symmetric staging
// buffer and flags); so is every call: each rank calls it in the same order
// with tensors of the same shape and dtype. Calls are queued on the current
// stream of the rank's device and never synchronize with the host.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>

#include "tx/runtime/dist.hpp"
#include "tx/runtime/stream.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx::ops {

// one_shot: every rank reads every peer's copy of every element ((ranks - 1)
// x the data over the links, two rounds of flags): small messages.
// two_shot: reduce-scatter then all-gather inside one kernel (2 (ranks - 1) /
// ranks x the data, three rounds): large messages on 3 ranks or more.
// nccl: the group's NCCL all-reduce (Group::nccl_all_reduce; host ranks: the
// host's collective), into `out` through a copy when out is not x.
// automatic: one_shot below 1 MiB per rank (TX_ALL_REDUCE_TWO_SHOT_BYTES
// changes the size); from it, one_shot on 2 ranks, and on 3 ranks or more
// nccl where the group has a communicator (on 4 H200 tx's two_shot ran at
// 0.47-0.64x NCCL's bus bandwidth from 2 MiB to 256 MiB: docs/dist.md),
// two_shot where it has none (host ranks, ranks sharing a GPU).
enum class AllReduceAlgorithm { automatic, one_shot, two_shot, nccl };

struct AllReduceOptions {
  dist::ReduceOp op = dist::ReduceOp::sum;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::automatic;
};

// An all-reduce over a group: each rank stages its input in its symmetric
// copy and signals the peers; the reduction reads the peers' copies
// (AllReduceAlgorithm); the copies are double-buffered by the call's parity,
// so the next call may restage without waiting for the peers' reads. f32,
// f16 and bf16; the sum is accumulated in f32 in rank order (0, 1, ...) and
// rounded once, so every rank gets the same bits. Calls may be captured into
// a CUDA graph (tx::Graph, torch.cuda.graph) on every rank: the call counts
// the flags carry live on the device, and each replay is a new call (the
// same holds for AllGather and ReduceScatter below; the fused paths of
// AllGatherMatmul and MatmulReduceScatter refuse a capture).
namespace detail {
// The CUDA of the all-reduce's kernel for sm_90a (sum, 16-byte io, a grid of
// `ctas`: 16 or 128), as a GPU would get it, without one: for tests and ptxas.
std::string all_reduce_cuda(int ranks, DType dtype, bool two_shot, int ctas);
}  // namespace detail

class AllReduce {
 public:
  AllReduce(const dist::Group& group, std::int64_t max_elems, DType dtype,
            std::source_location loc = std::source_location::current());
  // In place.
  void operator()(Tensor& x, AllReduceOptions opt = {},
                  std::source_location loc = std::source_location::current());
  // Into `out` (x's shape and dtype, contiguous; may be x).
  void operator()(const Tensor& x, Tensor& out, AllReduceOptions opt = {},
                  std::source_location loc = std::source_location::current());
  // What a call of n elements runs ("one_shot 8 ranks 64x512 f32 sum").
  std::string plan(std::int64_t n, AllReduceOptions opt = {}) const;
  // The CUDA source of the kernel such a call runs (for reading, whatever
  // the group's device).
  std::string cuda_source(std::int64_t n, AllReduceOptions opt = {}) const;

  const dist::Group& group() const { return group_; }
  std::int64_t max_elems() const { return max_elems_; }

 private:
  dist::Group group_;
  std::int64_t max_elems_;
  DType dtype_;
  Tensor staging_;   // symmetric: max_elems of dtype
  Tensor flags_;     // symmetric: two rounds of a flag per (rank, CTA)
  Tensor counters_;  // this rank's calls and steps made, on the device (graph replays count)
};

// The all-gather and the reduce-scatter written in tx (ops/src/
// dist_collectives.cpp): one kernel each, in the all-reduce's manner (16-byte
// chunks staged into a symmetric copy double-buffered by the call's parity,
// a round of flags per CTA and step, the peers' copies read through
// T::peer). Segments that are not whole 16-byte chunks, or tensors not
// 16-byte aligned, go to NCCL's collective (host ranks: the host's); plan()
// says which. f32, f16, bf16. Building one and every call are collective.
//
//   tx::ops::AllGather ag(group, /*max_elems=*/1 << 20, bf16);
//   Tensor all = ag(x);                     // (ranks * n): rank r's x at [r n, (r + 1) n)
//   tx::ops::ReduceScatter rs(group, /*max_elems=*/1 << 20, bf16);
//   rs(x, out);                             // x (ranks * n), out (n): the reduction of
//                                           // every rank's x[rank n, (rank + 1) n)
struct CollectiveState;

class AllGather {
 public:
  // max_elems: the most elements of x a call passes.
  AllGather(const dist::Group& group, std::int64_t max_elems, DType dtype,
            std::source_location loc = std::source_location::current());
  Tensor operator()(const Tensor& x, std::source_location loc = std::source_location::current());
  void operator()(const Tensor& x, Tensor& out,
                  std::source_location loc = std::source_location::current());
  std::string plan(std::int64_t n) const;

 private:
  std::shared_ptr<CollectiveState> state_;
};

class ReduceScatter {
 public:
  // max_elems: the most elements of out a call passes. The sum is in f32, in
  // rank order, rounded once: every rank's bits are what any rank would get.
  ReduceScatter(const dist::Group& group, std::int64_t max_elems, DType dtype,
                std::source_location loc = std::source_location::current());
  void operator()(const Tensor& x, Tensor& out, dist::ReduceOp op = dist::ReduceOp::sum,
                  std::source_location loc = std::source_location::current());
  std::string plan(std::int64_t n) const;

 private:
  std::shared_ptr<CollectiveState> state_;
};

// all_gather(a) @ b, the GEMM of a tensor-parallel layer whose activations
// are split by rows: rank r holds rows [r m, (r + 1) m) of A (m x K), every
// rank the same B (K, N) -- its own shard of the weights -- and gets the
// whole C (ranks m, N).
//
//   tx::ops::AllGatherMatmul ag(group, /*max_rows=*/1024, /*K=*/8192, bf16);  // collective
//   Tensor c = ag(a_shard, w);                                  // (ranks * m, N)
//
// fused: each rank's copy engine pushes its rows into every peer's symmetric
// gathered buffer (the peer that needs them first first) and raises the
// peer's ready flag (a stream write after the copy); the Hopper GEMM starts
// on its own rows, read where they are, and reaches each peer's block as
// it arrives, its producer waiting for the block's flag before the first
// TMA load (T::dist::wait_until). After the GEMM a done flag tells each peer
// its block may be overwritten by the next call. No SM is taken from the
// GEMM for communication.
// sequential: NCCL's all-gather into a local buffer, then tx::ops::matmul
// (host ranks: the host's gather and the host matmul).
// automatic: fused where the fused kernel runs -- sm_90, f16 / bf16, a wgmma
// tiling that divides (m, N, K) -- and the GEMM is long enough to hide the
// copies (from 2^36 FLOPs per rank, TX_DIST_FUSE_FLOPS: measured on 2 H200,
// docs/dist.md); sequential elsewhere. On host ranks fused runs a SIMT
// kernel with the same flags (for tests).
enum class FusionPath { automatic, fused, sequential };

struct AllGatherMatmulOptions {
  FusionPath path = FusionPath::automatic;
};

class AllGatherMatmul {
 public:
  // Collective: allocates the symmetric gathered buffer (ranks x
  // max_rows x K of dtype) and flags. f16 and bf16.
  AllGatherMatmul(const dist::Group& group, std::int64_t max_rows, std::int64_t K, DType dtype,
                  std::source_location loc = std::source_location::current());
  // a: this rank's (m, K) rows, m <= max_rows and the same on every rank;
  // b: (K, N), row-major or the transpose of an (N, K) tensor. Collective,
  // on the current stream of the rank's device.
  Tensor operator()(const Tensor& a, const Tensor& b, AllGatherMatmulOptions opt = {},
                    std::source_location loc = std::source_location::current());
  // What a call with m rows per rank and N columns runs ("fused wgmma
  // 128x256x64 s3 tma, 2 ranks, copy engine" or "sequential: ...").
  std::string plan(std::int64_t m, std::int64_t N, AllGatherMatmulOptions opt = {}) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// The sum over the ranks of a_r @ b_r, scattered by rows: the GEMM after a
// tensor-parallel layer whose K is split (rank r holds A's columns and B's
// rows of its K shard); rank r gets rows [r m, (r + 1) m) of the (ranks m,
// N) sum.
//
//   tx::ops::MatmulReduceScatter mrs(group, /*max_rows=*/1024, /*N=*/8192, bf16);  // collective
//   Tensor c = mrs(a, w);        // a (ranks * m, K_r), w (K_r, N): c (m, N)
//
// fused: the GEMM runs one row block at a time, the peers' blocks first
// (each into a local partial), and as each finishes, the copy engine pushes
// it into that peer's symmetric receive buffer and raises the peer's
// arrival flag; the rank's own block is multiplied while the pushes travel;
// then, once every peer's block has arrived, one kernel sums the partials
// (f32, in rank order, rounded once) into c, and a done flag tells each peer
// its slot may be overwritten by the next call.
// sequential: tx::ops::matmul of the whole A, then NCCL's reduce-scatter
// (host ranks: the host's).
// automatic: fused where N * element bytes is a multiple of 16 (the sum's
// 16-byte chunks) and the GEMM reaches 2^36 FLOPs per rank (as
// AllGatherMatmul), else sequential. Partials are rounded to the dtype before
// they are summed (as the sequential path's matmul output is).
struct MatmulReduceScatterOptions {
  FusionPath path = FusionPath::automatic;
};

class MatmulReduceScatter {
 public:
  // Collective: allocates the symmetric receive buffer (ranks x max_rows x
  // N of dtype) and flags. f16 and bf16.
  MatmulReduceScatter(const dist::Group& group, std::int64_t max_rows, std::int64_t N, DType dtype,
                      std::source_location loc = std::source_location::current());
  // a: (ranks m, K_r), m <= max_rows, the same m on every rank; b: (K_r, N)
  // (row-major or the transpose of an (N, K_r) tensor). Returns (m, N).
  // Collective, on the current stream of the rank's device.
  Tensor operator()(const Tensor& a, const Tensor& b, MatmulReduceScatterOptions opt = {},
                    std::source_location loc = std::source_location::current());
  // What a call with m output rows per rank and this rank's K runs.
  std::string plan(std::int64_t m, std::int64_t K, MatmulReduceScatterOptions opt = {}) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tx::ops
