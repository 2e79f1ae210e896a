// Size classes: every request maps to the smallest class that holds it, with bounded waste.
#include "memory/pool/size_classes.hpp"

#include <gtest/gtest.h>

#include "memory/pool/slab.hpp"

namespace nerve::memory {
namespace {

TEST(SizeClasses, EveryRequestGetsTheSmallestClassThatHoldsIt) {
  for (std::size_t bytes = 0; bytes <= max_small_size; ++bytes) {
    const unsigned k = size_class_of(bytes);
    ASSERT_LT(k, size_class_count) << bytes;
    ASSERT_GE(class_size(k), std::max<std::size_t>(bytes, 1)) << bytes;
    if (k > 0) ASSERT_LT(class_size(k - 1), std::max<std::size_t>(bytes, 1)) << bytes;
  }
}

TEST(SizeClasses, WasteIsAtMostAQuarterOrFifteenBytes) {
  double worst_above_64 = 0;
  for (std::size_t bytes = 1; bytes <= max_small_size; ++bytes) {
    const std::size_t chunk = class_size(size_class_of(bytes));
    const std::size_t waste = chunk - bytes;
    if (bytes <= 64) {
      ASSERT_LE(waste, 15u) << bytes;  // 16-byte granularity below 128 bytes
    } else {
      ASSERT_LE(waste * 4, chunk) << bytes << " wastes " << waste << " of " << chunk;
      worst_above_64 = std::max(worst_above_64, static_cast<double>(waste) / static_cast<double>(chunk));
    }
  }
  EXPECT_LT(worst_above_64, 0.20);
}

TEST(SizeClasses, ChunksAreSixteenByteAlignedAndClassesIncrease) {
  for (unsigned k = 0; k < size_class_count; ++k) {
    EXPECT_EQ(class_size(k) % chunk_alignment, 0u) << k;
    if (k > 0) EXPECT_GT(class_size(k), class_size(k - 1));
    EXPECT_EQ(size_class_of(class_size(k)), k);
  }
  EXPECT_EQ(class_size(0), 16u);
  EXPECT_EQ(class_size(size_class_count - 1), max_small_size);
}

TEST(SizeClasses, SlabsHoldAtLeastThirtyChunksAndArePowersOfTwo) {
  for (unsigned k = 0; k < size_class_count; ++k) {
    const std::size_t slab = slab_bytes(k);
    EXPECT_TRUE(std::has_single_bit(slab)) << k;
    EXPECT_GE(slab, min_slab_bytes);
    EXPECT_LE(slab, max_slab_bytes);
    const std::size_t chunks = (slab - SlabHeader::header_bytes) / class_size(k);
    EXPECT_GE(chunks, 31u) << "class " << class_size(k);
    // The header costs at most ~3% of the slab's chunks.
    EXPECT_LE(SlabHeader::header_bytes * 32, slab);
  }
}

}  // namespace
}  // namespace nerve::memory
