// autotune.txt, the remembered autotuning winners (ops/src/autotune_file.hpp):
// round trips, malformed and untrusted files, and processes updating it at
// once. The file handling needs no GPU; only the timing itself does.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "../ops/src/autotune_file.hpp"
#include "test_fixtures.hpp"
#include "test_support.hpp"
#include "tx/error.hpp"
#include "tx/runtime/disk_cache.hpp"

namespace {

using tx::ops::Config;
using tx::ops::Strategy;
using tx::ops::detail::remember_config;
using tx::ops::detail::remembered_config;
using tx::runtime::DiskCache;

constexpr uid_t kNobody = 65534;

using tx::test::read_file;
using tx::test::warnings;
using tx::test::write_file;
using WarningCapture = tx::test::WarningCapture;
struct TempDir : tx::test::TempDir {
  TempDir() : tx::test::TempDir("tx-autotune-test") {}
};

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(tx::test::rng()); }

// A config of the kind the tuner picks, at random.
Config random_config() {
  Config c;
  c.strategy = static_cast<Strategy>(pick(0, 2));
  c.threads = 32 * pick(1, 32);
  c.num_per_thread = 1 << pick(0, 6);
  return c;
}

bool same(const std::optional<Config>& a, const Config& b) {
  return a && a->strategy == b.strategy && a->threads == b.threads &&
         a->num_per_thread == b.num_per_thread;
}

std::string key_for(int i) {
  return "add|f16|n2^" + std::to_string(i) + "_r1_1_i64|NVIDIA H200 " +
         std::to_string(pick(0, 1 << 20));
}

uid_t other_uid() { return geteuid() == kNobody ? kNobody - 1 : kNobody; }

}  // namespace

