// The run-time side of the checked host mode: shadow state, the checks the
// JIT-compiled kernel calls, and the report. See checked_mode.hpp.
#include "checked_mode.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <numeric>
#include <type_traits>
#include <unordered_map>

#include "tx/error.hpp"

namespace tx::runtime::host {

namespace {

// One access: who, when (the barrier epochs the thread had passed), where,
// through which buffer. All-zero bytes are "no access" (as is a thread < 0:
// code outside the thread loops), so that shadow pages start as calloc's
// zeroed memory, which is most of what a checked launch of many elements
// spends its time on.
// 24 bytes: a CTA has at most 1024 threads (verify_kernel) and a kernel far
// fewer than 2^15 buffers, so thread and buffer take 16 bits each; a checked
// launch of many elements is bound by the shadow's memory.
struct Access {
  std::int16_t thread = -1;
  std::int16_t slot = -1;  // the buffer: bytes of global memory may belong to several
  std::int32_t cta1 = 0;   // linear CTA id + 1 (a grid has fewer than 2^31 CTAs); 0: none
  std::uint32_t cta_epoch = 0, wg_epoch = 0, warp_epoch = 0;
  std::int32_t site = -1;
  bool exists() const { return thread >= 0 && cta1 != 0; }
  bool valid(std::int64_t cur_cta) const { return thread >= 0 && cta1 != 0 && cta1 == cur_cta + 1; }
  std::int64_t cta() const { return std::int64_t{cta1} - 1; }
};

// The shadow of one cell (an element, or the part of one that other buffers
// over the same bytes can touch apart).
struct Cell {
  Access write, read1, read2;  // within the current CTA
  Access cta_write, cta_read;  // the first access of another CTA to compare with
  bool many_cta_readers = false;
};

static_assert(sizeof(Access) == 24);
static_assert(std::is_trivially_copyable_v<Cell> && std::is_aggregate_v<Cell>,
              "shadow pages are calloc'd: zero bytes must be a Cell with no accesses");

// Cells per shadow page: small, so that a small kernel's launch does not
// spend its time clearing shadow it never touches.
constexpr std::int64_t kPage = 256;

struct FreePage {
  void operator()(Cell* p) const { std::free(p); }
};
using Page = std::unique_ptr<Cell, FreePage>;

// Cleared by writing: where calloc leaves fresh memory to the system's zero
// pages, the first access (a read) maps the zero page and the first write
// faults again, which made a launch of 2^20 elements 10-30% slower.
Page new_page() {
  Page p(static_cast<Cell*>(std::malloc(kPage * sizeof(Cell))));
  if (!p) throw std::bad_alloc();
  std::memset(static_cast<void*>(p.get()), 0, kPage * sizeof(Cell));
  return p;
}

// A shadowed run of memory: the bytes of the global buffers that overlap one
// another (transitively), or one buffer alone. A cell is `granule` bytes:
// the largest size that divides every element size and every buffer's start
// in the run, so two buffers' elements share a cell only where they share
// bytes. Without aliasing that is one cell per element, as a per-buffer
// shadow would have.
struct Space {
  std::int64_t granule = 1;
  std::unordered_map<std::int64_t, Page> pages;
  explicit Space(std::int64_t g) : granule(g) {}
};

// A buffer as the checks see it, what each access needs in one place:
// where its elements are in the shadow (element i is cells [base + i *
// cells, base + (i + 1) * cells) of `space`), its bound, and the page it
// touched last (accesses mostly walk a buffer in order, so most lookups skip
// the space's map; pages are never freed during a launch, so the pointer
// stays valid while other slots add pages).
struct Slot {
  std::int64_t base = 0;
  std::int64_t cells = 1;
  std::int64_t bound = 0;  // valid indices: [0, bound)
  std::int64_t last_pi = -1;
  Cell* last_page = nullptr;
  Space* space = nullptr;
  bool global = false;  // global memory: races across CTAs are checked too
  bool races = false;   // shared and global buffers are tracked
};

enum class Kind { race, race_cta, out_of_bounds, div_zero, index_range, unfenced, model };

// The vector-clock mode's use of an Access's fields: cta_epoch is the
// actor's clock; wg_epoch holds kAsync and the issuing thread + 1 of an
// agent's access; warp_epoch a tag (a TMA copy's phase). A site below -1
// is the fiber site -2 - site.
constexpr std::uint32_t kAsync = 1u << 31;
constexpr std::int32_t fiber_site_code(std::int32_t s) { return -2 - s; }

struct Finding {
  Kind kind;
  std::int32_t slot = -1;  // the buffer of the second access
  std::int64_t index = 0;  // its element
  std::int64_t count = 1;
  Access first, second;
  bool first_writes = false, second_writes = false;
  std::int64_t times = 1;
  std::int64_t first_index = 0;  // the first access's element, in its own buffer (first.slot)
  std::string text{};            // Kind::model: the whole sentence
};

}  // namespace

struct Checker::State {
  const CheckPlan& plan;
  lowering::LaunchConfig launch;
  std::int64_t cta = -1;
  std::vector<std::uint32_t> cta_epoch, wg_epoch, warp_epoch;  // per thread
  std::vector<Space> spaces;
  std::vector<Slot> slots;  // per buffer slot of the plan
  // Deduplicated by kind, the two buffers and the two sites.
  std::map<std::tuple<int, int, int, int, int>, Finding> findings;
  std::int64_t total = 0;

