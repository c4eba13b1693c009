// Token files and text for language models: a file of token ids (raw uint16/uint32 as nanoGPT's
// train.bin, or a 1-D integer .npy) or a text file whose bytes are the ids (--tokenizer bytes),
// cut into sequences of the model's length T with the next tokens as labels: sample i is ids
// [i*T, i*T + T) and its labels [i*T + 1, i*T + T + 1). Read from disk as they are gathered.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "runtime/data/npy.h"
#include "runtime/data/stream_file.h"

namespace pt {

namespace fs = std::filesystem;

namespace {

std::string extension_of(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

bool integer_input(const DataSpec& spec) {
  return spec.input_dtype == DType::kInt64 || spec.input_dtype == DType::kInt32;
}

int64_t id_at(const char* p, DType t) {
  switch (t) {
    case DType::kUint8: return *reinterpret_cast<const uint8_t*>(p);
    case DType::kUint16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::kUint32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    default: { int64_t v; std::memcpy(&v, p, 8); return v; }
  }
}

class TokenStream final : public SampleSource {
 public:
  TokenStream(std::shared_ptr<StreamFile> file, uint64_t offset, DType ids, int64_t seq, int64_t n, DType input, DType label)
      : file_(std::move(file)), offset_(offset), ids_(ids), seq_(seq), n_(n) {
    fields_ = {SampleField{input, {seq}}, SampleField{label, {seq}}};
  }
  int64_t size() const override { return n_; }
  const std::vector<SampleField>& fields() const override { return fields_; }
  size_t resident_bytes() const override { return 0; }

  Status read(int64_t i, const Draw&, void* const* dst) const override {
    const size_t w = dtype_size(ids_);
    thread_local std::vector<char> raw;  // one per loader thread, not one per sample
    raw.resize(static_cast<size_t>(seq_ + 1) * w);
    RETURN_IF_ERROR(file_->read(offset_ + static_cast<uint64_t>(i * seq_) * w, raw.data(), raw.size()));
    for (int f = 0; f < 2; ++f) {
      if (!dst[f]) continue;
      const char* src = raw.data() + (f == 1 ? w : 0);
      for (int64_t t = 0; t < seq_; ++t) {
        const int64_t id = id_at(src + t * w, ids_);
        if (fields_[f].dtype == DType::kInt64) static_cast<int64_t*>(dst[f])[t] = id;
        else static_cast<int32_t*>(dst[f])[t] = static_cast<int32_t>(id);
      }
    }
    return Status::ok();
  }

 private:
  std::shared_ptr<StreamFile> file_;
  uint64_t offset_;
  DType ids_;
  int64_t seq_, n_;
  std::vector<SampleField> fields_;
};

// Every id within the model's vocabulary (the embedding's rows) and its output's classes, in one
// pass over the file (1 MiB at a time); 0: not limited.
Status check_ids(const StreamFile& f, uint64_t offset, DType ids, int64_t count, int64_t vocab, int64_t classes) {
  if (vocab <= 0 && classes <= 0) return Status::ok();
  const int64_t limit = vocab > 0 && (classes <= 0 || vocab <= classes) ? vocab : classes;
  const std::string what = limit == vocab ? "the model's vocabulary (the embedding's rows)" : "the classes of the model's output";
  const size_t w = dtype_size(ids);
  const int64_t per = (1 << 20) / static_cast<int64_t>(w);
  std::vector<char> buf(static_cast<size_t>(per) * w);
  for (int64_t at = 0; at < count; at += per) {
    const int64_t k = std::min(per, count - at);
    RETURN_IF_ERROR(f.read(offset + static_cast<uint64_t>(at) * w, buf.data(), static_cast<size_t>(k) * w));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t id = id_at(buf.data() + j * w, ids);
      if (id < 0 || id >= limit)
        return invalid_input(f.path() + ": token " + std::to_string(id) + " at position " + std::to_string(at + j) +
                             " is outside " + what + " of " + std::to_string(limit));
    }
  }
  return Status::ok();
}

}  // namespace

bool is_token_file(const std::string& path, const DataSpec& spec, const LoadOptions& opts) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const std::string e = extension_of(path);
  if (!opts.tokenizer.empty() || e == ".txt") return true;
  if (!integer_input(spec)) return false;
  return e == ".bin" || e == ".npy";
}

