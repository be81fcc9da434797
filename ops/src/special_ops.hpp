// Shared by the ops outside the elementwise template (rope.cpp, dropout.cpp):
// their kernel cache and the Philox generator written in the DSL.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "tx/builder.hpp"
#include "tx/runtime/kernel.hpp"

namespace tx::ops::detail {

// Kernels of rope, its caches and dropout, per (op, dtypes, shape class,
// config, device): built once per process (the disk cache keeps the GPU
// binaries across processes). Few keys (a model has a handful of shapes),
// so no eviction.
inline Kernel special_cached(const std::string& key, const std::function<Kernel()>& build) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, Kernel>();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  Kernel k = build();  // outside the lock: a compile may take seconds
  std::lock_guard<std::mutex> lock(mu);
  return cache->emplace(key, k).first->second;
}

// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11; Random123's constants)
// in the DSL on u32 values: the 32 x 32 -> 64 products through u64, which
// the GPU does in one mul.wide.u32 and the host JIT in one 64-bit multiply.
// Every intermediate is bound to a variable: each product feeds two words,
// and an unbound tree would double per round.
// The round keys: rk0[r] = k0 + r * W0 and rk1[r] = k1 + r * W1 (mod 2^32).
// Passed in as kernel scalars (computed once on the host by
// philox_round_keys), each is an operand of the round's xor: 20 adds per
// call that the GPU would otherwise repeat in every thread.
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;
inline std::array<std::uint32_t, 20> philox_round_keys(std::uint64_t seed) {
  std::array<std::uint32_t, 20> k{};
  for (std::uint32_t r = 0; r < 10; ++r) {
    k[r] = static_cast<std::uint32_t>(seed) + r * kPhiloxW0;
    k[10 + r] = static_cast<std::uint32_t>(seed >> 32) + r * kPhiloxW1;
  }
  return k;
}
inline std::array<Expr, 4> philox4x32_10(std::array<Expr, 4> c, const std::array<Expr, 10>& rk0,
                                         const std::array<Expr, 10>& rk1) {
  constexpr std::uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  for (std::size_t r = 0; r < 10; ++r) {
    Var p0 = T::let(cast(c[0], u64) * kM0, "ph_p0");
    Var p1 = T::let(cast(c[2], u64) * kM1, "ph_p1");
    std::array<Expr, 4> n;
    n[0] = T::let(cast(p1 >> 32, u32) ^ c[1] ^ rk0[r], "ph_c0");
    n[1] = T::let(cast(p1, u32), "ph_c1");
    n[2] = T::let(cast(p0 >> 32, u32) ^ c[3] ^ rk1[r], "ph_c2");
    n[3] = T::let(cast(p0, u32), "ph_c3");
    c = n;
  }
  return c;
}

}  // namespace tx::ops::detail
