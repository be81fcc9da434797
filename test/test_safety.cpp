// Issue 14's reproductions: every mistake a tx error naming the op, the
// operand, the user's line and the reason -- never a crash or a silent wrong
// answer -- and the checked host mode (TX_CHECK=1) that finds races,
// out-of-bounds accesses and division by zero at run time.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <limits>
#include <regex>

#include "racy_kernels.hpp"
#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "cta_sqrt_smem.cpp"
#include "thread_sum_local.cpp"
#include "warp_copy_reg.cpp"
#include "warp_sqrt_reg.cpp"
#include "warp_sum_shuffle.cpp"

using namespace tx;

namespace {

bool host_ready() {
  static const bool ok = runtime::host_jit_available();
  return ok;
}
// Cases that run kernels on the host report themselves skipped without the JIT.
#define HOST_CASE(name) TEST_CASE(name* doctest::skip(!host_ready()))

constexpr const char* kThisFile = "test_safety.cpp";
const int kNoLine = 0;  // Want::line of an error whose line is not checked

// The one naming scheme of ops in messages: builders T.*, tile primitives
// Tx.<scope>.*, the C++ API tx.*, kernel launches "launch <kernel>".
bool op_follows_scheme(const std::string& op) {
  static const std::regex scheme(
      R"(^(T\.[a-z_.]+[a-z0-9_]*|Tx\.(thread|warp|warpgroup|cta)\.[a-z_0-9]+|tx\.[A-Za-z_.0-9]+|launch [A-Za-z_0-9]+)$)");
  return std::regex_match(op, scheme);
}

struct Want {
  std::string op;
  std::string operand;  // empty: not checked
  std::string reason;   // a part of the message
  const int& line;      // the user's line the error must name, set while the kernel is built
};

// Structured fields hold what their names say, for every error.
void check_fields(const Error& e) {
  INFO(e.what());
  CHECK(op_follows_scheme(e.op()));
  CHECK(!e.reason().empty());
  CHECK(e.reason().rfind("operand ", 0) != 0);  // not the reason in the operand's place
  CHECK(e.operand().find(": ") == std::string::npos);
  CHECK(e.operand().size() < 80);
  CHECK(e.loc().known());
}

template <class F>
void expect_error(F&& f, const Want& want) {
  try {
    f();
    FAIL("expected a tx error: " << want.reason);
  } catch (const Error& e) {
    INFO(e.what());
    check_fields(e);
    CHECK(e.op() == want.op);
    if (!want.operand.empty()) CHECK(e.operand() == want.operand);
    CHECK(std::string(e.what()).find(want.reason) != std::string::npos);
    if (want.line) {
      CHECK(e.loc().line == static_cast<unsigned>(want.line));
      CHECK(std::string(e.loc().file).find(kThisFile) != std::string::npos);
    }
  }
}

Tensor host_input(std::vector<std::int64_t> shape, DType t = f32) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return Tensor::from_doubles(test::random_values(static_cast<std::size_t>(n), t, 1.0, 4.0),
                              std::move(shape), t, Device::host());
}

}  // namespace

// ------------------------------------------------------- 1. element bounds

TEST_CASE("an element index out of bounds is an error when the kernel is built") {
  int line = 0;
  expect_error(
      [&] {
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32, 8}, f32);
          T::thread_id({32});
          line = __LINE__ + 1;
          A(100, 0) = 1.0f;
        }));
      },
      {"T.store", "A", "index 100 in dimension 0 is outside [0, 32) of A (32, 8)", line});
  // The largest i32 index: proving it below the extent must not compute
  // index + 1 in 32 bits (it wraps to -2^31).
  expect_error(
      [&] {
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {2, 32}, f32);
          auto t = T::thread_id({32});
          line = __LINE__ + 1;
          A(2147483647, t) = 1.0f;
        }));
      },
      {"T.store", "A", "index 2147483647 in dimension 0 is outside [0, 2) of A (2, 32)", line});
  // t * 4 reaches 124 at t = 31: the witness is named.
  expect_error(
      [&] {
        compile(T::prim_func("k", [&](Handle A_ptr, Handle B_ptr) {
          auto A = T::match_buffer(A_ptr, {32, 8}, f32);
          auto B = T::match_buffer(B_ptr, {32, 8}, f32);
          auto t = T::thread_id({32});
          line = __LINE__ + 1;
          B(t * 4, 0) = A(t, 0);
        }));
      },
      {"T.store", "B", "index `t * 4` in dimension 0 reaches 124 (at t = 31), outside [0, 32)",
       line});
  // A read past the end.
  expect_error(
      [&] {
        compile(T::prim_func("k", [&](Handle A_ptr, Handle B_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          auto B = T::match_buffer(B_ptr, {32}, f32);
          auto t = T::thread_id({32});
          line = __LINE__ + 1;
          B(t) = A(t + 1);
        }));
      },
      {"T.load", "A", "index `t + 1` reaches 32 (at t = 31), outside [0, 32) of A (32,)", line});
}

