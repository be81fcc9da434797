// The operator library without running a kernel (so on every machine): the
// code it generates and its kernel cache.
//
//  - Odd sizes keep their vector access: a 1-D tensor of 4097 or 999983
//    elements (no multiple of the vector width) is read and written with
//    128-bit transfers by every CTA but the last, which runs the scalar
//    epilogue. Checked in the PTX from NVRTC (needs no GPU): the odd size has
//    as many ld.global(.nc).v4 / st.global.v4 as a size with no tail at all
//    (.nc: the generic kernels declare their buffers __restrict__).
//  - Compiles once: building the same (op, dtype, shapes, config) twice is
//    one compile and one cache hit (ops::cache_stats), and the two share the
//    kernel.
#include <doctest/doctest.h>

#include <optional>
#include <regex>
#include <sstream>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

using namespace tx;

namespace {

int count(const std::string& s, const std::string& re) {
  std::regex r(re);
  return static_cast<int>(
      std::distance(std::sregex_iterator(s.begin(), s.end(), r), std::sregex_iterator()));
}

// The op's kernel for 1-D inputs of n elements (built, not run: the host
// device compiles lazily and never needs a GPU for the PTX).
ops::Elementwise build(const std::string& op, int inputs, std::int64_t n, DType t,
                       ops::Config cfg = {}) {
  return ops::Elementwise(op, std::vector<std::vector<std::int64_t>>(inputs, {n}), t, {}, cfg,
                          Device::host());
}

}  // namespace

TEST_CASE("ops: one shape-generic kernel serves every size, with 128-bit accesses") {
  for (DType t : {f32, f16, bf16, f8e4m3}) {
    for (auto [op, inputs] : {std::pair<const char*, int>{"exp", 1}, {"add", 2}}) {
      CAPTURE(t.name());
      CAPTURE(op);
      ops::Elementwise first = build(op, inputs, 1 << 20, t);
      const auto& cfg = first.config();
      std::string p = first.kernel().ptx("sm_90a");
      // Whole chunks: 16 bytes per transfer, npt * bytes / 16 per operand
      // (fp8 exp looks up by table: four chunks per thread, see nary_generic.cpp).
      const bool lut = first.kernel().name().find("_lut") != std::string::npos;
      CHECK(lut == (t == f8e4m3 && std::string(op) == "exp"));
      int per = std::max(1, cfg.num_per_thread * t.bytes() / 16) * (lut ? 4 : 1);
      CHECK(count(p, R"(ld\.global(\.nc)?\.v4)") == inputs * per);
      CHECK(count(p, R"(st\.global\.v4)") == per);
      // The chunk that straddles n: guarded element accesses.
      CHECK(count(p, R"(ld\.global(\.nc)?\.(u8|u16|b16|f32|u32|b32|b8))") >= inputs);
      std::string cuda = first.kernel().cuda_source();
      CHECK(cuda.find("int n)") != std::string::npos);  // n is an argument, not a constant
      for (std::int64_t n : {1, 7, 8, 4097, 999983}) {
        CAPTURE(n);
        ops::Elementwise other = build(op, inputs, n, t);
        CHECK(&other.kernel().info() == &first.kernel().info());  // the same kernel
      }
    }
  }
}

