// check_bounds: an element access A(i, j) whose index provably leaves the
// buffer is an error when the kernel is built, naming the buffer, the index
// expression, the value it reaches and the user's line.
//
// "Provably" means a witness: values of the variables the index depends on
// (scope ids, loop variables, T::let values computed from them) that the
// kernel really runs with -- each within its range, satisfying every
// enclosing T::if_ condition and select / && / || arm on the way to the
// access, and the bounds of the loops it is in -- for which the index is out
// of range. The interval analysis that proves regions in bounds only
// over-approximates, so it serves as a filter (an index whose interval is
// inside the extent needs no search); the search then tries the corners of
// the variables' ranges and a few points inside. An access with no witness
// (it depends on memory, or the analysis cannot decide) compiles; the
// checked host mode (TX_CHECK=1) bounds-checks it at run time.
#include <algorithm>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "tx/lowering/lower.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

using Assignment = std::unordered_map<const VarNode*, std::int64_t>;

struct LoopBounds {
  Expr min, extent;
};

class BoundsCheck : public IRVisitor {
 public:
  explicit BoundsCheck(const LaunchConfig& launch) : launch_(launch) {
    env_.cta_threads = launch.block;
    env_.grid = launch.grid;
    for (const auto& [v, f] : launch.param_facts) env_.bind(v, f);
  }

  using IRVisitor::visit;
  using IRVisitor::visit_node;

  void visit(const Stmt& s) override {
    if (!s) return;
    SourceLoc saved = loc_;
    std::string saved_op = op_;
    if (s->loc.known()) loc_ = s->loc;
    op_ = statement_op(s);
    IRVisitor::visit(s);
    loc_ = saved;
    op_ = saved_op;
  }

  void visit_node(const ScopeIdBindNode* n) override {
    for (auto& [v, f] : scope_id_facts(n, launch_)) env_.bind(v, f);
    // A grid computed at launch: bx < its extent, like a loop's bound (so a
    // witness never takes a CTA the grid does not have).
    if (n->symbolic())
      for (std::size_t i = 0; i < n->vars.size(); ++i)
        loops_[n->vars[i].get()] = {make_int(0), n->extent_exprs[i]};
    visit(n->body);
  }
  void visit_node(const ForNode* n) override {
    visit(n->min);
    visit(n->extent);
    Interval lo = env_.bound(n->min), ex = env_.bound(n->extent);
    VarFact f;
    if (lo.bounded() && ex.bounded())
      f.range = {lo.lo, lo.hi + std::max<std::int64_t>(ex.hi - 1, 0)};
    env_.bind(n->var, f);
    loops_[n->var.get()] = {n->min, n->extent};
    visit(n->body);
  }
  void visit_node(const LetStmtNode* n) override {
    visit(n->value);
    env_.bind(n->var, {env_.bound(n->value), Uniformity::thread, env_.known_divisor(n->value)});
    env_.define(n->var, n->value);  // provably_le looks through it
    lets_[n->var.get()] = n->value;
    visit(n->body);
  }
  void visit_node(const IfThenElseNode* n) override {
    visit(n->cond);
    guards_.push_back({n->cond, true});
    visit(n->then_case);
    guards_.back().second = false;
    visit(n->else_case);
    guards_.pop_back();
  }
  void visit_node(const SelectNode* n) override {
    visit(n->cond);
    guards_.push_back({n->cond, true});
    visit(n->t);
    guards_.back().second = false;
    visit(n->f);
    guards_.pop_back();
  }
  void visit_node(const BinaryNode* n) override {
    if (n->op != BinOp::And && n->op != BinOp::Or) return IRVisitor::visit_node(n);
    visit(n->a);  // the right side runs only when the left does not decide
    guards_.push_back({n->a, n->op == BinOp::And});
    visit(n->b);
    guards_.pop_back();
  }
  void visit_node(const LoadNode* n) override {
    IRVisitor::visit_node(n);
    // The access is named, not the statement it is in: an out-of-bounds
    // read in `B(t) = A(t + 1)` is T.load of A.
    check("T.load", n->buffer, n->indices, n->loc.known() ? n->loc : loc_);
  }
  void visit_node(const StoreNode* n) override {
    IRVisitor::visit_node(n);
    check(op_, n->buffer, n->indices, loc_);
  }

