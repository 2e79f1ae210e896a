// stats.hpp — collecting ContextStats and writing them as JSON.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "nerve/stats.hpp"

namespace nerve::detail {

struct ContextImpl;

// collect_stats(): the snapshot; without `with_records`, task_records stays empty (the stats file
// streams them instead).
ContextStats collect_stats(const ContextImpl& context, bool with_records = true);
nlohmann::json stats_to_json(const ContextStats& stats);
// task_record_json(): one element of tasks.records (docs/PERF_STATS.md).
nlohmann::json task_record_json(const TaskTimes& task);
// write_perf_stats(): stats_to_json(collect_stats(context)) as text, indented by 2, the task records
// streamed to the file one at a time: the extra memory is 8 bytes a record (their order by id) and
// one record's text, not a document of them all.
void write_perf_stats(const ContextImpl& context, const std::filesystem::path& path);

}  // namespace nerve::detail
