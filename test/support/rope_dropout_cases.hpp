// rope and dropout, on the device TX_RD_DEVICE (host_rope_dropout.cpp: the
// host JIT; gpu_rope_dropout.cpp: the GPU). Fresh random inputs each run.
//
// rope: every cos/sin cache against float64 formulas written here from
// vLLM's rotary_embedding.py (independently of tx's own inv_freq helpers);
// the rotation against a float64 forward_native (neox and GPT-J pairs,
// partial rotary, GQA, [T] and [B, S] positions, odd T, head sizes 64 / 128
// / 80, f32 / f16 / bf16 with their tolerances 1e-5 / 1e-3 / 1.6e-2); bad
// inputs name the op and the operand.
// dropout: the mask bit for bit against the C++ Philox reference (which
// matches Random123's known answers) for every strategy / threads / npt and
// aligned and unaligned offsets -- so the GPU and the host agree bit for bit
// --, the drop rate within 3 sigma at N = 4M, replays, offsets, kept values
// exactly x / (1 - p), p = 0 / 1, training = false.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "test_support.hpp"
#include "tx/ops/ops.hpp"
#include "tx/tx.hpp"

#ifndef TX_RD_DEVICE
#error "define TX_RD_DEVICE before including rope_dropout_cases.hpp"
#endif

