#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "tx/expr.hpp"
#include "tx/lowering/codegen_cuda.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

// f16/bf16 through the hardware conversions (RNE). e4m3fn through the
// hardware satfinite conversion on sm_89+ (saturates to +-448, NaN -> 0x7F)
// with a bit-identical software path below it; e5m2 in software because it
// must keep Inf (the hardware only has satfinite). The host fallback rounds
// the same way, bit for bit.
// The CUDA prelude, one helper per entry: a kernel's source holds only the
// helpers it calls (and what they call), so the printed CUDA is the kernel
// and NVRTC has no unused definitions to warn about.
struct Helper {
  std::vector<std::string> names;  // identifiers that make the kernel need it
  const char* code;
};

const std::vector<Helper>& helpers() {
  static const std::vector<Helper> table = {
      {{"tx_f16"},
       R"(typedef unsigned short tx_f16;
)"},
      // The 32-bit shared-window address ldmatrix / cp.async take.
      {{"tx_smem_addr"},
       R"(static __device__ __forceinline__ unsigned tx_smem_addr(const void* p) {
  unsigned a; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
)"},
      // Commit / wait groups of cp.async; nothing to wait for below sm_80,
      // where tx lowers asynchronous copies to synchronous ones.
      {{"tx_cp_async_commit"},
       R"(static __device__ __forceinline__ void tx_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
)"},
      {{"tx_cp_async_wait"},
       R"(template <int N> static __device__ __forceinline__ void tx_cp_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}
)"},
      {{"tx_bf16"},
       R"(typedef unsigned short tx_bf16;
)"},
      // A TMA tensor map (CUtensorMap: 128 opaque bytes, 64-byte aligned),
      // passed by value as a __grid_constant__ parameter.
      {{"tx_tensor_map"},
       R"(struct __align__(64) tx_tensor_map { unsigned long long opaque[16]; };
)"},
      // Flags between ranks (T::dist): release stores and adds, acquire
      // loads, at system scope (the peer is another GPU; sm_70 and later).
      {{"tx_signal"},
       R"(static __device__ __forceinline__ void tx_signal(unsigned* flag, unsigned v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(flag), "r"(v) : "memory");
}
)"},
      {{"tx_signal_add"},
       R"(static __device__ __forceinline__ void tx_signal_add(unsigned* flag, unsigned v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" :: "l"(flag), "r"(v) : "memory");
}
)"},
      {{"tx_wait_until"},
       R"(static __device__ __forceinline__ void tx_wait_until(const unsigned* flag, unsigned v) {
  unsigned x;
  for (;;) {
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(x) : "l"(flag) : "memory");
    if ((int)(x - v) >= 0) break;  // x >= v modulo 2^32 (counters that wrap)
  }
#if __CUDA_ARCH__ >= 900
  // What the acquire made visible, visible to this thread's TMA copies too
  // (the async proxy): a TMA load of data a peer or a copy engine wrote.
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}
)"},
      // mbarriers (sm_90): 32-bit shared addresses of 8-byte barriers.
      {{"tx_mbarrier_init"},
       R"(static __device__ __forceinline__ void tx_mbarrier_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}
)"},
      {{"tx_mbarrier_arrive"},
       R"(static __device__ __forceinline__ void tx_mbarrier_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
)"},
      {{"tx_mbarrier_expect_tx"},
       R"(static __device__ __forceinline__ void tx_mbarrier_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
)"},
      {{"tx_mbarrier_wait"},
       R"(// Spins on try_wait (which itself waits a while in hardware) until the
// phase of `parity` has completed.
static __device__ __forceinline__ void tx_mbarrier_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
)"},
      {{"tx_tma_load"},
       R"(// One TMA box global -> shared, completing on `bar` (coordinates innermost first).
static __device__ __forceinline__ void tx_tma_load(unsigned dst, const tx_tensor_map* map, unsigned bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}
static __device__ __forceinline__ void tx_tma_load(unsigned dst, const tx_tensor_map* map, unsigned bar, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0) : "memory");
}
static __device__ __forceinline__ void tx_tma_load(unsigned dst, const tx_tensor_map* map, unsigned bar, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
static __device__ __forceinline__ void tx_tma_load(unsigned dst, const tx_tensor_map* map, unsigned bar, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
static __device__ __forceinline__ void tx_tma_load(unsigned dst, const tx_tensor_map* map, unsigned bar, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
               :: "r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
)"},
      {{"tx_tma_reduce_add"},
       R"(// One TMA box shared -> global, each element added into global memory
// (float32), in the calling thread's bulk group (coordinates innermost first).
static __device__ __forceinline__ void tx_tma_reduce_add(const tx_tensor_map* map, unsigned src, int c0) {
  asm volatile("cp.reduce.async.bulk.tensor.1d.global.shared::cta.add.tile.bulk_group [%0, {%2}], [%1];"
               :: "l"(map), "r"(src), "r"(c0) : "memory");
}
static __device__ __forceinline__ void tx_tma_reduce_add(const tx_tensor_map* map, unsigned src, int c0, int c1) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1) : "memory");
}
static __device__ __forceinline__ void tx_tma_reduce_add(const tx_tensor_map* map, unsigned src, int c0, int c1, int c2) {
  asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
static __device__ __forceinline__ void tx_tma_reduce_add(const tx_tensor_map* map, unsigned src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
static __device__ __forceinline__ void tx_tma_reduce_add(const tx_tensor_map* map, unsigned src, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.reduce.async.bulk.tensor.5d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
)"},
      {{"tx_tma_store"},
       R"(// One TMA box shared -> global in the calling thread's bulk group (coordinates
// innermost first); the TMA clips it at the tensor's bounds.
static __device__ __forceinline__ void tx_tma_store(const tx_tensor_map* map, unsigned src, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.global.shared::cta.bulk_group [%0, {%2}], [%1];"
               :: "l"(map), "r"(src), "r"(c0) : "memory");
}
static __device__ __forceinline__ void tx_tma_store(const tx_tensor_map* map, unsigned src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1) : "memory");
}
static __device__ __forceinline__ void tx_tma_store(const tx_tensor_map* map, unsigned src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
static __device__ __forceinline__ void tx_tma_store(const tx_tensor_map* map, unsigned src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
static __device__ __forceinline__ void tx_tma_store(const tx_tensor_map* map, unsigned src, int c0, int c1, int c2, int c3, int c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];"
               :: "l"(map), "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
)"},
      {{"tx_tma_store_commit"},
       R"(static __device__ __forceinline__ void tx_tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
)"},
      {{"tx_tma_store_wait"},
       R"(template <int N> static __device__ __forceinline__ void tx_tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}
)"},
      {{"tx_wgmma_desc"},
       R"(// A wgmma shared-memory matrix descriptor: the start address (bits 0-13,
// in 16-byte units) over the constant fields (LBO, SBO, swizzle mode).
static __device__ __forceinline__ unsigned long long tx_wgmma_desc(unsigned addr, unsigned long long fields) {
  return fields | (unsigned long long)((addr & 0x3FFFFu) >> 4);
}
)"},
      {{"tx_f8e4m3"},
       R"(typedef unsigned char tx_f8e4m3;
)"},
      {{"tx_f8e5m2"},
       R"(typedef unsigned char tx_f8e5m2;
)"},
      {{"tx_f16_to_f32"},
       R"(static __device__ __forceinline__ float tx_f16_to_f32(tx_f16 h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
)"},
      {{"tx_f32_to_f16"},
       R"(static __device__ __forceinline__ tx_f16 tx_f32_to_f16(float f) {
  tx_f16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
)"},
      {{"tx_bf16_to_f32"},
       R"(static __device__ __forceinline__ float tx_bf16_to_f32(tx_bf16 h) {
  return __uint_as_float(((unsigned)h) << 16);
}
)"},
      {{"tx_f32_to_bf16"},
       R"(static __device__ __forceinline__ tx_bf16 tx_f32_to_bf16(float f) {
  tx_bf16 h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
)"},
      {{"tx_f8e5m2_to_f32"},
       R"(static __device__ __forceinline__ float tx_f8e5m2_to_f32(tx_f8e5m2 v) {
  return tx_f16_to_f32((tx_f16)(((unsigned)v) << 8));
}
)"},
      {{"tx_f32_to_f8e5m2"},
       R"(static __device__ __forceinline__ tx_f8e5m2 tx_f32_to_f8e5m2(float x) {
  unsigned s = (__float_as_uint(x) >> 24) & 0x80u;
  float a = fabsf(x);
#if __CUDA_ARCH__ >= 890
  // The hardware conversion saturates; torch's .to(e5m2) overflows to Inf
  // (from the rounding midpoint 61440 up) and tx writes one NaN encoding.
  unsigned short h;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.0f), "f"(x));
  unsigned r = a >= 61440.0f ? (s | 0x7Cu) : (h & 0xFFu);
  return (tx_f8e5m2)(a != a ? 0x7Fu : r);
