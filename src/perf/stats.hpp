// stats.hpp — collecting ContextStats and writing them as JSON.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "nerve/stats.hpp"

namespace nerve::detail {

struct ContextImpl;

ContextStats collect_stats(const ContextImpl& context);
nlohmann::json stats_to_json(const ContextStats& stats);
void write_perf_stats(const ContextImpl& context, const std::filesystem::path& path);

}  // namespace nerve::detail
