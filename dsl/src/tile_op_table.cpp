// The tile-op table at run time (tile_op_table.hpp): TX_TILE_OP_TABLE's rows
// as TileOpDefs, the ops added after them, and the docs index made from both.
#include "tx/tile_op_table.hpp"

#include <algorithm>
#include <deque>
#include <mutex>
#include <shared_mutex>

#include "tx/error.hpp"
#include "tx/expr.hpp"

namespace tx {

namespace tile_math {
Expr one_like(const Expr& x) {
  return x.dtype().is_float() ? make_float(1.0, x.dtype()) : make_int(1, x.dtype());
}
}  // namespace tile_math

const std::vector<OperandDef>& tile_sig_operands(TileSig s) {
  using R = OperandRole;
  static const std::vector<OperandDef> dst_src{{"dst", R::tile, true}, {"src", R::tile, false}};
  static const std::vector<OperandDef> dst{{"dst", R::tile, true}};
  static const std::vector<OperandDef> dst_value{{"dst", R::tile, true},
                                                 {"value", R::scalar, false}};
  static const std::vector<OperandDef> dst_2{
      {"dst", R::tile, true}, {"a", R::tile_or_scalar, false}, {"b", R::tile_or_scalar, false}};
  static const std::vector<OperandDef> dst_3{{"dst", R::tile, true},
                                             {"a", R::tile_or_scalar, false},
                                             {"b", R::tile_or_scalar, false},
                                             {"c", R::tile_or_scalar, false}};
  static const std::vector<OperandDef> d_a_b{
      {"d", R::tile, true}, {"a", R::tile, false}, {"b", R::tile, false}};
  switch (s) {
    case TileSig::dst_src:
      return dst_src;
    case TileSig::dst:
      return dst;
    case TileSig::dst_value:
      return dst_value;
    case TileSig::dst_2:
      return dst_2;
    case TileSig::dst_3:
      return dst_3;
    case TileSig::d_a_b:
      return d_a_b;
  }
  return dst_src;
}

const char* tile_sig_name(TileSig s) {
  switch (s) {
    case TileSig::dst_src:
      return "dst_src";
    case TileSig::dst:
      return "dst";
    case TileSig::dst_value:
      return "dst_value";
    case TileSig::dst_2:
      return "dst_2";
    case TileSig::dst_3:
      return "dst_3";
    case TileSig::d_a_b:
      return "d_a_b";
  }
  return "?";
}

const char* tile_attr_name(TileAttr a) {
  switch (a) {
    case TileAttr::scale_bias:
      return "scale_bias";
    case TileAttr::accum:
      return "accum";
    case TileAttr::axes:
      return "axes";
    case TileAttr::barrier:
      return "barrier";
    case TileAttr::pending:
      return "pending";
    case TileAttr::transpose_b:
      return "transpose_b";
    case TileAttr::partial:
      return "partial";
    case TileAttr::where:
      return "where";
  }
  return "?";
}

const char* dtype_rule_name(DTypeRule r) {
  switch (r) {
    case DTypeRule::same:
      return "same";
    case DTypeRule::float_only:
      return "float_only";
    case DTypeRule::converts:
      return "converts";
    case DTypeRule::bits:
      return "bits";
    case DTypeRule::gemm:
      return "gemm";
  }
  return "?";
}

namespace {

// The table: built from TX_TILE_OP_TABLE on first use (a function-local
// static: no static-initialization order), grown by add_tile_ops. A deque:
// a TileOpDef never moves, so the pointers handed out stay valid.
struct Table {
  std::shared_mutex mu;
  std::deque<TileOpDef> defs;
};

Table& table() {
  static Table* t = [] {
    auto* tab = new Table();
    for (TileOpDef& d : std::vector<TileOpDef>{TX_TILE_OP_TABLE(TX_TILE_OP_DEF)})
      tab->defs.push_back(std::move(d));
    return tab;
  }();
  return *t;
}

const TileAttr kAttrs[] = {TileAttr::scale_bias, TileAttr::accum,   TileAttr::axes,
                           TileAttr::barrier,    TileAttr::pending, TileAttr::transpose_b,
                           TileAttr::partial,    TileAttr::where};

std::string join_and(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i)
    s += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
  return s;
}

// "dst, src" / "dst, a|scalar, b|scalar" / "dst, value (scalar)".
std::string operands_text(const TileOpDef& d) {
  std::string s;
  for (const OperandDef& o : d.operands()) {
    if (!s.empty()) s += ", ";
    s += o.name;
    if (o.role == OperandRole::tile_or_scalar) s += " (tile or scalar)";
    if (o.role == OperandRole::scalar) s += " (scalar)";
  }
  return s;
}

std::string scopes_text(const TileOpDef& d) {
  if ((d.scopes & TX_SCOPES_ALL) == TX_SCOPES_ALL) return "all";
  std::string s;
  for (ExecScope e : {ExecScope::thread, ExecScope::warp, ExecScope::warpgroup, ExecScope::cta})
    if (d.runs_at(e)) s += (s.empty() ? "" : ", ") + std::string(exec_scope_name(e));
  return s;
}

std::string attrs_text(const TileOpDef& d) {
  std::string s;
  for (TileAttr a : kAttrs)
    if (d.accepts(a)) s += (s.empty() ? "" : ", ") + std::string(tile_attr_name(a));
  return s.empty() ? "-" : s;
}

}  // namespace

