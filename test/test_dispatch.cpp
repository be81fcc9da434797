// Dispatch: which variant each tile call takes, the vector widths the seeds
// promise, forcing a variant, and the exact reasons variants give when they
// decline.
#include <doctest/doctest.h>

#include "test_support.hpp"
#include "tx/tx.hpp"

#define TX_SAMPLE_NO_MAIN
#include "cta_sqrt_smem.cpp"
#include "thread_sum_local.cpp"
#include "warp_copy_reg.cpp"
#include "warp_sqrt_reg.cpp"
#include "warp_sum_shuffle.cpp"

using namespace tx;

namespace {

std::vector<std::string> variants_of(const PrimFunc& f) {
  std::vector<std::string> v;
  for (const auto& r : lowering::lower(f).dispatched) v.push_back(r.variant);
  return v;
}

// Every CopyBytes of a lowered kernel: (bytes, trip count of its loop).
std::vector<std::pair<int, std::int64_t>> transfers(const PrimFunc& f) {
  std::vector<std::pair<int, std::int64_t>> out;
  auto k = lowering::lower(f);
  std::function<void(const Stmt&, std::int64_t)> walk = [&](const Stmt& s, std::int64_t trips) {
    if (!s) return;
    if (auto* c = s.as<CopyBytesNode>()) out.push_back({c->bytes, trips});
    if (auto* l = s.as<ForNode>()) walk(l->body, trips * as_const_int(l->extent).value_or(-1));
    if (auto* q = s.as<SeqNode>())
      for (auto& x : q->seq) walk(x, trips);
    if (auto* l = s.as<LetStmtNode>()) walk(l->body, trips);
    if (auto* a = s.as<AllocateNode>()) walk(a->body, trips);
    if (auto* o = s.as<OriginNode>()) walk(o->body, trips);
    if (auto* i = s.as<IfThenElseNode>()) {
      walk(i->then_case, trips);
      walk(i->else_case, trips);
    }
  };
  walk(k.lowered->body, 1);
  return out;
}

// A warp round trip shared -> registers -> shared with rows of `regs` elements.
PrimFunc reg_roundtrip(DType t, std::int64_t regs) {
  return T::prim_func("rt", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32, regs}, t);
    T::thread_id({32});
    auto As = T::alloc_buffer({32, regs}, t, scope::shared);
    auto R =
        T::alloc_buffer({32, regs}, t, scope::local, TileLayout(S({32, regs}, {1 * laneid, 1})));
    Tx::warp::copy(As, A);
    T::cuda::cta_sync();
    Tx::warp::copy(R, As);
    Tx::warp::copy(As, R);
    T::cuda::cta_sync();
    Tx::warp::copy(A, As);
  });
}

}  // namespace

TEST_CASE("each seed program takes the variants its seed describes") {
  using V = std::vector<std::string>;
  CHECK(variants_of(warp_sqrt()) ==
        V{"copy/gmem_smem", "copy/reg", "elementwise/reg", "copy/reg", "copy/gmem_smem"});
  CHECK(variants_of(cta_sqrt()) == V{"copy/gmem_smem", "elementwise/smem", "copy/gmem_smem"});
  CHECK(variants_of(warp_copy_reg()) == V{"copy/reg", "elementwise/smem", "copy/reg"});
  CHECK(variants_of(thread_sum()) == V{"reduction/local"});
  CHECK(variants_of(warp_sum_shuffle()) == V{"copy/reg", "reduction/local", "copy/reg"});
}

TEST_CASE("copy/reg picks the seed 002 widths: widest-first, 128-bit when possible") {
  struct Row {
    DType t;
    std::int64_t regs;
    int bytes;
    std::int64_t outer;
  };
  for (Row r : {Row{f32, 8, 16, 2}, Row{f32, 16, 16, 4}, Row{f16, 8, 16, 1}, Row{f16, 16, 16, 2},
                Row{u8, 16, 16, 1}, Row{u8, 4, 4, 1}, Row{f32, 2, 8, 1}, Row{f32, 3, 4, 3}}) {
    CAPTURE(r.t.name());
    CAPTURE(r.regs);
    auto tr = transfers(reg_roundtrip(r.t, r.regs));
    REQUIRE(tr.size() == 4);
    // Entries 1 and 2 are the register copies.
    CHECK(tr[1].first == r.bytes);
    CHECK(tr[1].second == r.outer);
    CHECK(tr[2].first == r.bytes);
  }
}

