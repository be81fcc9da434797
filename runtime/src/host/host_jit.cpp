// The host fallback: tx::runtime::host_compile / host_jit_available.
//
//   host form (lowering::lower for Target::host(): the lowered IR through
//   instrument_checks, isolate_shuffles, sink_local_allocations, split_regions)
//              -> codegen/llvm (emit_llvm) -> LLVM O2 without automatic
//                 unrolling (vectorizes the thread loops)
//              -> ORC LLJIT -> a function that runs a range of CTAs
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
// -- here the host's triple and CPU -- the compiler version -- here LLVM's --
// and the launch shape the host code is specialized for), so compiling the
// same kernel twice JITs once. A launch runs the CTAs
// in order, or splits the grid into contiguous ranges over a few std::threads
// when there is enough work; CTAs never share state, so the split changes no
// result.
//
// Environment: TX_DEBUG_IR=1 prints the host form after each host pass (where
// lower() did not build it already); TX_HOST_DUMP_LLVM=1 prints the optimized
// LLVM IR; TX_HOST_JIT_TIMING=1 prints where compile time goes; TX_HOST_CACHE=0
// bypasses the compile cache; TX_HOST_THREADS=n caps the worker threads of a
// launch (1: sequential).
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "checked_mode.hpp"
#include "fibers.hpp"
#include "llvm.hpp"  // lowering/src/codegen: the host code generator
#include "tx/lowering/host_form.hpp"
#include "tx/lowering/identifier.hpp"
#include "tx/printer.hpp"
#include "tx/runtime/disk_cache.hpp"
#include "tx/runtime/kernel.hpp"

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
  // The optimization pipeline's cost models (vector widths) come from here.
  std::unique_ptr<llvm::TargetMachine> tm;
  // glibc's vector math (libmvec) is loaded: vectorized loops may call its
  // expf/logf/sinf/... (within 4 ulp, like the GPU's) instead of scalarizing.
  bool libmvec = false;
  std::string error;  // why there is no JIT
  std::mutex mu;      // one compile at a time; guards everything below
  std::uint64_t next_id = 0;

  std::string target;  // triple and CPU, part of the cache key
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
    auto tm = jtmb->createTargetMachine();
    if (!tm) {
      s->error = "LLVM target machine: " + llvm_message(tm.takeError());
      return s;
    }
    s->tm = std::move(*tm);
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
    helper("tx_fiber_sync", &tx_fiber_sync);
    helper("tx_fiber_mbarrier_init", &tx_fiber_mbarrier_init);
    helper("tx_fiber_mbarrier_arrive", &tx_fiber_mbarrier_arrive);
    helper("tx_fiber_mbarrier_expect_tx", &tx_fiber_mbarrier_expect_tx);
    helper("tx_fiber_mbarrier_wait", &tx_fiber_mbarrier_wait);
    helper("tx_fiber_shfl_xor", &tx_fiber_shfl_xor);
    helper("tx_fiber_named_barrier", &tx_fiber_named_barrier);
    if (llvm::Error e = (*j)->getMainJITDylib().define(llvm::orc::absoluteSymbols(helpers))) {
      s->error = "LLVM ORC tx helpers: " + llvm_message(std::move(e));
      return s;
    }
    // Off by default: libmvec's exp/log differ from the GPU's by up to 4 ulp,
    // glibc's scalar ones by at most 2. TX_HOST_LIBMVEC=1 trades that for speed.
    s->libmvec = std::getenv("TX_HOST_LIBMVEC") && s->tm->getTargetTriple().isX86() &&
                 !llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1");
    s->target = s->tm->getTargetTriple().str() + "/" + s->tm->getTargetCPU().str() +
                (s->libmvec ? "/libmvec" : "");
    s->jit = std::move(*j);
    return s;
  }();
  return *j;
}

