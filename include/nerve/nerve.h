/* nerve.h — the C API of OpenClaw-Nerve: contexts, buffers, tasks and task pools.
 *
 * A thin layer over the C++ runtime (nerve.hpp) with the names of the design documents. It compiles as
 * C11 and as C++; every function is extern "C" and never lets a C++ exception escape. docs/C_API.md
 * maps each function to its C++ counterpart.
 *
 *   nerve_context_t* ctx = nerve_init();
 *   nerve_buffer_t* buf = nerve_buffer_alloc_unified(ctx, bytes, MEM_FLAG_READ_WRITE);
 *   nerve_task_t* task = nerve_task_create(my_kernel, my_desc);
 *   nerve_task_set_memory_deps(task, 1, &buf);
 *   nerve_task_submit(ctx, task, NERVE_DEVICE_ANY);     // dependencies inferred from the buffers
 *   nerve_wait_all(ctx);
 *   nerve_buffer_free(buf);
 *   nerve_shutdown(ctx);
 *
 * Errors: functions return a nerve_status_t, or NULL / 0 / -1 where they return a value. A failing
 * call records a message (what happened, and where: the config key, the buffer and range, the task's
 * name) that nerve_last_error() returns on the same thread until the thread's next failing call;
 * successful calls leave it alone. nerve_last_status() gives the status of that failing call.
 *
 * Threads: a context, its buffers and task pools may be used from any thread, including from inside
 * kernels (a kernel may allocate, submit tasks, and wait for a task pool; waiting inside a kernel runs
 * other tasks meanwhile). Exceptions: a nerve_task_t is built by one thread; a task pool is filled,
 * launched and destroyed by one thread at a time; nerve_wait_all() and nerve_shutdown() are refused
 * inside a task (they would wait for that task itself; a task of another context too, which the
 * context's work may wait for); nerve_shutdown() must not race with any other
 * call on the same context. Mapping, inside a kernel, a buffer range its own task accesses in a
 * conflicting mode (or that a task ordered after it does) is refused: the mapping would wait for the
 * task (NERVE_ERROR_INVALID_ARGUMENT). Blocking calls are marked "Blocks".
 *
 * Memory ordering: what a thread wrote before submitting a task (or unmapping a buffer) is visible to
 * the task's kernel; what a kernel wrote is visible to the tasks and mappings that depend on it, and
 * to the thread whose wait covered it.
 *
 * Lifetime: every object belongs to the context it was made in and must not be used after
 * nerve_shutdown(): the handles of its buffers, tasks and pools are then dangling pointers, while the
 * context's own handle stays detectable (a few hundred bytes kept until the process ends): any call
 * with it, a second nerve_shutdown() included, is NERVE_ERROR_INVALID_ARGUMENT ("has been shut
 * down"; nerve_shutdown() logs it). Freed buffers stay detectable: any use of a
 * buffer handle after nerve_buffer_free(), a double free included, is NERVE_ERROR_BUFFER_MISUSE, for
 * as long as the context lives.
 */
#ifndef NERVE_NERVE_H
#define NERVE_NERVE_H

#include <stddef.h>
#include <stdint.h>
/* C99 and later: bool, true and false, which the seed's programs use. C89 has none: the header takes
 * no bool (an int says yes or no), so it compiles there too. */
#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L
#include <stdbool.h>
#endif

#include "nerve/export.hpp"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status and errors ------------------------------------------------------------------------ */

/* One value per nerve::ErrorCode (error.hpp), with the same numbers. Like every enum here it has a
 * *_MAX_ENUM member, as Vulkan's do: it pins the type to 32 bits and makes any non-negative value a C
 * caller may pass a valid value for the C++ implementation, which rejects unknown ones with an error. */