TEST_CASE("copy/gmem_smem synthesizes [outer, threads, vec]") {
  auto tr = transfers(cta_sqrt());  // 1024 f32 over 256 threads: vec 4, outer 1
  REQUIRE(tr.size() >= 2);
  CHECK(tr[0] == std::pair<int, std::int64_t>{16, 1});
  auto w = transfers(warp_sqrt());  // 256 f32 over 32 threads: vec 4, outer 2
  CHECK(w[0] == std::pair<int, std::int64_t>{16, 2});
}

TEST_CASE("a count that does not divide the threads falls back to the scalar copy") {
  std::vector<std::string> warnings;
  static std::vector<std::string>* sink;
  sink = &warnings;
  set_warning_handler([](const std::string& m) { sink->push_back(m); });
  PrimFunc f = T::prim_func("odd", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {33}, f32);
    T::thread_id({32});
    auto As = T::alloc_buffer({33}, f32, scope::shared);
    Tx::warp::copy(As, A);
  });
  CHECK(variants_of(f) == std::vector<std::string>{"copy/fallback"});
  set_warning_handler(nullptr);
  REQUIRE(!warnings.empty());
  CHECK(warnings[0].find("copy/fallback") != std::string::npos);
}

TEST_CASE("a variant can be forced by name") {
  PrimFunc f = T::prim_func("forced", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    T::thread_id({32});
    auto As = T::alloc_buffer({64}, f32, scope::shared);
    Tx::warp::copy(As, A, {.variant = "fallback"});
  });
  set_warning_handler([](const std::string&) {});
  CHECK(variants_of(f) == std::vector<std::string>{"copy/fallback"});
  set_warning_handler(nullptr);

  PrimFunc g = T::prim_func("forced_bad", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {64}, f32);
    T::thread_id({32});
    auto As = T::alloc_buffer({64}, f32, scope::shared);
    Tx::warp::copy(As, A, {.variant = "reg"});
  });
  CHECK_THROWS_WITH_AS(lowering::lower(g),
                       doctest::Contains("forced variant \"reg\" does not apply"), Error);
}

TEST_CASE("when every variant declines, the error lists each with its reason") {
  int line = 0;
  PrimFunc f = T::prim_func("mixed", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 8}, f32);
    T::thread_id({32});
    auto As = T::alloc_buffer({32, 8}, f32, scope::shared);
    auto R = T::alloc_buffer({32, 8}, f32, scope::local, TileLayout(S({32, 8}, {1 * laneid, 1})));
    Tx::warp::copy(As, A);
    line = __LINE__ + 1;
    Tx::warp::sqrt(R, As);
  });
  try {
    lowering::lower(f);
    FAIL("expected a tx error");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(e.op() == "Tx.warp.sqrt");
    CHECK(m.find("elementwise/reg [10]: operand As: scope shared != local") != std::string::npos);
    CHECK(m.find("elementwise/smem [10]: operand R: scope local != shared") != std::string::npos);
    CHECK(m.find("call: Tx.warp.sqrt(R[0:32, 0:8], As[0:32, 0:8])") != std::string::npos);
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
}

