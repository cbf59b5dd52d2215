// This file builds its output with `"literal" + std::string` throughout, for which
// GCC 12's libstdc++ reports false -Wrestrict warnings at -O2 and above (GCC bug
// 105329); they would fail -Werror builds. Set before the includes, where they are reported.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "codegen/cpu_dialect.h"
#include "codegen/philox.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "codegen/cpu_expressions.h"
#include "codegen/index_names.h"

namespace thunder::codegen {
namespace {

using ir::DType;
using ir::PrimId;
using namespace cpu;

// Every parallel loop runs on the caller's thread count, passed after the kernel's pointers.
const std::string kParallelFor = "#pragma omp parallel for num_threads(nthreads)";
const std::string kBySize = " if(parallel: ";  // the clause of a nest parallel only from the grain on

// Writes one kernel: the plan's loop nest as its schedule orders it, each value's expression from the
// op-expression table (cpu_expressions.h).
class KernelWriter {
 public:
  KernelWriter(const ir::Trace& t, const KernelPlan& p, const Schedule& s, HalfRounding rounding)
      : t_(t), p_(p), s_(s), sizes_(t, p), round_every_op_(rounding == HalfRounding::EveryOp),
        index_refs_(t, p), index_names_(p.domain.size()) {
    for (const ir::BoundSymbol& b : p.symbols) producer_[b.output.proxy()] = &b;
    for (size_t i = 0; i < p.inputs.size(); ++i) input_index_[p.inputs[i]] = i;
  }