typedef enum nerve_status {
  NERVE_OK = 0,
  NERVE_ERROR_INVALID_CONFIG = 1,    /* a configuration key, value, file or variable is wrong */
  NERVE_ERROR_INVALID_ARGUMENT = 2,  /* an argument is out of its documented domain (NULL, bad device) */
  NERVE_ERROR_BUFFER_MISUSE = 3,     /* use after free, double free, out-of-range access, bad unmap */
  NERVE_ERROR_OUT_OF_MEMORY = 4,     /* a memory node cannot satisfy an allocation, or a thread is refused */
  NERVE_ERROR_TASK_FAILED = 5,       /* a task failed (nerve_task_fail or a C++ exception) */
  NERVE_ERROR_CANCELLED = 6,         /* a task was cancelled because a task it depends on failed */
  NERVE_ERROR_NOT_SUPPORTED = 7,     /* the feature exists in the API but not in this build */
  NERVE_ERROR_BUSY = 8,              /* nerve_buffer_try_map: a conflicting task is pending */
  NERVE_ERROR_INTERNAL = 9,          /* a bug in nerve; please report it with nerve_last_error() */
  NERVE_STATUS_MAX_ENUM = 0x7fffffff /* not a status: every non-negative int32 a valid value */
} nerve_status_t;

/* nerve_status_string() gives a stable lower-case name: "ok", "invalid_config", ... */
NERVE_API const char* nerve_status_string(nerve_status_t status);
/* nerve_last_error() is the message of the last failing call on this thread ("" if none failed).
 * The pointer stays valid until this thread's next failing call. */
NERVE_API const char* nerve_last_error(void);
/* nerve_last_status() is the status of the last failing call on this thread (NERVE_OK if none). */
NERVE_API nerve_status_t nerve_last_status(void);
/* nerve_clear_last_error() resets this thread's message to "" and its status to NERVE_OK. */
NERVE_API void nerve_clear_last_error(void);

/* ---- Devices ---------------------------------------------------------------------------------- */

/* A device index. Device 0 is the CPU workers (all of them: the runtime balances tasks over them);
 * later backends add GPUs and other accelerators as 1, 2, ... NERVE_DEVICE_ANY lets nerve choose. */
typedef int32_t nerve_device_t;
#ifdef __cplusplus /* no C cast in C++ code that warns of them (-Wold-style-cast) */
#define NERVE_DEVICE_ANY (static_cast<nerve_device_t>(-1))
#define NERVE_DEVICE_CPU (static_cast<nerve_device_t>(0))
#else
#define NERVE_DEVICE_ANY ((nerve_device_t)-1)
#define NERVE_DEVICE_CPU ((nerve_device_t)0)
#endif

/* The queue a kernel launches its work on (a CUDA stream, an OpenCL queue); NULL on CPUs. */
typedef void* nerve_stream_t;

/* ---- Contexts --------------------------------------------------------------------------------- */

typedef struct nerve_context nerve_context_t;

/* The value of a convenience field of nerve_context_config_t that is not set. */
#define NERVE_CONFIG_UNSET (-1)

/* How to configure a context. Start from NERVE_CONTEXT_CONFIG_DEFAULT and change fields:
 *
 *   nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
 *   config.thread_pool_size = 4;
 *
 * Precedence (docs/CONFIG.md): defaults < YAML file < NERVE_* environment < API settings. The
 * convenience fields and `settings` are API settings; `settings` is applied after the fields, so it
 * wins when both name the same key. Every field's key is implemented (docs/CONFIG.md); a value the
 * key does not accept (e.g. max_pending_transfers = 0) makes nerve_init_with_config() return NULL,
 * with NERVE_ERROR_INVALID_CONFIG and a message naming the key, rather than being ignored. */
