// SHA-256 (FIPS 180-4), self-contained: the kernel cache checks each entry's contents against it before
// loading the entry, so a truncated or altered shared object is rebuilt instead of crashing the process.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace thunder::runtime {

/// Incremental SHA-256: update() any number of times, then digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  /// The 32-byte digest; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t used_ = 0;
  uint64_t total_ = 0;
};

/// The SHA-256 of `data`, as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);
/// Lowercase hex of bytes.
std::string to_hex(const uint8_t* data, size_t size);

}  // namespace thunder::runtime
