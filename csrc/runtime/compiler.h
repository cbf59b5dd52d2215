// The kernel runtime: compiles generated C++ with the system compiler, caches
// shared objects on disk, loads them, and launches kernels.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace thunder::runtime {

struct CompileOptions {
  std::string compiler = "g++";
  // -ffp-contract=off: every op rounds as an eager op does (GCC's default contracts a * b + c into an FMA,
  // even across a float16 rounding written between them).
  std::vector<std::string> flags = {"-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-fPIC", "-shared", "-std=c++17",
                                    "-fwrapv", "-fno-math-errno", "-ffp-contract=off", "-w", "-lmvec", "-lm"};
  std::string cache_dir;  // required
};

/// A loaded shared object.
struct Module {
  void* handle = nullptr;
  std::string path;
  std::string key;
  std::string command;          // the compiler command line, "" on a cache hit
  bool cache_hit = false;
  double compile_seconds = 0;   // 0 on a cache hit

  ~Module();
  /// The address of an exported function; throws std::runtime_error if absent.
  void* symbol(const std::string& name) const;
};

/// The cache key: a hash of the source, compiler version, flags and CPU features.
std::string cache_key(const std::string& source, const CompileOptions& options);

/// Loads the module for `source` from the on-disk cache, compiling it first if
/// it is missing, truncated or corrupt. Compilation runs the compiler in a
/// subprocess, writes to a temporary file and renames it into place, so
/// processes compiling the same kernel at once never see a half-written file.
/// Throws std::runtime_error with the compiler's output if compilation fails.
std::shared_ptr<Module> load_module(const std::string& source, const CompileOptions& options);

using Kernel = int (*)(void* const*);  // 0, or nonzero: an index was out of range

}  // namespace thunder::runtime
