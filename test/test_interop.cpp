// Issue 16 on the CPU: tx on memory it did not allocate (Tensor::from_blob),
// strided views (transpose, slice, expand, as_strided) through the op
// library against a double-precision reference, DLPack round trips, and
// compiling and launching from 8 threads at once.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

#ifdef TX_TEST_DLPACK_HEADER
#include TX_TEST_DLPACK_HEADER
#endif

using namespace tx;

namespace {

bool host_ready() {
  static const bool ok = runtime::host_jit_available();
  return ok;
}
#define HOST_CASE(name) TEST_CASE(name* doctest::skip(!host_ready()))

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// The elements of a view in row-major order, read through its strides from
// the flat values of its storage.
std::vector<double> gather(const std::vector<double>& storage,
                           const std::vector<std::int64_t>& shape,
                           const std::vector<std::int64_t>& strides, std::int64_t offset) {
  std::vector<double> out;
  std::vector<std::int64_t> idx(shape.size(), 0);
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t off = offset;
    for (std::size_t d = 0; d < shape.size(); ++d) off += idx[d] * strides[d];
    out.push_back(storage[static_cast<std::size_t>(off)]);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

PrimFunc scale_kernel() {
  return T::prim_func("scale2", [&](Handle X_ptr, Handle Y_ptr) {
    auto X = T::match_buffer(X_ptr, {4, 32}, f32);
    auto Y = T::match_buffer(Y_ptr, {4, 32}, f32);
    auto t = T::thread_id({32});
    for (int r = 0; r < 4; ++r) Y(r, t) = X(r, t) * 2.0f;
  });
}

}  // namespace

HOST_CASE("a kernel runs on host memory the caller owns, and writes into it") {
  std::vector<double> xs = test::random_values(128, f32, -3.0, 3.0);
  std::vector<float> x(xs.begin(), xs.end()), y(128, std::nanf(""));
  int released = 0;
  {
    Tensor X = Tensor::from_blob(x.data(), {4, 32}, f32, Device::host());
    Tensor Y = Tensor::from_blob(y.data(), {4, 32}, f32, Device::host(), {}, [&] { ++released; });
    CHECK(X.is_borrowed());
    CHECK(X.data_ptr() == x.data());
    Kernel k = compile(scale_kernel(), {.device = Device::host()});
    k(X, Y);
    CHECK(released == 0);
  }
  CHECK(released == 1);  // the release callback, once, when the last view went
  for (std::size_t i = 0; i < y.size(); ++i)
    CHECK(y[i] == doctest::Approx(2.0 * x[i]).epsilon(1e-6));
}

HOST_CASE("a kernel refuses a strided view, naming the operand and the strides") {
  Tensor A = Tensor::from_doubles(test::random_values(128, f32), {32, 4}, f32, Device::host());
  Tensor Y = Tensor::empty({4, 32}, f32, Device::host());
  Kernel k = compile(scale_kernel(), {.device = Device::host()});
  try {
    k(A.transpose(0, 1), Y);
    FAIL("a transposed view was launched as row-major");
  } catch (const Error& e) {
    CHECK(e.op() == "launch scale2");
    CHECK(e.operand().find("X") != std::string::npos);
    CHECK(std::string(e.what()).find("strides (1, 4)") != std::string::npos);
    CHECK(std::string(e.what()).find(".contiguous()") != std::string::npos);
  }
  k(A.transpose(0, 1).contiguous(), Y);  // the fix the message names
  std::vector<double> a = A.to_doubles(), y = Y.to_doubles();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 32; ++c) CHECK(y[r * 32 + c] == doctest::Approx(2.0 * a[c * 4 + r]));
}