TEST_CASE("reduction/local names the missing laneid replica") {
  PrimFunc f = T::prim_func("noreplica", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 4}, f32);
    T::thread_id({32});
    auto R = T::alloc_buffer({32, 4}, f32, scope::local, TileLayout(S({32, 4}, {1 * laneid, 1})));
    // D covers the warp, but its replica spans 8 lanes where the reduction crosses 32.
    auto D = T::alloc_buffer({4}, f32, scope::local,
                             TileLayout(S({4}, {8 * laneid}), tx::R({8}, {1 * laneid})));
    Tx::warp::copy(R, A);
    Tx::warp::sum(D, R, {.axes = {0}});
  });
  CHECK_THROWS_WITH_AS(lowering::lower(f), doctest::Contains("needs a laneid replica"), Error);

  // A thread-private destination is held whole by every lane: the butterfly fills it.
  PrimFunc g = T::prim_func("private_dst", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {32, 4}, f32);
    T::thread_id({32});
    auto R = T::alloc_buffer({32, 4}, f32, scope::local, TileLayout(S({32, 4}, {1 * laneid, 1})));
    auto D = T::alloc_buffer({4}, f32, scope::local);
    Tx::warp::copy(R, A);
    Tx::warp::sum(D, R, {.axes = {0}});
  });
  CHECK(variants_of(g) == std::vector<std::string>{"copy/reg", "reduction/local"});
}

TEST_CASE("reduction/local refuses cta scope and says what to use") {
  PrimFunc f = T::prim_func("cta_local", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {4}, f32);
    T::thread_id({64});
    auto R = T::alloc_buffer({4}, f32, scope::local);
    auto D = T::alloc_buffer({1}, f32, scope::local);
    for (Var i : T::serial(4)) R(i) = A(i);
    Tx::cta::sum(D, R);
  });
  CHECK_THROWS_WITH_AS(lowering::lower(f), doctest::Contains("does not support cta scope"), Error);
}

namespace {
// Barriers of a lowered kernel.
int barriers(const PrimFunc& f) {
  int n = 0;
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (!s) return;
    if (s.as<BarrierNode>()) ++n;
    if (auto* l = s.as<ForNode>()) walk(l->body);
    if (auto* q = s.as<SeqNode>())
      for (auto& x : q->seq) walk(x);
    if (auto* l = s.as<LetStmtNode>()) walk(l->body);
    if (auto* a = s.as<AllocateNode>()) walk(a->body);
    if (auto* o = s.as<OriginNode>()) walk(o->body);
    if (auto* i = s.as<IfThenElseNode>()) {
      walk(i->then_case);
      walk(i->else_case);
    }
  };
  walk(lowering::lower(f).lowered->body);
  return n;
}

// A CTA of `threads` sums a (threads, 4) register tile (thread t holds row t)
// into `dst`, once or in a loop.
PrimFunc cta_sum(int threads, const TileLayout& dst, bool in_loop,
                 const std::optional<TileLayout>& src = std::nullopt, int rows = 0) {
  rows = rows ? rows : threads;
  return T::prim_func("cta_sum", [&](Handle A_ptr) {
    auto A = T::match_buffer(A_ptr, {rows, 4}, f32);
    T::thread_id({threads});
    auto X = T::alloc_buffer({rows, 4}, f32, scope::local,
                             src.value_or(TileLayout(S({threads, 4}, {1 * axes::tx, 1}))));
    auto D = T::alloc_buffer({1}, f32, scope::local, dst);
    Tx::cta::copy(X, A);
    if (in_loop) {
      for (Var i : T::serial(2)) Tx::cta::sum(D, X, {.accum = true, .axes = {0, 1}});
    } else {
      Tx::cta::sum(D, X, {.axes = {0, 1}});
    }
  });
}
}  // namespace

