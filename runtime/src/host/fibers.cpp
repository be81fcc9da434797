// The fiber schedule of the host fallback (see fibers.hpp): ucontext fibers,
// one per GPU thread of a CTA, switched cooperatively on one OS thread.
#include "fibers.hpp"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "async_model.hpp"
#include "tx/error.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define TX_FIBERS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TX_FIBERS_ASAN 1
#endif
#endif
#ifdef TX_FIBERS_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace tx::runtime::host {

namespace {

// An mbarrier as the host keeps it in its 8 bytes of shared memory: the
// arrival count of a phase, the arrivals still pending in the current one,
// the phase's parity, and the transaction bytes still expected (a signed
// count, as on the GPU). Zeroed shared memory is an uninitialized barrier.
struct HostMbarrier {
  std::uint32_t counts;  // expected (bits 0-13) | pending (14-27) | phase (28) | initialized (29)
  std::int32_t tx;
};
static_assert(sizeof(HostMbarrier) == 8);
constexpr std::uint32_t kCountMask = (1u << 14) - 1;
constexpr std::uint32_t kPhaseBit = 1u << 28, kInitBit = 1u << 29;
std::uint32_t expected_of(std::uint32_t c) { return c & kCountMask; }
std::uint32_t pending_of(std::uint32_t c) { return (c >> 14) & kCountMask; }

struct Fiber {
  ucontext_t context{};
  bool done = false;
  int site = -1;                 // where it waits, while it waits
  const void* object = nullptr;  // the mbarrier it waits on
  int parity = -1;
  int named = -1;  // the named barrier it waits on (bar.sync)
  // T::dist::wait_until: the flag it polls and the value it waits for.
  const std::uint32_t* flag = nullptr;
  std::uint32_t flag_value = 0;
};

// How long fibers may all poll flags that nothing sets before the launch
// fails: TX_DIST_TIMEOUT seconds (default 30).
double flag_timeout_seconds() {
  static const double s = [] {
    const char* v = std::getenv("TX_DIST_TIMEOUT");
    double t = v && *v ? std::atof(v) : 30.0;
    return t > 0 ? t : 30.0;
  }();
  return s;
}

// A named barrier (bar.sync / bar.arrive id, threads): arrivals of the
// current phase; a phase completes when `threads` have arrived.
struct NamedBarrier {
  int arrived = 0;
  int threads = 0;  // the count of the current phase (0: none open)
  std::uint64_t generation = 0;
  Checker::Clock acc, done;  // checked: the phase's releases, the last completed phase's
};

// What the host knows of an mbarrier besides its 8 bytes: the phases it
// completed, and, checked, the clocks its phases carry and who set it up.
struct BarrierInfo {
  std::uint64_t completed = 0;  // phases completed
  std::string name;             // "pipe_full[1]" (or the operand as written)
  Checker::Clock phase, done;   // the current phase's releases, the last completed phase's
  int agent = -1;               // the TMA unit completing copies on it
  int init_thread = -1;
  std::uint32_t init_clock = 0;
  int init_site = -1;
  std::int64_t expected = 0, delivered = 0;  // this phase's expect_tx and TMA bytes
  int tma_site = -1, expect_site = -1;
  bool late_use_reported = false;
};

// A warpgroup collective (wgmma, setmaxnreg: .sync.aligned): the threads
// that arrived, each one's operands.
struct Collective {
  int arrived = 0;
  std::uint64_t generation = 0;
  int site = -1;
  struct Part {
    void* d = nullptr;
    void* a = nullptr;
    int value = 0;
  };
  std::vector<Part> parts = std::vector<Part>(128);
  int agent = -1;  // wgmma: the warpgroup's unit
};
constexpr int kNamedBarriers = 16;

struct Group {
  int arrived = 0;
  std::uint64_t generation = 0;
  int finished = 0;          // threads of the group that returned
  Checker::Clock acc, done;  // checked: as NamedBarrier's
};

using FiberAsyncKind = lowering::FiberAsync;

class Scheduler;
thread_local Scheduler* current_scheduler = nullptr;

class Scheduler {
 public:
  Scheduler(FiberEntry fn, const FiberPlan& plan, void* const* args, void* scratch,
            const std::int64_t* grid, Checker* checker)
      : fn_(fn), plan_(plan), args_(args), scratch_(scratch), grid_(grid), chk_(checker) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    stack_ = (static_cast<std::size_t>(plan.stack_bytes) + page - 1) / page * page + page;
    mapped_ = stack_ * static_cast<std::size_t>(plan.block);
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED)
      fail("tx.host_fibers", plan.kernel, {},
           "cannot map " + std::to_string(mapped_) + " bytes of fiber stacks (" +
               std::to_string(plan.block) + " threads)");
    stacks_ = static_cast<char*>(p);
    // The lowest page of each stack faults instead of running into the next one.
    for (int t = 0; t < plan.block; ++t) mprotect(stacks_ + stack_ * t, page, PROT_NONE);
    fibers_.resize(static_cast<std::size_t>(plan.block));
    lanes_.resize(static_cast<std::size_t>(plan.block));
  }
  ~Scheduler() { munmap(stacks_, mapped_); }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void run_cta(std::int64_t cta, SourceLoc launch) {
    cta_ = cta;
    if (plan_.scratch_bytes > 0)
      std::memset(scratch_, 0, static_cast<std::size_t>(plan_.scratch_bytes));
    // The groups a barrier can span: a warp, a warpgroup, the CTA.
    groups_.clear();
    for (int size : {32, 128, plan_.block})
      groups_[size].assign(static_cast<std::size_t>((plan_.block + size - 1) / size), Group{});
    named_.assign(kNamedBarriers, NamedBarrier{});
    bars_.clear();
    const std::size_t wgs = static_cast<std::size_t>((plan_.block + 127) / 128);
    wgmma_.assign(wgs, Collective{});
    regs_.assign(wgs, 0);
    maxnreg_uses_.clear();
    if (chk_) chk_->begin_cta(cta);
    for (int t = 0; t < plan_.block; ++t) {
      Fiber& f = fibers_[static_cast<std::size_t>(t)];
      f = Fiber{};
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = stacks_ + stack_ * t;
      f.context.uc_stack.ss_size = stack_;
      f.context.uc_link = &main_;
      makecontext(&f.context, &Scheduler::fiber_main, 0);
    }
    Scheduler* outer = current_scheduler;
    current_scheduler = this;
    int live = plan_.block;
    while (live > 0) {
      const std::uint64_t before = progress_;
      for (int t = 0; t < plan_.block; ++t) {
        Fiber& f = fibers_[static_cast<std::size_t>(t)];
        if (f.done) continue;
        current_ = t;
        switch_to(f);
        current_ = -1;
        if (!error_.empty()) {
          current_scheduler = outer;
          const WaitSite& s = site(error_site_);
          fail(s.op, s.operand.empty() ? "kernel " + plan_.kernel : s.operand, s.loc, error_);
        }
        if (f.done) {
          --live;
          finished(t);
        }
      }
      if (live > 0 && progress_ == before) {
        // Threads that poll a flag wait for another rank (or CTA), which
        // runs on its own OS thread: not a deadlock until the timeout.
        bool polling = false;
        for (const Fiber& f : fibers_) polling = polling || (!f.done && f.flag);
        const auto now = std::chrono::steady_clock::now();
        if (polling && !stalled_since_) stalled_since_ = now;
        if (polling &&
            std::chrono::duration<double>(now - *stalled_since_).count() < flag_timeout_seconds()) {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
          continue;
        }
        current_scheduler = outer;
        deadlock(launch);
      }
      stalled_since_.reset();
    }
    current_scheduler = outer;
    if (chk_) at_exit();
  }

  Checker* checker() const { return chk_; }

  // --------------------------------------------- called from inside fibers
  void sync(int thread, int size, int where) {
    Group& g = group(size, thread / size);
    const std::uint64_t gen = g.generation;
    ++g.arrived;
    ++progress_;
    if (chk_) chk_->release(thread, g.acc);
    if (g.arrived >= live_in(size, thread / size)) {
      complete(g);
      if (chk_) chk_->acquire(thread, g.done);
      return;
    }
    while (g.generation == gen) yield(where, nullptr, -1);
    if (chk_) chk_->acquire(thread, g.done);
  }
  template <typename G>
  static void complete(G& g) {
    g.arrived = 0;
    ++g.generation;
    g.done = std::move(g.acc);
    g.acc.clear();
  }

  // bar.sync (wait) or bar.arrive: one arrival of the calling thread.
  // T::dist::wait_until: polls the flag (acquire), letting the CTA's other
  // threads run between polls.
  void wait_flag(const std::uint32_t* flag, std::uint32_t value, int where) {
    Fiber& f = fibers_[static_cast<std::size_t>(current_)];
    // x >= value modulo 2^32: counters may wrap.
    while (static_cast<std::int32_t>(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - value) < 0) {
      f.flag = flag;
      f.flag_value = value;
      yield(where, nullptr, -1);
    }
    f.flag = nullptr;
    ++progress_;
    // Checked: the acquire, across ranks (what the signal that reached
    // `value` published).
    if (chk_) chk_->dist_acquire(current_, flag, value);
  }

  void named_barrier(int id, int threads, bool wait, int where) {
    if (id < 0 || id >= kNamedBarriers)
      error(where, "named barrier id " + std::to_string(id) + " outside [0, 15]");
    NamedBarrier& b = named_[static_cast<std::size_t>(id)];
    if (b.arrived > 0 && b.threads != threads)
      error(where, "named barrier " + std::to_string(id) + ": this call counts " +
                       std::to_string(threads) + " threads, but the phase under way (" +
                       std::to_string(b.arrived) + " arrived) counts " + std::to_string(b.threads) +
                       " (on the GPU: undefined behaviour)");
    b.threads = threads;
    const std::uint64_t gen = b.generation;
    ++b.arrived;
    ++progress_;
    if (chk_) chk_->release(current_, b.acc);
    if (b.arrived >= threads) {
      complete(b);
      if (chk_ && wait) chk_->acquire(current_, b.done);
      return;
    }
    if (!wait) return;
    Fiber& f = fibers_[static_cast<std::size_t>(current_)];
    while (b.generation == gen) {
      f.named = id;
      yield(where, nullptr, -1);
    }
    f.named = -1;
    if (chk_) chk_->acquire(current_, b.done);
  }

  void mbarrier_init(void* bar, int count, int slot, std::int64_t index, int where) {
    if (count < 1 || static_cast<std::uint32_t>(count) > kCountMask)
      error(where, "mbarrier_init: count " + std::to_string(count) + " outside [1, " +
                       std::to_string(kCountMask) + "] (the host's limit)");
    HostMbarrier m{
        static_cast<std::uint32_t>(count) | static_cast<std::uint32_t>(count) << 14 | kInitBit, 0};
    std::memcpy(bar, &m, sizeof m);
    BarrierInfo& b = bars_[bar] = BarrierInfo{};
    b.name = barrier_name(bar, slot, index, where);
    if (chk_) {
      b.init_thread = current_;
      b.init_clock = chk_->clock_of(current_);
      b.init_site = where;
      chk_->tick(current_);
    }
    ++progress_;
  }
  void mbarrier_arrive(void* bar, int where) {
    HostMbarrier m = load(bar, where, "mbarrier_arrive");
    BarrierInfo& b = info(bar, where);
    if (chk_) chk_->release(current_, b.phase);
    // pending >= 1 here: the arrive that completes a phase re-arms the count.
    const std::uint32_t pending = pending_of(m.counts);
    m.counts = (m.counts & ~(kCountMask << 14)) | (pending - 1) << 14;
    complete_if_done(m, b);
    std::memcpy(bar, &m, sizeof m);
    ++progress_;
  }
  void mbarrier_expect_tx(void* bar, int bytes, int where) {
    HostMbarrier m = load(bar, where, "mbarrier_expect_tx");
    BarrierInfo& b = info(bar, where);
    m.tx += bytes;
    b.expected += bytes;
    b.expect_site = where;
    std::memcpy(bar, &m, sizeof m);
    ++progress_;
  }
  void mbarrier_wait(void* bar, int parity, int where) {
    for (;;) {
      HostMbarrier m = load(bar, where, "mbarrier_wait");
      // The phase of `parity` has completed once the current phase's parity differs.
      if (((m.counts & kPhaseBit) != 0) != (parity != 0)) {
        BarrierInfo& b = info(bar, where);
        // What the completed phase carries (none before the first: parity 1
        // passes at once, as on the GPU).
        if (chk_ && b.completed > 0) chk_->acquire(current_, b.done);
        return;
      }
      yield(where, bar, parity);
    }
  }

  // ------------------------------------------- the model of sm_90's async instructions
  // cp.async.bulk.tensor: the box, now, from global into shared memory
  // (out-of-bounds elements zero), swizzled; then complete_tx of the box's
  // bytes on the mbarrier. Checked, the writes are the barrier's TMA unit's,
  // which knows what the issuing thread knew, and the phase it completes
  // carries them to its waiters.
  void tma_load(int thread, char* smem, int smem_slot, std::int64_t smem_offset, void* bar,
                int bar_slot, std::int64_t bar_index, const char* global, int global_slot, int rank,
                const std::int64_t* dims, const std::int64_t* box, const std::int64_t* coords,
                int esize, int swizzle, int where) {
    HostMbarrier m = load(bar, where, "tma_load");
    BarrierInfo& b = info(bar, where);
    if (b.name.empty() || b.name.find('[') == std::string::npos)
      b.name = barrier_name(bar, bar_slot, bar_index, where);
    int agent = -1;
    if (chk_) {
      if (b.agent < 0) b.agent = chk_->agent("the TMA unit of " + b.name);
      agent = b.agent;
      chk_->join(agent, thread);
      chk_->tick(agent);
    }
    const auto phase = static_cast<std::uint32_t>(b.completed);
    std::int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= box[d];
    std::vector<std::int64_t> at(static_cast<std::size_t>(rank), 0);
    for (std::int64_t L = 0; L < n; ++L) {
      // The box element's coordinates (innermost last), its global index.
      std::int64_t rest = L, gidx = 0, stride = 1;
      bool inside = true;
      for (int d = rank - 1; d >= 0; --d) {
        const std::int64_t i = rest % box[d];
        rest /= box[d];
        const std::int64_t g = coords[d] + i;
        inside = inside && g >= 0 && g < dims[d];
        gidx += g * stride;
        stride *= dims[d];
      }
      const std::int64_t byte = swizzle_byte((smem_offset + L) * esize, swizzle);
      if (chk_ && !chk_->access(agent, smem_slot, byte / esize, true, where, true, phase, thread))
        continue;
      if (inside && chk_) inside = chk_->access(agent, global_slot, gidx, false, where, true);
      if (inside)
        std::memcpy(smem + byte, global + gidx * esize, static_cast<std::size_t>(esize));
      else
        std::memset(smem + byte, 0, static_cast<std::size_t>(esize));
    }
    // complete_tx: the whole box counts, out-of-bounds parts too.
    const std::int64_t bytes = n * esize;
    m.tx -= static_cast<std::int32_t>(bytes);
    b.delivered += bytes;
    b.tma_site = where;
    if (chk_) chk_->release(agent, b.phase);
    complete_if_done(m, b);
    std::memcpy(bar, &m, sizeof m);
    ++progress_;
  }

  // wgmma.mma_async: a warpgroup collective. Each thread leaves its D (and
  // register A) here; the last to arrive runs the 64 x N x K product for the
  // whole warpgroup. Checked, the operands are read by the warpgroup's wgmma
  // unit, which knows what every issuing thread knew; each thread's D is the
  // unit's until a wgmma_wait retires the group.
  void wgmma(int thread, const std::int64_t* info, void* d, int d_slot, void* a, int a_slot,
             std::int64_t a_offset, void* b, int b_slot, std::int64_t b_offset, int scale_d,
             int where) {
    const int w = thread / 128;
    Collective& c = wgmma_[static_cast<std::size_t>(w)];
    if (c.arrived > 0 && c.site != where)
      error(where, "wgmma: threads of warpgroup " + std::to_string(w) +
                       " issue different wgmma instructions at once (" + site(c.site).op + " at " +
                       site(c.site).loc.str() +
                       " and this one): wgmma is .sync.aligned, the "
                       "whole warpgroup executes the same instruction together");
    c.site = where;
    c.parts[static_cast<std::size_t>(thread % 128)] = {d, a, scale_d};
    const std::uint64_t gen = c.generation;
    ++c.arrived;
    ++progress_;
    if (c.arrived < live_in(128, w)) {
      while (c.generation == gen) yield(where, nullptr, -1);
      return;
    }
    run_wgmma(w, c, info, d_slot, a, a_slot, a_offset, b, b_slot, b_offset, where);
    c.arrived = 0;
    ++c.generation;
  }

  // tx_fiber_async: the checked mode's ordering instructions.
  void async(int thread, FiberAsyncKind kind, int a, int b, int where) {
    switch (kind) {
      case FiberAsyncKind::fence_proxy_async:
        chk_->fence_proxy(thread);
        return;
      case FiberAsyncKind::wgmma_fence:
        return;
      case FiberAsyncKind::wgmma_commit:
        chk_->wgmma_commit(thread);
        return;
      case FiberAsyncKind::wgmma_wait:
        chk_->wgmma_wait(thread, a);
        return;
      case FiberAsyncKind::setmaxnreg:
        setmaxnreg(thread, a, b != 0, where);
        return;
    }
  }
  std::int64_t shfl_xor(int thread, std::int64_t bits, int mask, int where) {
    lanes_[static_cast<std::size_t>(thread)] = bits;
    sync(thread, 32, where);
    const int partner = (thread & ~31) | ((thread & 31) ^ (mask & 31));
    const std::int64_t got =
        partner < plan_.block ? lanes_[static_cast<std::size_t>(partner)] : bits;
    // No lane writes its slot again before every lane has read.
    sync(thread, 32, where);
    return got;
  }

 private:
  static void fiber_main() {
    Scheduler* s = current_scheduler;
#ifdef TX_FIBERS_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &s->main_bottom_, &s->main_size_);
#endif
    const int t = s->current_;
    s->fn_(s->args_, s->cta_, s->scratch_, s, s->grid_, t);
    s->fibers_[static_cast<std::size_t>(t)].done = true;
    ++s->progress_;
#ifdef TX_FIBERS_ASAN
    __sanitizer_start_switch_fiber(nullptr, s->main_bottom_, s->main_size_);
#endif
    // Returning resumes main_ (uc_link).
  }

  void switch_to(Fiber& f) {
#ifdef TX_FIBERS_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.context.uc_stack.ss_sp, f.context.uc_stack.ss_size);
#endif
    swapcontext(&main_, &f.context);
#ifdef TX_FIBERS_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  }

  void yield(int where, const void* object, int parity) {
    Fiber& f = fibers_[static_cast<std::size_t>(current_)];
    f.site = where;
    f.object = object;
    f.parity = parity;
#ifdef TX_FIBERS_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, main_bottom_, main_size_);
#endif
    swapcontext(&f.context, &main_);
#ifdef TX_FIBERS_ASAN
    __sanitizer_finish_switch_fiber(fake, &main_bottom_, &main_size_);
#endif
    f.site = -1;
    f.object = nullptr;
  }

  // A misused primitive: the launch fails with `what`; this fiber never resumes.
  [[noreturn]] void error(int where, std::string what) {
    error_ = std::move(what);
    error_site_ = where;
    for (;;) yield(where, nullptr, -1);
  }

  HostMbarrier load(void* bar, int where, const char* op) {
    HostMbarrier m;
    std::memcpy(&m, bar, sizeof m);
    if (!(m.counts & kInitBit))
      error(where, std::string(op) + ": the mbarrier at shared byte " +
                       std::to_string(static_cast<char*>(bar) - static_cast<char*>(scratch_)) +
                       " was never initialized (mbarrier_init) in this CTA");
    return m;
  }
  void complete_if_done(HostMbarrier& m, BarrierInfo& b) {
    if (pending_of(m.counts) != 0 || m.tx != 0) return;
    const std::uint32_t expected = expected_of(m.counts);
    m.counts = (expected | expected << 14 | kInitBit) | ((m.counts & kPhaseBit) ^ kPhaseBit);
    ++b.completed;
    b.expected = b.delivered = 0;
    if (chk_) {
      b.done = std::move(b.phase);
      b.phase.clear();
    }
  }

  // The host's record of an mbarrier; checked, a use must be ordered after
  // the barrier's initialization (a barrier between them, as on the GPU).
  BarrierInfo& info(void* bar, int where) {
    BarrierInfo& b = bars_[bar];
    if (chk_ && b.init_thread >= 0 && b.init_thread != current_ &&
        chk_->seen(current_, b.init_thread) < b.init_clock && !b.late_use_reported) {
      b.late_use_reported = true;
      chk_->problem(b.name,
                    "thread " + std::to_string(current_) + " uses mbarrier " + b.name +
                        " before its initialization by thread " + std::to_string(b.init_thread) +
                        " (" + site(b.init_site).op + " at " + site(b.init_site).loc.str() +
                        ") is visible to it: no barrier lies between the two (T::cuda::cta_sync "
                        "after the mbarrier_init calls, before any thread uses them)",
                    where);
    }
    return b;
  }
  std::string barrier_name(void* bar, int slot, std::int64_t index, int where) const {
    if (chk_ && slot >= 0) return chk_->element_name(slot, index);
    const WaitSite& s = site(where);
    return (s.operand.empty() ? std::string("mbarrier") : s.operand) + " (shared byte " +
           std::to_string(static_cast<char*>(bar) - static_cast<char*>(scratch_)) + ")";
  }

  void run_wgmma(int w, Collective& c, const std::int64_t* info, int d_slot, void* a, int a_slot,
                 std::int64_t a_offset, void* b, int b_slot, std::int64_t b_offset, int where) {
    const std::int64_t N = info[0], K = info[1], ta = info[2], tb = info[3];
    const bool a_regs = info[4] != 0;
    const std::int64_t R = info[13];
    const std::int64_t* d_regs = info + 14;
    const std::int64_t* a_words = info + 14 + R;
    int unit = -1;
    std::uint32_t clock = 0;
    if (chk_) {
      if (c.agent < 0) c.agent = chk_->agent("the wgmma unit of warpgroup " + std::to_string(w));
      unit = c.agent;
      for (int t = 0; t < 128 && w * 128 + t < plan_.block; ++t)
        if (!fibers_[static_cast<std::size_t>(w * 128 + t)].done) chk_->join(unit, w * 128 + t);
      chk_->tick(unit);
      clock = chk_->clock_of(unit);
    }
    // The operands as floats: A (64 x K), B (K x N).
    std::vector<float> A(static_cast<std::size_t>(64 * K)), Bm(static_cast<std::size_t>(K * N));
    auto read = [&](void* base, int slot, const WgmmaDesc& desc, std::int64_t type, std::int64_t u,
                    std::int64_t v) {
      const std::int64_t byte = wgmma_operand_byte(desc, u, v);
      if (chk_ && !chk_->access(unit, slot, byte / desc.elem_bytes, false, where, true))
        return 0.0f;
      return element_as_float(static_cast<char*>(base) + byte, type);
    };
    WgmmaDesc db{b_offset,      info[9],          info[10], static_cast<int>(info[11]),
                 info[12] != 0, element_bytes(tb)};
    for (std::int64_t k = 0; k < K; ++k)
      for (std::int64_t n = 0; n < N; ++n)
        Bm[static_cast<std::size_t>(k * N + n)] = read(b, b_slot, db, tb, n, k);
    if (!a_regs) {
      WgmmaDesc da{a_offset,     info[5],          info[6], static_cast<int>(info[7]),
                   info[8] != 0, element_bytes(ta)};
      for (std::int64_t m = 0; m < 64; ++m)
        for (std::int64_t k = 0; k < K; ++k)
          A[static_cast<std::size_t>(m * K + k)] = read(a, a_slot, da, ta, m, k);
    } else {
      // wgmma's register A: thread 32 w + 4 g + t holds rows 16 w + g (+ 8)
      // in words 0, 2 (1, 3), E elements each, K columns 4 E apart.
      const std::int64_t E = element_bytes(ta) == 1 ? 4 : 2, es = element_bytes(ta);
      for (int t = 0; t < 128; ++t) {
        const char* regs = static_cast<const char*>(c.parts[static_cast<std::size_t>(t)].a);
        if (!regs) continue;
        const int wr = t / 32, g = (t % 32) / 4, q = t % 4;
        for (int j = 0; j < 4; ++j) {
          const std::int64_t row = 16 * wr + g + 8 * (j % 2);
          for (std::int64_t el = 0; el < E; ++el) {
            const std::int64_t col = (j / 2) * 4 * E + q * E + el;
            A[static_cast<std::size_t>(row * K + col)] =
                element_as_float(regs + (a_words[j] + el) * es, ta);
          }
        }
      }
    }
    // Each thread's accumulator registers (frag::wgmma_c).
    std::int64_t lo = R > 0 ? d_regs[0] : 0, hi = lo;
    for (std::int64_t i = 0; i < R; ++i)
      lo = std::min(lo, d_regs[i]), hi = std::max(hi, d_regs[i] + 1);
    for (int t = 0; t < 128; ++t) {
      const Collective::Part& p = c.parts[static_cast<std::size_t>(t)];
      if (!p.d || fibers_[static_cast<std::size_t>(w * 128 + t)].done) continue;
      auto* D = static_cast<float*>(p.d);
      const int wr = t / 32, g = (t % 32) / 4, q = t % 4;
      for (std::int64_t i = 0; i < R; ++i) {
        const std::int64_t row = 16 * wr + g + 8 * ((i / 2) % 2);
        const std::int64_t col = 8 * (i / 4) + 2 * q + i % 2;
        float sum = 0.0f;
        for (std::int64_t k = 0; k < K; ++k)
          sum +=
              A[static_cast<std::size_t>(row * K + k)] * Bm[static_cast<std::size_t>(k * N + col)];
        float& out = D[d_regs[i]];
        out = p.value ? out + sum : sum;
      }
      if (chk_) chk_->wgmma_issue(w * 128 + t, unit, clock, d_slot, lo, hi, where);
      c.parts[static_cast<std::size_t>(t)] = {};
    }
  }

  // setmaxnreg: every thread of a warpgroup executes it (.sync.aligned), and
  // the warpgroups' counts must fit the SM's 65536 registers. Checked at the
  // CTA's end (at_exit), not by waiting here: on the GPU a partial
  // warpgroup or an increase beyond the pool is undefined, and an H100 runs
  // both without hanging (docs/reliability.md).
  void setmaxnreg(int thread, int count, bool increase, int where) {
    const int w = thread / 128;
    auto& use = maxnreg_uses_[{w, where}];
    ++use.threads;
    use.count = count;
    use.increase = increase;
    regs_[static_cast<std::size_t>(w)] = count;
    ++progress_;
  }

  // The registers the warpgroups hold (those that have not reallocated:
  // what the launch gave them), and the counts in words.
  std::int64_t registers(std::string* parts) const {
    const int initial = std::min(255, 65536 / std::max(plan_.block, 1) / 8 * 8);
    std::int64_t total = 0;
    for (std::size_t i = 0; i < regs_.size(); ++i) {
      const int r = regs_[i] ? regs_[i] : initial;
      const int threads =
          std::min(plan_.block, static_cast<int>(i + 1) * 128) - static_cast<int>(i) * 128;
      total += std::int64_t{r} * threads;
      *parts += (i ? ", " : "") + std::string("warpgroup ") + std::to_string(i) + ": " +
                std::to_string(r) + (regs_[i] ? "" : " (launch)");
    }
    return total;
  }

  // The CTA returned: each mbarrier must be between phases (its arrivals
  // pair with its count, its transaction bytes with its copies); each
  // setmaxnreg was executed by whole warpgroups; the counts fit.
  void at_exit() {
    for (const auto& [key, use] : maxnreg_uses_) {
      const auto [w, where] = key;
      const int members = std::min(plan_.block, (w + 1) * 128) - w * 128;
      if (use.threads % members != 0)
        chk_->problem("",
                      "setmaxnreg " + std::to_string(use.count) + " was executed by " +
                          std::to_string(use.threads % members) + " of warpgroup " +
                          std::to_string(w) + "'s " + std::to_string(members) +
                          " threads: it is .sync.aligned, every thread of the warpgroup "
                          "executes it together (PTX: undefined otherwise)",
                      where);
      if (use.count < 24 || use.count > 256 || use.count % 8 != 0)
        chk_->problem("",
                      "setmaxnreg " + std::to_string(use.count) +
                          ": the count is a multiple of 8 in [24, 256]",
                      where);
    }
    std::string parts;
    const std::int64_t total = registers(&parts);
    if (total > 65536)
      for (const auto& [key, use] : maxnreg_uses_)
        if (use.increase) {
          chk_->problem("",
                        "setmaxnreg.inc to " + std::to_string(use.count) + " by warpgroup " +
                            std::to_string(key.first) + ": the warpgroups hold " +
                            std::to_string(total) + " registers (" + parts +
                            " per thread), more than the SM's 65536 (PTX: undefined; the "
                            "increase may wait forever for registers no one frees)",
                        key.second);
          break;
        }
    for (auto& [bar, b] : bars_) {
      HostMbarrier m;
      std::memcpy(&m, bar, sizeof m);
      if (!(m.counts & kInitBit)) continue;
      const std::uint32_t pending = pending_of(m.counts), expected = expected_of(m.counts);
      if (pending == expected && m.tx == 0) continue;
      chk_->problem(b.name,
                    "mbarrier " + b.name + " ends CTA " + std::to_string(cta_) +
                        " in the middle of phase " + std::to_string(b.completed) + ": " +
                        std::to_string(expected - pending) + " of its " + std::to_string(expected) +
                        " arrivals came" +
                        (m.tx != 0 ? ", " + std::to_string(m.tx) + " transaction bytes pending"
                                   : std::string()) +
                        " -- its arrivals do not pair with its count (more arrivals than "
                        "mbarrier_init's count, or fewer)",
                    b.init_site);
    }
  }

  Group& group(int size, int index) { return groups_.at(size)[static_cast<std::size_t>(index)]; }
  int live_in(int size, int index) {
    const int members = std::min(plan_.block, (index + 1) * size) - index * size;
    return members - group(size, index).finished;
  }
  // A returned thread counts as arrived at every barrier of its groups.
  void finished(int t) {
    for (auto& [size, v] : groups_) {
      Group& g = group(size, t / size);
      ++g.finished;
      if (g.arrived > 0 && g.arrived >= live_in(size, t / size)) {
        complete(g);
        ++progress_;
      }
    }
  }

  const WaitSite& site(int where) const {
    static const WaitSite unknown{"tx.host_fibers", "", {}};
    return where >= 0 && static_cast<std::size_t>(where) < plan_.sites.size()
               ? plan_.sites[static_cast<std::size_t>(where)]
               : unknown;
  }

  [[noreturn]] void deadlock(SourceLoc launch) {
    // Threads by where they wait, as ranges: "threads 0-127: ...".
    std::map<std::tuple<int, const void*, int, int>, std::vector<int>> by_site;
    for (int t = 0; t < plan_.block; ++t) {
      const Fiber& f = fibers_[static_cast<std::size_t>(t)];
      if (!f.done) by_site[{f.site, f.object, f.parity, f.named}].push_back(t);
    }
    std::ostringstream os;
    os << "deadlock in CTA " << cta_ << ": every thread that has not returned waits, and nothing "
       << "it waits for can happen (on the GPU the kernel hangs):";
    int first_site = -1;
    for (const auto& [key, threads] : by_site) {
      const auto& [where, object, parity, named] = key;
      if (first_site < 0) first_site = where;
      os << "\n  threads ";
      for (std::size_t i = 0; i < threads.size();) {
        std::size_t j = i;
        while (j + 1 < threads.size() && threads[j + 1] == threads[j] + 1) ++j;
        if (i) os << ",";
        os << threads[i];
        if (j > i) os << "-" << threads[j];
        i = j + 1;
      }
      const WaitSite& s = site(where);
      os << ": " << s.op;
      if (!s.operand.empty()) os << "(" << s.operand << ")";
      if (const Fiber& f0 = fibers_[static_cast<std::size_t>(threads.front())]; f0.flag)
        os << " for a value >= " << f0.flag_value << "; the flag holds "
           << __atomic_load_n(f0.flag, __ATOMIC_ACQUIRE) << " and nothing changed it for "
           << flag_timeout_seconds()
           << " s (TX_DIST_TIMEOUT): a missing T::dist::signal, a wait for a value no rank "
              "signals, or a peer that failed";
      if (object) {
        HostMbarrier m;
        std::memcpy(&m, object, sizeof m);
        auto it = bars_.find(const_cast<void*>(object));
        const BarrierInfo* b = it != bars_.end() ? &it->second : nullptr;
        os << " on mbarrier "
           << (b && !b->name.empty()
                   ? b->name
                   : "at shared byte " + std::to_string(static_cast<const char*>(object) -
                                                        static_cast<const char*>(scratch_)))
           << " for the phase of parity " << parity << " (its current phase: "
           << (b ? "phase " + std::to_string(b->completed) + ", " : std::string()) << "parity "
           << ((m.counts & kPhaseBit) ? 1 : 0) << ", " << pending_of(m.counts) << " of "
           << expected_of(m.counts) << " arrivals pending, " << m.tx
           << " transaction bytes pending";
        if (b && b->completed >= 2 && static_cast<int>(b->completed % 2) == parity)
          os << "; it completed " << b->completed << " phases already: if these threads mean "
             << "phase " << b->completed - 2 << ", the barrier ran past it before they waited "
             << "(the side that completes it did not wait for these threads' release, or got "
                "more arrivals than its count)";
        if (b && (b->expected != 0 || b->delivered != 0))
          os << "; this phase's expect_tx announced " << b->expected
             << " bytes and its TMA copies delivered " << b->delivered
             << (b->expected != b->delivered ? ": they do not match, so the phase never completes"
                                             : "");
        os << ")";
      }
      if (s.op.rfind("T.ptx.wgmma.m", 0) == 0)
        os << " (wgmma is .sync.aligned: these threads wait for the rest of their warpgroup)";
      if (named >= 0) {
        const NamedBarrier& b = named_[static_cast<std::size_t>(named)];
        os << " on named barrier " << named << " (" << b.arrived << " of " << b.threads
           << " threads arrived)";
      }
      if (s.loc.line > 0) os << " at " << s.loc.str();
    }
    const WaitSite& s = site(first_site);
    fail(s.op, s.operand.empty() ? "kernel " + plan_.kernel : s.operand,
         s.loc.line > 0 ? s.loc : launch, os.str());
  }

  FiberEntry fn_;
  const FiberPlan& plan_;
  std::unordered_map<void*, BarrierInfo> bars_;
  std::vector<Collective> wgmma_;
  std::vector<int> regs_;  // setmaxnreg's count per warpgroup (0: the launch's)
  struct MaxnregUse {
    int threads = 0, count = 0;
    bool increase = false;
  };
  std::map<std::pair<int, int>, MaxnregUse> maxnreg_uses_;  // (warpgroup, site)
  void* const* args_;
  void* scratch_;
  const std::int64_t* grid_;
  Checker* chk_ = nullptr;
  std::int64_t cta_ = 0;
  char* stacks_ = nullptr;
  std::size_t stack_ = 0, mapped_ = 0;
  std::vector<Fiber> fibers_;
  std::vector<std::int64_t> lanes_;
  std::map<int, std::vector<Group>> groups_;
  std::vector<NamedBarrier> named_;
  ucontext_t main_{};
  int current_ = -1;
  std::uint64_t progress_ = 0;
  // Since when every live fiber has been waiting, some of them on flags.
  std::optional<std::chrono::steady_clock::time_point> stalled_since_;
  std::string error_;
  int error_site_ = -1;
#ifdef TX_FIBERS_ASAN
  const void* main_bottom_ = nullptr;
  std::size_t main_size_ = 0;
#endif
};

