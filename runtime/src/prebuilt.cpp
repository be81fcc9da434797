// Prebuilt kernels: the launch description's text form, and the
// ahead-of-time folder's entries that pair it with a cubin (prebuilt.hpp).
#include "tx/runtime/prebuilt.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "tx/runtime/cubin_cache.hpp"
#include "tx/runtime/cuda_driver.hpp"
#include "tx/runtime/disk_cache.hpp"

namespace tx::runtime {

namespace {

constexpr const char* kMagic = "tx-launch 2";

// ------------------------------------------------------------ expressions

bool write_expr(std::ostringstream& os, const Expr& e) {
  if (!e.defined() || !e.dtype().is_integer()) return false;
  if (auto* i = e.as<IntImmNode>()) {
    if (e.dtype() != i32) os << "(cast " << e.dtype().name() << " ";
    os << i->value;
    if (e.dtype() != i32) os << ")";
    return true;
  }
  if (auto* v = e.as<VarNode>()) {
    if (e.dtype() != i32) return false;  // extents and launch values are ints
    os << "$" << v->name;
    return true;
  }
  if (auto* c = e.as<CastNode>()) {
    os << "(cast " << c->dtype.name() << " ";
    if (!write_expr(os, c->value)) return false;
    os << ")";
    return true;
  }
  if (auto* u = e.as<UnaryNode>()) {
    if (u->op != UnOp::Neg) return false;
    os << "(neg ";
    if (!write_expr(os, u->a)) return false;
    os << ")";
    return true;
  }
  if (auto* b = e.as<BinaryNode>()) {
    if (binop_is_comparison(b->op) || binop_is_logical(b->op)) return false;
    os << "(" << binop_name(b->op) << " ";
    if (!write_expr(os, b->a)) return false;
    os << " ";
    if (!write_expr(os, b->b)) return false;
    os << ")";
    return true;
  }
  return false;
}

[[noreturn]] void malformed(const std::string& why) {
  fail("tx.prebuilt", "", {}, "malformed launch description: " + why);
}

struct ExprParser {
  const std::string& s;
  std::size_t at = 0;
  const std::map<std::string, Var>& vars;

