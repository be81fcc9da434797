// build_nary: the one kernel template of the library, written with the tx
// DSL (strategies, vector chunks and the scalar epilogue: nary_kernel.hpp).
// The guards compare the thread's chunk index with constants so that
// lowering can prove every vector region in bounds.
#include "nary_kernel.hpp"

#include <limits>

#include "tx/lowering/analysis.hpp"

namespace tx::ops::detail {

namespace {

// Offset of flat output index `idx` in an operand: sum over the coalesced
// dimensions of ((idx / inner) % extent) * stride.
Expr operand_offset(const NarySpec& s, const Operand& o, const Expr& idx) {
  Expr off = make_int(o.offset);
  std::int64_t inner = 1;
  for (std::size_t d = s.shape.size(); d-- > 0;) {
    if (o.strides[d] != 0) {
      Expr c = inner == 1 ? idx : Expr(idx / inner);
      if (d != 0) c = c % s.shape[d];
      off = Expr(off + c * o.strides[d]);
    }
    inner *= s.shape[d];
  }
  return lowering::simplify(off);
}

// True when operand o reads the output's elements in order: its strides are
// the row-major strides of the coalesced shape, so flat output index i is
// element o.offset + i. Such an operand is contiguous across row boundaries
// too, which is what lets a chunk of an odd-sized tensor (4097, 999983: one
// coalesced dimension whose extent is no multiple of the vector) load with
// vectors.
bool is_flat(const NarySpec& s, const Operand& o) {
  std::int64_t inner = 1;
  for (std::size_t d = s.shape.size(); d-- > 0;) {
    if (o.strides[d] != inner) return false;
    inner *= s.shape[d];
  }
  return true;
}

}  // namespace

PrimFunc build_nary(const NarySpec& s) {
  std::int64_t n = 1;
  for (auto e : s.shape) n *= e;
  if (n >= std::numeric_limits<std::int32_t>::max())
    fail("tx.ops", s.name, {}, "tensors of 2^31 elements or more are not supported yet");
  const int threads = s.threads;
  const int v = s.strategy == Strategy::direct ? 1 : s.npt;
  const std::int64_t chunk = static_cast<std::int64_t>(threads) * v;
  const std::int64_t nblocks = std::max<std::int64_t>(1, (n + chunk - 1) / chunk);
  const std::int64_t inner_extent = s.shape.empty() ? 1 : s.shape.back();

  std::vector<std::string> names;
  for (std::size_t i = 0; i < s.param_dtypes.size(); ++i)
    names.push_back("x" + std::to_string(i) + "_ptr");
  names.push_back("y_ptr");

  return T::prim_func_n(s.name, names, [&](const std::vector<Handle>& h) {
    std::vector<TileBuffer> in;
    for (std::size_t i = 0; i < s.param_dtypes.size(); ++i)
      in.push_back(T::match_buffer(h[i], {s.param_numel[i]}, s.param_dtypes[i], std::nullopt,
                                   "x" + std::to_string(i)));
    auto out = T::match_buffer(h.back(), {n}, s.out_dtype, std::nullopt, "y");
    auto bx = T::cta_id({nblocks}, "bx");
    auto tid = T::thread_id({threads}, "tid");

    auto offset_of = [&](const Operand& o, const Expr& idx) -> Expr {
      return is_flat(s, o) ? lowering::simplify(idx + o.offset) : operand_offset(s, o, idx);
    };
    auto load = [&](const Operand& o, const Expr& idx) -> Expr {
      Expr raw = in[static_cast<std::size_t>(o.param)](offset_of(o, idx));
      return raw.dtype() == o.compute ? raw : Expr(cast(raw, o.compute));
    };
    // Each input is converted once and bound to a variable: an op that uses
    // its input several times (gelu: x * normcdf(x)) must not convert it
    // several times.
    auto result = [&](const std::vector<Expr>& raw, const Expr& idx) -> Expr {
      std::vector<Expr> ins;
      for (std::size_t k = 0; k < raw.size(); ++k) {
        bool simple = raw[k].as<VarNode>() || raw[k].as<IntImmNode>() || raw[k].as<FloatImmNode>();
        ins.push_back(simple ? raw[k] : Expr(T::let(raw[k], "v" + std::to_string(k))));
      }
      Expr r = s.value(ins, idx);
      return r.dtype() == s.out_dtype ? r : Expr(cast(r, s.out_dtype));
    };

    // Thread g owns the chunk [g * v, g * v + v); the first `whole` chunks
    // lie inside n. The guards below compare g itself with a constant, which
    // is what lets lowering prove the vector regions in bounds.
    Var g = T::let(bx * threads + tid, "g");
    const std::int64_t whole = n / v;
    auto vector_body = [&] {
      Var base = v == 1 ? g : T::let(g * v, "base");
      if (v == 1) {
        std::vector<Expr> ins;
        for (const Operand& o : s.operands) ins.push_back(load(o, base));
        out(base) = result(ins, base);
        return;
      }
      std::vector<std::function<Expr(const Expr&)>> elem;
      for (std::size_t k = 0; k < s.operands.size(); ++k) {
        const Operand& o = s.operands[k];
        std::int64_t inner_stride = s.shape.empty() ? 0 : o.strides.back();
        // A chunk [base, base + v) here never crosses the end of the tensor;
        // it stays inside one row when the innermost extent is a multiple of
        // v. A flat operand needs only the former: its chunk is contiguous
        // whatever the rows.
        bool chunk_in_row = inner_extent % v == 0;
        bool flat = is_flat(s, o);
        const TileBuffer& buf = in[static_cast<std::size_t>(o.param)];
        if (s.strategy == Strategy::register_copy &&
            (flat || (chunk_in_row && inner_stride == 1)) && o.offset % v == 0) {
          auto r = T::alloc_buffer({v}, buf->dtype, scope::local, std::nullopt,
                                   "x" + std::to_string(k) + "_r");
          Tx::thread::copy(r, buf[region(span(offset_of(o, base), v))]);
          DType c = o.compute;
          elem.push_back([r, c](const Expr& j) {
            Expr x = r(j);
            return x.dtype() == c ? x : Expr(cast(x, c));
          });
        } else if (chunk_in_row && inner_stride == 0) {
          Var sv = T::let(load(o, base), "x" + std::to_string(k) + "_s");
          elem.push_back([sv](const Expr&) { return Expr(sv); });
        } else {
          elem.push_back([&, k](const Expr& j) { return load(s.operands[k], base + j); });
        }
      }
      if (s.strategy == Strategy::register_copy) {
        auto yr = T::alloc_buffer({v}, s.out_dtype, scope::local, std::nullopt, "y_r");
        for (Var j : T::unroll(v, "j")) {
          std::vector<Expr> ins;
          for (auto& e : elem) ins.push_back(e(j));
          yr(j) = result(ins, base + j);
        }
        Tx::thread::copy(out[region(span(base, v))], yr);
      } else {
        for (Var j : T::unroll(v, "j")) {
          std::vector<Expr> ins;
          for (auto& e : elem) ins.push_back(e(j));
          out(base + j) = result(ins, base + j);
        }
      }
    };

    // The one thread whose chunk straddles n: its n - whole * v (< v)
    // elements at constant indices, one by one.
    auto tail_body = [&] {
      for (std::int64_t idx = whole * v; idx < n; ++idx) {
        Expr at = make_int(idx, g.dtype());
        std::vector<Expr> ins;
        for (const Operand& o : s.operands) ins.push_back(load(o, at));
        out(at) = result(ins, at);
      }
    };

    // Every chunk whole (n a multiple of threads * v): no guard at all.
    // Otherwise every thread whose chunk lies inside n -- all of every CTA
    // but the last, and most of the last -- still runs the vector body.
    if (n == nblocks * chunk)
      vector_body();
    else if (whole == 0)  // fewer than v elements: thread 0 alone
      T::if_(g == 0, tail_body);
    else if (whole * v == n)
      T::if_(g < whole, vector_body);
    else
      T::if_(g < whole, vector_body).else_([&] { T::if_(g == whole, tail_body); });
  });
}

}  // namespace tx::ops::detail