TEST_CASE("ops: odd 1-D sizes keep 128-bit loads and stores outside the tail CTA (exact shapes)") {
  const ops::Config exact{.exact_shape = true};
  for (DType t : {f32, f16, bf16, f8e4m3}) {
    for (auto [op, inputs] : {std::pair<const char*, int>{"exp", 1}, {"add", 2}}) {
      CAPTURE(t.name());
      CAPTURE(op);
      // A size that is a whole number of CTA chunks: no tail, vector body only.
      ops::Elementwise whole = build(op, inputs, 1 << 20, t, exact);
      const auto& cfg = whole.config();
      std::int64_t chunk = static_cast<std::int64_t>(cfg.threads) * cfg.num_per_thread;
      REQUIRE((1 << 20) % chunk == 0);
      std::string pw = whole.kernel().ptx("sm_90a");
      int loads = count(pw, R"(ld\.global(\.nc)?\.v4)"), stores = count(pw, R"(st\.global\.v4)");
      // 16 bytes per transfer: npt * bytes / 16 of them per operand.
      int per = std::max(1, cfg.num_per_thread * t.bytes() / 16);
      CHECK(loads == inputs * per);
      CHECK(stores == per);
      for (std::int64_t n : {4097, 999983}) {
        CAPTURE(n);
        REQUIRE(n % chunk != 0);
        ops::Elementwise odd = build(op, inputs, n, t, exact);
        // In the CUDA: each input's chunk read as 16-byte vectors...
        std::string cuda = odd.kernel().cuda_source();
        for (int k = 0; k < inputs; ++k)
          CHECK(cuda.find("(const uint4*)(&x" + std::to_string(k) + "[base") != std::string::npos);
        // ...and in the PTX as many vector transfers as without a tail.
        std::string p = odd.kernel().ptx("sm_90a");
        CHECK(count(p, R"(ld\.global(\.nc)?\.v4)") == loads);
        CHECK(count(p, R"(st\.global\.v4)") == stores);
        // The scalar epilogue is there too: guarded element loads.
        CHECK(count(p, R"(ld\.global(\.nc)?\.(u8|u16|b16|f32|u32|b32|b8))") >= inputs);
      }
    }
  }
}

TEST_CASE("ops: a broadcast operand with odd rows keeps vector access for the flat operand") {
  // (5, 7) + (1, 7) in f32: the innermost extent 7 is no multiple of 4, so
  // the broadcast side is gathered; the flat side still loads 128 bits.
  ops::Elementwise e("add", {{3001, 7}, {1, 7}}, f32, {}, {}, Device::host());
  std::string p = e.kernel().ptx("sm_90a");
  CHECK(count(p, R"(ld\.global(\.nc)?\.v4)") == 1);
  CHECK(count(p, R"(st\.global\.v4)") == 1);
}

TEST_CASE("ops: building the same op twice compiles once") {
  // A shape no other case here uses, so the first build is a miss.
  const std::vector<std::vector<std::int64_t>> shapes{{37, 129}, {129}};
  ops::CacheStats s0 = ops::cache_stats();
  ops::Elementwise a("mul", shapes, bf16, {}, {}, Device::host());
  ops::CacheStats s1 = ops::cache_stats();
  CHECK(s1.compiles == s0.compiles + 1);
  CHECK(s1.hits == s0.hits);
  ops::Elementwise b("mul", shapes, bf16, {}, {}, Device::host());
  ops::CacheStats s2 = ops::cache_stats();
  CHECK(s2.compiles == s1.compiles);
  CHECK(s2.hits == s1.hits + 1);
  // One kernel: its lowered IR and its GPU binary (built on first launch) are shared.
  CHECK(&a.kernel().info() == &b.kernel().info());

  // The defaults spelled out are the same config: still no compile.
  ops::Config explicit_cfg = a.config();
  ops::Elementwise c("mul", shapes, bf16, {}, explicit_cfg, Device::host());
  CHECK(ops::cache_stats().compiles == s2.compiles);
  CHECK(&c.kernel().info() == &a.kernel().info());

  // Another shape of the same class (coalesced rank, broadcast pattern,
  // innermost extent a multiple of the vector or not): the same kernel.
  ops::Elementwise same_class("mul", {{5, 131}, {131}}, bf16, {}, {}, Device::host());
  CHECK(ops::cache_stats().compiles == s2.compiles);
  CHECK(&same_class.kernel().info() == &a.kernel().info());

  // Any part of the key changed: a compile each.
  ops::Elementwise d("mul", shapes, f16, {}, {}, Device::host());
  ops::Elementwise e("mul", {{37, 129}, {37, 1}}, bf16, {}, {}, Device::host());
  ops::Elementwise f("mul", shapes, bf16, {}, {.threads = 64}, Device::host());
  ops::Elementwise g("add", shapes, bf16, {}, {}, Device::host());
  ops::Elementwise h("leaky_relu", {{37, 129}}, bf16, {0.25}, {}, Device::host());
  ops::Elementwise i("leaky_relu", {{37, 129}}, bf16, {0.5}, {}, Device::host());
  ops::CacheStats s3 = ops::cache_stats();
  CHECK(s3.compiles == s2.compiles + 6);
  CHECK(&h.kernel().info() != &i.kernel().info());
}

