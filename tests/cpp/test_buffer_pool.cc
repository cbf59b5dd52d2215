// The kernel output buffer pool: reuse by size class, the limit on unused bytes, concurrent use.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/buffer_pool.h"

using thunder::runtime::BufferPool;

constexpr size_t kMiB = size_t{1} << 20;

TEST(BufferPool, BuffersAreAlignedWritableAndReusedBySizeClass) {
  BufferPool pool(64 * kMiB);
  void* a = pool.acquire(3 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % BufferPool::kAlignment, 0u);
  std::memset(a, 1, 3 * kMiB);
  EXPECT_EQ(pool.live_bytes(), 4 * kMiB);  // rounded up to whole 2 MiB pages
  pool.release(a);
  EXPECT_EQ(pool.live_bytes(), 0u);
  EXPECT_EQ(pool.cached_bytes(), 4 * kMiB);
  EXPECT_EQ(pool.acquire(4 * kMiB), a);    // same size class
  void* b = pool.acquire(5 * kMiB);        // another class: a new buffer
  EXPECT_NE(b, a);
  EXPECT_EQ(pool.peak_live_bytes(), 10 * kMiB);
  void* small = pool.acquire(5000);        // below 2 MiB: whole 4 KiB pages
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % BufferPool::kPage, 0u);
  EXPECT_EQ(pool.live_bytes(), 10 * kMiB + 8192);
  pool.release(small);
  pool.release(a);
  pool.release(b);
  pool.reset_peak();
  EXPECT_EQ(pool.peak_live_bytes(), 0u);
  pool.clear();
  EXPECT_EQ(pool.cached_bytes(), 0u);
}

TEST(BufferPool, KeepsAtMostItsLimitUnused) {
  BufferPool pool(6 * kMiB);
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) held.push_back(pool.acquire(2 * kMiB));
  for (void* p : held) pool.release(p);
  EXPECT_EQ(pool.cached_bytes(), 6 * kMiB);
  void* big = pool.acquire(8 * kMiB);  // larger than the limit: freed on release, never kept
  pool.release(big);
  EXPECT_EQ(pool.cached_bytes(), 6 * kMiB);
  pool.release(big);  // not a live buffer (released twice): ignored
  pool.set_limit(0);
  EXPECT_EQ(pool.cached_bytes(), 0u);
}

TEST(BufferPool, ThreadsAcquireAndReleaseConcurrently) {
  BufferPool pool(16 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 200; ++i) {
        void* p = pool.acquire((1 + (i + t) % 3) * kMiB);
        static_cast<char*>(p)[0] = static_cast<char>(i);
        pool.release(p);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(pool.live_bytes(), 0u);
  EXPECT_LE(pool.cached_bytes(), 16 * kMiB);
}

TEST(BufferPool, FreesASizeClassNoAcquisitionTookForMaxIdleAcquisitions) {
  // A program called at ever new shapes leaves a size class per shape behind; a loop over one shape reuses its own.
  BufferPool pool(64 * kMiB, /*max_idle=*/8);
  void* old = pool.acquire(3 * kMiB);      // one shape's output, never asked for again
  pool.release(old);
  EXPECT_EQ(pool.cached_bytes(), 4 * kMiB);
  void* steady = nullptr;
  for (int i = 0; i < 40; ++i) {           // another shape, in a loop
    void* p = pool.acquire(kMiB);
    if (steady != nullptr) EXPECT_EQ(p, steady);  // reused every time, never freed as stale
    steady = p;
    pool.release(p);
  }
  EXPECT_EQ(pool.cached_bytes(), size_t{1} * kMiB);  // the 3 MiB class was freed; the 1 MiB one is kept
  EXPECT_EQ(pool.live_bytes(), 0u);
}

TEST(BufferPool, FreesASizeClassIdleWhileMaxIdleClassesNewClassesCame) {
  // A small model generating at ever new lengths: few acquisitions a call, each length a new size class. The
  // buffers of lengths long past are freed after max_idle_classes new classes, long before max_idle acquisitions;
  // classes seen before (a loop over shapes already met) never advance that clock.
  constexpr size_t kPage = BufferPool::kPage;
  BufferPool pool(64 * kMiB, /*max_idle=*/1000000, /*max_idle_classes=*/4);
  void* first = pool.acquire(kPage);
  pool.release(first);
  for (int i = 0; i < 3; ++i) {  // three more lengths, three new classes: the first is kept
    pool.release(pool.acquire((i + 2) * kPage));
  }
  EXPECT_EQ(pool.cached_bytes(), (1 + 2 + 3 + 4) * kPage);
  for (int round = 0; round < 50; ++round) {  // the same four classes again and again: nothing is freed
    for (int i = 0; i < 4; ++i) pool.release(pool.acquire((i + 1) * kPage));
  }
  EXPECT_EQ(pool.cached_bytes(), (1 + 2 + 3 + 4) * kPage);
  for (int i = 0; i < 6; ++i) {  // six new lengths: the four old classes are freed
    pool.release(pool.acquire((i + 5) * kPage));
  }
  EXPECT_EQ(pool.cached_bytes(), (6 + 7 + 8 + 9 + 10) * kPage);  // the fifth was idle for five new classes
  EXPECT_EQ(pool.live_bytes(), 0u);
}
