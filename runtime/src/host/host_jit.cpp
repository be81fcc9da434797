// The host fallback: tx::runtime::host_compile / host_jit_available.
//
//   host form (lowering::lower for Target::host(): the lowered IR through
//   instrument_checks, isolate_shuffles, sink_local_allocations, split_regions)
//              -> codegen/llvm (emit_llvm) -> LLVM O2 without automatic
//                 unrolling (vectorizes the thread loops); over 6,000
//                 instructions, unoptimized and through the fast code
//                 generator instead (linear in the kernel's size)
//              -> an object file in memory -> ORC LLJIT links it (a
//                 JITDylib per kernel) -> a function that runs a range of CTAs
//
// Kernels that synchronize through mbarriers (pipelines, warp
// specialization) take the fiber schedule instead (fibers.hpp): their host
// form is the lowered body -> emit_llvm_fibers -> a function that runs one
// thread, which the fiber scheduler runs once per thread of each CTA,
// switching at every wait.
//
// One LLJIT serves the process (a function-local static, never destroyed so
// that no kernel outlives it at exit). Compiles are serialized by one mutex
// and cached in memory under the GPU cache's key function (kernel_cache_key:
// SHA-256 of the host form's structural hash, tx and IR versions, the target
// -- here the host's triple, CPU and CPU features -- the compiler version --
// here LLVM's -- the launch shape the host code is specialized for, and a
// fingerprint of the host code generator's sources), so compiling the same
// kernel twice JITs once. The objects are also cached on disk under the same
// key (DiskCache, the cubins' folder): a new process links a kernel that an
// earlier one compiled. A launch runs the CTAs
// in order, or splits the grid into contiguous ranges over a few std::threads
// when there is enough work; CTAs never share state, so the split changes no
// result.
//
// Environment: TX_DEBUG_IR=1 prints the host form after each host pass (where
// lower() did not build it already); TX_HOST_DUMP_LLVM=1 prints the optimized
// LLVM IR; TX_HOST_JIT_TIMING=1 prints where compile time goes; TX_HOST_CACHE=0
// bypasses the compile caches (memory and disk; TX_CACHE=0 the disk's alone);
// TX_HOST_THREADS=n caps the worker threads of a launch (1: sequential).
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../profile_sink.hpp"
#include "checked_mode.hpp"
#include "fibers.hpp"
#include "llvm.hpp"  // lowering/src/codegen: the host code generator
#include "tx/lowering/host_form.hpp"
#include "tx/lowering/identifier.hpp"
#include "tx/printer.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/runtime/kernel.hpp"
#include "tx_host_codegen_id.hpp"  // generated: TX_HOST_CODEGEN_ID (CMakeLists.txt)

// tx's helpers that JIT-compiled kernels call (defined at the end of this file).
extern "C" float tx_host_erfcf(float x);
extern "C" float tx_host_normcdff(float x);
extern "C" double tx_host_normcdf(double x);

namespace tx::runtime {

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  // The optimization pipeline's cost models (vector widths) come from here,
  // and the machine code of the kernels it optimizes.
  std::unique_ptr<llvm::TargetMachine> tm;
  // CodeGenOptLevel::None (fast instruction selection and register
  // allocation): the kernels too large to optimize (finish_module).
  std::unique_ptr<llvm::TargetMachine> tm_fast;
  // glibc's vector math (libmvec) is loaded: vectorized loops may call its
  // expf/logf/sinf/... (within 4 ulp, like the GPU's) instead of scalarizing.
  bool libmvec = false;
  std::string error;  // why there is no JIT
  std::mutex mu;      // one compile at a time; guards everything below
  std::uint64_t next_id = 0;

  std::string target;  // triple, CPU and its features: part of the cache keys
  std::unordered_map<std::string, std::shared_ptr<HostKernel>> cache;
};

std::string llvm_message(llvm::Error e) { return llvm::toString(std::move(e)); }

