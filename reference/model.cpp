// The oracle's forward pass. Read top-down: helpers, the two mixers, the MLP, the model.
#include "reference/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "reference/scalar.h"
#include "reference/weights.h"

namespace hkv {

// ================================================================================================
// small helpers
// ================================================================================================

void rmsnorm_1pw(const float* x, const float* w, int64_t n, float eps, float* out) {
  float r = rsqrt_c(sum_squares(x, n) / float(n) + eps);
  for (int64_t i = 0; i < n; i++) out[i] = (x[i] * r) * (w ? 1.0f + w[i] : 1.0f);
}

void rmsnorm_plain(const float* x, const float* w, int64_t n, float eps, float* out) {
  float r = rsqrt_c(sum_squares(x, n) / float(n) + eps);
  for (int64_t i = 0; i < n; i++) out[i] = (x[i] * r) * w[i];
}

void l2norm_inplace(float* x, int64_t n) {
  float r = rsqrt_c(sum_squares(x, n) + 1e-6f);
  for (int64_t i = 0; i < n; i++) x[i] = x[i] * r;
}

// rotate_half: out[i] = x[i]·cos − x[i+h]·sin, out[i+h] = x[i+h]·cos + x[i]·sin, for i < h = rd/2.
void rope_apply(float* x, int rd, const float* cos, const float* sin) {
  const int h = rd / 2;
  for (int i = 0; i < h; i++) {
    float a = x[i], b = x[i + h];
    x[i] = fma_rn(a, cos[i], -(b * sin[i]));
    x[i + h] = fma_rn(b, cos[i], a * sin[i]);
  }
}

// ================================================================================================
// attention over the cache (ARITHMETIC.md §6)
// ================================================================================================

// score = (Σ_g fma(s_g, p_g, acc)) · scale, p_g = Σ_j u_j·q_j (fma chain from 0, j in order). The groups'
// chains are independent, so they are run side by side (p: one float a group), each still in j order. (The noise
// floor's form is attend_wide's.)
static float score_row(const float* q, const float* u, const float* s, int head_dim, int group, float scale, float* p) {
  const int groups = head_dim / group;
  for (int g = 0; g < groups; g++) p[g] = 0.0f;
  for (int j = 0; j < group; j++)
    for (int g = 0; g < groups; g++) p[g] = fma_rn(u[g * group + j], q[g * group + j], p[g]);
  float acc = 0.0f;
  for (int g = 0; g < groups; g++) acc = fma_rn(s[g], p[g], acc);
  return acc * scale;
}

// q4h (f.integer_scores()): score = (Σ_g fma(s_g, p_g, acc)) · scale with p_g = float(P_g) · unit_g, P_g = Σ_j u_j·X_j
// an exact integer (|P_g| <= 8·32·2^14 = 2^22, so float(P_g) and the product by the power of two unit_g are exact);
// X, unit: the rotated query in block fixed point (x_chunks with top = 13).
float q4h_key_score(const XChunks& qx, const float* u, const float* s, int head_dim, float scale) {
  float acc = 0.0f;
  for (int g = 0; g < head_dim / 32; g++) {
    int32_t P = 0;
    for (int j = g * 32; j < g * 32 + 32; j++) P += int32_t(u[j]) * qx.X[size_t(j)];
    acc = fma_rn(s[g], float(P) * qx.unit[size_t(g)], acc);
  }
  return acc * scale;
}

// q4h (f.integer_scores()): a chunk's weighted values in integers. For each group g of 32 dims, E_g = floor(log2 M_g)
// with M_g the chunk's largest |s_{t,g}|; each key's weight held as W_t = round_even(max(e_t, 0)·s_{t,g}·2^(13−E_g)),
// an integer with |W_t| < 2^14 (two signed bytes on a GPU); O_d = Σ_t W_t·u_d(t), exact in any order;
// oc[d] = float(O_d)·2^(E_g−13). A group whose scales hold an inf or NaN gives NaN; one of zeros +0.
// e [len]: the chunk's weights; u [len][D], s [len][D/32]: its V rows as kv_read_row reads them.
void q4h_chunk_values(const float* e, const float* u, const float* s, int64_t len, int D, float* oc) {
  const int groups = D / 32;
  // 1. M_g, and whether the group's scales are all finite
  std::vector<float> M(static_cast<size_t>(groups), 0.0f);
  std::vector<bool> finite(static_cast<size_t>(groups), true);
  for (int64_t t = 0; t < len; t++)
    for (int g = 0; g < groups; g++) {
      const float a = std::fabs(s[size_t(t) * size_t(groups) + size_t(g)]);
      finite[size_t(g)] = finite[size_t(g)] && std::isfinite(a);
      M[size_t(g)] = a > M[size_t(g)] ? a : M[size_t(g)];
    }
  // up = 2^(13−E_g), unit = 2^(E_g−13); both 0 for a group of zeros or with a scale not finite
  std::vector<double> up(static_cast<size_t>(groups), 0.0);
  std::vector<float> unit(static_cast<size_t>(groups), 0.0f);
  for (int g = 0; g < groups; g++)
    if (finite[size_t(g)] && M[size_t(g)] > 0.0f) {
      const int E = std::ilogb(M[size_t(g)]);
      up[size_t(g)] = std::ldexp(1.0, 13 - E);
      unit[size_t(g)] = std::ldexp(1.0f, E - 13);
    }
  // 2. O_d = Σ_t W_t·u_d(t), keys in order, though any order gives the same integers: |W·u| ≤ 2^17 and every
  // partial sum ≤ 2^26, so float64 holds them all exactly.
  std::vector<double> O(static_cast<size_t>(D), 0.0);
  for (int64_t t = 0; t < len; t++) {
    const double p = std::fmax(e[t], 0.0f);
    for (int g = 0; g < groups; g++) {
      // W_t: the product is exact in float64 (24 + 11 bits), rounded once
      const double W = std::nearbyint(p * double(s[size_t(t) * size_t(groups) + size_t(g)]) * up[size_t(g)]);
      const float* ut = u + size_t(t) * size_t(D) + size_t(g) * 32;
      double* Og = O.data() + size_t(g) * 32;
      for (int d = 0; d < 32; d++) Og[d] += W * double(ut[d]);
    }
  }
  // 3. oc, a group at a time
  for (int g = 0; g < groups; g++)
    for (int d = g * 32; d < g * 32 + 32; d++)
      oc[d] = !finite[size_t(g)] ? canonical_nan() : float(O[size_t(d)]) * unit[size_t(g)];
}

static void attend_wide(const KvFormat& f, const float* q_in, int head_dim, const uint8_t* k_rows,
                        const uint8_t* v_rows, size_t stride, int64_t n, float* out);

void attend(const KvFormat& f, const float* q_in, int head_dim, const uint8_t* k_rows, const uint8_t* v_rows,
            size_t stride, int64_t n, float* out) {
  if (wide_accumulation()) return attend_wide(f, q_in, head_dim, k_rows, v_rows, stride, n, out);
  const int G = f.group, groups = head_dim / G;
  const float scale = float(1.0 / std::sqrt(double(head_dim)));
  std::vector<float> q(q_in, q_in + head_dim);
  if (f.rotated()) rotate_groups(q.data(), head_dim, G);  // the query is rotated once
  const bool int_scores = f.integer_scores();
  const XChunks qx = int_scores ? x_chunks(q.data(), head_dim, 13) : XChunks{};

  std::vector<float> u(static_cast<size_t>(head_dim)), s(static_cast<size_t>(groups)), e(512),
      oc(static_cast<size_t>(head_dim)), pg(static_cast<size_t>(groups));  // pg: score_row's group sums
  std::vector<float> vu(int_scores ? size_t(512) * size_t(head_dim) : 0),
      vs(int_scores ? size_t(512) * size_t(groups) : 0);
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  std::vector<float> o(static_cast<size_t>(head_dim), 0.0f);
  for (int64_t c0 = 0; c0 < n; c0 += 512) {
    const int64_t len = std::min<int64_t>(512, n - c0);
    // scores and the chunk's maximum
    float mc = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < len; j++) {
      kv_read_row(f, k_rows + size_t(c0 + j) * stride, head_dim, u.data(), s.data());
      e[size_t(j)] = int_scores ? q4h_key_score(qx, u.data(), s.data(), head_dim, scale)
                                : score_row(q.data(), u.data(), s.data(), head_dim, G, scale, pg.data());
      mc = e[size_t(j)] > mc ? e[size_t(j)] : mc;
    }
    // weights, their sum and the weighted values, keys in order
    float lc = 0.0f;
    std::fill(oc.begin(), oc.end(), 0.0f);
    for (int64_t j = 0; j < len; j++) {
      float p = exp_c(e[size_t(j)] - mc);
      lc = lc + p;
      if (int_scores) {  // the chunk's V rows, for q4h_chunk_values below
        e[size_t(j)] = p;
        kv_read_row(f, v_rows + size_t(c0 + j) * stride, head_dim, vu.data() + size_t(j) * size_t(head_dim),
                    vs.data() + size_t(j) * size_t(groups));
        continue;
      }
      kv_read_row(f, v_rows + size_t(c0 + j) * stride, head_dim, u.data(), s.data());
      for (int g = 0; g < groups; g++)
        for (int d = g * G; d < g * G + G; d++) oc[size_t(d)] = fma_rn(p, s[size_t(g)] * u[size_t(d)], oc[size_t(d)]);
    }
    if (int_scores) q4h_chunk_values(e.data(), vu.data(), vs.data(), len, head_dim, oc.data());
    // merge into the running (m, l, o)
    float mn = m > mc ? m : mc;
    float a = exp_c(m - mn), b = exp_c(mc - mn);
    l = fma_rn(l, a, lc * b);
    for (int d = 0; d < head_dim; d++) o[size_t(d)] = fma_rn(o[size_t(d)], a, oc[size_t(d)] * b);
    m = mn;
  }
  for (int d = 0; d < head_dim; d++) out[d] = o[size_t(d)] / l;
  if (f.rotated()) rotate_groups(out, head_dim, G);  // the output is rotated back once
}