TEST_CASE("views: transpose, slice, expand and as_strided read the right elements") {
  std::vector<double> v = test::random_values(6 * 8, f64);
  Tensor A = Tensor::from_doubles(v, {6, 8}, f64, Device::host());
  CHECK(A.is_contiguous());
  CHECK(A.strides() == std::vector<std::int64_t>{8, 1});
  Tensor T0 = A.transpose(0, 1);
  CHECK(T0.shape() == std::vector<std::int64_t>{8, 6});
  CHECK_FALSE(T0.is_contiguous());
  CHECK(T0.to_doubles() == gather(v, {8, 6}, {1, 8}, 0));
  Tensor S = A.slice(0, 1, 6, 2).slice(1, 3, 8);  // rows 1, 3, 5; columns 3..7
  CHECK(S.shape() == std::vector<std::int64_t>{3, 5});
  CHECK(S.storage_offset() == 8 + 3);
  CHECK(S.to_doubles() == gather(v, {3, 5}, {16, 1}, 11));
  Tensor row = A.slice(0, 2, 3);  // (1, 8)
  Tensor E = row.expand({4, 8});
  CHECK(E.strides() == std::vector<std::int64_t>{0, 1});
  CHECK(E.to_doubles() == gather(v, {4, 8}, {0, 1}, 16));
  Tensor W = A.as_strided({3, 3}, {9, 1}, 2);  // a diagonal band
  CHECK(W.to_doubles() == gather(v, {3, 3}, {9, 1}, 2));
  // Writing through a view scatters into the storage, and leaves the rest.
  std::vector<double> ones(15, 1.0);
  S.copy_from_bytes(Tensor::from_doubles(ones, {3, 5}, f64, Device::host()).to_bytes().data(),
                    15 * 8);
  std::vector<double> after = A.to_doubles();
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 8; ++c) {
      bool in = r % 2 == 1 && c >= 3;
      CHECK(after[static_cast<std::size_t>(r * 8 + c)] ==
            (in ? 1.0 : v[static_cast<std::size_t>(r * 8 + c)]));
    }
  // Mistakes are tx errors.
  CHECK_THROWS_AS(A.transpose(0, 2), Error);
  CHECK_THROWS_AS(A.slice(0, 7, 9), Error);
  CHECK_THROWS_AS(A.expand({6, 9}), Error);
  CHECK_THROWS_AS(A.as_strided({7, 8}, {8, 1}, 0), Error);
  CHECK_THROWS_AS(T0.reshape({48}), Error);
  CHECK_THROWS_AS(E.copy_from_bytes(ones.data(), 32 * 8), Error);
}

HOST_CASE("the op library takes transposed, sliced and expanded views") {
  const DType t = f32;
  std::vector<double> a = test::random_values(64 * 48, t, -3.0, 3.0);
  std::vector<double> b = test::random_values(48 * 64, t, -3.0, 3.0);
  Tensor A = Tensor::from_doubles(a, {64, 48}, t, Device::host());
  Tensor B = Tensor::from_doubles(b, {48, 64}, t, Device::host());
  // gelu of a transposed view.
  Tensor G = ops::gelu(A.transpose(0, 1));
  CHECK(G.shape() == std::vector<std::int64_t>{48, 64});
  std::vector<double> at = gather(a, {48, 64}, {1, 48}, 0), g = G.to_doubles();
  for (std::size_t i = 0; i < g.size(); ++i)
    CHECK(g[i] == doctest::Approx(gelu_ref(at[i])).epsilon(1e-5));
  // add: a transposed view plus a contiguous one.
  std::vector<double> s = ops::add(A.transpose(0, 1), B).to_doubles();
  for (std::size_t i = 0; i < s.size(); ++i)
    CHECK(s[i] == doctest::Approx(at[i] + b[i]).epsilon(1e-6));
  // mul: a sliced view (every other row, a column window) by an expanded row.
  Tensor As = A.slice(0, 0, 64, 2).slice(1, 8, 40);  // (32, 32)
  Tensor row = B.slice(0, 5, 6).slice(1, 0, 32).expand({32, 32});
  std::vector<double> m = ops::mul(As, row).to_doubles();
  std::vector<double> as = gather(a, {32, 32}, {96, 1}, 8),
                      rw = gather(b, {32, 32}, {0, 1}, 5 * 64);
  for (std::size_t i = 0; i < m.size(); ++i)
    CHECK(m[i] == doctest::Approx(as[i] * rw[i]).epsilon(1e-6));
  // A dense output in another dimension order (a transposed tensor) is
  // written in its memory order; one with gaps is refused, naming it.
  Tensor out = Tensor::empty({64, 48}, t, Device::host());
  out.fill_bits(0x7fc00000);           // NaN: unwritten elements show
  Tensor out_t = out.transpose(0, 1);  // (48, 64), strides (1, 48)
  ops::run("gelu", {B}, out_t);
  std::vector<double> ot = out_t.to_doubles();
  for (std::size_t i = 0; i < ot.size(); ++i)
    CHECK(ot[i] == doctest::Approx(gelu_ref(b[i])).epsilon(1e-5));
  Tensor wide = Tensor::empty({48, 128}, t, Device::host());
  Tensor gappy = wide.slice(1, 0, 64);
  CHECK_THROWS_WITH_AS(ops::run("gelu", {B}, gappy), doctest::Contains("gaps"), Error);
  try {
    ops::run("gelu", {B}, gappy);
  } catch (const Error& e) {
    CHECK(e.operand() == "out");
    CHECK(e.op() == "tx.ops.gelu");
  }
}