  // The vector-clock mode (fibers).
  bool vc = false;
  std::vector<Checker::FiberSite> fsites;
  std::vector<std::int32_t> canon;  // per fiber site: the first site of the same op and line
  std::int32_t fiber_site(std::int32_t s) const {
    return s >= 0 && static_cast<std::size_t>(s) < canon.size() ? canon[static_cast<std::size_t>(s)]
                                                                : s;
  }
  std::vector<Checker::Clock> clocks;              // per actor: threads, then agents
  std::vector<std::string> agents;                 // actor block + i
  std::vector<std::vector<std::uint32_t>> fences;  // per thread: its fence.proxy.async clocks
  struct Pending {
    std::int32_t slot;
    std::int64_t lo, hi;  // registers [lo, hi) of slot
    std::uint64_t group;  // the commit group it joins
    int agent;
    std::uint32_t clock;
    std::int32_t site;
  };
  struct WgmmaThread {
    std::vector<Pending> acc;
    // Committed groups, oldest first: (group, the unit, its clock at the group's last instruction).
    std::vector<std::tuple<std::uint64_t, int, std::uint32_t>> groups;
    std::uint64_t next_group = 0;
    int open_agent = -1;
    std::uint32_t open_clock = 0;
  };
  std::vector<WgmmaThread> wgmma;

  // Across ranks (dist_check.hpp): the rank this launch runs, its launch
  // number, what it knew when it began, and what its CTAs learned.
  Checker* owner = nullptr;
  const DistRank* rank = nullptr;
  std::vector<int> dist_sites;  // per plan site: its interned text (dist_check_site), or -1
  std::uint32_t launch_no = 0;
  Knowledge carried, learned;
  // The earlier access of another rank (or launch) is ordered before the
  // current thread's.
  int dist_thread = -1;
  bool ordered_across(const DistAccess& a) const {
    if (a.rank == rank->rank) return true;  // one rank's stream orders its launches
    const Knowledge& k = clocks[static_cast<std::size_t>(dist_thread)].remote;
    const auto r = static_cast<std::size_t>(a.rank);
    if (r < k.horizon.size() && k.horizon[r] > a.launch) return true;
    auto it = k.ctas.find(CtaKey::of(a.rank, a.launch, a.cta));
    return it != k.ctas.end() && static_cast<std::size_t>(a.actor) < it->second.size() &&
           it->second[static_cast<std::size_t>(a.actor)] >= a.clock;
  }

  int block() const { return launch.block; }
  // A finding of the model: one per site and kind of sentence (its first 40
  // characters); `site` as an Access's.
  void model(const std::string& operand, const std::string& text, std::int32_t site) {
    Finding f{Kind::model, -1, 0, 1, {}, {}, false, false, 1};
    f.second.site = site;
    f.text = text;
    (void)operand;
    ++total;
    std::string shape = text.substr(0, 60);
    std::erase_if(shape, [](char ch) { return ch >= '0' && ch <= '9'; });
    auto key =
        std::make_tuple(static_cast<int>(Kind::model), -1,
                        static_cast<int>(std::hash<std::string>{}(shape)&0x3fffffff), site, 0);
    auto it = findings.find(key);
    if (it != findings.end()) {
      ++it->second.times;
      return;
    }
    if (findings.size() < 64) findings.emplace(key, f);
  }
  Checker::Clock& clock(int actor) { return clocks[static_cast<std::size_t>(actor)]; }
  // The earlier access `prev` is not ordered before the actor's `cur`.
  bool unordered(const Access& prev, const Access& cur) const {
    if (prev.thread == cur.thread) return false;
    const auto& c = clocks[static_cast<std::size_t>(cur.thread)];
    const auto p = static_cast<std::size_t>(prev.thread);
    return p >= c.size() || c[p] < prev.cta_epoch;
  }
  // An ordered generic write before an access of the asynchronous proxy:
  // the writer fenced the proxy between the write and what orders them.
  bool fenced(const Access& w, const Access& cur) const {
    const auto x = static_cast<std::size_t>(w.thread);
    if (x >= fences.size()) return true;
    const auto& f = fences[x];
    auto it = std::upper_bound(f.begin(), f.end(), w.cta_epoch);
    return it != f.end() && *it <= clocks[static_cast<std::size_t>(cur.thread)][x];
  }

  State(const CheckPlan& p, const lowering::LaunchConfig& l)
      : plan(p),
        launch(l),
        cta_epoch(static_cast<std::size_t>(l.block)),
        wg_epoch(static_cast<std::size_t>(l.block)),
        warp_epoch(static_cast<std::size_t>(l.block)),
        slots(p.buffers.size()) {
    for (std::size_t k = 0; k < slots.size(); ++k) {
      slots[k].bound = p.buffers[k].elems;
      slots[k].global = p.buffers[k].scope == MemScope::global;
      slots[k].races = p.buffers[k].races;
    }
  }

  // Gives each buffer its place in the shadow. Global buffers are placed by
  // their address in this launch (`args`), so that the ones sharing bytes --
  // one tensor bound to two parameters, overlapping views of one storage,
  // overlapping from_blob memory -- share cells; the others (shared memory,
  // registers, or no addresses known) get a space each.
  void place_buffers(void* const* args) {
    const std::size_t n = plan.buffers.size();
    // Every space is made before any slot points at one: no reallocation.
    spaces.reserve(n);
    struct Span {
      std::uintptr_t lo, hi;
      std::size_t slot;
    };
    std::vector<Span> spans;
    for (std::size_t k = 0; k < n; ++k) {
      const CheckBuffer& b = plan.buffers[k];
      const std::int64_t bytes = std::max(1, b.elem_bytes);
      if (args && b.param >= 0 && b.scope == MemScope::global && b.races && args[b.param] &&
          slots[k].bound > 0) {
        const auto lo = reinterpret_cast<std::uintptr_t>(args[b.param]);
        spans.push_back({lo, lo + static_cast<std::uintptr_t>(slots[k].bound * bytes), k});
        continue;
      }
      spaces.emplace_back(bytes);
      slots[k].space = &spaces.back();
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.lo < b.lo; });
    for (std::size_t i = 0; i < spans.size();) {
      std::size_t j = i + 1;
      std::uintptr_t hi = spans[i].hi;
      for (; j < spans.size() && spans[j].lo < hi; ++j) hi = std::max(hi, spans[j].hi);
      const std::uintptr_t lo = spans[i].lo;
      std::int64_t g = 0;
      for (std::size_t k = i; k < j; ++k) {
        g = std::gcd(
            g, static_cast<std::int64_t>(std::max(1, plan.buffers[spans[k].slot].elem_bytes)));
        g = std::gcd(g, static_cast<std::int64_t>(spans[k].lo - lo));
      }
      spaces.emplace_back(g);
      for (std::size_t k = i; k < j; ++k) {
        const std::int64_t bytes = std::max(1, plan.buffers[spans[k].slot].elem_bytes);
        Slot& sl = slots[spans[k].slot];
        sl.space = &spaces.back();
        sl.base = static_cast<std::int64_t>(spans[k].lo - lo) / g;
        sl.cells = bytes / g;
      }
      i = j;
    }
  }