Expected<Dataset> load_token_file(const std::string& path, const DataSpec& spec, const LoadOptions& opts) {
  const std::string e = extension_of(path);
  const bool text = !opts.tokenizer.empty() || e == ".txt";
  if (text && opts.tokenizer != "bytes")
    return invalid_input(path + ": a text file needs a tokenizer: --tokenizer bytes (each byte is a token id, vocabulary 256)");
  if (!integer_input(spec) || spec.sample_dims.size() != 1)
    return invalid_input(path + ": token data feeds a language model whose input is [batch, T] token ids; this model's input is " +
                         dims_str(spec.sample_dims) + " " + dtype_name(spec.input_dtype));
  if (!spec.more_inputs.empty())
    return invalid_input(path + ": token data feeds one input; the model has " + std::to_string(spec.more_inputs.size() + 1) +
                         " (give a .npy folder with one array per input)");
  const int64_t seq = spec.sample_dims[0];
  if (spec.label_dtype != DType::kInt64 || spec.label_sample_dims != Dims{seq})
    return invalid_input(path + ": token data gives next-token labels [batch, " + std::to_string(seq) +
                         "]; the model's loss wants " + dims_str(spec.label_sample_dims) + " " + dtype_name(spec.label_dtype));
  DType ids = text ? DType::kUint8 : opts.token_dtype;
  uint64_t offset = 0;
  if (e == ".npy" && !text) {
    ASSIGN_OR_RETURN(NpyHeader h, read_npy_header(path));
    if (h.dims.size() != 1 ||
        !(h.dtype == DType::kUint16 || h.dtype == DType::kInt32 || h.dtype == DType::kInt64 || h.dtype == DType::kUint8))
      return invalid_input(path + ": a token array must be 1-D uint8, uint16, int32 or int64; it is " + dims_str(h.dims) + " " +
                           dtype_name(h.dtype));
    ids = h.dtype;
    offset = h.offset;
  }
  ASSIGN_OR_RETURN(std::shared_ptr<StreamFile> file, StreamFile::open(path));
  const size_t w = dtype_size(ids);
  if (file->size() == offset) return invalid_input(path + ": empty (no tokens)");
  if ((file->size() - offset) % w != 0)
    return invalid_input(path + ": " + std::to_string(file->size() - offset) + " bytes is not a whole number of " +
                         dtype_name(ids) + " token ids (--token-dtype " + (ids == DType::kUint16 ? "uint32" : "uint16") + "?)");
  const int64_t count = static_cast<int64_t>((file->size() - offset) / w);
  const int64_t n = (count - 1) / seq;
  if (n < 1)
    return invalid_input(path + ": holds " + std::to_string(count) + " tokens, fewer than one sequence of " +
                         std::to_string(seq) + " and its next token");
  RETURN_IF_ERROR(check_ids(*file, offset, ids, count, spec.input_vocab, spec.num_classes));
  Dataset d;
  d.source = path + " (" + std::to_string(count) + " " + (text ? "bytes as tokens" : std::string(dtype_name(ids)) + " token ids") +
             ", " + std::to_string(n) + " sequences of " + std::to_string(seq) + ")";
  d.fingerprint = "tokens:" + file->fingerprint(offset);
  d.stream = std::make_shared<TokenStream>(std::move(file), offset, ids, seq, n, spec.input_dtype, DType::kInt64);
  d.stats = std::make_shared<LoaderStats>();
  return d;
}

}  // namespace pt
