// Checkpoint files: the binary layout, the atomic write (temporary file, fsync, rename, fsync of
// the folder), verification on read, and the listing / pruning of a run's checkpoints folder.
#include "runtime/checkpoint/checkpoint.h"
#include "core/file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

namespace pt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr char kMagic[8] = {'P', 'T', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;

void put_u32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_u64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}
uint32_t get_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}


bool known_dtype(int code) {
  switch (static_cast<DType>(code)) {
    case DType::kFloat32: case DType::kUint8: case DType::kInt8: case DType::kUint16: case DType::kInt16:
    case DType::kInt32: case DType::kInt64: case DType::kBool: case DType::kFloat16: case DType::kFloat64:
    case DType::kUint32: case DType::kUint64: case DType::kBFloat16:
      return true;
    default:
      return false;
  }
}

std::string errno_text() { return std::strerror(errno); }

Status write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return invalid_input(path + ": write failed: " + errno_text());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

// Makes a rename inside dir durable.
Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return invalid_input(dir + ": cannot open the folder to fsync it: " + errno_text());
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return invalid_input(dir + ": fsync failed: " + errno_text());
  return Status::ok();
}

// step-<digits>.ckpt -> the step; -1 otherwise.
int64_t step_of(const std::string& file) {
  const std::string pre = "step-", suf = ".ckpt";
  if (file.size() <= pre.size() + suf.size() || file.compare(0, pre.size(), pre) != 0 ||
      file.compare(file.size() - suf.size(), suf.size(), suf) != 0)
    return -1;
  const std::string digits = file.substr(pre.size(), file.size() - pre.size() - suf.size());
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

std::string float_str(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

std::string describe_mismatch(const CheckpointMeta& s, const CheckpointMeta& n) {
  std::vector<std::string> d;
  auto add = [&](const std::string& what, const std::string& a, const std::string& b) {
    d.push_back(what + ": " + a + " in the checkpoint, " + b + " now");
  };
  if (s.model_hash != n.model_hash) add("the model (hash)", s.model_hash, n.model_hash);
  if (s.batch_size != n.batch_size) add("--batch-size", std::to_string(s.batch_size), std::to_string(n.batch_size));
  if (s.lr != n.lr) add("--lr", float_str(s.lr), float_str(n.lr));
  // Another optimizer is the difference to name (its momentum default follows from it).
  if (s.optimizer != n.optimizer) add("--optimizer", s.optimizer, n.optimizer);
  else if (s.momentum != n.momentum) add("--momentum", float_str(s.momentum), float_str(n.momentum));
  if (s.precision != n.precision) add("--precision", s.precision, n.precision);
  if (s.clip_grad_norm != n.clip_grad_norm)
    add("--clip-grad-norm", float_str(s.clip_grad_norm), float_str(n.clip_grad_norm));
  if (s.weight_decay != n.weight_decay) add("--weight-decay", float_str(s.weight_decay), float_str(n.weight_decay));
  if (s.seed != n.seed) add("--seed", std::to_string(s.seed), std::to_string(n.seed));
  if (s.loss != n.loss) add("--loss", s.loss, n.loss);
  if (s.shuffle != n.shuffle) add("--no-shuffle", s.shuffle ? "off" : "on", n.shuffle ? "off" : "on");
  if (!s.lr_schedule.empty() && s.lr_schedule != n.lr_schedule) add("the learning-rate schedule", s.lr_schedule, n.lr_schedule);
  if (s.data_samples != n.data_samples)
    add("the training set (samples)", std::to_string(s.data_samples), std::to_string(n.data_samples));
  else if (s.data_hash != n.data_hash)
    add("the training set (contents hash)", s.data_hash,
        n.data_hash + " (data held in memory and data streamed from disk hash differently: if only --stream-data "
                      "changed, resume in the checkpoint's mode)");
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) out += (i ? "; " : "") + d[i];
  return out;
}

std::string describe_non_finite(const std::map<std::string, HostTensor>& tensors) {
  auto scan = [](const auto* p, int64_t n) -> int64_t {
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(p[i])) return i;
    return -1;
  };
  for (const auto& [name, t] : tensors) {
    const int64_t n = t.size();
    int64_t bad = -1;
    double value = 0;
    if (t.dtype() == DType::kFloat32) {
      bad = scan(t.as<float>(), n);
      if (bad >= 0) value = t.as<float>()[bad];
    } else if (t.dtype() == DType::kFloat64) {
      bad = scan(t.as<double>(), n);
      if (bad >= 0) value = t.as<double>()[bad];
    }
    if (bad >= 0)
      return "'" + name + "' holds " + (std::isnan(value) ? "NaN" : value > 0 ? "+Inf" : "-Inf") + " (element " +
             std::to_string(bad) + " of " + std::to_string(n) + ")";
  }
  return {};
}