TEST_CASE("ops: the functional forms reuse the cached kernel too") {
  if (!runtime::host_jit_available()) {
    // Launching needs the host JIT here; the Elementwise case above covers the cache.
    MESSAGE("no host JIT: launches not checked");
    return;
  }
  Tensor x = Tensor::from_doubles(test::random_values(999, f32), {999}, f32, Device::host());
  ops::CacheStats s0 = ops::cache_stats();
  Tensor y1 = ops::silu(x);
  ops::CacheStats s1 = ops::cache_stats();
  Tensor y2 = ops::silu(x);
  ops::CacheStats s2 = ops::cache_stats();
  CHECK(s1.compiles == s0.compiles + 1);
  CHECK(s2.compiles == s1.compiles);
  CHECK(s2.hits == s1.hits + 1);
  CHECK(y1.to_bytes() == y2.to_bytes());
  Tensor a1 = ops::alibi(6, 9, f32, Device::host());
  ops::CacheStats s3 = ops::cache_stats();
  Tensor a2 = ops::alibi(6, 9, f32, Device::host());
  CHECK(ops::cache_stats().compiles == s3.compiles);
  CHECK(a1.to_bytes() == a2.to_bytes());
}

// PyTorch's promotion table (c10/core/ScalarType.cpp, _promoteTypesLookup),
// written out here as PyTorch prints it, row by row: tx's promote_types must
// give every entry.
TEST_CASE("ops: promote_types is PyTorch's table, and refuses what PyTorch refuses") {
  const std::vector<DType> order = {u8, i8, i16, i32, i64, f16, f32, f64, boolean, bf16};
  const char* table[] = {
      /* u8   */ "u8  i16 i16 i32 i64 f16 f32 f64 u8  bf16",
      /* i8   */ "i16 i8  i16 i32 i64 f16 f32 f64 i8  bf16",
      /* i16  */ "i16 i16 i16 i32 i64 f16 f32 f64 i16 bf16",
      /* i32  */ "i32 i32 i32 i32 i64 f16 f32 f64 i32 bf16",
      /* i64  */ "i64 i64 i64 i64 i64 f16 f32 f64 i64 bf16",
      /* f16  */ "f16 f16 f16 f16 f16 f16 f32 f64 f16 f32",
      /* f32  */ "f32 f32 f32 f32 f32 f32 f32 f64 f32 f32",
      /* f64  */ "f64 f64 f64 f64 f64 f64 f64 f64 f64 f64",
      /* bool */ "u8  i8  i16 i32 i64 f16 f32 f64 bool bf16",
      /* bf16 */ "bf16 bf16 bf16 bf16 bf16 f32 f32 f64 bf16 bf16",
  };
  for (std::size_t r = 0; r < order.size(); ++r) {
    std::istringstream row(table[r]);
    for (std::size_t c = 0; c < order.size(); ++c) {
      std::string want;
      row >> want;
      CAPTURE(order[r].name());
      CAPTURE(order[c].name());
      CHECK(ops::promote_types(order[r], order[c]).short_name() == want);
    }
  }
  // float8 promotes with nothing but itself; uint16/32/64 with floats only.
  CHECK_THROWS_WITH_AS(ops::promote_types(f8e4m3, f32),
                       doctest::Contains("PyTorch does not promote float8 types"), Error);
  CHECK_THROWS_AS(ops::promote_types(f8e4m3, f8e5m2), Error);
  CHECK(ops::promote_types(f8e5m2, f8e5m2) == f8e5m2);
  CHECK_THROWS_WITH_AS(ops::promote_types(u32, i32), doctest::Contains("uint16, uint32 or uint64"),
                       Error);
  CHECK_THROWS_AS(ops::promote_types(boolean, u64), Error);
  CHECK(ops::promote_types(u16, f16) == f16);
  CHECK(ops::promote_types(bf16, u64) == bf16);
}

