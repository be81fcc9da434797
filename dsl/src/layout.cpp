#include "tx/layout.hpp"

#include <numeric>
#include <sstream>

#include "tx/error.hpp"

namespace tx {

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::m:
      return "m";
    case Axis::laneid:
      return "laneid";
    case Axis::warpid:
      return "warpid";
    case Axis::tx:
      return "tx";
    case Axis::wgid:
      return "wgid";
    case Axis::tid_in_wg:
      return "tid_in_wg";
    case Axis::wid_in_wg:
      return "wid_in_wg";
  }
  return "?";
}

namespace {
// The most elements (and the farthest offset) a layout may describe: 2^62,
// so that sizes and offsets never overflow the 64-bit arithmetic of tx and
// of the kernels (byte counts are checked per buffer, T.alloc_buffer).
constexpr __int128 kMaxLayoutElems = __int128{1} << 62;

// Rejects iters whose element count or farthest offset passes 2^62.
void check_iters(const char* what, const std::vector<Iter>& iters) {
  __int128 n = 1, reach = 0;
  for (const Iter& it : iters) {
    if (it.extent <= 0)
      fail("tx.TileLayout", what, {}, "extent " + std::to_string(it.extent) + " is not positive");
    n *= it.extent;
    reach += static_cast<__int128>(it.extent - 1) *
             (it.stride < 0 ? -static_cast<__int128>(it.stride) : it.stride);
    if (n > kMaxLayoutElems || reach > kMaxLayoutElems)
      fail("tx.TileLayout", what, {},
           "the layout " + std::string(n > kMaxLayoutElems ? "covers" : "reaches") +
               " more than 2^62 elements, past what 64-bit offsets can address");
  }
}

std::vector<Iter> make_iters(const char* what, const std::vector<std::int64_t>& extents,
                             std::vector<AxisStride> strides) {
  for (auto e : extents)
    if (e <= 0) fail("tx.TileLayout", what, {}, "extent " + std::to_string(e) + " is not positive");
  if (strides.empty()) {
    // Row-major on memory.
    strides.resize(extents.size(), AxisStride(1));
    __int128 s = 1;
    for (std::size_t k = extents.size(); k-- > 0;) {
      if (s > kMaxLayoutElems)
        fail("tx.TileLayout", what, {},
             "the layout covers more than 2^62 elements, past what 64-bit offsets can address");
      strides[k] = AxisStride(static_cast<std::int64_t>(s));
      s *= extents[k];
    }
  }
  if (strides.size() != extents.size())
    fail("tx.TileLayout", what, {},
         std::to_string(extents.size()) + " extents but " + std::to_string(strides.size()) +
             " strides");
  std::vector<Iter> iters;
  for (std::size_t k = 0; k < extents.size(); ++k) {
    if (extents[k] <= 0)
      fail("tx.TileLayout", what, {}, "extent " + std::to_string(extents[k]) + " is not positive");
    if (strides[k].stride < 0)
      fail("tx.TileLayout", what, {}, "negative stride " + std::to_string(strides[k].stride));
    iters.push_back({extents[k], strides[k].stride, strides[k].axis});
  }
  check_iters(what, iters);
  return iters;
}

std::vector<Iter> canonical_iters(const std::vector<Iter>& in) {
  std::vector<Iter> out;
  for (const Iter& it : in) {
    if (it.extent == 1) continue;
    if (!out.empty()) {
      Iter& prev = out.back();
      if (prev.axis == it.axis && it.extent * it.stride == prev.stride) {
        prev = {prev.extent * it.extent, it.stride, it.axis};
        continue;
      }
    }
    out.push_back(it);
  }
  return out;
}

std::string iters_str(const std::vector<Iter>& iters) {
  std::ostringstream os;
  os << "(";
  for (std::size_t k = 0; k < iters.size(); ++k) os << (k ? ", " : "") << iters[k].extent;
  if (iters.size() == 1) os << ",";
  os << ") : (";
  for (std::size_t k = 0; k < iters.size(); ++k) {
    os << (k ? ", " : "") << iters[k].stride;
    if (iters[k].axis != Axis::m) os << "@" << axis_name(iters[k].axis);
  }
  if (iters.size() == 1) os << ",";
  os << ")";
  return os.str();
}
}  // namespace

