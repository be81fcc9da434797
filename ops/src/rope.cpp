// rope: the rotation kernel and the cos/sin cache builders (rope.hpp).
//
// The rotation kernel is one launch for q and k. Its work items are
// (token t, head h of the H query then Hkv key heads, chunk c of v rotary
// pairs): a thread loads the token's position, v cos and v sin from the
// cache row, the v pairs of its head (neox: v columns from each half of the
// rotary part; GPT-J: 2v adjacent columns) as vector copies into registers,
// rotates them in f32 and stores them back. Columns past rotary_dim are
// never read nor written. The kernel serves every token count and cache
// length (T::dim extents); it is specialized on the dtypes, heads, head
// size, rotary_dim and style, which a model fixes.
#include "tx/ops/rope.hpp"

#include <array>
#include <cmath>
#include <limits>
#include <mutex>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>

#include "special_ops.hpp"
#include "tx/ops/ops.hpp"

namespace tx::ops {

namespace {

constexpr const char* kRope = "tx.ops.rope";

std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

// Errors of kernels built or launched here are errors of the op at the caller's line.
template <class F>
auto as_op_error(const char* op, SourceLoc loc, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.op() == op) throw;
    fail(op, e.operand(), loc, e.reason(), "  raised by " + e.op() + "\n" + e.detail());
  }
}

struct RopeSpec {
  DType dtype = bf16;  // q and k
  DType cache_dtype = f32;
  DType pos_dtype = i64;
  std::int64_t heads = 0, kv_heads = 0;  // kv_heads 0: no key
  std::int64_t head_size = 0, rot = 0;
  bool neox = true, inverse = false;
  int threads = 256;
  int v = 1;                 // rotary pairs per thread
  int heads_per_thread = 1;  // heads sharing one cos/sin row load
  bool operator==(const RopeSpec&) const = default;
  std::string name() const {
    std::ostringstream o;
    o << "tx_rope_" << (neox ? "neox" : "gptj") << (inverse ? "_inv" : "") << "_"
      << dtype.short_name() << "_c" << cache_dtype.short_name() << "_p" << pos_dtype.short_name()
      << "_h" << heads << "_kv" << kv_heads << "_d" << head_size << "_r" << rot << "_t" << threads
      << "_v" << v << (heads_per_thread > 1 ? "_hp" + std::to_string(heads_per_thread) : "");
    return o.str();
  }
};