TEST_CASE("a guarded access, or one the analysis cannot decide, is not an error") {
  // t + 1 < 32 under the guard; loaded indices are left to the checked mode.
  auto f = T::prim_func("k", [&](Handle A_ptr, Handle B_ptr, Handle I_ptr) {
    auto A = T::match_buffer(A_ptr, {32}, f32);
    auto B = T::match_buffer(B_ptr, {32}, f32);
    auto I = T::match_buffer(I_ptr, {32}, i32);
    auto t = T::thread_id({32});
    T::if_(t < 31, [&] { B(t) = A(t + 1); });
    B(t) = select(t + 1 < 32, A(min(t + 1, 31)), 0.0f) + A(I(t));
    for (Var j : T::serial(t)) B(j) = A(j);  // j < t <= 31
  });
  CHECK_NOTHROW(compile(f, {.device = Device::host()}));
}

TEST_CASE(
    "symbolic extents: guards prove accesses in bounds, and an off-by-one still has a witness") {
  // The predicated tail of a shape-generic kernel: base + j < n proves
  // x[base + j] without a search, min(i, n1 - 1) proves itself.
  auto ok = T::prim_func("tail", [&](Handle X_ptr, Handle B_ptr, Handle Y_ptr) {
    auto n = T::dim("n");
    auto n1 = T::dim("n1");
    auto X = T::match_buffer(X_ptr, {n}, f32);
    auto B = T::match_buffer(B_ptr, {n1}, f32);
    auto Y = T::match_buffer(Y_ptr, {n}, f32);
    auto bx = T::cta_id({ceildiv(n, 1024)});
    auto tid = T::thread_id({128});
    auto base = T::let((bx * 128 + tid) * 8);
    for (Var j : T::serial(8))
      T::if_(base + j < n, [&] { Y(base + j) = X(base + j) + B(min((base + j) % n1, n1 - 1)); });
  });
  CHECK_NOTHROW(compile(ok, {.device = Device::host()}));
  // The guard allows base + j = n - 1, where base + j + 1 is n.
  int line = 0;
  expect_error(
      [&] {
        compile(T::prim_func("tail", [&](Handle X_ptr, Handle Y_ptr) {
          auto n = T::dim("n");
          auto X = T::match_buffer(X_ptr, {n}, f32);
          auto Y = T::match_buffer(Y_ptr, {n}, f32);
          auto bx = T::cta_id({ceildiv(n, 1024)});
          auto tid = T::thread_id({128});
          auto base = T::let((bx * 128 + tid) * 8);
          for (Var j : T::serial(8))
            T::if_(base + j < n, [&] {
              line = __LINE__ + 1;
              Y(base + j) = X(base + j + 1);
            });
        }));
      },
      {"T.load", "X", "outside [0, n)", line});
}

// ------------------------------------------------------- 2. 64-bit indices

TEST_CASE("offsets into buffers of 2^31 elements or more are 64-bit, and only those") {
  auto make = [](std::int64_t n, int stride) {
    return T::prim_func("tail", [&](Handle A_ptr) {
      auto A = T::match_buffer(A_ptr, {n}, u8);
      auto bx = T::cta_id({3});
      auto t = T::thread_id({256});
      A(bx * stride + t) = cast(t + bx, u8);
    });
  };
  // bx = 2 reaches past 2^31: the offset is computed in 64 bits.
  constexpr int kStride = (1 << 30) + 512;
  std::string big =
      compile(make((std::int64_t{1} << 31) + 2048, kStride), {.device = Device::host()})
          .cuda_source();
  CHECK(big.find("((long long)(bx)) * 1073742336ll") != std::string::npos);
  std::string small = compile(make(3 * 1024, 1024), {.device = Device::host()}).cuda_source();
  CHECK(small.find("long long") == std::string::npos);  // small kernels keep 32-bit math
  CHECK(small.find("(bx * 1024) + t") != std::string::npos);
}

HOST_CASE("the host runs a kernel on a buffer past 2^31 elements") {
  if (std::getenv("TX_TEST_LARGE") && std::string(std::getenv("TX_TEST_LARGE")) == "0") {
    MESSAGE("TX_TEST_LARGE=0: the 2 GiB host buffer is left out (sanitizer builds)");
    return;
  }
  constexpr std::int64_t kBig = (std::int64_t{1} << 31) + 2048;
  constexpr int kStride = (1 << 30) + 512;
  auto f = T::prim_func("tail", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {kBig}, u8);
    auto bx = T::cta_id({3});
    auto t = T::thread_id({256});
    A(bx * kStride + t) = cast(t * 3 + bx, u8);
  });
  Kernel k = compile(f, {.device = Device::host()});
  Tensor A = Tensor::empty({kBig}, u8, Device::host());  // pages are touched only where written
  k(A);
  const auto* p = static_cast<const std::uint8_t*>(A.data_ptr());
  for (int bx = 0; bx < 3; ++bx)
    for (int t = 0; t < 256; t += 17)
      CHECK(p[static_cast<std::int64_t>(bx) * kStride + t] ==
            static_cast<std::uint8_t>(t * 3 + bx));
}

