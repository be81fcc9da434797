// tx: C++20 tile kernels, lowered by scope-aware dispatch, JIT-compiled with
// NVRTC for the GPU or LLVM ORC for the host. The one header a user includes.
//
//   #include <tx/tx.hpp>
//   using namespace tx;
//   PrimFunc f = T::prim_func("k", [&](Handle A_ptr) { ... });
//   Kernel k = compile(f);
//   std::cout << f << k.cuda_source();
//   k(tensor);
#pragma once

// Several ranks (tx::dist: groups, symmetric memory) are a header of their
// own, <tx/runtime/dist.hpp>: with `using namespace tx`, a namespace named
// dist would collide with a variable of that name at global scope (a
// notebook's `std::uniform_real_distribution<double> dist`).

#include "tx/builder.hpp"
#include "tx/dtype.hpp"
#include "tx/error.hpp"
#include "tx/expr.hpp"
#include "tx/fragments.hpp"
#include "tx/group_barrier.hpp"  // T::dist::barrier (ranks meeting inside a kernel)
#include "tx/ir.hpp"
#include "tx/layout.hpp"
#include "tx/printer.hpp"
#include "tx/runtime/graph.hpp"
#include "tx/runtime/kernel.hpp"
#include "tx/runtime/stream.hpp"
#include "tx/runtime/tensor.hpp"
