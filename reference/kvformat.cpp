#include "reference/kvformat.h"

#include <array>
#include <cstring>
#include <stdexcept>

#include "reference/scalar.h"

namespace hkv {

KvFormat KvFormat::parse(const std::string& name) {
  if (name == "bf16") return bf16();
  if (name == "fp8") return fp8();
  if (name == "f32") return f32();
  if (name.rfind("q4h", 0) != 0) throw std::invalid_argument("unknown cache format '" + name + "' (bf16, fp8, q4h)");
  KvFormat f = q4h();
  size_t pos = 3;
  while (pos < name.size()) {
    if (name[pos] != '-') throw std::invalid_argument("unknown cache format '" + name + "'");
    size_t end = name.find('-', pos + 1);
    std::string part = name.substr(pos + 1, end == std::string::npos ? std::string::npos : end - pos - 1);
    if (part == "norot")
      f.rotate = false;
    else if (part == "sym")
      f.grid = Grid::Symmetric;
    else if (part == "mid")
      f.grid = Grid::Midpoint;
    else if (part == "g16")
      f.group = 16;
    else if (part == "g64")
      f.group = 64;
    else if (part == "g128")
      f.group = 128;
    else
      throw std::invalid_argument("unknown cache format option '" + part + "' in '" + name + "'");
    pos = end == std::string::npos ? name.size() : end;
  }
  return f;
}

std::string KvFormat::name() const {
  if (kind == KvKind::BF16) return "bf16";
  if (kind == KvKind::FP8) return "fp8";
  if (kind == KvKind::F32) return "f32";
  std::string s = "q4h";
  if (!rotate) s += "-norot";
  if (group != 32) s += "-g" + std::to_string(group);
  if (grid == Grid::Symmetric) s += "-sym";
  if (grid == Grid::Midpoint) s += "-mid";
  return s;
}

bool KvFormat::is_canonical() const {
  if (kind == KvKind::F32) return false;
  return kind != KvKind::Q4H || (rotate && group == 32 && grid == Grid::Q4_0);
}

size_t kv_row_bytes(const KvFormat& f, int head_dim) {
  if (head_dim % f.group != 0)
    throw std::invalid_argument("head_dim " + std::to_string(head_dim) + " is not a multiple of the group size");
  size_t groups = size_t(head_dim / f.group);
  switch (f.kind) {
    case KvKind::BF16:
      return size_t(head_dim) * 2;
    case KvKind::F32:
      return size_t(head_dim) * 4;
    case KvKind::FP8:
      return size_t(head_dim) + groups * 2;
    case KvKind::Q4H:
      return size_t(head_dim) / 2 + groups * 2;
  }
  return 0;
}

void wht_inplace(float* x, int n) {
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; j++) {
        float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  // 1/sqrt(n) rounded to fp32 once (for n = 32: 0x3e3504f3 = 0.17677669…).
  const float norm = float(1.0 / std::sqrt(double(n)));
  for (int i = 0; i < n; i++) x[i] = x[i] * norm;
}

void rotate_groups(float* x, int head_dim, int group) {
  for (int g = 0; g < head_dim; g += group) wht_inplace(x + g, group);
}

static void put_f16(uint8_t* p, uint16_t h) {
  p[0] = uint8_t(h & 0xff);
  p[1] = uint8_t(h >> 8);
}
static uint16_t get_f16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

static void check_finite(const float* x, int n) {
  for (int i = 0; i < n; i++)
    if (!is_finite(x[i])) throw std::domain_error("cache row element " + std::to_string(i) + " is not finite");
}

// Round the scale to fp16 once; codes are computed against the stored value.
static float stored_scale(float wanted, uint16_t* bits) {
  *bits = f16_from_f32(wanted);
  if ((*bits & 0x7c00u) == 0x7c00u) throw std::domain_error("cache group scale overflows fp16");
  return f32_from_f16(*bits);
}

// One q4h group of n values (already rotated when the format rotates): returns codes 0..15.
static void q4_group(Grid grid, const float* x, int n, uint8_t* codes, uint16_t* scale_bits) {
  float amax = 0.0f, extreme = 0.0f;
  for (int j = 0; j < n; j++) {
    float a = x[j] < 0.0f ? -x[j] : x[j];
    if (a > amax) {
      amax = a;
      extreme = x[j];
    }
  }
  float s = 0.0f;
  switch (grid) {
    case Grid::Midpoint:
      s = stored_scale(amax / 7.5f, scale_bits);
      break;
    case Grid::Symmetric:
      s = stored_scale(amax / 7.0f, scale_bits);
      break;
    case Grid::Q4_0:
      s = stored_scale(extreme / -8.0f, scale_bits);
      break;
  }
  for (int j = 0; j < n; j++) {
    if (s == 0.0f) {  // an all-zero group (or one whose scale underflows fp16): every value reads 0
      codes[j] = 8;
      continue;
    }
    float t = x[j] / s;
    int c;
    if (grid == Grid::Midpoint) {
      // Levels at (c − 7.5); the nearest level to t is floor(t) + 0.5, ties (t an integer) upward.
      t = t < -8.0f ? -8.0f : (t > 8.0f ? 8.0f : t);
      c = int(floor_small(t)) + 8;
    } else {
      t = t < -9.0f ? -9.0f : (t > 9.0f ? 9.0f : t);
      c = int(round_even_small(t)) + 8;
    }
    int lo = grid == Grid::Symmetric ? 1 : 0;
    codes[j] = uint8_t(c < lo ? lo : (c > 15 ? 15 : c));
  }
}

void kv_pack_row(const KvFormat& f, const float* x, int head_dim, uint8_t* out) {
  check_finite(x, head_dim);
  const int G = f.group, groups = head_dim / G;
  if (head_dim % G != 0) throw std::invalid_argument("head_dim is not a multiple of the group size");
  switch (f.kind) {
    case KvKind::BF16:
      for (int d = 0; d < head_dim; d++) put_f16(out + 2 * d, bf16_from_f32(x[d]));
      return;
    case KvKind::F32:
      std::memcpy(out, x, size_t(head_dim) * 4);
      return;
    case KvKind::FP8:
      for (int g = 0; g < groups; g++) {
        float amax = 0.0f;
        for (int j = 0; j < G; j++) {
          float a = x[g * G + j] < 0.0f ? -x[g * G + j] : x[g * G + j];
          amax = a > amax ? a : amax;
        }
        uint16_t bits;
        float s = stored_scale(amax / 448.0f, &bits);
        put_f16(out + head_dim + 2 * g, bits);
        for (int j = 0; j < G; j++) out[g * G + j] = s == 0.0f ? 0 : e4m3_from_f32(x[g * G + j] / s);
      }
      return;
    case KvKind::Q4H: {
      std::vector<float> v(x, x + head_dim);
      if (f.rotate) rotate_groups(v.data(), head_dim, G);
      std::vector<uint8_t> codes(static_cast<size_t>(G));
      std::memset(out, 0, size_t(head_dim / 2));
      for (int g = 0; g < groups; g++) {
        uint16_t bits;
        q4_group(f.grid, v.data() + g * G, G, codes.data(), &bits);
        put_f16(out + head_dim / 2 + 2 * g, bits);
        // Nibble order: element d sits in byte d/2, low nibble for even d, high nibble for odd d.
        for (int j = 0; j < G; j++) {
          int d = g * G + j;
          out[d / 2] |= uint8_t(codes[size_t(j)] << (4 * (d % 2)));
        }
      }
      return;
    }
  }
}

void kv_read_row(const KvFormat& f, const uint8_t* row, int head_dim, float* u, float* s) {
  const int G = f.group, groups = head_dim / G;
  switch (f.kind) {
    case KvKind::BF16:
      for (int d = 0; d < head_dim; d++) u[d] = f32_from_bf16(get_f16(row + 2 * d));
      for (int g = 0; g < groups; g++) s[g] = 1.0f;
      return;
    case KvKind::F32:
      std::memcpy(u, row, size_t(head_dim) * 4);
      for (int g = 0; g < groups; g++) s[g] = 1.0f;
      return;
    case KvKind::FP8: {
      static const std::array<float, 256> value = [] {  // f32_from_e4m3 of every code, taken once
        std::array<float, 256> v{};
        for (int c = 0; c < 256; c++) v[size_t(c)] = f32_from_e4m3(uint8_t(c));
        return v;
      }();
      for (int d = 0; d < head_dim; d++) u[d] = value[row[d]];
      for (int g = 0; g < groups; g++) s[g] = f32_from_f16(get_f16(row + head_dim + 2 * g));
      return;
    }
    case KvKind::Q4H: {  // byte i holds element 2i in its low half, 2i + 1 in its high half
      const float zero = f.grid == Grid::Midpoint ? 7.5f : 8.0f;  // float(c) − 8 is exact: float(c − 8)
      for (int i = 0; i < head_dim / 2; i++) {
        u[2 * i] = float(row[i] & 0xf) - zero;
        u[2 * i + 1] = float(row[i] >> 4) - zero;
      }
      for (int g = 0; g < groups; g++) s[g] = f32_from_f16(get_f16(row + head_dim / 2 + 2 * g));
      return;
    }
  }
}

void kv_unpack_row(const KvFormat& f, const uint8_t* row, int head_dim, float* out) {
  std::vector<float> s(static_cast<size_t>(head_dim / f.group));
  kv_read_row(f, row, head_dim, out, s.data());
  for (int d = 0; d < head_dim; d++) out[d] = s[size_t(d / f.group)] * out[d];
  if (f.rotated()) rotate_groups(out, head_dim, f.group);
}

}  // namespace hkv
