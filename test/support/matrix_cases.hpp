// The numeric test matrix of the tile primitives, written once and run on a
// device chosen by the including suite (gpu_matrix.cpp: the GPU;
// host_matrix.cpp: the host JIT). Dimensions follow the reference's own
// tests: copy round trips at warp / warpgroup / cta scope for f32, f16 and
// u8 with several per-thread widths; elementwise unary and binary on shared
// and register tiles with scale/bias and broadcast; reductions local
// (thread-wise and warp shuffle) and shared, over several shapes and axes,
// sum / max / min, with and without accum.
//
// Every case: fresh random inputs (never zero), outputs poisoned first,
// comparison against a double-precision reference. Every case also hands its
// outputs to record(): cross_device runs this matrix with a fixed seed
// (TX_TEST_SEED) on the GPU and on the host and compares the two.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "test_support.hpp"
#include "tx/tx.hpp"

#ifndef TX_MATRIX_DEVICE
#error "define TX_MATRIX_DEVICE before including matrix_cases.hpp"
#endif

namespace matrix {

using namespace tx;

inline Device device() { return TX_MATRIX_DEVICE; }

inline Tensor input(const std::vector<double>& v, std::vector<std::int64_t> shape, DType t) {
  return Tensor::from_doubles(v, std::move(shape), t, device());
}
inline Tensor output(std::vector<std::int64_t> shape, DType t) {
  Tensor x = Tensor::empty(std::move(shape), t, device());
  x.fill_bits(test::poison_bits(t));
  return x;
}
inline Kernel build(const PrimFunc& f) { return compile(f, {.device = device()}); }

// Where case outputs go besides the checks (cross_device installs a sink).
// exact: the output must match across devices bit for bit (copies, fills).
using Sink = std::function<void(const std::string& name, const Tensor& out, bool exact)>;
inline Sink& sink() {
  static Sink s;
  return s;
}
inline void record(const std::string& name, const Tensor& out, bool exact) {
  if (sink()) sink()(name, out, exact);
}

// The groups of threads a case runs at: its thread count and the register
// layout that gives each thread one row of a (threads, cols) tile.
inline int scope_threads(ExecScope s) {
  switch (s) {
    case ExecScope::thread:
      return 1;
    case ExecScope::warp:
      return 32;
    case ExecScope::warpgroup:
      return 128;
    case ExecScope::cta:
      return 256;
  }
  return 0;
}
inline TileLayout row_per_thread(ExecScope s, std::int64_t rows, std::int64_t cols) {
  switch (s) {
    case ExecScope::warp:
      return TileLayout(S({rows, cols}, {1 * laneid, 1}));
    case ExecScope::warpgroup:
      return TileLayout(S({rows, cols}, {1 * tid_in_wg, 1}));
    default:
      return TileLayout(S({rows, cols}, {1 * axes::tx, 1}));
  }
}
// Tx::<scope>::copy, chosen at run time.
inline void copy_at(ExecScope s, TileOperand d, TileOperand x, Loc loc = Loc::current()) {
  switch (s) {
    case ExecScope::thread:
      Tx::thread::copy(d, x, {}, loc);
      break;
    case ExecScope::warp:
      Tx::warp::copy(d, x, {}, loc);
      break;
    case ExecScope::warpgroup:
      Tx::warpgroup::copy(d, x, {}, loc);
      break;
    case ExecScope::cta:
      Tx::cta::copy(d, x, {}, loc);
      break;
  }
}
inline std::string mem_name(MemScope m) { return m == MemScope::shared ? "shared" : "local"; }

// got == want within rtol (relative to max(1, |want|) for sums), NaN never passes.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want,
                        double rtol, double atol = 0) {
  REQUIRE(got.size() == want.size());
  double err = test::max_rel_error(got, want, atol, rtol);
  // The worst element, so a failure says which value and by how much.
  std::size_t worst = 0;
  double worst_err = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = test::max_rel_error({got[i]}, {want[i]}, atol, rtol);
    if (e > worst_err) worst_err = e, worst = i;
  }
  CHECK_MESSAGE(err <= 1.0, "max error " << err << " of tolerance at [" << worst << "]: got "
                                         << got[worst] << ", want " << want[worst] << " (seed "
                                         << test::rng_seed() << ")");
}

// ------------------------------------------------------------------ copies

enum class CopyScope { warp, warpgroup, cta, cta_warps };

inline const char* name(CopyScope s) {
  switch (s) {
    case CopyScope::warp:
      return "warp";
    case CopyScope::warpgroup:
      return "warpgroup";
    case CopyScope::cta:
      return "cta(tx)";
    case CopyScope::cta_warps:
      return "cta(warpid, laneid)";
  }
  return "?";
}

