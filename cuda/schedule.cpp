// The persistent decode kernel's work list and its host model (cuda/schedule.h says what each is).
#include "cuda/schedule.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace hkv::cuda::sched {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::NormMatvec:
      return "norm+matvec";
    case OpKind::Matvec:
      return "matvec";
    case OpKind::DeltaNetHead:
      return "deltanet head";
    case OpKind::AttnPrep:
      return "attention prep";
    case OpKind::AttnChunk:
      return "attention chunk";
    case OpKind::AttnMerge:
      return "attention merge";
    case OpKind::Elementwise:
      return "elementwise";
    case OpKind::Argmax:
      return "argmax";
  }
  return "?";
}

double Schedule::bytes() const {
  double b = 0;
  for (const Op& o : ops) b += o.bytes_per_item * o.items;
  return b;
}

std::string Schedule::check() const {
  if (first_item.size() != ops.size() + 1) return "first_item does not have one entry an op and one more";
  for (size_t k = 0; k < ops.size(); k++) {
    if (ops[k].items <= 0) return "op " + std::to_string(k) + " (" + ops[k].name + ") has no items";
    if (first_item[k + 1] - first_item[k] != ops[k].items)
      return "op " + std::to_string(k) + " (" + ops[k].name + "): first_item disagrees with its items";
    for (const Dep& d : ops[k].deps) {
      if (d.op < 0 || size_t(d.op) >= k)
        return "op " + std::to_string(k) + " (" + ops[k].name + ") waits on op " + std::to_string(d.op) +
               ", which is not before it in the list: blocks that all wait on it would never run it";
      if (d.need < 1 || d.need > ops[size_t(d.op)].items)
        return "op " + std::to_string(k) + " (" + ops[k].name + ") needs " + std::to_string(d.need) + " items of op " +
               std::to_string(d.op) + " (" + ops[size_t(d.op)].name + "), which has " +
               std::to_string(ops[size_t(d.op)].items);
    }
  }
  return "";
}

namespace {

struct Builder {
  Schedule s;
  int add(OpKind kind, std::string name, int layer, int items, double bytes_per_item, std::vector<int> after) {
    Op o;
    o.kind = kind, o.name = std::move(name), o.layer = layer, o.items = items, o.bytes_per_item = bytes_per_item;
    for (int a : after) o.deps.push_back({a, s.ops[size_t(a)].items});  // all of it: a matvec reads its whole input
    s.ops.push_back(std::move(o));
    return int(s.ops.size()) - 1;
  }
};

int tiles(int64_t rows, int per) { return int((rows + per - 1) / per); }

}  // namespace

