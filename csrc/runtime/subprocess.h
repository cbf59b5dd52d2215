// Running the compiler: fork and exec (no shell), output captured, a timeout, and no orphans.
#pragma once

#include <string>
#include <vector>

namespace thunder::runtime {

struct ProcessResult {
  int status = -1;         // the exit status; 128 + N if killed by signal N; -1 if it could not start
  bool timed_out = false;  // killed (with its whole process group) after the timeout
  std::string output;      // stdout and stderr together
};

/// Runs argv[0] (searched in PATH when it has no '/') with `argv`, stdin from /dev/null, and waits at most
/// `timeout_seconds` (<= 0: no limit). The program runs in a process group of its own under a small
/// supervisor process that kills the whole group when the caller's thread dies (so a compiler killed with
/// its parent leaves no linker running to write files later) or when the timeout passes.
/// With `cwd_fd` (an open directory) the program runs in that directory, whatever its path names now: relative
/// names in argv then cannot be redirected by renaming a directory on the way to it. A timeout above a year
/// (or infinite) is no limit. Throws std::runtime_error (with strerror) only if the processes cannot be created.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_seconds, int cwd_fd = -1);

/// argv as a shell command line (for logs and error messages; never executed by a shell).
std::string command_line(const std::vector<std::string>& argv);

}  // namespace thunder::runtime
