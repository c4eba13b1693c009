// .npy reading and writing, dataset validation, batch gathering.
#include "runtime/data/data.h"
#include "core/file.h"
#include "core/hash.h"
#include "runtime/data/npy.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace pt {

namespace fs = std::filesystem;

namespace {

// Header text echoed in a one-line message: bytes outside printable ASCII escaped as \xNN.
std::string printable(const std::string& s) {
  std::string out;
  for (const unsigned char c : s.substr(0, s.find_last_not_of(' ') + 1)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

Expected<DType> npy_dtype(const std::string& descr, const std::string& path) {
  static const std::pair<const char*, DType> table[] = {
      {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64}, {"<i8", DType::kInt64}, {"<i4", DType::kInt32},
      {"<i2", DType::kInt16},   {"<u2", DType::kUint16},  {"|u1", DType::kUint8}, {"|i1", DType::kInt8},
      {"|b1", DType::kBool},    {"<u1", DType::kUint8}};
  for (auto& [d, t] : table)
    if (descr == d) return t;
  return invalid_input(path + ": unsupported .npy dtype '" + printable(descr) +
                       "' (little-endian float32, float64, int64, int32, int16, uint16, uint8, int8, bool)");
}

std::string header_value(const std::string& h, const std::string& key) {
  auto p = h.find("'" + key + "'");
  if (p == std::string::npos) return "";
  p = h.find(':', p);
  if (p == std::string::npos) return "";
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (h[p] == '\'') {
    auto e = h.find('\'', p + 1);
    return h.substr(p + 1, e - p - 1);
  }
  if (h[p] == '(') return h.substr(p, h.find(')', p) - p + 1);
  auto e = h.find_first_of(",}", p);
  return h.substr(p, e - p);
}

}  // namespace

Expected<NpyHeader> read_npy_header(const std::string& path) {
  RETURN_IF_ERROR(check_regular_file(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_input(path + ": cannot be opened");
  char magic[8];
  in.read(magic, 8);
  if (in.gcount() != 8 || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return invalid_input(path + ": not a .npy file (bad magic)");
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) return invalid_input(path + ": cannot be read: " + ec.message());
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint16_t h16;
    in.read(reinterpret_cast<char*>(&h16), 2);
    hlen = h16;
  } else {
    in.read(reinterpret_cast<char*>(&hlen), 4);
  }
  // Nothing is allocated from a size the file claims before it is checked against the file.
  const uint64_t header_end = (magic[6] == 1 ? 10 : 12) + static_cast<uint64_t>(hlen);
  if (!in || header_end > file_bytes)
    return invalid_input(path + ": truncated .npy header (it claims " + std::to_string(hlen) + " bytes, the file has " +
                         std::to_string(file_bytes) + ")");
  std::string h(hlen, '\0');
  in.read(h.data(), hlen);
  if (!in) return invalid_input(path + ": truncated .npy header");
  if (header_value(h, "fortran_order") == "True") return invalid_input(path + ": Fortran-order arrays are not supported");
  ASSIGN_OR_RETURN(DType dt, npy_dtype(header_value(h, "descr"), path));
  std::string shape = header_value(h, "shape");
  Dims dims;
  std::stringstream ss(shape.size() > 2 ? shape.substr(1, shape.size() - 2) : "");
  std::string tok;
  const uint64_t data_bytes = file_bytes - header_end;
  uint64_t elements = 1;
  bool too_big = false;
  while (std::getline(ss, tok, ',')) {
    const size_t b = tok.find_first_not_of(' ');
    if (b == std::string::npos) continue;
    const size_t e = tok.find_last_not_of(' ');
    const std::string num = tok.substr(b, e - b + 1);
    if (num.empty() || num.size() > 18 || num.find_first_not_of("0123456789") != std::string::npos)
      return invalid_input(path + ": bad .npy shape " + printable(shape) + " (dimensions must be non-negative integers)");
    const int64_t d = std::stoll(num);
    dims.push_back(d);
    if (d > 0 && elements > data_bytes / static_cast<uint64_t>(d)) too_big = true;
    else elements *= static_cast<uint64_t>(d);
  }
  if (too_big || elements * dtype_size(dt) > data_bytes)
    return invalid_input(path + ": truncated: header says " + shape + " " + dtype_name(dt) + ", more than the " +
                         std::to_string(data_bytes) + " bytes of data the file holds");
  return NpyHeader{dt, dims, header_end};
}

Expected<HostTensor> read_npy(const std::string& path) {
  ASSIGN_OR_RETURN(NpyHeader hd, read_npy_header(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_input(path + ": cannot be opened");
  in.seekg(static_cast<std::streamoff>(hd.offset));
  HostTensor t(hd.dtype, hd.dims);
  in.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(t.bytes()));
  if (static_cast<size_t>(in.gcount()) != t.bytes())
    return invalid_input(path + ": truncated: header says " + dims_str(hd.dims) + " " + dtype_name(hd.dtype) + " (" +
                         std::to_string(t.bytes()) + " bytes), the file holds " + std::to_string(in.gcount()));
  return t;
}

Status write_npy(const std::string& path, const HostTensor& t) {
  const char* descr = nullptr;
  switch (t.dtype()) {
    case DType::kFloat32: descr = "<f4"; break;
    case DType::kFloat64: descr = "<f8"; break;
    case DType::kInt64: descr = "<i8"; break;
    case DType::kInt32: descr = "<i4"; break;
    case DType::kInt16: descr = "<i2"; break;
    case DType::kUint16: descr = "<u2"; break;
    case DType::kUint8: descr = "|u1"; break;
    case DType::kInt8: descr = "|i1"; break;
    case DType::kBool: descr = "|b1"; break;
    default: return internal_error("write_npy: unsupported dtype");
  }
  std::string shape = "(";
  for (size_t i = 0; i < t.dims().size(); ++i) shape += std::to_string(t.dims()[i]) + (t.dims().size() == 1 || i + 1 < t.dims().size() ? "," : "");
  shape += ")";
  std::string h = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return invalid_input(path + ": cannot be written");
    out.write("\x93NUMPY\x01\x00", 8);
    uint16_t hl = static_cast<uint16_t>(h.size());
    out.write(reinterpret_cast<const char*>(&hl), 2);
    out.write(h.data(), h.size());
    out.write(static_cast<const char*>(t.data()), t.bytes());
    if (!out) return invalid_input(path + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return invalid_input(path + ": rename failed: " + ec.message());
  return Status::ok();
}

bool converts_to_float(DType t) {
  return t == DType::kUint8 || t == DType::kInt8 || t == DType::kUint16 || t == DType::kInt16 || t == DType::kInt32 ||
         t == DType::kInt64;
}

HostTensor convert_input(const HostTensor& x, bool scale_pixels) {
  // Integer samples for a float input are converted. Unsigned 8- and 16-bit ones are pixels and
  // get scaled to [0, 1] by their full range (255, 65535; 16-bit PNG/TIFF convention); signed and
  // wider integers have no such range and stay as they are.
  const DType xt = x.dtype();
  HostTensor f = cast_tensor(x, DType::kFloat32);
  const float scale = xt == DType::kUint8 ? 1.0f / 255.0f : xt == DType::kUint16 ? 1.0f / 65535.0f : 1.0f;
  if (scale_pixels && scale != 1.0f) {
    float* p = f.as<float>();
    for (int64_t i = 0; i < f.size(); ++i) p[i] *= scale;
  }
  return f;
}

// Checks a loaded input array against the model input (dtype after conversion, sample dims).
Status check_input_shape(const Dims& dims, DType file_dtype, const std::string& xp, const Dims& sample_dims, DType want) {
  if (dims.empty()) return invalid_input(xp + ": a scalar; expected [N, ...] samples");
  if (dims[0] == 0) return invalid_input(xp + ": no samples (its first dimension is 0)");
  const DType got = converts_to_float(file_dtype) && want == DType::kFloat32 ? DType::kFloat32 : file_dtype;
  if (got != want) return invalid_input(xp + ": dtype " + dtype_name(got) + ", the model input wants " + dtype_name(want));
  Dims sample(dims.begin() + 1, dims.end());
  if (sample != sample_dims && numel(sample) != numel(sample_dims))
    return invalid_input(xp + ": samples are " + dims_str(sample) + " (" + std::to_string(numel(sample)) +
                         " values), the model input wants " + dims_str(sample_dims) + " (" +
                         std::to_string(numel(sample_dims)) + ")");
  return Status::ok();
}

namespace {

// Converts integer samples for a float input and checks a loaded input array against the model
// input (dtype, sample dims; samples of the right element count are reshaped), then its values: float samples finite, token ids within the vocabulary of the embedding they
// index (vocab > 0; Gather's range [-vocab, vocab)), each refusal naming the file and the sample.
Status check_input_array(HostTensor* x, const std::string& xp, const Dims& sample_dims, DType want, bool scale_pixels,
                         int64_t vocab) {
  RETURN_IF_ERROR(check_input_shape(x->dims(), x->dtype(), xp, sample_dims, want));
  const int64_t n = x->dims()[0];
  if (want == DType::kFloat32 && converts_to_float(x->dtype())) *x = convert_input(*x, scale_pixels);
  Dims nd = sample_dims;
  nd.insert(nd.begin(), n);
  x->reshape(nd);
  const int64_t per = n > 0 ? x->size() / n : 1;
  auto bad = [&](int64_t i, const std::string& what) {
    return invalid_input(xp + ": sample " + std::to_string(i / per) + " (value " + std::to_string(i % per) + ") " + what);
  };
  if (x->dtype() == DType::kFloat32 || x->dtype() == DType::kFloat64) {
    for (int64_t i = 0; i < x->size(); ++i) {
      const double v = x->dtype() == DType::kFloat32 ? x->as<float>()[i] : x->as<double>()[i];
      if (!std::isfinite(v)) return bad(i, "is " + std::string(std::isnan(v) ? "NaN" : "infinite") + "; the inputs must be finite");
    }
  } else if (vocab > 0 && (x->dtype() == DType::kInt64 || x->dtype() == DType::kInt32)) {
    for (int64_t i = 0; i < x->size(); ++i) {
      const int64_t id = x->dtype() == DType::kInt64 ? x->as<int64_t>()[i] : x->as<int32_t>()[i];
      if (id < -vocab || id >= vocab)
        return bad(i, "is token id " + std::to_string(id) + ", outside the model's vocabulary (the embedding's " +
                          std::to_string(vocab) + " rows)");
    }
  }
  return Status::ok();
}

}  // namespace

std::string input_file_name(const std::string& input_name) {
  std::string f;
  for (char c : input_name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    f += ok ? c : '_';
  }
  if (f.empty() || f == "." || f == "..") f = "_" + f;
  return f + ".npy";
}

Expected<NpyFolder> find_npy_files(const std::string& dir, const DataSpec& spec) {
  std::error_code ec;
  const bool several = !spec.more_inputs.empty();
  if (!fs::is_directory(dir, ec))
    return invalid_input(dir + ": not a folder (expected " + (several ? "x0.npy, x1.npy, ..." : "x.npy") +
                         " and y.npy inside, or 'synthetic')");
  NpyFolder f;
  const std::string xp = (fs::path(dir) / "x.npy").string();
  f.y = (fs::path(dir) / "y.npy").string();
  f.names = {"x.npy"};
  // Several inputs: x0.npy, x1.npy, ... in graph order, or <input name>.npy each.
  if (several) {
    std::vector<std::string> numbered, named;
    std::string names;
    for (size_t k = 0; k <= spec.more_inputs.size(); ++k) {
      const std::string& name = k == 0 ? spec.input_name : spec.more_inputs[k - 1].name;
      numbered.push_back("x" + std::to_string(k) + ".npy");
      named.push_back(input_file_name(name));
      names += (k ? ", " : "") + name;
    }
    if (fs::exists(fs::path(dir) / numbered[0])) f.names = numbered;
    else if (fs::exists(fs::path(dir) / named[0])) f.names = named;
    else
      return invalid_input(dir + ": the model has " + std::to_string(numbered.size()) + " data inputs (" + names +
                           "): expected " + numbered[0] + ", " + numbered[1] + ", ... or " + named[0] + ", " + named[1] +
                           ", ... and y.npy" +
                           (fs::exists(xp) ? std::string(" (x.npy is the one-input form)") : std::string()));
    for (const std::string& n : f.names)
      if (!fs::exists(fs::path(dir) / n)) return invalid_input(dir + ": " + n + " is missing");
  }
  for (const std::string& n : f.names) f.x.push_back((fs::path(dir) / n).string());
  for (const auto& p : {f.x[0], f.y})
    if (!fs::exists(p)) return invalid_input(dir + ": " + fs::path(p).filename().string() + " is missing");
  if (several) {
    f.source = dir + " (";
    for (const std::string& n : f.names) f.source += n + " + ";
    f.source += "y.npy)";
  } else {
    f.source = dir + " (x.npy + y.npy)";
  }
  return f;
}

Status check_counts(const NpyFolder& f, size_t k, int64_t n, int64_t nk, const std::string& dir) {
  if (nk == n) return Status::ok();
  return invalid_input(dir + ": " + f.names[0] + " holds " + std::to_string(n) + " samples, " + f.names[k] + " holds " +
                       std::to_string(nk) + " (every input file and y.npy must hold the same count)");
}

Status check_labels(HostTensor* y, const std::string& yp, int64_t n, const std::string& xname, const DataSpec& spec) {
  if (y->dims().empty() || y->dims()[0] != n)
    return invalid_input(yp + ": holds " + (y->dims().empty() ? std::string("a scalar") : std::to_string(y->dims()[0])) +
                         " labels for " + std::to_string(n) + " samples in " + xname);
  if (y->dtype() != spec.label_dtype) {
    const DType yt = y->dtype();
    if (spec.label_dtype == DType::kInt64 && (yt == DType::kInt32 || yt == DType::kUint8 || yt == DType::kInt8 ||
                                              yt == DType::kInt16 || yt == DType::kUint16))
      *y = cast_tensor(*y, DType::kInt64);
    else
      return invalid_input(yp + ": dtype " + dtype_name(y->dtype()) + ", the loss wants " + dtype_name(spec.label_dtype) +
                           (spec.label_dtype == DType::kInt64
                                ? std::string(" class labels") +
                                      (is_floating(yt) ? " (float targets: regression, --loss mse)" : "")
                                : std::string(" targets")));
  }
  Dims ls(y->dims().begin() + 1, y->dims().end());
  if (numel(ls) != numel(spec.label_sample_dims))
    return invalid_input(yp + ": labels " + dims_str(y->dims()) + " do not fit the loss, which wants " +
                         dims_str([&] {
                           Dims w = spec.label_sample_dims;
                           w.insert(w.begin(), n);
                           return w;
                         }()) + " (each label " + dims_str(ls) + ", wanted " + dims_str(spec.label_sample_dims) + ")");
  Dims lnd = spec.label_sample_dims;
  lnd.insert(lnd.begin(), n);
  y->reshape(lnd);
  if (spec.num_classes > 0) {
    const int64_t* v = y->as<int64_t>();
    const int64_t per = n > 0 ? y->size() / n : 1;
    for (int64_t i = 0; i < y->size(); ++i)
      if ((v[i] < 0 || v[i] >= spec.num_classes) && v[i] != spec.ignore_index)
        return invalid_input(yp + ": label " + std::to_string(v[i]) + " of sample " + std::to_string(i / per) +
                             " is outside [0, " + std::to_string(spec.num_classes) + ") and is not the --ignore-index " +
                             std::to_string(spec.ignore_index));
  }
  return Status::ok();
}

Expected<Dataset> load_npy_dataset(const std::string& dir, const DataSpec& spec) {
  ASSIGN_OR_RETURN(NpyFolder f, find_npy_files(dir, spec));
  Dataset d;
  d.source = f.source;
  ASSIGN_OR_RETURN(d.x, read_npy(f.x[0]));
  ASSIGN_OR_RETURN(d.y, read_npy(f.y));
  RETURN_IF_ERROR(check_input_array(&d.x, f.x[0], spec.sample_dims, spec.input_dtype, spec.scale_pixels, spec.input_vocab));
  const int64_t n = d.x.dims()[0];
  for (size_t k = 1; k < f.x.size(); ++k) {
    const InputSpec& is = spec.more_inputs[k - 1];
    ASSIGN_OR_RETURN(HostTensor t, read_npy(f.x[k]));
    RETURN_IF_ERROR(check_input_array(&t, f.x[k], is.sample_dims, is.dtype, spec.scale_pixels, is.vocab));
    RETURN_IF_ERROR(check_counts(f, k, n, t.dims()[0], dir));
    d.more.push_back(std::move(t));
  }
  RETURN_IF_ERROR(check_labels(&d.y, f.y, n, f.names[0], spec));
  return d;
}

Dataset synthetic_dataset(const DataSpec& spec, int64_t n, uint64_t seed) {
  Dataset d;
  d.source = "synthetic";
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Dims xd = spec.sample_dims;
  xd.insert(xd.begin(), n);
  if (spec.input_dtype == DType::kInt64 || spec.input_dtype == DType::kInt32) {
    // Token ids (or other integer inputs): uniform in [0, vocabulary), the embedding's rows.
    d.x = HostTensor(spec.input_dtype, xd);
    std::uniform_int_distribution<int64_t> id(0, std::max<int64_t>(spec.input_vocab, 2) - 1);
    for (int64_t i = 0; i < d.x.size(); ++i) {
      if (spec.input_dtype == DType::kInt64) d.x.as<int64_t>()[i] = id(rng);
      else d.x.as<int32_t>()[i] = static_cast<int32_t>(id(rng));
    }
  } else {
    d.x = HostTensor(DType::kFloat32, xd);
    for (int64_t i = 0; i < d.x.size(); ++i) d.x.as<float>()[i] = normal(rng);
  }
  Dims yd = spec.label_sample_dims;
  yd.insert(yd.begin(), n);
  d.y = HostTensor(spec.label_dtype, yd);
  if (spec.num_classes > 0) {
    std::uniform_int_distribution<int64_t> cls(0, spec.num_classes - 1);
    for (int64_t i = 0; i < d.y.size(); ++i) d.y.as<int64_t>()[i] = cls(rng);
  } else {
    for (int64_t i = 0; i < d.y.size(); ++i) d.y.as<float>()[i] = normal(rng);
  }
  // Further inputs, drawn after the first input and the labels (a one-input set is unchanged):
  // token ids within the vocabulary of the Gather that reads them, ones for an integer input no
  // Gather reads (an attention mask), standard normal values for float inputs.
  for (const InputSpec& is : spec.more_inputs) {
    Dims md = is.sample_dims;
    md.insert(md.begin(), n);
    const bool wide = is.dtype == DType::kFloat32 || is.dtype == DType::kInt64 || is.dtype == DType::kInt32;
    HostTensor t(wide ? is.dtype : DType::kFloat32, md);
    std::uniform_int_distribution<int64_t> id(0, std::max<int64_t>(is.vocab, 1) - 1);
    for (int64_t i = 0; i < t.size(); ++i) {
      if (!wide) t.as<float>()[i] = 1.0f;  // bool / 8- and 16-bit inputs: ones
      else if (is.dtype == DType::kFloat32) t.as<float>()[i] = normal(rng);
      else if (is.dtype == DType::kInt64) t.as<int64_t>()[i] = is.vocab > 0 ? id(rng) : 1;
      else t.as<int32_t>()[i] = static_cast<int32_t>(is.vocab > 0 ? id(rng) : 1);
    }
    d.more.push_back(wide ? std::move(t) : cast_tensor(t, is.dtype));
  }
  return d;
}

Status normalize_dataset(Dataset* d, const std::vector<float>& mean, const std::vector<float>& std) {
  if ((mean.empty() && std.empty()) || d->size() == 0) return Status::ok();
  // Several inputs: the first float one (token ids and masks stay as they are).
  size_t f = 0;
  for (size_t k = 1; k < d->inputs(); ++k)
    if (d->field(f).dtype != DType::kFloat32 && d->field(k + 1).dtype == DType::kFloat32) f = k + 1;
  if (d->field(f).dtype != DType::kFloat32)
    return invalid_input("--mean/--std: the model input is " + std::string(dtype_name(d->field(0).dtype)) + ", not float");
  Dims dims = d->field(f).dims;
  dims.insert(dims.begin(), d->size());
  const int64_t n = d->size();
  const int64_t channels = dims.size() >= 3 ? dims[1] : 1;  // [N, C, ...]; flat samples are one channel
  auto check = [&](const std::vector<float>& v, const char* flag) -> Status {
    if (v.empty() || static_cast<int64_t>(v.size()) == 1 || static_cast<int64_t>(v.size()) == channels) return Status::ok();
    return invalid_input(std::string(flag) + ": " + std::to_string(v.size()) + " values, the samples " +
                         dims_str(Dims(dims.begin() + 1, dims.end())) + " have " + std::to_string(channels) +
                         " channel" + (channels == 1 ? "" : "s") + " (give 1 value or " + std::to_string(channels) + ")");
  };
  RETURN_IF_ERROR(check(mean, "--mean"));
  RETURN_IF_ERROR(check(std, "--std"));
  for (float s : std)
    if (!(s > 0)) return invalid_input("--std: " + std::to_string(s) + " is not positive");
  if (d->stream) {
    d->stream = normalized_source(d->stream, static_cast<int>(f), mean, std);
    return Status::ok();
  }
  HostTensor* xt = f == 0 ? &d->x : &d->more[f - 2];
  const int64_t per_sample = n > 0 ? xt->size() / n : 0;
  float* x = xt->as<float>();
  for (int64_t i = 0; i < n; ++i) normalize_sample(x + i * per_sample, per_sample, channels, mean, std);
  return Status::ok();
}

Dataset split_validation(Dataset* train, double fraction, uint64_t seed) {
  const int64_t n = train->size();
  const int64_t nv = std::clamp<int64_t>(static_cast<int64_t>(n * fraction + 0.5), 0, n - 1);
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed ^ 0x5eed5eedULL);
  std::shuffle(order.begin(), order.end(), rng);
  if (train->stream) {
    Dataset val = *train;
    val.source = "the last " + std::to_string(nv) + " samples of a seeded shuffle of " + train->source;
    val.stats = std::make_shared<LoaderStats>();
    val.stream = subset_source(train->stream, std::vector<int64_t>(order.begin() + (n - nv), order.end()));
    train->stream = subset_source(train->stream, std::vector<int64_t>(order.begin(), order.begin() + (n - nv)));
    val.fingerprint += "/val";
    train->fingerprint += "/train";
    return val;
  }
  auto take = [&](const HostTensor& src, int64_t from, int64_t count) {
    Dims d = src.dims();
    d[0] = count;
    HostTensor t(src.dtype(), d);
    const size_t per = src.bytes() / static_cast<size_t>(n);
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(static_cast<char*>(t.data()) + i * per, static_cast<const char*>(src.data()) + order[from + i] * per, per);
    return t;
  };
  Dataset val;
  val.source = "the last " + std::to_string(nv) + " samples of a seeded shuffle of " + train->source;
  val.x = take(train->x, n - nv, nv);
  val.y = take(train->y, n - nv, nv);
  HostTensor tx = take(train->x, 0, n - nv), ty = take(train->y, 0, n - nv);
  for (HostTensor& m : train->more) {
    val.more.push_back(take(m, n - nv, nv));
    m = take(m, 0, n - nv);
  }
  train->x = std::move(tx);
  train->y = std::move(ty);
  return val;
}

SampleField Dataset::field(size_t f) const {
  if (stream) return stream->fields().at(f);
  const HostTensor& t = f == 0 ? x : f == 1 ? y : more.at(f - 2);
  return SampleField{t.dtype(), t.dims().empty() ? Dims{} : Dims(t.dims().begin() + 1, t.dims().end())};
}

namespace {

// Reads a stream's samples order[begin .. begin + b) (wrapping around) into the rows of out.
Status gather_stream(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t b, int64_t epoch,
                     const std::vector<void*>& out) {
  std::vector<int64_t> idx(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) idx[i] = order[(begin + i) % order.size()];
  Draw draw;
  draw.seed = d.seed;
  draw.epoch = epoch;
  const auto t0 = std::chrono::steady_clock::now();
  Status st = d.stream->read_batch(idx.data(), b, draw, out.data());
  if (d.stats) {
    d.stats->samples += b;
    d.stats->read_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  }
  return st;
}

}  // namespace

Status gather_batch(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t epoch, HostTensor* x,
                    HostTensor* y) {
  const int64_t b = x ? x->dims()[0] : y->dims()[0];
  if (d.stream) {
    std::vector<void*> out(d.stream->fields().size(), nullptr);
    out[0] = x ? x->data() : nullptr;
    out[1] = y ? y->data() : nullptr;
    return gather_stream(d, order, begin, b, epoch, out);
  }
  const size_t xs = d.x.bytes() / d.size(), ys = d.y.bytes() / d.size();
  for (int64_t i = 0; i < b; ++i) {
    int64_t s = order[(begin + i) % order.size()];
    if (x) std::memcpy(static_cast<char*>(x->data()) + i * xs, static_cast<const char*>(d.x.data()) + s * xs, xs);
    if (y) std::memcpy(static_cast<char*>(y->data()) + i * ys, static_cast<const char*>(d.y.data()) + s * ys, ys);
  }
  return Status::ok();
}

Status gather_more(const Dataset& d, const std::vector<int64_t>& order, int64_t begin, int64_t epoch,
                   const std::vector<HostTensor*>& more) {
  if (d.stream) {
    std::vector<void*> out(d.stream->fields().size(), nullptr);
    int64_t b = 0;
    for (size_t k = 0; k < more.size() && k + 2 < out.size(); ++k)
      if (more[k]) {
        out[k + 2] = more[k]->data();
        b = more[k]->dims()[0];
      }
    if (b == 0) return Status::ok();
    return gather_stream(d, order, begin, b, epoch, out);
  }
  for (size_t k = 0; k < more.size() && k < d.more.size(); ++k) {
    HostTensor* t = more[k];
    if (!t) continue;
    const int64_t b = t->dims()[0];
    const size_t per = d.more[k].bytes() / d.size();
    for (int64_t i = 0; i < b; ++i) {
      const int64_t s = order[(begin + i) % order.size()];
      std::memcpy(static_cast<char*>(t->data()) + i * per, static_cast<const char*>(d.more[k].data()) + s * per, per);
    }
  }
  return Status::ok();
}

}  // namespace pt
