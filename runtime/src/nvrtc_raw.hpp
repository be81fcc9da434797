// NVRTC's entry points and one compile, with nothing of tx: shared by libtx
// (nvrtc.cpp, compiling in its own process) and tx-nvrtc-worker (the child
// process that compiles for it, runtime/worker/), so that both run exactly
// the same calls on the same library file. Also the framing of the messages
// between the two: length-prefixed frames on a socket.
#pragma once

#include <dlfcn.h>
#include <errno.h>
#include <nvrtc.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "loader_leaks.hpp"

namespace tx::runtime::nvrtc_raw {

struct Api {
  void* handle = nullptr;
  std::string path;   // the library that was opened
  std::string error;  // why it could not be, when handle is null
  decltype(&nvrtcVersion) version = nullptr;
  decltype(&nvrtcGetErrorString) error_string = nullptr;
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&nvrtcGetPTX) ptx = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
};

// Opens `path` (a file name or a path, as dlopen takes it) and resolves the
// entry points. False, with api.error saying why, when it cannot.
inline bool load(Api& api, const std::string& path) {
  TX_IGNORE_LOADER_LEAKS;
  api.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api.handle) {
    const char* e = dlerror();
    api.error = e ? e : "dlopen failed";
    return false;
  }
  api.path = path;
  std::string missing;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api.handle, name));
    if (!fn) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  sym(api.version, "nvrtcVersion");
  sym(api.error_string, "nvrtcGetErrorString");
  sym(api.create, "nvrtcCreateProgram");
  sym(api.destroy, "nvrtcDestroyProgram");
  sym(api.compile, "nvrtcCompileProgram");
  sym(api.log_size, "nvrtcGetProgramLogSize");
  sym(api.log, "nvrtcGetProgramLog");
  sym(api.ptx_size, "nvrtcGetPTXSize");
  sym(api.ptx, "nvrtcGetPTX");
  sym(api.cubin_size, "nvrtcGetCUBINSize");
  sym(api.cubin, "nvrtcGetCUBIN");
  if (!missing.empty()) {
    api.error = path + " lacks " + missing + " (NVRTC older than CUDA 11.1?)";
    dlclose(api.handle);
    api.handle = nullptr;
    return false;
  }
  return true;
}

enum Target : std::uint32_t { kPtx = 0, kCubin = 1 };

struct Result {
  int status = NVRTC_SUCCESS;  // the nvrtcResult of the call that failed
  std::string failed_call;     // "" on success, else "nvrtcCompileProgram", ...
  std::string log;             // the compiler log, possibly empty
  std::string output;          // the PTX text (no trailing NUL) or the cubin bytes
};