#endif
  if (a != a) return (tx_f8e5m2)0x7Fu;
  if (a >= 61440.0f) return (tx_f8e5m2)(s | 0x7Cu);
  if (a < 6.103515625e-05f) return (tx_f8e5m2)(s | (unsigned)rintf(a * 65536.0f));
  unsigned u = __float_as_uint(a);
  u += 0xFFFFFu + ((u >> 21) & 1u);
  return (tx_f8e5m2)(s | ((((u >> 23) - 112u) << 2) | ((u >> 21) & 3u)));
}
)"},
      {{"tx_f8e4m3_to_f32"},
       R"(static __device__ __forceinline__ float tx_f8e4m3_to_f32(tx_f8e4m3 v) {
#if __CUDA_ARCH__ >= 890
  unsigned h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)v));
  return tx_f16_to_f32((tx_f16)(h2 & 0xFFFFu));
#endif
  unsigned s = ((unsigned)v & 0x80u) << 24, e = ((unsigned)v >> 3) & 0xFu, m = (unsigned)v & 7u;
  float r;
  if (e == 15u && m == 7u) r = __uint_as_float(0x7FC00000u);
  else if (e == 0u) r = (float)m * 0.001953125f;
  else r = __uint_as_float(((e + 120u) << 23) | (m << 20));
  return __uint_as_float(__float_as_uint(r) | s);
}
)"},
      {{"tx_f32_to_f8e4m3"},
       R"(static __device__ __forceinline__ tx_f8e4m3 tx_f32_to_f8e4m3(float x) {
#if __CUDA_ARCH__ >= 890
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return (tx_f8e4m3)(r & 0xFFu);
#endif
  unsigned s = (__float_as_uint(x) >> 24) & 0x80u;
  float a = fabsf(x);
  if (a != a) return (tx_f8e4m3)0x7Fu;
  if (a >= 448.0f) return (tx_f8e4m3)(s | 0x7Eu);
  if (a < 0.015625f) return (tx_f8e4m3)(s | (unsigned)rintf(a * 512.0f));
  unsigned u = __float_as_uint(a);
  u += 0x7FFFFu + ((u >> 20) & 1u);
  unsigned e = (u >> 23) - 120u, m = (u >> 20) & 7u;
  if (e > 15u || (e == 15u && m == 7u)) return (tx_f8e4m3)(s | 0x7Eu);
  return (tx_f8e4m3)(s | (e << 3) | m);
}
)"},
      {{"tx_max", "tx_min"},
       R"(// maximum/minimum propagate NaN (as torch.maximum), unlike fmaxf.
static __device__ __forceinline__ float tx_max(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
#else
  return (a != a || b != b) ? a + b : fmaxf(a, b);
#endif
}
static __device__ __forceinline__ float tx_min(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
#else
  return (a != a || b != b) ? a + b : fminf(a, b);
#endif
}
static __device__ __forceinline__ double tx_max(double a, double b) { return (a != a || b != b) ? a + b : fmax(a, b); }
static __device__ __forceinline__ double tx_min(double a, double b) { return (a != a || b != b) ? a + b : fmin(a, b); }
template <class T> static __device__ __forceinline__ T tx_max(T a, T b) { return a > b ? a : b; }
template <class T> static __device__ __forceinline__ T tx_min(T a, T b) { return a < b ? a : b; }
)"},
      {{"tx_bitcast"},
       R"(template <class U, class T> static __device__ __forceinline__ U tx_bitcast(T x) {
  union { T a; U b; } u; u.a = x; return u.b;
}
)"},
      {{"tx_erfc"},
       R"(// erfc(|x|) = t exp(-x^2 + P(t)), t = 1 / (1 + |x| / 2). tx_erfc: the
// degree-9 P of Numerical Recipes (fractional error < 1.2e-7; a few f32 ulp
// as evaluated). tx_erfc_fast: a degree-5 P fitted for approx_math (< 1.6e-5
// relative: 1/60 of an f16 ulp) with the hardware exp.
static __device__ __forceinline__ float tx_erfc(float x) {
  float z = fabsf(x);
  float t = __fdividef(1.0f, 1.0f + 0.5f * z);
  float p = -0.82215223f + t * 0.17087277f;
  p = 1.48851587f + t * p;
  p = -1.13520398f + t * p;
  p = 0.27886807f + t * p;
  p = -0.18628806f + t * p;
  p = 0.09678418f + t * p;
  p = 0.37409196f + t * p;
  p = 1.00002368f + t * p;
  // exp(-z^2) apart from exp(P): -z^2 + P rounded in f32 would lose ~1e-5
  // in the tail; z*z's exact remainder corrects exp(-z^2) to first order.
  float zz = z * z, lo = fmaf(z, z, -zz);
  float r = t * expf(-zz) * expf(-1.26551223f + t * p);
  r = fmaf(-r, lo, r);
  r = z >= 10.0f ? 0.0f : r;  // past 10 erfc underflows (and inf would give 0 * NaN); NaN passes
  return x >= 0.0f ? r : 2.0f - r;
}
)"},
      {{"tx_erfc_fast"},
       R"(static __device__ __forceinline__ float tx_erfc_fast(float x) {
  float z = fabsf(x);
  float t = __fdividef(1.0f, 1.0f + 0.5f * z);
  float p = -0.710691319f + t * 0.229265266f;
  p = 0.476289510f + t * p;
  p = 0.253438495f + t * p;
  p = 1.01827113f + t * p;
  float r = t * __expf(-z * z - 1.26656536f + t * p);
  r = z >= 10.0f ? 0.0f : r;
  return x >= 0.0f ? r : 2.0f - r;
}
)"},
      {{"tx_rcp_approx"},
       R"(// normcdf(x) = erfc(-x / sqrt2) / 2 with the same fit, in the variable
// u = |x| / sqrt2: r = t 2^(log2e (P(t) - ln 2 - x^2 / 2)), t = 1 / (1 + u / 2).
// tx_normcdf (f32) keeps x^2 / 2 exact (x*x and its fma remainder) and the
// exponent as a two-float sum through its conversion to base 2, so one
// ex2.approx replaces two expf and the far tail keeps its relative accuracy
// (GELU = x normcdf(x), within 8 ulp of float64 where erfc(x * -1/sqrt2)
// loses up to 2e2 ulp to the rounding of its argument). Both flush a CDF
// below 2^-126 (x < -12.9) to zero: the hardware's denormal fix-up costs 2%
// of GELU's bandwidth. tx_normcdf_fast: the degree-5 fit with log2e folded
// into it (< 1.5e-5 relative: 16-bit outputs only).
static __device__ __forceinline__ float tx_rcp_approx(float x) {
  float r; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r;
}
)"},
      {{"tx_ex2_approx_ftz"},
       R"(static __device__ __forceinline__ float tx_ex2_approx_ftz(float x) {
  float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r;
}
)"},
      {{"tx_normcdf"},
       R"(static __device__ __forceinline__ float tx_normcdf(float x) {
  const float L = 1.44269502f, L_lo = 1.925963e-8f;  // log2(e) = L + L_lo
  float z = fabsf(x);
  float t = tx_rcp_approx(fmaf(z, 0.353553391f, 1.0f));
  float p = fmaf(t, 0.17087277f, -0.82215223f);
  p = fmaf(t, p, 1.48851587f);
  p = fmaf(t, p, -1.13520398f);
  p = fmaf(t, p, 0.27886807f);
  p = fmaf(t, p, -0.18628806f);
  p = fmaf(t, p, 0.09678418f);
  p = fmaf(t, p, 0.37409196f);
  p = fmaf(t, p, 1.00002368f);
  p = fmaf(t, p, -1.95865941f);  // -1.26551223 - ln 2: the 1/2 of the CDF
  float xx = x * x, xx_lo = fmaf(x, x, -xx);  // x^2 = xx + xx_lo exactly
  float a = fmaf(xx, -0.5f, p);                // a + a_lo = p - x^2 / 2
  float a_lo = fmaf(xx_lo, -0.5f, p - fmaf(xx, 0.5f, a));
  float y = a * L;                             // y + y_lo = (a + a_lo) log2e
  float y_lo = fmaf(a, L, -y) + fmaf(a, L_lo, a_lo * L);
  float r = t * tx_ex2_approx_ftz(y);
  r = fmaf(r, y_lo * 0.693147181f, r);
  r = z >= 14.2f ? 0.0f : r;  // past it the CDF underflows (and x^2 = inf gives NaN); NaN passes
  return x >= 0.0f ? 1.0f - r : r;
}
)"},
      {{"tx_normcdf_fast"},
       R"(static __device__ __forceinline__ float tx_normcdf_fast(float x) {
  float t = tx_rcp_approx(fmaf(fabsf(x), 0.353553391f, 1.0f));
  float p = fmaf(t, 0.330759862f, -1.02531084f);  // the tx_erfc_fast fit times log2e,
  p = fmaf(t, p, 0.687140514f);                    // minus 1 for the 1/2
  p = fmaf(t, p, 0.36563446f);
  p = fmaf(t, p, 1.46905471f);
  p = fmaf(t, p, -2.82726756f);
  float r = t * tx_ex2_approx_ftz(fmaf(x * -0.72134752f, x, p));
  return x >= 0.0f ? 1.0f - r : r;
}
)"},
      {{"tx_profile_mark"},
       R"(// A profiled region's mark (T::profile, profiling on): the warp's first
// active lane takes the warp's next record index from its count in shared
// memory and stores (%globaltimer, region | end << 16 | smid << 17) into the
// warp's area of `buf` with one 16-byte store; marks past `cap` only raise
// the area's header to the number of marks (runtime/src/profile.cpp).
static __device__ __forceinline__ void tx_profile_mark(unsigned long long* buf, unsigned* counts,
                                                       unsigned cap, unsigned warps,
                                                       unsigned region, unsigned end) {
  const unsigned mask = __activemask();
  if ((threadIdx.x & 31) != (unsigned)(__ffs(mask) - 1)) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  const unsigned warp = threadIdx.x / 32;
  const unsigned n = atomicAdd(&counts[warp], 1u);
  const unsigned long long cta =
      blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
  unsigned long long* w = buf + (cta * warps + warp) * (2ull + 2ull * cap);
  if (n < cap) {
    const unsigned long long meta = region | (end << 16) | ((unsigned long long)sm << 17);
    asm volatile("st.global.v2.u64 [%0], {%1, %2};" :: "l"(w + 2 + 2 * n), "l"(t), "l"(meta));
  } else {
    atomicMax(w, (unsigned long long)n + 1);
  }
}
)"},
      {{"tx_floordiv"},
       R"(template <class T> static __device__ __forceinline__ T tx_floordiv(T a, T b) {
  T q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
)"},
      {{"tx_floormod"},
       R"(template <class T> static __device__ __forceinline__ T tx_floormod(T a, T b) {
  T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
)"},
  };
  return table;
}

