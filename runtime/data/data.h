// Training data: .npy folders (x.npy + y.npy) and synthetic data, checked against the model's
// input and label shapes before training starts.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "runtime/data/source.h"

namespace pt {

// Reads a .npy file (format 1.0-3.0, C order, little-endian bool/int/float dtypes).
Expected<HostTensor> read_npy(const std::string& path);
// Writes a .npy file (for tests and tools), atomically.
Status write_npy(const std::string& path, const HostTensor& t);

struct Dataset {
  std::string source;  // "models/digits/train (x.npy + y.npy)", "synthetic"
  HostTensor x;        // [N, ...sample]
  HostTensor y;        // [N] int64 labels or [N, ...] float targets
  // A model with several data inputs: inputs 2, 3, ... in the order of the graph's inputs, each
  // [N, ...] (x is the first). Empty for the one-input form.
  std::vector<HostTensor> more;
  // A set read as it is gathered (image folders, token files, large .npy arrays): x, y and more
  // stay empty. `seed` seeds its augmentation, `stats` counts how the loader keeps up.
  std::shared_ptr<const SampleSource> stream;
  std::shared_ptr<LoaderStats> stats;
  uint64_t seed = 0;
  std::string fingerprint;  // a stream's contents hash (the checkpoint's data hash)
  // Classes of an image folder, in label order (written to the run folder).
  std::vector<std::string> classes;

  int64_t size() const { return stream ? stream->size() : x.empty() ? 0 : x.dims()[0]; }
  size_t bytes() const {  // in memory: every array's; a stream: what it keeps resident
    if (stream) return stream->resident_bytes();
    size_t b = x.bytes() + y.bytes();
    for (const HostTensor& t : more) b += t.bytes();
    return b;
  }
  // Data inputs (1 + further inputs).
  size_t inputs() const { return stream ? stream->fields().size() - 1 : 1 + more.size(); }
  // A sample's field: 0 the first input, 1 the label, 2 + k further input k.
  SampleField field(size_t f) const;
};

// A further data input of a model with several (token ids, an attention mask, ...).
struct InputSpec {
  std::string name;  // the graph input's name (a by-name folder holds <name>.npy)
  Dims sample_dims;
  DType dtype = DType::kFloat32;
  int64_t vocab = 0;  // integer inputs read by a Gather: synthetic ids in [0, vocab); 0: synthetic ones (a mask)
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
  std::string input_name;  // the first input's name (by-name folders)
  std::vector<InputSpec> more_inputs;  // the model's further data inputs, in graph order
  bool scale_pixels = true;  // unsigned integer pixels (IDX, CIFAR, uint8/uint16 x.npy) scaled to [0, 1]; false: raw values
};

// Loads DIR/x.npy and DIR/y.npy; samples whose element count matches the model input are
// reshaped to it. A model with several inputs (spec.more_inputs) reads DIR/x0.npy, x1.npy, ...
// in graph input order, or DIR/<input name>.npy for each input, every one with the same sample
// count. Errors name the file and what is wrong.
// The file of an input in a by-name folder: its name with every character other than ASCII
// letters, digits, '_', '-' and '.' replaced by '_', plus ".npy" ("input/ids:0" -> input_ids_0.npy).
std::string input_file_name(const std::string& input_name);
Expected<Dataset> load_npy_dataset(const std::string& dir, const DataSpec& spec);
// Any supported format, detected: a folder of x.npy + y.npy; MNIST-style IDX (plain or gzip): a
// folder holding one *images*idx3* and one *labels*idx1* file, or a prefix such as
// .../fashion-mnist/train; CIFAR-10/100 binary batches: a .bin file, or a folder of data_batch_*.bin
// (or CIFAR-100's train.bin). Image bytes are scaled to [0, 1]. Dataset::source names the format.
// Image folders (one subfolder of JPEG/PNG files per class), token files and text are read as
// they are gathered (Dataset::stream), as are .npy folders under LoadOptions::stream.
struct LoadOptions {
  enum class Stream { kAuto, kAlways, kNever };
  // .npy folders: kAuto reads them into memory when they take at most a quarter of the machine's
  // memory, and from disk as they are gathered otherwise.
  Stream stream = Stream::kAuto;
  bool crop = false, flip = false;  // --augment crop,flip (image folders, training only)
  bool skip_bad = false;            // --on-bad-sample skip (image folders): else an unreadable image fails the run
  std::string tokenizer;            // --tokenizer bytes: a text file's bytes are its token ids
  DType token_dtype = DType::kUint16;  // a raw token file's ids (--token-dtype uint16|uint32)
  int loader_threads = 1;           // decoding threads of an image folder (the gathering thread among them)
  uint64_t seed = 0;                // augmentation
};
Expected<Dataset> load_dataset(const std::string& path, const DataSpec& spec, const LoadOptions& opts = {});
// The .npy folder as a stream (the mode LoadOptions::Stream::kAlways picks).
Expected<Dataset> stream_npy_dataset(const std::string& dir, const DataSpec& spec);
// Image folders and token/text files (runtime/data/image_folder.cpp, runtime/data/tokens.cpp).
bool is_image_folder(const std::string& path);
Expected<Dataset> load_image_folder(const std::string& dir, const DataSpec& spec, const LoadOptions& opts);
bool is_token_file(const std::string& path, const DataSpec& spec, const LoadOptions& opts);
Expected<Dataset> load_token_file(const std::string& path, const DataSpec& spec, const LoadOptions& opts);

// Per-channel normalisation (--mean, --std) of the first input (several inputs: the first float
// one): x = (x - mean[c]) / std[c], channel c being the
// first sample dimension of an image-like input ([C, H, W], [C, L]); one value applies to every
// element. Errors name the flag and the mismatch.
Status normalize_dataset(Dataset* d, const std::vector<float>& mean, const std::vector<float>& std);

// Splits off the last `fraction` of a seeded shuffle as a validation set (--val-split).
Dataset split_validation(Dataset* train, double fraction, uint64_t seed);

// Random inputs and labels, deterministic in `seed`. Integer inputs get ids uniform in [0, spec.input_vocab), float inputs standard normal values;
// class labels (token labels too) are uniform in [0, num_classes), targets standard normal.
Dataset synthetic_dataset(const DataSpec& spec, int64_t n, uint64_t seed);

// Copies samples order[begin .. begin+count) (wrapping around) into the batch tensors; either
// tensor may be null (not gathered), the batch size is the first dimension of the other. `epoch`
// seeds a stream's augmentation (< 0: evaluation, none). Errors come from streams only (an image
// that does not decode with --on-bad-sample fail).
Status gather_batch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t epoch, HostTensor* x,
                    HostTensor* y);
// The same for the further inputs: more[k] (null: not gathered) receives d.more[k].
Status gather_more(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t epoch,
                   const std::vector<HostTensor*>& more);

}  // namespace pt
