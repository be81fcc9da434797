// verify_kernel: checks the structure of a user kernel before lowering and
// derives its launch configuration.
//
// Scope ids (T.cta_id, T.thread_id, ...) must be bound once each at the top
// level (not inside loops or ifs) and agree with each other (warp_id * 32 ==
// thread_id's extent, ...). Barriers (T.cuda.*_sync) must not sit under a
// condition that varies between the threads they synchronize -- undefined
// on the GPU and impossible for the host fallback -- so they are rejected
// here with the user's line.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "tx/lowering/lower.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

class StructureCheck : public IRVisitor {
 public:
  std::map<ScopeIdKind, const ScopeIdBindNode*> ids;
  int depth = 0;  // nesting inside loops / ifs

  void visit_node(const ScopeIdBindNode* n) override {
    std::string op = std::string("T.") + scope_id_name(n->id_kind);
    if (depth > 0) fail(op, "", n->loc, "scope ids must be bound at the top level of the kernel");
    if (ids.count(n->id_kind))
      fail(op, "", n->loc, "is bound twice (first at " + ids[n->id_kind]->loc.str() + ")");
    ids[n->id_kind] = n;
    IRVisitor::visit_node(n);
  }
  void visit_node(const ForNode* n) override {
    ++depth;
    IRVisitor::visit_node(n);
    --depth;
  }
  void visit_node(const IfThenElseNode* n) override {
    ++depth;
    IRVisitor::visit_node(n);
    --depth;
  }
  using IRVisitor::visit_node;
};

// Walks with an Env so conditions can be classified by uniformity.
class BarrierCheck : public ScopedMutator {
 public:
  using ScopedMutator::mutate_node;
  using ScopedMutator::ScopedMutator;
  Stmt mutate_node(const Stmt& self, const BarrierNode* n) override {
    Uniformity need = scope_level(n->scope);
    for (const Guard& g : guards_)
      if (static_cast<int>(g.level) < static_cast<int>(need))
        fail(std::string("T.cuda.") + (n->scope == ExecScope::cta    ? "cta_sync"
                                       : n->scope == ExecScope::warp ? "warp_sync"
                                                                     : "warpgroup_sync"),
             "", n->loc,
             "barrier under the condition `" + g.text + "` (" + g.loc.str() +
                 ") which varies per " + uniformity_name(g.level) +
                 ": not every thread would reach it");
    if (n->scope == ExecScope::warpgroup && launch_.block % 128 != 0)
      fail("T.cuda.warpgroup_sync", "", n->loc, "the CTA is not made of whole warpgroups");
    return self;
  }
  // A named barrier counts whole warps: every lane of a warp must reach it.
  Stmt mutate_node(const Stmt& self, const EvaluateNode* n) override {
    const auto* call = n->value.as<CallNode>();
    if (call && (call->op == Intrinsic::named_barrier_sync ||
                 call->op == Intrinsic::named_barrier_arrive)) {
      const char* op = call->op == Intrinsic::named_barrier_sync ? "T.named_barriers.sync"
                                                                 : "T.named_barriers.arrive";
      for (const Guard& g : guards_)
        if (static_cast<int>(g.level) < static_cast<int>(Uniformity::warp))
          fail(op, "", n->loc,
               "named barrier under the condition `" + g.text + "` (" + g.loc.str() +
                   ") which varies per " + uniformity_name(g.level) +
                   ": a named barrier counts whole warps, so every lane of a warp must reach it");
      if (auto t = as_const_int(call->args[1]); t && *t > launch_.block)
        fail(op, "", n->loc,
             "waits for " + std::to_string(*t) + " threads, but the CTA has " +
                 std::to_string(launch_.block));
    }
    return ScopedMutator::mutate_node(self, n);
  }
};

// T.tile_coord(d) stands for an element's coordinate inside a where=
// predicate only; an Expr the lambda leaked elsewhere (kept in an outer
// variable) has no value there.
class TileCoordCheck : public IRVisitor {
 public:
  using IRVisitor::visit_node;
  void visit_node(const TileCallNode* n) override {
    for (const TileArg& a : n->args) {
      if (auto* r = std::get_if<BufferRegion>(&a))
        visit_region(*r);
      else
        visit(std::get<Expr>(a));
    }
    visit(n->attrs.scale.value);
    visit(n->attrs.bias.value);
    visit(n->attrs.barrier);
    inside_where_ = true;
    visit(n->attrs.where.cond);
    inside_where_ = false;
  }
  void visit_node(const CallNode* n) override {
    if (n->op == Intrinsic::tile_coord && !inside_where_)
      fail("where=", "", n->loc,
           "a coordinate of a where= lambda is used outside it (the lambda's arguments have a "
           "value only in the condition it returns)");
    IRVisitor::visit_node(n);
  }

 private:
  bool inside_where_ = false;
};

}  // namespace

