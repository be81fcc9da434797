// verify_scopes: every variable and buffer a kernel uses is used inside the
// block that binds it.
//
// The builders bind a T::let, a loop variable or a T::alloc_buffer to the
// rest of the block they are written in; C++ lets the handle outlive that
// block (assigned to an outer variable, captured by reference), and the IR
// would then use a name that the CUDA code does not declare there (NVRTC:
// `identifier "v" is undefined`) and the host fallback would read whatever
// its slot last held. Checked here, before lowering, so the error names the
// user's line of the use and of the binding.
#include <unordered_map>
#include <unordered_set>

#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

// Where each variable and buffer of the kernel is bound, whatever the scope.
class Bindings : public IRVisitor {
 public:
  std::unordered_map<const VarNode*, std::string> vars;           // var -> what binds it
  std::unordered_map<const VarNode*, const BufferNode*> buffers;  // data var -> buffer
  using IRVisitor::visit_node;
  void visit_node(const ForNode* n) override {
    vars[n->var.get()] = "the loop";
    IRVisitor::visit_node(n);
  }
  void visit_node(const LetStmtNode* n) override {
    vars[n->var.get()] = "T::let";
    IRVisitor::visit_node(n);
  }
  void visit_node(const ScopeIdBindNode* n) override {
    for (const Var& v : n->vars) vars[v.get()] = std::string("T::") + scope_id_name(n->id_kind);
    IRVisitor::visit_node(n);
  }
  void visit_node(const AllocateNode* n) override {
    buffers[n->buffer->data.get()] = n->buffer.get();
    IRVisitor::visit_node(n);
  }
  void visit_node(const PeerViewNode* n) override {
    buffers[n->view->data.get()] = n->view.get();
    IRVisitor::visit_node(n);
  }
};

}  // namespace

std::string statement_op(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::Store:
      return "T.store";
    case StmtKind::Evaluate:
      return "T.evaluate";
    case StmtKind::For:
      return s.as<ForNode>()->for_kind == ForKind::unrolled ? "T.unroll" : "T.serial";
    case StmtKind::IfThenElse:
      return "T.if_";
    case StmtKind::LetStmt:
      return "T.let";
    case StmtKind::Allocate:
      return "T.alloc_buffer";
    case StmtKind::ScopeIdBind:
      return std::string("T.") + scope_id_name(s.as<ScopeIdBindNode>()->id_kind);
    case StmtKind::TileCall:
      return s.as<TileCallNode>()->qualified_name();
    case StmtKind::Barrier:
      return "T.cuda.sync";
    default:
      return "T.prim_func";
  }
}

namespace {

class ScopeCheck : public IRVisitor {
 public:
  explicit ScopeCheck(const Bindings& b) : bindings_(b) {}

  void add_param(const Buffer& b) { buffers_.insert(b->data.get()); }
  void add_var(const Var& v) { vars_.insert(v.get()); }

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

  void visit_node(const VarNode* n) override {
    if (vars_.count(n)) return;
    auto it = bindings_.vars.find(n);
    if (it != bindings_.vars.end())
      fail(op_, n->name, loc_,
           "variable `" + n->name + "` is used outside the block it is bound in (bound by " +
               it->second + " at " + n->loc.str() +
               "); a T::let, loop variable or T::if_ body ends with its block");
    fail(op_, n->name, loc_,
         "variable `" + n->name + "` (made at " + n->loc.str() +
             ") is not bound in this kernel: use a scope id, a loop variable, a T::let, a T::dim "
             "or a scalar parameter of it");
  }
  void visit_buffer(const Buffer& b) override {
    if (!b || buffers_.count(b->data.get())) return;
    if (bindings_.buffers.count(b->data.get()))
      fail(op_, b->name, loc_,
           "buffer `" + b->name +
               "` is used outside the block it is allocated in (T::alloc_buffer or T::peer at " +
               b->loc.str() + "); an allocation ends with its block (a T::if_ body, a loop body)");
    fail(op_, b->name, loc_,
         "buffer `" + b->name + "` (made at " + b->loc.str() +
             ") does not belong to this kernel: use T::match_buffer or T::alloc_buffer in it");
  }

  void visit_node(const ForNode* n) override {
    visit(n->min);
    visit(n->extent);
    vars_.insert(n->var.get());
    visit(n->body);
    vars_.erase(n->var.get());
  }
  void visit_node(const LetStmtNode* n) override {
    visit(n->value);
    vars_.insert(n->var.get());
    visit(n->body);
    vars_.erase(n->var.get());
  }
  void visit_node(const ScopeIdBindNode* n) override {
    for (const Var& v : n->vars) vars_.insert(v.get());
    visit(n->body);
    for (const Var& v : n->vars) vars_.erase(v.get());
  }
  void visit_node(const AllocateNode* n) override {
    buffers_.insert(n->buffer->data.get());
    visit(n->body);
    buffers_.erase(n->buffer->data.get());
  }
  // A T::peer view is bound to the rest of its block, as an allocation.
  void visit_node(const PeerViewNode* n) override {
    visit_buffer(n->of);
    visit(n->rank);
    buffers_.insert(n->view->data.get());
    visit(n->body);
    buffers_.erase(n->view->data.get());
  }

 private:
  const Bindings& bindings_;
  std::unordered_set<const VarNode*> vars_;
  std::unordered_set<const VarNode*> buffers_;  // by data var
  SourceLoc loc_;
  std::string op_ = "T.prim_func";
};

}  // namespace

void verify_scopes(const PrimFunc& f) {
  Bindings b;
  b.visit(f->body);
  ScopeCheck c(b);
  for (const Param& p : f->params) {
    if (p.buffer) c.add_param(p.buffer);
    if (p.scalar.defined()) c.add_var(p.scalar);
  }
  for (const DimParam& d : f->dims) c.add_var(d.var);
  c.visit(f->body);
}

}  // namespace tx::lowering
