#include "runtime/buffer_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>
#include <vector>

namespace thunder::runtime {

BufferPool::~BufferPool() { clear(); }

void* BufferPool::acquire(size_t bytes) {
  // Size classes: whole pages below 2 MiB, whole 2 MiB units from there on.
  const size_t align = bytes >= kAlignment ? kAlignment : kPage;
  const size_t size = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++acquisitions_;
    auto it = unused_.find(size);
    if (it != unused_.end()) {
      void* p = it->second.buffer;
      unused_.erase(it);
      cached_ -= size;
      live_[p] = size;
      live_total_ += size;
      peak_ = std::max(peak_, live_total_);
      note(static_cast<int64_t>(size));
      return p;
    }
  }
  void* p = std::aligned_alloc(align, size);
  if (p == nullptr) throw std::bad_alloc();
  std::lock_guard<std::mutex> lock(mutex_);
  if (seen_.insert(size).second) ++new_classes_;
  live_[p] = size;
  live_total_ += size;
  peak_ = std::max(peak_, live_total_);
  note(static_cast<int64_t>(size));
  return p;
}

void BufferPool::note(int64_t delta) {
  if (!recording_) return;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  events_.emplace_back(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), delta);
}

void BufferPool::record(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_ = on;
  if (on) events_.clear();
}

std::vector<std::pair<int64_t, int64_t>> BufferPool::recorded() {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

void BufferPool::release(void* buffer) {
  std::vector<void*> to_free;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(buffer);
    if (it == live_.end()) return;
    const size_t size = it->second;
    live_.erase(it);
    live_total_ -= size;
    note(-static_cast<int64_t>(size));
    if (size > limit_) {
      to_free.push_back(buffer);
    } else {
      // Over the limit: drop the largest unused buffers first.
      while (cached_ + size > limit_ && !unused_.empty()) {
        auto last = std::prev(unused_.end());
        cached_ -= last->first;
        to_free.push_back(last->second.buffer);
        unused_.erase(last);
      }
      unused_.emplace(size, Idle{buffer, acquisitions_, new_classes_});
      cached_ += size;
    }
    // A sweep for stale buffers every max_idle_ / 4 acquisitions or max_idle_classes_ / 4 new classes: each is
    // freed at most a quarter of its limit late.
    if (acquisitions_ - last_sweep_ >= std::max<uint64_t>(max_idle_ / 4, 1) ||
        new_classes_ - last_sweep_classes_ >= std::max<uint64_t>(max_idle_classes_ / 4, 1))
      take_stale(to_free);
  }
  for (void* p : to_free) std::free(p);
}

void BufferPool::take_stale(std::vector<void*>& to_free) {
  last_sweep_ = acquisitions_;
  last_sweep_classes_ = new_classes_;
  for (auto it = unused_.begin(); it != unused_.end();) {
    if (acquisitions_ - it->second.since > max_idle_ || new_classes_ - it->second.classes_since > max_idle_classes_) {
      cached_ -= it->first;
      to_free.push_back(it->second.buffer);
      it = unused_.erase(it);
    } else {
      ++it;
    }
  }
}

void BufferPool::clear() {
  std::multimap<size_t, Idle> unused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    unused.swap(unused_);
    cached_ = 0;
  }
  for (auto& [size, idle] : unused) std::free(idle.buffer);
}

size_t BufferPool::cached_bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

size_t BufferPool::live_bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_total_;
}

size_t BufferPool::peak_live_bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

void BufferPool::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = live_total_;
}

void BufferPool::set_limit(size_t limit_bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = limit_bytes;
  }
  if (cached_bytes() > limit_bytes) clear();
}

BufferPool& output_buffer_pool() {
  // Never destroyed: tensors holding its buffers may outlive static destruction at exit.
  static BufferPool* pool = new BufferPool(size_t{1} << 30);
  return *pool;
}

}  // namespace thunder::runtime
