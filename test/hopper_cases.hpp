// Kernels and checks shared by the Hopper tests on the GPU (gpu_hopper.cpp)
// and on the host, where the same kernels run as fibers (test_hopper.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tx/tx.hpp"

namespace tx::test {

// |C - C_exact| <= K 2^-23 sum |a b| + one rounding of the output (ulp),
// as a ratio (<= 1 passes); a NaN is infinitely wrong.
inline double gemm_error(const std::vector<double>& a, const std::vector<double>& b,
                         const std::vector<double>& c, std::int64_t M, std::int64_t N,
                         std::int64_t K, double ulp) {
  double worst = 0;
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (std::int64_t p = 0; p < K; ++p) {
        const double x =
            a[static_cast<std::size_t>(i * K + p)] * b[static_cast<std::size_t>(p * N + j)];
        want += x;
        mag += std::fabs(x);
      }
      const double got = c[static_cast<std::size_t>(i * N + j)];
      if (std::isnan(got)) return INFINITY;
      const double tol = static_cast<double>(K) * 0x1p-23 * mag + ulp * std::fabs(want) + 1e-30;
      worst = std::max(worst, std::fabs(got - want) / tol);
    }
  return worst;
}

// A producer warpgroup writes position it (it * 1000 + thread + CTA * 100000)
// into stage it % 2 with plain stores; each of two consumer warpgroups copies
// the stage out to O[cta, it, consumer, thread]. Every thread arrives for its
// own accesses (128 producer and 256 consumer arrivals per phase), so the
// barriers alone order them. 2 stages over P positions: every barrier goes
// through about P / 2 phases; a wrong parity deadlocks or reads a stage twice
// or too early.
inline PrimFunc pipeline_phases(std::int64_t P, std::int64_t ctas = 1) {
  return T::prim_func("pipeline_phases", [&](Handle o_ptr) {
    auto O = T::match_buffer(o_ptr, {ctas, P, 2, 128}, i32);
    T::device_entry();
    auto cta = T::cta_id({ctas});
    auto wg = T::warpgroup_id({3});
    auto tid = T::thread_id_in_wg({128});
    auto S = T::alloc_buffer({2, 128}, i32, scope::shared);
    auto pipe = T::pipeline({.stages = 2, .producer_arrivals = 128, .consumer_arrivals = 256});
    T::if_(wg == 0, [&] {
      for (Var it : T::serial(P, "it")) {
        pipe.producer_acquire(it);
        S(pipe.stage(it), tid) = it * 1000 + tid + cta * 100000;
        pipe.producer_commit(it);
      }
    }).else_([&] {
      auto c = T::let(max(wg - 1, 0));
      for (Var it : T::serial(P, "it")) {
        pipe.consumer_wait(it);
        O(cta, it, c, tid) = S(pipe.stage(it), tid);
        pipe.consumer_release(it);
      }
    });
  });
}

inline bool pipeline_phases_ok(const std::vector<double>& got, std::int64_t P,
                               std::int64_t ctas = 1) {
  for (std::int64_t b = 0; b < ctas; ++b)
    for (std::int64_t it = 0; it < P; ++it)
      for (std::int64_t c = 0; c < 2; ++c)
        for (std::int64_t t = 0; t < 128; ++t)
          if (got[static_cast<std::size_t>(((b * P + it) * 2 + c) * 128 + t)] !=
              static_cast<double>(it * 1000 + t + b * 100000))
            return false;
  return true;
}

}  // namespace tx::test
