// Seed 003's warp path: a 32x4 f32 register tile (lane i holds row i) is
// summed over its rows -- across the 32 lanes -- into a 4-element result
// that every lane holds: the destination layout carries a laneid replica,
// which is what selects the __shfl_xor butterfly.
#include "sample_main.hpp"

using namespace tx;

PrimFunc warp_sum_shuffle() {
  auto r_layout = TileLayout(S({32, 4}, {1 * laneid, 1}));  // lane i holds row i
  auto d_layout = TileLayout(S({4}), R({32}, {1 * laneid}));  // 4 values in every lane
  return T::prim_func("warp_sum_shuffle", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 4}, f32);
    auto B = T::match_buffer(B_ptr, {4}, f32);
    T::device_entry();
    T::cta_id({1});
    T::lane_id({32});
    T::thread_id({32});
    auto Rt = T::alloc_buffer({32, 4}, f32, scope::local, r_layout);
    auto Sum = T::alloc_buffer({4}, f32, scope::local, d_layout);
    Tx::warp::copy(Rt, A);                      // global -> registers
    Tx::warp::sum(Sum, Rt, {.axes = {0}});      // across lanes: warp shuffle
    Tx::warp::copy(B, Sum);                     // one replica writes back
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  return sample::run(argc, argv, warp_sum_shuffle(), [](const Kernel& k) {
    std::vector<double> a = sample::random(32 * 4, f32, -1.0, 1.0);
    Tensor A = Tensor::from_doubles(a, {32, 4}, f32, k.device());
    Tensor B = Tensor::empty({4}, f32, k.device());
    B.fill_bits(0x7fc0dead);
    k(A, B);
    std::vector<double> want(4, 0.0);
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < 4; ++c) want[c] += a[r * 4 + c];
    return sample::max_error(B.to_doubles(), want, 1e-5, 1e-5);
  });
}
#endif
