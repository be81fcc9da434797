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
  const std::int64_t full = n / chunk;
  const std::int64_t inner_extent = s.shape.empty() ? 1 : s.shape.back();

  std::vector<std::string> names;
  for (std::size_t i = 0; i < s.param_dtypes.size(); ++i) names.push_back("x" + std::to_string(i) + "_ptr");
  names.push_back("y_ptr");

  return T::prim_func_n(s.name, names, [&](const std::vector<Handle>& h) {
    std::vector<TileBuffer> in;
    for (std::size_t i = 0; i < s.param_dtypes.size(); ++i)
      in.push_back(T::match_buffer(h[i], {s.param_numel[i]}, s.param_dtypes[i], std::nullopt,
                                   "x" + std::to_string(i)));
    auto out = T::match_buffer(h.back(), {n}, s.out_dtype, std::nullopt, "y");
    auto bx = T::cta_id({nblocks}, "bx");
    auto tid = T::thread_id({threads}, "tid");

    auto load = [&](const Operand& o, const Expr& idx) -> Expr {
      Expr raw = in[static_cast<std::size_t>(o.param)](operand_offset(s, o, idx));
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

    auto vector_body = [&] {
      if (v == 1) {
        Var idx = T::let(bx * threads + tid, "idx");
        std::vector<Expr> ins;
        for (const Operand& o : s.operands) ins.push_back(load(o, idx));
        out(idx) = result(ins, idx);
        return;
      }
      Var base = T::let((bx * threads + tid) * v, "base");
      std::vector<std::function<Expr(const Expr&)>> elem;
      for (std::size_t k = 0; k < s.operands.size(); ++k) {
        const Operand& o = s.operands[k];
        std::int64_t inner_stride = s.shape.empty() ? 0 : o.strides.back();
        bool chunk_in_row = inner_extent % v == 0;
        const TileBuffer& buf = in[static_cast<std::size_t>(o.param)];
        if (s.strategy == Strategy::register_copy && chunk_in_row && inner_stride == 1 && o.offset % v == 0) {
          auto r = T::alloc_buffer({v}, buf->dtype, scope::local, std::nullopt, "x" + std::to_string(k) + "_r");
          Tx::thread::copy(r, buf[region(span(operand_offset(s, o, base), v))]);
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

    // The last CTA: element j * threads + tid of its chunk, so that the
    // threads of a warp touch neighbouring elements.
    auto tail_body = [&] {
      for (Var j : T::serial(v, "j")) {
        Var idx = T::let(bx * chunk + j * threads + tid, "idx");
        T::if_(idx < n, [&] {
          std::vector<Expr> ins;
          for (const Operand& o : s.operands) ins.push_back(load(o, idx));
          out(idx) = result(ins, idx);
        });
      }
    };

    if (full == nblocks)
      vector_body();
    else if (full == 0)
      tail_body();
    else
      T::if_(bx < full, vector_body).else_(tail_body);
  });
}

}  // namespace tx::ops::detail
