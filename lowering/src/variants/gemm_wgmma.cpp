// gemm/wgmma [30]: D = A B (+ D with accum) at warpgroup scope through
// wgmma.mma_async (sm_90a): A and B in swizzled shared memory, read through
// matrix descriptors, or A in registers (frag::wgmma_a); D in f32 registers
// of the warpgroup.
//
// Accepts: cuda on sm_90 (sm_90a: later GPUs have other MMAs); warpgroup scope, all 128 threads
// active; D a local f32 tile of (M, N) with M % 64 == 0 whose layout is the wgmma accumulator
// (frag::wgmma_c: per 64 rows, thread 32 w + lane holds (16 w + lane / 4 + 8 ((i / 2) % 2), 8 (i /
// 4) + 2 (lane % 4) + i % 2) in register i); A (M, K) and B (K, N) shared regions -- B (N, K)
// with transpose_b, D = A B^T -- f16 x f16 or bf16 x bf16 (K % 16), or fp8 e4m3 / e5m2 (K % 32,
// both K-major, so B as (N, K) with transpose_b: the instruction has no transpose for 8-bit
// types), whose layouts are wgmma's canonical ones: 8-row groups of 32-, 64- or 128-byte
// swizzled rows, K-major (K contiguous) or MN-major (M of A, N of B contiguous: the transpose bit),
// as layouts::swizzled_tiles makes them. A may instead be a local tile in
// the register fragment of wgmma's A (frag::wgmma_a: mma.sync's A layout,
// one 16-row band per warp), checked element by element like D: the
// register form of the instruction, which lets a kernel transform A in
// registers (a scale, a dequantization) before the MMA. The descriptors' strides (LBO,
// SBO) are read off the layouts and every element's address is checked
// against the descriptor's (the layout is a table, the instruction a
// formula): a layout the hardware would read differently is a reason.
// N is cut into chunks of at most 256 (the widest instruction).
//
// Emits: wgmma.fence; per (64-row block, N chunk, K step) one
// wgmma.mma_async m64nNk16 (k32 for fp8), scale-d 0 on the first step
// unless accum; wgmma.commit_group; wgmma.wait_group `pending` (attr, 0 by
// default: the product is complete when the call returns; 1 lets the caller
// overlap this group with its next wait, then release the stage after).
// Why: the warpgroup MMA is the only way to Hopper's full tensor-core rate,
// and reading operands straight from shared memory frees the registers that
// mma.sync's fragments need.
#include "common.hpp"
#include "tx/printer.hpp"

