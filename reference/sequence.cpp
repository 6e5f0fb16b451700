// The host-side sequence functions that the oracle and the engine share (reference/sequence.h): the prefill
// choice's names, the greedy choice, the RoPE table, a new sequence's state, the checks of a forward call, and the
// state file.
#include "reference/sequence.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "reference/weights.h"  // available_memory_bytes

namespace hkv {

Prefill parse_prefill(const std::string& s) {
  if (s == "exact") return Prefill::Exact;
  if (s == "fast") return Prefill::Fast;
  if (s == "auto") return Prefill::Auto;
  throw std::invalid_argument("prefill '" + s + "': exact, fast or auto");
}

const char* prefill_name(Prefill p) { return p == Prefill::Exact ? "exact" : p == Prefill::Fast ? "fast" : "auto"; }

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; i++)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

void rope_row(const Config& c, int64_t pos, float* cos_out, float* sin_out) {
  const int half = c.rotary_dim() / 2;
  for (int i = 0; i < half; i++) {
    float inv_freq = float(1.0 / std::pow(c.rope_theta, double(2 * i) / double(c.rotary_dim())));
    float angle = float(pos) * inv_freq;
    cos_out[i] = float(std::cos(double(angle)));
    sin_out[i] = float(std::sin(double(angle)));
  }
}

SequenceState new_sequence(const Config& c, const KvFormat& f, int64_t capacity) {
  if (capacity < 0) throw std::runtime_error("cache capacity " + std::to_string(capacity) + " is negative");
  SequenceState s;
  s.capacity = capacity;
  s.format = f;
  s.row_bytes = kv_row_bytes(f, c.head_dim);
  const size_t cache_bytes = size_t(capacity) * size_t(c.num_key_value_heads) * s.row_bytes;
  // Refuse up front, with the numbers, a cache that does not fit rather than fail inside an allocation.
  const double need = 2.0 * double(cache_bytes) * c.n_full_layers();
  const uint64_t avail = available_memory_bytes();
  if (avail && need > double(avail))
    throw std::runtime_error("a " + f.name() + " cache of " + std::to_string(capacity) + " positions needs " +
                             std::to_string(int64_t(need / 1048576.0)) + " MiB; " + std::to_string(avail / 1048576) +
                             " MiB are available");
  const int K = c.linear_conv_kernel_dim;
  for (LayerKind kind : c.layer_types) {
    if (kind == LayerKind::Full) {
      s.k_cache.emplace_back(cache_bytes, 0);
      s.v_cache.emplace_back(cache_bytes, 0);
    } else {
      s.conv.emplace_back(size_t(c.conv_dim()) * size_t(K - 1), 0.0f);
      s.S.emplace_back(
          size_t(c.linear_num_value_heads) * size_t(c.linear_key_head_dim) * size_t(c.linear_value_head_dim), 0.0f);
    }
  }
  return s;
}

void check_forward_input(const Config& c, int64_t pos, int64_t capacity, const std::vector<int32_t>& tokens) {
  const int64_t T = int64_t(tokens.size());
  if (pos + T > capacity)
    throw std::runtime_error("context of " + std::to_string(pos + T) + " tokens exceeds the cache capacity of " +
                             std::to_string(capacity));
  if (pos + T > c.max_position_embeddings)
    throw std::runtime_error("context of " + std::to_string(pos + T) + " tokens exceeds max_position_embeddings " +
                             std::to_string(c.max_position_embeddings));
  for (int64_t t = 0; t < T; t++)
    if (tokens[size_t(t)] < 0 || tokens[size_t(t)] >= c.vocab_size)
      throw std::runtime_error("token " + std::to_string(t) + ": id " + std::to_string(tokens[size_t(t)]) +
                               " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
}

static const char kStateMagic[8] = {'H', 'K', 'V', 'S', 'T', 'A', 'T', '1'};

void save_state(const SequenceState& s, const Config& c, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error(path + ": cannot be written");
    auto put = [&f](const void* p, size_t n) { f.write(static_cast<const char*>(p), std::streamsize(n)); };
    put(kStateMagic, 8);
    int64_t head[6] = {s.pos, c.num_hidden_layers, c.hidden_size, c.head_dim, int64_t(s.row_bytes), 0};
    put(head, sizeof head);
    std::string fmt = s.format.name();
    int64_t fl = int64_t(fmt.size());
    put(&fl, 8);
    put(fmt.data(), fmt.size());
    const size_t used = size_t(s.pos) * size_t(c.num_key_value_heads) * s.row_bytes;
    for (size_t i = 0; i < s.k_cache.size(); i++) {
      put(s.k_cache[i].data(), used);
      put(s.v_cache[i].data(), used);
    }
    for (size_t i = 0; i < s.conv.size(); i++) {
      put(s.conv[i].data(), s.conv[i].size() * 4);
      put(s.S[i].data(), s.S[i].size() * 4);
    }
    if (!f) {
      f.close();
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot be renamed into place");
  }
}

SequenceState load_state(const Config& c, const std::string& path, int64_t capacity) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot be read");
  auto get = [&f, &path](void* p, size_t n, const char* field) {
    f.read(static_cast<char*>(p), std::streamsize(n));
    if (!f) throw std::runtime_error(path + ": truncated at field '" + field + "'");
  };
  char magic[8];
  get(magic, 8, "magic");
  if (std::memcmp(magic, kStateMagic, 8) != 0)
    throw std::runtime_error(path + ": field 'magic': not an hkv state file");
  int64_t head[6];
  get(head, sizeof head, "header");
  if (head[1] != c.num_hidden_layers || head[2] != c.hidden_size || head[3] != c.head_dim)
    throw std::runtime_error(path + ": field 'header': saved for another model shape");
  int64_t fl;
  get(&fl, 8, "format");
  if (fl <= 0 || fl > 64) throw std::runtime_error(path + ": field 'format': bad length");
  std::string fmt(size_t(fl), '\0');
  get(fmt.data(), size_t(fl), "format");
  if (head[0] < 0 || head[0] > capacity)
    throw std::runtime_error(path + ": field 'pos': " + std::to_string(head[0]) + " exceeds the capacity " +
                             std::to_string(capacity));
  SequenceState s = new_sequence(c, KvFormat::parse(fmt), capacity);
  if (int64_t(s.row_bytes) != head[4]) throw std::runtime_error(path + ": field 'row_bytes' does not match the format");
  s.pos = head[0];
  const size_t used = size_t(s.pos) * size_t(c.num_key_value_heads) * s.row_bytes;
  for (size_t i = 0; i < s.k_cache.size(); i++) {
    get(s.k_cache[i].data(), used, "k_cache");
    get(s.v_cache[i].data(), used, "v_cache");
  }
  for (size_t i = 0; i < s.conv.size(); i++) {
    get(s.conv[i].data(), s.conv[i].size() * 4, "conv_state");
    get(s.S[i].data(), s.S[i].size() * 4, "deltanet_state");
  }
  return s;
}

}  // namespace hkv