std::vector<const TileOpDef*> tile_ops() {
  Table& t = table();
  std::shared_lock<std::shared_mutex> lock(t.mu);
  std::vector<const TileOpDef*> out;
  for (const TileOpDef& d : t.defs) out.push_back(&d);
  return out;
}

const TileOpDef* find_tile_op(const std::string& name) {
  Table& t = table();
  std::shared_lock<std::shared_mutex> lock(t.mu);
  for (const TileOpDef& d : t.defs)
    if (d.name == name) return &d;
  return nullptr;
}

void add_tile_ops(std::vector<TileOpDef> defs) {
  Table& t = table();
  std::unique_lock<std::shared_mutex> lock(t.mu);
  for (const TileOpDef& d : defs) {
    for (const TileOpDef& have : t.defs)
      if (have.name == d.name)
        fail("tx.add_tile_ops", d.name, {}, "a tile op of that name is already defined");
    if (d.family == "elementwise" && !d.math)
      fail("tx.add_tile_ops", d.name, {}, "an elementwise op needs its MATH column");
    if (d.family == "reduction" && !d.combine)
      fail("tx.add_tile_ops", d.name, {}, "a reduction needs its COMBINE column");
  }
  for (TileOpDef& d : defs) t.defs.push_back(std::move(d));
}

std::string ops_accepting(TileAttr a) {
  std::vector<std::string> names;
  for (const TileOpDef* d : tile_ops())
    if (d->accepts(a)) names.push_back(d->name);
  return join_and(names);
}

std::string tile_op_index_markdown() {
  std::string s =
      "# Tile ops\n\n"
      "Every tile op of tx, as `TX_TILE_OP_TABLE` (`dsl/include/tx/tile_op_table.hpp`) defines "
      "it: one row per op, from which its builders `Tx::<scope>::<op>(...)`, its checks, its "
      "dispatch (the variants of its family) and this index come. This page is made by "
      "`tx::tile_op_index_markdown()`; `test_tile_ops` holds it to the table.\n\n"
      "| op | family | operands (first written) | scopes | attributes | dtypes | what | page |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const TileOpDef* d : tile_ops())
    s += "| `" + d->name + "` | " + d->family + " | " + operands_text(*d) + " | " +
         scopes_text(*d) + " | " + attrs_text(*d) + " | " + dtype_rule_name(d->dtype) + " | " +
         d->summary + " | [" + d->doc + "](" + d->doc + ") |\n";
  return s;
}

}  // namespace tx