// ---------------------------------------------------- 3. deep expressions

HOST_CASE("a 100,000-term expression compiles and runs, in time linear in its size") {
  auto dot = [](int n) {
    return T::prim_func("dot", [&](Handle A_ptr, Handle B_ptr, Handle C_ptr) {
      auto A = T::match_buffer(A_ptr, {n}, f32);
      auto B = T::match_buffer(B_ptr, {n}, f32);
      auto C = T::match_buffer(C_ptr, {1}, f32);
      T::thread_id({1});
      Expr acc = 0.0f;
      for (int i = 0; i < n; ++i) acc = acc + A(i) * B(i);
      C(0) = acc;
    });
  };
  auto run = [&](int n) {
    auto t0 = std::chrono::steady_clock::now();
    Kernel k = compile(dot(n), {.device = Device::host()});
    std::vector<double> a = test::random_values(static_cast<std::size_t>(n), f32, -1, 1);
    std::vector<double> b = test::random_values(static_cast<std::size_t>(n), f32, -1, 1);
    Tensor A = Tensor::from_doubles(a, {n}, f32, Device::host());
    Tensor B = Tensor::from_doubles(b, {n}, f32, Device::host());
    Tensor C = Tensor::empty({1}, f32, Device::host());
    C.fill_bits(test::poison_bits(f32));
    k(A, B, C);
    double want = 0, mag = 0;
    for (int i = 0; i < n; ++i) want += a[i] * b[i], mag += std::abs(a[i] * b[i]);
    // f32 accumulation in order: error at most n ulp of the magnitudes.
    CHECK(std::abs(C.to_doubles()[0] - want) <= n * 6e-8 * mag + 1e-30);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Under the sanitizers (TX_TEST_LARGE=0, 5-10x slower) a fifth of the size.
  const char* large = std::getenv("TX_TEST_LARGE");
  const int big = large && std::string(large) == "0" ? 20000 : 100000;
  double t_small = run(big / 10), t_big = run(big);
  MESSAGE("build+compile+run: " << big / 10 << " terms " << t_small << " s, " << big << " terms "
                                << t_big << " s");
  CHECK(t_big < 30 * t_small);  // linear (10x) with room for noise, not quadratic (100x)
}

TEST_CASE("a deep expression is split where it is built, using it after a write is refused") {
  int line = 0;
  expect_error(
      [&] {
        T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {4}, f32);
          T::thread_id({1});
          Expr acc = 0.0f;
          for (int i = 0; i < 600; ++i) acc = acc + A(i % 4);  // read A ...
          A(0) = 1.0f;                                         // ... write A ...
          line = __LINE__ + 1;
          A(1) = acc;  // ... then use the parts evaluated before the write
        });
      },
      {"T.store", "", "evaluated it in parts where it was built", line});
  // Built outside a kernel, a too-deep expression is refused by the factories.
  Expr e = make_float(1.0f);
  try {
    for (int i = 0; i < 5000; ++i) e = make_binary(BinOp::Add, e, make_float(1.0f));
    FAIL("expected a depth error");
  } catch (const Error& err) {
    CHECK(std::string(err.what()).find("operations deep; tx takes at most 2048") !=
          std::string::npos);
  }
}

// ------------------------------------------- 5. default-constructed objects

