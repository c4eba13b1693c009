// The finite-difference gradient checker of tests/importer/grad_check_test.cpp as a header, for the
// op suites in other files (grad_check_ops_test.cpp): L = sum(dY * Y) for a random seed dY; the
// analytic dL/dX from build_gradients + the CPU executor against central differences, in double.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "importer/shape_infer.h"
#include "importer/training.h"
#include "runtime/exec/executor.h"

namespace pt::gradcheck {

constexpr double kEps = 1e-6;
constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-5;
constexpr int kMaxReportedMismatches = 5;  // per value

// How random values are drawn: uniform in [lo, hi], with a random sign when `random_sign`
// (so that |x| stays in [lo, hi]: away from kinks and poles).
struct Range {
  double lo = -1.0;
  double hi = 1.0;
  bool random_sign = false;
};
constexpr Range kAwayFromZero{0.2, 1.0, true};
constexpr Range kPositive{0.5, 2.0, false};

// One small graph under test: values with random contents, forward nodes, then check().
class GradCheck {
 public:
  explicit GradCheck(uint32_t seed) : rng_(seed) {}

  Graph& graph() { return g_; }

  // A float64 value with random contents. kInput values are fed after the executor is created
  // (they start zeroed there); others carry their contents in Value::data.
  Value* value(const std::string& name, Dims dims, ValueKind kind = ValueKind::kParameter, Range r = {}) {
    Value* v = g_.add_value(name, DType::kFloat64, dims, kind);
    HostTensor t(DType::kFloat64, dims);
    std::uniform_real_distribution<double> u(r.lo, r.hi);
    std::bernoulli_distribution sign(0.5);
    for (int64_t i = 0; i < t.size(); ++i) t.as<double>()[i] = (r.random_sign && sign(rng_) ? -1 : 1) * u(rng_);
    set_contents(v, std::move(t));
    return v;
  }

  // An int64 value with the given contents (labels, shapes).
  Value* ints(const std::string& name, Dims dims, const std::vector<int64_t>& vals, ValueKind kind) {
    Value* v = g_.add_value(name, DType::kInt64, dims, kind);
    set_contents(v, HostTensor::from<int64_t>(dims, vals));
    return v;
  }

  // A forward node with `n_outputs` fresh outputs, shapes inferred by the importer's shape function.
  Node* node(const std::string& op, std::vector<Value*> inputs, size_t n_outputs = 1, AttrMap attrs = {},
             int since_version = 13) {
    const std::string name = op + "_" + std::to_string(g_.nodes().size());
    std::vector<Value*> outs;
    for (size_t i = 0; i < n_outputs; ++i)
      outs.push_back(g_.add_value(name + "/out" + std::to_string(i), DType::kUndefined, {}, ValueKind::kActivation));
    Node* n = g_.add_node(op, name, std::move(inputs), std::move(outs), std::move(attrs));
    n->since_version = since_version;
    Status st = infer_node(*n, "test");
    EXPECT_TRUE(st.is_ok()) << st.message();
    return n;
  }
  Value* op1(const std::string& op, std::vector<Value*> inputs, AttrMap attrs = {}, int since_version = 13) {
    return node(op, std::move(inputs), 1, std::move(attrs), since_version)->outputs[0];
  }