// A 256-thread CTA moves a (256, regs) tile global -> [shared ->] registers
// -> [shared ->] global. At warp / warpgroup scope each group takes its own
// rows (a region starting at the group id).
inline PrimFunc copy_roundtrip(CopyScope cs, DType t, std::int64_t regs, bool via_shared) {
  return T::prim_func("copy_rt", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {256, regs}, t);
    auto B = T::match_buffer(B_ptr, {256, regs}, t);
    T::thread_id({256});
    auto warp = T::warp_id({8});
    auto wg = T::warpgroup_id({2});
    std::int64_t rows = cs == CopyScope::warp ? 32 : cs == CopyScope::warpgroup ? 128 : 256;
    TileLayout rl = cs == CopyScope::warp        ? TileLayout(S({32, regs}, {1 * laneid, 1}))
                    : cs == CopyScope::warpgroup ? TileLayout(S({128, regs}, {1 * tid_in_wg, 1}))
                    : cs == CopyScope::cta
                        ? TileLayout(S({256, regs}, {1 * axes::tx, 1}))
                        : TileLayout(S({8, 32, regs}, {1 * warpid, 1 * laneid, 1}));
    auto R = T::alloc_buffer({rows, regs}, t, scope::local, rl);
    auto As = T::alloc_buffer({256, regs}, t, scope::shared);
    Expr row0 = cs == CopyScope::warp        ? Expr(warp * 32)
                : cs == CopyScope::warpgroup ? Expr(wg * 128)
                                             : Expr(0);
    auto rows_of = [&](const TileBuffer& X) { return X[region(span(row0, rows), {0, regs})]; };
    auto copy = [&](TileOperand d, TileOperand s) {
      if (cs == CopyScope::warp)
        Tx::warp::copy(d, s);
      else if (cs == CopyScope::warpgroup)
        Tx::warpgroup::copy(d, s);
      else
        Tx::cta::copy(d, s);
    };
    if (via_shared) {
      Tx::cta::copy(As, A);
      T::cuda::cta_sync();
      copy(R, rows_of(As));
      T::cuda::cta_sync();
      Tx::cta::zero(As);
      copy(rows_of(As), R);
      T::cuda::cta_sync();
      Tx::cta::copy(B, As);
    } else {
      copy(R, rows_of(A));
      copy(rows_of(B), R);
    }
  });
}

inline void copy_case(CopyScope cs, DType t, std::int64_t regs, bool via_shared) {
  INFO("name(cs) := " << std::string(name(cs)));
  CAPTURE(t.name());
  CAPTURE(regs);
  CAPTURE(via_shared);
  Kernel k = build(copy_roundtrip(cs, t, regs, via_shared));
  bool reg_variant = false;
  // copy/reg, or ldmatrix / stmatrix where the register words form 8x8 matrices.
  for (auto& d : k.info().dispatched)
    reg_variant |= d.variant == "copy/reg" || d.variant == "copy/ldstmatrix";
  CHECK(reg_variant);
  std::vector<double> a = test::random_values(static_cast<std::size_t>(256 * regs), t, -100, 100);
  Tensor A = input(a, {256, regs}, t), B = output({256, regs}, t);
  k(A, B);
  // Copies are bit-exact.
  CHECK(B.to_bytes() == A.to_bytes());
}

// ------------------------------------------------------------ elementwise

// Tx::<scope>::NAME for a scope chosen at run time.
#define TX_AT_SCOPE(S, CALL)   \
  switch (S) {                 \
    case ExecScope::thread:    \
      Tx::thread::CALL;        \
      break;                   \
    case ExecScope::warp:      \
      Tx::warp::CALL;          \
      break;                   \
    case ExecScope::warpgroup: \
      Tx::warpgroup::CALL;     \
      break;                   \
    case ExecScope::cta:       \
      Tx::cta::CALL;           \
      break;                   \
  }

struct UnaryOp {
  const char* name;
  std::function<void(ExecScope, TileOperand, TileOperand, TileAttrs)> call;
  std::function<double(double)> ref;
  double lo, hi;
};

inline std::vector<UnaryOp> unary_ops() {
#define TX_UNARY(N, REF, LO, HI)                                    \
  UnaryOp {                                                         \
#N, [](ExecScope s, TileOperand d, TileOperand x,               \
           TileAttrs a) { TX_AT_SCOPE(s, N(d, x, a)) }, REF, LO, HI \
  }
  return {
      TX_UNARY(
          sqrt, [](double x) { return std::sqrt(x); }, 0.01, 50.0),
      TX_UNARY(
          exp, [](double x) { return std::exp(x); }, -5.0, 5.0),
      TX_UNARY(
          exp2, [](double x) { return std::exp2(x); }, -5.0, 5.0),
      TX_UNARY(
          reciprocal, [](double x) { return 1.0 / x; }, 0.1, 10.0),
      TX_UNARY(
          silu, [](double x) { return x / (1.0 + std::exp(-x)); }, -6.0, 6.0),
  };
#undef TX_UNARY
}

// A unary op on a (threads, 2048 / threads) tile -- (32, 64) for a warp, (128,
// 16) for a warpgroup, (256, 8) for a CTA -- in shared memory or in registers
// (thread i owns row i), with scale and bias: op(x * scale + bias).
inline void unary_case(const UnaryOp& op, ExecScope scope, MemScope mem, DType t, bool scale_bias) {
  INFO("op.name := " << std::string(op.name));
  INFO("exec_scope_name(scope) := " << std::string(exec_scope_name(scope)));
  CAPTURE(mem_name(mem));
  CAPTURE(t.name());
  CAPTURE(scale_bias);
  double scale = scale_bias ? 0.5 : 1.0, bias = scale_bias ? 0.25 : 0.0;
  const std::int64_t rows = scope_threads(scope), cols = 2048 / rows;
  PrimFunc f = T::prim_func("unary", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {rows, cols}, t);
    auto B = T::match_buffer(B_ptr, {rows, cols}, t);
    T::thread_id({static_cast<int>(rows)});
    TileAttrs at;
    if (scale_bias) at = {.scale = scale, .bias = bias};
    if (mem == MemScope::shared) {
      auto As = T::alloc_buffer({rows, cols}, t, scope::shared);
      auto Bs = T::alloc_buffer({rows, cols}, t, scope::shared);
      Tx::cta::copy(As, A);
      T::cuda::cta_sync();
      op.call(scope, Bs, As, at);  // ends with the scope's barrier
      Tx::cta::copy(B, Bs);
    } else {
      auto R = T::alloc_buffer({rows, cols}, t, scope::local, row_per_thread(scope, rows, cols));
      copy_at(scope, R, A);
      op.call(scope, R, R, at);
      copy_at(scope, B, R);
    }
  });
  Kernel k = build(f);
  // Inputs chosen so x * scale + bias stays in the op's domain.
  std::vector<double> a = test::random_values(static_cast<std::size_t>(rows * cols), t,
                                              (op.lo - bias) / scale, (op.hi - bias) / scale);
  Tensor A = input(a, {rows, cols}, t), B = output({rows, cols}, t);
  k(A, B);
  std::vector<double> want(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) want[i] = quantize(op.ref(a[i] * scale + bias), t);
  // silu(2^-24) is 2^-25 (1 + 2^-25): f16 rounds it up to 2^-24 but f32
  // arithmetic cannot hold the excess, so one subnormal unit is allowed.
  check_close(B.to_doubles(), want, std::max(test::default_rtol(t), 4e-6), test::subnormal_ulp(t));
  record(std::string("unary.") + op.name + "." + exec_scope_name(scope) + "." + mem_name(mem) +
             "." + t.short_name() + (scale_bias ? ".scale_bias" : ""),
         B, false);
}

