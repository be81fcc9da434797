// The pipeline: a straight list of passes, with the IR printed after each
// when asked (TX_DEBUG_IR=1), then the facts code generators need (launch
// configuration, parameter alignment, shared-memory offsets).
#include "tx/lowering/lower.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <unordered_map>
#include <unordered_set>

#include "tx/lowering/host_form.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

bool debug_from_env() {
  const char* v = std::getenv("TX_DEBUG_IR");
  return v && *v && std::string(v) != "0";
}

class Facts : public IRVisitor {
 public:
  std::unordered_map<const VarNode*, int> widest;  // by buffer data var
  std::unordered_set<const VarNode*> written;      // buffers the kernel stores to
  std::vector<Buffer> shared;
  using IRVisitor::visit_node;
  void visit_node(const CopyBytesNode* n) override {
    int& d = widest[n->dst->data.get()];
    d = std::max(d, n->bytes);
    int& s = widest[n->src->data.get()];
    s = std::max(s, n->bytes);
    written.insert(n->dst->data.get());
    IRVisitor::visit_node(n);
  }
  void visit_node(const StoreNode* n) override {
    written.insert(n->buffer->data.get());
    IRVisitor::visit_node(n);
  }
  void visit_node(const CallNode* n) override {
    // A flag a signal stores to is written.
    if (n->op == Intrinsic::signal || n->op == Intrinsic::atomic_add)
      if (const auto* ld = n->args[0].as<LoadNode>()) written.insert(ld->buffer->data.get());
    IRVisitor::visit_node(n);
  }
  void visit_node(const CpAsyncNode* n) override {
    int& s = widest[n->src->data.get()];
    s = std::max(s, n->bytes);
    IRVisitor::visit_node(n);
  }
  void visit_node(const AllocateNode* n) override {
    if (n->buffer->scope == MemScope::shared) shared.push_back(n->buffer);
    IRVisitor::visit_node(n);
  }
  std::vector<TensorMapDesc> maps;  // distinct, in order of first use
  void visit_node(const TmaCopyNode* n) override {
    bool seen = false;
    for (const TensorMapDesc& m : maps) seen = seen || m.same_as(n->map);
    if (!seen) maps.push_back(n->map);
    IRVisitor::visit_node(n);
  }
};

// What a launch needs to know of a parameter: its declaration, and the
// facts of the lowered body (its widest vector access, whether it is written).
KernelParamInfo param_info(const Param& p, const Facts& facts) {
  KernelParamInfo info;
  if (p.scalar.defined()) {
    info.name = p.scalar.name();
    info.dtype = p.scalar.dtype();
    info.is_scalar = true;
    info.min = p.min;
    info.max = p.max;
    info.multiple_of = p.multiple_of;
    return info;
  }
  info.name = p.buffer->name;
  info.dtype = p.buffer->dtype;
  info.shape = p.buffer->shape;
  info.elems = p.buffer->storage_elems();
  info.dims = p.buffer->dims;
  info.symbolic = p.buffer->symbolic();
  auto it = facts.widest.find(p.buffer->data.get());
  info.align_bytes = std::max(p.buffer->dtype.bytes(), it == facts.widest.end() ? 1 : it->second);
  // A symmetric buffer is written by the peers even where this kernel only
  // reads it: never read-only, never cached as invariant.
  info.symmetric = p.symmetric;
  info.written = facts.written.count(p.buffer->data.get()) > 0 || p.symmetric;
  return info;
}

}  // namespace

std::int64_t shared_alignment(const Buffer& b) {
  std::int64_t bytes = b->storage_elems() * b->dtype.bytes();
  std::int64_t a = bytes >= 128 ? 128 : 16;
  if (auto sw = b->layout.swizzle()) a = std::max(a, sw->period() * b->dtype.bytes());
  return a;
}

