// NVRTC in a child process (tx-nvrtc-worker; docs/reliability.md, "Compiler
// crashes"): a compiler that crashes or hangs is a tx error naming the kernel
// and the signal, and this process -- the test itself -- goes on compiling.
// The crashes are injected with the test hook TX_TEST_COMPILER_FAULT, which
// makes the worker die the way a crash inside NVRTC would (raise(SIGSEGV),
// abort(), an exit, a hang). NVRTC needs no GPU: this runs everywhere.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "test_support.hpp"
#include "tx/error.hpp"
#include "tx/runtime/nvrtc.hpp"
#include "tx/tx.hpp"

namespace {

using namespace tx;
namespace rt = tx::runtime;

// A kernel that compiles in a few tens of ms; `tag` makes each source (and
// so each compile) distinct.
std::string source(const std::string& name, int tag) {
  return "extern \"C\" __global__ void " + name +
         "(float* x) { x[threadIdx.x] = x[threadIdx.x] * " + std::to_string(tag) +
         ".5f + 1.0f; }\n";
}

// Sets an environment variable for one scope (the test hooks are read on
// every compile).
struct EnvGuard {
  std::string name;
  std::string old;
  bool had;
  EnvGuard(const char* n, const char* v) : name(n) {
    const char* o = std::getenv(n);
    had = o != nullptr;
    if (had) old = o;
    if (v)
      ::setenv(n, v, 1);
    else
      ::unsetenv(n);
  }
  ~EnvGuard() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

struct ModeGuard {
  ModeGuard() = default;
  ~ModeGuard() { rt::set_compile_isolation(rt::CompileIsolation::automatic); }
};

Error compile_error(const std::string& src, const std::string& program) {
  try {
    rt::nvrtc_compile(src, program, "sm_90a", rt::NvrtcTarget::cubin);
  } catch (const Error& e) {
    return e;
  }
  FAIL("compiled without an error: " << program);
  return Error("", "", {}, "");
}

bool has(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("compiles run in a child process by default and give what an in-process compile gives") {
  ModeGuard restore;
  std::string why;
  REQUIRE_MESSAGE(!rt::nvrtc_worker_path(&why).empty(), why);
  rt::set_compile_isolation(rt::CompileIsolation::automatic);
  REQUIRE(rt::compiles_in_child());
  const int tag = static_cast<int>(test::rng()() % 1000);
  const std::string src = source("iso_same", tag);
  const auto before = rt::compile_worker_stats();
  const auto child = rt::nvrtc_compile(src, "iso_same.cu", "sm_90a", rt::NvrtcTarget::cubin);
  const auto child_ptx = rt::nvrtc_compile(src, "iso_same.cu", "sm_90a", rt::NvrtcTarget::ptx);
  const auto after = rt::compile_worker_stats();
  CHECK(after.compiles == before.compiles + 2);
  rt::set_compile_isolation(rt::CompileIsolation::in_process);
  CHECK_FALSE(rt::compiles_in_child(&why));
  CHECK(has(why, "inprocess"));
  const auto here = rt::nvrtc_compile(src, "iso_same.cu", "sm_90a", rt::NvrtcTarget::cubin);
  const auto here_ptx = rt::nvrtc_compile(src, "iso_same.cu", "sm_90a", rt::NvrtcTarget::ptx);
  CHECK(rt::compile_worker_stats().compiles == after.compiles);  // not through a worker
  REQUIRE_FALSE(child.cubin.empty());
  CHECK(child.cubin == here.cubin);
  CHECK(child_ptx.ptx == here_ptx.ptx);
  CHECK(has(child_ptx.ptx, ".entry iso_same("));
  // A compile error is the same tx error either way (the log, the source line).
  rt::set_compile_isolation(rt::CompileIsolation::process);
  const std::string bad = "extern \"C\" __global__ void broken() { int x = ; }\n";
  Error in_child = compile_error(bad, "broken.cu");
  rt::set_compile_isolation(rt::CompileIsolation::in_process);
  Error in_here = compile_error(bad, "broken.cu");
  CHECK(in_child.reason() == in_here.reason());
  CHECK(has(in_child.reason(), "compilation failed (1 error): expected an expression"));
  CHECK(in_child.detail() == in_here.detail());
}

TEST_CASE(
    "a compiler crash is a tx error naming the kernel and the signal, and the process goes on") {
  ModeGuard restore;
  rt::set_compile_isolation(rt::CompileIsolation::process);
  EnvGuard match("TX_TEST_COMPILER_FAULT_MATCH", "crash_me");
  struct Case {
    const char* fault;
    const char* status;
  };
  const Case cases[] = {{"segv", "was killed by signal 11 (SIGSEGV)"},
                        {"abort", "was killed by signal 6 (SIGABRT)"},
                        {"exit", "exited with status 3"}};
  for (const Case& c : cases) {
    CAPTURE(c.fault);
    const auto before = rt::compile_worker_stats();
    {
      EnvGuard fault("TX_TEST_COMPILER_FAULT", c.fault);
      Error e = compile_error(source("crash_me_now", 1), "crash_me_now.cu");
      CHECK(e.op() == "tx.nvrtc");
      CHECK(e.operand() == "crash_me_now.cu");
      CHECK_MESSAGE(has(e.reason(),
                        "the CUDA compiler crashed compiling kernel crash_me_now for "
                        "sm_90a (cubin): its process " +
                            std::string(c.status) + "; it ran in a child process"),
                    e.what());
      CHECK(has(e.detail(), "--gpu-architecture=sm_90a"));
      CHECK(has(e.detail(), "TX_COMPILE_ISOLATION=inprocess"));
      // Only the matching kernel: another compiles meanwhile.
      const auto ok = rt::nvrtc_compile(source("bystander", 2), "bystander.cu", "sm_90a",
                                        rt::NvrtcTarget::cubin);
      CHECK_FALSE(ok.cubin.empty());
    }
    CHECK(rt::compile_worker_stats().crashes == before.crashes + 1);
    // The next compile of the same kernel, the hook off: a fresh worker.
    const auto again = rt::nvrtc_compile(source("crash_me_now", 1), "crash_me_now.cu", "sm_90a",
                                         rt::NvrtcTarget::cubin);
    CHECK_FALSE(again.cubin.empty());
  }
}

TEST_CASE("a compiler that hangs is killed at TX_COMPILE_TIMEOUT") {
  ModeGuard restore;
  rt::set_compile_isolation(rt::CompileIsolation::process);
  const auto before = rt::compile_worker_stats();
  {
    EnvGuard fault("TX_TEST_COMPILER_FAULT", "hang");
    EnvGuard limit("TX_COMPILE_TIMEOUT", "1.5");
    const auto t0 = std::chrono::steady_clock::now();
    Error e = compile_error(source("hangs_forever", 3), "hangs_forever.cu");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(s >= 1.4);
    CHECK(s < 30);
    CHECK(e.operand() == "hangs_forever.cu");
    CHECK_MESSAGE(has(e.reason(),
                      "did not finish kernel hangs_forever for sm_90a (cubin) within "
                      "1.5 s (TX_COMPILE_TIMEOUT); its process was killed"),
                  e.what());
  }
  CHECK(rt::compile_worker_stats().timeouts == before.timeouts + 1);
  CHECK_FALSE(
      rt::nvrtc_compile(source("after_hang", 4), "after_hang.cu", "sm_90a", rt::NvrtcTarget::cubin)
          .cubin.empty());
}

TEST_CASE("through tx::compile: a crash compiling a Kernel names it, and the next kernel builds") {
  ModeGuard restore;
  rt::set_compile_isolation(rt::CompileIsolation::process);
  auto kernel = [](const std::string& name) {
    return compile(T::prim_func(name,
                                [&](Handle a) {
                                  auto A = T::match_buffer(a, {128}, f32);
                                  T::device_entry();
                                  T::cta_id({1});
                                  auto t = T::thread_id({128});
                                  A(t) = A(t) * 3.0f;
                                }),
                   {.device = Device::host()});
  };
  Kernel crashing = kernel("iso_victim");
  Kernel next = kernel("iso_next");
  {
    EnvGuard fault("TX_TEST_COMPILER_FAULT", "segv");
    EnvGuard match("TX_TEST_COMPILER_FAULT_MATCH", "iso_victim");
    try {
      crashing.ptx("sm_90a");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.op() == "tx.nvrtc");
      CHECK(e.operand() == "iso_victim.cu");
      CHECK(has(e.reason(), "kernel iso_victim for sm_90a (PTX)"));
      CHECK(has(e.reason(), "SIGSEGV"));
    }
    CHECK(has(next.ptx("sm_90a"), ".entry iso_next("));
  }
  CHECK(has(crashing.ptx("sm_90a"), ".entry iso_victim("));
}

TEST_CASE("compiles on several threads at once, one of them crashing") {
  ModeGuard restore;
  rt::set_compile_isolation(rt::CompileIsolation::process);
  EnvGuard fault("TX_TEST_COMPILER_FAULT", "segv");
  EnvGuard match("TX_TEST_COMPILER_FAULT_MATCH", "doomed");
  const int n = 6;
  std::atomic<int> ok{0}, crashed{0}, other{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      const std::string name = i == 2 ? "doomed_" + std::to_string(i) : "par_" + std::to_string(i);
      try {
        auto out =
            rt::nvrtc_compile(source(name, i), name + ".cu", "sm_90a", rt::NvrtcTarget::cubin);
        ok += out.cubin.empty() ? 0 : 1;
      } catch (const Error& e) {
        (has(e.reason(), "SIGSEGV") && e.operand() == name + ".cu" ? crashed : other) += 1;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(ok == n - 1);
  CHECK(crashed == 1);
  CHECK(other == 0);
}

TEST_CASE("a process forked after workers exist compiles with its own") {
  ModeGuard restore;
  rt::set_compile_isolation(rt::CompileIsolation::process);
  // A worker idle in the pool before the fork.
  REQUIRE_FALSE(
      rt::nvrtc_compile(source("pre_fork", 5), "pre_fork.cu", "sm_90a", rt::NvrtcTarget::cubin)
          .cubin.empty());
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 1;
    try {
      auto a =
          rt::nvrtc_compile(source("in_child", 6), "in_child.cu", "sm_90a", rt::NvrtcTarget::cubin);
      code = a.cubin.empty() ? 2 : 0;
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  // The parent compiles at the same time, on its own worker.
  auto mine =
      rt::nvrtc_compile(source("in_parent", 7), "in_parent.cu", "sm_90a", rt::NvrtcTarget::cubin);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(mine.cubin.empty());
}

TEST_CASE("without the worker: process mode is an error, auto compiles here") {
  ModeGuard restore;
  EnvGuard worker("TX_NVRTC_WORKER", "/nonexistent/tx-nvrtc-worker");
  std::string why;
  CHECK(rt::nvrtc_worker_path(&why).empty());
  CHECK(has(why, "TX_NVRTC_WORKER=/nonexistent/tx-nvrtc-worker is not an executable file"));
  rt::set_compile_isolation(rt::CompileIsolation::process);
  Error e = compile_error(source("no_worker", 8), "no_worker.cu");
  CHECK(has(e.reason(), "TX_COMPILE_ISOLATION=process, but the compiler process cannot run"));
  rt::set_compile_isolation(rt::CompileIsolation::automatic);
  CHECK_FALSE(rt::compiles_in_child(&why));
  CHECK_FALSE(
      rt::nvrtc_compile(source("no_worker", 8), "no_worker.cu", "sm_90a", rt::NvrtcTarget::cubin)
          .cubin.empty());
}

// The crash of issue 45 itself, not an injected one: NVRTC 13.0 segfaults
// on a wgmma whose descriptors are the constant zero (for PTX as for an
// sm_90a cubin; in this process the program ends with SIGSEGV, exit 139).
// In the child it is a tx error, and the next kernel compiles. An NVRTC that
// no longer crashes on it says so and is checked to have compiled it.
TEST_CASE("NVRTC's own crash on a wgmma with constant zero descriptors is a tx error") {
  ModeGuard restore;
  rt::set_compile_isolation(rt::CompileIsolation::process);
  const std::string src = R"(
extern "C" __global__ void zero_desc(float* out) {
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  const unsigned long long da = 0ull, db = 0ull;
  asm volatile("wgmma.fence.sync.aligned;\n");
  asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
               "{%0, %1, %2, %3}, %4, %5, 1, 1, 1, 0, 0;\n"
               : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db));
  asm volatile("wgmma.commit_group.sync.aligned;\n");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n");
  out[threadIdx.x] = d0 + d1 + d2 + d3;
}
)";
  const auto [major, minor] = rt::nvrtc_version();
  const auto before = rt::compile_worker_stats();
  try {
    auto out = rt::nvrtc_compile(src, "zero_desc.cu", "sm_90a", rt::NvrtcTarget::cubin);
    MESSAGE("NVRTC " << major << "." << minor << " compiles the zero-descriptor wgmma");
    CHECK_FALSE(out.cubin.empty());
  } catch (const Error& e) {
    CHECK(e.op() == "tx.nvrtc");
    CHECK(e.operand() == "zero_desc.cu");
    CHECK_MESSAGE(has(e.reason(),
                      "the CUDA compiler crashed compiling kernel zero_desc for "
                      "sm_90a (cubin): its process was killed by signal 11 (SIGSEGV)"),
                  e.what());
    CHECK(rt::compile_worker_stats().crashes == before.crashes + 1);
  }
  CHECK_FALSE(rt::nvrtc_compile(source("after_real_crash", 9), "after_real_crash.cu", "sm_90a",
                                rt::NvrtcTarget::cubin)
                  .cubin.empty());
}
