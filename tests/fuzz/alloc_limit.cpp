// Fuzz builds without ASan (PIPETRAIN_FUZZ_SANITIZERS=undefined or none): libFuzzer's -malloc_limit_mb
// works through ASan's allocator hooks only, so these builds replace the global operator new with one
// that aborts on a request over 1 GiB (tools/fuzz.sh's -malloc_limit_mb=1024): a size read from a file
// and not checked is still a finding. It sees C++ allocations (ours, ONNX's, protobuf's), not malloc
// from C code; the ASan build's replay of the corpus sees both.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <new>

namespace {

constexpr std::size_t kAllocLimit = std::size_t{1024} << 20;

void* checked_alloc(std::size_t n) {
  if (n > kAllocLimit) {
    std::fprintf(stderr, "==%d== ERROR: fuzz alloc limit: operator new(%zu) is over 1024 MiB (-malloc_limit_mb)\n",
                 static_cast<int>(getpid()), n);
    std::abort();
  }
  if (n == 0) n = 1;
  for (;;) {
    if (void* p = std::malloc(n)) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

void* checked_alloc_nothrow(std::size_t n) noexcept {
  try {
    return checked_alloc(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

}  // namespace

void* operator new(std::size_t n) { return checked_alloc(n); }
void* operator new[](std::size_t n) { return checked_alloc(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return checked_alloc_nothrow(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return checked_alloc_nothrow(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
