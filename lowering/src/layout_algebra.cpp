#include "tx/lowering/layout_algebra.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "tx/printer.hpp"

namespace tx::lowering {

namespace {
void set_why(std::string* why, const std::string& s) {
  if (why) *why = s;
}
}  // namespace

std::optional<std::vector<std::vector<Iter>>> group_by_dims(const std::vector<Iter>& iters,
                                                            const Extents& shape,
                                                            std::string* why) {
  std::vector<std::vector<Iter>> dims(shape.size());
  std::vector<Iter> pending(iters.begin(), iters.end());
  std::size_t d = shape.size();
  std::int64_t need = 0;
  // Walk both lists from the innermost end.
  auto next_dim = [&]() {
    while (d > 0) {
      --d;
      if (shape[d] > 1) {
        need = shape[d];
        return true;
      }
    }
    return false;
  };
  bool have_dim = next_dim();
  while (!pending.empty()) {
    Iter it = pending.back();
    pending.pop_back();
    if (it.extent == 1) continue;
    if (!have_dim) {
      set_why(why, "layout has more elements than the shape");
      return std::nullopt;
    }
    if (need % it.extent == 0) {
      dims[d].insert(dims[d].begin(), it);
      need /= it.extent;
    } else if (it.extent % need == 0) {
      dims[d].insert(dims[d].begin(), Iter{need, it.stride, it.axis});
      pending.push_back(Iter{it.extent / need, it.stride * need, it.axis});
      need = 1;
    } else {
      set_why(why, "layout iter of extent " + std::to_string(it.extent) + " straddles dimension " +
                       std::to_string(d) + " of extent " + std::to_string(shape[d]));
      return std::nullopt;
    }
    if (need == 1) have_dim = next_dim();
  }
  if (have_dim && need != 1) {
    set_why(why, "layout covers fewer elements than the shape");
    return std::nullopt;
  }
  return dims;
}

std::vector<Iter> RegionLayout::flat() const {
  std::vector<Iter> out;
  for (const auto& d : dims) out.insert(out.end(), d.begin(), d.end());
  return out;
}

std::int64_t RegionLayout::numel() const {
  std::int64_t n = 1;
  for (auto e : extents) n *= e;
  return n;
}

Expr swizzle_expr(const Swizzle& sw, Expr x) {
  const std::int64_t mask = ((std::int64_t{1} << sw.bits) - 1) << sw.base;
  return make_binary(
      BinOp::BitXor, x,
      make_binary(BinOp::BitAnd, make_binary(BinOp::Shr, x, c32(sw.shift)), c32(mask)));
}

Expr address(const RegionLayout& l, Expr inner) {
  Expr a = add(l.mem_offset, std::move(inner));
  return l.swizzle ? swizzle_expr(*l.swizzle, a) : a;
}

int swizzle_vector_cap(const RegionLayout& l) {
  return l.swizzle ? 1 << std::min(l.swizzle->base, 20) : 1 << 20;
}

std::optional<RegionLayout> region_layout(const BufferRegion& r, const Env& env, std::string* why,
                                          RegionOptions opt) {
  const BufferNode* b = r.buffer.get();
  if (b->layout.swizzle() && !opt.allow_swizzle) {
    set_why(why, "swizzled layout " + b->layout.swizzle()->str() + " of " + b->name +
                     " (this variant does not form swizzled addresses)");
    return std::nullopt;
  }
  auto grouped = group_by_dims(b->layout.shard(), b->shape, why);
  if (!grouped) return std::nullopt;
  RegionLayout out;
  out.extents = r.extents();
  out.replica = b->layout.replica();
  for (int a = 1; a < kNumAxes; ++a) out.thread_offset[a] = b->layout.offsets()[a];
  Expr mem = c32(b->memory_offset());
  for (std::size_t d = 0; d < b->shape.size(); ++d) {
    const auto& its = (*grouped)[d];
    std::int64_t n = r.ranges[d].extent;
    Expr start = r.ranges[d].start;
    std::vector<Iter> sliced;
    if (n == b->shape[d] && is_const_int(start, 0)) {
      out.dims.push_back(its);
      continue;
    }
    // Inner products P_j of the dimension's iters.
    std::vector<std::int64_t> P(its.size());
    std::int64_t p = 1;
    for (std::size_t j = its.size(); j-- > 0;) {
      P[j] = p;
      p *= its[j].extent;
    }
    auto cs = as_const_int(start);
    bool done = false;
    for (std::size_t j = 0; j < its.size() && !done; ++j) {
      if (n % P[j] != 0 || n / P[j] > its[j].extent) continue;
      if (cs) {
        if (*cs % P[j] != 0) continue;
        std::int64_t cj = (*cs / P[j]) % its[j].extent;
        if (cj + n / P[j] > its[j].extent) continue;
        for (std::size_t i = 0; i <= j; ++i) {
          std::int64_t ci = (*cs / P[i]) % its[i].extent;
          if (its[i].axis == Axis::m)
            mem = add(mem, c32(ci * its[i].stride));
          else
            out.thread_offset[static_cast<int>(its[i].axis)] += ci * its[i].stride;
        }
      } else {
        // A dynamic start may only move along the dimension's outermost iter.
        if (j != 0 || its[0].axis != Axis::m) continue;
        std::int64_t kd = env.known_divisor(start);
        if (kd != 0 && kd % P[0] != 0) continue;
        mem = add(mem, mul(div(start, c32(P[0])), c32(its[0].stride)));
      }
      if (n / P[j] > 1) sliced.push_back(Iter{n / P[j], its[j].stride, its[j].axis});
      sliced.insert(sliced.end(), its.begin() + static_cast<std::ptrdiff_t>(j) + 1, its.end());
      done = true;
    }
    if (!done && its.empty() && n == 1) done = true;  // extent-1 dimension
    if (!done) {
      set_why(why, "region [" + to_string(start) + " : +" + std::to_string(n) + "] in dimension " +
                       std::to_string(d) + " of " + b->name + " does not align with its layout " +
                       b->layout.str());
      return std::nullopt;
    }
    out.dims.push_back(sliced);
  }
  out.mem_offset = mem;
  out.swizzle = b->layout.swizzle();
  return out;
}

Extents squeeze(const Extents& e) {
  Extents out;
  for (auto x : e)
    if (x != 1) out.push_back(x);
  return out;
}

std::optional<Extents> broadcast_shapes(const Extents& a, const Extents& b) {
  std::size_t n = std::max(a.size(), b.size());
  Extents out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) return std::nullopt;
    out[i] = std::max(x, y);
  }
  return out;
}