  void skip() {
    while (at < s.size() && s[at] == ' ') ++at;
  }
  std::string word() {
    skip();
    std::size_t b = at;
    while (at < s.size() && s[at] != ' ' && s[at] != '(' && s[at] != ')') ++at;
    if (b == at) malformed("expected a word in '" + s + "'");
    return s.substr(b, at - b);
  }
  void expect(char c) {
    skip();
    if (at >= s.size() || s[at] != c) malformed(std::string("expected '") + c + "' in '" + s + "'");
    ++at;
  }
  Expr parse() {
    skip();
    if (at < s.size() && s[at] == '(') {
      ++at;
      std::string op = word();
      Expr r;
      if (op == "cast") {
        DType t = dtype_from_string(word());
        Expr x = parse();
        r = x.as<IntImmNode>() ? make_int(x.as<IntImmNode>()->value, t) : make_cast(t, x);
      } else if (op == "neg") {
        r = make_unary(UnOp::Neg, parse());
      } else {
        static const std::map<std::string, BinOp> ops = [] {
          std::map<std::string, BinOp> m;
          for (BinOp o : {BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Mod,
                          BinOp::FloorDiv, BinOp::FloorMod, BinOp::Min, BinOp::Max, BinOp::BitAnd,
                          BinOp::BitOr, BinOp::BitXor, BinOp::Shl, BinOp::Shr})
            m[binop_name(o)] = o;
          return m;
        }();
        auto it = ops.find(op);
        if (it == ops.end()) malformed("unknown operation '" + op + "'");
        Expr a = parse();
        Expr b = parse();
        r = make_binary(it->second, a, b);
      }
      expect(')');
      return r;
    }
    std::string w = word();
    if (w[0] == '$') {
      auto it = vars.find(w.substr(1));
      if (it == vars.end()) malformed("unknown variable '" + w + "'");
      return it->second;
    }
    try {
      std::size_t used = 0;
      long long v = std::stoll(w, &used);
      if (used != w.size()) throw std::invalid_argument(w);
      return make_int(v);
    } catch (const std::exception&) {
      malformed("not a number: '" + w + "'");
    }
  }
};

// The file of a SourceLoc outlives the description it was read from.
const char* intern(const std::string& file) {
  static std::mutex mu;
  static auto* files = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return files->insert(file).first->c_str();
}

SourceLoc loc_of(unsigned line, const std::string& file) {
  SourceLoc l;
  l.file = intern(file);
  l.line = line;
  return l;
}

std::string rest_of(std::istringstream& in) {
  std::string r;
  std::getline(in, r);
  if (!r.empty() && r[0] == ' ') r.erase(0, 1);
  return r;
}

}  // namespace

std::optional<std::string> describe_launch(const lowering::LoweredKernel& k,
                                           const std::string& kernel_name) {
  if (!k.tensor_maps.empty()) return std::nullopt;  // encoded per launch from the IR's boxes
  std::ostringstream os;
  os << kMagic << "\n";
  os << "name " << kernel_name << "\n";
  os << "loc " << k.source->loc.line << " " << k.source->loc.file << "\n";
  os << "block " << k.launch.block << "\n";
  if (k.source->no_alias) os << "noalias\n";
  os << "shared " << k.shared_bytes << "\n";
  os << "grid " << k.launch.grid[0] << " " << k.launch.grid[1] << " " << k.launch.grid[2] << " "
     << (k.launch.symbolic_grid ? 1 : 0) << "\n";
  if (k.launch.symbolic_grid)
    for (std::size_t g = 0; g < 3; ++g) {
      os << "gridexpr " << g << " ";
      if (!write_expr(os, k.launch.grid_exprs[g])) return std::nullopt;
      os << "\n";
    }
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    const lowering::KernelParamInfo& p = k.params[i];
    if (p.is_scalar) {
      os << "scalar " << p.name << " " << p.dtype.name() << " " << p.min << " " << p.max << " "
         << p.multiple_of << "\n";
      continue;
    }
    os << "buffer " << p.name << " " << p.dtype.name() << " " << p.elems << " " << p.align_bytes
       << " " << (p.written ? 1 : 0) << " " << (p.symbolic ? 1 : 0);
    if (p.symbolic) {
      os << " " << p.dims.size();
      for (const Expr& d : p.dims) {
        // A T::dim variable or a constant (one word each).
        if (!d.as<VarNode>() && !d.as<IntImmNode>()) return std::nullopt;
        os << " ";
        if (!write_expr(os, d)) return std::nullopt;
      }
      for (std::int64_t e : p.shape) os << " " << e;  // their bounds
    } else {
      os << " " << p.shape.size();
      for (std::int64_t e : p.shape) os << " " << e;
    }
    os << "\n";
  }
  for (const DimParam& d : k.dims)
    os << "dim " << d.var.name() << " " << d.min << " " << d.max << " " << d.multiple_of << " "
       << d.loc.line << " " << d.loc.file << "\n";
  for (const DimParam& d : k.derived) {
    os << "derived " << d.var.name() << " "
       << (d.derived == DimParam::Derived::div_magic ? "div_magic" : "div_shift") << " ";
    if (!write_expr(os, d.of)) return std::nullopt;
    os << "\n";
  }
  // Scalar parameters' variables by name, for the expressions above.
  for (std::size_t i = 0; i < k.params.size(); ++i)
    if (k.params[i].is_scalar && k.source->params[i].scalar.name() != k.params[i].name)
      return std::nullopt;
  os << "end\n";
  return os.str();
}