TEST_CASE("ops: result_type ranks tensors over 0-dim tensors over scalars, and can_cast") {
  using K = ops::PromotionOperand::Kind;
  auto rt = [](std::vector<ops::PromotionOperand> o) { return ops::result_type(o); };
  auto tensor = [](DType t) { return ops::PromotionOperand{t, K::tensor}; };
  auto zero = [](DType t) { return ops::PromotionOperand{t, K::zero_dim}; };
  auto scalar = [](ops::Scalar s) { return ops::PromotionOperand::of(s); };
  // Each as torch.result_type answers it.
  CHECK(rt({tensor(i32), scalar(2.5)}) == f32);    // a float scalar: the default float
  CHECK(rt({tensor(f16), scalar(2.5)}) == f16);    // the category only, not the width
  CHECK(rt({tensor(bf16), zero(f64)}) == bf16);    // a 0-dim float under a float tensor
  CHECK(rt({tensor(i32), zero(f64)}) == f64);      // ... under an integer tensor: promoted
  CHECK(rt({tensor(u8), zero(i64)}) == u8);        // same category: the tensor's
  CHECK(rt({tensor(u8), scalar(-1)}) == u8);       // uint8 + -1 stays uint8
  CHECK(rt({tensor(boolean), scalar(1)}) == i64);  // bool + int: int64
  CHECK(rt({tensor(boolean), zero(i8)}) == i8);
  CHECK(rt({tensor(boolean), scalar(true)}) == boolean);
  CHECK(rt({tensor(i64), scalar(true)}) == i64);
  CHECK(rt({zero(i8), scalar(2.5)}) == f32);
  CHECK(rt({zero(f16), scalar(2.5)}) == f16);  // a 0-dim float keeps its width over a scalar
  CHECK(rt({zero(i32), zero(i16)}) == i32);    // 0-dim tensors promote among themselves
  CHECK(rt({tensor(i8), tensor(u8), zero(i64), scalar(1)}) == i16);
  CHECK(rt({tensor(f8e4m3), scalar(2.5)}) == f8e4m3);
  CHECK(rt({tensor(f8e4m3), zero(f32)}) == f8e4m3);
  CHECK_THROWS_AS(rt({tensor(f8e4m3), tensor(f32)}), Error);
  CHECK_THROWS_AS(rt({tensor(u32), tensor(i32)}), Error);
  // The Tensor forms read 0-dim from the shape.
  CHECK(ops::result_type(Tensor::empty({3}, i32, Device::host()),
                         Tensor::empty({}, f64, Device::host())) == f64);
  CHECK(ops::result_type(Tensor::empty({3}, i32, Device::host()), ops::Scalar(0.5)) == f32);
  // torch.can_cast: not floating into integers or bool, nothing but bool into bool.
  CHECK(ops::can_cast(i32, f32));
  CHECK(ops::can_cast(f32, f16));
  CHECK(ops::can_cast(i64, u8));
  CHECK(ops::can_cast(boolean, f32));
  CHECK(ops::can_cast(boolean, boolean));
  CHECK_FALSE(ops::can_cast(f32, i32));
  CHECK_FALSE(ops::can_cast(bf16, u8));
  CHECK_FALSE(ops::can_cast(f32, boolean));
  CHECK_FALSE(ops::can_cast(i32, boolean));
}