std::string Swizzle::str() const {
  return "Sw<" + std::to_string(bits) + "," + std::to_string(base) + "," + std::to_string(shift) +
         ">";
}

Swizzle make_swizzle(int bits, int base, int shift) {
  const std::string what =
      "Sw<" + std::to_string(bits) + "," + std::to_string(base) + "," + std::to_string(shift) + ">";
  if (bits < 0 || base < 0 || shift < 0)
    fail("tx.Swizzle", what, {}, "bits, base and shift must not be negative");
  if (shift < bits)
    fail("tx.Swizzle", what, {},
         "shift " + std::to_string(shift) + " is below bits " + std::to_string(bits) +
             ": the XOR would read the bits it writes, and sw would not be its own inverse");
  if (base + shift + bits > 30)
    fail("tx.Swizzle", what, {}, "the period 2^(base + shift + bits) passes 2^30 elements");
  return Swizzle{bits, base, shift};
}

ShardSpec S(std::vector<std::int64_t> extents, std::vector<AxisStride> strides) {
  return {make_iters("S", extents, std::move(strides))};
}

ReplicaSpec R(std::vector<std::int64_t> extents, std::vector<AxisStride> strides) {
  if (strides.empty()) fail("tx.TileLayout", "R", {}, "a replica needs explicit strides");
  return {make_iters("R", extents, std::move(strides))};
}

TileLayout::TileLayout(ShardSpec shard) : shard_(std::move(shard.iters)) {}
TileLayout::TileLayout(ShardSpec shard, ReplicaSpec replica)
    : shard_(std::move(shard.iters)), replica_(std::move(replica.iters)) {}
TileLayout::TileLayout(std::vector<Iter> shard, std::vector<Iter> replica,
                       std::array<std::int64_t, kNumAxes> offset)
    : shard_(std::move(shard)), replica_(std::move(replica)), offset_(offset) {
  check_iters("S", shard_);
  check_iters("R", replica_);
}

TileLayout TileLayout::row_major(const std::vector<std::int64_t>& shape) {
  return TileLayout(S(shape));
}

TileLayout TileLayout::with_offset(Axis a, std::int64_t off) const {
  TileLayout l = *this;
  l.offset_[static_cast<int>(a)] = off;
  return l;
}

TileLayout TileLayout::swizzled(Swizzle sw) const {
  sw = make_swizzle(sw.bits, sw.base, sw.shift);
  TileLayout l = *this;
  l.swizzle_ = sw.bits == 0 ? std::nullopt : std::optional<Swizzle>(sw);
  return l;
}

TileLayout TileLayout::unswizzled() const {
  TileLayout l = *this;
  l.swizzle_.reset();
  return l;
}

std::int64_t TileLayout::size() const {
  std::int64_t n = 1;
  for (const Iter& it : shard_) n *= it.extent;
  return n;
}

bool TileLayout::uses_axis(Axis a) const {
  for (const Iter& it : shard_)
    if (it.axis == a) return true;
  for (const Iter& it : replica_)
    if (it.axis == a) return true;
  return offset_[static_cast<int>(a)] != 0;
}

bool TileLayout::has_thread_axes() const {
  for (int a = 1; a < kNumAxes; ++a)
    if (uses_axis(static_cast<Axis>(a))) return true;
  return false;
}

TileLayout TileLayout::canonical() const {
  TileLayout l(canonical_iters(shard_), canonical_iters(replica_), offset_);
  l.swizzle_ = swizzle_;
  return l;
}

std::vector<Location> TileLayout::apply_linear(std::int64_t index) const {
  Location base{};
  for (int a = 0; a < kNumAxes; ++a) base[a] = offset_[a];
  for (std::size_t k = shard_.size(); k-- > 0;) {
    const Iter& it = shard_[k];
    base[static_cast<int>(it.axis)] += (index % it.extent) * it.stride;
    index /= it.extent;
  }
  std::vector<Location> out{base};
  for (const Iter& it : replica_) {
    std::vector<Location> next;
    next.reserve(out.size() * static_cast<std::size_t>(it.extent));
    for (const Location& l : out)
      for (std::int64_t r = 0; r < it.extent; ++r) {
        Location x = l;
        x[static_cast<int>(it.axis)] += r * it.stride;
        next.push_back(x);
      }
    out = std::move(next);
  }
  if (swizzle_)
    for (Location& l : out) l[0] = swizzle_->apply(l[0]);
  return out;
}

