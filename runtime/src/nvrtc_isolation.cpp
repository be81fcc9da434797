// Compiles in tx-nvrtc-worker processes (runtime/worker/): a pool of idle
// workers, each started with posix_spawn -- fork() in a process with other
// threads would leave the child with their locks held, and posix_spawn runs
// nothing but the exec in the child -- and talked to over a socketpair
// (send with MSG_NOSIGNAL: a worker that died is an error return, never a
// SIGPIPE in this process). A worker that dies during a compile is reaped
// and reported with its signal; one that outlives the timeout is killed.
#include "nvrtc_isolation.hpp"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "tx/error.hpp"
#include "tx/runtime/nvrtc.hpp"

extern char** environ;

namespace tx::runtime {

namespace {

namespace raw = nvrtc_raw;
using Clock = std::chrono::steady_clock;

std::atomic<std::uint64_t> g_spawned{0}, g_compiles{0}, g_crashes{0}, g_timeouts{0};
std::atomic<std::uint64_t> g_round_trip_ns{0}, g_worker_ns{0}, g_spawn_ns{0};

// -1: not set by a call (TX_COMPILE_ISOLATION decides).
std::atomic<int> g_mode{-1};

CompileIsolation mode_from_env() {
  const char* v = std::getenv("TX_COMPILE_ISOLATION");
  if (!v || !*v) return CompileIsolation::automatic;
  const std::string s = v;
  if (s == "process") return CompileIsolation::process;
  if (s == "inprocess" || s == "in_process") return CompileIsolation::in_process;
  if (s == "auto") return CompileIsolation::automatic;
  static std::once_flag once;
  std::call_once(once, [&] {
    warn("TX_COMPILE_ISOLATION=" + s + " is not process, inprocess or auto; using auto");
  });
  return CompileIsolation::automatic;
}

bool executable(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

// Where libtx itself is (the worker is installed next to it).
std::string libtx_dir() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&libtx_dir), &info) || !info.dli_fname) return "";
  char resolved[PATH_MAX];
  std::string file = ::realpath(info.dli_fname, resolved) ? resolved : info.dli_fname;
  const auto slash = file.rfind('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

std::string find_worker(std::string* why) {
  if (const char* env = std::getenv("TX_NVRTC_WORKER"); env && *env) {
    if (executable(env)) return env;
    if (why) *why = std::string("TX_NVRTC_WORKER=") + env + " is not an executable file";
    return "";
  }
  const std::string dir = libtx_dir();
  // The install (lib/tx/, beside libtx_repl_guard), then the build tree
  // (next to libtx.so).
  const std::string candidates[] = {dir + "/tx/tx-nvrtc-worker", dir + "/tx-nvrtc-worker"};
  for (const std::string& c : candidates)
    if (executable(c)) return c;
  if (why) *why = "no tx-nvrtc-worker at " + candidates[0] + " or " + candidates[1];
  return "";
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGTRAP:
      return "SIGTRAP";
    default:
      return "a signal";
  }
}

// How a worker ended, in words ("was killed by signal 11 (SIGSEGV)"); -1:
// not known (the program's own SIGCHLD handler reaped it).
std::string describe_status(int status) {
  if (status == -1) return "ended";
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           signal_name(WTERMSIG(status)) + ")";
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended (wait status " + std::to_string(status) + ")";
}

struct Worker {
  pid_t pid = -1;
  int fd = -1;
};