Scheduler* self(void* fibers) { return static_cast<Scheduler*>(fibers); }

}  // namespace

void run_fiber_ctas(FiberEntry fn, const FiberPlan& plan, void* const* args, std::int64_t first,
                    std::int64_t end, void* scratch, const std::int64_t* grid, SourceLoc launch,
                    Checker* checker) {
  Scheduler s(fn, plan, args, scratch, grid, checker);
  for (std::int64_t cta = first; cta < end; ++cta) s.run_cta(cta, launch);
}

}  // namespace tx::runtime::host

using tx::runtime::host::self;

extern "C" void tx_fiber_sync(void* fibers, std::int32_t thread, std::int32_t group,
                              std::int32_t site) {
  self(fibers)->sync(thread, group, site);
}
extern "C" void* tx_fiber_checker(void* fibers) {
  tx::runtime::host::Checker* c = self(fibers)->checker();
  return c ? &c->state() : nullptr;
}
extern "C" void tx_fiber_mbarrier_init(void* fibers, void* bar, std::int32_t count,
                                       std::int32_t slot, std::int64_t index, std::int32_t site) {
  self(fibers)->mbarrier_init(bar, count, slot, index, site);
}
extern "C" void tx_fiber_async(void* fibers, std::int32_t thread, std::int32_t kind, std::int32_t a,
                               std::int32_t b, std::int32_t site) {
  self(fibers)->async(thread, static_cast<tx::runtime::host::FiberAsyncKind>(kind), a, b, site);
}
extern "C" void tx_fiber_tma_load(void* fibers, std::int32_t thread, void* smem,
                                  std::int32_t smem_slot, std::int64_t smem_offset, void* bar,
                                  std::int32_t bar_slot, std::int64_t bar_index, const void* global,
                                  std::int32_t global_slot, std::int32_t rank,
                                  const std::int64_t* dims, const std::int64_t* box,
                                  const std::int64_t* coords, std::int32_t elem_bytes,
                                  std::int32_t swizzle, std::int32_t site) {
  self(fibers)->tma_load(thread, static_cast<char*>(smem), smem_slot, smem_offset, bar, bar_slot,
                         bar_index, static_cast<const char*>(global), global_slot, rank, dims, box,
                         coords, elem_bytes, swizzle, site);
}
extern "C" void tx_fiber_wgmma(void* fibers, std::int32_t thread, const std::int64_t* info, void* d,
                               std::int32_t d_slot, void* a, std::int32_t a_slot,
                               std::int64_t a_offset, void* b, std::int32_t b_slot,
                               std::int64_t b_offset, std::int32_t scale_d, std::int32_t site) {
  self(fibers)->wgmma(thread, info, d, d_slot, a, a_slot, a_offset, b, b_slot, b_offset, scale_d,
                      site);
}
extern "C" void tx_fiber_mbarrier_arrive(void* fibers, void* bar, std::int32_t site) {
  self(fibers)->mbarrier_arrive(bar, site);
}
extern "C" void tx_fiber_mbarrier_expect_tx(void* fibers, void* bar, std::int32_t bytes,
                                            std::int32_t site) {
  self(fibers)->mbarrier_expect_tx(bar, bytes, site);
}
extern "C" void tx_fiber_mbarrier_wait(void* fibers, void* bar, std::int32_t parity,
                                       std::int32_t site) {
  self(fibers)->mbarrier_wait(bar, parity, site);
}
extern "C" void tx_fiber_wait_flag(void* fibers, void* flag, std::int32_t value,
                                   std::int32_t site) {
  self(fibers)->wait_flag(static_cast<const std::uint32_t*>(flag),
                          static_cast<std::uint32_t>(value), site);
}
extern "C" void tx_fiber_named_barrier(void* fibers, std::int32_t id, std::int32_t threads,
                                       std::int32_t wait, std::int32_t site) {
  self(fibers)->named_barrier(id, threads, wait != 0, site);
}
extern "C" std::int64_t tx_fiber_shfl_xor(void* fibers, std::int32_t thread, std::int64_t bits,
                                          std::int32_t mask, std::int32_t site) {
  return self(fibers)->shfl_xor(thread, bits, mask, site);
}