// The noise-floor form of attend(): one float64 softmax over all keys (no chunks), rounded once.
static void attend_wide(const KvFormat& f, const float* q_in, int head_dim, const uint8_t* k_rows,
                        const uint8_t* v_rows, size_t stride, int64_t n, float* out) {
  const int G = f.group;
  std::vector<float> q(q_in, q_in + head_dim), u(static_cast<size_t>(head_dim)), s(static_cast<size_t>(head_dim / G));
  if (f.rotated()) rotate_groups(q.data(), head_dim, G);
  std::vector<double> sc(static_cast<size_t>(n)), o(static_cast<size_t>(head_dim), 0.0);
  double m = -INFINITY, l = 0.0;
  for (int64_t t = 0; t < n; t++) {
    kv_read_row(f, k_rows + size_t(t) * stride, head_dim, u.data(), s.data());
    double acc = 0.0;
    for (int g = 0; g < head_dim / G; g++)
      for (int j = g * G; j < g * G + G; j++) acc += double(s[size_t(g)]) * double(u[size_t(j)]) * double(q[size_t(j)]);
    sc[size_t(t)] = acc / std::sqrt(double(head_dim));
    m = std::max(m, sc[size_t(t)]);
  }
  for (int64_t t = 0; t < n; t++) {
    double p = std::exp(sc[size_t(t)] - m);
    l += p;
    kv_read_row(f, v_rows + size_t(t) * stride, head_dim, u.data(), s.data());
    for (int g = 0; g < head_dim / G; g++)
      for (int d = g * G; d < g * G + G; d++) o[size_t(d)] += p * double(s[size_t(g)]) * double(u[size_t(d)]);
  }
  for (int d = 0; d < head_dim; d++) out[d] = float(o[size_t(d)] / l);
  if (f.rotated()) rotate_groups(out, head_dim, G);
}

