// Dropout with counter-based random numbers (seed 004's dropout op).
//
//   auto [y, keep] = tx::ops::dropout(x, 0.1, seed, offset, {.mask = true});
//   offset += x.numel();   // the next call's offset, as PyTorch's generator advances
//
// Element i of x is kept when Philox4x32-10 (Salmon et al., SC'11; Random123's
// constants) says so for e = offset + i: with key (seed mod 2^32, seed / 2^32)
// and counter (e / 8 mod 2^32, e / 2^35, 0, 0), its 16-bit draw is halfword
// e % 2 (0 the low half) of word out[(e / 2) % 4], and it is kept when that
// draw is >= round(p * 2^16) (clamped to [1, 65535]: p applies with a
// resolution of 2^-16, and a p in (0, 1) always drops and keeps some
// elements). One Philox call serves eight elements. So the mask is a
// function of (seed, offset + i) alone: the same on the GPU and the host, for
// every launch configuration and dtype. Kept elements are exactly x / (1 - p)
// (the correctly rounded f32 quotient of x by f32(1 - p), rounded once to x's
// dtype); dropped ones are +0.
#pragma once

#include <cstdint>
#include <source_location>

#include "tx/ops/ops.hpp"

namespace tx::ops {

struct DropoutOptions {
  bool training = true;   // false: the identity (y is x itself, as torch)
  bool mask = false;      // also return the keep mask
  DType mask_dtype = u8;  // u8 or bool
  Config config{};        // strategy, threads, num_per_thread (the mask does not depend on them)
};

struct DropoutResult {
  Tensor y;
  Tensor mask;  // undefined unless asked for: 1 kept, 0 dropped
};

// x: f32, f16, bf16, f8e4m3 or f8e5m2, any shape; p in [0, 1]. p = 0 gives a
// copy of x (mask all ones), p = 1 zeros (mask all zeros). offset >= 0.
DropoutResult dropout(const Tensor& x, double p, std::uint64_t seed, std::int64_t offset = 0,
                      const DropoutOptions& opt = {},
                      std::source_location loc = std::source_location::current());
// out= form: y (x's shape and dtype), mask optional (undefined: not written).
void dropout(const Tensor& x, double p, std::uint64_t seed, std::int64_t offset, Tensor& y,
             Tensor* mask = nullptr, const Config& cfg = {},
             std::source_location loc = std::source_location::current());

// The kernel dropout() launches for x (not launched): its CUDA, PTX and
// lowered IR. Undefined where no kernel runs (no elements, p = 0 or 1).
Kernel dropout_kernel(const Tensor& x, double p, std::int64_t offset = 0, bool with_mask = false,
                      const Config& cfg = {},
                      std::source_location loc = std::source_location::current());

// The keep decision's reference in plain C++ (the kernels compute the same bits).
// Philox4x32-10 of (counter, key).
void philox4x32_10(const std::uint32_t ctr[4], const std::uint32_t key[2], std::uint32_t out[4]);
// round(p * 2^16) in [1, 65535]: element e is kept when its draw is >= this (p in (0, 1)).
std::uint64_t dropout_threshold(double p);
bool dropout_keep(std::uint64_t seed, std::uint64_t element, double p);

}  // namespace tx::ops