Jit& jit() {
  static Jit* j = [] {
    auto* s = new Jit();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) {
      s->error = "LLVM cannot target this host: " + llvm_message(jtmb.takeError());
      return s;
    }
    jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Default);
    // tx compiles kernels to objects itself (to cache them on disk) and the
    // LLJIT links them: position-independent, small code model, as LLJIT
    // configures its own compiler for its JITLink linker.
    jtmb->setRelocationModel(llvm::Reloc::PIC_);
    jtmb->setCodeModel(llvm::CodeModel::Small);
    auto tm = jtmb->createTargetMachine();
    if (!tm) {
      s->error = "LLVM target machine: " + llvm_message(tm.takeError());
      return s;
    }
    s->tm = std::move(*tm);
    llvm::orc::JITTargetMachineBuilder fast = *jtmb;
    fast.setCodeGenOptLevel(llvm::CodeGenOptLevel::None);
    auto tm_fast = fast.createTargetMachine();
    if (!tm_fast) {
      s->error = "LLVM target machine: " + llvm_message(tm_fast.takeError());
      return s;
    }
    s->tm_fast = std::move(*tm_fast);
    auto j = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*jtmb)).create();
    if (!j) {
      s->error = "LLVM ORC LLJIT: " + llvm_message(j.takeError());
      return s;
    }
    // libm (expf, tanhf, fmodf, ...) and memcpy come from this process.
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        (*j)->getDataLayout().getGlobalPrefix());
    if (!gen) {
      s->error = "LLVM ORC process symbols: " + llvm_message(gen.takeError());
      return s;
    }
    (*j)->getMainJITDylib().addGenerator(std::move(*gen));
    // tx's own helpers (erfc, the checked mode's hooks) by address: a search
    // of the process finds only globally visible symbols, and a program that
    // loads libtx with dlopen(RTLD_LOCAL) -- Python, loading the PyTorch
    // extension -- has none of them there.
    llvm::orc::SymbolMap helpers;
    auto helper = [&](const char* name, auto* fn) {
      helpers[(*j)->mangleAndIntern(name)] = llvm::orc::ExecutorSymbolDef(
          llvm::orc::ExecutorAddr::fromPtr(fn),
          llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable);
    };
    helper("tx_host_erfcf", &tx_host_erfcf);
    helper("tx_host_normcdff", &tx_host_normcdff);
    helper("tx_host_normcdf", &tx_host_normcdf);
    helper("tx_host_check_access", &tx_host_check_access);
    helper("tx_host_check_barrier", &tx_host_check_barrier);
    helper("tx_host_check_cta", &tx_host_check_cta);
    helper("tx_host_check_divzero", &tx_host_check_divzero);
    helper("tx_host_check_index", &tx_host_check_index);
    helper("tx_host_check_dist", &tx_host_check_dist);
    helper("tx_host_check_signal", &tx_host_check_signal);
    helper("tx_fiber_sync", &tx_fiber_sync);
    helper("tx_fiber_mbarrier_init", &tx_fiber_mbarrier_init);
    helper("tx_fiber_mbarrier_arrive", &tx_fiber_mbarrier_arrive);
    helper("tx_fiber_mbarrier_expect_tx", &tx_fiber_mbarrier_expect_tx);
    helper("tx_fiber_mbarrier_wait", &tx_fiber_mbarrier_wait);
    helper("tx_fiber_shfl_xor", &tx_fiber_shfl_xor);
    helper("tx_fiber_named_barrier", &tx_fiber_named_barrier);
    helper("tx_fiber_wait_flag", &tx_fiber_wait_flag);
    helper("tx_fiber_checker", &tx_fiber_checker);
    helper("tx_fiber_async", &tx_fiber_async);
    helper("tx_fiber_tma_load", &tx_fiber_tma_load);
    helper("tx_fiber_wgmma", &tx_fiber_wgmma);
    helper("tx_host_profile_mark", &tx_host_profile_mark);
    if (llvm::Error e = (*j)->getMainJITDylib().define(llvm::orc::absoluteSymbols(helpers))) {
      s->error = "LLVM ORC tx helpers: " + llvm_message(std::move(e));
      return s;
    }
    // Off by default: libmvec's exp/log differ from the GPU's by up to 4 ulp,
    // glibc's scalar ones by at most 2. TX_HOST_LIBMVEC=1 trades that for speed.
    s->libmvec = std::getenv("TX_HOST_LIBMVEC") && s->tm->getTargetTriple().isX86() &&
                 !llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1");
    // The features too: a VM may hide some of its CPU's (AVX-512), and an
    // object compiled with them must not be loaded where they are missing.
    s->target = s->tm->getTargetTriple().str() + "/" + s->tm->getTargetCPU().str() + "/" +
                s->tm->getTargetFeatureString().str() + (s->libmvec ? "/libmvec" : "");
    s->jit = std::move(*j);
    return s;
  }();
  return *j;
}

