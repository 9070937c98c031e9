#ifndef TVMM_EXPORT_H
#define TVMM_EXPORT_H
/** @file export.h
 *  TVMM_API marks what libtvmm.so exports: the public API of these headers (C and C++). The library is
 *  built with -fvisibility=hidden, so everything else in it stays internal. */

#if defined(__GNUC__) || defined(__clang__)
#define TVMM_API __attribute__((visibility("default")))
#else
#define TVMM_API
#endif

#endif /* TVMM_EXPORT_H */
