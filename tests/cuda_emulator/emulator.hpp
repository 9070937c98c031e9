#pragma once
// The CUDA driver emulator's state: devices, contexts, virtual memory, streams, events and modules of a
// libcuda.so.1 that runs on the CPU. Its rules come from the documentation (cuda.h's comments, which
// the comments here quote with line numbers of the CUDA 13.0 header, and cudaTypedefs.h); see
// docs/cuda-emulator.md for the table of rules and what the emulator cannot tell.
//
// Device memory is not host memory here either: a reservation is PROT_NONE address space, so host code
// that touches a device address faults as on a GPU with unified addressing. Physical allocations are
// memfd files the emulator reads and writes through its own mappings, after translating each device
// address through its page table and checking the accessing device's rights.
//
// One mutex guards the driver's tables; no thread waits for device work while holding it.

#include <cuda.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace cuemu {

//! Settings read from the environment at cuInit (docs/cuda-emulator.md lists them).
struct Settings {
  int devices = 2;
  std::size_t memory = std::size_t{4} << 30;       //!< per device (TVMM_CUEMU_MEMORY, or _<n> per device)
  int driver_version = CUDA_VERSION;               //!< what cuDriverGetVersion says (the headers' by default)
  int sm = 90;                                     //!< compute capability as major * 10 + minor
  std::size_t granularity = std::size_t{2} << 20;  //!< device chunks, minimum
  std::size_t granularity_recommended = std::size_t{2} << 20;
  std::size_t host_granularity = std::size_t{2} << 20;  //!< host-NUMA chunks, minimum (and recommended)
  int host_numa_id = 0;
  bool vmm = true, host_numa_vmm = true, managed = true, concurrent_managed = true, rdma = false;
};

struct Context;
struct Stream;

struct Device {
  int ordinal = 0;
  std::size_t capacity = 0;
  std::size_t used = 0;  //!< charged by device chunks, cuMemAlloc and resident managed memory (mutex)
  int primary_refs = 0;  //!< cuDevicePrimaryCtxRetain minus Release
  unsigned primary_flags = 0;
  Context* primary = nullptr;  //!< created on first retain; inactive while primary_refs == 0
  //! Bytes this device's kernels read and wrote (driver mutex): in memory on this device (a device chunk,
  //! or managed memory resident here), and elsewhere, over the bus (host-located chunks, host memory,
  //! managed pages resident elsewhere). The emulator's stand-in for a profiler's memory counters
  //! (cuemuKernelBytes, docs/cuda-emulator.md).
  std::uint64_t kernel_bytes_local = 0;
  std::uint64_t kernel_bytes_remote = 0;
};

//! A context. Primary contexts live as long as the process (inactive when released to zero).
struct Context {
  Device* device = nullptr;
  bool primary = false;
  bool destroyed = false;          //!< cuCtxDestroy'ed (or a released primary context)
  std::unique_ptr<Stream> legacy;  //!< the NULL stream
  std::vector<Stream*> streams;    //!< created streams (for the legacy stream's implicit synchronisation)
};

//! A physical allocation (cuMemCreate, or the chunk behind a cuMemAlloc).
struct Chunk {
  CUmemAllocationProp prop{};
  std::size_t size = 0;
  int fd = -1;                //!< memfd holding the bytes
  std::byte* view = nullptr;  //!< the emulator's own mapping of the whole memfd
  Device* charged = nullptr;  //!< the device whose memory it takes (device chunks)
  int mappings = 0;
  int refs = 1;                     //!< handle references: cuMemCreate, plus one per cuMemRetainAllocationHandle
  bool released = false;            //!< every reference released: freed at its last unmap
  Context* allocated_in = nullptr;  //!< cuMemAlloc's context (CU_POINTER_ATTRIBUTE_CONTEXT); null for cuMemCreate
};

struct Mapping {
  std::size_t size = 0;
  Chunk* chunk = nullptr;
  std::size_t offset = 0;
  std::uint64_t device_rw = 0;  //!< devices granted read-write access (bit per ordinal)
  std::uint64_t device_ro = 0;  //!< devices granted read access
  bool host = false;            //!< host access granted (host-NUMA chunks only): the memfd is mapped here
};

