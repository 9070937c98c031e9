// The host program of local_runtime_module.cpp: no CUDA of its own; it loads the module RTLD_LOCAL (as
// Python loads an extension) and runs it. Prints "ok" on success.
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: local_runtime_client MODULE\n");
    return 2;
  }
  void* m = ::dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (m == nullptr) {
    std::fprintf(stderr, "local_runtime_client: %s\n", ::dlerror());
    return 1;
  }
  auto* run = reinterpret_cast<int (*)()>(::dlsym(m, "local_module_run"));
  if (run == nullptr || run() != 0) return 1;
  std::puts("ok");
  return 0;
}
