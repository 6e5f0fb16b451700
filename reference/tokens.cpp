#include "reference/tokens.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace hkv {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

static void check_id(int64_t id, size_t i, int64_t vocab, const std::string& where) {
  if (id < 0 || id > INT32_MAX)
    throw std::runtime_error(where + ": element " + std::to_string(i) + ": " + std::to_string(id) +
                             " is not a token id");
  if (vocab > 0 && id >= vocab)
    throw std::runtime_error(where + ": element " + std::to_string(i) + ": token id " + std::to_string(id) +
                             " >= vocab_size " + std::to_string(vocab));
}

std::vector<int32_t> parse_tokens_json(const std::string& text, const std::string& where, int64_t vocab) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw std::runtime_error(where + ": the token file is empty");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_array()) throw std::runtime_error(where + ": expected a JSON array of token ids");
  std::vector<int32_t> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); i++) {
    if (!j[i].is_number_integer())
      throw std::runtime_error(where + ": element " + std::to_string(i) + " is not an integer");
    int64_t id = j[i].get<int64_t>();
    check_id(id, i, vocab, where);
    out.push_back(int32_t(id));
  }
  if (out.empty()) throw std::runtime_error(where + ": the token file is empty");
  return out;
}

std::vector<int32_t> read_tokens(const std::string& path, int64_t vocab) {
  std::string bytes = read_file(path);
  const bool raw = path.size() >= 4 && path.substr(path.size() - 4) == ".u32";
  if (!raw) return parse_tokens_json(bytes, path, vocab);
  if (bytes.size() % 4 != 0)
    throw std::runtime_error(path + ": size " + std::to_string(bytes.size()) +
                             " is not a multiple of 4 (uint32 tokens)");
  if (bytes.empty()) throw std::runtime_error(path + ": the token file is empty");
  std::vector<int32_t> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); i++) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(bytes.data()) + 4 * i;
    uint32_t v = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
    check_id(int64_t(v), i, vocab, path);
    out[i] = int32_t(v);
  }
  return out;
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(path + ": cannot be written");
  bool ok = std::fwrite(data, 1, n, f) == n;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": write failed");
  }
}

std::string xxh64_hex(const void* data, size_t n) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(XXH64(data, n, 0)));
  return buf;
}

}  // namespace hkv
