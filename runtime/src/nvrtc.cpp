// NVRTC through dlopen, so that libtx has no link-time dependency on the CUDA
// toolkit and loads on machines without one. nvrtc.h is used for the
// prototypes only; every entry point comes from dlsym.
#include "tx/runtime/nvrtc.hpp"

#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <set>
#include <sstream>

#include "nvrtc_isolation.hpp"
#include "nvrtc_raw.hpp"
#include "tx/error.hpp"

namespace tx::runtime {

namespace {

using NvrtcApi = nvrtc_raw::Api;

bool is_dir(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The loader's own search first (LD_LIBRARY_PATH, ldconfig), then the
// toolkit tx was configured with, then wherever the environment says CUDA is.
std::vector<std::string> candidate_paths() {
  const std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> dirs;
#ifdef TX_CUDA_LIBRARY_DIR
  dirs.push_back(TX_CUDA_LIBRARY_DIR);
#endif
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (std::string v = env_or_empty(env); !v.empty()) dirs.push_back(v + "/lib64");
  std::vector<std::string> out = names;
  for (const std::string& d : dirs)
    for (const std::string& n : names) out.push_back(d + "/" + n);
  return out;
}

NvrtcApi* open_nvrtc() {
  auto* api = new NvrtcApi();
  std::string tried;
  for (const std::string& p : candidate_paths()) {
    NvrtcApi a;
    if (nvrtc_raw::load(a, p)) {
      *api = a;
      break;
    }
    // A library that opens but lacks entry points: an NVRTC too old.
    if (a.error.find(" lacks ") != std::string::npos) {
      api->error = a.error;
      return api;
    }
    tried += (tried.empty() ? "" : ", ") + p;
  }
  if (!api->handle)
    api->error = "libnvrtc not found (tried " + tried +
                 "); install the CUDA toolkit or set CUDA_HOME to its root";
  return api;
}

// The file of the loaded NVRTC (an absolute path, whichever search found
// it): what the compiler process loads, so that it runs the very NVRTC
// whose version is part of every cache key.
const std::string& nvrtc_file(const NvrtcApi& a) {
  static const std::string file = [&] {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(a.version), &info) && info.dli_fname &&
        info.dli_fname[0] == '/')
      return std::string(info.dli_fname);
    return a.path;
  }();
  return file;
}

// Opened once, thread-safely (a function-local static), and never closed:
// kernels compiled earlier may still be referenced while the process exits.
std::atomic<bool> g_nvrtc_opened{false};

const NvrtcApi& api() {
  static const NvrtcApi* a = [] {
    const NvrtcApi* opened = open_nvrtc();
    g_nvrtc_opened = true;
    return opened;
  }();
  return *a;
}

const NvrtcApi& need() {
  const NvrtcApi& a = api();
  if (!a.handle) fail("tx.nvrtc", "", {}, a.error);
  return a;
}

void check(const NvrtcApi& a, nvrtcResult r, const char* call, const std::string& program) {
  if (r != NVRTC_SUCCESS)
    fail("tx.nvrtc", program, {}, std::string(call) + " failed: " + a.error_string(r));
}

// Line numbers of NVRTC diagnostics "<program>(<line>): error: ...". The
// program name may itself hold parentheses, so the number is read backwards
// from the "): " that ends it.
std::vector<int> error_lines(const std::string& log) {
  std::vector<int> lines;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);) {
    std::size_t close = l.find("): error");
    if (close == std::string::npos) close = l.find("): catastrophic error");
    if (close == std::string::npos) continue;
    std::size_t open = l.rfind('(', close);
    if (open == std::string::npos || open + 1 == close) continue;
    std::string digits = l.substr(open + 1, close - open - 1);
    if (!std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    lines.push_back(std::atoi(digits.c_str()));
  }
  return lines;
}

// The log with its errors first: each diagnostic ("prog(12): error: ...")
// with the lines that continue it, errors before warnings and remarks, so
// the reason a compilation failed is the first thing read.
std::string errors_first(const std::string& log, std::string* first_error) {
  std::vector<std::pair<bool, std::string>> blocks;  // (is error, text)
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);) {
    bool is_error = l.find("): error") != std::string::npos ||
                    l.find("): catastrophic error") != std::string::npos;
    bool starts = is_error || l.find("): warning") != std::string::npos ||
                  l.find("): remark") != std::string::npos;
    if (starts || blocks.empty()) {
      blocks.emplace_back(is_error, l + "\n");
      if (is_error && first_error && first_error->empty()) {
        auto colon = l.find("error: ");
        *first_error = colon == std::string::npos ? l : l.substr(colon + 7);
      }
    } else {
      blocks.back().second += l + "\n";
    }
  }
  std::string out;
  for (bool want : {true, false})
    for (const auto& [err, text] : blocks)
      if (err == want) out += text;
  return out;
}

