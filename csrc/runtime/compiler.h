// The kernel runtime: compiles generated C++ with the system compiler, caches
// shared objects on disk (runtime/kernel_cache.h), loads them, and launches kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace thunder::runtime {

struct CompileOptions {
  std::string compiler = "g++";
  // -ffp-contract=off: every op rounds as an eager op does (GCC's default contracts a * b + c into an FMA,
  // even across a float16 rounding written between them). -fno-trapping-math: a select of two computed values
  // (erf's polynomials, a where) vectorizes without AVX-512's masks -- GCC 12 otherwise keeps such a loop scalar
  // on an AVX2 CPU, since computing the untaken arm could raise a floating-point exception no one reads; values
  // are unchanged.
  std::vector<std::string> flags = {"-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-fPIC", "-shared", "-std=c++17",
                                    "-fwrapv", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=off", "-w",
                                    "-lmvec", "-lm"};
  std::string cache_dir;          // required
  double timeout_seconds = 300;   // the compiler is killed (with its children) after this long; <= 0: no limit
  uint64_t max_cache_bytes = 0;   // entries beyond this are evicted, least recently used first; 0: the default
};

/// A dlopen'd shared object; dlclose'd when the last reference goes.
struct Library {
  void* handle = nullptr;
  explicit Library(void* h) : handle(h) {}
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
};

/// A loaded shared object of kernels. Its kernels' addresses are valid while the Module (or a copy of its
/// `library`) is alive: whatever keeps a kernel address must keep the Module.
struct Module {
  std::shared_ptr<Library> library;
  std::string path;             // the cache entry
  std::string key;
  std::string command;          // the compiler command line, "" on a cache hit
  bool cache_hit = false;
  double compile_seconds = 0;   // 0 on a cache hit
  std::string cache_dir;        // the directory used: options.cache_dir, or a private one (see warning)
  std::string warning;          // why options.cache_dir was not used ("" if it was)

  /// The address of an exported function; throws std::runtime_error if absent.
  void* symbol(const std::string& name) const;
};

/// The cache key: a SHA-256 (first 128 bits, as hex) of the source, compiler version, flags and CPU features.
std::string cache_key(const std::string& source, const CompileOptions& options);

/// Loads the module for `source` from the on-disk cache, compiling it first if the entry is missing or
/// fails a check (see kernel_cache.h). Compilation runs the compiler in a subprocess (no shell, killed
/// after options.timeout_seconds), writes to a temporary file, seals it and renames it into place, so
/// processes compiling the same kernel at once never see a half-written file. A cache directory that is
/// unusable (not this user's, writable by others, read-only, full) is replaced by a private temporary one
/// (Module::warning says why). Throws std::runtime_error with the compiler's output if compilation fails,
/// and with the system's error text (and errno) if a file operation does.
std::shared_ptr<Module> load_module(const std::string& source, const CompileOptions& options);

using Kernel = int (*)(void* const*);  // 0, or nonzero: an index was out of range

}  // namespace thunder::runtime