// Instructions above which a kernel's LLVM IR is not optimized (see
// finish_module): the largest kernels of the samples and the op library
// have under 3,000 (measured: host_ops, host_matrix).
constexpr std::size_t kOptimizeLimit = 6000;

void optimize(llvm::Module& m, llvm::TargetMachine* tm, bool libmvec) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::Triple triple(m.getTargetTriple());
  llvm::TargetLibraryInfoImpl tlii(triple);
  if (libmvec)
    tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86, triple);
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  // Only loops that emit_llvm marks llvm.loop.unroll.full are unrolled. Left
  // to itself, O2 also unrolled the 32-lane loops of the warp emulation and
  // the register copies' serial loops: up to 1.6x the compile time
  // (callgrind: 99M vs 62M instructions for warp_copy_reg) for no faster
  // kernel (docs/host_jit.md).
  pto.LoopUnrolling = false;
  llvm::PassBuilder pb(tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  mpm.run(m, mam);
}

class JitKernel : public HostKernel {
 public:
  JitKernel(lowering::HostEntry fn, const lowering::LaunchConfig& launch,
            std::int64_t scratch_bytes, std::string name,
            std::shared_ptr<const lowering::CheckPlan> plan)
      : fn_(fn),
        launch_(launch),
        block_(launch.block),
        scratch_bytes_(scratch_bytes),
        name_(std::move(name)),
        plan_(std::move(plan)) {}
  // The fiber schedule: `fiber` runs one thread.
  JitKernel(lowering::FiberEntry fiber, host::FiberPlan fibers,
            const lowering::LaunchConfig& launch,
            std::shared_ptr<const lowering::CheckPlan> plan = nullptr)
      : fiber_(fiber),
        fibers_(std::move(fibers)),
        launch_(launch),
        block_(launch.block),
        scratch_bytes_(fibers_.scratch_bytes),
        name_(fibers_.kernel),
        plan_(std::move(plan)) {}

  void run(const HostLaunch& l) const override {
    void* const* args = l.args;
    const std::int64_t* grid = l.grid.data();
    const std::int64_t blocks = l.grid[0] * l.grid[1] * l.grid[2];
    if (fiber_ && plan_) {
      // Checked fibers: one CTA after another, ordered by vector clocks.
      host::Checker checker(*plan_, launch_, l.elems, l.args);
      std::vector<host::Checker::FiberSite> sites;
      for (const auto& s : fibers_.sites) sites.push_back({s.op, s.operand, s.loc});
      checker.use_clocks(std::move(sites));
      Scratch s(scratch_bytes_);
      try {
        host::run_fiber_ctas(fiber_, fibers_, l.args, 0, blocks, s.p, grid, l.loc, &checker);
      } catch (const Error& stop) {
        checker.report(lowering::sanitize_identifier(name_), l.loc, stop);
      }
      checker.report(lowering::sanitize_identifier(name_), l.loc);
      return;
    }
    if (fiber_ && l.profiled) {
      // Profiled: on this thread, whose recorder the kernel's marks reach.
      Scratch s(scratch_bytes_);
      host::run_fiber_ctas(fiber_, fibers_, l.args, 0, blocks, s.p, grid, l.loc);
      return;
    }
    if (fiber_) {
      run_fibers(l, blocks);
      return;
    }
    if (plan_) {
      // Checked: one CTA after another (the cross-CTA shadow is one map),
      // then the report.
      host::Checker checker(*plan_, launch_, l.elems, l.args);
      Scratch s(scratch_bytes_);
      fn_(args, 0, blocks, s.p, &checker.state(), grid);
      checker.report(lowering::sanitize_identifier(name_), l.loc);
      return;
    }
    int workers = l.profiled ? 1 : choose_workers(blocks);
    if (workers <= 1) {
      Scratch s(scratch_bytes_);
      fn_(args, 0, blocks, s.p, nullptr, grid);
      return;
    }
    // Contiguous, fixed ranges: which CTA runs where never depends on timing.
    // Every worker's scratch is allocated here, where running out of memory
    // is a tx error rather than an exception in a thread.
    std::int64_t per = (blocks + workers - 1) / workers;
    std::vector<std::unique_ptr<Scratch>> scratch;
    for (int w = 0; w < workers && w * per < blocks; ++w)
      scratch.push_back(std::make_unique<Scratch>(scratch_bytes_));
    std::vector<std::thread> pool;
    for (std::size_t w = 1; w < scratch.size(); ++w) {
      std::int64_t b = static_cast<std::int64_t>(w) * per, e = std::min(blocks, b + per);
      void* sp = scratch[w]->p;
      auto range = [this, args, b, e, sp, grid] { fn_(args, b, e, sp, nullptr, grid); };
      try {
        pool.emplace_back(range);
      } catch (const std::system_error&) {
        range();  // no thread to be had: this one runs the range
      }
    }
    fn_(args, 0, std::min(blocks, per), scratch[0]->p, nullptr, grid);
    for (std::thread& t : pool) t.join();
  }