  std::string write(const std::string& name) {
    std::ostringstream os;
    os << "extern \"C\" int " << name << "(void* const* args) {\n";
    // An output written over an input (KernelPlan::written_over): the input is read through the output's
    // pointer, so that the two restrict pointers never alias and the compiler sees one array.
    std::map<size_t, size_t> over;  // input -> output
    for (size_t i = 0; i < p_.written_over.size(); ++i)
      if (p_.written_over[i] >= 0) over[static_cast<size_t>(p_.written_over[i])] = i;
    size_t k = 0;
    for (ProxyId id : p_.inputs) {
      if (!over.count(k))
        os << "  const " << storage_type(dtype(id)) << "* __restrict in" << k << " = (const "
           << storage_type(dtype(id)) << "*)args[" << k << "];\n";
      ++k;
    }
    for (size_t i = 0; i < p_.outputs.size(); ++i)
      os << "  " << storage_type(dtype(p_.outputs[i])) << "* __restrict out" << i << " = ("
         << storage_type(dtype(p_.outputs[i])) << "*)args[" << k + i << "];\n";
    for (const auto& [in, out] : over)
      os << "  const " << storage_type(dtype(p_.inputs[in])) << "* in" << in << " = out" << out
         << ";  // written over in place\n";
    // The caller's thread count (torch.get_num_threads()) follows the pointers.
    os << "  const int nthreads = (int)(intptr_t)args[" << k + p_.outputs.size() << "];\n  (void)nthreads;\n";
    // Then the sizes of a shape-generic kernel (see SizeArgument).
    size_t at = k + p_.outputs.size() + 1;
    for (const SizeArgument& a : size_arguments(t_, p_))
      os << "  const int64_t " << a.name << " = (int64_t)(intptr_t)args[" << at++ << "];\n";
    // Then the numbers computed at run time (KernelPlan::scalars): a float passed as its bits, an int or a bool
    // as itself.
    for (size_t k = 0; k < p_.scalars.size(); ++k) {
      const std::string x = scalar_name(k), type = scalar_type(t_, p_, k);
      if (type == "double")
        os << "  double " << x << ";\n  std::memcpy(&" << x << ", &args[" << at++ << "], sizeof " << x << ");\n";
      else
        os << "  const " << type << " " << x << " = (" << type << ")(intptr_t)args[" << at++ << "];\n";
    }
    os << "  int error = 0;  // set when an index is out of range\n";
    const std::string body = p_.has_reduction() ? row_loops() : element_loops();
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

  // A kernel without reductions: one loop nest over the whole domain; every value is element level. Range
  // tests along the outer dims are computed before the innermost loop (hoisted).
  std::string element_loops() {
    const std::vector<int>& outer = s_.outer;
    std::string hoisted, body;
    if (outer.size() > 1) hoisted_ = &hoisted;
    std::vector<size_t> all(p_.outputs.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    const size_t keep = outer.size() > 1 ? outer.size() - 1 : 1;  // the parallel loops
    if (!s_.cuts.empty()) {
      // The innermost loop split where a remap's ranges along it begin or end (a cat changes part, a
      // slice_update's box begins or ends): one loop per piece, each reading the one operand selected
      // there at a fixed offset, contiguous (vectorizable for every dtype, no gathers or selects).
      const int d = outer.back();
      std::string text;
      int64_t lo = 0;
      std::vector<int64_t> cuts = s_.cuts;
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
      std::string pragma = s_.parallel ? parallel_for(rest.size()) : "";
      body = loops(rest, hoisted + text, pragma, "  ", false);
    } else if (s_.stream) {
      std::string pragma = s_.parallel ? parallel_for(keep) : "";
      body = streamed_loops(outer, all, nullptr, pragma, "  ");
    } else {
      Scope scope;
      std::string stores;
      for (size_t i : all) stores += store_line(p_.outputs[i], i, scope, "    ");
      std::string pragma = s_.parallel && outer.size() > 0 ? parallel_for(keep) : "";
      body = loops(outer, scope.lines + stores, pragma, "  ", true, "#pragma omp simd", hoisted);
    }
    hoisted_ = nullptr;
    return body;
  }

  // A kernel with reductions: a loop over the rows (the outer dims), inside it the reductions' passes over
  // the row (the dims in R), then a pass storing the element-level outputs.
  std::string row_loops() {
    Scope row;
    // Every reduction first, in program order: later passes over the row can then reuse what
    // earlier passes kept in row buffers.
    for (const ir::BoundSymbol& b : p_.symbols)
      if (b.sym->has(ir::kReduction)) emit(b.output.proxy(), row);
    std::string stores;
    std::vector<size_t> element_outputs;
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      if (stored_in_pass_.count(i)) continue;  // by a reduction's pass (emit_reduction)
      if (p_.element_level(p_.outputs[i])) element_outputs.push_back(i);
      else stores += store_line(p_.outputs[i], i, row, "");
    }
    if (s_.stream && !element_outputs.empty()) {
      row.lines += streamed_loops(s_.inner, element_outputs, &row, "", "");
    } else if (!element_outputs.empty()) {
      Scope inner_scope{{}, &row, {}, false};
      std::string inner_stores;
      for (size_t i : element_outputs) inner_stores += store_line(p_.outputs[i], i, inner_scope, "");
      row.lines += loops(s_.inner, inner_scope.lines + inner_stores,
                         s_.parallel_inner ? kParallelFor + collapse(s_.inner.size()) : "", "", true);
    }
    std::string pragma = s_.parallel ? parallel_for(s_.outer.size()) : "";
    return loops(s_.outer, indent(row.lines + stores, "  "), pragma, "  ", false);
  }

  // The pragma of the parallel loops over the outer dims (the outermost `n` of them collapsed into one). With
  // the element count known only at run time, they run in parallel from the grain on (Schedule::parallel_by_size).
  std::string parallel_for(size_t n) const {
    const std::string pragma = kParallelFor + collapse(n) + " schedule(static)";
    if (!s_.parallel_by_size) return pragma;
    std::vector<int> all(p_.domain.size());
    for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int>(d);
    return pragma + kBySize + extent_product(all) + " >= " + std::to_string(s_.limits.grain) + "LL)";
  }

  DType dtype(ProxyId v) const { return t_.tensor(v).dtype; }
  std::string var(ProxyId v) const { return "v" + local(v); }
  // A value's number in this kernel: the order the kernel first mentions it in, not its proxy id, so that one
  // fusion renders to one source -- one compiled kernel -- in every trace it appears in (a graph's
  // specializations to other shapes number their proxies otherwise: their size inputs come first).
  std::string local(ProxyId v) const {
    auto it = local_.emplace(v, local_.size()).first;
    return std::to_string(it->second);
  }

  std::string offset(ProxyId v) const {
    const auto& al = p_.align.at(v);
    std::string out;
    for (size_t i = 0; i < al.size(); ++i) {
      if (al[i] < 0 || shape_of(t_, v)[i] == 1) continue;
      const std::string s = stride(v, i);
      out += (out.empty() ? "" : " + ") + index(al[i]) + (s.empty() ? "" : " * " + s);
    }
    return out.empty() ? "0" : out;
  }

  // Sizes as literals or size arguments (SizeTexts).
  std::string stride(ProxyId v, size_t i) const { return sizes_.stride(v, i); }
  std::string extent(int d) const { return sizes_.extent(d); }
  std::string extent_product(const std::vector<int>& dims) const { return sizes_.extent_product(dims); }

  std::string store_line(ProxyId v, size_t slot, Scope& scope, const std::string& ind) {
    emit(v, scope);
    // An output aligned to fewer dims than the loops run over (one element in a larger domain) is the same
    // at every index of the others: stored where they are 0.
    std::string first;
    const auto& al = p_.align.at(v);
    for (size_t d = 0; d < p_.domain.size(); ++d) {
      bool covered = p_.reduced[d] || p_.domain[d] == 1;
      for (size_t i = 0; i < al.size(); ++i) covered |= al[i] == static_cast<int>(d) && shape_of(t_, v)[i] != 1;
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
    if (scope.parent && !p_.has_reduction() && index_refs_(v).empty()) {
      Scope* root = &scope;
      while (root->parent) root = root->parent;
      const auto restore = index_names_.at_loop_top();
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
    if (b.sym->has(ir::kReduction)) return emit_reduction(v, scope);
    if (b.is(PrimId::take_along_axis)) return emit_pick(v, b, scope);
    if (p_.remaps.count(v)) return emit_remap(v, scope);
    if (b.is(PrimId::full)) {  // full(shape, fill_value, dtype, device): the number, converted as torch.full does
      std::string e = number_text(p_, b.args[1], T);
      if (is_half(dtype(v))) e = round_to(dtype(v), e);
      scope.lines += "const " + T + " " + var(v) + " = " + e + ";\n";
      scope.defined.insert(v);
      return;
    }
    if (b.is(PrimId::uniform_philox)) {  // uniform_philox(shape, seed, offset, dtype, device)
      emit(b.args[1].proxy(), scope);
      const std::vector<std::string> operands{var(b.args[1].proxy()),
                                              "(int64_t)" + std::to_string(b.args[2].as_int()) + "LL + " + offset(v)};
      const std::string e = cpu_expressions().at(PrimId::uniform_philox).expr(ExprArgs{dtype(v), dtype(v), operands, T, true, ""});
      scope.lines += "const " + T + " " + var(v) + " = " + e + ";\n";
      scope.defined.insert(v);
      return;
    }
    const PrimId op = b.sym->prim;
    const CppOp& row = cpu_expressions().at(op);
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
        operands.push_back("");  // a number: typed below, once the operand dtype is known
      }
    }
    for (size_t i = 0; i < operands.size(); ++i)
      if (operands[i].empty()) operands[i] = number_operand(op, number_text(p_, b.args[i], compute_type(in_dtype)), in_dtype);
    std::string e = op == PrimId::pow && b.args[1].is_number()
                        ? small_power(operands[0], b.args[1].as_double(), dtype(v), compute_type(dtype(v)))
                        : "";
    if (e.empty()) {
      const std::string T = compute_type(dtype(v));
      e = row.expr(ExprArgs{dtype(v), in_dtype, operands, T, ir::is_floating(in_dtype), T == "float" ? "f" : ""});
    }
    // Rounded after every op, as eager does (or, AtStores, only by a conversion and where the forward's value is
    // recomputed: stores round anyway); index-only prims pass their operand's value on unchanged.
    if (is_half(dtype(v)) && plan_table().at(op).role != PrimRole::IndexOnly &&
        (rounds_every_op(v) || op == PrimId::convert_element_type))
      e = round_to(dtype(v), e);
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
    Scope inner{{}, &scope, {}, true};
    {
      const auto restore = index_names_.enter_block();
      for (const auto& [d, expr] : remaps) {
        std::string name = "i" + std::to_string(d) + "_" + r;
        block += "  const int64_t " + name + " = " + expr + ";\n";
        index_names_.rename(d, std::move(name));
      }
      emit(u, inner);
    }
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
    const std::string i = "pick" + local(v);
    scope.lines += "int64_t " + i + " = (int64_t)" + var(index) + ";\nif (" + i + " < 0 || " + i + " >= " +
                   extent(dim) + ") {\n  #pragma omp atomic write\n  error = 1;\n  " + i + " = 0;\n}\n";
    const std::string r = emit_at(src, {{dim, i}}, scope);
    scope.lines += "const " + compute_type(dtype(v)) + " " + var(v) + " = " + r + ";\n";
    scope.defined.insert(v);
  }

  // One reduction of a pass over the row: its output, its input, its rule.
  struct Accumulation {
    ProxyId v, in;
    Reduction r;
  };

  // A reduction, with the reductions the schedule puts in its pass (Schedule::sibling_reductions): their inputs
  // computed in one loop over the row, each into its own accumulator.
  void emit_reduction(ProxyId v, Scope& scope) {
    std::vector<ProxyId> members{v};
    for (const std::vector<ProxyId>& group : s_.sibling_reductions)
      if (std::find(group.begin(), group.end(), v) != group.end()) members = group;
    std::vector<Accumulation> pass;
    Scope inner{{}, &scope, {}, false};
    for (ProxyId m : members) {
      const ir::BoundSymbol& mb = *producer_.at(m);
      const ProxyId in = mb.args[0].proxy();
      pass.push_back({m, in, cpu_expressions().at(mb.sym->prim).reduce(dtype(in), s_.float_accumulation)});
      if (pass.back().r.pragma_op.rfind("kmath_", 0) == 0) reductions_.insert(pass.back().r.pragma_op);
      local(m);  // named before its input, as the kernels' variables always were
      emit(in, inner);
    }
    std::string row_stores;  // the row-buffer stores below, done in the same pass
    // Keep the transcendental values of this pass in a row buffer, so that a later pass over the
    // row (softmax's output pass reusing exp(x - max)) loads them instead of recomputing them.
    if (s_.row_cache > 0) {
      for (ProxyId w : inner.defined) {
        auto pw = producer_.find(w);
        if (pw == producer_.end() || row_cache_.count(w)) continue;
        const CppOp* row = cpu_expressions().find(pw->second->sym->prim);
        if (row == nullptr || !row->vector_math) continue;
        // Row buffers are stack arrays: past a budget a value is recomputed rather than kept (a chain of hundreds
        // of libmvec values, each kept, overflowed the thread's stack).
        const int64_t bytes = s_.row_cache * (compute_type(dtype(w)) == "double" ? 8 : 4);
        if (row_cache_bytes_ + bytes > kRowBufferBudget) continue;
        row_cache_bytes_ += bytes;
        std::string buf = "row" + local(w);
        scope.lines += compute_type(dtype(w)) + " " + buf + "[" + std::to_string(s_.row_cache) + "];\n";
        row_stores += buf + "[" + row_index() + "] = " + var(w) + ";\n";
        row_cache_[w] = buf;
      }
    }
    // The element-level outputs this pass computes are stored by it: the pass storing the outputs would compute
    // them again, where GCC may take a libmvec function's vector version in one loop and the scalar one in the
    // other, which differ in the last bit (a stored sigmoid(x) was not the value its amax was taken of, and
    // amax's VJP found no tie: NaN gradients).
    for (size_t k = 0; k < p_.outputs.size(); ++k)
      if (p_.element_level(p_.outputs[k]) && inner.defined.count(p_.outputs[k]) && stored_in_pass_.insert(k).second)
        row_stores += store_line(p_.outputs[k], k, inner, "");
    std::vector<int> dims;
    for (size_t d = 0; d < p_.domain.size(); ++d)
      if (p_.reduced[d]) dims.push_back(static_cast<int>(d));
    if (s_.lane_reductions.count(v)) {
      scope.lines += lane_reduction(pass, dims, inner.lines + row_stores);
    } else {
      std::string clause, body = inner.lines + row_stores;
      for (const Accumulation& m : pass) {
        const std::string acc = "acc" + local(m.v), nan = "nan" + local(m.v);
        clause += " reduction(" + m.r.pragma_op + ":" + acc + ")" + (m.r.nan_flag ? " reduction(|:" + nan + ")" : "");
        body += acc + " = " + combine_text(m.r.combine, acc, var(m.in)) + ";\n";
        if (m.r.nan_flag) body += nan + " |= " + var(m.in) + " != " + var(m.in) + ";\n";
        scope.lines += m.r.acc_type + " " + acc + " = " + m.r.init + ";\n";
        if (m.r.nan_flag) scope.lines += "int " + nan + " = 0;\n";
      }
      std::string pragma = s_.parallel_inner ? kParallelFor + collapse(dims.size()) + clause : "";
      scope.lines += loops(dims, body, pragma, "", true, "#pragma omp simd" + clause);
    }
    for (const Accumulation& m : pass) {
      const std::string acc = "acc" + local(m.v), nan = "nan" + local(m.v);
      std::string result = "(" + compute_type(dtype(m.v)) + ")" + acc;
      if (m.r.nan_flag) result = "(" + nan + " ? (" + compute_type(dtype(m.v)) + ")NAN : " + result + ")";
      if (rounds_every_op(m.v)) result = round_to(dtype(m.v), result);
      scope.lines += "const " + compute_type(dtype(m.v)) + " " + var(m.v) + " = " + result + ";\n";
      scope.defined.insert(m.v);
    }
  }

  // The loop nest over `dims` storing the outputs `which`: the innermost loop runs in chunks, each
  // computed into a buffer per output (a SIMD loop) and then streamed out with stream_bytes. `parent`
  // is the row scope of a reduction kernel (nullptr without reductions). `pragma` parallelizes the
  // loops outside the chunk loop, or the chunk loop itself when there are none.
  std::string streamed_loops(const std::vector<int>& dims, const std::vector<size_t>& which, Scope* parent,
                             const std::string& pragma, const std::string& ind) {
    streaming_ = true;
    const int d = dims.back();
    const std::string i = index(d), c = "chunk" + std::to_string(d), n = extent(d);
    const int64_t bytes = s_.limits.stream_chunk_bytes;
    int64_t chunk = bytes;
    for (size_t k : which) chunk = std::min<int64_t>(chunk, bytes / ir::item_size(dtype(p_.outputs[k])));
    Scope scope{{}, parent, {}, false};
    std::string stores, buffers, copies;
    for (size_t k : which) {
      ProxyId v = p_.outputs[k];
      const std::string T = storage_type(dtype(v)), buf = "streamed" + std::to_string(k);
      emit(v, scope);
      stores += buf + "[" + i + " - " + c + "] = " + store(dtype(v), var(v)) + ";\n";
      buffers += "alignas(64) " + T + " " + buf + "[" + std::to_string(chunk) + "];\n";
      const auto restore = index_names_.keep();
      index_names_.rename(d, c);  // the output's offset at the chunk's first element
      copies += "stream_bytes(&out" + std::to_string(k) + "[" + offset(v) + "], " + buf + ", (" + i + "_end - " + c +
                ") * sizeof(" + T + "));\n";
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

  // The reductions `sums` of values computed by `lines` at the row's current indices, in one pass over the row,
  // each into acc<v> in kLanes partial results: lane l takes the elements whose innermost reduced index is l
  // modulo kLanes (inside constant-length SIMD loops: a whole block of kLanes, then the rest), and the lanes are
  // folded pairwise at the end (32 + 32, 16 + 16, ...), a fixed order whatever the machine.
  std::string lane_reduction(const std::vector<Accumulation>& sums, const std::vector<int>& dims,
                             const std::string& lines) const {
    const int64_t k_lanes = s_.limits.lanes;
    const std::string lanes = std::to_string(k_lanes), id = local(sums.front().v);
    std::string body = lines, out;
    for (const Accumulation& m : sums) {
      const std::string lane = "lane" + local(m.v), nan = "nanlane" + local(m.v), x = var(m.in);
      body += lane + "[l] = " + combine_text(m.r.combine, lane + "[l]", x) + ";\n";
      if (m.r.nan_flag) body += nan + "[l] |= " + x + " != " + x + ";\n";
      out += m.r.acc_type + " " + lane + "[" + lanes + "];\n";
      out += "for (int l = 0; l < " + lanes + "; ++l) " + lane + "[l] = " + m.r.init + ";\n";
      if (m.r.nan_flag) out += "int " + nan + "[" + lanes + "] = {};\n";
    }
    const int d = dims.back();
    const std::string i = index(d), n = extent(d), whole = "whole" + id;
    // The row's whole blocks of kLanes, then the rest (a kernel for every row length of its size class).
    std::string inner = "const int64_t " + whole + " = " + n + " / " + lanes + " * " + lanes + ";\n";
    inner += "for (int64_t b = 0; b < " + whole + "; b += " + lanes + ") {\n  #pragma omp simd\n"
             "  for (int64_t l = 0; l < " + lanes + "; ++l) {\n    const int64_t " + i + " = b + l;\n" +
             indent(body, "    ") + "  }\n}\n";
    inner += "#pragma omp simd\nfor (int64_t l = 0; l < " + n + " - " + whole + "; ++l) {\n  const int64_t " + i +
             " = " + whole + " + l;\n" + indent(body, "  ") + "}\n";
    out += loops(std::vector<int>(dims.begin(), dims.end() - 1), inner, "", "", false);
    for (const Accumulation& m : sums) {
      const std::string lane = "lane" + local(m.v), nan = "nanlane" + local(m.v);
      for (int64_t w = k_lanes / 2; w >= 1; w /= 2) {
        const std::string ws = std::to_string(w);
        out += "for (int l = 0; l < " + ws + "; ++l) " + lane + "[l] = " +
               combine_text(m.r.combine, lane + "[l]", lane + "[l + " + ws + "]") + ";\n";
        if (m.r.nan_flag)
          out += "for (int l = 0; l < " + ws + "; ++l) " + nan + "[l] |= " + nan + "[l + " + ws + "];\n";
      }
      out += m.r.acc_type + " acc" + local(m.v) + " = " + lane + "[0];\n";
      if (m.r.nan_flag) out += "int nan" + local(m.v) + " = " + nan + "[0];\n";
    }
    return out;
  }

  static std::string collapse(size_t n) { return n > 1 ? " collapse(" + std::to_string(n) + ")" : ""; }

  // A loop nest over domain dims `dims` around `body`; `pragma` goes on the
  // outermost loop, `simd` on the innermost one (when it is not also the outermost parallel one).
  std::string loops(const std::vector<int>& dims, const std::string& body, const std::string& pragma,
                    const std::string& ind, bool simd_inner, const std::string& simd = "#pragma omp simd",
                    const std::string& before_inner = "") const {
    if (dims.empty()) return indent(body, ind);
    if (const size_t at = pragma.find(kBySize); at != std::string::npos) {
      const std::string condition = pragma.substr(at + kBySize.size(), pragma.size() - at - kBySize.size() - 1);
      const size_t at_collapse = pragma.find(" collapse(");
      const size_t n = at_collapse == std::string::npos ? 1 : std::stoul(pragma.substr(at_collapse + 10));
      if (n == 1 || n < dims.size()) return loops_by_size(dims, n, condition, body, ind, simd_inner, simd, before_inner);
    }
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
      out += pad + "for (int64_t " + i + " = 0; " + i + " < " + extent(dims[k]) + "; ++" + i + ") {\n";
      close = pad + "}\n" + close;
    }
    return out + indent(body, ind + std::string(2 * dims.size(), ' ')) + close;
  }

  // A loop nest that runs in parallel only from the grain on (Schedule::parallel_by_size), its outermost `n` dims
  // the parallel ones: the nest is a function of a range of their flat index, called once for the whole range
  // below the grain or with one thread, and by each thread of a team for its static share otherwise. (An OpenMP
  // `if(parallel: ...)` clause that is false still starts a team of one thread: ~0.45 us a launch, more than a
  // small kernel's work. The function is not inlined, so the nest is compiled once.)
  std::string loops_by_size(const std::vector<int>& dims, size_t n, const std::string& condition,
                            const std::string& body, const std::string& ind, bool simd_inner, const std::string& simd,
                            const std::string& before_inner) const {
    const std::vector<int> parallel(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(n));
    const std::vector<int> rest(dims.begin() + static_cast<std::ptrdiff_t>(n), dims.end());
    const std::string count = n == 1 ? extent(dims[0]) : extent_product(parallel);
    std::string nest;
    if (n == 1) {
      const std::string i = "i" + std::to_string(dims[0]);
      if (rest.empty() && simd_inner) nest += simd + "\n";
      nest += "for (int64_t " + i + " = lo; " + i + " < hi; ++" + i + ") {\n";
    } else {
      nest += "for (int64_t flat = lo; flat < hi; ++flat) {\n  int64_t rem = flat;\n";
      for (size_t k = n; k-- > 0;) {
        const std::string i = "i" + std::to_string(dims[k]);
        nest += k == 0 ? "  const int64_t " + i + " = rem;\n"
                       : "  const int64_t " + i + " = rem % " + extent(dims[k]) + ";\n  rem /= " + extent(dims[k]) + ";\n";
      }
    }
    nest += loops(rest, body, "", "  ", simd_inner, simd, before_inner) + "}\n";
    return indent("{\n"
                  "  auto part = [&](int64_t lo, int64_t hi) __attribute__((noinline)) {\n" +
                      indent(nest, "    ") +
                  "  };\n"
                  "  if (nthreads > 1 && " + condition + ") {\n"
                  "    #pragma omp parallel num_threads(nthreads)\n"
                  "    {\n"
                  "      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();\n"
                  "      part(" + count + " * t / threads, " + count + " * (t + 1) / threads);\n"
                  "    }\n"
                  "  } else {\n"
                  "    part(0, " + count + ");\n"
                  "  }\n"
                  "}\n", ind);
  }

  // Whether the half-precision value v is rounded where it is computed: with HalfRounding::EveryOp, and for a
  // value of the forward that a backward recomputes (ir::ProxyInfo::rounded_as_forward).
  bool rounds_every_op(ProxyId v) const { return round_every_op_ || t_.proxies[v].rounded_as_forward; }

  const ir::Trace& t_;
  const KernelPlan& p_;
  mutable std::unordered_map<ProxyId, size_t> local_;  // see local()
  const Schedule& s_;
  SizeTexts sizes_;
  const bool round_every_op_;  // HalfRounding::EveryOp
  std::map<ProxyId, const ir::BoundSymbol*> producer_;
  std::map<ProxyId, size_t> input_index_;
  std::set<std::string> reductions_;
  std::map<ProxyId, std::string> row_cache_;  // element-level value -> the row buffer holding it
  std::set<size_t> stored_in_pass_;           // outputs a reduction's pass stores (emit_reduction)
  int64_t row_cache_bytes_ = 0;               // the bytes of those buffers
  // The most bytes a kernel's row buffers take: a thread's stack is a few MiB (OpenMP workers' 2-8).
  static constexpr int64_t kRowBufferBudget = 512 * 1024;
  bool streaming_ = false;  // some output is written with streaming stores
  IndexRefs index_refs_;
  std::optional<std::pair<int64_t, int64_t>> piece_;  // the innermost loop's range, in a split loop
  std::string* hoisted_ = nullptr;  // where tests invariant in the innermost loop go, when it has outer loops
  std::map<std::string, std::string> hoisted_names_;  // a hoisted test -> the variable holding it
  IndexNames index_names_;  // per domain dim, the variable holding its index ("i2", or a remap's)
  int next_remap_ = 0;

  const std::string& index(int d) const { return index_names_[d]; }

  // The flat index of the current element within the row (over the reduced dims, row-major).
  std::string row_index() const {
    std::string out;
    std::vector<int> inside;  // the reduced dims inside the current one
    for (size_t d = p_.domain.size(); d-- > 0;) {
      if (!p_.reduced[d]) continue;
      const std::string stride = extent_product(inside);
      out = index(static_cast<int>(d)) + (stride.empty() ? "" : " * " + stride) + (out.empty() ? "" : " + " + out);
      inside.insert(inside.begin(), static_cast<int>(d));
    }
    return out.empty() ? "0" : out;
  }
};

}  // namespace

std::string cpu_kernel_key(const ir::Trace& t, const CpuKernel& k, HalfRounding rounding) {
  return text_apart_from_name(KernelWriter(t, *k.plan, *k.schedule, rounding).write(k.name), k.name);
}

std::string render_cpu_module(const ir::Trace& t, const std::vector<CpuKernel>& kernels, HalfRounding rounding) {
  std::set<std::string> reductions;
  std::string code;
  // A model's layers repeat their fusions, which render alike (values are numbered per kernel): each text is
  // written once and the repeats are aliases of it. GCC folds identical functions itself, but not the OpenMP
  // regions outlined from them, so every parallel kernel's loops were optimized once per layer.
  std::map<std::string, std::string> first_with;  // a kernel's text apart from its name -> the kernel written with it
  for (const CpuKernel& k : kernels) {
    KernelWriter w(t, *k.plan, *k.schedule, rounding);
    const std::string text = w.write(k.name);
    reductions.insert(w.reductions().begin(), w.reductions().end());
    const auto [first, added] = first_with.emplace(text_apart_from_name(text, k.name), k.name);
    code += "\n" + (added ? text
                           : "extern \"C\" int " + k.name + "(void* const* args) __attribute__((alias(\"" +
                                 first->second + "\")));\n");
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
  // The Philox code only where a kernel draws (the prelude of every other unit, and so its cache key, unchanged).
  std::string philox_code;
  for (const CpuKernel& k : kernels)
    for (const ir::BoundSymbol& b : k.plan->symbols)
      if (b.is(PrimId::uniform_philox) && philox_code.empty())
        philox_code = std::string("// Philox4x32-10 (codegen/philox.h)\n") + philox::source() + "\n";
  return cpu_prelude() + philox_code + declares + code;
}

std::string render_cpu_module(const ir::Trace& t,
                              const std::vector<std::pair<const KernelPlan*, std::string>>& kernels,
                              HalfRounding rounding) {
  std::vector<Schedule> schedules;
  schedules.reserve(kernels.size());
  std::vector<CpuKernel> all;
  for (const auto& [plan, name] : kernels) {
    schedules.push_back(schedule_kernel(t, *plan));
    all.push_back({plan, &schedules.back(), name});
  }
  return render_cpu_module(t, all, rounding);
}

}  // namespace thunder::codegen