// The helpers `code` needs, with the helpers they need, in table order (each
// before its users).
std::string prelude_for(const std::string& code) {
  const auto& table = helpers();
  std::vector<bool> need(table.size(), false);
  std::unordered_set<std::string> idents;
  auto scan = [&](const std::string& text) {
    for (std::size_t i = text.find("tx_"); i != std::string::npos; i = text.find("tx_", i + 1)) {
      if (i > 0 && (std::isalnum(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '_'))
        continue;
      std::size_t j = i;
      while (j < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_'))
        ++j;
      idents.insert(text.substr(i, j - i));
    }
  };
  scan(code);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t k = 0; k < table.size(); ++k) {
      if (need[k]) continue;
      for (const std::string& n : table[k].names)
        if (idents.count(n)) {
          need[k] = changed = true;
          scan(table[k].code);
          break;
        }
    }
  }
  std::string out;
  for (std::size_t k = 0; k < table.size(); ++k)
    if (need[k]) out += table[k].code;
  return out;
}

const char* c_type(DType t) {
  switch (t.code) {
    case TypeCode::Float:
      return t.bits == 64 ? "double" : t.bits == 32 ? "float" : "tx_f16";
    case TypeCode::BFloat:
      return "tx_bf16";
    case TypeCode::Float8E4M3:
      return "tx_f8e4m3";
    case TypeCode::Float8E5M2:
      return "tx_f8e5m2";
    case TypeCode::Bool:
      return "bool";
    case TypeCode::Int:
      return t.bits == 8    ? "signed char"
             : t.bits == 16 ? "short"
             : t.bits == 32 ? "int"
                            : "long long";
    case TypeCode::UInt:
      return t.bits == 8    ? "unsigned char"
             : t.bits == 16 ? "unsigned short"
             : t.bits == 32 ? "unsigned"
                            : "unsigned long long";
    default:
      return "void";
  }
}