PrimFunc build_rope(const RopeSpec& s) {
  const bool has_k = s.kv_heads > 0;
  const std::int64_t half = s.rot / 2;
  const int v = s.v;
  const int hpt = s.heads_per_thread;
  const std::int64_t chunks = half / v;  // per head
  const std::int64_t per_token = (s.heads + s.kv_heads) / hpt * chunks;
  const int threads = s.threads;
  std::vector<std::string> names{"positions_ptr", "q_ptr"};
  if (has_k) names.push_back("k_ptr");
  names.push_back("cache_ptr");
  names.push_back("max_pos_ptr");
  names.push_back("offset_ptr");
  return T::prim_func_n(s.name(), names, [&](const std::vector<Handle>& h) {
    std::size_t at = 0;
    Var tokens = T::dim("tokens");
    auto positions = T::match_buffer(h[at++], {tokens}, s.pos_dtype, std::nullopt, "positions");
    Var nq = T::dim("nq", {.min = 1, .max = 2147483647, .multiple_of = s.head_size});
    auto q = T::match_buffer(h[at++], {nq}, s.dtype, std::nullopt, "q");
    TileBuffer k;
    Var nk;
    if (has_k) {
      nk = T::dim("nk", {.min = 1, .max = 2147483647, .multiple_of = s.head_size});
      k = T::match_buffer(h[at++], {nk}, s.dtype, std::nullopt, "k");
    }
    Var nc = T::dim("nc", {.min = 1, .max = 2147483647, .multiple_of = s.rot});
    auto cache = T::match_buffer(h[at++], {nc}, s.cache_dtype, std::nullopt, "cache");
    Var max_pos = T::match_scalar(h[at++], i32, "max_pos");
    Var offset = T::match_scalar(h[at++], i64, "offset");

    auto bx = T::cta_id({ceildiv(tokens * static_cast<int>(per_token), threads)}, "bx");
    auto tid = T::thread_id({threads}, "tid");
    Var item = T::let(bx * threads + tid, "item");
    T::if_(item < tokens * static_cast<int>(per_token), [&] {
      Var t = T::let(item / static_cast<int>(per_token), "t");
      Var r = T::let(item % static_cast<int>(per_token), "r");
      // The first of this thread's hpt heads (query heads, then key heads;
      // hpt divides both counts, so a thread's heads are all q or all k).
      Var head = T::let(r / static_cast<int>(chunks) * hpt, "head");
      Var c = T::let(r % static_cast<int>(chunks), "c");
      auto f32_of = [](const Expr& e) { return e.dtype() == f32 ? e : Expr(cast(e, f32)); };
      auto out_of = [&](const Expr& e) { return s.dtype == f32 ? e : Expr(cast(e, s.dtype)); };
      // The pairs of the head starting at hbase in buffer b: loaded
      // first, before the position and the cache row they wait on, so that
      // both latencies overlap; rotated and stored once cos and sin are in.
      struct Pairs {
        TileBuffer x1, x2;  // neox: the two halves; GPT-J: x1 holds the 2v adjacent columns
        Var a;
      };
      auto load = [&](const TileBuffer& b, const Expr& hbase) {
        Pairs p;
        if (s.neox) {
          // Pairs (i, i + rot/2), i in [c v, c v + v).
          p.x1 = T::alloc_buffer({v}, s.dtype, scope::local, std::nullopt, "x1_r");
          p.x2 = T::alloc_buffer({v}, s.dtype, scope::local, std::nullopt, "x2_r");
          p.a = T::let(hbase + c * v, "a");
          Tx::thread::copy(p.x1, b[region(span(p.a, v))]);
          Tx::thread::copy(p.x2, b[region(span(p.a + static_cast<int>(half), v))]);
        } else {
          // GPT-J: pairs (2i, 2i + 1), i in [c v, c v + v): 2v adjacent columns.
          p.x1 = T::alloc_buffer({2 * v}, s.dtype, scope::local, std::nullopt, "x_r");
          p.a = T::let(hbase + c * (2 * v), "a");
          Tx::thread::copy(p.x1, b[region(span(p.a, 2 * v))]);
        }
        return p;
      };
      auto rotate_store = [&](const TileBuffer& b, const Pairs& p, const TileBuffer& cr,
                              const TileBuffer& sr) {
        for (Var j : T::unroll(v, "j")) {
          Var cs = T::let(f32_of(cr(j)), "cs");
          Var sn = T::let(s.inverse ? Expr(-f32_of(sr(j))) : f32_of(sr(j)), "sn");
          if (s.neox) {
            Var u = T::let(f32_of(p.x1(j)), "u");
            Var w = T::let(f32_of(p.x2(j)), "w");
            p.x1(j) = out_of(u * cs - w * sn);
            p.x2(j) = out_of(w * cs + u * sn);
          } else {
            Var u = T::let(f32_of(p.x1(j * 2)), "u");
            Var w = T::let(f32_of(p.x1(j * 2 + 1)), "w");
            p.x1(j * 2) = out_of(u * cs - w * sn);
            p.x1(j * 2 + 1) = out_of(w * cs + u * sn);
          }
        }
        if (s.neox) {
          Tx::thread::copy(b[region(span(p.a, v))], p.x1);
          Tx::thread::copy(b[region(span(p.a + static_cast<int>(half), v))], p.x2);
        } else {
          Tx::thread::copy(b[region(span(p.a, 2 * v))], p.x1);
        }
      };
      // hpt heads of b (of extent n) starting at hh, sharing one cos/sin load.
      auto rotate_heads = [&](const TileBuffer& b, const Var& n, std::int64_t heads,
                              const Expr& hh) {
        // The thread's heads lie inside b and its cos/sin row inside the
        // cache (the host checked the shapes): saying so once lets every
        // tile below be a whole vector copy, with no per-tile bounds test
        // (which cost 22 registers and a quarter of the occupancy).
        Var first =
            T::let(t * static_cast<int>(heads * s.head_size) + hh * static_cast<int>(s.head_size),
                   "first");
        T::if_(first + static_cast<int>(hpt * s.head_size) <= n, [&] {
          std::vector<Pairs> ps;
          for (int i = 0; i < hpt; ++i)
            ps.push_back(load(b, i == 0 ? Expr(first) : first + static_cast<int>(i * s.head_size)));
          Var pos = T::let(cast(positions(t), i64) + offset, "pos");
          // A position outside the cache leaves the token as it was (a kernel
          // cannot raise; host positions are checked before the launch).
          T::if_((pos >= 0) && (pos < cast(max_pos, i64)), [&] {
            // max(., 0) is a no-op here that tells the bounds analysis the row is not negative.
            Var row0 = T::let(max(cast(pos, i32), 0) * static_cast<int>(s.rot), "row0");
            T::if_(row0 + static_cast<int>(s.rot) <= nc, [&] {
              Var row = T::let(row0 + c * v, "row");
              auto cr = T::alloc_buffer({v}, s.cache_dtype, scope::local, std::nullopt, "cos_r");
              auto sr = T::alloc_buffer({v}, s.cache_dtype, scope::local, std::nullopt, "sin_r");
              Tx::thread::copy(cr, cache[region(span(row, v))]);
              Tx::thread::copy(sr, cache[region(span(row + static_cast<int>(half), v))]);
              for (const Pairs& p : ps) rotate_store(b, p, cr, sr);
            });
          });
        });
      };
      if (!has_k) {
        rotate_heads(q, nq, s.heads, head);
      } else {
        T::if_(head < static_cast<int>(s.heads), [&] {
          rotate_heads(q, nq, s.heads, head);
        }).else_([&] { rotate_heads(k, nk, s.kv_heads, head - static_cast<int>(s.heads)); });
      }
    });
  });
}

