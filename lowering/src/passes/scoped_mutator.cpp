// ScopedMutator: the Env bookkeeping shared by passes that need variable
// ranges (bounds, simplification) or uniformity (the active-threads rule).
#include "tx/lowering/lower.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

std::vector<std::pair<Var, VarFact>> scope_id_facts(const ScopeIdBindNode* n,
                                                    const LaunchConfig& launch) {
  std::vector<std::pair<Var, VarFact>> out;
  auto upto = [](std::int64_t e) { return Interval{0, e - 1}; };
  for (std::size_t i = 0; i < n->vars.size(); ++i) {
    VarFact f;
    switch (n->id_kind) {
      case ScopeIdKind::cta_id:
        f = {upto(launch.grid[i]), Uniformity::cta};
        break;
      case ScopeIdKind::warpgroup_id:
        f = {upto(n->extents[i]), Uniformity::warpgroup};
        break;
      case ScopeIdKind::warp_id:
        f = {upto(n->extents[i]), Uniformity::warp};
        break;
      case ScopeIdKind::warp_id_in_wg:
        f = {upto(4), Uniformity::warp};
        break;
      case ScopeIdKind::lane_id:
        f = {upto(32), Uniformity::thread};
        break;
      case ScopeIdKind::thread_id:
        f = {upto(launch.block), Uniformity::thread};
        break;
      case ScopeIdKind::thread_id_in_wg:
        f = {upto(128), Uniformity::thread};
        break;
    }
    out.emplace_back(n->vars[i], f);
  }
  return out;
}

std::vector<Expr> scope_id_values(const ScopeIdBindNode* n) {
  Expr t = make_call(Intrinsic::thread_idx, {});
  std::vector<Expr> out;
  for (std::size_t i = 0; i < n->vars.size(); ++i) {
    switch (n->id_kind) {
      case ScopeIdKind::cta_id:
        out.push_back(make_call(Intrinsic::block_idx, {c32(static_cast<std::int64_t>(i))}));
        break;
      case ScopeIdKind::warpgroup_id:
        out.push_back(div(t, c32(128)));
        break;
      case ScopeIdKind::warp_id:
        out.push_back(div(t, c32(32)));
        break;
      case ScopeIdKind::warp_id_in_wg:
        out.push_back(mod(div(t, c32(32)), c32(4)));
        break;
      case ScopeIdKind::lane_id:
        out.push_back(mod(t, c32(32)));
        break;
      case ScopeIdKind::thread_id:
        out.push_back(t);
        break;
      case ScopeIdKind::thread_id_in_wg:
        out.push_back(mod(t, c32(128)));
        break;
    }
  }
  return out;
}

ScopedMutator::ScopedMutator(const LaunchConfig& launch) : launch_(launch) {
  env_.cta_threads = launch.block;
  env_.grid = launch.grid;
  for (const auto& [v, f] : launch.param_facts) env_.bind(v, f);
}

Stmt ScopedMutator::mutate_node(const Stmt& self, const ForNode* n) {
  Interval lo = env_.bound(n->min), ex = env_.bound(n->extent);
  VarFact f;
  if (lo.bounded() && ex.bounded()) f.range = {lo.lo, lo.hi + std::max<std::int64_t>(ex.hi - 1, 0)};
  f.level = std::min(env_.level(n->min), env_.level(n->extent));
  env_.bind(n->var, f);
  bool varying = f.level != Uniformity::cta;
  if (varying)
    guards_.push_back({n->extent, n->loc, f.level,
                       "for " + n->var.name() + " in range(" + to_string(n->extent) + ")"});
  const bool repeats = !(ex.bounded() && ex.hi <= 1);
  loops_ += repeats ? 1 : 0;
  Stmt out = IRMutator::mutate_node(self, n);
  loops_ -= repeats ? 1 : 0;
  if (varying) guards_.pop_back();
  return out;
}

Stmt ScopedMutator::mutate_node(const Stmt& self, const LetStmtNode* n) {
  env_.bind(n->var, {env_.bound(n->value), env_.level(n->value), env_.known_divisor(n->value)});
  env_.define(n->var, n->value);
  return IRMutator::mutate_node(self, n);
}

Stmt ScopedMutator::mutate_node(const Stmt& self, const ScopeIdBindNode* n) {
  for (auto& [v, f] : scope_id_facts(n, launch_)) env_.bind(v, f);
  return IRMutator::mutate_node(self, n);
}

