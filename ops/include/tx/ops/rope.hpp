// Rotary position embedding (seed 004's five rope ops), with vLLM's
// semantics: one launch rotates the query and the key in place, reading
// cos/sin from a cache that tx builds with a tx kernel for each variant.
//
//   Tensor cache = tx::ops::rope_cache(128, 4096);                 // default (base 10000)
//   tx::ops::rope(positions, q, k, cache, {.head_size = 128});    // neox
//
// rope_neox / rope_non_neox are the two rotations over the default cache;
// rope_llama31 / rope_yarn / rope_longrope are the neox rotation over the
// caches of those scalings (docs/ops.md has the formulas and where they
// differ from TileOPs').
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <vector>

#include "tx/runtime/kernel.hpp"
#include "tx/runtime/tensor.hpp"

namespace tx::ops {

struct RopeOptions {
  std::int64_t head_size = 0;   // required
  std::int64_t rotary_dim = 0;  // 0: head_size; columns past it are left untouched
  bool is_neox = true;          // pairs (i, i + rot/2); false: GPT-J's pairs (2i, 2i + 1)
  bool inverse = false;         // rotate by -angle (sin negated): the backward rotation
  // Added to every position before the cache lookup: vLLM's `offsets` with
  // one value; rope_longrope passes the long-cache rows' offset here.
  std::int64_t position_offset = 0;
};

// positions: int64 or int32, [T] or [B, S]. q: [T, H*hd] or [T, H, hd] (with
// [B, S] in place of T for [B, S] positions); k the same with Hkv heads, H a
// multiple of Hkv; k may be undefined (Tensor()). q and k: f32, f16 or bf16,
// contiguous, rotated in place. cos_sin_cache: [max_pos, rotary_dim], f32 or
// q's dtype: cos in the first rotary_dim/2 columns, sin in the rest.
// Math in f32, one rounding per output. A position outside [0, max_pos) is
// an error when the positions are host data; on the GPU the kernel leaves
// that token's q and k untouched (it cannot raise).
void rope(const Tensor& positions, const Tensor& q, const Tensor& k, const Tensor& cos_sin_cache,
          const RopeOptions& opt, std::source_location loc = std::source_location::current());
void rope(const Tensor& positions, const Tensor& q, const Tensor& cos_sin_cache,
          const RopeOptions& opt, std::source_location loc = std::source_location::current());

// The kernel rope() launches for these tensors (checked as rope() checks
// them; not launched): its CUDA, PTX and lowered IR. Undefined for no tokens.
Kernel rope_kernel(const Tensor& positions, const Tensor& q, const Tensor& k,
                   const Tensor& cos_sin_cache, const RopeOptions& opt,
                   std::source_location loc = std::source_location::current());

// ------------------------------------------------------------- cos/sin caches
//
// Each returns [rows, rotary_dim] (cos | sin) of `dtype` on `device` (default:
// tx::default_device()), built by a tx kernel there. Angles in f64, one
// rounding per entry (vLLM computes them in f32: at position 1e5 its angles
// are off by ~1e-2 rad, tx's by ~1e-11).

// default: inv_freq_i = base^(-2i / rotary_dim); rows = max_position.
Tensor rope_cache(std::int64_t rotary_dim, std::int64_t max_position, double base = 10000.0,
                  DType dtype = f32, std::optional<Device> device = std::nullopt,
                  std::source_location loc = std::source_location::current());

// Llama 3.1 (vLLM's Llama3RotaryEmbedding): wavelengths shorter than
// original_max_position / high_freq_factor keep their frequency, longer than
// original_max_position / low_freq_factor are divided by `factor`, between
// them the frequencies are blended smoothly.
struct Llama31Scaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position = 8192;
};
Tensor rope_cache_llama31(std::int64_t rotary_dim, std::int64_t max_position = 131072,
                          double base = 500000.0, const Llama31Scaling& s = {}, DType dtype = f32,
                          std::optional<Device> device = std::nullopt,
                          std::source_location loc = std::source_location::current());

// YaRN (vLLM's YaRNScalingRotaryEmbedding): rows = original_max_position *
// factor; frequencies between interpolation (/ factor) and extrapolation by
// a linear ramp over the correction range of (beta_fast, beta_slow) on
// rotary_dim; cos and sin times mscale = (0.1 ln(factor) + 1) * attn_factor.
struct YarnScaling {
  double factor = 4.0;
  std::int64_t original_max_position = 4096;
  double extrapolation_factor = 1.0;
  double attn_factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};