 private:
  // As the region schedule's CTAs: contiguous ranges over worker threads,
  // each worker with its own shared memory and fibers. An error (a
  // deadlock) in a worker is rethrown here, the first one by CTA order.
  void run_fibers(const HostLaunch& l, std::int64_t blocks) const {
    const int workers = choose_workers(blocks);
    const std::int64_t per = (blocks + workers - 1) / workers;
    std::vector<std::unique_ptr<Scratch>> scratch;
    for (int w = 0; w < workers && w * per < blocks; ++w)
      scratch.push_back(std::make_unique<Scratch>(scratch_bytes_));
    std::vector<std::exception_ptr> errors(scratch.size());
    auto range = [&](std::size_t w) {
      const std::int64_t b = static_cast<std::int64_t>(w) * per, e = std::min(blocks, b + per);
      try {
        host::run_fiber_ctas(fiber_, fibers_, l.args, b, e, scratch[w]->p, l.grid.data(), l.loc);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    };
    std::vector<std::thread> pool;
    for (std::size_t w = 1; w < scratch.size(); ++w) {
      try {
        pool.emplace_back(range, w);
      } catch (const std::system_error&) {
        range(w);
      }
    }
    range(0);
    for (std::thread& t : pool) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  }

  struct Scratch {
    void* p = nullptr;
    explicit Scratch(std::int64_t bytes) {
      if (bytes <= 0) return;
      try {
        p = ::operator new(static_cast<std::size_t>(bytes), std::align_val_t(64));
      } catch (const std::bad_alloc&) {
        fail("tx.host_jit", "", {},
             "out of memory for the " + std::to_string(bytes) +
                 " bytes of per-CTA memory (shared memory and large register tiles) the host "
                 "fallback needs");
      }
    }
    ~Scratch() {
      if (p) ::operator delete(p, std::align_val_t(64));
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
  };

  int choose_workers(std::int64_t blocks) const {
    // Below ~64K GPU threads of work, starting threads costs more than it saves.
    if (blocks < 2 || blocks * block_ < (std::int64_t{1} << 16)) return 1;
    int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    int cap = std::min(hw, 32);
    if (const char* v = std::getenv("TX_HOST_THREADS"); v && *v) cap = std::max(1, std::atoi(v));
    return static_cast<int>(std::min<std::int64_t>(cap, blocks));
  }

  lowering::HostEntry fn_ = nullptr;
  lowering::FiberEntry fiber_ = nullptr;
  host::FiberPlan fibers_;
  lowering::LaunchConfig launch_;
  std::int64_t block_ = 1;
  std::int64_t scratch_bytes_ = 0;
  std::string name_;
  std::shared_ptr<const lowering::CheckPlan> plan_;  // set in the checked mode
};

// What compiling a host form makes: the machine code of one function, and
// what running it needs besides. This is what the disk cache stores.
struct Compiled {
  bool fibers = false;
  std::string symbol;              // the function in `object`
  std::int64_t scratch_bytes = 0;  // per CTA (region schedule)
  std::unique_ptr<llvm::MemoryBuffer> object;
};

// Checks the emitted module, optimizes it (or, over kOptimizeLimit, marks it
// optnone) and compiles it to an object file in memory.
void finish_module(Jit& j, llvm::Module& m, const std::string& name, SourceLoc loc,
                   bool always_optimize, Compiled& out) {
  using clock = std::chrono::steady_clock;
  auto t2 = clock::now();
  m.setDataLayout(j.jit->getDataLayout());
  m.setTargetTriple(j.jit->getTargetTriple().str());
  std::string verify;
  llvm::raw_string_ostream vos(verify);
  if (llvm::verifyModule(m, &vos)) {
    std::string ir;
    llvm::raw_string_ostream ios(ir);
    m.print(ios, nullptr);
    fail("tx.host_jit", name, loc, "invalid LLVM IR: " + verify, ir);
  }
  // LLVM's optimizer and its optimizing code generator (greedy register
  // allocation, the register coalescer) grow faster than linearly with the
  // size of a function (4,096 chained terms of one expression: 0.4 s in O2
  // and 1.5 s in codegen at 2,048, 9 s at 4,096). A function that large is
  // neither optimized nor compiled by the optimizing code generator: the
  // fast instruction selector and register allocator are linear in it
  // (docs/host_jit.md: a 100,000-term dot product). Slower code, but a
  // compile time proportional to the kernel.
  std::size_t instructions = 0;
  for (const llvm::Function& fn : m) instructions += fn.getInstructionCount();
  const bool large = !always_optimize && instructions > kOptimizeLimit;
  if (large) {
    for (llvm::Function& fn : m)
      if (!fn.isDeclaration()) {
        fn.addFnAttr(llvm::Attribute::OptimizeNone);
        fn.addFnAttr(llvm::Attribute::NoInline);
      }
  } else {
    optimize(m, j.tm.get(), j.libmvec);
  }
  if (env_flag("TX_HOST_DUMP_LLVM")) m.print(llvm::errs(), nullptr);
  auto t3 = clock::now();
  auto object = llvm::orc::SimpleCompiler(large ? *j.tm_fast : *j.tm)(m);
  if (!object) fail("tx.host_jit", name, loc, llvm_message(object.takeError()));
  out.object = std::move(*object);
  auto t4 = clock::now();
  if (env_flag("TX_HOST_JIT_TIMING")) {
    auto ms = [](auto a, auto b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    std::fprintf(
        stderr, "tx host_jit %s: %zu LLVM instructions, verify + O2 %.2f ms%s, codegen %.2f ms%s\n",
        name.c_str(), instructions, ms(t2, t3), large ? " (O2 skipped: too large)" : "", ms(t3, t4),
        large ? " (unoptimized)" : "");
  }
}

// A fiber's stack: its register tiles (all of them, as LLVM allocas) and
// room for spills and the calls into the scheduler.
std::int64_t fiber_stack_bytes(const Stmt& body) {
  std::int64_t locals = 0;
  for_each_stmt(body, [&](const Stmt& s) {
    if (auto* a = s.as<AllocateNode>(); a && a->buffer->scope == MemScope::local)
      locals += a->buffer->storage_elems() * a->buffer->dtype.bytes();
  });
  return 2 * locals + 128 * 1024;
}

// The fiber schedule's plan: the scheduler's wait sites come from emitting
// the thread function. A kernel loaded from disk emits it again for them
// (well under a millisecond), so that a deadlock report names this
// process's source lines, which the cache key (the host form's structure)
// does not hold.
host::FiberPlan fiber_plan(const lowering::LoweredKernel& k, const lowering::HostForm& form,
                           const std::string& fname, llvm::LLVMContext& ctx,
                           std::unique_ptr<llvm::Module>* module) {
  host::FiberPlan plan;
  plan.kernel = k.source->name;
  plan.block = k.launch.block;
  plan.stack_bytes = fiber_stack_bytes(form.body);
  lowering::EmittedModule em =
      lowering::emit_llvm_fibers(ctx, k, form.body, fname, &plan.sites, form.checks.get());
  plan.scratch_bytes = em.scratch_bytes;
  if (module) *module = std::move(em.module);
  return plan;
}

// Emits and compiles a host form to an object (not yet linked).
Compiled compile_object(Jit& j, const lowering::LoweredKernel& k, const lowering::HostForm& form,
                        const std::string& fname, host::FiberPlan* plan) {
  using clock = std::chrono::steady_clock;
  auto t1 = clock::now();
  const std::string& name = k.source->name;
  llvm::LLVMContext ctx;
  Compiled out;
  out.fibers = form.fibers;
  out.symbol = fname;
  std::unique_ptr<llvm::Module> module;
  if (form.fibers) {
    *plan = fiber_plan(k, form, fname, ctx, &module);
    out.scratch_bytes = plan->scratch_bytes;
  } else {
    lowering::EmittedModule em =
        lowering::emit_llvm(ctx, k, form.body, form.thread, fname, form.checked);
    module = std::move(em.module);
    out.scratch_bytes = em.scratch_bytes;
  }
  if (env_flag("TX_HOST_JIT_TIMING"))
    std::fprintf(stderr, "tx host_jit %s: LLVM IR %.2f ms\n", name.c_str(),
                 std::chrono::duration<double, std::milli>(clock::now() - t1).count());
  // The fiber schedule's thread functions are always optimized: they are
  // the pipelines and warp-specialized kernels, and slow unoptimized.
  finish_module(j, *module, name, k.source->loc, form.fibers, out);
  return out;
}

// Links an object into the JIT, in a JITDylib of its own: kernels never
// clash by symbol name, whether compiled in this process or loaded from
// disk. Returns the function's address.
void* link_object(Jit& j, const std::string& name, SourceLoc loc, const llvm::MemoryBuffer& object,
                  const std::string& symbol) {
  auto jd = j.jit->createJITDylib("tx_kernel_" + std::to_string(j.next_id++));
  if (!jd) fail("tx.host_jit", name, loc, llvm_message(jd.takeError()));
  // The helpers and the process's symbols (libm, memcpy) are in the main JITDylib.
  jd->addToLinkOrder(j.jit->getMainJITDylib());
  if (llvm::Error e = j.jit->addObjectFile(
          *jd, llvm::MemoryBuffer::getMemBufferCopy(object.getBuffer(), symbol)))
    fail("tx.host_jit", name, loc, llvm_message(std::move(e)));
  auto sym = j.jit->lookup(*jd, symbol);
  if (!sym) fail("tx.host_jit", name, loc, llvm_message(sym.takeError()));
  return sym->toPtr<void*>();
}

std::shared_ptr<HostKernel> make_kernel(const lowering::LoweredKernel& k,
                                        const lowering::HostForm& form, const Compiled& c, void* fn,
                                        host::FiberPlan plan) {
  if (c.fibers)
    return std::make_shared<JitKernel>(reinterpret_cast<lowering::FiberEntry>(fn), std::move(plan),
                                       k.launch, form.checks);
  return std::make_shared<JitKernel>(reinterpret_cast<lowering::HostEntry>(fn), k.launch,
                                     c.scratch_bytes, k.source->name, form.checks);
}

// ------------------------------------------------------------ the disk cache
//
// An entry's payload (inside DiskCache's checked envelope, under the key of
// host_cache_key):
//
//   "TXHOSTO1" | u8 fibers | u32 symbol length | symbol | i64 scratch bytes | object file

constexpr char kPayloadMagic[8] = {'T', 'X', 'H', 'O', 'S', 'T', 'O', '1'};

std::vector<char> to_payload(const Compiled& c) {
  std::vector<char> p(kPayloadMagic, kPayloadMagic + sizeof kPayloadMagic);
  auto put = [&p](std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) p.push_back(static_cast<char>(v >> (8 * i)));
  };
  put(c.fibers ? 1 : 0, 1);
  put(c.symbol.size(), 4);
  p.insert(p.end(), c.symbol.begin(), c.symbol.end());
  put(static_cast<std::uint64_t>(c.scratch_bytes), 8);
  llvm::StringRef obj = c.object->getBuffer();
  p.insert(p.end(), obj.begin(), obj.end());
  return p;
}

// Empty when the payload is not one (the caller then recompiles).
std::optional<Compiled> from_payload(const std::vector<char>& p) {
  std::size_t at = 0;
  auto take = [&](std::size_t n) -> const char* {
    if (n > p.size() - at) return nullptr;
    const char* d = p.data() + at;
    at += n;
    return d;
  };
  auto get = [&](int bytes, std::uint64_t* v) {
    const char* d = take(static_cast<std::size_t>(bytes));
    if (!d) return false;
    *v = 0;
    for (int i = 0; i < bytes; ++i)
      *v |= std::uint64_t{static_cast<unsigned char>(d[i])} << (8 * i);
    return true;
  };
  const char* magic = take(sizeof kPayloadMagic);
  if (!magic || std::memcmp(magic, kPayloadMagic, sizeof kPayloadMagic) != 0) return std::nullopt;
  std::uint64_t fibers = 0, length = 0, scratch = 0;
  if (!get(1, &fibers) || fibers > 1 || !get(4, &length)) return std::nullopt;
  const char* symbol = take(static_cast<std::size_t>(length));
  if (!symbol || length == 0 || !get(8, &scratch) || at == p.size()) return std::nullopt;
  Compiled c;
  c.fibers = fibers != 0;
  c.symbol.assign(symbol, static_cast<std::size_t>(length));
  c.scratch_bytes = static_cast<std::int64_t>(scratch);
  c.object =
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(p.data() + at, p.size() - at), c.symbol);
  return c;
}

std::vector<std::pair<std::int64_t, std::int64_t>> shared_layout(const lowering::LoweredKernel& k) {
  std::vector<std::pair<std::int64_t, std::int64_t>> v;
  for (const auto& a : k.shared) v.emplace_back(a.offset, a.bytes);
  v.emplace_back(-1, k.shared_bytes);
  return v;
}

}  // namespace

