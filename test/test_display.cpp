// tx::display (notebooks/display): the MIME bundles it builds, its errors and
// its sink. (The bundles reaching a front end: test/notebooks/protocol_test.py.)
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <tx/display.hpp>

#define TX_SAMPLE_NO_MAIN
#include "warp_sqrt_reg.cpp"

using namespace tx;
namespace api = tx::display_api;

namespace {

std::string decode_base64(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  unsigned bits = 0;
  int n = 0;
  for (char c : s) {
    int v = value(c);
    if (v < 0) break;  // '='
    bits = (bits << 6) | static_cast<unsigned>(v);
    n += 6;
    if (n >= 8) {
      n -= 8;
      out += static_cast<char>((bits >> n) & 0xff);
    }
  }
  return out;
}

std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

}  // namespace

TEST_CASE("base64: the RFC 4648 vectors and random bytes back and forth") {
  CHECK(api::base64("") == "");
  CHECK(api::base64("f") == "Zg==");
  CHECK(api::base64("fo") == "Zm8=");
  CHECK(api::base64("foo") == "Zm9v");
  CHECK(api::base64("foob") == "Zm9vYg==");
  CHECK(api::base64("foobar") == "Zm9vYmFy");
  for (int len : {1, 2, 3, 4, 5, 257, 4096 + 1}) {
    std::string bytes(static_cast<std::size_t>(len), '\0');
    for (char& c : bytes) c = static_cast<char>(rng()() & 0xff);
    std::string enc = api::base64(bytes);
    CHECK(enc.size() == (bytes.size() + 2) / 3 * 4);
    CHECK(decode_base64(enc) == bytes);
  }
}

TEST_CASE("highlighting escapes the code and marks its tokens") {
  std::string h = api::highlight_html(
      "#pragma unroll\nfor (int i = 0; i < 4; ++i) { a[i] = \"x<y\"; }  // done & dusted\n",
      api::Language::cpp);
  CHECK(h.find("<span style=\"color:#e36209\">#pragma unroll</span>") != std::string::npos);
  CHECK(h.find(">for</span>") != std::string::npos);
  CHECK(h.find(">int</span>") != std::string::npos);
  CHECK(h.find("&quot;x&lt;y&quot;") != std::string::npos);
  CHECK(h.find("// done &amp; dusted") != std::string::npos);
  CHECK(h.find(" &lt; <span style=\"color:#005cc5\">4</span>") != std::string::npos);
  CHECK(h.find('<' + std::string("y")) == std::string::npos);  // every < of the code escaped
  std::string t =
      api::highlight_html("@T.prim_func\ndef f(A: T.handle):  # a comment\n", api::Language::tirx);
  CHECK(t.find(">@T.prim_func</span>") != std::string::npos);
  CHECK(t.find(">def</span>") != std::string::npos);
  CHECK(t.find(">T</span>.<span style=\"color:#6f42c1\">handle</span>") != std::string::npos);
  CHECK(t.find(">#\u0020a comment</span>") != std::string::npos);
}

TEST_CASE("a table: aligned text, escaped HTML, numbers to the right, a bad row naming the line") {
  api::MimeBundle b = api::table_bundle(
      {.header = {"op", "GB/s"}, .rows = {{"gelu", "4190.5"}, {"a<b", "x"}}, .caption = "f16"});
  CHECK(b.data.at("text/plain") == "f16\nop    GB/s  \ngelu  4190.5\na<b   x     \n");
  const std::string& h = b.data.at("text/html");
  CHECK(h.find("<caption>f16</caption>") != std::string::npos);
  CHECK(h.find("text-align:right\">4190.5</td>") != std::string::npos);
  CHECK(h.find("text-align:left\">a&lt;b</td>") != std::string::npos);
  unsigned line = __LINE__ + 2;
  try {
    display(Table{.header = {"a", "b"}, .rows = {{"1", "2"}, {"3"}}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.op() == "tx::display");
    CHECK(e.operand() == "table");
    CHECK(e.loc().line == line);
    CHECK(std::string(e.what()).find("row 1 has 1 cells, the header 2") != std::string::npos);
  }
}

TEST_CASE("a bar chart: an SVG with every label and value, bad values as errors") {
  std::uniform_real_distribution<double> d(1, 1000);
  double a = d(rng()), b = d(rng()), c = d(rng()), e = d(rng());
  api::MimeBundle m = api::chart_bundle({.title = "GB/s & more",
                                         .labels = {"gelu", "silu<mul"},
                                         .series = {"tx", "torch"},
                                         .values = {{a, b}, {c, e}}});
  const std::string& svg = m.data.at("image/svg+xml");
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.find("GB/s &amp; more") != std::string::npos);
  CHECK(svg.find("silu&lt;mul") != std::string::npos);
  char num[32];
  for (double v : {a, b, c, e}) {
    std::snprintf(num, sizeof num, ">%.4g</text>", v);
    CHECK(svg.find(num) != std::string::npos);
  }
  // The longest bar is the plot's width (420 px); the others in proportion.
  double top = std::max({a, b, c, e});
  std::snprintf(num, sizeof num, "width=\"%ld\"", std::lround(a / top * 420));
  CHECK(svg.find(num) != std::string::npos);
  CHECK_THROWS_AS(display(BarChart{.labels = {"x"}, .series = {"s"}, .values = {{-1.0}}}), Error);
  CHECK_THROWS_AS(display(BarChart{.labels = {"x", "y"}, .series = {"s"}, .values = {{1.0}}}),
                  Error);
  CHECK_THROWS_AS(display(BarChart{.labels = {"x"}, .series = {"s", "t"}, .values = {{1.0}}}),
                  Error);
}

