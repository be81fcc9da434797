// simplify_stmt: simplifies every expression with the ranges of the
// variables in scope, drops loops that run zero times, inlines loops that
// run once and picks the branch of ifs whose condition is constant.
#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

class StmtSimplifier : public ScopedMutator {
 public:
  using ScopedMutator::ScopedMutator;
  using ScopedMutator::mutate_node;

  Expr mutate(const Expr& e) override { return e ? simplify(e, &env_) : e; }
  using ScopedMutator::mutate;

  Stmt mutate_node(const Stmt& self, const ForNode* n) override {
    Expr ext = mutate(n->extent), mn = mutate(n->min);
    if (is_const_int(ext, 0)) return make_seq({}, n->loc);
    if (is_const_int(ext, 1)) return mutate(substitute(n->body, {{n->var, mn}}));
    return ScopedMutator::mutate_node(self, n);
  }

  Stmt mutate_node(const Stmt& self, const IfThenElseNode* n) override {
    Expr c = mutate(n->cond);
    if (auto k = as_const_int(c)) {
      if (*k) return mutate(n->then_case);
      return n->else_case ? mutate(n->else_case) : make_seq({}, n->loc);
    }
    return ScopedMutator::mutate_node(self, n);
  }
};

}  // namespace

Stmt simplify_stmt(const Stmt& s, const LaunchConfig& launch) {
  StmtSimplifier ss(launch);
  return ss.mutate(s);
}

}  // namespace tx::lowering