typedef struct nerve_context_config {
  const char* config_file;     /* YAML file, or NULL for the one NERVE_CONFIG names (if any) */
  const char* const* settings; /* "key=value" strings, e.g. "scheduler.policy=eager" */
  size_t setting_count;
  int use_environment; /* 1: NERVE_CONFIG and NERVE_* variables apply; 0: ignored (hermetic) */
  /* Convenience fields; NERVE_CONFIG_UNSET leaves the key alone. */
  int scheduler_spin_us;         /* scheduler.spin_us */
  int thread_pool_size;          /* parallel.thread_pool_size (0 = automatic) */
  int enable_perf_counter;       /* perf.enable_counters (0: false, any other value: true) */
  int perf_counter_interval_ms;  /* perf.counter_interval_ms */
  int numa_memory_policy;        /* memory.numa_policy: 0 local, 1 interleave, 2+k preferred:k */
  int enable_device_cache_hints; /* gpu.cache_hints (0: false, any other value: true) */
  int max_pending_transfers;     /* gpu.max_pending_transfers */
} nerve_context_config_t;

#define NERVE_CONTEXT_CONFIG_DEFAULT                                                                  \
  {                                                                                                   \
    NULL, NULL, 0, 1, NERVE_CONFIG_UNSET, NERVE_CONFIG_UNSET, NERVE_CONFIG_UNSET, NERVE_CONFIG_UNSET, \
        NERVE_CONFIG_UNSET, NERVE_CONFIG_UNSET, NERVE_CONFIG_UNSET                                    \
  }

/* nerve_init() creates a context configured from defaults, NERVE_CONFIG and the NERVE_* environment:
 * it discovers the machine and starts the CPU workers. NULL on error (NERVE_ERROR_INVALID_CONFIG with
 * the key, file and line for a bad configuration). */
NERVE_API nerve_context_t* nerve_init(void);
/* nerve_init_with_config() is nerve_init() with API settings; config may be NULL (= nerve_init()). */
NERVE_API nerve_context_t* nerve_init_with_config(const nerve_context_config_t* config);
/* nerve_shutdown() unmaps mapped buffers, destroys task pools still alive, waits for every submitted
 * task, frees buffers still alive (with a warning on stderr), stops the workers and frees the
 * context. Unreported task failures are logged, every one (a launched pool's too). NULL is accepted. Inside a
 * task it does nothing but log an error (and set nerve_last_error(), NERVE_ERROR_INVALID_ARGUMENT). Blocks.
 */
NERVE_API void nerve_shutdown(nerve_context_t* ctx);

/* nerve_context_get_device_count() is the number of devices that can run tasks (1 in a CPU-only
 * build: device 0, the CPU workers); -1 on error. */
NERVE_API int nerve_context_get_device_count(nerve_context_t* ctx);
/* nerve_context_get_worker_count() is the number of CPU worker slots, the application thread's
 * included (parallel.thread_pool_size); -1 on error. */
NERVE_API int nerve_context_get_worker_count(nerve_context_t* ctx);
/* nerve_wait_all() waits for every task submitted so far, then reports the first failure among them
 * that nobody waited for otherwise (each failure is reported once): NERVE_ERROR_TASK_FAILED with the
 * task's message; the other such failures are logged on stderr, not reported by a later wait. A launched
 * pool's tasks are waited for too, but their failures are the pool's, reported by nerve_task_pool_wait_all().
 * Tasks cancelled because of that failure are not reported again. Inside a task it is
 * NERVE_ERROR_INVALID_ARGUMENT; while the calling thread holds a mapping that a pending task waits for (the
 * wait would never end) it is NERVE_ERROR_BUFFER_MISUSE, naming the mapping. Blocks. */
NERVE_API nerve_status_t nerve_wait_all(nerve_context_t* ctx);
/* nerve_context_dump_perf_stats() writes the runtime's counters as JSON to `path`
 * (docs/PERF_STATS.md); NERVE_ERROR_INVALID_ARGUMENT if the file cannot be written. */
NERVE_API nerve_status_t nerve_context_dump_perf_stats(nerve_context_t* ctx, const char* path);
/* nerve_memory_compact() gives the context's free pool memory back to the system: empty slabs and
 * cached blocks of its host pools, free pinned staging buffers, the calling thread's cached chunks
 * (docs/MEMORY.md). Returns the bytes given back; 0 with nerve_last_error() set for a NULL context.
 * Safe while tasks run. */