TEST_CASE("an image from disk: its bytes in base64 with its MIME type and width") {
  auto dir = std::filesystem::temp_directory_path() /
             ("tx-display-test-" + std::to_string(rng()() % 1000000));
  std::filesystem::create_directories(dir);
  std::string bytes(1000, '\0');
  for (char& c : bytes) c = static_cast<char>(rng()() & 0xff);
  std::string png = (dir / "picture.PNG").string();
  std::ofstream(png, std::ios::binary) << bytes;
  api::MimeBundle b = api::image_bundle({.path = png, .width = 320});
  CHECK(decode_base64(b.data.at("image/png")) == bytes);
  CHECK(b.image_width == 320);
  std::string svg = (dir / "d.svg").string();
  std::ofstream(svg) << "<svg/>";
  CHECK(api::image_bundle({.path = svg}).data.at("image/svg+xml") == "<svg/>");
  CHECK_THROWS_WITH_AS(display(Image{.path = (dir / "missing.png").string()}),
                       doctest::Contains("cannot read"), Error);
  CHECK_THROWS_WITH_AS(display(Image{.path = (dir / "notes.txt").string()}),
                       doctest::Contains("is not a .png, .jpg, .gif or .svg file"), Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a kernel: launch, dispatch decisions with their lines, IR and CUDA") {
  Kernel k = compile(warp_sqrt(), {.device = Device::cuda(), .arch = "sm_90a"});
  api::MimeBundle b = api::kernel_bundle(k);
  const std::string& text = b.data.at("text/plain");
  CHECK(text.find("== warp_sqrt on ") != std::string::npos);
  CHECK(text.find("32 threads per CTA") != std::string::npos);
  CHECK(text.find("elementwise/reg  <-  Tx.warp.sqrt(R[0:32, 0:8], R[0:32, 0:8])") !=
        std::string::npos);
  const std::string& html = b.data.at("text/html");
  std::size_t rows = 0;
  for (std::size_t at = html.find("<tr><td"); at != std::string::npos;
       at = html.find("<tr><td", at + 1))
    ++rows;
  CHECK(rows == k.info().dispatched.size());
  for (const auto& d : k.info().dispatched) {
    CHECK(html.find("<b>" + d.variant + "</b>") != std::string::npos);
    CHECK(html.find("warp_sqrt_reg.cpp:" + std::to_string(d.loc.line)) != std::string::npos);
  }
  CHECK(html.find(">__global__</span>") != std::string::npos);
  CHECK(html.find("generated TIRx IR") != std::string::npos);
  CHECK_THROWS_AS(display(Kernel{}), Error);
}

TEST_CASE("a profile: its timeline as SVG and its summary as text, none without regions") {
  KernelProfile p;
  p.kernel = "k";
  p.unit = "us";
  p.regions = {"load", "mma"};
  p.warps_per_cta = 2;
  p.ctas = 1;
  p.slices = {{0, 0, 0, 3, 0.0, 2.0, 0}, {1, 0, 1, 3, 1.0, 4.5, 0}};
  api::MimeBundle b = api::profile_bundle(p);
  const std::string& svg = b.data.at("image/svg+xml");
  CHECK(svg.find("<svg") == 0);
  CHECK(svg.find("<title>mma: 3.500 us</title>") != std::string::npos);
  CHECK(b.data.at("text/plain").find("| load | 0 | 1 | 2.000 | 2.000 |") != std::string::npos);
  CHECK_THROWS_AS(display(KernelProfile{}), Error);
}

TEST_CASE("the sink: bundles go where it says, without one text/plain to stdout") {
  std::vector<api::MimeBundle> seen;
  api::set_sink([&](const api::MimeBundle& b) { seen.push_back(b); });
  display(Html{.html = "<i>hi</i>", .text = "hi"});
  display(Table{.header = {"x"}, .rows = {{"1"}}});
  api::set_sink({});
  REQUIRE(seen.size() == 2);
  CHECK(seen[0].data.at("text/html") == "<i>hi</i>");
  CHECK(seen[1].data.count("text/html") == 1);
  std::ostringstream out;
  auto* old = std::cout.rdbuf(out.rdbuf());
  display(Html{.html = "<i>x</i>", .text = "plain x"});
  std::cout.rdbuf(old);
  CHECK(out.str() == "plain x\n");
}
