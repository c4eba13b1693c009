// Data of models with several inputs: synthetic further inputs (token ids in
// the vocabulary, ones for a mask, normal floats) leave the first input and the labels as a
// one-input set has them; split_validation and gather_more keep every input's samples together.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "runtime/data/data.h"

namespace pt {
namespace {

DataSpec two_input_spec() {
  DataSpec spec;
  spec.sample_dims = {4};
  spec.input_dtype = DType::kInt64;
  spec.input_vocab = 9;
  spec.input_name = "input_ids";
  spec.num_classes = 3;
  spec.more_inputs = {{"attention_mask", {4}, DType::kInt64, 0}, {"type_ids", {4}, DType::kInt32, 2},
                      {"extra", {2}, DType::kFloat32, 0}, {"flags", {4}, DType::kBool, 0}};
  return spec;
}

TEST(MultiInputData, SyntheticFurtherInputs) {
  DataSpec spec = two_input_spec();
  Dataset d = synthetic_dataset(spec, 50, 7);
  DataSpec one = spec;
  one.more_inputs.clear();
  Dataset o = synthetic_dataset(one, 50, 7);
  // The first input and the labels are those of the one-input set, bit for bit.
  ASSERT_EQ(d.x.bytes(), o.x.bytes());
  EXPECT_EQ(std::memcmp(d.x.data(), o.x.data(), d.x.bytes()), 0);
  EXPECT_EQ(std::memcmp(d.y.data(), o.y.data(), d.y.bytes()), 0);
  ASSERT_EQ(d.more.size(), 4u);
  EXPECT_EQ(d.more[0].dims(), (Dims{50, 4}));
  for (int64_t i = 0; i < d.more[0].size(); ++i) EXPECT_EQ(d.more[0].as<int64_t>()[i], 1);  // a mask: ones
  std::vector<int> seen(2, 0);
  for (int64_t i = 0; i < d.more[1].size(); ++i) {
    const int32_t v = d.more[1].as<int32_t>()[i];
    ASSERT_TRUE(v >= 0 && v < 2) << v;
    ++seen[v];
  }
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < d.more[2].size(); ++i) {
    s += d.more[2].as<float>()[i];
    s2 += d.more[2].as<float>()[i] * d.more[2].as<float>()[i];
  }
  EXPECT_LT(std::abs(s / 100), 0.3);
  EXPECT_GT(s2 / 100, 0.5);
  EXPECT_EQ(d.more[3].dtype(), DType::kBool);
  for (int64_t i = 0; i < d.more[3].size(); ++i) EXPECT_EQ(d.more[3].get_double(i), 1.0);
}

TEST(MultiInputData, SplitAndGatherKeepSamplesTogether) {
  DataSpec spec;
  spec.sample_dims = {3};
  spec.input_dtype = DType::kFloat32;
  spec.num_classes = 5;
  spec.more_inputs = {{"mask", {2}, DType::kInt64, 1000}};
  Dataset d = synthetic_dataset(spec, 40, 3);
  // Mark sample i in every array: x[i][0] = i, mask[i][0] = 1000 + i, y[i] = i % 5.
  for (int64_t i = 0; i < 40; ++i) {
    d.x.as<float>()[i * 3] = static_cast<float>(i);
    d.more[0].as<int64_t>()[i * 2] = 1000 + i;
    d.y.as<int64_t>()[i] = i % 5;
  }
  Dataset val = split_validation(&d, 0.25, 11);
  ASSERT_EQ(val.size(), 10);
  ASSERT_EQ(d.size(), 30);
  ASSERT_EQ(val.more.size(), 1u);
  ASSERT_EQ(d.more[0].dims(), (Dims{30, 2}));
  for (const Dataset* p : {&d, &val})
    for (int64_t i = 0; i < p->size(); ++i) {
      const int64_t id = static_cast<int64_t>(p->x.as<float>()[i * 3]);
      EXPECT_EQ(p->more[0].as<int64_t>()[i * 2], 1000 + id);
      EXPECT_EQ(p->y.as<int64_t>()[i], id % 5);
    }
  std::vector<int64_t> order(30);
  std::iota(order.rbegin(), order.rend(), 0);  // reversed
  HostTensor x(DType::kFloat32, {4, 3}), y(DType::kInt64, {4}), m(DType::kInt64, {4, 2});
  ASSERT_TRUE(gather_batch(d, order, 28, 0, &x, &y).is_ok());  // wraps around: samples order[28], order[29], order[0], order[1]
  ASSERT_TRUE(gather_more(d, order, 28, 0, {&m}).is_ok());
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t s = order[(28 + i) % 30];
    EXPECT_EQ(x.as<float>()[i * 3], d.x.as<float>()[s * 3]);
    EXPECT_EQ(m.as<int64_t>()[i * 2], d.more[0].as<int64_t>()[s * 2]);
    EXPECT_EQ(m.as<int64_t>()[i * 2 + 1], d.more[0].as<int64_t>()[s * 2 + 1]);
  }
}

}  // namespace
}  // namespace pt
