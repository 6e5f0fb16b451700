// What the engine's op cases (compare/diff_engine.cpp) share with the GPU tests (tests/gpu_util.h, tests/gpu_ops.cpp):
// device buffers, seeded inputs, random weight matrices on the host and the device, and the records of x that the
// engine's MLX4 products must make. Built only with the CUDA engine.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/kernels.h"
#include "reference/weights.h"

namespace hkv::opcase {

// n elements of T on the device.
template <typename T>
struct DBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DBuf(size_t count) : n(count) { HKV_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T))); }
  explicit DBuf(const std::vector<T>& v) : DBuf(v.size()) { put(v); }
  ~DBuf() { cudaFree(p); }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  void put(const std::vector<T>& v) {
    HKV_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> get() const {
    std::vector<T> v(n);
    HKV_CUDA_CHECK(cudaDeviceSynchronize());
    HKV_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
  // Fill with a byte pattern so that unwritten outputs show: 0xa5 bytes by default (a value no kernel computes); 0xff
  // bytes are NaN in f32 and in bf16.
  void poison(int byte = 0xa5) { HKV_CUDA_CHECK(cudaMemset(p, byte, std::max<size_t>(n, 1) * sizeof(T))); }
};

// n values of N(0, scale²) drawn by std::mt19937_64(seed).
std::vector<float> gaussian(size_t n, uint64_t seed, float scale = 1.0f);

// A row of D values that exercises the cache packers, by kind: 0 gaussian, 1 outliers (every 37th ×40), 2 zeros (one
// of them -0), 3 ± ties of the extreme, 4 tiny (×1e-7), 5 mixed scales (×2^(i mod 8)); others gaussian.
std::vector<float> cache_test_row(int kind, int D, uint64_t seed);

// 12 chunks of 32 values, one of every kind the MLX4 products' records must hold: chunks of one scale each (subnormal,
// tiny, ordinary, huge), zeros, one with an element 2^-40 of its largest, values just under a power of two (X rounds to
// 2^22), then a chunk with an inf and one with a NaN (the last three chunks).
std::vector<float> every_chunk_kind_x();

// A random weight matrix on the host (the oracle's matmul reads m): gaussian values (f32, bf16, f16), or random MLX4
// words with positive scales and negative biases in groups of `group`.
struct HostMatrix {
  Matrix m;
  std::vector<float> f32;
  std::vector<uint16_t> h16, sb;
  std::vector<uint32_t> q;
};
std::unique_ptr<HostMatrix> random_matrix(WType t, int64_t rows, int64_t cols, int group, uint64_t seed);

// Device memory that lives as long as its last holder (cudaFree at the end).
using DeviceKeep = std::vector<std::shared_ptr<void>>;
// m's image on the device; its memory is held in keep.
cuda::DMat to_device(const Matrix& m, DeviceKeep& keep);

// The matrices of a fused launch: the host copies and their device images; matrix i has rows[i] rows and seed seed + i.
struct MatSet {
  std::vector<std::unique_ptr<HostMatrix>> host;
  DeviceKeep keep;
  std::vector<cuda::DMat> dev;
};
MatSet random_matrices(WType t, const std::vector<int64_t>& rows, int64_t cols, int group, uint64_t seed);

// The records (cuda::kXqWords words a 32-element chunk; xq_chunk in cuda/device.cuh) that the engine must make of
// x [rows][n], built from the oracle's x_chunks.
std::vector<uint32_t> expected_records(const float* x, int64_t rows, int64_t n);
// "" if got (at least want.size() words) starts with want's words, else where the first one differs.
std::string record_diff(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want);

}  // namespace hkv::opcase