// Suffix of the conversion helpers for a storage-only float type.
const char* small_name(DType t) {
  switch (t.code) {
    case TypeCode::Float:
      return "f16";
    case TypeCode::BFloat:
      return "bf16";
    case TypeCode::Float8E4M3:
      return "f8e4m3";
    case TypeCode::Float8E5M2:
      return "f8e5m2";
    default:
      return "";
  }
}

const char* vec_type(int bytes) {
  switch (bytes) {
    case 16:
      return "uint4";
    case 8:
      return "uint2";
    case 4:
      return "unsigned";
    case 2:
      return "unsigned short";
    default:
      return "unsigned char";
  }
}

std::string float_literal(double v, DType t) {
  if (t == f64) {
    if (std::isnan(v)) return "__longlong_as_double(0x7ff8000000000000ll)";
    if (std::isinf(v))
      return v > 0 ? "__longlong_as_double(0x7ff0000000000000ll)"
                   : "__longlong_as_double(0xfff0000000000000ll)";
    char b[64];
    std::snprintf(b, sizeof b, "%.17g", v);
    std::string s = b;
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return s;
  }
  if (t == f32) {
    if (std::isnan(v)) return "__uint_as_float(0x7fc00000u)";
    if (std::isinf(v))
      return v > 0 ? "__uint_as_float(0x7f800000u)" : "__uint_as_float(0xff800000u)";
    char b[64];
    std::snprintf(b, sizeof b, "%.9g", static_cast<double>(static_cast<float>(v)));
    std::string s = b;
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return s + "f";
  }
  // Storage types: the exact bits.
  char b[64];
  std::snprintf(b, sizeof b, "((%s)0x%llx)", c_type(t),
                static_cast<unsigned long long>(encode_bits(v, t)));
  return b;
}

std::string int_literal(std::int64_t v, DType t) {
  if (t.is_bool()) return v ? "true" : "false";
  std::string s = std::to_string(v);
  if (t == i32) {
    if (v == std::numeric_limits<std::int32_t>::min()) return "(-2147483647 - 1)";
    return s;
  }
  if (t == i64) {
    if (v == std::numeric_limits<std::int64_t>::min()) return "(-9223372036854775807ll - 1ll)";
    return s + "ll";
  }
  if (t == u32) return std::to_string(static_cast<std::uint32_t>(v)) + "u";
  if (t == u64) return std::to_string(static_cast<std::uint64_t>(v)) + "ull";
  return std::string("((") + c_type(t) + ")" + s + ")";
}

const std::unordered_set<std::string>& reserved() {
  static const std::unordered_set<std::string> r = {
      "auto",     "bool",      "break",    "case",     "char",    "const",     "continue",
      "default",  "do",        "double",   "else",     "enum",    "extern",    "float",
      "for",      "goto",      "if",       "inline",   "int",     "long",      "register",
      "restrict", "return",    "short",    "signed",   "sizeof",  "static",    "struct",
      "switch",   "typedef",   "union",    "unsigned", "void",    "volatile",  "while",
      "class",    "namespace", "template", "this",     "new",     "delete",    "true",
      "false",    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",  "min",
      "max",      "asm",       "operator", "private",  "public",  "protected", "virtual",
      "friend",   "using",     "typename", "uint4",    "uint2",   "float4",    "dim3",
      "main",     "tx_smem"};
  return r;
}

class CudaEmitter : public IRVisitor {
 public:
  CudaEmitter(const LoweredKernel& k, bool approx, int min_ctas_per_sm)
      : k_(k), approx_(approx), min_ctas_per_sm_(min_ctas_per_sm) {
    for (const SharedAllocation& a : k.shared) shared_offset_[a.buffer->data.get()] = a.offset;
  }

  std::string emit(const std::string& kernel_name) {
    const PrimFunc& f = k_.lowered;
    std::ostringstream head;
    head << "// Generated by tx from kernel '" << f->name << "'";
    if (f->loc.known()) head << " (" << f->loc.str() << ")";
    head << "\n// launch: grid (";
    for (int i = 0; i < 3; ++i) {
      const Expr& g = k_.launch.grid_exprs[static_cast<std::size_t>(i)];
      head << (i ? ", " : "")
           << (g.defined() && !g.as<IntImmNode>()
                   ? to_string(g)
                   : std::to_string(k_.launch.grid[static_cast<std::size_t>(i)]));
    }
    head << "), block " << k_.launch.block << ", dynamic shared memory " << k_.shared_bytes
         << " bytes\n";
    std::ostringstream sig;
    sig << "extern \"C\" __global__ void __launch_bounds__(" << k_.launch.block;
    if (min_ctas_per_sm_ > 0) sig << ", " << min_ctas_per_sm_;
    sig << ") " << kernel_name << "(";
    // Parameters in order: buffers as pointers, scalars by value, then the
    // T::dim extents (ints) that the launch binds from the tensors' shapes.
    for (std::size_t i = 0; i < f->params.size(); ++i) {
      sig << (i ? ", " : "");
      if (f->params[i].scalar.defined()) {
        const Var& v = f->params[i].scalar;
        sig << c_type(v.dtype()) << " " << name_of(v.get(), v.name());
        continue;
      }
      const Buffer& b = f->params[i].buffer;
      const bool ro = !k_.params[i].written;
      // T::no_alias: the buffers do not overlap (the launch checks it).
      sig << (ro ? "const " : "") << c_type(b->dtype) << "* "
          << (f->no_alias ? "__restrict__ " : "") << name_of(b->data.get(), b->name);
    }
    for (std::size_t i = 0; i < f->dims.size(); ++i)
      sig << (f->params.empty() && i == 0 ? "" : ", ") << "int "
          << name_of(f->dims[i].var.get(), f->dims[i].var.name());
    // T::match_symmetric: each symmetric buffer's table of every rank's copy.
    for (std::size_t i = 0; i < f->params.size(); ++i) {
      if (!f->params[i].symmetric) continue;
      const Buffer& b = f->params[i].buffer;
      sig << ", " << c_type(b->dtype) << "* const* __restrict__ " << peer_table(b);
    }
    // TMA tensor maps last, by value in the parameter space.
    for (std::size_t i = 0; i < k_.tensor_maps.size(); ++i)
      sig << (f->params.empty() && f->dims.empty() && i == 0 ? "" : ", ")
          << "const __grid_constant__ tx_tensor_map tx_tmap" << i;
    // Profiled (T::profile regions, profiling on): the per-warp records, last.
    if (!k_.profile_regions.empty())
      sig << (f->params.empty() && f->dims.empty() && k_.tensor_maps.empty() ? "" : ", ")
          << "unsigned long long* __restrict__ tx_profile";
    sig << ") {\n";
    indent_ = 1;
    if (k_.shared_bytes > 0) line("extern __shared__ __align__(1024) unsigned char tx_smem[];");
    if (k_.profile_counts_offset >= 0) {
      // Each warp's mark count (tx_profile_mark), zeroed by its lane 0 before
      // any of its marks.
      line("unsigned* const tx_profile_n = reinterpret_cast<unsigned*>(tx_smem + " +
           std::to_string(k_.profile_counts_offset) + ");");
      line("if ((threadIdx.x & 31u) == 0u) tx_profile_n[threadIdx.x / 32] = 0u;");
      line("__syncwarp();");
    }
    visit(f->body);
    // A CTA's shared memory must outlive the TMA's reads of it: the threads
    // that issued TMA stores wait for them before the kernel ends.
    bool tma_stores = false;
    for_each_stmt(f->body, [&](const Stmt& s) {
      if (auto* t = s.as<TmaCopyNode>()) tma_stores = tma_stores || t->store;
    });
    if (tma_stores) line("tx_tma_store_wait<0>();");
    out_ << "}\n";
    std::string kernel = sig.str() + out_.str();
    std::string prelude = prelude_for(kernel);
    return head.str() + prelude + (prelude.empty() ? "" : "\n") + kernel;
  }