// Instructions above which a kernel's LLVM IR is not optimized (see
// compile_uncached): the largest kernels of the samples and the op library
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
            const lowering::LaunchConfig& launch)
      : fiber_(fiber),
        fibers_(std::move(fibers)),
        launch_(launch),
        block_(launch.block),
        scratch_bytes_(fibers_.scratch_bytes),
        name_(fibers_.kernel) {}

  void run(const HostLaunch& l) const override {
    void* const* args = l.args;
    const std::int64_t* grid = l.grid.data();
    const std::int64_t blocks = l.grid[0] * l.grid[1] * l.grid[2];
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
    int workers = choose_workers(blocks);
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

std::shared_ptr<HostKernel> compile_uncached(Jit& j, const lowering::LoweredKernel& k,
                                             const lowering::HostForm& form) {
  using clock = std::chrono::steady_clock;
  auto t1 = clock::now();
  const std::string& name = k.source->name;
  SourceLoc loc = k.source->loc;
  const bool checked = form.checked;
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::string fname =
      "tx_host_" + lowering::sanitize_identifier(name) + "_" + std::to_string(j.next_id++);
  lowering::EmittedModule em = lowering::emit_llvm(*ctx, k, form.body, form.thread, fname, checked);
  llvm::Module& m = *em.module;
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
  auto t2 = clock::now();
  // LLVM's optimizer and instruction selection grow faster than linearly
  // with the size of one basic block (4,096 chained terms of one expression:
  // 0.4 s in O2 and 1.5 s in codegen at 2,048, 9 s at 4,096). A function that
  // large is compiled without optimization, which is linear: slower code,
  // but a compile time proportional to the kernel.
  std::size_t instructions = 0;
  for (const llvm::Function& fn : m) instructions += fn.getInstructionCount();
  if (instructions > kOptimizeLimit) {
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
  if (llvm::Error e =
          j.jit->addIRModule(llvm::orc::ThreadSafeModule(std::move(em.module), std::move(ctx))))
    fail("tx.host_jit", name, loc, llvm_message(std::move(e)));
  auto sym = j.jit->lookup(fname);
  if (!sym) fail("tx.host_jit", name, loc, llvm_message(sym.takeError()));
  auto t4 = clock::now();
  if (env_flag("TX_HOST_JIT_TIMING")) {
    auto ms = [](auto a, auto b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    std::fprintf(
        stderr,
        "tx host_jit %s: LLVM IR %.2f ms (%zu instructions), O2 %.2f ms%s, codegen %.2f ms\n",
        name.c_str(), ms(t1, t2), instructions, ms(t2, t3),
        instructions > kOptimizeLimit ? " (skipped: too large)" : "", ms(t3, t4));
  }
  return std::make_shared<JitKernel>(sym->toPtr<lowering::HostEntry>(), k.launch, em.scratch_bytes,
                                     name, form.checks);
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

std::shared_ptr<HostKernel> compile_fibers(Jit& j, const lowering::LoweredKernel& k,
                                           const lowering::HostForm& form) {
  const std::string& name = k.source->name;
  SourceLoc loc = k.source->loc;
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::string fname =
      "tx_fibers_" + lowering::sanitize_identifier(name) + "_" + std::to_string(j.next_id++);
  host::FiberPlan plan;
  plan.kernel = name;
  plan.block = k.launch.block;
  plan.stack_bytes = fiber_stack_bytes(form.body);
  lowering::EmittedModule em = lowering::emit_llvm_fibers(*ctx, k, form.body, fname, &plan.sites);
  plan.scratch_bytes = em.scratch_bytes;
  llvm::Module& m = *em.module;
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
  optimize(m, j.tm.get(), j.libmvec);
  if (env_flag("TX_HOST_DUMP_LLVM")) m.print(llvm::errs(), nullptr);
  if (llvm::Error e =
          j.jit->addIRModule(llvm::orc::ThreadSafeModule(std::move(em.module), std::move(ctx))))
    fail("tx.host_jit", name, loc, llvm_message(std::move(e)));
  auto sym = j.jit->lookup(fname);
  if (!sym) fail("tx.host_jit", name, loc, llvm_message(sym.takeError()));
  return std::make_shared<JitKernel>(sym->toPtr<lowering::FiberEntry>(), std::move(plan), k.launch);
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
  return kernel_cache_key(std::string("host form ") + hash, launch, j.target,
                          "LLVM " LLVM_VERSION_STRING);
}

}  // namespace

std::shared_ptr<HostKernel> host_compile(const lowering::LoweredKernel& k, bool checked) {
  std::shared_ptr<const lowering::HostForm> form = host_form_of(k, checked);
  Jit& j = jit();
  if (!j.jit) fail("tx.host_jit", k.source->name, k.source->loc, j.error);
  const bool use_cache =
      !(std::getenv("TX_HOST_CACHE") && std::string(std::getenv("TX_HOST_CACHE")) == "0");
  const std::string key = use_cache ? host_cache_key(j, k, *form) : std::string();
  std::lock_guard<std::mutex> lock(j.mu);
  if (use_cache) {
    auto it = j.cache.find(key);
    if (it != j.cache.end()) return it->second;
  }
  std::shared_ptr<HostKernel> kernel =
      form->fibers ? compile_fibers(j, k, *form) : compile_uncached(j, k, *form);
  if (use_cache) j.cache.emplace(key, kernel);
  return kernel;
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
