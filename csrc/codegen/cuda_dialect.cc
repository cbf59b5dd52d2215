// This file builds its output with `"literal" + std::string` throughout, for which GCC 12's libstdc++
// reports false -Wrestrict warnings at -O2 and above (GCC bug 105329); they would fail -Werror builds.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "codegen/cuda_dialect.h"
#include "codegen/philox.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "codegen/cuda_expressions.h"
#include "codegen/index_names.h"

namespace thunder::codegen {
namespace {

using ir::DType;
using ir::PrimId;
using namespace cuda;

// No header: NVRTC declares CUDA's math functions and builtins itself.
const char* kCudaPrelude = R"(// thunder CUDA kernels (generated)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#ifndef NAN
#define NAN __int_as_float(0x7fc00000)
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#define TH_DEV static __device__ __forceinline__
// float16 and bfloat16 as their bits, converted with PTX's cvt (round to nearest even, as torch).
TH_DEV float f16_to_float(uint16_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
TH_DEV uint16_t float_to_f16(float f) { uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
TH_DEV float bf16_to_float(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }
TH_DEV uint16_t float_to_bf16(float f) { uint16_t h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
TH_DEV float f16_round(float f) { return f16_to_float(float_to_f16(f)); }
TH_DEV float bf16_round(float f) { return bf16_to_float(float_to_bf16(f)); }
// torch's maximum/minimum and amax/amin: a NaN operand wins.
template <class T> TH_DEV T nan_max(T a, T b) { return (a != a || a >= b) ? a : b; }
template <class T> TH_DEV T nan_min(T a, T b) { return (a != a || a <= b) ? a : b; }
template <class T> TH_DEV T int_max(T a, T b) { return a < b ? b : a; }
template <class T> TH_DEV T int_min(T a, T b) { return b < a ? b : a; }
TH_DEV bool sign_bit(float x) { return __float_as_int(x) < 0; }
TH_DEV bool sign_bit(double x) { return __double_as_longlong(x) < 0; }
// Python's remainder: the result has the divisor's sign.
TH_DEV float py_remainder(float a, float b) { float r = fmodf(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TH_DEV double py_remainder(double a, double b) { double r = fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
// N elements loaded or stored as one access (16 bytes for the widest dtype of a kernel).
template <class T, int N> struct __align__(sizeof(T) * N) Vec { T v[N]; };
)";

std::string ll(int64_t n) { return std::to_string(n) + "LL"; }

// The test of a range at index i (the parts that can fail: lo above 0, a bounded hi, a step).
std::string range_test(const IndexRange& r, const std::string& i) {
  std::vector<std::string> parts;
  if (r.lo > 0) parts.push_back(i + " >= " + ll(r.lo));
  if (r.hi != IndexRange::kUnbounded) parts.push_back(i + " < " + ll(r.hi));
  if (r.step != 1) parts.push_back("(" + (r.lo > 0 ? i + " - " + ll(r.lo) : i) + ") % " + ll(r.step) + " == 0");
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : " && ") + p;
  return out.empty() ? "true" : out;
}

// (i * scale + offset) / divisor: only the selected case is evaluated (a branch), so no clamp.
std::string index_expression(const IndexMap& m, const std::string& i) {
  std::string e = m.scale == 0 ? "" : m.scale == 1 ? i : i + " * " + ll(m.scale);
  if (e.empty()) e = ll(m.offset);
  else if (m.offset != 0) e += (m.offset > 0 ? " + " : " - ") + ll(m.offset > 0 ? m.offset : -m.offset);
  if (m.divisor != 1) e = "(" + e + ") / " + ll(m.divisor);
  return e;
}

int reduction_count(const KernelPlan& p) {
  int n = 0;
  for (const ir::BoundSymbol& b : p.symbols) n += b.sym->has(ir::kReduction) ? 1 : 0;
  return n;
}

// Writes one kernel: the plan's values as its GPU schedule maps them onto threads, each value's expression
// from the op-expression table (cuda_expressions.h).
class CudaWriter {
 public:
  CudaWriter(const ir::Trace& t, const KernelPlan& p, const GpuSchedule& s)
      : t_(t), p_(p), s_(s), sizes_(t, p),
        index_names_(p.domain.size()),
        index_refs_(t, p, [this](ProxyId v) { return linear_ && dense_value(t_, p_, v); }) {
    for (const ir::BoundSymbol& b : p.symbols) producer_[b.output.proxy()] = &b;
    for (size_t i = 0; i < p.inputs.size(); ++i) input_index_[p.inputs[i]] = i;
    linear_ = s.strategy == GpuStrategy::Elementwise && p.remaps.empty();
    int64_t elements = 1;
    for (int64_t n : p.domain) elements *= n;
    narrow_ = elements < (int64_t{1} << 31);
  }

  std::string write(const std::string& name) {
    std::vector<std::string> params;
    for (size_t k = 0; k < p_.inputs.size(); ++k) {
      const DType d = dtype(p_.inputs[k]);
      const std::string type = !host_scalar(t_, p_.inputs[k]) ? storage_type(d) + "* __restrict__"
                               : ir::is_floating(d)          ? "double"
                                                             : "int64_t";
      params.push_back("const " + type + " in" + std::to_string(k));
    }
    for (size_t k = 0; k < p_.outputs.size(); ++k)
      params.push_back(storage_type(dtype(p_.outputs[k])) + "* __restrict__ out" + std::to_string(k));
    for (const SizeArgument& a : size_arguments(t_, p_)) params.push_back("const int64_t " + a.name);
    for (size_t k = 0; k < p_.scalars.size(); ++k)  // numbers computed at run time (KernelPlan::scalars)
      params.push_back("const " + scalar_type(t_, p_, k) + " " + scalar_name(k));
    if (cuda_workspace_bytes(p_, s_) > 0) params.push_back("unsigned char* __restrict__ workspace");
    std::string head = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(s_.block) + ") " + name + "(";
    for (size_t i = 0; i < params.size(); ++i) head += (i ? ",\n    " : "") + params[i];
    std::string body;
    switch (s_.strategy) {
      case GpuStrategy::Elementwise: body = elementwise(); break;
      case GpuStrategy::TwoStage: body = two_stage(); break;
      default: body = rows(); break;
    }
    return head + ") {\n" + indent(body, "  ") + "}\n";
  }

 private:
  struct Scope {
    std::string lines;
    Scope* parent = nullptr;
    std::set<ProxyId> defined;
    bool remapped = false;  // evaluates at other indices: reuses nothing outside
    bool has(ProxyId v) const { return defined.count(v) || (parent && !remapped && parent->has(v)); }
  };

  DType dtype(ProxyId v) const { return t_.tensor(v).dtype; }
  std::string var(ProxyId v) const { return "v" + local(v); }
  // A value's number in this kernel: the order the kernel first mentions it in, not its proxy id, so that one
  // fusion renders to one source -- one compiled kernel -- in every trace it appears in (a graph's
  // specializations to other shapes number their proxies otherwise: their size inputs come first).
  std::string local(ProxyId v) const {
    auto it = local_.emplace(v, local_.size()).first;
    return std::to_string(it->second);
  }
  const std::string& index(int d) const { return index_names_[d]; }

  // Sizes as literals or size arguments (SizeTexts).
  std::string extent(int d) const { return sizes_.extent(d); }
  std::string extent_product(const std::vector<int>& dims) const { return sizes_.extent_product(dims); }
  std::string stride(ProxyId v, size_t i) const { return sizes_.stride(v, i); }
  std::string count(const std::vector<int>& dims) const {
    const std::string e = extent_product(dims);
    return e.empty() ? "1LL" : e;
  }

  // Defines index variables i<d> for `dims` (domain order) from the flat index `flat` over them. Where the domain
  // has fewer than 2^31 elements (its size class: the text differs for larger ones) the divisions are 32-bit: a
  // GPU has no 64-bit divider, and a 64-bit division is a call of ~70 instructions against ~20.
  std::string decompose(const std::vector<int>& dims, const std::string& flat, const std::string& tag) const {
    std::string out;
    const std::string rest = "rest_" + tag;
    const std::string narrow = narrow_ ? "(uint32_t)" : "";
    bool first = true;
    for (size_t k = dims.size(); k-- > 0;) {
      const int d = dims[k];
      if (p_.domain[d] == 1) {
        out += "const int64_t " + index(d) + " = 0;\n";
        continue;
      }
      if (first) out += (narrow_ ? "uint32_t " : "int64_t ") + rest + " = " + narrow + flat + ";\n";
      first = false;
      bool outermost = true;  // no dim of more than one element outside it
      for (size_t j = 0; j < k; ++j) outermost = outermost && p_.domain[dims[j]] == 1;
      if (outermost) {
        out += "const int64_t " + index(d) + " = " + rest + ";\n";
      } else {
        out += "const int64_t " + index(d) + " = " + rest + " % " + narrow + extent(d) + ";\n";
        out += rest + " /= " + narrow + extent(d) + ";\n";
      }
    }
    if (!first) out += "(void)" + rest + ";\n";
    return out;
  }


  std::string offset(ProxyId v) const {
    if (linear_ && dense_value(t_, p_, v)) return "L";  // laid out as the domain: the flat index
    const auto& al = p_.align.at(v);
    std::string out;
    for (size_t i = 0; i < al.size(); ++i) {
      if (al[i] < 0 || shape_of(t_, v)[i] == 1) continue;
      const std::string s = stride(v, i);
      out += (out.empty() ? "" : " + ") + index(al[i]) + (s.empty() ? "" : " * " + s);
    }
    return out.empty() ? "0" : out;
  }

  // An output aligned to fewer dims than the domain is stored where the others are 0 (and, for a row-level
  // output, by the row's first thread).
  std::string store_line(ProxyId v, size_t slot, Scope& scope, const std::string& thread_test) {
    emit(v, scope);
    std::string first = thread_test;
    const auto& al = p_.align.at(v);
    for (size_t d = 0; d < p_.domain.size(); ++d) {
      bool covered = p_.reduced[d] || p_.domain[d] == 1;
      for (size_t i = 0; i < al.size(); ++i) covered |= al[i] == static_cast<int>(d) && shape_of(t_, v)[i] != 1;
      if (!covered) first += (first.empty() ? "" : " && ") + index(static_cast<int>(d)) + " == 0";
    }
    const std::string out = "out" + std::to_string(slot);
    if (vector_outputs_.count(slot) && first.empty()) return "v" + out + ".v[j] = " + store(dtype(v), var(v)) + ";\n";
    const std::string line = out + "[" + offset(v) + "] = " + store(dtype(v), var(v)) + ";\n";
    return first.empty() ? line : "if (" + first + ") " + line;
  }

  // ---- strategies ----

  std::string elementwise() {
    std::vector<int> all(p_.domain.size());
    for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int>(d);
    std::string out = "const int64_t total = " + count(all) + ";\n";
    out += "const int64_t step = (int64_t)gridDim.x * blockDim.x;\n";
    out += "const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n";
    const bool tail = s_.vector > 1 && !all.empty() && all_dense();
    if (tail) out += "int64_t tail = 0;  // where the vector path ended\n";
    if (s_.vector > 1 && !all.empty()) out += vector_loop(all, tail);
    Scope body;
    std::string stores;
    for (size_t k = 0; k < p_.outputs.size(); ++k) stores += store_line(p_.outputs[k], k, body, "");
    out += "for (int64_t L = " + std::string(tail ? "tail + first" : "first") + "; L < total; L += step) {\n" +
           indent(decompose(all, "L", "L") + body.lines + stores, "  ") + "}\n";
    return out;
  }

  // Whether every output and input is laid out as the domain (read and written at the flat index alone), or an
  // input taken by value.
  bool all_dense() const {
    for (ProxyId v : p_.outputs)
      if (!dense_value(t_, p_, v)) return false;
    for (ProxyId v : p_.inputs)
      if (!dense_value(t_, p_, v) && !host_scalar(t_, v)) return false;
    return true;
  }

  // The vector path: where every dense value's pointer is aligned to its vector and the innermost extent is a
  // multiple of the vector, each thread takes `V` consecutive elements, loading and storing the dense values as
  // one access each; the other values (broadcasts, strided inputs) are read per element. Where every value is
  // dense (`tail`), no index but the flat one is read, so any extent takes the vector path up to the last whole
  // vector, and the per-element loop after it does the rest (a row of 50257 logits, 3 channels).
  std::string vector_loop(const std::vector<int>& all, bool tail) {
    const int V = s_.vector;
    const std::string Vs = std::to_string(V);
    std::string aligned, loads, decls, writes;
    for (size_t k = 0; k < p_.inputs.size(); ++k) {
      ProxyId v = p_.inputs[k];
      if (!dense_value(t_, p_, v)) continue;
      const std::string T = storage_type(dtype(v)), n = std::to_string(k);
      aligned += " && (unsigned long long)in" + n + " % (sizeof(" + T + ") * " + Vs + ") == 0";
      loads += "const Vec<" + T + ", " + Vs + "> vin" + n + " = *(const Vec<" + T + ", " + Vs + ">*)(in" + n + " + L0);\n";
      vector_inputs_[v] = "vin" + n + ".v[j]";
    }
    for (size_t k = 0; k < p_.outputs.size(); ++k) {
      ProxyId v = p_.outputs[k];
      if (!dense_value(t_, p_, v)) continue;
      const std::string T = storage_type(dtype(v)), n = std::to_string(k);
      aligned += " && (unsigned long long)out" + n + " % (sizeof(" + T + ") * " + Vs + ") == 0";
      decls += "Vec<" + T + ", " + Vs + "> vout" + n + ";\n";
      writes += "*(Vec<" + T + ", " + Vs + ">*)(out" + n + " + L0) = vout" + n + ";\n";
      vector_outputs_.insert(k);
    }
    const int last = all.back();
    // The innermost index of the vector's first element; its elements are that plus j.
    const std::string base = index(last) + "_0";
    // Without a tail, the indices of the vector's elements: the innermost one is the first's plus j.
    std::string decomposition, element_index;
    if (!tail) {
      {
        const auto restore = index_names_.keep();
        index_names_.rename(last, base);
        decomposition = decompose(all, "L0", "L0") + "(void)" + base + ";\n";
      }
      element_index = "const int64_t " + index(last) + " = " + base + " + j;\n(void)" + index(last) + ";\n";
    }
    Scope body;
    std::string stores;
    for (size_t k = 0; k < p_.outputs.size(); ++k) stores += store_line(p_.outputs[k], k, body, "");
    vector_inputs_.clear();
    vector_outputs_.clear();
    const std::string element = "const int64_t L = L0 + j;\n(void)L;\n" + element_index + body.lines + stores;
    const std::string loop = decomposition + loads + decls + "#pragma unroll\nfor (int j = 0; j < " + Vs + "; ++j) {\n" +
                             indent(element, "  ") + "}\n" + writes;
    if (tail)
      return "if (" + aligned.substr(4) + ") {\n  for (int64_t L0 = first * " + Vs + "; L0 + " + Vs + " <= total; L0 += step * " +
             Vs + ") {\n" + indent(loop, "    ") + "  }\n  tail = total - total % " + Vs + ";\n}\n";
    return "if (" + extent(last) + " % " + Vs + " == 0" + aligned + ") {\n" + "  for (int64_t L0 = first * " + Vs +
           "; L0 < total; L0 += step * " + Vs + ") {\n" + indent(loop, "    ") + "  }\n  return;\n}\n";
  }

  // Warp or block per row: the rows in a grid-stride loop; inside, the row's threads take its elements in
  // turn, reduce them (warp shuffles, then shared memory across a block's warps: every thread ends with the
  // same result, combined in a fixed order), and write the element-level outputs.
  std::string rows() {
    const bool warp = s_.strategy == GpuStrategy::WarpPerRow;
    std::string out = "const int lane = threadIdx.x & 31;\n(void)lane;\n";
    if (!warp) out += "__shared__ double thunder_shared[32];\nconst int warp = threadIdx.x >> 5;\n(void)warp;\n";
    out += warp ? "const int64_t tid = lane, threads = 32;\n" : "const int64_t tid = threadIdx.x, threads = blockDim.x;\n";
    out += "const int64_t rows = " + count(s_.outer) + ", length = " + count(s_.inner) + ";\n(void)length;\n";
    const std::string first_row = warp ? "(int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)" : "(int64_t)blockIdx.x";
    const std::string row_step = warp ? "(int64_t)gridDim.x * (blockDim.x >> 5)" : "(int64_t)gridDim.x";
    Scope row;
    row_body(row, "tid == 0");
    return out + "for (int64_t row = " + first_row + "; row < rows; row += " + row_step + ") {\n" +
           indent(decompose(s_.outer, "row", "row") + row.lines, "  ") + "}\n";
  }

  // The row's reductions, its element-level outputs (a loop over the row) and its row-level outputs.
  void row_body(Scope& row, const std::string& thread_test) {
    for (const ir::BoundSymbol& b : p_.symbols)
      if (b.sym->has(ir::kReduction)) emit(b.output.proxy(), row);
    std::string stores, inner_stores;
    Scope inner{{}, &row, {}, false};
    bool element_outputs = false;
    for (size_t k = 0; k < p_.outputs.size(); ++k) {
      if (p_.element_level(p_.outputs[k])) {
        inner_stores += store_line(p_.outputs[k], k, inner, "");
        element_outputs = true;
      } else {
        stores += store_line(p_.outputs[k], k, row, thread_test);
      }
    }
    if (element_outputs)
      row.lines += "for (int64_t e = tid; e < length; e += threads) {\n" +
                   indent(decompose(s_.inner, "e", "e") + inner.lines + inner_stores, "  ") + "}\n";
    row.lines += stores;
  }

  // A few long rows, each split across `parts` consecutive blocks (the grid is rows x parts): every block reduces
  // its slice of its row into one partial result per reduction (stage one); the row's last block to finish (the
  // row's counter in the workspace) combines the row's partial results in block order (stage two), then computes
  // the row-level values and stores them, and resets the counter for the next launch.
  std::string two_stage() {
    two_stage_ = true;
    const int64_t slots = reduction_count(p_);
    std::string out = "__shared__ double thunder_shared[32];\n__shared__ int thunder_last;\n";
    out += "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;\n(void)lane; (void)warp;\n";
    out += "const int64_t parts = (int64_t)gridDim.x / " + count(s_.outer) + ";\n";
    out += "const int64_t row = (int64_t)blockIdx.x / parts, part = (int64_t)blockIdx.x % parts;\n";
    out += "const int64_t tid = part * blockDim.x + threadIdx.x, threads = parts * blockDim.x;\n";
    out += "const int64_t length = " + count(s_.inner) + ";\n";
    out += "unsigned int* counter = (unsigned int*)(workspace + " + ll(slots * s_.limits.max_partials * 8) + ") + row;\n";
    Scope row;
    std::string outer = decompose(s_.outer, "row", "row");
    row_body(row, "threadIdx.x == 0");
    out += outer + stage_one_;
    out += "__threadfence();\n__syncthreads();\n";
    out += "if (threadIdx.x == 0) thunder_last = atomicAdd(counter, 1u) == parts - 1;\n__syncthreads();\n";
    out += "if (!thunder_last) return;\n__threadfence();\n";
    out += row.lines + "if (threadIdx.x == 0) *counter = 0;\n";
    return out;
  }

  // ---- values ----

  void emit(ProxyId v, Scope& scope) {
    if (scope.has(v)) return;
    if (scope.parent && !p_.has_reduction() && index_refs_(v).empty()) {
      Scope* root = &scope;
      while (root->parent) root = root->parent;
      const auto restore = index_names_.at_loop_top();
      return emit(v, *root);
    }
    if (scope.parent && p_.has_reduction() && !p_.element_level(v)) return emit(v, *scope.parent);
    const std::string T = compute_type(dtype(v));
    auto define = [&](const std::string& e) {
      scope.lines += "const " + T + " " + var(v) + " = " + e + ";\n";
      scope.defined.insert(v);
    };
    auto it = producer_.find(v);
    if (it == producer_.end()) {  // a kernel input
      if (host_scalar(t_, v)) return define("(" + T + ")in" + std::to_string(input_index_.at(v)));  // by value
      auto vec = vector_inputs_.find(v);
      const std::string lvalue = vec != vector_inputs_.end() ? vec->second
                                                             : "in" + std::to_string(input_index_.at(v)) + "[" + offset(v) + "]";
      return define(load(dtype(v), lvalue));
    }
    const ir::BoundSymbol& b = *it->second;
    if (b.sym->has(ir::kReduction)) return emit_reduction(v, b, scope);
    if (b.is(PrimId::take_along_axis)) return emit_pick(v, b, scope);
    if (p_.remaps.count(v)) return emit_remap(v, scope);
    if (b.is(PrimId::full)) {
      std::string e = number_text(p_, b.args[1], T);
      return define(dtype(v) == DType::Float16 || dtype(v) == DType::BFloat16 ? round_to(dtype(v), e) : e);
    }
    if (b.is(PrimId::uniform_philox)) {  // uniform_philox(shape, seed, offset, dtype, device)
      emit(b.args[1].proxy(), scope);
      const std::vector<std::string> operands{var(b.args[1].proxy()),
                                              "(int64_t)" + std::to_string(b.args[2].as_int()) + "LL + " + offset(v)};
      return define(cuda_expressions().at(PrimId::uniform_philox).expr(ExprArgs{dtype(v), dtype(v), operands, T, true, ""}));
    }
    const PrimId op = b.sym->prim;
    const CudaOp& row = cuda_expressions().at(op);
    std::vector<std::string> operands;
    DType in_dtype = dtype(v);
    const size_t n = row.operands < 0 ? b.args.size() : std::min<size_t>(b.args.size(), row.operands);
    for (size_t i = 0; i < n; ++i) {
      const ir::Value& a = b.args[i];
      if (a.is_proxy() && t_.proxy(a.proxy()).is_tensor) {
        emit(a.proxy(), scope);
        operands.push_back(var(a.proxy()));
        if (op != PrimId::where || i > 0) in_dtype = dtype(a.proxy());
      } else {
        operands.push_back("");  // a number
      }
    }
    for (size_t i = 0; i < operands.size(); ++i)
      if (operands[i].empty()) operands[i] = number_operand(op, number_text(p_, b.args[i], compute_type(in_dtype)), in_dtype);
    std::string e =
        op == PrimId::pow && b.args[1].is_number() ? small_power(operands[0], b.args[1].as_double(), dtype(v), T) : "";
    if (e.empty()) e = row.expr(ExprArgs{dtype(v), in_dtype, operands, T, ir::is_floating(in_dtype), T == "float" ? "f" : ""});
    const bool half = dtype(v) == DType::Float16 || dtype(v) == DType::BFloat16;
    if (half && plan_table().at(op).role != PrimRole::IndexOnly) e = round_to(dtype(v), e);
    define(e);
  }

  // The value of u with the given domain dims read at other indices, computed in a block of its own:
  // returns the block's lines (to place where the block runs) and the variable holding u there.
  std::pair<std::string, std::string> block_at(ProxyId u, const std::vector<std::pair<int, std::string>>& remaps,
                                               Scope& scope) {
    std::string block;
    const std::string r = "r" + std::to_string(next_remap_++);
    const auto restore = index_names_.enter_block();
    for (const auto& [d, expr] : remaps) {
      std::string name = "i" + std::to_string(d) + "_" + r;
      block += "const int64_t " + name + " = " + expr + ";\n";
      index_names_.rename(d, std::move(name));
    }
    Scope inner{{}, &scope, {}, !remaps.empty()};
    emit(u, inner);
    return {block + inner.lines, var(u)};
  }

  // A remapped value (slice, cat, slice_update): the first case whose ranges hold, as a branch; each case's
  // operand is computed inside its branch at its mapped indices, so no index needs a clamp.
  void emit_remap(ProxyId v, Scope& scope) {
    const std::string T = compute_type(dtype(v));
    const std::vector<RemapCase>& cases = p_.remaps.at(v).cases;
    std::string text = T + " " + var(v) + ";\n";
    if (cases.empty()) text += var(v) + " = (" + T + ")0;\n";
    for (size_t k = 0; k < cases.size(); ++k) {
      const RemapCase& c = cases[k];
      std::string test;
      for (const IndexRange& r : c.when) test += (test.empty() ? "" : " && ") + range_test(r, index(r.dim));
      if (test.empty()) test = "true";
      std::vector<std::pair<int, std::string>> remaps;
      for (const IndexMap& m : c.at)
        if (!m.identity()) remaps.emplace_back(m.dim, index_expression(m, index(m.dim)));
      auto [lines, result] = block_at(c.operand, remaps, scope);
      const bool last = k + 1 == cases.size();
      text += (k == 0 ? (last ? "{\n" : "if (" + test + ") {\n") : (last ? "} else {\n" : "} else if (" + test + ") {\n"));
      text += indent(lines + var(v) + " = " + result + ";\n", "  ");
    }
    if (!cases.empty()) text += "}\n";
    scope.lines += text;
    scope.defined.insert(v);
  }

  // take_along_axis along the reduced dim, at row level: the source evaluated at the row's index value. An
  // index out of range traps (torch's CUDA gather fails a device-side assert).
  void emit_pick(ProxyId v, const ir::BoundSymbol& b, Scope& scope) {
    ProxyId src = b.args[0].proxy(), idx = b.args[1].proxy();
    int dim = -1;
    for (size_t d = 0; d < p_.domain.size(); ++d)
      if (p_.reduced[d]) dim = static_cast<int>(d);
    emit(idx, scope);
    const std::string i = "pick" + local(v);
    scope.lines += "const int64_t " + i + " = (int64_t)" + var(idx) + ";\nif (" + i + " < 0 || " + i + " >= " + extent(dim) +
                   ") __trap();\n";
    auto [lines, result] = block_at(src, {{dim, i}}, scope);
    const std::string T = compute_type(dtype(v));
    scope.lines += T + " " + var(v) + ";\n{\n" + indent(lines + var(v) + " = " + result + ";\n", "  ") + "}\n";
    scope.defined.insert(v);
  }

  // Combines `acc` across the threads of the row: the warp's lanes by shuffles (all lanes get the same
  // result), then, in a block, the warps' results through shared memory, read by every thread in warp order.
  std::string combine_threads(const Reduction& r, const std::string& acc, bool block) const {
    std::string out = "for (int o = 16; o > 0; o >>= 1) " + acc + " = " +
                      combine_text(r.combine, acc, "__shfl_xor_sync(0xffffffffu, " + acc + ", o)") + ";\n";
    if (!block) return out;
    const std::string sh = "((" + r.acc_type + "*)thunder_shared)";
    out += "__syncthreads();\nif (lane == 0) " + sh + "[warp] = " + acc + ";\n__syncthreads();\n";
    out += acc + " = " + sh + "[0];\nfor (int w = 1; w < (int)(blockDim.x >> 5); ++w) " + acc + " = " +
           combine_text(r.combine, acc, sh + "[w]") + ";\n";
    return out;
  }

  void emit_reduction(ProxyId v, const ir::BoundSymbol& b, Scope& scope) {
    ProxyId in = b.args[0].proxy();
    const Reduction r = cuda_expressions().at(b.sym->prim).reduce(dtype(in));
    const std::string acc = "acc" + local(v), e = "e" + local(v);
    // Two stages: the reduction reads only inputs (the schedule checked), computed per element in the loop.
    Scope inner{{}, two_stage_ ? nullptr : &scope, {}, false};
    emit(in, inner);
    std::string loop = r.acc_type + " " + acc + " = " + r.init + ";\n";
    {
      const auto restore = index_names_.keep();
      for (int d : s_.inner) index_names_.rename(d, "i" + std::to_string(d));
      loop += "for (int64_t " + e + " = tid; " + e + " < length; " + e + " += threads) {\n" +
              indent(decompose(s_.inner, e, e) + inner.lines + acc + " = " + combine_text(r.combine, acc, var(in)) + ";\n",
                     "  ") +
              "}\n";
    }
    const bool block = s_.strategy != GpuStrategy::WarpPerRow;
    loop += combine_threads(r, acc, block);
    if (two_stage_) {
      const std::string slot = "((" + r.acc_type + "*)(workspace + " + ll(next_slot_++ * s_.limits.max_partials * 8) + "))";
      stage_one_ += "{\n" + indent(loop + "if (threadIdx.x == 0) " + slot + "[blockIdx.x] = " + acc + ";\n", "  ") + "}\n";
      // Stage two, in the row's last block: the row's partial results in block order.
      loop = r.acc_type + " " + acc + " = " + r.init + ";\nfor (int64_t b = threadIdx.x; b < parts; b += blockDim.x) " + acc +
             " = " + combine_text(r.combine, acc, "((volatile " + r.acc_type + "*)" + slot + ")[row * parts + b]") + ";\n" +
             combine_threads(r, acc, true);
    }
    scope.lines += loop;
    const std::string T = compute_type(dtype(v));
    scope.lines += "const " + T + " " + var(v) + " = " + round_to(dtype(v), "(" + T + ")" + acc) + ";\n";
    scope.defined.insert(v);
  }

  const ir::Trace& t_;
  const KernelPlan& p_;
  mutable std::unordered_map<ProxyId, size_t> local_;  // see local()
  const GpuSchedule& s_;
  SizeTexts sizes_;
  std::map<ProxyId, const ir::BoundSymbol*> producer_;
  std::map<ProxyId, size_t> input_index_;
  IndexNames index_names_;  // per domain dim, the variable holding its index ("i2", or a block's)
  IndexRefs index_refs_;  // dense inputs read at the flat index L read dim -1
  std::map<ProxyId, std::string> vector_inputs_;  // in the vector path: dense input -> its element of the vector
  std::set<size_t> vector_outputs_;               // in the vector path: the dense outputs' slots
  bool linear_ = false;     // dense values are read and written at the flat index L
  bool narrow_ = false;     // the domain has fewer than 2^31 elements: index divisions in 32 bits
  bool two_stage_ = false;  // reductions write stage one into stage_one_
  std::string stage_one_;
  int64_t next_slot_ = 0;
  int next_remap_ = 0;
};

}  // namespace

std::string cuda_prelude() { return kCudaPrelude; }

int64_t cuda_workspace_bytes(const KernelPlan& plan, const GpuSchedule& schedule) {
  if (schedule.strategy != GpuStrategy::TwoStage) return 0;
  return reduction_count(plan) * schedule.limits.max_partials * 8 + 4 * schedule.limits.split_rows;  // + the counters
}

bool cuda_kernel_draws(const KernelPlan& plan) {
  return std::any_of(plan.symbols.begin(), plan.symbols.end(),
                     [](const ir::BoundSymbol& b) { return b.is(PrimId::uniform_philox); });
}

std::string render_cuda_kernel(const ir::Trace& t, const CudaKernel& k) {
  return CudaWriter(t, *k.plan, *k.schedule).write(k.name);
}

std::string cuda_module_source(const std::vector<std::string>& kernel_texts, bool draws) {
  std::string code = cuda_prelude();
  if (draws) {  // the Philox code (codegen/philox.h) as device functions
    std::string philox_code = philox::source();
    for (size_t at = 0; (at = philox_code.find("static inline", at)) != std::string::npos; at += 24)
      philox_code.replace(at, 13, "static __device__ inline");
    code += "// Philox4x32-10 (codegen/philox.h)\n" + philox_code + "\n";
  }
  for (const std::string& text : kernel_texts) code += "\n" + text;
  return code;
}


std::string render_cuda_module(const ir::Trace& t,
                               const std::vector<std::pair<const KernelPlan*, std::string>>& kernels) {
  std::vector<std::string> texts;
  bool draws = false;
  for (const auto& [plan, name] : kernels) {
    const GpuSchedule schedule = schedule_gpu_kernel(t, *plan);
    texts.push_back(render_cuda_kernel(t, {plan, &schedule, name}));
    draws = draws || cuda_kernel_draws(*plan);
  }
  return cuda_module_source(texts, draws);
}

}  // namespace thunder::codegen