 private:
  // The kernel parameter holding symmetric buffer b's table of peer copies.
  std::string peer_table(const Buffer& b) { return "tx_peers_" + name_of(b->data.get(), b->name); }

  std::string name_of(const void* key, const std::string& base) {
    auto it = names_.find(key);
    if (it != names_.end()) return it->second;
    std::string n = sanitize_identifier(base);
    if (reserved().count(n) || n.rfind("tx_", 0) == 0) n += "_";
    std::string u = n;
    for (int k = 1; used_.count(u); ++k) u = n + "_" + std::to_string(k);
    used_.insert(u);
    names_[key] = u;
    return u;
  }

  void line(const std::string& s) {
    for (int i = 0; i < indent_; ++i) out_ << "  ";
    out_ << s << "\n";
  }

  // ------------------------------------------------------------ exprs
  // An expression's text: what visiting it appends to eo_, taken back off.
  // (A stream per call cost a locale's facet lookups each time: 12 million
  // of them printing the spilled parts of y = y * y chains, which took 30 s.)
  std::string e(const Expr& x) {
    const std::size_t start = eo_.text.size();
    IRVisitor::visit(x);
    std::string s = eo_.text.substr(start);
    eo_.text.resize(start);
    return s;
  }
  // Operand of an operator: atoms bare, compound expressions in parentheses.
  std::string op(const Expr& x) {
    std::string s = e(x);
    bool atom = x.as<VarNode>() || x.as<LoadNode>() || x.as<CallNode>() ||
                (x.as<IntImmNode>() && x.as<IntImmNode>()->value >= 0 &&
                 (x.dtype() == i32 || x.dtype() == i64)) ||
                (x.as<FloatImmNode>() && x.as<FloatImmNode>()->value >= 0 && x.dtype() == f32);
    return atom ? s : "(" + s + ")";
  }