  // Builds the gradients of L = sum_k sum(dY_k * Y_k) w.r.t. `wrt`, runs them, and compares each
  // element (or, when `max_checked` > 0, that many sampled elements per value, the first and the
  // last included) with central differences of L.
  void check(const std::vector<Value*>& ys, const std::vector<Value*>& wrt, int64_t max_checked = 0) {
    std::vector<std::pair<Value*, Value*>> seeds;
    for (Value* y : ys) {
      ASSERT_EQ(y->dtype, DType::kFloat64) << y->name;
      Value* dy = value(y->name + "/seed", y->dims, ValueKind::kConstant);
      seeds.push_back({y, dy});
    }
    auto grads = build_gradients(g_, seeds, wrt);
    ASSERT_TRUE(grads.has_value()) << grads.status().message();
    auto ex_or = Executor::create(g_, DeviceKind::kCpu);
    ASSERT_TRUE(ex_or.has_value()) << ex_or.status().message();
    Executor& ex = **ex_or;
    for (auto& [v, t] : fed_) {
      HostTensor& dst = ex.tensor(v);
      ASSERT_EQ(dst.bytes(), t.bytes()) << v->name;
      std::memcpy(dst.data(), t.data(), t.bytes());  // the kernels hold views: write through
    }
    Status st = ex.run();
    ASSERT_TRUE(st.is_ok()) << st.message();

    // The outputs after a forward pass. Numeric gradients sum dY * (Y+ - Y-) element by element,
    // so that the many outputs a perturbation leaves alone cancel exactly instead of adding the
    // rounding noise of a large L.
    auto forward = [&]() {
      Status s = ex.run([](Phase p) { return p == Phase::kForward || p == Phase::kLoss; });
      EXPECT_TRUE(s.is_ok()) << s.message();
      std::vector<HostTensor> out;
      for (auto& sd : seeds) out.push_back(ex.tensor(sd.first));
      return out;
    };
    auto loss_delta = [&](const std::vector<HostTensor>& plus, const std::vector<HostTensor>& minus) {
      double d = 0;
      for (size_t k = 0; k < seeds.size(); ++k) {
        const double* pd = ex.tensor(seeds[k].second).as<double>();
        const double* pp = plus[k].as<double>();
        const double* pm = minus[k].as<double>();
        for (int64_t i = 0; i < plus[k].size(); ++i) d += pd[i] * (pp[i] - pm[i]);
      }
      return d;
    };
    for (Value* w : wrt) {
      auto it = grads->find(w);
      ASSERT_NE(it, grads->end()) << "no gradient built for '" << w->name << "'";
      ASSERT_EQ(it->second->dims, w->dims) << w->name;
      const HostTensor analytic = ex.tensor(it->second);  // copy: later forward runs leave it alone
      double* pw = ex.tensor(w).as<double>();
      int mismatches = 0;
      for (int64_t i : checked_elements(w->size(), max_checked)) {
        const double orig = pw[i];
        pw[i] = orig + kEps;
        const std::vector<HostTensor> yp = forward();
        pw[i] = orig - kEps;
        const std::vector<HostTensor> ym = forward();
        pw[i] = orig;
        const double numeric = loss_delta(yp, ym) / (2 * kEps);
        const double a = analytic.as<double>()[i];
        if (!(std::fabs(a - numeric) <= kAtol + kRtol * std::fabs(numeric)) && ++mismatches <= kMaxReportedMismatches)
          ADD_FAILURE() << "d/d" << w->name << " " << dims_str(w->dims) << " element " << i << ": analytic " << a
                        << ", numeric " << numeric;
      }
      EXPECT_EQ(mismatches, 0) << "mismatching elements of d/d" << w->name;
    }
  }

 private:
  std::vector<int64_t> checked_elements(int64_t n, int64_t max_checked) {
    std::vector<int64_t> idx;
    if (max_checked <= 0 || n <= max_checked) {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
      return idx;
    }
    std::set<int64_t> pick = {0, n - 1};
    std::uniform_int_distribution<int64_t> u(0, n - 1);
    while (static_cast<int64_t>(pick.size()) < max_checked) pick.insert(u(rng_));
    return {pick.begin(), pick.end()};
  }

  void set_contents(Value* v, HostTensor t) {
    if (v->kind == ValueKind::kInput) fed_.push_back({v, std::move(t)});
    else v->data = std::make_shared<HostTensor>(std::move(t));
  }

  Graph g_;
  std::mt19937 rng_;
  std::vector<std::pair<Value*, HostTensor>> fed_;
};

inline std::string seed_trace(uint32_t seed, const std::string& what) {
  return what + " (std::mt19937 seed " + std::to_string(seed) + ")";
}

inline AttrMap attrs_of(std::initializer_list<std::pair<const char*, Attribute>> kv) {
  AttrMap m;
  for (const auto& [k, v] : kv) m.set(k, v);
  return m;
}

}  // namespace pt::gradcheck
