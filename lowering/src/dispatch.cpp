#include "tx/lowering/dispatch.hpp"

#include <algorithm>
#include <mutex>

#include "tx/printer.hpp"

namespace tx::lowering {

Registry& Registry::global() {
  // Function-local static: no static-initialization order to depend on
  // (clang-repl loads libtx lazily).
  static Registry* r = [] {
    auto* reg = new Registry();
    register_copy_gmem_smem(*reg);
    register_copy_reg(*reg);
    register_copy_fallback(*reg);
    register_elementwise_reg(*reg);
    register_elementwise_smem(*reg);
    register_reduction_local(*reg);
    register_reduction_shared(*reg);
    return reg;
  }();
  return *r;
}

void Registry::add(std::string op, Variant v) { entries_.emplace_back(std::move(op), std::move(v)); }

std::vector<const Variant*> Registry::variants(const std::string& op,
                                               const std::string& target) const {
  std::vector<const Variant*> out;
  for (const auto& [o, v] : entries_)
    if (o == op && v.target == target) out.push_back(&v);
  std::stable_sort(out.begin(), out.end(), [](const Variant* a, const Variant* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->name < b->name;
  });
  return out;
}

std::vector<std::string> Registry::ops() const {
  std::vector<std::string> out;
  for (const auto& [o, v] : entries_)
    if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
  return out;
}

namespace {
std::string try_variant(const Variant& v, const DispatchContext& ctx, Stmt* out) {
  for (const auto& [name, pred] : v.when)
    if (Check c = pred(ctx)) return *c;
  Plan p = v.plan(ctx);
  if (auto* reason = std::get_if<std::string>(&p)) return *reason;
  *out = std::get<Stmt>(p);
  return {};
}
}  // namespace

DispatchResult dispatch(const DispatchContext& ctx) {
  const TileCallNode* call = ctx.call;
  const std::string qn = call->qualified_name();
  auto candidates = Registry::global().variants(call->op, ctx.target);
  if (candidates.empty())
    fail(qn, "", call->loc, "unknown tile primitive '" + call->op + "' for target " + ctx.target);

  DispatchResult result;
  const std::string& forced = call->attrs.variant;
  if (!forced.empty()) {
    auto it = std::find_if(candidates.begin(), candidates.end(), [&](const Variant* v) {
      return v->name == forced || v->qualified() == forced;
    });
    if (it == candidates.end()) {
      std::string names;
      for (const Variant* v : candidates) names += (names.empty() ? "" : ", ") + v->name;
      fail(qn, "", call->loc,
           "variant \"" + forced + "\" is not registered for " + call->op + " (have: " + names +
               ")");
    }
    candidates = {*it};
  }

  for (const Variant* v : candidates) {
    Stmt lowered;
    std::string reason = try_variant(*v, ctx, &lowered);
    if (reason.empty()) {
      result.variant = v;
      result.lowered = lowered;
      return result;
    }
    result.rejected.emplace_back(v, reason);
  }

  std::string detail = "  call: " + tile_call_str(call);
  for (const auto& [v, reason] : result.rejected)
    detail += "\n  " + v->qualified() + " [" + std::to_string(v->priority) + "]: " + reason;
  // The first reason is the one of the best-suited variant; name it in the headline.
  std::string headline = forced.empty() ? "no variant accepts this call"
                                        : "forced variant \"" + forced + "\" does not apply";
  if (result.rejected.size() == 1) headline += ": " + result.rejected[0].second;
  // Reasons about one operand start with "operand NAME: "; the best variant's names it.
  std::string operand;
  const std::string& best = result.rejected.front().second;
  if (best.rfind("operand ", 0) == 0) operand = best.substr(8, best.find(':') - 8);
  fail(qn, operand, call->loc, headline, detail);
}

}  // namespace tx::lowering
