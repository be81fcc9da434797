// tx's multi-GPU ops on a torch.distributed NCCL group: the ranks are the
// group's processes (torchrun), the control plane is the group's own NCCL
// communicator, adopted (tx::dist::Group::adopt_nccl; tx never destroys it):
//
//   all_reduce_(Tensor(a!) self, int nccl_comm, int world_size, str op="sum",
//               str algorithm="automatic") -> ()
//   all_gather(Tensor self, int nccl_comm, int world_size) -> Tensor
//   reduce_scatter(Tensor self, int nccl_comm, int world_size, str op="sum") -> Tensor
//   all_gather_matmul(Tensor a, Tensor b, int nccl_comm, int world_size,
//                     str path="automatic") -> Tensor
//   matmul_reduce_scatter(Tensor a, Tensor b, int nccl_comm, int world_size,
//                         str path="automatic") -> Tensor
//
// tx_torch.nccl_comm(group) gives the communicator (the address of the
// group's ncclComm_t) and the size. all_gather concatenates the ranks'
// tensors along dimension 0, reduce_scatter gives rank r the r-th of
// world_size equal parts of dimension 0; all_gather_matmul multiplies the
// gathered rows of a (its local (m, K) block) by b (K, N), and
// matmul_reduce_scatter sums a (M, k) b (k, N) over the ranks and scatters
// the rows. The tx objects behind them (symmetric buffers, flags) are made
// on first use per (communicator, dtype, size) -- collectively, so every
// rank must call the same ops in the same order, as torch.distributed asks
// anyway. The Meta kernels give the output shapes from world_size alone.
#include "tx/ops/dist.hpp"

#include <torch/library.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "convert.hpp"