struct Reservation {
  std::size_t size = 0;
  bool internal = false;  //!< made by cuMemAlloc (freed by cuMemFree, not cuMemAddressFree)
};

enum class HostKind : std::uint8_t { alloc_host, registered, managed };
struct HostRange {
  std::size_t size = 0;
  HostKind kind = HostKind::alloc_host;
  Context* ctx = nullptr;
  // managed: where the preferred location is, and on which device the pages are resident (-1: host)
  int preferred = -2;  //!< -2: none, -1: host (CU_DEVICE_CPU), else a device ordinal
  int resident = -1;
};

//! What a device address range resolves to, for a copy or a kernel: host spans in order.
struct Span {
  std::byte* ptr;
  std::size_t len;
  bool local = false;  //!< in the accessing device's own memory (not over the bus)
};

//! An operation queued on a stream: runs on the stream's worker thread, after its dependencies.
struct Op {
  std::function<CUresult()> run;  //!< an error it returns becomes the process's sticky error
  //! Event bookkeeping (a record, a graph's wait node), not device work: it runs even after a sticky
  //! error, so that whoever waits on the event wakes up, and a report of the error does not wait for it.
  bool bookkeeping = false;
  std::vector<std::pair<Stream*, std::uint64_t>> after;  //!< (stream, sequence) to wait for
  struct Event* waits_for = nullptr;                     //!< cuStreamWaitEvent: the event's record sequence below
  std::uint64_t event_seq = 0;
};

struct Stream {
  Context* ctx = nullptr;
  unsigned flags = 0;
  bool legacy = false;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Op> queue;
  std::uint64_t enqueued = 0;   //!< ops queued so far (sequence numbers start at 1)
  std::uint64_t completed = 0;  //!< ops finished, in order
  bool stopping = false;        //!< destroyed: the worker finishes the queue, then exits
  std::thread worker;
  // Stream capture (cuStreamBeginCapture .. cuStreamEndCapture).
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id capture_thread;
  std::uint64_t capture_id = 0;
  struct Graph* graph = nullptr;  //!< where captured work goes
};

struct Event {
  unsigned flags = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;   //!< records so far
  std::uint64_t completed = 0;  //!< records whose point the stream has reached
  bool ever_recorded = false;
  bool captured = false;  //!< last recorded inside a capture that is still going on
  double time_ms = 0;     //!< when the latest completed record was reached
  Context* ctx = nullptr;
};

//! A kernel known by name, with its parameter sizes (from the image's PTX, or built in).
struct Kernel {
  std::string name;
  std::vector<std::size_t> params;
};

struct Module {
  Context* ctx = nullptr;
  std::map<std::string, Kernel> kernels;
};

struct Function {
  Module* module = nullptr;
  Kernel kernel;
};

//! A captured graph: the ops in capture order (replayed in order on the launch stream).
struct Graph {
  std::vector<Op> ops;
  bool invalidated = false;
};
struct GraphExec {
  std::vector<Op> ops;
};

class Driver {
 public:
  static Driver& get();

  std::mutex mu;
  bool initialized = false;
  Settings settings;
  std::vector<std::unique_ptr<Device>> devices;
  std::set<Context*> contexts;  //!< live contexts (cuCtxCreate'd and primary)
  std::map<CUdeviceptr, Reservation> reservations;
  std::map<CUdeviceptr, Mapping> mappings;
  std::map<std::uint64_t, std::unique_ptr<Chunk>> chunks;
  std::uint64_t next_chunk = 1;
  std::map<CUdeviceptr, Chunk*> allocs;      //!< cuMemAlloc: base -> its chunk (mapped at base)
  std::map<std::uintptr_t, HostRange> host;  //!< cuMemAllocHost, cuMemHostRegister, cuMemAllocManaged
  std::set<Stream*> streams;
  std::set<Event*> events;
  std::vector<Event*> destroyed_events;  //!< kept: queued work may still name them
  std::set<Module*> modules;
  std::set<Graph*> graphs;
  std::set<GraphExec*> execs;
  std::uint64_t next_capture = 1;
  std::mutex work_mu;  //!< guards working, and the sticky error's first setting
  std::condition_variable work_cv;
  int working = 0;  //!< device work running on stream workers now
  //! The first error that leaves the process "in an inconsistent state" (an illegal address in
  //! asynchronous work): cuda.h 2833 "any further CUDA work will return the same error".
  std::atomic<CUresult> sticky{CUDA_SUCCESS};

