#include "runtimes.hpp"

#include <string>

#if NERVE_HAVE_TBB
#include <tbb/global_control.h>
#endif
#if NERVE_HAVE_OPENMP
#include <omp.h>
#endif

namespace nerve::bench {

bool have_tbb() noexcept { return NERVE_HAVE_TBB != 0; }
bool have_openmp() noexcept { return NERVE_HAVE_OPENMP != 0; }

nerve::Settings nerve_settings(const WorkloadOptions& options) {
  nerve::Settings settings = options.settings;
  settings.set("parallel.thread_pool_size", std::to_string(options.threads));
  settings.use_environment(true);
  return settings;
}

const char* policy_name(nerve::SchedulerPolicy policy) {
  switch (policy) {
    case nerve::SchedulerPolicy::eager: return "eager";
    case nerve::SchedulerPolicy::locality_aware_stealing: return "locality_aware_stealing";
    case nerve::SchedulerPolicy::heft: return "heft";
  }
  return "?";
}

#if NERVE_HAVE_TBB
struct TbbLimit::Impl {
  explicit Impl(unsigned threads) : control(tbb::global_control::max_allowed_parallelism, threads) {}
  tbb::global_control control;
};
TbbLimit::TbbLimit(unsigned threads) : impl_(std::make_unique<Impl>(threads)) {}
#else
struct TbbLimit::Impl {};
TbbLimit::TbbLimit(unsigned /*threads*/) {}
#endif
TbbLimit::~TbbLimit() = default;

void set_openmp_threads([[maybe_unused]] unsigned threads) {
#if NERVE_HAVE_OPENMP
  omp_set_num_threads(static_cast<int>(threads));
#endif
}

}  // namespace nerve::bench