std::optional<RegionLayout> broadcast_to(const RegionLayout& l, const Extents& target,
                                         std::string* why) {
  if (l.extents == target) return l;
  if (l.extents.size() > target.size()) {
    // Leading extent-1 dimensions may be dropped.
    std::size_t extra = l.extents.size() - target.size();
    for (std::size_t i = 0; i < extra; ++i)
      if (l.extents[i] != 1) {
        set_why(why, "cannot broadcast a rank-" + std::to_string(l.extents.size()) +
                         " operand to rank " + std::to_string(target.size()));
        return std::nullopt;
      }
  }
  RegionLayout out;
  out.extents = target;
  out.replica = l.replica;
  out.mem_offset = l.mem_offset;
  out.thread_offset = l.thread_offset;
  out.swizzle = l.swizzle;  // the places are the same elements' (leading 1s dropped)
  std::ptrdiff_t shift =
      static_cast<std::ptrdiff_t>(target.size()) - static_cast<std::ptrdiff_t>(l.extents.size());
  for (std::size_t i = 0; i < target.size(); ++i) {
    std::ptrdiff_t src = static_cast<std::ptrdiff_t>(i) - shift;
    std::int64_t ext = src >= 0 ? l.extents[static_cast<std::size_t>(src)] : 1;
    if (ext == target[i]) {
      out.dims.push_back(src >= 0 ? l.dims[static_cast<std::size_t>(src)] : std::vector<Iter>{});
    } else if (ext == 1) {
      if (target[i] > 1)
        out.dims.push_back({Iter{target[i], 0, Axis::m}});
      else
        out.dims.push_back({});
    } else {
      set_why(why, "extent " + std::to_string(ext) + " does not broadcast to " +
                       std::to_string(target[i]));
      return std::nullopt;
    }
  }
  return out;
}

std::optional<std::vector<JointIter>> joint_refine(const std::vector<std::vector<Iter>>& operands,
                                                   std::int64_t total, std::string* why) {
  // Boundaries: inner products where some operand changes iter.
  std::set<std::int64_t> bounds{1, total};
  std::vector<std::vector<std::pair<std::int64_t, Iter>>> inner(operands.size());
  for (std::size_t i = 0; i < operands.size(); ++i) {
    std::int64_t p = 1;
    for (std::size_t k = operands[i].size(); k-- > 0;) {
      const Iter& it = operands[i][k];
      if (it.extent == 1) continue;
      inner[i].push_back({p, it});
      p *= it.extent;
      bounds.insert(p);
    }
    if (p != total) {
      set_why(why, "operand " + std::to_string(i) + " covers " + std::to_string(p) +
                       " elements, expected " + std::to_string(total));
      return std::nullopt;
    }
  }
  std::vector<std::int64_t> bs(bounds.begin(), bounds.end());
  for (std::size_t k = 1; k < bs.size(); ++k)
    if (bs[k] % bs[k - 1] != 0) {
      set_why(why, "the operands' layouts split the index space at " + std::to_string(bs[k - 1]) +
                       " and " + std::to_string(bs[k]) + ", which do not nest");
      return std::nullopt;
    }
  std::vector<JointIter> out;
  for (std::size_t k = 1; k < bs.size(); ++k) {
    std::int64_t lo = bs[k - 1], hi = bs[k];
    JointIter j;
    j.extent = hi / lo;
    for (std::size_t i = 0; i < operands.size(); ++i) {
      Iter part{j.extent, 0, Axis::m};
      for (auto& [p, it] : inner[i])
        if (p <= lo && lo < p * it.extent) {
          part = Iter{j.extent, it.stride * (lo / p), it.axis};
          break;
        }
      j.parts.push_back(part);
    }
    out.insert(out.begin(), j);
  }
  return out;
}

