// The fiber schedule of the host fallback (see fibers.hpp): ucontext fibers,
// one per GPU thread of a CTA, switched cooperatively on one OS thread.
#include "fibers.hpp"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>

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
};

// A named barrier (bar.sync / bar.arrive id, threads): arrivals of the
// current phase; a phase completes when `threads` have arrived.
struct NamedBarrier {
  int arrived = 0;
  int threads = 0;  // the count of the current phase (0: none open)
  std::uint64_t generation = 0;
};
constexpr int kNamedBarriers = 16;

struct Group {
  int arrived = 0;
  std::uint64_t generation = 0;
  int finished = 0;  // threads of the group that returned
};

class Scheduler;
thread_local Scheduler* current_scheduler = nullptr;

class Scheduler {
 public:
  Scheduler(FiberEntry fn, const FiberPlan& plan, void* const* args, void* scratch,
            const std::int64_t* grid)
      : fn_(fn), plan_(plan), args_(args), scratch_(scratch), grid_(grid) {
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
        current_scheduler = outer;
        deadlock(launch);
      }
    }
    current_scheduler = outer;
  }

  // --------------------------------------------- called from inside fibers
  void sync(int thread, int size, int where) {
    Group& g = group(size, thread / size);
    const std::uint64_t gen = g.generation;
    ++g.arrived;
    ++progress_;
    if (g.arrived >= live_in(size, thread / size)) {
      g.arrived = 0;
      ++g.generation;
      return;
    }
    while (g.generation == gen) yield(where, nullptr, -1);
  }

  // bar.sync (wait) or bar.arrive: one arrival of the calling thread.
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
    if (b.arrived >= threads) {
      b.arrived = 0;
      ++b.generation;
      return;
    }
    if (!wait) return;
    Fiber& f = fibers_[static_cast<std::size_t>(current_)];
    while (b.generation == gen) {
      f.named = id;
      yield(where, nullptr, -1);
    }
    f.named = -1;
  }

  void mbarrier_init(void* bar, int count, int where) {
    if (count < 1 || static_cast<std::uint32_t>(count) > kCountMask)
      error(where, "mbarrier_init: count " + std::to_string(count) + " outside [1, " +
                       std::to_string(kCountMask) + "] (the host's limit)");
    HostMbarrier m{
        static_cast<std::uint32_t>(count) | static_cast<std::uint32_t>(count) << 14 | kInitBit, 0};
    std::memcpy(bar, &m, sizeof m);
    ++progress_;
  }
  void mbarrier_arrive(void* bar, int where) {
    HostMbarrier m = load(bar, where, "mbarrier_arrive");
    // pending >= 1 here: the arrive that completes a phase re-arms the count.
    const std::uint32_t pending = pending_of(m.counts);
    m.counts = (m.counts & ~(kCountMask << 14)) | (pending - 1) << 14;
    complete_if_done(m);
    std::memcpy(bar, &m, sizeof m);
    ++progress_;
  }
  void mbarrier_expect_tx(void* bar, int bytes, int where) {
    HostMbarrier m = load(bar, where, "mbarrier_expect_tx");
    m.tx += bytes;
    std::memcpy(bar, &m, sizeof m);
    ++progress_;
  }
  void mbarrier_wait(void* bar, int parity, int where) {
    for (;;) {
      HostMbarrier m = load(bar, where, "mbarrier_wait");
      // The phase of `parity` has completed once the current phase's parity differs.
      if (((m.counts & kPhaseBit) != 0) != (parity != 0)) return;
      yield(where, bar, parity);
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
  static void complete_if_done(HostMbarrier& m) {
    if (pending_of(m.counts) != 0 || m.tx != 0) return;
    const std::uint32_t expected = expected_of(m.counts);
    m.counts = (expected | expected << 14 | kInitBit) | ((m.counts & kPhaseBit) ^ kPhaseBit);
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
        g.arrived = 0;
        ++g.generation;
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
      if (object) {
        HostMbarrier m;
        std::memcpy(&m, object, sizeof m);
        os << " on the mbarrier at shared byte "
           << static_cast<const char*>(object) - static_cast<const char*>(scratch_)
           << " for the phase of parity " << parity << " (its current phase: parity "
           << ((m.counts & kPhaseBit) ? 1 : 0) << ", " << pending_of(m.counts) << " of "
           << expected_of(m.counts) << " arrivals pending, " << m.tx
           << " transaction bytes pending)";
      }
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
  void* const* args_;
  void* scratch_;
  const std::int64_t* grid_;
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
                    std::int64_t end, void* scratch, const std::int64_t* grid, SourceLoc launch) {
  Scheduler s(fn, plan, args, scratch, grid);
  for (std::int64_t cta = first; cta < end; ++cta) s.run_cta(cta, launch);
}

}  // namespace tx::runtime::host

using tx::runtime::host::self;

extern "C" void tx_fiber_sync(void* fibers, std::int32_t thread, std::int32_t group,
                              std::int32_t site) {
  self(fibers)->sync(thread, group, site);
}
extern "C" void tx_fiber_mbarrier_init(void* fibers, void* bar, std::int32_t count,
                                       std::int32_t site) {
  self(fibers)->mbarrier_init(bar, count, site);
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
extern "C" void tx_fiber_named_barrier(void* fibers, std::int32_t id, std::int32_t threads,
                                       std::int32_t wait, std::int32_t site) {
  self(fibers)->named_barrier(id, threads, wait != 0, site);
}
extern "C" std::int64_t tx_fiber_shfl_xor(void* fibers, std::int32_t thread, std::int64_t bits,
                                          std::int32_t mask, std::int32_t site) {
  return self(fibers)->shfl_xor(thread, bits, mask, site);
}
