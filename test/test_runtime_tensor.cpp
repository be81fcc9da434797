// Host tensors: value and byte round trips for every dtype, poisoning,
// copies, sizes and the errors for bad input. Needs no GPU; where there is
// one, the GPU-only checks check that it works instead of that it fails.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "tx/dtype.hpp"
#include "tx/error.hpp"
#include "tx/expr.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/tensor.hpp"

namespace {

using tx::Device;
using tx::DType;
using tx::Tensor;

const DType kAllDTypes[] = {tx::f32, tx::f16, tx::bf16, tx::f8e4m3, tx::f8e5m2,
                            tx::f64, tx::i8,  tx::i16,  tx::i32,    tx::i64,
                            tx::u8,  tx::u16, tx::u32,  tx::u64,    tx::boolean};

// Values of `t` that are exactly representable and sit at its edges.
std::vector<double> edge_values(DType t) {
  if (t.is_bool()) return {0.0, 1.0, 1.0, 0.0};
  if (t.is_int()) {
    const double lo = -std::ldexp(1.0, t.bits - 1);
    // int64's largest value is not a double; 2^62 is.
    const double hi = t.bits == 64 ? std::ldexp(1.0, 62) : -lo - 1;
    return {lo, hi, -1.0, 0.0, 1.0, lo + 1};
  }
  if (t.is_uint()) {
    const double hi = t.bits == 64 ? std::ldexp(1.0, 64) - 2048 : std::ldexp(1.0, t.bits) - 1;
    return {0.0, 1.0, hi, 7.0};
  }
  const double max = t == tx::f64   ? std::numeric_limits<double>::max()
                     : t == tx::f32 ? double{std::numeric_limits<float>::max()}
                                    : tx::dtype_max_finite(t);
  // The smallest subnormal: 2^(emin - mantissa bits).
  const double tiny = t == tx::f64      ? std::numeric_limits<double>::denorm_min()
                      : t == tx::f32    ? double{std::numeric_limits<float>::denorm_min()}
                      : t == tx::f16    ? std::ldexp(1.0, -24)
                      : t == tx::bf16   ? std::ldexp(1.0, -133)
                      : t == tx::f8e4m3 ? std::ldexp(1.0, -9)
                                        : std::ldexp(1.0, -16);
  std::vector<double> v = {max, -max, tiny, -tiny, 1.0, -0.5, 0.0};
  if (t != tx::f8e4m3) {  // e4m3fn has no infinities
    v.push_back(INFINITY);
    v.push_back(-INFINITY);
  }
  return v;
}

std::vector<double> random_for(DType t, std::size_t n) {
  if (t.is_float()) {
    const double max = t == tx::f64 || t == tx::f32 ? 1e6 : tx::dtype_max_finite(t);
    return tx::test::random_values(n, t, -0.9 * max, 0.9 * max);
  }
  return tx::test::random_values(n, t, -1e18, 1e18);
}

// Equal as values, NaN equal to NaN.
bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

std::size_t random_extent(std::size_t lo, std::size_t hi) {
  return std::uniform_int_distribution<std::size_t>(lo, hi)(tx::test::rng());
}

// Sets an environment variable for one scope, restoring the old value.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) old = v;
    if (value)
      setenv(n, value, 1);
    else
      unsetenv(n);
  }
  ~ScopedEnv() {
    if (old)
      setenv(name.c_str(), old->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("from_doubles / to_doubles round-trips representable values of every dtype") {
  for (DType t : kAllDTypes) {
    // Negative int64 values have their own case below.
    if (t == tx::i64) continue;
    CAPTURE(t.name());
    const auto rows = static_cast<std::int64_t>(random_extent(2, 9));
    const auto cols = static_cast<std::int64_t>(random_extent(8, 40));
    std::vector<double> values = random_for(t, static_cast<std::size_t>(rows * cols));
    const std::vector<double> edges = edge_values(t);
    std::copy(edges.begin(), edges.end(), values.begin());
    if (t.is_float()) values.back() = NAN;

    Tensor x = Tensor::from_doubles(values, {rows, cols}, t, Device::host());
    CHECK(x.defined());
    CHECK(x.dtype() == t);
    CHECK(x.device() == Device::host());
    CHECK(x.shape() == std::vector<std::int64_t>{rows, cols});
    CHECK(x.numel() == rows * cols);
    CHECK(x.nbytes() == static_cast<std::size_t>(rows * cols * t.bytes()));
    CHECK(same_values(x.to_doubles(), values));
    // The raw bytes decode to the same values, element by element.
    std::vector<std::uint8_t> bytes = x.to_bytes();
    REQUIRE(bytes.size() == x.nbytes());
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::uint64_t b = 0;
      std::memcpy(&b, bytes.data() + i * static_cast<std::size_t>(t.bytes()),
                  static_cast<std::size_t>(t.bytes()));
      CHECK(same_values({tx::decode_bits(b, t)}, {values[i]}));
    }
  }
}

TEST_CASE("int64 tensors round-trip negative values") {
  // Kept apart from the loop above so that it fails alone: tx::encode_bits
  // (dsl/src/expr.cpp, wrap_integer) reduces 64-bit integers modulo 2^64 in
  // double arithmetic, which drops the low bits of negative values (-1 + 2^64
  // rounds to 2^64, whose conversion to uint64 is undefined).
  std::vector<double> values = tx::test::random_values(40, tx::i64, -1e18, 1e18);
  const std::vector<double> edges = edge_values(tx::i64);
  std::copy(edges.begin(), edges.end(), values.begin());
  values[edges.size()] = -1.0;
  values[edges.size() + 1] = -static_cast<double>(random_extent(2, 1000));
  Tensor x = Tensor::from_doubles(values, {40}, tx::i64, Device::host());
  CHECK(same_values(x.to_doubles(), values));
  const std::vector<std::uint8_t> bytes = x.to_bytes();
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::int64_t k = 0;
    std::memcpy(&k, bytes.data() + 8 * i, 8);
    CHECK(static_cast<double>(k) == values[i]);
  }
}

