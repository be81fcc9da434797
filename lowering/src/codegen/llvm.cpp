// emit_llvm: the host form as LLVM IR, node for node with the semantics that
// codegen_cuda gives the same node on the GPU (it is the reference):
//
//  - values: bool is i1 (i8 in memory); f16/bf16 travel as their i16 bits
//    and fp8 as i8 bits, as tx_f16 & co. do in the CUDA prelude; they are
//    converted to and from f32 in integer arithmetic that rounds like the GPU
//    (RNE; e4m3fn saturates to +-448; e5m2 overflows to Inf; NaN becomes the
//    canonical 0x7FFF for f16/bf16 and 0x7F for fp8; a NaN widened from
//    f16/fp8 is the GPU's canonical 0x7FFFFFFF) and that LLVM can vectorize;
//  - signed 32/64-bit arithmetic is nsw (overflow is undefined in CUDA C
//    too), which lets LLVM widen thread-loop indices and vectorize;
//  - float -> int conversions saturate and send NaN to 0, as cvt.rzi does;
//  - min/max on floats propagate NaN (llvm.minimum/maximum, like tx_min/max),
//    as the canonical NaN for f32; other float arithmetic keeps x86's NaN
//    payloads, which can differ from the GPU's canonical NaN in bits only;
//  - select, && and || only evaluate the arm that is taken when an arm
//    loads, as C's ?: / && / || do (the load may be what the guard guards);
//  - integers narrower than int are computed in int and narrowed, as C's
//    promotions do; integer division never traps (see int_binary);
//  - CopyBytes is a raw byte copy; the math intrinsics are LLVM intrinsics or
//    libm calls resolved from the process.
#include "llvm.hpp"

#include <llvm/IR/BasicBlock.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>

#include <cmath>
#include <optional>
#include <unordered_map>

#include "tx/expr.hpp"
#include "tx/lowering/host_form.hpp"
#include "tx/printer.hpp"

namespace tx::lowering {

namespace {

using llvm::Value;

[[noreturn]] void internal(const std::string& what, SourceLoc loc) {
  fail("tx.host_jit", "", loc, "internal: " + what);
}

// Could evaluating e read memory that a guard protects, or run a check of
// the checked mode? (Integer division cannot trap here: see int_binary.)
bool may_trap(const Expr& e) {
  struct Finder : IRVisitor {
    bool found = false;
    using IRVisitor::visit_node;
    void visit_node(const LoadNode*) override { found = true; }
    // The checked mode's checks report what they see: only where it runs.
    void visit_node(const CallNode* c) override {
      if (c->op == Intrinsic::check_access || c->op == Intrinsic::check_divisor) found = true;
      IRVisitor::visit_node(c);
    }
  } f;
  f.visit(e);
  return f.found;
}

// Scratch placement: the kernel's shared buffers at their lowering offsets
// (so buffers that lowering overlaps stay overlapped), then every other
// per-CTA buffer of the host form, 64-byte aligned, then the register tiles
// too large for a worker thread's stack (a thread's registers are private
// to one iteration of a thread loop, so one copy per CTA serves them all).
constexpr std::int64_t kMaxStackTileBytes = 16 * 1024;
struct ScratchLayout {
  std::unordered_map<const VarNode*, std::int64_t> offset;
  std::int64_t bytes = 0;
};

// With fibers every thread has a stack of its own: register tiles of any
// size stay there (one copy per CTA would be shared by interleaved threads).
ScratchLayout layout_scratch(const LoweredKernel& k, const Stmt& body, bool fibers) {
  ScratchLayout L;
  for (const SharedAllocation& a : k.shared) L.offset[a.buffer->data.get()] = a.offset;
  std::int64_t end = (k.shared_bytes + 63) / 64 * 64;
  for_each_stmt(body, [&](const Stmt& s) {
    auto* a = s.as<AllocateNode>();
    if (!a) return;
    const std::int64_t bytes = a->buffer->storage_elems() * a->buffer->dtype.bytes();
    if (a->buffer->scope == MemScope::local && (fibers || bytes <= kMaxStackTileBytes)) return;
    const VarNode* d = a->buffer->data.get();
    if (L.offset.count(d)) return;
    L.offset[d] = end;
    end += (a->buffer->storage_elems() * a->buffer->dtype.bytes() + 63) / 64 * 64;
  });
  L.bytes = end;
  return L;
}

class Emitter {
 public:
  Emitter(llvm::LLVMContext& c, llvm::Module& m, const LoweredKernel& k, Var thread, bool checked)
      : C(c),
        M(m),
        B(c, llvm::ConstantFolder(), llvm::IRBuilderCallbackInserter([this](llvm::Instruction* i) {
            ++block_instructions_;
            if (llvm::isa<llvm::CallInst>(i)) ++block_calls_;
          })),
        k_(k),
        thread_(std::move(thread)),
        checked_(checked) {
    // a * b + c may become one fma, as nvcc contracts it on the GPU: the two
    // devices then round the same expressions the same way.
    llvm::FastMathFlags fmf;
    fmf.setAllowContract(true);
    B.setFastMathFlags(fmf);
  }

  std::int64_t emit_function(const Stmt& body, const std::string& name) {
    ScratchLayout L = layout_scratch(k_, body, false);
    llvm::Type* ptr = llvm::PointerType::getUnqual(C);
    llvm::Type* i64 = B.getInt64Ty();
    auto* fty = llvm::FunctionType::get(B.getVoidTy(), {ptr, i64, i64, ptr, ptr, ptr}, false);
    F = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, M);
    F->addFnAttr(llvm::Attribute::NoUnwind);
    F->addFnAttr(llvm::Attribute::MustProgress);
    F->addParamAttr(3, llvm::Attribute::NoAlias);
    llvm::Value* args = F->getArg(0);
    llvm::Value* first = F->getArg(1);
    llvm::Value* last = F->getArg(2);
    llvm::Value* scratch = F->getArg(3);
    checker_ = F->getArg(4);
    checker_->setName("checker");
    llvm::Value* grid_arg = F->getArg(5);
    grid_arg->setName("grid");
    args->setName("args");
    first->setName("first_block");
    last->setName("end_block");
    scratch->setName("scratch");

    entry_ = llvm::BasicBlock::Create(C, "entry", F);
    B.SetInsertPoint(entry_);
    bind_parameters(args, scratch, L);

    // for (block = first; block < end; ++block): one CTA after another.
    llvm::BasicBlock* header = llvm::BasicBlock::Create(C, "cta.header", F);
    llvm::BasicBlock* bodyb = llvm::BasicBlock::Create(C, "cta.body", F);
    llvm::BasicBlock* exit = llvm::BasicBlock::Create(C, "cta.exit", F);
    B.CreateBr(header);
    B.SetInsertPoint(header);
    llvm::PHINode* lin = B.CreatePHI(i64, 2, "cta");
    lin->addIncoming(first, entry_);
    B.CreateCondBr(B.CreateICmpSLT(lin, last), bodyb, exit);
    B.SetInsertPoint(bodyb);
    bind_block_index(lin, grid_arg);
    if (checked_)
      B.CreateCall(check_fn("tx_host_check_cta", B.getVoidTy(), {i64}), {checker_, lin});
    emit(body);
    Value* next = B.CreateAdd(lin, B.getInt64(1), "cta.next", false, true);
    lin->addIncoming(next, B.GetInsertBlock());
    B.CreateBr(header);
    B.SetInsertPoint(exit);
    B.CreateRetVoid();
    return L.bytes;
  }

  // Fiber mode: one GPU thread of one CTA,
  //   void <name>(void* const* args, int64 cta, void* scratch, void* fibers,
  //               const int64* grid, int32 thread)
  // whose barriers, mbarriers and shuffles call the fiber scheduler
  // (fibers.hpp) with a site number into *sites.
  std::int64_t emit_fiber_function(const Stmt& body, const std::string& name,
                                   std::vector<WaitSite>* sites, const CheckPlan* checks) {
    fibers_ = true;
    sites_ = sites;
    plan_ = checks;
    checked_ = checks != nullptr;
    ScratchLayout L = layout_scratch(k_, body, true);
    llvm::Type* ptr = llvm::PointerType::getUnqual(C);
    llvm::Type* i64 = B.getInt64Ty();
    auto* fty =
        llvm::FunctionType::get(B.getVoidTy(), {ptr, i64, ptr, ptr, ptr, B.getInt32Ty()}, false);
    F = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, name, M);
    F->addFnAttr(llvm::Attribute::NoUnwind);
    Value* args = F->getArg(0);
    Value* cta = F->getArg(1);
    Value* scratch = F->getArg(2);
    fibers_arg_ = F->getArg(3);
    Value* grid_arg = F->getArg(4);
    fiber_thread_ = F->getArg(5);
    args->setName("args");
    cta->setName("cta");
    scratch->setName("scratch");
    fibers_arg_->setName("fibers");
    grid_arg->setName("grid");
    fiber_thread_->setName("threadIdx.x");
    checker_ = llvm::ConstantPointerNull::get(llvm::PointerType::getUnqual(C));
    entry_ = llvm::BasicBlock::Create(C, "entry", F);
    B.SetInsertPoint(entry_);
    if (checked_) {
      // The scheduler's checker (its vector clocks order this thread's accesses).
      auto callee =
          M.getOrInsertFunction("tx_fiber_checker", llvm::FunctionType::get(ptr, {ptr}, false));
      checker_ = B.CreateCall(callee, {fibers_arg_}, "checker");
    }
    bind_parameters(args, scratch, L);
    bind_block_index(cta, grid_arg);
    emit(body);
    B.CreateRetVoid();
    return L.bytes;
  }

