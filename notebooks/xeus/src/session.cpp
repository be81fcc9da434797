// The in-process C++ session (session.hpp): clang::Interpreter, the signal
// guard around a cell, completion and declaration lookup.
#include "session.hpp"

#include <clang/AST/ASTContext.h>
#include <clang/AST/Decl.h>
#include <clang/AST/DeclCXX.h>
#include <clang/AST/DeclLookups.h>
#include <clang/AST/DeclTemplate.h>
#include <clang/AST/RawCommentList.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Interpreter/CodeCompletion.h>
#include <clang/Interpreter/Interpreter.h>
#include <cxxabi.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <csetjmp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace tx_kernel {
namespace {

// ------------------------------------------------------------ the signal guard
// SIGINT is blocked in every thread but the cell's, and there only while a
// cell runs (block_interrupts() runs before xeus starts its threads, which
// inherit the mask): an interrupt of an idle kernel stays pending and is
// dropped when the next cell starts, instead of breaking a system call of
// xeus's. While a cell runs, SIGINT, or a fatal signal on the cell's thread,
// jumps back to execute(). A fatal signal anywhere else kills the process
// as it would have without the guard.
sigjmp_buf g_jump;
volatile sig_atomic_t g_in_cell = 0;
pthread_t g_cell_thread;
constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

void on_signal(int sig, siginfo_t*, void*) {
  if (g_in_cell) {
    if (pthread_equal(pthread_self(), g_cell_thread)) {
      g_in_cell = 0;
      siglongjmp(g_jump, sig);
    }
    if (sig == SIGINT) {  // a thread the cell started, which has SIGINT unblocked
      pthread_kill(g_cell_thread, SIGINT);
      return;
    }
  }
  if (sig == SIGINT) return;
  signal(sig, SIG_DFL);
  raise(sig);
}

sigset_t interrupt_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  return s;
}

// While a cell runs: SIGINT unblocked on its thread; pending ones (sent
// while the kernel was idle) dropped first.
struct InterruptsOpen {
  InterruptsOpen() {
    sigset_t s = interrupt_set();
    timespec zero{};
    while (sigtimedwait(&s, nullptr, &zero) == SIGINT) {
    }
    pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
  }
  ~InterruptsOpen() {
    sigset_t s = interrupt_set();
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
  }
};

void install_signal_guard() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  // Its own stack, so a cell that overflows the stack (runaway recursion)
  // still reaches the handler.
  static std::vector<char> alt(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt.data();
  ss.ss_size = alt.size();
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int s : kFatalSignals) sigaction(s, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal";
  }
}

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

std::string first_error_line(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.find("error: ") != std::string::npos) return line;
  return text.substr(0, text.find('\n'));
}

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// ------------------------------------------------------------ name lookup
// Lookups go through the session's own AST (the parent compiler instance):
// whatever earlier cells declared or included is there.
clang::DeclContext* as_context(clang::NamedDecl* d) {
  if (!d) return nullptr;
  if (auto* u = llvm::dyn_cast<clang::UsingShadowDecl>(d)) return as_context(u->getTargetDecl());
  if (auto* a = llvm::dyn_cast<clang::NamespaceAliasDecl>(d)) return a->getNamespace();
  if (auto* n = llvm::dyn_cast<clang::NamespaceDecl>(d)) return n;
  if (auto* e = llvm::dyn_cast<clang::EnumDecl>(d)) return e;
  if (auto* r = llvm::dyn_cast<clang::CXXRecordDecl>(d)) return r->getDefinition();
  if (auto* t = llvm::dyn_cast<clang::ClassTemplateDecl>(d))
    return t->getTemplatedDecl()->getDefinition();
  if (auto* t = llvm::dyn_cast<clang::TypedefNameDecl>(d)) {
    if (auto* r = t->getUnderlyingType()->getAsCXXRecordDecl()) return r->getDefinition();
  }
  return nullptr;
}

std::vector<clang::NamedDecl*> lookup_in(clang::DeclContext* dc, llvm::StringRef name,
                                         clang::ASTContext& ctx) {
  std::vector<clang::NamedDecl*> out;
  if (!dc) return out;
  for (clang::NamedDecl* d : dc->lookup(clang::DeclarationName(&ctx.Idents.get(name))))
    out.push_back(d);
  return out;
}