  [[gnu::always_inline]] static Cell& cell(Slot& sl, std::int64_t c) {
    const std::int64_t pi = c / kPage, in = c % kPage;
    if (sl.last_page && sl.last_pi == pi) return sl.last_page[in];
    Page& page = sl.space->pages[pi];
    if (!page) page = new_page();
    sl.last_pi = pi;
    sl.last_page = page.get();
    return page.get()[in];
  }

  // The element of `slot` that holds cell `c` of its space.
  std::int64_t element_of(std::int32_t slot, std::int64_t c) const {
    if (slot < 0) return 0;
    const Slot& sl = slots[static_cast<std::size_t>(slot)];
    return (c - sl.base) / sl.cells;
  }

  Access now(std::int32_t thread, std::int32_t site, std::int32_t slot = -1) const {
    Access a;
    a.thread = static_cast<std::int16_t>(thread >= 0 && thread < launch.block ? thread : -1);
    a.cta1 = static_cast<std::int32_t>(cta + 1);
    a.site = site;
    a.slot = static_cast<std::int16_t>(slot);
    if (a.thread >= 0 && vc) {
      a.cta_epoch = clocks[static_cast<std::size_t>(thread)][static_cast<std::size_t>(thread)];
    } else if (a.thread >= 0) {
      auto t = static_cast<std::size_t>(thread);
      a.cta_epoch = cta_epoch[t];
      a.wg_epoch = wg_epoch[t];
      a.warp_epoch = warp_epoch[t];
    }
    return a;
  }

  // Two accesses of one CTA with no barrier between them that both threads
  // take part in.
  static bool concurrent(const Access& a, const Access& b) {
    if (a.thread == b.thread || a.cta_epoch != b.cta_epoch) return false;
    if (a.thread / 128 == b.thread / 128 && a.wg_epoch != b.wg_epoch) return false;
    if (a.thread / 32 == b.thread / 32 && a.warp_epoch != b.warp_epoch) return false;
    return true;
  }

  void add(Finding f) {
    ++total;
    auto key = std::make_tuple(static_cast<int>(f.kind), f.slot, f.first.slot, f.first.site,
                               f.second.site);
    auto it = findings.find(key);
    if (it != findings.end()) {
      ++it->second.times;
      return;
    }
    if (findings.size() < 64) findings.emplace(key, f);
  }

  // An element that spans several cells (a wider element over bytes that a
  // narrower buffer also covers) is reported once per kind, not per cell.
  struct Reported {
    bool race = false, race_cta = false;
  };

  void race(Kind kind, std::int32_t slot, std::int64_t index, std::int64_t c, const Access& first,
            bool fw, const Access& second, bool sw, Reported& done) {
    bool& once = kind == Kind::race ? done.race : done.race_cta;
    if (once) return;
    once = true;
    Finding f{kind, slot, index, 1, first, second, fw, sw, 1};
    f.first_index = element_of(first.slot, c);
    add(f);
  }

  void access(std::int32_t slot, std::int64_t index, bool write, const Access& cur) {
    Slot& sl = slots[static_cast<std::size_t>(slot)];
    Reported done;
    const std::int64_t c0 = sl.base + index * sl.cells;
    if (sl.cells == 1) {
      access_cell(sl, slot, index, c0, write, cur, done);
      return;
    }
    for (std::int64_t c = c0; c < c0 + sl.cells; ++c)
      access_cell(sl, slot, index, c, write, cur, done);
  }

  [[gnu::always_inline]] void access_cell(Slot& sl, std::int32_t slot, std::int64_t index,
                                          std::int64_t c, bool write, const Access& cur,
                                          Reported& done) {
    Cell& cl = cell(sl, c);
    if (vc) {
      access_cell_vc(sl, slot, index, c, cl, write, cur, done);
      return;
    }
    if (cl.write.valid(cta) && concurrent(cl.write, cur))
      race(Kind::race, slot, index, c, cl.write, true, cur, write, done);
    if (write) {
      for (const Access* r : {&cl.read1, &cl.read2})
        if (r->valid(cta) && concurrent(*r, cur))
          race(Kind::race, slot, index, c, *r, false, cur, true, done);
      cl.write = cur;
    } else if (!(cl.read1.valid(cta) && cl.read1.thread == cur.thread)) {
      cl.read2 = cl.read1;
      cl.read1 = cur;
    }
    across_ctas(sl, slot, index, c, cl, write, cur, done);
  }

  // Vector clocks: the last write and two reads not ordered before one another.
  void access_cell_vc(Slot& sl, std::int32_t slot, std::int64_t index, std::int64_t c, Cell& cl,
                      bool write, const Access& cur, Reported& done) {
    const bool async = cur.wg_epoch & kAsync;
    if (cl.write.valid(cta)) {
      if (unordered(cl.write, cur))
        race(Kind::race, slot, index, c, cl.write, true, cur, write, done);
      else if (async && !(cl.write.wg_epoch & kAsync) && !fenced(cl.write, cur) && !done.race) {
        done.race = true;
        Finding f{Kind::unfenced, slot, index, 1, cl.write, cur, true, write, 1};
        f.first_index = element_of(cl.write.slot, c);
        add(f);
      }
    }
    if (write) {
      for (const Access* r : {&cl.read1, &cl.read2})
        if (r->valid(cta) && unordered(*r, cur))
          race(Kind::race, slot, index, c, *r, false, cur, true, done);
      cl.write = cur;
      cl.read1 = cl.read2 = Access{};
    } else if (!cl.read1.valid(cta) || !unordered(cl.read1, cur)) {
      cl.read1 = cur;  // read1 happened before this read: this one stands for both
    } else if (!cl.read2.valid(cta) || !unordered(cl.read2, cur)) {
      cl.read2 = cur;
    } else {
      cl.read2 = cl.read1;
      cl.read1 = cur;
    }
    across_ctas(sl, slot, index, c, cl, write, cur, done);
  }

