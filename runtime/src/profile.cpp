// KernelProfile (tx/runtime/profile.hpp) and how launches fill it
// (profile_sink.hpp).
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "profile_sink.hpp"
#include "tx/error.hpp"

#ifdef TX_HAVE_ZLIB
#include <zlib.h>
#endif

namespace tx {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 32) continue;
    out += c;
  }
  return out + "\"";
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

}  // namespace

std::string KernelProfile::chrome_trace() const {
  std::ostringstream os;
  os << "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"kernel\": " << json_string(kernel)
     << ", \"unit\": " << json_string(unit) << ", \"dropped\": " << dropped
     << "}, \"traceEvents\": [";
  bool first = true;
  auto event = [&](const std::string& e) {
    os << (first ? "\n" : ",\n") << e;
    first = false;
  };
  // Tracks: a process per SM (the host: per CTA), a thread per CTA and warp.
  const bool gpu = unit == "us";
  std::map<std::pair<std::int64_t, std::int64_t>, bool> named;
  for (const ProfileSlice& s : slices) {
    const std::int64_t pid = gpu ? s.sm : s.cta;
    const std::int64_t tid = s.cta * warps_per_cta + s.warp;
    if (!named[{pid, -1}])
      event("{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(pid) +
            ", \"args\": {\"name\": " +
            json_string(gpu ? "SM " + std::to_string(pid) : "CTA " + std::to_string(pid)) + "}}"),
          named[{pid, -1}] = true;
    if (!named[{pid, tid}])
      event("{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + std::to_string(pid) +
            ", \"tid\": " + std::to_string(tid) + ", \"args\": {\"name\": " +
            json_string("CTA " + std::to_string(s.cta) + " warp " + std::to_string(s.warp) +
                        " (warpgroup " + std::to_string(s.warp / 4) + ")") +
            "}}"),
          named[{pid, tid}] = true;
    event("{\"ph\": \"X\", \"name\": " + json_string(regions[static_cast<std::size_t>(s.region)]) +
          ", \"cat\": \"tx\", \"pid\": " + std::to_string(pid) +
          ", \"tid\": " + std::to_string(tid) + ", \"ts\": " + num(s.begin) +
          ", \"dur\": " + num(std::max(0.0, s.end - s.begin)) + "}");
  }
  os << "\n]}\n";
  return os.str();
}

std::string KernelProfile::summary() const {
  // Per (region, warpgroup): passes, total, mean. Per warpgroup: the span of
  // its warps and the share of it outside any top-level region.
  struct Acc {
    std::int64_t passes = 0;
    double total = 0;
  };
  std::map<std::pair<std::int32_t, std::int32_t>, Acc> by;
  std::map<std::int32_t, double> span, busy;
  std::map<std::pair<std::int64_t, std::int32_t>, std::pair<double, double>> warp_span;
  for (const ProfileSlice& s : slices) {
    Acc& a = by[{s.region, s.warp / 4}];
    ++a.passes;
    a.total += s.end - s.begin;
    auto [it, fresh] = warp_span.try_emplace({s.cta, s.warp}, s.begin, s.end);
    if (!fresh) {
      it->second.first = std::min(it->second.first, s.begin);
      it->second.second = std::max(it->second.second, s.end);
    }
    if (s.depth == 0) busy[s.warp / 4] += s.end - s.begin;
  }
  for (const auto& [key, se] : warp_span) span[key.second / 4] += se.second - se.first;
  std::ostringstream os;
  os << "profile of " << kernel << " (" << ctas << " CTAs, times in " << unit << ")\n";
  os << "| region | warpgroup | passes | total | mean |\n|---|---|---|---|---|\n";
  for (const auto& [key, a] : by)
    os << "| " << regions[static_cast<std::size_t>(key.first)] << " | " << key.second << " | "
       << a.passes << " | " << num(a.total) << " | "
       << num(a.total / std::max<std::int64_t>(1, a.passes)) << " |\n";
  os << "| warpgroup | span (all its warps) | in regions | idle share |\n|---|---|---|---|\n";
  for (const auto& [wg, sp] : span)
    os << "| " << wg << " | " << num(sp) << " | " << num(busy[wg]) << " | "
       << num(sp > 0 ? std::max(0.0, 1.0 - busy[wg] / sp) : 0.0) << " |\n";
  if (dropped) os << dropped << " records dropped (a warp's buffer was full)\n";
  return os.str();
}