// The alignment of every shared allocation of `s`, by its data variable.
static std::unordered_map<const VarNode*, std::int64_t> shared_alignments(const Stmt& s) {
  struct Collect : IRVisitor {
    using IRVisitor::visit_node;
    std::unordered_map<const VarNode*, std::int64_t> align;
    void visit_node(const AllocateNode* n) override {
      if (n->buffer->scope == MemScope::shared)
        align[n->buffer->data.get()] = shared_alignment(n->buffer);
      IRVisitor::visit_node(n);
    }
  } c;
  c.visit(s);
  return c.align;
}

bool LoweredKernel::shape_generic() const { return !dims.empty() || launch.symbolic_grid; }

LoweredKernel lower(const PrimFunc& f, const LowerOptions& opt) {
  bool debug = opt.debug || debug_from_env();
  std::ostream& log = opt.log ? *opt.log : std::cerr;
  auto step = [&](const char* name, const Stmt& s) {
    if (debug) log << "# ---- IR after " << name << " ----\n" << to_string(f.with_body(s, true));
  };

  LoweredKernel k;
  k.source = f;
  k.target = opt.target();
  if (debug) log << "# ---- IR as written ----\n" << to_string(f);
  k.launch = verify_kernel(f);
  verify_scopes(f);
  verify_writes(f);
  check_bounds(f, k.launch);
  Stmt s = f->body;
  s = lower_profile(s, opt.profile, &k.profile_regions);
  step("lower_profile", s);
  s = lower_tile_ops(s, k.launch, &k.dispatched, k.target);
  step("lower_tile_ops", s);
  s = lower_scope_ids(s);
  step("lower_scope_ids", s);
  if (opt.check_indices) {
    s = guard_indices(s, k.launch);
    step("guard_indices", s);
  }
  // Each shared tile's alignment, read while the tiles still carry their
  // layouts (flattening leaves a 1-D view): the hardware swizzles by address
  // bits, so a swizzled tile starts on a multiple of its swizzle's period.
  const auto shared_align = shared_alignments(s);
  s = flatten_buffers(s);
  step("flatten_buffers", s);
  s = widen_indices(s);
  step("widen_indices", s);
  s = legalize_low_precision(s);
  step("legalize_low_precision", s);
  s = simplify_stmt(s, k.launch);
  step("simplify_stmt", s);
  s = fast_divide(s, k.launch, &k.derived);
  step("fast_divide", s);
  k.lowered = f.with_body(s, true);
  if (!k.derived.empty()) {
    std::vector<DimParam> dims = f->dims;
    dims.insert(dims.end(), k.derived.begin(), k.derived.end());
    k.lowered = PrimFunc(std::make_shared<const PrimFuncNode>(
        f->name, f->params, s, f->loc, /*lowered=*/true, std::move(dims), f->no_alias));
  }
  verify_lowered(k.lowered, k.launch);

  Facts facts;
  facts.visit(s);
  for (const Param& p : f->params) k.params.push_back(param_info(p, facts));
  k.dims = f->dims;
  std::int64_t off = 0;
  for (const Buffer& b : facts.shared) {
    std::int64_t align = shared_alignment(b);
    if (auto it = shared_align.find(b->data.get()); it != shared_align.end())
      align = std::max(align, it->second);
    off = (off + align - 1) / align * align;
    std::int64_t bytes = b->storage_elems() * b->dtype.bytes();
    k.shared.push_back({b, off, bytes});
    off += bytes;
  }
  // A profiled GPU kernel counts each warp's marks in shared memory (a shared
  // atomic instead of a global one: the mark does not wait on a round trip
  // to memory); the counts follow the kernel's own buffers. (Reserved on the
  // host target too, whose CUDA text is the GPU's; the host records marks
  // without them.)
  if (!k.profile_regions.empty()) {
    off = (off + 3) / 4 * 4;
    k.profile_counts_offset = off;
    off += 4 * ((k.launch.block + 31) / 32);
  }
  k.shared_bytes = off;
  for (const TensorMapDesc& m : facts.maps) {
    TensorMapParam tp{m, -1};
    for (std::size_t i = 0; i < f->params.size(); ++i)
      if (f->params[i].buffer && f->params[i].buffer->data.get() == m.global->data.get())
        tp.param = static_cast<int>(i);
    if (tp.param < 0)
      fail("tx.lower", m.global->name, f->loc,
           "a TMA copy reads " + m.global->name + ", which is not a kernel parameter");
    k.tensor_maps.push_back(tp);
  }
  check_limits(k, opt.arch, k.target.is_host());
  if (k.target.is_host())
    k.host = std::make_shared<const HostForm>(lower_host_form(k, opt.check_indices, step));
  return k;
}