NERVE_API size_t nerve_memory_compact(nerve_context_t* ctx);
/* openclaw_memory_compact() is the seed's call without a context: nerve_memory_compact() on every
 * context made by nerve_init*() and not yet shut down. Returns the total bytes given back. */
NERVE_API size_t openclaw_memory_compact(void);

/* ---- Buffers ---------------------------------------------------------------------------------- */

typedef struct nerve_buffer nerve_buffer_t;

/* Allocation flags: the access mode a task gets for the buffer when it lists it with
 * nerve_task_set_memory_deps() (0 means MEM_FLAG_READ_WRITE). They do not restrict mapping. */
#define MEM_FLAG_READ 0x1u
#define MEM_FLAG_WRITE 0x2u
#define MEM_FLAG_READ_WRITE 0x3u
/* Placement properties (nerve_buffer_alloc), honoured by the memory layer (docs/MEMORY.md): STICKY
 * buffers' device replicas are evicted last under memory pressure (nerve::BufferOptions::sticky);
 * HOST_CACHED buffers get what a device wrote copied back to the host at once, asynchronously, so
 * host reads need no transfer (nerve::BufferOptions::host_cached). */
#define MEM_PROPERTY_STICKY 0x100u
#define MEM_PROPERTY_HOST_CACHED 0x200u

typedef enum nerve_map_mode {
  NERVE_MAP_READ = 1,  /* the host reads; waits for pending writers */
  NERVE_MAP_WRITE = 2, /* the host writes; waits for pending readers and writers */
  NERVE_MAP_READ_WRITE = 3,
  NERVE_MAP_MODE_MAX_ENUM = 0x7fffffff /* not a mode (see NERVE_STATUS_MAX_ENUM) */
} nerve_map_mode_t;

/* nerve_buffer_alloc() allocates `bytes` (> 0) bytes of logical data. `preferred_device` is
 * NERVE_DEVICE_ANY or an existing device index (the design documents' DEVICE_GPU0 is such an index;
 * a CPU-only build has only NERVE_DEVICE_CPU): for a device attached to a known NUMA node, the
 * buffer's host copy is in that node's memory, and CPU tasks using it prefer that node's workers
 * (as BufferOptions::numa_node does); NERVE_DEVICE_ANY and NERVE_DEVICE_CPU leave the choice to
 * memory.numa_policy. `properties` combines MEM_FLAG_* (the default task
 * access mode; 0 = read-write) and MEM_PROPERTY_* bits. The contents start undefined. NULL on error. */
NERVE_API nerve_buffer_t* nerve_buffer_alloc(nerve_context_t* ctx, size_t bytes,
                                             nerve_device_t preferred_device, unsigned properties);
/* nerve_buffer_alloc_unified() allocates a buffer nerve places where it is used, with MEM_FLAG_*
 * `flags`; its data is reachable from the host through nerve_buffer_map(). NULL on error. */
NERVE_API nerve_buffer_t* nerve_buffer_alloc_unified(nerve_context_t* ctx, size_t bytes, unsigned flags);

/* nerve_buffer_map() gives the host a pointer to the whole buffer. It waits until every task that
 * conflicts with `mode` has finished, and tasks submitted later that conflict with it wait for
 * nerve_buffer_unmap(). One mapping per buffer at a time: mapping a mapped buffer, or one another
 * thread's nerve_buffer_map() is still waiting to map, is NERVE_ERROR_BUFFER_MISUSE (waiting for
 * itself would deadlock), and so is a map that would wait for a mapping of another buffer this thread
 * holds (through the tasks it waits for). Inside a kernel, a mapping that would wait for its own task
 * (directly or through tasks ordered after it), or for a task this thread suspended in a wait to run
 * that kernel, is NERVE_ERROR_INVALID_ARGUMENT. Writing through a read mapping is a
 * bug. NULL on error (also, for a read or read-write mapping, when a task the mapping waited for
 * failed: NERVE_ERROR_CANCELLED; a write mapping replaces the data and succeeds). A read-write
 * mapping that fails so counts, like a cancelled read-write task, as having failed to write the whole
 * buffer: tasks submitted later that read any of it are cancelled, silently (no wait reports them),
 * until a write replaces the data (a write task or write mapping). Blocks. */