LaunchConfig verify_kernel(const PrimFunc& f) {
  StructureCheck sc;
  sc.visit(f->body);
  LaunchConfig lc;
  // The facts every pass may assume: T::dim variables within their facts,
  // scalar parameters within their type, all uniform over the whole launch.
  Env facts;
  // A T::dim is bound from a tensor's shape at launch: some buffer must have it.
  for (const DimParam& d : f->dims) {
    bool used = false;
    for (const Param& p : f->params)
      if (p.buffer)
        for (const Expr& e : p.buffer->dims) used = used || e.same_as(d.var);
    if (!used)
      fail("T.dim", d.var.name(), d.loc,
           "is not an extent of any T::match_buffer: a T::dim is bound from the shapes of the "
           "tensors passed (a value passed at launch is a T::match_scalar)");
  }
  for (const DimParam& d : f->dims) {
    VarFact fact{{d.min, d.max}, Uniformity::cta, d.multiple_of};
    lc.param_facts.emplace_back(d.var, fact);
    facts.bind(d.var, fact);
  }
  for (const Param& p : f->params)
    if (p.scalar.defined()) {
      VarFact fact{facts.bound(p.scalar), Uniformity::cta, 1};  // the dtype's range
      if (p.has_facts) {
        fact.range = {std::max(fact.range.lo, p.min), std::min(fact.range.hi, p.max)};
        fact.divisor = p.multiple_of;
      }
      lc.param_facts.emplace_back(p.scalar, fact);
      facts.bind(p.scalar, fact);
    }
  auto get = [&](ScopeIdKind k) -> const ScopeIdBindNode* {
    auto it = sc.ids.find(k);
    return it == sc.ids.end() ? nullptr : it->second;
  };
  for (std::size_t i = 0; i < 3; ++i) lc.grid_exprs[i] = make_int(1);
  if (auto* c = get(ScopeIdKind::cta_id)) {
    for (std::size_t i = 0; i < c->extents.size(); ++i) {
      lc.grid_exprs[i] = c->extent_exprs[i];
      if (c->extents[i] > 0) {
        lc.grid[i] = c->extents[i];
        continue;
      }
      // Known at launch: the largest it can be is what the analyses assume.
      lc.symbolic_grid = true;
      const std::int64_t hw = i == 0 ? 2147483647 : 65535;
      Interval b = facts.bound(c->extent_exprs[i]);
      lc.grid[i] = std::clamp<std::int64_t>(b.hi, 1, hw);
    }
  }
  std::int64_t block = 0;
  const ScopeIdBindNode* first = nullptr;
  auto implies = [&](const ScopeIdBindNode* n, std::int64_t threads) {
    if (!n) return;
    if (block == 0) {
      block = threads;
      first = n;
    } else if (block != threads) {
      fail(std::string("T.") + scope_id_name(n->id_kind), "", n->loc,
           "implies " + std::to_string(threads) + " threads per CTA but T." +
               scope_id_name(first->id_kind) + " at " + first->loc.str() + " implies " +
               std::to_string(block));
    }
  };
  implies(get(ScopeIdKind::thread_id),
          get(ScopeIdKind::thread_id) ? get(ScopeIdKind::thread_id)->extents[0] : 0);
  if (auto* w = get(ScopeIdKind::warp_id)) implies(w, w->extents[0] * 32);
  if (auto* w = get(ScopeIdKind::warpgroup_id)) implies(w, w->extents[0] * 128);
  if (auto* l = get(ScopeIdKind::lane_id)) {
    if (l->extents[0] != 32)
      fail("T.lane_id", "", l->loc, "a warp has 32 lanes; use T.lane_id([32])");
    if (block == 0) {
      block = 32;
      first = l;
    }
  }
  if (auto* w = get(ScopeIdKind::warp_id_in_wg))
    if (w->extents[0] != 4) fail("T.warp_id_in_wg", "", w->loc, "a warpgroup has 4 warps");
  if (auto* t = get(ScopeIdKind::thread_id_in_wg))
    if (t->extents[0] != 128) fail("T.thread_id_in_wg", "", t->loc, "a warpgroup has 128 threads");
  if ((get(ScopeIdKind::warp_id_in_wg) || get(ScopeIdKind::thread_id_in_wg) ||
       get(ScopeIdKind::warpgroup_id)) &&
      block % 128 != 0)
    fail("T.warpgroup_id", "", f->loc,
         "warpgroup ids need a CTA of whole warpgroups (128 threads each)");
  if (block == 0) block = 1;
  if (block > 1024)
    fail("T.thread_id", "", first ? first->loc : f->loc,
         "a CTA has at most 1024 threads, got " + std::to_string(block));
  lc.block = static_cast<int>(block);
  for (auto g : lc.grid)
    if (g > 2147483647) fail("T.cta_id", "", f->loc, "grid dimension too large");

  // Read-only memory: in a T::no_alias kernel (no parameter overlaps another,
  // checked at launch), a global parameter nothing in the kernel writes
  // holds the same values for every thread throughout.
  if (f->no_alias) {
    struct Written : IRVisitor {
      std::unordered_set<const VarNode*> data;
      using IRVisitor::visit_node;
      void visit_node(const StoreNode* n) override {
        data.insert(n->buffer->data.get());
        IRVisitor::visit_node(n);
      }
      void visit_node(const TileCallNode* n) override {
        if (auto* r = n->args.empty() ? nullptr : std::get_if<BufferRegion>(&n->args[0]))
          data.insert(r->buffer->data.get());
        IRVisitor::visit_node(n);
      }
    } w;
    w.visit(f->body);
    VarFact read_only;
    read_only.invariant_memory = true;
    for (const Param& p : f->params)
      if (p.buffer && p.buffer->scope == MemScope::global && !p.symmetric &&
          !w.data.count(p.buffer->data.get()))
        lc.param_facts.emplace_back(p.buffer->data, read_only);
  }
  infer_local_uniformity(f, lc);
  BarrierCheck bc(lc);
  bc.mutate(f->body);
  TileCoordCheck coords;
  coords.visit(f->body);
  return lc;
}

}  // namespace tx::lowering