// Waits for a worker that is gone or going (its socket closed); one that
// is still running after a moment is killed. Returns its wait status, or
// -1 when it cannot be had (a SIGCHLD handler of the program reaped it).
int reap(Worker& w, bool kill_first) {
  if (w.fd >= 0) ::close(w.fd);
  w.fd = -1;
  if (kill_first) ::kill(w.pid, SIGKILL);
  int status = 0;
  for (int i = 0; i < 500; ++i) {  // up to 5 s for a worker whose socket closed as it died
    const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid) return status;
    if (r < 0 && errno != EINTR) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(w.pid, SIGKILL);
  while (::waitpid(w.pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return status;
}

// The idle workers. At most kMaxIdle are kept (each holds NVRTC, tens of
// MB); compiles on more threads at once start more, which exit when they
// are not kept.
struct Pool {
  static constexpr std::size_t kMaxIdle = 4;
  std::mutex mu;
  std::vector<Worker> idle;
};

Pool& pool() {
  static Pool* p = [] {
    auto* fresh = new Pool();
    // A child made by fork() must not share this process's workers (two
    // processes talking to one worker would mix their frames): the child
    // forgets them (closing its copies of the sockets; the workers stay
    // the parent's). The lock is held across fork so the list is whole.
    ::pthread_atfork([] { pool().mu.lock(); }, [] { pool().mu.unlock(); },
                     [] {
                       Pool& q = pool();
                       for (Worker& w : q.idle) ::close(w.fd);
                       q.idle.clear();
                       q.mu.unlock();
                     });
    return fresh;
  }();
  return *p;
}

// Starts a worker on `nvrtc_library` and reads its hello.
Worker spawn(const std::string& worker, const std::string& nvrtc_library,
             const std::string& program) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    fail("tx.nvrtc", program, {},
         std::string("cannot start the compiler process: socketpair: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // The child's end becomes its stdin and stdout (dup2 clears close-on-exec).
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  // No signal blocked, the usual actions (a program that ignores SIGPIPE or
  // blocks signals does not pass that on), and a process group of its own:
  // a Ctrl-C at the terminal interrupts the program, which decides, rather
  // than killing a compile under it.
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGSEGV, SIGABRT, SIGBUS, SIGQUIT})
    sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &defaults);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::string a0 = worker, a1 = "--nvrtc", a2 = nvrtc_library;
  char* argv[] = {a0.data(), a1.data(), a2.data(), nullptr};
  Worker w;
  const auto start = Clock::now();
  const int rc = ::posix_spawn(&w.pid, worker.c_str(), &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    fail("tx.nvrtc", program, {},
         "cannot start the compiler process " + worker + ": " + std::strerror(rc));
  }
  w.fd = sv[0];
  ++g_spawned;
  std::string hello;
  const raw::Read r = raw::recv_frame(w.fd, hello, Clock::now() + std::chrono::seconds(60), true);
  raw::Reader in{hello};
  const std::uint32_t magic = in.u32(), version = in.u32(), status = in.u32();
  const std::string message = in.str();
  if (r != raw::Read::ok || !in.ok || magic != raw::kMagic || version != raw::kVersion ||
      status != 0) {
    const int st = reap(w, r == raw::Read::timeout);
    std::string why = r != raw::Read::ok ? "it " + describe_status(st) + " before it was ready"
                      : status != 0      ? "it could not load NVRTC: " + message
                                         : "it is not the worker this libtx speaks to";
    fail("tx.nvrtc", program, {}, "cannot start the compiler process " + worker + ": " + why);
  }
  g_spawn_ns += static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  return w;
}

// An idle worker that is still alive, or a new one.
Worker acquire(const std::string& worker, const std::string& nvrtc_library,
               const std::string& program) {
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    while (!p.idle.empty()) {
      Worker w = p.idle.back();
      p.idle.pop_back();
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) == 0) return w;  // still running
      ::close(w.fd);  // died while idle (killed from outside): not this compile's fault
    }
  }
  return spawn(worker, nvrtc_library, program);
}

void release(Worker w) {
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.idle.size() < Pool::kMaxIdle) {
      p.idle.push_back(w);
      return;
    }
  }
  reap(w, false);  // closing its socket ends it
}

double timeout_seconds() {
  const char* v = std::getenv("TX_COMPILE_TIMEOUT");
  if (!v || !*v) return 600;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end != v && s >= 0 ? s : 600;
}

// TX_TEST_COMPILER_FAULT=segv|abort|hang|exit (for the compiles whose
// program name holds TX_TEST_COMPILER_FAULT_MATCH, when set): the worker
// fails that way instead of compiling. Read on every compile, so that a
// test can set it around one.
std::uint32_t test_fault(const std::string& program) {
  const char* f = std::getenv("TX_TEST_COMPILER_FAULT");
  if (!f || !*f) return raw::kNone;
  const char* match = std::getenv("TX_TEST_COMPILER_FAULT_MATCH");
  if (match && *match && program.find(match) == std::string::npos) return raw::kNone;
  const std::string s = f;
  return s == "segv"    ? raw::kSegv
         : s == "abort" ? raw::kAbort
         : s == "hang"  ? raw::kHang
         : s == "exit"  ? raw::kExit
                        : raw::kNone;
}

std::string kernel_of(const std::string& program) {
  const std::string ext = ".cu";
  return program.size() > ext.size() && program.ends_with(ext)
             ? program.substr(0, program.size() - ext.size())
             : program;
}

}  // namespace

void set_compile_isolation(CompileIsolation mode) { g_mode = static_cast<int>(mode); }

CompileIsolation compile_isolation() {
  const int m = g_mode.load();
  return m < 0 ? mode_from_env() : static_cast<CompileIsolation>(m);
}

std::string nvrtc_worker_path(std::string* why) { return find_worker(why); }