// H (or Hkv) of q or k: shape = positions' shape + [H * hd] or + [H, hd].
std::int64_t heads_of(const Tensor& x, const char* operand, const std::vector<std::int64_t>& pshape,
                      std::int64_t hd, SourceLoc loc) {
  const auto& s = x.shape();
  bool lead = s.size() >= pshape.size() + 1 && s.size() <= pshape.size() + 2 &&
              std::equal(pshape.begin(), pshape.end(), s.begin());
  if (!lead)
    fail(kRope, operand, loc,
         "shape " + shape_str(s) + " but rope needs positions' shape " + shape_str(pshape) +
             " followed by [H * head_size] or [H, head_size]");
  if (s.size() == pshape.size() + 2) {
    if (s.back() != hd)
      fail(kRope, operand, loc,
           "shape " + shape_str(s) + ": the last dimension " + std::to_string(s.back()) +
               " is not head_size " + std::to_string(hd));
    return s[s.size() - 2];
  }
  if (s.back() % hd != 0 || s.back() == 0)
    fail(kRope, operand, loc,
         "shape " + shape_str(s) + ": the last dimension " + std::to_string(s.back()) +
             " is not a positive multiple of head_size " + std::to_string(hd));
  return s.back() / hd;
}

// The kernel of a spec on a device. A model calls rope with one or two specs
// on every layer: they are found by comparing the specs' fields (a name
// string and a map lookup took 2 of rope's 9 microseconds of host time).
Kernel rope_kernel_for(const RopeSpec& s, const Device& d, SourceLoc loc) {
  static std::mutex mu;
  static auto* recent = new std::vector<std::pair<std::pair<RopeSpec, Device>, Kernel>>();
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [key, k] : *recent)
      if (key.first == s && key.second == d) return k;
  }
  Kernel k = detail::special_cached(s.name() + "|" + d.str(), [&] {
    return as_op_error(kRope, loc, [&] { return compile(build_rope(s), {.device = d}); });
  });
  std::lock_guard<std::mutex> lock(mu);
  recent->emplace_back(std::pair{s, d}, k);
  return k;
}