namespace tx::lowering::variants {

namespace {

Check warpgroup_and_dtypes(const DispatchContext& ctx) {
  if (ctx.scope != ExecScope::warpgroup)
    return std::string("scope ") + exec_scope_name(ctx.scope) +
           ": wgmma is a warpgroup instruction (Tx::warpgroup::gemm)";
  const BufferRegion& d = *region_arg(ctx.call, 0);
  const BufferRegion& a = *region_arg(ctx.call, 1);
  const BufferRegion& b = *region_arg(ctx.call, 2);
  if (d.buffer->scope != MemScope::local || d.buffer->dtype != f32)
    return operand_reason(d, "the accumulator is an f32 register tile (frag::wgmma_c)");
  if (a.buffer->scope != MemScope::shared && a.buffer->scope != MemScope::local)
    return operand_reason(a, std::string("scope ") + mem_scope_name(a.buffer->scope) +
                                 ": wgmma reads A from shared memory or registers "
                                 "(frag::wgmma_a)");
  if (b.buffer->scope != MemScope::shared)
    return operand_reason(b, std::string("scope ") + mem_scope_name(b.buffer->scope) +
                                 ": wgmma reads B from shared memory");
  if (ctx.target.is_cuda() && ctx.target.sm != 90)
    return "wgmma is an sm_90a instruction; the target is sm_" + std::to_string(ctx.target.sm);
  DType ta = a.buffer->dtype, tb = b.buffer->dtype;
  bool half = (ta == f16 || ta == bf16) && ta == tb;
  bool fp8 = ta.is_fp8() && tb.is_fp8();
  if (!half && !fp8)
    return operand_reason(b, "dtypes " + ta.name() + " x " + tb.name() +
                                 ": wgmma takes f16 x f16, bf16 x bf16 or fp8 (e4m3 / e5m2)");
  if (ctx.call->attrs.pending < 0 || ctx.call->attrs.pending > 7)
    return "pending = " + std::to_string(ctx.call->attrs.pending) + " outside [0, 7]";
  return ok();
}

// A shared operand read as a descriptor: the canonical layout's mode and
// strides, the pre-swizzle offsets of the operand's elements.
struct SharedMatrix {
  ElementPlaces places;
  std::int64_t constant = 0;  // the base's constant part (elements)
  std::int64_t rows = 0, cols = 0;
  int W = 0;                     // swizzle bytes
  bool rows_contiguous = false;  // consecutive rows (not columns) are adjacent
  std::int64_t pre(std::int64_t r, std::int64_t c) const {
    return constant + places.at[static_cast<std::size_t>(r * cols + c)][0];
  }
  std::int64_t addr(std::int64_t r, std::int64_t c, int esize) const {
    std::int64_t p = pre(r, c);
    return (places.swizzle ? places.swizzle->apply(p) : p) * esize;
  }
};

std::variant<SharedMatrix, std::string> read_shared(const BufferRegion& r, const Env& env) {
  auto p = element_places(r, env, {.allow_swizzle = true});
  if (auto* e = std::get_if<std::string>(&p)) return *e;
  SharedMatrix m;
  m.places = std::get<ElementPlaces>(p);
  auto [rows, cols] = *matrix_extents(r);
  m.rows = rows;
  m.cols = cols;
  const int esize = r.buffer->dtype.bytes();
  const auto& sw = m.places.swizzle;
  int chunk = 0;
  while ((1 << chunk) * esize < 16) ++chunk;
  if (!sw || sw->shift != 3 || sw->base != chunk || sw->bits < 1 || sw->bits > 3)
    return operand_reason(r, std::string("layout ") +
                                 (sw ? "with swizzle " + sw->str() : "without a swizzle") +
                                 ": wgmma reads 32-, 64- or 128-byte swizzled tiles (Sw<1..3, " +
                                 std::to_string(chunk) + ", 3>: layouts::swizzled_tiles)");
  m.W = 16 << sw->bits;
  const std::int64_t period = 8 * m.W / esize;
  auto c = aligned_constant_part(m.places.base, env, period);
  if (!c)
    return operand_reason(r, "the tile starts at " + to_string(m.places.base) +
                                 ", not provably a multiple of the swizzle period (" +
                                 std::to_string(8 * m.W) + " bytes)");
  m.constant = *c;
  if (cols > 1 && m.pre(0, 1) - m.pre(0, 0) == 1)
    m.rows_contiguous = false;
  else if (rows > 1 && m.pre(1, 0) - m.pre(0, 0) == 1)
    m.rows_contiguous = true;
  else
    return operand_reason(r, "neither its rows nor its columns are contiguous");
  return m;
}

// The descriptor of the (mk x kk) operand block at (r0, c0) of `m`, for a
// matrix whose contiguous ("leading") dimension is the columns when
// !transposed_view, checked element by element; or the reason.
// `k_major`: the contiguous dimension is K (the instruction's default).
std::variant<WgmmaOperand, std::string> descriptor(const BufferRegion& r, const SharedMatrix& m,
                                                   const Expr& dyn, std::int64_t r0,
                                                   std::int64_t c0, std::int64_t nr,
                                                   std::int64_t nc, bool k_is_cols) {
  const int esize = r.buffer->dtype.bytes();
  const std::int64_t T = m.W / esize;  // elements per swizzled row
  // In the instruction's terms: MN index u, K index v; the block's element
  // (u, v) is matrix element (r0 + u, c0 + v) when K is the columns.
  auto at = [&](std::int64_t u, std::int64_t v) {
    return k_is_cols ? std::make_pair(r0 + u, c0 + v) : std::make_pair(r0 + v, c0 + u);
  };
  const std::int64_t nu = k_is_cols ? nr : nc, nv = k_is_cols ? nc : nr;
  const bool k_major = k_is_cols != m.rows_contiguous;  // K contiguous
  WgmmaOperand op;
  op.swizzle_bytes = m.W;
  op.mn_major = !k_major;
  auto [sr, sc] = at(0, 0);
  const std::int64_t start = m.pre(sr, sc);
  auto diff = [&](std::int64_t u, std::int64_t v) {
    auto [pr, pc] = at(u, v);
    return (m.pre(pr, pc) - start) * esize;
  };
  if (k_major) {
    op.lbo = 16;  // unused by swizzled K-major layouts ("assumed 1")
    op.sbo = nu > 8 ? diff(8, 0) : 8 * m.W;
  } else {
    op.lbo = nu > T ? diff(T, 0) : 8 * m.W;
    op.sbo = nv > 8 ? diff(0, 8) : 8 * m.W;
  }
  if (op.lbo <= 0 || op.sbo <= 0 || op.lbo % 16 || op.sbo % 16 || op.lbo >= (1 << 18) ||
      op.sbo >= (1 << 18))
    return operand_reason(r, "descriptor strides " + std::to_string(op.lbo) + " / " +
                                 std::to_string(op.sbo) +
                                 " bytes are not positive multiples of 16 below 2^18");
  const int bits = m.W == 128 ? 3 : m.W == 64 ? 2 : 1;
  auto hw = [&](std::int64_t byte) { return byte ^ (((byte >> 7) & ((1 << bits) - 1)) << 4); };
  for (std::int64_t u = 0; u < nu; ++u)
    for (std::int64_t v = 0; v < nv; ++v) {
      std::int64_t model =
          k_major ? (u / 8) * op.sbo + (u % 8) * m.W + v * esize
                  : (u / T) * op.lbo + (u % T) * esize + (v % 8) * m.W + (v / 8) * op.sbo;
      auto [pr, pc] = at(u, v);
      std::int64_t want = hw(start * esize + model), got = m.addr(pr, pc, esize);
      if (want != got)
        return operand_reason(r, "element (" + std::to_string(pr) + ", " + std::to_string(pc) +
                                     ") is at byte " + std::to_string(got) +
                                     "; the wgmma descriptor (" + std::to_string(m.W) +
                                     "-byte swizzle, " + (k_major ? "K" : "MN") + "-major, LBO " +
                                     std::to_string(op.lbo) + ", SBO " + std::to_string(op.sbo) +
                                     ") reads it at byte " + std::to_string(want));
    }
  op.smem = flat_view(r.buffer);
  op.offset = simplify(add(dyn, c32(start)));
  return op;
}

Plan plan(const DispatchContext& ctx) {
  const BufferRegion& D = *region_arg(ctx.call, 0);
  const BufferRegion& A = *region_arg(ctx.call, 1);
  const BufferRegion& B = *region_arg(ctx.call, 2);
  const bool fp8 = A.buffer->dtype.is_fp8();
  const std::int64_t KI = fp8 ? 32 : 16;
  auto [M, N] = *matrix_extents(D);
  const std::int64_t K = matrix_extents(A)->second;
  if (M % 64 != 0)
    return operand_reason(D, "M = " + std::to_string(M) + " is not a multiple of 64");
  if (N % 8 != 0) return operand_reason(D, "N = " + std::to_string(N) + " is not a multiple of 8");
  if (K % KI != 0)
    return operand_reason(
        A, "K = " + std::to_string(K) + " is not a multiple of " + std::to_string(KI));
  const std::int64_t NC = N <= 256 ? N : 256;
  if (N % NC != 0)
    return operand_reason(D, "N = " + std::to_string(N) +
                                 " above 256 is cut into 256-wide instructions: not a multiple");

  // The accumulator as a table: every element's thread and register.
  auto dp = element_places(D, *ctx.env);
  if (auto* e = std::get_if<std::string>(&dp)) return *e;
  const ElementPlaces& dpl = std::get<ElementPlaces>(dp);
  auto dbase = as_const_int(simplify(dpl.base, ctx.env));
  if (!dbase) return operand_reason(D, "register region starts at a dynamic offset");
  constexpr int Mx = static_cast<int>(Axis::m);
  auto thread_of = [&](const Location& at) {
    std::int64_t t = at[static_cast<int>(Axis::tid_in_wg)] +
                     32 * at[static_cast<int>(Axis::wid_in_wg)] +
                     at[static_cast<int>(Axis::laneid)];
    for (int a = 1; a < kNumAxes; ++a) {
      auto ax = static_cast<Axis>(a);
      if (ax != Axis::tid_in_wg && ax != Axis::wid_in_wg && ax != Axis::laneid && at[a] != 0)
        return std::int64_t{-1};
    }
    return t;
  };
  // regs[mt][nc][i]: the register of instruction register i.
  std::vector<std::vector<std::int64_t>> regs;
  for (std::int64_t mt = 0; mt < M / 64; ++mt)
    for (std::int64_t nc = 0; nc < N / NC; ++nc) {
      std::vector<std::int64_t> rr(static_cast<std::size_t>(NC / 2), -1);
      for (std::int64_t row = 0; row < 64; ++row)
        for (std::int64_t col = 0; col < NC; ++col) {
          std::int64_t w = row / 16, g = row % 8, h = (row % 16) / 8;
          std::int64_t j = col / 8, t = (col % 8) / 2, e = col % 2;
          std::int64_t thread = 32 * w + 4 * g + t, i = 4 * j + 2 * h + e;
          std::int64_t x = (mt * 64 + row) * N + nc * NC + col;
          const Location& at = dpl.at[static_cast<std::size_t>(x)];
          std::int64_t reg = *dbase + at[Mx];
          auto& want = rr[static_cast<std::size_t>(i)];
          if (want < 0) want = reg;
          if (thread_of(at) != thread || reg != want)
            return operand_reason(
                D, "element (" + std::to_string(mt * 64 + row) + ", " +
                       std::to_string(nc * NC + col) + ") is in thread " +
                       std::to_string(thread_of(at)) + " register " + std::to_string(reg) +
                       "; the wgmma accumulator needs thread " + std::to_string(thread) +
                       " register " + std::to_string(want) + " (use frag::wgmma_c)");
        }
      regs.push_back(rr);
    }

  // A from registers: the words of each (64-row block, K step), read off
  // the tile's layout element by element (the same in every thread).
  const bool a_regs = A.buffer->scope == MemScope::local;
  std::vector<std::vector<std::int64_t>> a_words;  // [mt * (K / KI) + ks][j]
  if (a_regs) {
    auto ap = element_places(A, *ctx.env);
    if (auto* e = std::get_if<std::string>(&ap)) return *e;
    const ElementPlaces& apl = std::get<ElementPlaces>(ap);
    auto abase = as_const_int(simplify(apl.base, ctx.env));
    if (!abase) return operand_reason(A, "register region starts at a dynamic offset");
    const std::int64_t E = fp8 ? 4 : 2;  // elements per 32-bit word
    for (std::int64_t mt = 0; mt < M / 64; ++mt)
      for (std::int64_t ks = 0; ks < K / KI; ++ks) {
        std::vector<std::int64_t> words(4, -1);
        for (std::int64_t row = 0; row < 64; ++row)
          for (std::int64_t col = 0; col < KI; ++col) {
            const std::int64_t w = row / 16, g = row % 8, h = (row % 16) / 8;
            const std::int64_t half = col / (4 * E), t = (col % (4 * E)) / E, el = col % E;
            const std::int64_t thread = 32 * w + 4 * g + t, j = 2 * half + h;
            const std::int64_t x = (mt * 64 + row) * K + ks * KI + col;
            const Location& at = apl.at[static_cast<std::size_t>(x)];
            const std::int64_t reg = *abase + at[Mx], start = reg - el;
            auto& want = words[static_cast<std::size_t>(j)];
            if (want < 0 && start >= 0 && start % E == 0) want = start;
            if (thread_of(at) != thread || start != want)
              return operand_reason(
                  A, "element (" + std::to_string(mt * 64 + row) + ", " +
                         std::to_string(ks * KI + col) + ") is in thread " +
                         std::to_string(thread_of(at)) + " register " + std::to_string(reg) +
                         "; wgmma's register A needs thread " + std::to_string(thread) +
                         ", element " + std::to_string(el) + " of word " + std::to_string(j) +
                         (want >= 0 ? " (register " + std::to_string(want + el) + ")" : "") +
                         " (use frag::wgmma_a)");
          }
        a_words.push_back(words);
      }
  }
  auto sa =
      a_regs ? std::variant<SharedMatrix, std::string>(SharedMatrix{}) : read_shared(A, *ctx.env);
  if (auto* e = std::get_if<std::string>(&sa)) return *e;
  auto sb = read_shared(B, *ctx.env);
  if (auto* e = std::get_if<std::string>(&sb)) return *e;
  const SharedMatrix& ma = std::get<SharedMatrix>(sa);
  const SharedMatrix& mb = std::get<SharedMatrix>(sb);
  // B's K is its rows, or its columns with transpose_b (B given as N x K).
  const bool bt = ctx.call->attrs.transpose_b;
  const bool b_k_major = bt ? !mb.rows_contiguous : mb.rows_contiguous;
  if (fp8 && ((!a_regs && ma.rows_contiguous) || !b_k_major))
    return operand_reason(!a_regs && ma.rows_contiguous ? A : B,
                          "fp8 wgmma reads K-major operands only (A with K contiguous, B with K "
                          "contiguous: an N x K tile passed with transpose_b); this tile is "
                          "MN-major");
  const Expr dyn_a = a_regs ? c32(0) : simplify(sub(ma.places.base, c32(ma.constant)), ctx.env);
  const Expr dyn_b = simplify(sub(mb.places.base, c32(mb.constant)), ctx.env);

  auto kind = [](DType t) {
    return t == f16 ? "f16" : t == bf16 ? "bf16" : t == f8e4m3 ? "e4m3" : "e5m2";
  };
  const std::string shape = "m64n" + std::to_string(NC) + "k" + std::to_string(KI);
  const SourceLoc loc = ctx.call->loc;
  const Buffer fd = flat_view(D.buffer);
  std::vector<Stmt> body;
  body.push_back(make_evaluate(make_call(Intrinsic::wgmma_fence, {}, loc), loc));
  std::int64_t count = 0;
  for (std::int64_t mt = 0; mt < M / 64; ++mt)
    for (std::int64_t nc = 0; nc < N / NC; ++nc)
      for (std::int64_t ks = 0; ks < K / KI; ++ks) {
        auto ob = bt ? descriptor(B, mb, dyn_b, nc * NC, ks * KI, NC, KI, /*k_is_cols=*/true)
                     : descriptor(B, mb, dyn_b, ks * KI, nc * NC, KI, NC, /*k_is_cols=*/false);
        if (auto* e = std::get_if<std::string>(&ob)) return *e;
        const bool first = ks == 0 && !ctx.call->attrs.accum;
        const std::string instr =
            shape + ".f32." + kind(A.buffer->dtype) + "." + kind(B.buffer->dtype);
        const auto& d_regs = regs[static_cast<std::size_t>(mt * (N / NC) + nc)];
        if (a_regs) {
          body.push_back(make_wgmma(instr, fd, d_regs, flat_view(A.buffer),
                                    a_words[static_cast<std::size_t>(mt * (K / KI) + ks)],
                                    std::get<WgmmaOperand>(ob), c32(first ? 0 : 1), loc));
        } else {
          auto oa = descriptor(A, ma, dyn_a, mt * 64, ks * KI, 64, KI, /*k_is_cols=*/true);
          if (auto* e = std::get_if<std::string>(&oa)) return *e;
          body.push_back(make_wgmma(instr, fd, d_regs, std::get<WgmmaOperand>(oa),
                                    std::get<WgmmaOperand>(ob), c32(first ? 0 : 1), loc));
        }
        ++count;
      }
  body.push_back(make_evaluate(make_call(Intrinsic::wgmma_commit, {}, loc), loc));
  body.push_back(
      make_evaluate(make_call(Intrinsic::wgmma_wait, {c32(ctx.call->attrs.pending)}, loc), loc));
  // The accumulator's registers are written until the wait: keep the
  // compiler from moving their other uses across it. Only when the wait
  // retires this call's group (pending = 0): with the group still in flight
  // a fence would itself touch registers the MMA owns, and ptxas then
  // serializes every wgmma of the kernel (C7515). The kernel's own
  // T::cuda::wgmma_wait(n, accumulator) fences them once they are done.
  if (ctx.call->attrs.pending == 0)
    for (const auto& rr : regs)
      for (std::int64_t r : rr)
        body.push_back(make_evaluate(
            make_call(Intrinsic::register_fence, {make_load(fd, {c32(r)}, loc)}, loc), loc));
  return make_origin(
      origin_text(ctx, "gemm/wgmma (" + std::to_string(count) + " x wgmma." + shape + ", A " +
                           (a_regs               ? "in registers"
                            : ma.rows_contiguous ? "M-major"
                                                 : "K-major") +
                           ", B " + (b_k_major ? "K" : "N") + "-major" +
                           (bt ? ", transpose_b" : "") + ")"),
      make_seq(body), loc);
}

}  // namespace

}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_gemm_wgmma(Registry& r) {
  using namespace variants;
  Variant v;
  v.targets = {TargetKind::cuda};
  v.off_target = "the host runs no PTX (gemm/fallback computes the same product)";
  v.async_model = true;
  v.family = "gemm";
  v.name = "wgmma";
  v.priority = 30;
  v.when = common_predicates();
  v.when.push_back({"gemm_operands", gemm_operands});
  v.when.push_back({"warpgroup_and_dtypes", warpgroup_and_dtypes});
  v.plan = plan;
  r.add("gemm", v);
}

}  // namespace tx::lowering
