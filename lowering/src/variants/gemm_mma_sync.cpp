// gemm/mma_sync [20]: D = A B (+ D with accum) on a warp's register
// fragments through mma.sync.aligned.m16n8k16 (f16 / bf16) or m16n8k32
// (e4m3 / e5m2, sm_89+), f32 accumulation.
//
// Accepts: cuda on sm_80+; warp scope with all lanes active; D, A, B local
// register tiles (a shared operand is staged with ldmatrix first: Tx::warp::
// copy into a fragment); D f32; A and B both f16 or both bf16, or fp8 in any
// mix; M % 16 == 0, N % 8 == 0, K % 16 == 0 (K % 32 for fp8); layouts over
// laneid in which every 16x8 tile of D, 16xk tile of A and kx8 tile of B is
// the instruction's fragment: with g = lane / 4, t = lane % 4 and E elements
// per 32-bit word (2, or 4 for fp8),
//   D register i   = D[g + 8 (i / 2), 2 t + i % 2]
//   A word j       = A[g + 8 (j % 2), E t + 4E (j / 2) + e], e < E
//   B word j       = B[E t + 4E j + e, g]
// -- the TileLayouts S[(2, 8, 4, 2) : (2, 4@laneid, 1@laneid, 1)] of D and
// their A / B counterparts (frag::mma_a / mma_b / mma_c), tiled in any order.
// Registers need not be consecutive between tiles: the instruction takes
// each word's offset.
//
// Algorithm: the layouts are read as tables (lane and register of every
// element) and every instruction tile is matched against the fragment
// shapes; the code is the unrolled loop over (k, m, n) tiles of mma.sync, D
// zeroed first unless accum. Why: the fragment layouts are ordinary tile
// layouts, so a kernel author states them once (frag::) and dispatch checks,
// rather than trusts, that the registers hold what the tensor core reads.
#include "common.hpp"

