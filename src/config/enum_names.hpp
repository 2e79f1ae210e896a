// enum_names.hpp — the configuration words for nerve's enum types, in one place.
//
// The key registry builds its choice lists from these tables and maps parsed words back to enum
// values through them, so a word and its enumerator can never drift apart. Other modules (nerve-info,
// logging) use to_string() to print the same words users write in their configuration.
#pragma once

#include <array>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "nerve/config.hpp"

namespace nerve::config {

template <class Enum>
struct EnumName {
  std::string_view name;
  Enum value;
};

inline constexpr std::array<EnumName<SchedulerPolicy>, 3> scheduler_policy_names{{
    {"eager", SchedulerPolicy::eager},
    {"locality_aware_stealing", SchedulerPolicy::locality_aware_stealing},
    {"heft", SchedulerPolicy::heft},
}};

inline constexpr std::array<EnumName<ThreadAffinity>, 3> thread_affinity_names{{
    {"none", ThreadAffinity::none},
    {"compact", ThreadAffinity::compact},
    {"scatter", ThreadAffinity::scatter},
}};

inline constexpr std::array<EnumName<NumaAffinity>, 3> numa_affinity_names{{
    {"strict", NumaAffinity::strict},
    {"preferred", NumaAffinity::preferred},
    {"none", NumaAffinity::none},
}};

inline constexpr std::array<EnumName<QueueType>, 2> queue_type_names{{
    {"lock_free_mpsc", QueueType::lock_free_mpsc},
    {"mutex", QueueType::mutex},
}};

inline constexpr std::array<EnumName<CommunicationBackend>, 2> communication_backend_names{{
    {"none", CommunicationBackend::none},
    {"mpi", CommunicationBackend::mpi},
}};

// names_of() lists a table's words in order, for choice_type().
template <class Enum, std::size_t N>
std::vector<std::string_view> names_of(const std::array<EnumName<Enum>, N>& table) {
  std::vector<std::string_view> names;
  names.reserve(N);
  for (const auto& entry : table) names.push_back(entry.name);
  return names;
}

// from_name() maps a word that parse_value() already accepted to its enumerator; any other word is
// a bug in the registry (std::logic_error).
template <class Enum, std::size_t N>
Enum from_name(const std::array<EnumName<Enum>, N>& table, std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.value;
  }
  throw std::logic_error("nerve::config: no enumerator named " + std::string(name));
}

template <class Enum, std::size_t N>
std::string_view name_of(const std::array<EnumName<Enum>, N>& table, Enum value) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

inline std::string_view to_string(SchedulerPolicy value) { return name_of(scheduler_policy_names, value); }
inline std::string_view to_string(ThreadAffinity value) { return name_of(thread_affinity_names, value); }
inline std::string_view to_string(NumaAffinity value) { return name_of(numa_affinity_names, value); }
inline std::string_view to_string(QueueType value) { return name_of(queue_type_names, value); }

}  // namespace nerve::config
