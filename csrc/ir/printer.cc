#include "ir/printer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace thunder::ir {
namespace {

std::string float_repr(double d) {
  if (std::isnan(d)) return "float('nan')";
  if (std::isinf(d)) return d > 0 ? "float('inf')" : "float('-inf')";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  std::string s(buf);
  // Prefer the shortest form that reads back as the same double.
  for (int precision = 1; precision < 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) {
      s = buf;
      break;
    }
  }
  if (s.find_first_of(".eni") == std::string::npos) s += ".0";
  return s;
}

std::string str_repr(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\\' || c == '\'') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    // Python source cannot hold a bare CR (it ends the line) or a NUL: escape control bytes.
    if (c == '\r') { out += "\\r"; continue; }
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "'";
}

std::string join_values(const Trace& t, const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += python_repr(t, items[i]);
  }
  return out;
}

std::string call_args(const Trace& t, const BoundSymbol& b) {
  // Required parameters print positionally; optional ones as keywords, and only
  // where they differ from their default.
  std::vector<std::string> parts;
  const auto& params = b.sym->params;
  for (size_t i = 0; i < b.args.size(); ++i) {
    const Param* p = i < params.size() ? &params[i] : nullptr;
    if (p == nullptr || p->required) parts.push_back(python_repr(t, b.args[i]));
    else if (!(b.args[i] == p->default_value)) parts.push_back(p->name + "=" + python_repr(t, b.args[i]));
  }
  for (const auto& [name, v] : b.kwargs) parts.push_back(name + "=" + python_repr(t, v));
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out;
}

std::string lhs(const Trace& t, const BoundSymbol& b) {
  if (b.output.is_none()) return "";
  // A None among several outputs (an opaque op returning (tensor, None)) is assigned to `_`.
  Value target = b.output;
  if (auto* seq = std::get_if<Seq>(&target.v))
    for (Value& item : seq->items)
      if (item.is_none()) item = Value(Literal{"_"});
  return python_repr(t, target) + " = ";
}

std::string meta_comment(const Trace& t, const BoundSymbol& b) {
  std::vector<ProxyId> outs = b.output_proxies();
  if (outs.empty()) return "";
  std::string out = "  # ";
  for (size_t i = 0; i < outs.size(); ++i) {
    const ProxyInfo& p = t.proxy(outs[i]);
    out += (i ? ", " : "") + p.name + ": " + metadata_string(t, p);
  }
  return out;
}

void print_symbol(std::ostringstream& os, const Trace& t, const BoundSymbol& b, const std::string& indent,
                  bool as_comment, const PrintOptions& opt) {
  std::string prefix = indent + (as_comment ? "# " : "");
  if (b.sym->has(kRelease)) {
    os << prefix << "del " << join_values(t, b.args) << "\n";
    return;
  }
  os << prefix << lhs(t, b) << call_expression(t, b) << meta_comment(t, b) << "\n";
  if (opt.subsymbols || b.sym->level == Level::Fusion)  // a fusion always lists what it computes
    for (const BoundSymbol& sub : b.subsymbols) print_symbol(os, t, sub, indent + (as_comment ? "  " : ""), true, opt);
}

}  // namespace

std::string call_expression(const Trace& t, const BoundSymbol& b) {
  // Compile-time constants live in the caller's _constants table.
  if (b.sym->has(kConstant)) return "_constants[" + python_repr(t, b.args.at(0)) + "]";
  return b.printed_callee() + "(" + call_args(t, b) + ")";
}

std::string python_repr(const Trace& t, const Value& v) {
  struct Visitor {
    const Trace& t;
    std::string operator()(NoneT) const { return "None"; }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return float_repr(d); }
    std::string operator()(const Str& s) const { return str_repr(s.text); }
    std::string operator()(DType d) const { return "torch." + std::string(dtype_name(d)); }
    std::string operator()(EllipsisT) const { return "..."; }
    std::string operator()(const Literal& l) const { return l.text; }
    std::string operator()(ProxyRef p) const { return t.proxy(p.id).name; }
    std::string operator()(const Dim& d) const { return d.str([this](ProxyId id) { return t.proxy(id).name; }); }
    std::string operator()(const Seq& s) const {
      std::string inner = join_values(t, s.items);
      switch (s.kind) {
        case Seq::Kind::List: return "[" + inner + "]";
        case Seq::Kind::Slice: return "slice(" + inner + ")";
        case Seq::Kind::Tuple: return "(" + inner + (s.items.size() == 1 ? ",)" : ")");
      }
      return inner;
    }
  };
  return std::visit(Visitor{t}, v.v);
}

std::string metadata_string(const Trace& t, const ProxyInfo& p) {
  if (!p.is_tensor) return "\"" + std::string(number_type_name(p.number)) + "\"";
  std::string s = "\"" + p.tensor.device + " " + std::string(dtype_short_name(p.tensor.dtype)) + "[";
  for (size_t i = 0; i < p.tensor.shape.size(); ++i)
    s += (i ? ", " : "") + p.tensor.shape[i].str([&t](ProxyId id) { return t.proxy(id).name; });
  s += "]\"";
  if (p.tensor.requires_grad) s += " requires_grad";
  return s;
}

std::string to_python(const Trace& t, const PrintOptions& opt) {
  std::ostringstream os;
  if (!t.provenance.empty()) os << "# " << t.provenance << "\n";
  os << "import operator\nimport torch\nfrom thunder.executors.torchex import prims, ltorch\n";
  for (const std::string& line : opt.imports) os << line << "\n";
  os << "\n";
  const size_t boxed = std::min(t.boxed_inputs, t.inputs.size());
  os << "def " << t.name << "(";
  if (boxed) os << "boxed";
  for (size_t i = boxed; i < t.inputs.size(); ++i) os << (i ? ", " : "") << t.proxy(t.inputs[i]).name;
  os << "):\n";
  if (boxed) {
    os << "  # boxed: a list of the first " << boxed << " inputs, emptied here so that each is freed after its last use\n  ";
    for (size_t i = 0; i < boxed; ++i) os << t.proxy(t.inputs[i]).name << (i + 1 < boxed || boxed == 1 ? ", " : " ");
    os << "= boxed\n  boxed.clear()\n";
  }
  for (ProxyId id : t.inputs) {
    os << "  # " << t.proxy(id).name << ": " << metadata_string(t, t.proxy(id));
    auto note = opt.input_notes.find(id);
    if (note != opt.input_notes.end() && !note->second.empty()) os << "  (" << note->second << ")";
    os << "\n";
  }
  std::string last_source;
  for (const BoundSymbol& b : t.symbols) {
    if (opt.sources && !b.source.empty() && b.source != last_source) {
      os << "\n  # " << b.source << "\n";
      last_source = b.source;
    }
    print_symbol(os, t, b, "  ", false, opt);
  }
  os << "  return " << python_repr(t, t.output) << "\n";
  return os.str();
}

}  // namespace thunder::ir