TEST_CASE("default-constructed builder objects are tx errors, not crashes") {
  int line = 0;
  auto in_kernel = [&](const std::function<void(TileBuffer)>& body) {
    return [&, body] {
      T::prim_func("k", [&](Handle A_ptr) {
        auto A = T::match_buffer(A_ptr, {32}, f32);
        T::thread_id({32});
        body(A);
      });
    };
  };
  expect_error(in_kernel([&](TileBuffer) {
                 TileBuffer b;
                 line = __LINE__ + 1;
                 b(0) = 1.0f;
               }),
               {"T.load", "", "undefined (default-constructed) TileBuffer", line});
  expect_error(in_kernel([&](TileBuffer) {
                 line = __LINE__ + 1;
                 Tx::warp::zero(TileBuffer{});
               }),
               {"Tx.warp.zero", "", "undefined buffer operand", line});
  expect_error(in_kernel([&](TileBuffer A) {
                 Var v;
                 line = __LINE__ + 1;
                 A(v) = 1.0f;
               }),
               {"T.load", "A", "undefined (default-constructed) tx::Expr", line});
  expect_error(in_kernel([&](TileBuffer A) {
                 Expr e;
                 line = __LINE__ + 1;
                 A(0) = e;
               }),
               {"T.store", "A", "the value is an undefined", line});
  expect_error(in_kernel([&](TileBuffer) {
                 line = __LINE__ + 1;
                 T::let(Expr());
               }),
               {"T.let", "", "undefined (default-constructed) tx::Expr", line});
  expect_error(in_kernel([&](TileBuffer) {
                 line = __LINE__ + 1;
                 T::if_(Expr(), [] {});
               }),
               {"T.if_", "", "undefined (default-constructed) tx::Expr", line});
  expect_error(in_kernel([&](TileBuffer A) {
                 Var v;
                 line = __LINE__ + 1;
                 A(0) = A(0) + cast(v, f32);
               }),
               {"T.cast", "", "undefined", line});
  expect_error(in_kernel([&](TileBuffer A) {
                 line = __LINE__ + 1;
                 Tx::warp::add(A, A, Expr());
               }),
               {"Tx.warp.add", "", "undefined scalar operand", line});
  expect_error(
      [&] {
        T::prim_func("k", [&](Handle A_ptr) {
          line = __LINE__ + 1;
          auto A = T::match_buffer(Handle(), {32}, f32);
          (void)A_ptr;
        });
      },
      {"T.match_buffer", "", "the handle is undefined", line});
  // Outside any kernel.
  CHECK_THROWS_AS(compile(PrimFunc()), Error);
  CHECK_THROWS_AS(Kernel().launch(std::vector<Tensor>{}), Error);
  CHECK_THROWS_AS(Var().name(), Error);
  CHECK_THROWS_AS((void)Expr().dtype(), Error);
}

// ------------------------------------------------------- 6. scope escapes

TEST_CASE("a value used outside its block is an error naming both lines") {
  int line = 0, bound = 0;
  expect_error(
      [&] {
        Var v;
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          auto t = T::thread_id({32});
          T::if_(t < 16, [&] {
            bound = __LINE__ + 1;
            v = T::let(t * 2, "v");
          });
          line = __LINE__ + 1;
          A(t) = cast(v, f32);
        }));
      },
      {"T.store", "v", "used outside the block it is bound in (bound by T::let at", line});
  expect_error(
      [&] {
        Var i_out;
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          auto t = T::thread_id({32});
          for (Var i : T::serial(4)) i_out = i;
          line = __LINE__ + 1;
          A(t) = cast(i_out, f32);
        }));
      },
      {"T.store", "", "bound by the loop", line});
  expect_error(
      [&] {
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          auto t = T::thread_id({32});
          TileBuffer R;
          T::if_(t < 16, [&] {
            R = T::alloc_buffer({1}, f32, scope::local, std::nullopt, "R");
            R(0) = 1.0f;
          });
          line = __LINE__ + 1;
          A(t) = R(0);
        }));
      },
      {"T.store", "R", "buffer `R` is used outside the block it is allocated in", line});
  // A buffer of another kernel.
  TileBuffer other;
  T::prim_func("other", [&](Handle B_ptr) { other = T::match_buffer(B_ptr, {32}, f32); });
  expect_error(
      [&] {
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          auto t = T::thread_id({32});
          line = __LINE__ + 1;
          A(t) = other(t);
        }));
      },
      {"T.store", "", "does not belong to this kernel", line});
  (void)bound;
}

// ------------------------------------------------------- 8. resource limits

TEST_CASE("shared memory and registers are checked against the target when compiling") {
  int line = 0;
  auto smem = [&](std::int64_t elems) {
    return T::prim_func("smem", [&](Handle A_ptr) {
      auto A = T::match_buffer(A_ptr, {32}, f32);
      auto t = T::thread_id({32});
      line = __LINE__ + 1;
      auto S = T::alloc_buffer({elems}, f32, scope::shared);
      S(t) = A(t);
      T::cuda::cta_sync();
      A(t) = S(31 - t);
    });
  };
  expect_error([&] { compile(smem(std::int64_t{1} << 30), {.device = Device::host()}); },
               {"T.alloc_buffer", "S", "needs 4294967296 bytes of shared memory per CTA", line});
  // 100 KiB: too much for sm_75 (64 KiB), fine for sm_90 (227 KiB).
  expect_error([&] { compile(smem(25600), {.device = Device::host(), .arch = "sm_75"}); },
               {"T.alloc_buffer", "S", "at most 64 KiB (sm_75)", line});
  CHECK_NOTHROW(compile(smem(25600), {.device = Device::host(), .arch = "sm_90a"}));
  expect_error(
      [&] {
        compile(T::prim_func("regs",
                             [&](Handle A_ptr) {
                               auto A = T::match_buffer(A_ptr, {32}, f32);
                               auto t = T::thread_id({32});
                               line = __LINE__ + 1;
                               auto R = T::alloc_buffer({1 << 20}, f32, scope::local);
                               R(t) = A(t);
                               A(t) = R(t);
                             }),
                {.device = Device::host()});
      },
      {"T.alloc_buffer", "R", "bytes of registers per thread", line});
}

