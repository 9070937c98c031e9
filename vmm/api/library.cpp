// The one source of libtvmm.so beyond tvmm_internal (which it contains whole): the library's version.
#include "tvmm/tvmm.h"

extern "C" const char* tvmm_version(void) { return TVMM_LIBRARY_VERSION; }
