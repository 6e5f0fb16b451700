// Token files: a JSON array of integers, or raw little-endian uint32 (a file ending in `.u32`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hkv {

// Reads a token file. Throws std::runtime_error naming the file (and the element) on: a missing file, bad
// JSON, a non-integer or negative element, a .u32 file whose size is not a multiple of 4, an empty file,
// or (when vocab > 0) an id >= vocab.
std::vector<int32_t> read_tokens(const std::string& path, int64_t vocab = 0);
std::vector<int32_t> parse_tokens_json(const std::string& text, const std::string& where, int64_t vocab = 0);

// Writes a file atomically: to path + ".tmp", then renamed. Throws naming the path if it cannot.
void write_file_atomic(const std::string& path, const void* data, size_t n);

// Reads a whole file; throws naming the path.
std::string read_file(const std::string& path);

// xxHash64 (seed 0) of bytes, as 16 lowercase hex digits.
std::string xxh64_hex(const void* data, size_t n);

}  // namespace hkv