struct BinaryOp {
  const char* name;
  std::function<void(ExecScope, TileOperand, TileOrScalar, TileOrScalar)> call;
  std::function<double(double, double)> ref;
  bool exact;  // max / min: the same bits on every device
};

inline std::vector<BinaryOp> binary_ops() {
#define TX_BINARY(N, REF, EXACT)                                      \
  BinaryOp {                                                          \
#N, [](ExecScope s, TileOperand d, TileOrScalar a,                \
           TileOrScalar b) { TX_AT_SCOPE(s, N(d, a, b)) }, REF, EXACT \
  }
  return {
      TX_BINARY(
          add, [](double a, double b) { return a + b; }, false),
      TX_BINARY(
          sub, [](double a, double b) { return a - b; }, false),
      TX_BINARY(
          mul, [](double a, double b) { return a * b; }, false),
      TX_BINARY(
          fdiv, [](double a, double b) { return a / b; }, false),
      TX_BINARY(
          maximum, [](double a, double b) { return std::max(a, b); }, true),
      TX_BINARY(
          minimum, [](double a, double b) { return std::min(a, b); }, true),
  };
#undef TX_BINARY
}

enum class Bcast { none, row, column, scalar };
inline const char* name(Bcast b) {
  switch (b) {
    case Bcast::none:
      return "same_shape";
    case Bcast::row:
      return "row";
    case Bcast::column:
      return "column";
    case Bcast::scalar:
      return "scalar";
  }
  return "?";
}

// C = op(A, B) on (threads, 2048 / threads) tiles in shared memory or
// registers, B broadcast as asked: a (1, cols) row, a (rows, 1) column, a
// scalar, or none.
inline void binary_case(const BinaryOp& op, ExecScope scope, MemScope mem, DType t, Bcast bc) {
  INFO("op.name := " << std::string(op.name));
  INFO("exec_scope_name(scope) := " << std::string(exec_scope_name(scope)));
  CAPTURE(mem_name(mem));
  CAPTURE(t.name());
  INFO("name(bc) := " << std::string(name(bc)));
  const std::int64_t rows = scope_threads(scope), cols = 2048 / rows;
  std::vector<std::int64_t> bshape = bc == Bcast::row      ? std::vector<std::int64_t>{1, cols}
                                     : bc == Bcast::column ? std::vector<std::int64_t>{rows, 1}
                                                           : std::vector<std::int64_t>{rows, cols};
  std::int64_t bn = bshape[0] * bshape[1];
  const double scalar = 1.75;
  bool reg = mem == MemScope::local;
  PrimFunc f = T::prim_func("binary", [&](Handle A_ptr, Handle B_ptr, Handle C_ptr) {
    auto A = T::match_buffer(A_ptr, {rows, cols}, t);
    auto B = T::match_buffer(B_ptr, bshape, t);
    auto C = T::match_buffer(C_ptr, {rows, cols}, t);
    T::thread_id({static_cast<int>(rows)});
    if (!reg) {
      auto As = T::alloc_buffer({rows, cols}, t, scope::shared);
      auto Bs = T::alloc_buffer(bshape, t, scope::shared);
      auto Cs = T::alloc_buffer({rows, cols}, t, scope::shared);
      Tx::cta::copy(As, A);
      Tx::cta::copy(Bs, B);
      T::cuda::cta_sync();
      if (bc == Bcast::scalar)
        op.call(scope, Cs, As, scalar);
      else
        op.call(scope, Cs, As, Bs);
      Tx::cta::copy(C, Cs);
    } else {
      // A register operand broadcast along rows lives whole in every thread;
      // a column broadcast follows the destination's rows (thread i holds B[i, 0]).
      TileLayout rl = row_per_thread(scope, rows, cols);
      TileLayout bl =
          bc == Bcast::row ? TileLayout(S(bshape)) : row_per_thread(scope, bshape[0], bshape[1]);
      auto Ra = T::alloc_buffer({rows, cols}, t, scope::local, rl);
      auto Rb = T::alloc_buffer(bshape, t, scope::local, bl);
      auto Rc = T::alloc_buffer({rows, cols}, t, scope::local, rl);
      copy_at(scope, Ra, A);
      if (bc == Bcast::row)
        Tx::thread::copy(Rb, B);  // every thread loads the whole row
      else
        copy_at(scope, Rb, B);
      if (bc == Bcast::scalar)
        op.call(scope, Rc, Ra, scalar);
      else
        op.call(scope, Rc, Ra, Rb);
      copy_at(scope, C, Rc);
    }
  });
  Kernel k = build(f);
  auto a = test::random_values(static_cast<std::size_t>(rows * cols), t, -8, 8);
  auto b = test::random_values(static_cast<std::size_t>(bn), t, 0.5, 4);
  Tensor A = input(a, {rows, cols}, t), B = input(b, bshape, t), C = output({rows, cols}, t);
  k(A, B, C);
  std::vector<double> want(a.size());
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) {
      double bv = bc == Bcast::row      ? b[static_cast<std::size_t>(j)]
                  : bc == Bcast::column ? b[static_cast<std::size_t>(i)]
                  : bc == Bcast::scalar ? scalar
                                        : b[static_cast<std::size_t>(i * cols + j)];
      want[static_cast<std::size_t>(i * cols + j)] =
          quantize(op.ref(a[static_cast<std::size_t>(i * cols + j)], bv), t);
    }
  check_close(C.to_doubles(), want, std::max(test::default_rtol(t), 2e-7), test::subnormal_ulp(t));
  record(std::string("binary.") + op.name + "." + exec_scope_name(scope) + "." + mem_name(mem) +
             "." + t.short_name() + "." + name(bc),
         C, op.exact);
}

