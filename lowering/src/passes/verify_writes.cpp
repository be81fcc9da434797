// verify_writes: writes whose result would depend on which thread wins.
//
//  - A buffer written through a layout that sends two different elements to
//    one place (S({32, 8}, {4, 1}): (0, 4) and (1, 0) share offset 4) keeps
//    one of the two values, whichever thread stores last. Reading through
//    such a layout is fine (a stride-0 broadcast of a bias); storing is
//    rejected, as the destination of a tile primitive or of an element
//    store.
//  - A copy whose source and destination are overlapping but different
//    regions of one buffer reads elements that other threads of the same
//    copy write (a race on the GPU; the host would give one sequential
//    answer).
//
// Overlaps of dynamic regions are left to the checked host mode
// (TX_CHECK=1), which sees the actual indices.
#include <algorithm>
#include <unordered_set>

#include "tx/lowering/lower.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

// Whether x -> sum_k d_k * s_k over d_k in [0, e_k) is injective; nullopt
// when too large to decide by enumeration.
std::optional<bool> injective_on_axis(std::vector<std::pair<std::int64_t, std::int64_t>> iters) {
  iters.erase(std::remove_if(iters.begin(), iters.end(), [](auto& it) { return it.first == 1; }),
              iters.end());
  std::sort(iters.begin(), iters.end(), [](auto& a, auto& b) { return a.second < b.second; });
  // Mixed radix: each stride beyond the span of the smaller ones.
  std::int64_t span = 0;
  bool radix = true;
  for (auto [e, s] : iters) {
    if (s == 0) return false;
    if (s <= span) radix = false;
    span += (e - 1) * s;
  }
  if (radix) return true;
  std::int64_t count = 1;
  for (auto [e, s] : iters) {
    count *= e;
    if (count > (1 << 22)) return std::nullopt;
  }
  std::unordered_set<std::int64_t> seen;
  std::vector<std::int64_t> digit(iters.size(), 0);
  for (std::int64_t n = 0; n < count; ++n) {
    std::int64_t at = 0;
    for (std::size_t k = 0; k < iters.size(); ++k) at += digit[k] * iters[k].second;
    if (!seen.insert(at).second) return false;
    for (std::size_t k = 0; k < digit.size(); ++k) {
      if (++digit[k] < iters[k].first) break;
      digit[k] = 0;
    }
  }
  return true;
}

// Two different elements (or copies of them) of the layout at one place?
bool overlaps_itself(const TileLayout& l) {
  for (int a = 0; a < kNumAxes; ++a) {
    std::vector<std::pair<std::int64_t, std::int64_t>> iters;
    for (const Iter& it : l.shard())
      if (static_cast<int>(it.axis) == a) iters.emplace_back(it.extent, it.stride);
    for (const Iter& it : l.replica())
      if (static_cast<int>(it.axis) == a) iters.emplace_back(it.extent, it.stride);
    if (injective_on_axis(iters) == std::optional<bool>(false)) return true;
  }
  return false;
}

class WriteCheck : public IRVisitor {
 public:
  using IRVisitor::visit_node;

  void visit_node(const StoreNode* n) override {
    check_layout(n->buffer, "T.store", n->loc);
    IRVisitor::visit_node(n);
  }
  void visit_node(const TileCallNode* n) override {
    if (!n->args.empty())
      if (auto* dst = std::get_if<BufferRegion>(&n->args[0]))
        check_layout(dst->buffer, n->qualified_name(), n->loc);
    if (n->op == "copy" && n->args.size() == 2) check_copy(n);
    IRVisitor::visit_node(n);
  }

 private:
  void check_layout(const Buffer& b, const std::string& op, SourceLoc loc) {
    if (!checked_.insert(b.get()).second) return;
    if (overlaps_itself(b->layout))
      fail(op, b->name, loc,
           "the layout " + b->layout.str() + " of " + b->name +
               " puts different elements at one place; a write through it keeps whichever "
               "value a thread stores last (use a layout with distinct places, or read-only "
               "views for broadcasting)");
  }

  void check_copy(const TileCallNode* n) {
    auto* dst = std::get_if<BufferRegion>(&n->args[0]);
    auto* src = std::get_if<BufferRegion>(&n->args[1]);
    if (!dst || !src || !dst->buffer.same_as(src->buffer)) return;
    bool identical = true, intersect = true;
    for (std::size_t d = 0; d < dst->ranges.size(); ++d) {
      auto a = as_const_int(dst->ranges[d].start), b = as_const_int(src->ranges[d].start);
      if (!a || !b) return;  // dynamic: the checked host mode sees it
      std::int64_t ea = dst->ranges[d].extent, eb = src->ranges[d].extent;
      identical = identical && *a == *b && ea == eb;
      intersect = intersect && *a < *b + eb && *b < *a + ea;
    }
    if (intersect && !identical)
      fail(n->qualified_name(), dst->buffer->name, n->loc,
           "the destination " + to_string(*dst) + " overlaps the source " + to_string(*src) +
               ": threads of the copy would read elements other threads write (copy through a "
               "second buffer)");
  }

  std::unordered_set<const BufferNode*> checked_;
};

}  // namespace

void verify_writes(const PrimFunc& f) {
  WriteCheck c;
  c.visit(f->body);
}

}  // namespace tx::lowering