Expected<std::string> save_checkpoint(const std::string& dir, int keep, const Checkpoint& c) {
  // A state that went non-finite (a loss can stay finite while weights are NaN: Relu maps NaN to 0)
  // is never saved: the newest checkpoint stays the last good one.
  if (std::string bad = describe_non_finite(c.tensors); !bad.empty())
    return Status(StatusCode::kDiverged, "training diverged by step " + std::to_string(c.step) + ": " + bad +
                                             "; no checkpoint written for it (try a smaller --lr)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return invalid_input(dir + ": cannot create the checkpoints folder: " + ec.message());
  const std::string path = checkpoint_path(dir, c.step);
  RETURN_IF_ERROR(write_checkpoint(path, c));
  RETURN_IF_ERROR(prune_checkpoints(dir, keep));
  return path;
}

void MetricsTail::add(const std::string& row) {
  if (rows > 0) {
    hash = fnv1a64(last.data(), last.size(), hash);
    hash = fnv1a64("\n", 1, hash);
  }
  last = row;
  ++rows;
}

std::vector<std::string> resume_metrics_rows(const Checkpoint& c, const std::string& metrics_path,
                                             std::vector<std::string>* notices) {
  if (!c.legacy_metrics.empty() || c.metrics.rows == 0) return c.legacy_metrics;
  const int64_t want = c.metrics.rows - 1;  // rows 1..n-1 come from the file
  std::vector<std::string> candidates;
  if (!metrics_path.empty()) candidates = {metrics_path + ".partial", metrics_path};
  if (!c.source.empty()) {
    const std::filesystem::path run = std::filesystem::path(c.source).parent_path().parent_path();
    candidates.push_back((run / "metrics.csv.partial").string());
    candidates.push_back((run / "metrics.csv").string());
  }
  std::string why;
  for (const std::string& path : candidates) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) continue;
    std::ifstream f(path);
    std::string line;
    std::vector<std::string> rows;
    uint64_t hash = MetricsTail{}.hash;
    bool header = true;
    while (static_cast<int64_t>(rows.size()) < want && std::getline(f, line)) {
      if (header) {
        header = false;
        if (line.rfind("step,", 0) == 0) continue;
      }
      hash = fnv1a64(line.data(), line.size(), hash);
      hash = fnv1a64("\n", 1, hash);
      rows.push_back(std::move(line));
    }
    if (static_cast<int64_t>(rows.size()) == want && hash == c.metrics.hash) {
      rows.push_back(c.metrics.last);
      return rows;
    }
    if (why.empty())
      why = path + (static_cast<int64_t>(rows.size()) < want ? " holds " + std::to_string(rows.size()) + " rows"
                                                             : " holds other rows");
  }
  if (why.empty()) why = "no metrics.csv";
  if (notices)
    notices->push_back("the metrics of steps 1.." + std::to_string(want) + " were not found (" + why +
                       "); metrics.csv starts at step " + std::to_string(c.metrics.rows));
  return {c.metrics.last};
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / ("step-" + std::to_string(step) + ".ckpt")).string();
}