// fma, cast, fill, zero and a scalar add on a (threads, 512 / threads) tile in
// registers or shared memory. via_zero: the constant tile is zero() + 3.25
// rather than fill(3.25).
inline void misc_elementwise_case(ExecScope scope, MemScope mem, bool via_zero) {
  INFO("exec_scope_name(scope) := " << std::string(exec_scope_name(scope)));
  CAPTURE(mem_name(mem));
  CAPTURE(via_zero);
  bool reg = mem == MemScope::local;
  const std::int64_t rows = scope_threads(scope), cols = 512 / rows;
  const std::vector<std::int64_t> shape{rows, cols};
  PrimFunc f = T::prim_func(
      "misc", [&](Handle A_ptr, Handle B_ptr, Handle F_ptr, Handle H_ptr, Handle Z_ptr) {
        auto A = T::match_buffer(A_ptr, shape, f32);
        auto B = T::match_buffer(B_ptr, shape, f32);
        auto F = T::match_buffer(F_ptr, shape, f32);
        auto H = T::match_buffer(H_ptr, shape, f16);
        auto Z = T::match_buffer(Z_ptr, shape, f32);
        T::thread_id({static_cast<int>(rows)});
        MemScope ms = reg ? scope::local : scope::shared;
        std::optional<TileLayout> l;
        if (reg) l = row_per_thread(scope, rows, cols);
        auto a = T::alloc_buffer(shape, f32, ms, l);
        auto b = T::alloc_buffer(shape, f32, ms, l);
        auto fm = T::alloc_buffer(shape, f32, ms, l);
        auto h = T::alloc_buffer(shape, f16, ms, l);
        auto z = T::alloc_buffer(shape, f32, ms, l);
        copy_at(scope, a, A);
        copy_at(scope, b, B);
        if (!reg) T::cuda::cta_sync();
        TX_AT_SCOPE(scope, fma(fm, a, b, 0.5))
        TX_AT_SCOPE(scope, cast(h, fm))
        if (via_zero) {
          TX_AT_SCOPE(scope, zero(z))
          TX_AT_SCOPE(scope, add(z, z, 3.25))
        } else {
          TX_AT_SCOPE(scope, fill(z, 3.25))
        }
        copy_at(scope, F, fm);
        copy_at(scope, H, h);
        copy_at(scope, Z, z);
      });
  Kernel k = build(f);
  auto a = test::random_values(512, f32), b = test::random_values(512, f32);
  Tensor A = input(a, shape, f32), B = input(b, shape, f32);
  Tensor F = output(shape, f32), H = output(shape, f16), Z = output(shape, f32);
  k(A, B, F, H, Z);
  std::vector<double> wf(512), wh(512), wz(512, 3.25);
  for (int i = 0; i < 512; ++i) wf[i] = quantize(std::fma(a[i], b[i], 0.5), f32);
  check_close(F.to_doubles(), wf, 2.5e-7, 1e-30);
  std::vector<double> got_f = F.to_doubles();
  for (int i = 0; i < 512; ++i) wh[i] = quantize(got_f[i], f16);
  CHECK(H.to_doubles() == wh);  // the cast rounds the f32 result exactly
  CHECK(Z.to_doubles() == wz);
  std::string tag = std::string(".") + exec_scope_name(scope) + "." + mem_name(mem) +
                    (via_zero ? ".zero" : ".fill");
  record("misc.fma" + tag, F, false);
  record("misc.cast" + tag, H, false);
  record("misc.const" + tag, Z, true);
}

// Thread ids inside a warpgroup, unrolled loops and the warp / warpgroup
// barriers: every thread writes its ids into shared memory, and after the
// warpgroup barrier reads the row of the thread 32 places on in its
// warpgroup (another warp).
inline void ids_and_barriers_case() {
  PrimFunc f = T::prim_func("ids", [&](Handle X_ptr, Handle O_ptr) {
    auto X = T::match_buffer(X_ptr, {256, 4}, i32);
    auto O = T::match_buffer(O_ptr, {256, 4}, i32);
    T::thread_id({256});
    auto wg = T::warpgroup_id({2});
    auto wiw = T::warp_id_in_wg({4});
    auto tiw = T::thread_id_in_wg({128});
    auto lane = T::lane_id({32});
    auto Ss = T::alloc_buffer({256, 4}, i32, scope::shared);
    for (Var k : T::unroll(4)) Ss(wg * 128 + tiw, k) = wg * 1000 + wiw * 100 + lane + k * 10000;
    T::cuda::warp_sync();
    T::cuda::warpgroup_sync();
    for (Var k : T::unroll(4))
      O(wg * 128 + tiw, k) = Ss(wg * 128 + (tiw + 32) % 128, k) + X(wg * 128 + tiw, k);
  });
  Kernel k = build(f);
  CHECK(k.cuda_source().find("#pragma unroll") != std::string::npos);
  auto x = test::random_values(1024, i32, -1000, 1000);
  Tensor X = input(x, {256, 4}, i32), O = output({256, 4}, i32);
  k(X, O);
  std::vector<double> want(1024);
  for (int r = 0; r < 256; ++r) {
    int wgi = r / 128, t = (r % 128 + 32) % 128;
    for (int c = 0; c < 4; ++c)
      want[static_cast<std::size_t>(r * 4 + c)] =
          wgi * 1000 + (t / 32) * 100 + t % 32 + c * 10000 + x[static_cast<std::size_t>(r * 4 + c)];
  }
  CHECK(O.to_doubles() == want);
  record("ids.warpgroup", O, true);
}