TEST_CASE("from_doubles rounds values as the dtype stores them") {
  for (DType t : kAllDTypes) {
    CAPTURE(t.name());
    std::vector<double> raw(64);
    std::uniform_real_distribution<double> d(-100.0, 100.0);
    for (double& v : raw) v = d(tx::test::rng());
    std::vector<double> want(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) want[i] = tx::quantize(raw[i], t);
    Tensor x = Tensor::from_doubles(raw, {8, 8}, t, Device::host());
    CHECK(same_values(x.to_doubles(), want));
  }
}

TEST_CASE("element bytes are the dtypes' standard encodings") {
  auto bits_of = [](double v, DType t) {
    std::vector<std::uint8_t> b = Tensor::from_doubles({v}, {1}, t, Device::host()).to_bytes();
    REQUIRE(b.size() == static_cast<std::size_t>(t.bytes()));
    std::uint64_t r = 0;
    std::memcpy(&r, b.data(), b.size());
    return r;
  };
  CHECK(bits_of(1.0, tx::f16) == 0x3c00);
  CHECK(bits_of(-2.0, tx::f16) == 0xc000);
  CHECK(bits_of(65504.0, tx::f16) == 0x7bff);
  CHECK(bits_of(std::ldexp(1.0, -24), tx::f16) == 0x0001);
  CHECK(bits_of(1.0, tx::bf16) == 0x3f80);
  CHECK(bits_of(-2.0, tx::bf16) == 0xc000);
  CHECK(bits_of(1.0, tx::f8e4m3) == 0x38);
  CHECK(bits_of(-1.0, tx::f8e4m3) == 0xb8);
  CHECK(bits_of(448.0, tx::f8e4m3) == 0x7e);
  CHECK(bits_of(1.0, tx::f8e5m2) == 0x3c);
  CHECK(bits_of(57344.0, tx::f8e5m2) == 0x7b);
  CHECK(bits_of(1.0, tx::boolean) == 1);
  CHECK(bits_of(0.0, tx::boolean) == 0);
  CHECK(bits_of(-1.0, tx::i16) == 0xffff);
  CHECK(bits_of(-1.0, tx::i32) == 0xffffffff);

  // f32 and f64 are the C++ types' bits; integers their two's complement.
  const std::vector<double> v = tx::test::random_values(33, tx::f32, -1e3, 1e3);
  std::vector<std::uint8_t> b = Tensor::from_doubles(v, {33}, tx::f32, Device::host()).to_bytes();
  for (std::size_t i = 0; i < v.size(); ++i) {
    float f = 0;
    std::memcpy(&f, b.data() + 4 * i, 4);
    CHECK(f == static_cast<float>(v[i]));
  }
  const std::vector<double> w = tx::test::random_values(17, tx::i32, -1e9, 1e9);
  b = Tensor::from_doubles(w, {17}, tx::i32, Device::host()).to_bytes();
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::int32_t k = 0;
    std::memcpy(&k, b.data() + 4 * i, 4);
    CHECK(k == static_cast<std::int32_t>(w[i]));
  }
}