  // Across CTAs (global memory only: shared memory is the CTA's own).
  void across_ctas(Slot& sl, std::int32_t slot, std::int64_t index, std::int64_t c, Cell& cl,
                   bool write, const Access& cur, Reported& done) {
    if (!sl.global) return;
    if (cl.cta_write.exists() && cl.cta_write.cta() != cta)
      race(Kind::race_cta, slot, index, c, cl.cta_write, true, cur, write, done);
    else if (write && cl.cta_read.exists() && (cl.cta_read.cta() != cta || cl.many_cta_readers))
      race(Kind::race_cta, slot, index, c, cl.cta_read, false, cur, true, done);
    if (write) {
      if (!cl.cta_write.exists()) cl.cta_write = cur;
    } else if (!cl.cta_read.exists()) {
      cl.cta_read = cur;
    } else if (cl.cta_read.cta() != cta) {
      cl.many_cta_readers = true;
    }
  }
};

Checker::Checker(const CheckPlan& plan, const lowering::LaunchConfig& launch,
                 const std::int64_t* param_elems, void* const* args)
    : state_(std::make_unique<State>(plan, launch)) {
  if (plan.buffers.size() > 32767)
    fail("tx.host_jit", "", {},
         "the checked mode tracks at most 32767 buffers per kernel; this one has " +
             std::to_string(plan.buffers.size()));
  // A symbolic buffer's bound is its tensor's size in this launch.
  for (std::size_t k = 0; k < plan.buffers.size(); ++k)
    if (plan.buffers[k].param >= 0 && param_elems)
      state_->slots[k].bound = param_elems[plan.buffers[k].param];
  state_->place_buffers(args);
  state_->owner = this;
  // A rank of a group of host ranks: its launches are numbered, and begin
  // knowing what the rank's earlier launches learned.
  if (const DistRank* r = current_dist_rank(); r && r->size > 1) {
    state_->rank = r;
    state_->launch_no = dist_check_begin_launch(*r, &state_->carried);
  }
}
Checker::~Checker() {
  State& s = *state_;
  if (!s.rank) return;
  for (const Clock& c : s.clocks) s.learned.join(c.remote);
  dist_check_end_launch(*s.rank, s.learned);
}

// ---------------------------------------------- the vector-clock mode (fibers)

void Checker::use_clocks(std::vector<FiberSite> sites) {
  State& s = *state_;
  s.vc = true;
  // An unrolled loop's copies of one instruction are one site in reports.
  std::map<std::string, std::int32_t> first;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const FiberSite& f = sites[i];
    auto [it, fresh] =
        first.emplace(f.op + '\n' + f.operand + '\n' + f.loc.str(), static_cast<std::int32_t>(i));
    s.canon.push_back(it->second);
  }
  s.fsites = std::move(sites);
}
bool Checker::clocks() const { return state_->vc; }

void Checker::begin_cta(std::int64_t cta) {
  State& s = *state_;
  // What the previous CTA's actors learned of other ranks outlives it: the
  // rank's next launch starts knowing it.
  for (const Clock& c : s.clocks) s.learned.join(c.remote);
  s.cta = cta;
  const auto n = static_cast<std::size_t>(s.block());
  s.clocks.assign(n, Clock(n, 0));
  for (std::size_t t = 0; t < n; ++t) {
    s.clocks[t][t] = 1;
    if (s.rank) s.clocks[t].remote = s.carried;
  }
  s.agents.clear();
  s.fences.assign(n, {});
  s.wgmma.assign(n, {});
}

int Checker::agent(const std::string& what) {
  State& s = *state_;
  const int id = s.block() + static_cast<int>(s.agents.size());
  if (id > 32767)
    fail("tx.host_checked", "", {}, "the checked mode tracks at most 32767 threads and agents");
  s.agents.push_back(what);
  Clock c(static_cast<std::size_t>(id) + 1, 0);
  c[static_cast<std::size_t>(id)] = 1;
  s.clocks.push_back(std::move(c));
  return id;
}