// ------------------------------------------------------------ 9. zero size

TEST_CASE("zero-size tensors: empty results from the op library, an error at a kernel launch") {
  Device d = Device::host();
  Tensor x = Tensor::empty({0}, f32, d);
  Tensor y = ops::gelu(x);
  CHECK(y.shape() == std::vector<std::int64_t>{0});
  CHECK(y.dtype() == f32);
  Tensor a = Tensor::empty({0, 4}, f16, d), b = Tensor::empty({4}, f16, d);
  Tensor s = ops::add(a, b);  // broadcast with an empty dimension
  CHECK(s.shape() == std::vector<std::int64_t>{0, 4});
  CHECK(ops::eq(a, b).dtype() == boolean);
  CHECK(ops::silu_and_mul(Tensor::empty({0, 8}, f32, d)).shape() ==
        std::vector<std::int64_t>{0, 4});
  CHECK(ops::cast(x, f16).numel() == 0);
  Tensor out = Tensor::empty({0}, f32, d);
  ops::gelu(x, out);  // out= form: nothing to do
  int line = 0;
  expect_error(
      [&] {
        line = __LINE__ + 1;
        ops::add(Tensor::empty({0, 4}, f32, d), Tensor::empty({3}, f32, d));
      },
      {"tx.ops.add", "input 1", "do not broadcast", line});
  Kernel k = compile(T::prim_func("k",
                                  [&](Handle A_ptr) {
                                    auto A = T::match_buffer(A_ptr, {32}, f32);
                                    auto t = T::thread_id({32});
                                    A(t) = A(t) * 2.0f;
                                  }),
                     {.device = d});
  expect_error(
      [&] {
        line = __LINE__ + 1;
        k(x);
      },
      {"launch k", "A (argument 0)", "tensor is empty", line});
}

// ------------------------------------------------------------- 10. messages

TEST_CASE("an expression error names the user's line and the faulty operand") {
  int line = 0;
  expect_error(
      [&] {
        T::prim_func("k", [&](Handle A_ptr, Handle B_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          auto B = T::match_buffer(B_ptr, {32}, f16);
          auto t = T::thread_id({32});
          A(t) = A(t) * 2.0f;
          line = __LINE__ + 1;
          A(t) = A(t) + B(t);
        });
      },
      {"T.add", "B[t]", "dtype float16 differs from the other operand's float32 (A[t])", line});
  expect_error(
      [&] {
        T::prim_func("k", [&](Handle A_ptr, Handle B_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          auto B = T::match_buffer(B_ptr, {32}, f16);
          auto t = T::thread_id({32});
          A(t) = 1.0f;
          line = __LINE__ + 1;
          T::let(A(t) * B(t));
        });
      },
      {"T.mul", "B[t]", "cast explicitly, up to the wider type: cast(B[t], float32)", line});
}

TEST_CASE("launch and op-library errors name the line of the call") {
  Kernel k = compile(T::prim_func("axpb",
                                  [&](Handle X_ptr) {
                                    auto X = T::match_buffer(X_ptr, {4, 64}, f32);
                                    auto row = T::cta_id({4});
                                    auto col = T::thread_id({64});
                                    X(row, col) = X(row, col) * 2.0f + 1.0f;
                                  }),
                     {.device = Device::host()});
  int line = 0;
  Tensor wrong = Tensor::empty({4, 32}, f32, Device::host());
  expect_error(
      [&] {
        line = __LINE__ + 1;
        k(wrong);
      },
      {"launch axpb", "X (argument 0)", "shape (4, 32) but the kernel declares (4, 64)", line});
  expect_error(
      [&] {
        line = __LINE__ + 1;
        k.launch({wrong});
      },
      {"launch axpb", "", "shape (4, 32)", line});
  expect_error(
      [&] {
        Tensor a = host_input({16}), b = host_input({15});
        line = __LINE__ + 1;
        ops::mul(a, b);
      },
      {"tx.ops.mul", "input 1", "do not broadcast", line});
  expect_error(
      [&] {
        Tensor a = host_input({16}, i32);
        line = __LINE__ + 1;
        ops::gelu(a);
      },
      {"tx.ops.gelu", "input 0", "dtype int32 is not supported", line});
}

