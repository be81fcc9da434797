// lower_profile: T::profile regions (ProfileNode) become what the compile asks for.
//
//   profiling off:  the region's body, nothing else -- the kernel is the same
//                   code as without the region (the printed CUDA is identical)
//   profiling on:   profile_mark(r, 0); body; profile_mark(r, 1), where r
//                   indexes `regions` (the names, in order of first appearance;
//                   one name used twice is one region)
//
// Runs first, on the source body: the other passes never see a ProfileNode,
// and a region around tile calls brackets whatever the calls lower to. The
// code generators turn profile_mark into a record of the calling warp (CUDA:
// %globaltimer and the SM id, by the warp's first active lane; the host:
// a logical step), see runtime/include/tx/runtime/profile.hpp.
#include <algorithm>

#include "tx/lowering/lower.hpp"

namespace tx::lowering {

namespace {

class LowerProfile : public IRMutator {
 public:
  LowerProfile(bool enabled, std::vector<std::string>* regions)
      : enabled_(enabled), regions_(regions) {}
  using IRMutator::mutate_node;
  Stmt mutate_node(const Stmt&, const ProfileNode* n) override {
    Stmt body = mutate(n->body);
    if (!enabled_) return body;
    auto it = std::find(regions_->begin(), regions_->end(), n->name);
    const auto r = static_cast<std::int64_t>(it - regions_->begin());
    if (it == regions_->end()) regions_->push_back(n->name);
    auto mark = [&](int end) {
      return make_evaluate(make_call(Intrinsic::profile_mark, {make_int(r), make_int(end)}, n->loc),
                           n->loc);
    };
    return make_seq({mark(0), body, mark(1)}, n->loc);
  }

 private:
  bool enabled_;
  std::vector<std::string>* regions_;
};

}  // namespace

Stmt lower_profile(const Stmt& s, bool enabled, std::vector<std::string>* regions) {
  LowerProfile p(enabled, regions);
  return p.mutate(s);
}

}  // namespace tx::lowering