TEST_CASE(
    "reduction/cross_warp: a CTA's registers into every thread, one barrier (two in a loop)") {
  const auto every = TileLayout(S({1}), R({256}, {1 * axes::tx}));
  CHECK(variants_of(cta_sum(256, every, false)) ==
        std::vector<std::string>{"copy/reg", "reduction/cross_warp"});
  CHECK(barriers(cta_sum(256, every, false)) == 1);
  CHECK(barriers(cta_sum(256, every, true)) == 2);
  // No thread axes at all: every thread holds the tile whole as well.
  CHECK(variants_of(cta_sum(128, TileLayout(S({1})), false)).back() == "reduction/cross_warp");

  // What it refuses, and why.
  CHECK_THROWS_WITH_AS(
      lowering::lower(cta_sum(256, TileLayout(S({1}), R({32}, {1 * laneid})), false)),
      doctest::Contains("reduction/cross_warp [10]: operand D: layout spreads over 32 "
                        "threads"),
      Error);
  // Half the threads hold the tile, the other half a copy: a sum would count it twice.
  CHECK_THROWS_WITH_AS(
      lowering::lower(cta_sum(256, every, false,
                              TileLayout(S({128, 4}, {1 * axes::tx, 1}), R({2}, {128 * axes::tx})),
                              128)),
      doctest::Contains("reduction/cross_warp [10]: operand X: has a replica"), Error);
  CHECK_THROWS_WITH_AS(lowering::lower(cta_sum(48, TileLayout(S({1})), false)),
                       doctest::Contains("needs whole warps"), Error);
}

TEST_CASE("a tile's local() view writes the thread's own registers, only register tiles have one") {
  PrimFunc f = T::prim_func("partials", [&](Handle A_ptr, Handle B_ptr) {
    auto A = T::match_buffer(A_ptr, {128}, f32);
    auto B = T::match_buffer(B_ptr, {1}, f32);
    auto tid = T::thread_id({128});
    auto P = T::alloc_buffer({128}, f32, scope::local, TileLayout(S({128}, {1 * axes::tx})));
    auto D = T::alloc_buffer({1}, f32, scope::local);
    P.local()(0) = A(tid) * A(tid);
    Tx::cta::sum(D, P);
    T::if_(tid == 0, [&] { B(0) = D(0); });
  });
  CHECK(variants_of(f) == std::vector<std::string>{"reduction/cross_warp"});
  int line = 0;
  try {
    (void)T::prim_func("shared_local", [&](Handle A_ptr) {
      T::match_buffer(A_ptr, {32}, f32);
      T::thread_id({32});
      auto S_ = T::alloc_buffer({32}, f32, scope::shared);
      line = __LINE__ + 1;
      S_.local()(0) = 1.0f;
    });
    FAIL("expected a tx error");
  } catch (const Error& e) {
    CHECK(e.op() == "T.local");
    CHECK(std::string(e.what()).find("only register (local) tiles") != std::string::npos);
    CHECK(e.loc().line == static_cast<unsigned>(line));
  }
}

TEST_CASE("tile scale and bias: printed as attributes, refused where an op takes none") {
  auto kernel = [](const std::function<void(TileBuffer, TileBuffer, TileBuffer)>& body) {
    return T::prim_func("sb", [&](Handle A_ptr) {
      auto A = T::match_buffer(A_ptr, {32, 8}, f32);
      T::thread_id({32});
      auto X = T::alloc_buffer({32, 8}, f32, scope::shared);
      auto Sc = T::alloc_buffer({32, 1}, f32, scope::shared);
      auto Ib = T::alloc_buffer({1, 8}, i32, scope::shared);
      Tx::warp::copy(X, A);
      body(X, Sc, Ib);
    });
  };
  PrimFunc ok = kernel([](TileBuffer X, TileBuffer Sc, TileBuffer) {
    Tx::warp::exp(X, X, {.scale = Sc.all(), .bias = 0.5f});
  });
  const std::string ir = to_string(ok);
  CHECK(ir.find("Tx.warp.exp(X[0:32, 0:8], X[0:32, 0:8], scale=Sc[0:32, 0:1], bias=0.5)") !=
        std::string::npos);
  CHECK(variants_of(ok).back() == "elementwise/smem");
  auto refused = [&](const std::function<void(TileBuffer, TileBuffer, TileBuffer)>& body,
                     const std::string& why) {
    CHECK_THROWS_WITH_AS(lowering::lower(kernel(body)), doctest::Contains(why.c_str()), Error);
  };
  refused(
      [](TileBuffer X, TileBuffer Sc, TileBuffer) { Tx::warp::copy(X, X, {.scale = Sc.all()}); },
      "copy takes no scale/bias");
  refused([](TileBuffer X, TileBuffer Sc, TileBuffer) { Tx::warp::sum(Sc, X, {.bias = Sc.all()}); },
          "reductions take no scale/bias");
  refused(
      [](TileBuffer X, TileBuffer Sc, TileBuffer) { Tx::warp::add(X, X, X, {.scale = Sc.all()}); },
      "add takes no scale/bias");
  refused([](TileBuffer X, TileBuffer, TileBuffer Ib) { Tx::warp::exp(X, X, {.bias = Ib.all()}); },
          "operand Ib: bias tiles need float dtypes");
  refused(
      [](TileBuffer X, TileBuffer, TileBuffer) {
        auto Wide = T::alloc_buffer({32, 9}, f32, scope::shared);
        Tx::warp::exp(X, X, {.scale = Wide.all()});
      },
      "operand Wide");
}

