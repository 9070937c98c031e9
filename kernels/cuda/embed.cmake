# Writes the fatbin IN as a C++ source OUT: `tvmm::kernels::gpu_fatbin` (bytes, 8-byte aligned, as
# cuModuleLoadData wants) and its size.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE "${OUT}" "// Generated from kernels/cuda/kernels.cu by kernels/cuda/embed.cmake; do not edit.\n"
  "#include <cstddef>\nnamespace tvmm::kernels {\n"
  "alignas(8) extern const unsigned char gpu_fatbin[] = {${body}};\n"
  "extern const std::size_t gpu_fatbin_size = ${bytes};\n}  // namespace tvmm::kernels\n")
