// trace.hpp — the Chrome trace-event timeline (perf.trace / NERVE_TRACE; docs/TRACING.md).
#pragma once

#include <filesystem>

namespace nerve::detail {

struct ContextImpl;

// write_trace_file(): the recorded tasks, copies, edges and counters as trace events: a track per
// worker, device queue and transfer engine (node pair), flow arrows along dependency edges, and
// utilisation counters per device. Call when no task runs (shutdown) for a complete picture. The
// events are written as they are made: beyond the records, it holds their order by id (8 bytes a
// task), copies of the edges (16 bytes each), of the pool memberships (8 bytes each, and a list per
// pool) and of the transfers (32 bytes each), and one event's text.
void write_trace_file(const ContextImpl& context, const std::filesystem::path& path);

}  // namespace nerve::detail
