// Training data: .npy folders (x.npy + y.npy) and synthetic data, checked against the model's
// input and label shapes before training starts.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace pt {

// Reads a .npy file (format 1.0-3.0, C order, little-endian bool/int/float dtypes).
Expected<HostTensor> read_npy(const std::string& path);
// Writes a .npy file (for tests and tools), atomically.
Status write_npy(const std::string& path, const HostTensor& t);

struct Dataset {
  std::string source;  // "models/digits/train (x.npy + y.npy)", "synthetic"
  HostTensor x;        // [N, ...sample]
  HostTensor y;        // [N] int64 labels or [N, ...] float targets
  int64_t size() const { return x.empty() ? 0 : x.dims()[0]; }
};

// What the model wants per sample; the loader checks the data against it.
struct DataSpec {
  Dims sample_dims;      // model input dims without the batch dimension
  DType input_dtype = DType::kFloat32;
  DType label_dtype = DType::kInt64;
  Dims label_sample_dims;  // [] for class labels
  int64_t num_classes = 0;  // > 0 for class labels
  int64_t ignore_index = -100;  // class labels equal to it are allowed (the loss skips them)
  int64_t input_vocab = 0;  // integer inputs (token ids): synthetic ids are drawn from [0, input_vocab)
  bool scale_pixels = true;  // unsigned integer pixels (IDX, CIFAR, uint8/uint16 x.npy) scaled to [0, 1]; false: raw values
};

// Loads DIR/x.npy and DIR/y.npy; samples whose element count matches the model input are
// reshaped to it. Errors name the file and what is wrong.
Expected<Dataset> load_npy_dataset(const std::string& dir, const DataSpec& spec);
// Any supported format, detected: a folder of x.npy + y.npy; MNIST-style IDX (plain or gzip): a
// folder holding one *images*idx3* and one *labels*idx1* file, or a prefix such as
// .../fashion-mnist/train; CIFAR-10/100 binary batches: a .bin file, or a folder of data_batch_*.bin
// (or CIFAR-100's train.bin). Image bytes are scaled to [0, 1]. Dataset::source names the format.
Expected<Dataset> load_dataset(const std::string& path, const DataSpec& spec);

// Per-channel normalisation (--mean, --std): x = (x - mean[c]) / std[c], channel c being the
// first sample dimension of an image-like input ([C, H, W], [C, L]); one value applies to every
// element. Errors name the flag and the mismatch.
Status normalize_dataset(Dataset* d, const std::vector<float>& mean, const std::vector<float>& std);

// Splits off the last `fraction` of a seeded shuffle as a validation set (--val-split).
Dataset split_validation(Dataset* train, double fraction, uint64_t seed);

// Random inputs and labels, deterministic in `seed`. Integer inputs get ids uniform in [0, spec.input_vocab), float inputs standard normal values;
// class labels (token labels too) are uniform in [0, num_classes), targets standard normal.
Dataset synthetic_dataset(const DataSpec& spec, int64_t n, uint64_t seed);

// Copies samples order[begin .. begin+count) (wrapping around) into the batch tensors; either
// tensor may be null (not gathered), the batch size is the first dimension of the other.
void gather_batch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, HostTensor* x, HostTensor* y);

}  // namespace pt