// The conversion is part of the op's one kernel: f32 + bf16 loads the bf16
// operand as bf16 (vector loads of both) and converts it in registers.
TEST_CASE("ops: a mixed-dtype op is one kernel that converts in registers") {
  ops::Elementwise e("add", {{1 << 20}, {1 << 20}}, std::vector<DType>{f32, bf16}, {}, {},
                     Device::host());
  CHECK(e.dtype() == f32);
  CHECK(e.out_dtype() == f32);
  CHECK(e.kernel().name().find("_from_f32_bf16") != std::string::npos);
  const std::string p = e.kernel().ptx("sm_90a");
  // bf16 -> f32 is the bits shifted up by 16, one per element of the chunk.
  CHECK(count(p, R"(shl\.b32\s+%r\d+, %r\d+, 16;)") >= 4);
  // f32: 4 elements in one 16-byte load; bf16: the same 4 in one 8-byte load.
  CHECK(count(p, R"(ld\.global(\.nc)?\.v4\.(u32|f32|b32))") >= 1);
  CHECK(count(p, R"(ld\.global(\.nc)?\.v2\.(u32|b32))") +
            count(p, R"(ld\.global(\.nc)?\.v4\.(u16|b16))") >=
        1);
  // An out= of another dtype is its own kernel, named for it.
  ops::Elementwise into_f64("add", {{64}, {64}}, std::vector<DType>{bf16, bf16}, {}, {},
                            Device::host(), f64);
  CHECK(into_f64.dtype() == bf16);
  CHECK(into_f64.out_dtype() == f64);
  CHECK(into_f64.kernel().name().find("_to_f64") != std::string::npos);
  CHECK_THROWS_WITH_AS(ops::Elementwise("add", {{64}, {64}}, std::vector<DType>{f32, f32}, {}, {},
                                        Device::host(), i32),
                       doctest::Contains("can't be cast to the desired output type int32"), Error);
}

// The GPU side of promotion without a GPU: the kernels the mixed-dtype cases
// run (host_ops and gpu_ops check their values) generate CUDA that NVRTC
// compiles for sm_90a -- integer operands of a 16-bit op rounded to it, an
// int8 sum truncated before an int32 out=, a scalar read in f32, a bool
// operand, a 0-dim f64 operand -- and so does the f32 / f64 matmul kernel.
TEST_CASE("ops: mixed-dtype kernels and the f32 / f64 matmul compile for sm_90a") {
  struct Case {
    const char* op;
    std::vector<std::vector<std::int64_t>> shapes;
    std::vector<DType> dtypes;
    std::optional<DType> out;
  };
  const Case cases[] = {
      {"add", {{4099}, {4099}}, {i32, bf16}, std::nullopt},
      {"mul", {{33, 1, 7}, {5, 7}}, {boolean, f16}, std::nullopt},
      {"add", {{4099}, {4099}}, {i8, i8}, i32},
      {"add", {{4099}, {4099}}, {bf16, bf16}, f32},
      {"lt", {{300}, {300}}, {f16, bf16}, i64},
      {"div", {{257}, {257}}, {i32, i64}, std::nullopt},
      {"bitwise_xor", {{2, 3, 129}, {3, 1}}, {u8, i8}, std::nullopt},
      {"where", {{64, 1}, {64, 128}, {128}}, {boolean, i32, f16}, std::nullopt},
      {"add", {{7, 33}, {}}, {i32, f64}, std::nullopt},
      {"prelu", {{8, 16, 33}, {16}}, {bf16, f32}, std::nullopt},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    CAPTURE(c.dtypes.back().name());
    ops::Elementwise e(c.op, c.shapes, c.dtypes, {}, {}, Device::host(), c.out);
    CHECK(count(e.kernel().ptx("sm_90a"), R"(\.entry )") == 1);
  }
  // The narrow-int truncation is in the source: the int8 sum wraps before it widens.
  ops::Elementwise wrap("add", {{64}, {64}}, std::vector<DType>{i8, i8}, {}, {}, Device::host(),
                        i32);
  CHECK(wrap.kernel().cuda_source().find("(signed char)((int)(v0") != std::string::npos);
  for (DType t : {f32, f64}) {
    Kernel k = compile(ops::detail::matmul_simt_tiled(100, 70, 37, t), {.device = Device::host()});
    const std::string p = k.ptx("sm_90a");
    CHECK(count(p, R"(bar\.sync)") >= 2);                                     // the tiles' barriers
    CHECK(count(p, t == f32 ? R"(fma\.rn\.f32)" : R"(fma\.rn\.f64)") >= 16);  // 4 x 4 per k
  }
}