  void visit_node(const IntImmNode* n) override { eo_ << int_literal(n->value, n->dtype); }
  void visit_node(const FloatImmNode* n) override { eo_ << float_literal(n->value, n->dtype); }
  void visit_node(const VarNode* n) override { eo_ << name_of(n, n->name); }
  void visit_node(const CastNode* n) override {
    DType to = n->dtype, from = n->value.dtype();
    std::string v = e(n->value);
    if (from.is_low_precision_float()) {
      v = std::string("tx_") + small_name(from) + "_to_f32(" + v + ")";
      from = f32;
    }
    if (to.is_low_precision_float()) {
      if (from != f32) v = "(float)(" + v + ")";
      eo_ << "tx_f32_to_" << small_name(to) << "(" << v << ")";
    } else if (to == from) {
      eo_ << v;
    } else {
      eo_ << "(" << c_type(to) << ")(" << v << ")";
    }
  }
  void visit_node(const BinaryNode* n) override {
    DType t = n->a.dtype();
    // Each operand is printed once: a chain of maxima (a CTA's 32 warps
    // folded) would otherwise print in 2^32 steps.
    const bool call_form =
        n->op == BinOp::Min || n->op == BinOp::Max ||
        ((n->op == BinOp::FloorDiv || n->op == BinOp::FloorMod) && !t.is_float()) ||
        (n->op == BinOp::Div && approx_ && t == f32) || (n->op == BinOp::Mod && t.is_float());
    std::string a = call_form ? e(n->a) : op(n->a), b = call_form ? e(n->b) : op(n->b);
    switch (n->op) {
      case BinOp::Min:
        eo_ << "tx_min(" << a << ", " << b << ")";
        return;
      case BinOp::Max:
        eo_ << "tx_max(" << a << ", " << b << ")";
        return;
      case BinOp::FloorDiv:
        if (t.is_float())
          eo_ << (t == f64 ? "floor(" : "floorf(") << a << " / " << b << ")";
        else
          eo_ << "tx_floordiv(" << a << ", " << b << ")";
        return;
      case BinOp::FloorMod:
        if (t.is_float())
          eo_ << "(" << a << " - " << (t == f64 ? "floor(" : "floorf(") << a << " / " << b << ") * "
              << b << ")";
        else
          eo_ << "tx_floormod(" << a << ", " << b << ")";
        return;
      case BinOp::Div:
        if (approx_ && t == f32) {
          eo_ << "__fdividef(" << a << ", " << b << ")";
          return;
        }
        break;
      case BinOp::Mod:
        if (t.is_float()) {
          eo_ << (t == f64 ? "fmod(" : "fmodf(") << a << ", " << b << ")";
          return;
        }
        break;
      case BinOp::And:
        eo_ << a << " && " << b;
        return;
      case BinOp::Or:
        eo_ << a << " || " << b;
        return;
      default:
        break;
    }
    eo_ << a << " " << binop_symbol(n->op) << " " << b;
  }
  void visit_node(const UnaryNode* n) override {
    switch (n->op) {
      case UnOp::Neg:
        eo_ << "-" << op(n->a);
        break;
      case UnOp::Not:
        eo_ << "!" << op(n->a);
        break;
      case UnOp::BitNot:
        eo_ << "~" << op(n->a);
        break;
    }
  }
  void visit_node(const SelectNode* n) override {
    eo_ << op(n->cond) << " ? " << op(n->t) << " : " << op(n->f);
  }
  void visit_node(const CallNode* n) override {
    auto args = [&]() {
      std::string s;
      for (std::size_t i = 0; i < n->args.size(); ++i) s += (i ? ", " : "") + e(n->args[i]);
      return s;
    };
    DType t = n->args.empty() ? i32 : n->args[0].dtype();
    bool is_f32 = t == f32;
    switch (n->op) {
      case Intrinsic::thread_idx:
        eo_ << "((int)threadIdx.x)";
        return;
      case Intrinsic::block_idx: {
        auto d = as_const_int(n->args[0]).value_or(0);
        eo_ << "((int)blockIdx."
            << "xyz"[d] << ")";
        return;
      }
      case Intrinsic::shfl_xor: {
        bool native = t == f32 || t == f64 || t == i32 || t == u32 || t == i64 || t == u64;
        if (native)
          eo_ << "__shfl_xor_sync(0xffffffffu, " << e(n->args[0]) << ", " << e(n->args[1]) << ")";
        else
          eo_ << "((" << c_type(t) << ")__shfl_xor_sync(0xffffffffu, (int)(" << e(n->args[0])
              << "), " << e(n->args[1]) << "))";
        return;
      }
      case Intrinsic::reinterpret:
        eo_ << "tx_bitcast<" << c_type(n->dtype) << ">(" << args() << ")";
        return;
      case Intrinsic::check_access:
      case Intrinsic::check_barrier:
      case Intrinsic::check_index:
        // A checked kernel's CUDA (printed, never launched: the checked mode
        // runs on the host) shows the index the check passes through.
        eo_ << "(" << e(n->args[0]) << ")";
        return;
      case Intrinsic::check_divisor:
        fail("tx.codegen_cuda", "", n->loc,
             std::string("internal: ") + intrinsic_name(n->op) + " is a host-only check");
      case Intrinsic::isnan:
      case Intrinsic::isinf:
      case Intrinsic::isfinite:
        eo_ << intrinsic_name(n->op) << "(" << args() << ")";
        return;
      case Intrinsic::fabs:
        if (t.is_float())
          eo_ << (is_f32 ? "fabsf(" : "fabs(") << args() << ")";
        else if (t.is_uint())
          eo_ << args();
        else
          eo_ << (t.bits == 64 ? "llabs(" : "abs(") << args() << ")";
        return;
      case Intrinsic::round:
        eo_ << (is_f32 ? "rintf(" : "rint(") << args() << ")";
        return;
      case Intrinsic::cp_async_commit:
        eo_ << "tx_cp_async_commit()";
        return;
      case Intrinsic::tma_store_commit:
        eo_ << "tx_tma_store_commit()";
        return;
      case Intrinsic::tma_store_wait:
        eo_ << "tx_tma_store_wait<" << as_const_int(n->args[0]).value_or(0) << ">()";
        return;
      case Intrinsic::cp_async_wait:
        eo_ << "tx_cp_async_wait<" << as_const_int(n->args[0]).value_or(0) << ">()";
        return;
      case Intrinsic::mbarrier_init:
        eo_ << "tx_mbarrier_init(" << barrier_address(n->args[0]) << ", (unsigned)("
            << e(n->args[1]) << "))";
        return;
      case Intrinsic::mbarrier_arrive:
        eo_ << "tx_mbarrier_arrive(" << barrier_address(n->args[0]) << ")";
        return;
      case Intrinsic::mbarrier_expect_tx:
        eo_ << "tx_mbarrier_expect_tx(" << barrier_address(n->args[0]) << ", (unsigned)("
            << e(n->args[1]) << "))";
        return;
      case Intrinsic::mbarrier_wait:
        eo_ << "tx_mbarrier_wait(" << barrier_address(n->args[0]) << ", (unsigned)("
            << e(n->args[1]) << "))";
        return;
      case Intrinsic::fence_barrier_init:
        eo_ << "asm volatile(\"fence.mbarrier_init.release.cluster;\" ::: \"memory\")";
        return;
      case Intrinsic::fence_proxy_async:
        eo_ << "asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\")";
        return;
      case Intrinsic::wgmma_fence:
        eo_ << "asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\")";
        return;
      case Intrinsic::wgmma_commit:
        eo_ << "asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\")";
        return;
      case Intrinsic::wgmma_wait:
        eo_ << "asm volatile(\"wgmma.wait_group.sync.aligned %0;\" :: \"n\"("
            << as_const_int(n->args[0]).value_or(0) << ") : \"memory\")";
        return;
      case Intrinsic::setmaxnreg:
        eo_ << "asm volatile(\"setmaxnreg."
            << (as_const_int(n->args[1]).value_or(0) ? "inc" : "dec")
            << ".sync.aligned.u32 %0;\" :: \"n\"(" << as_const_int(n->args[0]).value_or(0) << "))";
        return;
      case Intrinsic::register_fence:
        eo_ << "asm volatile(\"\" : \"+f\"(" << e(n->args[0]) << ") :: \"memory\")";
        return;
      case Intrinsic::signal:
        eo_ << (as_const_int(n->args[2]).value_or(0) ? "tx_signal_add(&" : "tx_signal(&")
            << e(n->args[0]) << ", (unsigned)(" << e(n->args[1]) << "))";
        return;
      case Intrinsic::atomic_add:
        eo_ << "atomicAdd(&" << e(n->args[0]) << ", " << e(n->args[1]) << ")";
        return;
      case Intrinsic::wait_until:
        eo_ << "tx_wait_until(&" << e(n->args[0]) << ", (unsigned)(" << e(n->args[1]) << "))";
        return;
      case Intrinsic::named_barrier_sync:
      case Intrinsic::named_barrier_arrive:
        eo_ << "asm volatile(\"bar." << (n->op == Intrinsic::named_barrier_sync ? "sync" : "arrive")
            << " %0, %1;\" :: \"r\"(" << e(n->args[0]) << "), \"n\"("
            << as_const_int(n->args[1]).value_or(0) << ") : \"memory\")";
        return;
      case Intrinsic::keep_before:
        // A store only a NaN makes: ptxas keeps memory operations ahead of
        // wgmma.wait_group, and this one needs v, so v's code stays ahead too.
        eo_ << "asm volatile(\"{ .reg .pred p; setp.nan.f32 p, %1, %1; @p st.shared.f32 [%0], "
               "%1; }\" :: \"r\"("
            << barrier_address(n->args[0]) << "), \"f\"(" << e(n->args[1]) << ") : \"memory\")";
        return;
      case Intrinsic::profile_mark:
        eo_ << "tx_profile_mark(tx_profile, tx_profile_n, " << kProfileCapacity << "u, "
            << (k_.launch.block + 31) / 32 << "u, " << as_const_int(n->args[0]).value_or(0) << "u, "
            << as_const_int(n->args[1]).value_or(0) << "u)";
        return;
      case Intrinsic::tile_coord:
        fail("tx.codegen_cuda", "", n->loc,
             "internal: T.tile_coord outside a where= predicate reached the code generator");
      default:
        if (approx_ && is_f32) {
          const char* fast = nullptr;
          switch (n->op) {
            case Intrinsic::exp:
              fast = "__expf(";
              break;
            case Intrinsic::exp2:
              // ex2.approx without .ftz costs a compare and two multiplies
              // around the MUFU for subnormal results (attention's softmax:
              // 192 of ~780 instructions per key block).
              fast = "tx_ex2_approx_ftz(";
              break;
            case Intrinsic::log:
              fast = "__logf(";
              break;
            case Intrinsic::erfc:
              fast = "tx_erfc_fast(";
              break;
            case Intrinsic::normcdf:
              fast = "tx_normcdf_fast(";
              break;
            default:
              break;
          }
          if (fast) {
            eo_ << fast << args() << ")";
            return;
          }
        }
        if (n->op == Intrinsic::erfc && is_f32) {
          eo_ << "tx_erfc(" << args() << ")";
          return;
        }
        if (n->op == Intrinsic::normcdf && is_f32) {
          eo_ << "tx_normcdf(" << args() << ")";
          return;
        }
        eo_ << intrinsic_name(n->op) << (is_f32 ? "f(" : "(") << args() << ")";
        return;
    }
  }
  void visit_node(const LoadNode* n) override {
    eo_ << name_of(n->buffer->data.get(), n->buffer->name) << "[" << e(n->indices[0]) << "]";
  }