namespace tx_torch {
namespace {

tx::dist::ReduceOp reduce_op(const std::string& op, const char* name) {
  if (op == "sum") return tx::dist::ReduceOp::sum;
  TORCH_CHECK(op == "max", name, ": op '", op, "': sum or max");
  return tx::dist::ReduceOp::max;
}

tx::ops::FusionPath fusion_path(const std::string& p, const char* name) {
  if (p == "automatic") return tx::ops::FusionPath::automatic;
  if (p == "fused") return tx::ops::FusionPath::fused;
  TORCH_CHECK(p == "sequential", name, ": path '", p, "': automatic, fused or sequential");
  return tx::ops::FusionPath::sequential;
}

// The group of a communicator, adopted once per process.
tx::dist::Group group_of(int64_t comm, int64_t world_size, const at::Tensor& x, const char* op) {
  TORCH_CHECK(comm != 0, op,
              ": no NCCL communicator (nccl_comm is 0); pass tx_torch.nccl_comm(group) of a "
              "torch.distributed NCCL group");
  TORCH_CHECK(x.is_cuda(), op, ": tensors of an NCCL group live on its GPU; this one is on ",
              x.device().str());
  static std::mutex mu;
  static auto* groups = new std::map<int64_t, tx::dist::Group>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = groups->find(comm);
  if (it == groups->end()) {
    tx::dist::Group g;
    call(op, [&] {
      g = tx::dist::Group::adopt_nccl(reinterpret_cast<void*>(comm),
                                      tx::Device::cuda(static_cast<int>(x.device().index())));
    });
    it = groups->emplace(comm, g).first;
  }
  TORCH_CHECK(it->second.size() == world_size, op, ": world_size ", world_size,
              " differs from the communicator's ", it->second.size());
  return it->second;
}

// One tx object per (communicator, dtype, what), remade larger when a call
// needs more room (every rank sees the same sizes, so every rank remakes it).
template <class T>
std::shared_ptr<T> cached(const std::tuple<int64_t, std::string, std::string>& key, int64_t need,
                          const std::function<std::shared_ptr<T>()>& make) {
  static std::mutex mu;
  static auto* cache = new std::map<std::tuple<int64_t, std::string, std::string>,
                                    std::pair<int64_t, std::shared_ptr<T>>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache->find(key);
  if (it != cache->end() && it->second.first >= need) return it->second.second;
  auto made = make();
  (*cache)[key] = {need, made};
  return made;
}

void all_reduce_(at::Tensor& x, int64_t comm, int64_t world_size, const std::string& op,
                 const std::string& algorithm) {
  const char* name = "tx::all_reduce_";
  tx::dist::Group g = group_of(comm, world_size, x, name);
  tx::ops::AllReduceOptions opt{.op = reduce_op(op, name)};
  if (algorithm == "one_shot")
    opt.algorithm = tx::ops::AllReduceAlgorithm::one_shot;
  else if (algorithm == "two_shot")
    opt.algorithm = tx::ops::AllReduceAlgorithm::two_shot;
  else if (algorithm == "nccl")
    opt.algorithm = tx::ops::AllReduceAlgorithm::nccl;
  else
    TORCH_CHECK(algorithm == "automatic", name, ": algorithm '", algorithm,
                "': automatic, one_shot, two_shot or nccl");
  const int64_t n = x.numel();
  call(name, [&] {
    OnDevice on(x);
    tx::Tensor t = view(x, name, "self");
    auto ar = cached<tx::ops::AllReduce>({comm, t.dtype().name(), "all_reduce"}, n, [&] {
      return std::make_shared<tx::ops::AllReduce>(g, n, t.dtype());
    });
    at::Tensor xc = x.contiguous();
    into(x, [&](at::Tensor& dst) {
      tx::Tensor d = view(dst, name, "self");
      (*ar)(view(xc, name, "self"), d, opt);
    });
  });
}

at::Tensor all_gather(const at::Tensor& x, int64_t comm, int64_t world_size) {
  const char* name = "tx::all_gather";
  tx::dist::Group g = group_of(comm, world_size, x, name);
  auto sizes = x.sizes().vec();
  TORCH_CHECK(!sizes.empty(), name, ": a 0-dim tensor has no rows to gather");
  sizes[0] *= world_size;
  at::Tensor out = at::empty(sizes, x.options());
  const int64_t n = x.numel();
  call(name, [&] {
    OnDevice on(x);
    at::Tensor xc = x.contiguous();
    tx::Tensor t = view(xc, name, "self");
    auto ag = cached<tx::ops::AllGather>({comm, t.dtype().name(), "all_gather"}, n, [&] {
      return std::make_shared<tx::ops::AllGather>(g, n, t.dtype());
    });
    tx::Tensor o = view(out, name, "out").reshape({out.numel()});
    (*ag)(t.reshape({n}), o);
  });
  return out;
}

at::Tensor reduce_scatter(const at::Tensor& x, int64_t comm, int64_t world_size,
                          const std::string& op) {
  const char* name = "tx::reduce_scatter";
  tx::dist::Group g = group_of(comm, world_size, x, name);
  auto sizes = x.sizes().vec();
  TORCH_CHECK(!sizes.empty() && sizes[0] % world_size == 0, name,
              ": dimension 0 must split into world_size (", world_size, ") equal parts");
  sizes[0] /= world_size;
  at::Tensor out = at::empty(sizes, x.options());
  const int64_t n = x.numel();
  const tx::dist::ReduceOp rop = reduce_op(op, name);
  call(name, [&] {
    OnDevice on(x);
    at::Tensor xc = x.contiguous();
    tx::Tensor t = view(xc, name, "self");
    auto rs = cached<tx::ops::ReduceScatter>({comm, t.dtype().name(), "reduce_scatter"}, n, [&] {
      return std::make_shared<tx::ops::ReduceScatter>(g, n, t.dtype());
    });
    tx::Tensor o = view(out, name, "out").reshape({out.numel()});
    (*rs)(t.reshape({n}), o, rop);
  });
  return out;
}

at::Tensor all_gather_matmul(const at::Tensor& a, const at::Tensor& b, int64_t comm,
                             int64_t world_size, const std::string& path) {
  const char* name = "tx::all_gather_matmul";
  tx::dist::Group g = group_of(comm, world_size, a, name);
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, name, ": a (m, K) and b (K, N)");
  const tx::ops::FusionPath p = fusion_path(path, name);
  at::Tensor out;
  call(name, [&] {
    OnDevice on(a);
    at::Tensor ac = a.contiguous();
    tx::Tensor ta = view(ac, name, "a");
    const int64_t m = a.size(0), K = a.size(1);
    auto op = cached<tx::ops::AllGatherMatmul>(
        {comm, ta.dtype().name(), "all_gather_matmul K" + std::to_string(K)}, m,
        [&] { return std::make_shared<tx::ops::AllGatherMatmul>(g, m, K, ta.dtype()); });
    out = to_torch((*op)(ta, view(b, name, "b"), {.path = p}));
  });
  return out;
}

at::Tensor matmul_reduce_scatter(const at::Tensor& a, const at::Tensor& b, int64_t comm,
                                 int64_t world_size, const std::string& path) {
  const char* name = "tx::matmul_reduce_scatter";
  tx::dist::Group g = group_of(comm, world_size, a, name);
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, name, ": a (M, k) and b (k, N)");
  const tx::ops::FusionPath p = fusion_path(path, name);
  at::Tensor out;
  call(name, [&] {
    OnDevice on(a);
    at::Tensor ac = a.contiguous();
    tx::Tensor ta = view(ac, name, "a");
    const int64_t M = a.size(0), N = b.size(1);
    auto op = cached<tx::ops::MatmulReduceScatter>(
        {comm, ta.dtype().name(), "matmul_reduce_scatter N" + std::to_string(N)}, M,
        [&] { return std::make_shared<tx::ops::MatmulReduceScatter>(g, M, N, ta.dtype()); });
    out = to_torch((*op)(ta, view(b, name, "b"), {.path = p}));
  });
  return out;
}