NERVE_API void* nerve_buffer_map(nerve_buffer_t* buffer, nerve_map_mode_t mode);
/* nerve_buffer_try_map() is nerve_buffer_map() without the wait: while a conflicting task or mapping
 * is pending (also another thread's nerve_buffer_map() of this buffer, still waiting) it maps nothing
 * and returns NULL with NERVE_ERROR_BUSY (retry later, or map and wait); so it does while the data
 * it would read must first be copied back from a device, a copy it starts. Its other errors are
 * nerve_buffer_map()'s (a buffer already mapped: NERVE_ERROR_BUFFER_MISUSE; inside a kernel, a range
 * its own task, or one this thread suspended to run it, accesses in a conflicting mode, which could
 * never stop being busy while it runs: NERVE_ERROR_INVALID_ARGUMENT); a read-write one that fails
 * with NERVE_ERROR_CANCELLED leaves the buffer failed for later readers, as there. Never blocks. */
NERVE_API void* nerve_buffer_try_map(nerve_buffer_t* buffer, nerve_map_mode_t mode);
/* nerve_buffer_unmap() ends the mapping; NERVE_ERROR_BUFFER_MISUSE if the buffer is not mapped. */
NERVE_API nerve_status_t nerve_buffer_unmap(nerve_buffer_t* buffer);
/* nerve_buffer_get_device_ptr() is the address of byte 0 of the buffer on `device` (NERVE_DEVICE_ANY:
 * the device the calling kernel runs on; outside a kernel, the host). Inside a kernel it is valid only for
 * buffers the task declared (others: NERVE_ERROR_BUFFER_MISUSE), and only the declared byte ranges may be
 * touched, in the declared modes; it stays valid even if the buffer was freed after the task was submitted.
 * Outside a kernel it is the host address (device 0), to be used only while mapped or while no task uses the
 * buffer. Any other device (inside a kernel: one the task does not run on) is
 * NERVE_ERROR_INVALID_ARGUMENT: the data has no address there for this caller. NULL on error. */
NERVE_API void* nerve_buffer_get_device_ptr(nerve_buffer_t* buffer, nerve_device_t device);
/* nerve_buffer_get_unified_ptr() is an address of the buffer valid on the host and on every device
 * that shares the host's address space (all of them in a CPU-only build). The same rules as for a
 * device pointer apply to using it. NULL on error. */
NERVE_API void* nerve_buffer_get_unified_ptr(nerve_buffer_t* buffer);
/* nerve_buffer_size() is the size in bytes; 0 on error (freed buffer: NERVE_ERROR_BUFFER_MISUSE —
 * except inside a kernel of a task that declared it, which still holds it, as for its pointers). */
NERVE_API size_t nerve_buffer_size(const nerve_buffer_t* buffer);
/* nerve_buffer_free() gives the buffer back. Tasks already submitted that use it still run; the data
 * is released when the last of them finishes. Freeing a mapped buffer, a second free and any later use
 * of the handle are NERVE_ERROR_BUFFER_MISUSE. */
NERVE_API nerve_status_t nerve_buffer_free(nerve_buffer_t* buffer);

/* ---- Tasks ------------------------------------------------------------------------------------ */

typedef struct nerve_task nerve_task_t;

