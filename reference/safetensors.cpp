#include "reference/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "reference/scalar.h"

namespace hkv {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so must the host be");

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeader = 100'000'000;  // 100 MB, the limit the format's reference reader sets

struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8},   {DType::F32, "F32", 4},         {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::I64, "I64", 8},   {DType::I32, "I32", 4},         {DType::I16, "I16", 2},         {DType::I8, "I8", 1},
    {DType::U64, "U64", 8},   {DType::U32, "U32", 4},         {DType::U16, "U16", 2},         {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

bool dtype_from_name(const std::string& name, DType& out) {
  for (const DTypeInfo& d : kDTypes)
    if (name == d.name) {
      out = d.type;
      return true;
    }
  return false;
}

std::string range_str(uint64_t b, uint64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + "]"; }

// The whole file, mapped read-only. The shared_ptr's deleter unmaps it when the last user lets go.
std::shared_ptr<const void> map_file(const std::string& path, size_t& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw std::runtime_error(path + ": cannot stat: " + std::strerror(err));
  }
  size = size_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw std::runtime_error(path + ": file is " + std::to_string(size) +
                             " bytes, too short for the 8-byte header length (truncated?)");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping stays valid without the descriptor
  if (addr == MAP_FAILED) throw std::runtime_error(path + ": cannot map: " + std::strerror(err));
  return std::shared_ptr<const void>(addr, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
}

// shape: a list of non-negative integers.
std::vector<int64_t> parse_shape(const std::string& where, const json& v) {
  if (!v.is_array()) throw std::runtime_error(where + ": shape " + v.dump() + " is not a list");
  std::vector<int64_t> shape;
  for (const json& d : v) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      throw std::runtime_error(where + ": shape " + v.dump() + " holds something other than non-negative integers");
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

// One header entry -> a Tensor pointing into the data; checks everything but overlap with others.
Tensor parse_entry(const std::string& path, const std::string& name, const json& e, const uint8_t* data,
                   uint64_t data_size, const std::shared_ptr<const void>& keep) {
  Tensor t;
  t.name = name;
  t.file = path;
  t.keep = keep;
  const std::string where = t.where();
  if (!e.is_object()) throw std::runtime_error(where + ": entry is not an object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!e.contains(key)) throw std::runtime_error(where + ": field '" + key + "' is missing");

  const json& dt = e["dtype"];
  if (!dt.is_string() || !dtype_from_name(dt.get<std::string>(), t.dtype))
    throw std::runtime_error(where + ": dtype " + dt.dump() + " is not a known safetensors dtype");
  t.shape = parse_shape(where, e["shape"]);

  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw std::runtime_error(where + ": data_offsets " + off.dump() + " is not two non-negative integers");
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (begin > end)
    throw std::runtime_error(where + ": data_offsets " + range_str(begin, end) + " end before they begin");

  // Bytes the shape needs, guarding against a product that overflows.
  uint64_t need = dtype_size(t.dtype);
  for (int64_t d : t.shape)
    if (__builtin_mul_overflow(need, uint64_t(d), &need))
      throw std::runtime_error(where + ": shape " + t.shape_str() + " is too large");
  if (need != end - begin)
    throw std::runtime_error(where + ": data_offsets " + range_str(begin, end) + " hold " +
                             std::to_string(end - begin) + " bytes but shape " + t.shape_str() + " of " +
                             dtype_name(t.dtype) + " needs " + std::to_string(need));
  if (end > data_size)
    throw std::runtime_error(where + ": data_offsets " + range_str(begin, end) + " run past the end of the data (" +
                             std::to_string(data_size) + " bytes after the header; truncated file?)");
  t.data = data + begin;
  t.nbytes = size_t(end - begin);
  return t;
}

// No byte may belong to two tensors (empty tensors own no bytes).
void check_no_overlap(const std::string& path, const std::map<std::string, Tensor>& tensors, const uint8_t* data) {
  std::vector<const Tensor*> order;
  for (const auto& [name, t] : tensors)
    if (t.nbytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const Tensor* a, const Tensor* b) { return a->data < b->data; });
  for (size_t i = 1; i < order.size(); i++) {
    const Tensor& a = *order[i - 1];
    const Tensor& b = *order[i];
    if (b.data < a.data + a.nbytes) {
      auto off = [data](const Tensor& t) {
        uint64_t begin = uint64_t(t.data - data);
        return range_str(begin, begin + t.nbytes);
      };
      throw std::runtime_error(path + ": tensor '" + b.name + "': data_offsets " + off(b) + " overlap tensor '" +
                               a.name + "' at " + off(a));
    }
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

const char* dtype_name(DType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.type == t) return d.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const DTypeInfo& d : kDTypes)
    if (d.type == t) return d.size;
  return 0;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Tensor::where() const { return file + ": tensor '" + name + "'"; }

std::vector<float> tensor_to_f32(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  for (size_t i = 0; i < out.size(); i++) {
    switch (t.dtype) {
      case DType::F32:
        std::memcpy(&out[i], t.data + 4 * i, 4);
        break;
      case DType::F64: {
        double d;
        std::memcpy(&d, t.data + 8 * i, 8);
        out[i] = float(d);
        break;
      }
      case DType::BF16:
      case DType::F16: {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::BF16 ? f32_from_bf16(h) : f32_from_f16(h);
        break;
      }
      default:
        throw std::runtime_error(t.where() + ": dtype " + dtype_name(t.dtype) +
                                 " is not a float type (want F32, BF16, F16 or F64)");
    }
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  size_t size = 0;
  mapping_ = map_file(path, size);
  const uint8_t* bytes = static_cast<const uint8_t*>(mapping_.get());

  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);  // little-endian (static_assert above)
  if (n > kMaxHeader)
    throw std::runtime_error(path + ": header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > size - 8)
    throw std::runtime_error(path + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                             std::to_string(size) + " bytes)");

  json header;
  try {
    header = json::parse(bytes + 8, bytes + 8 + n);
  } catch (const json::parse_error& e) {
    throw std::runtime_error(path + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw std::runtime_error(path + ": header is not a JSON object");

  const uint8_t* data = bytes + 8 + n;
  const uint64_t data_size = size - 8 - n;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;  // free-form strings; nothing in it describes the data
    tensors_.emplace(name, parse_entry(path, name, entry, data, data_size, mapping_));
  }
  check_no_overlap(path, tensors_, data);
}

const Tensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

// The tensors an index names, each checked to be in the shard the index says.
static std::map<std::string, Tensor> read_index(const std::string& index_path) {
  namespace fs = std::filesystem;
  json index;
  try {
    index = json::parse(read_text_file(index_path));
  } catch (const json::parse_error& e) {
    throw std::runtime_error(index_path + ": not valid JSON: " + e.what());
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw std::runtime_error(index_path + ": field 'weight_map' is missing or not an object");

  const fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, std::unique_ptr<SafetensorsFile>> shards;  // file name -> opened shard
  std::map<std::string, Tensor> out;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      throw std::runtime_error(index_path + ": weight_map['" + name + "']: " + file.dump() + " is not a file name");
    auto& shard = shards[file.get<std::string>()];
    if (!shard) shard = std::make_unique<SafetensorsFile>((dir / file.get<std::string>()).string());
    const Tensor* t = shard->find(name);
    if (!t)
      throw std::runtime_error(shard->path() + ": tensor '" + name + "': listed in " + index_path + " but absent");
    out.emplace(name, *t);
  }
  return out;
}

TensorSet TensorSet::open(const std::string& path) {
  namespace fs = std::filesystem;
  TensorSet set;
  set.source_ = path;
  fs::path p(path);
  if (fs::is_directory(p)) {
    if (fs::exists(p / "model.safetensors.index.json")) {
      p = p / "model.safetensors.index.json";
    } else if (fs::exists(p / "model.safetensors")) {
      p = p / "model.safetensors";
    } else {
      throw std::runtime_error(path + ": holds neither model.safetensors.index.json nor model.safetensors");
    }
  }
  set.source_ = p.string();  // the file itself, for messages about missing tensors
  if (p.extension() == ".json") {
    set.tensors_ = read_index(p.string());
  } else {
    SafetensorsFile file(p.string());
    set.tensors_ = file.tensors();  // each Tensor keeps the mapping alive
  }
  return set;
}

const Tensor* TensorSet::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace hkv