// Checks the call and returns its kernel (nullptr-like: an undefined
// Kernel when there are no tokens).
std::optional<Kernel> rope_prepare(const Tensor& positions, const Tensor& q, const Tensor& k,
                                   const Tensor& cache, const RopeOptions& opt, SourceLoc loc) {
  if (!positions.defined()) fail(kRope, "positions", loc, "tensor is undefined");
  if (!q.defined()) fail(kRope, "q", loc, "tensor is undefined");
  if (!cache.defined()) fail(kRope, "cos_sin_cache", loc, "tensor is undefined");
  const std::int64_t hd = opt.head_size;
  if (hd <= 0) fail(kRope, "head_size", loc, "must be positive, got " + std::to_string(hd));
  const std::int64_t rot = opt.rotary_dim == 0 ? hd : opt.rotary_dim;
  if (rot <= 0 || rot % 2 != 0)
    fail(kRope, "rotary_dim", loc, "must be positive and even, got " + std::to_string(rot));
  if (rot > hd)
    fail(kRope, "rotary_dim", loc,
         std::to_string(rot) + " is larger than head_size " + std::to_string(hd));
  if (positions.dtype() != i64 && positions.dtype() != i32)
    fail(kRope, "positions", loc,
         "dtype " + positions.dtype().name() + " but rope needs int64 or int32");
  if (positions.shape().empty() || positions.shape().size() > 2)
    fail(kRope, "positions", loc,
         "shape " + shape_str(positions.shape()) + " but rope needs [T] or [B, S]");
  const DType t = q.dtype();
  if (t != f32 && t != f16 && t != bf16)
    fail(kRope, "q", loc, "dtype " + t.name() + " is not supported (f32, f16, bf16)");
  const std::int64_t heads = heads_of(q, "q", positions.shape(), hd, loc);
  std::int64_t kv_heads = 0;
  if (k.defined()) {
    if (k.dtype() != t)
      fail(kRope, "k", loc, "dtype " + k.dtype().name() + " but q is " + t.name());
    kv_heads = heads_of(k, "k", positions.shape(), hd, loc);
    if (heads % kv_heads != 0)
      fail(kRope, "k", loc,
           "has " + std::to_string(kv_heads) + " heads, which do not divide q's " +
               std::to_string(heads) + " (grouped-query attention needs H a multiple of Hkv)");
  }
  if (cache.shape().size() != 2 || cache.shape()[1] != rot)
    fail(kRope, "cos_sin_cache", loc,
         "shape " + shape_str(cache.shape()) +
             " but rope needs [max_position, rotary_dim = " + std::to_string(rot) + "]");
  if (cache.dtype() != f32 && cache.dtype() != t)
    fail(kRope, "cos_sin_cache", loc,
         "dtype " + cache.dtype().name() + " but rope needs float32 or q's dtype " + t.name());
  const Device d = q.device();
  for (auto [x, name] : {std::pair<const Tensor*, const char*>{&positions, "positions"},
                         {&k, "k"},
                         {&cache, "cos_sin_cache"}})
    if (x->defined() && !(x->device() == d))
      fail(kRope, name, loc, "is on " + x->device().str() + " but q is on " + d.str());
  if (!q.is_contiguous())
    fail(kRope, "q", loc, "is a strided view; rope rotates in place: pass a contiguous tensor");
  if (k.defined() && !k.is_contiguous())
    fail(kRope, "k", loc, "is a strided view; rope rotates in place: pass a contiguous tensor");
  const std::int64_t max_pos = cache.shape()[0];
  if (max_pos <= 0 || max_pos * rot >= std::numeric_limits<std::int32_t>::max())
    fail(kRope, "cos_sin_cache", loc, "needs between 1 and 2^31 / rotary_dim rows");
  if (q.numel() >= std::numeric_limits<std::int32_t>::max() ||
      (k.defined() && k.numel() >= std::numeric_limits<std::int32_t>::max()))
    fail(kRope, "q", loc, "tensors of 2^31 elements or more are not supported yet");
  const std::int64_t tokens = positions.numel();
  if (tokens == 0) return std::nullopt;
  if (positions.device() == Device::host()) {
    // Host data: positions outside the cache are an error, before anything is written.
    std::vector<double> pv = positions.to_doubles();
    for (std::size_t i = 0; i < pv.size(); ++i) {
      double p = pv[i] + static_cast<double>(opt.position_offset);
      if (p < 0 || p >= static_cast<double>(max_pos))
        fail(kRope, "positions", loc,
             "position " + std::to_string(static_cast<std::int64_t>(pv[i])) + " (token " +
                 std::to_string(i) + ")" +
                 (opt.position_offset ? " + offset " + std::to_string(opt.position_offset) : "") +
                 " is outside the cache's " + std::to_string(max_pos) + " rows");
    }
  }
  RopeSpec s;
  s.dtype = t;
  s.cache_dtype = cache.dtype();
  s.pos_dtype = positions.dtype();
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_size = hd;
  s.rot = rot;
  s.neox = opt.is_neox;
  s.inverse = opt.inverse;
  // 16 bytes of q per copy where the rotary half allows it.
  s.v = 1;
  while (s.v * 2 * t.bytes() <= 16 && (rot / 2) % (s.v * 2) == 0) s.v *= 2;
  // Two heads per thread where both head counts allow it: twice the bytes
  // in flight per thread and one cos/sin row for both (measured on an
  // H200: the rows of one head per thread left T = 4096 at 0.87 of copy).
  s.heads_per_thread = heads % 2 == 0 && kv_heads % 2 == 0 ? 2 : 1;
  s.threads = 256;
  return rope_kernel_for(s, d, loc);
}

