// The tile-program fuzzer's corpus as a regression suite (built with the
// other CPU suites, no libFuzzer needed): every file of fuzz/corpus becomes
// its tile program (fuzz/tile_program.hpp, the fuzzer's own builder and
// model) and must be rejected with a tx::Error, or lower, generate CUDA and --
// with the host JIT -- run on fresh random inputs (not the fuzzer's) and
// match the double-precision model. Also checks that the model and the
// checker themselves can tell right from wrong.
//
// The other two fuzzers' corpora too: every file of fuzz/corpus-invalid is an
// invalid program (fuzz/invalid_program.hpp) that must end in a tx error or
// its documented result, as the generator expects; every file of
// fuzz/corpus-builder a sequence of builder calls (fuzz/builder_calls.hpp)
// that must never end in anything but tx errors. Both skip the features of
// the bugs still pending (txfuzz::kPendingBugs), as the fuzzers do.
//
// TXFUZZ_CORPUS=dir replays another folder (e.g. a fuzzer's work corpus)
// for the tile programs; TXFUZZ_CORPUS_INVALID and TXFUZZ_CORPUS_BUILDER for
// the other two.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "../fuzz/builder_calls.hpp"
#include "../fuzz/invalid_program.hpp"
#include "../fuzz/tile_program.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using namespace txfuzz;

fs::path corpus_dir(const char* env = "TXFUZZ_CORPUS", const char* name = "corpus") {
  if (const char* d = std::getenv(env)) return d;
  return fs::path(__FILE__).parent_path().parent_path() / "fuzz" / name;
}

std::vector<fs::path> corpus_files(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in),
                                   std::istreambuf_iterator<char>());
}

bool host_jit() { return tx::runtime::host_jit_available(); }

struct QuietWarnings {
  QuietWarnings() {
    tx::set_warning_handler([](const std::string&) {});
  }
  ~QuietWarnings() { tx::set_warning_handler(nullptr); }
};

RegionSpec whole(const Program& p, int buf) {
  RegionSpec r;
  r.buf = buf;
  r.extent = p.bufs[static_cast<std::size_t>(buf)].shape;
  r.start.assign(r.extent.size(), 0);
  return r;
}
Arg tile(const RegionSpec& r) {
  Arg a;
  a.region = r;
  return a;
}
Arg scalar(double v) {
  Arg a;
  a.scalar = true;
  a.value = v;
  return a;
}
Buf buffer(const std::string& name, MemScope s, DType t, Shape shape, bool poisoned = false) {
  Buf b;
  b.name = name;
  b.scope = s;
  b.dtype = t;
  b.shape = std::move(shape);
  b.poisoned = poisoned;
  return b;
}
Op op(std::string name, ExecScope s, std::vector<Arg> args) {
  Op o;
  o.name = std::move(name);
  o.scope = s;
  o.args = std::move(args);
  return o;
}

// 64 threads: in (64, 4) -> shared; shared += 1.5 (cta); each warp takes its
// 32 rows into registers (lane = row) and sums them over the columns (a
// warp-scope register reduction over axis 1) into its rows of out:
// out[i] = sum_j (in[i, j] + 1.5).
Program sum_rows_program(DType t) {
  Program p;
  p.threads = 64;
  p.bufs = {buffer("in0", MemScope::global, t, {64, 4}),
            buffer("sm1", MemScope::shared, t, {64, 4}), buffer("r2", MemScope::local, t, {32, 4}),
            buffer("r3", MemScope::local, t, {32}),
            buffer("out4", MemScope::global, t, {64}, true)};
  p.bufs[2].family = p.bufs[3].family = Family::warp;
  p.bufs[2].layout = LayoutSpec{{{32, 1, tx::Axis::laneid}, {4, 1, tx::Axis::m}}, {}, {}};
  p.bufs[3].layout = LayoutSpec{{{32, 1, tx::Axis::laneid}}, {}, {}};
  RegionSpec rows = whole(p, 1);
  rows.extent = {32, 4};
  rows.dyn_dim = 0;
  rows.dyn_var = IdVar::warp;
  rows.dyn_mult = 32;
  RegionSpec out_rows = whole(p, 4);
  out_rows.extent = {32};
  out_rows.dyn_dim = 0;
  out_rows.dyn_var = IdVar::warp;
  out_rows.dyn_mult = 32;
  p.ops = {op("copy", ExecScope::cta, {tile(whole(p, 1)), tile(whole(p, 0))}),
           op("add", ExecScope::cta, {tile(whole(p, 1)), tile(whole(p, 1)), scalar(1.5)}),
           op("copy", ExecScope::warp, {tile(whole(p, 2)), tile(rows)}),
           op("sum", ExecScope::warp, {tile(whole(p, 3)), tile(whole(p, 2))}),
           op("copy", ExecScope::warp, {tile(out_rows), tile(whole(p, 3))})};
  p.ops[3].axes = {1};
  return p;
}

}  // namespace