Status write_checkpoint(const std::string& path, const Checkpoint& c) {
  json j;
  const CheckpointMeta& m = c.meta;
  j["meta"] = {{"model_hash", m.model_hash}, {"batch_size", m.batch_size},     {"lr", m.lr},
               {"momentum", m.momentum},     {"weight_decay", m.weight_decay}, {"seed", m.seed},
               {"loss", m.loss},             {"shuffle", m.shuffle},           {"data_samples", m.data_samples},
               {"data_hash", m.data_hash},   {"lr_schedule", m.lr_schedule},   {"pipeline", m.pipeline},
               {"optimizer", m.optimizer},   {"clip_grad_norm", m.clip_grad_norm}};
  if (m.precision != "fp32") j["meta"]["precision"] = m.precision;
  j["step"] = c.step;
  j["epoch"] = c.epoch;
  j["position"] = c.position;
  j["order"] = c.order;
  j["rng"] = c.rng;
  j["first_loss"] = c.first_loss;
  j["last_loss"] = c.last_loss;
  j["val"] = {{"samples", c.val_samples}, {"loss", c.val_loss}, {"accuracy", c.val_accuracy}};
  {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(c.metrics.hash));
    j["metrics_tail"] = {{"rows", c.metrics.rows}, {"hash", hash}, {"last", c.metrics.last}};
  }
  j["plan"] = c.plan;
  json tensors = json::array();
  uint64_t offset = 0;
  for (const auto& [name, t] : c.tensors) {
    tensors.push_back({{"name", name},
                       {"dtype", dtype_name(t.dtype())},
                       {"dtype_code", static_cast<int>(t.dtype())},
                       {"dims", t.dims()},
                       {"offset", offset},
                       {"bytes", t.bytes()}});
    offset += t.bytes();
  }
  j["tensors"] = std::move(tensors);
  // Non-finite doubles (a NaN loss never reaches here, but be safe) would not survive JSON.
  if (!std::isfinite(c.first_loss) || !std::isfinite(c.last_loss) || !std::isfinite(c.val_loss))
    return internal_error(path + ": non-finite loss in the checkpoint state");
  const std::string text = j.dump();

  uint64_t h = fnv1a64(text.data(), text.size());
  for (const auto& [name, t] : c.tensors) h = fnv1a64(t.data(), t.bytes(), h);
  std::string header(kMagic, sizeof kMagic);
  put_u32(&header, kVersion);
  put_u32(&header, 0);
  put_u64(&header, text.size());
  put_u64(&header, offset);
  put_u64(&header, h);

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return invalid_input(tmp + ": cannot be written: " + errno_text());
  Status st = write_all(fd, header.data(), header.size(), tmp);
  if (st.is_ok()) st = write_all(fd, text.data(), text.size(), tmp);
  for (const auto& [name, t] : c.tensors) {
    if (!st.is_ok()) break;
    st = write_all(fd, static_cast<const char*>(t.data()), t.bytes(), tmp);
  }
  if (st.is_ok() && ::fsync(fd) != 0) st = invalid_input(tmp + ": fsync failed: " + errno_text());
  if (::close(fd) != 0 && st.is_ok()) st = invalid_input(tmp + ": close failed: " + errno_text());
  if (!st.is_ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    return invalid_input(path + ": rename from " + tmp + " failed: " + why);
  }
  std::string dir = fs::path(path).parent_path().string();
  return fsync_dir(dir.empty() ? "." : dir);
}