namespace {
void join_into(Checker::Clock& into, const Checker::Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (std::size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
  if (!from.remote.empty()) into.remote.join(from.remote);
}
}  // namespace

void Checker::release(int actor, Clock& into) {
  Clock& c = state_->clock(actor);
  join_into(into, c);
  ++c[static_cast<std::size_t>(actor)];
}
void Checker::acquire(int actor, const Clock& from) { join_into(state_->clock(actor), from); }
void Checker::join(int actor, int from) {
  Clock f = state_->clock(from);
  join_into(state_->clock(actor), f);
}
void Checker::know(int actor, int of, std::uint32_t clock) {
  Clock& c = state_->clock(actor);
  if (c.size() <= static_cast<std::size_t>(of)) c.resize(static_cast<std::size_t>(of) + 1, 0);
  c[static_cast<std::size_t>(of)] = std::max(c[static_cast<std::size_t>(of)], clock);
}
void Checker::tick(int actor) { ++state_->clock(actor)[static_cast<std::size_t>(actor)]; }
std::uint32_t Checker::seen(int actor, int of) const {
  const Clock& c = state_->clocks[static_cast<std::size_t>(actor)];
  return static_cast<std::size_t>(of) < c.size() ? c[static_cast<std::size_t>(of)] : 0;
}
std::uint32_t Checker::clock_of(int actor) const {
  return state_->clocks[static_cast<std::size_t>(actor)][static_cast<std::size_t>(actor)];
}

bool Checker::access(int actor, std::int32_t slot, std::int64_t index, bool write,
                     std::int32_t fiber_site, bool async, std::uint32_t tag, int issuer) {
  State& s = *state_;
  if (slot < 0 || static_cast<std::size_t>(slot) >= s.slots.size()) return true;
  Slot& sl = s.slots[static_cast<std::size_t>(slot)];
  Access a;
  a.thread = static_cast<std::int16_t>(actor);
  a.slot = static_cast<std::int16_t>(slot);
  a.cta1 = static_cast<std::int32_t>(s.cta + 1);
  a.cta_epoch = clock_of(actor);
  a.wg_epoch = (async ? kAsync : 0u) | static_cast<std::uint32_t>(issuer + 1);
  a.warp_epoch = tag;
  a.site = fiber_site_code(s.fiber_site(fiber_site));
  if (index < 0 || index >= sl.bound) {
    s.add({Kind::out_of_bounds, slot, index, 1, {}, a, false, write, 1});
    return false;
  }
  if (sl.races) s.access(slot, index, write, a);
  return true;
}

// ------------------------------------------------------------ across ranks

void Checker::dist_access(int thread, const void* addr, std::int64_t count, int elem_bytes,
                          bool write, std::int32_t site) {
  State& s = *state_;
  if (!s.rank || !s.vc || thread < 0 || thread >= s.block()) return;
  const CheckSite& cs = s.plan.sites[static_cast<std::size_t>(site)];
  DistAccess a;
  a.rank = s.rank->rank;
  a.launch = s.launch_no;
  a.cta = s.cta;
  a.actor = thread;
  a.clock = clock_of(thread);
  a.write = write;
  if (s.dist_sites.size() <= static_cast<std::size_t>(site))
    s.dist_sites.resize(static_cast<std::size_t>(site) + 1, -1);
  int& interned = s.dist_sites[static_cast<std::size_t>(site)];
  if (interned < 0) interned = dist_check_site(cs.op + " " + cs.what + " at " + cs.loc.str());
  a.site = interned;
  s.dist_thread = thread;
  auto ordered = [](const DistAccess& e, const void* who) {
    return static_cast<const State*>(who)->ordered_across(e);
  };
  // The buffer as the user declared it, and the peer view it was reached
  // through, if any.
  const CheckBuffer* cb = nullptr;
  for (const CheckBuffer& b : s.plan.buffers)
    if (b.name == cs.what && b.dist) cb = &b;
  const std::string buffer = cb && !cb->symmetric.empty() && cb->symmetric != cs.what
                                 ? cb->symmetric + " (through the peer view " + cs.what + ")"
                                 : cs.what;
  for (const DistConflict& c :
       dist_check_access(*s.rank, addr, count, elem_bytes, a, ordered, &s)) {
    auto verb = [](bool w) { return w ? "writes" : "reads"; };
    const std::string text =
        "race across ranks on element " + std::to_string(c.element) + " of rank " +
        std::to_string(c.owner) + "'s copy of " + buffer + ": rank " +
        std::to_string(c.first.rank) + " " + verb(c.first.write) + " it (" +
        dist_check_site_text(c.first.site) + ", CTA " + std::to_string(c.first.cta) + " thread " +
        std::to_string(c.first.actor) + ") and rank " + std::to_string(a.rank) + " " + verb(write) +
        " it (" + cs.op + " " + cs.what + " at " + cs.loc.str() + ", CTA " + std::to_string(a.cta) +
        " thread " + std::to_string(thread) +
        ") with no T::dist::signal / wait_until (or host barrier) ordering them";
    s.model(cs.what, text, site);
  }
}

void Checker::dist_signal(int thread, std::uint32_t* flag, std::uint32_t value, bool add) {
  State& s = *state_;
  if (!s.rank || !s.vc || thread < 0 || thread >= s.block()) {
    if (add)
      __atomic_fetch_add(flag, value, __ATOMIC_SEQ_CST);
    else
      __atomic_store_n(flag, value, __ATOMIC_SEQ_CST);
    return;
  }
  Clock& c = s.clock(thread);
  // What the signal publishes: what the thread knows of other ranks, and of
  // its own CTA's actors (as this CTA's entry).
  Knowledge published = c.remote;
  published.ctas[CtaKey::of(s.rank->rank, s.launch_no, s.cta)] = c.v;
  // And every earlier launch of this rank: its stream ran them before this
  // one (a peer that acquires this signal knows them too).
  const auto me = static_cast<std::size_t>(s.rank->rank);
  if (published.horizon.size() <= me) published.horizon.resize(me + 1, 0);
  published.horizon[me] = std::max(published.horizon[me], s.launch_no);
  ++c[static_cast<std::size_t>(thread)];  // later accesses are not published
  dist_check_signal(*s.rank, flag, value, add, published);
}

void Checker::dist_acquire(int thread, const std::uint32_t* flag, std::uint32_t value) {
  State& s = *state_;
  if (!s.rank || !s.vc || thread < 0 || thread >= s.block()) return;
  Knowledge got;
  if (!dist_check_acquire(*s.rank, flag, value, &got)) return;
  Clock& c = s.clock(thread);
  // This CTA's own entry (a signal of a thread of this CTA, come back
  // through a peer) joins the local clock.
  auto own = got.ctas.find(CtaKey::of(s.rank->rank, s.launch_no, s.cta));
  if (own != got.ctas.end()) {
    if (c.v.size() < own->second.size()) c.v.resize(own->second.size(), 0);
    for (std::size_t i = 0; i < own->second.size(); ++i) c.v[i] = std::max(c.v[i], own->second[i]);
    got.ctas.erase(own);
  }
  c.remote.join(got);
}

void Checker::fence_proxy(int thread) {
  State& s = *state_;
  Clock& c = s.clock(thread);
  ++c[static_cast<std::size_t>(thread)];
  s.fences[static_cast<std::size_t>(thread)].push_back(c[static_cast<std::size_t>(thread)]);
}

void Checker::wgmma_issue(int thread, int agent, std::uint32_t clock, std::int32_t d_slot,
                          std::int64_t lo, std::int64_t hi, std::int32_t fiber_site) {
  State::WgmmaThread& w = state_->wgmma[static_cast<std::size_t>(thread)];
  w.acc.push_back({d_slot, lo, hi, w.next_group, agent, clock, fiber_site});
  w.open_agent = agent;
  w.open_clock = clock;
}
void Checker::wgmma_commit(int thread) {
  State::WgmmaThread& w = state_->wgmma[static_cast<std::size_t>(thread)];
  if (w.open_agent < 0) return;  // an empty group: nothing to wait for
  w.groups.emplace_back(w.next_group++, w.open_agent, w.open_clock);
  w.open_agent = -1;
}
void Checker::wgmma_wait(int thread, int pending) {
  State::WgmmaThread& w = state_->wgmma[static_cast<std::size_t>(thread)];
  while (w.groups.size() > static_cast<std::size_t>(std::max(pending, 0))) {
    auto [group, agent, clock] = w.groups.front();
    w.groups.erase(w.groups.begin());
    know(thread, agent, clock);
    std::erase_if(w.acc, [&](const State::Pending& p) { return p.group <= group; });
  }
}

void Checker::problem(const std::string& operand, const std::string& text,
                      std::int32_t fiber_site) {
  state_->model(operand, text, fiber_site_code(state_->fiber_site(fiber_site)));
}

std::string Checker::site_text(std::int32_t fiber_site) const {
  const State& s = *state_;
  if (fiber_site < 0 || static_cast<std::size_t>(fiber_site) >= s.fsites.size()) return "?";
  const FiberSite& f = s.fsites[static_cast<std::size_t>(fiber_site)];
  return f.op + " at " + f.loc.str();
}

namespace {

std::string element(const CheckBuffer& b, std::int64_t index) {
  if (b.shape.empty() && b.stages > 1 && index >= 0 && index < b.elems)
    return b.name + "[" + std::to_string(index / (b.elems / b.stages)) + ", ...] (stage " +
           std::to_string(index / (b.elems / b.stages)) + ", element " + std::to_string(index) +
           ")";
  if (b.shape.empty() || index < 0 || index >= b.elems)
    return b.name + "[" + std::to_string(index) + "]";
  std::vector<std::int64_t> coord(b.shape.size());
  std::int64_t rest = index;
  for (std::size_t d = b.shape.size(); d-- > 0;) {
    coord[d] = rest % b.shape[d];
    rest /= b.shape[d];
  }
  std::string s = b.name + "[";
  for (std::size_t d = 0; d < coord.size(); ++d) s += (d ? ", " : "") + std::to_string(coord[d]);
  return s + "]";
}

std::string shape_text(const CheckBuffer& b) {
  if (b.shape.empty()) return b.name + " (" + std::to_string(b.elems) + " elements)";
  std::string s = b.name + " (";
  for (std::size_t d = 0; d < b.shape.size(); ++d)
    s += (d ? ", " : "") + std::to_string(b.shape[d]);
  return s + (b.shape.size() == 1 ? ",)" : ")");
}

}  // namespace

void Checker::report(const std::string& kernel, SourceLoc loc, const Error& stop) {
  State& s = *state_;
  if (s.findings.empty()) throw stop;
  std::string text = stop.reason();
  Finding f{Kind::model, -1, 0, 1, {}, {}, false, false, 1};
  f.text = "and then: " + text;
  ++s.total;
  s.findings.emplace(std::make_tuple(99, 0, 0, 0, 0), f);
  report(kernel, loc);
  throw stop;  // not reached: report() throws with findings
}

std::string Checker::element_name(std::int32_t slot, std::int64_t index) const {
  const State& s = *state_;
  if (slot < 0 || static_cast<std::size_t>(slot) >= s.plan.buffers.size())
    return "element " + std::to_string(index);
  return element(s.plan.buffers[static_cast<std::size_t>(slot)], index);
}

namespace {
// An actor of the vector-clock mode, in words.
std::string actor_words(const std::vector<std::string>& agents, int block, const Access& a) {
  if (a.thread < block) {
    const int t = a.thread;
    return "thread " + std::to_string(t) + " (warpgroup " + std::to_string(t / 128) + ", warp " +
           std::to_string(t / 32) + ")";
  }
  const auto i = static_cast<std::size_t>(a.thread - block);
  std::string w = i < agents.size() ? agents[i] : "an asynchronous unit";
  const std::uint32_t issuer = a.wg_epoch & 0xffff;
  if (w.rfind("the TMA", 0) == 0) w += " (the copy of phase " + std::to_string(a.warp_epoch) + ")";
  if (issuer > 0) w += ", issued by thread " + std::to_string(issuer - 1);
  return w;
}
}  // namespace

namespace {
std::string actor_text(const Checker::State& s, const Access& a) {
  return actor_words(s.agents, s.block(), a);
}

// A race of the vector-clock mode, with what usually causes that pair.
template <typename Site>
std::string race_text(const Checker::State& s, const Finding& f, const std::string& on,
                      const std::string& it1, const std::string& it2, const Site& site) {
  auto actor_text = [&](const Access& a) { return actor_words(s.agents, s.block(), a); };
  const CheckBuffer& b = s.plan.buffers[static_cast<std::size_t>(f.slot)];
  auto verb = [](bool w) { return w ? "writes" : "reads"; };
  const bool tma1 = f.first.thread >= s.block() && (f.first.wg_epoch & kAsync) &&
                    actor_text(f.first).rfind("the TMA", 0) == 0;
  const bool tma2 = f.second.thread >= s.block() && actor_text(f.second).rfind("the TMA", 0) == 0;
  const bool mma1 = f.first.thread >= s.block() && !tma1;
  std::string text = std::string("race on ") + mem_scope_name(b.scope) + " memory " + on +
                     " in CTA " + std::to_string(f.second.cta()) + ": " + actor_text(f.first) +
                     " " + verb(f.first_writes) + " " + it1 + " (" + site(f.first.site) + ") and " +
                     actor_text(f.second) + " " + verb(f.second_writes) + " " + it2 + " (" +
                     site(f.second.site) +
                     "), and nothing orders the two (no barrier, mbarrier phase or wgmma wait "
                     "between them)";
  if (mma1)
    text +=
        "; the wgmma still reads its operands until a wgmma_wait retires it: release or "
        "overwrite the stage only after that wait (gemm pending=, T::cuda::wgmma_wait)";
  else if (tma1 && f.first_writes)
    text += "; the data is valid only once the mbarrier phase the copy completes on (phase " +
            std::to_string(f.first.warp_epoch) + ", parity " +
            std::to_string(f.first.warp_epoch % 2) + ") has completed and the reader waited for it";
  else if (tma2 && !f.first_writes)
    text +=
        "; the TMA copy overwrote data that was still being read: the producer must wait "
        "for the consumers' release of the stage (its empty barrier) before the copy, and the "
        "consumers release it only after their last read";
  return text;
}
}  // namespace

void Checker::report(const std::string& kernel, SourceLoc loc) const {
  const State& s = *state_;
  if (s.findings.empty()) return;
  auto site = [&](std::int32_t i) -> std::string {
    if (i <= -2) return site_text(-2 - i);
    if (i < 0 || static_cast<std::size_t>(i) >= s.plan.sites.size()) return "?";
    const CheckSite& c = s.plan.sites[static_cast<std::size_t>(i)];
    return c.op + " at " + c.loc.str();
  };
  auto verb = [](bool w) { return w ? "writes" : "reads"; };
  std::vector<std::pair<std::string, std::string>> lines;  // (operand, sentence)
  for (const auto& [key, f] : s.findings) {
    const CheckBuffer* b =
        f.slot >= 0 ? &s.plan.buffers[static_cast<std::size_t>(f.slot)] : nullptr;
    std::string text;
    switch (f.kind) {
      case Kind::race:
      case Kind::race_cta: {
        // The first access may have gone through another buffer over the
        // same bytes: an argument bound twice, overlapping views or blobs.
        const CheckBuffer* b1 =
            f.first.slot >= 0 ? &s.plan.buffers[static_cast<std::size_t>(f.first.slot)] : b;
        const std::string e2 = element(*b, f.index);
        const std::string e1 = b1 == b ? e2 : element(*b1, f.first_index);
        const std::string it1 = b1 == b ? "it" : e1, it2 = b1 == b ? "it" : e2;
        const std::string on = b1 == b ? e2
                                       : "memory shared by arguments " + b1->name + " and " +
                                             b->name + " (" + e1 + " overlaps " + e2 + ")";
        if (f.kind == Kind::race && s.vc)
          text = race_text(s, f, on, it1, it2, site);
        else if (f.kind == Kind::race)
          text = std::string("race on ") + mem_scope_name(b->scope) + " " +
                 (b1 == b ? "memory " : "") + on + " in CTA " + std::to_string(f.second.cta()) +
                 ": thread " + std::to_string(f.first.thread) + " " + verb(f.first_writes) + " " +
                 it1 + " (" + site(f.first.site) + ") and thread " +
                 std::to_string(f.second.thread) + " " + verb(f.second_writes) + " " + it2 + " (" +
                 site(f.second.site) + ") with no barrier of both threads between";
        else
          text = "race across CTAs on " + on + ": CTA " + std::to_string(f.first.cta()) + " " +
                 verb(f.first_writes) + " " + it1 + " (" + site(f.first.site) + ", thread " +
                 std::to_string(f.first.thread) + ") and CTA " + std::to_string(f.second.cta()) +
                 " " + verb(f.second_writes) + " " + it2 + " (" + site(f.second.site) +
                 ", thread " + std::to_string(f.second.thread) +
                 "); the CTAs of a launch run in any order and never wait for each other";
        break;
      }
      case Kind::unfenced: {
        const std::string e = element(*b, f.index);
        text = "missing proxy fence on " + std::string(mem_scope_name(b->scope)) + " memory " + e +
               " in CTA " + std::to_string(f.second.cta()) + ": thread " +
               std::to_string(f.first.thread) + " writes it (" + site(f.first.site) + ") and " +
               actor_text(s, f.second) + " " + verb(f.second_writes) + " it (" +
               site(f.second.site) +
               ") through the asynchronous proxy; the barrier orders them, but no "
               "fence.proxy.async of thread " +
               std::to_string(f.first.thread) +
               " lies between its write and that barrier, so the asynchronous proxy may not see "
               "the write (T::cuda::fence_proxy_async() after the writes, before the barrier)";
        break;
      }
      case Kind::model:
        text = f.text + (f.second.site <= -2 ? " (" + site(f.second.site) + ")" : "");
        break;
      case Kind::out_of_bounds:
        text = "out of bounds: " + site(f.second.site) + " " + verb(f.second_writes) +
               (f.count > 1 ? " elements [" + std::to_string(f.index) + ", " +
                                  std::to_string(f.index + f.count) + ")"
                            : " element " + std::to_string(f.index)) +
               " of " + shape_text(*b) + ", which holds [0, " +
               std::to_string(s.slots[static_cast<std::size_t>(f.slot)].bound) + ") (thread " +
               std::to_string(f.second.thread) + ", CTA " + std::to_string(f.second.cta()) +
               "); the checked run skipped the access";
        break;
      case Kind::index_range: {
        // index: the index; count: its dimension.
        const CheckSite& c = s.plan.sites[static_cast<std::size_t>(f.second.site)];
        text = "out of bounds: " + site(f.second.site) + " " + verb(f.second_writes) + " " +
               c.what + " at index " + std::to_string(f.index) + " on dimension " +
               std::to_string(f.count) + ", outside its extent (thread " +
               std::to_string(f.second.thread) + ", CTA " + std::to_string(f.second.cta()) + ")";
        break;
      }
      case Kind::div_zero: {
        const CheckSite& c = s.plan.sites[static_cast<std::size_t>(f.second.site)];
        text = "integer division by zero in `" + c.what + "` (" + site(f.second.site) +
               ", thread " + std::to_string(f.second.thread) + ", CTA " +
               std::to_string(f.second.cta()) + "); undefined on the GPU, the host divides by 1";
        break;
      }
    }
    if (f.times > 1) text += " [" + std::to_string(f.times) + " times]";
    lines.emplace_back(b ? b->name : "", text);
  }
  std::string detail = "  checked host mode (TX_CHECK=1) found " + std::to_string(s.total) +
                       (s.total == 1 ? " problem" : " problems") +
                       (s.findings.size() < static_cast<std::size_t>(s.total)
                            ? " at " + std::to_string(s.findings.size()) +
                                  (s.findings.size() == 1 ? " place" : " distinct places")
                            : "") +
                       ":";
  for (const auto& [operand, text] : lines) detail += "\n  - " + text;
  fail("launch " + kernel, lines.front().first, loc, lines.front().second, detail);
}

}  // namespace tx::runtime::host