  // ------------------------------------------------------------ stmts
  void visit_node(const StoreNode* n) override {
    line(name_of(n->buffer->data.get(), n->buffer->name) + "[" + e(n->indices[0]) +
         "] = " + e(n->value) + ";");
  }
  void visit_node(const EvaluateNode* n) override { line(e(n->value) + ";"); }
  void visit_node(const ForNode* n) override {
    std::string v = name_of(n->var.get(), n->var.name());
    if (n->for_kind == ForKind::unrolled) line("#pragma unroll");
    std::string lo = e(n->min);
    std::string hi = is_const_int(n->min, 0) ? e(n->extent) : op(n->min) + " + " + op(n->extent);
    line(std::string("for (") + c_type(n->var.dtype()) + " " + v + " = " + lo + "; " + v + " < " +
         hi + "; ++" + v + ") {");
    block(n->body);
    line("}");
  }
  void visit_node(const IfThenElseNode* n) override {
    line("if (" + e(n->cond) + ") {");
    block(n->then_case);
    if (n->else_case) {
      line("} else {");
      block(n->else_case);
    }
    line("}");
  }
  void visit_node(const LetStmtNode* n) override {
    line(std::string("const ") + c_type(n->var.dtype()) + " " +
         name_of(n->var.get(), n->var.name()) + " = " + e(n->value) + ";");
    visit(n->body);
  }
  void visit_node(const PeerViewNode* n) override {
    const std::string t = c_type(n->view->dtype);
    line(t + "* const " + name_of(n->view->data.get(), n->view->name) + " = " + peer_table(n->of) +
         "[" + e(n->rank) + "];");
    visit(n->body);
  }
  void visit_node(const AllocateNode* n) override {
    const Buffer& b = n->buffer;
    std::string name = name_of(b->data.get(), b->name);
    if (b->scope == MemScope::shared) {
      line(std::string(c_type(b->dtype)) + "* " + name + " = reinterpret_cast<" + c_type(b->dtype) +
           "*>(tx_smem + " + std::to_string(shared_offset_.at(b->data.get())) + ");");
    } else {
      line(std::string("__align__(16) ") + c_type(b->dtype) + " " + name + "[" +
           std::to_string(b->storage_elems()) + "];");
    }
    visit(n->body);
  }
  void visit_node(const BarrierNode* n) override {
    switch (n->scope) {
      case ExecScope::cta:
        line("__syncthreads();");
        break;
      case ExecScope::warpgroup:
        line(
            "asm volatile(\"bar.sync %0, 128;\" :: \"r\"(1 + ((int)threadIdx.x >> 7)) : "
            "\"memory\");");
        break;
      case ExecScope::warp:
        line("__syncwarp();");
        break;
      case ExecScope::thread:
        break;
    }
  }
  void visit_node(const CopyBytesNode* n) override {
    const char* vt = vec_type(n->bytes);
    std::string d = name_of(n->dst->data.get(), n->dst->name);
    std::string s = name_of(n->src->data.get(), n->src->name);
    line(std::string("*(") + vt + "*)(&" + d + "[" + e(n->dst_offset) + "]) = *(const " + vt +
         "*)(&" + s + "[" + e(n->src_offset) + "]);");
  }
  // The 32-bit shared-window address of element `index` of shared buffer b,
  // as ldmatrix / stmatrix / cp.async take it: the window address of tx_smem
  // (one pure asm that the compiler hoists and shares) plus a byte offset in
  // 32-bit arithmetic, so that constant parts fold into the instructions'
  // immediate offsets instead of costing 64-bit pointer math per instruction.
  std::string shared_address(const Buffer& b, const Expr& index) {
    return "tx_smem_addr(tx_smem) + (unsigned)(" +
           std::to_string(shared_offset_.at(b->data.get())) + " + (" + e(index) + ") * " +
           std::to_string(b->dtype.bytes()) + ")";
  }
  // The shared address of an mbarrier operand (a load of a shared u64).
  std::string barrier_address(const Expr& bar) {
    const auto* ld = bar.as<LoadNode>();
    if (!ld) fail("tx.codegen_cuda", "", bar->loc, "internal: an mbarrier operand is not a load");
    return shared_address(ld->buffer, ld->indices[0]);
  }
  // "%a, %b, ..." for n operands from `first`.
  static std::string operands(int first, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += (i ? ", %" : "%") + std::to_string(first + i);
    return s;
  }
  std::string word(const Buffer& b, std::int64_t off, bool out) {
    std::string r = "*(" + std::string(out ? "" : "const ") + "unsigned*)&" +
                    name_of(b->data.get(), b->name) + "[" + std::to_string(off) + "]";
    return std::string(out ? "\"=r\"(" : "\"r\"(") + r + ")";
  }
  void visit_node(const MatrixMoveNode* n) override {
    const int num = static_cast<int>(n->words.size());
    std::string instr = std::string(n->store ? "stmatrix" : "ldmatrix") + ".sync.aligned.m8n8.x" +
                        std::to_string(num) + (n->trans ? ".trans" : "") + ".shared.b16";
    std::string addr = "\"r\"(" + shared_address(n->smem, n->row) + ")";
    std::string regs;
    for (int j = 0; j < num; ++j) regs += (j ? ", " : "") + word(n->regs, n->words[j], !n->store);
    if (n->store)
      line("asm volatile(\"" + instr + " [%0], {" + operands(1, num) + "};\" :: " + addr + ", " +
           regs + " : \"memory\");");
    else
      line("asm volatile(\"" + instr + " {" + operands(0, num) + "}, [%" + std::to_string(num) +
           "];\" : " + regs + " : " + addr + " : \"memory\");");
  }
  void visit_node(const MmaNode* n) override {
    auto kind = [](DType t) {
      return t == f16 ? "f16" : t == bf16 ? "bf16" : t == f8e4m3 ? "e4m3" : "e5m2";
    };
    std::string instr = "mma.sync.aligned." + n->shape + ".row.col.f32." + kind(n->a->dtype) + "." +
                        kind(n->b->dtype) + ".f32";
    std::string d = name_of(n->d->data.get(), n->d->name);
    std::string outs, ins;
    for (int i = 0; i < 4; ++i)
      outs +=
          (i ? ", " : "") + std::string("\"+f\"(") + d + "[" + std::to_string(n->d_regs[i]) + "])";
    for (int i = 0; i < 4; ++i) ins += (i ? ", " : "") + word(n->a, n->a_words[i], false);
    for (int i = 0; i < 2; ++i) ins += ", " + word(n->b, n->b_words[i], false);
    line("asm volatile(\"" + instr + " {" + operands(0, 4) + "}, {" + operands(4, 4) + "}, {" +
         operands(8, 2) + "}, {" + operands(0, 4) + "};\" : " + outs + " : " + ins + ");");
  }
  void visit_node(const CpAsyncNode* n) override {
    // .cg (L2 only, the operand is consumed from shared memory) exists for
    // 16-byte copies; smaller ones go through L1 (.ca).
    std::string instr = std::string("cp.async.") + (n->bytes == 16 ? "cg" : "ca") +
                        ".shared.global [%0], [%1], " + std::to_string(n->bytes);
    std::string dst = "\"r\"(" + shared_address(n->dst, n->dst_offset) + ")";
    std::string src =
        "\"l\"(&" + name_of(n->src->data.get(), n->src->name) + "[" + e(n->src_offset) + "])";
    if (n->src_bytes)
      line("asm volatile(\"" + instr + ", %2;\" :: " + dst + ", " + src + ", \"r\"((int)(" +
           e(n->src_bytes) + ")) : \"memory\");");
    else
      line("asm volatile(\"" + instr + ";\" :: " + dst + ", " + src + " : \"memory\");");
  }
  void visit_node(const TmaCopyNode* n) override {
    std::size_t k = 0;
    while (k < k_.tensor_maps.size() && !k_.tensor_maps[k].map.same_as(n->map)) ++k;
    if (k == k_.tensor_maps.size())
      fail("tx.codegen_cuda", n->map.global->name, n->loc, "internal: tensor map not collected");
    std::string coords;
    for (std::size_t d = n->coords.size(); d-- > 0;) coords += ", (int)(" + e(n->coords[d]) + ")";
    if (n->store) {
      line(std::string(n->reduce_add ? "tx_tma_reduce_add" : "tx_tma_store") + "(&tx_tmap" +
           std::to_string(k) + ", " + shared_address(n->smem, n->smem_offset) + coords + ");");
      return;
    }
    line("tx_tma_load(" + shared_address(n->smem, n->smem_offset) + ", &tx_tmap" +
         std::to_string(k) + ", " + barrier_address(n->barrier) + coords + ");");
  }
  void visit_node(const WgmmaNode* n) override {
    const std::size_t regs = n->d_regs.size();
    const bool a_in_regs = static_cast<bool>(n->a_regs);
    const bool fp8 = (a_in_regs ? n->a_regs : n->a.smem)->dtype.bytes() == 1;
    auto fields = [](const WgmmaOperand& o) {
      unsigned long long mode = o.swizzle_bytes == 128 ? 1 : o.swizzle_bytes == 64 ? 2 : 3;
      unsigned long long f = (static_cast<unsigned long long>(o.lbo >> 4) << 16) |
                             (static_cast<unsigned long long>(o.sbo >> 4) << 32) | (mode << 62);
      char b[32];
      std::snprintf(b, sizeof b, "0x%llxull", f);
      return std::string(b);
    };
    auto desc = [&](const WgmmaOperand& o) {
      return "\"l\"(tx_wgmma_desc(" + shared_address(o.smem, o.offset) + ", " + fields(o) + "))";
    };
    const std::string d = name_of(n->d->data.get(), n->d->name);
    std::string outs;
    for (std::size_t i = 0; i < regs; ++i)
      outs +=
          (i ? ", " : "") + std::string("\"+f\"(") + d + "[" + std::to_string(n->d_regs[i]) + "])";
    const int ia = static_cast<int>(regs);
    if (a_in_regs) {
      // A from registers: four 32-bit words, no transpose for A (the
      // register fragment is K-major by definition).
      std::string words;
      for (int i = 0; i < 4; ++i)
        words += (i ? ", " : "") + word(n->a_regs, n->a_words[static_cast<std::size_t>(i)], false);
      std::string instr =
          "wgmma.mma_async.sync.aligned." + n->shape + " {" + operands(0, ia) + "}, {" +
          operands(ia, 4) + "}, %" + std::to_string(ia + 4) + ", p, 1, 1" +
          (fp8 ? std::string("") : std::string(", ") + (n->b.mn_major ? "1" : "0")) + ";";
      line("asm volatile(\"{ .reg .pred p; setp.ne.b32 p, %" + std::to_string(ia + 5) + ", 0; " +
           instr + " }\" : " + outs + " : " + words + ", " + desc(n->b) + ", \"r\"((int)(" +
           e(n->scale_d) + ")));");
      return;
    }
    std::string instr = "wgmma.mma_async.sync.aligned." + n->shape + " {" + operands(0, ia) +
                        "}, %" + std::to_string(ia) + ", %" + std::to_string(ia + 1) + ", p, 1, 1" +
                        (fp8 ? std::string("")
                             : std::string(", ") + (n->a.mn_major ? "1" : "0") + ", " +
                                   (n->b.mn_major ? "1" : "0")) +
                        ";";
    line("asm volatile(\"{ .reg .pred p; setp.ne.b32 p, %" + std::to_string(ia + 2) + ", 0; " +
         instr + " }\" : " + outs + " : " + desc(n->a) + ", " + desc(n->b) + ", \"r\"((int)(" +
         e(n->scale_d) + ")));");
  }
  void visit_node(const ProfileNode* n) override {
    fail("tx.codegen_cuda", n->name, n->loc, "internal: T.profile left after lower_profile");
  }
  void visit_node(const OriginNode* n) override {
    std::string c = "// " + n->text;
    if (n->loc.known()) c += "  [" + n->loc.str() + "]";
    line(c);
    visit(n->body);
  }
  void visit_node(const TileCallNode* n) override {
    fail("tx.codegen_cuda", "", n->loc, "tile call left after lowering");
  }
  void visit_node(const ScopeIdBindNode* n) override {
    fail("tx.codegen_cuda", "", n->loc, "scope id left after lowering");
  }

