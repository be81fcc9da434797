// fast_divide: a 32-bit division or remainder by a divisor known only at
// launch becomes a multiply-high and a shift by a magic number that the
// launch computes once (Granlund and Montgomery, "Division by invariant
// integers using multiplication", 1994), as an exact-shape kernel's division
// by a constant is compiled.
//
// Why: a shape-generic kernel divides by its T::dim extents (a broadcast
// operand's coordinate is (i / inner) % extent). A 32-bit division by a
// register is ~20 instructions on the GPU; the rewrite is a 32x32->64
// multiply and a shift. The channel broadcast (N, C, H, W) + (C, 1, 1) ran at
// 0.956 of its exact-shape kernel with the divisions, for one per chunk.
//
// Accepts `a / d`, `a % d` (and the floor forms) in i32 where
//   - d is an expression of T::dim extents and integer scalar parameters
//     only (not a constant: the compiler does those itself), provably in
//     [1, 2^31 - 1] by their facts;
//   - a is provably in [0, 2^31 - 1] (then floor and truncating forms agree).
// Everything else stays a division. With N = 31 dividend bits and
// l = ceil(log2 d), m = ceil(2^(N + l) / d) < 2^32 satisfies
// m d - 2^(N + l) <= 2^l, so floor(a m / 2^(N + l)) = floor(a / d) for every
// a < 2^N, and a m < 2^63 fits 64 bits. Each distinct divisor adds two
// launch values to the lowered kernel (DimParam::derived: its m, as the bits
// of an int, and its shift N + l), passed after the T::dim extents;
// Kernel::launch evaluates d and computes them (fast_divisor_magic).
#include <unordered_set>

#include "tx/lowering/lower.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

FastDivisor fast_divisor_magic(std::int64_t d) {
  if (d < 1 || d > 2147483647) return {0, 0};
  int l = 0;
  while ((std::int64_t{1} << l) < d) ++l;
  const std::uint64_t p = std::uint64_t{1} << (31 + l);
  const auto ud = static_cast<std::uint64_t>(d);
  return {static_cast<std::uint32_t>((p + ud - 1) / ud), 31 + l};
}

namespace {

class FastDivide : public ScopedMutator {
 public:
  FastDivide(const LaunchConfig& launch, std::vector<DimParam>* derived)
      : ScopedMutator(launch), derived_(derived) {
    for (const auto& [v, f] : launch.param_facts)
      if (v.dtype().is_integer()) invariant_.insert(v.get());
  }
  using ScopedMutator::mutate;
  using ScopedMutator::mutate_node;

  Expr mutate_node(const Expr& self, const BinaryNode* n) override {
    Expr out = IRMutator::mutate_node(self, n);
    const auto* b = out.as<BinaryNode>();
    if (!b || b->dtype != i32 || b->a.dtype() != i32 || b->b.dtype() != i32) return out;
    const bool quotient = b->op == BinOp::Div || b->op == BinOp::FloorDiv;
    const bool remainder = b->op == BinOp::Mod || b->op == BinOp::FloorMod;
    if (!(quotient || remainder) || as_const_int(b->b) || !launch_invariant(b->b)) return out;
    // Ranges of the operands as written (a rewritten inner division is a
    // cast of 64-bit arithmetic, whose range the analysis does not follow).
    const Interval a = env_.bound(n->a), d = env_.bound(n->b);
    constexpr std::int64_t kMax = 2147483647;
    if (a.lo < 0 || a.hi > kMax || d.lo < 1 || d.hi > kMax) return out;
    const auto& [magic, shift] = values_for(b->b);
    // Both factors zero-extended (through u32): one 32x32->64 multiply.
    auto widen = [&](const Expr& x) { return make_cast(u64, make_cast(u32, x, n->loc), n->loc); };
    Expr wide = make_binary(BinOp::Mul, widen(b->a), widen(magic), n->loc);
    Expr q = make_cast(i32, make_binary(BinOp::Shr, wide, make_cast(u64, shift, n->loc), n->loc),
                       n->loc);
    if (quotient) return q;
    return make_binary(BinOp::Sub, b->a, make_binary(BinOp::Mul, q, b->b, n->loc), n->loc);
  }

 private:
  bool launch_invariant(const Expr& e) const {
    if (as_const_int(e)) return true;
    if (auto* v = e.as<VarNode>()) return invariant_.count(v) > 0;
    if (auto* c = e.as<CastNode>())
      return c->value.dtype().is_integer() && launch_invariant(c->value);
    if (auto* b = e.as<BinaryNode>()) return launch_invariant(b->a) && launch_invariant(b->b);
    if (auto* s = e.as<SelectNode>())
      return launch_invariant(s->cond) && launch_invariant(s->t) && launch_invariant(s->f);
    return false;
  }

  // The (magic, shift) launch values of a divisor, one pair per distinct
  // divisor (as printed: the same extents give the same text).
  std::pair<Var, Var> values_for(const Expr& d) {
    const std::string text = to_string(d);
    for (auto& [t, vars] : seen_)
      if (t == text) return vars;
    const std::string k = std::to_string(seen_.size());
    Var m("tx_div" + k + "_magic", i32, d->loc), s("tx_div" + k + "_shift", i32, d->loc);
    derived_->push_back({.var = m,
                         .min = INT32_MIN,
                         .max = 2147483647,
                         .multiple_of = 1,
                         .loc = d->loc,
                         .derived = DimParam::Derived::div_magic,
                         .of = d});
    derived_->push_back({.var = s,
                         .min = 31,
                         .max = 62,
                         .multiple_of = 1,
                         .loc = d->loc,
                         .derived = DimParam::Derived::div_shift,
                         .of = d});
    seen_.emplace_back(text, std::make_pair(m, s));
    return {m, s};
  }

  std::vector<DimParam>* derived_;
  std::unordered_set<const VarNode*> invariant_;
  std::vector<std::pair<std::string, std::pair<Var, Var>>> seen_;
};

}  // namespace

Stmt fast_divide(const Stmt& s, const LaunchConfig& launch, std::vector<DimParam>* derived) {
  FastDivide f(launch, derived);
  return f.mutate(s);
}

}  // namespace tx::lowering
