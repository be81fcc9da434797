// lower_scope_ids: T.cta_id / T.thread_id / T.lane_id / ... become LetStmts
// binding their variables to expressions of threadIdx.x and blockIdx, so
// that code generators only know two hardware indices.
#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {
class ScopeIdLowerer : public IRMutator {
 public:
  using IRMutator::mutate_node;
  Stmt mutate_node(const Stmt&, const ScopeIdBindNode* n) override {
    Stmt body = mutate(n->body);
    std::vector<Expr> values = scope_id_values(n);
    for (std::size_t i = n->vars.size(); i-- > 0;)
      body = make_let(n->vars[i], values[i], body, n->loc);
    return body;
  }
};
}  // namespace

Stmt lower_scope_ids(const Stmt& s) {
  ScopeIdLowerer l;
  return l.mutate(s);
}

}  // namespace tx::lowering
