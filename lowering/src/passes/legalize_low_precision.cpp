// legalize_low_precision: f16, bf16 and fp8 are storage types in tx. Every
// arithmetic node on them is rewritten to convert its operands to f32,
// compute in f32 and round the result back (comparisons and predicates just
// compare in f32). One f32 operation followed by one rounding gives the
// correctly rounded half-precision result, which is what native f16/bf16
// instructions produce; code generators then only need conversions.
#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

bool low(const Expr& e) { return e.dtype().is_low_precision_float(); }
Expr up(const Expr& e) { return make_cast(f32, e, e->loc); }

class Legalizer : public IRMutator {
 public:
  using IRMutator::mutate_node;

  Expr mutate_node(const Expr& self, const BinaryNode* n) override {
    Expr a = mutate(n->a), b = mutate(n->b);
    if (!low(a)) return a.same_as(n->a) && b.same_as(n->b) ? self : make_binary(n->op, a, b, n->loc);
    Expr r = make_binary(n->op, up(a), up(b), n->loc);
    return r.dtype() == f32 ? make_cast(a.dtype(), r, n->loc) : r;
  }

  Expr mutate_node(const Expr& self, const UnaryNode* n) override {
    Expr a = mutate(n->a);
    if (!low(a)) return a.same_as(n->a) ? self : make_unary(n->op, a, n->loc);
    return make_cast(a.dtype(), make_unary(n->op, up(a), n->loc), n->loc);
  }

  Expr mutate_node(const Expr& self, const CallNode* n) override {
    std::vector<Expr> args;
    bool any_low = false, changed = false;
    for (const Expr& a : n->args) {
      args.push_back(mutate(a));
      changed |= !args.back().same_as(a);
    }
    if (n->op == Intrinsic::shfl_xor || n->op == Intrinsic::reinterpret ||
        n->op == Intrinsic::thread_idx || n->op == Intrinsic::block_idx)
      return changed ? make_call(n->op, args, n->loc, n->dtype) : self;
    for (const Expr& a : args) any_low |= low(a);
    if (!any_low) return changed ? make_call(n->op, args, n->loc, n->dtype) : self;
    DType orig = args[0].dtype();
    for (Expr& a : args)
      if (low(a)) a = up(a);
    Expr r = make_call(n->op, args, n->loc);
    return r.dtype() == f32 ? make_cast(orig, r, n->loc) : r;
  }

  Expr mutate_node(const Expr& self, const CastNode* n) override {
    Expr v = mutate(n->value);
    // Conversions between two small types go through f32.
    if (low(v) && n->dtype.is_low_precision_float() && v.dtype() != n->dtype)
      return make_cast(n->dtype, up(v), n->loc);
    return v.same_as(n->value) ? self : make_cast(n->dtype, v, n->loc);
  }
};

}  // namespace

Stmt legalize_low_precision(const Stmt& s) {
  Legalizer l;
  return l.mutate(s);
}

}  // namespace tx::lowering