namespace rdcase {

using namespace tx;

inline Device device() { return TX_RD_DEVICE; }

inline double tol(DType t) { return t == f32 ? 1e-5 : t == f16 ? 1e-3 : 1.6e-2; }

inline Tensor random_tensor(std::vector<std::int64_t> shape, DType t, double lo = -2,
                            double hi = 2) {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return Tensor::from_doubles(test::random_values(static_cast<std::size_t>(n), t, lo, hi),
                              std::move(shape), t, device());
}

// ------------------------------------------------ vLLM's formulas in float64

inline std::vector<double> vllm_inv_freq(int rot, double base) {
  std::vector<double> f(static_cast<std::size_t>(rot / 2));
  for (int i = 0; i < rot / 2; ++i)
    f[static_cast<std::size_t>(i)] = 1.0 / std::pow(base, 2.0 * i / rot);
  return f;
}
// Llama3RotaryEmbedding._compute_inv_freq
inline std::vector<double> vllm_llama3(int rot, double base, double factor, double low, double high,
                                       double orig) {
  std::vector<double> f = vllm_inv_freq(rot, base), out;
  const double low_wl = orig / low, high_wl = orig / high;
  for (double x : f) {
    double wl = 2 * std::numbers::pi / x;
    double smooth = low != high ? (orig / wl - low) / (high - low) : 0;
    out.push_back(wl < high_wl  ? x
                  : wl > low_wl ? x / factor
                                : (1 - smooth) * x / factor + smooth * x);
  }
  return out;
}
// YaRNScalingRotaryEmbedding._compute_inv_freq
inline std::vector<double> vllm_yarn(int rot, double base, double factor, double orig,
                                     double beta_fast, double beta_slow, double extrapolation) {
  auto corr = [&](double r) {
    return rot * std::log(orig / (r * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = std::max(std::floor(corr(beta_fast)), 0.0);
  double high = std::min(std::ceil(corr(beta_slow)), rot - 1.0);
  if (low == high) high += 0.001;
  std::vector<double> out;
  for (int i = 0; i < rot / 2; ++i) {
    double pf = std::pow(base, 2.0 * i / rot);
    double ramp = std::min(std::max((i - low) / (high - low), 0.0), 1.0);
    double mask = (1 - ramp) * extrapolation;
    out.push_back(1 / (factor * pf) * (1 - mask) + 1 / pf * mask);
  }
  return out;
}
// cos | sin rows for positions [0, rows), times mscale.
inline std::vector<double> vllm_cache(const std::vector<double>& inv, std::int64_t rows,
                                      double mscale) {
  const std::size_t half = inv.size();
  std::vector<double> c(static_cast<std::size_t>(rows) * 2 * half);
  for (std::int64_t p = 0; p < rows; ++p)
    for (std::size_t i = 0; i < half; ++i) {
      double a = static_cast<double>(p) * inv[i];
      c[static_cast<std::size_t>(p) * 2 * half + i] = std::cos(a) * mscale;
      c[static_cast<std::size_t>(p) * 2 * half + half + i] = std::sin(a) * mscale;
    }
  return c;
}

inline void check_cache(const Tensor& got, const std::vector<double>& want, DType t) {
  REQUIRE(got.numel() == static_cast<std::int64_t>(want.size()));
  double e = test::max_rel_error(got.to_doubles(), want, tol(t), tol(t));
  CHECK_MESSAGE(e <= 1.0, "cache error " << e << " (" << t.name() << ")");
}

// forward_native in float64 on the values as stored: positions (flattened),
// x [T, heads * hd] as doubles, the cache as stored.
inline std::vector<double> ref_rotate(const std::vector<double>& pos, const std::vector<double>& x,
                                      std::int64_t heads, std::int64_t hd, std::int64_t rot,
                                      bool neox, const std::vector<double>& cache,
                                      std::int64_t offset = 0, bool inverse = false) {
  std::vector<double> y = x;
  const std::int64_t half = rot / 2;
  for (std::size_t t = 0; t < pos.size(); ++t) {
    const auto row = static_cast<std::size_t>(static_cast<std::int64_t>(pos[t]) + offset) *
                     static_cast<std::size_t>(rot);
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::size_t b = (t * static_cast<std::size_t>(heads) + static_cast<std::size_t>(h)) *
                            static_cast<std::size_t>(hd);
      for (std::int64_t i = 0; i < half; ++i) {
        double c = cache[row + static_cast<std::size_t>(i)];
        double s = cache[row + static_cast<std::size_t>(half + i)] * (inverse ? -1 : 1);
        std::size_t i1 = b + static_cast<std::size_t>(neox ? i : 2 * i);
        std::size_t i2 = b + static_cast<std::size_t>(neox ? i + half : 2 * i + 1);
        y[i1] = x[i1] * c - x[i2] * s;
        y[i2] = x[i2] * c + x[i1] * s;
      }
    }
  }
  return y;
}

struct RopeCase {
  std::vector<std::int64_t> pos_shape;  // [T] or [B, S]
  std::int64_t heads, kv_heads, hd, rot;
  bool neox;
  bool three_d = false;  // q as [.., H, hd]
  DType pos_dtype = i64;
  bool inverse = false;
};

// Rotates random q / k with `cache` and checks against the float64 reference.
inline void check_rope(
    const RopeCase& c, DType t, const Tensor& cache, std::int64_t offset = 0,
    const std::function<void(const Tensor&, const Tensor&, const Tensor&)>& call = nullptr) {
  std::int64_t tokens = 1;
  for (auto e : c.pos_shape) tokens *= e;
  const std::int64_t rows = cache.shape()[0] - offset;
  std::vector<double> pv(static_cast<std::size_t>(tokens));
  std::uniform_int_distribution<std::int64_t> pd(0, rows - 1);
  for (auto& p : pv) p = static_cast<double>(pd(test::rng()));
  Tensor pos = Tensor::from_doubles(pv, c.pos_shape, c.pos_dtype, device());
  auto shape_of = [&](std::int64_t heads) {
    std::vector<std::int64_t> s = c.pos_shape;
    if (c.three_d) {
      s.push_back(heads);
      s.push_back(c.hd);
    } else {
      s.push_back(heads * c.hd);
    }
    return s;
  };
  Tensor q = random_tensor(shape_of(c.heads), t);
  Tensor k = c.kv_heads ? random_tensor(shape_of(c.kv_heads), t) : Tensor();
  std::vector<double> q0 = q.to_doubles(),
                      k0 = k.defined() ? k.to_doubles() : std::vector<double>{};
  if (call) {
    call(pos, q, k);
  } else {
    ops::RopeOptions o{.head_size = c.hd,
                       .rotary_dim = c.rot,
                       .is_neox = c.neox,
                       .inverse = c.inverse,
                       .position_offset = offset};
    ops::rope(pos, q, k, cache, o);
  }
  std::vector<double> cv = cache.to_doubles();
  auto wq = ref_rotate(pv, q0, c.heads, c.hd, c.rot, c.neox, cv, offset, c.inverse);
  double eq = test::max_rel_error(q.to_doubles(), wq, tol(t), tol(t));
  CHECK_MESSAGE(eq <= 1.0, "q error " << eq << " " << t.name() << " T " << tokens << " H "
                                      << c.heads << " hd " << c.hd << " rot " << c.rot
                                      << (c.neox ? " neox" : " gptj"));
  if (k.defined()) {
    auto wk = ref_rotate(pv, k0, c.kv_heads, c.hd, c.rot, c.neox, cv, offset, c.inverse);
    double ek = test::max_rel_error(k.to_doubles(), wk, tol(t), tol(t));
    CHECK_MESSAGE(ek <= 1.0, "k error " << ek << " " << t.name() << " Hkv " << c.kv_heads);
  }
}

}  // namespace rdcase

// ------------------------------------------------------------------ rope

TEST_CASE("rope: the default cache and vLLM's llama31 / yarn / longrope caches in float64") {
  using namespace rdcase;
  for (DType t : {f32, f16, bf16}) {
    check_cache(ops::rope_cache(128, 2048, 10000.0, t, device()),
                vllm_cache(vllm_inv_freq(128, 10000.0), 2048, 1.0), t);
    check_cache(ops::rope_cache(80, 777, 1e6, t, device()),
                vllm_cache(vllm_inv_freq(80, 1e6), 777, 1.0), t);
    // Llama 3.1's defaults (theta 500000, factor 8, 1, 4, 8192) on fewer rows.
    check_cache(ops::rope_cache_llama31(128, 20000, 500000.0, {}, t, device()),
                vllm_cache(vllm_llama3(128, 500000.0, 8, 1, 4, 8192), 20000, 1.0), t);
    check_cache(ops::rope_cache_llama31(64, 3000, 10000.0, {2.0, 1.0, 1.0, 512}, t, device()),
                vllm_cache(vllm_llama3(64, 10000.0, 2, 1, 1, 512), 3000, 1.0), t);
    // YaRN: rows = original * factor, mscale = 0.1 ln(factor) + 1.
    ops::YarnScaling y{.factor = 4.0, .original_max_position = 2048};
    check_cache(
        ops::rope_cache_yarn(128, 10000.0, y, t, device()),
        vllm_cache(vllm_yarn(128, 10000.0, 4, 2048, 32, 1, 1), 8192, 0.1 * std::log(4.0) + 1.0), t);
    ops::YarnScaling y2{.factor = 2.5,
                        .original_max_position = 1000,
                        .attn_factor = 0.9,
                        .beta_fast = 16,
                        .beta_slow = 2};
    check_cache(ops::rope_cache_yarn(64, 50000.0, y2, t, device()),
                vllm_cache(vllm_yarn(64, 50000.0, 2.5, 1000, 16, 2, 1), 2500,
                           (0.1 * std::log(2.5) + 1.0) * 0.9),
                t);
    // LongRoPE: short rows [0, L0) then long rows [0, L), both times sqrt(1 + ln(L/L0)/ln L0).
    const int rot = 96;
    ops::LongRopeScaling ls;
    ls.original_max_position = 256;
    for (int i = 0; i < rot / 2; ++i) {
      ls.short_factor.push_back(1.0 + 0.05 * i);
      ls.long_factor.push_back(1.5 + 0.5 * i);
    }
    const std::int64_t L = 1024;
    double amp = std::sqrt(1 + std::log(1024.0 / 256.0) / std::log(256.0));
    auto inv = vllm_inv_freq(rot, 10000.0), si = inv, li = inv;
    for (int i = 0; i < rot / 2; ++i) {
      si[static_cast<std::size_t>(i)] /= ls.short_factor[static_cast<std::size_t>(i)];
      li[static_cast<std::size_t>(i)] /= ls.long_factor[static_cast<std::size_t>(i)];
    }
    auto want = vllm_cache(si, 256, amp), lw = vllm_cache(li, L, amp);
    want.insert(want.end(), lw.begin(), lw.end());
    check_cache(ops::rope_cache_longrope(rot, L, 10000.0, ls, t, device()), want, t);
  }
}

TEST_CASE("rope: neox and GPT-J, partial rotary, GQA, [T] and [B, S], odd T, hd 64/128/80") {
  using namespace rdcase;
  const std::vector<RopeCase> cases = {
      {{33}, 4, 4, 128, 128, true},
      {{33}, 4, 4, 128, 128, false},
      {{7}, 8, 2, 64, 64, true},  // GQA
      {{7}, 8, 2, 64, 64, false},
      {{2, 5}, 4, 1, 80, 80, true, true},  // [B, S], q [B, S, H, hd]
      {{2, 5}, 4, 2, 80, 80, false},
      {{19}, 6, 3, 128, 64, true},  // partial rotary
      {{19}, 6, 3, 128, 32, false},
      {{3, 11}, 2, 2, 80, 48, true, false, i32},     // int32 positions, partial
      {{1}, 1, 0, 64, 64, true},                     // one token, no key
      {{13}, 4, 2, 64, 64, true, false, i64, true},  // inverse
      {{13}, 4, 2, 64, 64, false, true, i64, true},
      {{5}, 2, 1, 64, 2, true},  // one pair per head
  };
  for (DType t : {f32, f16, bf16})
    for (const RopeCase& c : cases) {
      for (DType cache_t : {f32, t}) {
        Tensor cache = ops::rope_cache(c.rot, 300, 10000.0, cache_t, device());
        check_rope(c, t, cache);
      }
    }
}

TEST_CASE("rope: the five named ops over their caches") {
  using namespace rdcase;
  for (DType t : {f32, f16, bf16}) {
    Tensor plain = ops::rope_cache(128, 512, 10000.0, f32, device());
    check_rope({{9}, 4, 2, 128, 128, true}, t, plain, 0,
               [&](const Tensor& p, const Tensor& q, const Tensor& k) {
                 ops::rope_neox(p, q, k, plain, 128);
               });
    check_rope({{9}, 4, 2, 128, 128, false}, t, plain, 0,
               [&](const Tensor& p, const Tensor& q, const Tensor& k) {
                 ops::rope_non_neox(p, q, k, plain, 128);
               });
    Tensor l31 = ops::rope_cache_llama31(128, 9000, 500000.0, {}, f32, device());
    check_rope({{9}, 4, 2, 128, 128, true}, t, l31, 0,
               [&](const Tensor& p, const Tensor& q, const Tensor& k) {
                 ops::rope_llama31(p, q, k, l31, 128);
               });
    Tensor yarn = ops::rope_cache_yarn(64, 10000.0, {.factor = 4, .original_max_position = 256},
                                       f32, device());
    check_rope({{9}, 4, 2, 128, 64, true}, t, yarn, 0,
               [&](const Tensor& p, const Tensor& q, const Tensor& k) {
                 ops::rope_yarn(p, q, k, yarn, 128, 64);
               });
    ops::LongRopeScaling ls;
    ls.original_max_position = 64;
    for (int i = 0; i < 32; ++i) {
      ls.short_factor.push_back(1.0 + 0.1 * i);
      ls.long_factor.push_back(2.0 + 0.3 * i);
    }
    Tensor lr = ops::rope_cache_longrope(64, 256, 10000.0, ls, f32, device());
    // Short prompts (every position <= 64): the short rows.
    {
      Tensor pos = Tensor::from_doubles({0, 5, 64, 17}, {4}, i64, device());
      Tensor q = random_tensor({4, 2 * 64}, t), k = random_tensor({4, 64}, t);
      auto q0 = q.to_doubles();
      ops::rope_longrope(pos, q, k, lr, 64, 64);
      auto w = ref_rotate({0, 5, 64, 17}, q0, 2, 64, 64, true, lr.to_doubles(), 0);
      CHECK(test::max_rel_error(q.to_doubles(), w, tol(t), tol(t)) <= 1.0);
    }
    // A long one (a position > 64): every token reads the long rows (offset 64).
    {
      Tensor pos = Tensor::from_doubles({0, 5, 200, 17}, {4}, i64, device());
      Tensor q = random_tensor({4, 2 * 64}, t), k = random_tensor({4, 64}, t);
      auto q0 = q.to_doubles(), k0 = k.to_doubles();
      ops::rope_longrope(pos, q, k, lr, 64, 64);
      auto w = ref_rotate({0, 5, 200, 17}, q0, 2, 64, 64, true, lr.to_doubles(), 64);
      CHECK(test::max_rel_error(q.to_doubles(), w, tol(t), tol(t)) <= 1.0);
      auto wk = ref_rotate({0, 5, 200, 17}, k0, 1, 64, 64, true, lr.to_doubles(), 64);
      CHECK(test::max_rel_error(k.to_doubles(), wk, tol(t), tol(t)) <= 1.0);
    }
  }
}

TEST_CASE("rope: partial rotary leaves the other columns bit for bit; inverse undoes it") {
  using namespace rdcase;
  Tensor cache = ops::rope_cache(32, 100, 10000.0, f32, device());
  Tensor pos = Tensor::from_doubles({3, 99, 0, 42, 7}, {5}, i64, device());
  Tensor q = random_tensor({5, 3 * 64}, f32);
  auto q0 = q.to_doubles();
  ops::rope(pos, q, cache, {.head_size = 64, .rotary_dim = 32});
  auto q1 = q.to_doubles();
  for (std::size_t i = 0; i < q0.size(); ++i)
    if (i % 64 >= 32) CHECK(q1[i] == q0[i]);
  ops::rope(pos, q, cache, {.head_size = 64, .rotary_dim = 32, .inverse = true});
  CHECK(test::max_rel_error(q.to_doubles(), q0, 1e-5, 1e-5) <= 1.0);
}

TEST_CASE("rope: bad inputs are tx errors naming the op and the operand") {
  using namespace rdcase;
  Tensor cache = ops::rope_cache(64, 100, 10000.0, f32, device());
  Tensor pos = Tensor::from_doubles({1, 2, 3}, {3}, i64, device());
  Tensor q = random_tensor({3, 4 * 64}, f16), k = random_tensor({3, 3 * 64}, f16);
  auto throws = [](auto f, const char* operand, const char* text) {
    try {
      f();
      FAIL("no error: " << text);
    } catch (const Error& e) {
      CHECK(e.op().rfind("tx.ops.rope", 0) == 0);
      CHECK(e.operand() == operand);
      CHECK_MESSAGE(std::string(e.what()).find(text) != std::string::npos, e.what());
    }
  };
  throws([&] { ops::rope(pos, q, k, cache, {.head_size = 64}); }, "k", "grouped-query");
  throws([&] { ops::rope(pos, q, cache, {.head_size = 48}); }, "q", "head_size");
  throws([&] { ops::rope(pos, q, cache, {.head_size = 0}); }, "head_size", "positive");
  throws([&] { ops::rope(pos, q, cache, {.head_size = 64, .rotary_dim = 128}); }, "rotary_dim",
         "larger than head_size");
  throws([&] { ops::rope(pos, q, cache, {.head_size = 64, .rotary_dim = 7}); }, "rotary_dim",
         "even");
  throws([&] { ops::rope(pos, q, cache, {.head_size = 64, .rotary_dim = 32}); }, "cos_sin_cache",
         "rotary_dim = 32");
  throws(
      [&] {
        ops::rope(pos, random_tensor({4, 64}, f16), cache, {.head_size = 64});
      },
      "q", "positions' shape");
  throws(
      [&] {
        ops::rope(pos, random_tensor({3, 64}, f8e4m3), cache, {.head_size = 64});
      },
      "q", "not supported");
  throws(
      [&] {
        ops::rope(pos, q, random_tensor({3, 64}, f32), cache, {.head_size = 64});
      },
      "k", "dtype");
  throws(
      [&] {
        ops::rope(Tensor::from_doubles({1, 2, 3}, {3}, f32, device()), q, cache, {.head_size = 64});
      },
      "positions", "int64 or int32");
  throws(
      [&] {
        ops::rope(pos, q, ops::rope_cache(64, 100, 10000.0, bf16, device()), {.head_size = 64});
      },
      "cos_sin_cache", "float32 or q's dtype");
  throws([&] { ops::rope(pos, q.transpose(0, 1), cache, {.head_size = 64}); }, "q",
         "positions' shape");
  throws([&] { ops::rope_cache(63, 10); }, "rotary_dim", "even");
  ops::LongRopeScaling ls{.short_factor = {1, 2}, .long_factor = {1}, .original_max_position = 8};
  throws([&] { ops::rope_cache_longrope(4, 16, 10000.0, ls); }, "long_factor", "rotary_dim / 2");
  if (device() == Device::host()) {
    // Host positions are checked before anything is written.
    Tensor bad = Tensor::from_doubles({1, 100, 3}, {3}, i64, device());
    auto q0 = q.to_doubles();
    throws([&] { ops::rope(bad, q, cache, {.head_size = 64}); }, "positions",
           "outside the cache's 100 rows");
    CHECK(q.to_doubles() == q0);
  }
}

// ---------------------------------------------------------------- dropout

TEST_CASE("dropout: Philox4x32-10 matches Random123's known answers") {
  auto kat = [](std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k,
                std::array<std::uint32_t, 4> want) {
    std::uint32_t out[4];
    tx::ops::philox4x32_10(c.data(), k.data(), out);
    for (int i = 0; i < 4; ++i) CHECK(out[i] == want[static_cast<std::size_t>(i)]);
  };
  kat({0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  kat({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
      {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  kat({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
      {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

namespace rdcase {
// Checks y and the mask of dropout(x, p, seed, offset) element by element:
// the mask against the C++ reference, kept values exactly x / (1 - p).
inline void check_dropout(const Tensor& x, double p, std::uint64_t seed, std::int64_t offset,
                          const ops::Config& cfg = {}, DType mask_t = u8) {
  auto r = ops::dropout(x, p, seed, offset, {.mask = true, .mask_dtype = mask_t, .config = cfg});
  auto xv = x.to_doubles(), yv = r.y.to_doubles(), mv = r.mask.to_doubles();
  const float q = static_cast<float>(1.0 - p);
  std::size_t bad_mask = 0, bad_y = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    bool keep = ops::dropout_keep(seed, static_cast<std::uint64_t>(offset) + i, p);
    if ((mv[i] != 0) != keep) ++bad_mask;
    double want =
        keep ? quantize(static_cast<double>(static_cast<float>(xv[i]) / q), x.dtype()) : 0.0;
    if (yv[i] != want) ++bad_y;
  }
  CHECK_MESSAGE(bad_mask == 0, bad_mask << " mask bits differ from the reference (n " << xv.size()
                                        << ", offset " << offset << ", " << x.dtype().name()
                                        << ")");
  CHECK_MESSAGE(bad_y == 0, bad_y << " outputs are not x / (1 - p) or 0");
}
}  // namespace rdcase

TEST_CASE("dropout: the mask bit for bit as Philox says, for every strategy, threads and npt") {
  using namespace rdcase;
  using S = ops::Strategy;
  const std::uint64_t seed = test::rng()() | (1ull << 40);
  for (DType t : {f32, f16, bf16, f8e4m3, f8e5m2})
    for (std::int64_t n : {1, 3, 4097, 33333}) {
      Tensor x = random_tensor({n}, t);
      for (std::int64_t offset : {std::int64_t{0}, std::int64_t{5}, std::int64_t{(1ll << 34) + 8}})
        check_dropout(x, 0.3, seed, offset);
    }
  Tensor x = random_tensor({3, 4099}, f32);
  for (ops::Config c :
       {ops::Config{.strategy = S::direct, .threads = 128},
        ops::Config{.strategy = S::explicit_parallel, .num_per_thread = 4},
        ops::Config{.strategy = S::explicit_parallel, .threads = 64, .num_per_thread = 8},
        ops::Config{.strategy = S::register_copy, .num_per_thread = 2},
        ops::Config{.strategy = S::register_copy, .threads = 512, .num_per_thread = 8},
        ops::Config{.strategy = S::register_copy, .threads = 32, .num_per_thread = 16}})
    for (std::int64_t offset : {0, 12, 3}) check_dropout(x, 0.5, seed, offset, c, boolean);
}

// Kept values are x / (1 - p) to the bit, also where the kernel's
// Markstein division leaves its fast range: signed zeros, infinities, NaN,
// values so small that the remainder underflows (f32 and bf16 hold them),
// and quotients that overflow; a p near 1 makes r = 1 / (1 - p) huge.
TEST_CASE("dropout: x / (1 - p) to the bit for zeros, infinities, NaN, tiny and huge x") {
  using namespace rdcase;
  const std::uint64_t seed = test::rng()();
  for (DType t : {f32, bf16, f16, f8e5m2, f8e4m3})
    for (double p : {0.3, 0.999999}) {
      CAPTURE(t.name());
      CAPTURE(p);
      std::vector<double> base{0.0,      -0.0,      INFINITY, -INFINITY, NAN,     1.0,   -1.5,
                               0x1p-110, -0x1p-130, 0x1p-149, 3.0e38,    -3.3e38, 6.0e4, 1e-7};
      // 64 elements per pattern repeat, so that each value meets several keep bits.
      std::vector<double> v;
      for (int rep = 0; rep < 64; ++rep)
        for (double b : base) v.push_back(b * (rep % 2 ? 1.0 : 0.75));
      Tensor x = Tensor::from_doubles(v, {static_cast<std::int64_t>(v.size())}, t, device());
      const std::vector<double> xv = x.to_doubles();  // as the dtype holds them
      for (std::int64_t offset : {std::int64_t{0}, std::int64_t{3}}) {
        auto r = ops::dropout(x, p, seed, offset, {.mask = true});
        const std::vector<double> yv = r.y.to_doubles(), mv = r.mask.to_doubles();
        const float q = static_cast<float>(1.0 - p);
        std::size_t bad = 0, first = 0;
        for (std::size_t i = 0; i < xv.size(); ++i) {
          const float want32 = mv[i] != 0 ? static_cast<float>(xv[i]) / q : 0.0f;
          const double want = quantize(static_cast<double>(want32), t);
          const bool same = (std::isnan(want) && std::isnan(yv[i])) ||
                            (yv[i] == want && std::signbit(yv[i]) == std::signbit(want));
          if (!same && bad++ == 0) first = i;
        }
        CHECK_MESSAGE(bad == 0, bad << " values differ; first x = " << xv[first] << ": got "
                                    << yv[first] << " (offset " << offset << ")");
      }
    }
}

TEST_CASE("dropout: drop rate within 3 sigma at N = 4M; replays; offsets") {
  using namespace rdcase;
  const std::int64_t n = 4 << 20;
  Tensor x = random_tensor({1024, 4096}, f32, 0.5, 2.0);
  const std::uint64_t seed = test::rng()();
  for (double p : {0.1, 0.3, 0.5}) {
    auto r = ops::dropout(x, p, seed, 0, {.mask = true});
    auto m = r.mask.to_doubles();
    double dropped = 0;
    for (double v : m) dropped += v == 0;
    double rate = dropped / static_cast<double>(n);
    double sigma = std::sqrt(p * (1 - p) / static_cast<double>(n));
    CHECK_MESSAGE(std::abs(rate - p) <= 3 * sigma, "p " << p << " rate " << rate);
    // Same (seed, offset): the same mask and values.
    auto again = ops::dropout(x, p, seed, 0, {.mask = true});
    CHECK(again.mask.to_bytes() == r.mask.to_bytes());
    CHECK(again.y.to_bytes() == r.y.to_bytes());
  }
  // Another offset (advanced by the element count, as a generator would): another mask.
  auto a = ops::dropout(x, 0.5, seed, 0, {.mask = true}).mask.to_doubles();
  auto b = ops::dropout(x, 0.5, seed, n, {.mask = true}).mask.to_doubles();
  double same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  CHECK(std::abs(same / static_cast<double>(n) - 0.5) < 0.01);
  // Another seed: another mask.
  auto c = ops::dropout(x, 0.5, seed + 1, 0, {.mask = true}).mask.to_doubles();
  same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == c[i];
  CHECK(std::abs(same / static_cast<double>(n) - 0.5) < 0.01);
}

TEST_CASE("dropout: p = 0, p = 1, training = false; bad inputs") {
  using namespace rdcase;
  for (DType t : {f32, bf16, f8e5m2}) {
    Tensor x = random_tensor({7, 33}, t);
    auto r0 = ops::dropout(x, 0.0, 1, 0, {.mask = true});
    CHECK(r0.y.to_bytes() == x.to_bytes());
    for (double m : r0.mask.to_doubles()) CHECK(m == 1);
    auto r1 = ops::dropout(x, 1.0, 1, 0, {.mask = true});
    for (double v : r1.y.to_doubles()) CHECK(v == 0);
    for (double m : r1.mask.to_doubles()) CHECK(m == 0);
    auto e = ops::dropout(x, 0.5, 1, 0, {.training = false});
    CHECK(e.y.data_ptr() == x.data_ptr());
  }
  Tensor x = random_tensor({8}, f32);
  auto throws = [](auto f, const char* operand, const char* text) {
    try {
      f();
      FAIL("no error: " << text);
    } catch (const Error& e) {
      CHECK(e.op() == "tx.ops.dropout");
      CHECK(e.operand() == operand);
      CHECK_MESSAGE(std::string(e.what()).find(text) != std::string::npos, e.what());
    }
  };
  throws([&] { ops::dropout(x, 1.5, 1); }, "p", "[0, 1]");
  throws([&] { ops::dropout(x, -0.1, 1); }, "p", "[0, 1]");
  throws([&] { ops::dropout(x, std::nan(""), 1); }, "p", "[0, 1]");
  throws(
      [&] {
        ops::dropout(Tensor::from_doubles({1, 2}, {2}, i32, device()), 0.5, 1);
      },
      "x", "not supported");
  throws([&] { ops::dropout(x, 0.5, 1, -4); }, "offset", ">= 0");
  throws([&] { ops::dropout(x, 0.5, 1, 0, {.mask = true, .mask_dtype = f32}); }, "mask_dtype",
         "uint8 or bool");
  Tensor y = Tensor::empty({9}, f32, device());
  throws([&] { ops::dropout(x, 0.5, 1, 0, y); }, "y", "shape (8,)");
}

TEST_CASE("ops: the op table lists seed 004's 72 ops, rope and dropout included") {
  auto names = tx::ops::op_names();
  CHECK(names.size() == 72);
  for (const char* n :
       {"rope_neox", "rope_non_neox", "rope_llama31", "rope_yarn", "rope_longrope", "dropout"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  // They are not elementwise: run() refuses them with a pointer to their API.
  tx::Tensor x = rdcase::random_tensor({4}, tx::f32);
  CHECK_THROWS_WITH_AS(tx::ops::run("dropout", {x}, {0.5, 1, 0}),
                       doctest::Contains("tx::ops::dropout"), tx::Error);
}
