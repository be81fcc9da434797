// Seed 003, reduction -> local (thread-wise): a single thread sums a
// 4-element f32 register vector into a scalar. No cross-thread
// communication: a spatial loop, the identity, then a reduction loop.
#include "sample_main.hpp"

using namespace tx;

PrimFunc thread_sum() {
  return T::prim_func("thread_sum", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {4}, f32, TileLayout(S({4})));
    auto B = T::match_buffer(B_ptr, {1}, f32, TileLayout(S({1})));
    T::device_entry();
    T::cta_id({1});
    T::thread_id({1});
    auto A_local = T::alloc_buffer({4}, f32, scope::local);
    auto B_local = T::alloc_buffer({1}, f32, scope::local);
    for (Var i : T::serial(4)) A_local(i) = A(i);
    Tx::sum(B_local, A_local, {.accum = false});  // reduction local dispatch
    B(0) = B_local(0);
  });
}

#ifndef TX_SAMPLE_NO_MAIN
int main(int argc, char** argv) {
  return sample::run(argc, argv, thread_sum(), [](const Kernel& k) {
    std::vector<double> a = sample::random(4, f32, -10.0, 10.0);
    Tensor A = Tensor::from_doubles(a, {4}, f32, k.device());
    Tensor B = Tensor::empty({1}, f32, k.device());
    B.fill_bits(0x7fc0dead);
    k(A, B);
    double want = a[0] + a[1] + a[2] + a[3];
    return sample::max_error(B.to_doubles(), {want}, 1e-6, 1e-6);
  });
}
#endif
