// Rich output for notebooks: tx::display(...) shows a kernel, an image, a
// table or a bar chart as a Jupyter display_data message -- a MIME bundle
// ("text/html", "image/png", "image/svg+xml", with "text/plain" always
// there for front ends that show text only).
//
//   tx::display(k);                                   // IR and CUDA, highlighted, with
//                                                     // the dispatch decisions
//   tx::display(tx::Image{.path = "chart.png"});       // a PNG / JPEG / SVG from disk
//   tx::display(tx::Table{.header = {"op", "GB/s"}, .rows = {{"gelu", "3712"}}});
//   tx::display(tx::BarChart{.title = "GB/s", .labels = {"gelu"}, .series = {"tx"},
//                            .values = {{3712}}});
//   tx::display(*k.last_profile());                   // a profiled launch's timeline
//                                                     // (SVG) and its summary
//
// In the tx Jupyter kernel (notebooks/xeus) the bundle goes to the front end.
// Anywhere else (a C++ program, tx-repl) the default sink prints the
// bundle's text/plain to standard output, so the same code runs everywhere.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <tx/tx.hpp>
#include <vector>

namespace tx {

struct Image {
  std::string path;  // .png, .jpg / .jpeg, .gif or .svg
  int width = 0;     // display width in pixels; 0: as stored
};

struct Table {
  std::vector<std::string> header{};
  std::vector<std::vector<std::string>> rows{};
  std::string caption{};
};

// Grouped horizontal bars: values[s][l] is series s at label l.
struct BarChart {
  std::string title{};
  std::vector<std::string> labels{};
  std::vector<std::string> series{};
  std::vector<std::vector<double>> values{};
  std::string unit{};
};

struct Html {
  std::string html;
  std::string text{};  // the text/plain stand-in; empty: the HTML's text
};

// A problem (an unreadable image, a table whose rows do not match its
// header) is a tx::Error naming the call's line.
void display(const Kernel& kernel, SourceLoc loc = std::source_location::current());
// The kernel as written (the IR before lowering).
void display(const PrimFunc& func, SourceLoc loc = std::source_location::current());
void display(const Image& image, SourceLoc loc = std::source_location::current());
void display(const Table& table, SourceLoc loc = std::source_location::current());
void display(const BarChart& chart, SourceLoc loc = std::source_location::current());
void display(const Html& html, SourceLoc loc = std::source_location::current());
// A profiled launch (T::profile, docs/profiling.md): the timeline of its
// first `max_ctas` CTAs as SVG, the summary as text.
void display(const KernelProfile& profile, int max_ctas = 4,
             SourceLoc loc = std::source_location::current());

namespace display_api {

// What one display_data message carries.
struct MimeBundle {
  // MIME type -> content. Binary content (image/png, image/jpeg, image/gif)
  // is base64, as Jupyter's messages carry it.
  std::map<std::string, std::string> data;
  // Metadata: the display width of the image parts in pixels; 0: as stored.
  int image_width = 0;
};
using Sink = std::function<void(const MimeBundle&)>;

// Where bundles go; an empty sink restores the default (text/plain to stdout).
void set_sink(Sink sink);
void show(const MimeBundle& bundle);

// The bundles tx::display shows (for tests and for other front ends).
MimeBundle kernel_bundle(const Kernel& kernel);
MimeBundle func_bundle(const PrimFunc& func);
MimeBundle image_bundle(const Image& image, SourceLoc loc = std::source_location::current());
MimeBundle table_bundle(const Table& table, SourceLoc loc = std::source_location::current());
MimeBundle chart_bundle(const BarChart& chart, SourceLoc loc = std::source_location::current());
MimeBundle profile_bundle(const KernelProfile& profile, int max_ctas = 4);

enum class Language { cpp, tirx };
// Source as HTML <span>s with inline colours: keywords, types, comments,
// strings, numbers, preprocessor lines (cpp) and decorators (tirx).
std::string highlight_html(std::string_view code, Language language);
std::string escape_html(std::string_view text);
std::string base64(std::string_view bytes);

}  // namespace display_api
}  // namespace tx