namespace {
// Narrowing `v < k`-style conditions: the range of v inside each branch.
struct Narrowing {
  const VarNode* var = nullptr;
  Interval then_range, else_range;
};

// `v + c` or `v - c` (a loop's look-ahead, `kt + 2 < KT`): v and the shift.
const VarNode* shifted_var(const Expr& e, std::int64_t* shift) {
  *shift = 0;
  if (auto* v = e.as<VarNode>()) return v;
  auto* b = e.as<BinaryNode>();
  if (!b || (b->op != BinOp::Add && b->op != BinOp::Sub)) return nullptr;
  auto* v = b->a.as<VarNode>();
  auto k = as_const_int(b->b);
  if (!v || !k) return nullptr;
  *shift = b->op == BinOp::Add ? *k : -*k;
  return v;
}

std::optional<Narrowing> narrowing(const Expr& c, const Env& env) {
  auto* b = c.as<BinaryNode>();
  if (!b) return std::nullopt;
  std::int64_t shift = 0;
  const VarNode* v = shifted_var(b->a, &shift);
  auto k = as_const_int(b->b);
  if (v && k) *k -= shift;  // v + s < k  <=>  v < k - s
  BinOp op = b->op;
  if (!v || !k) {
    // k op v: mirror it.
    v = b->b.as<VarNode>();
    k = as_const_int(b->a);
    if (!v || !k) return std::nullopt;
    switch (op) {
      case BinOp::LT:
        op = BinOp::GT;
        break;
      case BinOp::LE:
        op = BinOp::GE;
        break;
      case BinOp::GT:
        op = BinOp::LT;
        break;
      case BinOp::GE:
        op = BinOp::LE;
        break;
      default:
        break;
    }
  }
  const VarFact* f = env.find(v);
  Interval r = f ? f->range : Interval::everything();
  Narrowing n{v, r, r};
  switch (op) {
    case BinOp::LT:
      n.then_range.hi = std::min(r.hi, *k - 1);
      n.else_range.lo = std::max(r.lo, *k);
      break;
    case BinOp::LE:
      n.then_range.hi = std::min(r.hi, *k);
      n.else_range.lo = std::max(r.lo, *k + 1);
      break;
    case BinOp::GT:
      n.then_range.lo = std::max(r.lo, *k + 1);
      n.else_range.hi = std::min(r.hi, *k);
      break;
    case BinOp::GE:
      n.then_range.lo = std::max(r.lo, *k);
      n.else_range.hi = std::min(r.hi, *k - 1);
      break;
    case BinOp::EQ:
      n.then_range = {std::max(r.lo, *k), std::min(r.hi, *k)};
      break;
    default:
      return std::nullopt;
  }
  // A multiple of d narrowed to [lo, hi] lies in [ceil(lo/d) d, floor(hi/d) d]:
  // `c < L` with c and L multiples of 8 leaves c <= L - 8, so the tile
  // [c, c + 8) is inside.
  if (const std::int64_t d = f ? f->divisor : 1; d > 1) {
    auto round_in = [d](Interval& i) {
      if (i.lo > Interval::kMin && i.lo >= 0) i.lo = (i.lo + d - 1) / d * d;
      if (i.hi < Interval::kMax && i.hi >= 0) i.hi = i.hi / d * d;
    };
    round_in(n.then_range);
    round_in(n.else_range);
  }
  return n;
}
}  // namespace

Stmt ScopedMutator::mutate_node(const Stmt& self, const IfThenElseNode* n) {
  Expr c = mutate(n->cond);
  Guard g{c, n->loc, env_.level(c), to_string(c)};
  guards_.push_back(g);
  auto nar = narrowing(c, env_);
  const VarFact* f = nar ? env_.find(nar->var) : nullptr;
  VarFact saved = f ? *f : VarFact{};
  auto narrow = [&](Interval r) {
    if (f) env_.bind(nar->var, {r, saved.level, saved.divisor});
  };
  // A branch whose narrowed range is empty never runs (a pipeline's
  // look-ahead `kt + 2 < KT` in a loop of fewer trips): it is dropped rather
  // than lowered under impossible facts.
  auto dead = [&](const Interval& r) { return f && r.lo > r.hi; };
  narrow(nar ? nar->then_range : Interval{});
  const bool then_dead = nar && dead(nar->then_range);
  if (then_dead) dead_branch(n->then_case);
  Stmt t = then_dead ? make_seq({}) : mutate(n->then_case);
  guards_.back().text = "not (" + g.text + ")";
  narrow(nar ? nar->else_range : Interval{});
  const bool else_dead = nar && dead(nar->else_range) && n->else_case;
  if (else_dead) dead_branch(n->else_case);
  Stmt e = else_dead ? make_seq({}) : mutate(n->else_case);
  narrow(saved.range);
  guards_.pop_back();
  if (c.same_as(n->cond) && t.same_as(n->then_case) && e.same_as(n->else_case)) return self;
  return make_if(c, t, e, n->loc);
}

}  // namespace tx::lowering
