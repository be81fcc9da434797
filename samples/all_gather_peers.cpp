// Several ranks: an all-gather written with peer views. Every rank holds a
// block of n values in a symmetric buffer (its own copy; every other rank
// can address it). Each rank tells every peer that its block is ready
// (a release signal on the peer's flag), waits until every peer has said the
// same (acquire), then copies every rank's block, through T::peer, into its
// output: out[r * n + i] = block of rank r, element i.
//
// Runs on one GPU per rank when there are two GPUs or more, else on host
// ranks (threads of this process, kernels on the host JIT): the same kernel,
// the same check against the inputs.
//
//   all_gather_peers [--ranks=N] [--device=host]
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/dist.hpp"  // tx::dist: not in tx/tx.hpp
#include "tx/tx.hpp"

using namespace tx;

PrimFunc all_gather(int ranks, int n) {
  return T::prim_func("all_gather_peers", [&](Handle block_ptr, Handle flags_ptr, Handle out_ptr,
                                              Handle rank_ptr, Handle epoch_ptr) {
    auto Block = T::match_symmetric(block_ptr, {n}, f32);
    auto Flags = T::match_symmetric(flags_ptr, {ranks}, u32);
    auto Out = T::match_buffer(out_ptr, {ranks * n}, f32);
    Var rank = T::match_scalar(rank_ptr, i32, "rank", DimFacts{.min = 0, .max = ranks - 1});
    Var epoch = T::match_scalar(epoch_ptr, u32, "epoch");
    T::device_entry();
    T::cta_id({1});
    auto tid = T::thread_id({128});
    // My block is ready: tell every rank (thread r signals rank r), then
    // wait for rank r's word. The block was written before the launch, so
    // no CTA barrier is needed before the signals.
    T::if_(tid < ranks, [&] {
      auto their_flags = T::peer(Flags, tid, "their_flags");
      T::dist::signal(their_flags(rank), epoch);
      T::dist::wait_until(Flags(tid), epoch);
    });
    T::cuda::cta_sync();  // what threads 0..ranks-1 acquired, for the whole CTA
    for (Var r : T::serial(ranks, "r")) {
      auto theirs = T::peer(Block, r, "theirs");
      for (Var k : T::serial((n + 127) / 128, "k")) {
        Var i = T::let(k * 128 + tid, "i");
        T::if_(i < n, [&] { Out(r * n + i) = theirs(i); });
      }
    }
  });
}

int main(int argc, char** argv) {
  try {
    const int gpus = runtime::device_count();
    bool host = gpus < 2;
    int ranks = host ? 4 : gpus;
    for (int i = 1; i < argc; ++i) {
      if (!std::strcmp(argv[i], "--device=host")) host = true;
      if (!std::strncmp(argv[i], "--ranks=", 8)) ranks = std::atoi(argv[i] + 8);
    }
    if (!host && ranks > gpus) ranks = gpus;
    if (host && !runtime::host_jit_available()) {
      std::printf("all_gather_peers: needs two GPUs or the host JIT (this build has neither)\n");
      return 77;
    }
    const int n = 1000;
    PrimFunc f = all_gather(ranks, n);
    std::printf("%s", to_string(f).c_str());
    std::vector<Device> devices;
    for (int r = 0; r < ranks; ++r) devices.push_back(host ? Device::host() : Device::cuda(r));
    Kernel k = compile(f, {.device = devices[0]});
    // Fresh inputs: rank r's block.
    std::mt19937 g(std::random_device{}());
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<std::vector<float>> blocks(static_cast<std::size_t>(ranks), std::vector<float>(n));
    for (auto& b : blocks)
      for (float& v : b) v = d(g);
    std::mutex mu;
    int wrong = 0;
    dist::Group::run_local(devices, [&](dist::Group& grp) {
      Tensor block = grp.empty_symmetric({n}, f32);
      block.copy_from_bytes(blocks[static_cast<std::size_t>(grp.rank())].data(), n * sizeof(float));
      Tensor flags = grp.symmetric_flags(ranks);
      Tensor out = Tensor::empty({ranks * n}, f32, grp.device());
      out.fill_bits(0x7fc0dead);  // NaN: a value never written shows
      if (grp.device().is_cuda()) runtime::synchronize_device(grp.device().index, "block copy");
      k.launch({block, flags, out, grp.rank(), 1}, {.device = grp.device()});
      std::vector<float> got = out.to_vector<float>();
      int bad = 0;
      for (int r = 0; r < ranks; ++r)
        for (int i = 0; i < n; ++i)
          bad += got[static_cast<std::size_t>(r * n + i)] !=
                 blocks[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
      std::lock_guard<std::mutex> lock(mu);
      wrong += bad;
    });
    std::printf("all_gather_peers: %d ranks on %s, %d of %d values wrong\n", ranks,
                host ? "the host" : "GPUs", wrong, ranks * ranks * n);
    return wrong == 0 ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