using tx::runtime::host::Checker;

extern "C" bool tx_host_check_access(void* checker, std::int32_t slot, std::int64_t index,
                                     std::int32_t count, std::int32_t flags, std::int32_t site,
                                     std::int32_t thread) {
  auto& s = *static_cast<Checker::State*>(checker);
  const tx::runtime::host::Slot& sl = s.slots[static_cast<std::size_t>(slot)];
  const std::int64_t bound = sl.bound;
  bool write = flags & 1;
  auto cur = s.now(thread, site, slot);
  if (index < 0 || count < 0 || index > bound - count) {
    tx::runtime::host::Finding f{
        tx::runtime::host::Kind::out_of_bounds, slot, index, count, {}, cur, false, write, 1};
    s.add(f);
    return false;
  }
  if (s.vc && thread >= 0 && static_cast<std::size_t>(thread) < s.wgmma.size()) {
    // An accumulator register of a wgmma not yet retired.
    for (const auto& p : s.wgmma[static_cast<std::size_t>(thread)].acc)
      if (p.slot == slot && index < p.hi && index + count > p.lo) {
        const auto& sites = s.plan.sites;
        const std::string where = site >= 0 && static_cast<std::size_t>(site) < sites.size()
                                      ? sites[static_cast<std::size_t>(site)].op + " at " +
                                            sites[static_cast<std::size_t>(site)].loc.str()
                                      : std::string("?");
        s.model(s.plan.buffers[static_cast<std::size_t>(slot)].name,
                "thread " + std::to_string(thread) + std::string(write ? " writes" : " reads") +
                    " the wgmma accumulator " +
                    s.plan.buffers[static_cast<std::size_t>(slot)].name + "[" +
                    std::to_string(index) + "] (" + where +
                    ") before a wgmma_wait retires the wgmma that writes it: until then the "
                    "registers belong to the MMA in flight (wait with T::cuda::wgmma_wait(0, acc) "
                    "first)",
                tx::runtime::host::fiber_site_code(s.fiber_site(p.site)));
        break;
      }
  }
  if (sl.races)
    for (std::int64_t k = 0; k < count; ++k) s.access(slot, index + k, write, cur);
  return true;
}

