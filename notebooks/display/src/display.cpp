// tx::display: the MIME bundles of display.hpp, the sink they go to, and a
// small highlighter for C++/CUDA and the TIRx script form.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>
#include <tx/display.hpp>

namespace tx {
namespace display_api {
namespace {

std::mutex g_sink_mutex;
Sink g_sink;

void print_text(const MimeBundle& b) {
  auto it = b.data.find("text/plain");
  if (it == b.data.end()) return;
  std::cout << it->second;
  if (!it->second.empty() && it->second.back() != '\n') std::cout << '\n';
  std::cout.flush();
}

// ------------------------------------------------------------ highlighting
// Inline styles (no <style> block: front ends keep style attributes of
// output HTML and may drop style elements).
constexpr const char* kComment = "color:#6a737d;font-style:italic";
constexpr const char* kKeyword = "color:#d73a49;font-weight:bold";
constexpr const char* kType = "color:#6f42c1";
constexpr const char* kString = "color:#032f62";
constexpr const char* kNumber = "color:#005cc5";
constexpr const char* kPreproc = "color:#e36209";
constexpr const char* kTx = "color:#22863a;font-weight:bold";

const std::set<std::string_view>& cpp_keywords() {
  static const std::set<std::string_view> k = {"if",
                                               "else",
                                               "for",
                                               "while",
                                               "do",
                                               "return",
                                               "break",
                                               "continue",
                                               "switch",
                                               "case",
                                               "default",
                                               "struct",
                                               "class",
                                               "union",
                                               "enum",
                                               "namespace",
                                               "using",
                                               "typedef",
                                               "template",
                                               "typename",
                                               "const",
                                               "constexpr",
                                               "static",
                                               "extern",
                                               "inline",
                                               "volatile",
                                               "auto",
                                               "sizeof",
                                               "true",
                                               "false",
                                               "nullptr",
                                               "goto",
                                               "asm",
                                               "__global__",
                                               "__device__",
                                               "__shared__",
                                               "__forceinline__",
                                               "__restrict__",
                                               "__launch_bounds__",
                                               "__syncthreads",
                                               "__grid_constant__",
                                               "operator",
                                               "public",
                                               "private",
                                               "protected",
                                               "virtual",
                                               "override",
                                               "static_cast",
                                               "reinterpret_cast",
                                               "const_cast",
                                               "throw",
                                               "try",
                                               "catch",
                                               "new",
                                               "delete"};
  return k;
}
const std::set<std::string_view>& cpp_types() {
  static const std::set<std::string_view> k = {
      "void",    "bool",          "char",           "short",    "int",      "long",
      "float",   "double",        "unsigned",       "signed",   "half",     "__half",
      "__half2", "__nv_bfloat16", "__nv_bfloat162", "int8_t",   "int16_t",  "int32_t",
      "int64_t", "uint8_t",       "uint16_t",       "uint32_t", "uint64_t", "size_t",
      "float2",  "float4",        "int2",           "int4",     "uint2",    "uint4"};
  return k;
}
const std::set<std::string_view>& tirx_keywords() {
  static const std::set<std::string_view> k = {"for",    "in",   "if",    "else", "def",
                                               "return", "with", "while", "and",  "or",
                                               "not",    "True", "False", "None", "range"};
  return k;
}
const std::set<std::string_view>& tirx_types() {
  static const std::set<std::string_view> k = {
      "float32", "float16", "bfloat16", "float64",       "int32",       "int64", "int8", "int16",
      "uint8",   "uint32",  "bool",     "f32",           "f16",         "bf16",  "f64",  "i32",
      "i64",     "e4m3",    "e5m2",     "float8_e4m3fn", "float8_e5m2", "handle"};
  return k;
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void span(std::string& out, const char* style, std::string_view text) {
  out += "<span style=\"";
  out += style;
  out += "\">";
  out += escape_html(text);
  out += "</span>";
}

std::string pre(const std::string& inner) {
  return "<pre style=\"font-size:12px;line-height:1.35;background:#f6f8fa;padding:8px;"
         "border-radius:4px;overflow-x:auto;margin:4px 0\">" +
         inner + "</pre>";
}

std::string strip_dirs(const char* file) {
  std::string f = file ? file : "";
  std::size_t slash = f.rfind('/');
  return slash == std::string::npos ? f : f.substr(slash + 1);
}

std::string launch_text(const lowering::LoweredKernel& info) {
  std::ostringstream s;
  s << "grid (" << info.launch.grid[0] << ", " << info.launch.grid[1] << ", " << info.launch.grid[2]
    << ")" << (info.launch.symbolic_grid ? " at most (symbolic)" : "") << ", " << info.launch.block
    << " threads per CTA, " << info.shared_bytes << " bytes of shared memory";
  return s.str();
}

std::string kernel_cuda_function(const std::string& cuda) {
  std::size_t at = cuda.find("extern \"C\"");
  return at == std::string::npos ? cuda : cuda.substr(at);
}

}  // namespace

void set_sink(Sink sink) {
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  g_sink = std::move(sink);
}

void show(const MimeBundle& bundle) {
  Sink sink;
  {
    std::lock_guard<std::mutex> lock(g_sink_mutex);
    sink = g_sink;
  }
  if (sink)
    sink(bundle);
  else
    print_text(bundle);
}

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string base64(std::string_view bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) |
                 (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                 static_cast<unsigned char>(bytes[i + 2]);
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += digits[(v >> 6) & 63];
    out += digits[v & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += digits[(v >> 18) & 63];
    out += digits[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string highlight_html(std::string_view code, Language language) {
  const bool cpp = language == Language::cpp;
  const auto& keywords = cpp ? cpp_keywords() : tirx_keywords();
  const auto& types = cpp ? cpp_types() : tirx_types();
  std::string out;
  std::size_t i = 0, n = code.size();
  bool line_start = true;
  while (i < n) {
    char c = code[i];
    // Comments: // and /* */ in C++, # in the script form.
    if (cpp && c == '/' && i + 1 < n && (code[i + 1] == '/' || code[i + 1] == '*')) {
      std::size_t end = code[i + 1] == '/' ? code.find('\n', i) : code.find("*/", i + 2);
      end = end == std::string_view::npos ? n : (code[i + 1] == '/' ? end : end + 2);
      span(out, kComment, code.substr(i, end - i));
      i = end;
      continue;
    }
    if (!cpp && c == '#') {
      std::size_t end = std::min(code.find('\n', i), n);
      span(out, kComment, code.substr(i, end - i));
      i = end;
      continue;
    }
    if (cpp && c == '#' && line_start) {
      std::size_t end = std::min(code.find('\n', i), n);
      span(out, kPreproc, code.substr(i, end - i));
      i = end;
      continue;
    }
    if (!cpp && c == '@') {
      std::size_t end = i + 1;
      while (end < n && (ident_char(code[end]) || code[end] == '.')) ++end;
      span(out, kTx, code.substr(i, end - i));
      i = end;
      continue;
    }
    if (c == '"' || c == '\'') {
      std::size_t end = i + 1;
      while (end < n && code[end] != c && code[end] != '\n') end += code[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, n);
      span(out, kString, code.substr(i, end - i));
      i = end;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) && (i == 0 || !ident_char(code[i - 1]))) {
      std::size_t end = i;
      while (end < n && (std::isalnum(static_cast<unsigned char>(code[end])) || code[end] == '.' ||
                         ((code[end] == '+' || code[end] == '-') &&
                          (code[end - 1] == 'e' || code[end - 1] == 'E'))))
        ++end;
      span(out, kNumber, code.substr(i, end - i));
      i = end;
      line_start = false;
      continue;
    }
    if (ident_start(c)) {
      std::size_t end = i;
      while (end < n && ident_char(code[end])) ++end;
      std::string_view word = code.substr(i, end - i);
      // The DSL's namespaces in the script form: T., Tx., and the scopes.
      bool dsl = !cpp && (word == "T" || word == "Tx") && end < n && code[end] == '.';
      if (dsl)
        span(out, kTx, word);
      else if (keywords.count(word))
        span(out, kKeyword, word);
      else if (types.count(word))
        span(out, kType, word);
      else
        out += escape_html(word);
      i = end;
      line_start = false;
      continue;
    }
    if (c == '\n')
      line_start = true;
    else if (c != ' ' && c != '\t')
      line_start = false;
    out += escape_html(std::string_view(&code[i], 1));
    ++i;
  }
  return out;
}

MimeBundle func_bundle(const PrimFunc& func) {
  std::ostringstream text;
  text << func;
  MimeBundle b;
  b.data["text/plain"] = text.str();
  b.data["text/html"] = "<div><b>" + escape_html(func->name) + "</b>, the kernel as written" +
                        pre(highlight_html(text.str(), Language::tirx)) + "</div>";
  return b;
}

MimeBundle kernel_bundle(const Kernel& kernel) {
  const lowering::LoweredKernel& info = kernel.info();
  const std::string ir = kernel.lowered_ir();
  const std::string cuda = kernel.cuda_source();
  const std::string fn = kernel_cuda_function(cuda);
  std::ostringstream text;
  text << "== " << kernel.name() << " on " << kernel.device().str() << ": " << launch_text(info)
       << "\n== dispatch decisions\n";
  for (const auto& d : info.dispatched)
    text << "  " << d.variant << "  <-  " << d.call << "  (" << strip_dirs(d.loc.file) << ":"
         << d.loc.line << ")\n";
  text << "== generated TIRx IR\n" << ir << "== CUDA\n" << fn;

  std::string h;
  h += "<div class=\"tx-kernel\" style=\"font-family:sans-serif;font-size:13px\">";
  h += "<div><b>" + escape_html(kernel.name()) + "</b> on " + escape_html(kernel.device().str()) +
       ": " + escape_html(launch_text(info)) + "</div>";
  h += "<table style=\"border-collapse:collapse;margin:6px 0;font-size:12px\">"
       "<tr><th style=\"text-align:left;padding:2px 8px\">tile primitive</th>"
       "<th style=\"text-align:left;padding:2px 8px\">dispatched to</th>"
       "<th style=\"text-align:left;padding:2px 8px\">line</th></tr>";
  for (const auto& d : info.dispatched) {
    h += "<tr><td style=\"padding:2px 8px\"><code>" + escape_html(d.call) +
         "</code></td><td style=\"padding:2px 8px;color:#22863a\"><b>" + escape_html(d.variant) +
         "</b></td><td style=\"padding:2px 8px\">" + escape_html(strip_dirs(d.loc.file)) + ":" +
         std::to_string(d.loc.line) + "</td></tr>";
  }
  if (info.dispatched.empty())
    h += "<tr><td colspan=\"3\" style=\"padding:2px 8px\">(no tile primitives)</td></tr>";
  h += "</table>";
  h += "<details><summary>the kernel as written</summary>" +
       pre(highlight_html(kernel.tirx(), Language::tirx)) + "</details>";
  h += "<details open><summary>generated TIRx IR</summary>" +
       pre(highlight_html(ir, Language::tirx)) + "</details>";
  h += "<details open><summary>CUDA (the kernel; " + std::to_string(cuda.size() - fn.size()) +
       " bytes of tx's helpers before it)</summary>" + pre(highlight_html(fn, Language::cpp)) +
       "</details>";
  h += "</div>";
  MimeBundle b;
  b.data["text/plain"] = text.str();
  b.data["text/html"] = h;
  return b;
}

MimeBundle image_bundle(const Image& image, SourceLoc loc) {
  std::string ext = image.path.substr(std::min(image.path.size(), image.path.rfind('.') + 1));
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  std::string mime = ext == "png"                    ? "image/png"
                     : ext == "jpg" || ext == "jpeg" ? "image/jpeg"
                     : ext == "gif"                  ? "image/gif"
                     : ext == "svg"                  ? "image/svg+xml"
                                                     : "";
  if (mime.empty())
    fail("tx::display", "image", loc,
         "'" + image.path + "' is not a .png, .jpg, .gif or .svg file");
  std::ifstream f(image.path, std::ios::binary);
  if (!f) fail("tx::display", "image", loc, "cannot read '" + image.path + "'");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  MimeBundle b;
  b.data[mime] = mime == "image/svg+xml" ? bytes : base64(bytes);
  b.data["text/plain"] = "<image " + image.path + ", " + std::to_string(bytes.size()) + " bytes>";
  b.image_width = std::max(image.width, 0);
  return b;
}

MimeBundle table_bundle(const Table& table, SourceLoc loc) {
  for (std::size_t r = 0; r < table.rows.size(); ++r)
    if (!table.header.empty() && table.rows[r].size() != table.header.size())
      fail("tx::display", "table", loc,
           "row " + std::to_string(r) + " has " + std::to_string(table.rows[r].size()) +
               " cells, the header " + std::to_string(table.header.size()));
  // text/plain: aligned columns.
  std::vector<std::size_t> width(table.header.size());
  auto widen = [&](const std::vector<std::string>& row) {
    if (width.size() < row.size()) width.resize(row.size());
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  };
  widen(table.header);
  for (const auto& row : table.rows) widen(row);
  std::ostringstream text;
  if (!table.caption.empty()) text << table.caption << "\n";
  auto line = [&](const std::vector<std::string>& row) {
    for (std::size_t c = 0; c < row.size(); ++c)
      text << (c ? "  " : "") << row[c] << std::string(width[c] - row[c].size(), ' ');
    text << "\n";
  };
  if (!table.header.empty()) line(table.header);
  for (const auto& row : table.rows) line(row);

  auto numeric = [](const std::string& s) {
    if (s.empty()) return false;
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    return end && *end == '\0';
  };
  std::string h = "<table style=\"border-collapse:collapse;font-size:13px\">";
  if (!table.caption.empty()) h += "<caption>" + escape_html(table.caption) + "</caption>";
  if (!table.header.empty()) {
    h += "<thead><tr>";
    for (const auto& c : table.header)
      h +=
          "<th style=\"padding:3px 10px;border-bottom:1px solid #888\">" + escape_html(c) + "</th>";
    h += "</tr></thead>";
  }
  h += "<tbody>";
  for (const auto& row : table.rows) {
    h += "<tr>";
    for (const auto& c : row)
      h += std::string("<td style=\"padding:3px 10px;text-align:") +
           (numeric(c) ? "right" : "left") + "\">" + escape_html(c) + "</td>";
    h += "</tr>";
  }
  h += "</tbody></table>";
  MimeBundle b;
  b.data["text/plain"] = text.str();
  b.data["text/html"] = h;
  return b;
}

MimeBundle chart_bundle(const BarChart& chart, SourceLoc loc) {
  if (chart.values.size() != chart.series.size())
    fail("tx::display", "chart", loc,
         std::to_string(chart.values.size()) + " value rows for " +
             std::to_string(chart.series.size()) + " series");
  double top = 0;
  for (std::size_t s = 0; s < chart.values.size(); ++s) {
    if (chart.values[s].size() != chart.labels.size())
      fail("tx::display", "chart", loc,
           "series '" + chart.series[s] + "' has " + std::to_string(chart.values[s].size()) +
               " values for " + std::to_string(chart.labels.size()) + " labels");
    for (double v : chart.values[s]) {
      if (!std::isfinite(v) || v < 0)
        fail("tx::display", "chart", loc,
             "bar values must be finite and >= 0 (series '" + chart.series[s] + "')");
      top = std::max(top, v);
    }
  }
  if (top == 0) top = 1;
  static const char* colours[] = {"#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"};
  const int label_w = 150, plot_w = 420, bar_h = 14, gap = 10, legend_h = 22, title_h = 24;
  const int ns = static_cast<int>(chart.series.size());
  const int group_h = ns * bar_h + gap;
  const int height = title_h + legend_h + static_cast<int>(chart.labels.size()) * group_h + 10;
  const int width = label_w + plot_w + 90;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"12\">";
  svg << "<text x=\"4\" y=\"16\" font-size=\"14\" font-weight=\"bold\">" << escape_html(chart.title)
      << (chart.unit.empty() ? "" : " (" + escape_html(chart.unit) + ")") << "</text>";
  for (int s = 0; s < ns; ++s) {
    int x = label_w + s * 110;
    svg << "<rect x=\"" << x << "\" y=\"" << title_h + 2 << "\" width=\"12\" height=\"12\" fill=\""
        << colours[s % 6] << "\"/><text x=\"" << x + 16 << "\" y=\"" << title_h + 12 << "\">"
        << escape_html(chart.series[s]) << "</text>";
  }
  std::ostringstream text;
  text << chart.title << (chart.unit.empty() ? "" : " (" + chart.unit + ")") << "\n";
  for (std::size_t l = 0; l < chart.labels.size(); ++l) {
    int y0 = title_h + legend_h + static_cast<int>(l) * group_h;
    svg << "<text x=\"" << label_w - 6 << "\" y=\"" << y0 + ns * bar_h / 2 + 4
        << "\" text-anchor=\"end\">" << escape_html(chart.labels[l]) << "</text>";
    for (int s = 0; s < ns; ++s) {
      double v = chart.values[s][l];
      int w = static_cast<int>(std::lround(v / top * plot_w));
      char num[32];
      std::snprintf(num, sizeof num, "%.4g", v);
      svg << "<rect x=\"" << label_w << "\" y=\"" << y0 + s * bar_h << "\" width=\"" << w
          << "\" height=\"" << bar_h - 2 << "\" fill=\"" << colours[s % 6] << "\"/>"
          << "<text x=\"" << label_w + w + 4 << "\" y=\"" << y0 + s * bar_h + bar_h - 4 << "\">"
          << num << "</text>";
      text << "  " << chart.labels[l] << " / " << chart.series[s] << ": " << num << "\n";
    }
  }
  svg << "</svg>";
  MimeBundle b;
  b.data["image/svg+xml"] = svg.str();
  b.data["text/plain"] = text.str();
  return b;
}

MimeBundle profile_bundle(const KernelProfile& profile, int max_ctas) {
  MimeBundle b;
  b.data["image/svg+xml"] = profile.svg(max_ctas);
  b.data["text/plain"] = profile.summary();
  return b;
}

}  // namespace display_api

void display(const KernelProfile& profile, int max_ctas, SourceLoc loc) {
  if (profile.regions.empty())
    fail("tx::display", "profile", loc,
         "the profile has no regions (was the kernel compiled with .profile = true, and does it "
         "have T::profile regions?)");
  display_api::show(display_api::profile_bundle(profile, max_ctas));
}

void display(const Kernel& kernel, SourceLoc) {
  // An empty Kernel: its accessors raise the tx error.
  display_api::show(display_api::kernel_bundle(kernel));
}
void display(const PrimFunc& func, SourceLoc loc) {
  if (!func) fail("tx::display", "func", loc, "the PrimFunc is empty");
  display_api::show(display_api::func_bundle(func));
}
void display(const Image& image, SourceLoc loc) {
  display_api::show(display_api::image_bundle(image, loc));
}
void display(const Table& table, SourceLoc loc) {
  display_api::show(display_api::table_bundle(table, loc));
}
void display(const BarChart& chart, SourceLoc loc) {
  display_api::show(display_api::chart_bundle(chart, loc));
}
void display(const Html& html, SourceLoc) {
  display_api::MimeBundle b;
  b.data["text/html"] = html.html;
  b.data["text/plain"] = html.text.empty() ? html.html : html.text;
  display_api::show(b);
}

}  // namespace tx
