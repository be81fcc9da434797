// Seed 000, elementwise -> reg: a warp takes the sqrt of a 32x8 f32 tile held
// in registers (lane i owns row i). The tile travels global -> shared ->
// registers, is square-rooted per register, and goes back the same way.
#include "sample_main.hpp"

using namespace tx;

PrimFunc warp_sqrt() {
  auto r_layout = TileLayout(S({32, 8}, {1 * laneid, 1}));  // lane i owns row i
  auto fs = region({0, 32}, {0, 8});
  return T::prim_func("warp_sqrt", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 8}, f32);
    auto B = T::match_buffer(B_ptr, {32, 8}, f32);
    T::device_entry();
    T::cta_id({1});
    T::lane_id({32});
    T::thread_id({32});
    auto A_smem = T::alloc_buffer({32, 8}, f32, scope::shared, TileLayout(S({32, 8})));
    Tx::warp::copy(A_smem[fs], A[fs]);
    T::cuda::cta_sync();
    auto R = T::alloc_buffer({32, 8}, f32, scope::local, r_layout);
    Tx::warp::copy(R[fs], A_smem[fs]);
    Tx::warp::sqrt(R[fs], R[fs]);  // elementwise reg dispatch
    Tx::warp::copy(A_smem[fs], R[fs]);
    T::cuda::cta_sync();
    Tx::warp::copy(B[fs], A_smem[fs]);
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  return sample::run(argc, argv, warp_sqrt(), [](const Kernel& k) {
    std::vector<double> a = sample::random(32 * 8, f32, 0.01, 100.0);
    Tensor A = Tensor::from_doubles(a, {32, 8}, f32, k.device());
    Tensor B = Tensor::empty({32, 8}, f32, k.device());
    B.fill_bits(0x7fc0dead);  // NaN: unwritten elements show
    k(A, B);
    std::vector<double> want(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) want[i] = std::sqrt(a[i]);
    return sample::max_error(B.to_doubles(), want, 0, 1e-6);
  });
}
#endif