extern "C" void tx_host_check_barrier(void* checker, std::int32_t scope, std::int32_t thread) {
  auto& s = *static_cast<Checker::State*>(checker);
  auto bump = [&](std::size_t t) {
    if (scope >= 3)
      ++s.cta_epoch[t];
    else if (scope == 2)
      ++s.wg_epoch[t];
    else
      ++s.warp_epoch[t];
  };
  if (thread >= 0 && thread < s.launch.block) {
    bump(static_cast<std::size_t>(thread));
  } else {
    for (std::size_t t = 0; t < s.cta_epoch.size(); ++t) bump(t);
  }
}

extern "C" void tx_host_check_cta(void* checker, std::int64_t cta) {
  auto& s = *static_cast<Checker::State*>(checker);
  s.cta = cta;
  std::fill(s.cta_epoch.begin(), s.cta_epoch.end(), 0u);
  std::fill(s.wg_epoch.begin(), s.wg_epoch.end(), 0u);
  std::fill(s.warp_epoch.begin(), s.warp_epoch.end(), 0u);
}

extern "C" void tx_host_check_index(void* checker, std::int64_t index, std::int64_t extent,
                                    std::int32_t dim, std::int32_t site, std::int32_t thread) {
  if (index >= 0 && index < extent) return;
  auto& s = *static_cast<Checker::State*>(checker);
  const auto& c = s.plan.sites[static_cast<std::size_t>(site)];
  tx::runtime::host::Finding f{tx::runtime::host::Kind::index_range,
                               -1,
                               index,
                               dim,
                               {},
                               s.now(thread, site),
                               false,
                               c.op == "T.store",
                               1};
  s.add(f);
}