std::vector<JointIter> coalesce(const std::vector<JointIter>& iters) {
  std::vector<JointIter> out;
  for (const JointIter& it : iters) {
    if (it.extent == 1) continue;
    if (!out.empty()) {
      JointIter& a = out.back();
      bool ok = true;
      for (std::size_t i = 0; i < it.parts.size() && ok; ++i)
        ok = a.parts[i].axis == it.parts[i].axis &&
             a.parts[i].stride == it.extent * it.parts[i].stride;
      if (ok) {
        a.extent *= it.extent;
        for (std::size_t i = 0; i < it.parts.size(); ++i) {
          a.parts[i].stride = it.parts[i].stride;
          a.parts[i].extent = a.extent;
        }
        continue;
      }
    }
    out.push_back(it);
  }
  return out;
}

std::optional<std::int64_t> thread_axis_multiplier(Axis axis, ExecScope scope) {
  switch (scope) {
    case ExecScope::thread:
      return std::nullopt;
    case ExecScope::warp:
      if (axis == Axis::laneid) return 1;
      return std::nullopt;
    case ExecScope::warpgroup:
      if (axis == Axis::laneid || axis == Axis::tid_in_wg) return 1;
      if (axis == Axis::wid_in_wg) return 32;
      return std::nullopt;
    case ExecScope::cta:
      switch (axis) {
        case Axis::laneid:
        case Axis::tx:
        case Axis::tid_in_wg:
          return 1;
        case Axis::warpid:
        case Axis::wid_in_wg:
          return 32;
        case Axis::wgid:
          return 128;
        default:
          return std::nullopt;
      }
  }
  return std::nullopt;
}

std::int64_t axis_limit(Axis axis, int cta_threads) {
  switch (axis) {
    case Axis::laneid:
      return 32;
    case Axis::warpid:
      return (cta_threads + 31) / 32;
    case Axis::tx:
      return cta_threads;
    case Axis::wgid:
      return (cta_threads + 127) / 128;
    case Axis::tid_in_wg:
      return 128;
    case Axis::wid_in_wg:
      return 4;
    case Axis::m:
      return Interval::kMax;
  }
  return 0;
}

Expr scope_thread_index(ExecScope scope) {
  Expr t = make_call(Intrinsic::thread_idx, {});
  switch (scope) {
    case ExecScope::thread:
      return c32(0);
    case ExecScope::warp:
      return mod(t, c32(32));
    case ExecScope::warpgroup:
      return mod(t, c32(128));
    case ExecScope::cta:
      return t;
  }
  return t;
}

std::optional<std::string> check_thread_cover(std::vector<ThreadIter> iters, std::int64_t threads,
                                              const std::string& axis_desc) {
  std::sort(iters.begin(), iters.end(),
            [](const ThreadIter& a, const ThreadIter& b) { return a.stride < b.stride; });
  std::int64_t expect = 1;
  for (const ThreadIter& it : iters) {
    if (it.extent == 1) continue;
    if (it.stride != expect)
      return "thread iters of " + axis_desc + " do not map the " + std::to_string(threads) +
             " threads one-to-one (stride " + std::to_string(it.stride) + " where " +
             std::to_string(expect) + " was expected)";
    expect *= it.extent;
  }
  if (expect != threads)
    return "layout spreads over " + std::to_string(expect) + " threads (" + axis_desc +
           ") but the scope has " + std::to_string(threads);
  return std::nullopt;
}

Expr thread_coord(const Expr& rel, std::int64_t stride, std::int64_t extent) {
  return mod(div(rel, c32(stride)), c32(extent));
}

Expr mixed_radix_offset(const Expr& f, const std::vector<std::int64_t>& extents,
                        const std::vector<std::int64_t>& strides) {
  Expr off = c32(0);
  std::int64_t inner = 1;
  for (std::size_t k = extents.size(); k-- > 0;) {
    Expr coord = div(f, c32(inner));
    if (k != 0) coord = mod(coord, c32(extents[k]));
    off = add(off, mul(coord, c32(strides[k])));
    inner *= extents[k];
  }
  return off;
}

Expr offset_of_coords(const std::vector<std::vector<Iter>>& dims, const std::vector<Expr>& coords,
                      DType index) {
  auto c = [&](std::int64_t v) { return make_int(v, index); };
  Expr off = c(0);
  for (std::size_t d = 0; d < dims.size(); ++d) {
    std::int64_t inner = 1;
    for (std::size_t j = dims[d].size(); j-- > 0;) {
      const Iter& it = dims[d][j];
      Expr x = div(coords[d], c(inner));
      if (j != 0) x = mod(x, c(it.extent));
      if (it.axis == Axis::m) off = add(off, mul(x, c(it.stride)));
      inner *= it.extent;
    }
  }
  return off;
}

}  // namespace tx::lowering
