#include "memory/pool/huge_pages.hpp"

#include <fstream>
#include <string>

#include <sys/mman.h>

namespace nerve::memory {
namespace {

std::size_t read_huge_page_size() noexcept {
  try {
    std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    // "always [madvise] never": the bracketed word is the mode in force.
    if (!std::getline(mode, modes) || modes.find("[never]") != std::string::npos) return 0;
    std::ifstream size("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    std::size_t bytes = 0;
    if (!(size >> bytes) || bytes == 0 || (bytes & (bytes - 1)) != 0) return 0;
    // Some sandboxes show the files but refuse the advice: ask once, on a mapping never touched.
    void* probe = mmap(nullptr, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED) return 0;
    const bool accepted = madvise(probe, 2 * bytes, MADV_HUGEPAGE) == 0;
    munmap(probe, 2 * bytes);
    return accepted ? bytes : 0;
  } catch (...) {
    return 0;
  }
}

}  // namespace

std::size_t transparent_huge_page_size() noexcept {
  static const std::size_t size = read_huge_page_size();
  return size;
}

std::size_t huge_page_min_block() noexcept { return 2 * transparent_huge_page_size(); }

bool advise_huge_pages(void* block, std::size_t bytes) noexcept {
  return madvise(block, bytes, MADV_HUGEPAGE) == 0;
}

}  // namespace nerve::memory