bool host_jit_available(std::string* why) {
  Jit& j = jit();
  if (!j.jit && why) *why = j.error;
  return j.jit != nullptr;
}

namespace {

// The host form of `k` for this compile: lower()'s, where it built one in
// this mode, else made now (a kernel lowered for another target, or by hand).
std::shared_ptr<const lowering::HostForm> host_form_of(const lowering::LoweredKernel& k,
                                                       bool checked) {
  if (k.host && k.host->checked == checked) return k.host;
  auto step = [&](const char* pass, const Stmt& s) {
    if (env_flag("TX_DEBUG_IR"))
      std::cerr << "# ---- IR after " << pass << " ----\n"
                << to_string(k.lowered.with_body(s, true));
  };
  return std::make_shared<const lowering::HostForm>(lowering::lower_host_form(k, checked, step));
}

// The compile cache's key: the host form's structure fixes the kernel's
// semantics but not the launch; the host code loops over the grid and lays
// out shared memory itself.
std::string host_cache_key(const Jit& j, const lowering::LoweredKernel& k,
                           const lowering::HostForm& form) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(structural_hash(form.func)));
  std::vector<std::string> launch{"grid=" + std::to_string(k.launch.grid[0]) + "," +
                                      std::to_string(k.launch.grid[1]) + "," +
                                      std::to_string(k.launch.grid[2]),
                                  "block=" + std::to_string(k.launch.block)};
  for (auto [offset, bytes] : shared_layout(k))
    launch.push_back("shared=" + std::to_string(offset) + "+" + std::to_string(bytes));
  if (form.checked) launch.push_back("checked");
  if (form.fibers) launch.push_back("fibers");
  // The code generator's own fingerprint: an edited llvm.cpp (same tx
  // version, same host form) compiles other code, which the disk cache must
  // not serve.
  launch.push_back("codegen=" TX_HOST_CODEGEN_ID);
  return kernel_cache_key(std::string("host form ") + hash, launch, j.target,
                          "LLVM " LLVM_VERSION_STRING);
}

}  // namespace

