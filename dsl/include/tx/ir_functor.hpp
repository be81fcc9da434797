// IRVisitor walks, IRMutator rebuilds. Both dispatch on the node-kind list of
// ir.hpp, so a new node kind is a compile error here until handled.
//
// Override the per-node hooks you need; the defaults recurse into children
// (the mutator rebuilds a node only if a child changed, keeping sharing).
#pragma once

#include <functional>

#include "tx/ir.hpp"

namespace tx {

class IRVisitor {
 public:
  virtual ~IRVisitor();
  virtual void visit(const Expr& e);
  virtual void visit(const Stmt& s);
  virtual void visit_region(const BufferRegion& r);
  virtual void visit_buffer(const Buffer&) {}

#define TX_DECL(N) virtual void visit_node(const N##Node* n);
  TX_EXPR_NODES(TX_DECL)
  TX_STMT_NODES(TX_DECL)
#undef TX_DECL
};

class IRMutator {
 public:
  virtual ~IRMutator();
  virtual Expr mutate(const Expr& e);
  virtual Stmt mutate(const Stmt& s);
  virtual Buffer mutate_buffer(const Buffer& b) { return b; }
  virtual BufferRegion mutate_region(const BufferRegion& r);

#define TX_DECL(N) virtual Expr mutate_node(const Expr& self, const N##Node* n);
  TX_EXPR_NODES(TX_DECL)
#undef TX_DECL
#define TX_DECL(N) virtual Stmt mutate_node(const Stmt& self, const N##Node* n);
  TX_STMT_NODES(TX_DECL)
#undef TX_DECL
};

// Replace vars by expressions (keyed by var identity).
Expr substitute(const Expr& e, const std::vector<std::pair<Var, Expr>>& map);
Stmt substitute(const Stmt& s, const std::vector<std::pair<Var, Expr>>& map);

// Calls f on every statement, parents before children.
void for_each_stmt(const Stmt& s, const std::function<void(const Stmt&)>& on_stmt);
bool expr_uses_var(const Expr& e, const Var& v);

}  // namespace tx