// -------------------------------------------------------------- reductions

struct Reduce {
  const char* name;
  std::function<void(ExecScope, TileOperand, TileOperand, TileAttrs)> call;
  std::function<double(double, double)> combine;
  double identity;
};

inline std::vector<Reduce> reductions() {
#define TX_RED(N, C, I)                                                                      \
  Reduce {                                                                                   \
#N,                                                                                        \
        [](ExecScope s, TileOperand d, TileOperand x, TileAttrs a) {                           \
          switch (s) {                                                                         \
            case ExecScope::thread: Tx::thread::N(d, x, a); break;                             \
            case ExecScope::warp: Tx::warp::N(d, x, a); break;                                 \
            case ExecScope::warpgroup: Tx::warpgroup::N(d, x, a); break;                       \
            case ExecScope::cta: Tx::cta::N(d, x, a); break;                                   \
          }                                                                                    \
        },                                                                                     \
        C, I \
  }
  return {
      TX_RED(
          sum, [](double a, double b) { return a + b; }, 0.0),
      TX_RED(
          max, [](double a, double b) { return std::max(a, b); }, -INFINITY),
      TX_RED(
          min, [](double a, double b) { return std::min(a, b); }, INFINITY),
  };
#undef TX_RED
}

// Reference: reduce `src` (row-major, shape) over `axes`, optionally folding
// into `init` (accum).
inline std::vector<double> reduce_ref(const Reduce& r, const std::vector<double>& src,
                                      const std::vector<std::int64_t>& shape,
                                      const std::vector<int>& axes,
                                      const std::vector<double>* init) {
  std::vector<std::int64_t> out_shape;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (std::find(axes.begin(), axes.end(), static_cast<int>(d)) == axes.end())
      out_shape.push_back(shape[d]);
  std::int64_t n_out = 1;
  for (auto e : out_shape) n_out *= e;
  std::vector<double> out(static_cast<std::size_t>(n_out), r.identity);
  std::vector<std::int64_t> c(shape.size(), 0);
  for (std::size_t i = 0; i < src.size(); ++i) {
    std::int64_t o = 0;
    for (std::size_t d = 0; d < shape.size(); ++d)
      if (std::find(axes.begin(), axes.end(), static_cast<int>(d)) == axes.end())
        o = o * shape[d] + c[d];
    out[static_cast<std::size_t>(o)] = r.combine(out[static_cast<std::size_t>(o)], src[i]);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++c[d] < shape[d]) break;
      c[d] = 0;
    }
  }
  if (init)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = r.combine((*init)[i], out[i]);
  return out;
}

enum class RedKind {
  thread_local_,
  warp_all_lanes,
  warp_lane_subset,
  warp_in_registers,
  shared_cta,
  shared_warpgroup,
  shared_warp
};
// The warp-local kinds reduce one fixed axis; the others take two.
inline bool has_axis_variants(RedKind k) {
  return k == RedKind::thread_local_ || k == RedKind::shared_cta ||
         k == RedKind::shared_warpgroup || k == RedKind::shared_warp;
}
inline const char* name(RedKind k) {
  switch (k) {
    case RedKind::thread_local_:
      return "local, thread scope";
    case RedKind::warp_all_lanes:
      return "local, warp shuffle over 32 lanes";
    case RedKind::warp_lane_subset:
      return "local, warp shuffle over 8 lanes";
    case RedKind::warp_in_registers:
      return "local, warp, registers only";
    case RedKind::shared_cta:
      return "shared, cta";
    case RedKind::shared_warpgroup:
      return "shared, warpgroup";
    case RedKind::shared_warp:
      return "shared, warp";
  }
  return "?";
}