 private:
  // args[i]: a buffer's storage, or a pointer to a scalar's value; after
  // the parameters, one pointer per T::dim (an int32). Shared buffers and
  // per-CTA arrays live in `scratch` at L's offsets.
  void bind_parameters(Value* args, Value* scratch, const ScratchLayout& L) {
    llvm::Type* ptr = llvm::PointerType::getUnqual(C);
    const auto& params = k_.lowered->params;
    for (std::size_t i = 0; i < params.size(); ++i) {
      Value* slot = B.CreateConstInBoundsGEP1_64(ptr, args, i);
      if (params[i].scalar.defined()) {
        const Var& v = params[i].scalar;
        auto* at = B.CreateAlignedLoad(ptr, slot, llvm::Align(8));
        vars_[v.get()] = from_mem(
            B.CreateAlignedLoad(mem_type(v.dtype()), at, llvm::Align(v.dtype().bytes()), v.name()),
            v.dtype());
        continue;
      }
      if (!params[i].buffer) continue;
      auto* p = B.CreateAlignedLoad(ptr, slot, llvm::Align(8), params[i].buffer->name);
      bases_[params[i].buffer->data.get()] = p;
    }
    const auto& dims = k_.lowered->dims;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      Value* slot = B.CreateConstInBoundsGEP1_64(ptr, args, params.size() + d);
      auto* at = B.CreateAlignedLoad(ptr, slot, llvm::Align(8));
      vars_[dims[d].var.get()] =
          B.CreateAlignedLoad(B.getInt32Ty(), at, llvm::Align(4), dims[d].var.name());
    }
    // After the extents: each symmetric buffer's table of every rank's copy
    // (T::peer loads its entries).
    std::size_t table = params.size() + dims.size();
    for (const Param& p : params) {
      if (!p.symmetric) continue;
      Value* slot = B.CreateConstInBoundsGEP1_64(ptr, args, table++);
      peer_tables_[p.buffer->data.get()] =
          B.CreateAlignedLoad(ptr, slot, llvm::Align(8), p.buffer->name + ".peers");
    }
    for (auto& [data, off] : L.offset)
      bases_[data] = B.CreateConstInBoundsGEP1_64(B.getInt8Ty(), scratch,
                                                  static_cast<std::uint64_t>(off), data->name);
  }

  // blockIdx from the linear CTA id and this launch's grid (a shape-generic
  // kernel's is computed at launch).
  void bind_block_index(Value* lin, Value* grid_arg) {
    llvm::Type* i64 = B.getInt64Ty();
    Value* gx = B.CreateAlignedLoad(i64, grid_arg, llvm::Align(8), "gridDim.x");
    Value* gy = B.CreateAlignedLoad(i64, B.CreateConstInBoundsGEP1_64(i64, grid_arg, 1),
                                    llvm::Align(8), "gridDim.y");
    grid_x_ = gx;
    grid_y_ = gy;
    Value* yz = B.CreateUDiv(lin, gx);
    block_idx_[0] = B.CreateTrunc(B.CreateURem(lin, gx), B.getInt32Ty(), "blockIdx.x");
    block_idx_[1] = B.CreateTrunc(B.CreateURem(yz, gy), B.getInt32Ty(), "blockIdx.y");
    block_idx_[2] = B.CreateTrunc(B.CreateUDiv(yz, gy), B.getInt32Ty(), "blockIdx.z");
  }

  // ------------------------------------------------------------- types
  llvm::Type* value_type(DType t) {
    switch (t.code) {
      case TypeCode::Bool:
        return B.getInt1Ty();
      case TypeCode::Int:
      case TypeCode::UInt:
        return B.getIntNTy(t.bits);
      case TypeCode::Float:
        return t.bits == 64 ? B.getDoubleTy() : t.bits == 32 ? B.getFloatTy() : B.getInt16Ty();
      case TypeCode::BFloat:
        return B.getInt16Ty();
      case TypeCode::Float8E4M3:
      case TypeCode::Float8E5M2:
        return B.getInt8Ty();
      default:
        internal("no host type for " + t.name(), {});
    }
  }
  llvm::Type* mem_type(DType t) { return t.is_bool() ? B.getInt8Ty() : value_type(t); }
  Value* to_mem(Value* v, DType t) { return t.is_bool() ? B.CreateZExt(v, B.getInt8Ty()) : v; }
  Value* from_mem(Value* v, DType t) { return t.is_bool() ? B.CreateICmpNE(v, B.getInt8(0)) : v; }

  // -------------------------------------------------- float conversions
  // The f32 NaN that NVIDIA GPUs produce (cvt from f16/fp8, arithmetic).
  static constexpr std::uint32_t kCanonicalNaN = 0x7FFFFFFF;
  Value* k32(std::uint32_t v) { return B.getInt32(v); }
  Value* f32c(float v) { return llvm::ConstantFP::get(B.getFloatTy(), v); }
  Value* bits(Value* f) { return B.CreateBitCast(f, B.getInt32Ty()); }
  Value* as_float(Value* u) { return B.CreateBitCast(u, B.getFloatTy()); }
  Value* fabs(Value* f) { return B.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, f); }
  Value* rint_to_u32(Value* f) {
    Value* r = B.CreateUnaryIntrinsic(llvm::Intrinsic::rint, f);
    return B.CreateIntrinsic(llvm::Intrinsic::fptoui_sat, {B.getInt32Ty(), B.getFloatTy()}, {r});
  }

  // cvt.rn.f16.f32
  Value* f32_to_f16(Value* x) {
    Value* u = bits(x);
    Value* sign = B.CreateAnd(B.CreateLShr(u, 16), k32(0x8000));
    Value* a = B.CreateAnd(u, k32(0x7FFFFFFF));
    Value* rounded =
        B.CreateAdd(a, B.CreateAdd(k32(0xFFF), B.CreateAnd(B.CreateLShr(a, 13), k32(1))));
    Value* normal = B.CreateSub(B.CreateLShr(rounded, 13), k32(112u << 10));
    Value* sub = rint_to_u32(B.CreateFMul(as_float(a), f32c(16777216.0f)));  // units of 2^-24
    Value* r = B.CreateSelect(B.CreateICmpULT(a, k32(0x38800000)), sub, normal);
    r = B.CreateSelect(B.CreateICmpUGE(a, k32(0x477FF000)), k32(0x7C00), r);  // rounds to Inf
    r = B.CreateOr(r, sign);
    r = B.CreateSelect(B.CreateICmpUGT(a, k32(0x7F800000)), k32(0x7FFF), r);
    return B.CreateTrunc(r, B.getInt16Ty());
  }
  Value* f16_to_f32(Value* h16) {
    Value* h = B.CreateZExt(h16, B.getInt32Ty());
    Value* sign = B.CreateShl(B.CreateAnd(h, k32(0x8000)), 16);
    Value* e = B.CreateAnd(B.CreateLShr(h, 10), k32(0x1F));
    Value* m = B.CreateAnd(h, k32(0x3FF));
    Value* normal = B.CreateOr(B.CreateShl(B.CreateAdd(e, k32(112)), 23), B.CreateShl(m, 13));
    Value* special = B.CreateOr(k32(0x7F800000), B.CreateShl(m, 13));
    Value* sub =
        bits(B.CreateFMul(B.CreateUIToFP(m, B.getFloatTy()), f32c(5.9604644775390625e-8f)));
    Value* r = B.CreateSelect(B.CreateICmpEQ(e, k32(0x1F)), special, normal);
    r = B.CreateOr(B.CreateSelect(B.CreateICmpEQ(e, k32(0)), sub, r), sign);
    Value* nan = B.CreateAnd(B.CreateICmpEQ(e, k32(0x1F)), B.CreateICmpNE(m, k32(0)));
    return as_float(B.CreateSelect(nan, k32(kCanonicalNaN), r));
  }
  // cvt.rn.bf16.f32
  Value* f32_to_bf16(Value* x) {
    Value* u = bits(x);
    Value* r = B.CreateLShr(
        B.CreateAdd(u, B.CreateAdd(k32(0x7FFF), B.CreateAnd(B.CreateLShr(u, 16), k32(1)))), 16);
    Value* nan = B.CreateICmpUGT(B.CreateAnd(u, k32(0x7FFFFFFF)), k32(0x7F800000));
    r = B.CreateSelect(nan, k32(0x7FFF), r);
    return B.CreateTrunc(r, B.getInt16Ty());
  }
  Value* bf16_to_f32(Value* h) {
    return as_float(B.CreateShl(B.CreateZExt(h, B.getInt32Ty()), 16));
  }
  // tx_f32_to_f8e5m2 of the CUDA prelude.
  Value* f32_to_e5m2(Value* x) {
    Value* s = B.CreateAnd(B.CreateLShr(bits(x), 24), k32(0x80));
    Value* a = fabs(x);
    Value* ua = bits(a);
    Value* u =
        B.CreateAdd(ua, B.CreateAdd(k32(0xFFFFF), B.CreateAnd(B.CreateLShr(ua, 21), k32(1))));
    Value* normal = B.CreateOr(B.CreateShl(B.CreateSub(B.CreateLShr(u, 23), k32(112)), 2),
                               B.CreateAnd(B.CreateLShr(u, 21), k32(3)));
    Value* sub = rint_to_u32(B.CreateFMul(a, f32c(65536.0f)));
    Value* r = B.CreateSelect(B.CreateFCmpOLT(a, f32c(6.103515625e-05f)), sub, normal);
    r = B.CreateSelect(B.CreateFCmpOGE(a, f32c(61440.0f)), k32(0x7C), r);
    r = B.CreateSelect(B.CreateFCmpUNO(a, a), k32(0x7F), B.CreateOr(s, r));  // canonical NaN
    return B.CreateTrunc(r, B.getInt8Ty());
  }
  Value* e5m2_to_f32(Value* v) {
    return f16_to_f32(B.CreateShl(B.CreateZExt(v, B.getInt16Ty()), 8));
  }
  // tx_f32_to_f8e4m3 of the CUDA prelude.
  Value* f32_to_e4m3(Value* x) {
    Value* s = B.CreateAnd(B.CreateLShr(bits(x), 24), k32(0x80));
    Value* a = fabs(x);
    Value* ua = bits(a);
    Value* u =
        B.CreateAdd(ua, B.CreateAdd(k32(0x7FFFF), B.CreateAnd(B.CreateLShr(ua, 20), k32(1))));
    Value* e = B.CreateSub(B.CreateLShr(u, 23), k32(120));
    Value* m = B.CreateAnd(B.CreateLShr(u, 20), k32(7));
    Value* over = B.CreateOr(B.CreateICmpUGT(e, k32(15)),
                             B.CreateAnd(B.CreateICmpEQ(e, k32(15)), B.CreateICmpEQ(m, k32(7))));
    Value* normal = B.CreateSelect(over, k32(0x7E), B.CreateOr(B.CreateShl(e, 3), m));
    Value* sub = rint_to_u32(B.CreateFMul(a, f32c(512.0f)));
    Value* r = B.CreateSelect(B.CreateFCmpOLT(a, f32c(0.015625f)), sub, normal);
    r = B.CreateSelect(B.CreateFCmpOGE(a, f32c(448.0f)), k32(0x7E), r);
    r = B.CreateSelect(B.CreateFCmpUNO(a, a), k32(0x7F), B.CreateOr(s, r));  // canonical NaN
    return B.CreateTrunc(r, B.getInt8Ty());
  }
  Value* e4m3_to_f32(Value* v8) {
    Value* v = B.CreateZExt(v8, B.getInt32Ty());
    Value* s = B.CreateShl(B.CreateAnd(v, k32(0x80)), 24);
    Value* e = B.CreateAnd(B.CreateLShr(v, 3), k32(0xF));
    Value* m = B.CreateAnd(v, k32(7));
    Value* normal = B.CreateOr(B.CreateShl(B.CreateAdd(e, k32(120)), 23), B.CreateShl(m, 20));
    Value* sub = bits(B.CreateFMul(B.CreateUIToFP(m, B.getFloatTy()), f32c(0.001953125f)));
    Value* r = B.CreateSelect(B.CreateICmpEQ(e, k32(0)), sub, normal);
    Value* nan = B.CreateAnd(B.CreateICmpEQ(e, k32(15)), B.CreateICmpEQ(m, k32(7)));
    return as_float(B.CreateSelect(nan, k32(kCanonicalNaN), B.CreateOr(r, s)));
  }

  Value* decode(Value* v, DType t) {
    switch (t.code) {
      case TypeCode::Float:
        return f16_to_f32(v);
      case TypeCode::BFloat:
        return bf16_to_f32(v);
      case TypeCode::Float8E4M3:
        return e4m3_to_f32(v);
      case TypeCode::Float8E5M2:
        return e5m2_to_f32(v);
      default:
        internal("decode of " + t.name(), {});
    }
  }
  Value* encode(Value* f, DType t) {
    switch (t.code) {
      case TypeCode::Float:
        return f32_to_f16(f);
      case TypeCode::BFloat:
        return f32_to_bf16(f);
      case TypeCode::Float8E4M3:
        return f32_to_e4m3(f);
      case TypeCode::Float8E5M2:
        return f32_to_e5m2(f);
      default:
        internal("encode to " + t.name(), {});
    }
  }

  // C conversion semantics of codegen_cuda's casts.
  Value* cast(Value* v, DType from, DType to) {
    if (from == to) return v;
    if (from.is_low_precision_float()) {
      v = decode(v, from);
      from = f32;
      if (from == to) return v;
    }
    if (to.is_low_precision_float()) return encode(cast(v, from, f32), to);
    llvm::Type* T = value_type(to);
    if (to.is_bool()) {
      if (from.is_float()) return B.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
      return B.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
    }
    if (from.is_bool()) return to.is_float() ? B.CreateUIToFP(v, T) : B.CreateZExt(v, T);
    if (from.is_float() && to.is_float()) return B.CreateFPCast(v, T);
    if (to.is_float()) return from.is_int() ? B.CreateSIToFP(v, T) : B.CreateUIToFP(v, T);
    if (from.is_float()) {
      // cvt.rzi saturates and sends NaN to 0; narrow targets wrap from 32 bits.
      if (to.bits < 32) {
        Value* w =
            B.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {B.getInt32Ty(), v->getType()}, {v});
        return B.CreateTrunc(w, T);
      }
      auto id = to.is_int() ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
      return B.CreateIntrinsic(id, {T, v->getType()}, {v});
    }
    return B.CreateIntCast(v, T, from.is_int());
  }

  // ----------------------------------------------------------- exprs
  Value* emit(const Expr& e) {
    switch (e.kind()) {
      case ExprKind::IntImm: {
        auto* n = e.as<IntImmNode>();
        if (n->dtype.is_bool()) return B.getInt1(n->value != 0);
        return llvm::ConstantInt::get(value_type(n->dtype), static_cast<std::uint64_t>(n->value),
                                      n->dtype.is_int());
      }
      case ExprKind::FloatImm: {
        auto* n = e.as<FloatImmNode>();
        if (n->dtype.is_low_precision_float())
          return llvm::ConstantInt::get(value_type(n->dtype), encode_bits(n->value, n->dtype));
        if (n->dtype == f32)
          return llvm::ConstantFP::get(B.getFloatTy(),
                                       static_cast<double>(static_cast<float>(n->value)));
        return llvm::ConstantFP::get(B.getDoubleTy(), n->value);
      }
      case ExprKind::Var: {
        auto* n = e.as<VarNode>();
        auto it = vars_.find(n);
        if (it == vars_.end()) internal("variable " + n->name + " used outside its scope", n->loc);
        return it->second;
      }
      case ExprKind::Cast: {
        auto* n = e.as<CastNode>();
        if (promotes(n->value.dtype())) return cast(emit_c(n->value), i32, n->dtype);
        return cast(emit(n->value), n->value.dtype(), n->dtype);
      }
      case ExprKind::Binary:
        return emit_binary(e.as<BinaryNode>());
      case ExprKind::Unary:
        return emit_unary(e);
      case ExprKind::Select: {
        auto* n = e.as<SelectNode>();
        if (Value* v = checked_ ? guarded_load(n) : nullptr) return v;
        if (may_trap(n->t) || may_trap(n->f)) return lazy(n->cond, n->t, n->f);
        Value* c = emit(n->cond);
        Value* t = emit(n->t);
        Value* f = emit(n->f);
        return B.CreateSelect(c, t, f);
      }
      case ExprKind::Call:
        return emit_call(e.as<CallNode>());
      case ExprKind::Load: {
        auto* n = e.as<LoadNode>();
        DType t = n->buffer->dtype;
        Value* p = address(n->buffer, n->indices[0], n->loc);
        return from_mem(B.CreateAlignedLoad(mem_type(t), p, llvm::Align(t.bytes())), t);
      }
    }
    internal("unknown expression", e->loc);
  }

  // instrument_checks' guarded load, select(check_access(...), A[i], 0),
  // without a branch: the load reads a constant zero in place of A[i] when
  // the check fails. A branch per load made a checked kernel of straight-line
  // code two basic blocks per load, and LLVM's code generator is superlinear
  // in a function's blocks (a 10,000-term dot product: 9 s checked against
  // 0.1 s unchecked); as one block it compiles in time linear in its size.
  // Only where nothing is skipped by going branchless: an index with a load
  // (guarded itself) or a check of its own is evaluated only when taken.
  Value* guarded_load(const SelectNode* n) {
    auto* c = n->cond.as<CallNode>();
    auto* l = n->t.as<LoadNode>();
    if (!c || c->op != Intrinsic::check_access || !l || !is_zero_bits(n->f) ||
        has_checks_or_loads(l->indices[0]))
      return nullptr;
    Value* ok = emit(n->cond);
    DType t = l->buffer->dtype;
    Value* p = B.CreateSelect(ok, address(l->buffer, l->indices[0], l->loc), zero_slot());
    // The zero slot's bits are the false arm's value for every dtype (0,
    // 0.0, false, the low-precision formats' zero bits): no value select.
    return from_mem(B.CreateAlignedLoad(mem_type(t), p, llvm::Align(t.bytes())), t);
  }

  static bool is_zero_bits(const Expr& e) {
    if (auto i = as_const_int(e)) return *i == 0;
    if (auto* f = e.as<FloatImmNode>()) return f->value == 0.0 && !std::signbit(f->value);
    if (auto* c = e.as<CallNode>(); c && c->op == Intrinsic::reinterpret && c->args.size() == 1)
      if (auto i = as_const_int(c->args[0])) return *i == 0;
    return false;
  }

  static bool has_checks_or_loads(const Expr& e) {
    struct Finder : IRVisitor {
      bool found = false;
      using IRVisitor::visit_node;
      void visit_node(const LoadNode*) override { found = true; }
      void visit_node(const CallNode* c) override {
        found = found || c->op == Intrinsic::check_access || c->op == Intrinsic::check_divisor ||
                c->op == Intrinsic::check_index;
        IRVisitor::visit_node(c);
      }
    } f;
    f.visit(e);
    return f.found;
  }

  // 16 zero bytes, aligned for any element a load reads.
  llvm::Constant* zero_slot() {
    if (!zero_slot_) {
      auto* ty = llvm::ArrayType::get(B.getInt8Ty(), 16);
      auto* g =
          new llvm::GlobalVariable(M, ty, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
                                   llvm::ConstantAggregateZero::get(ty), "tx.zero");
      g->setAlignment(llvm::Align(16));
      zero_slot_ = g;
    }
    return zero_slot_;
  }

  // Straight-line code (a C++ loop unrolled into the kernel, a checked
  // kernel's calls) goes into blocks of bounded size: LLVM's fast register
  // allocator, which compiles the kernels too large to optimize, takes time
  // quadratic in the calls of one block (llc -O0, calls in one block: 20,000
  // 0.9 s, 40,000 2.6 s, 80,000 9.2 s; in blocks of 250: 1.1, 2.2, 4.4 s).
  // Split between statements, where the current block is still open; the
  // optimizer merges the blocks again where it runs.
  void split_long_block() {
    constexpr int kMaxBlockCalls = 256, kMaxBlockInstructions = 4096;
    if (B.GetInsertBlock() != counted_block_) {
      counted_block_ = B.GetInsertBlock();
      block_calls_ = block_instructions_ = 0;
    }
    if (!counted_block_ || counted_block_->getTerminator() ||
        (block_calls_ < kMaxBlockCalls && block_instructions_ < kMaxBlockInstructions))
      return;
    auto* next = llvm::BasicBlock::Create(C, "straight", F);
    B.CreateBr(next);
    B.SetInsertPoint(next);
    counted_block_ = next;
    block_calls_ = block_instructions_ = 0;
  }

  // c ? t : f evaluating only the arm taken.
  Value* lazy(const Expr& c, const Expr& t, const Expr& f) {
    Value* cv = emit(c);
    auto* tb = llvm::BasicBlock::Create(C, "sel.t", F);
    auto* fb = llvm::BasicBlock::Create(C, "sel.f", F);
    auto* join = llvm::BasicBlock::Create(C, "sel.join", F);
    B.CreateCondBr(cv, tb, fb);
    B.SetInsertPoint(tb);
    Value* tv = emit(t);
    llvm::BasicBlock* tend = B.GetInsertBlock();
    B.CreateBr(join);
    B.SetInsertPoint(fb);
    Value* fv = emit(f);
    llvm::BasicBlock* fend = B.GetInsertBlock();
    B.CreateBr(join);
    B.SetInsertPoint(join);
    llvm::PHINode* phi = B.CreatePHI(tv->getType(), 2);
    phi->addIncoming(tv, tend);
    phi->addIncoming(fv, fend);
    return phi;
  }

  // f16/bf16/fp8 arithmetic is legalized to f32 by lowering; should any be
  // left, it is computed in f32 and rounded back, as that pass would have.
  Value* emit_binary(const BinaryNode* n) {
    DType t = n->a.dtype();
    if (t.is_low_precision_float()) {
      Expr r = make_binary(n->op, make_cast(f32, n->a), make_cast(f32, n->b), n->loc);
      return emit(binop_is_comparison(n->op) ? r : make_cast(n->dtype, r, n->loc));
    }
    if (n->op == BinOp::And || n->op == BinOp::Or) {
      bool is_and = n->op == BinOp::And;
      if (may_trap(n->b))
        return is_and ? lazy(n->a, n->b, make_bool(false)) : lazy(n->a, make_bool(true), n->b);
      Value* a = emit(n->a);
      Value* b = emit(n->b);
      return is_and ? B.CreateLogicalAnd(a, b) : B.CreateLogicalOr(a, b);
    }
    if (promotes(t)) {
      if (binop_is_comparison(n->op)) return compare(n->op, emit_c(n->a), emit_c(n->b), true);
      return narrow(c_binary(n), t);
    }
    Value* a = emit(n->a);
    Value* b = emit(n->b);
    if (t.is_float()) return float_binary(n, a, b);
    if (binop_is_comparison(n->op)) return compare(n->op, a, b, t.is_int());
    return int_binary(n, a, b, t.is_int(), t.is_int());
  }

  // C promotes bool, char and short operands to int: their arithmetic is
  // done in int, and only converting the result to such a type (a store, a
  // let, a cast) narrows it again. So (int)(a8 + b8) does not wrap, and
  // ~b of a bool is -1 or -2, which is true as a bool. emit_c gives the value
  // of an expression as C has it: i32 for these types.
  static bool promotes(DType t) { return t.is_bool() || (t.is_integer() && t.bits < 32); }
  Value* promote(Value* v, DType t) { return B.CreateIntCast(v, B.getInt32Ty(), t.is_int()); }
  Value* narrow(Value* v32, DType t) {
    return t.is_bool() ? B.CreateICmpNE(v32, k32(0)) : B.CreateTrunc(v32, value_type(t));
  }
  Value* c_binary(const BinaryNode* n) {
    return int_binary(n, emit_c(n->a), emit_c(n->b), true, false);
  }
  Value* emit_c(const Expr& e) {
    if (!promotes(e.dtype())) return emit(e);
    if (auto* b = e.as<BinaryNode>(); b && !binop_is_comparison(b->op) && !binop_is_logical(b->op))
      return c_binary(b);
    if (auto* u = e.as<UnaryNode>(); u && u->op != UnOp::Not) {
      Value* a = emit_c(u->a);
      return u->op == UnOp::Neg ? B.CreateSub(k32(0), a) : B.CreateNot(a);
    }
    return promote(emit(e), e.dtype());
  }

  Value* compare(BinOp op, Value* a, Value* b, bool sg) {
    using P = llvm::CmpInst::Predicate;
    switch (op) {
      case BinOp::EQ:
        return B.CreateICmp(P::ICMP_EQ, a, b);
      case BinOp::NE:
        return B.CreateICmp(P::ICMP_NE, a, b);
      case BinOp::LT:
        return B.CreateICmp(sg ? P::ICMP_SLT : P::ICMP_ULT, a, b);
      case BinOp::LE:
        return B.CreateICmp(sg ? P::ICMP_SLE : P::ICMP_ULE, a, b);
      case BinOp::GT:
        return B.CreateICmp(sg ? P::ICMP_SGT : P::ICMP_UGT, a, b);
      case BinOp::GE:
        return B.CreateICmp(sg ? P::ICMP_SGE : P::ICMP_UGE, a, b);
      default:
        internal(std::string("comparison ") + binop_name(op), {});
    }
  }

  // tx_min/tx_max return a + b when either is NaN, which on the GPU is the
  // canonical f32 NaN (x86 would keep an operand's payload instead).
  Value* canonical_nan(Value* a, Value* b, Value* r) {
    if (!r->getType()->isFloatTy()) return r;
    return B.CreateSelect(B.CreateFCmpUNO(a, b), as_float(k32(kCanonicalNaN)), r);
  }

  Value* float_binary(const BinaryNode* n, Value* a, Value* b) {
    auto floor = [&](Value* x) { return B.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x); };
    switch (n->op) {
      case BinOp::Add:
        return B.CreateFAdd(a, b);
      case BinOp::Sub:
        return B.CreateFSub(a, b);
      case BinOp::Mul:
        return B.CreateFMul(a, b);
      case BinOp::Div:
        return B.CreateFDiv(a, b);
      case BinOp::Mod:
        return B.CreateFRem(a, b);  // fmodf
      case BinOp::FloorDiv:
        return floor(B.CreateFDiv(a, b));
      case BinOp::FloorMod:
        return B.CreateFSub(a, B.CreateFMul(floor(B.CreateFDiv(a, b)), b));
      case BinOp::Min:
        return canonical_nan(a, b, B.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, a, b));
      case BinOp::Max:
        return canonical_nan(a, b, B.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, a, b));
      case BinOp::EQ:
        return B.CreateFCmpOEQ(a, b);
      case BinOp::NE:
        return B.CreateFCmpUNE(a, b);
      case BinOp::LT:
        return B.CreateFCmpOLT(a, b);
      case BinOp::LE:
        return B.CreateFCmpOLE(a, b);
      case BinOp::GT:
        return B.CreateFCmpOGT(a, b);
      case BinOp::GE:
        return B.CreateFCmpOGE(a, b);
      default:
        internal(std::string("float operator ") + binop_name(n->op), n->loc);
    }
  }

  // Integer arithmetic. Division by zero, and INT_MIN / -1, are undefined in
  // CUDA C and do not trap on the GPU; x86 would kill the process, so those
  // divide by 1 instead. Shift counts of the width or more saturate as PTX's
  // shl/shr do.
  Value* int_binary(const BinaryNode* n, Value* a, Value* b, bool sg, bool nsw) {
    llvm::Type* T = a->getType();
    unsigned w = T->getIntegerBitWidth();
    Value* zero = llvm::ConstantInt::get(T, 0);
    Value* one = llvm::ConstantInt::get(T, 1);
    auto safe_divisor = [&]() {
      Value* bad = B.CreateICmpEQ(b, zero);
      if (sg)
        bad = B.CreateOr(
            bad, B.CreateAnd(B.CreateICmpEQ(
                                 a, llvm::ConstantInt::get(T, llvm::APInt::getSignedMinValue(w))),
                             B.CreateICmpEQ(b, llvm::ConstantInt::getSigned(T, -1))));
      return B.CreateSelect(bad, one, b);
    };
    auto too_far = [&]() { return B.CreateICmpUGE(b, llvm::ConstantInt::get(T, w)); };
    switch (n->op) {
      case BinOp::Add:
        return B.CreateAdd(a, b, "", false, nsw);
      case BinOp::Sub:
        return B.CreateSub(a, b, "", false, nsw);
      case BinOp::Mul:
        return B.CreateMul(a, b, "", false, nsw);
      case BinOp::Div:
        return sg ? B.CreateSDiv(a, safe_divisor()) : B.CreateUDiv(a, safe_divisor());
      case BinOp::Mod:
        return sg ? B.CreateSRem(a, safe_divisor()) : B.CreateURem(a, safe_divisor());
      case BinOp::FloorDiv: {
        Value* d = safe_divisor();
        if (!sg) return B.CreateUDiv(a, d);
        Value* q = B.CreateSDiv(a, d);
        Value* r = B.CreateSRem(a, d);
        Value* adjust =
            B.CreateAnd(B.CreateICmpNE(r, zero),
                        B.CreateICmpNE(B.CreateICmpSLT(a, zero), B.CreateICmpSLT(d, zero)));
        return B.CreateSub(q, B.CreateZExt(adjust, T));
      }
      case BinOp::FloorMod: {
        Value* d = safe_divisor();
        if (!sg) return B.CreateURem(a, d);
        Value* r = B.CreateSRem(a, d);
        Value* adjust =
            B.CreateAnd(B.CreateICmpNE(r, zero),
                        B.CreateICmpNE(B.CreateICmpSLT(r, zero), B.CreateICmpSLT(d, zero)));
        return B.CreateSelect(adjust, B.CreateAdd(r, d), r);
      }
      case BinOp::Min:
        return B.CreateBinaryIntrinsic(sg ? llvm::Intrinsic::smin : llvm::Intrinsic::umin, a, b);
      case BinOp::Max:
        return B.CreateBinaryIntrinsic(sg ? llvm::Intrinsic::smax : llvm::Intrinsic::umax, a, b);
      case BinOp::BitAnd:
        return B.CreateAnd(a, b);
      case BinOp::BitOr:
        return B.CreateOr(a, b);
      case BinOp::BitXor:
        return B.CreateXor(a, b);
      case BinOp::Shl:
        return B.CreateSelect(too_far(), zero, B.CreateShl(a, b));
      case BinOp::Shr:
        if (!sg) return B.CreateSelect(too_far(), zero, B.CreateLShr(a, b));
        return B.CreateAShr(a, B.CreateSelect(too_far(), llvm::ConstantInt::get(T, w - 1), b));
      default:
        internal(std::string("integer operator ") + binop_name(n->op), n->loc);
    }
  }

  Value* emit_unary(const Expr& e) {
    auto* n = e.as<UnaryNode>();
    DType t = n->dtype;
    if (t.is_low_precision_float())
      return emit(make_cast(t, make_unary(n->op, make_cast(f32, n->a), n->loc), n->loc));
    if (promotes(t) && n->op != UnOp::Not) return narrow(emit_c(e), t);
    Value* a = emit(n->a);
    switch (n->op) {
      case UnOp::Neg:
        if (t.is_float()) return B.CreateFNeg(a);
        return B.CreateSub(llvm::ConstantInt::get(a->getType(), 0), a, "", false, t.is_int());
      case UnOp::Not:
      case UnOp::BitNot:
        return B.CreateNot(a);
    }
    internal("unary operator", n->loc);
  }

  // A libm function known to touch no memory we can see (errno aside).
  Value* libm(const char* name32, const char* name64, Value* x) {
    bool is32 = x->getType()->isFloatTy();
    llvm::FunctionCallee fn =
        M.getOrInsertFunction(is32 ? name32 : name64, x->getType(), x->getType());
    if (auto* f = llvm::dyn_cast<llvm::Function>(fn.getCallee())) {
      f->setDoesNotThrow();
      f->setDoesNotAccessMemory();
      f->setWillReturn();
    }
    return B.CreateCall(fn, {x});
  }

  Value* emit_call(const CallNode* n) {
    DType t = n->args.empty() ? i32 : n->args[0].dtype();
    switch (n->op) {
      case Intrinsic::thread_idx:
        if (fibers_) return fiber_thread_;
        internal(std::string(intrinsic_name(n->op)) + " left in the host form", n->loc);
      case Intrinsic::shfl_xor:
        if (fibers_) return fiber_shfl_xor(n);
        internal(std::string(intrinsic_name(n->op)) + " left in the host form", n->loc);
      case Intrinsic::block_idx: {
        auto d = as_const_int(n->args[0]).value_or(0);
        if (d < 0 || d > 2) internal("block_idx dimension", n->loc);
        return block_idx_[d];
      }
      case Intrinsic::cp_async_commit:
      case Intrinsic::cp_async_wait:
      case Intrinsic::tma_store_commit:
      case Intrinsic::tma_store_wait:
        // Asynchronous copies are synchronous on the host: nothing is pending.
        return B.getInt32(0);
      case Intrinsic::mbarrier_init:
      case Intrinsic::mbarrier_arrive:
      case Intrinsic::mbarrier_expect_tx:
      case Intrinsic::mbarrier_wait:
        if (fibers_) return fiber_mbarrier(n);
        // host_compile runs kernels with mbarriers as fibers.
        internal(std::string(intrinsic_name(n->op)) + " left in the region form", n->loc);
      case Intrinsic::signal: {
        // Release at system scope: a sequentially consistent atomic is at
        // least that on the host.
        const auto* ld = n->args[0].as<LoadNode>();
        Value* at = address(ld->buffer, ld->indices[0], n->loc);
        Value* v = cast(emit(n->args[1]), n->args[1].dtype(), tx::u32);
        if (checked_ && fibers_) {
          // Checked: the checker stores it, recording what it publishes.
          llvm::Type* i32t = B.getInt32Ty();
          B.CreateCall(check_fn("tx_host_check_signal", B.getVoidTy(),
                                {llvm::PointerType::getUnqual(C), i32t, i32t, i32t}),
                       {checker_, at, v,
                        B.getInt32(static_cast<std::int32_t>(as_const_int(n->args[2]).value_or(0))),
                        current_thread()});
          return B.getInt32(0);
        }
        if (as_const_int(n->args[2]).value_or(0)) {
          B.CreateAtomicRMW(llvm::AtomicRMWInst::Add, at, v, llvm::MaybeAlign(4),
                            llvm::AtomicOrdering::SequentiallyConsistent);
        } else {
          auto* st = B.CreateAlignedStore(v, at, llvm::Align(4));
          st->setAtomic(llvm::AtomicOrdering::SequentiallyConsistent);
        }
        return B.getInt32(0);
      }
      case Intrinsic::atomic_add: {
        // The CTAs run on several host threads: a real atomic.
        const auto* ld = n->args[0].as<LoadNode>();
        Value* at = address(ld->buffer, ld->indices[0], n->loc);
        B.CreateAtomicRMW(llvm::AtomicRMWInst::FAdd, at, emit(n->args[1]), llvm::MaybeAlign(4),
                          llvm::AtomicOrdering::Monotonic);
        return B.getInt32(0);
      }
      case Intrinsic::wait_until: {
        // host_compile runs kernels that wait on flags as fibers: a waiting
        // thread lets the CTA's others run.
        if (!fibers_) internal("T.dist.wait_until left in the region form", n->loc);
        const auto* ld = n->args[0].as<LoadNode>();
        Value* at = address(ld->buffer, ld->indices[0], n->loc);
        return fiber_call("tx_fiber_wait_flag", B.getVoidTy(),
                          {llvm::PointerType::getUnqual(C), B.getInt32Ty()},
                          {at, cast(emit(n->args[1]), n->args[1].dtype(), tx::u32)},
                          "T.dist.wait_until", n->loc, ld->buffer->name);
      }
      case Intrinsic::named_barrier_sync:
      case Intrinsic::named_barrier_arrive: {
        // host_compile runs kernels with named barriers as fibers.
        if (!fibers_)
          internal(std::string(intrinsic_name(n->op)) + " left in the region form", n->loc);
        const bool wait = n->op == Intrinsic::named_barrier_sync;
        return fiber_call(
            "tx_fiber_named_barrier", B.getVoidTy(),
            {B.getInt32Ty(), B.getInt32Ty(), B.getInt32Ty()},
            {cast(emit(n->args[0]), n->args[0].dtype(), tx::i32),
             cast(emit(n->args[1]), n->args[1].dtype(), tx::i32), B.getInt32(wait ? 1 : 0)},
            wait ? "T.named_barriers.sync" : "T.named_barriers.arrive", n->loc);
      }
      case Intrinsic::profile_mark: {
        // tx_host_profile_mark(region, end, thread, blockIdx x, y, z, gridDim x, y)
        llvm::Type* i32t = B.getInt32Ty();
        llvm::Type* i64t = B.getInt64Ty();
        auto callee = M.getOrInsertFunction(
            "tx_host_profile_mark",
            llvm::FunctionType::get(B.getVoidTy(), {i32t, i32t, i32t, i32t, i32t, i32t, i64t, i64t},
                                    false));
        B.CreateCall(callee, {cast(emit(n->args[0]), n->args[0].dtype(), tx::i32),
                              cast(emit(n->args[1]), n->args[1].dtype(), tx::i32), current_thread(),
                              block_idx_[0], block_idx_[1], block_idx_[2], grid_x_, grid_y_});
        return B.getInt32(0);
      }
      case Intrinsic::tile_coord:
        internal("T.tile_coord outside a where= predicate", n->loc);
      case Intrinsic::fence_proxy_async:
      case Intrinsic::wgmma_fence:
      case Intrinsic::wgmma_commit:
      case Intrinsic::wgmma_wait:
      case Intrinsic::setmaxnreg:
        if (fibers_ && checked_) return fiber_async(n);
        [[fallthrough]];
      case Intrinsic::fence_barrier_init:
      case Intrinsic::register_fence:
      case Intrinsic::keep_before:
        // Ordering and register hints only: a fiber's writes are visible to
        // the next fiber that runs, and the host's MMA (gemm/fallback) has
        // completed when the call returns. Nothing to do.
        return B.getInt32(0);
      case Intrinsic::check_access: {
        if (!checked_) internal("check_access outside the checked mode", n->loc);
        llvm::Type* i32t = B.getInt32Ty();
        auto i32v = [&](const Expr& e) { return B.CreateIntCast(emit(e), i32t, true); };
        Value* r = B.CreateCall(check_fn("tx_host_check_access", B.getInt8Ty(),
                                         {i32t, B.getInt64Ty(), i32t, i32t, i32t, i32t}),
                                {checker_, i32v(n->args[0]), index64(n->args[1]), i32v(n->args[2]),
                                 i32v(n->args[3]), i32v(n->args[4]), current_thread()});
        Value* ok = B.CreateICmpNE(r, B.getInt8(0));
        // Symmetric memory (flags & 2): its address, for the record across
        // ranks (runtime/src/host/dist_check.hpp). Such kernels run as fibers.
        const auto slot = as_const_int(n->args[0]);
        if (fibers_ && plan_ && slot && (as_const_int(n->args[3]).value_or(0) & 2)) {
          const CheckBuffer& cb = plan_->buffers[static_cast<std::size_t>(*slot)];
          auto it = bases_.find(static_cast<const VarNode*>(cb.data));
          if (it != bases_.end()) {
            Value* at =
                B.CreateInBoundsGEP(B.getInt8Ty(), it->second,
                                    {B.CreateMul(index64(n->args[1]), B.getInt64(cb.elem_bytes))});
            llvm::Type* ptr = llvm::PointerType::getUnqual(C);
            B.CreateCall(check_fn("tx_host_check_dist", B.getVoidTy(),
                                  {ptr, B.getInt64Ty(), i32t, i32t, i32t, i32t, i32t}),
                         {checker_, at, B.CreateIntCast(emit(n->args[2]), B.getInt64Ty(), true),
                          B.getInt32(cb.elem_bytes), i32v(n->args[3]), i32v(n->args[4]),
                          current_thread(), B.CreateZExt(ok, i32t)});
          }
        }
        return ok;
      }
      case Intrinsic::check_barrier: {
        if (!checked_) internal("check_barrier outside the checked mode", n->loc);
        // Fibers: the scheduler's barriers order accesses themselves.
        if (fibers_) return B.getInt32(0);
        llvm::Type* i32t = B.getInt32Ty();
        B.CreateCall(check_fn("tx_host_check_barrier", B.getVoidTy(), {i32t, i32t}),
                     {checker_, B.CreateIntCast(emit(n->args[0]), i32t, true), current_thread()});
        return B.getInt32(0);
      }
      case Intrinsic::check_index: {
        if (!checked_) internal("check_index outside the checked mode", n->loc);
        Value* i = emit(n->args[0]);
        llvm::Type* i32t = B.getInt32Ty();
        llvm::Type* i64t = B.getInt64Ty();
        bool sg = n->args[0].dtype().is_int();
        B.CreateCall(
            check_fn("tx_host_check_index", B.getVoidTy(), {i64t, i64t, i32t, i32t, i32t}),
            {checker_, B.CreateIntCast(i, i64t, sg), B.CreateIntCast(emit(n->args[1]), i64t, sg),
             B.CreateIntCast(emit(n->args[2]), i32t, true),
             B.CreateIntCast(emit(n->args[3]), i32t, true), current_thread()});
        return i;
      }
      case Intrinsic::check_divisor: {
        if (!checked_) internal("check_divisor outside the checked mode", n->loc);
        Value* d = emit(n->args[0]);
        llvm::Type* i32t = B.getInt32Ty();
        auto* zero_bb = llvm::BasicBlock::Create(C, "div.zero", F);
        auto* join = llvm::BasicBlock::Create(C, "div.checked", F);
        B.CreateCondBr(B.CreateICmpEQ(d, llvm::ConstantInt::get(d->getType(), 0)), zero_bb, join);
        B.SetInsertPoint(zero_bb);
        B.CreateCall(check_fn("tx_host_check_divzero", B.getVoidTy(), {i32t, i32t}),
                     {checker_, B.CreateIntCast(emit(n->args[1]), i32t, true), current_thread()});
        B.CreateBr(join);
        B.SetInsertPoint(join);
        return d;
      }
      case Intrinsic::reinterpret: {
        Value* v = emit(n->args[0]);
        llvm::Type* T = value_type(n->dtype);
        if (t.is_bool()) v = B.CreateZExt(v, B.getInt8Ty());
        if (n->dtype.is_bool())
          return B.CreateICmpNE(B.CreateBitCast(v, B.getInt8Ty()), B.getInt8(0));
        return v->getType() == T ? v : B.CreateBitCast(v, T);
      }
      default:
        break;
    }
    if (t.is_low_precision_float()) {
      std::vector<Expr> args;
      for (const Expr& a : n->args) args.push_back(make_cast(f32, a, n->loc));
      Expr wide = make_call(n->op, std::move(args), n->loc);
      return emit(n->dtype.is_low_precision_float() ? make_cast(n->dtype, wide, n->loc) : wide);
    }
    std::vector<Value*> a;
    for (const Expr& x : n->args) a.push_back(emit(x));
    Value* x = a[0];
    auto un = [&](llvm::Intrinsic::ID id) { return B.CreateUnaryIntrinsic(id, x); };
    switch (n->op) {
      case Intrinsic::sqrt:
        return un(llvm::Intrinsic::sqrt);
      case Intrinsic::rsqrt:
        return B.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0), un(llvm::Intrinsic::sqrt));
      case Intrinsic::exp:
        return un(llvm::Intrinsic::exp);
      case Intrinsic::exp2:
        return un(llvm::Intrinsic::exp2);
      case Intrinsic::log:
        return un(llvm::Intrinsic::log);
      case Intrinsic::log2:
        return un(llvm::Intrinsic::log2);
      case Intrinsic::sin:
        return un(llvm::Intrinsic::sin);
      case Intrinsic::cos:
        return un(llvm::Intrinsic::cos);
      case Intrinsic::floor:
        return un(llvm::Intrinsic::floor);
      case Intrinsic::ceil:
        return un(llvm::Intrinsic::ceil);
      case Intrinsic::trunc:
        return un(llvm::Intrinsic::trunc);
      case Intrinsic::round:
        return un(llvm::Intrinsic::rint);  // rintf: half to even
      case Intrinsic::log1p:
        return libm("log1pf", "log1p", x);
      case Intrinsic::expm1:
        return libm("expm1f", "expm1", x);
      case Intrinsic::tan:
        return libm("tanf", "tan", x);
      case Intrinsic::tanh:
        return libm("tanhf", "tanh", x);
      case Intrinsic::erf:
        return libm("erff", "erf", x);
      case Intrinsic::erfc:
        // The GPU's erfc algorithm (codegen/cuda.cpp's tx_erfc), not libm's:
        // the two devices then agree within an ulp or two.
        return libm("tx_host_erfcf", "erfc", x);
      case Intrinsic::normcdf:
        // Likewise the GPU's normcdf (codegen/cuda.cpp's tx_normcdf).
        return libm("tx_host_normcdff", "tx_host_normcdf", x);
      case Intrinsic::fabs:
        if (t.is_float()) return un(llvm::Intrinsic::fabs);
        if (t.is_uint()) return x;
        return B.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, B.getFalse());
      case Intrinsic::isnan:
        return B.CreateFCmpUNO(x, x);
      case Intrinsic::isinf:
        return B.CreateFCmpOEQ(un(llvm::Intrinsic::fabs),
                               llvm::ConstantFP::getInfinity(x->getType()));
      case Intrinsic::isfinite:
        return B.CreateFCmpONE(un(llvm::Intrinsic::fabs),
                               llvm::ConstantFP::getInfinity(x->getType()));
      case Intrinsic::pow:
        return B.CreateBinaryIntrinsic(llvm::Intrinsic::pow, x, a[1]);
      case Intrinsic::fmod:
        return B.CreateFRem(x, a[1]);
      case Intrinsic::copysign:
        return B.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, x, a[1]);
      case Intrinsic::fma:
        return B.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, a[1], a[2]});
      default:
        break;
    }
    internal(std::string("intrinsic ") + intrinsic_name(n->op), n->loc);
  }

  // ------------------------------------------------------------ fibers
  // A call of tx_fiber_<...>(fibers, params..., site): the site, a number
  // into *sites_, names the op and line in a deadlock report.
  Value* fiber_call(const char* name, llvm::Type* ret, std::vector<llvm::Type*> params,
                    std::vector<Value*> args, const std::string& op, SourceLoc loc,
                    std::string operand = {}) {
    params.insert(params.begin(), llvm::PointerType::getUnqual(C));
    params.push_back(B.getInt32Ty());
    args.insert(args.begin(), fibers_arg_);
    args.push_back(B.getInt32(static_cast<std::int32_t>(sites_->size())));
    sites_->push_back({op, std::move(operand), loc});
    auto callee = M.getOrInsertFunction(name, llvm::FunctionType::get(ret, params, false));
    if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) f->setDoesNotThrow();
    return B.CreateCall(callee, args);
  }
  // The barrier operand of an mbarrier intrinsic (a load of a shared u64
  // element, as verify_lowered checks) as an address.
  Value* barrier_address(const Expr& e, SourceLoc loc) {
    auto* l = e.as<LoadNode>();
    if (!l) internal("an mbarrier operand that is not a buffer element", loc);
    return address(l->buffer, l->indices[0], loc);
  }
  Value* fiber_mbarrier(const CallNode* n) {
    const std::string op = std::string("T.ptx.") + intrinsic_name(n->op);
    const std::string what = to_string(n->args[0]);
    Value* bar = barrier_address(n->args[0], n->loc);
    llvm::Type* ptr = llvm::PointerType::getUnqual(C);
    llvm::Type* int32 = B.getInt32Ty();
    auto arg32 = [&](std::size_t i) -> Value* {
      return cast(emit(n->args[i]), n->args[i].dtype(), tx::i32);
    };
    switch (n->op) {
      case Intrinsic::mbarrier_init: {
        // The barrier's slot and element name it in the checked mode's reports.
        auto* l = n->args[0].as<LoadNode>();
        return fiber_call("tx_fiber_mbarrier_init", B.getVoidTy(),
                          {ptr, int32, int32, B.getInt64Ty()},
                          {bar, arg32(1), B.getInt32(slot_of(l->buffer)), index64(l->indices[0])},
                          op, n->loc, what);
      }
      case Intrinsic::mbarrier_arrive:
        return fiber_call("tx_fiber_mbarrier_arrive", B.getVoidTy(), {ptr}, {bar}, op, n->loc,
                          what);
      case Intrinsic::mbarrier_expect_tx:
        return fiber_call("tx_fiber_mbarrier_expect_tx", B.getVoidTy(), {ptr, int32},
                          {bar, arg32(1)}, op, n->loc, what);
      default:
        return fiber_call("tx_fiber_mbarrier_wait", B.getVoidTy(), {ptr, int32}, {bar, arg32(1)},
                          op, n->loc, what);
    }
  }
  // The checked mode's ordering instructions: tx_fiber_async(fibers, thread, kind, a, b, site).
  Value* fiber_async(const CallNode* n) {
    FiberAsync kind = FiberAsync::fence_proxy_async;
    const char* op = "T.ptx.fence_proxy_async";
    switch (n->op) {
      case Intrinsic::wgmma_fence:
        kind = FiberAsync::wgmma_fence, op = "T.ptx.wgmma.fence";
        break;
      case Intrinsic::wgmma_commit:
        kind = FiberAsync::wgmma_commit, op = "T.ptx.wgmma.commit_group";
        break;
      case Intrinsic::wgmma_wait:
        kind = FiberAsync::wgmma_wait, op = "T.ptx.wgmma.wait_group";
        break;
      case Intrinsic::setmaxnreg:
        kind = FiberAsync::setmaxnreg, op = "T.ptx.setmaxnreg";
        break;
      default:
        break;
    }
    auto arg = [&](std::size_t i) -> Value* {
      return i < n->args.size() ? cast(emit(n->args[i]), n->args[i].dtype(), tx::i32)
                                : B.getInt32(0);
    };
    llvm::Type* i32t = B.getInt32Ty();
    return fiber_call("tx_fiber_async", B.getVoidTy(), {i32t, i32t, i32t, i32t},
                      {fiber_thread_, B.getInt32(static_cast<std::int32_t>(kind)), arg(0), arg(1)},
                      op, n->loc);
  }
  // The checked mode's slot of a buffer (-1 unchecked).
  std::int32_t slot_of(const Buffer& b) const {
    if (!plan_) return -1;
    for (std::size_t i = 0; i < plan_->buffers.size(); ++i)
      if (plan_->buffers[i].data == b->data.get()) return static_cast<std::int32_t>(i);
    return -1;
  }
  // A constant array of int64 (a global of the module).
  Value* i64_array(const std::vector<std::int64_t>& v, const std::string& name) {
    auto* at = llvm::ArrayType::get(B.getInt64Ty(), v.size());
    std::vector<llvm::Constant*> cs;
    for (std::int64_t x : v) cs.push_back(B.getInt64(static_cast<std::uint64_t>(x)));
    auto* g = new llvm::GlobalVariable(M, at, true, llvm::GlobalValue::PrivateLinkage,
                                       llvm::ConstantArray::get(at, cs), name);
    return g;
  }
  // An array of int64 values computed here (an alloca in the entry block).
  Value* i64_values(const std::vector<Expr>& es, const std::string& name) {
    llvm::IRBuilder<> eb(entry_, entry_->getFirstInsertionPt());
    auto* at = llvm::ArrayType::get(B.getInt64Ty(), std::max<std::size_t>(es.size(), 1));
    llvm::AllocaInst* a = eb.CreateAlloca(at, nullptr, name);
    for (std::size_t i = 0; i < es.size(); ++i)
      B.CreateAlignedStore(index64(es[i]), B.CreateConstInBoundsGEP2_64(at, a, 0, i),
                           llvm::Align(8));
    return a;
  }
  // cp.async.bulk.tensor as the model runs it (runtime/src/host/fibers.cpp):
  // tx_fiber_tma_load(fibers, thread, smem base, smem slot, smem element offset,
  //                   barrier address, barrier slot, barrier element, global base,
  //                   global slot, rank, dims*, box*, coords*, element bytes,
  //                   swizzle bytes, site)
  void fiber_tma_load(const TmaCopyNode* n) {
    const TensorMapDesc& m = n->map;
    auto* bl = n->barrier.as<LoadNode>();
    if (!bl) internal("a TMA barrier that is not a buffer element", n->loc);
    std::vector<Expr> dims;
    for (const Expr& d : m.global->dims) dims.push_back(d);
    llvm::Type* ptr = llvm::PointerType::getUnqual(C);
    llvm::Type* i32t = B.getInt32Ty();
    llvm::Type* i64t = B.getInt64Ty();
    fiber_call("tx_fiber_tma_load", B.getVoidTy(),
               {i32t, ptr, i32t, i64t, ptr, i32t, i64t, ptr, i32t, i32t, ptr, ptr, ptr, i32t, i32t},
               {fiber_thread_, base(n->smem, n->loc), B.getInt32(slot_of(n->smem)),
                index64(n->smem_offset), barrier_address(n->barrier, n->loc),
                B.getInt32(slot_of(bl->buffer)), index64(bl->indices[0]), base(m.global, n->loc),
                B.getInt32(slot_of(m.global)), B.getInt32(static_cast<std::int32_t>(m.box.size())),
                i64_values(dims, "tma.dims"), i64_array(m.box, "tma.box"),
                i64_values(n->coords, "tma.coords"), B.getInt32(m.global->dtype.bytes()),
                B.getInt32(m.swizzle_bytes)},
               "T.ptx.tma_load", n->loc, to_string(n->barrier));
  }
  // wgmma.mma_async as the model runs it: a warpgroup collective,
  // tx_fiber_wgmma(fibers, thread, info*, D base, D slot, A base, A slot, A offset,
  //                B base, B slot, B offset, scale_d, site).
  void fiber_wgmma(const WgmmaNode* n) {
    auto type = [&](DType t) {
      return static_cast<std::int64_t>(t == f16      ? FiberType::f16
                                       : t == bf16   ? FiberType::bf16
                                       : t == f8e4m3 ? FiberType::e4m3
                                                     : FiberType::e5m2);
    };
    // "m64n<N>k<K>"
    const std::size_t np = n->shape.find('n'), kp = n->shape.find('k');
    const std::int64_t N = std::stoll(n->shape.substr(np + 1, kp - np - 1));
    const std::int64_t K = std::stoll(n->shape.substr(kp + 1));
    const bool a_regs = static_cast<bool>(n->a_regs);
    const Buffer& abuf = a_regs ? n->a_regs : n->a.smem;
    std::vector<std::int64_t> info = {N,
                                      K,
                                      type(abuf->dtype),
                                      type(n->b.smem->dtype),
                                      a_regs ? 1 : 0,
                                      n->a.lbo,
                                      n->a.sbo,
                                      n->a.swizzle_bytes,
                                      n->a.mn_major ? 1 : 0,
                                      n->b.lbo,
                                      n->b.sbo,
                                      n->b.swizzle_bytes,
                                      n->b.mn_major ? 1 : 0,
                                      static_cast<std::int64_t>(n->d_regs.size())};
    info.insert(info.end(), n->d_regs.begin(), n->d_regs.end());
    if (a_regs) info.insert(info.end(), n->a_words.begin(), n->a_words.end());
    llvm::Type* ptr = llvm::PointerType::getUnqual(C);
    llvm::Type* i32t = B.getInt32Ty();
    llvm::Type* i64t = B.getInt64Ty();
    fiber_call("tx_fiber_wgmma", B.getVoidTy(),
               {i32t, ptr, ptr, i32t, ptr, i32t, i64t, ptr, i32t, i64t, i32t},
               {fiber_thread_, i64_array(info, "wgmma.info"), base(n->d, n->loc),
                B.getInt32(slot_of(n->d)), base(abuf, n->loc), B.getInt32(slot_of(abuf)),
                a_regs ? B.getInt64(0) : index64(n->a.offset), base(n->b.smem, n->loc),
                B.getInt32(slot_of(n->b.smem)), index64(n->b.offset),
                cast(emit(n->scale_d), n->scale_d.dtype(), tx::i32)},
               "T.ptx.wgmma." + n->shape, n->loc);
  }
  // The value travels as its bits in an i64.
  Value* fiber_shfl_xor(const CallNode* n) {
    Value* v = emit(n->args[0]);
    llvm::Type* vt = v->getType();
    const unsigned bits = vt->getPrimitiveSizeInBits();
    Value* as_int = vt->isIntegerTy() ? v : B.CreateBitCast(v, B.getIntNTy(bits));
    Value* wide = B.CreateZExt(as_int, B.getInt64Ty());
    Value* mask = cast(emit(n->args[1]), n->args[1].dtype(), i32);
    Value* got = fiber_call("tx_fiber_shfl_xor", B.getInt64Ty(),
                            {B.getInt32Ty(), B.getInt64Ty(), B.getInt32Ty()},
                            {fiber_thread_, wide, mask}, "T.cuda.shfl_xor", n->loc);
    Value* narrow_bits = B.CreateTrunc(got, B.getIntNTy(bits));
    return vt->isIntegerTy() ? narrow_bits : B.CreateBitCast(narrow_bits, vt);
  }

  // ------------------------------------------------------ checked mode
  // A tx_host_check_* function: (void* checker, params...) -> ret.
  llvm::FunctionCallee check_fn(const char* name, llvm::Type* ret,
                                std::vector<llvm::Type*> params) {
    params.insert(params.begin(), llvm::PointerType::getUnqual(C));
    auto callee = M.getOrInsertFunction(name, llvm::FunctionType::get(ret, params, false));
    if (auto* f = llvm::dyn_cast<llvm::Function>(callee.getCallee())) f->setDoesNotThrow();
    return callee;
  }
  // The thread of the enclosing thread loop (-1 outside one: every thread).
  Value* current_thread() {
    if (fibers_) return fiber_thread_;
    auto it = vars_.find(thread_.get());
    if (it == vars_.end()) return B.getInt32(-1);
    return B.CreateIntCast(it->second, B.getInt32Ty(), true);
  }

  // ----------------------------------------------------------- memory
  Value* base(const Buffer& b, SourceLoc loc) {
    auto it = bases_.find(b->data.get());
    if (it == bases_.end()) internal("buffer " + b->name + " has no storage", loc);
    return it->second;
  }
  Value* index64(const Expr& i) {
    Value* v = emit(i);
    DType t = i.dtype();
    return B.CreateIntCast(v, B.getInt64Ty(), t.is_int());
  }
  Value* address(const Buffer& b, const Expr& index, SourceLoc loc) {
    return B.CreateInBoundsGEP(mem_type(b->dtype), base(b, loc), {index64(index)});
  }

  // ----------------------------------------------------------- stmts
  void emit(const Stmt& s) {
    if (!s) return;
    split_long_block();
    switch (s.kind()) {
      case StmtKind::Seq:
        for (const Stmt& x : s.as<SeqNode>()->seq) emit(x);
        return;
      case StmtKind::Store: {
        auto* n = s.as<StoreNode>();
        DType t = n->buffer->dtype;
        Value* v = to_mem(emit(n->value), t);
        Value* p = address(n->buffer, n->indices[0], n->loc);
        B.CreateAlignedStore(v, p, llvm::Align(t.bytes()));
        return;
      }
      case StmtKind::Evaluate:
        emit(s.as<EvaluateNode>()->value);
        return;
      case StmtKind::For:
        emit_for(s.as<ForNode>());
        return;
      case StmtKind::IfThenElse: {
        auto* n = s.as<IfThenElseNode>();
        Value* c = emit(n->cond);
        auto* tb = llvm::BasicBlock::Create(C, "if.then", F);
        auto* eb = n->else_case ? llvm::BasicBlock::Create(C, "if.else", F) : nullptr;
        auto* join = llvm::BasicBlock::Create(C, "if.end", F);
        B.CreateCondBr(c, tb, eb ? eb : join);
        B.SetInsertPoint(tb);
        emit(n->then_case);
        B.CreateBr(join);
        if (eb) {
          B.SetInsertPoint(eb);
          emit(n->else_case);
          B.CreateBr(join);
        }
        B.SetInsertPoint(join);
        return;
      }
      case StmtKind::LetStmt: {
        auto* n = s.as<LetStmtNode>();
        Value* v = emit(n->value);
        if (!llvm::isa<llvm::Constant>(v) && !v->hasName()) v->setName(n->var.name());
        scoped(n->var.get(), v, [&] { emit(n->body); });
        return;
      }
      case StmtKind::Allocate: {
        auto* n = s.as<AllocateNode>();
        const Buffer& b = n->buffer;
        if (b->scope == MemScope::local && !bases_.count(b->data.get())) {
          llvm::IRBuilder<> eb(entry_, entry_->getFirstInsertionPt());
          auto* arr = llvm::ArrayType::get(mem_type(b->dtype),
                                           static_cast<std::uint64_t>(b->storage_elems()));
          llvm::AllocaInst* a = eb.CreateAlloca(arr, nullptr, b->name);
          a->setAlignment(llvm::Align(16));
          bases_[b->data.get()] = a;
        }
        emit(n->body);
        return;
      }
      case StmtKind::PeerView: {
        // The view's storage: entry `rank` of the symmetric buffer's table.
        auto* n = s.as<PeerViewNode>();
        auto it = peer_tables_.find(n->of->data.get());
        if (it == peer_tables_.end())
          internal("T.peer of " + n->of->name + ", which is not a symmetric parameter", n->loc);
        llvm::Type* ptr = llvm::PointerType::getUnqual(C);
        Value* at = B.CreateInBoundsGEP(ptr, it->second, {index64(n->rank)});
        bases_[n->view->data.get()] = B.CreateAlignedLoad(ptr, at, llvm::Align(8), n->view->name);
        emit(n->body);
        return;
      }
      case StmtKind::CopyBytes: {
        auto* n = s.as<CopyBytesNode>();
        Value* d = address(n->dst, n->dst_offset, n->loc);
        Value* src = address(n->src, n->src_offset, n->loc);
        if (n->dst->data.get() == n->src->data.get()) {
          // One storage: the vector load happens before the store.
          llvm::Type* T = B.getIntNTy(static_cast<unsigned>(n->bytes * 8));
          B.CreateAlignedStore(B.CreateAlignedLoad(T, src, llvm::Align(1)), d, llvm::Align(1));
        } else {
          B.CreateMemCpy(d, llvm::MaybeAlign(1), src, llvm::MaybeAlign(1),
                         static_cast<std::uint64_t>(n->bytes));
        }
        return;
      }
      case StmtKind::Origin:
        emit(s.as<OriginNode>()->body);
        return;
      case StmtKind::TmaCopy:
        if (fibers_) return fiber_tma_load(s.as<TmaCopyNode>());
        internal("a TMA copy left in the region form", s->loc);
      case StmtKind::Wgmma:
        if (fibers_) return fiber_wgmma(s.as<WgmmaNode>());
        internal("a wgmma left in the region form", s->loc);
      case StmtKind::MatrixMove:
      case StmtKind::Mma:
      case StmtKind::CpAsync:
        // The host lowers with no PTX variants (LowerOptions::host).
        internal("a PTX instruction left in the host form", s->loc);
      case StmtKind::Barrier:
        if (fibers_) {
          auto* b = s.as<BarrierNode>();
          const int group = b->scope == ExecScope::warp        ? 32
                            : b->scope == ExecScope::warpgroup ? 128
                                                               : k_.launch.block;
          static const char* const names[] = {"T.cuda.cta_sync", "T.cuda.warpgroup_sync",
                                              "T.cuda.warp_sync"};
          const char* op = b->scope == ExecScope::warp        ? names[2]
                           : b->scope == ExecScope::warpgroup ? names[1]
                                                              : names[0];
          fiber_call("tx_fiber_sync", B.getVoidTy(), {B.getInt32Ty(), B.getInt32Ty()},
                     {fiber_thread_, B.getInt32(group)}, op, b->loc);
          return;
        }
        [[fallthrough]];
      case StmtKind::TileCall:
      case StmtKind::ScopeIdBind:
        internal("GPU-only statement left in the host form", s->loc);
      case StmtKind::Profile:
        internal("T.profile left after lower_profile", s->loc);
    }
  }

  void emit_for(const ForNode* n) {
    DType vt = n->var.dtype();
    llvm::Type* T = value_type(vt);
    bool sg = vt.is_int();
    Value* lo = cast(emit(n->min), n->min.dtype(), vt);
    Value* ext = cast(emit(n->extent), n->extent.dtype(), vt);
    Value* hi = B.CreateAdd(lo, ext, "", false, sg);
    llvm::BasicBlock* pre = B.GetInsertBlock();
    auto* header = llvm::BasicBlock::Create(C, n->var.name() + ".header", F);
    auto* body = llvm::BasicBlock::Create(C, n->var.name() + ".body", F);
    auto* exit = llvm::BasicBlock::Create(C, n->var.name() + ".exit", F);
    B.CreateBr(header);
    B.SetInsertPoint(header);
    llvm::PHINode* iv = B.CreatePHI(T, 2, n->var.name());
    iv->addIncoming(lo, pre);
    B.CreateCondBr(sg ? B.CreateICmpSLT(iv, hi) : B.CreateICmpULT(iv, hi), body, exit);
    B.SetInsertPoint(body);
    bool is_thread_loop = n->var.get() == thread_.get();
    bool was_inside = inside_thread_loop_;
    inside_thread_loop_ = was_inside || is_thread_loop;
    scoped(n->var.get(), iv, [&] { emit(n->body); });
    inside_thread_loop_ = was_inside;
    Value* next = B.CreateAdd(iv, llvm::ConstantInt::get(T, 1), "", false, sg);
    iv->addIncoming(next, B.GetInsertBlock());
    llvm::BranchInst* back = B.CreateBr(header);
    // A thread loop is vectorized across threads only when neighbouring
    // threads touch neighbouring (or the same) addresses. Where each thread
    // walks a row of its own, vector lanes would be strided gathers that cost
    // more (and compile far longer) than vectorizing each thread's own
    // contiguous work, which the SLP and inner-loop vectorizers then do.
    if (is_thread_loop && threads_strided(n->body)) {
      set_loop_hints(back, {{"llvm.loop.vectorize.enable", B.getFalse()},
                            {"llvm.loop.interleave.count", B.getInt32(1)}});
    }
    // LLVM's automatic unroller is off (see optimize() in host_jit.cpp: it
    // made compiles up to 1.6x slower). What it bought is kept here: a short loop of
    // constant trip count inside a thread's work (a thread's vector of
    // elements, a per-thread reduction) is unrolled, so that the thread loop
    // around it becomes the innermost loop and vectorizes across threads.
    // T.unroll alone does not decide it: it is a GPU register hint.
    if (!is_thread_loop && was_inside && is_small_constant_extent(n->extent))
      set_loop_hints(back, {{"llvm.loop.unroll.full", nullptr}});
    B.SetInsertPoint(exit);
  }

  static bool is_small_constant_extent(const Expr& extent) {
    constexpr std::int64_t kMaxFullUnroll = 16;
    const auto* c = extent.as<IntImmNode>();
    return c && c->value > 0 && c->value <= kMaxFullUnroll;
  }

  // Attaches a distinct llvm.loop node with the given hints (a null value
  // means a hint that takes no operand) to a loop's back edge.
  void set_loop_hints(llvm::BranchInst* back_edge,
                      std::initializer_list<std::pair<const char*, llvm::Constant*>> hints) {
    std::vector<llvm::Metadata*> ops{nullptr};
    for (const auto& [name, value] : hints) {
      std::vector<llvm::Metadata*> hint{llvm::MDString::get(C, name)};
      if (value) hint.push_back(llvm::ConstantAsMetadata::get(value));
      ops.push_back(llvm::MDNode::get(C, hint));
    }
    llvm::MDNode* md = llvm::MDNode::getDistinct(C, ops);
    md->replaceOperandWith(0, md);
    back_edge->setMetadata(llvm::LLVMContext::MD_loop, md);
  }

  // Does some access of memory shared between threads (not a thread's
  // private registers) move by more than one element from thread to thread,
  // or not affinely at all?
  bool threads_strided(const Stmt& body) const {
    struct Walk : IRVisitor {
      const VarNode* thread;
      std::unordered_map<const VarNode*, std::optional<std::int64_t>> lets;
      bool strided = false;

      // k in index = k * thread + (terms without thread); nullopt: not affine.
      std::optional<std::int64_t> stride(const Expr& e) {
        if (auto* v = e.as<VarNode>()) {
          if (v == thread) return 1;
          auto it = lets.find(v);
          return it == lets.end() ? std::optional<std::int64_t>(0) : it->second;
        }
        if (auto* c = e.as<CastNode>(); c && c->dtype.is_integer() && c->value.dtype().is_integer())
          return stride(c->value);
        if (auto* b = e.as<BinaryNode>()) {
          auto x = stride(b->a), y = stride(b->b);
          if (!x || !y) return std::nullopt;
          switch (b->op) {
            case BinOp::Add:
              return *x + *y;
            case BinOp::Sub:
              return *x - *y;
            case BinOp::Mul: {
              auto ca = as_const_int(b->a), cb = as_const_int(b->b);
              if (cb) return *x * *cb;
              if (ca) return *y * *ca;
              break;
            }
            default:
              break;
          }
          return *x == 0 && *y == 0 ? std::optional<std::int64_t>(0) : std::nullopt;
        }
        return uses_thread(e) ? std::nullopt : std::optional<std::int64_t>(0);
      }
      bool uses_thread(const Expr& e) {
        bool found = false;
        struct F : IRVisitor {
          Walk* w;
          bool* found;
          using IRVisitor::visit_node;
          void visit_node(const VarNode* v) override {
            auto it = w->lets.find(v);
            *found |= v == w->thread ||
                      (it != w->lets.end() && it->second != std::optional<std::int64_t>(0));
          }
        } f;
        f.w = this;
        f.found = &found;
        f.visit(e);
        return found;
      }
      // An access of `elems` consecutive elements at index, by every thread.
      void access(const Buffer& b, const Expr& index, std::int64_t elems) {
        if (b->scope == MemScope::local) return;
        auto k = stride(index);
        strided |= !k || (elems > 1 ? *k != 0 : (*k > 1 || *k < -1));
      }
      using IRVisitor::visit_node;
      void visit_node(const LetStmtNode* n) override {
        visit(n->value);
        lets[n->var.get()] = stride(n->value);
        visit(n->body);
      }
      void visit_node(const LoadNode* n) override {
        access(n->buffer, n->indices[0], 1);
        IRVisitor::visit_node(n);
      }
      void visit_node(const StoreNode* n) override {
        access(n->buffer, n->indices[0], 1);
        IRVisitor::visit_node(n);
      }
      void visit_node(const CopyBytesNode* n) override {
        access(n->dst, n->dst_offset, n->bytes / n->dst->dtype.bytes());
        access(n->src, n->src_offset, n->bytes / n->src->dtype.bytes());
        IRVisitor::visit_node(n);
      }
    } w;
    w.thread = thread_.get();
    w.visit(body);
    return w.strided;
  }

  template <class F>
  void scoped(const VarNode* v, Value* value, F&& body) {
    auto it = vars_.find(v);
    bool had = it != vars_.end();
    Value* saved = had ? it->second : nullptr;
    vars_[v] = value;
    body();
    if (had)
      vars_[v] = saved;
    else
      vars_.erase(v);
  }

  llvm::LLVMContext& C;
  llvm::Module& M;
  // Counts what goes into the block being filled (split_long_block); the
  // counters are declared before B, whose inserter updates them.
  int block_calls_ = 0, block_instructions_ = 0;
  llvm::BasicBlock* counted_block_ = nullptr;
  llvm::IRBuilder<llvm::ConstantFolder, llvm::IRBuilderCallbackInserter> B;
  const LoweredKernel& k_;
  Var thread_;
  bool checked_ = false;
  Value* checker_ = nullptr;
  llvm::Constant* zero_slot_ = nullptr;
  bool inside_thread_loop_ = false;  // emitting the body of the thread loop
  bool fibers_ = false;              // emit_fiber_function
  const CheckPlan* plan_ = nullptr;  // fibers, checked
  Value* fibers_arg_ = nullptr;
  Value* fiber_thread_ = nullptr;
  std::vector<WaitSite>* sites_ = nullptr;
  llvm::Function* F = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  std::unordered_map<const VarNode*, Value*> vars_;
  std::unordered_map<const VarNode*, Value*> bases_;
  // Symmetric parameters' tables of peer copies, by the parameter's data var.
  std::unordered_map<const VarNode*, Value*> peer_tables_;
  Value* block_idx_[3] = {nullptr, nullptr, nullptr};
  Value* grid_x_ = nullptr;  // this launch's grid (x, y), i64
  Value* grid_y_ = nullptr;
};

}  // namespace

EmittedModule emit_llvm_fibers(llvm::LLVMContext& ctx, const LoweredKernel& k, const Stmt& body,
                               const std::string& function_name, std::vector<WaitSite>* sites,
                               const CheckPlan* checks) {
  EmittedModule out;
  out.module = std::make_unique<llvm::Module>(function_name, ctx);
  Emitter em(ctx, *out.module, k, Var("thread", i32), false);
  out.scratch_bytes = em.emit_fiber_function(body, function_name, sites, checks);
  return out;
}

EmittedModule emit_llvm(llvm::LLVMContext& ctx, const LoweredKernel& k, const Stmt& host_body,
                        const Var& thread, const std::string& function_name, bool checked) {
  EmittedModule out;
  out.module = std::make_unique<llvm::Module>(function_name, ctx);
  Emitter em(ctx, *out.module, k, thread, checked);
  out.scratch_bytes = em.emit_function(host_body, function_name);
  return out;
}

}  // namespace tx::lowering
