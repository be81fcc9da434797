// infer_local_uniformity (part of verify_kernel): local memory that every
// thread of a group (a warpgroup, the CTA) writes alike holds the same values
// in each of them. A store counts as alike when its value and indices are
// uniform over the group and it runs under conditions and loop bounds that
// are; any other write -- a tile op's destination, a per-thread value --
// makes the buffer per-thread. Loads from such a buffer are then as uniform
// as its contents (Env::level), so a barrier or a pipeline wait may depend
// on them: a scheduler's running state kept in registers (grouped_matmul's
// scan over the experts' row counts, a position counted across tiles) is
// as uniform as the scalars it is computed from, as it is on the GPU.
// A store's value may read other local buffers, so the levels are found by
// iteration: every local buffer starts uniform over the CTA and is lowered
// until nothing changes (levels only fall, so it ends).
#include <algorithm>
#include <unordered_map>

#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

using Levels = std::unordered_map<const VarNode*, Uniformity>;

class WriteLevels : public ScopedMutator {
 public:
  WriteLevels(const LaunchConfig& launch, Levels& levels)
      : ScopedMutator(launch), levels_(levels) {}
  bool changed = false;

  using ScopedMutator::mutate_node;
  Stmt mutate_node(const Stmt& self, const StoreNode* n) override {
    if (n->buffer->scope == MemScope::local) {
      Uniformity u = env_.level(n->value);
      for (const Expr& i : n->indices) u = std::min(u, env_.level(i));
      for (const Guard& g : guards_) u = std::min(u, g.level);
      lower(n->buffer, u);
    }
    return ScopedMutator::mutate_node(self, n);
  }
  // A tile op's local operands are fragments: per-thread by nature (a
  // destination is written per thread; the others are left alone, but a
  // fence or a wait may name them, and nothing uniform is kept in them).
  Stmt mutate_node(const Stmt& self, const TileCallNode* n) override {
    for (const TileArg& a : n->args)
      if (auto* r = std::get_if<BufferRegion>(&a); r && r->buffer->scope == MemScope::local)
        lower(r->buffer, Uniformity::thread);
    return ScopedMutator::mutate_node(self, n);
  }

 private:
  void lower(const Buffer& b, Uniformity u) {
    auto it = levels_.find(b->data.get());
    if (it == levels_.end() || u >= it->second) return;
    it->second = u;
    changed = true;
  }
  Levels& levels_;
};

// Every local buffer the kernel allocates.
struct LocalBuffers : IRVisitor {
  std::vector<Buffer> found;
  using IRVisitor::visit_node;
  void visit_node(const AllocateNode* n) override {
    if (n->buffer->scope == MemScope::local) found.push_back(n->buffer);
    IRVisitor::visit_node(n);
  }
};

}  // namespace

void infer_local_uniformity(const PrimFunc& f, LaunchConfig& launch) {
  LocalBuffers locals;
  locals.visit(f->body);
  if (locals.found.empty()) return;
  Levels levels;
  for (const Buffer& b : locals.found) levels[b->data.get()] = Uniformity::cta;
  const std::size_t base = launch.param_facts.size();
  for (;;) {
    LaunchConfig assumed = launch;
    for (const Buffer& b : locals.found) {
      VarFact fact;
      fact.memory_level = levels[b->data.get()];
      assumed.param_facts.emplace_back(b->data, fact);
    }
    WriteLevels w(assumed, levels);
    w.mutate(f->body);
    if (!w.changed) break;
  }
  launch.param_facts.resize(base);
  for (const Buffer& b : locals.found) {
    const Uniformity u = levels[b->data.get()];
    if (u == Uniformity::thread) continue;
    VarFact fact;
    fact.memory_level = u;
    launch.param_facts.emplace_back(b->data, fact);
  }
}

}  // namespace tx::lowering