// ================================================================================================
// Gated DeltaNet (ARITHMETIC.md §8)
// ================================================================================================

void deltanet_step(float* S, const float* q, const float* k, const float* v, float beta, float g, int dk, int dv,
                   float* o) {
  if (wide_accumulation()) {  // the noise floor: read-outs summed in float64 (the state stays fp32)
    const float decay = float(std::exp(double(g)));
    for (int j = 0; j < dv; j++) {
      double mj = 0.0;
      for (int i = 0; i < dk; i++) {
        S[i * dv + j] = S[i * dv + j] * decay;
        mj += double(S[i * dv + j]) * double(k[i]);
      }
      float delta = float(double(beta) * (double(v[j]) - mj));
      double oj = 0.0;
      for (int i = 0; i < dk; i++) {
        S[i * dv + j] = fma_rn(k[i], delta, S[i * dv + j]);
        oj += double(S[i * dv + j]) * double(q[i]);
      }
      o[j] = float(oj);
    }
    return;
  }
  const float decay = exp_c(g);
  for (int j = 0; j < dv; j++) {
    // column j of S: decay, read out m = Sᵀk, correct by δ = β(v − m), read out o = Sᵀq
    float mj = 0.0f;
    for (int i = 0; i < dk; i++) {
      S[i * dv + j] = S[i * dv + j] * decay;
      mj = fma_rn(S[i * dv + j], k[i], mj);
    }
    float delta = beta * (v[j] - mj);
    float oj = 0.0f;
    for (int i = 0; i < dk; i++) {
      S[i * dv + j] = fma_rn(k[i], delta, S[i * dv + j]);
      oj = fma_rn(S[i * dv + j], q[i], oj);
    }
    o[j] = oj;
  }
}