TEST_CASE("a remembered winner round-trips through autotune.txt") {
  TempDir tmp;
  WarningCapture w;
  const std::string dir = tmp.path + "/tx";  // missing: remember creates it
  DiskCache cache(dir);
  const std::string a = key_for(10), b = key_for(20);
  CHECK_FALSE(remembered_config(cache, a).has_value());  // no folder, no file: a quiet miss

  const Config ca = random_config(), cb = random_config();
  REQUIRE(remember_config(cache, a, ca));
  CHECK(same(remembered_config(cache, a), ca));
  CHECK_FALSE(remembered_config(cache, b).has_value());
  REQUIRE(remember_config(cache, b, cb));
  CHECK(same(remembered_config(cache, a), ca));
  CHECK(same(remembered_config(cache, b), cb));

  // A new winner for a key replaces its line.
  Config ca2 = random_config();
  ca2.threads = ca.threads == 1024 ? 512 : ca.threads + 32;
  REQUIRE(remember_config(cache, a, ca2));
  CHECK(same(remembered_config(cache, a), ca2));
  CHECK(same(remembered_config(cache, b), cb));
  auto line = [](const std::string& k, const Config& c) {
    return k + " = " + tx::ops::strategy_name(*c.strategy) + " " + std::to_string(c.threads) + " " +
           std::to_string(c.num_per_thread) + "\n";
  };
  CHECK(read_file(dir + "/autotune.txt") == line(a, ca2) + line(b, cb));

  // The folder is the cache's, 0700; the file is private; no temporary left.
  struct stat st {};
  REQUIRE(stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0700);
  REQUIRE(stat((dir + "/autotune.txt").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(list_dir(dir) == std::vector<std::string>{"autotune.txt", "autotune.txt.lock"});
  CHECK(warnings().empty());

  // A fresh cache object (the next process) reads the same winners.
  DiskCache again(dir);
  CHECK(same(remembered_config(again, b), cb));
}

TEST_CASE("winners that cannot be written as one valid line are not remembered") {
  TempDir tmp;
  DiskCache cache(tmp.path);
  const Config good = random_config();
  Config no_strategy = good;
  no_strategy.strategy.reset();
  Config bad_threads = good;
  bad_threads.threads = 100;
  Config bad_npt = good;
  bad_npt.num_per_thread = 3;
  for (const auto& [key, c] : std::vector<std::pair<std::string, Config>>{{"two\nlines", good},
                                                                          {"", good},
                                                                          {"a = b", good},
                                                                          {"k", no_strategy},
                                                                          {"k", bad_threads},
                                                                          {"k", bad_npt}}) {
    CAPTURE(key);
    WarningCapture w;
    bool ok = true;
    CHECK_NOTHROW(ok = remember_config(cache, key, c));
    CHECK_FALSE(ok);
    CHECK(w.any_mentions("not remembering"));
  }
  CHECK_FALSE(std::filesystem::exists(tmp.path + "/autotune.txt"));
  CHECK(remember_config(cache, "k", good));
}

TEST_CASE("a malformed autotune.txt is skipped line by line, with warnings, never a crash") {
  TempDir tmp;
  DiskCache cache(tmp.path);
  const std::string path = tmp.path + "/autotune.txt";
  const Config good = random_config();
  const std::string a = key_for(1);
  std::string good_line = a + " = " + tx::ops::strategy_name(*good.strategy) + " " +
                          std::to_string(good.threads) + " " + std::to_string(good.num_per_thread);
  const std::vector<std::string> bad = {
      "garbage",
      "B = warp_magic 256 8",
      "C = register_copy 100 8",
      "D = register_copy 256 3",
      "E = register_copy 256",
      "F = register_copy 256 8 extra",
      "G = register_copy 99999999999999999999 8",
      " = direct 128 1",
      std::string("H\0\xff = direct 128 1\x01", sizeof "H\0\xff = direct 128 1\x01" - 1),
      "I = register_copy 256abc 8",
      "J = register_copy -256 8",
  };
  std::string text = "\n" + good_line + "\n";
  for (const auto& l : bad) text += l + "\n";
  text += "K = direct 128 1";  // cut off: no end of line
  write_file(path, text);
  {
    WarningCapture w;
    std::optional<Config> got;
    CHECK_NOTHROW(got = remembered_config(cache, a));
    CHECK(same(got, good));
    CHECK(w.any_mentions("ignoring line 3 of " + path + " (not 'key = "));
    CHECK(w.any_mentions("ignoring line 4 of " + path + " (unknown strategy 'warp_magic')"));
    CHECK(w.any_mentions("ignoring line 5 of " + path + " (threads '100'"));
    CHECK(w.any_mentions("more malformed lines of " + path));
  }
  for (const char* k : {"B", "C", "D", "E", "F", "G", "I", "J", "K", "garbage"}) {
    CAPTURE(k);
    WarningCapture w;
    CHECK_FALSE(remembered_config(cache, k).has_value());
  }
  // The next update drops the malformed lines and keeps the good one.
  WarningCapture w;
  const Config other = random_config();
  REQUIRE(remember_config(cache, "L", other));
  CHECK(w.any_mentions("without its " + std::to_string(bad.size() + 1) + " malformed line(s)"));
  CHECK(same(remembered_config(cache, a), good));
  CHECK(same(remembered_config(cache, "L"), other));
  CHECK(read_file(path).find("garbage") == std::string::npos);

  // Random bytes: never a throw, and anything read back is a valid config.
  std::uniform_int_distribution<int> byte(0, 255);
  for (int round = 0; round < 200; ++round) {
    std::string junk(static_cast<std::size_t>(pick(0, 400)), '\0');
    for (char& c : junk) c = static_cast<char>(pick(0, 9) == 0 ? '\n' : byte(tx::test::rng()));
    if (round % 2) junk = good_line.substr(0, static_cast<std::size_t>(pick(0, 60))) + junk;
    write_file(path, junk);
    WarningCapture quiet;
    std::optional<Config> got;
    CHECK_NOTHROW(got = remembered_config(cache, a));
    if (got) {
      CHECK(got->threads % 32 == 0);
      CHECK(got->num_per_thread >= 1);
    }
  }
  // An oversized file is not read at all.
  write_file(path, good_line + "\n" + std::string(std::size_t{2} << 20, 'x') + "\n");
  WarningCapture big;
  CHECK_FALSE(remembered_config(cache, a).has_value());
  CHECK(big.any_mentions("ignoring the contents of " + path));
}

TEST_CASE("an autotune.txt that is not the user's own private file is ignored") {
  TempDir tmp;
  DiskCache cache(tmp.path);
  const std::string path = tmp.path + "/autotune.txt";
  const std::string a = key_for(3);
  const Config ca = random_config();
  REQUIRE(remember_config(cache, a, ca));
  const std::string before = read_file(path);

  // Writable by group or others: not read, and not replaced.
  for (mode_t mode : {mode_t{0620}, mode_t{0606}}) {
    CAPTURE(mode);
    WarningCapture w;
    REQUIRE(chmod(path.c_str(), mode) == 0);
    CHECK_FALSE(remembered_config(cache, a).has_value());
    CHECK(w.any_mentions("ignoring " + path));
    CHECK(w.any_mentions(mode == 0620 ? "writable by its group" : "writable by others"));
    CHECK_FALSE(remember_config(cache, key_for(4), random_config()));
    CHECK(read_file(path) == before);
  }
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  CHECK(same(remembered_config(cache, a), ca));

  // A symbolic link in its place is not followed.
  {
    const std::string elsewhere = tmp.path + "/elsewhere.txt";
    REQUIRE(std::rename(path.c_str(), elsewhere.c_str()) == 0);
    REQUIRE(symlink(elsewhere.c_str(), path.c_str()) == 0);
    WarningCapture w;
    CHECK_FALSE(remembered_config(cache, a).has_value());
    CHECK(w.any_mentions("a symbolic link"));
    CHECK_FALSE(remember_config(cache, key_for(5), random_config()));
    REQUIRE(std::remove(path.c_str()) == 0);
    REQUIRE(std::rename(elsewhere.c_str(), path.c_str()) == 0);
  }

  // A folder the cache must not trust: neither read nor written.
  {
    WarningCapture w;
    REQUIRE(chmod(tmp.path.c_str(), 0777) == 0);
    CHECK_FALSE(remembered_config(cache, a).has_value());
    CHECK_FALSE(remember_config(cache, key_for(6), random_config()));
    CHECK(w.any_mentions("not using " + tmp.path + ": writable by others"));
    REQUIRE(chmod(tmp.path.c_str(), 0700) == 0);
    CHECK(read_file(path) == before);
  }

  // Another user's: through the owner seam as any user (the folder and file
  // are ours, the cache trusts another uid) ...
  {
    WarningCapture w;
    DiskCache foreign(tmp.path, other_uid());
    CHECK_FALSE(remembered_config(foreign, a).has_value());
    CHECK_FALSE(remember_config(foreign, key_for(7), random_config()));
    CHECK(w.any_mentions("owned by uid " + std::to_string(geteuid())));
    CHECK(read_file(path) == before);
  }
  if (geteuid() != 0) {
    MESSAGE("not root: autotune.txt was not chowned to another user; only the owner seam ran");
    return;
  }
  // ... and, as root, a real file of another user's in the user's own folder.
  WarningCapture w;
  REQUIRE(chown(path.c_str(), kNobody, kNobody) == 0);
  CHECK_FALSE(remembered_config(cache, a).has_value());
  CHECK(w.any_mentions("ignoring " + path + " (owned by uid " + std::to_string(kNobody)));
  CHECK_FALSE(remember_config(cache, key_for(8), random_config()));
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK(st.st_uid == kNobody);  // not replaced
  CHECK(read_file(path) == before);
  REQUIRE(chown(path.c_str(), geteuid(), getegid()) == 0);
  CHECK(same(remembered_config(cache, a), ca));
}

TEST_CASE("processes remembering winners at once lose none and never corrupt the file") {
  TempDir tmp;
  const std::string dir = tmp.path + "/tx";
  constexpr int kProcs = 6, kKeys = 25;
  std::vector<std::vector<Config>> configs(kProcs);
  for (auto& per : configs)
    for (int j = 0; j < kKeys; ++j) per.push_back(random_config());
  auto key = [](int p, int j) { return "op" + std::to_string(j) + "|f32|p" + std::to_string(p); };
  // The children wait on `go` so that they all start at once.
  int go[2];
  REQUIRE(pipe(go) == 0);
  std::vector<std::pair<pid_t, int>> children;
  for (int p = 0; p < kProcs; ++p) {
    int out[2];
    REQUIRE(pipe(out) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(go[1]);
      close(out[0]);
      char c;
      (void)!read(go[0], &c, 1);
      static std::string problems;
      tx::set_warning_handler([](const std::string& m) { problems += "warning: " + m + "; "; });
      DiskCache cache(dir);
      for (int j = 0; j < kKeys; ++j) {
        if (!remember_config(cache, key(p, j),
                             configs[static_cast<std::size_t>(p)][static_cast<std::size_t>(j)]))
          problems += "remember " + key(p, j) + " failed; ";
        // What this process wrote is there at once, whatever the others do.
        for (int k = 0; k <= j; k += 7)
          if (!same(remembered_config(cache, key(p, k)),
                    configs[static_cast<std::size_t>(p)][static_cast<std::size_t>(k)]))
            problems += "lost " + key(p, k) + "; ";
      }
      (void)!write(out[1], problems.data(), problems.size());
      _exit(0);
    }
    close(out[1]);
    children.emplace_back(pid, out[0]);
  }
  close(go[0]);
  close(go[1]);
  for (auto [pid, fd] : children) {
    std::string r;
    char buf[512];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) r.append(buf, static_cast<std::size_t>(n));
    close(fd);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(r == "");
  }
  // Every line of every process, each whole, and nothing else.
  WarningCapture w;
  DiskCache cache(dir);
  for (int p = 0; p < kProcs; ++p)
    for (int j = 0; j < kKeys; ++j) {
      CAPTURE(key(p, j));
      CHECK(same(remembered_config(cache, key(p, j)),
                 configs[static_cast<std::size_t>(p)][static_cast<std::size_t>(j)]));
    }
  const std::string text = read_file(dir + "/autotune.txt");
  CHECK(std::count(text.begin(), text.end(), '\n') == kProcs * kKeys);
  CHECK(warnings().empty());
  CHECK(list_dir(dir) == std::vector<std::string>{"autotune.txt", "autotune.txt.lock"});
}