// Meta kernels: the shapes from world_size.
void all_reduce_meta(at::Tensor&, int64_t, int64_t, const std::string&, const std::string&) {}
at::Tensor all_gather_meta(const at::Tensor& x, int64_t, int64_t world_size) {
  auto sizes = x.sym_sizes().vec();
  sizes[0] = sizes[0] * world_size;
  return at::empty_symint(sizes, x.options());
}
at::Tensor reduce_scatter_meta(const at::Tensor& x, int64_t, int64_t world_size,
                               const std::string&) {
  auto sizes = x.sym_sizes().vec();
  sizes[0] = sizes[0] / world_size;
  return at::empty_symint(sizes, x.options());
}
at::Tensor all_gather_matmul_meta(const at::Tensor& a, const at::Tensor& b, int64_t,
                                  int64_t world_size, const std::string&) {
  return at::empty_symint({a.sym_size(0) * world_size, b.sym_size(1)}, a.options());
}
at::Tensor matmul_reduce_scatter_meta(const at::Tensor& a, const at::Tensor& b, int64_t,
                                      int64_t world_size, const std::string&) {
  return at::empty_symint({a.sym_size(0) / world_size, b.sym_size(1)}, a.options());
}

}  // namespace
}  // namespace tx_torch

TORCH_LIBRARY_FRAGMENT(tx, m) {
  m.def(
      "all_reduce_(Tensor(a!) self, int nccl_comm, int world_size, str op=\"sum\", "
      "str algorithm=\"automatic\") -> ()");
  m.def("all_gather(Tensor self, int nccl_comm, int world_size) -> Tensor");
  m.def("reduce_scatter(Tensor self, int nccl_comm, int world_size, str op=\"sum\") -> Tensor");
  m.def(
      "all_gather_matmul(Tensor a, Tensor b, int nccl_comm, int world_size, "
      "str path=\"automatic\") -> Tensor");
  m.def(
      "matmul_reduce_scatter(Tensor a, Tensor b, int nccl_comm, int world_size, "
      "str path=\"automatic\") -> Tensor");
}
// CPU tensors reach the CUDA implementation's checks (a clear error: an NCCL
// group's tensors live on its GPU).
TORCH_LIBRARY_IMPL(tx, CPU, m) {
  m.impl("all_reduce_", &tx_torch::all_reduce_);
  m.impl("all_gather", &tx_torch::all_gather);
  m.impl("reduce_scatter", &tx_torch::reduce_scatter);
  m.impl("all_gather_matmul", &tx_torch::all_gather_matmul);
  m.impl("matmul_reduce_scatter", &tx_torch::matmul_reduce_scatter);
}
TORCH_LIBRARY_IMPL(tx, CUDA, m) {
  m.impl("all_reduce_", &tx_torch::all_reduce_);
  m.impl("all_gather", &tx_torch::all_gather);
  m.impl("reduce_scatter", &tx_torch::reduce_scatter);
  m.impl("all_gather_matmul", &tx_torch::all_gather_matmul);
  m.impl("matmul_reduce_scatter", &tx_torch::matmul_reduce_scatter);
}
TORCH_LIBRARY_IMPL(tx, Meta, m) {
  m.impl("all_reduce_", &tx_torch::all_reduce_meta);
  m.impl("all_gather", &tx_torch::all_gather_meta);
  m.impl("reduce_scatter", &tx_torch::reduce_scatter_meta);
  m.impl("all_gather_matmul", &tx_torch::all_gather_matmul_meta);
  m.impl("matmul_reduce_scatter", &tx_torch::matmul_reduce_scatter_meta);
}