inline void reduction_case(const Reduce& r, RedKind kind, bool accum, int variant_axis) {
  CAPTURE(r.name);
  INFO("name(kind) := " << std::string(name(kind)));
  CAPTURE(accum);
  CAPTURE(variant_axis);
  std::vector<std::int64_t> shape, dshape;
  std::vector<int> axes;
  int threads = 32;
  PrimFunc f;
  switch (kind) {
    case RedKind::thread_local_: {
      // Every thread reduces its own (4, 8) tile: rows of A are per thread.
      shape = {32, 4, 8};
      axes = {variant_axis == 0 ? 2 : 1};
      dshape = {32, variant_axis == 0 ? 4 : 8};
      std::int64_t keep = dshape[1];
      int ax = axes[0];
      f = T::prim_func("red_thread", [&](Handle A_ptr, Handle D_ptr) {
        auto A = T::match_buffer(A_ptr, {32, 4, 8}, f32);
        auto D = T::match_buffer(D_ptr, {32, keep}, f32);
        auto tid = T::thread_id({32});
        auto R = T::alloc_buffer({4, 8}, f32, scope::local);
        auto Dl = T::alloc_buffer({keep}, f32, scope::local);
        Tx::thread::copy(R, A[region(span(tid, 1), {0, 4}, {0, 8})]);
        Tx::thread::copy(Dl, D[region(span(tid, 1), {0, keep})]);
        r.call(ExecScope::thread, Dl, R, {.accum = accum, .axes = {ax - 1}});
        Tx::thread::copy(D[region(span(tid, 1), {0, keep})], Dl);
      });
      break;
    }
    case RedKind::warp_all_lanes: {
      shape = {32, 4};
      axes = {0};
      dshape = {4};
      f = T::prim_func("red_warp32", [&](Handle A_ptr, Handle D_ptr) {
        auto A = T::match_buffer(A_ptr, {32, 4}, f32);
        auto D = T::match_buffer(D_ptr, {4}, f32);
        T::thread_id({32});
        auto R =
            T::alloc_buffer({32, 4}, f32, scope::local, TileLayout(S({32, 4}, {1 * laneid, 1})));
        auto Dl =
            T::alloc_buffer({4}, f32, scope::local, TileLayout(S({4}), tx::R({32}, {1 * laneid})));
        Tx::warp::copy(R, A);
        Tx::warp::copy(Dl, D);
        r.call(ExecScope::warp, Dl, R, {.accum = accum, .axes = {0}});
        Tx::warp::copy(D, Dl);
      });
      break;
    }
    case RedKind::warp_lane_subset: {
      // (4, 8, 4): lane 8i + j holds [i, j, :]; reduce j (lane bits 0..2).
      shape = {4, 8, 4};
      axes = {1};
      dshape = {4, 4};
      f = T::prim_func("red_warp8", [&](Handle A_ptr, Handle D_ptr) {
        auto A = T::match_buffer(A_ptr, {4, 8, 4}, f32);
        auto D = T::match_buffer(D_ptr, {4, 4}, f32);
        T::thread_id({32});
        auto R = T::alloc_buffer({4, 8, 4}, f32, scope::local,
                                 TileLayout(S({4, 8, 4}, {8 * laneid, 1 * laneid, 1})));
        auto Dl = T::alloc_buffer({4, 4}, f32, scope::local,
                                  TileLayout(S({4, 4}, {8 * laneid, 1}), tx::R({8}, {1 * laneid})));
        Tx::warp::copy(R, A);
        Tx::warp::copy(Dl, D);
        r.call(ExecScope::warp, Dl, R, {.accum = accum, .axes = {1}});
        Tx::warp::copy(D, Dl);
      });
      break;
    }
    case RedKind::warp_in_registers: {
      shape = {32, 16};
      axes = {1};
      dshape = {32};
      f = T::prim_func("red_warp_regs", [&](Handle A_ptr, Handle D_ptr) {
        auto A = T::match_buffer(A_ptr, {32, 16}, f32);
        auto D = T::match_buffer(D_ptr, {32}, f32);
        T::thread_id({32});
        auto R =
            T::alloc_buffer({32, 16}, f32, scope::local, TileLayout(S({32, 16}, {1 * laneid, 1})));
        auto Dl = T::alloc_buffer({32}, f32, scope::local, TileLayout(S({32}, {1 * laneid})));
        Tx::warp::copy(R, A);
        Tx::warp::copy(Dl, D);
        r.call(ExecScope::warp, Dl, R, {.accum = accum, .axes = {1}});
        Tx::warp::copy(D, Dl);
      });
      break;
    }
    case RedKind::shared_cta:
    case RedKind::shared_warpgroup:
    case RedKind::shared_warp: {
      ExecScope rs = kind == RedKind::shared_cta         ? ExecScope::cta
                     : kind == RedKind::shared_warpgroup ? ExecScope::warpgroup
                                                         : ExecScope::warp;
      threads = scope_threads(rs);
      shape = variant_axis == 0 ? std::vector<std::int64_t>{24, 100}
                                : std::vector<std::int64_t>{300, 7};
      axes = {variant_axis == 0 ? 1 : 0};
      dshape = {variant_axis == 0 ? 24 : 7};
      int ax = axes[0];
      f = T::prim_func("red_shared", [&](Handle A_ptr, Handle D_ptr) {
        auto A = T::match_buffer(A_ptr, shape, f32);
        auto D = T::match_buffer(D_ptr, dshape, f32);
        T::thread_id({threads});
        auto As = T::alloc_buffer(shape, f32, scope::shared);
        auto Ds = T::alloc_buffer(dshape, f32, scope::shared);
        Tx::cta::copy(As, A);
        Tx::cta::copy(Ds, D);
        T::cuda::cta_sync();
        r.call(rs, Ds, As, {.accum = accum, .axes = {ax}});
        T::cuda::cta_sync();
        Tx::cta::copy(D, Ds);
      });
      break;
    }
  }
  Kernel k = build(f);
  std::int64_t n = 1, m = 1;
  for (auto e : shape) n *= e;
  for (auto e : dshape) m *= e;
  auto a = test::random_values(static_cast<std::size_t>(n), f32, -1, 1);
  auto d0 = test::random_values(static_cast<std::size_t>(m), f32, -1, 1);
  Tensor A = input(a, shape, f32), D = input(d0, dshape, f32);
  k(A, D);
  auto want = reduce_ref(r, a, shape, axes, accum ? &d0 : nullptr);
  // Sums of up to 300 terms of magnitude 1 in f32.
  check_close(D.to_doubles(), want, 1e-5, 3e-5);
  std::string tag = std::string(kind == RedKind::thread_local_       ? "thread_local"
                                : kind == RedKind::warp_all_lanes    ? "warp_shuffle32"
                                : kind == RedKind::warp_lane_subset  ? "warp_shuffle8"
                                : kind == RedKind::warp_in_registers ? "warp_registers"
                                : kind == RedKind::shared_cta        ? "shared_cta"
                                : kind == RedKind::shared_warpgroup  ? "shared_warpgroup"
                                                                     : "shared_warp");
  // max / min pick an input: the same bits everywhere. Sums may associate differently.
  record(std::string("reduce.") + r.name + "." + tag + (accum ? ".accum" : "") + ".axis" +
             std::to_string(variant_axis),
         D, std::string(r.name) != "sum");
}