TEST_CASE("one sentence per distinct dispatch reason, and a hint where the fix is known") {
  int line = 0;
  try {
    compile(T::prim_func("k", [&](Handle A_ptr) {
      auto A = T::match_buffer(A_ptr, {32}, f32);
      auto t = T::thread_id({64});
      auto S = T::alloc_buffer({32}, f32, scope::shared);
      T::if_(t < 16, [&] {
        line = __LINE__ + 1;
        Tx::warp::copy(S, A);
      });
    }));
    FAIL("expected an error");
  } catch (const Error& e) {
    std::string m = e.what();
    INFO(m);
    check_fields(e);
    const std::string reason = "the guard `t < 16`";
    std::size_t first = m.find(reason);
    REQUIRE(first != std::string::npos);
    CHECK(m.find(reason, first + 1) == std::string::npos);  // said once
    CHECK(
        m.find(
            "tried: copy/ldstmatrix [20], copy/gmem_smem [10], copy/reg [10], copy/fallback [0]") !=
        std::string::npos);
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
  try {
    compile(T::prim_func("k", [&](Handle A_ptr, Handle B_ptr) {
      auto A = T::match_buffer(A_ptr, {32}, f32);
      auto B = T::match_buffer(B_ptr, {32}, f32);
      T::thread_id({32});
      Tx::warp::sqrt(A, B);
    }));
    FAIL("expected an error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.operand() == "A");
    CHECK(e.detail().find("hint: tile primitives other than copy work on shared memory or "
                          "registers: stage A through") != std::string::npos);
  }
}

// The error catalogue: each bad input of this file and of the issue, through
// one check of the fields.
TEST_CASE("every error of the catalogue follows the naming scheme and names the user's line") {
  std::vector<std::function<void()>> catalogue = {
      [] {
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {8}, f32);
          T::thread_id({8});
          A(9) = 0.0f;
        }));
      },
      [] {
        T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {8}, f32);
          T::thread_id({8});
          TileBuffer b;
          A(0) = b(0);
        });
      },
      [] {
        T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {8}, i32);
          T::thread_id({8});
          A(0) = A(1) + 1.5f;  // an int buffer gets a float value
        });
      },
      [] {
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {8, 4}, f32, TileLayout(S({8, 4}, {2, 1})));
          auto t = T::thread_id({8});
          A(t, 0) = 1.0f;
        }));
      },
      [] {
        compile(T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {64}, f32);
          T::thread_id({32});
          auto Sm = T::alloc_buffer({64}, f32, scope::shared);
          Tx::warp::copy(Sm, A);
          Tx::warp::copy(Sm[region({8, 40})], Sm[region({0, 32})]);
        }));
      },
      [] { T::serial(4); },  // outside a kernel
      [] {
        T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {8}, f32);
          T::thread_id({8});
          T::if_(A(0), [] {});
        });
      },
      [] {
        T::prim_func("k", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {8}, f32);
          T::alloc_buffer({0}, f32, scope::shared);
          (void)A;
        });
      },
      [] {
        Tensor out = Tensor::empty({5}, f32, Device::host());
        ops::relu(host_input({4}), out);
      },
      [] { ops::cast(Tensor(), f16); },
  };
  for (std::size_t i = 0; i < catalogue.size(); ++i) {
    CAPTURE(i);
    try {
      catalogue[i]();
      FAIL("expected a tx error");
    } catch (const Error& e) {
      check_fields(e);
      if (e.op() != "T.serial")
        CHECK(std::string(e.loc().file).find(kThisFile) != std::string::npos);
    }
  }
}

// ------------------------------------------------ found by the fuzzers

TEST_CASE("sizes past 2^62 elements or bytes are tx errors, not overflows") {
  const std::int64_t big = std::int64_t{1} << 40;
  expect_error(
      [&] {
        T::prim_func("huge", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {big, big}, f32);
          A(0, 0) = 1.0f;
        });
      },
      {"T.match_buffer", "A", "more than 2^62 bytes of float32", kNoLine});
  // 2^62 elements of f32: the elements fit, the bytes do not.
  expect_error(
      [&] {
        T::prim_func("bytes", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {std::int64_t{1} << 31, std::int64_t{1} << 31}, f32);
          A(0, 0) = 1.0f;
        });
      },
      {"T.match_buffer", "A", "more than 2^62 bytes", kNoLine});
  try {
    TileLayout l(std::vector<Iter>{{big, 1, Axis::m}, {big, big, Axis::m}});
    FAIL("a layout of 2^80 elements was accepted: size " << l.size());
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("more than 2^62 elements") != std::string::npos);
  }
}

TEST_CASE("integer constants fold as the kernel computes them: two's complement at their width") {
  const std::int64_t max64 = std::numeric_limits<std::int64_t>::max();
  const std::int64_t min64 = std::numeric_limits<std::int64_t>::min();
  auto fold = [](const Expr& e) { return as_const_int(lowering::simplify(e)); };
  CHECK(fold(make_int(max64, i64) + make_int(5, i64)) == min64 + 4);
  CHECK(fold(make_int(2147483647, i32) + make_int(1, i32)) == -2147483648LL);
  CHECK(fold(make_int(200, u8) * make_int(2, u8)) == 144);
  CHECK(fold(make_int(-7, i32) / make_int(2, i32)) == -3);
  CHECK(fold(floordiv(make_int(-7, i32), make_int(2, i32))) == -4);
  // What the targets disagree on, or trap on, is left to run: INT_MIN / -1,
  // a zero divisor, a shift past the width.
  CHECK_FALSE(fold(make_int(min64, i64) / make_int(-1, i64)));
  CHECK_FALSE(fold(make_int(5, i32) / make_int(0, i32)));
  CHECK_FALSE(fold(make_int(1, i64) << make_int(64, i64)));
  CHECK(fold(make_int(1, i64) << make_int(62, i64)) == std::int64_t{1} << 62);
  // The range analysis of INT64_MIN: no negation overflow.
  CHECK(fold(make_int(3, i64) - make_int(min64, i64)) == min64 + 3);
}

