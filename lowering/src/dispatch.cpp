#include "tx/lowering/dispatch.hpp"

#include <algorithm>
#include <mutex>

#include "tx/printer.hpp"
#include "tx/tile_op_table.hpp"

namespace tx::lowering {

Registry& Registry::global() {
  // Function-local static: no static-initialization order to depend on
  // (clang-repl loads libtx lazily).
  static Registry* r = [] {
    auto* reg = new Registry();
    register_copy_gmem_smem(*reg);
    register_copy_reg(*reg);
    register_atomic_reg(*reg);
    register_atomic_tma_reduce(*reg);
    register_atomic_fallback(*reg);
    register_copy_fallback(*reg);
    register_elementwise_reg(*reg);
    register_elementwise_smem(*reg);
    register_reduction_local(*reg);
    register_reduction_shared(*reg);
    register_reduction_cross_warp(*reg);
    register_copy_ldstmatrix(*reg);
    register_copy_async_ldgsts(*reg);
    register_copy_async_tma(*reg);
    register_copy_async_tma_store(*reg);
    register_copy_async_sync(*reg);
    register_gemm_mma_sync(*reg);
    register_gemm_wgmma(*reg);
    register_gemm_fallback(*reg);
    return reg;
  }();
  return *r;
}

void Registry::add(Variant v) {
  std::string family = v.family;
  add(std::move(family), std::move(v));
}

void Registry::add(std::string op, Variant v) {
  entries_.emplace_back(std::move(op), std::move(v));
}

bool Variant::runs_on(TargetKind k) const {
  return std::find(targets.begin(), targets.end(), k) != targets.end();
}

std::vector<const Variant*> Registry::variants(const std::string& op, TargetKind target) const {
  std::vector<const Variant*> out = variants(op);
  std::erase_if(out, [&](const Variant* v) { return !v->runs_on(target); });
  return out;
}

std::vector<const Variant*> Registry::variants(const std::string& op) const {
  // Those registered for the op's family, and for the op itself.
  const TileOpDef* def = find_tile_op(op);
  const std::string family = def ? def->family : std::string();
  std::vector<const Variant*> out;
  for (const auto& [o, v] : entries_)
    if (o == op || (!family.empty() && o == family)) out.push_back(&v);
  std::stable_sort(out.begin(), out.end(), [](const Variant* a, const Variant* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    return a->name < b->name;
  });
  return out;
}

std::vector<std::string> Registry::ops() const {
  std::vector<std::string> out;
  for (const TileOpDef* d : tile_ops())
    if (!variants(d->name).empty()) out.push_back(d->name);
  return out;
}

namespace {
// Reasons about one operand read "operand NAME: what".
std::string operand_of(const std::string& reason) {
  if (reason.rfind("operand ", 0) != 0) return {};
  auto colon = reason.find(':');
  return colon == std::string::npos ? std::string() : reason.substr(8, colon - 8);
}
std::string strip_operand(const std::string& reason) {
  if (operand_of(reason).empty()) return reason;
  return reason.substr(reason.find(':') + 2);
}

// A fix the user can apply, where the call shows one.
std::string dispatch_hint(const TileCallNode* call, std::string* operand) {
  // copy moves between any memories; gemm/fallback takes global operands.
  const TileOpDef* def = find_tile_op(call->op);
  bool copy = def && def->has(TileOpFlag::global);
  for (const TileArg& a : call->args) {
    auto* r = std::get_if<BufferRegion>(&a);
    if (!r || !r->buffer || r->buffer->scope != MemScope::global || copy) continue;
    *operand = r->buffer->name;
    return "tile primitives other than copy work on shared memory or registers: stage " +
           r->buffer->name + " through a T::alloc_buffer(..., scope::shared) or a register tile (" +
           "scope::local) with Tx." + exec_scope_name(call->scope) + ".copy first";
  }
  return {};
}

std::string try_variant(const Variant& v, const DispatchContext& ctx, Stmt* out) {
  for (const auto& [name, pred] : v.when)
    if (Check c = pred(ctx)) return *c;
  // A variant of another target is turned down after its predicates: what
  // is wrong with the call itself is said first (and grouped with the other
  // variants' reasons), the target last.
  if (!v.runs_on(ctx.target))
    return v.off_target.empty() ? "it emits no code for the " + ctx.target.str() : v.off_target;
  Plan p = v.plan(ctx);
  if (auto* reason = std::get_if<std::string>(&p)) return *reason;
  *out = std::get<Stmt>(p);
  return {};
}
}  // namespace

DispatchResult dispatch(const DispatchContext& ctx) {
  const TileCallNode* call = ctx.call;
  const std::string qn = call->qualified_name();
  auto candidates = Registry::global().variants(call->op);
  if (candidates.empty())
    fail(qn, "", call->loc,
         "unknown tile primitive '" + call->op + "' for target " + ctx.target.str());

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

  // One line per distinct reason (variants that fail for the same reason
  // share it), the best variant first.
  std::vector<std::pair<std::string, std::string>> groups;  // reason -> variants
  for (const auto& [v, reason] : result.rejected) {
    std::string name = v->qualified() + " [" + std::to_string(v->priority) + "]";
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == reason; });
    if (it == groups.end())
      groups.emplace_back(reason, name);
    else
      it->second += ", " + name;
  }
  std::string detail = "  call: " + tile_call_str(call);
  // The headline carries the reason when there is only one.
  std::string headline = forced.empty() ? "no variant accepts this call"
                                        : "forced variant \"" + forced + "\" does not apply";
  if (groups.size() == 1) {
    headline += ": " + strip_operand(groups[0].first);
    detail += "\n  tried: " + groups[0].second;
  } else {
    for (const auto& [reason, names] : groups) detail += "\n  " + names + ": " + reason;
  }
  std::string global_operand;
  if (std::string hint = dispatch_hint(call, &global_operand); !hint.empty())
    detail += "\n  hint: " + hint;
  // The operand at fault: a global operand of a primitive that needs it
  // staged; else the one most reasons name (the best variant's on a tie).
  std::string operand = global_operand;
  if (operand.empty()) {
    std::vector<std::pair<std::string, int>> votes;
    for (const auto& [v, reason] : result.rejected) {
      std::string o = operand_of(reason);
      if (o.empty()) continue;
      auto it = std::find_if(votes.begin(), votes.end(), [&](auto& p) { return p.first == o; });
      if (it == votes.end())
        votes.emplace_back(o, 1);
      else
        ++it->second;
    }
    int best = 0;
    for (auto& [o, n] : votes)
      if (n > best) operand = o, best = n;
  }
  fail(qn, operand, call->loc, headline, detail);
}

}  // namespace tx::lowering
