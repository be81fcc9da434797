// build_nary_generic: the library's kernel template for every size at once.
// One kernel serves an (op, dtype, coalesced rank, broadcast pattern,
// alignment class): the tensors' extents are T::dim variables bound at
// launch, the coalesced extents scalar parameters, the grid ceildiv(n, chunk).
//
// Thread g owns the chunk [g * v, g * v + v) of the flat output. A chunk
// inside the tensors (all but the last) is straight-line vector code, as in
// an exact-shape kernel (its copies are tiles on symbolic extents, which
// lower_tile_ops predicates; the condition is the chunk's own, so the
// compiler folds it); the one chunk that straddles n goes element by element
// in a loop, each element behind a guard; chunks past n do nothing. What a
// chunk reads from each operand:
//
//   flat (the output's order: unary ops, same-shape binary ops)
//     a vector copy at the same offset, whatever n;
//   a row of the operand along the innermost extent (a (N,) bias under an
//     (M, N) input, the gate and value halves of silu_and_mul), when the
//     alignment class says a chunk stays inside one row (innermost extent a
//     multiple of v): a vector copy at the chunk's offset, computed once;
//   broadcast along the innermost extent (a (M, 1) per-row scale), same
//     class: one scalar load per chunk;
//   anything else: element by element.
//
// With lookup_table (a unary op on an 8-bit input, see nary_kernel.hpp) the
// CTA first stages the op's 256-entry table in shared memory behind one
// barrier, and every element's value is the table entry of its bit pattern.
#include <array>

#include "nary_kernel.hpp"
#include "tx/lowering/analysis.hpp"