 private:
  void check(const std::string& op, const Buffer& b, const std::vector<Expr>& idx, SourceLoc loc) {
    for (std::size_t d = 0; d < idx.size() && d < b->shape.size(); ++d) {
      Interval iv = env_.bound(idx[d]);
      // A symbolic extent (a T::dim): its smallest value decides the filter,
      // and the witness chooses it along with the other variables.
      const Expr& extent_expr = b->dims[d];
      Interval ext = env_.bound(extent_expr);
      if (iv.lo >= 0 && iv.hi < ext.lo) continue;
      if (iv.lo >= 0 && below(idx[d], extent_expr)) continue;
      Assignment at;
      std::int64_t extent = 0;
      auto value = witness(idx[d], extent_expr, &at, &extent);
      if (!value) continue;
      std::string where;
      std::vector<std::pair<std::string, std::int64_t>> shown;
      std::unordered_set<const VarNode*> in_index;
      free_vars(idx[d], &in_index);
      free_vars(extent_expr, &in_index);
      for (auto& [v, x] : at)
        if (in_index.count(v)) shown.emplace_back(v->name, x);
      std::sort(shown.begin(), shown.end());
      for (auto& [name, x] : shown)
        where += (where.empty() ? "" : ", ") + name + " = " + std::to_string(x);
      std::string dim = idx.size() > 1 ? " in dimension " + std::to_string(d) : "";
      std::string what = as_const_int(idx[d])
                             ? "index " + std::to_string(*value) + dim + " is"
                             : "index `" + to_string(idx[d]) + "`" + dim + " reaches " +
                                   std::to_string(*value) +
                                   (where.empty() ? "" : " (at " + where + ")") + ",";
      std::string range = "[0, " + std::to_string(extent) + ")";
      if (!extent_expr.as<IntImmNode>())
        range = "[0, " + to_string(extent_expr) + ") = [0, " + std::to_string(extent) + ")";
      fail(op, b->name, loc, what + " outside " + range + " of " + b->name + shape_text(b));
    }
  }

  // Whether index < extent holds wherever this access runs, proved without
  // a search: symbolically (index + 1 <= extent as linear forms, the common
  // terms cancelling), through min(a, b) (either side), or from an enclosing
  // guard `L < R` / `L <= R` that holds here with index <= L and R <= extent
  // (the predicated tiles of shape-generic kernels: `if base + j < n:
  // x[base + j]`). Only a filter in front of the witness search: what it
  // cannot prove still gets searched.
  bool below(const Expr& index, const Expr& extent) const {
    if (provably_lt(index, extent, env_)) return true;
    if (auto* m = index.as<BinaryNode>(); m && m->op == BinOp::Min)
      return below(m->a, extent) || below(m->b, extent);
    for (const auto& [cond, holds] : guards_)
      if (guard_bounds(cond, holds, index, extent)) return true;
    return false;
  }
  // `cond` has the value `holds` here: a comparison lhs < rhs (or <=) that
  // follows from it bounds the index when index <= lhs and rhs <= extent.
  bool guard_bounds(const Expr& cond, bool holds, const Expr& index, const Expr& extent) const {
    auto* b = cond.as<BinaryNode>();
    if (!b) return false;
    if (b->op == (holds ? BinOp::And : BinOp::Or))  // both sides have that value
      return guard_bounds(b->a, holds, index, extent) || guard_bounds(b->b, holds, index, extent);
    Expr lhs, rhs;
    bool strict = false;
    switch (b->op) {
      case BinOp::LT:
        lhs = holds ? b->a : b->b, rhs = holds ? b->b : b->a, strict = holds;
        break;
      case BinOp::LE:
        lhs = holds ? b->a : b->b, rhs = holds ? b->b : b->a, strict = !holds;
        break;
      case BinOp::GT:
        lhs = holds ? b->b : b->a, rhs = holds ? b->a : b->b, strict = holds;
        break;
      case BinOp::GE:
        lhs = holds ? b->b : b->a, rhs = holds ? b->a : b->b, strict = !holds;
        break;
      default:
        return false;
    }
    // strict: index <= lhs < rhs <= extent; else index < lhs <= rhs <= extent.
    return (strict ? provably_le(index, lhs, env_) : provably_lt(index, lhs, env_)) &&
           provably_le(rhs, extent, env_);
  }

  static std::string shape_text(const Buffer& b) {
    std::string r = " (";
    for (std::size_t i = 0; i < b->dims.size(); ++i) r += (i ? ", " : "") + to_string(b->dims[i]);
    return r + (b->dims.size() == 1 ? ",)" : ")");
  }

  // Variables an expression depends on, through the T::let values.
  void free_vars(const Expr& e, std::unordered_set<const VarNode*>* out) const {
    struct V : IRVisitor {
      const BoundsCheck* self;
      std::unordered_set<const VarNode*>* out;
      void visit_node(const VarNode* v) override {
        if (!out->insert(v).second) return;
        auto it = self->lets_.find(v);
        if (it != self->lets_.end()) visit(it->second);
        auto lp = self->loops_.find(v);
        if (lp != self->loops_.end()) {
          visit(lp->second.min);
          visit(lp->second.extent);
        }
      }
      using IRVisitor::visit_node;
    } w;
    w.self = this;
    w.out = out;
    w.visit(e);
  }