/* A kernel: called once per task with the task's descriptor, the device it runs on (0 for the CPU
 * workers) and that device's stream (NULL on CPUs). It reaches its data with
 * nerve_buffer_get_device_ptr(). A C kernel reports failure with nerve_task_fail(). */
typedef void (*nerve_kernel_fn)(void* desc, nerve_device_t device, nerve_stream_t stream);

/* A WRITE access (and MEM_FLAG_WRITE) promises the task writes the whole range: its contents on
 * entry are undefined (on a device nothing is copied in); a partial update is READ_WRITE. */
typedef enum nerve_access_mode {
  NERVE_ACCESS_READ = 1,
  NERVE_ACCESS_WRITE = 2,
  NERVE_ACCESS_READ_WRITE = 3,
  NERVE_ACCESS_MODE_MAX_ENUM = 0x7fffffff /* not a mode (see NERVE_STATUS_MAX_ENUM) */
} nerve_access_mode_t;

/* nerve_task_create() makes an unsubmitted task that will call fn(desc, device, stream). `desc` is the
 * caller's: it must stay valid until the task has finished (nerve_task_pool_alloc_desc() gives such
 * memory). NULL on error. */
NERVE_API nerve_task_t* nerve_task_create(nerve_kernel_fn fn, void* desc);
/* A task declares at most this many accesses (nerve_task_set_memory_deps, nerve_task_add_access): one
 * more is NERVE_ERROR_INVALID_ARGUMENT from the call that would declare it. */
#define NERVE_TASK_MAX_ACCESSES 65535
/* nerve_task_set_memory_deps() sets the task's accesses to the whole of each buffer, each in the mode
 * of its allocation flags, replacing any declared before. Dependencies are inferred from accesses in
 * submission order, as in the C++ API: a task waits for earlier tasks that write what it reads and for
 * earlier readers and writers of what it writes. More than NERVE_TASK_MAX_ACCESSES buffers is
 * NERVE_ERROR_INVALID_ARGUMENT. */
NERVE_API nerve_status_t nerve_task_set_memory_deps(nerve_task_t* task, size_t count,
                                                    nerve_buffer_t* const* buffers);
/* nerve_task_add_access() adds an access to bytes [offset, offset + size) of `buffer` (size > 0);
 * tasks that access disjoint ranges of one buffer never depend on each other. A range outside the
 * buffer is NERVE_ERROR_BUFFER_MISUSE; an access beyond the task's NERVE_TASK_MAX_ACCESSES-th is
 * NERVE_ERROR_INVALID_ARGUMENT. */
NERVE_API nerve_status_t nerve_task_add_access(nerve_task_t* task, nerve_buffer_t* buffer,
                                               nerve_access_mode_t mode, size_t offset, size_t size);
/* nerve_task_set_compute_intensive() marks a long-running task (compute_intensive non-zero, e.g.
 * true): it is handed round-robin to the workers instead of the submitting worker's own queue, so a
 * burst of them starts everywhere at once. */
NERVE_API nerve_status_t nerve_task_set_compute_intensive(nerve_task_t* task, int compute_intensive);
/* nerve_task_set_priority() sets the order in which ready tasks start (TaskOptions::priority):
 * higher first; NERVE_PRIORITY_HIGH, NERVE_PRIORITY_NORMAL (the default) and NERVE_PRIORITY_LOW are
 * the usual levels, any int works. One exception, under the locality_aware_stealing and heft
 * policies: a normal-priority task released by a finishing task may run next on that thread, ahead
 * of prioritized tasks already queued (task.hpp, TaskOptions::priority, has the whole order). */