  void block(const Stmt& s) {
    ++indent_;
    visit(s);
    --indent_;
  }

  using IRVisitor::visit;
  using IRVisitor::visit_node;

  const LoweredKernel& k_;
  bool approx_ = false;
  int min_ctas_per_sm_ = 0;
  // Where expressions are printed: a string with the few insertions they use.
  struct ExprText {
    std::string text;
    ExprText& operator<<(std::string_view v) {
      text.append(v);
      return *this;
    }
    ExprText& operator<<(char c) {
      text.push_back(c);
      return *this;
    }
    template <typename I>
    requires std::is_integral_v<I> ExprText& operator<<(I v) {
      text.append(std::to_string(v));
      return *this;
    }
  };
  std::ostringstream out_;
  ExprText eo_;
  int indent_ = 0;
  std::unordered_map<const void*, std::string> names_;
  std::unordered_set<std::string> used_;
  std::unordered_map<const VarNode*, std::int64_t> shared_offset_;
};

}  // namespace

std::string codegen_cuda(const LoweredKernel& k, const CudaOptions& opt) {
  CudaEmitter em(k, opt.approx_math, opt.min_ctas_per_sm);
  std::string name = opt.kernel_name.empty() ? sanitize_identifier(k.lowered->name)
                                             : sanitize_identifier(opt.kernel_name);
  return em.emit(name);
}

}  // namespace tx::lowering
