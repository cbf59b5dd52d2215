// The index variables a dialect writer's text reads, shared by the CPU and the CUDA dialect.
//
// A kernel's text reads each domain dim's index from a variable: "i2" in the loop body, another name inside a
// block that evaluates a value at other indices (a slice's source, a concatenation's piece: "i2_r0"). A writer
// renames dims while it writes such a block, and must restore the names when it leaves. A value that reads no
// index is written once at the loop's top, where only the names in effect there are declared.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace thunder::codegen {

class IndexNames {
 public:
  /// Names "i0" .. "i{rank-1}", the loop body's.
  explicit IndexNames(size_t rank) {
    for (size_t d = 0; d < rank; ++d) names_.push_back("i" + std::to_string(d));
  }

  const std::string& operator[](size_t d) const { return names_[d]; }
  void rename(size_t d, std::string name) { names_[d] = std::move(name); }

  /// Puts back the names in effect at its construction when it goes out of scope.
  class Restore {
   public:
    Restore(const Restore&) = delete;
    Restore& operator=(const Restore&) = delete;
    ~Restore() {
      if (block_) n_.enclosing_.pop_back();
      n_.names_ = std::move(saved_);
    }

   private:
    friend class IndexNames;
    Restore(IndexNames& n, bool block, std::optional<std::vector<std::string>> replace)
        : n_(n), saved_(n.names_), block_(block) {
      if (block_) n_.enclosing_.push_back(saved_);
      if (replace) n_.names_ = std::move(*replace);
    }
    IndexNames& n_;
    std::vector<std::string> saved_;
    bool block_;
  };

  /// Renames made until the result goes out of scope are undone then.
  [[nodiscard]] Restore keep() { return Restore(*this, false, std::nullopt); }

  /// Enters a block that evaluates at other indices (rename its dims next); leaving it when the result goes
  /// out of scope restores the names.
  [[nodiscard]] Restore enter_block() { return Restore(*this, true, std::nullopt); }

  /// The names in effect at the loop's top (where the outermost enclosing block began) until the result goes
  /// out of scope: a value written there, a slice of an input say, reads the loop's indices, not a block's.
  [[nodiscard]] Restore at_loop_top() {
    if (enclosing_.empty()) return Restore(*this, false, std::nullopt);
    return Restore(*this, false, enclosing_.front());
  }

 private:
  std::vector<std::string> names_;
  // The names in effect where each enclosing block began, outermost first.
  std::vector<std::vector<std::string>> enclosing_;
};

}  // namespace thunder::codegen
