// Reused memory for large kernel outputs.
//
// A multi-megabyte buffer fresh from malloc is fresh mmap'd memory: the kernel that first writes it
// takes a page fault per 4 KiB page, which costs as much as the kernel's own work (a 64 MiB output
// here: about 16k faults and 25 ms, against about 5 ms to write the data; a 256 KiB one, freed and
// unmapped after each call, adds about 7 us to a 40 us kernel). The pool hands out buffers of whole
// pages (from 2 MiB on, whole 2 MiB units), and when the tensor owning one is freed it keeps the
// buffer for the next output of the same size class, up to a limit on the bytes it holds unused, and while some
// output still asks for that class: a buffer no acquisition took within the last `max_idle` acquisitions (16K by
// default), or while `max_idle_classes` size classes never asked for before were first asked for (16 by
// default), is freed -- a program called at ever new shapes leaves a size class per shape behind, which a loop
// over one shape never does. (The second clock runs only while new shapes come: a program with few outputs a
// call, such as a small model generating, advances the first one slowly.)
// Thread-safe: tensors are freed on any thread. (Not marked for transparent huge pages: no faster once
// the pages exist, and the kernel's compaction for them could stall a first write by 100 ms and more.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace thunder::runtime {

class BufferPool {
 public:
  static constexpr size_t kAlignment = size_t{2} << 20;  // the size-class unit of large buffers
  static constexpr size_t kPage = 4096;

  explicit BufferPool(size_t limit_bytes, uint64_t max_idle = uint64_t{1} << 14, uint64_t max_idle_classes = 16)
      : limit_(limit_bytes), max_idle_(max_idle), max_idle_classes_(max_idle_classes) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  /// A buffer of at least `bytes` bytes: rounded up to whole pages (kPage) below kAlignment bytes, to whole
  /// kAlignment units from there on (aligned to kAlignment). Throws std::bad_alloc.
  void* acquire(size_t bytes);
  /// Takes back a buffer from acquire(): kept for reuse, or freed if the pool holds `limit` unused bytes.
  void release(void* buffer);
  /// Frees every unused buffer.
  void clear();
  /// Bytes held unused, and bytes handed out and not yet released.
  size_t cached_bytes();
  size_t live_bytes();
  /// The most bytes live at once since the last reset_peak() (which sets it to live_bytes()).
  size_t peak_live_bytes();
  void reset_peak();
  void set_limit(size_t limit_bytes);
  /// Starts (clearing what was recorded) or stops recording each change of the live bytes.
  void record(bool on);
  /// What was recorded: (wall-clock time in ns since the Unix epoch, +bytes handed out or -bytes taken back),
  /// in order. The clock is the one torch's profiler stamps its memory events with, so the two merge into
  /// one timeline of the memory a program holds.
  std::vector<std::pair<int64_t, int64_t>> recorded();

 private:
  struct Idle {
    void* buffer;
    uint64_t since;          // acquisitions_ when it was released
    uint64_t classes_since;  // new_classes_ when it was released
  };
  std::mutex mutex_;
  std::multimap<size_t, Idle> unused_;           // size class -> buffer
  std::unordered_map<void*, size_t> live_;       // buffer -> size class
  std::unordered_set<size_t> seen_;              // every size class ever acquired
  size_t cached_ = 0, live_total_ = 0, peak_ = 0, limit_;
  uint64_t max_idle_, max_idle_classes_, acquisitions_ = 0, new_classes_ = 0, last_sweep_ = 0,
      last_sweep_classes_ = 0;
  bool recording_ = false;
  std::vector<std::pair<int64_t, int64_t>> events_;
  void note(int64_t delta);  // with mutex_ held
  // Moves the buffers idle for more than max_idle_ acquisitions or max_idle_classes_ new size classes into
  // `to_free` (with mutex_ held).
  void take_stale(std::vector<void*>& to_free);
};

/// The pool of the CPU executor's kernel outputs (1 GiB of unused buffers at most, by default).
BufferPool& output_buffer_pool();

}  // namespace thunder::runtime