// A reduction across the warps of a CTA (256 threads) or of each of two
// warpgroups (reduction/cross_warp): every thread holds 4 elements of each
// of two rows -- a (2, threads, 4) register tile -- and the two row results
// land in every thread. In a loop (3 trips) the op runs again on its shared
// slots: with accum a sum adds up three times.
inline void cross_warp_case(const Reduce& r, ExecScope scope, bool accum, bool in_loop) {
  CAPTURE(r.name);
  INFO("exec_scope_name(scope) := " << std::string(exec_scope_name(scope)));
  CAPTURE(accum);
  CAPTURE(in_loop);
  const bool wg = scope == ExecScope::warpgroup;
  const std::int64_t groups = wg ? 2 : 1, threads = wg ? 128 : 256;
  const auto spread = wg ? TileLayout(S({2, threads, 4}, {4, 1 * tid_in_wg, 1}))
                         : TileLayout(S({2, threads, 4}, {4, 1 * axes::tx, 1}));
  const auto everywhere = wg ? TileLayout(S({2}), tx::R({threads}, {1 * tid_in_wg}))
                             : TileLayout(S({2}), tx::R({threads}, {1 * axes::tx}));
  const int trips = in_loop ? 3 : 1;
  PrimFunc f = T::prim_func("red_cross_warp", [&](Handle A_ptr, Handle D_ptr) {
    auto A = T::match_buffer(A_ptr, {groups, 2, threads, 4}, f32);
    auto D = T::match_buffer(D_ptr, {groups, 2}, f32);
    T::cta_id({1});
    T::thread_id({256});
    auto g = wg ? T::let(T::warpgroup_id({2}), "g") : T::let(0, "g");
    auto X = T::alloc_buffer({2, threads, 4}, f32, scope::local, spread);
    auto Dl = T::alloc_buffer({2}, f32, scope::local, everywhere);
    copy_at(scope, X, A[region(span(g, 1), {0, 2}, {0, threads}, {0, 4})]);
    copy_at(scope, Dl, D[region(span(g, 1), {0, 2})]);
    if (in_loop) {
      for (Var i : T::serial(trips)) r.call(scope, Dl, X, {.accum = accum, .axes = {1, 2}});
    } else {
      r.call(scope, Dl, X, {.accum = accum, .axes = {1, 2}});
    }
    copy_at(scope, D[region(span(g, 1), {0, 2})], Dl);
  });
  Kernel k = build(f);
  const std::int64_t n = groups * 2 * threads * 4;
  auto a = test::random_values(static_cast<std::size_t>(n), f32, -1, 1);
  auto d0 = test::random_values(static_cast<std::size_t>(groups * 2), f32, -1, 1);
  Tensor A = input(a, {groups, 2, threads, 4}, f32), D = input(d0, {groups, 2}, f32);
  k(A, D);
  // Per (group, row): the reduction of its threads * 4 values, folded
  // into the old value once per trip with accum.
  auto once = reduce_ref(r, a, {groups * 2, threads * 4}, {1}, nullptr);
  std::vector<double> want(once.size());
  for (std::size_t i = 0; i < once.size(); ++i) {
    want[i] = once[i];
    if (accum) {
      want[i] = d0[i];
      for (int t = 0; t < trips; ++t) want[i] = r.combine(want[i], once[i]);
    }
  }
  check_close(D.to_doubles(), want, 1e-5, 3e-5);
  record(std::string("reduce.") + r.name + ".cross_warp." + exec_scope_name(scope) +
             (accum ? ".accum" : "") + (in_loop ? ".loop" : ""),
         D, std::string(r.name) != "sum");
}