void rope_impl(const Tensor& positions, const Tensor& q, const Tensor& k, const Tensor& cache,
               const RopeOptions& opt, SourceLoc loc) {
  std::optional<Kernel> kern = rope_prepare(positions, q, k, cache, opt, loc);
  if (!kern) return;
  const std::int64_t max_pos = cache.shape()[0];
  // Flat views (1-D tensors as they are: no new views on the common path).
  auto flat = [](const Tensor& x) {
    Tensor c = x.is_contiguous() ? x : x.contiguous();
    return c.shape().size() == 1 ? c : c.reshape({c.numel()});
  };
  Tensor pf = flat(positions), qf = flat(q), kf = k.defined() ? flat(k) : Tensor(),
         cf = flat(cache);
  std::array<Kernel::Arg, 6> args;
  std::size_t n = 0;
  args[n++] = pf;
  args[n++] = qf;
  if (k.defined()) args[n++] = kf;
  args[n++] = cf;
  args[n++] = max_pos;
  args[n++] = opt.position_offset;
  as_op_error(kRope, loc, [&] { kern->launch(args.data(), n, loc); });
}

// ------------------------------------------------------------- the caches

// cache[p, d] = mscale(p) * (cos | sin)(p' * inv_freq[seg(p), d mod rot/2]),
// where rows [0, seg_rows) are segment 0 and the rest segment 1 (longrope's
// short and long caches; one segment otherwise), p' the row within its
// segment. Angles in f64.
void build_cache(const char* op, std::int64_t rot, std::int64_t rows, std::int64_t seg_rows,
                 const std::vector<double>& inv_freq, double mscale0, double mscale1, Tensor& out,
                 SourceLoc loc) {
  const std::int64_t half = rot / 2;
  const Device d = out.device();
  const DType dt = out.dtype();
  const int segs = static_cast<int>(inv_freq.size() / static_cast<std::size_t>(half));
  Tensor freqs =
      Tensor::from_doubles(inv_freq, {static_cast<std::int64_t>(inv_freq.size())}, f64, d);
  const std::int64_t n = rows * rot;
  if (n >= std::numeric_limits<std::int32_t>::max())
    fail(op, "max_position", loc, "the cache would have 2^31 elements or more");
  std::ostringstream name;
  name << "tx_rope_cache_" << dt.short_name() << "_r" << rot << "_s" << segs;
  const int threads = 256;
  auto f = [&] {
    return T::prim_func_n(
        name.str(), {"freq_ptr", "out_ptr", "seg_rows_ptr", "m0_ptr", "m1_ptr"},
        [&](const std::vector<Handle>& h) {
          auto fr = T::match_buffer(h[0], {segs * half}, f64, std::nullopt, "freq");
          Var total = T::dim("total", {.min = 1, .max = 2147483647, .multiple_of = rot});
          auto y = T::match_buffer(h[1], {total}, dt, std::nullopt, "y");
          Var seg_rows_v = T::match_scalar(h[2], i32, "seg_rows");
          Var m0 = T::match_scalar(h[3], f64, "m0");
          Var m1 = T::match_scalar(h[4], f64, "m1");
          auto bx = T::cta_id({ceildiv(total, threads)}, "bx");
          auto tid = T::thread_id({threads}, "tid");
          Var idx = T::let(bx * threads + tid, "idx");
          T::if_(idx < total, [&] {
            Var p = T::let(idx / static_cast<int>(rot), "p");
            Var col = T::let(idx % static_cast<int>(rot), "col");
            Var i = T::let(col % static_cast<int>(half), "i");
            Var seg = T::let(select(p < seg_rows_v, 0, 1), "seg");
            Var pp = T::let(p - seg * seg_rows_v, "pp");
            Expr fi =
                segs == 1 ? Expr(fr(i)) : Expr(fr(min(seg, segs - 1) * static_cast<int>(half) + i));
            Var angle = T::let(cast(pp, f64) * fi, "angle");
            Var m = T::let(select(seg == 0, m0, m1), "m");
            Expr val = select(col < static_cast<int>(half), cos(angle), sin(angle)) * m;
            y(idx) = dt == f64 ? val : Expr(cast(val, dt));
          });
        });
  };
  std::string key = name.str() + "|" + d.str();
  Kernel k = detail::special_cached(
      key, [&] { return as_op_error(op, loc, [&] { return compile(f(), {.device = d}); }); });
  Tensor of = out.reshape({n});
  as_op_error(op, loc,
              [&] { k(freqs, of, static_cast<std::int64_t>(seg_rows), mscale0, mscale1); });
}

