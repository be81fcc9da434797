// tx_repl_guard: an LD_PRELOAD shim that keeps a clang-repl-19 session alive
// (DESIGN.md section 8). tx-repl always preloads it. It fixes four things
// clang-repl 19 gets wrong and adds one command:
//
// 1. An exception that escapes an input calls std::terminate and kills the
//    session: clang-repl runs each input's top-level code with no handler
//    above it. The shim wraps clang::Interpreter::ParseAndExecute (one call
//    per input) in a try block: the exception's type and what() go to stderr
//    as "error: uncaught exception of type T: what" and the session reads the
//    next input. What the input did before the throw stays done; the rest of
//    it is skipped.
//
// 2. An input that fails (a C++ error, above all a failed template
//    instantiation) leaves code behind: its declarations and instantiations
//    are emitted with the next input's module, which then fails to link
//    ("JIT session error: Symbols not found", "Failed to materialize
//    symbols"), and the one after fails running the dead module's
//    initializers. After a failed input the shim runs empty inputs
//    (`(void)0;`) with stderr silenced until one runs cleanly (at most 4):
//    they take that fall. What no input can repair: the function templates
//    the failed input instantiated first never get code (clang dropped them
//    with the input and does not instantiate them again), so later inputs
//    that use them fail to link for good; tx-repl's supervisor
//    (tx_repl_supervisor.py) and the Jupyter kernel restart clang-repl then.
//
// 3. clang-repl-19 crashes (SIGSEGV) on some invalid inputs -- a compile
//    error in a global whose initializer holds a lambda, a lambda passed to
//    a function in a top-level statement -- and code run in the session may
//    crash. While an input runs, a crash signal jumps back to the shim, which
//    reports "error: this input crashed clang-repl (...)" and goes on; the
//    session may be inconsistent after that, and the message says so.
//
// 4. `%lib libfoo.so` adds a search generator over the library and all its
//    dependencies to the JIT's main dylib, so libc's __cxa_atexit shadows the
//    JIT's own: destructors of globals defined in the session are then
//    registered with libc and run at exit after the JIT has freed their
//    code (a segfault on every exit after a %lib). The shim loads the library
//    with dlopen(RTLD_NOW | RTLD_GLOBAL) instead, where the JIT finds its
//    symbols as process symbols and the session's globals are destroyed
//    before the JIT goes.
//
// 5. `%lib tx-repl-echo:TEXT` loads nothing: it prints TEXT to stdout and to
//    stderr after flushing both. It involves neither the parser nor the JIT,
//    so a driver (the Jupyter kernel) can mark the end of an input's output
//    even after an input that broke something.
//
// Interposed by symbol (clang-repl-19 links libclang-cpp.so dynamically); the
// classes are declared here just far enough for the Itanium ABI of the two
// members, so no clang headers are needed.
#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <csetjmp>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <typeinfo>

namespace llvm {
class StringRef {
 public:
  const char* data;
  std::size_t size;
};
// llvm::Error is one pointer (the payload; null is success) with a
// non-trivial destructor, so it is returned through a hidden pointer. In
// LLVM's ABI-breaking-checks builds the low bit marks "unchecked"; zero
// means a checked success either way.
class Error {
 public:
  void* payload;
  ~Error() {}  // never run here: the object is returned to clang-repl
};
}  // namespace llvm

namespace clang {
class Value;
class Interpreter {
 public:
  llvm::Error ParseAndExecute(llvm::StringRef code, Value* v);
  llvm::Error LoadDynamicLibrary(const char* name);
};
}  // namespace clang

namespace {

using ParseAndExecuteFn = llvm::Error (clang::Interpreter::*)(llvm::StringRef, clang::Value*);

constexpr const char* kParseAndExecute =
    "_ZN5clang11Interpreter15ParseAndExecuteEN4llvm9StringRefEPNS_5ValueE";

// The member-function pointer of a non-virtual member in the Itanium ABI:
// {address, this-adjustment 0}.
template <class F>
F member_from_address(void* addr) {
  struct Rep {
    void* ptr;
    std::ptrdiff_t adj;
  } rep{addr, 0};
  static_assert(sizeof(F) == sizeof(Rep));
  F f;
  std::memcpy(static_cast<void*>(&f), &rep, sizeof f);
  return f;
}

void report_current_exception() {
  const std::type_info* t = abi::__cxa_current_exception_type();
  int status = 0;
  char* demangled = t ? abi::__cxa_demangle(t->name(), nullptr, nullptr, &status) : nullptr;
  const char* name = demangled ? demangled : (t ? t->name() : "unknown");
  try {
    throw;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: uncaught exception of type %s: %s\n", name, e.what());
  } catch (...) {
    std::fprintf(stderr, "error: uncaught exception of type %s\n", name);
  }
  std::fprintf(stderr, "error: the rest of this input was skipped; the session goes on\n");
  std::fflush(stderr);
  std::free(demangled);
}

bool failed(const llvm::Error& e) {
  // the low bit is the "unchecked" flag of ABI-breaking-checks builds
  return (reinterpret_cast<std::uintptr_t>(e.payload) & ~std::uintptr_t{1}) != 0;
}

// ---------------------------------------------------------------- crashes
//
// clang-repl-19 itself crashes on some invalid inputs (a compile error in a
// global whose initializer holds a lambda; a lambda passed to a function in
// a top-level statement), and JIT-ed code may crash. While an input runs, a
// SIGSEGV/SIGBUS/SIGILL/SIGFPE jumps back here: the input is reported as
// crashed and the session goes on -- in a state that may be inconsistent,
// which the message says.

sigjmp_buf g_crash_jump;
volatile std::sig_atomic_t g_armed = 0;
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};

