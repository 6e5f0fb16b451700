// A reader of safetensors files: memory-mapped, read-only, every header entry checked before use.
//
// The format (../shared/model-facts.md): an 8-byte little-endian header length N, N bytes of JSON
//   {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}
// then the data; offsets count from 8 + N, end exclusive; values row-major little-endian.
// A sharded checkpoint is a directory with model.safetensors.index.json ({"weight_map": {name: file}}).
//
// Tensors point into the mapping; `keep` holds the mapping alive, so a hkv::Matrix that shares it
// (Matrix::keep) stays valid after the file object is gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hkv {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2 };
const char* dtype_name(DType t);  // as written in the header: "BF16", "F8_E4M3", ...
size_t dtype_size(DType t);       // bytes per element

struct Tensor {
  std::string name;
  std::string file;  // the file that holds it, for messages
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;     // inside the mapping
  size_t nbytes = 0;                 // = numel() · dtype_size(dtype), checked at open
  std::shared_ptr<const void> keep;  // the mapping

  int64_t numel() const;
  std::string shape_str() const;  // "[64, 8]"
  // "<file>: tensor '<name>'", the start of every message about this tensor
  std::string where() const;
};

// All values of a float tensor (F32, BF16, F16, F64) as fp32; throws naming the tensor for other dtypes.
std::vector<float> tensor_to_f32(const Tensor& t);

// One .safetensors file, mapped and validated: the header length and JSON, each dtype, each shape against
// its byte range, each range inside the data, no two ranges overlapping. Throws std::runtime_error naming
// the file, the tensor and the field.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<const void> mapping_;
  std::map<std::string, Tensor> tensors_;
};

// The tensors of a whole checkpoint, by name, from one file or from the shards an index names.
class TensorSet {
 public:
  // `path`: a directory (with model.safetensors.index.json, else model.safetensors), an index file, or a
  // single .safetensors file.
  static TensorSet open(const std::string& path);

  const std::string& source() const { return source_; }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const Tensor* find(const std::string& name) const;

 private:
  std::string source_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace hkv
