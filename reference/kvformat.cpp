#include "reference/kvformat.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "reference/scalar.h"
#include "reference/synthetic.h"

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
    else if (part == "nf")
      f.grid = Grid::Normal;
    else if (part == "max")
      f.mse = false;
    else if (part.rfind("seed", 0) == 0 && part.size() <= 8 &&
             part.find_first_not_of("0123456789", 4) == std::string::npos && part != "seed0")
      f.seed = part == "seed" ? 1 : std::stoi(part.substr(4));
    else
      throw std::invalid_argument("unknown cache format option '" + part + "' in '" + name + "'");
    pos = end == std::string::npos ? name.size() : end;
  }
  if (f.seed && !f.rotate) throw std::invalid_argument("cache format '" + name + "': 'seed' signs the rotation");
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
  if (grid == Grid::Normal) s += "-nf";
  if (seed) s += seed == 1 ? std::string("-seed") : "-seed" + std::to_string(seed);
  if (!mse) s += "-max";
  return s;
}

bool KvFormat::is_canonical() const {
  if (kind == KvKind::F32) return false;
  return kind != KvKind::Q4H || (rotate && group == 32 && grid == Grid::Q4_0 && mse && seed == 0);
}

bool KvFormat::engine_runs() const {
  if (is_canonical()) return true;
  KvFormat searched = *this;
  searched.mse = true;
  return kind == KvKind::Q4H && !mse && searched.is_canonical();
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

// The Normal grid's positive levels, in units of the scale (the group's absmax): Lloyd–Max levels of the rotated
// values over their group's absmax, fitted to the trained model's K and V rows (a Gaussian's give the same to the
// third digit), the top level held at 1 so that the extreme is exact. Each is k/1024: s·level is exact in fp32.
static constexpr float kNormalLevels[8] = {52 / 1024.0f,  158 / 1024.0f, 268 / 1024.0f, 383 / 1024.0f,
                                           509 / 1024.0f, 650 / 1024.0f, 816 / 1024.0f, 1.0f};

// The unit value of code c (0..15) on a grid: the stored value is scale · unit.
static float q4_unit(Grid grid, int c) {
  switch (grid) {
    case Grid::Midpoint:
      return float(c) - 7.5f;
    case Grid::Normal:  // codes 0..7 the negative levels from the largest, 8..15 the positive from the smallest
      return c < 8 ? -kNormalLevels[7 - c] : kNormalLevels[c - 8];
    case Grid::Q4_0:
    case Grid::Symmetric:
      break;
  }
  return float(c) - 8.0f;  // exact: float(c − 8)
}

// The code of y on a grid with the scale s as stored (s != 0): one fp32 division t = y/s, then the nearest level.
static uint8_t q4_code(Grid grid, float y, float s) {
  if (grid == Grid::Q4_0 || grid == Grid::Symmetric) {  // q4_0_code (reference/scalar.h); the symmetric grid has no 0
    const int c = q4_0_code(y, s);
    return uint8_t(grid == Grid::Symmetric && c < 1 ? 1 : c);
  }
  const float t = y / s;
  int c;
  if (grid == Grid::Midpoint) {
    // levels at (c − 7.5); the nearest level to t is floor(t) + 0.5, ties (t an integer) upward
    c = int(floor_small(t < -8.0f ? -8.0f : (t > 8.0f ? 8.0f : t))) + 8;
  } else {  // Normal: the nearest positive level to |t|, the smaller on a tie, then the sign
    const float a = t < 0.0f ? -t : t;
    int i = 0;
    for (int k = 1; k < 8; k++)
      if (std::fabs(a - kNormalLevels[k]) < std::fabs(a - kNormalLevels[i])) i = k;
    c = t < 0.0f ? 7 - i : 8 + i;
  }
  return uint8_t(c < 0 ? 0 : (c > 15 ? 15 : c));
}

// The codes of a group against the stored scale s, and their squared error in float64.
static double q4_codes(Grid grid, const float* x, int n, float s, uint8_t* codes) {
  double err = 0;
  for (int j = 0; j < n; j++) {
    // an all-zero group (or one whose scale underflows fp16): every value reads 0
    codes[j] = s == 0.0f ? uint8_t(8) : q4_code(grid, x[j], s);
    err += sq_err(s == 0.0f ? 0.0f : s * q4_unit(grid, codes[j]), x[j]);
  }
  return err;
}

// One q4h group of n values (already rotated when the format rotates): returns codes 0..15 and the scale's bits.
static void q4_group(const KvFormat& f, const float* x, int n, uint8_t* codes, uint16_t* scale_bits) {
  float amax = 0.0f, extreme = 0.0f;
  for (int j = 0; j < n; j++) {
    float a = x[j] < 0.0f ? -x[j] : x[j];
    if (a > amax) {
      amax = a;
      extreme = x[j];
    }
  }
  float wanted = 0.0f;  // the grid's scale, from the group's extreme
  switch (f.grid) {
    case Grid::Midpoint:
      wanted = amax / 7.5f;
      break;
    case Grid::Symmetric:
      wanted = amax / 7.0f;
      break;
    case Grid::Normal:
      wanted = amax;
      break;
    case Grid::Q4_0:
      wanted = extreme / -8.0f;
      break;
  }
  const float s = stored_scale(wanted, scale_bits);
  const double err = q4_codes(f.grid, x, n, s, codes);
  if (!f.mse || s == 0.0f) return;
  // The least squared error over scales from 3/4 to 5/4 of the grid's own in steps of 1/32, each rounded to fp16
  // and its codes computed from the rounded scale. The grid's own is the first candidate and is kept on a tie,
  // so the error is never above the grid's. Candidates that overflow fp16 or round to 0 are passed over.
  double best = err;
  std::vector<uint8_t> trial(static_cast<size_t>(n));
  for (int i = -8; i <= 8; i++) {
    uint16_t bits = f16_from_f32(wanted * (1.0f + float(i) / 32.0f));
    const float c = f32_from_f16(bits);
    if (i == 0 || (bits & 0x7c00u) == 0x7c00u || c == 0.0f) continue;
    const double e = q4_codes(f.grid, x, n, c, trial.data());
    if (e < best) {
      best = e;
      *scale_bits = bits;
      std::copy(trial.begin(), trial.end(), codes);
    }
  }
}

// The seeded ablation's signs: element d of a row is negated before and after its group's transform when bit 0
// of a counter-based hash of (seed, d) is set (about half of them, no pattern within or across groups). Each seed
// is another rotation as good as H on near-Gaussian rows, so seeds 1, 2, 3, … are repeated draws of a format's
// error: their spread is the noise of one gate measurement.
static void flip_seeded_signs(int seed, float* x, int head_dim) {
  for (int d = 0; d < head_dim; d++)
    if (synth_bits(0x5eed, uint64_t(seed), uint64_t(d)) & 1u) x[d] = -x[d];
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
      if (f.seed) flip_seeded_signs(f.seed, v.data(), head_dim);
      if (f.rotate) rotate_groups(v.data(), head_dim, G);
      if (f.seed) flip_seeded_signs(f.seed, v.data(), head_dim);  // S·H·S: symmetric and its own inverse, as H is
      std::vector<uint8_t> codes(static_cast<size_t>(G));
      std::memset(out, 0, size_t(head_dim / 2));
      for (int g = 0; g < groups; g++) {
        uint16_t bits;
        q4_group(f, v.data() + g * G, G, codes.data(), &bits);
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
      float unit[16];    // each code's unit value, taken once a row
      for (int c = 0; c < 16; c++) unit[c] = q4_unit(f.grid, c);
      for (int i = 0; i < head_dim / 2; i++) {
        u[2 * i] = unit[row[i] & 0xf];
        u[2 * i + 1] = unit[row[i] >> 4];
      }
      for (int g = 0; g < groups; g++) s[g] = f32_from_f16(get_f16(row + head_dim / 2 + 2 * g));
      if (f.seed) {  // back to the original space: S·H·S is linear, so s·(SHS u) = SHS (s·u), up to fp32 rounding
        flip_seeded_signs(f.seed, u, head_dim);
        rotate_groups(u, head_dim, G);
        flip_seeded_signs(f.seed, u, head_dim);
      }
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
