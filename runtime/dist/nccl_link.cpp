// The NCCL link (runtime/dist/nccl_link.h). Ordering: a send records an event on the sender's compute
// stream, the link's stream waits for it and runs the grouped ncclSend calls, and fence() makes
// the sender's stream wait for them before the values are overwritten. A recv runs its grouped
// ncclRecv calls on the receiver's compute stream, straight into the executor's buffers, so the
// kernels queued after it see the message. Messages of one link are sent and received in key
// order (the schedules guarantee it; a key out of order is an internal error, never a mismatch).
#include "runtime/dist/nccl_link.h"

#if PIPETRAIN_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "kernels/device.h"
#include "runtime/dist/cluster.h"
#include "runtime/exec/executor.h"

namespace pt {

namespace {

// The NCCL entry points this link uses, from dlopen.
struct Nccl {
  void* handle = nullptr;
  std::string error;
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
};

template <typename F>
bool bind(Nccl& n, F** f, const char* name) {
  *f = reinterpret_cast<F*>(dlsym(n.handle, name));
  if (!*f) n.error = std::string("libnccl lacks ") + name;
  return *f != nullptr;
}

const Nccl& nccl() {
  static const Nccl n = [] {
    Nccl n;
    const char* path = std::getenv("PIPETRAIN_NCCL_LIBRARY");
    const std::string lib = path && *path ? path : "libnccl.so.2";
    n.handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!n.handle) {
      const char* e = dlerror();
      n.error = "cannot load " + lib + ": " + (e ? e : "unknown error") +
                " (install NCCL, or set PIPETRAIN_NCCL_LIBRARY, or use --oversubscribe for host-staged MPI links)";
      return n;
    }
    if (bind(n, &n.get_unique_id, "ncclGetUniqueId") && bind(n, &n.comm_init_rank, "ncclCommInitRank") &&
        bind(n, &n.comm_destroy, "ncclCommDestroy") && bind(n, &n.comm_abort, "ncclCommAbort") &&
        bind(n, &n.send, "ncclSend") && bind(n, &n.recv, "ncclRecv") && bind(n, &n.group_start, "ncclGroupStart") &&
        bind(n, &n.group_end, "ncclGroupEnd") && bind(n, &n.error_string, "ncclGetErrorString"))
      n.error.clear();
    return n;
  }();
  return n;
}

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::ok();
  return internal_error(std::string(what) + ": NCCL error " + std::to_string(static_cast<int>(r)) + " (" +
                        nccl().error_string(r) + ")");
}

#define PT_NCCL_CHECK(call, what) RETURN_IF_ERROR(nccl_status((call), what))

class NcclLink : public Link {
 public:
  NcclLink(std::vector<const Value*> values, bool sending, std::shared_ptr<Device> device)
      : Link(std::move(values)), sending_(sending), device_(std::move(device)) {}
  ~NcclLink() override {
    if (comm_ && !aborted_) {
      if (copied_) (void)copied_->wait();
      (void)nccl().comm_destroy(comm_);
    }
    if (stream_) device_->destroy_stream(stream_);
  }

  Status init(Cluster& c, int from, int to, int tag) {
    const Nccl& n = nccl();
    if (!n.error.empty()) return unsupported(n.error);
    ncclUniqueId id{};
    if (sending_) {
      PT_NCCL_CHECK(n.get_unique_id(&id), "ncclGetUniqueId");
      if (!c.send(to, kControlKind, tag, &id, sizeof id))
        return internal_error("aborted while sending the NCCL id of a link to rank " + std::to_string(to));
    } else if (!c.recv(from, kControlKind, tag, &id, sizeof id)) {
      return internal_error("aborted while receiving the NCCL id of a link from rank " + std::to_string(from));
    }
    RETURN_IF_ERROR(device_->activate());
    PT_NCCL_CHECK(n.comm_init_rank(&comm_, 2, id, sending_ ? 0 : 1), "ncclCommInitRank");
    if (sending_) {
      ASSIGN_OR_RETURN(stream_, device_->create_stream());
      ASSIGN_OR_RETURN(computed_, device_->create_event());
      ASSIGN_OR_RETURN(copied_, device_->create_event());
    }
    return Status::ok();
  }