Tensor rope_cache_yarn(std::int64_t rotary_dim, double base = 10000.0, const YarnScaling& s = {},
                       DType dtype = f32, std::optional<Device> device = std::nullopt,
                       std::source_location loc = std::source_location::current());

// LongRoPE (vLLM's Phi3LongRoPEScaledRotaryEmbedding): rows =
// original_max_position (short factors) followed by max_position (long
// factors), inv_freq_i = 1 / (factor_i * base^(2i / rotary_dim)), both times
// the amplitude sqrt(1 + ln(L / L0) / ln L0) (1 when L <= L0) unless given.
// A batch with any position > L0 reads the long rows: position_offset = L0
// (longrope_position_offset computes it).
struct LongRopeScaling {
  std::vector<double> short_factor;  // rotary_dim / 2 each
  std::vector<double> long_factor;
  std::int64_t original_max_position = 4096;
  std::optional<double> short_mscale{};
  std::optional<double> long_mscale{};
};
Tensor rope_cache_longrope(std::int64_t rotary_dim, std::int64_t max_position, double base,
                           const LongRopeScaling& s, DType dtype = f32,
                           std::optional<Device> device = std::nullopt,
                           std::source_location loc = std::source_location::current());
// vLLM's long-prompt offset: original_max_position when any position exceeds
// it, else 0. Reads the positions (a device-to-host copy when they are on the GPU).
std::int64_t longrope_position_offset(const Tensor& positions, std::int64_t original_max_position,
                                      std::source_location loc = std::source_location::current());

// The caches' inverse frequencies and amplitudes in double precision (their
// reference; the kernels build the caches from these).
std::vector<double> rope_inv_freq(std::int64_t rotary_dim, double base);
std::vector<double> rope_inv_freq_llama31(std::int64_t rotary_dim, double base,
                                          const Llama31Scaling& s);
std::vector<double> rope_inv_freq_yarn(std::int64_t rotary_dim, double base, const YarnScaling& s);
double rope_yarn_mscale(const YarnScaling& s);
// short (first) and long inverse frequencies and amplitudes.
struct LongRopeFreqs {
  std::vector<double> short_inv_freq, long_inv_freq;
  double short_mscale = 1.0, long_mscale = 1.0;
};
LongRopeFreqs rope_inv_freq_longrope(std::int64_t rotary_dim, std::int64_t max_position,
                                     double base, const LongRopeScaling& s);

// ------------------------------------------------------- the five named ops
//
// Thin forms of rope() for the op table's names.
inline void rope_neox(const Tensor& positions, const Tensor& q, const Tensor& k,
                      const Tensor& cache, std::int64_t head_size, std::int64_t rotary_dim = 0,
                      std::source_location loc = std::source_location::current()) {
  rope(positions, q, k, cache, {.head_size = head_size, .rotary_dim = rotary_dim}, loc);
}
inline void rope_non_neox(const Tensor& positions, const Tensor& q, const Tensor& k,
                          const Tensor& cache, std::int64_t head_size, std::int64_t rotary_dim = 0,
                          std::source_location loc = std::source_location::current()) {
  rope(positions, q, k, cache, {.head_size = head_size, .rotary_dim = rotary_dim, .is_neox = false},
       loc);
}
// llama31 and yarn: a cache from rope_cache_llama31 / rope_cache_yarn.
inline void rope_llama31(const Tensor& positions, const Tensor& q, const Tensor& k,
                         const Tensor& cache, std::int64_t head_size, std::int64_t rotary_dim = 0,
                         std::source_location loc = std::source_location::current()) {
  rope(positions, q, k, cache, {.head_size = head_size, .rotary_dim = rotary_dim}, loc);
}
inline void rope_yarn(const Tensor& positions, const Tensor& q, const Tensor& k,
                      const Tensor& cache, std::int64_t head_size, std::int64_t rotary_dim = 0,
                      std::source_location loc = std::source_location::current()) {
  rope(positions, q, k, cache, {.head_size = head_size, .rotary_dim = rotary_dim}, loc);
}
// longrope: the [L0 + L, rot] cache of rope_cache_longrope; the long rows
// when any position exceeds original_max_position (reads the positions).
void rope_longrope(const Tensor& positions, const Tensor& q, const Tensor& k, const Tensor& cache,
                   std::int64_t head_size, std::int64_t original_max_position,
                   std::int64_t rotary_dim = 0,
                   std::source_location loc = std::source_location::current());

}  // namespace tx::ops