extern "C" void tx_host_check_divzero(void* checker, std::int32_t site, std::int32_t thread) {
  auto& s = *static_cast<Checker::State*>(checker);
  tx::runtime::host::Finding f{
      tx::runtime::host::Kind::div_zero, -1, 0, 1, {}, s.now(thread, site), false, false, 1};
  s.add(f);
}

// Symmetric memory (check_access with flags & 2): the access's address, for
// the record across ranks; `ok`: the access was in bounds (else skipped).
extern "C" void tx_host_check_dist(void* checker, void* addr, std::int64_t count,
                                   std::int32_t elem_bytes, std::int32_t flags, std::int32_t site,
                                   std::int32_t thread, std::int32_t ok) {
  if (!ok) return;
  auto& s = *static_cast<Checker::State*>(checker);
  s.owner->dist_access(thread, addr, count, elem_bytes, flags & 1, site);
}

// T::dist::signal in a checked kernel: the store (or add), recorded with what
// it publishes.
extern "C" void tx_host_check_signal(void* checker, void* flag, std::uint32_t value,
                                     std::int32_t add, std::int32_t thread) {
  auto& s = *static_cast<Checker::State*>(checker);
  s.owner->dist_signal(thread, static_cast<std::uint32_t*>(flag), value, add != 0);
}
