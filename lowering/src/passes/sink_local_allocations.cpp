// sink_local_allocations: a register buffer whose Allocate body is a
// sequence moves down to the shortest run of statements that use it.
//
// Lowering allocates a tile primitive's temporaries at the point of the call,
// and their Allocate scopes then reach to the end of the enclosing block,
// across every later barrier. The region splitter must turn a register
// buffer whose scope crosses a barrier into a per-thread array in memory; a
// buffer whose uses all sit between two barriers can stay a private value of
// one thread-loop iteration, which LLVM keeps in registers and vectorizes.
//
// Accepts: any statement. Only local buffers move (shared memory is one
// storage for the whole CTA and stays where it is); a buffer that is never
// accessed loses its Allocate. Moving an allocation down changes nothing a
// program can observe: a fresh register buffer holds no defined value.
#include <unordered_set>

#include "tx/lowering/host_form.hpp"

namespace tx::lowering {

namespace {

bool uses_buffer(const Stmt& s, const VarNode* data) {
  struct Finder : IRVisitor {
    const VarNode* data;
    bool found = false;
    void visit_buffer(const Buffer& b) override { found |= b->data.get() == data; }
  } f;
  f.data = data;
  f.visit(s);
  return f.found;
}

class SinkAllocations : public IRMutator {
 public:
  using IRMutator::mutate_node;
  Stmt mutate_node(const Stmt& self, const AllocateNode* n) override {
    Stmt inner = IRMutator::mutate_node(self, n);
    auto* a = inner.as<AllocateNode>();
    if (!a || a->buffer->scope != MemScope::local) return inner;
    auto* seq = a->body.as<SeqNode>();
    if (!seq) return inner;
    const VarNode* data = a->buffer->data.get();
    std::size_t first = seq->seq.size(), last = 0;
    for (std::size_t i = 0; i < seq->seq.size(); ++i) {
      if (uses_buffer(seq->seq[i], data)) {
        first = std::min(first, i);
        last = i;
      }
    }
    if (first == seq->seq.size()) return make_seq(seq->seq, a->body->loc);  // never used
    if (first == 0 && last + 1 == seq->seq.size()) return inner;
    std::vector<Stmt> out(seq->seq.begin(), seq->seq.begin() + static_cast<std::ptrdiff_t>(first));
    std::vector<Stmt> used(seq->seq.begin() + static_cast<std::ptrdiff_t>(first),
                           seq->seq.begin() + static_cast<std::ptrdiff_t>(last + 1));
    Stmt narrowed = make_allocate(a->buffer, make_seq(std::move(used), a->body->loc), a->loc);
    out.push_back(narrowed);
    out.insert(out.end(), seq->seq.begin() + static_cast<std::ptrdiff_t>(last + 1), seq->seq.end());
    return make_seq(std::move(out), a->body->loc);
  }
};

}  // namespace

Stmt sink_local_allocations(const Stmt& s) {
  SinkAllocations m;
  return m.mutate(s);
}

}  // namespace tx::lowering
