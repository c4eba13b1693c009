// Executor memory: an allocation that fails is an error naming the value and its size (never an
// abort), with the batch-size hint of the plan's memory model; the executor's accounting of its
// buffers; releasing the graph's initial values once the executor holds its own copies.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "importer/shape_infer.h"
#include "runtime/exec/executor.h"
#include "runtime/exec/memory.h"

namespace pt {
namespace {

size_t vm_size_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

// x [rows, 8] float32 -> Relu -> y.
std::unique_ptr<Graph> relu_graph(int64_t rows) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_value("x", DType::kFloat32, {rows, 8}, ValueKind::kInput);
  g->inputs.push_back(x);
  Value* y = g->add_value("y", DType::kUndefined, {}, ValueKind::kActivation);
  Node* n = g->add_node("Relu", "relu", {x}, {y}, {});
  n->since_version = 13;
  EXPECT_TRUE(infer_node(*n, "test").is_ok());
  g->outputs.push_back(y);
  return g;
}

// Storages of a value (the pass slots of a pipeline stage's saved activations): each keeps its
// own bytes across selections, the kernels read and write the selected one, host() and view() see
// it, and the executor counts them; with separate host copies too.
TEST(ExecutorMemory, StoragesKeepTheirBytesAndTheKernelsUseTheSelectedOne) {
  for (bool separate : {false, true}) {
    auto g = relu_graph(2);
    const Value* x = g->inputs[0];
    const Value* y = g->outputs[0];
    ExecutorOptions eo{true, {x, y}};
    eo.settings.separate_host = separate;
    auto ex = Executor::create(*g, DeviceKind::kCpu, {}, eo);
    ASSERT_TRUE(ex) << ex.status().message();
    const size_t before = (*ex)->allocated_bytes().activations;
    ASSERT_TRUE((*ex)->add_storages(x, 2).is_ok());
    EXPECT_EQ((*ex)->allocated_bytes().activations, before + 2 * 64);  // 16 floats, 64-byte rounded
    auto fill = [&](float v) {
      HostTensor& h = (*ex)->host(x);
      for (int i = 0; i < 16; ++i) h.as<float>()[i] = (i % 2 ? v : -v);
      ASSERT_TRUE((*ex)->upload(x).is_ok());
    };
    auto y0 = [&]() {
      EXPECT_TRUE((*ex)->download(y).is_ok());
      return (*ex)->host(y).as<float>()[1];
    };
    ASSERT_TRUE((*ex)->select_storage(x, 0).is_ok());
    fill(1.0f);
    ASSERT_TRUE((*ex)->select_storage(x, 1).is_ok());
    fill(2.0f);
    ASSERT_TRUE((*ex)->select_storage(x, -1).is_ok());
    fill(3.0f);
    for (int k : {0, 1, -1, 1, 0}) {
      ASSERT_TRUE((*ex)->select_storage(x, k).is_ok());
      ASSERT_TRUE((*ex)->run().is_ok());
      const float want = k == 0 ? 1.0f : k == 1 ? 2.0f : 3.0f;
      EXPECT_EQ(y0(), want) << "storage " << k << (separate ? " (separate host copies)" : "");
      Expected<HostTensor> t = (*ex)->fetch(x);
      ASSERT_TRUE(t);
      EXPECT_EQ(t->as<float>()[1], want);
    }
  }
}

TEST(ExecutorMemory, AllocationFailureIsAnErrorNamingTheValueAndItsSize) {
  // 2^26 x 8 floats: 2147.5 MB, under an address-space limit 256 MB above what the process maps.
  auto g = relu_graph(int64_t{1} << 26);
  char path[] = "/tmp/pt_oom_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = vm_size_bytes() + (size_t{256} << 20);
    if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(4);
    auto ex = Executor::create(*g, DeviceKind::kCpu);
    std::FILE* f = std::fopen(path, "w");
    if (!f) ::_exit(5);
    if (ex) std::fputs("created", f);
    else std::fputs(ex.status().message().c_str(), f);
    std::fclose(f);
    ::_exit(ex ? 2 : 0);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(path);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "the child died of signal " << WTERMSIG(wstatus) << " (an abort?)";
  ASSERT_EQ(WEXITSTATUS(wstatus), 0) << ss.str();
  EXPECT_NE(ss.str().find("out of memory allocating 'x' ([67108864, 8] float32) (2147.5 MB)"), std::string::npos)
      << ss.str();
}

TEST(ExecutorMemory, BatchHintFollowsThePlansModel) {
  // One stage: 100 MB of weights and optimizer state, 1,000 MB of saved activations and workspace
  // at batch 8 (125 MB a sample); under a 1,000 MB limit with 100 MB elsewhere, 800 MB are left
  // for the batch: 6 samples.
  Plan plan;
  plan.batch_size = 8;
  StagePlan s;
  s.in_flight = 1;
  s.saved_bytes = 900'000'000;
  s.workspace_bytes = 100'000'000;
  s.memory_bytes = 100'000'000 + 1'000'000'000;
  plan.stages.push_back(s);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit lim{};
    ::getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = 1'000'000'000;
    if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(4);
    const Status st = with_batch_hint(internal_error(out_of_memory_message("'x'", 10)), plan, 100'000'000);
    const bool ok = st.message().find("a batch size of about 6 (now 8)") != std::string::npos &&
                    st.message().find("(1000 MB)") != std::string::npos;
    if (!ok) std::fprintf(stderr, "%s\n", st.message().c_str());
    ::_exit(ok ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  // Other errors pass unchanged.
  const Status other = internal_error("something else");
  EXPECT_EQ(with_batch_hint(other, plan, 0).message(), "something else");
}

TEST(ExecutorMemory, AccountingAndReleasedInitialValues) {
  auto g = relu_graph(16);
  Value* w = g->add_value("w", DType::kFloat32, {1000}, ValueKind::kParameter);
  HostTensor t(DType::kFloat32, {1000});
  for (int i = 0; i < 1000; ++i) t.as<float>()[i] = static_cast<float>(i);
  w->data = std::make_shared<HostTensor>(std::move(t));
  w->from_initializer = true;
  Value* m = g->add_value("w/momentum", DType::kFloat32, {1000}, ValueKind::kState);
  m->data = std::make_shared<HostTensor>(DType::kFloat32, Dims{1000});
  ExecutorOptions eo;
  eo.keep = {w, m};
  auto ex = Executor::create(*g, DeviceKind::kCpu, {}, eo);
  ASSERT_TRUE(ex) << ex.status().message();
  const Executor::Allocated a = (*ex)->allocated_bytes();
  EXPECT_EQ(a.arena, 0u);
  EXPECT_EQ(a.params, 2 * 4032u);        // w and its momentum, rounded to 64 bytes
  EXPECT_EQ(a.activations, 2 * 512u);    // x and y [16, 8] float32
  EXPECT_EQ(release_zero_state(*g), 4000u);  // the momentum is zeros; w is not state
  EXPECT_EQ(m->data, nullptr);
  EXPECT_NE(w->data, nullptr);
  EXPECT_EQ(release_initial_values(*g, {"w"}), 0u);  // kept by name
  EXPECT_EQ(release_initial_values(*g, {}), 4000u);
  EXPECT_EQ(w->data, nullptr);
  // The executor's copy is untouched.
  EXPECT_EQ((*ex)->tensor(w).as<float>()[999], 999.0f);
  // The resident set first: read after it, the peak covers it even if memory grows in between (the
  // other order failed under ASan, whose own allocations grew the set between the two reads).
  const size_t rss = process_rss_bytes();
  EXPECT_GT(rss, 0u);
  EXPECT_GE(process_peak_rss_bytes(), rss);
}

// ExecutorOptions::adopt: the executor takes the initial data (the same buffer, not a copy); the
// graph is left with an empty tensor, which a later executor treats as no data (zeros), and which
// release_initial_values then drops.
TEST(ExecutorMemory, AdoptedInitialValuesMoveIntoTheExecutor) {
  auto g = relu_graph(16);
  Value* w = g->add_value("w", DType::kFloat32, {1000}, ValueKind::kParameter);
  HostTensor t(DType::kFloat32, {1000});
  for (int i = 0; i < 1000; ++i) t.as<float>()[i] = static_cast<float>(i) + 1;
  w->data = std::make_shared<HostTensor>(std::move(t));
  w->from_initializer = true;
  Value* c = g->add_value("c", DType::kFloat32, {4}, ValueKind::kConstant);
  c->data = std::make_shared<HostTensor>(DType::kFloat32, Dims{4});
  c->data->as<float>()[3] = 7;
  const void* bytes = w->data->data();
  ExecutorOptions eo;
  eo.keep = {w, c};
  eo.adopt = {w};  // not c
  auto ex = Executor::create(*g, DeviceKind::kCpu, {}, eo);
  ASSERT_TRUE(ex) << ex.status().message();
  EXPECT_EQ((*ex)->tensor(w).data(), bytes);  // moved, not copied
  EXPECT_EQ((*ex)->tensor(w).as<float>()[999], 1000.0f);
  EXPECT_EQ((*ex)->tensor(c).as<float>()[3], 7.0f);
  ASSERT_NE(w->data, nullptr);
  EXPECT_EQ(w->data->data(), nullptr);  // the graph's tensor is empty
  EXPECT_EQ(c->data->as<float>()[3], 7.0f);  // a value not adopted is copied
  ExecutorOptions later;
  later.keep = {w};
  auto ex2 = Executor::create(*g, DeviceKind::kCpu, {}, later);
  ASSERT_TRUE(ex2) << ex2.status().message();
  EXPECT_EQ((*ex2)->tensor(w).dims(), Dims{1000});
  EXPECT_EQ((*ex2)->tensor(w).as<float>()[999], 0.0f);  // no data left: zeros
  EXPECT_EQ(release_initial_values(*g, {}), 0u);  // nothing left to release but the empty tensor
  EXPECT_EQ(w->data, nullptr);
  EXPECT_EQ((*ex)->tensor(w).as<float>()[0], 1.0f);
}

}  // namespace
}  // namespace pt