// ================================================================================================
// the mixers and the MLP, over T tokens at once (projections batched, recurrences in token order)
// ================================================================================================

static void tap(const ForwardOptions& opt, int layer, const char* name, int64_t T, const float* x, int64_t n) {
  if (!opt.tap) return;
  for (int64_t t = 0; t < T; t++) (*opt.tap)(layer, name, t, x + t * n, n);
}

// x [T][hidden] -> y [T][hidden]
static void full_attention(const Model& m, SequenceState& s, int layer, int cache_index, const float* x, int64_t T,
                           float* y, const ForwardOptions& opt) {
  const Config& c = m.config;
  const FullAttnWeights& w = m.w.layers[size_t(layer)].full;
  const int H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim, rd = c.rotary_dim();
  const float eps = float(c.rms_norm_eps);
  std::vector<float> qg(static_cast<size_t>(T * H * 2 * D)), k(static_cast<size_t>(T * KV * D)),
      v(static_cast<size_t>(T * KV * D));
  matmul(w.q_proj, x, T, qg.data());  // per head: D query rows, then D gate rows
  matmul(w.k_proj, x, T, k.data());
  matmul(w.v_proj, x, T, v.data());

  // q/k norms and RoPE, then K and V rows packed into the cache at their positions
  std::vector<float> cs(static_cast<size_t>(rd / 2)), sn(static_cast<size_t>(rd / 2)),
      q(static_cast<size_t>(T * H * D)), gate(static_cast<size_t>(T * H * D));
  for (int64_t t = 0; t < T; t++) {
    rope_row(c, s.pos + t, cs.data(), sn.data());
    for (int h = 0; h < H; h++) {
      const float* qh = qg.data() + (t * H + h) * 2 * D;
      float* qo = q.data() + (t * H + h) * D;
      rmsnorm_1pw(qh, w.q_norm.data(), D, eps, qo);
      rope_apply(qo, rd, cs.data(), sn.data());
      std::memcpy(gate.data() + (t * H + h) * D, qh + D, sizeof(float) * size_t(D));
    }
    for (int h = 0; h < KV; h++) {
      float* kh = k.data() + (t * KV + h) * D;
      rmsnorm_1pw(kh, w.k_norm.data(), D, eps, kh);
      rope_apply(kh, rd, cs.data(), sn.data());
      size_t off = (size_t(s.pos + t) * size_t(KV) + size_t(h)) * s.row_bytes;
      kv_pack_row(s.format, kh, D, s.k_cache[size_t(cache_index)].data() + off);
      kv_pack_row(s.format, v.data() + (t * KV + h) * D, D, s.v_cache[size_t(cache_index)].data() + off);
    }
  }
  tap(opt, layer, "q", T, q.data(), H * D);
  tap(opt, layer, "k", T, k.data(), KV * D);

  // each query attends to every slot up to and including its own, read back in the cache's format
  std::vector<float> att(static_cast<size_t>(T * H * D));
  const size_t stride = size_t(KV) * s.row_bytes;
  // schedule(static, 1): query t reads t + 1 slots, so contiguous blocks of t would leave the last thread the most
  // work (on 2 threads 3/4 of it); dealt one (t, h) at a time, the threads share it evenly. (The order of the
  // threads changes no byte: each (t, h) is computed alone.)
#pragma omp parallel for collapse(2) schedule(static, 1)
  for (int64_t t = 0; t < T; t++)
    for (int h = 0; h < H; h++) {
      const int kvh = h / (H / KV);
      const uint8_t* kr = s.k_cache[size_t(cache_index)].data() + size_t(kvh) * s.row_bytes;
      const uint8_t* vr = s.v_cache[size_t(cache_index)].data() + size_t(kvh) * s.row_bytes;
      float* o = att.data() + (t * H + h) * D;
      attend(s.format, q.data() + (t * H + h) * D, D, kr, vr, stride, s.pos + t + 1, o);
      const float* g = gate.data() + (t * H + h) * D;
      for (int d = 0; d < D; d++) o[d] = o[d] * sigmoid_c(g[d]);
    }
  tap(opt, layer, "attn", T, att.data(), H * D);
  matmul(w.o_proj, att.data(), T, y);
}