TEST_CASE("from_bytes / to_bytes and the typed vectors round-trip") {
  for (DType t : kAllDTypes) {
    CAPTURE(t.name());
    const auto n = static_cast<std::int64_t>(random_extent(1, 300));
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n * t.bytes()));
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& c : bytes) c = static_cast<std::uint8_t>(byte(tx::test::rng()));
    Tensor x = Tensor::from_bytes(bytes.data(), bytes.size(), {n}, t, Device::host());
    CHECK(x.to_bytes() == bytes);
    CHECK(std::memcmp(x.data_ptr(), bytes.data(), bytes.size()) == 0);

    // copy_from_bytes overwrites in place.
    for (auto& c : bytes) c = static_cast<std::uint8_t>(byte(tx::test::rng()));
    void* before = x.data_ptr();
    x.copy_from_bytes(bytes.data(), bytes.size());
    CHECK(x.data_ptr() == before);
    CHECK(x.to_bytes() == bytes);
  }

  std::vector<float> f(static_cast<std::size_t>(random_extent(5, 50)));
  for (float& v : f) v = static_cast<float>(tx::test::random_values(1, tx::f32)[0]);
  Tensor tf = Tensor::from_vector(f, {static_cast<std::int64_t>(f.size())}, Device::host());
  CHECK(tf.dtype() == tx::f32);
  CHECK(tf.to_vector<float>() == f);
  CHECK_THROWS_AS(tf.to_vector<std::int32_t>(), tx::Error);

  std::vector<std::int64_t> k = {std::numeric_limits<std::int64_t>::min(),
                                 std::numeric_limits<std::int64_t>::max(),
                                 static_cast<std::int64_t>(tx::test::rng()())};
  Tensor tk = Tensor::from_vector(k, {3}, Device::host());
  CHECK(tk.dtype() == tx::i64);
  CHECK(tk.to_vector<std::int64_t>() == k);
}

TEST_CASE("fill_bits sets every element to the poison pattern") {
  for (DType t : kAllDTypes) {
    CAPTURE(t.name());
    const auto n = static_cast<std::int64_t>(random_extent(1, 100));
    Tensor x =
        Tensor::from_doubles(random_for(t, static_cast<std::size_t>(n)), {n}, t, Device::host());
    const std::uint64_t pattern = tx::test::poison_bits(t);
    x.fill_bits(pattern);
    const std::vector<std::uint8_t> bytes = x.to_bytes();
    const auto es = static_cast<std::size_t>(t.bytes());
    bool all = true;
    for (std::size_t i = 0; i < bytes.size(); i += es)
      all = all && std::memcmp(bytes.data() + i, &pattern, es) == 0;
    CHECK(all);
    if (t.is_float())
      for (double v : x.to_doubles()) CHECK(std::isnan(v));
  }
}

TEST_CASE("to(host) of a host tensor is the same tensor") {
  Tensor x = Tensor::from_doubles(tx::test::random_values(24, tx::f32), {2, 3, 4}, tx::f32,
                                  Device::host());
  Tensor y = x.to(Device::host());
  CHECK(y.data_ptr() == x.data_ptr());
  CHECK(y.shape() == x.shape());
  CHECK(y.dtype() == x.dtype());
  // Shared storage: a write through one handle shows through the other,
  // and the storage outlives the first handle.
  const std::vector<double> v = tx::test::random_values(24, tx::f32);
  const std::vector<std::uint8_t> bytes =
      Tensor::from_doubles(v, {24}, tx::f32, Device::host()).to_bytes();
  x.copy_from_bytes(bytes.data(), bytes.size());
  x = Tensor();
  CHECK(y.to_doubles() == v);
}

TEST_CASE("numel, nbytes, alignment and the undefined tensor") {
  Tensor a = Tensor::empty({2, 3, 4}, tx::f16, Device::host());
  CHECK(a.numel() == 24);
  CHECK(a.nbytes() == 48);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data_ptr()) % 64 == 0);

  Tensor s = Tensor::empty({}, tx::f64, Device::host());  // a scalar
  CHECK(s.numel() == 1);
  CHECK(s.nbytes() == 8);

  Tensor z = Tensor::empty({0, 5}, tx::i32, Device::host());
  CHECK(z.numel() == 0);
  CHECK(z.nbytes() == 0);
  CHECK(z.data_ptr() != nullptr);
  CHECK(z.to_doubles().empty());
  CHECK(z.to_bytes().empty());

  Tensor b = Tensor::empty({7}, tx::boolean, Device::host());
  CHECK(b.nbytes() == 7);  // bool is one byte

  const auto n = static_cast<std::int64_t>(random_extent(1, 1000));
  Tensor r = Tensor::empty({n, 3}, tx::u64, Device::host());
  CHECK(r.numel() == 3 * n);
  CHECK(r.nbytes() == static_cast<std::size_t>(24 * n));

  Tensor u;
  CHECK_FALSE(u.defined());
  CHECK(u.numel() == 0);
  CHECK(u.nbytes() == 0);
  CHECK(u.data_ptr() == nullptr);
  CHECK_THROWS_AS(u.to(Device::host()), tx::Error);
  CHECK_THROWS_AS(u.fill_bits(0), tx::Error);
}

