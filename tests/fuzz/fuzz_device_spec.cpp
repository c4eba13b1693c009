// Fuzz target: --device-spec JSON files.
#include <cstdint>

#include "partitioner/device_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)pt::load_device_spec(pt::fuzz::write_file("spec.json", data, size));
  return 0;
}
