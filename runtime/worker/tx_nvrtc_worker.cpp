// tx-nvrtc-worker: compiles CUDA with NVRTC for libtx in a process of its
// own, so that a compiler crash (NVRTC 13.0 was seen to segfault on a wgmma
// with constant zero descriptors for sm_90a) or hang ends this process, not
// the user's. libtx starts it with posix_spawn (nvrtc_isolation.cpp), gives
// it the NVRTC library it uses itself (`--nvrtc PATH`), and exchanges frames
// with it on stdin/stdout, a socket (nvrtc_raw.hpp):
//
//   hello (once), then per request: the compile's result, log and output.
//
// It links nothing of tx (it starts in about a millisecond plus NVRTC's own
// loading) and exits when libtx closes the socket (EOF), which also happens
// when the process that started it ends.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "nvrtc_raw.hpp"

namespace raw = tx::runtime::nvrtc_raw;

namespace {

// The test hooks: die the way a compiler crash would (the signals' default
// actions are restored in main).
[[noreturn]] void fault(std::uint32_t kind) {
  switch (kind) {
    case raw::kSegv:
      ::raise(SIGSEGV);
      break;
    case raw::kAbort:
      std::abort();
    case raw::kHang:
      for (;;) ::pause();
    case raw::kExit:
      ::_exit(3);
  }
  ::_exit(4);
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--nvrtc") path = argv[i + 1];
  // A crash inside NVRTC ends this process by its signal, which libtx
  // reports (the worker is never built with a sanitizer, whose handler would
  // turn it into an exit; and whatever started it, an ignored or handled
  // signal is not inherited here).
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
  const int in = 0, out = 1;
  raw::Api api;
  const bool loaded = !path.empty() && raw::load(api, path);
  {
    raw::Writer hello;
    hello.u32(raw::kMagic);
    hello.u32(raw::kVersion);
    hello.u32(loaded ? 0 : 1);
    hello.str(loaded ? api.path : path.empty() ? "no --nvrtc PATH given" : api.error);
    if (!raw::send_frame(out, hello.bytes) || !loaded) ::_exit(loaded ? 0 : 2);
  }
  std::string frame;
  for (;;) {
    // Exits quietly (no atexit handlers: nothing to flush, and a leak
    // checker would only report NVRTC's own allocations) when libtx is done.
    if (raw::recv_frame(in, frame, {}, false) != raw::Read::ok) ::_exit(0);
    raw::Reader r{frame};
    const std::uint32_t magic = r.u32(), version = r.u32(), target = r.u32(), kind = r.u32();
    const std::string name = r.str(), source = r.str();
    std::vector<std::string> options(r.u32());
    for (std::string& o : options) o = r.str();
    if (!r.ok || magic != raw::kMagic || version != raw::kVersion) ::_exit(5);
    if (kind != raw::kNone) fault(kind);
    const auto t0 = std::chrono::steady_clock::now();
    const raw::Result res =
        raw::compile(api, source, name, options, target == raw::kPtx ? raw::kPtx : raw::kCubin);
    const auto ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    raw::Writer reply;
    reply.u32(raw::kMagic);
    reply.u32(static_cast<std::uint32_t>(res.status));
    reply.str(res.failed_call);
    reply.str(res.log);
    reply.str(res.output);
    reply.u32(static_cast<std::uint32_t>(ns));
    reply.u32(static_cast<std::uint32_t>(ns >> 32));
    if (!raw::send_frame(out, reply.bytes)) ::_exit(0);
  }
}
