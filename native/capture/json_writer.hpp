// A minimal streaming JSON writer: the interposer writes manifest.json, proc-<pid>.json
// and profile-<pid>.json with it. Commas are inserted automatically; strings are
// escaped (control characters as \u00XX, invalid UTF-8 bytes passed through as-is
// would break readers, so bytes >= 0x80 that are not valid UTF-8 become U+FFFD).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kc {

class JsonWriter {
 public:
  JsonWriter& begin_object() { value_prefix(); out_ += '{'; first_.push_back(true); return *this; }
  JsonWriter& end_object() { first_.pop_back(); out_ += '}'; return *this; }
  JsonWriter& begin_array() { value_prefix(); out_ += '['; first_.push_back(true); return *this; }
  JsonWriter& end_array() { first_.pop_back(); out_ += ']'; return *this; }
  JsonWriter& key(const std::string& k) {
    comma();
    append_string(k);
    out_ += ':';
    after_key_ = true;
    return *this;
  }
  JsonWriter& value(const std::string& s) { value_prefix(); append_string(s); return *this; }
  JsonWriter& value(const char* s) { if (!s) return null(); return value(std::string(s)); }
  JsonWriter& value(bool b) { value_prefix(); out_ += b ? "true" : "false"; return *this; }
  JsonWriter& value(int v) { return value(static_cast<long long>(v)); }
  JsonWriter& value(unsigned v) { return value(static_cast<unsigned long long>(v)); }
  JsonWriter& value(long v) { return value(static_cast<long long>(v)); }
  JsonWriter& value(unsigned long v) { return value(static_cast<unsigned long long>(v)); }
  JsonWriter& value(long long v) { value_prefix(); out_ += std::to_string(v); return *this; }
  JsonWriter& value(unsigned long long v) { value_prefix(); out_ += std::to_string(v); return *this; }
  JsonWriter& value(double v) {
    value_prefix();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    out_ += buf;
    return *this;
  }
  JsonWriter& null() { value_prefix(); out_ += "null"; return *this; }
  // Inserts already-serialized JSON as one value.
  JsonWriter& raw(const std::string& json) { value_prefix(); out_ += json; return *this; }

  template <class T>
  JsonWriter& field(const std::string& k, const T& v) { key(k); return value(v); }

  const std::string& str() const { return out_; }

 private:
  void comma() {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
    }
  }
  void value_prefix() {
    if (after_key_) { after_key_ = false; return; }
    comma();
  }
  static int utf8_len(const std::string& s, size_t i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
    return n;
  }
  void append_string(const std::string& s) {
    out_ += '"';
    for (size_t i = 0; i < s.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\n': out_ += "\\n"; break;
        case '\r': out_ += "\\r"; break;
        case '\t': out_ += "\\t"; break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out_ += buf;
          } else if (c < 0x80) {
            out_ += static_cast<char>(c);
          } else if (int n = utf8_len(s, i)) {
            out_.append(s, i, n);
            i += n - 1;
          } else {
            out_ += "\xef\xbf\xbd";
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  std::vector<bool> first_;
  bool after_key_ = false;
};

inline std::string to_hex(const void* data, size_t n) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char* p = static_cast<const unsigned char*>(data);
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

}  // namespace kc
