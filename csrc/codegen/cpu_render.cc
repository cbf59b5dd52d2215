// This file builds its output with `"literal" + std::string` throughout, for which
// GCC 12's libstdc++ reports false -Wrestrict warnings at -O2 and above (GCC bug
// 105329); they would fail -Werror builds. Set before the includes, where they are reported.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "codegen/cpu_render.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "ir/printer.h"

namespace thunder::codegen {
namespace {

using ir::DType;

constexpr int64_t kGrain = 32768;  // elements below which a kernel runs on one thread
// Every parallel loop runs on the caller's thread count, passed after the kernel's pointers.
const std::string kParallelFor = "#pragma omp parallel for num_threads(nthreads)";
constexpr int64_t kRowCacheLimit = 8192;  // longest row whose transcendental values are kept for a later pass
// A floating-point reduction along a row whose innermost reduced dim has at least kLaneMinimum elements
// accumulates in kLanes partial results (several SIMD registers): one accumulator register would make
// each vector add wait for the previous one (4 cycles), and the pass would be latency-bound.
constexpr int64_t kLanes = 64;
constexpr int64_t kLaneMinimum = 256;
// An output of at least this many bytes, written along the innermost loop, is computed in 4 KiB chunks
// into a buffer and copied out with non-temporal (streaming) stores: ordinary stores to memory not in
// cache first read each line in (a DRAM read per line written) and write it back later. A 64 MiB
// softmax takes 11 ms instead of 16.5 here. Smaller outputs stay in cache for the op that reads them.
constexpr int64_t kStreamBytes = 16 << 20;
constexpr int64_t kStreamChunkBytes = 4096;

bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

// Prims that only change how their (first) operand is indexed: the operand's value, unrounded.
bool is_index_only(const std::string& op) {
  return op == "alias" || op == "broadcast_in_dim" || op == "reshape" || op == "squeeze";
}

// The C++ type a value is computed in.
std::string compute_type(DType d) {
  switch (d) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "uint8_t";
    case DType::Int8: return "int8_t";
    case DType::Int16: return "int16_t";
    case DType::Int32: return "int32_t";
    case DType::Int64: return "int64_t";
    case DType::Float64: return "double";
    default: return "float";
  }
}

// The C++ type a value is stored in.
std::string storage_type(DType d) {
  if (d == DType::Float16) return "_Float16";
  if (d == DType::BFloat16) return "uint16_t";
  return compute_type(d);
}

std::string load(DType d, const std::string& lvalue) {
  if (d == DType::Float16) return "(float)" + lvalue;
  if (d == DType::BFloat16) return "bf16_to_float(" + lvalue + ")";
  return lvalue;
}

std::string store(DType d, const std::string& v) {
  if (d == DType::Float16) return "(_Float16)" + v;
  if (d == DType::BFloat16) return "float_to_bf16(" + v + ")";
  return v;
}

// Rounds a float computed for a half-precision value to that precision.
std::string round_to(DType d, const std::string& e) {
  if (d == DType::Float16) return "(float)(_Float16)(" + e + ")";
  if (d == DType::BFloat16) return "bf16_round(" + e + ")";
  return e;
}

std::string literal(const ir::Value& v, const std::string& type) {
  // Typed like every number: a prim's number follows its tensor's dtype (x % True is a float remainder by 1).
  if (std::holds_alternative<bool>(v.v)) return "(" + type + ")" + (v.as_bool() ? "true" : "false");
  if (std::holds_alternative<int64_t>(v.v)) return "(" + type + ")" + std::to_string(v.as_int()) + "LL";
  double d = v.as_double();
  if (std::isnan(d)) return "(" + type + ")NAN";
  if (std::isinf(d)) return d > 0 ? "(" + type + ")INFINITY" : "(" + type + ")(-INFINITY)";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return "(" + type + ")" + buf;
}

// A Python number operand of an elementwise prim over `in` tensors. ATen converts it to the tensor's dtype
// first, so over float16/bfloat16 it is rounded to that precision -- except in mul and the divisions, whose CPU
// kernels read it unrounded in float32 (x * 0.1 computes float(x) * 0.1f; see second_operand_in_opmath in
// ops/torch_elementwise.cc for the same rule with a 0-dim tensor).
std::string number_operand(const std::string& op, const ir::Value& v, DType in) {
  const std::string e = literal(v, compute_type(in));
  const bool unrounded = op == "mul" || op == "div" || op == "floor_divide";
  return is_half(in) && !unrounded ? round_to(in, e) : e;
}

// Functions vectorizable through glibc's libmvec (declared `omp declare simd` in the prelude).
bool is_vector_math(const std::string& op) {
  static const std::set<std::string> ops = {"exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sin", "cos",
                                            "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
                                            "acosh", "atanh", "erf", "erfc"};
  return ops.count(op) > 0;
}

// x ** e for the exponents torch's pow kernel also special-cases (as multiplications, a square
// root or a reciprocal); "" for any other exponent.
std::string small_power(const std::string& a, double e, const std::string& T) {
  if (e == 1) return a;
  if (e == 2) return "(" + a + " * " + a + ")";
  if (e == 3) return "(" + a + " * " + a + " * " + a + ")";
  if (e == 0.5) return "kmath::sqrt(" + a + ")";
  if (e == -1) return "((" + T + ")1 / " + a + ")";
  if (e == -2) return "((" + T + ")1 / (" + a + " * " + a + "))";
  return "";
}

// The per-op string table: the C++ expression of an elementwise prim.
// `a`, `b`, `c` are operand expressions already in the compute type `T`
// of the result (comparisons get them in their own types).
std::string expression(const std::string& op, DType out, DType in, const std::vector<std::string>& x) {
  const std::string T = compute_type(out);
  const bool fl = ir::is_floating(in);
  const std::string& a = x[0];
  auto b = [&] { return x.at(1); };
  const std::string suffix = T == "float" ? "f" : "";
  if (op == "erf" && T == "float") return "thunder_erff(" + a + ")";  // the prelude's own: 1.6x libmvec's speed
  if (op == "sin") return "thunder_sin" + suffix + "(" + a + ")";  // see the prelude
  if (is_vector_math(op)) return op + suffix + "(" + a + ")";
  if (op == "lgamma") return "kmath::lgamma(" + a + ")";
  if (op == "sqrt") return "kmath::sqrt(" + a + ")";
  if (op == "neg") return "(" + T + ")(-" + a + ")";
  if (op == "abs") return fl ? "kmath::fabs(" + a + ")" : "(" + T + ")(" + a + " < 0 ? -" + a + " : " + a + ")";
  if (op == "floor" || op == "ceil" || op == "trunc") return fl ? "kmath::" + op + "(" + a + ")" : a;
  if (op == "round") return fl ? "kmath::nearbyint(" + a + ")" : a;
  if (op == "sign") return "(" + T + ")((" + a + " > 0) - (" + a + " < 0))";  // torch.sign(nan) is 0
  if (op == "reciprocal") return "((" + T + ")1 / " + a + ")";
  if (op == "rsqrt") return "((" + T + ")1 / kmath::sqrt(" + a + "))";
  if (op == "sigmoid") return "((" + T + ")1 / ((" + T + ")1 + exp" + suffix + "(-" + a + ")))";
  if (op == "bitwise_not") return in == DType::Bool ? "!" + a : "(" + T + ")(~" + a + ")";
  if (op == "logical_not") return "!(" + a + ")";
  if (op == "isnan") return fl ? "(" + a + " != " + a + ")" : "false";
  if (op == "isinf") return fl ? "kmath::isinf(" + a + ")" : "false";
  if (op == "isfinite") return fl ? "kmath::isfinite(" + a + ")" : "true";
  if (op == "signbit") return fl ? "sign_bit(" + a + ")" : "(" + a + " < 0)";
  if (op == "add") return "(" + T + ")(" + a + " + " + b() + ")";
  if (op == "sub") return "(" + T + ")(" + a + " - " + b() + ")";
  if (op == "mul") return "(" + T + ")(" + a + " * " + b() + ")";
  if (op == "div") return "(" + a + " / " + b() + ")";
  if (op == "pow") return "pow" + suffix + "(" + a + ", " + b() + ")";
  if (op == "atan2") return "atan2" + suffix + "(" + a + ", " + b() + ")";
  if (op == "copysign") return "kmath::copysign(" + a + ", " + b() + ")";
  if (op == "fmod") return "kmath::fmod(" + a + ", " + b() + ")";
  if (op == "remainder") return "py_remainder(" + a + ", " + b() + ")";
  if (op == "maximum") return fl ? "nan_max(" + a + ", " + b() + ")" : "kmath::max<" + T + ">(" + a + ", " + b() + ")";
  if (op == "minimum") return fl ? "nan_min(" + a + ", " + b() + ")" : "kmath::min<" + T + ">(" + a + ", " + b() + ")";
  if (op == "bitwise_and") return "(" + T + ")(" + a + " & " + b() + ")";
  if (op == "bitwise_or") return "(" + T + ")(" + a + " | " + b() + ")";
  if (op == "bitwise_xor") return "(" + T + ")(" + a + " ^ " + b() + ")";
  static const std::map<std::string, std::string> compare = {{"eq", "=="}, {"ne", "!="}, {"lt", "<"},
                                                             {"le", "<="}, {"gt", ">"}, {"ge", ">="}};
  if (auto it = compare.find(op); it != compare.end()) return "(" + a + " " + it->second + " " + b() + ")";
  if (op == "logical_and") return "((" + a + " != 0) && (" + b() + " != 0))";
  if (op == "logical_or") return "((" + a + " != 0) || (" + b() + " != 0))";
  if (op == "logical_xor") return "((" + a + " != 0) != (" + b() + " != 0))";
  if (op == "where") return "(" + a + " ? " + b() + " : " + x.at(2) + ")";
  if (op == "convert_element_type") return out == DType::Bool ? "(" + a + " != 0)" : "(" + T + ")(" + a + ")";
  if (is_index_only(op)) return a;
  throw std::logic_error("cpu codegen: no expression for prims." + op);
}

struct Reduction {
  std::string acc_type, init, combine, pragma_op;
  bool nan_flag = false;  // float max/min: NaN is tracked in a flag beside the (vectorizable) max/min
};

// Float sums of up to this many elements accumulate in float (in SIMD lanes,
// which already sum pairwise-ish); longer ones in double, to stay within
// float32 tolerance of an exact sum.
constexpr int64_t kFloatAccumulationLimit = 1 << 16;

Reduction reduction_rule(const std::string& op, DType d, int64_t length) {
  const std::string T = compute_type(d);
  const bool fl = ir::is_floating(d);
  if (op == "sum" || op == "prod") {
    std::string float_acc = T == "float" && length <= kFloatAccumulationLimit ? "float" : "double";
    std::string acc = fl ? float_acc : d == DType::Bool ? "int64_t" : T == "uint8_t" ? "uint64_t" : "int64_t";
    if (op == "sum") return {acc, "0", "acc + (" + acc + ")x", "+"};
    return {acc, "1", "acc * (" + acc + ")x", "*"};
  }
  std::string lim = op == "amax" ? (fl ? "-INFINITY" : "kmath::limits<" + T + ">::lowest()")
                                 : (fl ? "INFINITY" : "kmath::limits<" + T + ">::max()");
  std::string fn = std::string(op == "amax" ? "max" : "min");
  // Floats: OpenMP's own max/min, which vectorizes, and a flag set by any NaN, which then wins (as in torch).
  if (fl) return {T, lim, "kmath::" + fn + "<" + T + ">(acc, x)", fn, true};
  return {T, lim, "kmath::" + fn + "<" + T + ">(acc, x)", "kmath_" + fn + "_" + T};
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

class KernelWriter {
 public:
  KernelWriter(const ir::Trace& t, const KernelPlan& p) : t_(t), p_(p) {
    for (size_t d = 0; d < p.domain.size(); ++d) index_names_.push_back("i" + std::to_string(d));
    for (const ir::BoundSymbol& b : p.symbols) producer_[b.output.proxy()] = &b;
    for (size_t i = 0; i < p.inputs.size(); ++i) input_index_[p.inputs[i]] = i;
  }

  std::string write(const std::string& name) {
    std::ostringstream os;
    os << "extern \"C\" int " << name << "(void* const* args) {\n";
    size_t k = 0;
    for (ProxyId id : p_.inputs) {
      os << "  const " << storage_type(dtype(id)) << "* __restrict in" << k << " = (const " << storage_type(dtype(id))
         << "*)args[" << k << "];\n";
      ++k;
    }
    for (size_t i = 0; i < p_.outputs.size(); ++i)
      os << "  " << storage_type(dtype(p_.outputs[i])) << "* __restrict out" << i << " = ("
         << storage_type(dtype(p_.outputs[i])) << "*)args[" << k + i << "];\n";
    // The caller's thread count (torch.get_num_threads()) follows the pointers.
    os << "  const int nthreads = (int)(intptr_t)args[" << k + p_.outputs.size() << "];\n  (void)nthreads;\n";
    os << "  int error = 0;  // set when an index is out of range\n";
    std::vector<int> outer, inner;
    int64_t outer_n = 1, total = 1;
    for (size_t d = 0; d < p_.domain.size(); ++d) {
      (p_.reduced[d] ? inner : outer).push_back(static_cast<int>(d));
      if (!p_.reduced[d]) outer_n *= p_.domain[d];
      total *= p_.domain[d];
    }
    parallel_inner_ = outer_n == 1 && total >= kGrain;
    std::string body;
    if (!p_.has_reduction()) {
      // One loop nest over the whole domain; every value is element level. Range tests along the outer
      // dims are computed before the innermost loop (hoisted).
      std::string hoisted;
      if (outer.size() > 1) hoisted_ = &hoisted;
      std::vector<size_t> all(p_.outputs.size());
      for (size_t i = 0; i < all.size(); ++i) all[i] = i;
      const size_t keep = outer.size() > 1 ? outer.size() - 1 : 1;  // the parallel loops
      std::vector<int64_t> cuts = outer.size() > 1 ? p_.range_bounds(outer.back()) : std::vector<int64_t>{};
      if (cuts.size() >= kMaxLoopPieces) cuts.clear();  // selects instead: the code would grow with every piece
      if (!cuts.empty()) {
        // The innermost loop split where a remap's ranges along it begin or end (a cat changes part, a
        // slice_update's box begins or ends): one loop per piece, each reading the one operand selected
        // there at a fixed offset, contiguous (vectorizable for every dtype, no gathers or selects).
        const int d = outer.back();
        std::string text;
        int64_t lo = 0;
        cuts.push_back(p_.domain[d]);
        for (int64_t hi : cuts) {
          piece_ = {lo, hi};
          Scope scope;
          std::string stores;
          for (size_t i : all) stores += store_line(p_.outputs[i], i, scope, "  ");
          const std::string i = index(d);
          text += "#pragma omp simd\nfor (int64_t " + i + " = " + std::to_string(lo) + "LL; " + i + " < " +
                  std::to_string(hi) + "LL; ++" + i + ") {\n" + indent(scope.lines, "  ") + stores + "}\n";
          lo = hi;
        }
        piece_.reset();
        const std::vector<int> rest(outer.begin(), outer.end() - 1);
        std::string pragma = total >= kGrain ? kParallelFor + collapse(rest.size()) + " schedule(static)" : "";
        body = loops(rest, hoisted + text, pragma, "  ", false);
      } else if (!outer.empty() && streams(all, outer.back())) {
        std::string pragma = total >= kGrain ? kParallelFor + collapse(keep) + " schedule(static)" : "";
        body = streamed_loops(outer, all, nullptr, pragma, "  ");
      } else {
        Scope scope;
        std::string stores;
        for (size_t i : all) stores += store_line(p_.outputs[i], i, scope, "    ");
        std::string pragma = total >= kGrain && outer.size() > 0 ? kParallelFor + collapse(keep) + " schedule(static)" : "";
        body = loops(outer, scope.lines + stores, pragma, "  ", true, "#pragma omp simd", hoisted);
      }
      hoisted_ = nullptr;
    } else {
      Scope row;
      // Every reduction first, in program order: later passes over the row can then reuse what
      // earlier passes kept in row buffers.
      for (const ir::BoundSymbol& b : p_.symbols)
        if (b.sym->has(ir::kReduction)) emit(b.output.proxy(), row);
      std::string stores;
      std::vector<size_t> element_outputs;
      for (size_t i = 0; i < p_.outputs.size(); ++i) {
        if (p_.element_level(p_.outputs[i])) element_outputs.push_back(i);
        else stores += store_line(p_.outputs[i], i, row, "");
      }
      if (!element_outputs.empty() && !parallel_inner_ && streams(element_outputs, inner.back())) {
        row.lines += streamed_loops(inner, element_outputs, &row, "", "");
      } else if (!element_outputs.empty()) {
        Scope inner_scope{{}, &row, {}, false};
        std::string inner_stores;
        for (size_t i : element_outputs) inner_stores += store_line(p_.outputs[i], i, inner_scope, "");
        row.lines += loops(inner, inner_scope.lines + inner_stores,
                           parallel_inner_ ? kParallelFor + collapse(inner.size()) : "", "", true);
      }
      std::string pragma = outer_n > 1 && total >= kGrain ? kParallelFor + collapse(outer.size()) +
                                                                " schedule(static)"
                                                          : "";
      body = loops(outer, indent(row.lines + stores, "  "), pragma, "  ", false);
    }
    // Streaming stores are weakly ordered: fence them before the caller reads the outputs (each worker
    // thread's are ordered by the locked instructions of OpenMP's closing barrier).
    os << body << (streaming_ ? "  stream_fence();\n" : "") << "  return error;\n}\n";
    return os.str();
  }

  /// The custom OpenMP reductions this kernel uses ("nan_max_float", ...).
  const std::set<std::string>& reductions() const { return reductions_; }

 private:
  struct Scope {
    std::string lines;
    Scope* parent = nullptr;
    std::set<ProxyId> defined;
    bool remapped = false;  // evaluates at other indices (a slice's source, a cat's input): reuses nothing outside
    bool has(ProxyId v) const { return defined.count(v) || (parent && !remapped && parent->has(v)); }
  };

  DType dtype(ProxyId v) const { return t_.tensor(v).dtype; }
  std::string var(ProxyId v) const { return "v" + std::to_string(v); }

  std::string offset(ProxyId v) const {
    const auto& al = p_.align.at(v);
    const std::vector<int64_t>& known = t_.proxy(v).strides;  // a non-contiguous trace input, read in place
    std::vector<int64_t> strides = known.empty() ? contiguous_strides(t_.tensor(v).shape) : known;
    std::string out;
    for (size_t i = 0; i < al.size(); ++i) {
      if (al[i] < 0 || t_.tensor(v).shape[i] == 1) continue;
      out += (out.empty() ? "" : " + ") + index(al[i]) + (strides[i] == 1 ? "" : " * " + std::to_string(strides[i]) + "LL");
    }
    return out.empty() ? "0" : out;
  }

  std::string store_line(ProxyId v, size_t slot, Scope& scope, const std::string& ind) {
    emit(v, scope);
    // An output aligned to fewer dims than the loops run over (one element in a larger domain) is the same
    // at every index of the others: stored where they are 0.
    std::string first;
    const auto& al = p_.align.at(v);
    for (size_t d = 0; d < p_.domain.size(); ++d) {
      bool covered = p_.reduced[d] || p_.domain[d] == 1;
      for (size_t i = 0; i < al.size(); ++i) covered |= al[i] == static_cast<int>(d) && t_.tensor(v).shape[i] != 1;
      if (!covered) first += (first.empty() ? "" : " && ") + index(static_cast<int>(d)) + " == 0";
    }
    const std::string line = "out" + std::to_string(slot) + "[" + offset(v) + "] = " + store(dtype(v), var(v)) + ";\n";
    return ind + (first.empty() ? line : "if (" + first + ") " + line);
  }

  // Defines v in `scope` (or, for row-level values inside an inner scope, in its parent).
  void emit(ProxyId v, Scope& scope) {
    if (scope.has(v)) return;
    // A value that reads no loop index (one element read at constant indices) is the same everywhere: a
    // block evaluating at other indices (a slice's source, an update) shares it with the loop body instead
    // of computing it again (a loop over a tensor's elements gave each of its n updates the whole chain
    // before it: n^2 code).
    if (scope.parent && !p_.has_reduction() && index_refs(v).empty()) {
      Scope* root = &scope;
      while (root->parent) root = root->parent;
      return emit(v, *root);
    }
    if (scope.parent && p_.has_reduction() && !p_.element_level(v)) return emit(v, *scope.parent);
    const std::string T = compute_type(dtype(v));
    auto it = producer_.find(v);
    if (it == producer_.end()) {  // a kernel input
      std::string lvalue = "in" + std::to_string(input_index_.at(v)) + "[" + offset(v) + "]";
      scope.lines += "const " + T + " " + var(v) + " = " + load(dtype(v), lvalue) + ";\n";
      scope.defined.insert(v);
      return;
    }
    if (auto c = row_cache_.find(v); c != row_cache_.end() && scope.parent) {  // computed by an earlier pass over the row
      scope.lines += "const " + T + " " + var(v) + " = " + c->second + "[" + row_index() + "];\n";
      scope.defined.insert(v);
      return;
    }
    const ir::BoundSymbol& b = *it->second;
    const std::string& op = b.sym->name;
    if (op == "sum" || op == "prod" || op == "amax" || op == "amin") return emit_reduction(v, b, scope);
    if (op == "take_along_axis") return emit_pick(v, b, scope);
    if (p_.remaps.count(v)) return emit_remap(v, scope);
    if (op == "full") {  // full(shape, fill_value, dtype, device): the number, converted as torch.full does
      std::string e = literal(b.args[1], T);
      if (is_half(dtype(v))) e = round_to(dtype(v), e);
      scope.lines += "const " + T + " " + var(v) + " = " + e + ";\n";
      scope.defined.insert(v);
      return;
    }
    std::vector<std::string> operands;
    DType in_dtype = dtype(v);
    for (size_t i = 0; i < b.args.size(); ++i) {
      const ir::Value& a = b.args[i];
      if (op == "convert_element_type" && i == 1) break;
      if (is_index_only(op) && i > 0) break;
      if (a.is_proxy()) {
        emit(a.proxy(), scope);
        operands.push_back(var(a.proxy()));
        if (op != "where" || i > 0) in_dtype = dtype(a.proxy());
      } else {
        operands.push_back("");  // typed below, once the operand dtype is known
      }
    }
    for (size_t i = 0; i < operands.size(); ++i)
      if (operands[i].empty()) operands[i] = number_operand(op, b.args[i], in_dtype);
    std::string e = op == "pow" && b.args[1].is_number() ? small_power(operands[0], b.args[1].as_double(), compute_type(dtype(v)))
                                                         : "";
    if (e.empty()) e = expression(op, dtype(v), in_dtype, operands);
    if (is_half(dtype(v)) && !is_index_only(op)) e = round_to(dtype(v), e);
    scope.lines += "const " + T + " " + var(v) + " = " + e + ";\n";
    scope.defined.insert(v);
  }

  // A remapped value (slice, cat, slice_update; the plan's Remap): each case's operand evaluated at its
  // mapped indices, and the first case whose ranges hold selected. Every case is computed (a select, not a
  // branch, so that the loop vectorizes), so the indices of a case that may not be selected are clamped
  // into its operand's range. In a piece of the split innermost loop the ranges along it are decided once:
  // a case that never holds there is left out, one that always holds ends the list, and its index along
  // that dim needs no clamp (RoPE's halves and a slice_update's box are read at a fixed offset, contiguously).
  void emit_remap(ProxyId v, Scope& scope) {
    const std::string T = compute_type(dtype(v));
    struct Live {
      const RemapCase* c;
      std::vector<const IndexRange*> tests;  // the ranges still to test at run time
      std::set<int> settled;                 // dims whose range holds throughout this piece
    };
    std::vector<Live> live;
    for (const RemapCase& c : p_.remaps.at(v).cases) {
      Live l{&c, {}, {}};
      bool never = false;
      for (const IndexRange& r : c.when) {
        const Decision d = decide(r);
        never = never || d == Decision::Never;
        if (d == Decision::Always) l.settled.insert(r.dim);
        if (d == Decision::Unknown) l.tests.push_back(&r);
      }
      if (never) continue;
      const bool always = l.tests.empty();
      live.push_back(std::move(l));
      if (always) break;
    }
    std::vector<std::string> values;
    for (const Live& l : live) {
      std::vector<std::pair<int, std::string>> remaps;
      for (const IndexMap& m : l.c->at) {
        const bool clamp = live.size() > 1 && !l.settled.count(m.dim);
        if (m.identity() && !clamp) continue;
        remaps.emplace_back(m.dim, index_expression(m, index(m.dim), clamp));
      }
      values.push_back(emit_at(l.c->operand, remaps, scope));
    }
    std::string e = values.empty() ? "(" + T + ")0" : values.back();  // no case: the value has no element
    for (size_t k = values.size() - 1; !values.empty() && k-- > 0;) {
      std::string test;
      for (const IndexRange* r : live[k].tests) test += (test.empty() ? "" : " && ") + tested(*r);
      e = "(" + test + " ? " + values[k] + " : " + e + ")";
    }
    scope.lines += "const " + T + " " + var(v) + " = " + e + ";\n";
    scope.defined.insert(v);
  }

  // A range's test: along an outer dim's own loop index, a variable computed before the innermost loop
  // (GCC leaves an invariant int64 test such as i0 % 2 == 0 inside, and then does not vectorize the loop).
  std::string tested(const IndexRange& r) {
    const std::string test = range_test(r, index(r.dim));
    const int inner = static_cast<int>(p_.domain.size()) - 1;
    if (!hoisted_ || r.dim == inner || index(r.dim) != "i" + std::to_string(r.dim)) return test;
    auto [it, added] = hoisted_names_.emplace(test, "in_range" + std::to_string(hoisted_names_.size()));
    if (added) *hoisted_ += "const bool " + it->second + " = " + test + ";\n";
    return it->second;
  }

  enum class Decision { Never, Always, Unknown };

  // Whether a range holds in the current piece of the split innermost loop: known only for a range along
  // that loop's own index (not one remapped by an enclosing case).
  Decision decide(const IndexRange& r) const {
    const int d = static_cast<int>(p_.domain.size()) - 1;
    if (!piece_ || r.dim != d || index(d) != "i" + std::to_string(d)) return Decision::Unknown;
    const auto [lo, hi] = *piece_;
    if (hi <= r.lo || lo >= r.hi) return Decision::Never;
    const bool inside = lo >= r.lo && hi <= r.hi;
    if (inside && r.step == 1) return Decision::Always;
    if (inside && hi - lo == 1) return (lo - r.lo) % r.step == 0 ? Decision::Always : Decision::Never;
    return Decision::Unknown;
  }

  // The index expression of a map: (i * scale + offset) / divisor, clamped into [0, extent) if asked.
  static std::string index_expression(const IndexMap& m, const std::string& i, bool clamp) {
    auto ll = [](int64_t n) { return std::to_string(n) + "LL"; };
    std::string e = m.scale == 0 ? "" : m.scale == 1 ? i : i + " * " + ll(m.scale);
    if (e.empty()) e = ll(m.offset);
    else if (m.offset != 0) e += (m.offset > 0 ? " + " : " - ") + ll(m.offset > 0 ? m.offset : -m.offset);
    if (m.divisor != 1) e = (e == i ? e : "(" + e + ")") + " / " + ll(m.divisor);
    if (clamp) e = "kmath::min<int64_t>(kmath::max<int64_t>(" + e + ", 0LL), " + ll(m.extent - 1) + ")";
    return e;
  }

  // The test of a range at index i (the parts that can fail: lo above 0, a bounded hi, a step).
  static std::string range_test(const IndexRange& r, const std::string& i) {
    auto ll = [](int64_t n) { return std::to_string(n) + "LL"; };
    std::vector<std::string> parts;
    if (r.lo > 0) parts.push_back(i + " >= " + ll(r.lo));
    if (r.hi != IndexRange::kUnbounded) parts.push_back(i + " < " + ll(r.hi));
    if (r.step != 1) parts.push_back("(" + (r.lo > 0 ? i + " - " + ll(r.lo) : i) + ") % " + ll(r.step) + " == 0");
    if (parts.empty()) return "true";
    std::string out;
    for (const std::string& p : parts) out += (out.empty() ? "" : " && ") + p;
    return parts.size() > 1 ? "(" + out + ")" : out;
  }

  // The value of u with domain index d read as the given expression (of the current indices), for each
  // remap: a block computing u anew at those indices; returns the variable holding the result.
  std::string emit_at(ProxyId u, const std::vector<std::pair<int, std::string>>& remaps, Scope& scope) {
    if (remaps.empty()) {
      emit(u, scope);
      return var(u);
    }
    const std::string r = "r" + std::to_string(next_remap_++);
    std::string block;
    std::vector<std::string> saved = index_names_;
    for (const auto& [d, expr] : remaps) {
      std::string name = "i" + std::to_string(d) + "_" + r;
      block += "  const int64_t " + name + " = " + expr + ";\n";
      index_names_[d] = name;
    }
    Scope inner{{}, &scope, {}, true};
    emit(u, inner);
    index_names_ = saved;
    scope.lines += compute_type(dtype(u)) + " " + r + ";\n{\n" + block + indent(inner.lines, "  ") + "  " + r + " = " +
                   var(u) + ";\n}\n";
    return r;
  }

  // take_along_axis along the reduced dim d, at row level: the source evaluated once per row, at the
  // row's index value (bounds-checked: an index out of range sets the kernel's error flag, as torch.gather raises).
  void emit_pick(ProxyId v, const ir::BoundSymbol& b, Scope& scope) {
    ProxyId src = b.args[0].proxy(), index = b.args[1].proxy();
    int dim = -1;
    for (size_t d = 0; d < p_.domain.size(); ++d)
      if (p_.reduced[d]) dim = static_cast<int>(d);
    emit(index, scope);
    const std::string i = "pick" + std::to_string(v);
    scope.lines += "int64_t " + i + " = (int64_t)" + var(index) + ";\nif (" + i + " < 0 || " + i + " >= " +
                   std::to_string(p_.domain[dim]) + "LL) {\n  #pragma omp atomic write\n  error = 1;\n  " + i + " = 0;\n}\n";
    const std::string r = emit_at(src, {{dim, i}}, scope);
    scope.lines += "const " + compute_type(dtype(v)) + " " + var(v) + " = " + r + ";\n";
    scope.defined.insert(v);
  }

  void emit_reduction(ProxyId v, const ir::BoundSymbol& b, Scope& scope) {
    ProxyId in = b.args[0].proxy();
    int64_t length = 1;
    for (size_t d = 0; d < p_.domain.size(); ++d)
      if (p_.reduced[d]) length *= p_.domain[d];
    Reduction r = reduction_rule(b.sym->name, dtype(in), length);
    std::string acc = "acc" + std::to_string(v);
    Scope inner{{}, &scope, {}, false};
    emit(in, inner);
    const std::string nan = "nan" + std::to_string(v);
    std::string row_stores;  // the row-buffer stores below, done in the same pass
    // Keep the transcendental values of this pass in a row buffer, so that a later pass over the
    // row (softmax's output pass reusing exp(x - max)) loads them instead of recomputing them.
    if (!parallel_inner_ && length <= kRowCacheLimit) {
      for (ProxyId w : inner.defined) {
        auto pw = producer_.find(w);
        if (pw == producer_.end() || row_cache_.count(w) || !is_vector_math(pw->second->sym->name)) continue;
        std::string buf = "row" + std::to_string(w);
        scope.lines += compute_type(dtype(w)) + " " + buf + "[" + std::to_string(length) + "];\n";
        row_stores += buf + "[" + row_index() + "] = " + var(w) + ";\n";
        row_cache_[w] = buf;
      }
    }
    std::vector<int> dims;
    for (size_t d = 0; d < p_.domain.size(); ++d)
      if (p_.reduced[d]) dims.push_back(static_cast<int>(d));
    if (r.pragma_op.rfind("kmath_", 0) == 0) reductions_.insert(r.pragma_op);
    std::string clause = " reduction(" + r.pragma_op + ":" + acc + ")" + (r.nan_flag ? " reduction(|:" + nan + ")" : "");
    std::string pragma = parallel_inner_ ? kParallelFor + collapse(dims.size()) + clause : "";
    const int64_t innermost = p_.domain[dims.back()];
    if (!parallel_inner_ && ir::is_floating(dtype(in)) && innermost >= kLaneMinimum) {
      scope.lines += lane_reduction(r, v, dims, inner.lines + row_stores, var(in));
    } else {
      std::string body = inner.lines + row_stores + acc + " = " + replace_acc(r.combine, acc, var(in)) + ";\n";
      if (r.nan_flag) body += nan + " |= " + var(in) + " != " + var(in) + ";\n";
      scope.lines += r.acc_type + " " + acc + " = " + r.init + ";\n";
      if (r.nan_flag) scope.lines += "int " + nan + " = 0;\n";
      scope.lines += loops(dims, body, pragma, "", true, "#pragma omp simd" + clause);
    }
    std::string result = "(" + compute_type(dtype(v)) + ")" + acc;
    if (r.nan_flag) result = "(" + nan + " ? (" + compute_type(dtype(v)) + ")NAN : " + result + ")";
    scope.lines += "const " + compute_type(dtype(v)) + " " + var(v) + " = " + round_to(dtype(v), result) + ";\n";
    scope.defined.insert(v);
  }

  // Whether the outputs `which` are written by streaming stores: one of them is large (kStreamBytes),
  // and each is written contiguously along domain dim `d`, the innermost loop.
  bool streams(const std::vector<size_t>& which, int d) const {
    bool large = false;
    for (size_t i : which) {
      ProxyId v = p_.outputs[i];
      const auto& shape = t_.tensor(v).shape;
      const auto& al = p_.align.at(v);
      if (shape.empty() || al.back() != d || shape.back() != p_.domain[d]) return false;
      int64_t bytes = static_cast<int64_t>(ir::item_size(dtype(v)));
      for (int64_t n : shape) bytes *= n;
      large = large || bytes >= kStreamBytes;
    }
    return large;
  }

  // The loop nest over `dims` storing the outputs `which`: the innermost loop runs in chunks, each
  // computed into a buffer per output (a SIMD loop) and then streamed out with stream_bytes. `parent`
  // is the row scope of a reduction kernel (nullptr without reductions). `pragma` parallelizes the
  // loops outside the chunk loop, or the chunk loop itself when there are none.
  std::string streamed_loops(const std::vector<int>& dims, const std::vector<size_t>& which, Scope* parent,
                             const std::string& pragma, const std::string& ind) {
    streaming_ = true;
    const int d = dims.back();
    const std::string i = index(d), c = "chunk" + std::to_string(d), n = std::to_string(p_.domain[d]) + "LL";
    int64_t chunk = kStreamChunkBytes;
    for (size_t k : which) chunk = std::min<int64_t>(chunk, kStreamChunkBytes / ir::item_size(dtype(p_.outputs[k])));
    Scope scope{{}, parent, {}, false};
    std::string stores, buffers, copies;
    for (size_t k : which) {
      ProxyId v = p_.outputs[k];
      const std::string T = storage_type(dtype(v)), buf = "streamed" + std::to_string(k);
      emit(v, scope);
      stores += buf + "[" + i + " - " + c + "] = " + store(dtype(v), var(v)) + ";\n";
      buffers += "alignas(64) " + T + " " + buf + "[" + std::to_string(chunk) + "];\n";
      index_names_[d] = c;  // the output's offset at the chunk's first element
      copies += "stream_bytes(&out" + std::to_string(k) + "[" + offset(v) + "], " + buf + ", (" + i + "_end - " + c +
                ") * sizeof(" + T + "));\n";
      index_names_[d] = i;
    }
    std::string text = buffers + "const int64_t " + i + "_end = kmath::min<int64_t>(" + c + " + " + std::to_string(chunk) +
                       ", " + n + ");\n#pragma omp simd\nfor (int64_t " + i + " = " + c + "; " + i + " < " + i +
                       "_end; ++" + i + ") {\n" + indent(scope.lines + stores, "  ") + "}\n" + copies;
    const std::vector<int> outer(dims.begin(), dims.end() - 1);
    std::string chunk_loop = (hoisted_ ? *hoisted_ : "") + (outer.empty() && !pragma.empty() ? pragma + "\n" : "") +
                             "for (int64_t " + c + " = 0; " + c + " < " + n + "; " + c + " += " + std::to_string(chunk) +
                             ") {\n" + indent(text, "  ") + "}\n";
    return loops(outer, chunk_loop, outer.empty() ? "" : pragma, ind, false);
  }

  // The reduction of `x` (computed by `lines` at the row's current indices) into acc<v>, in kLanes
  // partial results: lane l takes the elements whose innermost reduced index is l modulo kLanes
  // (inside constant-length SIMD loops: a whole block of kLanes, then the rest), and the lanes are
  // folded pairwise at the end (32 + 32, 16 + 16, ...), a fixed order whatever the machine.
  std::string lane_reduction(const Reduction& r, ProxyId v, const std::vector<int>& dims, const std::string& lines,
                             const std::string& x) const {
    const std::string id = std::to_string(v), acc = "acc" + id, lane = "lane" + id, nan = "nanlane" + id;
    const std::string lanes = std::to_string(kLanes);
    std::string body = lines + lane + "[l] = " + replace_acc(r.combine, lane + "[l]", x) + ";\n";
    if (r.nan_flag) body += nan + "[l] |= " + x + " != " + x + ";\n";
    const int d = dims.back();
    const int64_t n = p_.domain[d], whole = n / kLanes * kLanes;
    const std::string i = index(d);
    std::string inner;
    if (whole > 0)
      inner += "for (int64_t b = 0; b < " + std::to_string(whole) + "LL; b += " + lanes + ") {\n  #pragma omp simd\n"
               "  for (int64_t l = 0; l < " + lanes + "; ++l) {\n    const int64_t " + i + " = b + l;\n" +
               indent(body, "    ") + "  }\n}\n";
    if (n > whole)
      inner += "#pragma omp simd\nfor (int64_t l = 0; l < " + std::to_string(n - whole) + "; ++l) {\n  const int64_t " + i +
               " = " + std::to_string(whole) + "LL + l;\n" + indent(body, "  ") + "}\n";
    std::string out = r.acc_type + " " + lane + "[" + lanes + "];\n";
    out += "for (int l = 0; l < " + lanes + "; ++l) " + lane + "[l] = " + r.init + ";\n";
    if (r.nan_flag) out += "int " + nan + "[" + lanes + "] = {};\n";
    out += loops(std::vector<int>(dims.begin(), dims.end() - 1), inner, "", "", false);
    for (int64_t w = kLanes / 2; w >= 1; w /= 2) {
      const std::string ws = std::to_string(w);
      out += "for (int l = 0; l < " + ws + "; ++l) " + lane + "[l] = " +
             replace_acc(r.combine, lane + "[l]", lane + "[l + " + ws + "]") + ";\n";
      if (r.nan_flag) out += "for (int l = 0; l < " + ws + "; ++l) " + nan + "[l] |= " + nan + "[l + " + ws + "];\n";
    }
    out += r.acc_type + " " + acc + " = " + lane + "[0];\n";
    if (r.nan_flag) out += "int nan" + id + " = " + nan + "[0];\n";
    return out;
  }

  static std::string replace_acc(std::string combine, const std::string& acc, const std::string& x) {
    std::string out;
    for (size_t i = 0; i < combine.size(); ++i) {
      auto word_at = [&](const std::string& w) {
        return combine.compare(i, w.size(), w) == 0 && (i + w.size() == combine.size() || !std::isalnum(combine[i + w.size()])) &&
               (i == 0 || !std::isalnum(combine[i - 1]));
      };
      if (word_at("acc")) { out += acc; i += 2; }
      else if (word_at("x")) { out += x; }
      else out += combine[i];
    }
    return out;
  }

  static std::string collapse(size_t n) { return n > 1 ? " collapse(" + std::to_string(n) + ")" : ""; }

  static std::string indent(const std::string& text, const std::string& by) {
    std::string out, line;
    std::istringstream is(text);
    while (std::getline(is, line)) out += (line.empty() ? "" : by) + line + "\n";
    return out;
  }

  // A loop nest over domain dims `dims` around `body`; `pragma` goes on the
  // outermost loop, `simd` on the innermost one (when it is not also the outermost parallel one).
  std::string loops(const std::vector<int>& dims, const std::string& body, const std::string& pragma,
                    const std::string& ind, bool simd_inner, const std::string& simd = "#pragma omp simd",
                    const std::string& before_inner = "") const {
    if (dims.empty()) return indent(body, ind);
    std::string out, close;
    // When the parallel pragma collapses the whole nest, the innermost loop is part of it:
    // then it is one `parallel for simd`, with no separate simd pragma inside.
    const bool collapses_all = !pragma.empty() && (dims.size() == 1 || pragma.find(collapse(dims.size())) != std::string::npos);
    for (size_t k = 0; k < dims.size(); ++k) {
      std::string pad = ind + std::string(2 * k, ' ');
      if (k + 1 == dims.size() && !before_inner.empty()) {
        if (collapses_all) throw std::logic_error("cpu codegen: statements inside a collapsed loop nest");
        out += indent(before_inner, pad);
      }
      if (k == 0 && !pragma.empty()) {
        std::string p = pragma;
        if (collapses_all && simd_inner) p.replace(p.find("parallel for") + 12, 0, " simd");
        out += pad + p + "\n";
      } else if (k + 1 == dims.size() && simd_inner && !collapses_all) {
        out += pad + simd + "\n";
      }
      std::string i = "i" + std::to_string(dims[k]);
      out += pad + "for (int64_t " + i + " = 0; " + i + " < " + std::to_string(p_.domain[dims[k]]) + "LL; ++" + i + ") {\n";
      close = pad + "}\n" + close;
    }
    return out + indent(body, ind + std::string(2 * dims.size(), ' ')) + close;
  }

  const ir::Trace& t_;
  const KernelPlan& p_;
  std::map<ProxyId, const ir::BoundSymbol*> producer_;
  std::map<ProxyId, size_t> input_index_;
  std::set<std::string> reductions_;
  std::map<ProxyId, std::string> row_cache_;  // element-level value -> the row buffer holding it
  bool parallel_inner_ = false;
  bool streaming_ = false;  // some output is written with streaming stores
  std::map<ProxyId, std::set<int>> index_refs_;
  std::optional<std::pair<int64_t, int64_t>> piece_;  // the innermost loop's range, in a split loop
  std::string* hoisted_ = nullptr;  // where tests invariant in the innermost loop go, when it has outer loops
  std::map<std::string, std::string> hoisted_names_;  // a hoisted test -> the variable holding it
  std::vector<std::string> index_names_;  // per domain dim, the variable holding its index ("i2", or a remap's)
  int next_remap_ = 0;

  const std::string& index(int d) const { return index_names_[d]; }

  // The domain dims whose loop index v's code reads (in a kernel without reductions): an input's aligned
  // dims of more than one element; a remapped value's operands' dims, less those its case reads at a
  // constant index, plus those its case tests.
  const std::set<int>& index_refs(ProxyId v) {
    if (auto it = index_refs_.find(v); it != index_refs_.end()) return it->second;
    std::set<int> refs;
    auto it = producer_.find(v);
    if (it == producer_.end()) {
      const auto& al = p_.align.at(v);
      for (size_t i = 0; i < al.size(); ++i)
        if (al[i] >= 0 && t_.tensor(v).shape[i] != 1) refs.insert(al[i]);
    } else if (auto r = p_.remaps.find(v); r != p_.remaps.end()) {
      for (const RemapCase& c : r->second.cases) {
        std::set<int> operand = index_refs(c.operand);
        for (const IndexMap& m : c.at)
          if (m.scale == 0) operand.erase(m.dim);
        refs.insert(operand.begin(), operand.end());
        for (const IndexRange& w : c.when) refs.insert(w.dim);
      }
    } else {
      for (ProxyId u : it->second->input_proxies()) {
        const std::set<int>& operand = index_refs(u);
        refs.insert(operand.begin(), operand.end());
      }
    }
    return index_refs_[v] = std::move(refs);
  }

  // The flat index of the current element within the row (over the reduced dims, row-major).
  std::string row_index() const {
    std::string out;
    int64_t stride = 1;
    for (size_t d = p_.domain.size(); d-- > 0;) {
      if (!p_.reduced[d]) continue;
      out = index(static_cast<int>(d)) + (stride == 1 ? "" : " * " + std::to_string(stride) + "LL") + (out.empty() ? "" : " + " + out);
      stride *= p_.domain[d];
    }
    return out.empty() ? "0" : out;
  }
};

}  // namespace

std::string cpu_prelude() {
  return R"(// Generated by thunder's CPU code generator.
#include <cstdint>
#include <cstring>

// The math kernels call, on GCC's builtins (what <cmath> and <algorithm> call too): parsing those headers
// was half of a small kernel's compile time (0.09 of 0.18 s).
#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()
namespace kmath {
#define THUNDER_UNARY(name) \
  static inline float name(float x) { return __builtin_##name##f(x); } \
  static inline double name(double x) { return __builtin_##name(x); }
THUNDER_UNARY(sqrt) THUNDER_UNARY(fabs) THUNDER_UNARY(floor) THUNDER_UNARY(ceil) THUNDER_UNARY(trunc)
THUNDER_UNARY(nearbyint) THUNDER_UNARY(lgamma)
static inline float copysign(float x, float y) { return __builtin_copysignf(x, y); }
static inline double copysign(double x, double y) { return __builtin_copysign(x, y); }
static inline float fmod(float x, float y) { return __builtin_fmodf(x, y); }
static inline double fmod(double x, double y) { return __builtin_fmod(x, y); }
template <class T> static inline double fmod(T x, T y) { return __builtin_fmod((double)x, (double)y); }  // integers
static inline float fma(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
static inline bool isinf(float x) { return __builtin_isinf(x); }
static inline bool isinf(double x) { return __builtin_isinf(x); }
static inline bool isfinite(float x) { return __builtin_isfinite(x); }
static inline bool isfinite(double x) { return __builtin_isfinite(x); }
template <class T> static inline T max(T a, T b) { return a < b ? b : a; }  // as std::max and std::min
template <class T> static inline T min(T a, T b) { return b < a ? b : a; }
template <class T> struct limits;
#define THUNDER_LIMITS(T, lo, hi) \
  template <> struct limits<T> { static constexpr T lowest() { return lo; } static constexpr T max() { return hi; } };
THUNDER_LIMITS(bool, false, true) THUNDER_LIMITS(uint8_t, 0, UINT8_MAX) THUNDER_LIMITS(int8_t, INT8_MIN, INT8_MAX)
THUNDER_LIMITS(int16_t, INT16_MIN, INT16_MAX) THUNDER_LIMITS(int32_t, INT32_MIN, INT32_MAX)
THUNDER_LIMITS(int64_t, INT64_MIN, INT64_MAX) THUNDER_LIMITS(float, -__FLT_MAX__, __FLT_MAX__)
THUNDER_LIMITS(double, -__DBL_MAX__, __DBL_MAX__)
}  // namespace kmath

// glibc's libmvec has vector versions of these; declaring them `omp declare simd`
// lets the compiler vectorize loops that call them without -ffast-math
// (which would also assume away NaN and infinity, unlike PyTorch).
#define THUNDER_VECTOR_MATH(name) \
  _Pragma("omp declare simd notinbranch") float name##f(float); \
  _Pragma("omp declare simd notinbranch") double name(double);
extern "C" {
THUNDER_VECTOR_MATH(exp) THUNDER_VECTOR_MATH(exp2) THUNDER_VECTOR_MATH(log) THUNDER_VECTOR_MATH(log2)
THUNDER_VECTOR_MATH(log10) THUNDER_VECTOR_MATH(log1p) THUNDER_VECTOR_MATH(expm1) THUNDER_VECTOR_MATH(cos)
THUNDER_VECTOR_MATH(tan) THUNDER_VECTOR_MATH(asin) THUNDER_VECTOR_MATH(acos) THUNDER_VECTOR_MATH(atan)
THUNDER_VECTOR_MATH(sinh) THUNDER_VECTOR_MATH(cosh) THUNDER_VECTOR_MATH(tanh) THUNDER_VECTOR_MATH(asinh)
THUNDER_VECTOR_MATH(acosh) THUNDER_VECTOR_MATH(atanh) THUNDER_VECTOR_MATH(erf) THUNDER_VECTOR_MATH(erfc)
// sin under another name: GCC merges a sin and a cos of one value into one sincos call, which has no vector
// version (the loop then runs scalar: RoPE's cos/sin of the positions). The same symbols, const as without errno.
#pragma omp declare simd notinbranch
__attribute__((const)) float thunder_sinf(float) __asm__("sinf");
#pragma omp declare simd notinbranch
__attribute__((const)) double thunder_sin(double) __asm__("sin");
#pragma omp declare simd notinbranch
float powf(float, float);
#pragma omp declare simd notinbranch
double pow(double, double);
#pragma omp declare simd notinbranch
float atan2f(float, float);
#pragma omp declare simd notinbranch
double atan2(double, double);
}

static inline float bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Round to nearest even, as torch does; NaN stays a (quiet) NaN.
static inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (f != f) return 0x7FC0;
  bits += 0x7FFF + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}
static inline float bf16_round(float f) { return bf16_to_float(float_to_bf16(f)); }
// torch.maximum / torch.minimum: NaN wins.
template <class T> static inline T nan_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> static inline T nan_min(T a, T b) { return (a != a || a < b) ? a : b; }
// The sign bit, NaN's included (std::signbit inside an omp simd loop over bfloat16 crashes GCC 12).
static inline bool sign_bit(float x) { uint32_t b; std::memcpy(&b, &x, 4); return b >> 31; }
static inline bool sign_bit(double x) { uint64_t b; std::memcpy(&b, &x, 8); return b >> 63; }
// erf for float, within 2.5 ulp: |x| * P(x^2) below 1, Q(|x| - 2.46) up to 3.92, 1 above (where erf rounds
// to 1.0f); the coefficients are least-squares fits made by tools/fit_erf.py. Branch-free, so loops calling
// it vectorize: both polynomials are evaluated (18 FMAs), about 0.34 ns per element here, where glibc's
// libmvec erff takes 0.53 ns (GELU spends most of its time in erf). NaN stays NaN; erf(+-inf) = +-1.
static inline float thunder_erff(float x) {
  const float a = kmath::fabs(x), s = a * a, t = a - 2.46f;
  float p = 7.882497448e-05f;  // Horner's rule, written out: a loop here would not vectorize
  p = kmath::fma(p, s, -8.018855006e-04f); p = kmath::fma(p, s, 5.189312156e-03f); p = kmath::fma(p, s, -2.685432881e-02f);
  p = kmath::fma(p, s, 1.128359735e-01f); p = kmath::fma(p, s, -3.761262596e-01f); p = kmath::fma(p, s, 1.128379107e+00f);
  float q = -9.166920790e-06f;
  q = kmath::fma(q, t, 2.536314241e-05f); q = kmath::fma(q, t, 5.189640433e-05f); q = kmath::fma(q, t, -3.013669630e-04f);
  q = kmath::fma(q, t, 3.906787315e-04f); q = kmath::fma(q, t, 4.615696962e-04f); q = kmath::fma(q, t, -2.963119885e-03f);
  q = kmath::fma(q, t, 6.798153743e-03f); q = kmath::fma(q, t, -9.904964827e-03f); q = kmath::fma(q, t, 9.832828306e-03f);
  q = kmath::fma(q, t, -6.535748485e-03f); q = kmath::fma(q, t, 2.656208817e-03f); q = kmath::fma(q, t, 9.994966984e-01f);
  const float y = a < 1.0f ? p * a : (a > 3.92f ? 1.0f : q);
  return kmath::copysign(y, x);
}
// Copies `bytes` to dst with non-temporal stores (straight to memory, no read of the destination's lines);
// the ends not aligned to a vector are copied as usual. stream_fence() orders them before later stores.
// (GCC's builtins, not <immintrin.h>, whose parsing would double the compile time of a small kernel.)
#if defined(__AVX512F__)
typedef long long thunder_stream_t __attribute__((vector_size(64)));
#define THUNDER_STREAM(d, v) __builtin_ia32_movntdq512((thunder_stream_t*)(d), v)
#elif defined(__AVX__)
typedef long long thunder_stream_t __attribute__((vector_size(32)));
#define THUNDER_STREAM(d, v) __builtin_ia32_movntdq256((thunder_stream_t*)(d), v)
#elif defined(__SSE2__)
typedef long long thunder_stream_t __attribute__((vector_size(16)));
#define THUNDER_STREAM(d, v) __builtin_ia32_movntdq((thunder_stream_t*)(d), v)
#endif
static inline void stream_bytes(void* dst, const void* src, int64_t bytes) {
  char* d = (char*)dst;
  const char* s = (const char*)src;
#if defined(THUNDER_STREAM)
  constexpr int64_t W = sizeof(thunder_stream_t);
  int64_t head = (int64_t)((W - ((uintptr_t)d & (W - 1))) & (W - 1));
  if (head > bytes) head = bytes;
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  for (; bytes >= W; bytes -= W, d += W, s += W) {
    thunder_stream_t v;
    std::memcpy(&v, s, W);
    THUNDER_STREAM(d, v);
  }
#endif
  std::memcpy(d, s, bytes);
}
static inline void stream_fence() {
#if defined(__SSE2__)
  __builtin_ia32_sfence();
#endif
}
// Python's remainder: the result has the divisor's sign.
template <class T> static inline T py_remainder(T a, T b) {
  T r = kmath::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
)";
}

std::string render_cpu_module(const ir::Trace& t, const std::vector<std::pair<const KernelPlan*, std::string>>& kernels) {
  std::set<std::string> reductions;
  std::string code;
  for (const auto& [plan, name] : kernels) {
    KernelWriter w(t, *plan);
    code += "\n" + w.write(name);
    reductions.insert(w.reductions().begin(), w.reductions().end());
  }
  std::string declares;
  for (const std::string& r : reductions) {
    // "kmath_min_int32_t": an OpenMP reduction by kmath::min over int32_t (integer max/min).
    size_t cut = r.find('_', 6);
    std::string fn = r.substr(0, cut), type = r.substr(cut + 1);
    bool is_max = fn.find("max") != std::string::npos;
    std::string call = "kmath::" + fn.substr(6) + "<" + type + ">";
    std::string init = "kmath::limits<" + type + ">::" + (is_max ? "lowest()" : "max()");
    declares += "#pragma omp declare reduction(" + r + " : " + type + " : omp_out = " + call +
                "(omp_out, omp_in)) initializer(omp_priv = " + init + ")\n";
  }
  return cpu_prelude() + declares + code;
}

}  // namespace thunder::codegen
