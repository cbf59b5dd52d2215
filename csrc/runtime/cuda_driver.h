// The CUDA driver API, resolved with dlopen("libcuda.so.1") on first use (nothing CUDA at build time; a process
// that never launches a GPU kernel never loads it): loads compiled images (runtime/nvrtc.h) into the current
// context and launches their kernels on a given stream (torch's current stream, passed by the caller).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/nvrtc.h"

namespace thunder::runtime {

/// Whether the driver library can be loaded and initialized; if not, why (in `why`).
bool cuda_driver_available(std::string* why = nullptr);

/// An image loaded into CUDA contexts: one module per context it was used in (a kernel address is per
/// context), loaded on first use in that context from the CUBIN, or from the PTX if the driver rejects the
/// CUBIN (another architecture). Unloaded when destroyed.
class CudaModule {
 public:
  explicit CudaModule(std::shared_ptr<const CudaImage> image);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  /// The kernel `name` in the context current on this thread (loading the module there first). Throws
  /// std::runtime_error with the driver's error text if the driver is absent, no context is current, or the
  /// module has no such kernel.
  uintptr_t function(const std::string& name);
  /// Whether the last load in a context fell back to the PTX.
  bool loaded_from_ptx() const { return from_ptx_; }
  const CudaImage& image() const { return *image_; }
  const std::shared_ptr<const CudaImage>& shared_image() const { return image_; }

 private:
  std::shared_ptr<const CudaImage> image_;
  std::mutex mu_;
  std::map<uintptr_t, uintptr_t> modules_;  // context -> module
  std::map<std::pair<uintptr_t, std::string>, uintptr_t> functions_;
  bool from_ptx_ = false;
};

/// Launches `function` on `stream` (a CUstream; 0: the legacy default stream) with `grid` x `block` threads and
/// the kernel's arguments, each 8 bytes (pointers and int64 sizes), in order. Asynchronous: no host sync.
void launch_cuda(uintptr_t function, int64_t grid, int block, uintptr_t stream, const std::vector<uint64_t>& args);

}  // namespace thunder::runtime
