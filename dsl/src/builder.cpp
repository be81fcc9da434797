// The recording state behind T:: and Tx::. One BuildState per prim_func being
// built (a stack, so a kernel may be built while building another); frames
// collect statements of the innermost open block.
#include "tx/builder.hpp"

#include <algorithm>
#include <cctype>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <regex>
#include <unordered_map>

#include "tx/ir_functor.hpp"
#include "tx/printer.hpp"

namespace tx {

namespace {

struct Item {
  Stmt stmt;
  std::function<Stmt(Stmt)> binder;  // wraps the rest of the block (let, alloc, ids)
};

struct Frame {
  std::vector<Item> items;
  std::uint64_t id = 0;  // unique per frame instance (deep-expression parts check it)
};

// A part of a deep expression the builder bound to a T::let (spill_deep).
struct Part {
  std::uint64_t frame = 0;   // the frame whose let binds it
  std::uint64_t writes = 0;  // BuildState::writes when it was made
  bool reads_memory = false;
  SourceLoc loc;
};

struct BuildState {
  std::string name;
  SourceLoc loc;
  std::vector<Frame> frames;
  std::vector<Param> params;
  std::vector<std::string> handle_names;
  SourceLoc stmt_loc;
  int buffer_counter = 0;
  BuildState* outer = nullptr;
  std::uint64_t next_frame_id = 0;
  std::uint64_t writes = 0;  // statements emitted so far that may write memory
  std::unordered_map<const VarNode*, Part> parts;
  std::vector<DimParam> dims;  // T::dim, in order
  bool no_alias = false;       // T::no_alias
  int named_barriers = 0;      // hardware barrier ids T::named_barriers handed out (from 15 down)
  void open_frame() {
    frames.emplace_back();
    frames.back().id = ++next_frame_id;
  }
};

thread_local BuildState* g_state = nullptr;

BuildState& state(const char* op, SourceLoc loc) {
  if (!g_state) fail(op, "", loc, "called outside T::prim_func (no kernel is being built)");
  return *g_state;
}

Stmt fold(std::vector<Item> items, SourceLoc loc) {
  std::vector<Stmt> tail;
  for (std::size_t i = items.size(); i-- > 0;) {
    if (items[i].binder) {
      Stmt body = make_seq(std::move(tail), loc);
      tail.clear();
      tail.push_back(items[i].binder(body));
    } else {
      tail.insert(tail.begin(), items[i].stmt);
    }
  }
  return make_seq(std::move(tail), loc);
}

// --------------------------------------------------------- name inference

std::mutex g_file_mutex;

std::vector<std::string> read_lines(const std::string& file) {
  static std::map<std::string, std::vector<std::string>> cache;
  std::lock_guard<std::mutex> lock(g_file_mutex);
  auto it = cache.find(file);
  if (it != cache.end()) return it->second;
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  cache[file] = lines;
  return lines;
}

std::string source_prefix(SourceLoc loc) {
  if (!loc.known() || !loc.file) return {};
  auto lines = read_lines(loc.file);
  if (loc.line == 0 || loc.line > lines.size()) return {};
  std::string l = lines[loc.line - 1];
  if (loc.column > 0 && loc.column - 1 <= l.size()) l = l.substr(0, loc.column - 1);
  // A formatter may break `auto R =` and the call onto two lines: then the
  // call starts its line and the binding ends the one before.
  const bool starts_line = std::all_of(l.begin(), l.end(), [](unsigned char c) {
    return std::isspace(c) || std::isalnum(c) || c == '_' || c == ':' || c == '.' || c == '<' ||
           c == '>';
  });
  if (starts_line && loc.line >= 2) l = lines[loc.line - 2] + " " + l;
  return l;
}

std::vector<std::string> infer_names(SourceLoc loc) {
  std::string prefix = source_prefix(loc);
  if (prefix.empty()) return {};
  std::smatch m;
  static const std::regex binding(R"(\[\s*([\w\s,]+)\]\s*=\s*[\w:.<>]*$)");
  static const std::regex decl(R"((\w+)\s*=(?!=)\s*[\w:.<>]*$)");
  static const std::regex range_for(R"((\w+)\s*:(?!:)\s*[\w:.<>]*$)");
  if (std::regex_search(prefix, m, binding)) {
    std::vector<std::string> out;
    std::string list = m[1];
    static const std::regex word(R"(\w+)");
    for (auto it = std::sregex_iterator(list.begin(), list.end(), word);
         it != std::sregex_iterator(); ++it)
      out.push_back(it->str());
    return out;
  }
  if (std::regex_search(prefix, m, decl) || std::regex_search(prefix, m, range_for))
    return {m[1].str()};
  return {};
}

std::vector<std::string> infer_handle_names(SourceLoc loc, std::size_t n) {
  std::vector<std::string> out;
  if (!loc.known() || !loc.file) return out;
  auto lines = read_lines(loc.file);
  static const std::regex handle(R"(Handle\s+(\w+))");
  for (std::size_t l = loc.line - 1; l < lines.size() && l < loc.line + 4 && out.size() < n; ++l)
    for (auto it = std::sregex_iterator(lines[l].begin(), lines[l].end(), handle);
         it != std::sregex_iterator() && out.size() < n; ++it)
      out.push_back((*it)[1].str());
  if (out.size() != n) out.clear();
  return out;
}

// Depth at which the builder binds a part of an expression to a T::let: far
// below kMaxExprDepth, so every later traversal stays shallow, and small
// enough that per-node analyses quadratic in the depth stay cheap.
constexpr std::uint32_t kSpillDepth = 256;
// Tree size (shared parts counted per use) at which the builder binds a part
// too: y = y * y, repeated, doubles the size at each step while staying
// shallow, and every traversal would walk all of it.
constexpr std::uint32_t kSpillSize = 4096;

bool reads_memory(const Expr& e) {
  struct V : IRVisitor {
    bool found = false;
    void visit_node(const LoadNode*) override { found = true; }
    using IRVisitor::visit_node;
  } v;
  v.visit(e);
  return v.found;
}

// A part bound by spill_deep is evaluated where the expression was built. If
// it reads memory, using it in another block (a loop would evaluate the
// original every iteration) or after a statement that may write memory would
// change the result: refuse that instead of computing something else.
void check_parts(BuildState& s, const Stmt& st) {
  if (s.parts.empty() || !st) return;
  struct V : IRVisitor {
    BuildState* s;
    const Part* bad = nullptr;
    const VarNode* var = nullptr;
    void visit_node(const VarNode* v) override {
      auto it = s->parts.find(v);
      if (it == s->parts.end() || !it->second.reads_memory || bad) return;
      if (it->second.frame != s->frames.back().id || it->second.writes != s->writes) {
        bad = &it->second;
        var = v;
      }
    }
    using IRVisitor::visit_node;
  } v;
  v.s = &s;
  v.visit(st);
  if (v.bad)
    fail("T.store", v.var->name, st->loc,
         "this expression is more than " + std::to_string(kSpillDepth) + " operations deep (or " +
             std::to_string(kSpillSize) +
             " in all), so tx evaluated it in parts where it was built (" + v.bad->loc.str() +
             "); it reads memory, and between there and here a statement may write that memory "
             "or a new block begins, which would change its value. Build the expression where "
             "it is used, or bind it with T::let yourself");
}

}  // namespace

namespace detail {

[[noreturn]] void fail_undefined(const char* what) {
  std::string op = what;  // "tx::Expr" -> "tx.Expr"
  for (auto p = op.find("::"); p != std::string::npos; p = op.find("::")) op.replace(p, 2, ".");
  fail(op, "", g_state ? g_state->stmt_loc : SourceLoc{},
       std::string("an undefined (default-constructed) ") + what +
           " was used; give it a value first (a builder such as T::match_buffer, "
           "T::alloc_buffer, T::let, a loop or scope id)");
}

[[noreturn]] void fail_undefined_buffer(const char* op, SourceLoc loc) {
  fail(op, "", loc,
       "the buffer is an undefined (default-constructed) TileBuffer; create it with "
       "T::match_buffer or T::alloc_buffer");
}

Expr spill_deep(Expr e) {
  if (!g_state || !e.defined() || (e.depth() < kSpillDepth && e.tree_size() < kSpillSize)) return e;
  BuildState& s = *g_state;
  Var v("part" + std::to_string(s.parts.size()), e.dtype(), s.stmt_loc);
  Part p{s.frames.back().id, s.writes, reads_memory(e), s.stmt_loc};
  SourceLoc l = s.stmt_loc;
  // The value itself may hold earlier parts: the same rule applies to it.
  check_parts(s, make_evaluate(e, l));
  s.parts[v.get()] = p;
  emit_binder([v, e, l](Stmt body) { return make_let(v, e, body, l); });
  return v;
}

SourceLoc current_loc() { return g_state ? g_state->stmt_loc : SourceLoc{}; }
void set_current_loc(SourceLoc loc) {
  if (g_state) g_state->stmt_loc = loc;
}
bool building() { return g_state != nullptr; }

std::string infer_name(SourceLoc loc, const std::string& fallback) {
  auto names = infer_names(loc);
  return names.size() == 1 ? names[0] : fallback;
}

void push_frame() { state("T.block", {}).open_frame(); }

Stmt pop_frame() {
  BuildState& s = state("T.block", {});
  Frame f = std::move(s.frames.back());
  s.frames.pop_back();
  return fold(std::move(f.items), s.stmt_loc);
}

void discard_frame() {
  if (g_state && !g_state->frames.empty()) g_state->frames.pop_back();
}

void emit(Stmt st) {
  BuildState& s = state("T.statement", st ? st->loc : SourceLoc{});
  check_parts(s, st);
  if (st.as<StoreNode>() || st.as<TileCallNode>() || st.as<BarrierNode>() || st.as<CopyBytesNode>())
    ++s.writes;
  s.frames.back().items.push_back({std::move(st), nullptr});
}

void emit_binder(std::function<Stmt(Stmt)> wrap) {
  BuildState& s = state("T.statement", {});
  s.frames.back().items.push_back({Stmt(), std::move(wrap)});
}

Stmt take_last() {
  BuildState& s = state("else_", {});
  auto& items = s.frames.back().items;
  if (items.empty() || items.back().binder) return Stmt();
  Stmt last = items.back().stmt;
  items.pop_back();
  return last;
}

void emit_tile(std::string op, ExecScope scope, std::vector<TileArg> args, TileAttrs attrs,
               SourceLoc loc) {
  std::string qn = std::string("Tx.") + exec_scope_name(scope) + "." + op;
  state(qn.c_str(), loc);
  set_current_loc(loc);
  emit(make_tile_call(std::move(op), scope, std::move(args), std::move(attrs), loc));
}

FuncScope::FuncScope(std::string name, SourceLoc loc) {
  auto* s = new BuildState();
  s->name = std::move(name);
  s->loc = loc;
  s->stmt_loc = loc;
  s->open_frame();
  s->outer = g_state;
  g_state = s;
}

FuncScope::~FuncScope() {
  BuildState* s = g_state;
  g_state = s->outer;
  delete s;
}

Handle FuncScope::param(std::size_t i, std::size_t n) {
  BuildState& s = *g_state;
  if (s.handle_names.empty()) {
    s.handle_names = infer_handle_names(s.loc, n);
    if (s.handle_names.empty())
      for (std::size_t k = 0; k < n; ++k) s.handle_names.push_back("arg" + std::to_string(k));
  }
  Handle h(Var(s.handle_names[i], handle_t, s.loc));
  Param p;
  p.handle = h;
  s.params.push_back(std::move(p));
  return h;
}

Handle FuncScope::named_param(const std::string& name) {
  BuildState& s = *g_state;
  Handle h(Var(name, handle_t, s.loc));
  Param p;
  p.handle = h;
  s.params.push_back(std::move(p));
  return h;
}

PrimFunc FuncScope::finish() {
  BuildState& s = *g_state;
  if (s.frames.size() != 1) fail("T.prim_func", s.name, s.loc, "a loop or if block was left open");
  for (const Param& p : s.params)
    if (!p.buffer && !p.scalar.defined())
      fail("T.prim_func", p.handle.name(), s.loc,
           "parameter is never bound to a buffer (T::match_buffer) or a scalar (T::match_scalar)");
  Stmt body = pop_frame();
  finished_ = true;
  return PrimFunc(std::make_shared<const PrimFuncNode>(s.name, s.params, body, s.loc, false, s.dims,
                                                       s.no_alias));
}

}  // namespace detail

// ------------------------------------------------------------------ values

BufferRegion TileOperand::whole(const TileBuffer& b, SourceLoc) {
  // An undefined buffer becomes a region without one: make_tile_call then
  // reports it under the tile op's own name and line.
  if (!b.get()) return BufferRegion{};
  return b.all();
}

Slice::Slice(std::initializer_list<std::int64_t> lohi) {
  if (lohi.size() != 2) fail("T.slice", "", detail::current_loc(), "a slice is {start, stop}");
  start = make_int(*lohi.begin());
  extent = *(lohi.begin() + 1) - *lohi.begin();
}

void BufferElem::operator=(const Expr& value) const {
  detail::set_current_loc(loc_);
  Expr v = value;
  // A value of another dtype needs an explicit cast, except for literals.
  if (v.as<IntImmNode>() || v.as<FloatImmNode>()) {
    if (v.dtype() != buffer_->dtype) {
      double x = v.as<IntImmNode>() ? static_cast<double>(v.as<IntImmNode>()->value)
                                    : v.as<FloatImmNode>()->value;
      v = detail::literal_like(x, v.as<IntImmNode>() != nullptr, buffer_->dtype);
    }
  }
  detail::emit(make_store(buffer_, v, indices_, loc_));
}

BufferElem TileBuffer::elem(std::vector<Idx> idx) const {
  SourceLoc loc = idx.empty() ? SourceLoc{} : idx[0].loc;
  if (!get()) detail::fail_undefined_buffer("T.load", loc);
  if (idx.size() != get()->shape.size())
    fail("T.load", get()->name, loc,
         "buffer has " + std::to_string(get()->shape.size()) + " dimensions but " +
             std::to_string(idx.size()) + " indices were given");
  std::vector<Expr> e;
  for (auto& i : idx) {
    Expr v = i.value;
    if (!v.defined())
      fail("T.load", get()->name, i.loc, "an index is an undefined (default-constructed) tx::Expr");
    if (!v.dtype().is_integer())
      fail("T.load", get()->name, i.loc,
           "index of dtype " + v.dtype().name() + " is not an integer");
    e.push_back(v);
  }
  return BufferElem(*this, std::move(e), loc);
}

BufferRegion TileBuffer::operator[](const Region& r) const {
  SourceLoc loc = detail::current_loc();
  if (!get()) detail::fail_undefined_buffer("T.region", loc);
  for (const Slice& sl : r.slices)
    if (!sl.start.defined())
      fail("T.region", get()->name, loc,
           "a slice start is an undefined (default-constructed) tx::Expr");
  if (r.slices.size() != get()->shape.size())
    fail("T.region", get()->name, loc,
         "region has " + std::to_string(r.slices.size()) + " dimensions but the buffer has " +
             std::to_string(get()->shape.size()));
  BufferRegion out{*this, {}};
  for (const Slice& s : r.slices) out.ranges.push_back({s.start, s.extent});
  return out;
}

TileBuffer TileBuffer::local(Loc loc) const {
  if (!get()) detail::fail_undefined_buffer("T.local", loc);
  if (get()->scope != MemScope::local)
    fail("T.local", get()->name, loc,
         std::string("is a ") + mem_scope_name(get()->scope) +
             " buffer; only register (local) tiles have per-thread registers to view");
  return TileBuffer(flat_view(*this));
}

TileBuffer TileBuffer::transposed(Loc loc) const {
  const char* op = "T.transposed";
  if (!get()) detail::fail_undefined_buffer(op, loc);
  const BufferNode& b = *get();
  if (b.scope != MemScope::shared)
    fail(op, b.name, loc,
         std::string("is a ") + mem_scope_name(b.scope) +
             " buffer; the view is of a shared tile (an operand read from shared memory)");
  if (b.shape.size() != 2)
    fail(op, b.name, loc,
         "has " + std::to_string(b.shape.size()) + " dimensions; the view is of a 2-D tile " +
             "(take a 2-D region's buffer, or allocate the tile 2-D)");
  // The layout's iterators of the rows, then those of the columns: the view
  // puts the columns' first.
  const std::vector<Iter>& it = b.layout.shard();
  std::size_t k = 0;
  std::int64_t rows = 1, cols = 1;
  while (k < it.size() && rows < b.shape[0]) rows *= it[k++].extent;
  for (std::size_t i = k; i < it.size(); ++i) cols *= it[i].extent;
  if (rows != b.shape[0] || cols != b.shape[1])
    fail(op, b.name, loc,
         "its layout " + b.layout.str() + " does not split into rows of " +
             std::to_string(b.shape[0]) + " and columns of " + std::to_string(b.shape[1]));
  std::vector<Iter> view(it.begin() + static_cast<std::ptrdiff_t>(k), it.end());
  view.insert(view.end(), it.begin(), it.begin() + static_cast<std::ptrdiff_t>(k));
  TileLayout layout(view, b.layout.replica(), b.layout.offsets());
  if (b.layout.swizzle()) layout = layout.swizzled(*b.layout.swizzle());
  return TileBuffer(Buffer(std::make_shared<const BufferNode>(
      b.name + "_T", b.dtype, std::vector<std::int64_t>{b.shape[1], b.shape[0]}, b.scope,
      std::move(layout), b.data, SourceLoc(loc), std::vector<Expr>{})));
}

BufferRegion TileBuffer::all() const {
  if (!get()) detail::fail_undefined_buffer("T.region", detail::current_loc());
  BufferRegion out{*this, {}};
  for (auto e : get()->shape) out.ranges.push_back({make_int(0), e});
  return out;
}

// ---------------------------------------------------------------- loops, if

LoopRange::LoopRange(Expr min, Expr extent, ForKind kind, Name name, SourceLoc loc)
    : min_(std::move(min)), extent_(std::move(extent)), kind_(kind), loc_(loc) {
  const char* op = kind == ForKind::serial ? "T.serial" : "T.unroll";
  state(op, loc);
  std::string n = name.value.empty() ? detail::infer_name(loc, "i") : name.value;
  var_ = Var(n, i32, loc);
  if (!min_.defined() || !extent_.defined())
    fail(op, n, loc, "a loop bound is an undefined (default-constructed) tx::Expr");
  if (!min_.dtype().is_integer() || !extent_.dtype().is_integer())
    fail(op, n, loc, "loop bounds must be integers");
}

LoopRange::Iterator LoopRange::begin() {
  started_ = true;
  exceptions_at_start_ = std::uncaught_exceptions();
  detail::push_frame();
  return Iterator(this);
}

void LoopRange::finish() {
  if (finished_) return;
  finished_ = true;
  Stmt body = detail::pop_frame();
  detail::set_current_loc(loc_);
  detail::emit(make_for(var_, min_, extent_, kind_, body, loc_));
}

LoopRange::~LoopRange() {
  if (!started_ || finished_) return;
  if (std::uncaught_exceptions() > exceptions_at_start_) {
    detail::discard_frame();
  } else {
    try {
      finish();  // a `break` left the body early
    } catch (...) {
    }
  }
}

void IfBuilder::else_(const std::function<void()>& f, Loc loc) {
  Stmt last = detail::take_last();
  auto* node = last.as<IfThenElseNode>();
  if (!node || node->else_case) {
    if (last) detail::emit(last);
    fail("T.if_().else_", "", loc, "else_ must follow the T::if_ it belongs to");
  }
  detail::push_frame();
  try {
    f();
  } catch (...) {
    detail::discard_frame();
    detail::emit(last);
    throw;
  }
  Stmt else_body = detail::pop_frame();
  detail::emit(make_if(node->cond, node->then_case, else_body, node->loc));
}

// ------------------------------------------------------------------- T::

namespace T {

namespace {
TileBuffer new_buffer(const char* op, Shape shape, DType dtype, MemScope scope,
                      std::optional<TileLayout> layout, Name name, SourceLoc loc) {
  BuildState& s = state(op, loc);
  std::string n = name.value.empty()
                      ? detail::infer_name(loc, "buf" + std::to_string(s.buffer_counter))
                      : name.value;
  ++s.buffer_counter;
  try {
    return TileBuffer(make_buffer(n, dtype, std::move(shape), scope, std::move(layout), loc));
  } catch (const Error& e) {
    fail(op, n, loc, e.reason());
  }
}

IdVars bind_ids(ScopeIdKind kind, Shape extents, Name name, SourceLoc loc,
                const std::vector<std::string>& fallback, std::vector<Expr> exprs = {}) {
  std::string op = std::string("T.") + scope_id_name(kind);
  state(op.c_str(), loc);
  detail::set_current_loc(loc);
  std::vector<std::string> names;
  if (!name.value.empty()) {
    names.push_back(name.value);
  } else {
    names = infer_names(loc);
  }
  if (names.size() != extents.size()) {
    names.clear();
    for (std::size_t i = 0; i < extents.size(); ++i)
      names.push_back(i < fallback.size() ? fallback[i] : fallback[0] + std::to_string(i));
  }
  std::vector<Var> vars;
  for (auto& n : names) vars.emplace_back(n, i32, loc);
  // Validate now so the error points at this line.
  if (exprs.empty()) {
    make_scope_id_bind(kind, vars, extents, Stmt(), loc);
    detail::emit_binder([kind, vars, extents, loc](Stmt body) {
      return make_scope_id_bind(kind, vars, extents, body, loc);
    });
  } else {
    make_scope_id_bind(kind, vars, exprs, Stmt(), loc);
    detail::emit_binder([kind, vars, exprs, loc](Stmt body) {
      return make_scope_id_bind(kind, vars, exprs, body, loc);
    });
  }
  return IdVars(vars);
}
}  // namespace

PrimFunc prim_func_n(std::string name, std::vector<std::string> param_names,
                     const std::function<void(const std::vector<Handle>&)>& body, Loc loc) {
  detail::FuncScope scope(std::move(name), loc);
  std::vector<Handle> handles;
  for (std::size_t i = 0; i < param_names.size(); ++i)
    handles.push_back(scope.named_param(param_names[i]));
  body(handles);
  return scope.finish();
}

namespace {
Param* bind_param(BuildState& s, const Handle& h, const char* op, SourceLoc loc) {
  if (!h.defined())
    fail(op, "", loc,
         "the handle is undefined (a default-constructed Handle); pass a parameter of the "
         "T::prim_func lambda");
  Param* param = nullptr;
  for (Param& p : s.params)
    if (p.handle.same_as(h)) param = &p;
  if (!param) fail(op, h.name(), loc, "is not a parameter of this kernel");
  if (param->buffer) fail(op, h.name(), loc, "is already bound to buffer " + param->buffer->name);
  if (param->scalar.defined())
    fail(op, h.name(), loc, "is already bound to scalar " + param->scalar.name());
  return param;
}

const DimParam* find_dim(const BuildState& s, const VarNode* v) {
  for (const DimParam& d : s.dims)
    if (d.var.get() == v) return &d;
  return nullptr;
}
}  // namespace

TileBuffer match_buffer(const Handle& h, Extents shape, DType dtype,
                        std::optional<TileLayout> layout, Name name, Loc loc) {
  BuildState& s = state("T.match_buffer", loc);
  Param* param = bind_param(s, h, "T.match_buffer", loc);
  std::string fallback = h.name();
  if (fallback.size() > 4 && fallback.substr(fallback.size() - 4) == "_ptr")
    fallback = fallback.substr(0, fallback.size() - 4);
  if (name.value.empty()) name.value = detail::infer_name(loc, fallback);
  // Constant extents: a buffer of fixed shape. Otherwise each symbolic
  // extent must be a T::dim of this kernel (the launch binds it from the
  // tensor's shape), and the layout row-major.
  std::vector<std::int64_t> statics, bounds;
  std::vector<Expr> dims;
  bool symbolic = false;
  for (std::size_t d = 0; d < shape.items.size(); ++d) {
    const Expr& e = shape.items[d].value;
    if (!shape.items[d].invalid.empty())
      fail("T.match_buffer", name.value, loc, shape.items[d].invalid);
    if (!e.defined())
      fail("T.match_buffer", name.value, loc,
           "extent " + std::to_string(d) + " is an undefined (default-constructed) tx::Expr");
    dims.push_back(e);
    if (auto c = as_const_int(e)) {
      statics.push_back(*c);
      bounds.push_back(*c);
      continue;
    }
    symbolic = true;
    const DimParam* dp = e.as<VarNode>() ? find_dim(s, e.as<VarNode>()) : nullptr;
    if (!dp)
      fail("T.match_buffer", name.value, loc,
           "extent " + std::to_string(d) + " (" + to_string(e) +
               ") must be a constant or a T::dim variable of this kernel");
    bounds.push_back(dp->max);
  }
  TileBuffer b;
  if (!symbolic) {
    b = new_buffer("T.match_buffer", std::move(statics), dtype, MemScope::global, std::move(layout),
                   name, loc);
  } else {
    if (layout)
      fail("T.match_buffer", name.value, loc,
           "a buffer with extents known at launch is row-major; a layout cannot be given");
    ++s.buffer_counter;
    try {
      b = TileBuffer(make_symbolic_buffer(name.value, dtype, std::move(dims), bounds, loc));
    } catch (const Error& e) {
      fail("T.match_buffer", name.value, loc, e.reason());
    }
  }
  param->buffer = b;
  return b;
}

TileBuffer match_symmetric(const Handle& h, Extents shape, DType dtype, Name name, Loc loc) {
  TileBuffer b = match_buffer(h, std::move(shape), dtype, std::nullopt, std::move(name), loc);
  BuildState& s = state("T.match_symmetric", loc);
  for (Param& p : s.params)
    if (p.handle.same_as(h)) p.symmetric = true;
  return b;
}

TileBuffer peer(const TileBuffer& x, Value rank, Name name, Loc loc) {
  BuildState& s = state("T.peer", loc);
  if (!x.defined()) detail::fail_undefined_buffer("T.peer", loc);
  const Param* of = nullptr;
  for (const Param& p : s.params)
    if (p.buffer && p.buffer.aliases(x)) of = &p;
  if (!of || !of->symmetric)
    fail("T.peer", x->name, loc,
         "views a symmetric kernel parameter (T::match_symmetric); " + x->name +
             (of ? " is a T::match_buffer parameter" : " is not a kernel parameter"));
  if (!rank.value.defined() || !rank.value.dtype().is_integer())
    fail("T.peer", x->name, loc, "the rank is an integer expression");
  if (name.value.empty()) name.value = detail::infer_name(loc, x->name + "_peer");
  ++s.buffer_counter;
  Buffer view;
  try {
    view = of->buffer->symbolic() ? make_symbolic_buffer(name.value, x->dtype, of->buffer->dims,
                                                         of->buffer->shape, loc)
                                  : make_buffer(name.value, x->dtype, of->buffer->shape,
                                                MemScope::global, of->buffer->layout, loc);
  } catch (const Error& e) {
    fail("T.peer", name.value, loc, e.reason());
  }
  detail::set_current_loc(loc);
  Buffer sym = of->buffer;
  Expr r = rank.value;
  SourceLoc l = loc;
  detail::emit_binder(
      [view, sym, r, l](Stmt body) { return make_peer_view(view, sym, r, body, l); });
  return TileBuffer(view);
}

Var match_scalar(const Handle& h, DType dtype, Name name, std::optional<DimFacts> facts, Loc loc) {
  BuildState& s = state("T.match_scalar", loc);
  Param* param = bind_param(s, h, "T.match_scalar", loc);
  if (!(dtype.is_integer() || dtype == f32 || dtype == f64))
    fail("T.match_scalar", h.name(), loc,
         "a scalar parameter is an integer, float32 or float64, not " + dtype.name());
  std::string fallback = h.name();
  if (fallback.size() > 4 && fallback.substr(fallback.size() - 4) == "_ptr")
    fallback = fallback.substr(0, fallback.size() - 4);
  if (name.value.empty()) name.value = detail::infer_name(loc, fallback);
  Var v(name.value, dtype, loc);
  param->scalar = v;
  if (facts) {
    if (!dtype.is_integer())
      fail("T.match_scalar", name.value, loc, "facts are for integer scalars, not " + dtype.name());
    if (facts->max < facts->min || facts->multiple_of < 1)
      fail("T.match_scalar", name.value, loc, "facts need min <= max and multiple_of >= 1");
    param->min = facts->min;
    param->max = facts->max;
    param->multiple_of = facts->multiple_of;
    param->has_facts = true;
  }
  return v;
}

Var dim(Name name, DimFacts facts, Loc loc) {
  BuildState& s = state("T.dim", loc);
  if (name.value.empty()) name.value = detail::infer_name(loc, "n" + std::to_string(s.dims.size()));
  if (facts.min < 0 || facts.max < facts.min || facts.multiple_of < 1 || facts.max > 2147483647)
    fail("T.dim", name.value, loc,
         "facts need 0 <= min <= max <= 2^31 - 1 and multiple_of >= 1 (got min " +
             std::to_string(facts.min) + ", max " + std::to_string(facts.max) + ", multiple_of " +
             std::to_string(facts.multiple_of) + ")");
  for (const DimParam& d : s.dims)
    if (d.var.name() == name.value)
      fail("T.dim", name.value, loc, "is declared twice (first at " + d.loc.str() + ")");
  Var v(name.value, i32, loc);
  s.dims.push_back({v, facts.min, facts.max, facts.multiple_of, loc});
  return v;
}

TileBuffer alloc_buffer(Shape shape, DType dtype, MemScope scope, std::optional<TileLayout> layout,
                        Name name, Loc loc) {
  if (scope == MemScope::global)
    fail("T.alloc_buffer", name.value, loc,
         "global buffers come from kernel arguments (T::match_buffer); use scope::shared or "
         "scope::local");
  TileBuffer b =
      new_buffer("T.alloc_buffer", std::move(shape), dtype, scope, std::move(layout), name, loc);
  detail::set_current_loc(loc);
  Buffer buf = b;
  SourceLoc l = loc;
  detail::emit_binder([buf, l](Stmt body) { return make_allocate(buf, body, l); });
  return b;
}

void device_entry(Loc loc) { state("T.device_entry", loc); }

void no_alias(Loc loc) { state("T.no_alias", loc).no_alias = true; }

IdVars cta_id(Extents e, Name n, Loc loc) {
  std::vector<Expr> ex;
  std::vector<std::int64_t> statics;
  bool symbolic = false;
  for (const Extent& x : e.items) {
    if (!x.invalid.empty()) fail("T.cta_id", n.value, loc, x.invalid);
    if (!x.value.defined()) fail("T.cta_id", "", loc, "an extent is an undefined tx::Expr");
    ex.push_back(x.value);
    auto c = as_const_int(x.value);
    statics.push_back(c ? *c : 0);
    symbolic = symbolic || !c;
  }
  if (!symbolic)
    return bind_ids(ScopeIdKind::cta_id, std::move(statics), std::move(n), loc, {"bx", "by", "bz"});
  return bind_ids(ScopeIdKind::cta_id, std::move(statics), std::move(n), loc, {"bx", "by", "bz"},
                  std::move(ex));
}
IdVars warpgroup_id(Shape e, Name n, Loc loc) {
  return bind_ids(ScopeIdKind::warpgroup_id, std::move(e), std::move(n), loc, {"wg_id"});
}
IdVars warp_id(Shape e, Name n, Loc loc) {
  return bind_ids(ScopeIdKind::warp_id, std::move(e), std::move(n), loc, {"warp_id"});
}
IdVars lane_id(Shape e, Name n, Loc loc) {
  return bind_ids(ScopeIdKind::lane_id, std::move(e), std::move(n), loc, {"lane_id"});
}
IdVars thread_id(Shape e, Name n, Loc loc) {
  return bind_ids(ScopeIdKind::thread_id, std::move(e), std::move(n), loc, {"tid"});
}
IdVars warp_id_in_wg(Shape e, Name n, Loc loc) {
  return bind_ids(ScopeIdKind::warp_id_in_wg, std::move(e), std::move(n), loc, {"wid_in_wg"});
}
IdVars thread_id_in_wg(Shape e, Name n, Loc loc) {
  return bind_ids(ScopeIdKind::thread_id_in_wg, std::move(e), std::move(n), loc, {"tid_in_wg"});
}

LoopRange serial(Value extent, Name name, Loc loc) {
  return LoopRange(make_int(0), extent.value, ForKind::serial, std::move(name), loc);
}
LoopRange serial(Value min, Value extent, Name name, Loc loc) {
  return LoopRange(min.value, extent.value, ForKind::serial, std::move(name), loc);
}
LoopRange unroll(Value extent, Name name, Loc loc) {
  return LoopRange(make_int(0), extent.value, ForKind::unrolled, std::move(name), loc);
}

namespace {
// The statements `body` builds, as a block (its frame dropped if it throws).
Stmt build_block(const std::function<void()>& body) {
  detail::push_frame();
  try {
    body();
  } catch (...) {
    detail::discard_frame();
    throw;
  }
  return detail::pop_frame();
}
}  // namespace

IfBuilder if_(Value cond_arg, const std::function<void()>& then_body, Loc loc) {
  state("T.if_", loc);
  detail::set_current_loc(loc);
  Expr cond = cond_arg.value;
  if (!cond.defined())
    fail("T.if_", "", loc, "the condition is an undefined (default-constructed) tx::Expr");
  if (!cond.dtype().is_bool())
    fail("T.if_", "", loc, "condition of dtype " + cond.dtype().name() + " is not bool");
  if (!then_body) fail("T.if_", "", loc, "the body is an empty std::function");
  detail::emit(make_if(cond, build_block(then_body), Stmt(), loc));
  return IfBuilder(loc);
}

void profile(const std::string& name, const std::function<void()>& body, Loc loc) {
  state("T.profile", loc);
  detail::set_current_loc(loc);
  if (!body) fail("T.profile", name, loc, "the body is an empty std::function");
  Stmt inner = build_block(body);
  detail::emit(make_profile(name, inner ? inner : make_seq({}, loc), loc));
}

Var let(Value value_arg, Name name, Loc loc) {
  state("T.let", loc);
  detail::set_current_loc(loc);
  Expr value = value_arg.value;
  std::string n = name.value.empty() ? detail::infer_name(loc, "v") : name.value;
  if (!value.defined())
    fail("T.let", n, loc, "the value is an undefined (default-constructed) tx::Expr");
  Var v(n, value.dtype(), loc);
  SourceLoc l = loc;
  detail::emit_binder([v, value, l](Stmt body) { return make_let(v, value, body, l); });
  return v;
}

namespace cuda {
void cta_sync(Loc loc) {
  state("T.cuda.cta_sync", loc);
  detail::emit(make_barrier(ExecScope::cta, loc));
}
void warpgroup_sync(Loc loc) {
  state("T.cuda.warpgroup_sync", loc);
  detail::emit(make_barrier(ExecScope::warpgroup, loc));
}
void warp_sync(Loc loc) {
  state("T.cuda.warp_sync", loc);
  detail::emit(make_barrier(ExecScope::warp, loc));
}
void commit_group(Loc loc) {
  state("T.cuda.commit_group", loc);
  detail::emit(make_evaluate(make_call(Intrinsic::cp_async_commit, {}, loc), loc));
}
void tma_store_wait(int pending, Loc loc) {
  state("T.cuda.tma_store_wait", loc);
  if (pending < 0 || pending > 7)
    fail("T.cuda.tma_store_wait", "", loc,
         "pending groups " + std::to_string(pending) +
             " outside [0, 7] (cp.async.bulk.wait_group takes an immediate)");
  detail::emit(make_evaluate(make_call(Intrinsic::tma_store_wait, {Expr(pending)}, loc), loc));
}
void wait_group(int pending, Loc loc) {
  state("T.cuda.wait_group", loc);
  if (pending < 0 || pending > 7)
    fail("T.cuda.wait_group", "", loc,
         "pending groups " + std::to_string(pending) +
             " outside [0, 7] (cp.async.wait_group takes an immediate)");
  detail::emit(make_evaluate(make_call(Intrinsic::cp_async_wait, {Expr(pending)}, loc), loc));
}

namespace {
void emit_ptx(const char* op, Intrinsic i, std::vector<Expr> args, SourceLoc loc) {
  state(op, loc);
  detail::set_current_loc(loc);
  detail::emit(make_evaluate(make_call(i, std::move(args), loc), loc));
}
}  // namespace

void mbarrier_init(Value bar, Value count, Loc loc) {
  emit_ptx("T.cuda.mbarrier_init", Intrinsic::mbarrier_init, {bar.value, count.value}, loc);
}
void mbarrier_arrive(Value bar, Loc loc) {
  emit_ptx("T.cuda.mbarrier_arrive", Intrinsic::mbarrier_arrive, {bar.value}, loc);
}
void mbarrier_expect_tx(Value bar, Value bytes, Loc loc) {
  emit_ptx("T.cuda.mbarrier_expect_tx", Intrinsic::mbarrier_expect_tx, {bar.value, bytes.value},
           loc);
}
void mbarrier_wait(Value bar, Value parity, Loc loc) {
  emit_ptx("T.cuda.mbarrier_wait", Intrinsic::mbarrier_wait, {bar.value, parity.value}, loc);
}
void fence_barrier_init(Loc loc) {
  emit_ptx("T.cuda.fence_barrier_init", Intrinsic::fence_barrier_init, {}, loc);
}
void fence_proxy_async(Loc loc) {
  emit_ptx("T.cuda.fence_proxy_async", Intrinsic::fence_proxy_async, {}, loc);
}
void wgmma_fence(Loc loc) { emit_ptx("T.cuda.wgmma_fence", Intrinsic::wgmma_fence, {}, loc); }
void wgmma_commit(Loc loc) { emit_ptx("T.cuda.wgmma_commit", Intrinsic::wgmma_commit, {}, loc); }
void wgmma_wait(int pending, Loc loc) {
  emit_ptx("T.cuda.wgmma_wait", Intrinsic::wgmma_wait, {Expr(pending)}, loc);
}
namespace {
void fence_tile(const char* op, const TileBuffer& t, Loc loc) {
  if (!t.get()) detail::fail_undefined_buffer(op, loc);
  if (t->scope != MemScope::local || t->dtype != f32)
    fail(op, t->name, loc,
         "fences an f32 register tile, not a " + t->dtype.name() + " " + mem_scope_name(t->scope) +
             " buffer");
  TileBuffer own = t.local(loc);
  for (std::int64_t r = 0; r < own->storage_elems(); ++r)
    emit_ptx(op, Intrinsic::register_fence, {make_load(own, {Expr(static_cast<int>(r))}, loc)},
             loc);
}
}  // namespace

void wgmma_wait(int pending, const TileBuffer& acc, Loc loc) {
  wgmma_wait(pending, loc);
  fence_tile("T.cuda.wgmma_wait", acc, loc);
}
void wgmma_wait(int pending, const TileBuffer& acc, WaitOrder order, Loc loc) {
  const char* op = "T.cuda.wgmma_wait";
  if (!order.after.get()) detail::fail_undefined_buffer(op, loc);
  if (order.after->scope != MemScope::local || order.after->dtype != f32)
    fail(op, order.after->name, loc, "after= orders an f32 register tile");
  TileBuffer anchor = alloc_buffer({1}, f32, MemScope::shared, std::nullopt, "wait_anchor", loc);
  TileBuffer own = order.after.local(loc);
  for (std::int64_t r = 0; r < own->storage_elems(); ++r)
    emit_ptx(op, Intrinsic::keep_before,
             {make_load(anchor, {Expr(0)}, loc), make_load(own, {Expr(static_cast<int>(r))}, loc)},
             loc);
  wgmma_wait(pending, acc, loc);
}
void named_barrier_sync(Value id, int threads, Loc loc) {
  emit_ptx("T.cuda.named_barrier_sync", Intrinsic::named_barrier_sync, {id.value, Expr(threads)},
           loc);
}
void named_barrier_arrive(Value id, int threads, Loc loc) {
  emit_ptx("T.cuda.named_barrier_arrive", Intrinsic::named_barrier_arrive,
           {id.value, Expr(threads)}, loc);
}
void increase_registers(int count, Loc loc) {
  emit_ptx("T.cuda.increase_registers", Intrinsic::setmaxnreg, {Expr(count), Expr(1)}, loc);
}
void decrease_registers(int count, Loc loc) {
  emit_ptx("T.cuda.decrease_registers", Intrinsic::setmaxnreg, {Expr(count), Expr(0)}, loc);
}
namespace {
// The flag intrinsics are emitted as the PTX ones are (T::dist).
void emit_dist(const char* op, Intrinsic i, std::vector<Expr> args, SourceLoc loc) {
  emit_ptx(op, i, std::move(args), loc);
}
}  // namespace
}  // namespace cuda

namespace dist {
void signal(Value flag, Value value, Loc loc) {
  cuda::emit_dist("T.dist.signal", Intrinsic::signal, {flag.value, value.value, make_int(0)}, loc);
}
void signal_add(Value flag, Value value, Loc loc) {
  cuda::emit_dist("T.dist.signal_add", Intrinsic::signal, {flag.value, value.value, make_int(1)},
                  loc);
}
void wait_until(Value flag, Value value, Loc loc) {
  cuda::emit_dist("T.dist.wait_until", Intrinsic::wait_until, {flag.value, value.value}, loc);
}
}  // namespace dist

Expr Pipeline::stage(Value it) const { return floormod(it.value, Expr(stages_)); }
BufferElem Pipeline::full(Value it, Loc loc) const { return full_(Idx(stage(it), loc)); }
BufferElem Pipeline::empty(Value it, Loc loc) const { return empty_(Idx(stage(it), loc)); }
void Pipeline::producer_acquire(Value it, Loc loc) const {
  // The stage's previous use was position it - stages, whose release
  // completed phase (it / stages - 1) % 2 of `empty`; the first round waits
  // on parity 1 of a fresh barrier, which returns at once.
  Expr parity = floormod(floordiv(it.value, Expr(stages_)) + 1, Expr(2));
  cuda::mbarrier_wait(Value(empty(it, loc), loc), Value(parity, loc), loc);
}
void Pipeline::producer_commit(Value it, Loc loc) const {
  cuda::mbarrier_arrive(Value(full(it, loc), loc), loc);
}
void Pipeline::consumer_wait(Value it, Loc loc) const {
  Expr parity = floormod(floordiv(it.value, Expr(stages_)), Expr(2));
  cuda::mbarrier_wait(Value(full(it, loc), loc), Value(parity, loc), loc);
}
void Pipeline::consumer_release(Value it, Loc loc) const {
  cuda::mbarrier_arrive(Value(empty(it, loc), loc), loc);
}

Pipeline pipeline(PipelineConfig c, Name name, Loc loc) {
  state("T.pipeline", loc);
  if (c.stages < 1 || c.stages > 64)
    fail("T.pipeline", name.value, loc,
         "stages = " + std::to_string(c.stages) + " outside [1, 64]");
  if (c.producer_arrivals < 1 || c.consumer_arrivals < 1 || c.producer_arrivals >= (1 << 20) ||
      c.consumer_arrivals >= (1 << 20))
    fail("T.pipeline", name.value, loc, "arrival counts are in [1, 2^20)");
  std::string n = name.value.empty() ? detail::infer_name(loc, "pipe") : name.value;
  TileBuffer full = alloc_buffer({c.stages}, u64, MemScope::shared, std::nullopt, n + "_full", loc);
  TileBuffer empty =
      alloc_buffer({c.stages}, u64, MemScope::shared, std::nullopt, n + "_empty", loc);
  Pipeline p(full, empty, c.stages);
  // Thread 0 of the CTA initializes (the raw thread index: the pipeline is
  // set up before, and independently of, the kernel's own id bindings).
  if_(
      Value(make_binary(BinOp::EQ, make_call(Intrinsic::thread_idx, {}, loc), Expr(0), loc), loc),
      [&] {
        for (int s = 0; s < c.stages; ++s) {
          cuda::mbarrier_init(Value(full(Idx(s, loc)), loc), Value(c.producer_arrivals, loc), loc);
          cuda::mbarrier_init(Value(empty(Idx(s, loc)), loc), Value(c.consumer_arrivals, loc), loc);
        }
        cuda::fence_barrier_init(loc);
      },
      loc);
  cuda::cta_sync(loc);
  return p;
}

NamedBarriers named_barriers(NamedBarriersConfig c, Loc loc) {
  BuildState& st = state("T.named_barriers", loc);
  if (c.count < 1)
    fail("T.named_barriers", "", loc, "count = " + std::to_string(c.count) + " is not positive");
  if (c.threads <= 0 || c.threads % 32 != 0 || c.threads > 1024)
    fail("T.named_barriers", "", loc,
         "threads = " + std::to_string(c.threads) +
             ": a named barrier counts whole warps (a positive multiple of 32, at most 1024)");
  // Ids come from the top of the 16 hardware barriers: 0 is cta_sync's and
  // 1 + w warpgroup w's (warpgroup_sync); verify_kernel checks they do not meet.
  if (st.named_barriers + c.count > kMaxNamedBarriers)
    fail("T.named_barriers", "", loc,
         "asks for " + std::to_string(c.count) + " barriers with " +
             std::to_string(st.named_barriers) + " taken: a kernel has " +
             std::to_string(kMaxNamedBarriers) +
             " for its own use (16 in hardware; 0 and one per warpgroup are tx's)");
  st.named_barriers += c.count;
  return NamedBarriers(16 - st.named_barriers, c.count, c.threads);
}

Expr NamedBarriers::id(Value i, Loc loc) const {
  if (auto k = as_const_int(i.value); k && (*k < 0 || *k >= count_))
    fail("T.named_barriers", "", loc,
         "barrier " + std::to_string(*k) + " of " + std::to_string(count_));
  return count_ == 1 ? Expr(base_) : Expr(base_) + min(max(i.value, 0), count_ - 1);
}
void NamedBarriers::sync(Value i, Loc loc) const {
  cuda::named_barrier_sync(Value(id(i, loc), loc), threads_, loc);
}
void NamedBarriers::arrive(Value i, Loc loc) const {
  cuda::named_barrier_arrive(Value(id(i, loc), loc), threads_, loc);
}

TileScheduler::TileScheduler(TileSchedulerConfig c) : c_(c) {
  c_.group = std::gcd(std::max<std::int64_t>(c.group, 1), c.tiles_m);
  if (c.pairs) {
    ctas_ = c.ctas > 0 ? std::min(c.ctas, pair_count()) : pair_count();
    rounds_ = 2 * ((pair_count() + ctas_ - 1) / ctas_);
    return;
  }
  ctas_ = c.ctas > 0 ? std::min(c.ctas, tiles()) : tiles();
  rounds_ = (tiles() + ctas_ - 1) / ctas_;
}

ScheduledTile TileScheduler::tile(Value cta, Value round, Loc loc) const {
  auto c = [](std::int64_t v) { return Expr(static_cast<int>(v)); };
  if (c_.pairs) {
    // Pair p = cta + (round / 2) ctas: column p / per_column, rows
    // tiles_m - 1 - j (even rounds) and j (odd), j = p % per_column.
    const std::int64_t per_column = (c_.tiles_m + 1) / 2;
    const Expr linear = cta.value + round.value / c(2) * c(ctas_);
    Var p = let(Value(min(linear, c(pair_count() - 1)), loc), Name("pair"), loc);
    Var j = let(Value(p % c(per_column), loc), Name("pair_row"), loc);
    const Expr second = round.value % c(2) == c(1);
    Var valid = let(Value(linear < c(pair_count()) && (!second || j < c(c_.tiles_m - 1) - j), loc),
                    Name("valid"), loc);
    Var m = let(Value(select(second, Expr(j), c(c_.tiles_m - 1) - j), loc), Name("tile_m"), loc);
    Var n = let(Value(p / c(per_column), loc), Name("tile_n"), loc);
    return {valid, m, n};
  }
  const Expr linear = cta.value + round.value * c(ctas_);
  Var valid = let(Value(linear < c(tiles()), loc), Name("valid"), loc);
  Var t = let(Value(min(linear, c(tiles() - 1)), loc), Name("tile"), loc);
  const Expr g = c(c_.group), per_group = c(c_.group * c_.tiles_n);
  const Expr m_up = t / per_group * g + t % g;
  const Expr m_at = c_.m_descending ? Expr(c(c_.tiles_m - 1) - m_up) : m_up;
  Var m = let(Value(m_at, loc), Name("tile_m"), loc);
  Var n = let(Value(t % per_group / g, loc), Name("tile_n"), loc);
  return {valid, m, n};
}

TileScheduler tile_scheduler(TileSchedulerConfig c, Loc loc) {
  if (c.tiles_m < 1 || c.tiles_n < 1 || c.ctas < 0 || c.tiles_m * c.tiles_n >= (1LL << 31))
    fail("T.tile_scheduler", "", loc,
         "tiles_m = " + std::to_string(c.tiles_m) + ", tiles_n = " + std::to_string(c.tiles_n) +
             ", ctas = " + std::to_string(c.ctas) +
             ": the tile grid needs 1 to 2^31 - 1 tiles and ctas >= 0");
  return TileScheduler(c);
}

}  // namespace T

void IdVars::index_error(std::size_t i) const {
  fail("T.id", vars_[0]->name + "[" + std::to_string(i) + "]", vars_[0]->loc,
       "index " + std::to_string(i) + " past the " + std::to_string(vars_.size()) +
           " id var(s) this call binds (0 .. " + std::to_string(vars_.size() - 1) + ")");
}

}  // namespace tx