LaunchDescription parse_launch(const std::string& text) {
  LaunchDescription d;
  lowering::LoweredKernel& k = d.info;
  std::istringstream lines(text);
  std::string line;
  if (!std::getline(lines, line) || line != kMagic) malformed("no '" + std::string(kMagic) + "'");
  std::map<std::string, Var> vars;
  std::vector<Param> params;
  SourceLoc kernel_loc;
  std::vector<std::pair<std::size_t, std::string>> grid_text;
  std::vector<std::pair<std::size_t, std::vector<std::string>>> dims_text;  // param, extents
  std::vector<std::tuple<Var, bool, std::string>> derived_text;
  bool ended = false, no_alias = false;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    std::string what;
    in >> what;
    if (what == "end") {
      ended = true;
      break;
    }
    if (what == "name") {
      in >> d.kernel_name;
    } else if (what == "loc") {
      unsigned l = 0;
      in >> l;
      kernel_loc = loc_of(l, rest_of(in));
    } else if (what == "block") {
      in >> k.launch.block;
    } else if (what == "noalias") {
      no_alias = true;
    } else if (what == "shared") {
      in >> k.shared_bytes;
    } else if (what == "grid") {
      int symbolic = 0;
      in >> k.launch.grid[0] >> k.launch.grid[1] >> k.launch.grid[2] >> symbolic;
      k.launch.symbolic_grid = symbolic != 0;
    } else if (what == "gridexpr") {
      std::size_t g = 3;
      in >> g;
      if (g > 2) malformed("grid axis " + std::to_string(g));
      grid_text.emplace_back(g, rest_of(in));
    } else if (what == "scalar") {
      lowering::KernelParamInfo p;
      std::string dt;
      in >> p.name >> dt >> p.min >> p.max >> p.multiple_of;
      p.dtype = dtype_from_string(dt);
      p.is_scalar = true;
      Param sp;
      sp.handle = Var(p.name + "_ptr", handle_t);
      sp.scalar = Var(p.name, p.dtype);
      sp.min = p.min;
      sp.max = p.max;
      sp.multiple_of = p.multiple_of;
      vars[p.name] = sp.scalar;
      params.push_back(sp);
      k.params.push_back(p);
    } else if (what == "buffer") {
      lowering::KernelParamInfo p;
      std::string dt;
      int written = 0, symbolic = 0;
      std::size_t rank = 0;
      in >> p.name >> dt >> p.elems >> p.align_bytes >> written >> symbolic >> rank;
      p.written = written != 0;
      p.dtype = dtype_from_string(dt);
      p.symbolic = symbolic != 0;
      std::vector<std::string> extents(rank);
      for (auto& e : extents) {
        in >> e;
        if (e.empty()) malformed("buffer " + p.name + " lists fewer extents than its rank");
      }
      if (p.symbolic) {
        dims_text.emplace_back(k.params.size(), extents);
        p.shape.assign(rank, 0);
        for (auto& e : p.shape) in >> e;  // the extents' bounds
      } else {
        for (const auto& e : extents) p.shape.push_back(std::stoll(e));
      }
      Param bp;
      bp.handle = Var(p.name + "_ptr", handle_t);
      params.push_back(bp);
      k.params.push_back(p);
    } else if (what == "dim") {
      DimParam dp;
      std::string name;
      unsigned l = 0;
      in >> name >> dp.min >> dp.max >> dp.multiple_of >> l;
      dp.loc = loc_of(l, rest_of(in));
      dp.var = Var(name, i32, dp.loc);
      vars[name] = dp.var;
      k.dims.push_back(dp);
    } else if (what == "derived") {
      std::string name, kind;
      in >> name >> kind;
      if (kind != "div_magic" && kind != "div_shift") malformed("launch value kind " + kind);
      derived_text.emplace_back(Var(name, i32), kind == "div_magic", rest_of(in));
    } else if (!what.empty()) {
      malformed("unknown line '" + line + "'");
    }
    if (in.fail()) malformed("bad line '" + line + "'");
  }
  if (!ended || d.kernel_name.empty() || k.launch.block <= 0) malformed("incomplete");
  // Extents, the grid and the launch values refer to the variables above.
  for (auto& [p, extents] : dims_text)
    for (const std::string& e : extents) k.params[p].dims.push_back(ExprParser{e, 0, vars}.parse());
  for (auto& [g, t] : grid_text) k.launch.grid_exprs[g] = ExprParser{t, 0, vars}.parse();
  for (auto& [var, magic, t] : derived_text) {
    DimParam dp;
    dp.var = var;
    dp.min = magic ? INT32_MIN : 31;
    dp.max = magic ? 2147483647 : 62;
    dp.derived = magic ? DimParam::Derived::div_magic : DimParam::Derived::div_shift;
    dp.of = ExprParser{t, 0, vars}.parse();
    k.derived.push_back(dp);
  }
  k.source = PrimFunc(std::make_shared<const PrimFuncNode>(d.kernel_name, params,
                                                           make_seq({}, kernel_loc), kernel_loc,
                                                           /*lowered=*/false, k.dims, no_alias));
  return d;
}

std::vector<char> pack_prebuilt(const std::string& description, const std::vector<char>& cubin) {
  std::vector<char> out(description.begin(), description.end());
  out.push_back('\0');
  out.insert(out.end(), cubin.begin(), cubin.end());
  return out;
}

std::string prebuilt_key(const std::string& spec, const std::string& arch) {
  return sha256_hex("tx-prebuilt|" + spec + "|" + arch);
}

std::optional<Kernel> load_prebuilt(const std::string& spec, Device device,
                                    std::function<Kernel()> build) {
  if (!device.is_cuda() || !cuda_available()) return std::nullopt;
  const DiskCache* cache = aot_cache();
  if (!cache) return std::nullopt;
  std::optional<std::vector<char>> entry =
      cache->load(prebuilt_key(spec, device_info(device.index).arch()));
  if (!entry) return std::nullopt;
  const auto* nul = static_cast<const char*>(std::memchr(entry->data(), '\0', entry->size()));
  if (!nul) return std::nullopt;
  const std::size_t text_size = static_cast<std::size_t>(nul - entry->data());
  LaunchDescription d;
  try {
    d = parse_launch(std::string(entry->data(), text_size));
  } catch (const Error& e) {
    warn("the prebuilt kernel for '" + spec + "' is unreadable (" + e.reason() + "); building it");
    return std::nullopt;
  }
  std::vector<char> cubin(entry->begin() + static_cast<std::ptrdiff_t>(text_size) + 1,
                          entry->end());
  return Kernel::prebuilt(std::move(d.info), std::move(d.kernel_name), std::move(cubin), device,
                          std::move(build));
}

}  // namespace tx::runtime
