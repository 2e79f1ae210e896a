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
// claim_trace_path(): the file context `context_id` writes its trace to. The first context of the
// process that names `path` gets it; later ones naming the same file get `<stem>.<context_id><ext>`
// (trace.json -> trace.2.json), so no context overwrites another's trace.
std::filesystem::path claim_trace_path(const std::filesystem::path& path, std::uint64_t context_id);

}  // namespace nerve::detail