#define NERVE_PRIORITY_LOW (-100)
#define NERVE_PRIORITY_NORMAL 0
#define NERVE_PRIORITY_HIGH 100
NERVE_API nerve_status_t nerve_task_set_priority(nerve_task_t* task, int priority);
/* Where a C kernel can run (nerve_task_set_device_kinds). */
#define NERVE_DEVICE_KIND_CPU 0x1u
#define NERVE_DEVICE_KIND_CUDA 0x2u
/* nerve_task_set_device_kinds() says which devices may run the kernel: NERVE_DEVICE_KIND_CPU (the
 * default), NERVE_DEVICE_KIND_CUDA, or both (then placement picks by data locality).
 * NERVE_DEVICE_KIND_CUDA means the devices of nerve's built-in CUDA backend: a backend plugin's
 * devices run no C kernels, even those of kind cuda (the C++ API's Context::devices() lists them as
 * cuda; they run Kernel calls with the plugin's own implementation). On such a CUDA device the kernel
 * is a launcher, as in the design documents: it is called on that device's launcher thread with the
 * device's index and a cudaStream_t as `stream`; nerve_buffer_get_device_ptr(buffer, device) gives
 * device addresses; it enqueues its work on `stream` (kernels, cuBLAS with that stream) and returns
 * without synchronising; the task completes when the stream's work has (a launch error or a failing
 * kernel fails it, like nerve_task_fail()). Submitting to a built-in CUDA device's index
 * (nerve_task_submit) makes a kernel a launcher without this call; OpenCL devices and plugin devices
 * run no C kernels (submitting one to their index is NERVE_ERROR_INVALID_ARGUMENT). A kernel for CUDA
 * only, submitted with NERVE_DEVICE_ANY to a context without a built-in CUDA device (or to
 * NERVE_DEVICE_CPU), is NERVE_ERROR_INVALID_ARGUMENT at submit. Other bits, or 0, are
 * NERVE_ERROR_INVALID_ARGUMENT. */
NERVE_API nerve_status_t nerve_task_set_device_kinds(nerve_task_t* task, uint32_t kinds);
/* nerve_task_set_name() names the task in error messages and statistics (the string is copied, once
 * per distinct name, and kept until nerve_shutdown). The name is also the kernel's identity:
 * performance models (perf.models, scheduler.policy heft) learn the run times of tasks of the same
 * name together; unnamed tasks are not modelled. */
NERVE_API nerve_status_t nerve_task_set_name(nerve_task_t* task, const char* name);
/* nerve_task_submit() schedules the task on `device` (NERVE_DEVICE_ANY or an existing device index;
 * another index is NERVE_ERROR_INVALID_ARGUMENT). It consumes the task whether it succeeds or not:
 * the handle is invalid afterwards. A freed buffer among its accesses is NERVE_ERROR_BUFFER_MISUSE.
 * A task one of whose access declarations failed (nerve_task_add_access, nerve_task_set_memory_deps)
 * is refused with that declaration's status and message, since it would run without that data —
 * unless a later successful nerve_task_set_memory_deps replaced every declaration. */
NERVE_API nerve_status_t nerve_task_submit(nerve_context_t* ctx, nerve_task_t* task, nerve_device_t device);
/* nerve_task_destroy() discards a task that was never submitted. NULL is accepted. */
NERVE_API void nerve_task_destroy(nerve_task_t* task);
/* nerve_task_fail() makes the running task fail with `message` once its kernel returns: tasks that
 * depend on it are cancelled, and the wait that reports it returns NERVE_ERROR_TASK_FAILED with
 * "<wait function>: task '<name>' failed: <message>" (a NULL or empty message reads
 * "(nerve_task_fail gave no message)"; a C++ kernel that throws reads the same, with what() as
 * the message). Only from inside a kernel (elsewhere it records NERVE_ERROR_INVALID_ARGUMENT as this
 * thread's last error and does nothing). The first call wins. */
NERVE_API void nerve_task_fail(const char* message);

/* ---- Task pools ------------------------------------------------------------------------------- */

typedef struct nerve_task_pool nerve_task_pool_t;

/* The descriptor size nerve_task_pool_alloc_desc() provides by default. */
#define NERVE_TASK_DESC_SIZE 256

