// The on-disk kernel cache: where compiled shared objects are kept, and the rules that make loading one
// safe (it is code this process will run).
//
// Layout: one file per entry, <dir>/<key>.so, the compiler's shared object followed by a 64-byte trailer
// (magic, key, payload length, SHA-256 of payload and key), written to a temporary <key>.<pid>.<rand>.so,
// sealed (trailer, mode 0700, fsync) and renamed into place (then the directory is fsync'd), so the file
// and its hash appear together or not at all.
//
// An entry is used only if the directory is owned by this user and not writable by group or others (created
// 0700), and the file, opened with O_NOFOLLOW|O_NONBLOCK, is a regular file owned by this user, not writable
// by group or others, whose contents match the trailer's hash; it is then loaded through that same
// descriptor. Anything else is a miss, and the kernel is rebuilt. See docs/cpu_executor.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace thunder::runtime {

/// An open descriptor, closed when destroyed.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  int release();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

/// A cache directory, opened and checked.
struct CacheDir {
  std::string requested;  // the directory asked for
  std::string path;       // the directory in use: `requested`, or a private temporary one
  std::string warning;    // why `requested` is not in use ("" when it is)
  Fd fd;                  // the directory in use (O_DIRECTORY); every file operation is relative to it
};

/// Opens `path` for the cache, creating it (and missing parents) with mode 0700. If it cannot be created or
/// written, is not owned by this user, or is writable by group or others, uses a private temporary
/// directory instead (one per requested path and process, removed at exit) and says why in `warning`.
/// The first open of a directory in a process removes the temporaries of dead processes (and any older
/// than a day).
CacheDir open_cache_dir(const std::string& path);
/// The private temporary directory used instead of `path` in this process, created on first use.
CacheDir fallback_cache_dir(const std::string& path, const std::string& why);

/// The extensions of the two kinds of entry: a CPU kernel module (a shared object, whose ELF program headers are
/// also checked to lie inside the file) and a GPU module (runtime/nvrtc.h: CUBIN, PTX and NVRTC's log).
inline constexpr const char* kSharedObject = ".so";
inline constexpr const char* kCudaModule = ".cuda";

/// Opens and verifies the entry for `key` (the file <key><ext>); an invalid descriptor if it is absent or fails a
/// check, with the reason in `*miss`. A verified entry's modification time is set to now (the eviction order).
Fd open_entry(const CacheDir& dir, const std::string& key, std::string* miss = nullptr,
              const std::string& ext = kSharedObject);

/// Seals the compiler's output `tmp_name` (a file in `dir`) as the entry for `key` and renames it into place
/// as <key><ext>; returns a descriptor of the entry. Throws std::system_error (errno and its text) on failure.
Fd commit_entry(const CacheDir& dir, const std::string& key, const std::string& tmp_name,
                const std::string& ext = kSharedObject);

/// The payload (the shared object) of a sealed entry's bytes, checked against its trailer and key; false if
/// the bytes are not a complete entry for `key`.
bool verify_entry_bytes(const std::string& bytes, const std::string& key, std::string* why = nullptr);
/// The trailer sealing `payload` as the entry for `key`.
std::string entry_trailer(const std::string& payload, const std::string& key);

/// Writes `bytes` to a new file `name` in `dir`, mode 0600 (refusing one that exists or is a link); on failure
/// removes it and throws std::system_error naming the file and errno.
void write_new_file(const CacheDir& dir, const std::string& name, const std::string& bytes);
/// The whole file open at `fd`; false if it cannot be read.
bool read_whole_file(int fd, std::string* out);

/// A name for a temporary file of `key` in the cache: <key>.<pid>-<origin>.<random>.<ext>, the origin naming
/// this boot and pid namespace (so that only processes that can see it judge whether the pid still runs).
std::string temporary_name(const std::string& key, const std::string& ext);

/// Removes the temporaries of processes that no longer run (of this boot and pid namespace), and those older
/// than `max_age_seconds`.
/// Returns how many files were removed.
size_t remove_stale_temporaries(const CacheDir& dir, double max_age_seconds = 86400);

/// Removes least recently used entries (oldest modification time first, CPU and GPU alike) until the entries
/// total at most `max_bytes`, never the entries for `keep_key`. Returns how many were removed.
size_t evict_entries(const CacheDir& dir, uint64_t max_bytes, const std::string& keep_key = "");

/// Total bytes of the entries in `dir`.
uint64_t cache_bytes(const CacheDir& dir);

struct ClearResult {
  size_t files = 0;
  uint64_t bytes = 0;
};
/// Removes every entry of the cache at `path`, the temporaries of dead processes, and this process's private
/// fallback directory for it. Modules already loaded stay loaded. Throws std::system_error if `path` exists
/// and is not a directory this user owns.
ClearResult clear_cache(const std::string& path);

/// The default cap on a cache's size: $THUNDER_CACHE_MAX_BYTES, else 2 GiB. Throws std::invalid_argument if the
/// variable is set to anything but a whole number of bytes.
uint64_t default_max_cache_bytes();

}  // namespace thunder::runtime
