// NVRTC through dlopen: no link-time dependency, so libtx loads anywhere.
// Failures carry the compiler log and the offending source lines.
#include "tx/runtime/nvrtc.hpp"

#include <dlfcn.h>
#include <nvrtc.h>

#include <cstdlib>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "tx/error.hpp"

namespace tx::runtime {

namespace {

struct Nvrtc {
  void* handle = nullptr;
  std::string error;
  decltype(&nvrtcVersion) version = nullptr;
  decltype(&nvrtcCreateProgram) create = nullptr;
  decltype(&nvrtcDestroyProgram) destroy = nullptr;
  decltype(&nvrtcCompileProgram) compile = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&nvrtcGetPTX) ptx = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
  decltype(&nvrtcGetErrorString) error_string = nullptr;
};

std::vector<std::string> candidate_paths() {
  std::vector<std::string> names = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> dirs;
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env)) dirs.push_back(std::string(v) + "/lib64");
#ifdef TX_CUDA_LIBRARY_DIR
  dirs.push_back(TX_CUDA_LIBRARY_DIR);
#endif
  dirs.push_back("/usr/local/cuda/lib64");
  std::vector<std::string> out = names;  // the loader's own search first
  for (const auto& d : dirs)
    for (const auto& n : names) out.push_back(d + "/" + n);
  return out;
}

const Nvrtc& nvrtc() {
  static Nvrtc* lib = [] {
    auto* n = new Nvrtc();
    std::string tried;
    for (const std::string& p : candidate_paths()) {
      n->handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (n->handle) break;
      tried += (tried.empty() ? "" : ", ") + p;
    }
    if (!n->handle) {
      n->error = "libnvrtc not found (tried " + tried + "); install the CUDA toolkit or set CUDA_HOME";
      return n;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(n->handle, name));
      if (!fn) {
        ok = false;
        n->error = std::string("libnvrtc lacks ") + name;
      }
    };
    sym(n->version, "nvrtcVersion");
    sym(n->create, "nvrtcCreateProgram");
    sym(n->destroy, "nvrtcDestroyProgram");
    sym(n->compile, "nvrtcCompileProgram");
    sym(n->log_size, "nvrtcGetProgramLogSize");
    sym(n->log, "nvrtcGetProgramLog");
    sym(n->ptx_size, "nvrtcGetPTXSize");
    sym(n->ptx, "nvrtcGetPTX");
    sym(n->cubin_size, "nvrtcGetCUBINSize");
    sym(n->cubin, "nvrtcGetCUBIN");
    sym(n->error_string, "nvrtcGetErrorString");
    if (!ok) {
      dlclose(n->handle);
      n->handle = nullptr;
    }
    return n;
  }();
  return *lib;
}

const Nvrtc& need() {
  const Nvrtc& n = nvrtc();
  if (!n.handle) fail("nvrtc", "", {}, n.error);
  return n;
}

void check(const Nvrtc& n, nvrtcResult r, const char* call, const std::string& program) {
  if (r != NVRTC_SUCCESS)
    fail("nvrtc", program, {}, std::string(call) + " failed: " + n.error_string(r));
}

// The log, then each error's source line with two lines of context.
std::string describe_failure(const std::string& log, const std::string& source,
                             const std::string& program) {
  std::vector<std::string> lines;
  std::istringstream in(source);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::set<int> bad;
  std::regex at(R"(\((\d+)\): (error|catastrophic error))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), at); it != std::sregex_iterator(); ++it)
    bad.insert(std::stoi((*it)[1].str()));
  std::ostringstream os;
  os << log;
  for (int b : bad) {
    os << "\n  " << program << " around line " << b << ":\n";
    for (int l = std::max(1, b - 2); l <= std::min<int>(static_cast<int>(lines.size()), b + 2); ++l)
      os << (l == b ? "  > " : "    ") << l << " | " << lines[static_cast<std::size_t>(l - 1)] << "\n";
  }
  return os.str();
}

std::string cuda_include_dir() {
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env)) return std::string(v) + "/include";
#ifdef TX_CUDA_INCLUDE_DIR
  return TX_CUDA_INCLUDE_DIR;
#else
  return "/usr/local/cuda/include";
#endif
}

}  // namespace

bool nvrtc_available(std::string* why) {
  const Nvrtc& n = nvrtc();
  if (!n.handle && why) *why = n.error;
  return n.handle != nullptr;
}

std::pair<int, int> nvrtc_version() {
  const Nvrtc& n = need();
  int major = 0, minor = 0;
  check(n, n.version(&major, &minor), "nvrtcVersion", "");
  return {major, minor};
}

std::vector<std::string> nvrtc_default_options(const std::string& arch) {
  return {"--gpu-architecture=" + arch, "-std=c++17", "-default-device", "-I" + cuda_include_dir()};
}

NvrtcOutput nvrtc_compile(const std::string& source, const std::string& program_name,
                          const std::string& arch, NvrtcTarget target,
                          const std::vector<std::string>& extra_options) {
  const Nvrtc& n = need();
  nvrtcProgram prog = nullptr;
  check(n, n.create(&prog, source.c_str(), program_name.c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram", program_name);
  struct Guard {
    const Nvrtc& n;
    nvrtcProgram* p;
    ~Guard() { n.destroy(p); }
  } guard{n, &prog};

  std::vector<std::string> opts = nvrtc_default_options(arch);
  opts.insert(opts.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  nvrtcResult r = n.compile(prog, static_cast<int>(copts.size()), copts.data());

  NvrtcOutput out;
  std::size_t log_size = 0;
  if (n.log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    out.log.resize(log_size);
    n.log(prog, out.log.data());
    out.log.resize(log_size - 1);
  }
  if (r != NVRTC_SUCCESS) {
    std::size_t errors = 0;
    for (std::size_t p = out.log.find(": error"); p != std::string::npos; p = out.log.find(": error", p + 1))
      ++errors;
    fail("nvrtc", program_name, {},
         "compilation failed (" + std::to_string(errors) + " error" + (errors == 1 ? "" : "s") + ", " +
             n.error_string(r) + ")",
         describe_failure(out.log, source, program_name));
  }
  if (target == NvrtcTarget::ptx) {
    std::size_t size = 0;
    check(n, n.ptx_size(prog, &size), "nvrtcGetPTXSize", program_name);
    out.ptx.resize(size);
    check(n, n.ptx(prog, out.ptx.data()), "nvrtcGetPTX", program_name);
    if (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  } else {
    if (arch.rfind("sm_", 0) != 0)
      fail("nvrtc", program_name, {}, "a cubin needs a real architecture (sm_XY), got " + arch);
    std::size_t size = 0;
    check(n, n.cubin_size(prog, &size), "nvrtcGetCUBINSize", program_name);
    out.cubin.resize(size);
    check(n, n.cubin(prog, out.cubin.data()), "nvrtcGetCUBIN", program_name);
  }
  return out;
}

}  // namespace tx::runtime