// A unary op whose scale and bias are tiles (the reference's buffer-region
// scale/bias): op(x * scale[row] + bias[col]) -- a per-row statistic and a
// per-column weight, both broadcast to the (threads, 2048 / threads) tile --
// in shared memory or in registers, with an f32 scale on an f16 tile too.
inline void unary_tile_scale_case(const UnaryOp& op, ExecScope scope, MemScope mem, DType t) {
  INFO("op.name := " << std::string(op.name));
  INFO("exec_scope_name(scope) := " << std::string(exec_scope_name(scope)));
  CAPTURE(mem_name(mem));
  CAPTURE(t.name());
  const std::int64_t rows = scope_threads(scope), cols = 2048 / rows;
  PrimFunc f = T::prim_func("unary_tile_scale", [&](Handle A_ptr, Handle Sc_ptr, Handle Bi_ptr,
                                                    Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {rows, cols}, t);
    auto Sc = T::match_buffer(Sc_ptr, {rows, 1}, f32);
    auto Bi = T::match_buffer(Bi_ptr, {1, cols}, t);
    auto B = T::match_buffer(B_ptr, {rows, cols}, t);
    T::thread_id({static_cast<int>(rows)});
    if (mem == MemScope::shared) {
      auto As = T::alloc_buffer({rows, cols}, t, scope::shared);
      auto Ss = T::alloc_buffer({rows, 1}, f32, scope::shared);
      auto Bs = T::alloc_buffer({1, cols}, t, scope::shared);
      auto Ys = T::alloc_buffer({rows, cols}, t, scope::shared);
      Tx::cta::copy(As, A);
      Tx::cta::copy(Ss, Sc);
      Tx::cta::copy(Bs, Bi);
      T::cuda::cta_sync();
      op.call(scope, Ys, As, {.scale = Ss.all(), .bias = Bs.all()});
      Tx::cta::copy(B, Ys);
    } else {
      // Thread i holds row i of x and its scale; every thread the whole bias row.
      auto R = T::alloc_buffer({rows, cols}, t, scope::local, row_per_thread(scope, rows, cols));
      auto Rs = T::alloc_buffer({rows, 1}, f32, scope::local, row_per_thread(scope, rows, 1));
      auto Rb = T::alloc_buffer({1, cols}, t, scope::local);
      copy_at(scope, R, A);
      copy_at(scope, Rs, Sc);
      for (Var j : T::serial(cols)) Rb(0, j) = Bi(0, j);
      op.call(scope, R, R, {.scale = Rs.all(), .bias = Rb.all()});
      copy_at(scope, B, R);
    }
  });
  Kernel k = build(f);
  // Scales in [0.5, 1], biases in [-0.25, 0.25], and each row's x in
  // [(lo + 0.25) / s, (hi - 0.25) / s]: x * scale + bias stays in the op's domain.
  const auto n = static_cast<std::size_t>(rows * cols);
  std::vector<double> sc = test::random_values(static_cast<std::size_t>(rows), f32, 0.5, 1.0);
  std::vector<double> bi = test::random_values(static_cast<std::size_t>(cols), t, -0.25, 0.25);
  std::vector<double> a;
  for (std::int64_t r = 0; r < rows; ++r) {
    const double s = sc[static_cast<std::size_t>(r)];
    auto row = test::random_values(static_cast<std::size_t>(cols), t, (op.lo + 0.25) / s,
                                   (op.hi - 0.25) / s);
    a.insert(a.end(), row.begin(), row.end());
  }
  Tensor A = input(a, {rows, cols}, t), Sc = input(sc, {rows, 1}, f32),
         Bi = input(bi, {1, cols}, t), B = output({rows, cols}, t);
  k(A, Sc, Bi, B);
  std::vector<double> want(n);
  for (std::size_t i = 0; i < n; ++i)
    want[i] = quantize(op.ref(a[i] * sc[i / static_cast<std::size_t>(cols)] +
                              bi[i % static_cast<std::size_t>(cols)]),
                       t);
  check_close(B.to_doubles(), want, std::max(test::default_rtol(t), 4e-6), test::subnormal_ulp(t));
  record(std::string("unary.") + op.name + "." + exec_scope_name(scope) + "." + mem_name(mem) +
             "." + t.short_name() + ".tile_scale_bias",
         B, false);
}

// -------------------------------------------------------------- the cases
// One function per group, so cross_device can run the same cases.

inline void copy_matrix() {
  for (CopyScope cs : {CopyScope::warp, CopyScope::warpgroup, CopyScope::cta, CopyScope::cta_warps})
    for (tx::DType t : {tx::f32, tx::f16, tx::u8})
      for (std::int64_t regs : {1, 2, 4, 8, 16})
        for (bool via_shared : {false, true}) copy_case(cs, t, regs, via_shared);
}

constexpr ExecScope kGroupScopes[] = {ExecScope::warp, ExecScope::warpgroup, ExecScope::cta};
constexpr MemScope kTileScopes[] = {MemScope::shared, MemScope::local};

inline void unary_matrix() {
  for (const UnaryOp& op : unary_ops())
    for (ExecScope s : kGroupScopes)
      for (MemScope m : kTileScopes)
        for (tx::DType t : {tx::f32, tx::f16})
          for (bool sb : {false, true}) unary_case(op, s, m, t, sb);
}

inline void unary_tile_scale_matrix() {
  for (const UnaryOp& op : unary_ops())
    for (ExecScope s : kGroupScopes)
      for (MemScope m : kTileScopes)
        for (tx::DType t : {tx::f32, tx::f16}) unary_tile_scale_case(op, s, m, t);
}

inline void binary_matrix() {
  for (const BinaryOp& op : binary_ops())
    for (ExecScope s : kGroupScopes)
      for (MemScope m : kTileScopes)
        for (tx::DType t : {tx::f32, tx::f16})
          for (Bcast b : {Bcast::none, Bcast::row, Bcast::column, Bcast::scalar})
            binary_case(op, s, m, t, b);
}

inline void misc_matrix() {
  for (ExecScope s : kGroupScopes)
    for (MemScope m : kTileScopes)
      for (bool via_zero : {false, true}) misc_elementwise_case(s, m, via_zero);
  ids_and_barriers_case();
}

inline void reduction_matrix() {
  for (const Reduce& r : reductions())
    for (RedKind kind : {RedKind::thread_local_, RedKind::warp_all_lanes, RedKind::warp_lane_subset,
                         RedKind::warp_in_registers, RedKind::shared_cta, RedKind::shared_warpgroup,
                         RedKind::shared_warp})
      for (bool accum : {false, true})
        for (int v : {0, 1})
          if (v == 0 || has_axis_variants(kind)) reduction_case(r, kind, accum, v);
  for (const Reduce& r : reductions())
    for (ExecScope s : {ExecScope::cta, ExecScope::warpgroup})
      for (bool accum : {false, true})
        for (bool in_loop : {false, true}) cross_warp_case(r, s, accum, in_loop);
}

}  // namespace matrix

TEST_CASE("matrix: copy round trips register <-> shared and register <-> global") {
  matrix::copy_matrix();
}
TEST_CASE("matrix: unary elementwise on shared and registers at warp, warpgroup and cta scope") {
  matrix::unary_matrix();
}
TEST_CASE("matrix: unary elementwise with tile scale and bias (a row statistic, a column weight)") {
  matrix::unary_tile_scale_matrix();
}
TEST_CASE("matrix: binary elementwise with broadcast at warp, warpgroup and cta scope") {
  matrix::binary_matrix();
}
TEST_CASE("matrix: fma, cast, fill and zero, warpgroup ids, unrolled loops, group barriers") {
  matrix::misc_matrix();
}
TEST_CASE(
    "matrix: reductions local, shared and across warps, sum/max/min, with and without accum") {
  matrix::reduction_matrix();
}