// The top-level contexts an unqualified name is looked up in: the
// translation unit and the namespaces its using-directives name.
std::vector<clang::DeclContext*> top_level(clang::ASTContext& ctx) {
  clang::TranslationUnitDecl* tu = ctx.getTranslationUnitDecl();
  std::vector<clang::DeclContext*> out{tu};
  for (clang::UsingDirectiveDecl* u : tu->using_directives())
    if (auto* ns = u->getNominatedNamespace()) out.push_back(ns);
  return out;
}

// Resolves "a::b::c" (an empty first part: "::a") to its declarations.
std::vector<clang::NamedDecl*> resolve(const std::vector<std::string>& parts,
                                       clang::ASTContext& ctx) {
  std::vector<clang::DeclContext*> scopes = top_level(ctx);
  std::vector<clang::NamedDecl*> found;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    found.clear();
    for (clang::DeclContext* dc : scopes) {
      auto r = lookup_in(dc, parts[i], ctx);
      found.insert(found.end(), r.begin(), r.end());
      if (!found.empty()) break;
    }
    if (found.empty() || i + 1 == parts.size()) break;
    scopes.clear();
    for (clang::NamedDecl* d : found)
      if (auto* dc = as_context(d)) scopes.push_back(dc);
    if (scopes.empty()) return {};
  }
  return found;
}

std::vector<std::string> split_qualified(const std::string& name) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (true) {
    std::size_t next = name.find("::", at);
    std::string part = name.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (!part.empty()) parts.push_back(part);
    if (next == std::string::npos) break;
    at = next + 2;
  }
  return parts;
}

}  // namespace

void block_interrupts() {
  sigset_t s = interrupt_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

// ------------------------------------------------------------ Session
Session::Session(SessionConfig config) : config_(std::move(config)) {
  static bool targets = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    return true;
  }();
  (void)targets;
  install_signal_guard();
  for (const std::string& a : config_.clang_args) argv_.push_back(a.c_str());
  reset(false);
}

Session::~Session() = default;

void Session::reset(bool leak_old) {
  if (leak_old) (void)interp_.release();
  interp_.reset();
  builder_ = std::make_unique<clang::IncrementalCompilerBuilder>();
  builder_->SetCompilerArgs(argv_);
  auto ci = builder_->CreateCpp();
  if (!ci) throw std::runtime_error("tx-kernel: " + llvm::toString(ci.takeError()));
  diagnostics_stream_ = std::make_unique<llvm::raw_string_ostream>(diagnostics_);
  // clang's diagnostics into a string that becomes the cell's error (set
  // before the interpreter exists: it starts the "source file" on it).
  (*ci)->getDiagnostics().setClient(
      new clang::TextDiagnosticPrinter(*diagnostics_stream_, &(*ci)->getDiagnosticOpts()),
      /*ShouldOwnClient=*/true);
  auto interp = clang::Interpreter::create(std::move(*ci));
  if (!interp) throw std::runtime_error("tx-kernel: " + llvm::toString(interp.takeError()));
  interp_ = std::move(*interp);
  diagnostics_.clear();
}

std::string Session::remap(std::string text) const {
  // Cell files are named by their path: show "cell[N]" only, and drop the
  // "In file included from <<< inputs >>>" line of the #include.
  std::string dir = config_.cell_dir + "/";
  for (std::size_t at; (at = text.find(dir)) != std::string::npos;) text.erase(at, dir.size());
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind("In file included from input_line_", 0) == 0 ||
        line.rfind("In file included from <<<", 0) == 0)
      continue;
    out += line + "\n";
  }
  return out;
}

// The interpreter call, apart from execute(): nothing that lives in this
// frame is touched after a jump back to execute()'s sigsetjmp.
void Session::parse_and_execute(const std::string& input, RawResult* raw) {
  try {
    llvm::Error err = interp_->ParseAndExecute(input);
    g_in_cell = 0;
    if (err) raw->error_text = llvm::toString(std::move(err));
  } catch (const std::exception& e) {
    g_in_cell = 0;
    raw->threw = true;
    const std::type_info* t = abi::__cxa_current_exception_type();
    raw->thrown_type = t ? demangle(t->name()) : "std::exception";
    raw->thrown_what = e.what();
  } catch (...) {
    g_in_cell = 0;
    raw->threw = true;
    const std::type_info* t = abi::__cxa_current_exception_type();
    raw->thrown_type = t ? demangle(t->name()) : "an unknown exception";
  }
}