namespace {
// A TMA copy or a warpgroup MMA (the checked mode's model of sm_90).
bool has_async_instruction(const Stmt& body) {
  bool found = false;
  for_each_stmt(body,
                [&](const Stmt& s) { found = found || s.as<TmaCopyNode>() || s.as<WgmmaNode>(); });
  return found;
}
// A T::peer view: such a kernel runs as fibers on the host (its ranks wait on
// each other's flags; the region schedule has no place to wait).
bool has_peer_view(const Stmt& body) {
  bool found = false;
  for_each_stmt(body, [&](const Stmt& s) { found = found || s.as<PeerViewNode>(); });
  if (found) return true;
  // Flags alone (T::dist::signal / wait_until on a local buffer that a peer
  // or a copy engine writes) order the kernel against other ranks too.
  struct Find : IRVisitor {
    bool found = false;
    using IRVisitor::visit_node;
    void visit_node(const CallNode* n) override {
      found = found || n->op == Intrinsic::signal || n->op == Intrinsic::wait_until;
      IRVisitor::visit_node(n);
    }
  } f;
  f.visit(body);
  return f.found;
}
}  // namespace

HostForm lower_host_form(const LoweredKernel& k, bool checked,
                         const std::function<void(const char*, const Stmt&)>& step) {
  auto after = [&](const char* name, const Stmt& s) {
    if (step) step(name, s);
  };
  HostForm h;
  h.checked = checked;
  // Checked, a kernel with a symmetric parameter runs as fibers too: the
  // record across ranks (runtime/src/dist_check.hpp) rides on the fibers'
  // vector clocks, and a kernel that only writes its own copy races with a
  // peer that reads it as much as one with a peer view does.
  const bool symmetric = std::any_of(k.lowered->params.begin(), k.lowered->params.end(),
                                     [](const Param& p) { return p.symmetric; });
  if (first_mbarrier_call(k.lowered->body) || has_async_instruction(k.lowered->body) ||
      has_peer_view(k.lowered->body) || (checked && symmetric)) {
    // Fibers: one per thread. Checked, the accesses carry their checks and
    // the scheduler orders them by vector clocks through every barrier,
    // mbarrier phase and wgmma group (runtime/src/host/checked_mode.hpp).
    h.fibers = true;
    h.body = k.lowered->body;
    if (checked) {
      auto plan = std::make_shared<CheckPlan>();
      h.body = instrument_checks(k, plan.get());
      h.checks = plan;
      after("instrument_checks", h.body);
    }
    h.func = k.lowered.with_body(h.body, true);
    return h;
  }
  HostContext cx;
  cx.launch = k.launch;
  cx.thread = h.thread;
  Stmt s = k.lowered->body;
  if (checked) {
    auto plan = std::make_shared<CheckPlan>();
    s = instrument_checks(k, plan.get());
    h.checks = plan;
    after("instrument_checks", s);
  }
  s = isolate_shuffles(s, cx);
  after("isolate_shuffles", s);
  s = sink_local_allocations(s);
  after("sink_local_allocations", s);
  s = split_regions(s, cx);
  after("split_regions", s);
  h.body = s;
  h.func = k.lowered.with_body(s, true);
  return h;
}

}  // namespace tx::lowering
