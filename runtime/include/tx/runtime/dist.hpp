// Several ranks working together (issue 43): a Group of ranks, symmetric
// memory (the same allocation on every rank, each rank's copy addressable
// by every other: what kernels reach through T::match_symmetric and
// T::peer), a host-side barrier, and NCCL's collectives as a baseline.
//
//   tx::dist::Group::run_local({Device::cuda(0), Device::cuda(1)}, [&](tx::dist::Group& g) {
//     Tensor buf = g.empty_symmetric({n}, f32);   // collective: every rank calls it
//     Tensor flags = g.symmetric_flags(g.size());
//     kernel(x, buf, flags, out, g.rank());
//   });
//
// Ranks are either threads of this process (run_local: one per GPU, or host
// ranks that run host kernels), or processes with one GPU each that share an
// NCCL unique id (Group::nccl, as torchrun or MPI start them). See
// docs/dist.md.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tx/runtime/tensor.hpp"

namespace tx::dist {

enum class ReduceOp { sum, max };

// NCCL's unique id (ncclUniqueId, 128 bytes): made by one rank, handed to
// the others by the caller (a file, a socket, the launcher's store), as hex.
struct UniqueId {
  std::array<unsigned char, 128> bytes{};
  std::string hex() const;                         // 256 lowercase hex digits
  static UniqueId from_hex(const std::string& s);  // a tx error unless 256 hex digits
};
// ncclGetUniqueId (a tx error where NCCL is missing).
UniqueId unique_id();
// Whether NCCL can be loaded (dlopen: $TX_NCCL_LIBRARY, libnccl.so.2, a pip
// wheel's copy); `why` says why not.
bool nccl_available(std::string* why = nullptr);

// A rank's handle on its group: cheap to copy (shared inside). Every
// operation marked collective must be called by every rank of the group, in
// the same order.
class Group {
 public:
  Group() = default;  // no group: every call is a tx error

  // One process per GPU: an NCCL communicator of `world_size` ranks from
  // the unique id every rank was given (rank 0 made it with unique_id()).
  // Collective; makes `device`'s context current on the calling thread.
  static Group nccl(const UniqueId& id, int rank, int world_size, Device device);
  // An existing ncclComm_t of the caller's (tx never destroys it); rank and
  // size come from it. `device` is the communicator's GPU.
  static Group adopt_nccl(void* nccl_comm, Device device);

  // N ranks as N threads of this process: body(group) runs on each thread
  // with that rank's Group. devices: one per rank, all Device::host() (host
  // ranks: host kernels, host memory, no NCCL) or all CUDA (a GPU per rank;
  // ranks may share a GPU; peer access is enabled between every pair of
  // distinct GPUs, a tx error naming both when the driver says it cannot
  // be; an NCCL communicator per rank where NCCL loads, the GPUs are
  // distinct and TX_DIST_NCCL is not 0, made for every rank at once on the
  // first nccl_comm() or NCCL collective). The first exception a rank throws
  // is rethrown, naming the rank, after every thread has joined; once one
  // rank has failed, the others' barriers (and collectives) throw instead of
  // waiting for it.
  static void run_local(const std::vector<Device>& devices,
                        const std::function<void(Group&)>& body);
  // world_size host ranks.
  static void run_local(int world_size, const std::function<void(Group&)>& body);

  bool defined() const { return state_ != nullptr; }
  int rank() const;
  int size() const;
  Device device() const;
  bool is_local() const;  // the ranks are threads of this process (run_local)
  // The ncclComm_t, or nullptr (host ranks, ranks sharing a GPU, no NCCL).
  void* nccl_comm() const;

  // Returns once every rank has called it (local ranks: a condition
  // variable; NCCL groups: an all-reduce of one int on the group's own
  // stream, then a wait for it). Host-side: GPU work queued before it is not
  // waited for. Collective.
  void barrier() const;
  // GPU ranks of one process (run_local): returns once every rank has
  // reached it, spinning (a few microseconds). Call it after enqueuing GPU
  // work that waits for a peer's (a kernel spinning on T::dist::wait_until,
  // a stream wait on a peer's flag) and before this thread does anything
  // that may block in the CUDA driver: a module load (a kernel's first
  // launch) or an allocation may wait for its GPU to go idle while holding
  // a lock the whole process shares, so a rank whose GPU waits for a peer
  // that has not enqueued its side yet stops that peer too: a deadlock
  // (docs/dist_kernels.md). Once every rank is past this point, every side
  // of the exchange is enqueued and the GPUs finish it on their own. tx's
  // multi-GPU ops call it; a hand-written kernel that waits for peers
  // should too. Host ranks and process groups (one GPU per process: the
  // driver's locks are per process): returns at once. Collective.
  void enqueue_barrier() const;

  // A tensor of this rank's copy of a new symmetric allocation, zero-filled,
  // with Tensor::symmetric() set. Collective: every rank passes the same
  // shape and dtype (a tx error on every rank otherwise). Host ranks: host
  // memory (64-byte aligned); GPU ranks: cuMemAlloc on the rank's GPU, each
  // peer's copy addressed directly (ranks in this process) or through CUDA
  // IPC (ranks in other processes). The memory lives until every handle of
  // the group (Group copies and these tensors) is gone; see docs/dist.md.
  Tensor empty_symmetric(std::vector<std::int64_t> shape, DType dtype) const;
  // `count` u32 flags per rank, zero-filled, for kernels' signals and waits
  // (T::dist::signal / wait_until): empty_symmetric({count}, u32).
  Tensor symmetric_flags(std::int64_t count) const;

  // Baseline collectives (collective; contiguous tensors on this rank's
  // device). GPU ranks: NCCL on the current tx stream of the device
  // (tx::current_stream), asynchronous like any kernel; host ranks: computed
  // on the host (in double, rounded once to the dtype, ranks in order).
  // In place; f32, f16, bf16, i32.
  void nccl_all_reduce(Tensor& t, ReduceOp op = ReduceOp::sum) const;
  // out holds size() times in's elements: rank r's in at [r * in.numel(), ...).
  void nccl_all_gather(const Tensor& in, Tensor& out) const;
  // in holds size() times out's elements; rank r gets the reduction of every
  // rank's in[r * out.numel(), ...).
  void nccl_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::sum) const;

  struct State;

 private:
  explicit Group(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

}  // namespace tx::dist
