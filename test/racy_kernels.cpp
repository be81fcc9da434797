// Runs the kernels of racy_kernels.hpp, for comparing tx's checked host mode
// with compute-sanitizer racecheck on the GPU (not a test by itself):
//
//   racy_kernels --device=host   each kernel in the checked mode; prints what it reports
//   racy_kernels --device=cuda   each kernel on the GPU (run it under
//                                compute-sanitizer --tool racecheck)
//
// Exit status: 0 when every kernel ran (and, on the host, every expected
// race was reported), 1 otherwise.
#include "racy_kernels.hpp"

#include <cstdio>
#include <cstring>
#include <string>

using namespace tx;

int main(int argc, char** argv) {
  bool host = argc > 1 && std::strcmp(argv[1], "--device=host") == 0;
  int bad = 0;
  for (const auto& k : test::racy_kernels()) {
    try {
      Kernel kernel =
          host ? compile(k.func, {.checked = true}) : compile(k.func, {.device = Device::cuda()});
      std::vector<Tensor> args;
      for (const auto& p : kernel.info().params) {
        std::vector<double> v(static_cast<std::size_t>(p.elems));
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = p.dtype == i32 ? 3 : 1.0 + i % 5;
        args.push_back(Tensor::from_doubles(v, p.shape, p.dtype, kernel.device()));
      }
      kernel.launch(args);
      synchronize();
      std::printf("%s: ran%s\n", k.name.c_str(), host ? ", nothing reported (MISSED)" : "");
      bad += host;
    } catch (const Error& e) {
      std::string first = e.reason();
      bool found = first.find(k.expect) != std::string::npos ||
                   e.detail().find(k.expect) != std::string::npos;
      std::printf("%s: %s%s\n", k.name.c_str(), first.c_str(), found ? "" : " (UNEXPECTED)");
      bad += !found;
    }
  }
  return bad ? 1 : 0;
}