namespace tx::lowering::variants {

namespace {

constexpr int L = static_cast<int>(Axis::laneid);
constexpr int Mx = static_cast<int>(Axis::m);

bool is_fp8(DType t) { return t == f8e4m3 || t == f8e5m2; }

Check warp_scope(const DispatchContext& ctx) {
  if (ctx.scope != ExecScope::warp)
    return std::string("scope ") + exec_scope_name(ctx.scope) +
           ": mma.sync is a warp instruction (use Tx::warp::gemm)";
  return ok();
}

// B's fragment (frag::mma_b) is a (K, N) register tile: a B^T operand is
// copied into that fragment first (the copy transposes), so the call itself
// takes B as (K, N).
Check b_as_k_by_n(const DispatchContext& ctx) {
  if (ctx.call->attrs.transpose_b)
    return operand_reason(*region_arg(ctx.call, 2),
                          "transpose_b: mma.sync reads B's fragment as (K, N) (frag::mma_b); "
                          "copy B^T into such a fragment and call gemm without transpose_b");
  return ok();
}

Check registers_and_dtypes(const DispatchContext& ctx) {
  const BufferRegion& d = *region_arg(ctx.call, 0);
  const BufferRegion& a = *region_arg(ctx.call, 1);
  const BufferRegion& b = *region_arg(ctx.call, 2);
  for (const BufferRegion* r : {&a, &b, &d})
    if (r->buffer->scope != MemScope::local)
      return operand_reason(*r, std::string("scope ") + mem_scope_name(r->buffer->scope) +
                                    ": stage with ldmatrix first (Tx::warp::copy into a "
                                    "register fragment, frag::mma_a / mma_b)");
  if (ctx.target.below_sm(80))
    return "mma.sync m16n8k16 needs sm_80; the target is sm_" + std::to_string(ctx.target.sm);
  if (d.buffer->dtype != f32)
    return operand_reason(d, "dtype " + d.buffer->dtype.name() +
                                 ": the accumulator must be f32 (Tx::warp::cast afterwards)");
  DType ta = a.buffer->dtype, tb = b.buffer->dtype;
  bool half = (ta == f16 || ta == bf16) && ta == tb;
  bool fp8 = is_fp8(ta) && is_fp8(tb);
  if (!half && !fp8)
    return operand_reason(b, "dtypes " + ta.name() + " x " + tb.name() +
                                 ": mma.sync takes f16 x f16, bf16 x bf16 (m16n8k16) or fp8 "
                                 "e4m3 / e5m2 (m16n8k32)");
  if (fp8 && ctx.target.below_sm(89))
    return "fp8 mma (m16n8k32) needs sm_89; the target is sm_" + std::to_string(ctx.target.sm);
  return ok();
}

// (lane, register) of every element of an operand, by row-major index.
struct Fragment {
  std::vector<std::int64_t> lane, reg;
  std::int64_t cols = 0;
};

std::variant<Fragment, std::string> fragment(const BufferRegion& r, const Env& env) {
  auto p = element_places(r, env);
  if (auto* e = std::get_if<std::string>(&p)) return *e;
  const ElementPlaces& pl = std::get<ElementPlaces>(p);
  auto base = as_const_int(simplify(pl.base, &env));
  if (!base) return operand_reason(r, "register region starts at a dynamic offset");
  Fragment f;
  f.cols = matrix_extents(r)->second;
  for (const Location& at : pl.at) {
    for (int a = 0; a < kNumAxes; ++a)
      if (a != L && a != Mx && at[a] != 0)
        return operand_reason(r, std::string("layout uses axis ") +
                                     axis_name(static_cast<Axis>(a)) +
                                     " (an mma fragment is over laneid)");
    f.lane.push_back(at[L]);
    f.reg.push_back(*base + at[Mx]);
  }
  return f;
}

// The register every lane keeps element (row(lane), col(lane) + e) in, for
// e < width consecutive registers; the reason when lanes disagree.
std::variant<std::int64_t, std::string> word_of(const BufferRegion& r, const Fragment& f,
                                                const std::function<std::int64_t(int)>& row,
                                                const std::function<std::int64_t(int)>& col,
                                                int width, const std::string& what) {
  std::int64_t reg0 = -1;
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < width; ++e) {
      std::int64_t x = row(lane) * f.cols + col(lane) + e;
      auto k = static_cast<std::size_t>(x);
      if (reg0 < 0) reg0 = f.reg[k];
      if (f.lane[k] != lane || f.reg[k] != reg0 + e)
        return operand_reason(r, "element (" + std::to_string(row(lane)) + ", " +
                                     std::to_string(col(lane) + e) + ") is in lane " +
                                     std::to_string(f.lane[k]) + " register " +
                                     std::to_string(f.reg[k]) + "; the " + what +
                                     " fragment needs lane " + std::to_string(lane) + " register " +
                                     std::to_string(reg0 + e) + " (use frag:: layouts)");
    }
  if (reg0 % width != 0)
    return operand_reason(r, "register " + std::to_string(reg0) + " of the " + what +
                                 " fragment is not 32-bit aligned");
  return reg0;
}

Plan plan(const DispatchContext& ctx) {
  const BufferRegion& D = *region_arg(ctx.call, 0);
  const BufferRegion& A = *region_arg(ctx.call, 1);
  const BufferRegion& B = *region_arg(ctx.call, 2);
  const bool fp8 = is_fp8(A.buffer->dtype);
  const int E = fp8 ? 4 : 2, KI = fp8 ? 32 : 16;
  const std::string shape = fp8 ? "m16n8k32" : "m16n8k16";
  auto [M, N] = *matrix_extents(D);
  const std::int64_t K = matrix_extents(A)->second;
  if (M % 16 != 0)
    return operand_reason(D, "M = " + std::to_string(M) + " is not a multiple of 16");
  if (N % 8 != 0) return operand_reason(D, "N = " + std::to_string(N) + " is not a multiple of 8");
  if (K % KI != 0)
    return operand_reason(A, "K = " + std::to_string(K) + " is not a multiple of " +
                                 std::to_string(KI) + " (" + shape + ")");
  std::vector<Fragment> f;
  for (const BufferRegion* r : {&D, &A, &B}) {
    auto x = fragment(*r, *ctx.env);
    if (auto* e = std::get_if<std::string>(&x)) return *e;
    f.push_back(std::get<Fragment>(x));
  }
  auto g = [](int lane) { return lane / 4; };
  auto t = [](int lane) { return lane % 4; };

  Buffer fd = flat_view(D.buffer), fa = flat_view(A.buffer), fb = flat_view(B.buffer);
  std::vector<Stmt> body;
  // D's registers per (m, n) tile.
  std::vector<std::array<std::int64_t, 4>> dregs;
  for (std::int64_t mt = 0; mt < M / 16; ++mt)
    for (std::int64_t nt = 0; nt < N / 8; ++nt) {
      std::array<std::int64_t, 4> d{};
      for (int i = 0; i < 4; ++i) {
        auto w = word_of(
            D, f[0], [&](int l) { return mt * 16 + g(l) + 8 * (i / 2); },
            [&](int l) { return nt * 8 + 2 * t(l) + i % 2; }, 1, "m16n8 accumulator");
        if (auto* e = std::get_if<std::string>(&w)) return *e;
        d[static_cast<std::size_t>(i)] = std::get<std::int64_t>(w);
      }
      dregs.push_back(d);
    }
  if (!ctx.call->attrs.accum)
    for (const auto& d : dregs)
      for (std::int64_t r : d) body.push_back(make_store(fd, make_float(0.0, f32), {c32(r)}));
  for (std::int64_t kt = 0; kt < K / KI; ++kt) {
    std::vector<std::vector<std::int64_t>> awords, bwords;
    for (std::int64_t mt = 0; mt < M / 16; ++mt) {
      std::vector<std::int64_t> aw;
      for (int j = 0; j < 4; ++j) {
        auto w = word_of(
            A, f[1], [&](int l) { return mt * 16 + g(l) + 8 * (j % 2); },
            [&](int l) { return kt * KI + E * t(l) + 4 * E * (j / 2); }, E, shape + " A");
        if (auto* e = std::get_if<std::string>(&w)) return *e;
        aw.push_back(std::get<std::int64_t>(w));
      }
      awords.push_back(aw);
    }
    for (std::int64_t nt = 0; nt < N / 8; ++nt) {
      std::vector<std::int64_t> bw;
      for (int j = 0; j < 2; ++j) {
        // B is K x N: E consecutive k of one column are not consecutive
        // elements, so each is looked up on its own.
        std::int64_t reg0 = -1;
        for (int e = 0; e < E; ++e) {
          auto w = word_of(
              B, f[2], [&](int l) { return kt * KI + E * t(l) + 4 * E * j + e; },
              [&](int l) { return nt * 8 + g(l); }, 1, shape + " B");
          if (auto* er = std::get_if<std::string>(&w)) return *er;
          std::int64_t r = std::get<std::int64_t>(w);
          if (e == 0) reg0 = r;
          if (r != reg0 + e || reg0 % E != 0)
            return operand_reason(B, "registers " + std::to_string(reg0) + ".. of the " + shape +
                                         " B fragment do not hold consecutive k in one 32-bit "
                                         "word (use frag::mma_b)");
        }
        bw.push_back(reg0);
      }
      bwords.push_back(bw);
    }
    for (std::int64_t mt = 0; mt < M / 16; ++mt)
      for (std::int64_t nt = 0; nt < N / 8; ++nt) {
        const auto& d = dregs[static_cast<std::size_t>(mt * (N / 8) + nt)];
        body.push_back(make_mma(shape, fd, {d.begin(), d.end()}, fa,
                                awords[static_cast<std::size_t>(mt)], fb,
                                bwords[static_cast<std::size_t>(nt)], ctx.call->loc));
      }
  }
  std::int64_t count = (M / 16) * (N / 8) * (K / KI);
  return make_origin(
      origin_text(ctx, "gemm/mma_sync (" + std::to_string(count) + " x mma." + shape + ")"),
      make_seq(body), ctx.call->loc);
}

}  // namespace

}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_gemm_mma_sync(Registry& r) {
  using namespace variants;
  Variant v;
  v.targets = {TargetKind::cuda};
  v.off_target = "the host runs no PTX (gemm/fallback computes the same product)";
  v.family = "gemm";
  v.name = "mma_sync";
  v.priority = 20;
  v.when = common_predicates();
  v.when.push_back({"gemm_operands", gemm_operands});
  v.when.push_back({"warp_scope", warp_scope});
  v.when.push_back({"b_as_k_by_n", b_as_k_by_n});
  v.when.push_back({"registers_and_dtypes", registers_and_dtypes});
  v.plan = plan;
  r.add("gemm", v);
}

}  // namespace tx::lowering
