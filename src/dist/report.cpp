// report.cpp — per-rank statistics as JSON, and the merged timeline of every rank.
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nerve/error.hpp"

#include "dist/runtime_impl.hpp"
#include "util/exception_text.hpp"
#include "util/json_text.hpp"
#include "util/text_file.hpp"

namespace nerve::distributed::detail {
namespace {

// write_trace(): the merged timeline of every rank's events (`all`, one trace_json() per rank).
void write_trace(const std::filesystem::path& path, const std::vector<std::string>& all) {
  std::string text = R"({"displayTimeUnit":"ms","traceEvents":[)";
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i != 0) text += ',';
    text += all[i];
  }
  text += "]}\n";
  nerve::detail::write_text_file(path, text, "the trace");
}

}  // namespace

std::string trace_json(RuntimeImpl& runtime) {
  std::vector<TraceEvent> events;
  std::uint64_t dropped = 0;
  {
    std::lock_guard lock(runtime.trace_mutex);
    events = runtime.trace;
    dropped = runtime.trace_dropped;
  }
  std::string out = fmt::format(
      R"({{"name":"process_name","ph":"M","pid":{0},"args":{{"name":"rank {0}"}}}})", runtime.rank);
  if (dropped != 0) {  // Perfetto shows a process's labels beside its name
    out += fmt::format(
        R"x(,{{"name":"process_labels","ph":"M","pid":{},"args":{{"labels":"{} tasks not in the trace )x"
        R"x((perf.max_task_records: {})","tasks_dropped":{}}}}})x",
        runtime.rank, dropped, runtime.trace_limit, dropped);
  }
  for (const TraceEvent& event : events) {
    out += fmt::format(
        R"(,{{"name":{},"ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}}})",
        nerve::detail::json_text(nlohmann::json(event.name != nullptr ? *event.name : std::string("task"))),
        runtime.rank, event.thread, static_cast<double>(event.start_ns) / 1e3,
        static_cast<double>(event.end_ns - event.start_ns) / 1e3);
  }
  return out;
}

void runtime_dump_trace(RuntimeImpl* runtime, const std::filesystem::path& path) {
  const std::string mine = trace_json(*runtime);
  if (!runtime->transport) {
    write_trace(path, {mine});
    return;
  }
  const std::vector<std::string> all = runtime->transport->gather(mine, 0, "dump_trace(): the merged trace");
  // Collective to the end: rank 0 tells every rank whether it wrote the file, so that a file it
  // cannot write throws on every rank, as a collective call's error should (the others returned
  // normally, and a program that checked on another rank never knew the trace was missing).
  std::exception_ptr error;
  std::string failure;  // rank 0's error message, empty when the trace was written
  if (runtime->rank == 0) {
    try {
      write_trace(path, all);
    } catch (...) {
      error = std::current_exception();
      failure = nerve::detail::what_of(error);
      if (failure.empty()) failure = fmt::format("writing the trace to '{}' failed on rank 0", path.string());
    }
  }
  failure = runtime->transport->broadcast(failure, 0, "dump_trace(): rank 0's error message");
  if (error) std::rethrow_exception(error);
  if (!failure.empty()) throw Error(ErrorCode::invalid_argument, failure);
}

void runtime_dump_perf_stats(RuntimeImpl* runtime, const std::filesystem::path& path) {
  const DistributedStats stats = runtime_stats(runtime);
  std::uint64_t trace_dropped = 0;
  {
    std::lock_guard lock(runtime->trace_mutex);
    trace_dropped = runtime->trace_dropped;
  }
  const ContextStats context = runtime->context.stats();
  nlohmann::json json;
  json["rank"] = stats.rank;
  json["size"] = stats.size;
  json["distributed"] = {
      {"tasks_run", stats.tasks_run},
      {"tasks_skipped", stats.tasks_skipped},
      {"payloads_sent", stats.payloads_sent},
      {"payloads_received", stats.payloads_received},
      {"bytes_sent", stats.bytes_sent},
      {"bytes_received", stats.bytes_received},
      {"wire_bytes_sent", stats.wire_bytes_sent},
      {"messages_sent", stats.messages_sent},
      {"batches_sent", stats.batches_sent},
      {"batch_flushes_by_interval", stats.batch_flushes_by_interval},
      {"compressed_payloads", stats.compressed_payloads},
      {"buffers_live", runtime_buffers_live(runtime)},
      {"trace_tasks_dropped", trace_dropped},
  };
  json["context"] = {{"tasks_submitted", context.tasks_submitted},
                     {"tasks_completed", context.tasks_completed},
                     {"workers", context.workers.size()}};
  std::string name = path.string();
  for (std::size_t at = name.find("{rank}"); at != std::string::npos; at = name.find("{rank}")) {
    name.replace(at, 6, std::to_string(stats.rank));
  }
  nerve::detail::write_text_file(name, nerve::detail::json_text(json, 2) + "\n", "perf stats");
}

}  // namespace nerve::distributed::detail