HOST_CASE("views through the op library: memory order, unaligned memory, 3-D, one kernel a class") {
  const DType t = f32;
  std::vector<double> a = test::random_values(40 * 24, t, -3.0, 3.0);
  std::vector<double> b = test::random_values(40 * 24, t, -3.0, 3.0);
  Tensor A = Tensor::from_doubles(a, {40, 24}, t, Device::host());
  Tensor B = Tensor::from_doubles(b, {40, 24}, t, Device::host());
  // Both transposed: the result is transposed too (PyTorch's rule), so
  // every operand is read in its memory order.
  Tensor S = ops::add(A.transpose(0, 1), B.transpose(0, 1));
  CHECK(S.shape() == std::vector<std::int64_t>{24, 40});
  CHECK(S.strides() == std::vector<std::int64_t>{1, 24});
  std::vector<double> s = S.to_doubles(), at = gather(a, {24, 40}, {1, 24}, 0),
                      bt = gather(b, {24, 40}, {1, 24}, 0);
  for (std::size_t i = 0; i < s.size(); ++i)
    CHECK(s[i] == doctest::Approx(at[i] + bt[i]).epsilon(1e-6));
  // Unaligned memory (a view one element in): read element by element.
  Tensor Au = A.as_strided({955}, {1}, 1), Bu = B.as_strided({955}, {1}, 3);
  std::vector<double> m = ops::mul(Au, Bu).to_doubles();
  for (std::size_t i = 0; i < m.size(); ++i)
    CHECK(m[i] == doctest::Approx(a[i + 1] * b[i + 3]).epsilon(1e-6));
  // 3-D: a permuted view, a broadcast column, a where with a strided mask.
  std::vector<double> c = test::random_values(4 * 6 * 10, t, -3.0, 3.0);
  Tensor C = Tensor::from_doubles(c, {4, 6, 10}, t, Device::host());
  Tensor P = C.permute({2, 0, 1});  // (10, 4, 6), strides (1, 60, 10)
  Tensor col = Tensor::from_doubles(test::random_values(10, t), {10, 1, 1}, t, Device::host());
  std::vector<double> cv = col.to_doubles();
  std::vector<double> r = ops::sub(P, col.expand({10, 4, 6})).to_doubles();
  std::vector<double> pv = gather(c, {10, 4, 6}, {1, 60, 10}, 0);
  for (std::size_t i = 0; i < r.size(); ++i)
    CHECK(r[i] == doctest::Approx(pv[i] - cv[i / 24]).epsilon(1e-6));
  // A gated op on a transposed view is gathered first, with the same result.
  Tensor Gt = ops::silu_and_mul(A.transpose(0, 1));  // (24, 20)
  Tensor Gc = ops::silu_and_mul(A.transpose(0, 1).contiguous());
  CHECK(Gt.to_bytes() == Gc.to_bytes());
  // One kernel serves every shape of a view class.
  // (Another shape of the same class: the innermost extent again a
  // multiple of the vector width.)
  Tensor A2 = Tensor::from_doubles(test::random_values(32 * 20, t), {32, 20}, t, Device::host());
  Tensor B2 = Tensor::from_doubles(test::random_values(20 * 32, t), {20, 32}, t, Device::host());
  (void)ops::add(A.transpose(0, 1), B.reshape({24, 40}));  // transposed + contiguous, first use
  const std::uint64_t compiles = ops::cache_stats().compiles;
  std::vector<double> q = ops::add(A2.transpose(0, 1), B2).to_doubles();
  CHECK(ops::cache_stats().compiles == compiles);
  std::vector<double> a2 = A2.to_doubles(), b2 = B2.to_doubles();
  std::vector<double> a2t = gather(a2, {20, 32}, {1, 20}, 0);
  for (std::size_t i = 0; i < q.size(); ++i)
    CHECK(q[i] == doctest::Approx(a2t[i] + b2[i]).epsilon(1e-6));
}