Expected<Checkpoint> read_checkpoint(const std::string& path) {
  RETURN_IF_ERROR(check_regular_file(path));
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_input(path + ": cannot be read");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (s.size() < kHeaderBytes) return invalid_input(path + ": truncated (" + std::to_string(s.size()) + " bytes, no header)");
  if (std::memcmp(s.data(), kMagic, sizeof kMagic) != 0) return invalid_input(path + ": not an onnx-pipetrain checkpoint (bad magic)");
  const uint32_t version = get_u32(s, 8);
  if (version != kVersion)
    return invalid_input(path + ": checkpoint version " + std::to_string(version) + "; this build reads version " +
                         std::to_string(kVersion));
  const uint64_t json_bytes = get_u64(s, 16), tensor_bytes = get_u64(s, 24), sum = get_u64(s, 32);
  const uint64_t want = kHeaderBytes + json_bytes + tensor_bytes;
  if (json_bytes > s.size() || tensor_bytes > s.size() || want != s.size())
    return invalid_input(path + ": " + (s.size() < want ? "truncated" : "has trailing bytes") + " (" +
                         std::to_string(s.size()) + " bytes, the header says " + std::to_string(want) + ")");
  if (fnv1a64(s.data() + kHeaderBytes, s.size() - kHeaderBytes) != sum)
    return invalid_input(path + ": checksum mismatch (a torn or corrupted file)");

  Checkpoint c;
  try {
    const json j = json::parse(s.begin() + kHeaderBytes, s.begin() + static_cast<std::ptrdiff_t>(kHeaderBytes + json_bytes));
    const json& m = j.at("meta");
    c.meta.model_hash = m.at("model_hash").get<std::string>();
    c.meta.batch_size = m.at("batch_size").get<int64_t>();
    c.meta.lr = m.at("lr").get<float>();
    c.meta.momentum = m.at("momentum").get<float>();
    c.meta.weight_decay = m.at("weight_decay").get<float>();
    c.meta.seed = m.at("seed").get<uint64_t>();
    c.meta.loss = m.at("loss").get<std::string>();
    c.meta.shuffle = m.at("shuffle").get<bool>();
    c.meta.data_samples = m.at("data_samples").get<int64_t>();
    c.meta.data_hash = m.at("data_hash").get<std::string>();
    c.meta.lr_schedule = m.value("lr_schedule", std::string());
    c.meta.pipeline = m.value("pipeline", std::string());
    c.meta.precision = m.value("precision", std::string("fp32"));
    c.meta.optimizer = m.value("optimizer", std::string("sgd-paper"));  // older checkpoints: the only one
    c.meta.clip_grad_norm = m.value("clip_grad_norm", 0.0f);
    c.step = j.at("step").get<int64_t>();
    c.epoch = j.at("epoch").get<int64_t>();
    c.position = j.at("position").get<int64_t>();
    c.order = j.at("order").get<std::vector<int64_t>>();
    c.rng = j.at("rng").get<std::string>();
    c.first_loss = j.at("first_loss").get<double>();
    c.last_loss = j.at("last_loss").get<double>();
    c.val_samples = j.at("val").at("samples").get<int64_t>();
    c.val_loss = j.at("val").at("loss").get<double>();
    c.val_accuracy = j.at("val").at("accuracy").get<double>();
    if (j.contains("metrics_tail")) {
      const json& t = j.at("metrics_tail");
      c.metrics.rows = t.at("rows").get<int64_t>();
      c.metrics.last = t.at("last").get<std::string>();
      const std::string h = t.at("hash").get<std::string>();
      char* end = nullptr;
      c.metrics.hash = std::strtoull(h.c_str(), &end, 16);
      if (h.size() != 16 || end != h.c_str() + 16 || c.metrics.rows < 0)
        return invalid_input(path + ": the metrics tail does not parse");
      if (c.metrics.rows != c.step)
        return invalid_input(path + ": the metrics tail holds " + std::to_string(c.metrics.rows) + " rows for step " +
                             std::to_string(c.step));
    } else {
      c.legacy_metrics = j.at("metrics").get<std::vector<std::string>>();
      for (const std::string& row : c.legacy_metrics) c.metrics.add(row);
    }
    c.plan = j.value("plan", std::vector<std::string>());
    const char* data = s.data() + kHeaderBytes + json_bytes;
    for (const json& t : j.at("tensors")) {
      const std::string name = t.at("name").get<std::string>();
      const int code = t.at("dtype_code").get<int>();
      if (!known_dtype(code)) return invalid_input(path + ": tensor '" + name + "' has unknown dtype " + std::to_string(code));
      const Dims dims = t.at("dims").get<Dims>();
      const uint64_t off = t.at("offset").get<uint64_t>(), bytes = t.at("bytes").get<uint64_t>();
      // The dims are checked against the bytes before anything is allocated: negative or huge dims
      // (a lying JSON section with a valid checksum) are refused, not passed to the allocator.
      uint64_t elems = 1;
      for (int64_t d : dims) {
        if (d < 0 || (d > 0 && elems > tensor_bytes / static_cast<uint64_t>(d)))
          return invalid_input(path + ": tensor '" + name + "' does not fit its dims or the file");
        elems *= static_cast<uint64_t>(d);
      }
      if (elems > tensor_bytes || off > tensor_bytes || bytes > tensor_bytes - off)
        return invalid_input(path + ": tensor '" + name + "' does not fit its dims or the file");
      HostTensor ht(static_cast<DType>(code), dims);
      if (bytes != ht.bytes())
        return invalid_input(path + ": tensor '" + name + "' does not fit its dims or the file");
      if (bytes) std::memcpy(ht.data(), data + off, bytes);
      c.tensors.emplace(name, std::move(ht));
    }
  } catch (const json::exception& e) {
    return invalid_input(path + ": the JSON section is malformed: " + e.what());
  }
  c.source = path;
  return c;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of(e.path().filename().string());
    if (step >= 0 && e.is_regular_file(ec)) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, p] : found) out.push_back(std::move(p));
  return out;
}

Expected<Checkpoint> read_newest_checkpoint(const std::string& dir, std::vector<std::string>* notices,
                                            std::string* path) {
  const std::vector<std::string> all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    auto c = read_checkpoint(*it);
    if (c) {
      if (path) *path = *it;
      return c;
    }
    if (notices) notices->push_back("skipping the damaged checkpoint " + c.status().message());
  }
  if (all.empty()) return invalid_input(dir + ": no checkpoint to resume from (no step-<k>.ckpt files)");
  return invalid_input(dir + ": no intact checkpoint to resume from (all " + std::to_string(all.size()) +
                       " are damaged)");
}

Status prune_checkpoints(const std::string& dir, int keep) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 9 && name.compare(name.size() - 9, 9, ".ckpt.tmp") == 0) fs::remove(e.path(), ec);
  }
  const std::vector<std::string> all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep, 1)) < all.size(); ++i) {
    if (!fs::remove(all[i], ec) && ec) return invalid_input(all[i] + ": cannot be removed: " + ec.message());
  }
  return Status::ok();
}

}  // namespace pt
