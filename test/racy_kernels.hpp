// Kernels with a race, shared by the checked-mode tests and the comparison
// with compute-sanitizer racecheck on the GPU (test/racy_kernels.cpp): each
// is a mistake a kernel author makes, with the problem the checked host mode
// must report.
#pragma once

#include <string>
#include <vector>

#include "tx/tx.hpp"

namespace tx::test {

struct RacyKernel {
  std::string name;
  PrimFunc func;
  std::string expect;  // a part of the checked mode's report
  bool shared_memory;  // racecheck sees shared-memory hazards only
};

inline std::vector<RacyKernel> racy_kernels() {
  std::vector<RacyKernel> out;
  // Threads of one CTA exchange through shared memory without a barrier.
  auto exchange = [](const char* name, bool warp_barrier) {
    return T::prim_func(name, [&](Handle A_ptr) {
      auto A = T::match_buffer(A_ptr, {64}, f32);
      auto t = T::thread_id({64});
      auto S = T::alloc_buffer({64}, f32, scope::shared);
      S(t) = A(t);
      if (warp_barrier) T::cuda::warp_sync();  // orders a warp, not the CTA
      A(t) = S(63 - t);
    });
  };
  out.push_back(
      {"smem_no_barrier", exchange("smem_no_barrier", false), "race on shared memory S[", true});
  out.push_back(
      {"smem_warp_barrier", exchange("smem_warp_barrier", true), "race on shared memory S[", true});
  // A copy between overlapping regions of one shared buffer.
  out.push_back({"smem_overlapping_copy",
                 T::prim_func("smem_overlapping_copy",
                              [&](Handle A_ptr, Handle O_ptr) {
                                auto A = T::match_buffer(A_ptr, {64}, f32);
                                auto O = T::match_buffer(O_ptr, {1}, i32);
                                T::thread_id({32});
                                auto Sm = T::alloc_buffer({64}, f32, scope::shared);
                                Tx::warp::copy(Sm, A);
                                T::cuda::cta_sync();
                                auto o = T::let(min(max(O(0), 0), 32));
                                Tx::warp::copy(Sm[region(span(o, 32))], Sm[region({0, 32})]);
                                T::cuda::cta_sync();
                                Tx::warp::copy(A, Sm);
                              }),
                 "race on shared memory Sm[", true});
  // CTAs reading what other CTAs write.
  out.push_back({"global_cross_cta",
                 T::prim_func("global_cross_cta",
                              [&](Handle A_ptr) {
                                auto A = T::match_buffer(A_ptr, {64}, f32);
                                auto bx = T::cta_id({2});
                                auto t = T::thread_id({32});
                                A(bx * 32 + t) = A((1 - bx) * 32 + t) + 1.0f;
                              }),
                 "race across CTAs on A[", false});
  // Every CTA accumulating into one element.
  out.push_back({"global_accumulate",
                 T::prim_func("global_accumulate",
                              [&](Handle A_ptr, Handle C_ptr) {
                                auto A = T::match_buffer(A_ptr, {128}, f32);
                                auto C = T::match_buffer(C_ptr, {1}, f32);
                                auto bx = T::cta_id({4});
                                T::thread_id({1});
                                C(0) = C(0) + A(bx);
                              }),
                 "race across CTAs on C[0]", false});
  return out;
}

}  // namespace tx::test
