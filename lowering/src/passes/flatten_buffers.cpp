// flatten_buffers: element accesses A[i, j] on multi-dimensional buffers
// become accesses to the buffer's flat storage at the offset its layout
// gives; allocations become flat per-thread (local) or per-CTA (shared)
// storage. Element access to a register tile distributed over threads is
// rejected: its elements live in different threads, so an index alone does
// not say which thread holds them (use tile primitives instead). Reading a
// tile that threads hold only as copies (a replica) is allowed.
#include "tx/lowering/layout_algebra.hpp"
#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

bool is_flat(const Buffer& b) {
  return b->shape.size() == 1 && b->layout == TileLayout::row_major(b->shape);
}

class Flattener : public IRMutator {
 public:
  using IRMutator::mutate_node;

  Expr mutate_node(const Expr& self, const LoadNode* n) override {
    if (is_flat(n->buffer)) return IRMutator::mutate_node(self, n);
    std::vector<Expr> idx;
    for (const Expr& i : n->indices) idx.push_back(mutate(i));
    return make_load(flat_view(n->buffer), {offset(n->buffer, idx, n->loc, "T.load")}, n->loc);
  }

  Stmt mutate_node(const Stmt& self, const StoreNode* n) override {
    if (is_flat(n->buffer)) return IRMutator::mutate_node(self, n);
    std::vector<Expr> idx;
    for (const Expr& i : n->indices) idx.push_back(mutate(i));
    return make_store(flat_view(n->buffer), mutate(n->value),
                      {offset(n->buffer, idx, n->loc, "T.store")}, n->loc);
  }

  Stmt mutate_node(const Stmt&, const AllocateNode* n) override {
    Buffer b = is_flat(n->buffer) ? n->buffer : flat_view(n->buffer);
    return make_allocate(b, mutate(n->body), n->loc);
  }

 private:
  static Expr offset(const Buffer& b, const std::vector<Expr>& idx, SourceLoc loc,
                     const char* what) {
    // A tile whose thread axes are only replicas (R({32}, {laneid}): every
    // lane holds a copy, as a warp reduction leaves its result) may be read:
    // each thread reads its own copy. Writing it would make the copies differ.
    bool sharded_over_threads = false;
    for (const Iter& it : b->layout.shard())
      sharded_over_threads = sharded_over_threads || (it.axis != Axis::m && it.extent > 1);
    const bool read_of_copy = std::string(what) == "T.load" && !sharded_over_threads;
    if (b->scope == MemScope::local && b->layout.has_thread_axes() && !read_of_copy)
      fail(what, b->name, loc,
           "element access to a register tile distributed over threads (" + b->layout.str() +
               "); an index does not say which thread holds the element -- use tile primitives "
               "(Tx::...::copy) to move it");
    // A buffer of 2^31 elements or more: the offset is built in i64 from
    // its leaves, before anything folds it (A(65536, 5) on a (65537, 32768)
    // buffer is 2^31 + 5, which a fold in i32 wrapped to a negative offset).
    const bool wide = needs_wide_offsets(b);
    std::vector<Expr> coords = idx;
    if (wide)
      for (Expr& c : coords) c = widen_to_i64(c);
    if (b->symbolic()) {
      // Row-major over extents known at launch: i * (n1 * n2) + j * n2 + k.
      std::vector<Expr> dims = b->dims;
      if (wide)
        for (Expr& d : dims) d = widen_to_i64(d);
      Expr off = coords.back(), stride = dims.back();
      for (std::size_t d = coords.size() - 1; d-- > 0;) {
        off = add(off, mul(coords[d], stride));
        stride = mul(stride, dims[d]);
      }
      return simplify(off);
    }
    std::string why;
    auto dims = group_by_dims(b->layout.shard(), b->shape, &why);
    if (!dims) fail(what, b->name, loc, why);
    const DType index = wide ? i64 : i32;
    Expr off = add(make_int(b->memory_offset(), index), offset_of_coords(*dims, coords, index));
    if (b->layout.swizzle()) off = swizzle_expr(*b->layout.swizzle(), off);
    return simplify(off);
  }
};

}  // namespace

Stmt flatten_buffers(const Stmt& s) {
  Flattener f;
  return f.mutate(s);
}

}  // namespace tx::lowering
