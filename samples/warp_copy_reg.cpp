// Seed 002, copy -> reg: a warp round-trips a 32x8 tile shared -> registers
// -> shared with the register layout S[(32, 8) : (1@laneid, 1)] (lane i owns
// row i). Each lane moves its 8 f32 values as two 128-bit transfers; the
// partition comes from the register layout, so no cross-lane addressing is
// left after lowering. The shared tile is cleared in between, so the final
// values can only have come back from the registers.
#include "sample_main.hpp"

using namespace tx;

PrimFunc warp_copy_reg() {
  auto r_layout = TileLayout(S({32, 8}, {1 * laneid, 1}));
  auto s_layout = TileLayout(S({32, 8}));
  auto fs = region({0, 32}, {0, 8});
  return T::prim_func("warp_copy_reg", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 8}, f32);
    auto B = T::match_buffer(B_ptr, {32, 8}, f32);
    T::device_entry();
    T::cta_id({1});
    T::lane_id({32});
    auto tid = T::thread_id({32});
    auto A_smem = T::alloc_buffer({32, 8}, f32, scope::shared, s_layout);
    for (Var kk : T::serial(8)) A_smem(tid, kk) = A(tid, kk) + cast(tid * 100 + kk + 1, f32);
    T::cuda::cta_sync();
    auto R = T::alloc_buffer({32, 8}, f32, scope::local, r_layout);
    Tx::warp::copy(R[fs], A_smem[fs]);  // shared -> register
    T::cuda::cta_sync();                // every lane has read before the tile is cleared
    Tx::warp::zero(A_smem[fs]);
    T::cuda::cta_sync();
    Tx::warp::copy(A_smem[fs], R[fs]);  // register -> shared
    T::cuda::cta_sync();
    for (Var kk : T::serial(8)) B(tid, kk) = A_smem(tid, kk);
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  return sample::run(argc, argv, warp_copy_reg(), [](const Kernel& k) {
    std::vector<double> a = sample::random(32 * 8, f32, -1.0, 1.0);
    Tensor A = Tensor::from_doubles(a, {32, 8}, f32, k.device());
    Tensor B = Tensor::empty({32, 8}, f32, k.device());
    B.fill_bits(0x7fc0dead);
    k(A, B);
    std::vector<double> want(a.size());
    for (int t = 0; t < 32; ++t)
      for (int kk = 0; kk < 8; ++kk)
        want[t * 8 + kk] = quantize(a[t * 8 + kk] + (t * 100 + kk + 1), f32);
    return sample::max_error(B.to_doubles(), want, 0, 1e-7);
  });
}
#endif
