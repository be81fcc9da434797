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
inline std::array<Expr, 4> philox4x32_10(std::array<Expr, 4> c, Expr k0, Expr k1) {
  constexpr std::uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint64_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    // The round key k + r * W (mod 2^32), from the launch's key directly.
    Expr rk0 = r == 0 ? k0 : Expr(k0 + static_cast<std::uint32_t>((kW0 * r) & 0xFFFFFFFFu));
    Expr rk1 = r == 0 ? k1 : Expr(k1 + static_cast<std::uint32_t>((kW1 * r) & 0xFFFFFFFFu));
    Var p0 = T::let(cast(c[0], u64) * kM0, "ph_p0");
    Var p1 = T::let(cast(c[2], u64) * kM1, "ph_p1");
    std::array<Expr, 4> n;
    n[0] = T::let(cast(p1 >> 32, u32) ^ c[1] ^ rk0, "ph_c0");
    n[1] = T::let(cast(p1, u32), "ph_c1");
    n[2] = T::let(cast(p0 >> 32, u32) ^ c[3] ^ rk1, "ph_c2");
    n[3] = T::let(cast(p0, u32), "ph_c3");
    c = n;
  }
  return c;
}

}  // namespace tx::ops::detail
