// The pieces of .npy folder loading that the in-memory and the streamed loaders share, so that the
// two check the same things with the same messages and convert samples with the same arithmetic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/data/data.h"

namespace pt {

struct NpyHeader {
  DType dtype = DType::kUndefined;
  Dims dims;
  uint64_t offset = 0;  // of the data, in bytes from the file's start
};
// The header, checked against the file's size (the data it claims is there).
Expected<NpyHeader> read_npy_header(const std::string& path);

// Integer dtypes that a float input converts (unsigned 8- and 16-bit pixels scaled to [0, 1]).
bool converts_to_float(DType t);
HostTensor convert_input(const HostTensor& x, bool scale_pixels);
// An input array's dims and dtype against the model input (before conversion).
Status check_input_shape(const Dims& dims, DType file_dtype, const std::string& path, const Dims& sample_dims, DType want);

// The files of a .npy folder: x[k] the input arrays in graph order, y the labels.
struct NpyFolder {
  std::vector<std::string> x, names;
  std::string y, source;
};
Expected<NpyFolder> find_npy_files(const std::string& dir, const DataSpec& spec);
// Input array k holds nk samples where the first holds n.
Status check_counts(const NpyFolder& f, size_t k, int64_t n, int64_t nk, const std::string& dir);
// Labels of n samples: cast to int64 class labels where the loss wants them, reshaped, in range.
Status check_labels(HostTensor* y, const std::string& yp, int64_t n, const std::string& xname, const DataSpec& spec);

}  // namespace pt
