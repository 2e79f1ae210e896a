// trace.hpp — the Chrome trace-event timeline (perf.trace / NERVE_TRACE; docs/TRACING.md).
#pragma once

#include <cstdint>
#include <filesystem>

#include <nlohmann/json.hpp>

namespace nerve::detail {

struct ContextImpl;

// trace_to_json(): the recorded tasks, copies, edges and counters as trace events: a track per
// worker, device queue and transfer engine (node pair), flow arrows along dependency edges, and
// utilisation counters per device. Call when no task runs (shutdown) for a complete picture.
nlohmann::json trace_to_json(const ContextImpl& context);
void write_trace_file(const ContextImpl& context, const std::filesystem::path& path);

}  // namespace nerve::detail
