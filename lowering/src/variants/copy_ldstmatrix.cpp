// copy/ldstmatrix [20]: a warp's copy between a shared tile and a register
// fragment through ldmatrix (shared -> registers) or stmatrix (registers ->
// shared, sm_90+), 8x8 matrices of 16-bit elements, x1 / x2 / x4, .trans.
//
// Accepts: cuda on sm_75+ (stmatrix: sm_90+); warp scope with all lanes
// active; one local and one shared operand of a 16-bit dtype; a register
// layout over laneid whose 32-bit words each hold what one ldmatrix matrix
// gives a lane: lane l gets row l/4, columns 2(l%4) and 2(l%4)+1 of an 8x8
// block whose rows are 16 contiguous, 16-byte aligned bytes of shared memory
// (or, .trans, column l/4 and rows 2(l%4), 2(l%4)+1: the block is stored
// transposed). Every lane must keep the same registers (a fragment).
//
// Algorithm (after TIRx's ldstmatrix): the layouts are read as tables (which
// lane and register, which shared offset, for each element); every register
// word of the fragment is matched against the two matrix shapes; matched
// words are grouped four, two or one to an instruction, in register order.
// Lane l supplies row l % 8 of matrix (l / 8) % num; the row addresses must
// be equally spaced within a matrix (so a lane's address is an affine
// expression of its id, plus a per-matrix offset). Why: one instruction moves
// 16 bytes per lane with conflict-free shared accesses when the 8 rows of a
// matrix fall in distinct 16-byte bank groups (a padded or swizzled layout),
// and the fragments are exactly what mma.sync takes.
#include <map>

#include "common.hpp"
#include "tx/printer.hpp"