  // A value of `index` outside [0, extent) under some feasible assignment.
  std::optional<std::int64_t> witness(const Expr& index, const Expr& extent_expr, Assignment* found,
                                      std::int64_t* found_extent) {
    std::unordered_set<const VarNode*> vars;
    free_vars(index, &vars);
    free_vars(extent_expr, &vars);
    for (const auto& g : guards_) free_vars(g.first, &vars);
    // The free variables (not T::let values, which are computed) with their
    // candidate values; a variable without a finite range cannot be chosen.
    std::vector<const VarNode*> free;
    std::vector<std::vector<std::int64_t>> cand;
    for (const VarNode* v : vars) {
      if (lets_.count(v)) continue;
      const VarFact* f = env_.find(v);
      if (!f || !f->range.bounded()) return std::nullopt;
      Interval r = f->range;
      std::vector<std::int64_t> c = {r.lo, r.hi, r.lo + (r.hi - r.lo) / 2, r.lo + 1, r.hi - 1};
      c.erase(
          std::remove_if(c.begin(), c.end(), [&](std::int64_t x) { return x < r.lo || x > r.hi; }),
          c.end());
      std::sort(c.begin(), c.end());
      c.erase(std::unique(c.begin(), c.end()), c.end());
      free.push_back(v);
      cand.push_back(std::move(c));
    }
    // Deterministic order: the message must not depend on hashing.
    std::vector<std::size_t> order(free.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return free[a]->id < free[b]->id; });

    std::int64_t point_extent = 0;
    auto try_point = [&](const Assignment& a) -> std::optional<std::int64_t> {
      let_values_.clear();
      for (const auto& [v, lp] : loops_) {
        if (!a.count(v)) continue;
        auto lo = eval(lp.min, a), ex = eval(lp.extent, a);
        if (!lo || !ex || a.at(v) < *lo || a.at(v) >= *lo + *ex) return std::nullopt;
      }
      for (const auto& [cond, polarity] : guards_) {
        auto c = eval(cond, a);
        if (!c || (*c != 0) != polarity) return std::nullopt;
      }
      auto x = eval(index, a);
      auto extent = eval(extent_expr, a);
      if (x && extent && (*x < 0 || *x >= *extent)) {
        point_extent = *extent;
        return x;
      }
      return std::nullopt;
    };

    // Every combination of candidates when few, the corners when more,
    // random points otherwise (the search is only a way to find a witness).
    // The message shows the point that lies farthest outside.
    std::optional<std::int64_t> best;
    std::int64_t best_distance = 0;
    auto consider = [&](const Assignment& a) {
      auto x = try_point(a);
      if (!x) return;
      std::int64_t distance = *x < 0 ? -*x : *x - point_extent + 1;
      if (!best || distance > best_distance) {
        best = x;
        best_distance = distance;
        *found = a;
        *found_extent = point_extent;
      }
    };
    std::size_t combos = 1;
    for (auto& c : cand) combos = std::min<std::size_t>(combos * c.size(), 1u << 20);
    Assignment a;
    if (combos <= 20000) {
      std::vector<std::size_t> pos(free.size(), 0);
      for (std::size_t n = 0; n < combos; ++n) {
        for (std::size_t k : order) a[free[k]] = cand[k][pos[k]];
        consider(a);
        for (std::size_t k = 0; k < pos.size(); ++k) {
          if (++pos[k] < cand[k].size()) break;
          pos[k] = 0;
        }
      }
      return best;
    }
    std::mt19937_64 rng(0x7853u);
    for (int n = 0; n < 20000 && !best; ++n) {
      for (std::size_t k : order) {
        const auto& c = cand[k];
        a[free[k]] = n < 4096 ? c[(n >> (k % 12)) & 1 ? c.size() - 1 : 0] : c[rng() % c.size()];
      }
      consider(a);
    }
    return best;
  }

  // Integer value of an expression at an assignment (T::let values computed
  // from their definitions, once per assignment: try_point clears them).
  std::optional<std::int64_t> eval(const Expr& e, const Assignment& a, int depth = 0) const {
    if (depth > 64) return std::nullopt;
    return evaluate_int(e, [&](const VarNode* v) -> std::optional<std::int64_t> {
      auto it = a.find(v);
      if (it != a.end()) return it->second;
      auto known = let_values_.find(v);
      if (known != let_values_.end()) return known->second;
      auto l = lets_.find(v);
      if (l == lets_.end()) return std::nullopt;
      std::optional<std::int64_t> x = eval(l->second, a, depth + 1);
      let_values_.emplace(v, x);
      return x;
    });
  }

  LaunchConfig launch_;
  Env env_;
  std::vector<std::pair<Expr, bool>> guards_;  // condition, the value it has here
  std::unordered_map<const VarNode*, Expr> lets_;
  std::unordered_map<const VarNode*, LoopBounds> loops_;
  mutable std::unordered_map<const VarNode*, std::optional<std::int64_t>> let_values_;
  SourceLoc loc_;
  std::string op_ = "T.prim_func";
};

}  // namespace

void check_bounds(const PrimFunc& f, const LaunchConfig& launch) {
  BoundsCheck c(launch);
  c.visit(f->body);
}

}  // namespace tx::lowering
