// huge_pages.hpp — transparent huge pages for a host node's big blocks (memory.huge_pages).
//
// A streaming kernel over a 256 MiB buffer touches 65,536 pages of 4 KiB: as many TLB refills and,
// on first touch, as many page faults. The kernel's transparent huge pages (2 MiB on x86-64) cut
// both 512-fold, but on most distributions (Debian's default is `madvise`) only for memory that asks
// for them with madvise(MADV_HUGEPAGE). Measured here: c = a + b over 3 × 256 MiB on 2 threads,
// 28–35 GB/s with 4 KiB pages, 40–41 GB/s with huge pages.
//
// Only blocks of at least huge_page_min_block() get the advice: pool slabs (2 MiB at most) and small
// buffers keep 4 KiB pages, so the parts of them never touched take no memory. Blocks are not
// aligned to a huge page: the kernel backs every huge-page-aligned range inside an advised block (a
// block of two huge pages holds at least one; a 256 MiB one is 98 % covered), and the large-block
// pool's colouring (large_allocations.cpp), which staggers buffers' start addresses so that the
// streams of c[i] = a[i] + b[i] do not meet in the same cache sets, stays intact.
#pragma once

#include <cstddef>

namespace nerve::memory {

// transparent_huge_page_size() is the size of a transparent huge page (hpage_pmd_size), or 0 when
// the kernel has none, they are disabled (`never`) or madvise(MADV_HUGEPAGE) is refused. Read once.
std::size_t transparent_huge_page_size() noexcept;

// huge_page_min_block() is the smallest block given huge pages: two huge pages (4 MiB on x86-64), or
// 0 when there are none.
std::size_t huge_page_min_block() noexcept;

// advise_huge_pages() asks for huge pages over [block, block + bytes) (page aligned); false when the
// kernel refused (the block keeps 4 KiB pages and works as before).
bool advise_huge_pages(void* block, std::size_t bytes) noexcept;

}  // namespace nerve::memory