  bool send(int64_t key, Executor& from) override {
    if (aborted_) return false;
    Status st = in_order(key, &next_send_);
    if (st.is_ok()) st = do_send(from);
    if (!st.is_ok()) error_ = st;
    return st.is_ok();
  }
  bool recv(int64_t key, Executor& to) override {
    if (aborted_) return false;
    Status st = in_order(key, &next_recv_);
    if (st.is_ok()) st = do_recv(to);
    if (!st.is_ok()) error_ = st;
    return st.is_ok();
  }
  // Also ends NCCL operations blocked on a lost peer (ncclCommAbort may be called from another
  // thread for that), so no stream waits for ever.
  void abort() override {
    if (!aborted_.exchange(true) && comm_) (void)nccl().comm_abort(comm_);
  }
  Status fence(const Executor& from) override { return copied_ ? copied_->block(from.stream()) : Status::ok(); }

 private:
  // Cluster::send/recv kind of the id messages (past the pipeline's MessageKind values).
  static constexpr int kControlKind = 15;

  static Status in_order(int64_t key, int64_t* next) {
    if (*next >= 0 && key <= *next - 1)
      return internal_error("NCCL link: message " + std::to_string(key) + " after " + std::to_string(*next - 1));
    *next = key + 1;
    return Status::ok();
  }
  Status do_send(const Executor& from) {
    const Nccl& n = nccl();
    RETURN_IF_ERROR(device_->activate());
    RETURN_IF_ERROR(computed_->record(from.stream()));
    RETURN_IF_ERROR(computed_->block(stream_));
    PT_NCCL_CHECK(n.group_start(), "ncclGroupStart");
    for (const Value* v : values_) {
      const TensorView t = from.view(v);
      PT_NCCL_CHECK(n.send(t.data, t.bytes(), ncclUint8, 1, comm_, static_cast<cudaStream_t>(stream_)), "ncclSend");
    }
    PT_NCCL_CHECK(n.group_end(), "ncclGroupEnd");
    return copied_->record(stream_);
  }
  Status do_recv(Executor& to) {
    const Nccl& n = nccl();
    RETURN_IF_ERROR(device_->activate());
    PT_NCCL_CHECK(n.group_start(), "ncclGroupStart");
    for (const Value* v : values_) {
      const TensorView t = to.view(v);
      PT_NCCL_CHECK(n.recv(t.data, t.bytes(), ncclUint8, 0, comm_, static_cast<cudaStream_t>(to.stream())), "ncclRecv");
    }
    PT_NCCL_CHECK(n.group_end(), "ncclGroupEnd");
    return Status::ok();
  }

  bool sending_;
  std::shared_ptr<Device> device_;
  ncclComm_t comm_ = nullptr;
  void* stream_ = nullptr;
  std::unique_ptr<Event> computed_, copied_;
  int64_t next_send_ = -1, next_recv_ = -1;
  std::atomic<bool> aborted_{false};
};

}  // namespace

bool nccl_built() { return true; }

std::string nccl_unavailable_reason() { return nccl().error; }

Expected<std::unique_ptr<Link>> make_nccl_link(std::vector<const Value*> values, Cluster& cluster, int from, int to,
                                               int tag, std::shared_ptr<Device> device) {
  if (device->kind() != DeviceKind::kCuda) return internal_error("NCCL links join CUDA stages only");
  auto link = std::make_unique<NcclLink>(std::move(values), cluster.rank() == from, std::move(device));
  RETURN_IF_ERROR(link->init(cluster, from, to, tag));
  return std::unique_ptr<Link>(std::move(link));
}

}  // namespace pt

#else  // no NCCL link in this build

namespace pt {

bool nccl_built() { return false; }
std::string nccl_unavailable_reason() { return "this build has no NCCL link (it needs the CUDA and MPI backends)"; }
Expected<std::unique_ptr<Link>> make_nccl_link(std::vector<const Value*>, Cluster&, int, int, int, std::shared_ptr<Device>) {
  return unsupported(nccl_unavailable_reason());
}

}  // namespace pt

#endif
