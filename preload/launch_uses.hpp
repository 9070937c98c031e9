#pragma once
// Placement by use: which of tvmm's memory the program's device work names.
//
// The launch hooks (driver_hooks.cpp) see every kernel launch, copy and memset the program queues.
// A kernel's parameters are its arguments by value; the pointers among them are the memory it
// touches (a pointer hidden in device memory, or computed on the device, stays invisible: placement is
// a hint and correctness never depends on it). Each 8-byte word of a launch's parameters that falls
// inside a heap placing by use is passed to TransparentHeap::note_use, which counts a use of that page
// without taking a lock.
//
// Parameter layouts come from the driver: cuFuncGetParamInfo (CUDA 12.4; cuKernelGetParamInfo for a
// CUkernel handle passed as a CUfunction), asked once per function and kept, per thread in a small
// cache in front of a process-wide table. A driver without it, or a function it cannot describe, gives
// an empty layout: the launch's kernelParams are not read (never past the array the caller passed),
// though a launch through `extra` (one parameter buffer with its size) still is. Module and library
// unloads forget every layout, since a new function may reuse an unloaded one's handle.

#include <cstdint>

namespace tvmm::preload {

//! Notes the tvmm memory a kernel launch names: `function` (a CUfunction, or a CUkernel cast to one),
//! `params` (cuLaunchKernel's kernelParams: one pointer per parameter) or `extra` (its
//! CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE list). Never fails; costs nothing when no heap places by use.
void note_launch(void* function, void** params, void** extra) noexcept;
//! Notes one address a copy or memset names.
void note_address(std::uint64_t address) noexcept;
//! A module or library was unloaded: forgets every parameter layout.
void forget_layouts() noexcept;

}  // namespace tvmm::preload