// One compile: create, compile with `options`, read the log and the output.
inline Result compile(const Api& a, const std::string& source, const std::string& name,
                      const std::vector<std::string>& options, Target target) {
  Result r;
  nvrtcProgram prog = nullptr;
  nvrtcResult s = a.create(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr);
  if (s != NVRTC_SUCCESS) {
    r.status = s;
    r.failed_call = "nvrtcCreateProgram";
    return r;
  }
  struct Destroy {
    const Api& a;
    nvrtcProgram* p;
    ~Destroy() { a.destroy(p); }
  } destroy{a, &prog};
  std::vector<const char*> argv;
  for (const std::string& o : options) argv.push_back(o.c_str());
  s = a.compile(prog, static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  if (a.log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    r.log.resize(log_size);
    if (a.log(prog, r.log.data()) != NVRTC_SUCCESS) r.log.clear();
    while (!r.log.empty() && r.log.back() == '\0') r.log.pop_back();
  }
  if (s != NVRTC_SUCCESS) {
    r.status = s;
    r.failed_call = "nvrtcCompileProgram";
    return r;
  }
  std::size_t size = 0;
  const bool ptx = target == kPtx;
  s = ptx ? a.ptx_size(prog, &size) : a.cubin_size(prog, &size);
  if (s == NVRTC_SUCCESS) {
    r.output.resize(size);
    s = ptx ? a.ptx(prog, r.output.data()) : a.cubin(prog, r.output.data());
  }
  if (s != NVRTC_SUCCESS) {
    r.status = s;
    r.failed_call = ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN";
    r.output.clear();
    return r;
  }
  if (ptx)
    while (!r.output.empty() && r.output.back() == '\0') r.output.pop_back();
  return r;
}

// ------------------------------------------------------------- messages
//
// A frame is a 64-bit length, then that many bytes. Requests (libtx to the
// worker) and replies are frames of these fields (integers in host order:
// both ends are on one machine). The worker first sends a hello: kMagic,
// kVersion, a status (0: NVRTC loaded) and a message.
//   request: kMagic, kVersion, target, fault, name, source, options count,
//            options
//   reply:   kMagic, status, failed_call, log, output, the compile's time in
//            the worker (ns, two 32-bit halves: what the round trip costs
//            beyond it is the price of the child process)
// `fault` is a test hook (TX_TEST_COMPILER_FAULT): the worker crashes, hangs
// or exits instead of compiling, so that tests can see what libtx does then.
constexpr std::uint32_t kMagic = 0x56'4e'58'54;  // "TXNV"
constexpr std::uint32_t kVersion = 2;
enum Fault : std::uint32_t { kNone = 0, kSegv = 1, kAbort = 2, kHang = 3, kExit = 4 };

struct Writer {
  std::string bytes;
  void u32(std::uint32_t v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& s) {
    const std::uint64_t n = s.size();
    bytes.append(reinterpret_cast<const char*>(&n), sizeof n);
    bytes.append(s);
  }
};

struct Reader {
  const std::string& bytes;
  std::size_t at = 0;
  bool ok = true;
  std::uint32_t u32() {
    std::uint32_t v = 0;
    if (at + sizeof v > bytes.size()) return ok = false, 0;
    std::memcpy(&v, bytes.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    std::uint64_t n = 0;
    if (at + sizeof n > bytes.size()) return ok = false, std::string();
    std::memcpy(&n, bytes.data() + at, sizeof n);
    at += sizeof n;
    if (n > bytes.size() - at) return ok = false, std::string();
    std::string s = bytes.substr(at, n);
    at += n;
    return s;
  }
};

// Sends all of `data` (MSG_NOSIGNAL: a peer that is gone is an error return,
// EPIPE, never a SIGPIPE that would end this process).
inline bool send_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

inline bool send_frame(int fd, const std::string& payload) {
  const std::uint64_t n = payload.size();
  return send_all(fd, reinterpret_cast<const char*>(&n), sizeof n) &&
         send_all(fd, payload.data(), payload.size());
}

enum class Read { ok, eof, timeout, error };

// Reads exactly n bytes, waiting until `deadline` (none when
// deadline_ms < 0: the worker waits for requests as long as it lives).
inline Read recv_all(int fd, char* data, std::size_t n,
                     std::chrono::steady_clock::time_point deadline, bool has_deadline) {
  while (n > 0) {
    if (has_deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return Read::timeout;
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return Read::error;
      if (r == 0) return Read::timeout;
    }
    const ssize_t k = ::recv(fd, data, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) return Read::eof;
    if (k < 0) return Read::error;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return Read::ok;
}

// A frame of at most `limit` bytes (a longer length is a broken peer).
inline Read recv_frame(int fd, std::string& payload, std::chrono::steady_clock::time_point deadline,
                       bool has_deadline, std::uint64_t limit = std::uint64_t{1} << 32) {
  std::uint64_t n = 0;
  Read r = recv_all(fd, reinterpret_cast<char*>(&n), sizeof n, deadline, has_deadline);
  if (r != Read::ok) return r;
  if (n > limit) return Read::error;
  payload.resize(n);
  return recv_all(fd, payload.data(), n, deadline, has_deadline);
}

}  // namespace tx::runtime::nvrtc_raw
