// Node attributes: the ONNX attribute kinds the project uses, in a small map with typed getters.
// Kernels read their attributes through AttrMap; they never see ONNX protos.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace pt {

using Attribute = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
                               std::vector<std::string>, std::shared_ptr<const HostTensor>>;

class AttrMap {
 public:
  void set(const std::string& name, Attribute v) { m_[name] = std::move(v); }
  bool has(const std::string& name) const { return m_.count(name) != 0; }
  void erase(const std::string& name) { m_.erase(name); }
  const std::map<std::string, Attribute>& all() const { return m_; }

  int64_t get_int(const std::string& name, int64_t dflt) const { return get<int64_t>(name, dflt); }
  float get_float(const std::string& name, float dflt) const { return get<float>(name, dflt); }
  std::string get_string(const std::string& name, const std::string& dflt) const {
    return get<std::string>(name, dflt);
  }
  std::vector<int64_t> get_ints(const std::string& name, std::vector<int64_t> dflt = {}) const {
    return get<std::vector<int64_t>>(name, std::move(dflt));
  }
  std::vector<float> get_floats(const std::string& name, std::vector<float> dflt = {}) const {
    return get<std::vector<float>>(name, std::move(dflt));
  }
  const HostTensor* get_tensor(const std::string& name) const {
    auto it = m_.find(name);
    if (it == m_.end()) return nullptr;
    auto* p = std::get_if<std::shared_ptr<const HostTensor>>(&it->second);
    return p ? p->get() : nullptr;
  }

 private:
  template <typename T>
  T get(const std::string& name, T dflt) const {
    auto it = m_.find(name);
    if (it == m_.end()) return dflt;
    if (auto* p = std::get_if<T>(&it->second)) return *p;
    return dflt;
  }
  std::map<std::string, Attribute> m_;
};

}  // namespace pt
