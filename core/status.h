// Error channels shared by every library: Status / Expected<T> for user and model errors (with a
// message that names the file, node or flag), PT_CHECK for programming invariants (aborts with
// file:line). Library code never calls exit().
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace pt {

enum class StatusCode {
  kOk = 0,
  kInvalidInput,   // bad model, data or flag: the user can fix it (exit code 2)
  kUnsupported,    // valid input that this build cannot run (exit code 2)
  kDiverged,       // training produced NaN/Inf (exit code 3)
  kInternal,       // a bug or an environment failure (exit code 1)
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with context ("model.onnx: " + message), keeping the code.
  Status with_context(const std::string& prefix) const {
    if (is_ok()) return *this;
    return Status(code_, prefix + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_input(std::string msg) { return {StatusCode::kInvalidInput, std::move(msg)}; }
inline Status unsupported(std::string msg) { return {StatusCode::kUnsupported, std::move(msg)}; }
inline Status internal_error(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

// Process exit code for a status, as the CLI contract defines it (docs/cli.md, "Exit codes").
inline int exit_code_for(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kInvalidInput:
    case StatusCode::kUnsupported: return 2;
    case StatusCode::kDiverged: return 3;
    case StatusCode::kInternal: return 1;
  }
  return 1;
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Expected(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).is_ok()) v_ = Status(StatusCode::kInternal, "Expected built from ok Status");
  }
  bool has_value() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& value() const& { return std::get<T>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const Status& status() const {
    static const Status ok_status;
    return has_value() ? ok_status : std::get<Status>(v_);
  }

 private:
  std::variant<T, Status> v_;
};

// Streams a message, then aborts with file:line: for invariants that only a bug can break.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    os_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::fprintf(stderr, "%s\n", os_.str().c_str());
    std::abort();
  }
  template <typename U>
  CheckFailure& operator<<(const U& v) {
    os_ << v;
    return *this;
  }

 private:
  std::ostringstream os_;
};

}  // namespace pt

#define PT_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::pt::CheckFailure(__FILE__, __LINE__, #cond)

#define PT_CONCAT_INNER(a, b) a##b
#define PT_CONCAT(a, b) PT_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::pt::Status pt_status_ = (expr);          \
    if (!pt_status_.is_ok()) return pt_status_; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, f()): unwraps an Expected or returns its Status.
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(PT_CONCAT(pt_exp_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.has_value()) return tmp.status();  \
  lhs = std::move(tmp).value()