namespace tx::ops::detail {

PrimFunc build_nary_generic(const GenericSpec& s) {
  const int threads = s.threads;
  const int v = s.strategy == Strategy::direct ? 1 : s.npt;
  const std::size_t rank = s.rank;

  std::vector<std::string> names;
  for (std::size_t i = 0; i < s.param_dtypes.size(); ++i)
    names.push_back("x" + std::to_string(i) + "_ptr");
  names.push_back("y_ptr");
  for (std::size_t d = 1; d < rank; ++d) names.push_back("e" + std::to_string(d) + "_ptr");
  for (std::size_t k = 0; k < s.operands.size(); ++k)
    if (s.operands[k].strided)
      for (std::size_t d = 0; d < rank; ++d)
        names.push_back("s" + std::to_string(k) + "_" + std::to_string(d) + "_ptr");
  if (s.lookup_table) names.push_back("table_ptr");

  return T::prim_func_n(s.name, names, [&](const std::vector<Handle>& h) {
    const std::size_t ni = s.param_dtypes.size();
    // An input read in the output's order has the output's extent n (one
    // T::dim: the launch checks that they agree, and the kernel knows it);
    // any other input has an extent of its own.
    if (s.no_alias) T::no_alias();
    Var n = T::dim("n");
    std::vector<TileBuffer> in;
    for (std::size_t i = 0; i < ni; ++i) {
      bool flat = false;
      for (const GenericOperand& o : s.operands)
        flat = flat || (o.param == static_cast<int>(i) && o.flat);
      Var n_i = flat ? n : T::dim("n" + std::to_string(i));
      in.push_back(
          T::match_buffer(h[i], {n_i}, s.param_dtypes[i], std::nullopt, "x" + std::to_string(i)));
    }
    auto out = T::match_buffer(h[ni], {n}, s.out_dtype, std::nullopt, "y");
    // The coalesced extents e[1..rank-1] (e[0] = n / the rest is never
    // needed); the innermost carries the alignment class.
    std::vector<Expr> e(rank);
    for (std::size_t d = 1; d < rank; ++d) {
      DimFacts f{.min = 1, .max = 2147483647, .multiple_of = 1};
      if (d + 1 == rank && s.inner_multiple_of_v) f.multiple_of = v;
      e[d] = T::match_scalar(h[ni + d], i32, "e" + std::to_string(d), f);
    }
    // Each strided operand's element strides (outermost first).
    std::vector<std::vector<Expr>> strides(s.operands.size());
    std::size_t slot = ni + rank;
    for (std::size_t k = 0; k < s.operands.size(); ++k) {
      const GenericOperand& o = s.operands[k];
      if (!o.strided) continue;
      for (std::size_t d = 0; d < rank; ++d) {
        DimFacts f{.min = 0, .max = 2147483647, .multiple_of = 1};
        if (o.aligned && d + 1 < rank) f.multiple_of = v;
        if (o.unit_inner && d + 1 == rank) f.min = f.max = 1;
        strides[k].push_back(
            T::match_scalar(h[slot++], i32, "s" + std::to_string(k) + "_" + std::to_string(d), f));
      }
    }
    const std::int64_t chunk = static_cast<std::int64_t>(threads) * v;
    // A lookup-table CTA serves kLookupChunks consecutive chunks per thread
    // (see below); every other CTA one.
    constexpr int kLookupChunks = 4;
    const int chunks_per_cta = s.lookup_table ? kLookupChunks : 1;
    auto bx = T::cta_id({ceildiv(n, static_cast<int>(chunk * chunks_per_cta))}, "bx");
    auto tid = T::thread_id({threads}, "tid");
    // The lookup table's global buffer and its shared copy (staged below).
    TileBuffer table, table_s;
    if (s.lookup_table) {
      table = T::match_buffer(h[slot], {256}, s.out_dtype, std::nullopt, "table");
      table_s = T::alloc_buffer({256}, s.out_dtype, scope::shared, std::nullopt, "table_s");
    }

    // The coalesced coordinates of flat output index idx: c[d] = q % e[d],
    // q = q / e[d] from the innermost dimension out, c[0] the last quotient.
    // Each division is by one extent, which lowering's fast_divide turns
    // into a multiply-high by a magic number the launch computes.
    auto coords = [&](const Expr& idx) {
      std::vector<Expr> c(rank);
      Expr q = idx;
      for (std::size_t d = rank; d-- > 1;) {
        c[d] = Expr(q % e[d]);
        q = Expr(q / e[d]);
      }
      c[0] = q;
      return c;
    };
    // Offset of flat output index idx in operand o: the sum over coalesced
    // dimensions of its coordinate times the operand's stride.
    auto offset_of = [&](const GenericOperand& o, const Expr& idx) -> Expr {
      if (o.flat) return lowering::simplify(idx);
      if (o.gated != Gated::none) {
        // (M, 2N) -> gate | value: row * 2N + col (+ N).
        const Expr& half = e[rank - 1];
        Expr off = Expr((idx / half) * (half * 2) + idx % half);
        if (o.gated == Gated::value) off = Expr(off + half);
        return lowering::simplify(off);
      }
      std::vector<Expr> c = coords(idx);
      Expr off = make_int(0);
      if (o.strided) {
        const auto& st = strides[static_cast<std::size_t>(&o - s.operands.data())];
        for (std::size_t d = rank; d-- > 0;)
          off = d + 1 == rank && o.unit_inner ? Expr(off + c[d]) : Expr(off + c[d] * st[d]);
        return lowering::simplify(off);
      }
      Expr stride = make_int(1);  // the operand's own row-major stride
      for (std::size_t d = rank; d-- > 0;) {
        if (!o.present[d]) continue;
        off = is_const_int(stride, 1) ? Expr(off + c[d]) : Expr(off + c[d] * stride);
        if (d != 0) stride = is_const_int(stride, 1) ? e[d] : Expr(stride * e[d]);
      }
      return lowering::simplify(off);
    };
    // An element read clamps its offset to the operand's extent too: the
    // kernel is then safe for any extents the launch binds, not only the
    // consistent ones the library passes (bounds are proven, not assumed).
    auto load_at = [&](const GenericOperand& o, const Expr& idx) -> Expr {
      const TileBuffer& b = in[static_cast<std::size_t>(o.param)];
      Expr off = offset_of(o, idx);
      if (!o.flat) off = Expr(min(off, b->dims[0] - 1));
      Expr raw = b(off);
      if (s.lookup_table) return raw;  // the bits index the table
      return raw.dtype() == o.compute ? raw : Expr(cast(raw, o.compute));
    };
    auto result = [&](const std::vector<Expr>& raw, const Expr& idx) -> Expr {
      std::vector<Expr> ins;
      for (std::size_t k = 0; k < raw.size(); ++k) {
        bool simple = raw[k].as<VarNode>() || raw[k].as<IntImmNode>() || raw[k].as<FloatImmNode>();
        ins.push_back(simple ? raw[k] : Expr(T::let(raw[k], "v" + std::to_string(k))));
      }
      if (s.lookup_table)
        return table_s(cast(make_call(Intrinsic::reinterpret, {ins[0]}, {}, u8), i32));
      Expr r = s.value(ins, idx);
      return r.dtype() == s.out_dtype ? r : Expr(cast(r, s.out_dtype));
    };

    Var g = T::let(bx * threads + tid, "g");
    Var base = v == 1 ? g : T::let(g * v, "base");

    // One element, behind its own guard.
    auto element = [&](const Expr& idx) {
      T::if_(idx < n, [&] {
        std::vector<Expr> ins;
        for (const GenericOperand& o : s.operands) ins.push_back(load_at(o, idx));
        out(idx) = result(ins, idx);
      });
    };
    if (s.strategy != Strategy::register_copy) {
      // One element at a time, each behind its own guard.
      auto body = element;
      if (v == 1) {
        body(base);
      } else {
        for (Var j : T::unroll(v, "j")) body(base + j);
      }
      return;
    }

    if (s.lookup_table) {
      // A unary op's one flat operand, kLookupChunks chunks per thread
      // (chunk k of CTA b: the CTA-wide chunk b * kLookupChunks + k), in
      // a software pipeline: chunk k + 1's loads are issued before chunk
      // k's lookups, so that each warp keeps loads in flight while it looks
      // up (one chunk per thread, loads then lookups, plateaued at 0.85 of
      // copy on the H200). The first loads go out before the CTA stages the
      // table (a barrier every thread reaches, before any branch that
      // differs between threads).
      std::array<TileBuffer, 2> xr;
      for (int b = 0; b < 2; ++b)
        xr[static_cast<std::size_t>(b)] = T::alloc_buffer({v}, s.param_dtypes[0], scope::local,
                                                          std::nullopt, "x0_r" + std::to_string(b));
      std::vector<Var> bases;
      for (int k = 0; k < kLookupChunks; ++k)
        bases.push_back(
            T::let(((bx * kLookupChunks + k) * threads + tid) * v, "base" + std::to_string(k)));
      auto load = [&](int k) {
        const Var& b = bases[static_cast<std::size_t>(k)];
        T::if_(b + v <= n, [&] {
          Tx::thread::copy(xr[static_cast<std::size_t>(k % 2)], in[0][region(span(b, v))]);
        });
      };
      load(0);
      Tx::cta::copy(table_s, table);
      T::cuda::cta_sync();
      for (int k = 0; k < kLookupChunks; ++k) {
        if (k + 1 < kLookupChunks) load(k + 1);
        const Var& b = bases[static_cast<std::size_t>(k)];
        const TileBuffer& cur = xr[static_cast<std::size_t>(k % 2)];
        T::if_(b + v <= n, [&] {
          auto yr = T::alloc_buffer({v}, s.out_dtype, scope::local, std::nullopt, "y_r");
          for (Var j : T::unroll(v, "j")) yr(j) = result({cur(j)}, b + j);
          Tx::thread::copy(out[region(span(b, v))], yr);
        }).else_([&] {
          for (Var j : T::serial(v, "j")) element(b + j);
        });
      }
      return;
    }

    // A chunk of v elements inside the tensors (every chunk but the last):
    // straight-line vector code, exactly as an exact-shape kernel's. The one
    // branch per thread is uniform but in the last CTA.
    auto emit_chunk = [&] {
      std::vector<std::function<Expr(const Expr&)>> elem;
      for (std::size_t k = 0; k < s.operands.size(); ++k) {
        const GenericOperand& o = s.operands[k];
        const TileBuffer& buf = in[static_cast<std::size_t>(o.param)];
        bool inner_present = o.present[rank - 1];
        bool whole_rows = rank == 1 || s.inner_multiple_of_v;
        bool vector_rows =
            o.strided ? whole_rows && o.unit_inner && o.aligned : whole_rows && inner_present;
        if (o.flat || vector_rows) {
          // A vector copy (predicated: the chunk that straddles the operand's
          // end copies element by element).
          // (A flat operand reads at `base` itself: the copy is then on the
          // branch's own condition, which lowering sees as whole.)
          Expr off = offset_of(o, base);
          Expr at = off.as<VarNode>() ? off : Expr(T::let(off, "x" + std::to_string(k) + "_at"));
          auto r = T::alloc_buffer({v}, buf->dtype, scope::local, std::nullopt,
                                   "x" + std::to_string(k) + "_r");
          Tx::thread::copy(r, buf[region(span(at, v))]);
          DType c = s.lookup_table ? buf->dtype : o.compute;
          elem.push_back([r, c](const Expr& j) {
            Expr x = r(j);
            return x.dtype() == c ? x : Expr(cast(x, c));
          });
        } else if (!o.strided && whole_rows && !inner_present) {
          Var sv = T::let(load_at(o, base), "x" + std::to_string(k) + "_s");
          elem.push_back([sv](const Expr&) { return Expr(sv); });
        } else {
          elem.push_back([&, k](const Expr& j) { return load_at(s.operands[k], base + j); });
        }
      }
      auto yr = T::alloc_buffer({v}, s.out_dtype, scope::local, std::nullopt, "y_r");
      for (Var j : T::unroll(v, "j")) {
        std::vector<Expr> ins;
        for (auto& f : elem) ins.push_back(f(j));
        yr(j) = result(ins, base + j);
      }
      Tx::thread::copy(out[region(span(base, v))], yr);
    };
    T::if_(base + v <= n, emit_chunk).else_([&] {
      // The last, partial chunk: element by element in a loop (not unrolled:
      // the code of the fast path stays the only large body).
      for (Var j : T::serial(v, "j")) element(base + j);
    });
  });
}

}  // namespace tx::ops::detail