void check_rot(const char* op, std::int64_t rot, SourceLoc loc) {
  if (rot <= 0 || rot % 2 != 0)
    fail(op, "rotary_dim", loc, "must be positive and even, got " + std::to_string(rot));
}
void check_cache_dtype(const char* op, DType dt, SourceLoc loc) {
  if (dt != f32 && dt != f16 && dt != bf16)
    fail(op, "dtype", loc, "dtype " + dt.name() + " is not supported (f32, f16, bf16)");
}

Tensor make_cache(const char* op, std::int64_t rot, std::int64_t rows, std::int64_t seg_rows,
                  const std::vector<double>& inv, double m0, double m1, DType dt,
                  std::optional<Device> device, SourceLoc loc) {
  check_cache_dtype(op, dt, loc);
  if (rows <= 0) fail(op, "max_position", loc, "must be positive, got " + std::to_string(rows));
  Tensor out = Tensor::empty({rows, rot}, dt, device ? *device : default_device());
  build_cache(op, rot, rows, seg_rows, inv, m0, m1, out, loc);
  return out;
}

}  // namespace

Kernel rope_kernel(const Tensor& positions, const Tensor& q, const Tensor& k,
                   const Tensor& cos_sin_cache, const RopeOptions& opt, std::source_location loc) {
  return rope_prepare(positions, q, k, cos_sin_cache, opt, loc).value_or(Kernel());
}

void rope(const Tensor& positions, const Tensor& q, const Tensor& k, const Tensor& cos_sin_cache,
          const RopeOptions& opt, std::source_location loc) {
  rope_impl(positions, q, k, cos_sin_cache, opt, loc);
}