std::string KernelProfile::svg(int max_ctas) const {
  static const char* const colors[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                       "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  double t0 = 0, t1 = 1;
  bool any = false;
  for (const ProfileSlice& s : slices)
    if (s.cta < max_ctas) {
      t0 = any ? std::min(t0, s.begin) : s.begin;
      t1 = any ? std::max(t1, s.end) : s.end;
      any = true;
    }
  if (t1 <= t0) t1 = t0 + 1;
  const std::int64_t ctas_shown = std::min<std::int64_t>(ctas, max_ctas);
  const int row = 14, left = 150, width = 900, legend = 24 + 16 * static_cast<int>(regions.size());
  const std::int64_t rows = ctas_shown * warps_per_cta;
  const std::int64_t height = 30 + rows * row + legend;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\""
     << height << "\" font-family=\"sans-serif\" font-size=\"10\">\n";
  os << "<text x=\"4\" y=\"14\" font-size=\"12\">" << kernel << ": " << num(t1 - t0) << " " << unit
     << ", first " << ctas_shown << " CTAs</text>\n";
  for (std::int64_t r = 0; r < rows; ++r)
    os << "<text x=\"4\" y=\"" << 30 + r * row + 10 << "\">CTA " << r / warps_per_cta << " warp "
       << r % warps_per_cta << "</text>\n";
  for (const ProfileSlice& s : slices) {
    if (s.cta >= max_ctas) continue;
    const double x = left + (s.begin - t0) / (t1 - t0) * width;
    const double w = std::max(0.5, (s.end - s.begin) / (t1 - t0) * width);
    const std::int64_t r = s.cta * warps_per_cta + s.warp;
    os << "<rect x=\"" << num(x) << "\" y=\"" << 30 + r * row + 1 + 2 * s.depth << "\" width=\""
       << num(w) << "\" height=\"" << row - 2 - 2 * s.depth << "\" fill=\""
       << colors[static_cast<std::size_t>(s.region) % 10] << "\"><title>"
       << regions[static_cast<std::size_t>(s.region)] << ": " << num(s.end - s.begin) << " " << unit
       << "</title></rect>\n";
  }
  for (std::size_t i = 0; i < regions.size(); ++i) {
    const std::int64_t y = 30 + rows * row + 12 + 16 * static_cast<std::int64_t>(i);
    os << "<rect x=\"4\" y=\"" << y << "\" width=\"10\" height=\"10\" fill=\"" << colors[i % 10]
       << "\"/><text x=\"18\" y=\"" << y + 9 << "\">" << regions[i] << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

namespace {

std::uint32_t crc32(const std::string& s, std::size_t from) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t n = 0; n < 256; ++n) {
      std::uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = from; i < s.size(); ++i)
    c = table[(c ^ static_cast<unsigned char>(s[i])) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

void put32(std::string& s, std::uint32_t v) {
  for (int k = 3; k >= 0; --k) s += static_cast<char>((v >> (8 * k)) & 0xff);
}

// A PNG chunk: length, type, data, CRC of type and data.
void chunk(std::string& png, const char* type, const std::string& data) {
  put32(png, static_cast<std::uint32_t>(data.size()));
  const std::size_t at = png.size();
  png += type;
  png += data;
  put32(png, crc32(png, at));
}

// zlib around stored deflate blocks: no compression, no dependency (the
// build without zlib).
[[maybe_unused]] std::string zlib_stored(const std::string& raw) {
  std::string z = "\x78\x01";
  std::size_t at = 0;
  do {
    const std::size_t n = std::min<std::size_t>(65535, raw.size() - at);
    const bool last = at + n == raw.size();
    z += static_cast<char>(last ? 1 : 0);
    z += static_cast<char>(n & 0xff);
    z += static_cast<char>(n >> 8);
    z += static_cast<char>(~n & 0xff);
    z += static_cast<char>((~n >> 8) & 0xff);
    z.append(raw, at, n);
    at += n;
  } while (at < raw.size());
  std::uint32_t a = 1, b = 0;
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  put32(z, (b << 16) | a);
  return z;
}

// The PNG's image data as a zlib stream: deflated where tx was built with zlib.
std::string zlib_stream(const std::string& raw) {
#ifdef TX_HAVE_ZLIB
  uLongf n = compressBound(static_cast<uLong>(raw.size()));
  std::string z(n, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), 6) == Z_OK) {
    z.resize(n);
    return z;
  }
#endif
  return zlib_stored(raw);
}

}  // namespace

std::string KernelProfile::png(int max_ctas, int width, int row_px) const {
  static const std::uint32_t colors[] = {0x4e79a7, 0xf28e2b, 0x59a14f, 0xe15759, 0x76b7b2,
                                         0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f, 0xbab0ac};
  if (width < 16 || width > 16384 || row_px < 2 || row_px > 64)
    fail("tx.KernelProfile.png", "", {}, "width in [16, 16384], row_px in [2, 64]");
  double t0 = 0, t1 = 1;
  bool any = false;
  for (const ProfileSlice& s : slices)
    if (s.cta < max_ctas) {
      t0 = any ? std::min(t0, s.begin) : s.begin;
      t1 = any ? std::max(t1, s.end) : s.end;
      any = true;
    }
  if (t1 <= t0) t1 = t0 + 1;
  const std::int64_t rows =
      std::max<std::int64_t>(1, std::min<std::int64_t>(ctas, max_ctas) * warps_per_cta);
  const std::int64_t h = rows * row_px;
  // RGB rows, each after its filter byte (0: none); white, a grey line between CTAs.
  std::string raw(static_cast<std::size_t>(h * (1 + 3 * width)), static_cast<char>(255));
  auto px = [&](std::int64_t y, std::int64_t x, std::uint32_t rgb) {
    const std::size_t at = static_cast<std::size_t>(y * (1 + 3 * width) + 1 + 3 * x);
    raw[at] = static_cast<char>(rgb >> 16);
    raw[at + 1] = static_cast<char>((rgb >> 8) & 0xff);
    raw[at + 2] = static_cast<char>(rgb & 0xff);
  };
  for (std::int64_t y = 0; y < h; ++y) raw[static_cast<std::size_t>(y * (1 + 3 * width))] = 0;
  for (std::int64_t r = warps_per_cta; r < rows; r += warps_per_cta)
    for (std::int64_t x = 0; x < width; ++x) px(r * row_px, x, 0xb0b0b0);
  for (const ProfileSlice& s : slices) {
    if (s.cta >= max_ctas) continue;
    const std::int64_t r = s.cta * warps_per_cta + s.warp;
    auto x0 = static_cast<std::int64_t>((s.begin - t0) / (t1 - t0) * (width - 1));
    auto x1 = static_cast<std::int64_t>((s.end - t0) / (t1 - t0) * (width - 1));
    for (std::int64_t y = r * row_px + 1 + s.depth; y < (r + 1) * row_px - s.depth; ++y)
      for (std::int64_t x = x0; x <= std::max(x0, x1); ++x)
        px(y, x, colors[static_cast<std::size_t>(s.region) % 10]);
  }
  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put32(ihdr, static_cast<std::uint32_t>(width));
  put32(ihdr, static_cast<std::uint32_t>(h));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, no interlace
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", zlib_stream(raw));
  chunk(out, "IEND", "");
  return out;
}

std::string KernelProfile::write(const std::string& prefix) const {
  auto put = [&](const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    if (!f) fail("tx.KernelProfile.write", path, {}, "cannot write the file");
  };
  put(prefix + ".trace.json", chrome_trace());
  put(prefix + ".svg", svg());
  std::ofstream f(prefix + ".png", std::ios::binary);
  f << png();
  if (!f) fail("tx.KernelProfile.write", prefix + ".png", {}, "cannot write the file");
  return prefix + ".trace.json";
}

KernelProfile KernelProfile::first_ctas(std::int64_t n) const {
  if (n < 0) fail("tx.KernelProfile.first_ctas", "n", {}, "a negative CTA count");
  KernelProfile p = *this;
  p.ctas = std::min(ctas, n);
  p.slices.clear();
  for (const ProfileSlice& s : slices)
    if (s.cta < n) p.slices.push_back(s);
  return p;
}

}  // namespace tx

