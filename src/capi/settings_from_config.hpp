// settings_from_config.hpp — nerve_context_config_t → nerve::Settings.
//
// The convenience fields become API settings of their keys (docs/C_API.md has the table), then the
// "key=value" strings are added in order, so a string wins over a field that names the same key.
// Nothing is validated here beyond the shape of the strings: the configuration layer validates keys
// and values when the context is created, and rejects keys whose feature this build lacks.
#pragma once

#include "nerve/config.hpp"
#include "nerve/nerve.h"

namespace nerve::capi {

// settings_from_config() throws Error(invalid_config) for a setting that is not "key=value" and
// Error(invalid_argument) for a NULL array or entry.
Settings settings_from_config(const nerve_context_config_t& config);

}  // namespace nerve::capi