void rope(const Tensor& positions, const Tensor& q, const Tensor& cos_sin_cache,
          const RopeOptions& opt, std::source_location loc) {
  rope_impl(positions, q, Tensor(), cos_sin_cache, opt, loc);
}

// ---------------------------------------------------- inverse frequencies

std::vector<double> rope_inv_freq(std::int64_t rot, double base) {
  std::vector<double> f;
  for (std::int64_t i = 0; i < rot / 2; ++i)
    f.push_back(1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(rot)));
  return f;
}

std::vector<double> rope_inv_freq_llama31(std::int64_t rot, double base, const Llama31Scaling& s) {
  std::vector<double> f = rope_inv_freq(rot, base);
  const double L0 = static_cast<double>(s.original_max_position);
  const double low_wavelen = L0 / s.low_freq_factor;
  const double high_wavelen = L0 / s.high_freq_factor;
  for (double& x : f) {
    const double wavelen = 2.0 * std::numbers::pi / x;
    const double smooth =
        s.low_freq_factor != s.high_freq_factor
            ? (L0 / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
            : 0.0;
    if (wavelen < high_wavelen) continue;
    x = wavelen > low_wavelen ? x / s.factor : (1 - smooth) * x / s.factor + smooth * x;
  }
  return f;
}

namespace {
// vLLM's _yarn_find_correction_dim / _yarn_find_correction_range.
double yarn_correction_dim(double rotations, double dim, double base, double max_pos) {
  return dim * std::log(max_pos / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
}
}  // namespace

std::vector<double> rope_inv_freq_yarn(std::int64_t rot, double base, const YarnScaling& s) {
  const double dim = static_cast<double>(rot);
  const double L0 = static_cast<double>(s.original_max_position);
  double low = std::floor(yarn_correction_dim(s.beta_fast, dim, base, L0));
  double high = std::ceil(yarn_correction_dim(s.beta_slow, dim, base, L0));
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // vLLM's guard against a zero-width ramp
  std::vector<double> f;
  for (std::int64_t i = 0; i < rot / 2; ++i) {
    const double pos_freq = std::pow(base, static_cast<double>(2 * i) / dim);
    const double extrapolation = 1.0 / pos_freq;
    const double interpolation = 1.0 / (s.factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double mask = (1.0 - ramp) * s.extrapolation_factor;
    f.push_back(interpolation * (1.0 - mask) + extrapolation * mask);
  }
  return f;
}

double rope_yarn_mscale(const YarnScaling& s) {
  return (s.factor <= 1.0 ? 1.0 : 0.1 * std::log(s.factor) + 1.0) * s.attn_factor;
}

LongRopeFreqs rope_inv_freq_longrope(std::int64_t rot, std::int64_t max_position, double base,
                                     const LongRopeScaling& s) {
  LongRopeFreqs r;
  std::vector<double> plain = rope_inv_freq(rot, base);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    r.short_inv_freq.push_back(plain[i] / s.short_factor.at(i));
    r.long_inv_freq.push_back(plain[i] / s.long_factor.at(i));
  }
  const double L = static_cast<double>(max_position);
  const double L0 = static_cast<double>(s.original_max_position);
  const double scale = L / L0;
  const double amp = scale <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(scale) / std::log(L0));
  r.short_mscale = s.short_mscale.value_or(amp);
  r.long_mscale = s.long_mscale.value_or(amp);
  return r;
}

// ------------------------------------------------------------- builders

Tensor rope_cache(std::int64_t rot, std::int64_t max_position, double base, DType dtype,
                  std::optional<Device> device, std::source_location loc) {
  const char* op = "tx.ops.rope_cache";
  check_rot(op, rot, loc);
  if (!(base > 1.0)) fail(op, "base", loc, "must be > 1, got " + std::to_string(base));
  return make_cache(op, rot, max_position, max_position, rope_inv_freq(rot, base), 1.0, 1.0, dtype,
                    device, loc);
}

Tensor rope_cache_llama31(std::int64_t rot, std::int64_t max_position, double base,
                          const Llama31Scaling& s, DType dtype, std::optional<Device> device,
                          std::source_location loc) {
  const char* op = "tx.ops.rope_cache_llama31";
  check_rot(op, rot, loc);
  if (!(base > 1.0)) fail(op, "base", loc, "must be > 1, got " + std::to_string(base));
  if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > 0) ||
      s.original_max_position <= 0)
    fail(op, "scaling", loc,
         "factor, low/high_freq_factor and original_max_position must be positive");
  return make_cache(op, rot, max_position, max_position, rope_inv_freq_llama31(rot, base, s), 1.0,
                    1.0, dtype, device, loc);
}

