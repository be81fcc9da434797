#include "tx/ops/broadcast.hpp"

#include <algorithm>
#include <string>

#include "tx/error.hpp"

namespace tx::ops {

namespace {
std::string shape_str(const std::vector<std::int64_t>& s) {
  std::string r = "(";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}
}  // namespace

Coalesced coalesce_broadcast(const std::vector<std::vector<std::int64_t>>& shapes) {
  std::size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Coalesced c;
  c.out_shape.assign(rank, 1);
  // Right-aligned extents per input.
  std::vector<std::vector<std::int64_t>> ext(shapes.size(), std::vector<std::int64_t>(rank, 1));
  for (std::size_t i = 0; i < shapes.size(); ++i)
    for (std::size_t d = 0; d < shapes[i].size(); ++d)
      ext[i][rank - shapes[i].size() + d] = shapes[i][d];
  for (std::size_t d = 0; d < rank; ++d)
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      std::int64_t e = ext[i][d];
      if (e == c.out_shape[d] || e == 1) continue;
      if (c.out_shape[d] != 1) {
        std::string all;
        for (const auto& s : shapes) all += (all.empty() ? "" : " and ") + shape_str(s);
        fail("tx.ops.broadcast", "input " + std::to_string(i), {},
             "shapes " + all + " do not broadcast: dimension " + std::to_string(d) +
                 " has extents " + std::to_string(c.out_shape[d]) + " and " + std::to_string(e));
      }
      c.out_shape[d] = e;
    }
  // Contiguous strides of each input over the output's dimensions.
  std::vector<std::vector<std::int64_t>> st(shapes.size(), std::vector<std::int64_t>(rank, 0));
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::int64_t s = 1;
    for (std::size_t d = rank; d-- > 0;) {
      st[i][d] = ext[i][d] == 1 ? 0 : s;
      s *= ext[i][d];
    }
  }
  // Drop extent-1 output dimensions, then merge (outer a, inner b) when every
  // input has stride_a == stride_b * extent_b.
  std::vector<std::int64_t> shape;
  std::vector<std::vector<std::int64_t>> strides(shapes.size());
  for (std::size_t d = 0; d < rank; ++d) {
    if (c.out_shape[d] == 1) continue;
    bool merge = !shape.empty();
    for (std::size_t i = 0; i < shapes.size() && merge; ++i)
      merge = strides[i].back() == st[i][d] * c.out_shape[d];
    if (merge) {
      shape.back() *= c.out_shape[d];
      for (std::size_t i = 0; i < shapes.size(); ++i) strides[i].back() = st[i][d];
    } else {
      shape.push_back(c.out_shape[d]);
      for (std::size_t i = 0; i < shapes.size(); ++i) strides[i].push_back(st[i][d]);
    }
  }
  c.shape = shape;
  c.strides = strides;
  return c;
}

CoalescedViews coalesce_views(const std::vector<std::int64_t>& out_shape,
                              const std::vector<std::vector<std::int64_t>>& in_shapes,
                              const std::vector<std::vector<std::int64_t>>& in_strides,
                              const std::vector<std::int64_t>& out_strides) {
  const std::size_t rank = out_shape.size(), ops = in_shapes.size() + 1;
  std::vector<std::vector<std::int64_t>> st(ops, std::vector<std::int64_t>(rank, 0));
  for (std::size_t i = 0; i < in_shapes.size(); ++i) {
    const std::size_t r = in_shapes[i].size();
    for (std::size_t d = 0; d < r; ++d) {
      std::size_t od = rank - r + d;
      st[i][od] = in_shapes[i][d] == 1 ? 0 : in_strides[i][d];
    }
  }
  st[ops - 1] = out_strides;
  // The output's memory order: larger strides outside (stable: a tie keeps
  // the logical order).
  std::vector<std::size_t> order;
  for (std::size_t d = 0; d < rank; ++d)
    if (out_shape[d] != 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return st[ops - 1][a] > st[ops - 1][b]; });
  CoalescedViews c;
  c.strides.resize(ops);
  for (std::size_t d : order) {
    bool merge = !c.shape.empty();
    for (std::size_t k = 0; k < ops && merge; ++k)
      merge = c.strides[k].back() == st[k][d] * out_shape[d];
    if (merge) {
      c.shape.back() *= out_shape[d];
      for (std::size_t k = 0; k < ops; ++k) c.strides[k].back() = st[k][d];
    } else {
      c.shape.push_back(out_shape[d]);
      for (std::size_t k = 0; k < ops; ++k) c.strides[k].push_back(st[k][d]);
    }
  }
  return c;
}

bool is_dense(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& strides,
              std::vector<int>* order) {
  std::vector<int> o;
  for (std::size_t d = 0; d < shape.size(); ++d) o.push_back(static_cast<int>(d));
  std::stable_sort(o.begin(), o.end(), [&](int a, int b) {
    return strides[static_cast<std::size_t>(a)] > strides[static_cast<std::size_t>(b)];
  });
  std::int64_t expect = 1;
  for (std::size_t k = o.size(); k-- > 0;) {
    auto d = static_cast<std::size_t>(o[k]);
    if (shape[d] == 1) continue;
    if (strides[d] != expect) return false;
    expect *= shape[d];
  }
  if (order) *order = o;
  return true;
}

}  // namespace tx::ops