CellResult Session::execute(const std::string& input) {
  diagnostics_.clear();
  raw_ = RawResult{};
  g_cell_thread = pthread_self();
  InterruptsOpen open;
  int sig = sigsetjmp(g_jump, 1);
  if (sig == 0) {
    g_in_cell = 1;
    parse_and_execute(input, &raw_);
  } else {
    // Back from the signal handler: the cell's code was stopped mid-way.
    CellResult r;
    r.outcome = sig == SIGINT ? Outcome::interrupted : Outcome::crashed;
    r.name = signal_name(sig);
    r.message = sig == SIGINT ? "interrupted (SIGINT): the cell was stopped"
                              : std::string("the cell crashed (") + signal_name(sig) + ")";
    r.detail = remap(diagnostics_);
    return r;
  }
  CellResult r;
  const std::string& error_text = raw_.error_text;
  if (raw_.threw) {
    r.outcome = Outcome::exception;
    r.name = raw_.thrown_type;
    r.message = remap(raw_.thrown_what);
    r.detail = remap(diagnostics_);
    return r;
  }
  std::string diags = remap(diagnostics_);
  if (error_text.empty() && diags.find("error: ") == std::string::npos) {
    r.detail = diags;  // warnings
    return r;
  }
  if (diags.find("error: ") != std::string::npos) {
    r.outcome = Outcome::compile_error;
    r.name = "C++ error";
    r.message = first_error_line(diags);
    r.detail = diags;
  } else if (error_text.find("Symbols not found") != std::string::npos ||
             error_text.find("Failed to materialize") != std::string::npos ||
             error_text.find("JIT session error") != std::string::npos) {
    r.outcome = Outcome::link_error;
    r.name = "JIT session error";
    r.message = first_error_line(error_text);
    r.detail = remap(error_text);
  } else {
    r.outcome = Outcome::other_error;
    r.name = "error";
    r.message = remap(first_error_line(error_text));
    r.detail = remap(error_text + "\n" + diags);
  }
  return r;
}

CellResult Session::run(const std::string& cell_name, std::string_view code) {
  std::string path = config_.cell_dir + "/" + cell_name;
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << code;
    if (!code.empty() && code.back() != '\n') f << '\n';
  }
  CellResult r = execute("#include \"" + path + "\"\n");
  if (r.outcome == Outcome::compile_error || r.outcome == Outcome::other_error) {
    // A failed input leaves its declarations to be emitted with the next
    // input's module, which then fails to link; empty inputs take that fall
    // (at most four: one is usually enough).
    for (int i = 0; i < 4; ++i)
      if (run_quietly("(void)0;")) break;
  }
  return r;
}

bool Session::run_quietly(std::string_view code) {
  CellResult r = execute(std::string(code));
  diagnostics_.clear();
  return r.outcome == Outcome::ok;
}

// ------------------------------------------------------------ completion
std::vector<std::string> Session::complete(const std::string& line, std::size_t column,
                                           std::size_t* replace_length) {
  column = std::min(column, line.size());
  std::size_t start = column;
  while (start > 0 && is_ident_char(line[start - 1])) --start;
  std::string prefix = line.substr(start, column - start);
  *replace_length = prefix.size();
  // The qualifier before the prefix: "a::b::" (a chain of names and ::).
  std::size_t q = start;
  while (q >= 2 && line.compare(q - 2, 2, "::") == 0) {
    std::size_t e = q - 2, b = e;
    while (b > 0 && is_ident_char(line[b - 1])) --b;
    q = b;
    if (b == e) break;  // "::" at the global scope
  }
  std::string qualifier = line.substr(q, start - q);
  std::set<std::string> names;
  clang::ASTContext& ctx = interp_->getCompilerInstance()->getASTContext();
  auto add_from = [&](clang::DeclContext* dc) {
    if (!dc) return;
    dc = dc->getPrimaryContext();
    auto all = dc->lookups();
    for (auto it = all.begin(), end = all.end(); it != end; ++it) {
      clang::DeclarationName n = it.getLookupName();
      if (!n.isIdentifier()) continue;
      std::string s = n.getAsString();
      if (s.rfind(prefix, 0) != 0) continue;
      if (s.rfind("__", 0) == 0 && prefix.rfind("_", 0) != 0) continue;  // internals
      names.insert(s);
    }
  };
  if (!qualifier.empty()) {
    // Qualified: looked up in the session's AST (clang's REPL completer
    // imports only the translation unit's top level, not the namespaces'
    // members).
    for (clang::NamedDecl* d : resolve(split_qualified(qualifier), ctx)) add_from(as_context(d));
    if (qualifier == "::") add_from(ctx.getTranslationUnitDecl());
  } else {
    // Unqualified or a member access: clang's completer, on this line, in a
    // fresh compiler instance that sees the session's declarations.
    auto ci = builder_->CreateCpp();
    if (ci) {
      auto completer_interp = clang::Interpreter::create(std::move(*ci));
      if (completer_interp) {
        clang::ReplCodeCompleter cc;
        std::vector<std::string> results;
        std::string text = line.substr(0, column);
        cc.codeComplete((*completer_interp)->getCompilerInstance(), text, 1,
                        static_cast<unsigned>(column + 1), interp_->getCompilerInstance(), results);
        for (const std::string& s : results)
          if (s.rfind(prefix, 0) == 0) names.insert(s);
      } else {
        llvm::consumeError(completer_interp.takeError());
      }
    } else {
      llvm::consumeError(ci.takeError());
    }
    // Names of the namespaces the session's using-directives bring in.
    bool member = start > 0 &&
                  (line[start - 1] == '.' || (start > 1 && line.compare(start - 2, 2, "->") == 0));
    if (!member && !prefix.empty())
      for (clang::DeclContext* dc : top_level(ctx)) add_from(dc);
  }
  diagnostics_.clear();
  return {names.begin(), names.end()};
}