namespace tx::lowering::variants {

namespace {

constexpr int L = static_cast<int>(Axis::laneid);
constexpr int Mx = static_cast<int>(Axis::m);

Check warp_scope(const DispatchContext& ctx) {
  if (ctx.scope != ExecScope::warp)
    return std::string("scope ") + exec_scope_name(ctx.scope) +
           ": ldmatrix / stmatrix are warp instructions (use Tx::warp::copy)";
  return ok();
}

Check local_and_shared(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  bool load = dst.buffer->scope == MemScope::local && src.buffer->scope == MemScope::shared;
  bool store = src.buffer->scope == MemScope::local && dst.buffer->scope == MemScope::shared;
  if (!load && !store)
    return operand_reason(dst,
                          "ldmatrix / stmatrix copy between a shared tile and a register "
                          "fragment (one operand local, the other shared)");
  if (load && ctx.target.below_sm(75))
    return "ldmatrix needs sm_75; the target is sm_" + std::to_string(ctx.target.sm);
  if (store && ctx.target.below_sm(90))
    return "stmatrix needs sm_90; the target is sm_" + std::to_string(ctx.target.sm);
  if (dst.buffer->dtype.bytes() != 2)
    return operand_reason(
        dst, "dtype " + dst.buffer->dtype.name() + ": ldmatrix / stmatrix move 16-bit elements");
  return ok();
}

struct Matrix {
  bool trans = false;
  std::int64_t word = 0;               // register offset of the lane's word
  std::array<std::int64_t, 8> rows{};  // shared offset of each row (relative to the base)
};

// Matches register word `w` (a pair of registers every lane keeps) against
// the ldmatrix matrix shape; the reason when it does not fit.
std::variant<Matrix, std::string> match_word(std::int64_t w, bool trans,
                                             const std::vector<std::array<std::int64_t, 2>>& elem,
                                             const std::vector<Location>& mem) {
  auto off = [&](int lane, int h) { return mem[static_cast<std::size_t>(elem[lane][h])][Mx]; };
  Matrix m;
  m.trans = trans;
  m.word = w;
  for (int k = 0; k < 8; ++k) m.rows[k] = trans ? off(k / 2, k % 2) : off(4 * k, 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int h = 0; h < 2; ++h) {
      std::int64_t want =
          trans ? m.rows[2 * (lane % 4) + h] + lane / 4 : m.rows[lane / 4] + 2 * (lane % 4) + h;
      if (off(lane, h) != want)
        return "register " + std::to_string(w + h) + " of lane " + std::to_string(lane) +
               " holds the element at shared offset " + std::to_string(off(lane, h)) + ", not " +
               std::to_string(want) + (trans ? " (.trans matrix)" : " (8x8 matrix row)");
    }
  for (int k = 0; k < 8; ++k)
    if (m.rows[k] % 8 != 0)
      return "matrix row at shared offset " + std::to_string(m.rows[k]) + " is not 16-byte aligned";
  return m;
}

Plan plan(const DispatchContext& ctx) {
  const BufferRegion& dst = *region_arg(ctx.call, 0);
  const BufferRegion& src = *region_arg(ctx.call, 1);
  const bool store = src.buffer->scope == MemScope::local;
  const BufferRegion& R = store ? src : dst;
  const BufferRegion& S = store ? dst : src;
  auto rp = element_places(R, *ctx.env);
  if (auto* e = std::get_if<std::string>(&rp)) return *e;
  auto sp = element_places(S, *ctx.env, {.allow_swizzle = true});
  if (auto* e = std::get_if<std::string>(&sp)) return *e;
  const ElementPlaces& regs = std::get<ElementPlaces>(rp);
  const ElementPlaces& mem = std::get<ElementPlaces>(sp);
  // A swizzle moves whole 2^base-element chunks: a matrix row (8 elements,
  // 16 bytes) must be one chunk, then the row tables below hold before the
  // swizzle and each lane's row address is swizzled as a whole.
  if (mem.swizzle && mem.swizzle->base < 3)
    return operand_reason(S, "swizzle " + mem.swizzle->str() + " moves " +
                                 std::to_string(1 << mem.swizzle->base) +
                                 "-element chunks; an ldmatrix row is 8 elements (base >= 3)");
  auto reg_base = as_const_int(simplify(regs.base, ctx.env));
  if (!reg_base) return operand_reason(R, "register region starts at a dynamic offset");
  const std::int64_t base_div = ctx.env->known_divisor(simplify(mem.base, ctx.env));
  if (base_div != 0 && base_div % 8 != 0)
    return operand_reason(S, "region start " + to_string(simplify(mem.base, ctx.env)) +
                                 " is not known to be a multiple of 8 elements (16 bytes)");

  // Which element each (lane, register) holds; every lane the same registers.
  const std::int64_t n = R.numel();
  if (n % 64 != 0)
    return operand_reason(R, std::to_string(n) + " elements are not whole 8x8 matrices");
  std::map<std::int64_t, std::array<std::int64_t, 32>> by_reg;  // register -> element per lane
  for (std::int64_t x = 0; x < n; ++x) {
    const Location& at = regs.at[static_cast<std::size_t>(x)];
    for (int a = 0; a < kNumAxes; ++a)
      if (a != L && a != Mx && at[a] != 0)
        return operand_reason(R, std::string("register layout uses axis ") +
                                     axis_name(static_cast<Axis>(a)) +
                                     " (a warp fragment is over laneid)");
    if (at[L] < 0 || at[L] >= 32) return operand_reason(R, "lane coordinate outside the warp");
    auto [it, fresh] = by_reg.try_emplace(at[Mx]);
    if (fresh) it->second.fill(-1);
    std::int64_t& slot = it->second[static_cast<std::size_t>(at[L])];
    if (slot >= 0)
      return operand_reason(R, "two elements in register " + std::to_string(at[Mx]) + " of lane " +
                                   std::to_string(at[L]));
    slot = x;
  }
  std::vector<std::array<std::int64_t, 64>> words;  // per word: elem[lane][h] flattened
  std::vector<std::int64_t> word_regs;
  for (auto it = by_reg.begin(); it != by_reg.end(); ++it) {
    for (std::int64_t e : it->second)
      if (e < 0)
        return operand_reason(R, "register " + std::to_string(it->first) +
                                     " is not held by every lane (not a warp fragment)");
  }
  for (auto it = by_reg.begin(); it != by_reg.end(); ++it) {
    auto next = std::next(it);
    if (it->first % 2 != 0 || next == by_reg.end() || next->first != it->first + 1)
      return operand_reason(
          R, "register " + std::to_string(it->first) +
                 " does not start a 32-bit pair (ldmatrix fills registers in pairs)");
    std::array<std::int64_t, 64> w{};
    for (int lane = 0; lane < 32; ++lane) {
      w[2 * lane] = it->second[static_cast<std::size_t>(lane)];
      w[2 * lane + 1] = next->second[static_cast<std::size_t>(lane)];
    }
    words.push_back(w);
    word_regs.push_back(it->first);
    it = next;
  }

  std::vector<Matrix> plain, trans;
  for (std::size_t i = 0; i < words.size(); ++i) {
    std::vector<std::array<std::int64_t, 2>> elem(32);
    for (int lane = 0; lane < 32; ++lane) {
      elem[lane][0] = words[i][2 * lane];
      elem[lane][1] = words[i][2 * lane + 1];
    }
    auto a = match_word(word_regs[i], false, elem, mem.at);
    if (auto* m = std::get_if<Matrix>(&a)) {
      plain.push_back(*m);
      continue;
    }
    auto b = match_word(word_regs[i], true, elem, mem.at);
    if (auto* m = std::get_if<Matrix>(&b)) {
      trans.push_back(*m);
      continue;
    }
    return operand_reason(R, "not an ldmatrix fragment of " + S.buffer->name + ": " +
                                 std::get<std::string>(a) +
                                 "; transposed: " + std::get<std::string>(b));
  }

  Buffer fs = flat_view(S.buffer), fr = flat_view(R.buffer);
  Expr lane = scope_thread_index(ExecScope::warp);
  std::vector<Stmt> body;
  for (const std::vector<Matrix>* group : {&plain, &trans}) {
    std::size_t i = 0;
    while (i < group->size()) {
      std::size_t left = group->size() - i;
      int num = left >= 4 ? 4 : left >= 2 ? 2 : 1;
      // Lane l's address: row l % 8 of matrix (l / 8) % num. Rows of one
      // matrix must be equally spaced; matrices are chosen by a select.
      const std::int64_t step = (*group)[i].rows[1] - (*group)[i].rows[0];
      for (int j = 0; j < num; ++j)
        for (int k = 0; k < 8; ++k)
          if ((*group)[i + j].rows[k] != (*group)[i + j].rows[0] + k * step)
            return operand_reason(
                S, "the rows of an 8x8 matrix are not equally spaced in " + S.buffer->name);
      Expr r = mod(lane, c32(8));
      Expr j = num == 1 ? c32(0) : mod(div(lane, c32(8)), c32(num));
      Expr start = c32((*group)[i + num - 1].rows[0]);
      for (int q = num - 1; q-- > 0;)
        start = make_select(eq(j, c32(q)), c32((*group)[i + q].rows[0]), start);
      // Affine in the bits of j when the matrices form a 2 x 2 grid (an A
      // fragment's row halves and k halves), or evenly spaced: no select.
      const std::int64_t s0 = (*group)[i].rows[0];
      const std::int64_t p = num > 1 ? (*group)[i + 1].rows[0] - s0 : 0;
      const std::int64_t q2 = num > 2 ? (*group)[i + 2].rows[0] - s0 : 0;
      bool grid = true;
      for (int q = 0; q < num; ++q)
        grid = grid && (*group)[i + q].rows[0] == s0 + (q % 2) * p + (q / 2) * q2;
      if (grid)
        start = add(c32(s0), add(mul(mod(j, c32(2)), c32(p)), mul(div(j, c32(2)), c32(q2))));
      Expr row = add(mem.base, add(start, mul(r, c32(step))));
      if (mem.swizzle) row = swizzle_expr(*mem.swizzle, row);
      row = simplify(row, ctx.env);
      std::vector<std::int64_t> w;
      for (int q = 0; q < num; ++q) w.push_back(*reg_base + (*group)[i + q].word);
      body.push_back(make_matrix_move(store, (*group)[i].trans, fs, row, fr, w, ctx.call->loc));
      i += static_cast<std::size_t>(num);
    }
  }
  std::string what = std::string(store ? "stmatrix" : "ldmatrix") + ", " +
                     std::to_string(body.size()) + " instruction" + (body.size() == 1 ? "" : "s");
  return make_origin(origin_text(ctx, "copy/ldstmatrix (" + what + ")"), make_seq(body),
                     ctx.call->loc);
}

}  // namespace
}  // namespace tx::lowering::variants

namespace tx::lowering {

void register_copy_ldstmatrix(Registry& r) {
  using namespace variants;
  Variant v;
  v.targets = {TargetKind::cuda};
  v.off_target = "the host runs no PTX (copy/reg copies the fragment element by element)";
  v.family = "copy";
  v.name = "ldstmatrix";
  v.priority = 20;
  v.when = common_predicates();
  v.when.push_back({"copy_operands_match", copy_operands_match});
  v.when.push_back({"warp_scope", warp_scope});
  v.when.push_back({"local_and_shared", local_and_shared});
  v.plan = plan;
  r.add("copy", v);
}

}  // namespace tx::lowering