TEST_CASE("DLPack: a round trip shares the memory and honours the deleter") {
  if (!dlpack_available()) {
    CHECK_THROWS_AS(Tensor().to_dlpack(), Error);
    MESSAGE("tx was built without a DLPack header: only the error is checked");
    return;
  }
#ifdef TX_TEST_DLPACK_HEADER
  std::vector<double> v = test::random_values(5 * 7, f32);
  Tensor A = Tensor::from_doubles(v, {5, 7}, f32, Device::host());
  Tensor V = A.transpose(0, 1).slice(0, 1, 7);  // (6, 5), strides (1, 7), offset 1
  DLManagedTensor* m = V.to_dlpack();
  REQUIRE(m != nullptr);
  CHECK(m->dl_tensor.ndim == 2);
  CHECK(m->dl_tensor.shape[0] == 6);
  CHECK(m->dl_tensor.strides[0] == 1);
  CHECK(m->dl_tensor.strides[1] == 7);
  CHECK(m->dl_tensor.device.device_type == kDLCPU);
  CHECK(m->dl_tensor.dtype.code == kDLFloat);
  CHECK(m->dl_tensor.data == V.data_ptr());
  {
    Tensor B = Tensor::from_dlpack(m);  // takes m; calls its deleter at the end
    CHECK(B.data_ptr() == V.data_ptr());
    CHECK(B.strides() == V.strides());
    CHECK(B.to_doubles() == V.to_doubles());
    // A write through one side is read through the other.
    float* p = static_cast<float*>(B.data_ptr());
    p[0] = 1234.5f;
    CHECK(A.to_doubles()[1] == 1234.5);
  }
  // A foreign producer: the deleter runs exactly once, when tx lets go.
  static int deleted = 0;
  static std::vector<float> data(12, 3.0f);
  static std::int64_t shape[2] = {3, 4};
  auto* foreign = new DLManagedTensor{};
  foreign->dl_tensor.data = data.data();
  foreign->dl_tensor.device = {kDLCPU, 0};
  foreign->dl_tensor.ndim = 2;
  foreign->dl_tensor.dtype = {kDLFloat, 32, 1};
  foreign->dl_tensor.shape = shape;
  foreign->deleter = [](DLManagedTensor* self) {
    ++deleted;
    delete self;
  };
  {
    Tensor F = Tensor::from_dlpack(foreign);
    CHECK(F.is_contiguous());
    CHECK(F.to_vector<float>() == data);
    Tensor G = F.slice(0, 1, 3);  // a view keeps the producer's memory alive
    F = Tensor();
    CHECK(deleted == 0);
  }
  CHECK(deleted == 1);
  // A type tx has no dtype for is refused, and the tensor still released.
  auto* odd = new DLManagedTensor{};
  odd->dl_tensor.data = data.data();
  odd->dl_tensor.device = {kDLCPU, 0};
  odd->dl_tensor.ndim = 2;
  odd->dl_tensor.dtype = {kDLFloat, 32, 4};  // 4 lanes
  odd->dl_tensor.shape = shape;
  odd->deleter = [](DLManagedTensor* self) {
    ++deleted;
    delete self;
  };
  CHECK_THROWS_WITH_AS(Tensor::from_dlpack(odd), doctest::Contains("lanes"), Error);
  CHECK(deleted == 2);
#endif
}

HOST_CASE("8 threads compile, cache and launch at once") {
  constexpr int kThreads = 8;
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  std::vector<std::vector<double>> inputs(kThreads);
  for (int i = 0; i < kThreads; ++i)
    inputs[static_cast<std::size_t>(i)] =
        test::random_values(1000 + 37 * static_cast<std::size_t>(i), f32);
  for (int i = 0; i < kThreads; ++i) {
    pool.emplace_back([&, i] {
      try {
        for (int round = 0; round < 3; ++round) {
          const auto& in = inputs[static_cast<std::size_t>(i)];
          Tensor X =
              Tensor::from_doubles(in, {static_cast<std::int64_t>(in.size())}, f32, Device::host());
          // The op library (a shared cache) and a kernel of this thread's own.
          std::vector<double> g = ops::gelu(X).to_doubles();
          for (std::size_t k = 0; k < g.size(); ++k)
            if (std::abs(g[k] - gelu_ref(in[k])) > 1e-5 * (1 + std::abs(gelu_ref(in[k])))) {
              ++failures;
              return;
            }
          const float c = static_cast<float>(i + 2);
          auto f = T::prim_func("mul_const", [&](Handle A_ptr) {
            auto A = T::match_buffer(A_ptr, {32}, f32);
            auto t = T::thread_id({32});
            A(t) = A(t) * c;
          });
          Tensor A = Tensor::from_doubles(std::vector<double>(in.begin(), in.begin() + 32), {32},
                                          f32, Device::host());
          compile(f, {.device = Device::host()})(A);
          std::vector<double> a = A.to_doubles();
          for (std::size_t k = 0; k < 32; ++k)
            if (std::abs(a[k] - static_cast<double>(static_cast<float>(in[k])) * c) >
                1e-5 * (1 + std::abs(a[k]))) {
              ++failures;
              return;
            }
        }
      } catch (const std::exception& e) {
        MESSAGE("thread " << i << ": " << e.what());
        ++failures;
      }
    });
  }
  for (auto& t : pool) t.join();
  CHECK(failures == 0);
}