bool compiles_in_child(std::string* why) {
  const CompileIsolation m = compile_isolation();
  if (m == CompileIsolation::in_process) {
    if (why) *why = "compile isolation is off (TX_COMPILE_ISOLATION=inprocess)";
    return false;
  }
  std::string missing;
  if (!find_worker(&missing).empty()) return true;
  if (m == CompileIsolation::process)
    fail("tx.nvrtc", "", {},
         "TX_COMPILE_ISOLATION=process, but the compiler process cannot run: " + missing);
  // automatic: compile here, and say once that a crash would end the process.
  static std::once_flag once;
  std::call_once(once, [&] {
    warn("tx.nvrtc: compiling in this process (" + missing +
         "): a crash inside NVRTC would end it; TX_COMPILE_ISOLATION=inprocess says that is "
         "intended");
  });
  if (why) *why = missing;
  return false;
}

CompileWorkerStats compile_worker_stats() {
  return {g_spawned.load(),       g_compiles.load(),  g_crashes.load(), g_timeouts.load(),
          g_round_trip_ns.load(), g_worker_ns.load(), g_spawn_ns.load()};
}

namespace detail {

nvrtc_raw::Result compile_in_child(const std::string& nvrtc_library, const std::string& source,
                                   const std::string& name, const std::vector<std::string>& options,
                                   nvrtc_raw::Target target, const std::string& arch) {
  std::string missing;
  const std::string worker = find_worker(&missing);
  if (worker.empty()) fail("tx.nvrtc", name, {}, "the compiler process cannot run: " + missing);
  raw::Writer req;
  req.u32(raw::kMagic);
  req.u32(raw::kVersion);
  req.u32(target);
  req.u32(test_fault(name));
  req.str(name);
  req.str(source);
  req.u32(static_cast<std::uint32_t>(options.size()));
  for (const std::string& o : options) req.str(o);

  const double limit = timeout_seconds();
  const std::string what =
      "kernel " + kernel_of(name) + " for " + arch + (target == raw::kPtx ? " (PTX)" : " (cubin)");
  std::string opts;
  for (const std::string& o : options) opts += " " + o;
  const std::string detail =
      "options:" + opts +
      "\nThe compiler ran in a child process (tx-nvrtc-worker, TX_COMPILE_ISOLATION), so this "
      "process goes on and later compiles start a fresh one. The kernel's source is "
      "Kernel::cuda_source(); TX_COMPILE_ISOLATION=inprocess runs NVRTC in this process, where "
      "the same crash would end it.";

  Worker w = acquire(worker, nvrtc_library, name);
  auto sent = Clock::now();
  if (!raw::send_frame(w.fd, req.bytes)) {
    // The worker was gone before it read anything (killed while idle between
    // the check and now): not this kernel's doing; one more try on a new one.
    reap(w, true);
    w = spawn(worker, nvrtc_library, name);
    sent = Clock::now();
    if (!raw::send_frame(w.fd, req.bytes)) {
      const int st = reap(w, true);
      fail("tx.nvrtc", name, {},
           "the compiler process " + describe_status(st) + " before it read " + what, detail);
    }
  }
  ++g_compiles;
  const bool bounded = limit > 0;
  const auto deadline =
      sent + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit));
  std::string frame;
  const raw::Read r = raw::recv_frame(w.fd, frame, deadline, bounded);
  if (r == raw::Read::timeout) {
    reap(w, true);
    ++g_timeouts;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", limit);
    fail("tx.nvrtc", name, {},
         std::string("the CUDA compiler did not finish ") + what + " within " + secs +
             " s (TX_COMPILE_TIMEOUT); its process was killed, and this process goes on",
         detail);
  }
  if (r != raw::Read::ok) {
    const int st = reap(w, false);
    ++g_crashes;
    fail("tx.nvrtc", name, {},
         "the CUDA compiler crashed compiling " + what + ": its process " + describe_status(st) +
             "; it ran in a child process, so this process goes on",
         detail);
  }
  raw::Reader in{frame};
  raw::Result res;
  const std::uint32_t magic = in.u32();
  res.status = static_cast<int>(in.u32());
  res.failed_call = in.str();
  res.log = in.str();
  res.output = in.str();
  const std::uint64_t worker_ns = in.u32() | static_cast<std::uint64_t>(in.u32()) << 32;
  if (!in.ok || magic != raw::kMagic) {
    reap(w, true);
    ++g_crashes;
    fail("tx.nvrtc", name, {},
         "the compiler process sent a malformed reply compiling " + what + "; it was stopped",
         detail);
  }
  g_round_trip_ns += static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - sent).count());
  g_worker_ns += worker_ns;
  release(w);
  return res;
}

}  // namespace detail

}  // namespace tx::runtime