namespace tx::runtime {

std::int64_t profile_buffer_words(const lowering::LoweredKernel& k, std::int64_t ctas) {
  const std::int64_t warps = (k.launch.block + 31) / 32;
  return ctas * warps * kProfileWarpWords;
}

void ProfileSink::publish(KernelProfile p) {
  std::lock_guard<std::mutex> lock(mu);
  ++launches;
  if (const char* dir = std::getenv("TX_PROFILE_DIR"); dir && *dir)
    p.write(std::string(dir) + "/" + p.kernel + "-" + std::to_string(launches));
  last = std::move(p);
}

namespace {

// Pairs each warp's begin and end marks (a stack: regions nest) into slices.
struct Pairing {
  struct Open {
    std::int32_t region;
    double at;
  };
  std::map<std::pair<std::int64_t, std::int32_t>, std::vector<Open>> open;
  void mark(KernelProfile& p, std::int64_t cta, std::int32_t warp, std::int32_t sm,
            std::int32_t region, bool end, double at) {
    auto& st = open[{cta, warp}];
    if (!end) {
      st.push_back({region, at});
      return;
    }
    // The innermost open region of this name (a mark lost to a full buffer
    // leaves its partner unpaired; it is dropped).
    for (std::size_t i = st.size(); i-- > 0;)
      if (st[i].region == region) {
        p.slices.push_back({region, cta, warp, sm, st[i].at, at, static_cast<std::int32_t>(i)});
        st.erase(st.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
  }
};

KernelProfile empty_profile(const lowering::LoweredKernel& k, const std::string& kernel,
                            std::int64_t ctas, const char* unit) {
  KernelProfile p;
  p.kernel = kernel;
  p.unit = unit;
  p.regions = k.profile_regions;
  p.warps_per_cta = static_cast<std::int32_t>((k.launch.block + 31) / 32);
  p.ctas = ctas;
  return p;
}

}  // namespace

KernelProfile profile_from_gpu(const lowering::LoweredKernel& k, const std::string& kernel,
                               std::int64_t ctas, const std::vector<std::uint64_t>& buffer) {
  KernelProfile p = empty_profile(k, kernel, ctas, "us");
  const std::int64_t warps = p.warps_per_cta, per = kProfileWarpWords;
  // A warp's marks: the header's count when they overflowed its area, else
  // the records written (each has a non-zero timestamp; the area starts zeroed).
  auto marks = [&](const std::uint64_t* rec) {
    if (rec[0] != 0) return static_cast<std::int64_t>(rec[0]);
    std::int64_t n = 0;
    while (n < kProfileCapacity && rec[2 + 2 * n] != 0) ++n;
    return n;
  };
  std::uint64_t t0 = ~std::uint64_t{0};
  for (std::int64_t w = 0; w < ctas * warps; ++w) {
    const std::uint64_t* rec = buffer.data() + w * per;
    const std::int64_t n = std::min(marks(rec), kProfileCapacity);
    for (std::int64_t i = 0; i < n; ++i) t0 = std::min(t0, rec[2 + 2 * i]);
  }
  Pairing pairs;
  for (std::int64_t w = 0; w < ctas * warps; ++w) {
    const std::uint64_t* rec = buffer.data() + w * per;
    const std::int64_t count = marks(rec);
    p.dropped += std::max<std::int64_t>(0, count - kProfileCapacity);
    const std::int64_t n = std::min(count, kProfileCapacity);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint64_t meta = rec[3 + 2 * i];
      pairs.mark(p, w / warps, static_cast<std::int32_t>(w % warps),
                 static_cast<std::int32_t>(meta >> 17), static_cast<std::int32_t>(meta & 0xffff),
                 (meta >> 16) & 1, static_cast<double>(rec[2 + 2 * i] - t0) / 1000.0);
    }
  }
  return p;
}

void HostProfileRecorder::mark(std::int32_t region, bool end, std::int32_t thread,
                               std::int64_t cta) {
  marks_.push_back({region, thread, end, cta, static_cast<std::int64_t>(marks_.size())});
}

KernelProfile HostProfileRecorder::profile(const lowering::LoweredKernel& k,
                                           const std::string& kernel, std::int64_t ctas) const {
  KernelProfile p = empty_profile(k, kernel, ctas, "steps");
  // Each warp's recorder for a region: the first of its threads to mark it.
  std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, std::int32_t> leader;
  Pairing pairs;
  for (const Mark& m : marks_) {
    const std::int32_t warp = m.thread / 32;
    auto [it, fresh] = leader.try_emplace({m.cta, warp, m.region}, m.thread);
    if (it->second != m.thread) continue;
    pairs.mark(p, m.cta, warp, -1, m.region, m.end, static_cast<double>(m.step));
  }
  return p;
}

HostProfileRecorder*& current_host_profile() {
  static thread_local HostProfileRecorder* r = nullptr;
  return r;
}

}  // namespace tx::runtime

extern "C" void tx_host_profile_mark(std::int32_t region, std::int32_t end, std::int32_t thread,
                                     std::int32_t bx, std::int32_t by, std::int32_t bz,
                                     std::int64_t gx, std::int64_t gy) {
  tx::runtime::HostProfileRecorder* r = tx::runtime::current_host_profile();
  if (!r) return;
  r->mark(region, end != 0, thread, bx + gx * (by + gy * std::int64_t{bz}));
}
