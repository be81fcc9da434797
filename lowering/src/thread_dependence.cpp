// Thread dependence of expressions, for the host lowering: whether a loop
// bound or a condition around a barrier is the same for every thread that
// must meet at that barrier. Lowered IR has lost the scope-id facts of the
// source (warp_id is just threadIdx.x / 32 now), so the group structure is
// recovered from the index arithmetic itself: only exact quotients of
// threadIdx.x by constants count as coarser than one thread. Anything
// loaded from memory counts as per-thread, as in lowering's own Env::level.
#include <numeric>

#include "tx/lowering/host_form.hpp"

namespace tx::lowering {

namespace {

std::int64_t group_gcd(std::int64_t a, std::int64_t b) {
  if (a == ThreadDep::kUniform) return b;
  if (b == ThreadDep::kUniform) return a;
  return std::gcd(a, b);
}

class DepWalker : public IRVisitor {
 public:
  explicit DepWalker(const std::unordered_map<const VarNode*, ThreadDep>& vars) : vars_(vars) {}

  ThreadDep walk(const Expr& e) {
    ThreadDep saved = result_;
    result_ = {};
    visit(e);
    ThreadDep r = result_;
    result_ = saved;
    return r;
  }

  using IRVisitor::visit_node;
  void visit_node(const VarNode* n) override {
    auto it = vars_.find(n);
    result_ = it != vars_.end() ? it->second : ThreadDep{1, 0};
  }
  void visit_node(const LoadNode* n) override {
    for (const Expr& i : n->indices) walk(i);
    result_ = {1, 0};
  }
  void visit_node(const CallNode* n) override {
    switch (n->op) {
      case Intrinsic::thread_idx:
        result_ = {1, 1};
        return;
      case Intrinsic::shfl_xor:
      case Intrinsic::check_access:  // checked mode: per-thread calls
      case Intrinsic::check_barrier:
        result_ = {1, 0};
        return;
      case Intrinsic::check_divisor:  // the divisor, passed through
      case Intrinsic::check_index:    // the index, passed through
        result_ = {walk(n->args[0]).group, 0};
        return;
      default:
        break;
    }
    ThreadDep d;
    for (const Expr& a : n->args) d.group = group_gcd(d.group, walk(a).group);
    result_ = d;
  }
  void visit_node(const BinaryNode* n) override {
    ThreadDep a = walk(n->a), b = walk(n->b);
    auto c = as_const_int(n->b);
    bool divides = n->op == BinOp::Div || n->op == BinOp::FloorDiv || n->op == BinOp::Shr;
    if (divides && a.quotient > 0 && c && *c >= 0) {
      std::int64_t by = n->op == BinOp::Shr ? (*c < 40 ? std::int64_t{1} << *c : 0) : *c;
      if (by > 0 && a.quotient <= (std::int64_t{1} << 40) / by) {
        result_ = {a.quotient * by, a.quotient * by};
        return;
      }
    }
    result_ = {group_gcd(a.group, b.group), 0};
  }
  void visit_node(const UnaryNode* n) override { result_ = {walk(n->a).group, 0}; }
  void visit_node(const CastNode* n) override {
    ThreadDep v = walk(n->value);
    // Widening an index keeps it an exact quotient; anything else does not.
    bool exact = n->dtype.is_integer() && n->value.dtype().is_integer() &&
                 n->dtype.bits >= n->value.dtype().bits;
    result_ = {v.group, exact ? v.quotient : 0};
  }
  void visit_node(const SelectNode* n) override {
    std::int64_t g = group_gcd(walk(n->cond).group, group_gcd(walk(n->t).group, walk(n->f).group));
    result_ = {g, 0};
  }
  void visit_node(const IntImmNode*) override { result_ = {}; }
  void visit_node(const FloatImmNode*) override { result_ = {}; }

 private:
  const std::unordered_map<const VarNode*, ThreadDep>& vars_;
  ThreadDep result_;
};

}  // namespace

ThreadDep ThreadDependence::of(const Expr& e) const {
  DepWalker w(vars_);
  return w.walk(e);
}

Uniformity ThreadDependence::level(const ThreadDep& d) const {
  if (d.group == ThreadDep::kUniform || d.group >= block_) return Uniformity::cta;
  if (d.group % 128 == 0) return Uniformity::warpgroup;
  if (d.group % 32 == 0) return Uniformity::warp;
  return Uniformity::thread;
}

const BarrierNode* first_barrier(const Stmt& s) {
  const BarrierNode* found = nullptr;
  for_each_stmt(s, [&](const Stmt& x) {
    if (!found) found = x.as<BarrierNode>();
  });
  return found;
}

bool contains_barrier(const Stmt& s) { return first_barrier(s) != nullptr; }

std::string barrier_op(const BarrierNode* b, const HostContext& cx) {
  auto it = cx.barrier_ops.find(b);
  if (it != cx.barrier_ops.end()) return it->second;
  switch (b->scope) {
    case ExecScope::cta:
      return "T.cuda.cta_sync";
    case ExecScope::warpgroup:
      return "T.cuda.warpgroup_sync";
    case ExecScope::warp:
      return "T.cuda.warp_sync";
    case ExecScope::thread:
      break;
  }
  return "barrier";
}

}  // namespace tx::lowering

namespace tx::lowering {

const CallNode* first_mbarrier_call(const Stmt& body) {
  struct Find : IRVisitor {
    const CallNode* found = nullptr;
    using IRVisitor::visit_node;
    void visit_node(const CallNode* n) override {
      if (!found &&
          (n->op == Intrinsic::mbarrier_init || n->op == Intrinsic::mbarrier_wait ||
           n->op == Intrinsic::mbarrier_arrive || n->op == Intrinsic::mbarrier_expect_tx ||
           n->op == Intrinsic::named_barrier_sync || n->op == Intrinsic::named_barrier_arrive ||
           n->op == Intrinsic::wait_until))
        found = n;
      IRVisitor::visit_node(n);
    }
  } f;
  f.visit(body);
  return f.found;
}

}  // namespace tx::lowering