  //! A stream operation starts only while no sticky error is set (false once one is), and is device
  //! work until end_work, called once its stream counts it completed.
  bool begin_work();
  void end_work();
  //! Makes `r` the sticky error, unless one is set already.
  void fail(CUresult r);
  //! A host function's operation steps out of device work while the program's function runs, and back
  //! in after: host code does not hold up a report of the sticky error.
  void leave_work() { end_work(); }
  void reenter_work();
  //! The sticky error, or CUDA_SUCCESS. Once one is set, the answer waits until no device work runs, so
  //! every operation that began has completed: a program told of the error may free the memory that
  //! work touched, as after a real GPU's fault, where the context is dead and no copy still lands.
  CUresult sticky_error();

  //! cuInit's work: reads Settings, makes the devices.
  CUresult init(unsigned flags);
  [[nodiscard]] std::size_t granularity(const CUmemAllocationProp& prop, bool recommended) const;
  //! The reservation holding [va, va + len), or null.
  const Reservation* reservation_of(CUdeviceptr va, std::size_t len, CUdeviceptr* base = nullptr) const;
  //! The managed range holding [p, p + len), or null.
  HostRange* managed_of(std::uintptr_t p, std::size_t len, std::uintptr_t* base = nullptr);
  //! Resolves [va, va + len) for `dev` (write: read-write access needed) through mappings and managed
  //! ranges; false (with the spans so far) if any byte is unmapped or not accessible to `dev`.
  bool translate(CUdeviceptr va, std::size_t len, const Device* dev, bool write, std::vector<Span>* out);
  //! Says, once per process on stderr, what made work fault: `what` ("a copy to", "kernel tvmm_fill
  //! reading") and the first byte of [va, va + len) that `dev` may not use, and why. The driver says
  //! nothing (an Xid in the kernel log at most); this is the emulator's help for finding the bug.
  void report_fault(const char* what, CUdeviceptr va, std::size_t len, const Device* dev, bool write);
  //! Frees a chunk's memory and uncharges its device.
  void free_chunk(Chunk* c);
  //! Unmaps [va, va + size) exactly (whole mappings); false if it is not a run of whole mappings.
  bool unmap(CUdeviceptr va, std::size_t size);
  //! A device reservation of `size` (PROT_NONE address space) aligned to `align`, or 0.
  static CUdeviceptr reserve_address_space(std::size_t size, std::size_t align, CUdeviceptr hint);
};

// --- the calling thread --------------------------------------------------------------------------------

//! The thread's context stack (top = current).
std::vector<Context*>& context_stack();
//! True on a thread running a cuLaunchHostFunc callback: every driver call there is refused.
bool& in_host_callback();
//! The current context, or null.
Context* current();

// --- streams (streams.cpp) ------------------------------------------------------------------------------

//! The stream a handle names for `ctx` (NULL and CU_STREAM_LEGACY: the context's legacy stream;
//! CU_STREAM_PER_THREAD: this thread's per-thread stream), or null if it is not a live stream.
Stream* resolve_stream(CUstream handle, Context* ctx);
//! Starts a stream's worker thread.
void start(Stream* s);
//! Queues `op` on `s` (with the legacy stream's implicit ordering), or adds it to the capturing graph;
//! refused while a capture of `s` is invalidated, or implicitly joined from the legacy stream.
CUresult enqueue(Stream* s, Op op);
//! The same for an op that runs `run`.
CUresult enqueue(Stream* s, std::function<CUresult()> run);
//! Stops a stream: its worker finishes what is queued, then exits. The object is kept for the life of
//! the process (retired_streams), since the detached worker may still touch it.
void retire(Stream* s);
//! Waits until every op queued on `s` so far has completed.
void wait_idle(Stream* s);
//! Milliseconds since the emulator started (events' time stamps).
double now_ms();

}  // namespace cuemu