TEST_CASE("y = y * y repeated stays linear: the builder binds large shared parts") {
  auto f = T::prim_func("squares", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32}, f32);
    auto t = T::thread_id({32});
    Expr y = A(t);
    for (int i = 0; i < 60; ++i) y = y * y;  // 2^60 nodes if walked as a tree
    A(t) = y;
  });
  Kernel k = compile(f, {.device = Device::host()});
  CHECK(k.lowered_ir().find("part") != std::string::npos);
  // Outside a builder there is no T::let to bind to: a tx error.
  Expr y = make_float(1.5);
  try {
    for (int i = 0; i < 40; ++i) y = y * y;
    FAIL("a 2^40-node expression was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("counted once per use") != std::string::npos);
  }
}

TEST_CASE("a default Kernel and an id var past its dimensions are tx errors") {
  Kernel k;
  for (auto call : std::vector<std::function<void()>>{
           [&] { (void)k.name(); }, [&] { (void)k.cuda_source(); }, [&] { (void)k.tirx(); },
           [&] { (void)k.lowered_ir(); }, [&] { (void)k.ptx(); }, [&] { (void)k.info(); },
           [&] { (void)k.prepare_gpu(); }, [&] { k(); }}) {
    try {
      call();
      FAIL("a default Kernel was used without an error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("the Kernel is empty") != std::string::npos);
    }
  }
  static int line = 0;
  expect_error(
      [&] {
        T::prim_func("ids", [&](Handle A_ptr) {
          auto A = T::match_buffer(A_ptr, {32}, f32);
          auto t = T::thread_id({32});
          line = __LINE__ - 1;
          A(t[3]) = 1.0f;
        });
      },
      {"T.id", "t[3]", "index 3 past the 1 id var(s)", line});
}

// ------------------------------------------------------ 11. printed CUDA

TEST_CASE("the printed CUDA holds only the helpers the kernel uses") {
  std::string cuda = compile(warp_sqrt(), {.device = Device::host()}).cuda_source();
  CHECK(std::count(cuda.begin(), cuda.end(), '\n') < 60);
  for (const char* unused : {"tx_erfc", "tx_normcdf", "tx_f32_to_f8e4m3", "tx_f16", "tx_max"})
    CHECK(cuda.find(unused) == std::string::npos);
  // An f16 kernel gets the f16 conversions, and what they need, only.
  std::string half = compile(T::prim_func("h",
                                          [&](Handle A_ptr) {
                                            auto A = T::match_buffer(A_ptr, {32}, f16);
                                            auto t = T::thread_id({32});
                                            A(t) = exp(A(t));
                                          }),
                             {.device = Device::host()})
                         .cuda_source();
  CHECK(half.find("typedef unsigned short tx_f16;") != std::string::npos);
  CHECK(half.find("tx_f16_to_f32") != std::string::npos);
  CHECK(half.find("tx_f32_to_f16") != std::string::npos);
  CHECK(half.find("tx_bf16") == std::string::npos);
  CHECK(half.find("tx_normcdf") == std::string::npos);
}

// ------------------------------------------------------ 7. checked mode

namespace {

// Runs `f` checked on the host with inputs made by `make`; returns the error
// or "" when the run was clean.
std::string checked_run(const PrimFunc& f, const std::vector<Tensor>& args) {
  Kernel k = compile(f, {.checked = true});
  CHECK(k.device() == Device::host());
  CHECK(k.checked());
  try {
    k.launch(args);
  } catch (const Error& e) {
    check_fields(e);
    return std::string(e.what());
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  INFO(s);
  return s.find(part) != std::string::npos;
}

}  // namespace

HOST_CASE("the checked mode finds the race in each racy kernel") {
  for (const test::RacyKernel& k : test::racy_kernels()) {
    CAPTURE(k.name);
    Kernel probe = compile(k.func, {.device = Device::host()});
    std::vector<Tensor> args;
    for (const auto& p : probe.info().params)
      args.push_back(p.dtype == i32 ? Tensor::from_vector(std::vector<std::int32_t>(
                                                              static_cast<std::size_t>(p.elems), 3),
                                                          p.shape, Device::host())
                                    : host_input(p.shape, p.dtype));
    std::string r = checked_run(k.func, args);
    CHECK(has(r, k.expect));
    CHECK(has(r, "launch " + k.name));
  }
  // With the barrier the same exchange is clean, and computes the reversal.
  auto exchange = T::prim_func("smem_ok", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    auto t = T::thread_id({64});
    auto S = T::alloc_buffer({64}, f32, scope::shared);
    S(t) = A(t);
    T::cuda::cta_sync();
    A(t) = S(63 - t);
  });
  Tensor a = host_input({64});
  std::vector<double> before = a.to_doubles();
  CHECK(checked_run(exchange, {a}) == "");
  std::vector<double> after = a.to_doubles();
  for (int i = 0; i < 64; ++i) CHECK(after[i] == before[63 - i]);
}

HOST_CASE("the checked mode reports out-of-bounds accesses and division by zero") {
  auto oob = T::prim_func("oob", [&](Handle A_ptr, Handle I_ptr) {
    auto A = T::match_buffer(A_ptr, {32}, f32);
    auto I = T::match_buffer(I_ptr, {32}, i32);
    auto t = T::thread_id({32});
    A(t) = A(I(t)) * 2.0f;
  });
  std::vector<std::int32_t> idx(32);
  for (int i = 0; i < 32; ++i) idx[i] = i == 7 ? 100 : 31 - i;
  Tensor A = host_input({32});
  std::string r = checked_run(oob, {A, Tensor::from_vector(idx, {32}, Device::host())});
  CHECK(has(r, "out of bounds: T.load at"));
  CHECK(has(r, "reads element 100 of A (32,), which holds [0, 32) (thread 7, CTA 0)"));
  auto div = T::prim_func("div0", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {32}, i32);
    auto B = T::match_buffer(B_ptr, {32}, i32);
    auto t = T::thread_id({32});
    A(t) = 7 / B(t);
  });
  std::vector<std::int32_t> b(32, 3);
  b[5] = 0;
  r = checked_run(div, {Tensor::from_vector(std::vector<std::int32_t>(32, 0), {32}, Device::host()),
                        Tensor::from_vector(b, {32}, Device::host())});
  CHECK(has(r, "integer division by zero in `7 / B[t]`"));
  CHECK(has(r, "thread 5, CTA 0"));
}