TEST_CASE("fuzz corpus: every program is rejected with a tx error or matches its model") {
  QuietWarnings quiet;
  const fs::path dir = corpus_dir();
  REQUIRE_MESSAGE(fs::is_directory(dir), dir.string() << " is not a folder");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 10);

  std::size_t n[4] = {0, 0, 0, 0}, compared = 0;
  for (const fs::path& f : files) {
    CAPTURE(f.filename().string());
    std::vector<std::uint8_t> bytes = read_bytes(f);
    Program p = generate(bytes.data(), bytes.size());
    INFO(describe(p));
    Outcome o = run_program(p, tx::test::rng()());
    CHECK_MESSAGE(o.kind != Outcome::finding, o.message);
    ++n[o.kind];
    compared += o.compared;
  }
  MESSAGE(files.size() << " programs: " << n[Outcome::checked] << " run and checked (" << compared
                       << " elements), " << n[Outcome::lowered] << " lowered only, "
                       << n[Outcome::rejected] << " rejected; seed " << tx::test::rng_seed());
  // The corpus is kept for programs that lower: most of them must get that far.
  CHECK(n[Outcome::checked] + n[Outcome::lowered] >= files.size() / 2);
  if (host_jit()) {
    CHECK(n[Outcome::checked] >= files.size() / 2);
    CHECK(compared >= 20 * files.size());
  }
}

TEST_CASE("fuzz model: a hand-written program evaluates as the tile ops say") {
  for (DType t : {tx::f32, tx::f16, tx::i32}) {
    CAPTURE(t.name());
    Program p = sum_rows_program(t);
    std::vector<std::vector<double>> inputs(p.bufs.size());
    inputs[0] = input_values(256, t, false, tx::test::rng());
    Model m(p, inputs);
    m.run();
    REQUIRE(m.invalid() == "");
    REQUIRE(m.out_of_bounds() == "");
    REQUIRE(m.unjudged() == "");
    for (std::int64_t i = 0; i < 64; ++i) {
      double want = 0;
      for (int j = 0; j < 4; ++j) {
        double x = inputs[0][static_cast<std::size_t>(i * 4 + j)] + (t == tx::i32 ? 1 : 1.5);
        want += t == tx::f16 ? tx::quantize(x, t) : x;
      }
      REQUIRE(m.written(4, i));
      Val v = m.value(4, i);
      REQUIRE(v.def);
      CHECK(std::fabs(v.v - want) <= v.err + (t == tx::f16 ? 0.02 : 0.0));
      if (t == tx::i32) CHECK(v.err == 0);
      if (t == tx::f32) CHECK(v.err < 1e-4);  // a few f32 roundings of sums below 24
    }
    // The inputs are not written; nothing else of the output is.
    CHECK_FALSE(m.written(0, 0));
  }
}

TEST_CASE("fuzz model: rule breaks, out-of-bounds regions and races are recognized") {
  Program base = sum_rows_program(tx::f32);
  std::vector<std::vector<double>> inputs(base.bufs.size());
  inputs[0] = input_values(256, tx::f32, true, tx::test::rng());
  auto eval = [&](const Program& p) {
    auto m = std::make_unique<Model>(p, inputs);
    m->run();
    return m;
  };
  {  // copy between dtypes
    Program p = base;
    p.bufs[1].dtype = tx::f16;
    CHECK(eval(p)->invalid().find("dtype") != std::string::npos);
  }
  {  // a region past the end for warp 1 only
    Program p = base;
    p.ops[2].args[1].region.start[0] = 1;
    auto m = eval(p);
    CHECK(m->invalid() == "");
    CHECK(m->out_of_bounds().find("group 1") != std::string::npos);
  }
  {  // sqrt on integers; a scalar left operand of sub
    Program p = base;
    for (Buf& b : p.bufs) b.dtype = tx::i32;
    p.ops[1].name = "sqrt";
    p.ops[1].args.pop_back();
    CHECK(eval(p)->invalid().find("sqrt") != std::string::npos);
    p = base;
    p.ops[1].name = "sub";
    std::swap(p.ops[1].args[1], p.ops[1].args[2]);
    CHECK(eval(p)->invalid().find("scalar left") != std::string::npos);
  }
  {  // a warp op under a guard that splits the warp
    Program p = base;
    p.ops[2].guard = {IdVar::tid, 1, 16};
    CHECK(eval(p)->invalid().find("splits") != std::string::npos);
  }
  {  // every thread adds in place to the same shared tile: a race, undefined
    Program p = base;
    p.ops[1].scope = ExecScope::thread;
    auto m = eval(p);
    CHECK(m->invalid() == "");
    CHECK(m->written(4, 0));
    CHECK_FALSE(m->value(4, 0).def);
  }
  {  // the same add by the whole CTA at once is defined
    auto m = eval(base);
    CHECK(m->value(4, 0).def);
  }
}