static void linear_attention(const Model& m, SequenceState& s, int layer, int state_index, const float* x, int64_t T,
                             float* y, const ForwardOptions& opt) {
  const Config& c = m.config;
  const LinearAttnWeights& w = m.w.layers[size_t(layer)].lin;
  const int nk = c.linear_num_key_heads, nv = c.linear_num_value_heads;
  const int dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, K = c.linear_conv_kernel_dim;
  const int64_t C = c.conv_dim();
  std::vector<float> qkv(static_cast<size_t>(T * C)), z(static_cast<size_t>(T * nv * dv)),
      b(static_cast<size_t>(T * nv)), a(static_cast<size_t>(T * nv));
  matmul(w.in_proj_qkv, x, T, qkv.data());
  matmul(w.in_proj_z, x, T, z.data());
  matmul(w.in_proj_b, x, T, b.data());
  matmul(w.in_proj_a, x, T, a.data());

  float* conv_state = s.conv[size_t(state_index)].data();  // [C][K-1], oldest first
  float* S = s.S[size_t(state_index)].data();              // [nv][dk][dv]
  const float q_scale = float(1.0 / std::sqrt(double(dk)));
  const float eps = float(c.rms_norm_eps);
  std::vector<float> core(static_cast<size_t>(T * nv * dv));
  std::vector<float> conv_out(static_cast<size_t>(C));
  for (int64_t t = 0; t < T; t++) {
    // causal depthwise conv over the last K inputs of each channel, then SiLU; shift the window
    const float* xt = qkv.data() + t * C;
    for (int64_t ch = 0; ch < C; ch++) {
      float* st = conv_state + ch * (K - 1);
      const float* wc = w.conv.data() + ch * K;
      float acc = 0.0f;
      for (int j = 0; j < K - 1; j++) acc = fma_rn(wc[j], st[j], acc);
      acc = fma_rn(wc[K - 1], xt[ch], acc);
      conv_out[size_t(ch)] = silu_c(acc);
      for (int j = 0; j + 1 < K - 1; j++) st[j] = st[j + 1];
      if (K > 1) st[K - 2] = xt[ch];
    }
    float* qv = conv_out.data();                // [nk][dk]
    float* kv = conv_out.data() + nk * dk;      // [nk][dk]
    float* vv = conv_out.data() + 2 * nk * dk;  // [nv][dv]
    for (int h = 0; h < nk; h++) {
      l2norm_inplace(qv + h * dk, dk);
      for (int i = 0; i < dk; i++) qv[h * dk + i] = qv[h * dk + i] * q_scale;
      l2norm_inplace(kv + h * dk, dk);
    }
    // the recurrence, one value head at a time (heads are independent; threads only pay off for large states)
#pragma omp parallel for schedule(static) if (nv * dk * dv >= 65536)
    for (int h = 0; h < nv; h++) {
      const int kh = h / (nv / nk);
      const float beta = sigmoid_c(b[size_t(t * nv + h)]);
      const float g = -exp_c(w.A_log[size_t(h)]) * softplus_c(a[size_t(t * nv + h)] + w.dt_bias[size_t(h)]);
      float* o = core.data() + (t * nv + h) * dv;
      deltanet_step(S + size_t(h) * size_t(dk * dv), qv + kh * dk, kv + kh * dk, vv + h * dv, beta, g, dk, dv, o);
      // gated RMSNorm: (norm(o) · w) · silu(z)
      rmsnorm_plain(o, w.norm.data(), dv, eps, o);
      const float* zh = z.data() + (t * nv + h) * dv;
      for (int j = 0; j < dv; j++) o[j] = o[j] * silu_c(zh[j]);
    }
  }
  tap(opt, layer, "deltanet", T, core.data(), nv * dv);
  matmul(w.out_proj, core.data(), T, y);
}