std::vector<Location> TileLayout::apply(const std::vector<std::int64_t>& coord,
                                        const std::vector<std::int64_t>& shape) const {
  if (coord.size() != shape.size())
    fail("tx.TileLayout.apply", "", {}, "coordinate rank differs from shape rank");
  std::int64_t idx = 0;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (coord[k] < 0 || coord[k] >= shape[k])
      fail("tx.TileLayout.apply", "", {}, "coordinate out of the shape");
    idx = idx * shape[k] + coord[k];
  }
  return apply_linear(idx);
}

TileLayout TileLayout::storage() const {
  std::vector<Iter> mem;
  for (const Iter& it : shard_)
    if (it.axis == Axis::m) mem.push_back(it);
  TileLayout l(std::move(mem));
  l.swizzle_ = swizzle_;
  return l;
}

std::int64_t TileLayout::cosize() const {
  std::int64_t hi = offset(Axis::m);
  for (const Iter& it : shard_)
    if (it.axis == Axis::m) hi += (it.extent - 1) * it.stride;
  for (const Iter& it : replica_)
    if (it.axis == Axis::m) hi += (it.extent - 1) * it.stride;
  if (swizzle_) {
    const std::int64_t span = swizzle_->span();
    return (hi / span + 1) * span;
  }
  return hi + 1;
}

std::optional<std::string> TileLayout::mismatch(const std::vector<std::int64_t>& shape) const {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  if (size() != n) {
    std::ostringstream os;
    os << "layout " << str() << " covers " << size() << " elements but the shape (";
    for (std::size_t k = 0; k < shape.size(); ++k) os << (k ? ", " : "") << shape[k];
    os << ") has " << n;
    return os.str();
  }
  for (const Iter& it : shard_)
    if (it.extent <= 0 || it.stride < 0) return "layout " + str() + " has a bad iter";
  // A layout written one iter per dimension must list the buffer's extents
  // in order: (8, 32) on a (32, 8) buffer covers as many elements, but it is
  // another shape (a transposed or mistyped one), not a split of these
  // dimensions. Layouts with more iters than dimensions split them (a
  // register tile's S({4, 32, 2}) over (16, 16)), and a single iter over
  // several dimensions is their flat row-major order; both stay accepted.
  std::vector<std::int64_t> iters, dims;
  for (const Iter& it : shard_)
    if (it.extent > 1) iters.push_back(it.extent);
  for (auto e : shape)
    if (e > 1) dims.push_back(e);
  if (iters.size() == dims.size() && iters.size() > 1 && iters != dims) {
    std::ostringstream os;
    os << "layout " << str() << " has extents (";
    for (std::size_t k = 0; k < iters.size(); ++k) os << (k ? ", " : "") << iters[k];
    os << ") but the buffer's shape is (";
    for (std::size_t k = 0; k < shape.size(); ++k) os << (k ? ", " : "") << shape[k];
    os << "): give one layout iter per dimension, in the shape's order";
    return os.str();
  }
  return std::nullopt;
}

std::string TileLayout::str() const {
  std::string s = "S[" + iters_str(shard_) + "]";
  if (!replica_.empty()) s += " + R[" + iters_str(replica_) + "]";
  bool any = false;
  std::string o;
  for (int a = 0; a < kNumAxes; ++a)
    if (offset_[a] != 0) {
      o += std::string(any ? ", " : "") + axis_name(static_cast<Axis>(a)) + ": " +
           std::to_string(offset_[a]);
      any = true;
    }
  if (any) s += " + O[" + o + "]";
  if (swizzle_) s = swizzle_->str() + "(" + s + ")";
  return s;
}

}  // namespace tx