TEST_CASE("fuzz runner: wrong values and stray writes are findings") {
  if (!host_jit()) {
    MESSAGE("no host JIT: the runner only lowers; nothing to sabotage");
    return;
  }
  QuietWarnings quiet;
  Program p = sum_rows_program(tx::f32);
  Outcome ok = run_program(p, tx::test::rng()());
  INFO(ok.message);
  REQUIRE(ok.kind == Outcome::checked);
  CHECK(ok.compared == 64);
  RunOptions wrong;
  wrong.sabotage = 1;
  Outcome w = run_program(p, tx::test::rng()(), wrong);
  CHECK(w.kind == Outcome::finding);
  CHECK(w.message.find("want") != std::string::npos);
  RunOptions stray;
  stray.sabotage = 2;
  p.bufs[4].shape = {65};  // one element the program never writes
  Outcome s = run_program(p, tx::test::rng()(), stray);
  CHECK(s.kind == Outcome::finding);
  CHECK(s.message.find("does not write") != std::string::npos);
}

TEST_CASE("fuzz generator: the same bytes make the same program") {
  std::vector<std::uint8_t> bytes(64);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(tx::test::rng()());
  std::string a = describe(generate(bytes.data(), bytes.size()));
  std::string b = describe(generate(bytes.data(), bytes.size()));
  CHECK(a == b);
  CHECK(a.find("Tx.") != std::string::npos);
  // An empty input is a plain, valid program too.
  Program empty = generate(nullptr, 0);
  CHECK(empty.ops.size() >= 2);
}

TEST_CASE("invalid-program corpus: every program ends in a tx error or its documented result") {
  QuietWarnings quiet;
  txfuzz::avoid_from_env();
  const fs::path dir = corpus_dir("TXFUZZ_CORPUS_INVALID", "corpus-invalid");
  std::vector<fs::path> files = corpus_files(dir);
  REQUIRE_MESSAGE(files.size() >= 10, dir.string() << " holds too few inputs");
  std::map<std::string, int> kinds;  // outcome -> programs
  std::set<std::string> faults;
  for (const fs::path& f : files) {
    CAPTURE(f.filename().string());
    std::vector<std::uint8_t> bytes = read_bytes(f);
    txbad::Program p = txbad::generate(bytes.data(), bytes.size());
    INFO(txbad::describe(p));
    txbad::Outcome o = txbad::run_program(p, tx::test::rng()());
    CHECK_MESSAGE(o.kind != txbad::Outcome::finding, o.message);
    ++kinds[txbad::outcome_name(o.kind)];
    faults.insert(p.fault);
  }
  std::string summary;
  for (const auto& [k, n] : kinds) summary += " " + std::to_string(n) + " " + k;
  MESSAGE(files.size() << " invalid programs (" << faults.size() << " kinds of fault):" << summary
                       << "; seed " << tx::test::rng_seed());
  // The corpus keeps programs of every stage: rejected when compiled, and,
  // with the host JIT, reported by the checked run, refused at the launch,
  // and run clean.
  CHECK(kinds["rejected"] > 0);
  if (host_jit()) {
    CHECK(kinds["reported"] > 0);
    CHECK(kinds["refused"] > 0);
    CHECK(kinds["clean"] > 0);
  }
}

TEST_CASE("builder corpus: random builder call sequences end in tx errors, never a crash") {
  QuietWarnings quiet;
  txfuzz::avoid_from_env();
  const fs::path dir = corpus_dir("TXFUZZ_CORPUS_BUILDER", "corpus-builder");
  std::vector<fs::path> files = corpus_files(dir);
  REQUIRE_MESSAGE(files.size() >= 10, dir.string() << " holds too few inputs");
  long steps = 0, errors = 0, compiled = 0, launched = 0;
  for (const fs::path& f : files) {
    CAPTURE(f.filename().string());
    std::vector<std::uint8_t> bytes = read_bytes(f);
    txbuild::Result r = txbuild::run_bytes(bytes.data(), bytes.size());
    CHECK_MESSAGE(!r.finding, r.message << "\nafter these calls:\n" << r.trace);
    steps += r.steps;
    errors += r.errors;
    compiled += r.compiled;
    launched += r.launched;
  }
  MESSAGE(files.size() << " call sequences: " << steps << " calls (" << errors << " tx errors), "
                       << compiled << " compiles, " << launched << " launches");
  CHECK(errors > 0);
  CHECK(compiled > 0);
  if (host_jit()) CHECK(launched > 0);
}