TEST_CASE("the registry lists every tile primitive of the core") {
  auto ops = lowering::Registry::global().ops();
  for (const char* op :
       {"copy", "zero", "fill", "sqrt", "exp", "exp2", "reciprocal", "silu", "add", "sub", "mul",
        "fdiv", "maximum", "minimum", "fma", "cast", "sum", "max", "min"})
    CHECK(std::find(ops.begin(), ops.end(), op) != ops.end());
}

// ------------------------------------------------------- tensor-core variants

namespace {

// One warp: gemm of A (M, K) and B (K, N) tiles of `t` into an f32 D, the
// operands in `a_scope` (local tiles take the frag:: layouts, or `a_layout`).
PrimFunc warp_gemm(std::int64_t M, std::int64_t N, std::int64_t K, DType t, MemScope a_scope,
                   std::string variant = {}, std::optional<TileLayout> a_layout = {}) {
  return T::prim_func("warp_gemm", [&](Handle a, Handle b, Handle d) {
    auto A = T::match_buffer(a, {M, K}, t);
    auto B = T::match_buffer(b, {K, N}, t);
    auto D = T::match_buffer(d, {M, N}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({32});
    auto Af =
        a_scope == MemScope::local
            ? T::alloc_buffer({M, K}, t, scope::local, a_layout ? *a_layout : frag::mma_a(M, K, t))
            : T::alloc_buffer({M, K}, t, scope::shared);
    auto Bf = T::alloc_buffer({K, N}, t, scope::local, frag::mma_b(K, N, t));
    auto Df = T::alloc_buffer({M, N}, f32, scope::local, frag::mma_c(M, N));
    Tx::warp::copy(Af, A.all());
    Tx::warp::copy(Bf, B.all());
    Tx::warp::gemm(Df, Af, Bf, {.variant = variant});
    Tx::warp::copy(D.all(), Df);
  });
}

std::string variant_of(const lowering::LoweredKernel& k, const std::string& op) {
  for (const auto& r : k.dispatched)
    if (r.call.find("." + op + "(") != std::string::npos) return r.variant;
  return "(none)";
}

}  // namespace

TEST_CASE("gemm dispatch: mma_sync on fragments, its reasons, and the fallback") {
  lowering::LowerOptions sm80{.arch = "sm_80"}, sm89{.arch = "sm_89"}, host{.host = true};
  CHECK(variant_of(lowering::lower(warp_gemm(32, 16, 32, bf16, MemScope::local), sm80), "gemm") ==
        "gemm/mma_sync");
  // The host runs no PTX: the same kernel lowers through gemm/fallback.
  CHECK(variant_of(lowering::lower(warp_gemm(32, 16, 32, bf16, MemScope::local), host), "gemm") ==
        "gemm/fallback");
  CHECK_THROWS_WITH_AS(
      lowering::lower(warp_gemm(32, 16, 32, bf16, MemScope::shared, "mma_sync"), sm80),
      doctest::Contains("stage with ldmatrix first"), Error);
  CHECK_THROWS_WITH_AS(
      lowering::lower(warp_gemm(16, 8, 32, f8e4m3, MemScope::local, "mma_sync"), sm80),
      doctest::Contains("fp8 mma (m16n8k32) needs sm_89"), Error);
  CHECK(variant_of(lowering::lower(warp_gemm(16, 8, 32, f8e4m3, MemScope::local), sm89), "gemm") ==
        "gemm/mma_sync");
  CHECK_THROWS_WITH_AS(
      lowering::lower(warp_gemm(16, 8, 16, f32, MemScope::local, "mma_sync",
                                TileLayout(S({16, 16}, {0, 1}), R({32}, {laneid}))),
                      sm80),
      doctest::Contains("tensor-core fragments hold 16-bit or 8-bit elements"), Error);
  // A register tile in the B fragment's layout is not an A fragment.
  CHECK_THROWS_WITH_AS(
      lowering::lower(
          warp_gemm(16, 8, 16, bf16, MemScope::local, "mma_sync", frag::mma_b(16, 16, bf16)), sm80),
      doctest::Contains("m16n8k16 A fragment needs lane"), Error);
  CHECK_THROWS_WITH_AS(lowering::lower(warp_gemm(16, 8, 24, bf16, MemScope::local, "mma_sync",
                                                 TileLayout(S({16, 24}, {24, 1}))),
                                       sm80),
                       doctest::Contains("k = 24 is not a positive multiple of 16"), Error);
}

TEST_CASE("ldmatrix and cp.async dispatch: what they take and their reasons") {
  auto kernel = [](DType t, MemScope dst_scope, std::string variant, bool async) {
    return T::prim_func("stage", [&](Handle a, Handle d) {
      auto A = T::match_buffer(a, {32, 32}, t);
      auto D = T::match_buffer(d, {32, 32}, t);
      T::device_entry();
      T::cta_id({1});
      T::thread_id({32});
      auto S1 = T::alloc_buffer({32, 32}, t, scope::shared,
                                TileLayout(S({32, 32}, {40, 1})));  // padded rows
      if (async) {
        if (dst_scope == MemScope::shared)
          Tx::warp::copy_async(S1.all(), A.all(), {.variant = variant});
        else
          Tx::warp::copy_async(D.all(), A.all(), {.variant = variant});
        T::cuda::commit_group();
        T::cuda::wait_group(0);
        T::cuda::warp_sync();
        Tx::warp::copy(D.all(), S1.all());
      } else {
        Tx::warp::copy(S1.all(), A.all());
        auto R = T::alloc_buffer({32, 32}, t, scope::local, frag::mma_a(32, 32, t));
        Tx::warp::copy(R.all(), S1.all(), {.variant = variant});
        Tx::warp::copy(D.all(), R.all());
      }
    });
  };
  lowering::LowerOptions sm80{.arch = "sm_80"}, sm70{.arch = "sm_70"}, host{.host = true};
  auto k = lowering::lower(kernel(f16, MemScope::shared, "", false), sm80);
  std::string ld;
  for (const auto& r : k.dispatched)
    if (r.call.find("R[") != std::string::npos && r.call.find("copy(R") != std::string::npos)
      ld = r.variant;
  CHECK(ld == "copy/ldstmatrix");
  CHECK(to_string(k.lowered).find("T.ptx.ldmatrix.x4(") != std::string::npos);
  CHECK_THROWS_WITH_AS(lowering::lower(kernel(f16, MemScope::shared, "ldstmatrix", false), sm70),
                       doctest::Contains("ldmatrix needs sm_75"), Error);
  CHECK_THROWS_WITH_AS(lowering::lower(kernel(f16, MemScope::shared, "ldstmatrix", false), host),
                       doctest::Contains("the host runs no PTX"), Error);
  auto a = lowering::lower(kernel(f16, MemScope::shared, "", true), sm80);
  CHECK(variant_of(a, "copy_async") == "copy_async/ldgsts");
  CHECK(to_string(a.lowered).find("T.ptx.cp_async(") != std::string::npos);
  CHECK(to_string(a.lowered).find("T.ptx.cp_async.wait_group(0)") != std::string::npos);
  CHECK(variant_of(lowering::lower(kernel(f16, MemScope::shared, "", true), host), "copy_async") ==
        "copy_async/sync");
  CHECK_THROWS_WITH_AS(lowering::lower(kernel(f16, MemScope::global, "ldgsts", true), sm80),
                       doctest::Contains("cp.async copies global -> shared"), Error);
  CHECK_THROWS_WITH_AS(lowering::lower(kernel(f16, MemScope::shared, "ldgsts", true), sm70),
                       doctest::Contains("cp.async needs sm_80"), Error);
  CHECK_THROWS_WITH_AS(T::prim_func("w", [&] { T::cuda::wait_group(9); }),
                       doctest::Contains("outside [0, 7]"), Error);
}

TEST_CASE("copy_async: counts that do not divide, extents known at launch, gemm/fallback in a loop") {
  lowering::LowerOptions sm80{.arch = "sm_80"};
  // 200 f32 over 128 threads: no 4-byte partition divides; cp.async declines.
  PrimFunc ragged = T::prim_func("ragged", [&](Handle a) {
    auto A = T::match_buffer(a, {200}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({128});
    auto S1 = T::alloc_buffer({200}, f32, scope::shared);
    Tx::cta::copy_async(S1.all(), A.all());
    T::cuda::commit_group();
    T::cuda::wait_group(0);
    T::cuda::cta_sync();
    Tx::cta::copy(A.all(), S1.all());
  });
  CHECK(variant_of(lowering::lower(ragged, sm80), "copy_async") == "copy_async/sync");
  // An extent known at launch: the copy is masked (whole tiles and a partial one), never past n.
  PrimFunc generic = T::prim_func("generic", [&](Handle a) {
    Var n = T::dim("n");
    auto A = T::match_buffer(a, {n}, f16);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({64});
    auto S1 = T::alloc_buffer({512}, f16, scope::shared);
    Tx::cta::copy_async(S1.all(), A[region(span(0, 512))]);
    T::cuda::commit_group();
    T::cuda::wait_group(0);
  });
  auto g = lowering::lower(generic, sm80);
  bool masked = false;
  for (const auto& r : g.dispatched) masked = masked || r.variant.find("partial") != std::string::npos;
  CHECK(masked);
  // gemm/fallback in a loop with staged operands ends each trip with a barrier.
  PrimFunc looped = T::prim_func("looped", [&](Handle a, Handle b, Handle d) {
    auto A = T::match_buffer(a, {16, 16}, f16);
    auto B = T::match_buffer(b, {16, 8}, f16);
    auto D = T::match_buffer(d, {16, 8}, f32);
    T::device_entry();
    T::cta_id({1});
    T::thread_id({32});
    auto Af = T::alloc_buffer({16, 16}, f16, scope::local, frag::mma_a(16, 16, f16));
    auto Bf = T::alloc_buffer({16, 8}, f16, scope::local, frag::mma_b(16, 8, f16));
    auto Dl = T::alloc_buffer({16, 8}, f32, scope::local);  // every lane's own D
    Tx::warp::copy(Af, A.all());
    Tx::warp::copy(Bf, B.all());
    for (Var i : T::serial(3)) {
      (void)i;
      Tx::warp::gemm(Dl, Af, Bf, {.accum = true});
    }
    Tx::copy(D.all(), Dl);
  });
  std::string ir = to_string(lowering::lower(looped, lowering::LowerOptions{.host = true}).lowered);
  auto body = ir.substr(ir.find("for i in"));
  auto last_barrier = body.rfind("T.cuda.warp_sync()");
  CHECK(last_barrier != std::string::npos);
  CHECK(body.find("gemm_acc", last_barrier) == std::string::npos);  // nothing computed after it
}
