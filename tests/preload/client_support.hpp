#pragma once
// What the interposer's test programs share: failing with a reason, the budgets from the environment,
// and running the subcommand named on the command line. Each subcommand prints "ok" on success and
// exits 1 with the reason otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tvmm::test_client {

//! The program's name in failure messages (set by run()).
inline const char*& program() {
  static const char* name = "client";
  return name;
}

[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "%s: FAILED: %s\n", program(), why.c_str());
  std::exit(1);
}

inline void expect(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

//! A size from the environment, as the tests set them ("16MiB" or bytes).
inline std::size_t env_size(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) fail(std::string(name) + " is not set");
  return std::strtoull(v, nullptr, 10) * (std::strstr(v, "MiB") != nullptr ? (std::size_t{1} << 20) : 1);
}

struct Case {
  const char* name;
  int (*run)();
};

//! Runs the case argv[1] names; an unknown or missing name prints the list and returns 2.
template <std::size_t N>
int run(const char* name, int argc, char** argv, const Case (&cases)[N]) {
  program() = name;
  if (argc > 1) {
    for (const Case& c : cases) {
      if (std::strcmp(argv[1], c.name) == 0) return c.run();
    }
  }
  std::string names;
  for (const Case& c : cases) names += std::string(names.empty() ? "" : "|") + c.name;
  std::fprintf(stderr, "usage: %s %s\n", name, names.c_str());
  return 2;
}

}  // namespace tvmm::test_client