/* A task pool is a bulk launch of mutually independent tasks: tasks submitted to one pool never
 * depend on each other, whatever their accesses; the pool as a whole is ordered against everything
 * outside it by the union of its tasks' accesses (the ranges they touch, not the span between them),
 * and its tasks start together at launch. The pool
 * takes its place in the submission order when it is launched (not when its tasks are submitted):
 * work submitted before the launch does not wait for it. It fails as a whole: if one of its tasks
 * fails, later work that reads any range the pool's tasks wrote is cancelled with that cause, until
 * a write (or write-only mapping) replaces the data. Its failures are reported by
 * nerve_task_pool_wait_all(), never by nerve_wait_all(); destroying a launched pool whose failure
 * nobody waited for logs it as a warning.
 * nerve_task_pool_create() makes a pool for about `capacity` tasks (a hint: more work, they grow the
 * pool; a huge hint is only a hint). NULL on error. */
NERVE_API nerve_task_pool_t* nerve_task_pool_create(nerve_context_t* ctx, size_t capacity);
/* nerve_task_pool_create_ex() is nerve_task_pool_create() with descriptors of `desc_size` bytes
 * (1 byte to 16 MiB; another size is NERVE_ERROR_INVALID_ARGUMENT). */
NERVE_API nerve_task_pool_t* nerve_task_pool_create_ex(nerve_context_t* ctx, size_t capacity,
                                                       size_t desc_size);
/* nerve_task_pool_alloc_desc() gives zeroed memory for one task descriptor (the pool's descriptor size,
 * aligned for any type), valid until the pool is destroyed. NULL on error. */
NERVE_API void* nerve_task_pool_alloc_desc(nerve_task_pool_t* pool);
/* nerve_task_pool_submit() adds a task to the pool (before launch; NERVE_ERROR_INVALID_ARGUMENT
 * after). It consumes the task whether it succeeds or not. A task whose access declaration failed is
 * refused here too (see nerve_task_submit). */
NERVE_API nerve_status_t nerve_task_pool_submit(nerve_task_pool_t* pool, nerve_task_t* task);
/* nerve_task_pool_launch() starts the pool's tasks once the pool's predecessors have finished. A second
 * launch does nothing. A buffer freed after the pool's tasks were submitted stays alive for them (as
 * for any submitted task). */
NERVE_API nerve_status_t nerve_task_pool_launch(nerve_task_pool_t* pool);
/* nerve_task_pool_wait_all() launches the pool if needed and waits for all its tasks; then reports the
 * first failure among them (once): NERVE_ERROR_TASK_FAILED, or NERVE_ERROR_CANCELLED when its tasks were
 * only cancelled; the others are logged on stderr as they happen (16, then a count). A wait that could
 * never end is refused instead, its tasks left running: inside one of the pool's own kernels, or one its
 * accesses order before the pool, or behind a task this thread suspended in a wait of its own to run
 * the caller (once nothing is left to run) — NERVE_ERROR_INVALID_ARGUMENT; while the calling thread
 * holds a mapping one of the pool's tasks waits for — NERVE_ERROR_BUFFER_MISUSE. Blocks. */
NERVE_API nerve_status_t nerve_task_pool_wait_all(nerve_task_pool_t* pool);
/* nerve_task_pool_destroy() waits for a launched pool's tasks (a failure no wait reported is logged on
 * stderr, not returned: wait first to see it), discards the tasks of a pool never launched, and frees the
 * descriptors. NULL is accepted. Blocks — except where the wait could never end (this thread holds a mapping
 * the tasks wait for, or runs one of them): then the pool is detached instead, its tasks run when they can
 * and their descriptors stay valid until nerve_shutdown, and the call fails with NERVE_ERROR_BUFFER_MISUSE /
 * NERVE_ERROR_INVALID_ARGUMENT (nerve_last_status()). The handle is invalid afterwards either way. */
NERVE_API void nerve_task_pool_destroy(nerve_task_pool_t* pool);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NERVE_NERVE_H */