static void mlp(const LayerWeights& w, const float* x, int64_t T, float* y) {
  const int64_t I = w.gate_proj.rows;
  std::vector<float> g(static_cast<size_t>(T * I)), u(static_cast<size_t>(T * I));
  matmul(w.gate_proj, x, T, g.data());
  matmul(w.up_proj, x, T, u.data());
  for (size_t i = 0; i < g.size(); i++) g[i] = silu_c(g[i]) * u[i];
  matmul(w.down_proj, g.data(), T, y);
}

// ================================================================================================
// the model
// ================================================================================================

std::vector<float> forward(const Model& m, SequenceState& s, const std::vector<int32_t>& tokens,
                           const ForwardOptions& opt) {
  const Config& c = m.config;
  const int64_t T = int64_t(tokens.size()), E = c.hidden_size;
  if (T == 0) return {};
  check_forward_input(c, s.pos, s.capacity, tokens);

  // embeddings (not scaled)
  std::vector<float> h(static_cast<size_t>(T * E)), x(static_cast<size_t>(T * E)), y(static_cast<size_t>(T * E));
  for (int64_t t = 0; t < T; t++) m.w.embed.row(tokens[size_t(t)], h.data() + t * E);

  const float eps = float(c.rms_norm_eps);
  int full_i = 0, lin_i = 0;
  for (int l = 0; l < c.num_hidden_layers; l++) {
    const LayerWeights& lw = m.w.layers[size_t(l)];
    for (int64_t t = 0; t < T; t++) rmsnorm_1pw(h.data() + t * E, lw.input_norm.data(), E, eps, x.data() + t * E);
    if (lw.kind == LayerKind::Full)
      full_attention(m, s, l, full_i++, x.data(), T, y.data(), opt);
    else
      linear_attention(m, s, l, lin_i++, x.data(), T, y.data(), opt);
    for (size_t i = 0; i < h.size(); i++) h[i] = h[i] + y[i];
    for (int64_t t = 0; t < T; t++) rmsnorm_1pw(h.data() + t * E, lw.post_attn_norm.data(), E, eps, x.data() + t * E);
    mlp(lw, x.data(), T, y.data());
    for (size_t i = 0; i < h.size(); i++) h[i] = h[i] + y[i];
    tap(opt, l, "hidden", T, h.data(), E);
  }
  s.pos += T;
  if (!opt.want_logits) return {};

  const int64_t first = opt.last_only ? T - 1 : 0, R = T - first;
  for (int64_t t = first; t < T; t++)
    rmsnorm_1pw(h.data() + t * E, m.w.final_norm.data(), E, eps, x.data() + (t - first) * E);
  std::vector<float> logits(static_cast<size_t>(R * c.vocab_size));
  matmul(m.w.lm_head, x.data(), R, logits.data());
  return logits;
}

std::vector<int32_t> generate_greedy(const Model& m, SequenceState& s, const std::vector<int32_t>& prompt, int n_new) {
  std::vector<int32_t> out;
  ForwardOptions opt;
  opt.last_only = true;
  std::vector<float> logits = forward(m, s, prompt, opt);
  for (int i = 0; i < n_new; i++) {
    int32_t next = argmax(logits.data(), m.config.vocab_size);
    out.push_back(next);
    if (i + 1 < n_new) logits = forward(m, s, {next}, opt);
  }
  return out;
}

}  // namespace hkv
