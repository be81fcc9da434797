// The register-side transfer of copy/reg and atomic/reg (reg_transfer.cpp).
#pragma once

#include "common.hpp"

namespace tx::lowering::variants {

struct RegisterTransfer {
  const char* origin = "copy/reg";  // the variant named in the generated code
  bool atomic_add = false;          // dst += src by an atomic per element, not a copy
};

// Exactly one operand is a local (register) tile.
Check one_local(const DispatchContext& ctx);

// The copy (or atomic add) between a register tile and a shared / global
// region, partitioned by the register layout.
Plan plan_register_transfer(const DispatchContext& ctx, const RegisterTransfer& how);

}  // namespace tx::lowering::variants