std::shared_ptr<HostKernel> host_compile(const lowering::LoweredKernel& k, bool checked,
                                         std::string* from) {
  using clock = std::chrono::steady_clock;
  std::shared_ptr<const lowering::HostForm> form = host_form_of(k, checked);
  Jit& j = jit();
  const std::string& name = k.source->name;
  const SourceLoc loc = k.source->loc;
  if (!j.jit) fail("tx.host_jit", name, loc, j.error);
  const bool use_cache =
      !(std::getenv("TX_HOST_CACHE") && std::string(std::getenv("TX_HOST_CACHE")) == "0");
  const std::string key = use_cache ? host_cache_key(j, k, *form) : std::string();
  std::lock_guard<std::mutex> lock(j.mu);
  if (use_cache) {
    auto it = j.cache.find(key);
    if (it != j.cache.end()) {
      if (from) *from = "memory";
      return it->second;
    }
  }
  // The disk cache (TX_CACHE_DIR, beside the GPU's cubins): an object that
  // another process compiled is linked, without LLVM's optimizer and code
  // generator. An entry that is damaged, or not a host kernel, or does not
  // link, is recompiled and rewritten.
  const DiskCache& disk = DiskCache::instance();
  const bool use_disk = use_cache && disk.enabled();
  std::shared_ptr<HostKernel> kernel;
  std::string source = "jit";
  if (use_disk) {
    auto t0 = clock::now();
    if (std::optional<std::vector<char>> payload = disk.load(key)) {
      std::optional<Compiled> c = from_payload(*payload);
      if (!c || c->fibers != form->fibers) {
        warn("host JIT cache: " + disk.path_for(key) +
             " does not hold this host kernel; recompiling");
      } else {
        try {
          host::FiberPlan plan;
          if (c->fibers) {
            llvm::LLVMContext ctx;
            plan = fiber_plan(k, *form, c->symbol, ctx, nullptr);
          }
          void* fn = link_object(j, name, loc, *c->object, c->symbol);
          kernel = make_kernel(k, *form, *c, fn, std::move(plan));
          source = "disk";
        } catch (const Error& e) {
          warn("host JIT cache: cannot link " + disk.path_for(key) + " (" + e.reason() +
               "); recompiling");
        }
      }
    }
    if (kernel && env_flag("TX_HOST_JIT_TIMING"))
      std::fprintf(stderr, "tx host_jit %s: from the disk cache, %.2f ms (read and link)\n",
                   name.c_str(),
                   std::chrono::duration<double, std::milli>(clock::now() - t0).count());
  }
  if (!kernel) {
    host::FiberPlan plan;
    const std::string fname =
        (form->fibers ? "tx_fibers_" : "tx_host_") + lowering::sanitize_identifier(name);
    Compiled c = compile_object(j, k, *form, fname, &plan);
    auto t0 = clock::now();
    void* fn = link_object(j, name, loc, *c.object, c.symbol);
    kernel = make_kernel(k, *form, c, fn, std::move(plan));
    if (env_flag("TX_HOST_JIT_TIMING"))
      std::fprintf(stderr, "tx host_jit %s: link %.2f ms\n", name.c_str(),
                   std::chrono::duration<double, std::milli>(clock::now() - t0).count());
    // Stored once it has linked here. A failed store has warned; the kernel runs all the same.
    if (use_disk) disk.store(key, to_payload(c));
  }
  if (use_cache) j.cache.emplace(key, kernel);
  if (from) *from = source;
  return kernel;
}

