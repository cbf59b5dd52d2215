// Printing traces as runnable Python programs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/trace.h"

namespace thunder::ir {

/// Python source for one value: proxies by name, dtypes as torch.float32, etc.
std::string python_repr(const Trace& trace, const Value& v);

/// `"cpu f32[2, 3]"` for a tensor proxy, `"int"` for a number proxy.
std::string metadata_string(const Trace& t, const ProxyInfo& p);

/// One symbol as a Python call expression: "ltorch.mul(t1, 2)" (or "_constants[0]").
std::string call_expression(const Trace& trace, const BoundSymbol& b);

struct PrintOptions {
  bool subsymbols = true;  // show each symbol's decomposition as comments under it
  bool sources = true;     // show the user's source line above the symbols it produced
  // Import statements printed after the standard ones, one per line ("from m import k as cpu_fusion0"): how the
  // program gets the names it uses beyond torch, operator, prims and ltorch.
  std::vector<std::string> imports;
  // What each input is in the user's program ("x", "self.fc1.weight"), printed after its metadata comment: the
  // trace's inputs are the graph's, in the order Dynamo first used them, not the function's parameter order.
  std::map<ProxyId, std::string> input_notes;
};

/// The trace as a Python module defining one function named trace.name.
/// Every line that defines proxies carries a comment with their metadata.
/// The module imports torch, operator and the reference namespaces
/// (thunder.executors.torchex: prims, ltorch), then options.imports; names it
/// uses beyond those (opaque callables, kernels, the _constants table of
/// compile-time tensors) must be imported by options.imports or supplied by
/// the caller's globals.
std::string to_python(const Trace& trace, const PrintOptions& options = {});

}  // namespace thunder::ir
