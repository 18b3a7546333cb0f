// result.hpp -- errors as values for the core.
//
// Every fallible core function returns Result<T>: either a value or an Error
// with a kind and a human-readable message. Exceptions never leave the core
// (libmilter calls us from C; the policy request path must not unwind).
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace retryguard {

enum class ErrorKind {
    invalid_input,  // bad peer or user input: warn and carry on
    config,         // bad configuration: refuse to start / keep the old config
    io,             // file, socket or store I/O failed
    unavailable,    // a backend (Redis, SQLite busy) did not answer in time
    timeout,        // the caller's deadline passed before the answer
    limit,          // input exceeded a documented limit
    internal,       // a broken invariant of our own
};

const char* to_string(ErrorKind kind) noexcept;

struct Error {
    ErrorKind kind = ErrorKind::internal;
    std::string message;
};

inline Error make_error(ErrorKind kind, std::string message) {
    return Error{kind, std::move(message)};
}

template <typename T>
class [[nodiscard]] Result {
  public:
    Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit by design
    Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

    bool ok() const noexcept { return v_.index() == 0; }
    explicit operator bool() const noexcept { return ok(); }

    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T* operator->() { return &std::get<0>(v_); }
    const T* operator->() const { return &std::get<0>(v_); }
    T& operator*() & { return std::get<0>(v_); }
    const T& operator*() const& { return std::get<0>(v_); }

    const Error& error() const& { return std::get<1>(v_); }
    Error&& error() && { return std::get<1>(std::move(v_)); }

    template <typename U>
    T value_or(U&& fallback) const& {
        return ok() ? value() : static_cast<T>(std::forward<U>(fallback));
    }

  private:
    std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
  public:
    Result() = default;
    Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

    bool ok() const noexcept { return ok_; }
    explicit operator bool() const noexcept { return ok_; }
    const Error& error() const& { return error_; }

  private:
    Error error_;
    bool ok_ = true;
};

using Status = Result<void>;

}  // namespace retryguard
