// The Python that the C++ tests run their oracle and model scripts with: $PIPETRAIN_PYTHON when
// set, else Debian's /usr/bin/python3 (which sees python3-numpy, -onnx and -torch), else the
// python3 first on PATH (a GPU machine's virtual environment, where /usr/bin/python3 is bare):
// the first that imports numpy and onnx. Tests that need it skip, saying so, when none does.
#pragma once

#include <cstdlib>
#include <string>

namespace pt::testing {

inline bool python_has_numpy_and_onnx(const std::string& python) {
  return std::system((python + " -c 'import numpy, onnx' > /dev/null 2>&1").c_str()) == 0;
}

// The interpreter as a shell word, or "" when none imports numpy and onnx (looked up once).
inline const std::string& python_or_empty() {
  static const std::string found = [] {
    if (const char* e = std::getenv("PIPETRAIN_PYTHON"); e && *e) return std::string(e);
    for (const char* p : {"/usr/bin/python3", "python3"})
      if (python_has_numpy_and_onnx(p)) return std::string(p);
    return std::string();
  }();
  return found;
}

inline bool have_python() { return !python_or_empty().empty(); }

// The interpreter to start scripts with ("/usr/bin/python3" when none was found, so that the
// failing command names what it tried).
inline std::string python() { return have_python() ? python_or_empty() : std::string("/usr/bin/python3"); }

}  // namespace pt::testing
