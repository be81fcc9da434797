// Seed 001, elementwise -> smem: a 256-thread CTA takes the sqrt of a 32x32
// f32 tile in shared memory. The partition [outer, threads, vec] is
// synthesized from the thread count: 1024 elements over 256 threads is one
// round of 4-wide (128-bit) vectors per thread.
#include "sample_main.hpp"

using namespace tx;

PrimFunc cta_sqrt() {
  auto s_layout = TileLayout(S({32, 32}));
  auto full = region({0, 32}, {0, 32});
  return T::prim_func("cta_sqrt", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 32}, f32, s_layout);
    T::device_entry();
    T::cta_id({1});
    T::warp_id({8});
    T::lane_id({32});
    T::thread_id({256});
    auto A_smem = T::alloc_buffer({32, 32}, f32, scope::shared, s_layout);
    Tx::cta::copy(A_smem[full], A[full]);
    Tx::cta::sqrt(A_smem[full], A_smem[full]);  // elementwise smem dispatch
    Tx::cta::copy(A[full], A_smem[full]);
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  return sample::run(argc, argv, cta_sqrt(), [](const Kernel& k) {
    std::vector<double> a = sample::random(32 * 32, f32, 0.01, 100.0);
    Tensor A = Tensor::from_doubles(a, {32, 32}, f32, k.device());
    k(A);
    std::vector<double> want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = std::sqrt(a[i]);
    return sample::max_error(A.to_doubles(), want, 0, 1e-6);
  });
}
#endif