// The log, then the source around each error, numbered, the error lines
// marked, so a failure in generated code can be read without the source.
std::string describe_failure(const std::string& log, const std::string& source,
                             const std::vector<int>& bad) {
  std::vector<std::string> src;
  std::istringstream in(source);
  for (std::string l; std::getline(in, l);) src.push_back(l);
  const int n = static_cast<int>(src.size());
  std::set<int> marked(bad.begin(), bad.end()), shown;
  for (int b : marked)
    for (int l = std::max(1, b - 2); l <= std::min(n, b + 2); ++l) shown.insert(l);
  std::ostringstream os;
  os << log;
  if (!log.empty() && log.back() != '\n') os << '\n';
  if (!shown.empty()) os << "source:\n";
  int prev = 0;
  for (int l : shown) {
    if (prev != 0 && l != prev + 1) os << "  ...\n";
    os << (marked.count(l) ? "> " : "  ") << l << " | " << src[static_cast<std::size_t>(l - 1)]
       << '\n';
    prev = l;
  }
  return os.str();
}

std::string cuda_include_dir() {
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (std::string v = env_or_empty(env); !v.empty() && is_dir(v + "/include"))
      return v + "/include";
#ifdef TX_CUDA_INCLUDE_DIR
  return TX_CUDA_INCLUDE_DIR;
#else
  return "/usr/local/cuda/include";
#endif
}

}  // namespace

bool nvrtc_available(std::string* why) {
  const NvrtcApi& a = api();
  if (!a.handle && why) *why = a.error;
  return a.handle != nullptr;
}

std::pair<int, int> nvrtc_version() {
  const NvrtcApi& a = need();
  int major = 0, minor = 0;
  check(a, a.version(&major, &minor), "nvrtcVersion", "");
  return {major, minor};
}

std::vector<std::string> nvrtc_default_options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "-std=c++17", "-default-device", "-I" + cuda_include_dir()};
}

namespace {
std::atomic<std::uint64_t> g_nvrtc_compiles{0};
}  // namespace
std::uint64_t nvrtc_compile_count() { return g_nvrtc_compiles.load(); }
bool nvrtc_loaded() { return g_nvrtc_opened.load(); }

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program_name,
                          const std::string& arch, NvrtcTarget target,
                          const std::vector<std::string>& extra_options) {
  ++g_nvrtc_compiles;
  // NVRTC only emits SASS for a real architecture; say so before compiling
  // rather than failing in nvrtcGetCUBIN with a generic "invalid input".
  if (target == NvrtcTarget::cubin && arch.rfind("sm_", 0) != 0)
    fail("tx.nvrtc", program_name, {},
         "a cubin needs a real architecture (sm_XY or sm_XYa), got '" + arch + "'");
  const NvrtcApi& a = need();
  std::vector<std::string> opts = nvrtc_default_options(arch);
  opts.insert(opts.end(), extra_options.begin(), extra_options.end());
  const nvrtc_raw::Target t = target == NvrtcTarget::ptx ? nvrtc_raw::kPtx : nvrtc_raw::kCubin;
  // In a child process by default (nvrtc.hpp): a crash there is a tx error.
  const nvrtc_raw::Result r =
      compiles_in_child()
          ? detail::compile_in_child(nvrtc_file(a), source, program_name, opts, t, arch)
          : nvrtc_raw::compile(a, source, program_name, opts, t);

  NvrtcOutput out;
  out.log = r.log;
  const auto status = static_cast<nvrtcResult>(r.status);
  if (r.failed_call == "nvrtcCompileProgram") {
    std::vector<int> bad = error_lines(out.log);
    std::string options;
    for (const std::string& o : opts) options += " " + o;
    std::string count = bad.empty()
                            ? std::string(a.error_string(status))
                            : std::to_string(bad.size()) + (bad.size() == 1 ? " error" : " errors");
    std::string first;
    std::string log = errors_first(out.log, &first);
    fail("tx.nvrtc", program_name, {},
         "compilation failed (" + count + ")" + (first.empty() ? "" : ": " + first),
         describe_failure(log, source, bad) + "options:" + options);
  }
  if (!r.failed_call.empty()) check(a, status, r.failed_call.c_str(), program_name);
  if (target == NvrtcTarget::ptx)
    out.ptx = r.output;
  else
    out.cubin.assign(r.output.begin(), r.output.end());
  return out;
}

}  // namespace tx::runtime