void host_cache_clear_memory() {
  Jit& j = jit();
  std::lock_guard<std::mutex> lock(j.mu);
  j.cache.clear();
}

}  // namespace tx::runtime

// The f32 erfc of the CUDA code generator (tx_erfc in lowering/src/codegen/cuda.cpp),
// step for step, for JIT-compiled kernels to call: Numerical Recipes'
// fit t * exp(-z^2) * exp(P(t)), exp(-z^2) corrected by z*z's remainder.
extern "C" float tx_host_erfcf(float x) {
  float z = std::fabs(x);
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = -0.82215223f + t * 0.17087277f;
  p = 1.48851587f + t * p;
  p = -1.13520398f + t * p;
  p = 0.27886807f + t * p;
  p = -0.18628806f + t * p;
  p = 0.09678418f + t * p;
  p = 0.37409196f + t * p;
  p = 1.00002368f + t * p;
  float zz = z * z, lo = std::fma(z, z, -zz);
  float r = t * std::exp(-zz) * std::exp(-1.26551223f + t * p);
  r = std::fma(-r, lo, r);
  r = z >= 10.0f ? 0.0f : r;
  return x >= 0.0f ? r : 2.0f - r;
}

// The f32 normcdf of the CUDA code generator (tx_normcdf in lowering/src/codegen/cuda.cpp),
// step for step, with exp2 for the GPU's ex2.approx.ftz: the same fit in
// u = |x| / sqrt2, x^2 / 2 kept exact and the exponent as a two-float sum.
extern "C" float tx_host_normcdff(float x) {
  const float L = 1.44269502f, L_lo = 1.925963e-8f;
  float z = std::fabs(x);
  float t = 1.0f / std::fma(z, 0.353553391f, 1.0f);
  float p = std::fma(t, 0.17087277f, -0.82215223f);
  p = std::fma(t, p, 1.48851587f);
  p = std::fma(t, p, -1.13520398f);
  p = std::fma(t, p, 0.27886807f);
  p = std::fma(t, p, -0.18628806f);
  p = std::fma(t, p, 0.09678418f);
  p = std::fma(t, p, 0.37409196f);
  p = std::fma(t, p, 1.00002368f);
  p = std::fma(t, p, -1.95865941f);
  float xx = x * x, xx_lo = std::fma(x, x, -xx);
  float a = std::fma(xx, -0.5f, p);
  float a_lo = std::fma(xx_lo, -0.5f, p - std::fma(xx, 0.5f, a));
  float y = a * L;
  float y_lo = std::fma(a, L, -y) + std::fma(a, L_lo, a_lo * L);
  float r = y < -126.0f ? 0.0f : t * std::exp2(y);  // ex2.approx.ftz flushes below 2^-126
  r = std::fma(r, y_lo * 0.693147181f, r);
  r = z >= 14.2f ? 0.0f : r;
  return x >= 0.0f ? 1.0f - r : r;
}
// f64: CUDA's normcdf is erfc(-x / sqrt2) / 2.
extern "C" double tx_host_normcdf(double x) { return 0.5 * std::erfc(x * -0.70710678118654752440); }
