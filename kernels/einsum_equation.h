// Einsum equations ("ij,jk->ik"; implicit output: the letters seen once, sorted), parsed the same
// way by the shape function and the kernel. Ellipsis and a letter repeated within one operand
// (diagonals) are refused.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace pt::einsum {

struct Equation {
  std::vector<std::string> inputs;  // one term per operand
  std::string output;
};

inline Expected<Equation> parse(std::string eq) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  if (eq.find("...") != std::string::npos) return unsupported("Einsum: ellipsis ('...') is not supported");
  Equation e;
  const size_t arrow = eq.find("->");
  const std::string lhs = arrow == std::string::npos ? eq : eq.substr(0, arrow);
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    e.inputs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::map<char, int> count;
  for (const std::string& t : e.inputs) {
    for (char c : t) {
      if (!std::isalpha(static_cast<unsigned char>(c))) return invalid_input("Einsum: bad equation '" + eq + "'");
      ++count[c];
    }
    for (size_t i = 0; i < t.size(); ++i)
      if (t.find(t[i], i + 1) != std::string::npos)
        return unsupported("Einsum: letter '" + std::string(1, t[i]) + "' repeated within term '" + t +
                           "' (diagonals are not supported)");
  }
  if (arrow == std::string::npos) {
    for (const auto& [c, n] : count)
      if (n == 1) e.output += c;
  } else {
    e.output = eq.substr(arrow + 2);
    for (size_t i = 0; i < e.output.size(); ++i)
      if (!std::isalpha(static_cast<unsigned char>(e.output[i])) || e.output.find(e.output[i], i + 1) != std::string::npos)
        return invalid_input("Einsum: bad output term '" + e.output + "'");
  }
  return e;
}

}  // namespace pt::einsum
