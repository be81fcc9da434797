// lower_tile_ops: replaces every tile-primitive call by the code of the
// variant dispatch chooses for it, given the call's execution scope, the
// CTA size, the ranges and uniformity of the variables in scope, and the
// enclosing guards (which decide whether all threads of the scope are active).
#include <functional>

#include "tx/lowering/lower.hpp"
#include "tx/printer.hpp"

// (Predicated tiles on extents known at launch: whole_tile and masked below.)

namespace tx::lowering {

namespace {

class TileLowerer : public ScopedMutator {
 public:
  TileLowerer(const LaunchConfig& launch, std::vector<TileCallRecord>* log, const Target& target)
      : ScopedMutator(launch), log_(log), target_(target) {}
  using ScopedMutator::mutate_node;

  // A dropped branch's tile calls still answer to their op's rules (dtypes,
  // operand kinds, extents that broadcast, reduction axes): what every
  // variant of the family checks first, independent of where the call runs.
  // `if (warp < 0) Tx::warp::exp2(u8_tile, ...)` is an error like the same
  // call anywhere else (found by fuzz/tile_fuzzer).
  void dead_branch(const Stmt& s) override {
    struct Calls : IRVisitor {
      TileLowerer* self;
      using IRVisitor::visit_node;
      void visit_node(const TileCallNode* n) override {
        DispatchContext ctx;
        ctx.call = n;
        ctx.scope = n->scope;
        ctx.cta_threads = self->launch_.block;
        ctx.scope_threads = exec_scope_threads(n->scope, self->launch_.block);
        ctx.env = &self->env_;
        ctx.target = self->target_;
        if (auto why = family_rules(ctx))
          fail(n->qualified_name(), "", n->loc, *why + " (in a branch that never runs)");
      }
    } calls;
    calls.self = this;
    calls.visit(s);
  }

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
    ctx.in_loop = loops_ > 0;
    ctx.target = target_;
    if (Expr whole = whole_tile(n); whole.defined()) {
      // An asynchronous copy that may reach past an extent known at launch
      // is copied synchronously, masked like a copy (cp.async zero-fill is
      // not built): correct, and every later wait is satisfied.
      if (n->op == "copy_async") {
        synthesized_.push_back(make_tile_call("copy", n->scope, n->args, n->attrs, n->loc));
        ctx.call = synthesized_.back().as<TileCallNode>();
      }
      return masked(ctx, whole);
    }
    DispatchResult r = dispatch(ctx);
    if (log_) log_->push_back({tile_call_str(n), r.variant->qualified(), n->loc});
    return r.lowered;
  }

 private:
  // A copy whose region lies on an extent known at launch (a T::dim) may
  // reach past its end: the tile is whole when start + extent <= n. Returns
  // that condition (over every such region), or nothing.
  Expr whole_tile(const TileCallNode* n) {
    if (n->op != "copy" && n->op != "copy_async") return Expr();
    Expr cond;
    for (const TileArg& a : n->args) {
      auto* r = std::get_if<BufferRegion>(&a);
      if (!r || !r->buffer->symbolic() || r->buffer->dims.size() != 1) continue;
      Expr end = add(r->ranges[0].start, c32(r->ranges[0].extent));
      Expr inside = simplify(make_binary(BinOp::LE, end, r->buffer->dims[0]), &env_);
      if (is_const_int(inside, 1)) continue;
      // Inside a T::if_ on the same condition (a generic kernel's branch for
      // the chunks that are whole), or on one that implies it (`base + 256
      // <= n` around the tiles of a thread's 256 elements), the tile is whole.
      const std::string text = to_string(inside);
      bool known = false;
      for (const Guard& g : guards_) known = known || to_string(simplify(g.cond, &env_)) == text;
      if (known || implied_by_guard(end, r->buffer->dims[0])) continue;
      cond = cond.defined() ? land(cond, inside) : inside;
    }
    return cond;
  }

  // Whether an enclosing guard (a then-branch, or a conjunct of one) says
  // `e <= n` or `e < n` for an e that is provably >= end: then end <= n.
  bool implied_by_guard(const Expr& end, const Expr& n) const {
    auto same_extent = [&](const Expr& x) {
      auto* a = x.as<VarNode>();
      auto* b = n.as<VarNode>();
      return x.same_as(n) || (a && a == b);
    };
    std::function<bool(const Expr&)> implies = [&](const Expr& c) {
      auto* b = c.as<BinaryNode>();
      if (!b) return false;
      if (b->op == BinOp::And) return implies(b->a) || implies(b->b);
      if ((b->op == BinOp::LE || b->op == BinOp::LT) && same_extent(b->b)) {
        Expr bound = b->op == BinOp::LE ? b->a : add(b->a, c32(1));
        return provably_le(end, bound, env_);
      }
      if ((b->op == BinOp::GE || b->op == BinOp::GT) && same_extent(b->a)) {
        Expr bound = b->op == BinOp::GE ? b->b : add(b->b, c32(1));
        return provably_le(end, bound, env_);
      }
      return false;
    };
    for (const Guard& g : guards_) {
      // Only then-branches of a T::if_ assert their condition (else-branches
      // and loop extents are recorded with other texts).
      if (g.text != to_string(g.cond)) continue;
      if (implies(g.cond)) return true;
    }
    return false;
  }

  // Predicated tiles: a whole tile by the variant dispatch picks (vector
  // accesses), a partial one element by element (copy/fallback, masked).
  // The condition must hold for the whole group of the copy's scope; where it
  // does not (it varies inside a warp), every tile is copied element by
  // element.
  Stmt masked(DispatchContext ctx, const Expr& whole) {
    const TileCallNode* n = ctx.call;
    Uniformity level = env_.level(whole);
    DispatchContext part = ctx;
    part.mask_symbolic = true;
    TileAttrs forced = n->attrs;
    forced.variant = "fallback";
    Stmt forced_call = make_tile_call(n->op, n->scope, n->args, forced, n->loc);
    part.call = forced_call.as<TileCallNode>();
    if (static_cast<int>(level) < static_cast<int>(scope_level(n->scope))) {
      DispatchResult r = dispatch(part);
      if (log_) log_->push_back({tile_call_str(n), "copy/fallback (masked)", n->loc});
      return r.lowered;
    }
    DispatchContext full = ctx;
    full.guards.push_back({whole, n->loc, level, to_string(whole)});
    DispatchResult w = dispatch(full);
    part.guards.push_back({whole, n->loc, level, "not (" + to_string(whole) + ")"});
    DispatchResult p = dispatch(part);
    if (log_)
      log_->push_back({tile_call_str(n),
                       w.variant->qualified() + " (whole tiles), copy/fallback (partial)", n->loc});
    return make_if(whole, w.lowered, p.lowered, n->loc);
  }

 public:
 private:
  std::vector<TileCallRecord>* log_;
  Target target_;
  std::vector<Stmt> synthesized_;  // calls made here live as long as the pass
};

}  // namespace

Stmt lower_tile_ops(const Stmt& s, const LaunchConfig& launch, std::vector<TileCallRecord>* log,
                    const Target& target) {
  TileLowerer l(launch, log, target);
  return l.mutate(s);
}

}  // namespace tx::lowering