HOST_CASE("the checked mode checks each index against its dimension, not only the flat offset") {
  // A(r, J(t)) with J(7) = 9 on a (4, 8) buffer: rows 0-2 land on the next
  // row's elements, inside the storage; each is reported all the same.
  auto f = T::prim_func("gather_rows", [&](Handle A_ptr, Handle J_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {4, 8}, f32);
    auto J = T::match_buffer(J_ptr, {8}, i32);
    auto B = T::match_buffer(B_ptr, {4, 8}, f32);
    auto t = T::thread_id({8});
    for (int r = 0; r < 3; ++r) B(r, t) = A(r, J(t));
  });
  std::vector<std::int32_t> j = {7, 6, 5, 4, 3, 2, 1, 0};
  Tensor A = host_input({4, 8}), B = host_input({4, 8});
  CHECK(checked_run(f, {A, Tensor::from_vector(j, {8}, Device::host()), B}).empty());
  j[7] = 9;
  std::string r = checked_run(f, {A, Tensor::from_vector(j, {8}, Device::host()), B});
  CHECK(has(r, "reads A (4, 8) at index 9 on dimension 1, outside its extent (thread 7, CTA 0)"));
  CHECK(has(r, "found 3 problems"));
  // Unchecked, the printed CUDA is the plain index; checked, the check is
  // in the lowered IR only.
  CHECK(compile(f, {.checked = true}).lowered_ir().find("T.check_index") != std::string::npos);
  CHECK(compile(f, {.device = Device::host(), .checked = false}).lowered_ir().find("check_index") ==
        std::string::npos);
}

HOST_CASE("the checked mode finds nothing in the samples, and computes what they compute") {
  struct Sample {
    const char* name;
    PrimFunc f;
  };
  for (const Sample& s :
       {Sample{"warp_sqrt", warp_sqrt()}, Sample{"cta_sqrt", cta_sqrt()},
        Sample{"warp_copy_reg", warp_copy_reg()}, Sample{"thread_sum", thread_sum()},
        Sample{"warp_sum_shuffle", warp_sum_shuffle()}}) {
    CAPTURE(s.name);
    Kernel plain = compile(s.f, {.device = Device::host()});
    Kernel checked = compile(s.f, {.checked = true});
    std::vector<Tensor> in_plain, in_checked;
    for (const auto& p : plain.info().params) {
      std::vector<double> v = test::random_values(static_cast<std::size_t>(p.elems), p.dtype, 1, 4);
      in_plain.push_back(Tensor::from_doubles(v, p.shape, p.dtype, Device::host()));
      in_checked.push_back(Tensor::from_doubles(v, p.shape, p.dtype, Device::host()));
    }
    plain.launch(in_plain);
    CHECK_NOTHROW(checked.launch(in_checked));
    for (std::size_t i = 0; i < in_plain.size(); ++i)
      CHECK(in_plain[i].to_bytes() == in_checked[i].to_bytes());
  }
}