// ------------------------------------------------------------ inspection
std::string Session::describe(const std::string& qualified_name) {
  clang::ASTContext& ctx = interp_->getCompilerInstance()->getASTContext();
  std::vector<clang::NamedDecl*> decls = resolve(split_qualified(qualified_name), ctx);
  if (decls.empty()) return {};
  clang::PrintingPolicy policy = ctx.getPrintingPolicy();
  policy.TerseOutput = true;  // declarations, not bodies
  policy.PolishForDeclaration = true;
  const clang::SourceManager& sm = ctx.getSourceManager();
  std::string out;
  int shown = 0;
  for (clang::NamedDecl* d : decls) {
    if (++shown > 8) {
      out += "... (" + std::to_string(decls.size() - 8) + " more declarations)\n";
      break;
    }
    if (auto* u = llvm::dyn_cast<clang::UsingShadowDecl>(d)) d = u->getTargetDecl();
    std::string text;
    llvm::raw_string_ostream os(text);
    const clang::CXXRecordDecl* record = nullptr;
    if (auto* t = llvm::dyn_cast<clang::ClassTemplateDecl>(d)) record = t->getTemplatedDecl();
    if (auto* r = llvm::dyn_cast<clang::CXXRecordDecl>(d)) record = r;
    if (llvm::isa<clang::NamespaceDecl>(d)) {
      os << "namespace " << d->getQualifiedNameAsString();
    } else if (record && record->getDefinition()) {
      // A class: its kind and name, then its public members' declarations.
      record = record->getDefinition();
      os << record->getKindName() << " " << record->getQualifiedNameAsString() << " {\n";
      int members = 0;
      for (const clang::Decl* m : record->decls()) {
        const auto* nd = llvm::dyn_cast<clang::NamedDecl>(m);
        if (!nd || m->isImplicit() || m->getAccess() == clang::AS_private ||
            m->getAccess() == clang::AS_protected || llvm::isa<clang::AccessSpecDecl>(m))
          continue;
        if (++members > 40) {
          os << "  ...\n";
          break;
        }
        os << "  ";
        m->print(os, policy);
        os << ";\n";
      }
      os << "}";
    } else {
      d->print(os, policy);
    }
    os.flush();
    std::string where;
    clang::PresumedLoc p = sm.getPresumedLoc(d->getLocation());
    if (p.isValid()) {
      where = p.getFilename();
      std::string dir = config_.cell_dir + "/";
      if (where.rfind(dir, 0) == 0) where.erase(0, dir.size());
      where += ":" + std::to_string(p.getLine());
    }
    if (!out.empty()) out += "\n";
    if (const clang::RawComment* c = ctx.getRawCommentForAnyRedecl(d))
      out += c->getRawText(sm).str() + "\n";
    out += text + "\n";
    if (!where.empty()) out += "    (" + d->getQualifiedNameAsString() + ", " + where + ")\n";
  }
  diagnostics_.clear();
  return out;
}

}  // namespace tx_kernel