void on_crash(int sig) {
  if (g_armed) {
    g_armed = 0;
    siglongjmp(g_crash_jump, sig);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

struct CrashHandlers {
  struct sigaction old[std::size(kCrashSignals)];
  CrashHandlers() {
    static bool alt_stack = [] {  // room to run the handler after a stack overflow
      static char stack[1 << 16];
      stack_t ss{};
      ss.ss_sp = stack;
      ss.ss_size = sizeof stack;
      return sigaltstack(&ss, nullptr) == 0;
    }();
    struct sigaction sa {};
    sa.sa_handler = on_crash;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NODEFER | (alt_stack ? SA_ONSTACK : 0);
    for (std::size_t i = 0; i < std::size(kCrashSignals); ++i)
      sigaction(kCrashSignals[i], &sa, &old[i]);
  }
  ~CrashHandlers() {
    g_armed = 0;
    for (std::size_t i = 0; i < std::size(kCrashSignals); ++i)
      sigaction(kCrashSignals[i], &old[i], nullptr);
  }
};

ParseAndExecuteFn real_parse_and_execute() {
  static ParseAndExecuteFn real = [] {
    void* addr = dlsym(RTLD_NEXT, kParseAndExecute);
    if (!addr) {
      std::fprintf(stderr, "tx_repl_guard: %s not found: %s\n", kParseAndExecute, dlerror());
      std::abort();
    }
    return member_from_address<ParseAndExecuteFn>(addr);
  }();
  return real;
}

// The real ParseAndExecute; returns 0, or the signal it crashed with
// (`result` is then untouched). Exceptions pass through.
int run_guarded(clang::Interpreter* self, llvm::StringRef code, clang::Value* v,
                llvm::Error& result) {
  CrashHandlers handlers;
  if (int sig = sigsetjmp(g_crash_jump, 1)) return sig;
  g_armed = 1;
  result = (self->*real_parse_and_execute())(code, v);
  g_armed = 0;
  return 0;
}

}  // namespace

llvm::Error clang::Interpreter::ParseAndExecute(llvm::StringRef code, clang::Value* v) {
  llvm::Error result{nullptr};
  int crashed = 0;
  try {
    crashed = run_guarded(this, code, v, result);
  } catch (...) {
    std::fflush(stdout);
    report_current_exception();
    return llvm::Error{nullptr};
  }
  if (crashed) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "error: this input crashed clang-repl (%s); the session goes on, but it may be "
                 "inconsistent: restart it if what follows misbehaves\n",
                 strsignal(crashed));
    std::fflush(stderr);
    result = llvm::Error{nullptr};
  }
  if (crashed || failed(result)) {
    // Let empty inputs absorb what the failed one left behind; their errors
    // (and the JIT's reports on stderr) are expected and dropped.
    std::fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    if (saved >= 0 && null >= 0) dup2(null, 2);
    static const char kEmpty[] = "(void)0;";
    for (int i = 0; i < 4; ++i) {  // until one runs cleanly
      llvm::Error ignored{nullptr};
      try {
        if (run_guarded(this, llvm::StringRef{kEmpty, sizeof kEmpty - 1}, nullptr, ignored)) break;
      } catch (...) {
      }
      if (!failed(ignored)) break;
    }
    if (saved >= 0 && null >= 0) dup2(saved, 2);
    if (saved >= 0) close(saved);
    if (null >= 0) close(null);
  }
  return result;
}

llvm::Error clang::Interpreter::LoadDynamicLibrary(const char* name) {
  static const char kEcho[] = "tx-repl-echo:";
  if (std::strncmp(name, kEcho, sizeof kEcho - 1) == 0) {
    const char* text = name + sizeof kEcho - 1;
    std::fflush(stdout);
    std::fflush(stderr);
    std::fputs(text, stderr);
    std::fflush(stderr);
    std::fputs(text, stdout);
    std::fflush(stdout);
    return llvm::Error{nullptr};
  }
  if (!dlopen(name, RTLD_NOW | RTLD_GLOBAL)) {
    // clang-repl prints nothing more for a failed %lib; say why here.
    std::fprintf(stderr, "error: %%lib %s: %s\n", name, dlerror());
    std::fflush(stderr);
  }
  return llvm::Error{nullptr};
}