TEST_CASE("bad input raises tx::Error") {
  const std::vector<double> v = tx::test::random_values(6, tx::f32);
  CHECK_THROWS_AS(Tensor::from_doubles(v, {7}, tx::f32, Device::host()), tx::Error);
  CHECK_THROWS_AS(Tensor::from_doubles(v, {2, 2}, tx::f32, Device::host()), tx::Error);
  CHECK_THROWS_AS(Tensor::from_doubles(v, {-2, -3}, tx::f32, Device::host()), tx::Error);
  CHECK_THROWS_AS(Tensor::empty({4}, tx::void_t, Device::host()), tx::Error);
  CHECK_THROWS_AS(Tensor::empty({4}, tx::handle_t, Device::host()), tx::Error);
  CHECK_THROWS_AS(Tensor::empty({1 << 30, 1 << 30, 1 << 30}, tx::f64, Device::host()), tx::Error);
  std::vector<std::uint8_t> bytes(10);
  CHECK_THROWS_AS(Tensor::from_bytes(bytes.data(), bytes.size(), {3}, tx::f32, Device::host()),
                  tx::Error);
  Tensor x = Tensor::from_doubles(v, {6}, tx::f32, Device::host());
  CHECK_THROWS_AS(x.copy_from_bytes(bytes.data(), bytes.size()), tx::Error);
  try {
    Tensor::from_doubles(v, {7}, tx::f32, Device::host());
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.op() == "tx.Tensor.from_doubles");
    CHECK(e.reason().find("6 values") != std::string::npos);
    CHECK(e.reason().find("7 elements") != std::string::npos);
  }
}

TEST_CASE("Device names and TX_DEVICE") {
  CHECK(Device::host().str() == "host");
  CHECK(Device::cuda().str() == "cuda:0");
  CHECK(Device::cuda(3).str() == "cuda:3");
  CHECK(Device::cuda() != Device::host());
  {
    ScopedEnv e("TX_DEVICE", "host");
    CHECK(tx::default_device() == Device::host());
  }
  {
    ScopedEnv e("TX_DEVICE", "cpu");
    CHECK(tx::default_device() == Device::host());
  }
  {
    ScopedEnv e("TX_DEVICE", "cuda");
    CHECK(tx::default_device() == Device::cuda());
  }
  {
    ScopedEnv e("TX_DEVICE", "gpu");
    CHECK(tx::default_device() == Device::cuda());
  }
  {
    ScopedEnv e("TX_DEVICE", "tpu");
    try {
      tx::default_device();
      FAIL("expected a tx::Error");
    } catch (const tx::Error& err) {
      CHECK(err.operand() == "TX_DEVICE=tpu");
      const std::string all = err.what();
      for (const char* valid : {"cuda", "gpu", "host", "cpu"})
        CHECK(all.find(valid) != std::string::npos);
    }
  }
  {
    ScopedEnv e("TX_DEVICE", nullptr);
    CHECK(tx::default_device() ==
          (tx::runtime::cuda_available() ? Device::cuda() : Device::host()));
  }
}

TEST_CASE("a CUDA tensor without a GPU is a tx::Error, not a crash") {
  std::string why;
  if (tx::runtime::cuda_available(&why)) {
    MESSAGE("a GPU is usable here: checking that CUDA tensors work instead");
    Tensor x = Tensor::empty({16}, tx::f32, Device::cuda());
    CHECK(x.device() == Device::cuda());
    return;
  }
  MESSAGE("no GPU: " << why);
  // No driver at all, or a driver that finds no GPU.
  CHECK((why.rfind("libcuda.so.1 not found: ", 0) == 0 || why.rfind("cuInit failed: ", 0) == 0 ||
         why.find("no CUDA device") != std::string::npos));
  try {
    Tensor::empty({16}, tx::f32, Device::cuda());
    FAIL("expected a tx::Error");
  } catch (const tx::Error& e) {
    CHECK(e.operand() == "cuda:0");
    CHECK(e.reason().find(why) != std::string::npos);
  }
  const std::vector<double> v = tx::test::random_values(8, tx::f32);
  CHECK_THROWS_AS(Tensor::from_doubles(v, {8}, tx::f32, Device::cuda()), tx::Error);
  Tensor h = Tensor::from_doubles(v, {8}, tx::f32, Device::host());
  CHECK_THROWS_AS(h.to(Device::cuda()), tx::Error);
  CHECK_THROWS_AS(tx::runtime::current_device(), tx::Error);
  CHECK_THROWS_AS(tx::runtime::device_alloc(64), tx::Error);
  CHECK(tx::runtime::cuda_driver_version() == 0);
  // The host tensor is untouched by the failed copy.
  CHECK(h.to_doubles() == v);
}