Tensor rope_cache_yarn(std::int64_t rot, double base, const YarnScaling& s, DType dtype,
                       std::optional<Device> device, std::source_location loc) {
  const char* op = "tx.ops.rope_cache_yarn";
  check_rot(op, rot, loc);
  if (!(base > 1.0)) fail(op, "base", loc, "must be > 1, got " + std::to_string(base));
  if (!(s.factor > 0) || s.original_max_position <= 0 || !(s.beta_fast > 0) || !(s.beta_slow > 0))
    fail(op, "scaling", loc, "factor, original_max_position and the betas must be positive");
  // vLLM: torch.arange(max_position_embeddings * scaling_factor) rows.
  const auto rows =
      static_cast<std::int64_t>(std::ceil(static_cast<double>(s.original_max_position) * s.factor));
  const double m = rope_yarn_mscale(s);
  return make_cache(op, rot, rows, rows, rope_inv_freq_yarn(rot, base, s), m, m, dtype, device,
                    loc);
}

Tensor rope_cache_longrope(std::int64_t rot, std::int64_t max_position, double base,
                           const LongRopeScaling& s, DType dtype, std::optional<Device> device,
                           std::source_location loc) {
  const char* op = "tx.ops.rope_cache_longrope";
  check_rot(op, rot, loc);
  if (!(base > 1.0)) fail(op, "base", loc, "must be > 1, got " + std::to_string(base));
  const auto half = static_cast<std::size_t>(rot / 2);
  if (s.short_factor.size() != half)
    fail(op, "short_factor", loc,
         "has " + std::to_string(s.short_factor.size()) +
             " factors, rotary_dim / 2 = " + std::to_string(half) + " needed");
  if (s.long_factor.size() != half)
    fail(op, "long_factor", loc,
         "has " + std::to_string(s.long_factor.size()) +
             " factors, rotary_dim / 2 = " + std::to_string(half) + " needed");
  if (s.original_max_position <= 1 || max_position <= 0)
    fail(op, "original_max_position", loc,
         "original_max_position must be > 1 and max_position > 0");
  LongRopeFreqs fr = rope_inv_freq_longrope(rot, max_position, base, s);
  std::vector<double> inv = fr.short_inv_freq;
  inv.insert(inv.end(), fr.long_inv_freq.begin(), fr.long_inv_freq.end());
  return make_cache(op, rot, s.original_max_position + max_position, s.original_max_position, inv,
                    fr.short_mscale, fr.long_mscale, dtype, device, loc);
}

std::int64_t longrope_position_offset(const Tensor& positions, std::int64_t L0,
                                      std::source_location loc) {
  if (!positions.defined()) fail("tx.ops.rope_longrope", "positions", loc, "tensor is undefined");
  for (double p : positions.to_doubles())
    if (p > static_cast<double>(L0)) return L0;
  return 0;
}

void rope_longrope(const Tensor& positions, const Tensor& q, const Tensor& k, const Tensor& cache,
                   std::int64_t head_size, std::int64_t original_max_position,
                   std::int64_t rotary_dim, std::source_location loc) {
  RopeOptions o{.head_size = head_size, .rotary_dim = rotary_dim};
  o.position_offset = longrope_position_offset(positions, original_max_position, loc);
  rope(positions, q, k, cache, o, loc);
}

}  // namespace tx::ops
