// lower_tile_ops: replaces every tile-primitive call by the code of the
// variant dispatch chooses for it, given the call's execution scope, the
// CTA size, the ranges and uniformity of the variables in scope, and the
// enclosing guards (which decide whether all threads of the scope are active).
#include "tx/lowering/lower.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

class TileLowerer : public ScopedMutator {
 public:
  TileLowerer(const LaunchConfig& launch, std::vector<TileCallRecord>* log)
      : ScopedMutator(launch), log_(log) {}
  using ScopedMutator::mutate_node;

  Stmt mutate_node(const Stmt& self, const TileCallNode*) override {
    // Region starts simplified with the ranges in scope: shorter to print,
    // tighter to bound.
    struct StartSimplifier : IRMutator {
      const Env* env;
      Expr mutate(const Expr& e) override { return e ? simplify(e, env) : e; }
      using IRMutator::mutate;
    } ss;
    ss.env = &env_;
    Stmt simplified = ss.mutate(self);
    const TileCallNode* n = simplified.as<TileCallNode>();
    DispatchContext ctx;
    ctx.call = n;
    ctx.scope = n->scope;
    ctx.cta_threads = launch_.block;
    ctx.scope_threads = exec_scope_threads(n->scope, launch_.block);
    ctx.env = &env_;
    ctx.guards = guards_;
    DispatchResult r = dispatch(ctx);
    if (log_) log_->push_back({tile_call_str(n), r.variant->qualified(), n->loc});
    return r.lowered;
  }

 private:
  std::vector<TileCallRecord>* log_;
};

}  // namespace

Stmt lower_tile_ops(const Stmt& s, const LaunchConfig& launch, std::vector<TileCallRecord>* log) {
  TileLowerer l(launch, log);
  return l.mutate(s);
}

}  // namespace tx::lowering
