// A sum across a whole CTA in registers: 256 threads each hold 4 elements of
// two rows of 1024 -- a (2, 256, 4) register tile spread over the threads --
// and Tx::cta::sum folds the thread dimension and the registers into the two
// row sums, which every thread then holds (the destination's replica over
// all 256 threads). Registers of different warps cannot meet in a shuffle,
// so the variant (reduction/cross_warp) folds each warp with the butterfly
// and then the 8 warps' values through shared memory, behind one barrier.
#include "sample_main.hpp"

using namespace tx;

PrimFunc cta_sum_cross_warp() {
  // Thread t holds columns [4t, 4t + 4) of both rows: 8 registers.
  auto spread = TileLayout(S({2, 256, 4}, {4, 1 * axes::tx, 1}));
  auto everywhere = TileLayout(S({2}), R({256}, {1 * axes::tx}));  // both sums, in every thread
  return T::prim_func("cta_sum_cross_warp", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {2, 256, 4}, f32);
    auto B = T::match_buffer(B_ptr, {2, 256}, f32);
    T::device_entry();
    T::cta_id({1});
    auto tid = T::thread_id({256});
    auto X = T::alloc_buffer({2, 256, 4}, f32, scope::local, spread);
    auto Sum = T::alloc_buffer({2}, f32, scope::local, everywhere);
    Tx::cta::copy(X, A);                     // global -> registers
    Tx::cta::sum(Sum, X, {.axes = {1, 2}});  // across the CTA: reduction/cross_warp
    B(0, tid) = Sum(0);                      // every thread holds both sums:
    B(1, tid) = Sum(1);                      // each writes its copy
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  return sample::run(argc, argv, cta_sum_cross_warp(), [](const Kernel& k) {
    std::vector<double> a = sample::random(2 * 1024, f32, -1.0, 1.0);
    Tensor A = Tensor::from_doubles(a, {2, 256, 4}, f32, k.device());
    Tensor B = Tensor::empty({2, 256}, f32, k.device());
    B.fill_bits(0x7fc0dead);
    k(A, B);
    std::vector<double> want(2 * 256, 0.0), sums(2, 0.0);
    for (int r = 0; r < 2; ++r)
      for (int i = 0; i < 1024; ++i) sums[r] += a[r * 1024 + i];
    for (int r = 0; r < 2; ++r)
      for (int t = 0; t < 256; ++t) want[r * 256 + t] = sums[r];
    return sample::max_error(B.to_doubles(), want, 1e-5, 1e-5);
  });
}
#endif