Schedule decode_schedule(const Config& c, const Shape& sh) {
  Builder b;
  const int64_t E = c.hidden_size, I = c.intermediate_size;
  const double wb = sh.weight_bits / 8.0;  // bytes a weight element
  // a matvec of rows × cols cut into tiles of rows_per_tile output rows; its bytes are its weights'
  auto matvec = [&](OpKind kind, const std::string& name, int layer, int64_t rows, int64_t cols,
                    std::vector<int> after) {
    const int n = tiles(rows, sh.rows_per_tile);
    return b.add(kind, name, layer, n, double(rows) * double(cols) * wb / n, std::move(after));
  };
  int last = -1;
  for (int l = 0; l < c.num_hidden_layers; l++) {
    const std::string L = "layer " + std::to_string(l) + " ";
    const std::vector<int> prev = last < 0 ? std::vector<int>{} : std::vector<int>{last};
    int mixed;
    if (c.layer_types[size_t(l)] == LayerKind::Full) {
      const int H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
      const int64_t qrows = int64_t(H) * D * (c.attn_output_gate ? 2 : 1);
      const int qkv = matvec(OpKind::NormMatvec, L + "q|k|v", l, qrows + 2 * int64_t(KV) * D, E, prev);
      // q/k norm, RoPE and the new K and V rows packed: a head an item; its bytes are the two rows it writes
      const int prep = b.add(OpKind::AttnPrep, L + "prep", l, H + 2 * KV, 0.0, {qkv});
      const int64_t chunks = (sh.depth + 511) / 512;
      const double cache = 2.0 * double(sh.depth) * KV * sh.cache_row_bytes;  // K and V rows to the depth
      const int chunk =
          b.add(OpKind::AttnChunk, L + "chunks", l, int(KV * chunks), cache / double(KV * chunks), {prep});
      const int merge = b.add(OpKind::AttnMerge, L + "merge", l, H, 0.0, {chunk});
      mixed = matvec(OpKind::Matvec, L + "o", l, E, int64_t(H) * D, {merge});
    } else {
      const int nv = c.linear_num_value_heads, dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
      const int in = matvec(OpKind::NormMatvec, L + "in_proj", l, c.conv_dim() + int64_t(nv) * dv + 2 * nv, E, prev);
      // a value head's conv, recurrence and gated norm: its state read and written (fp32)
      const int heads = b.add(OpKind::DeltaNetHead, L + "deltanet", l, nv, 2.0 * dk * dv * 4.0, {in});
      mixed = matvec(OpKind::Matvec, L + "out_proj", l, E, int64_t(nv) * dv, {heads});
    }
    const int gu = matvec(OpKind::NormMatvec, L + "gate|up", l, 2 * I, E, {mixed});
    last = matvec(OpKind::Matvec, L + "down", l, E, I, {gu});  // SwiGLU of its input slice in its prologue
  }
  const int lm = matvec(OpKind::NormMatvec, "head lm_head", -1, c.vocab_size, E, {last});
  b.add(OpKind::Argmax, "head argmax", -1, 1, 0.0, {lm});
  b.s.first_item.assign(1, 0);
  for (const Op& o : b.s.ops) b.s.first_item.push_back(b.s.first_item.back() + o.items);
  return b.s;
}

SimResult simulate(const Schedule& s, const SimConfig& cfg) {
  SimResult r;
  r.floor_seconds = s.bytes() / cfg.bandwidth;
  const std::string bad = s.check();
  if (!bad.empty()) {
    r.error = "the list cannot finish: " + bad;
    return r;
  }
  if (cfg.blocks < 1) {
    r.error = "no blocks";
    return r;
  }
  std::mt19937_64 rng(cfg.seed);
  std::uniform_real_distribution<double> jit(1.0 - cfg.jitter, 1.0 + cfg.jitter);
  const double per_block_bw = cfg.bandwidth / cfg.blocks;  // every block streams at its share of the card
  std::vector<double> free_at(size_t(cfg.blocks), 0.0);
  std::vector<std::vector<double>> done(s.ops.size());  // completion times of each op's items so far
  double end = 0;
  for (size_t k = 0; k < s.ops.size(); k++) {
    const Op& op = s.ops[k];
    // the time op k's dependencies are met: for each dep, the time its need-th item completed
    double ready = 0;
    for (const Dep& d : op.deps) {
      std::vector<double> t = done[size_t(d.op)];  // every item of an earlier op is taken (check())
      std::nth_element(t.begin(), t.begin() + (d.need - 1), t.end());
      ready = std::max(ready, t[size_t(d.need - 1)]);
    }
    for (int i = 0; i < op.items; i++) {
      // the next ticket goes to the block that is free first
      const size_t b = size_t(std::min_element(free_at.begin(), free_at.end()) - free_at.begin());
      const double start = free_at[b];
      const double stream = op.bytes_per_item / per_block_bw * jit(rng);
      double finish;
      if (cfg.prefetch)  // streams from the ticket on; what needs the input runs once it is ready
        finish = std::max(start + stream, ready) + cfg.item_overhead_s;
      else
        finish = std::max(start, ready) + stream + cfg.item_overhead_s;
      r.wait_seconds += std::max(0.0, ready - (cfg.prefetch ? start + stream : start));
      free_at[b] = finish;
      done[k].push_back(finish);
      end = std::max(end, finish);
      r.items_run++;
    }
  }
  r.finished = r.items_run == s.items();
  r.seconds = end;
  return r;
}

}  // namespace hkv::cuda::sched
