// Prebuilt kernels: a GPU binary compiled ahead of time together with its
// launch description -- what Kernel::launch needs of the lowered kernel (the
// parameters and their extents, the T::dim facts, the values the launch
// computes, the grid as expressions, the block, the shared memory). A
// process that finds one runs the kernel without building its IR, lowering
// it or generating its CUDA: the first call of an op in a fresh process
// costs a file read and a module load, as a framework's shipped kernels do.
// The IR and CUDA are still there on request (Kernel::source(), cuda_source()
// and a host launch build the kernel then).
//
// The description is text, one line per item:
//   tx-launch 2
//   name <kernel>                    loc <line> <file>
//   block <threads>                  shared <bytes>         noalias (T::no_alias)
//   grid <x> <y> <z> <symbolic 0|1>  gridexpr <axis> <expr>
//   buffer <name> <dtype> <elems> <align> <written 0|1> <symbolic 0|1> <rank> <extent>...
//          [<bound>...]
//   scalar <name> <dtype> <min> <max> <multiple_of>
//   dim <name> <min> <max> <multiple_of> <line> <file>
//   derived <name> div_magic|div_shift <expr>
//   end
// Expressions are integer ones over the T::dim variables and scalar
// parameters, in prefix form: 42, $n, (add $n 2047), (cast i32 $x), ...
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tx/runtime/kernel.hpp"

namespace tx::runtime {

// The launch description of a lowered kernel; nullopt for a kernel that has
// no such description (TMA tensor maps, or an expression outside the
// integer forms above).
std::optional<std::string> describe_launch(const lowering::LoweredKernel& k,
                                           const std::string& kernel_name);

// The parts of a LoweredKernel a launch reads, parsed back; `source` is a
// stand-in PrimFunc that carries the parameters' scalar variables and the
// kernel's location (no body). Throws a tx error naming tx.prebuilt for a
// malformed description.
struct LaunchDescription {
  std::string kernel_name;
  lowering::LoweredKernel info;
};
LaunchDescription parse_launch(const std::string& text);

// An entry of the ahead-of-time folder: the description, then the cubin.
std::vector<char> pack_prebuilt(const std::string& description, const std::vector<char>& cubin);
// The key of a prebuilt kernel: what identifies it without its IR (the op
// library's class key, say) and the GPU arch.
std::string prebuilt_key(const std::string& spec, const std::string& arch);
// The prebuilt kernel stored under `spec` for the GPU of `device` in the
// ahead-of-time folder (runtime::aot_dir()), or nullopt (none there, or a
// damaged entry). `build` makes the full kernel when it is asked for.
std::optional<Kernel> load_prebuilt(const std::string& spec, Device device,
                                    std::function<Kernel()> build);

}  // namespace tx::runtime
